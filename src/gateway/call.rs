//! What one gateway call came to: the classified outcome with the evidence
//! `gateway_calls` records ([`GatewayCall`]), and the outcomes of the calls only a two-step
//! connector makes ([`Prepared`], [`CancelOutcome`]).

use std::time::Duration;

use crate::domain::outcome::GatewayOutcome;
use crate::domain::{CallOperation, GatewayCallRecord, IdempotencyKey, PaymentAttemptId};

/// What cancelling the gateway object stored for an attempt came to
/// ([`crate::gateway::GatewayClient::cancel_object`]): the proof behind every "not charged" a Stripe
/// attempt with a stored PaymentIntent may announce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The object is canceled and can never charge: "not charged" is proven.
    Canceled { charge_id: String },
    /// It had already charged: adopt that.
    Succeeded { charge_id: String },
    /// It is processing at the gateway and may still charge: the attempt stays `unknown`.
    Processing { charge_id: String },
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
    pub fn charge_id(&self) -> Option<&str> {
        match self {
            Self::Canceled { charge_id }
            | Self::Succeeded { charge_id }
            | Self::Processing { charge_id } => Some(charge_id),
            Self::Unproven { .. } => None,
        }
    }
}

impl GatewayCall<CancelOutcome> {
    /// This cancel's `gateway_calls` row, for the attempt whose stored key is `stored_key`,
    /// made on try `try_number` under `lease_token` (none for a person's), started at
    /// `started_at` by the database's clock.
    pub fn evidence(
        &self,
        payment_attempt_id: PaymentAttemptId,
        stored_key: &IdempotencyKey,
        try_number: i32,
        lease_token: Option<crate::domain::LeaseToken>,
        started_at: time::OffsetDateTime,
    ) -> GatewayCallRecord {
        GatewayCallRecord {
            payment_attempt_id,
            operation: self.operation,
            idempotency_key: self.sent_key.clone().unwrap_or_else(|| stored_key.clone()),
            try_number,
            lease_token,
            started_at,
            finished_at: started_at + self.elapsed,
            http_status: self.http_status,
            outcome: self.outcome.label().to_owned(),
            gateway_charge_id: self.outcome.charge_id().map(str::to_owned),
            error: match &self.outcome {
                CancelOutcome::Unproven { reason } => Some(reason.clone()),
                _ => self.error.clone(),
            },
        }
    }
}

/// What the first step of a two-step charge came to ([`crate::gateway::GatewayClient::prepare`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// The gateway holds an object that cannot charge until it is confirmed; its id must be
    /// stored (fenced) before the charging call.
    Object { id: String },
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
    pub(super) fn answered_locally(
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
    pub(super) fn refused_locally(
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
