//! CSV export of a search (issue 39, decision 146): what `GET /api/attempts.csv` and the
//! console's "Download CSV" answer, the attempts one filter of `attempts list` finds.
//!
//! Bounded, never cut: the rows are read a page at a time (the listing's own keyset pages,
//! each served by an index) up to [`EXPORT_CAP`]; a filter that finds more is refused whole,
//! saying so, rather than answering a file that silently misses rows. Quoting is the `csv`
//! crate's (RFC 4180), and a cell a spreadsheet would run as a formula is defused.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::attempts::{self, AttemptFilter, AttemptView};
use super::RetryWindow;
use crate::store::Store;

/// The most attempts one export holds.
pub const EXPORT_CAP: usize = 10_000;

/// Rows read from the database at a time.
const READ_PAGE: usize = 1_000;

/// The columns, in order.
pub const COLUMNS: [&str; 20] = [
    "payment_attempt_id",
    "status",
    "order_id",
    "customer_id",
    "amount_minor",
    "currency",
    "payment_method",
    "description",
    "tries",
    "requested_at",
    "created_at",
    "updated_at",
    "first_dispatched_at",
    "gateway_charge_id",
    "decline_code",
    "review_reason",
    "last_error",
    "idempotency_key",
    "next_action_by",
    "next_action",
];

/// Why an export was not made.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// More attempts match than one export holds: nothing is answered.
    #[error("more than {EXPORT_CAP} attempts match: one export holds at most {EXPORT_CAP}; narrow the search (a status, created_after/created_before) and export each part")]
    TooMany,
    #[error("database error: {0}")]
    Store(#[from] sqlx::Error),
    #[error("writing the CSV: {0}")]
    Csv(#[from] csv::Error),
}

/// The attempts `filter` finds (from `filter.before` on), newest first, as CSV with a header
/// row; refused whole past [`EXPORT_CAP`].
pub async fn attempts_csv(
    store: &Store,
    filter: &AttemptFilter,
    now: OffsetDateTime,
    window: &RetryWindow,
) -> Result<Vec<u8>, ExportError> {
    let mut found: Vec<AttemptView> = Vec::new();
    let mut filter = filter.clone();
    loop {
        let page = attempts::page(store, &filter, READ_PAGE, now, window).await?;
        found.extend(page.items);
        if found.len() > EXPORT_CAP {
            return Err(ExportError::TooMany);
        }
        match page.next {
            Some(next) => filter.before = Some(next),
            None => break,
        }
    }
    write_csv(&found)
}

/// The CSV of `attempts`, header first.
pub fn write_csv(attempts: &[AttemptView]) -> Result<Vec<u8>, ExportError> {
    let mut out = csv::Writer::from_writer(Vec::new());
    out.write_record(COLUMNS)?;
    for view in attempts {
        let a = &view.attempt;
        let time =
            |t: Option<OffsetDateTime>| t.and_then(|t| t.format(&Rfc3339).ok()).unwrap_or_default();
        let text = |t: Option<&str>| defused(t.unwrap_or_default());
        out.write_record([
            a.payment_attempt_id.to_string(),
            a.status.as_str().to_owned(),
            defused(&a.order_id),
            defused(&a.customer_id),
            a.money.amount_minor().to_string(),
            defused(a.money.currency().code()),
            defused(&a.payment_method),
            text(a.description.as_deref()),
            a.tries.to_string(),
            time(a.requested_at),
            time(Some(a.created_at)),
            time(Some(a.updated_at)),
            time(a.first_dispatched_at),
            text(a.gateway_charge_id.as_deref()),
            text(a.decline_code.as_deref()),
            text(a.review_reason.as_deref()),
            text(a.last_error.as_deref()),
            a.idempotency_key.to_string(),
            view.next_action.by.as_str().to_owned(),
            defused(&view.next_action.action),
        ])?;
    }
    out.into_inner()
        .map_err(|err| ExportError::Csv(err.into_error().into()))
}

/// A cell as a spreadsheet shows it, never as a formula it runs: text from producers or the
/// gateway that starts with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading
/// `'` (OWASP's advice for CSV injection). Everything else is written as it is.
fn defused(cell: &str) -> String {
    if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{cell}")
    } else {
        cell.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_a_spreadsheet_would_run_is_defused_and_others_are_kept() {
        assert_eq!(
            defused("=HYPERLINK(\"http://x\")"),
            "'=HYPERLINK(\"http://x\")"
        );
        assert_eq!(defused("+1"), "'+1");
        assert_eq!(defused("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(defused("ord_1001"), "ord_1001");
        assert_eq!(defused(""), "");
    }
}
