//! A person's settlement of a refund nobody could settle automatically (issue 51, decision
//! 233): `refunds resolve <id> --as succeeded|failed --reason R`, `POST
//! /api/refunds/{refund_id}/resolve`, the console's form on a refund in review.
//!
//! Check, then act, as `attempts resolve`: the refund is claimed (in `needs_review`, or
//! `succeeded` when the gateway later failed it), the gateway is read under that claim, and
//! only a choice the gateway's answer bears out is written, fenced by the claim, with the
//! lookup's evidence, the person's audit row and the refund's one event of its new state,
//! in one transaction. `failed` gives the reserved amount back, so the charge can be
//! refunded under a new `refund_id`.

use serde::{Deserialize, Serialize};

use crate::domain::refund_call::{self, evidence, RefundResolution};
use crate::domain::{Actor, RefundId, RefundStatus};
use crate::gateway::{GatewayClient, RefundRequest};
use crate::store::audit::{AuditAction, NewAuditEntry, Via};
use crate::store::refunds as sql;
use crate::store::refunds::reads;
use crate::store::Store;

/// What the person established (`--as`; `"as"` in the API body).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RefundResolveAs {
    /// The gateway refunded it (its refund for this refund_id succeeded)
    Succeeded,
    /// The gateway did not refund it, or its refund failed: the amount goes back to the
    /// charge for a refund under a new refund_id
    Failed,
}

/// A resolution as the CLI, the API or the console received it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundResolveRequest {
    #[serde(rename = "as")]
    pub as_: RefundResolveAs,
    /// Why (1 to 1000 characters): stored with the refund's move and in the audit trail
    pub reason: String,
}

/// Why a resolution was not applied: `Invalid` is the caller's (exit 2 / 400), `NotFound`
/// 404, `Refused` the refund's state or the gateway's word (exit 1 / 409), `Unavailable`
/// no gateway to check with (exit 1 / 503), `Store` a failure (exit 1 / 500).
#[derive(Debug, thiserror::Error)]
pub enum RefundResolveError {
    #[error("{0}")]
    Invalid(String),
    #[error("no refund {0}")]
    NotFound(RefundId),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("database error: {0}")]
    Store(#[from] sqlx::Error),
}

/// A resolution that was applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RefundResolved {
    #[schema(value_type = uuid::Uuid)]
    pub refund_id: RefundId,
    /// The state it was in.
    #[schema(value_type = String)]
    pub from: String,
    /// `succeeded` or `failed`.
    #[schema(value_type = String)]
    pub status: String,
    /// The gateway's refund, when it names one.
    pub gateway_refund_id: Option<String>,
    #[schema(value_type = String)]
    pub actor: Actor,
    /// The audit row of this decision.
    pub audit_id: i64,
}

impl RefundResolved {
    /// One line saying what changed.
    pub fn summary(&self) -> String {
        format!(
            "refund {}: {} -> {} (by {}, audit row {}); its refund-{} event is queued for publishing{}",
            self.refund_id,
            self.from,
            self.status,
            self.actor,
            self.audit_id,
            self.status,
            if self.status == "failed" {
                "; its amount is back on the charge, which can be refunded under a new refund_id"
            } else {
                ""
            }
        )
    }
}

/// Most characters kept of a person's reason.
const MAX_REASON_CHARS: usize = 1000;

/// Resolves refund `refund_id` as `request` says, on behalf of `actor` acting through `via`,
/// once `gateway` bears it out.
pub async fn resolve(
    store: &Store,
    gateway: Option<&GatewayClient>,
    refund_id: RefundId,
    request: &RefundResolveRequest,
    actor: &Actor,
    via: Via,
) -> Result<RefundResolved, RefundResolveError> {
    crate::operator::recordable("reason", &request.reason).map_err(RefundResolveError::Invalid)?;
    let reason = request.reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON_CHARS {
        return Err(RefundResolveError::Invalid(format!(
            "a reason of 1 to {MAX_REASON_CHARS} characters is required: it is stored with the refund and in the audit trail"
        )));
    }
    let Some(gateway) = gateway else {
        return Err(RefundResolveError::Unavailable(
            "no gateway client is configured here, and a refund is resolved only after the gateway is read: set the gateway settings and try again".into(),
        ));
    };
    let Some(held) = sql::claim_for_resolution(store, refund_id).await? else {
        return Err(match reads::get_refund(store, refund_id).await? {
            None => RefundResolveError::NotFound(refund_id),
            Some(refund) => RefundResolveError::Refused(format!(
                "refund {refund_id} is {}: only a refund in needs_review (or a succeeded one the gateway has since failed) is resolved by a person{}",
                refund.status,
                match refund.status {
                    RefundStatus::Unknown | RefundStatus::Processing | RefundStatus::InFlight | RefundStatus::Pending =>
                        "; the refund worker is still settling this one",
                    _ => "",
                }
            )),
        });
    };
    let resolution = match request.as_ {
        RefundResolveAs::Succeeded => RefundResolution::Succeeded,
        RefundResolveAs::Failed => RefundResolution::Failed,
    };
    if held.status == RefundStatus::Succeeded && resolution == RefundResolution::Succeeded {
        return Err(RefundResolveError::Refused(format!(
            "refund {refund_id} is already succeeded"
        )));
    }
    let now = held.database_time();
    let started_at = now();
    let call = gateway.lookup_refund(&RefundRequest::from(&held)).await;
    let next = refund_call::resolve(&held, resolution, &call.outcome, reason).map_err(|why| {
        RefundResolveError::Refused(format!(
            "refusing to resolve refund {refund_id} as {}: {why}",
            match resolution {
                RefundResolution::Succeeded => "succeeded",
                RefundResolution::Failed => "failed",
            }
        ))
    })?;
    let evidence = evidence(&held, &call, call.outcome.label(), started_at, &next);
    let to = next.status();
    let gateway_refund_id = match &next {
        refund_call::RefundMove::Succeeded { gateway_refund_id } => Some(gateway_refund_id.clone()),
        refund_call::RefundMove::Failed {
            gateway_refund_id, ..
        } => gateway_refund_id.clone(),
        _ => None,
    }
    .or(held.gateway_refund_id.clone());
    let audit = NewAuditEntry {
        actor: actor.to_owned(),
        via,
        action: AuditAction::ResolveRefund,
        payment_attempt_ids: vec![held.payment_attempt_id],
        dlq_sequence: None,
        reason: Some(reason.to_owned()),
        outcome: "applied",
        detail: serde_json::json!({
            "refund_id": refund_id,
            "from": held.status.as_str(),
            "to": to.as_str(),
            "gateway_refund_id": gateway_refund_id,
            "amount_minor": held.money.amount_minor(),
            "currency": held.money.currency(),
            "gateway_answer": call.outcome.label(),
        }),
    };
    let Some(audit_id) = sql::resolve(store, &held, &next, actor, &evidence, &audit).await? else {
        return Err(RefundResolveError::Refused(format!(
            "refund {refund_id} was moved by someone else while the gateway was read: nothing was changed; look at it again"
        )));
    };
    tracing::info!(%refund_id, to = to.as_str(), actor = %actor, "a person resolved a refund");
    crate::metrics::refund_moved(to);
    Ok(RefundResolved {
        refund_id,
        from: held.status.as_str().to_owned(),
        status: to.as_str().to_owned(),
        gateway_refund_id,
        actor: actor.to_owned(),
        audit_id,
    })
}
