//! `attempts cancel`, `POST /api/attempts/{id}/cancel` and the console's cancel: a person
//! stops a pending attempt that must not be charged (issue 39, decision 144).
//!
//! An attempt the gateway has never seen is cancelled by one guarded statement
//! (`crate::store::attempts::cancel`): a cancel and an executor's claim race on the row's lock, and
//! exactly one wins. It becomes `expired` (never sent to the gateway, final), announced by
//! its `payment-expired` event with who cancelled it and why.
//!
//! A pending attempt that holds a Stripe PaymentIntent (prepared, or sent before and
//! waiting for its retry) is cancelled only once "not charged" is proven (decision 163):
//! held from the executor first, then its PaymentIntent cancelled at the gateway and seen
//! `canceled`, then declined under the hold (`operator_cancelled`). A §3 attempt sent before
//! has nothing at the gateway to cancel, and its retry may still charge: refused.

use time::OffsetDateTime;
use uuid::Uuid;

use super::resolve::ResolveError;
use crate::domain::{Actor, AttemptStatus, PaymentAttemptId};
use crate::format;
use crate::gateway::{CancelOutcome, GatewayClient};
use crate::store::attempts::cancel::{
    self as sql, CancelHold, CancelRecorded, Cancellation, CANCEL_HOLD,
};
use crate::store::attempts::record_gateway_call_alone;
use crate::store::audit::Via;
use crate::store::Store;

/// The body of `POST /api/attempts/{id}/cancel`.
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Why it must not be charged: recorded on the transition, the event and the audit row
    pub reason: String,
}

/// A cancel that was applied.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Cancelled {
    #[schema(value_type = uuid::Uuid)]
    pub payment_attempt_id: PaymentAttemptId,
    /// `expired` (never sent to the gateway), or `declined` (its PaymentIntent was cancelled
    /// at the gateway first); final either way
    pub status: AttemptStatus,
    /// The PaymentIntent cancelled at the gateway before the attempt was declined
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_object_cancelled: Option<String>,
    #[schema(value_type = String)]
    pub actor: Actor,
    /// The `payment-expired` or `payment-declined` event queued in the outbox (the relay
    /// publishes it)
    pub event_id: Uuid,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub cancelled_at: OffsetDateTime,
}

impl Cancelled {
    /// One line saying what changed.
    pub fn summary(&self) -> String {
        match &self.gateway_object_cancelled {
            None => format!(
                "attempt {}: pending -> expired, cancelled before it was sent (by {}); event payment-expired {} queued for publishing",
                self.payment_attempt_id, self.actor, self.event_id
            ),
            Some(intent) => format!(
                "attempt {}: pending -> declined (operator_cancelled), after PaymentIntent {intent} was cancelled at the gateway (by {}); event payment-declined {} queued for publishing",
                self.payment_attempt_id, self.actor, self.event_id
            ),
        }
    }
}

/// Most characters kept of an operator's reason.
const MAX_REASON_CHARS: usize = 1000;

/// Cancels attempt `id` on behalf of `actor` (acting through `via`) if it is pending: one
/// never sent becomes `expired`; one holding a PaymentIntent becomes `declined` once
/// `gateway` has cancelled the PaymentIntent. Otherwise refuses with why and changes
/// nothing. The audit row is written in the move's transaction.
pub async fn cancel(
    store: &Store,
    gateway: Option<&GatewayClient>,
    id: PaymentAttemptId,
    reason: &str,
    actor: &Actor,
    via: Via,
) -> Result<Cancelled, ResolveError> {
    super::recordable("--reason", reason).map_err(ResolveError::Invalid)?;
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(ResolveError::Invalid(
            "--reason must say why it must not be charged (it is recorded with the cancel)".into(),
        ));
    }
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(ResolveError::Invalid(
            "--reason is longer than 1000 characters".into(),
        ));
    }
    let cancellation = Cancellation {
        payment_attempt_id: id,
        reason,
        actor,
        via,
    };
    match sql::cancel_pending_attempt(store, &cancellation).await? {
        CancelRecorded::Cancelled { event_id, at } => {
            tracing::info!(payment_attempt_id = %id, actor = %actor, reason, "pending attempt cancelled by an operator");
            Ok(Cancelled {
                payment_attempt_id: id,
                status: AttemptStatus::Expired,
                gateway_object_cancelled: None,
                actor: actor.to_owned(),
                event_id,
                cancelled_at: at,
            })
        }
        CancelRecorded::NotFound => Err(ResolveError::NotFound(id)),
        CancelRecorded::NotPending { status } => Err(ResolveError::Refused(refusal(id, status))),
        CancelRecorded::ClaimedMeanwhile => Err(claimed_meanwhile(id)),
        CancelRecorded::SentBefore { first_dispatched_at } => {
            cancel_at_the_gateway_first(store, gateway, &cancellation)
                .await?
                .ok_or_else(|| ResolveError::Refused(format!(
                    "refusing to cancel attempt {id}: it was sent to the gateway at {} and waits for a retry under the same key, \
                     so a charge may still land, and the gateway keeps nothing onecharge could cancel first (only a Stripe \
                     PaymentIntent can be). Let it settle, or resolve it once it is in review",
                    format::at(first_dispatched_at)
                )))
        }
        CancelRecorded::HasGatewayObject { .. } => {
            cancel_at_the_gateway_first(store, gateway, &cancellation)
                .await?
                .ok_or_else(|| ResolveError::Refused(format!(
                    "refusing to cancel attempt {id}: it moved while it was being cancelled; look at it again"
                )))
        }
    }
}

/// The cancel of a pending attempt that holds a PaymentIntent: held from the executor,
/// the PaymentIntent cancelled at the gateway (recorded in `gateway_calls` whatever it
/// answered), and declined under the hold only when the gateway says `canceled`. `None`
/// when the attempt holds nothing to cancel (the caller refuses with why).
async fn cancel_at_the_gateway_first(
    store: &Store,
    gateway: Option<&GatewayClient>,
    cancellation: &Cancellation<'_>,
) -> Result<Option<Cancelled>, ResolveError> {
    let id = cancellation.payment_attempt_id;
    let attempt = match sql::hold_for_gateway_cancel(store, id, CANCEL_HOLD).await? {
        CancelHold::Held(attempt) => attempt,
        CancelHold::NotFound => return Err(ResolveError::NotFound(id)),
        CancelHold::NotPending(status) => return Err(ResolveError::Refused(refusal(id, status))),
        CancelHold::NoGatewayObject => return Ok(None),
    };
    let token = attempt.lease_token;
    let Some(intent) = attempt.gateway_object_id.clone() else {
        return Ok(None);
    };
    let refuse = |why: String| async move {
        sql::release_hold(store, id, token).await?;
        Err(ResolveError::Refused(why))
    };
    let cancel = match gateway {
        Some(gateway) => {
            // The cancel's record is stamped by the database's clock, like the write after it.
            let now = store.now().await?;
            match gateway.cancel_object(&attempt.idempotency_key, Some(&intent)).await {
                Some(cancel) => {
                    record_gateway_call_alone(store, &attempt.cancel_evidence(&cancel, now))
                        .await?;
                    cancel.outcome
                }
                None => {
                    return refuse(format!(
                        "refusing to cancel attempt {id}: PaymentIntent {intent} must be cancelled at the gateway first (proof that \
                         it can never charge), and this process's gateway client is `{}`, which cannot cancel it: cancel with the \
                         settings of the gateway that made it (gateway_kind = stripe). Nothing changed",
                        gateway.kind().as_str()
                    ))
                    .await
                }
            }
        }
        None => {
            return refuse(format!(
                "refusing to cancel attempt {id}: PaymentIntent {intent} must be cancelled at the gateway first (proof that it \
                 can never charge), and this process has no gateway client: cancel through `onecharge attempts cancel` with the \
                 gateway settings, or a process that runs the executor or the reconciler. Nothing changed"
            ))
            .await
        }
    };
    match cancel {
        CancelOutcome::Canceled { .. } => {}
        CancelOutcome::Succeeded { charge_id } => {
            return refuse(format!(
                "refusing to cancel attempt {id}: PaymentIntent {charge_id} has succeeded at the gateway, so the customer was \
                 charged; its next try adopts that charge (given back to the executor now)"
            ))
            .await
        }
        CancelOutcome::Processing { charge_id } => {
            return refuse(format!(
                "refusing to cancel attempt {id}: PaymentIntent {charge_id} is processing at the gateway and may still charge; \
                 nothing changed: let it settle"
            ))
            .await
        }
        CancelOutcome::Unproven { reason } => {
            return refuse(format!(
                "refusing to cancel attempt {id}: PaymentIntent {intent} could not be cancelled, so it could still charge \
                 ({reason}); nothing changed: try again"
            ))
            .await
        }
    }
    match sql::decline_held_attempt(store, cancellation, token, &intent).await? {
        CancelRecorded::Cancelled { event_id, at } => {
            tracing::info!(payment_attempt_id = %id, actor = %cancellation.actor, reason = cancellation.reason,
                payment_intent = %intent, "pending attempt cancelled by an operator after its PaymentIntent was cancelled");
            Ok(Some(Cancelled {
                payment_attempt_id: id,
                status: AttemptStatus::Declined,
                gateway_object_cancelled: Some(intent.to_string()),
                actor: cancellation.actor.to_owned(),
                event_id,
                cancelled_at: at,
            }))
        }
        CancelRecorded::NotFound => Err(ResolveError::NotFound(id)),
        CancelRecorded::NotPending { status } => Err(ResolveError::Refused(refusal(id, status))),
        _ => Err(claimed_meanwhile(id)),
    }
}

/// The refusal of a cancel whose hold someone else's move overtook.
fn claimed_meanwhile(id: PaymentAttemptId) -> ResolveError {
    ResolveError::Refused(format!(
        "attempt {id} was moved by someone else (an executor once the hold ran out, another person's cancel) while it was \
         being cancelled: nothing was written; look at it again"
    ))
}

/// Why an attempt in `status` cannot be cancelled.
fn refusal(id: PaymentAttemptId, status: AttemptStatus) -> String {
    let why = match status {
        AttemptStatus::InFlight => {
            "an executor has claimed it and may be calling the gateway right now: its outcome decides"
        }
        AttemptStatus::Unknown => {
            "it was sent and the gateway may have charged: the reconciler is finding out"
        }
        AttemptStatus::NeedsReview => {
            "it was sent and is in review: resolve it (`attempts resolve --as declined` proves it was not charged)"
        }
        AttemptStatus::Succeeded | AttemptStatus::Declined | AttemptStatus::Expired => {
            "it is final and never changes again"
        }
        AttemptStatus::Pending => "an executor claimed and handed it back meanwhile: look again",
    };
    format!(
        "refusing to cancel attempt {id}: it is {status}, not a pending attempt never sent ({why})"
    )
}
