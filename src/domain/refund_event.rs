//! What onecharge says about a refund (contract §2.6): one event per final state, written
//! in the transaction that reaches it and published by the relay; and the dead letter of a
//! refund refused after it was recorded.

use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{PaymentAttemptId, RefundId, RefundStatus};

/// The body of `payments.events.refund-succeeded.v1` and `refund-failed.v1`.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(
    title = "Refund event v1",
    description = "The body of an event on payments.events.refund-succeeded.v1 or refund-failed.v1 (contract §2.6): one per final state of a refund. Headers: Nats-Msg-Id (equal to event_id), Causation-Id (the refund command's Nats-Msg-Id), Correlation-Id and traceparent (when the command had them)."
)]
pub struct RefundEvent {
    /// Also the `Nats-Msg-Id`.
    #[schemars(extend("format" = "uuid"))]
    pub event_id: Uuid,
    pub refund_id: RefundId,
    pub payment_attempt_id: PaymentAttemptId,
    /// `succeeded` (refund-succeeded); `failed` (the gateway failed or refused it) or
    /// `refused` (never sent: see `reason`) (refund-failed).
    pub status: String,
    /// What was refunded or asked: null for a refund refused before its amount was fixed.
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    /// The gateway's refund id, when it made one.
    pub gateway_refund_id: Option<String>,
    /// Why it failed or was refused; null when it succeeded.
    pub reason: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub occurred_at: OffsetDateTime,
}

impl RefundEvent {
    /// The subject without any deployment namespace.
    pub fn subject_of(status: RefundStatus) -> Option<&'static str> {
        match status {
            RefundStatus::Succeeded => Some("payments.events.refund-succeeded.v1"),
            RefundStatus::Failed | RefundStatus::Refused => {
                Some("payments.events.refund-failed.v1")
            }
            _ => None,
        }
    }

    /// The outbox's `status` of this event.
    pub fn outbox_status(status: RefundStatus) -> &'static str {
        if status == RefundStatus::Succeeded {
            "refund_succeeded"
        } else {
            "refund_failed"
        }
    }
}

/// The subject of refund dead letters, without any deployment namespace.
pub const REFUND_DLQ_SUBJECT: &str = "payments.dlq.refund-payment.v1";
/// The subject of refund commands, without any deployment namespace.
pub const REFUND_COMMAND_SUBJECT: &str = "payments.commands.refund-payment.v1";
