//! `audit list` and `GET /api/audit`: every manual action — who, when, through what, what,
//! on which attempts, why, and what came of it — newest first, paged by a cursor.
//!
//! The rows are written by the actions themselves (`resolve`, `recheck`, `dlq replay`,
//! `bulk`), in the same transaction as their database write; this module only reads them.

use super::page::{sql_limit, Page};
pub use crate::store::audit::{AuditAction, AuditEntry, AuditFilter, Via};
use crate::store::Store;

/// One page of the trail, newest first: the next is `before` (`--before`) the id of its
/// last row.
pub type AuditPage = Page<AuditEntry, i64>;

/// Rows matching `filter` (its `before_id` is the cursor), newest first, at most `limit`
/// (0: all).
pub async fn list(
    store: &Store,
    filter: &AuditFilter,
    limit: usize,
) -> Result<AuditPage, sqlx::Error> {
    let limit = sql_limit(limit);
    let entries = crate::store::audit::list(store, filter, limit).await?;
    Ok(Page::of_rows(entries, limit, |last| last.id, |entry| entry))
}

/// An audit cursor (`before`): the id of the last row of the previous page.
pub fn parse_cursor(text: &str) -> Result<i64, String> {
    text.trim()
        .parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| format!("`{text}` is not an audit cursor (the `next` of the previous page)"))
}
