//! `attempts recheck` and `POST /api/attempts/{id}/recheck`: the reconciler's lookup for one
//! `unknown` or `needs_review` attempt, now, on a person's request. The lookup, the decision
//! and the write are the reconciler's own ([`Reconciler::recheck`]); this module turns its
//! answer into what the CLI prints and the API returns.

use crate::domain::{Actor, AttemptStatus, PaymentAttemptId};
pub use crate::reconciler::Recheck;
use crate::reconciler::{RecheckOutcome, Reconciler};
use crate::store::audit::Via;

/// Why a recheck did not happen. `NotFound` is 404; `Refused` (the attempt's state) is
/// exit 2 / 409; `Invalid` the caller's mistake (exit 2 / 400); `Unavailable` (no rate
/// permit within the recheck's bound, saying why) exit 1 / 503; `Failed` exit 1 / 500.
#[derive(Debug, thiserror::Error)]
pub enum RecheckError {
    #[error("no payment attempt {0}")]
    NotFound(PaymentAttemptId),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0:#}")]
    Failed(#[from] anyhow::Error),
}

/// Looks attempt `id` up at the gateway now, on behalf of `actor` through `via`, and
/// settles it when the answer does (see [`Reconciler::recheck`]). Audited.
pub async fn recheck(
    reconciler: &Reconciler,
    id: PaymentAttemptId,
    actor: &Actor,
    via: Via,
    reason: Option<&str>,
) -> Result<Recheck, RecheckError> {
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    if let Some(reason) = reason {
        super::recordable("--reason", reason).map_err(RecheckError::Invalid)?;
    }
    match reconciler.recheck(id, actor, via, reason).await? {
        RecheckOutcome::Done(report) => Ok(report),
        RecheckOutcome::NotFound => Err(RecheckError::NotFound(id)),
        RecheckOutcome::NoPermit(why) => Err(RecheckError::Unavailable(why)),
        RecheckOutcome::WrongState(status) => Err(RecheckError::Refused(refusal(id, status))),
    }
}

fn refusal(id: PaymentAttemptId, status: AttemptStatus) -> String {
    let why = match status {
        AttemptStatus::Pending | AttemptStatus::InFlight => {
            "the executor owns it and has not lost track of its outcome; nothing to look up"
        }
        AttemptStatus::Succeeded | AttemptStatus::Declined | AttemptStatus::Expired => {
            "it is final"
        }
        AttemptStatus::Unknown | AttemptStatus::NeedsReview => "it changed meanwhile",
    };
    format!(
        "attempt {id} is {status}: only unknown and needs_review attempts are rechecked ({why})"
    )
}

/// What `attempts recheck` prints and the console shows.
pub fn render(report: &Recheck) -> String {
    format!(
        "attempt {}: {} -> {}\nlookup: {}{}{}\nfound: {}\ndid: {}\n",
        report.payment_attempt_id,
        report.before,
        report.after,
        report.lookup,
        report
            .http_status
            .map(|s| format!(" (HTTP {s})"))
            .unwrap_or_default(),
        report
            .gateway_charge_id
            .as_deref()
            .map(|c| format!(", charge {c}"))
            .unwrap_or_default(),
        report.found,
        report.did,
    )
}
