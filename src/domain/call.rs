//! What one gateway call came to: the classified outcome with the evidence
//! `gateway_calls` records ([`GatewayCall`]), and the outcomes of the calls only a two-step
//! connector makes ([`Prepared`], [`CancelOutcome`]). Pure values: the connectors in
//! `crate::gateway` make them, the roles decide on them, and the domain owns them so that
//! neither has to know the other.

use super::GatewayChargeId;
use std::time::Duration;

use super::outcome::GatewayOutcome;
use super::{CallOperation, GatewayObjectId, IdempotencyKey};

/// What cancelling the gateway object stored for an attempt came to
/// (the connector's `cancel_object`): the proof behind every "not charged" a Stripe
/// attempt with a stored PaymentIntent may announce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The object is canceled and can never charge: "not charged" is proven.
    Canceled { charge_id: GatewayChargeId },
    /// It had already charged: adopt that.
    Succeeded { charge_id: GatewayChargeId },
    /// It is processing at the gateway and may still charge: the attempt stays `unknown`.
    Processing { charge_id: GatewayChargeId },
    /// No proof either way (no answer, an error, another state): the attempt stays where it
    /// is and the cancel is tried again; nothing is announced.
    Unproven { reason: String },
}

impl CancelOutcome {
    /// A bounded label for metrics and `gateway_calls.outcome`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Canceled { .. } => "canceled",
            Self::Succeeded { .. } => "succeeded",
            Self::Processing { .. } => "processing",
            Self::Unproven { .. } => "not_canceled",
        }
    }

    /// The object's id, when the gateway named it.
    pub fn charge_id(&self) -> Option<&GatewayChargeId> {
        match self {
            Self::Canceled { charge_id }
            | Self::Succeeded { charge_id }
            | Self::Processing { charge_id } => Some(charge_id),
            Self::Unproven { .. } => None,
        }
    }
}

impl GatewayCall<CancelOutcome> {
    /// What the cancel's `gateway_calls.error` says: why nothing was proven, else the
    /// transport's error.
    pub fn error_text(&self) -> Option<String> {
        match &self.outcome {
            CancelOutcome::Unproven { reason } => Some(reason.clone()),
            _ => self.error.clone(),
        }
    }
}

/// What the first step of a two-step charge came to (the connector's `prepare`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// The gateway holds an object that cannot charge until it is confirmed; its id must be
    /// stored (fenced) before the charging call.
    Object { id: GatewayObjectId },
    /// The object was not made; the outcome says what the attempt does next. None of these
    /// can have charged.
    Refused(GatewayOutcome),
}

impl Prepared {
    /// A bounded label for metrics and `gateway_calls.outcome`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Object { .. } => "prepared",
            Self::Refused(outcome) => outcome.label(),
        }
    }
}

impl<T> GatewayCall<T> {
    /// A call onecharge answered itself, sending nothing (`operation` under `sent_key`, had
    /// it been sent): it took no time and says nothing of the gateway.
    pub fn answered_locally(
        outcome: T,
        operation: CallOperation,
        sent_key: Option<IdempotencyKey>,
        error: Option<String>,
    ) -> Self {
        GatewayCall {
            outcome,
            operation,
            sent_key,
            http_status: None,
            elapsed: Duration::ZERO,
            answered_locally: true,
            error,
        }
    }

    /// A call onecharge refused to send for `reason` (a request it cannot build): the
    /// outcome `refused` makes of the reason, with `not sent: <reason>` as the call's error.
    pub fn refused_locally(
        refused: impl FnOnce(String) -> T,
        operation: CallOperation,
        sent_key: Option<IdempotencyKey>,
        reason: String,
    ) -> Self {
        let error = format!("not sent: {reason}");
        Self::answered_locally(refused(reason), operation, sent_key, Some(error))
    }
}

/// What one gateway call came to, with the evidence `gateway_calls` records.
#[derive(Debug, Clone)]
pub struct GatewayCall<T> {
    /// The classified answer.
    pub outcome: T,
    /// `prepare`, `charge` or `lookup`: the `gateway_calls.operation` of this call.
    pub operation: CallOperation,
    /// The `Idempotency-Key` this call sent, when it is not the attempt's stored key
    /// itself (Stripe's derived keys); `None` for the stored key or no key.
    pub sent_key: Option<IdempotencyKey>,
    /// Answered by onecharge itself, with no request sent (Stripe with no stored
    /// PaymentIntent, an amount Stripe cannot take): says nothing of the gateway's health.
    pub answered_locally: bool,
    /// The HTTP status, when a response arrived.
    pub http_status: Option<u16>,
    /// Wall time from sending to the classified answer.
    pub elapsed: Duration,
    /// The transport error, bounded, when no complete response arrived (or, for an answer
    /// given without a call, why none was needed).
    pub error: Option<String>,
}
