//! `audit list` and `GET /api/audit`: every manual action — who, when, through what, what,
//! on which attempts, why, and what came of it — newest first, paged by a cursor.
//!
//! The rows are written by the actions themselves (`resolve`, `recheck`, `dlq replay`,
//! `bulk`), in the same transaction as their database write; this module only reads them.

use serde::Serialize;

pub use crate::store::audit::{AuditAction, AuditEntry, AuditFilter, Via};
use crate::store::Store;

/// One page of the trail, and the cursor of the next (`None` on the last page).
#[derive(Debug, Clone, Serialize)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    /// Pass as `before` (`--before`) for the next, older page.
    pub next: Option<String>,
}

/// Rows matching `filter` (its `before_id` is the cursor), newest first, at most `limit`
/// (0: all).
pub async fn list(
    store: &Store,
    filter: &AuditFilter,
    limit: usize,
) -> Result<AuditPage, sqlx::Error> {
    let limit = super::sql_limit(limit);
    let entries = crate::store::audit::list(store, filter, limit).await?;
    let next = super::next_cursor(&entries, limit, |last| last.id.to_string());
    Ok(AuditPage { entries, next })
}

/// An audit cursor (`before`): the id of the last row of the previous page.
pub fn parse_cursor(text: &str) -> Result<i64, String> {
    text.trim()
        .parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| format!("`{text}` is not an audit cursor (the `next` of the previous page)"))
}
