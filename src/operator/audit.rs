//! `audit list` and `GET /api/audit`: every manual action — who, when, through what, what,
//! on which attempts, why, and what came of it — newest first, paged by a cursor.
//!
//! The rows are written by the actions themselves (`resolve`, `recheck`, `dlq replay`,
//! `bulk`), in the same transaction as their database write; this module only reads them.

use serde::Serialize;
use time::OffsetDateTime;

use super::table::{self, Table};
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

/// The aligned table of `audit list`.
pub fn render_list(page: &AuditPage, now: OffsetDateTime) -> String {
    if page.entries.is_empty() {
        return "no manual actions recorded\n".to_owned();
    }
    let mut t = Table::new(&[
        "ID", "AT", "ACTOR", "VIA", "ACTION", "ATTEMPTS", "OUTCOME", "REASON",
    ]);
    for e in &page.entries {
        let attempts = match (e.payment_attempt_ids.as_slice(), e.dlq_sequence) {
            ([], Some(seq)) => format!("dlq #{seq}"),
            ([one], Some(seq)) => format!("{one} (dlq #{seq})"),
            ([], None) => "-".to_owned(),
            ([one], None) => one.to_string(),
            (many, _) => format!("{} attempts", many.len()),
        };
        t.push(vec![
            e.id.to_string(),
            table::at_relative(e.at, now),
            table::cell(&e.actor, 32),
            e.via.to_string(),
            e.action.to_string(),
            attempts,
            e.outcome.clone(),
            table::cell(e.reason.as_deref().unwrap_or("-"), 60),
        ]);
    }
    let mut out = format!(
        "{}{} action{} (newest first; details: audit list --json)\n",
        t.render(),
        page.entries.len(),
        if page.entries.len() == 1 { "" } else { "s" }
    );
    if let Some(next) = &page.next {
        out.push_str(&format!("older: audit list --before {next}\n"));
    }
    out
}
