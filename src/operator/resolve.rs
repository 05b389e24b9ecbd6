//! `attempts resolve` and `POST /api/attempts/{id}/resolve`: a person's decision on an
//! attempt nobody could settle automatically.
//!
//! Only `needs_review` attempts can be resolved, and a retry only inside the gateway's key
//! window: once the gateway may have forgotten the key, sending the charge again could charge
//! the customer a second time, so onecharge refuses and says why. Both rules are in the one
//! guarded SQL statement that makes the change (`crate::store::reads::attempts::resolve_attempt`).

use crate::domain::GatewayChargeId;
use std::fmt;

use serde::Deserialize;
use uuid::Uuid;

use super::RetryWindow;
use crate::domain::{Actor, AttemptStatus, LeaseToken, PaymentAttemptId};
use crate::format;
use crate::gateway::{CancelOutcome, GatewayClient};
use crate::store::attempts::record_gateway_call_alone;
use crate::store::audit::Via;
use crate::store::reads::attempts::{
    self as sql, claim_for_decision, DecisionClaim, OperatorDecision, ResolveOutcome, ResolveTarget,
};
use crate::store::Store;

/// What the operator established (`--as`; `"as"` in the API body).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResolveAs {
    /// The gateway charged the customer (needs the gateway's charge id)
    Succeeded,
    /// The customer was not charged
    Declined,
    /// Send the charge again with the same idempotency key (only inside the key window)
    Retry,
}

/// One decision as the CLI or the API received it, not yet validated.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    #[serde(rename = "as")]
    pub as_: ResolveAs,
    pub reason: String,
    #[serde(default)]
    pub gateway_charge_id: Option<String>,
    #[serde(default)]
    pub decline_code: Option<String>,
}

/// Why a decision was not applied. The CLI and the API branch on the variant: `Invalid` is
/// the caller's mistake (exit 2 / 400), `NotFound` 404, `Refused` the attempt's state
/// (exit 1 / 409), `Store` a failure (exit 1 / 500).
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{0}")]
    Invalid(String),
    #[error("no payment attempt {0}")]
    NotFound(PaymentAttemptId),
    #[error("{0}")]
    Refused(String),
    #[error("database error: {0}")]
    Store(#[from] sqlx::Error),
}

/// A decision that was applied.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Resolved {
    #[schema(value_type = uuid::Uuid)]
    pub payment_attempt_id: PaymentAttemptId,
    pub status: AttemptStatus,
    #[schema(value_type = String)]
    pub actor: Actor,
    /// The event queued in the outbox for a final state (the relay publishes it).
    pub event_id: Option<Uuid>,
}

impl Resolved {
    /// One line saying what changed.
    pub fn summary(&self) -> String {
        let mut line = format!(
            "attempt {}: needs_review -> {} (by {})",
            self.payment_attempt_id, self.status, self.actor
        );
        match (self.event_id, self.status.event_name()) {
            (Some(event), Some(name)) => line.push_str(&format!(
                "; event payment-{name} {event} queued for publishing"
            )),
            _ => line.push_str("; the executor sends it again with the same idempotency key"),
        }
        line
    }
}

/// Most characters kept of an operator's reason.
const MAX_REASON_CHARS: usize = 1000;

/// Applies `request` to attempt `id` on behalf of `actor` (acting through `via`), now by the
/// database's clock (a retry's `window` is measured back from it, never from this host's);
/// an applied decision writes its audit row in the same transaction.
///
/// `--as declined` of an attempt whose gateway object could still charge (a stored Stripe
/// PaymentIntent) cancels it through `gateway` first, in this one function every face
/// (CLI, API, console, bulk) calls: only a `canceled` answer lets the decision through; a
/// PaymentIntent that succeeded or is processing, or no answer, refuses it and changes
/// nothing. Check, then act: the attempt is claimed in `needs_review` before the cancel is
/// sent (an attempt in any other state is refused with nothing asked of the gateway), and
/// the decision is written only under that claim.
#[allow(clippy::too_many_arguments)]
pub async fn resolve(
    store: &Store,
    gateway: Option<&GatewayClient>,
    id: PaymentAttemptId,
    request: &ResolveRequest,
    actor: &Actor,
    via: Via,
    window: &RetryWindow,
) -> Result<Resolved, ResolveError> {
    let target = match validate(request)? {
        ResolveTarget::Succeeded { gateway_charge_id } => ResolveTarget::Succeeded {
            gateway_charge_id: own_charge(store, gateway, id, gateway_charge_id).await?,
        },
        other => other,
    };
    let reason = request.reason.trim();
    let claim = match target {
        ResolveTarget::Declined { .. } => Some(cancel_before_declining(store, gateway, id).await?),
        _ => None,
    };
    let outcome = sql::resolve_attempt(
        store,
        &OperatorDecision {
            payment_attempt_id: id,
            target,
            reason,
            actor,
            via,
            window: *window,
            claim,
        },
    )
    .await?;
    match outcome {
        ResolveOutcome::Resolved { status, event_id } => {
            tracing::info!(payment_attempt_id = %id, %status, actor = %actor, reason, "attempt resolved by an operator");
            Ok(Resolved {
                payment_attempt_id: id,
                status,
                actor: actor.to_owned(),
                event_id,
            })
        }
        ResolveOutcome::NotFound => Err(ResolveError::NotFound(id)),
        ResolveOutcome::NotInReview { status } => Err(not_in_review(id, status)),
        ResolveOutcome::ClaimedMeanwhile => Err(ResolveError::Refused(format!(
            "attempt {id} was claimed by someone else (a recheck, another operator) while this decision was made: \
             nothing was written; look at it again and decide"
        ))),
        ResolveOutcome::KeyWindowClosed {
            first_dispatched_at,
            idempotency_key,
            now,
        } => Err(ResolveError::Refused(format!(
            "refusing to retry attempt {id}: its first gateway call was at {} ({}), and the key window is {} (gateway_key_retention {} minus gateway_key_retention_margin {}): the gateway may have forgotten key {idempotency_key}; a retry could charge twice. Look the charge up at the gateway (reference {id}) and resolve --as succeeded or --as declined",
            format::at(first_dispatched_at),
            format::relative(first_dispatched_at, now),
            format::setting(window.key_window),
            format::setting(window.key_retention),
            format::setting(window.key_retention_margin),
        ))),
        ResolveOutcome::NotItsPaymentIntent { payment_intent } => Err(not_its_charge(
            id,
            request.gateway_charge_id.as_deref().unwrap_or_default(),
            &payment_intent,
            "",
        )),
        ResolveOutcome::TooOldToRetry { created_at, now } => Err(ResolveError::Refused(format!(
            "refusing to retry attempt {id}: it was recorded at {} ({}), past executor.max_age ({}), so the executor would hand it back to the reconciler without sending it. Look the charge up at the gateway (reference {id}) and resolve --as succeeded or --as declined, or raise executor.max_age",
            format::at(created_at),
            format::relative(created_at, now),
            format::setting(window.max_age),
        ))),
    }
}

/// The charge a person's `--as succeeded` names, checked against the gateway object
/// onecharge created for the attempt (Stripe's PaymentIntent, when one is stored): that
/// PaymentIntent, or its charge (`ch_…`, read from Stripe, and recorded as the
/// PaymentIntent, as every Stripe attempt's charge is). Anything else is another payment, to
/// which a later refund would go: refused with why. An attempt without a stored object (a
/// §3 gateway's) takes the charge as given; the write checks the same again.
async fn own_charge(
    store: &Store,
    gateway: Option<&GatewayClient>,
    id: PaymentAttemptId,
    named: GatewayChargeId,
) -> Result<GatewayChargeId, ResolveError> {
    let Some(intent) =
        crate::store::attempts::gateway_objects::gateway_object_id(store, id).await?
    else {
        return Ok(named);
    };
    if named.as_str() == intent {
        return Ok(named);
    }
    if !named.as_str().starts_with("ch_") {
        return Err(not_its_charge(id, &named, &intent, ""));
    }
    let Some(read) = (match gateway {
        Some(gateway) => gateway.latest_charge_of(&intent).await,
        None => None,
    }) else {
        return Err(ResolveError::Refused(format!(
            "refusing to resolve attempt {id} as succeeded with charge {named}: onecharge created PaymentIntent {intent} for it, \
             and this process cannot ask Stripe whether {named} is that PaymentIntent's charge (no stripe client): \
             resolve with --gateway-charge-id {intent}, or with the gateway settings (gateway_kind = stripe)"
        )));
    };
    match read.outcome {
        Ok(Some(charge)) if charge == named.as_str() => {
            Ok(GatewayChargeId::from_gateway(intent))
        }
        Ok(charge) => Err(not_its_charge(
            id,
            &named,
            &intent,
            &format!(
                " (its charge is {})",
                charge.as_deref().unwrap_or("none yet")
            ),
        )),
        Err(why) => Err(ResolveError::Refused(format!(
            "refusing to resolve attempt {id} as succeeded with charge {named}: Stripe could not be asked whether it is the charge of \
             PaymentIntent {intent}, which onecharge created for it ({why}); nothing changed: try again, or resolve with --gateway-charge-id {intent}"
        ))),
    }
}

/// The refusal of a success under a charge that is not the attempt's own PaymentIntent.
fn not_its_charge(
    id: PaymentAttemptId,
    named: &str,
    intent: &str,
    its_charge: &str,
) -> ResolveError {
    ResolveError::Refused(format!(
        "refusing to resolve attempt {id} as succeeded with charge {named}: onecharge created PaymentIntent {intent} for this attempt{its_charge}, \
         and {named} is neither it nor its charge; a later refund would be sent to {named}, another payment. If the customer paid \
         through {intent}, resolve with --gateway-charge-id {intent}; if through another payment, resolve --as declined and handle \
         that payment outside onecharge"
    ))
}

/// The refusal of a decision about an attempt that is not in review.
fn not_in_review(id: PaymentAttemptId, status: AttemptStatus) -> ResolveError {
    ResolveError::Refused(format!(
        "attempt {id} is {status}, not needs_review: only attempts in review can be resolved ({})",
        Owner(status)
    ))
}

/// Proves "not charged" before a person's `--as declined` is written: the attempt is
/// claimed in `needs_review` first (refused, with nothing sent, in any other state), then
/// its stored PaymentIntent, if any, is cancelled (`<key>-cancel`) and must come back
/// `canceled`. The cancel is recorded in `gateway_calls` whatever it answered. Returns the
/// claim's token, which the decision's write must still hold.
async fn cancel_before_declining(
    store: &Store,
    gateway: Option<&GatewayClient>,
    id: PaymentAttemptId,
) -> Result<LeaseToken, ResolveError> {
    let attempt = match claim_for_decision(store, id).await? {
        DecisionClaim::Claimed(attempt) => attempt,
        DecisionClaim::NotFound => return Err(ResolveError::NotFound(id)),
        DecisionClaim::NotInReview(status) => return Err(not_in_review(id, status)),
    };
    let lease_token = attempt.lease_token;
    let Some(object) = attempt.gateway_object_id.as_deref() else {
        return Ok(lease_token);
    };
    let Some(gateway) = gateway else {
        return Err(ResolveError::Refused(format!(
            "refusing to decline attempt {id}: PaymentIntent {object} must be cancelled first (proof that it can never charge), \
             and this process has no gateway client: resolve through `onecharge attempts resolve` with the gateway settings, \
             or a process that runs the executor or the reconciler"
        )));
    };
    // The cancel's record is stamped by the database's clock, like the decision after it.
    let now = store.now().await?;
    let Some(cancel) = gateway
        .cancel_object(&attempt.idempotency_key, Some(object))
        .await
    else {
        // The client speaks a connector that has no such object (an operator's settings
        // without `gateway_kind = stripe`): nothing proves the PaymentIntent cannot charge.
        return Err(ResolveError::Refused(format!(
            "refusing to decline attempt {id}: PaymentIntent {object} must be cancelled first (proof that it can never charge), \
             and this process's gateway client is `{}`, which cannot cancel it: resolve with the settings of the gateway that \
             made it (gateway_kind = stripe)",
            gateway.kind().as_str()
        )));
    };
    let evidence = attempt.cancel_evidence(&cancel, now);
    record_gateway_call_alone(store, &evidence).await?;
    match cancel.outcome {
        CancelOutcome::Canceled { .. } => Ok(lease_token),
        CancelOutcome::Succeeded { charge_id } => Err(ResolveError::Refused(format!(
            "refusing to decline attempt {id}: PaymentIntent {charge_id} has succeeded at the gateway, so the customer was charged; \
             resolve --as succeeded --gateway-charge-id {charge_id}"
        ))),
        CancelOutcome::Processing { charge_id } => Err(ResolveError::Refused(format!(
            "refusing to decline attempt {id}: PaymentIntent {charge_id} is processing at the gateway and may still charge; \
             wait for it to settle and recheck"
        ))),
        CancelOutcome::Unproven { reason } => Err(ResolveError::Refused(format!(
            "refusing to decline attempt {id}: PaymentIntent {object} could not be cancelled, so it could still charge ({reason}); \
             nothing changed: try again"
        ))),
    }
}

/// Checks what can be checked without the database.
fn validate(request: &ResolveRequest) -> Result<ResolveTarget, ResolveError> {
    let invalid = |why: &str| Err(ResolveError::Invalid(why.to_owned()));
    for (flag, value) in [
        ("--reason", Some(&request.reason)),
        ("--gateway-charge-id", request.gateway_charge_id.as_ref()),
        ("--decline-code", request.decline_code.as_ref()),
    ] {
        if let Some(value) = value {
            super::recordable(flag, value).map_err(ResolveError::Invalid)?;
        }
    }
    let reason = request.reason.trim();
    if reason.is_empty() {
        return invalid("--reason must say why (it is recorded with the decision)");
    }
    if reason.chars().count() > MAX_REASON_CHARS {
        return invalid("--reason is longer than 1000 characters");
    }
    let charge_id = match request.gateway_charge_id.as_deref().map(str::trim) {
        Some("") => return invalid("--gateway-charge-id is empty"),
        Some(id) if id.chars().count() > 255 => {
            return invalid("--gateway-charge-id is longer than 255 characters")
        }
        other => other.map(GatewayChargeId::from_gateway),
    };
    let decline_code = match request.decline_code.as_deref().map(str::trim) {
        Some("") => return invalid("--decline-code is empty"),
        Some(code) if code.chars().count() > 255 => {
            return invalid("--decline-code is longer than 255 characters")
        }
        other => other.map(str::to_owned),
    };
    match request.as_ {
        ResolveAs::Succeeded => {
            if decline_code.is_some() {
                return invalid("--decline-code goes with --as declined, not --as succeeded");
            }
            match charge_id {
                Some(gateway_charge_id) => Ok(ResolveTarget::Succeeded { gateway_charge_id }),
                None => invalid(
                    "--as succeeded needs --gateway-charge-id: the charge the gateway made (look it up by the attempt's idempotency key)",
                ),
            }
        }
        ResolveAs::Declined => Ok(ResolveTarget::Declined {
            gateway_charge_id: charge_id,
            decline_code,
        }),
        ResolveAs::Retry => {
            if charge_id.is_some() || decline_code.is_some() {
                return invalid(
                    "--as retry sends the charge again: --gateway-charge-id and --decline-code do not apply",
                );
            }
            Ok(ResolveTarget::Retry)
        }
    }
}

/// Who owns an attempt in `status`, for the refusal message.
struct Owner(AttemptStatus);

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            AttemptStatus::Pending | AttemptStatus::InFlight => "the executor owns it",
            AttemptStatus::Unknown => "the reconciler owns it",
            AttemptStatus::NeedsReview => "it is in review",
            AttemptStatus::Succeeded | AttemptStatus::Declined | AttemptStatus::Expired => {
                "it is final"
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(as_: ResolveAs) -> ResolveRequest {
        ResolveRequest {
            as_,
            reason: "checked the gateway dashboard".into(),
            gateway_charge_id: None,
            decline_code: None,
        }
    }

    #[test]
    fn succeeded_needs_the_gateway_charge_id() {
        let err = validate(&request(ResolveAs::Succeeded)).unwrap_err();
        assert!(err.to_string().contains("--gateway-charge-id"), "{err}");
        let ok = validate(&ResolveRequest {
            gateway_charge_id: Some("ch_1".into()),
            ..request(ResolveAs::Succeeded)
        })
        .unwrap();
        assert_eq!(
            ok,
            ResolveTarget::Succeeded {
                gateway_charge_id: GatewayChargeId::from_gateway("ch_1")
            }
        );
    }

    #[test]
    fn a_decision_without_a_reason_is_refused() {
        let err = validate(&ResolveRequest {
            reason: "  ".into(),
            ..request(ResolveAs::Declined)
        })
        .unwrap_err();
        assert!(matches!(err, ResolveError::Invalid(_)));
    }

    #[test]
    fn a_retry_takes_no_outcome_fields() {
        let err = validate(&ResolveRequest {
            gateway_charge_id: Some("ch_1".into()),
            ..request(ResolveAs::Retry)
        })
        .unwrap_err();
        assert!(matches!(err, ResolveError::Invalid(_)));
        assert_eq!(
            validate(&request(ResolveAs::Retry)).unwrap(),
            ResolveTarget::Retry
        );
    }
}
