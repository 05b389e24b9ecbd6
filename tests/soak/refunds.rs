//! The soak's refunds (issue 37): RefundPayment commands published beside the charges, and
//! the refund promise checked once everything has settled.
//!
//! The mix draws, per charge, from dice of its own (so a seed's charges stay what they
//! were): a refund of the whole charge or of a part; a part and then the rest; a refund
//! published three times (the same message again, past JetStream's duplicate window, and
//! the same `refund_id` under a new message id); two refunds of one charge whose sum passes
//! it, published back to back so that two instances admit them at once; a refund published
//! before its charge; and refunds of charges that will be declined. The gateway's refund
//! faults are on (`runner::soak_faults`) besides the kills and the broker restart.
//!
//! The checks, against the gateway's refund ledger, the database and the streams:
//! - at most one refund at the gateway per `refund_id`;
//! - no charge refunded past its amount, at the gateway (succeeded + pending) nor in
//!   onecharge's reservations (`refund_totals`), which hold exactly what its refunds hold;
//! - every refund final, or in review with a reason; every refusal's reason true;
//! - onecharge and the gateway agree on every refund that moved money, by id and amount;
//! - one published event per final refund, on the stream under one id; one dead letter per
//!   refused refund and none for any other;
//! - every refund message recorded, one refund per `refund_id`.

use std::collections::{BTreeMap, HashMap, HashSet};

use mock_gateway::{ChargeStatus, Refund as GatewayRefund, RefundStatus as GatewayStatus};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::json;
use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::mix::{Kind, Message, Plan, PlannedAttempt};
use crate::support::records::{Event, RefundRow, RefundTotal};
use crate::support::{refund_command, Records as _};
use crate::verify::{Observed, Problem, StreamMessage};

/// Why the soak asks for a refund: what it exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefundCase {
    /// What is left of the charge (no amount), the round after the charge.
    Whole,
    /// Part of the charge, the round after it.
    Partial,
    /// No amount, a round after a partial refund of the same charge.
    Rest,
    /// Published again under its message id and under a new one, a round later.
    Duplicated,
    /// One of two refunds of a charge whose sum passes it, published back to back.
    Racing,
    /// Published in the charge's round, before the charge.
    BeforeCharge,
    /// Of a charge that will be declined (or expired: a stale command).
    OfDecline,
}

impl RefundCase {
    fn describe(self) -> &'static str {
        match self {
            Self::Whole => "whole",
            Self::Partial => "partial",
            Self::Rest => "the rest after a partial one",
            Self::Duplicated => "duplicated",
            Self::Racing => "racing",
            Self::BeforeCharge => "before their charge",
            Self::OfDecline => "of declined charges",
        }
    }
}

/// One refund the soak asks for.
#[derive(Debug, Clone)]
pub struct PlannedRefund {
    pub payment_attempt_id: Uuid,
    /// `None` asks for what is left.
    pub amount_minor: Option<i64>,
    pub case: RefundCase,
    /// The other refund of a racing pair.
    pub rival: Option<Uuid>,
}

/// Where a charge's refund messages go in the publishing rounds.
#[derive(Debug, Default)]
pub struct Placed {
    /// The charge's own round, before the charge.
    pub before_charge: Vec<Message>,
    /// The round after the charge's.
    pub next: Vec<Message>,
    /// The round after that.
    pub after_next: Vec<Message>,
}

/// The refund dice, apart from the charges' so that adding refunds changed no charge.
pub fn dice(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed ^ 0x7265_6675_6e64_7321)
}

/// Whether the charge is planned to be declined (in either dialect).
fn declines(payment_method: &str) -> bool {
    use mock_gateway::payment_methods as pm;
    use mock_gateway::stripe::payment_methods as stripe;
    [
        pm::CARD_DECLINED,
        pm::INSUFFICIENT_FUNDS,
        stripe::CARD_VISA_CHARGE_DECLINED,
        stripe::CARD_CHARGE_DECLINED_INSUFFICIENT_FUNDS,
        stripe::CARD_AUTHENTICATION_REQUIRED,
    ]
    .contains(&payment_method)
}

/// Plans the refunds of charge `i` (`attempt`), if the dice want any: about one charge in
/// seven gets one or two, and three declined charges in ten one. Charges the gateway
/// answers with a `400` get none: they end in review, and their refunds would wait out
/// `refunds.max_wait`.
pub fn plan_for(
    rng: &mut StdRng,
    i: usize,
    attempt: Uuid,
    charge: &PlannedAttempt,
    plan: &mut Plan,
    placed: &mut Placed,
) {
    if charge.payment_method == mock_gateway::payment_methods::FAULT_BAD_REQUEST {
        return;
    }
    let charged = charge.amount_minor;
    let roll = rng.gen_range(0..100);
    let part = rng.gen_range(1..charged);
    // Each alone fits the charge; the two together pass it.
    let racing = rng.gen_range(charged / 2 + 1..=charged);
    let rival = rng.gen_range(charged - racing + 1..=charged);
    let mut refund = |plan: &mut Plan, n: usize, amount, case, rival| {
        let refund_id = Uuid::from_u128(rng.gen());
        let message = refund_message(plan, i, n, refund_id, attempt, amount, case, rival);
        (refund_id, message)
    };
    if declines(charge.payment_method) || charge.stale {
        if roll < 30 {
            let amount = (roll % 2 == 0).then_some(part);
            let (_, message) = refund(plan, 0, amount, RefundCase::OfDecline, None);
            if roll < 15 {
                placed.before_charge.push(message);
            } else {
                placed.next.push(message);
            }
        }
        return;
    }
    match roll {
        0..=3 => placed
            .next
            .push(refund(plan, 0, None, RefundCase::Whole, None).1),
        4..=6 => placed
            .next
            .push(refund(plan, 0, Some(part), RefundCase::Partial, None).1),
        7..=8 => {
            placed
                .next
                .push(refund(plan, 0, Some(part), RefundCase::Partial, None).1);
            placed
                .after_next
                .push(refund(plan, 1, None, RefundCase::Rest, None).1);
        }
        9..=10 => {
            let amount = (roll == 9).then_some(part);
            let (_, message) = refund(plan, 0, amount, RefundCase::Duplicated, None);
            let again = format!("{}-again", message.message_id.as_deref().expect("an id"));
            plan.refund_message_ids.insert(again.clone());
            placed.after_next.push(Message {
                kind: Kind::RefundRetry,
                ..message.clone()
            });
            placed.after_next.push(Message {
                message_id: Some(again),
                kind: Kind::RefundDuplicate,
                ..message.clone()
            });
            placed.next.push(message);
        }
        11..=12 => {
            let (first_id, first) = refund(plan, 0, Some(racing), RefundCase::Racing, None);
            let (second_id, second) =
                refund(plan, 1, Some(rival), RefundCase::Racing, Some(first_id));
            plan.refunds.get_mut(&first_id).expect("planned").rival = Some(second_id);
            placed.next.extend([first, second]);
        }
        13..=14 => {
            let amount = (roll == 13).then_some(part);
            placed
                .before_charge
                .push(refund(plan, 0, amount, RefundCase::BeforeCharge, None).1);
        }
        _ => {}
    }
}

/// Records refund `n` of charge `i` in the plan and makes its message.
#[allow(clippy::too_many_arguments)]
fn refund_message(
    plan: &mut Plan,
    i: usize,
    n: usize,
    refund_id: Uuid,
    attempt: Uuid,
    amount_minor: Option<i64>,
    case: RefundCase,
    rival: Option<Uuid>,
) -> Message {
    let message_id = format!("soak-{}-refund-{i}-{n}", plan.seed);
    let body = refund_command(
        refund_id,
        attempt,
        amount_minor,
        json!({
            "reason": format!("soak: {}", case.describe()),
            "metadata": {"soak_case": format!("{case:?}")},
        }),
    );
    plan.refunds.insert(
        refund_id,
        PlannedRefund {
            payment_attempt_id: attempt,
            amount_minor,
            case,
            rival,
        },
    );
    plan.refund_message_ids.insert(message_id.clone());
    Message {
        message_id: Some(message_id),
        body: serde_json::to_vec(&body).expect("json"),
        kind: Kind::Refund,
    }
}

/// When an attempt a refund waited for was recorded and became final.
#[derive(Debug, Default, Clone, Copy)]
pub struct AttemptTimes {
    pub recorded: Option<OffsetDateTime>,
    pub final_at: Option<OffsetDateTime>,
}

/// What the checks read of refunds once everything settled.
pub struct RefundsSeen {
    pub refunds: Vec<RefundRow>,
    pub totals: Vec<RefundTotal>,
    /// The outbox's refund rows: events and dead letters.
    pub outbox: Vec<Event>,
    /// The gateway's refund ledger.
    pub gateway: Vec<GatewayRefund>,
    /// For the refunds refused for waiting too long: their attempts' times.
    pub waited_on: HashMap<Uuid, AttemptTimes>,
}

impl RefundsSeen {
    pub async fn read(pool: &PgPool, gateway: Vec<GatewayRefund>) -> RefundsSeen {
        let refunds = pool.all_refunds().await;
        let mut waited_on = HashMap::new();
        for refund in refunds
            .iter()
            .filter(|r| matches!(refusal(r), Some(Refusal::NotFinalInTime)))
        {
            let history = pool.history(refund.payment_attempt_id).await;
            let final_at = history
                .iter()
                .find(|t| ["succeeded", "declined", "expired"].contains(&t.to_status.as_str()))
                .map(|t| t.at);
            let times = AttemptTimes {
                recorded: history.first().map(|t| t.at),
                final_at,
            };
            waited_on.insert(refund.payment_attempt_id, times);
        }
        RefundsSeen {
            refunds,
            totals: pool.refund_totals().await,
            outbox: pool.all_refund_outbox().await,
            gateway,
            waited_on,
        }
    }
}

/// Why onecharge refused a refund, read from its stated reason (`store::refunds`'s words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Refusal {
    /// "… ended declined/expired: nothing was charged …"
    ChargeNotMade,
    /// "refunding … would pass what is left …" or "nothing is left to refund …"
    PastWhatIsLeft,
    /// "… was never recorded within …" or "… is still … after …"
    NotFinalInTime,
}

impl Refusal {
    fn describe(self) -> &'static str {
        match self {
            Self::ChargeNotMade => "its charge ended declined or expired",
            Self::PastWhatIsLeft => "it would pass what is left of the charge",
            Self::NotFinalInTime => "its charge was not final within refunds.max_wait",
        }
    }
}

fn refusal(refund: &RefundRow) -> Option<Refusal> {
    if refund.status != "refused" {
        return None;
    }
    let reason = refund.failure_reason.as_deref().unwrap_or_default();
    if reason.contains(" ended declined") || reason.contains(" ended expired") {
        Some(Refusal::ChargeNotMade)
    } else if reason.contains("would pass what is left") || reason.contains("nothing is left") {
        Some(Refusal::PastWhatIsLeft)
    } else if reason.contains("was never recorded within") || reason.contains(" is still ") {
        Some(Refusal::NotFinalInTime)
    } else {
        None
    }
}

/// The figures the summary prints.
#[derive(Debug, Default)]
pub struct RefundFigures {
    pub by_status: BTreeMap<String, usize>,
    pub refusals: BTreeMap<&'static str, usize>,
    pub review_reasons: BTreeMap<String, usize>,
    pub at_gateway: BTreeMap<&'static str, usize>,
    pub sent_twice: usize,
    pub over_refunded_at_gateway: usize,
    pub over_reserved: usize,
    pub reservations_off: usize,
    pub disagreements: usize,
    pub final_refunds: usize,
    pub events: usize,
    pub refused_dead_letters: usize,
    pub racing_pairs: usize,
    pub racing_pairs_one_refused: usize,
}

fn problem(problems: &mut Vec<Problem>, attempt: Uuid, text: String) {
    problems.push(Problem {
        attempt: Some(attempt),
        text,
    });
}

/// Checks the refund promise. Returns the violations found and the figures to print.
pub fn check(
    plan: &Plan,
    observed: &Observed,
    seen: &RefundsSeen,
) -> (Vec<Problem>, RefundFigures) {
    let mut problems = Vec::new();
    let p = &mut problems;
    let mut figures = RefundFigures::default();
    let attempts: HashMap<Uuid, _> = observed
        .attempts
        .iter()
        .map(|a| (a.payment_attempt_id, a))
        .collect();
    // The gateway's charge of each attempt that was charged: its id and amount.
    let charges: HashMap<String, (&str, i64)> = observed
        .ledger
        .iter()
        .filter(|c| c.status == ChargeStatus::Succeeded)
        .map(|c| (c.reference.clone(), (c.id.as_str(), c.amount_minor)))
        .collect();
    let rows: HashMap<Uuid, &RefundRow> = seen.refunds.iter().map(|r| (r.refund_id, r)).collect();

    // 1. Every planned refund recorded as asked, and nothing else.
    if seen.refunds.len() != plan.refunds.len() {
        p.push(Problem {
            attempt: None,
            text: format!(
                "{} refunds recorded for {} refund_ids published",
                seen.refunds.len(),
                plan.refunds.len()
            ),
        });
    }
    for (refund_id, planned) in &plan.refunds {
        match rows.get(refund_id) {
            None => problem(
                p,
                planned.payment_attempt_id,
                format!("refund {refund_id} was never recorded"),
            ),
            Some(row)
                if row.payment_attempt_id != planned.payment_attempt_id
                    || row.requested_minor != planned.amount_minor =>
            {
                problem(
                    p,
                    row.payment_attempt_id,
                    format!(
                        "refund {refund_id} is recorded for {} asking {:?}, published for {} asking {:?}",
                        row.payment_attempt_id,
                        row.requested_minor,
                        planned.payment_attempt_id,
                        planned.amount_minor
                    ),
                )
            }
            Some(_) => {}
        }
    }
    for row in &seen.refunds {
        if !plan.refunds.contains_key(&row.refund_id) {
            problem(
                p,
                row.payment_attempt_id,
                format!("refund {} was never published", row.refund_id),
            );
        }
    }

    // 2. At most one refund at the gateway per refund_id; none over its charge there.
    let mut at_gateway: HashMap<Uuid, Vec<&GatewayRefund>> = HashMap::new();
    let mut held_by_charge: HashMap<&str, i64> = HashMap::new();
    for refund in &seen.gateway {
        *figures
            .at_gateway
            .entry(refund.status.as_str())
            .or_default() += 1;
        if refund.status.holds() {
            *held_by_charge.entry(refund.charge_id.as_str()).or_default() += refund.amount_minor;
        }
        match refund.refund_id.as_deref().map(str::parse::<Uuid>) {
            Some(Ok(id)) => at_gateway.entry(id).or_default().push(refund),
            _ => p.push(Problem {
                attempt: None,
                text: format!(
                    "the gateway holds refund {} without onecharge's refund_id ({:?})",
                    refund.id, refund.refund_id
                ),
            }),
        }
    }
    for (refund_id, refunds) in &at_gateway {
        let attempt = rows
            .get(refund_id)
            .map_or(Uuid::nil(), |r| r.payment_attempt_id);
        if refunds.len() > 1 {
            figures.sent_twice += 1;
            let ids: Vec<(&str, &str)> = refunds
                .iter()
                .map(|r| (r.id.as_str(), r.status.as_str()))
                .collect();
            problem(
                p,
                attempt,
                format!(
                    "REFUND SENT TWICE: refund {refund_id} has {} refunds at the gateway: {ids:?}",
                    refunds.len()
                ),
            );
        }
    }
    let amount_of_charge: HashMap<&str, i64> = charges.values().copied().collect();
    for (charge_id, held) in &held_by_charge {
        match amount_of_charge.get(charge_id) {
            Some(charged) if held > charged => {
                figures.over_refunded_at_gateway += 1;
                p.push(Problem {
                    attempt: None,
                    text: format!(
                        "OVER-REFUND: the gateway holds {held} of refunds (succeeded and pending) of charge {charge_id}, which charged {charged}"
                    ),
                });
            }
            Some(_) => {}
            None => p.push(Problem {
                attempt: None,
                text: format!(
                    "the gateway refunded {held} of {charge_id}, which is no succeeded charge of the soak"
                ),
            }),
        }
    }

    // 3. onecharge's reservations: never above the charge, and exactly what its refunds hold.
    let mut holding: HashMap<Uuid, i64> = HashMap::new();
    for row in &seen.refunds {
        if !["waiting", "failed", "refused"].contains(&row.status.as_str()) {
            *holding.entry(row.payment_attempt_id).or_default() += row.amount_minor.unwrap_or(0);
        }
    }
    for total in &seen.totals {
        let attempt = total.payment_attempt_id;
        let charged = attempts.get(&attempt).map(|a| a.amount_minor);
        if total.reserved_minor > total.charged_minor || Some(total.charged_minor) != charged {
            figures.over_reserved += 1;
            problem(
                p,
                attempt,
                format!(
                    "OVER-REFUND: onecharge reserved {} of attempt {attempt} against {} charged (the attempt is for {charged:?})",
                    total.reserved_minor, total.charged_minor
                ),
            );
        }
        let held = holding.remove(&attempt).unwrap_or(0);
        if held != total.reserved_minor {
            figures.reservations_off += 1;
            problem(
                p,
                attempt,
                format!(
                    "attempt {attempt} has {} reserved for refunds, but its refunds hold {held}",
                    total.reserved_minor
                ),
            );
        }
    }
    for (attempt, held) in holding {
        figures.reservations_off += 1;
        problem(
            p,
            attempt,
            format!("attempt {attempt}'s refunds hold {held} but it has no refund_totals row"),
        );
    }

    // 4. Every refund settled, truthfully; and as the gateway has it.
    for row in &seen.refunds {
        let id = row.refund_id;
        let attempt = row.payment_attempt_id;
        *figures.by_status.entry(row.status.clone()).or_default() += 1;
        let gateway: &[&GatewayRefund] = at_gateway.get(&id).map_or(&[], Vec::as_slice);
        let attempt_status = attempts.get(&attempt).map(|a| a.status.as_str());
        match row.status.as_str() {
            "succeeded" => {
                let agrees = matches!(gateway, [one] if one.status == GatewayStatus::Succeeded
                    && Some(one.id.as_str()) == row.gateway_refund_id.as_deref()
                    && Some(one.amount_minor) == row.amount_minor);
                if !agrees {
                    figures.disagreements += 1;
                    problem(
                        p,
                        attempt,
                        format!(
                            "refund {id} succeeded as {:?} for {:?}, but the gateway holds {:?}",
                            row.gateway_refund_id,
                            row.amount_minor,
                            gateway
                                .iter()
                                .map(|r| (&r.id, r.amount_minor, r.status.as_str()))
                                .collect::<Vec<_>>()
                        ),
                    );
                }
                if attempt_status != Some("succeeded") {
                    problem(
                        p,
                        attempt,
                        format!("refund {id} succeeded, but its attempt is {attempt_status:?}"),
                    );
                }
            }
            "failed" => {
                let failed_there = gateway.iter().any(|r| {
                    matches!(r.status, GatewayStatus::Failed | GatewayStatus::Canceled)
                        && Some(r.id.as_str()) == row.gateway_refund_id.as_deref()
                });
                if !failed_there {
                    figures.disagreements += 1;
                    problem(
                        p,
                        attempt,
                        format!(
                            "refund {id} failed ({:?}), but the gateway holds no failed refund for it: {:?}",
                            row.failure_reason,
                            gateway
                                .iter()
                                .map(|r| (&r.id, r.status.as_str()))
                                .collect::<Vec<_>>()
                        ),
                    );
                }
            }
            "refused" => {
                if !gateway.is_empty() {
                    figures.disagreements += 1;
                    problem(
                        p,
                        attempt,
                        format!(
                            "refund {id} was refused, but the gateway holds {} refund(s) for it",
                            gateway.len()
                        ),
                    );
                }
                check_refusal(p, &mut figures, row, seen, &rows, attempt_status);
            }
            "needs_review" => {
                let reason = row.review_reason.as_deref().unwrap_or_default().trim();
                if reason.is_empty() {
                    problem(
                        p,
                        attempt,
                        format!("refund {id} needs review without a reason"),
                    );
                }
                let short: String = reason
                    .split(':')
                    .next()
                    .unwrap_or(reason)
                    .chars()
                    .take(80)
                    .collect();
                *figures.review_reasons.entry(short).or_default() += 1;
            }
            other => problem(
                p,
                attempt,
                format!("refund {id} never settled: it is {other}"),
            ),
        }
        // Money moved (or may still) only for a refund that says so or that a person sees.
        for refund in gateway {
            let fits = if refund.status.holds() {
                ["succeeded", "needs_review"].contains(&row.status.as_str())
            } else {
                ["failed", "needs_review"].contains(&row.status.as_str())
            };
            if !fits {
                figures.disagreements += 1;
                problem(
                    p,
                    attempt,
                    format!(
                        "the gateway's refund {} for refund {id} is {}, but onecharge has it {}",
                        refund.id,
                        refund.status.as_str(),
                        row.status
                    ),
                );
            }
            if Some(refund.amount_minor) != row.amount_minor
                || refund.reference.as_deref() != Some(attempt.to_string().as_str())
            {
                figures.disagreements += 1;
                problem(
                    p,
                    attempt,
                    format!(
                        "the gateway's refund {} is {} of {:?}, onecharge's refund {id} {:?} of {attempt}",
                        refund.id, refund.amount_minor, refund.reference, row.amount_minor
                    ),
                );
            }
        }
        if matches!(attempt_status, Some("declined" | "expired")) && row.status != "refused" {
            problem(
                p,
                attempt,
                format!(
                    "refund {id} of a charge that ended {} is {}",
                    attempt_status.unwrap_or_default(),
                    row.status
                ),
            );
        }
    }

    // 5. Racing pairs: never both refunded.
    for (id, planned) in &plan.refunds {
        let Some(rival) = planned.rival.filter(|rival| id < rival) else {
            continue;
        };
        figures.racing_pairs += 1;
        let status = |id: &Uuid| rows.get(id).map_or("missing", |r| r.status.as_str());
        if status(id) == "succeeded" && status(&rival) == "succeeded" {
            problem(
                p,
                planned.payment_attempt_id,
                format!(
                    "racing refunds {id} and {rival} both succeeded, together passing the charge"
                ),
            );
        }
        let refused_for_passing = [id, &rival].iter().any(|r| {
            rows.get(*r)
                .is_some_and(|row| refusal(row) == Some(Refusal::PastWhatIsLeft))
        });
        if refused_for_passing {
            figures.racing_pairs_one_refused += 1;
        }
    }

    check_announcements(p, &mut figures, plan, observed, seen, &rows);
    (problems, figures)
}

/// A refused refund's reason must be true: its charge did end so, the amount would pass
/// what was left even with every other refund of the charge held, or the charge was not
/// final when the refund gave up waiting.
fn check_refusal(
    p: &mut Vec<Problem>,
    figures: &mut RefundFigures,
    row: &RefundRow,
    seen: &RefundsSeen,
    rows: &HashMap<Uuid, &RefundRow>,
    attempt_status: Option<&str>,
) {
    let id = row.refund_id;
    let attempt = row.payment_attempt_id;
    let reason = row.failure_reason.as_deref().unwrap_or_default();
    let Some(kind) = refusal(row) else {
        problem(
            p,
            attempt,
            format!("refund {id} was refused for a reason the soak cannot check: {reason:?}"),
        );
        return;
    };
    *figures.refusals.entry(kind.describe()).or_default() += 1;
    let true_reason = match kind {
        Refusal::ChargeNotMade => {
            attempt_status.is_some_and(|status| reason.contains(&format!(" ended {status}")))
        }
        Refusal::PastWhatIsLeft => {
            // The most the others can have held when this one was refused: every other
            // refund of the charge that was ever admitted.
            let others: i64 = rows
                .values()
                .filter(|r| r.payment_attempt_id == attempt && r.refund_id != id)
                .filter_map(|r| r.amount_minor)
                .sum();
            let charged = seen
                .totals
                .iter()
                .find(|t| t.payment_attempt_id == attempt)
                .map(|t| t.charged_minor);
            attempt_status == Some("succeeded")
                && charged.is_some_and(|charged| match row.requested_minor {
                    Some(asked) => asked + others > charged,
                    None => others >= charged,
                })
        }
        Refusal::NotFinalInTime => {
            let times = seen.waited_on.get(&attempt).copied().unwrap_or_default();
            let refused_at = row.settled_at;
            if reason.contains("was never recorded within") {
                times.recorded.is_none() || times.recorded > refused_at
            } else {
                times.final_at.is_none() || times.final_at > refused_at
            }
        }
    };
    if !true_reason {
        problem(
            p,
            attempt,
            format!(
                "refund {id} was refused with an untrue reason (its attempt is {attempt_status:?}): {reason}"
            ),
        );
    }
}

/// One published event per final refund (none for one in review), on the stream under its
/// outbox id; one dead letter per refused refund; every refund message recorded.
fn check_announcements(
    p: &mut Vec<Problem>,
    figures: &mut RefundFigures,
    plan: &Plan,
    observed: &Observed,
    seen: &RefundsSeen,
    rows: &HashMap<Uuid, &RefundRow>,
) {
    let refund_of = |payload: &serde_json::Value| {
        payload["refund_id"]
            .as_str()
            .and_then(|s| s.parse::<Uuid>().ok())
    };
    let mut events: HashMap<Uuid, Vec<&Event>> = HashMap::new();
    let mut dead: HashMap<Uuid, Vec<&Event>> = HashMap::new();
    for row in &seen.outbox {
        let Some(refund_id) = refund_of(&row.payload) else {
            problem(
                p,
                row.payment_attempt_id,
                format!(
                    "outbox row {} ({}) names no refund",
                    row.event_id, row.status
                ),
            );
            continue;
        };
        if row.published_at.is_none() {
            problem(
                p,
                row.payment_attempt_id,
                format!(
                    "refund outbox row {} ({}) was never published",
                    row.event_id, row.status
                ),
            );
        }
        let into = if row.status == "refund_dead_letter" {
            &mut dead
        } else {
            &mut events
        };
        into.entry(refund_id).or_default().push(row);
    }
    let on_stream = stream_ids(&observed.events, |m| refund_of(&body(m)));
    let dead_on_stream = stream_ids(&observed.dead_letters, |m| {
        (m.header("Dlq-Class") == Some("refused"))
            .then(|| refund_of(&body(m)))
            .flatten()
    });
    figures.refused_dead_letters = dead_on_stream.values().map(HashSet::len).sum();
    for row in &seen.refunds {
        let id = row.refund_id;
        let attempt = row.payment_attempt_id;
        let is_final = ["succeeded", "failed", "refused"].contains(&row.status.as_str());
        let mine = events.get(&id).map_or(&[][..], Vec::as_slice);
        figures.final_refunds += usize::from(is_final);
        figures.events += mine.len();
        let wanted = if row.status == "succeeded" {
            "refund_succeeded"
        } else {
            "refund_failed"
        };
        match mine {
            [] if !is_final => {}
            [one] if is_final => {
                if one.status != wanted || one.payload["status"] != row.status.as_str() {
                    problem(
                        p,
                        attempt,
                        format!(
                            "refund {id} is {} but its event is {} with status {}",
                            row.status, one.status, one.payload["status"]
                        ),
                    );
                }
                let ids = on_stream.get(&id).cloned().unwrap_or_default();
                if ids != HashSet::from([one.event_id.to_string()]) {
                    problem(
                        p,
                        attempt,
                        format!(
                            "refund {id}'s event {} is on the events stream under {ids:?}",
                            one.event_id
                        ),
                    );
                }
            }
            _ => problem(
                p,
                attempt,
                format!(
                    "refund {id} is {} with {} events: {:?}",
                    row.status,
                    mine.len(),
                    mine.iter().map(|e| &e.status).collect::<Vec<_>>()
                ),
            ),
        }
        let dead_rows = dead.get(&id).map_or(0, Vec::len);
        let dead_letters = dead_on_stream.get(&id).map_or(0, HashSet::len);
        let expected = usize::from(row.status == "refused");
        if dead_rows != expected || dead_letters != expected {
            problem(
                p,
                attempt,
                format!(
                    "refund {id} is {} with {dead_rows} dead letters in the outbox and {dead_letters} on the stream",
                    row.status
                ),
            );
        }
    }
    for id in on_stream.keys().chain(dead_on_stream.keys()) {
        if !rows.contains_key(id) {
            p.push(Problem {
                attempt: None,
                text: format!("the streams announce refund {id}, which is not recorded"),
            });
        }
    }
    // Refund messages end as recorded, never as dead letters of intake.
    for message in &observed.dead_letters {
        if let Some(original) = message.header("Dlq-Original-Msg-Id") {
            if plan.refund_message_ids.contains(original)
                && message.header("Dlq-Class") != Some("refused")
            {
                p.push(Problem {
                    attempt: None,
                    text: format!(
                        "refund message {original} was dead-lettered as {:?}: {:?}",
                        message.header("Dlq-Class"),
                        message.header("Dlq-Reason")
                    ),
                });
            }
        }
    }
    let mut accepted = 0;
    let mut recorded = HashSet::new();
    for row in observed
        .processed
        .iter()
        .filter(|r| r.result.starts_with("refund_"))
    {
        accepted += usize::from(row.result == "refund_accepted");
        recorded.insert(row.message_id.as_str());
        if !plan.refund_message_ids.contains(&row.message_id) {
            p.push(Problem {
                attempt: Some(row.payment_attempt_id),
                text: format!(
                    "message {} is recorded as a refund but was never published as one",
                    row.message_id
                ),
            });
        }
    }
    for id in &plan.refund_message_ids {
        if !recorded.contains(id.as_str()) {
            p.push(Problem {
                attempt: None,
                text: format!("refund message {id} was never recorded as processed"),
            });
        }
    }
    if accepted != plan.refunds.len() {
        p.push(Problem {
            attempt: None,
            text: format!(
                "{accepted} refund messages created a refund, for {} refund_ids",
                plan.refunds.len()
            ),
        });
    }
}

fn body(message: &StreamMessage) -> serde_json::Value {
    serde_json::from_slice(&message.body).unwrap_or_default()
}

/// The `Nats-Msg-Id`s on a stream per refund, for the messages `refund_of` names one in.
fn stream_ids(
    messages: &[StreamMessage],
    refund_of: impl Fn(&StreamMessage) -> Option<Uuid>,
) -> HashMap<Uuid, HashSet<String>> {
    let mut out: HashMap<Uuid, HashSet<String>> = HashMap::new();
    for message in messages {
        if let Some(id) = refund_of(message) {
            out.entry(id)
                .or_default()
                .insert(message.header("Nats-Msg-Id").unwrap_or_default().to_owned());
        }
    }
    out
}

/// The summary's refund lines.
pub fn print(plan: &Plan, published: &crate::mix::Published, figures: &RefundFigures) {
    let mut cases: BTreeMap<RefundCase, usize> = BTreeMap::new();
    for planned in plan.refunds.values() {
        *cases.entry(planned.case).or_default() += 1;
    }
    let cases: Vec<String> = cases
        .iter()
        .map(|(case, n)| format!("{n} {}", case.describe()))
        .collect();
    println!(
        "  refunds published         {} messages for {} refund_ids ({}); {} sent again under their message id, {} under a new one",
        published.of_kind(Kind::Refund)
            + published.of_kind(Kind::RefundRetry)
            + published.of_kind(Kind::RefundDuplicate),
        plan.refunds.len(),
        cases.join(", "),
        published.of_kind(Kind::RefundRetry),
        published.of_kind(Kind::RefundDuplicate),
    );
    println!(
        "  refunds                   {} (of {} published)",
        figures.by_status.values().sum::<usize>(),
        plan.refunds.len()
    );
    for (status, n) in &figures.by_status {
        println!("    {status:<23} {n}");
        if status == "refused" {
            for (why, n) in &figures.refusals {
                println!("      {n:>4} × {why}");
            }
        }
        if status == "needs_review" {
            for (why, n) in &figures.review_reasons {
                println!("      {n:>4} × {why}");
            }
        }
    }
    let at_gateway: Vec<String> = figures
        .at_gateway
        .iter()
        .map(|(status, n)| format!("{n} {status}"))
        .collect();
    println!(
        "  refunds at the gateway    {} ({})",
        figures.at_gateway.values().sum::<usize>(),
        at_gateway.join(", ")
    );
    println!(
        "  refunds sent twice        {} (refund_ids with more than one refund at the gateway)",
        figures.sent_twice
    );
    println!(
        "  over-refunds              {} at the gateway (succeeded + pending above the charge), {} in onecharge (reserved above the charge); {} reservations unlike what their refunds hold",
        figures.over_refunded_at_gateway, figures.over_reserved, figures.reservations_off
    );
    println!(
        "  racing pairs              {} ({} with one refused for passing what was left)",
        figures.racing_pairs, figures.racing_pairs_one_refused
    );
    println!(
        "  onecharge vs the gateway  {} refunds on which they disagree",
        figures.disagreements
    );
    println!(
        "  refund events             {} for {} final refunds; {} refused dead letters",
        figures.events, figures.final_refunds, figures.refused_dead_letters
    );
}
