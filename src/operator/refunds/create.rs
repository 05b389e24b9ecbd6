//! A person's refund (issue 37, decisions 180 and 181): `refunds create`, `POST
//! /api/attempts/{id}/refunds`, the console's refund form.
//!
//! **A command like any other.** [`create`] checks what can never pass (the attempt did not
//! succeed, the amount is more than is left: a courtesy, the refund worker and the
//! database's CHECK still decide), then publishes a RefundPayment on the refund command
//! subject through `crate::broker::publish`, the path producers use, under `Nats-Msg-Id`
//! `operator-refund-<refund_id>`, and audits it with the person's name. The amount is
//! always the one the person was shown: an omitted amount becomes what was left then, never
//! "the rest" at admission. The refund id is minted when the refund is previewed and carried
//! by its confirmation, so a confirmation sent twice is one refund (JetStream's duplicate
//! window, then intake's `refund_id` key).

use crate::domain::GatewayChargeId;
use serde::Serialize;

use super::suffix;
use crate::broker::publish::{self, RefundArgs};
use crate::broker::Broker;
use crate::domain::command::MAX_AMOUNT_MINOR;
use crate::domain::refund::MAX_REASON_CHARS;
use crate::domain::{Actor, AttemptStatus, Currency, Money, PaymentAttemptId, RefundId};
use crate::format;
use crate::store::audit::{self, AuditAction, NewAuditEntry, Via};
use crate::store::reads::attempts as attempts_sql;
use crate::store::refunds::reads::{self as sql, RefundTotals};
use crate::store::Store;

/// A person's refund: `refunds create`, `POST /api/attempts/{id}/refunds`, the console's
/// form. The body of the API's request.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewRefund {
    /// In the charge's minor unit, 1 to what is left; omitted: all that is left now (the
    /// refund carries that amount, not "the rest")
    #[serde(default)]
    pub amount_minor: Option<i64>,
    /// Why (1 to 500 characters): stored with the refund, sent to the gateway as metadata,
    /// and recorded in the audit trail
    pub reason: String,
    /// The refund's id when the caller mints it, so that sending the same request again is
    /// the same refund; omitted: a new one
    #[serde(default)]
    #[schema(value_type = Option<uuid::Uuid>)]
    pub refund_id: Option<RefundId>,
}

/// Why a person's refund was not published.
#[derive(Debug, thiserror::Error)]
pub enum RefundError {
    /// The request cannot pass as asked (no reason, an amount that is no amount): usage.
    #[error("{0}")]
    Invalid(String),
    #[error("no payment attempt {0}")]
    NotFound(PaymentAttemptId),
    /// The attempt's state refuses it: only a succeeded charge can be refunded.
    #[error("{0}")]
    NotRefundable(String),
    /// More than is left of the charge.
    #[error("{0}")]
    TooMuch(String),
    #[error("reading the attempt and its refunds: {0}")]
    Store(#[from] sqlx::Error),
    /// JetStream did not take the command: nothing was published.
    #[error("the refund was not published: {0:#}")]
    Publish(anyhow::Error),
    /// Published, but its audit row could not be written: it must not be sent again under
    /// another id.
    #[error(
        "refund {refund_id} WAS published (stream sequence {stream_sequence}) but its audit row could not be written"
    )]
    NotAudited {
        refund_id: RefundId,
        stream_sequence: u64,
        #[source]
        source: sqlx::Error,
    },
}

/// What a person's refund would do, shown before it is confirmed, and the numbers it was
/// checked against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RefundPreview {
    /// The id the refund will carry (a confirmation passes it back).
    #[schema(value_type = uuid::Uuid)]
    pub refund_id: RefundId,
    #[schema(value_type = uuid::Uuid)]
    pub payment_attempt_id: PaymentAttemptId,
    pub order_id: String,
    pub customer_id: String,
    /// The charge's gateway id.
    #[schema(value_type = Option<String>)]
    pub gateway_charge_id: Option<GatewayChargeId>,
    #[schema(value_type = String)]
    pub currency: Currency,
    pub charged_minor: i64,
    /// Refunded for good (`succeeded` refunds).
    pub refunded_minor: i64,
    /// Reserved by refunds admitted and not settled yet (sent, at the gateway, in review).
    pub in_progress_minor: i64,
    /// Refunds recorded and not admitted yet, and what those naming an amount ask.
    pub waiting: i64,
    pub waiting_minor: i64,
    /// Left to refund: charged less everything above.
    pub left_minor: i64,
    /// What this refund refunds.
    pub amount_minor: i64,
    pub reason: String,
}

impl RefundPreview {
    fn money(&self, minor: i64) -> Money {
        Money::new(minor, self.currency)
    }

    /// What the refund will do, in lines for a person deciding.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![
            format!(
                "refund {} of attempt {} (order {}, customer {}{})",
                self.money(self.amount_minor),
                self.payment_attempt_id,
                self.order_id,
                self.customer_id,
                suffix(", gateway charge ", self.gateway_charge_id.as_deref())
            ),
            format!("charged:          {}", self.money(self.charged_minor)),
            format!("refunded:         {}", self.money(self.refunded_minor)),
            format!("being refunded:   {}", self.money(self.in_progress_minor)),
        ];
        if self.waiting > 0 {
            lines.push(format!(
                "waiting:          {} refund{} asking {}",
                self.waiting,
                if self.waiting == 1 { "" } else { "s" },
                self.money(self.waiting_minor)
            ));
        }
        lines.push(format!(
            "left:             {} (after this refund: {})",
            self.money(self.left_minor),
            self.money(self.left_minor - self.amount_minor)
        ));
        lines.push(format!(
            "reason:           {}",
            format::cell(&self.reason, 300)
        ));
        lines.push(format!("refund id:        {}", self.refund_id));
        lines
    }
}

/// A person's refund, published.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RefundPublished {
    #[schema(value_type = uuid::Uuid)]
    pub refund_id: RefundId,
    #[schema(value_type = uuid::Uuid)]
    pub payment_attempt_id: PaymentAttemptId,
    pub amount_minor: i64,
    #[schema(value_type = String)]
    pub currency: Currency,
    /// `operator-refund-<refund_id>`.
    pub message_id: String,
    pub subject: String,
    /// Its sequence in the command stream.
    pub stream_sequence: u64,
    /// JetStream already held this refund's message (the same confirmation sent again):
    /// nothing new was published, and it is one refund.
    pub duplicate: bool,
    #[schema(value_type = String)]
    pub actor: Actor,
    /// The audit row of this request.
    pub audit_id: i64,
}

impl RefundPublished {
    /// One line saying what was done and where to follow it.
    pub fn summary(&self) -> String {
        format!(
            "refund {} of {} for attempt {} {} by {} (stream sequence {}, audit row {}); follow it with `onecharge refunds show {}`",
            self.refund_id,
            Money::new(self.amount_minor, self.currency),
            self.payment_attempt_id,
            if self.duplicate {
                "was already published: this is the same refund, nothing new was sent"
            } else {
                "published"
            },
            self.actor,
            self.stream_sequence,
            self.audit_id,
            self.refund_id
        )
    }
}

/// Checks what a refund of `payment_attempt_id` as `request` asks would do against the
/// attempt and its refunds now: the preview a person confirms, or why it can never pass.
pub async fn preview(
    store: &Store,
    payment_attempt_id: PaymentAttemptId,
    request: &NewRefund,
) -> Result<RefundPreview, RefundError> {
    let reason = checked_reason(&request.reason)?;
    if let Some(amount) = request.amount_minor {
        if amount <= 0 || amount > MAX_AMOUNT_MINOR {
            return Err(RefundError::Invalid(format!(
                "the amount must be 1 to {MAX_AMOUNT_MINOR} minor units, got {amount}"
            )));
        }
    }
    let Some(attempt) = attempts_sql::get_attempt(store, payment_attempt_id).await? else {
        return Err(RefundError::NotFound(payment_attempt_id));
    };
    let totals = sql::refund_totals(store, payment_attempt_id).await?;
    let amount = match recorded_amount(store, payment_attempt_id, request).await? {
        // The same refund confirmed again (decision 181): it is already counted in what is
        // taken, so what is left says nothing about it; it is published again under its
        // own message id and is one refund.
        Some(amount) => Money::new(amount, attempt.money.currency()),
        None => decide(
            payment_attempt_id,
            attempt.status,
            attempt.money,
            &totals,
            request.amount_minor,
        )?,
    };
    Ok(RefundPreview {
        refund_id: request.refund_id.unwrap_or_else(RefundId::random),
        payment_attempt_id,
        order_id: attempt.order_id,
        customer_id: attempt.customer_id,
        gateway_charge_id: attempt.gateway_charge_id,
        currency: attempt.money.currency(),
        charged_minor: attempt.money.amount_minor(),
        refunded_minor: totals.refunded_minor,
        in_progress_minor: totals.reserved_minor - totals.refunded_minor,
        waiting: totals.waiting,
        waiting_minor: totals.waiting_minor,
        left_minor: left(attempt.money, &totals),
        amount_minor: amount.amount_minor(),
        reason,
    })
}

/// The amount of the refund `request` names, when intake already recorded it for this
/// attempt: a confirmation sent again. The same `refund_id` for another attempt or another
/// amount is refused, with why.
async fn recorded_amount(
    store: &Store,
    payment_attempt_id: PaymentAttemptId,
    request: &NewRefund,
) -> Result<Option<i64>, RefundError> {
    let Some(refund_id) = request.refund_id else {
        return Ok(None);
    };
    let Some(recorded) = sql::get_refund(store, refund_id).await? else {
        return Ok(None);
    };
    let amount = recorded.requested_minor.or(recorded.amount_minor);
    if recorded.payment_attempt_id != payment_attempt_id
        || amount.is_none()
        || request
            .amount_minor
            .is_some_and(|asked| Some(asked) != amount)
    {
        return Err(RefundError::Invalid(format!(
            "refund_id {refund_id} is already a refund of {} of attempt {}: preview again for a new refund id. Nothing was published",
            amount.map_or_else(|| "the rest".to_owned(), |a| format!("{a} minor units")),
            recorded.payment_attempt_id
        )));
    }
    Ok(amount)
}

/// The reason, trimmed, or why it cannot be recorded.
fn checked_reason(reason: &str) -> Result<String, RefundError> {
    crate::operator::recordable("reason", reason).map_err(RefundError::Invalid)?;
    let reason = reason.trim();
    let chars = reason.chars().count();
    if chars == 0 {
        return Err(RefundError::Invalid(
            "a reason is required: it is stored with the refund, sent to the gateway and recorded in the audit trail".into(),
        ));
    }
    if chars > MAX_REASON_CHARS {
        return Err(RefundError::Invalid(format!(
            "the reason is {chars} characters, more than the {MAX_REASON_CHARS} a refund keeps"
        )));
    }
    Ok(reason.to_owned())
}

/// What is left of `charged` to refund: less what admitted refunds hold and what waiting
/// ones ask; nothing when a waiting one asks for the rest.
fn left(charged: Money, totals: &RefundTotals) -> i64 {
    if totals.waiting_for_the_rest {
        return 0;
    }
    (charged.amount_minor() - totals.reserved_minor - totals.waiting_minor).max(0)
}

/// The amount a person's refund of an attempt in `status` that charged `charged` would
/// refund (`asked`, or all that is left), or why it can never pass. Pure: the table of
/// refusals is its tests.
pub fn decide(
    payment_attempt_id: PaymentAttemptId,
    status: AttemptStatus,
    charged: Money,
    totals: &RefundTotals,
    asked: Option<i64>,
) -> Result<Money, RefundError> {
    let why_not = match status {
        AttemptStatus::Succeeded => None,
        AttemptStatus::Declined | AttemptStatus::Expired => {
            Some("it was never charged, so nothing can be refunded")
        }
        AttemptStatus::Pending | AttemptStatus::InFlight | AttemptStatus::Unknown => {
            Some("its charge has not succeeded (yet): refund it once it has")
        }
        AttemptStatus::NeedsReview => {
            Some("whether it was charged is in review: resolve it first (`attempts resolve`), then refund it if it succeeded")
        }
    };
    if let Some(why) = why_not {
        return Err(RefundError::NotRefundable(format!(
            "refusing to refund attempt {payment_attempt_id}: it is {status}; {why}. Nothing was published"
        )));
    }
    let money = |minor| Money::new(minor, charged.currency());
    let left = left(charged, totals);
    let taken = || {
        let mut parts = vec![
            format!("{} charged", charged),
            format!("{} refunded", money(totals.refunded_minor)),
            format!(
                "{} being refunded",
                money(totals.reserved_minor - totals.refunded_minor)
            ),
        ];
        if totals.waiting > 0 {
            parts.push(format!(
                "{} waiting refund{} asking {}{}",
                totals.waiting,
                if totals.waiting == 1 { "" } else { "s" },
                money(totals.waiting_minor),
                if totals.waiting_for_the_rest {
                    " and the rest of the charge"
                } else {
                    ""
                }
            ));
        }
        parts.join(", ")
    };
    match asked {
        _ if left == 0 => Err(RefundError::TooMuch(format!(
            "refusing to refund attempt {payment_attempt_id}: nothing is left to refund ({}). Nothing was published",
            taken()
        ))),
        None => Ok(money(left)),
        Some(amount) if amount > left => Err(RefundError::TooMuch(format!(
            "refusing to refund {} of attempt {payment_attempt_id}: only {} is left ({}). Nothing was published",
            money(amount),
            money(left),
            taken()
        ))),
        Some(amount) => Ok(money(amount)),
    }
}

/// The `Nats-Msg-Id` of a person's refund: one per refund, so a confirmation sent twice is
/// one message to JetStream.
pub fn message_id(refund_id: RefundId) -> String {
    format!("operator-refund-{refund_id}")
}

/// Checks the refund again (what was previewed may have changed), publishes it to the
/// refund command subject as a producer would, and audits it as `actor` acting through
/// `via`. The amount published is the one checked now, always explicit.
pub async fn create(
    store: &Store,
    broker: &Broker,
    payment_attempt_id: PaymentAttemptId,
    request: &NewRefund,
    actor: &Actor,
    via: Via,
) -> Result<RefundPublished, RefundError> {
    let checked = preview(store, payment_attempt_id, request).await?;
    let was_recorded = recorded_amount(store, payment_attempt_id, request)
        .await?
        .is_some();
    let refund_id = checked.refund_id;
    let message_id = message_id(refund_id);
    let published = publish::publish_refund(
        broker,
        RefundArgs {
            refund_id: Some(refund_id),
            attempt_id: payment_attempt_id,
            amount_minor: Some(checked.amount_minor),
            reason: checked.reason.clone(),
            requested_at: None,
            metadata: vec![("requested_by".to_owned(), actor.to_string())],
            message_id: Some(message_id.clone()),
            correlation_id: None,
            no_validate: false,
        },
    )
    .await
    .map_err(RefundError::Publish)?;
    // Recorded before this request: the same refund, whatever JetStream's window says.
    let duplicate = published.duplicate || was_recorded;
    let outcome = if duplicate { "duplicate" } else { "published" };
    let audit_id = audit::insert_alone(
        store,
        &NewAuditEntry {
            actor: actor.to_owned(),
            via,
            action: AuditAction::Refund,
            payment_attempt_ids: vec![payment_attempt_id],
            dlq_sequence: None,
            reason: Some(checked.reason.clone()),
            outcome,
            detail: serde_json::json!({
                "refund_id": refund_id,
                "amount_minor": checked.amount_minor,
                "currency": checked.currency,
                "charged_minor": checked.charged_minor,
                "left_minor": checked.left_minor,
                "message_id": published.message_id,
                "subject": published.subject,
                "stream_sequence": published.stream_sequence,
            }),
        },
    )
    .await
    .map_err(|source| RefundError::NotAudited {
        refund_id,
        stream_sequence: published.stream_sequence,
        source,
    })?;
    tracing::info!(
        %refund_id,
        %payment_attempt_id,
        amount_minor = checked.amount_minor,
        actor = %actor,
        duplicate,
        "a person's refund was published"
    );
    Ok(RefundPublished {
        refund_id,
        payment_attempt_id,
        amount_minor: checked.amount_minor,
        currency: checked.currency,
        message_id: published.message_id,
        subject: published.subject,
        stream_sequence: published.stream_sequence,
        duplicate,
        actor: actor.to_owned(),
        audit_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eur(minor: i64) -> Money {
        Money::of(minor, "EUR").unwrap()
    }

    fn totals(reserved: i64, refunded: i64, waiting: &[Option<i64>]) -> RefundTotals {
        RefundTotals {
            reserved_minor: reserved,
            refunded_minor: refunded,
            waiting: waiting.len() as i64,
            waiting_minor: waiting.iter().flatten().sum(),
            waiting_for_the_rest: waiting.iter().any(Option::is_none),
        }
    }

    fn refusal(result: Result<Money, RefundError>) -> (&'static str, String) {
        match result {
            Err(err @ RefundError::NotRefundable(_)) => ("not_refundable", err.to_string()),
            Err(err @ RefundError::TooMuch(_)) => ("too_much", err.to_string()),
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn only_a_succeeded_charge_is_refunded_and_never_past_what_is_left() {
        let id = PaymentAttemptId::random();
        let none = totals(0, 0, &[]);
        let ok = |status, totals: &RefundTotals, asked| {
            decide(id, status, eur(1999), totals, asked).map(|m| m.amount_minor())
        };
        assert_eq!(ok(AttemptStatus::Succeeded, &none, None).unwrap(), 1999);
        assert_eq!(ok(AttemptStatus::Succeeded, &none, Some(500)).unwrap(), 500);
        assert_eq!(
            ok(AttemptStatus::Succeeded, &none, Some(1999)).unwrap(),
            1999
        );
        // 500 refunded, 300 on its way, a waiting refund asks 200: 999 left
        let some = totals(800, 500, &[Some(200)]);
        assert_eq!(ok(AttemptStatus::Succeeded, &some, None).unwrap(), 999);
        assert_eq!(ok(AttemptStatus::Succeeded, &some, Some(999)).unwrap(), 999);

        let (kind, why) = refusal(decide(
            id,
            AttemptStatus::Succeeded,
            eur(1999),
            &some,
            Some(1000),
        ));
        assert_eq!(kind, "too_much");
        assert!(why.contains("only 9.99 EUR is left"), "{why}");
        assert!(
            why.contains(
                "5.00 EUR refunded, 3.00 EUR being refunded, 1 waiting refund asking 2.00 EUR"
            ),
            "{why}"
        );
        let all = totals(1999, 1999, &[]);
        let (kind, why) = refusal(decide(id, AttemptStatus::Succeeded, eur(1999), &all, None));
        assert_eq!(kind, "too_much");
        assert!(why.contains("nothing is left"), "{why}");
        let rest = totals(0, 0, &[None]);
        let (kind, why) = refusal(decide(
            id,
            AttemptStatus::Succeeded,
            eur(1999),
            &rest,
            Some(1),
        ));
        assert_eq!(kind, "too_much");
        assert!(why.contains("the rest of the charge"), "{why}");

        for (status, words) in [
            (AttemptStatus::Declined, "never charged"),
            (AttemptStatus::Expired, "never charged"),
            (AttemptStatus::Pending, "has not succeeded"),
            (AttemptStatus::InFlight, "has not succeeded"),
            (AttemptStatus::Unknown, "has not succeeded"),
            (AttemptStatus::NeedsReview, "resolve it first"),
        ] {
            let (kind, why) = refusal(decide(id, status, eur(1999), &none, Some(1)));
            assert_eq!(kind, "not_refundable", "{status}");
            assert!(
                why.contains(words) && why.contains(status.as_str()),
                "{status}: {why}"
            );
        }
    }

    #[test]
    fn a_reason_is_required_bounded_and_recordable() {
        assert!(matches!(checked_reason("  "), Err(RefundError::Invalid(_))));
        assert!(matches!(
            checked_reason("a\0b"),
            Err(RefundError::Invalid(_))
        ));
        assert!(matches!(
            checked_reason(&"x".repeat(MAX_REASON_CHARS + 1)),
            Err(RefundError::Invalid(_))
        ));
        assert_eq!(checked_reason(" item returned ").unwrap(), "item returned");
    }
}
