//! `attempts cancel`, `POST /api/attempts/{id}/cancel` and the console's cancel: a person
//! stops a pending attempt that must not be charged (issue 39, decision 144).
//!
//! Only an attempt the gateway has never seen can be cancelled, and the database decides
//! whether it still is one, in the one guarded statement that cancels it
//! (`crate::store::cancel`): a cancel and an executor's claim race on the row's lock, and
//! exactly one wins. A cancelled attempt is `expired` (never sent to the gateway, final),
//! announced by its `payment-expired` event with who cancelled it and why.

use time::OffsetDateTime;
use uuid::Uuid;

use super::resolve::ResolveError;
use crate::domain::{AttemptStatus, PaymentAttemptId};
use crate::format;
use crate::store::audit::Via;
use crate::store::cancel::{self as sql, CancelOutcome, Cancellation};
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
    /// Always `expired`: final, never sent to the gateway
    pub status: AttemptStatus,
    pub actor: String,
    /// The `payment-expired` event queued in the outbox (the relay publishes it)
    pub event_id: Uuid,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub cancelled_at: OffsetDateTime,
}

impl Cancelled {
    /// One line saying what changed.
    pub fn summary(&self) -> String {
        format!(
            "attempt {}: pending -> expired, cancelled before it was sent (by {}); event payment-expired {} queued for publishing",
            self.payment_attempt_id, self.actor, self.event_id
        )
    }
}

/// Most characters kept of an operator's reason.
const MAX_REASON_CHARS: usize = 1000;

/// Cancels attempt `id` on behalf of `actor` (acting through `via`) if it is pending and was
/// never sent to the gateway; otherwise refuses with why and changes nothing. The audit row
/// is written in the cancel's transaction.
pub async fn cancel(
    store: &Store,
    id: PaymentAttemptId,
    reason: &str,
    actor: &str,
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
    let outcome = sql::cancel_pending_attempt(
        store,
        &Cancellation {
            payment_attempt_id: id,
            reason,
            actor,
            via,
        },
    )
    .await?;
    match outcome {
        CancelOutcome::Cancelled { event_id, at } => {
            tracing::info!(payment_attempt_id = %id, actor, reason, "pending attempt cancelled by an operator");
            Ok(Cancelled {
                payment_attempt_id: id,
                status: AttemptStatus::Expired,
                actor: actor.to_owned(),
                event_id,
                cancelled_at: at,
            })
        }
        CancelOutcome::NotFound => Err(ResolveError::NotFound(id)),
        CancelOutcome::NotPending { status } => Err(ResolveError::Refused(refusal(id, status))),
        CancelOutcome::SentBefore { first_dispatched_at } => Err(ResolveError::Refused(format!(
            "refusing to cancel attempt {id}: it was sent to the gateway at {} and waits for a retry under the same key, \
             so a charge may still land; only an attempt never sent can be cancelled. Let it settle, or resolve it once it is in review",
            format::at(first_dispatched_at)
        ))),
        CancelOutcome::HasGatewayObject { gateway_object_id } => Err(ResolveError::Refused(format!(
            "refusing to cancel attempt {id}: the gateway holds PaymentIntent {gateway_object_id} for it, which must be cancelled \
             at the gateway first (proof it can never charge); let the executor settle it, or resolve it once it is in review"
        ))),
    }
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
