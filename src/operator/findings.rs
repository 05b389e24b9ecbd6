//! Reconciliation findings for a person (docs/contract.md §5, §6): `findings resolve`,
//! `POST /api/findings/{id}/resolve` and the console's page all call [`resolve`]; the
//! listings read the store's readers (`crate::store::findings`) directly.

use serde::Serialize;

use crate::config::UsageError;
use crate::domain::Actor;
use crate::store::audit::{AuditAction, NewAuditEntry, Via};
use crate::store::findings::{self, EarlierFinding, Finding, FindingResolved};
use crate::store::Store;

/// One finding with its history: the other findings about the same charge (earlier
/// aftermaths and what became of them, or later ones), oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindingDetail {
    #[serde(flatten)]
    pub finding: Finding,
    pub history: Vec<EarlierFinding>,
}

/// Finding `id` with its history (`findings show`, the console's finding page).
pub async fn show(store: &Store, id: i64) -> Result<Option<FindingDetail>, sqlx::Error> {
    let Some(finding) = findings::get(store, id).await? else {
        return Ok(None);
    };
    let history = findings::history(store, &finding).await?;
    Ok(Some(FindingDetail { finding, history }))
}

/// The longest resolution the table keeps (its `CHECK`), in characters.
pub const MAX_REASON_CHARS: usize = 1000;

/// `reason` trimmed, or why the table cannot take it (empty, over [`MAX_REASON_CHARS`], or
/// holding a NUL): what [`resolve`] checks first, and what a face that asks for a
/// confirmation checks before asking.
pub fn checked_reason(reason: &str) -> Result<&str, UsageError> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON_CHARS {
        return Err(UsageError(
            "--reason: say what was done, in 1 to 1000 characters".into(),
        ));
    }
    super::recordable("--reason", reason).map_err(UsageError)?;
    Ok(reason)
}

/// Resolves finding `id` as `actor` through `via` with `reason`; audited in the same
/// transaction. A reason the table cannot take (empty, over 1,000 characters, or holding a
/// NUL) is refused as a [`UsageError`], before anything is written, so that every face
/// answers it as the caller's mistake.
pub async fn resolve(
    store: &Store,
    id: i64,
    actor: &Actor,
    via: Via,
    reason: &str,
) -> anyhow::Result<FindingResolved> {
    let reason = checked_reason(reason)?;
    let resolved = findings::resolve(store, id, actor, reason, |finding| NewAuditEntry {
        actor: actor.to_owned(),
        via,
        action: AuditAction::ResolveFinding,
        payment_attempt_ids: finding.payment_attempt_id.into_iter().collect(),
        dlq_sequence: None,
        reason: Some(reason.to_owned()),
        outcome: "resolved",
        detail: serde_json::json!({
            "finding_id": finding.id,
            "class": finding.class,
            "gateway_ids": finding.gateway_ids,
            "reference": finding.reference,
        }),
    })
    .await?;
    crate::reconciler::sweep::refresh_findings_gauge(store).await;
    Ok(resolved)
}
