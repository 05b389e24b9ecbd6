//! The demo's refunds (issue 37): once the charges settled, a few RefundPayment commands of
//! charges the demo made, each showing one thing the refund promise covers, then checked
//! against the gateway's refund ledger and printed in the summary.
//!
//! Two rounds, each waited out: first a whole refund, a partial one, one published three
//! times (the same message again past JetStream's duplicate window, and the same
//! `refund_id` under a new message id) and one of a declined charge; then the rest after
//! the partial one, and one asking more than the thrice-published one left of its charge.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::bail;
use mock_gateway::{ChargeStatus, MockGateway, Refund as GatewayRefund};
use uuid::Uuid;

use onecharge::broker::publish::{publish_refund, RefundArgs};
use onecharge::broker::Broker;
use onecharge::domain::{Currency, Money, PaymentAttemptId, RefundId, RefundStatus};
use onecharge::store::reads::attempts::AttemptRecord;
use onecharge::store::refunds::reads::{self as refund_reads, StoredRefund};
use onecharge::store::Store;

/// What a refund of the demo shows, in the summary's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RefundCase {
    /// No amount: whatever is left of the charge, which is all of it.
    Whole,
    /// A third of the charge.
    Partial,
    /// No amount, after the partial one of the same charge: what it left.
    Rest,
    /// Half the charge, published three times: one refund.
    PublishedThrice,
    /// More than [`RefundCase::PublishedThrice`] left of its charge: refused, never sent.
    PastWhatIsLeft,
    /// Of a charge the gateway declined: refused, never sent.
    OfDecline,
}

impl RefundCase {
    /// Its name in the summary.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Whole => "whole",
            Self::Partial => "partial",
            Self::Rest => "the rest of it",
            Self::PublishedThrice => "published 3 times",
            Self::PastWhatIsLeft => "past what is left",
            Self::OfDecline => "of a declined charge",
        }
    }

    /// Whether onecharge must refuse it (never send it).
    pub fn refused(self) -> bool {
        matches!(self, Self::PastWhatIsLeft | Self::OfDecline)
    }
}

/// One refund the demo asked for.
#[derive(Debug, Clone)]
pub struct PublishedRefund {
    pub refund_id: RefundId,
    pub attempt: PaymentAttemptId,
    /// The charge's, which its refunds are in.
    pub currency: Currency,
    /// `None` asked for what is left.
    pub asked: Option<i64>,
    pub case: RefundCase,
    /// The command's, the same in every copy: a copy under the same `Nats-Msg-Id` with
    /// another body would be a conflict.
    requested_at: String,
    /// Messages that carried it (JetStream kept each).
    pub messages: usize,
}

/// The charges refunds can be asked of: succeeded plain-card charges (a fault trigger's
/// card would fault its refunds too), in a fixed order so that a seed's refunds are the
/// same, and a declined one.
fn candidates<'a>(
    attempts: &'a [AttemptRecord],
    methods: &HashMap<PaymentAttemptId, String>,
) -> (Vec<&'a AttemptRecord>, Option<&'a AttemptRecord>) {
    let mut succeeded: Vec<&AttemptRecord> = attempts
        .iter()
        .filter(|a| a.status.as_str() == "succeeded")
        .filter(|a| {
            methods.get(&a.payment_attempt_id).map(String::as_str)
                == Some(mock_gateway::payment_methods::CARD_VISA)
        })
        .collect();
    succeeded.sort_by_key(|a| a.payment_attempt_id.to_string());
    let declined = attempts
        .iter()
        .filter(|a| a.status.as_str() == "declined")
        .min_by_key(|a| a.payment_attempt_id.to_string());
    (succeeded, declined)
}

/// Publishes the demo's refunds in their two rounds, waiting out each; returns what it
/// asked for. Cases without a charge to refund (a run too short to have one) are left out.
pub async fn publish_and_settle(
    store: &Store,
    broker: &Broker,
    methods: &HashMap<PaymentAttemptId, String>,
    timeout: Duration,
) -> anyhow::Result<Vec<PublishedRefund>> {
    let attempts =
        onecharge::store::reads::attempts::list_attempts(store, &Default::default(), None).await?;
    let (succeeded, declined) = candidates(&attempts, methods);
    let mut refunds = Vec::new();
    let mut first_round = Vec::new();
    let charge = |n: usize| succeeded.get(n).copied();
    if let Some(a) = charge(0) {
        first_round.push((a, None, RefundCase::Whole));
    }
    if let Some(a) = charge(1) {
        first_round.push((
            a,
            Some((a.money.amount_minor() / 3).max(1)),
            RefundCase::Partial,
        ));
    }
    if let Some(a) = charge(2) {
        first_round.push((
            a,
            Some((a.money.amount_minor() / 2).max(1)),
            RefundCase::PublishedThrice,
        ));
    }
    if let Some(a) = declined {
        first_round.push((a, None, RefundCase::OfDecline));
    }
    for (attempt, asked, case) in first_round {
        refunds.push(publish(broker, attempt, asked, case).await?);
    }
    // Past the command stream's 100 ms duplicate window: JetStream keeps both copies, and
    // intake must see that they are one refund.
    tokio::time::sleep(Duration::from_millis(150)).await;
    if let Some(thrice) = refunds
        .iter_mut()
        .find(|r| r.case == RefundCase::PublishedThrice)
    {
        publish_again(broker, thrice).await?;
    }
    wait_until_final(store, &refunds, timeout).await?;

    let mut second_round = Vec::new();
    if let Some(a) = charge(1) {
        second_round.push((a, None, RefundCase::Rest));
    }
    if let Some(a) = charge(2) {
        let total = a.money.amount_minor();
        let left = total - (total / 2).max(1);
        second_round.push((a, Some(left + 1), RefundCase::PastWhatIsLeft));
    }
    let first = refunds.len();
    for (attempt, asked, case) in second_round {
        refunds.push(publish(broker, attempt, asked, case).await?);
    }
    wait_until_final(store, &refunds[first..], timeout).await?;
    Ok(refunds)
}

/// Publishes one new refund.
async fn publish(
    broker: &Broker,
    charge: &AttemptRecord,
    asked: Option<i64>,
    case: RefundCase,
) -> anyhow::Result<PublishedRefund> {
    let refund_id = RefundId::from(Uuid::new_v4());
    let refund = PublishedRefund {
        refund_id,
        attempt: charge.payment_attempt_id,
        currency: charge.money.currency(),
        asked,
        case,
        requested_at: time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .expect("now formats"),
        messages: 1,
    };
    let message_id = format!("demo-refund-{refund_id}");
    publish_refund(broker, refund_args(&refund, message_id)).await?;
    Ok(refund)
}

/// The same message again under its `Nats-Msg-Id` (a producer's retry), then the same
/// refund under a new one (a business duplicate).
async fn publish_again(broker: &Broker, refund: &mut PublishedRefund) -> anyhow::Result<()> {
    for message_id in [
        format!("demo-refund-{}", refund.refund_id),
        format!("demo-refund-{}-again", refund.refund_id),
    ] {
        let published = publish_refund(broker, refund_args(refund, message_id)).await?;
        if !published.duplicate {
            refund.messages += 1;
        }
    }
    Ok(())
}

/// `refund`'s command under `message_id`.
fn refund_args(refund: &PublishedRefund, message_id: String) -> RefundArgs {
    RefundArgs {
        refund_id: Some(refund.refund_id),
        attempt_id: refund.attempt,
        amount_minor: refund.asked,
        reason: format!("demo: {}", refund.case.describe()),
        requested_at: Some(refund.requested_at.clone()),
        metadata: Vec::new(),
        message_id: Some(message_id),
        correlation_id: Some("demo".into()),
        no_validate: false,
    }
}

/// Waits until every refund of `refunds` is final or in review; `Err` past `timeout`.
async fn wait_until_final(
    store: &Store,
    refunds: &[PublishedRefund],
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut open = Vec::new();
        for refund in refunds {
            let status = refund_reads::get_refund(store, refund.refund_id)
                .await?
                .map(|r| r.status);
            if !status.is_some_and(|s| s.is_final() || s == RefundStatus::NeedsReview) {
                open.push(format!(
                    "{} ({})",
                    refund.case.describe(),
                    status.map_or("not recorded", RefundStatus::as_str)
                ));
            }
        }
        if open.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "refunds not settled within {}: {}",
                humantime::format_duration(timeout),
                open.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What became of the demo's refunds, onecharge's and the gateway's, for the summary.
pub struct RefundFindings {
    /// Each refund asked for, with onecharge's record of it and what it should have been.
    pub refunds: Vec<(PublishedRefund, Option<StoredRefund>)>,
    /// The gateway's refunds, every one of them.
    pub at_gateway: Vec<GatewayRefund>,
    /// `refund_id`s the gateway holds more than one money-moving refund of.
    pub refunded_twice: usize,
    /// Charges whose money-moving refunds at the gateway pass the charge.
    pub past_the_charge: usize,
    pub problems: Vec<String>,
}

/// Reads what became of `refunds` and checks it against the gateway's ledgers: at most one
/// refund at the gateway per `refund_id`, none past its charge, each as onecharge recorded
/// it (id, amount, status), and each case's outcome.
pub async fn verify(
    store: &Store,
    gateway: &MockGateway,
    refunds: &[PublishedRefund],
) -> anyhow::Result<RefundFindings> {
    let at_gateway = gateway.refunds();
    let charges = gateway.ledger();
    let mut problems = Vec::new();

    let mut per_refund_id: HashMap<&str, usize> = HashMap::new();
    let mut per_charge: HashMap<&str, i64> = HashMap::new();
    for refund in at_gateway.iter().filter(|r| r.status.holds()) {
        if let Some(id) = refund.refund_id.as_deref() {
            *per_refund_id.entry(id).or_default() += 1;
        }
        *per_charge.entry(refund.charge_id.as_str()).or_default() += refund.amount_minor;
    }
    let refunded_twice = per_refund_id.values().filter(|n| **n > 1).count();
    let past_the_charge = charges
        .iter()
        .filter(|c| per_charge.get(c.id.as_str()).copied().unwrap_or(0) > c.amount_minor)
        .count();
    if refunded_twice > 0 {
        problems.push(format!(
            "{refunded_twice} refund_id(s) refunded more than once at the gateway"
        ));
    }
    if past_the_charge > 0 {
        problems.push(format!(
            "{past_the_charge} charge(s) refunded past their amount at the gateway"
        ));
    }
    let charged = |attempt: PaymentAttemptId| {
        charges
            .iter()
            .find(|c| {
                c.reference == attempt.to_string() && matches!(c.status, ChargeStatus::Succeeded)
            })
            .map(|c| c.amount_minor)
    };

    let mut found = Vec::new();
    for refund in refunds {
        let record = refund_reads::get_refund(store, refund.refund_id).await?;
        let ours = at_gateway
            .iter()
            .filter(|r| r.refund_id.as_deref() == Some(&refund.refund_id.to_string()))
            .collect::<Vec<_>>();
        let expected = expected_amount(refund, refunds, charged);
        problems.extend(refund_problems(refund, record.as_ref(), &ours, expected));
        found.push((refund.clone(), record));
    }
    // The refund published three times is one refund: every refund onecharge holds of the
    // demo's charges is one it asked for.
    let asked: HashSet<RefundId> = refunds.iter().map(|r| r.refund_id).collect();
    let attempts: HashSet<PaymentAttemptId> = refunds.iter().map(|r| r.attempt).collect();
    for attempt in attempts {
        for record in refund_reads::refunds_of_attempt(store, attempt).await? {
            if !asked.contains(&record.refund_id) {
                problems.push(format!(
                    "refund {} of {attempt} was never asked for",
                    record.refund_id
                ));
            }
        }
    }
    Ok(RefundFindings {
        refunds: found,
        at_gateway,
        refunded_twice,
        past_the_charge,
        problems,
    })
}

/// What a refund that succeeds must refund: what it asked, or what was left of its charge
/// (all of it for the whole one; what the partial one left for the rest).
fn expected_amount(
    refund: &PublishedRefund,
    refunds: &[PublishedRefund],
    charged: impl Fn(PaymentAttemptId) -> Option<i64>,
) -> Option<i64> {
    match refund.case {
        RefundCase::Whole => charged(refund.attempt),
        RefundCase::Rest => {
            let partial = refunds
                .iter()
                .find(|r| r.attempt == refund.attempt && r.case == RefundCase::Partial)?;
            Some(charged(refund.attempt)? - partial.asked?)
        }
        _ => refund.asked,
    }
}

/// Where a refund's outcome differs from its case's, or onecharge's record from the
/// gateway's refunds carrying its `refund_id`.
fn refund_problems(
    refund: &PublishedRefund,
    record: Option<&StoredRefund>,
    at_gateway: &[&GatewayRefund],
    expected: Option<i64>,
) -> Vec<String> {
    let name = format!("refund {} ({})", refund.refund_id, refund.case.describe());
    let Some(record) = record else {
        return vec![format!("{name} was never recorded")];
    };
    let mut problems = Vec::new();
    let moved: Vec<&&GatewayRefund> = at_gateway.iter().filter(|r| r.status.holds()).collect();
    if refund.case.refused() {
        if record.status != RefundStatus::Refused || record.failure_reason.is_none() {
            problems.push(format!(
                "{name} is {}, not refused with a reason",
                record.status.as_str()
            ));
        }
        if !at_gateway.is_empty() {
            problems.push(format!(
                "{name} was refused, yet the gateway holds {} refund(s) of it",
                at_gateway.len()
            ));
        }
        return problems;
    }
    if record.status != RefundStatus::Succeeded {
        problems.push(format!("{name} is {}", record.status.as_str()));
    }
    if record.amount_minor != expected {
        problems.push(format!(
            "{name} refunded {:?}, expected {expected:?}",
            record.amount_minor
        ));
    }
    match moved.as_slice() {
        [one]
            if record.gateway_refund_id.as_deref() == Some(one.id.as_str())
                && record.amount_minor == Some(one.amount_minor) => {}
        [one] => problems.push(format!(
            "{name}: onecharge holds {:?} of {:?}, the gateway {} of {}",
            record.gateway_refund_id, record.amount_minor, one.id, one.amount_minor
        )),
        more => problems.push(format!(
            "{name}: the gateway holds {} refunds of it that moved money",
            more.len()
        )),
    }
    problems
}

impl RefundFindings {
    /// The summary's refund lines.
    pub fn lines(&self) -> Vec<String> {
        let messages: usize = self.refunds.iter().map(|(r, _)| r.messages).sum();
        let mut lines = vec![format!(
            "  refunds asked            {} in {messages} messages (onecharge holds {})",
            self.refunds.len(),
            self.refunds.iter().filter(|(_, r)| r.is_some()).count()
        )];
        let mut in_order: Vec<_> = self.refunds.iter().collect();
        in_order.sort_by_key(|(refund, _)| refund.case);
        for (refund, record) in in_order {
            lines.push(format!(
                "    {:<22} {}",
                refund.case.describe(),
                outcome(refund, record.as_ref())
            ));
        }
        let succeeded = self
            .at_gateway
            .iter()
            .filter(|r| r.status == mock_gateway::RefundStatus::Succeeded)
            .count();
        lines.push(format!(
            "  refunds at the gateway   {succeeded} succeeded of {} recorded; {} refund_id(s) refunded twice, {} charge(s) refunded past their amount",
            self.at_gateway.len(),
            self.refunded_twice,
            self.past_the_charge
        ));
        lines
    }

    /// Refunds onecharge refused: each was dead-lettered.
    pub fn refused(&self) -> usize {
        self.refunds
            .iter()
            .filter(|(_, r)| {
                r.as_ref()
                    .is_some_and(|r| r.status == RefundStatus::Refused)
            })
            .count()
    }
}

/// What was asked and what happened, in words: `asked €4.00 of €12.00: succeeded €4.00,
/// re_…`.
fn outcome(refund: &PublishedRefund, record: Option<&StoredRefund>) -> String {
    let Some(record) = record else {
        return "never recorded".into();
    };
    let money = |minor: i64| Money::new(minor, refund.currency).to_string();
    let asked = refund.asked.map_or("what is left".to_owned(), money);
    let copies = if refund.messages > 1 {
        format!(" ({} messages, one refund)", refund.messages)
    } else {
        String::new()
    };
    match record.status {
        RefundStatus::Succeeded => format!(
            "asked {asked}{copies}: succeeded, {} refunded as {}",
            record.money().map_or("?".into(), |m| m.to_string()),
            record.gateway_refund_id.as_deref().unwrap_or("?")
        ),
        RefundStatus::Refused | RefundStatus::Failed => format!(
            "asked {asked}{copies}: {}, {}",
            record.status.as_str(),
            record.failure_reason.as_deref().unwrap_or("no reason")
        ),
        other => format!("asked {asked}{copies}: {}", other.as_str()),
    }
}
