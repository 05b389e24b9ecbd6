//! History retention, part of `onecharge purge` and of the `purge` role of `serve`:
//! `attempt_transitions`, `gateway_calls` and `outbox` are partitioned by calendar month
//! (UTC), and a month goes as a whole once it ends before `now - purge.history_retention`.
//!
//! Each pass, per table: the DEFAULT partition exists; the current month and the next
//! [`MONTHS_AHEAD`] exist (rows DEFAULT holds for them move in); every month past the cutoff
//! is dropped, its kept rows copied into DEFAULT first, in the same transaction; rows in
//! DEFAULT past the cutoff and no longer kept are deleted. A row is kept while its attempt is
//! not final or changed after the cutoff, and, in the outbox, while it is unpublished
//! (`crate::store::retention`). A dry run creates, moves and drops nothing and reports what
//! would go. `payment_attempts` is never touched: it is the dedupe evidence of the business
//! key and the ledger of what was charged.

use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;
use time::{Date, Month, OffsetDateTime, Time};

use crate::format;
use crate::store::retention::{self as sql, HistoryTable, Partition};
use crate::store::Store;

/// Months created ahead of the current one, so that a `serve` that stops purging for up to
/// two months still writes into month partitions (and after that, into DEFAULT, which the
/// next pass empties into the new months).
pub const MONTHS_AHEAD: u32 = 2;

/// One month partition dropped (or, dry, that would be).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DroppedPartition {
    pub partition: String,
    /// Rows it held.
    pub rows: u64,
    /// Of those, rows copied into DEFAULT because they must be kept.
    pub kept: u64,
}

/// What one pass did to one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableRetention {
    pub table: &'static str,
    /// Month partitions created.
    pub created: Vec<String>,
    /// Rows moved from DEFAULT into a created month.
    pub moved_from_default: u64,
    pub dropped: Vec<DroppedPartition>,
    /// Rows deleted from DEFAULT (dry: that would be).
    pub deleted_from_default: u64,
}

/// What one history retention pass did (or, dry, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryReport {
    pub dry_run: bool,
    /// Months ending at or before this go.
    #[serde(with = "time::serde::rfc3339")]
    pub cutoff: OffsetDateTime,
    pub tables: Vec<TableRetention>,
}

/// One retention pass over the three history tables at `now`.
pub async fn retain_history(
    store: &Store,
    retention: Duration,
    dry_run: bool,
    now: OffsetDateTime,
) -> anyhow::Result<HistoryReport> {
    let cutoff = now - retention;
    let mut tables = Vec::new();
    for table in HistoryTable::ALL {
        let report = retain_table(store, table, dry_run, now, cutoff)
            .await
            .with_context(|| format!("history retention of {}", table.name()))?;
        if !dry_run {
            record_metrics(&report);
        }
        tables.push(report);
    }
    Ok(HistoryReport {
        dry_run,
        cutoff,
        tables,
    })
}

async fn retain_table(
    store: &Store,
    table: HistoryTable,
    dry_run: bool,
    now: OffsetDateTime,
    cutoff: OffsetDateTime,
) -> anyhow::Result<TableRetention> {
    let mut report = TableRetention {
        table: table.name(),
        created: Vec::new(),
        moved_from_default: 0,
        dropped: Vec::new(),
        deleted_from_default: 0,
    };
    if !dry_run {
        sql::ensure_default_partition(store, table).await?;
        for name in sql::drop_detached_months(store, table).await? {
            tracing::warn!(table = table.name(), partition = %name, "dropped a history month an interrupted pass had detached (its kept rows were already copied)");
        }
        let existing = sql::partitions(store, table).await?;
        for (from, to) in months_ahead(now, MONTHS_AHEAD) {
            if existing.iter().any(|p| overlaps(p, from, to)) {
                continue;
            }
            let name = table.month_partition(from);
            report.moved_from_default += sql::create_partition(store, table, &name, from, to)
                .await
                .with_context(|| format!("creating partition {name}"))?;
            tracing::info!(table = table.name(), partition = %name, "history partition created");
            report.created.push(name);
        }
    }
    for partition in sql::partitions(store, table).await? {
        if partition.to.is_none_or(|to| to > cutoff) {
            continue;
        }
        let count = if dry_run {
            sql::count_partition(store, table, &partition.name, cutoff).await?
        } else {
            let dropped = sql::drop_partition(store, table, &partition.name, cutoff)
                .await
                .with_context(|| format!("dropping partition {}", partition.name))?;
            tracing::info!(
                table = table.name(),
                partition = %partition.name,
                rows = dropped.count.rows,
                kept = dropped.count.kept,
                tries = dropped.tries,
                lock_held_ms = dropped.held.as_secs_f64() * 1000.0,
                "history partition dropped; its kept rows moved to the default partition"
            );
            dropped.count
        };
        report.dropped.push(DroppedPartition {
            partition: partition.name,
            rows: count.rows,
            kept: count.kept,
        });
    }
    report.deleted_from_default = if dry_run {
        sql::count_expired_default_rows(store, table, cutoff).await?
    } else {
        sql::delete_expired_default_rows(store, table, cutoff).await?
    };
    Ok(report)
}

fn record_metrics(report: &TableRetention) {
    let table = report.table;
    let rows: u64 = report.dropped.iter().map(|d| d.rows - d.kept).sum();
    let kept: u64 = report.dropped.iter().map(|d| d.kept).sum();
    metrics::counter!("onecharge_history_partitions_dropped_total", "table" => table)
        .increment(report.dropped.len() as u64);
    metrics::counter!("onecharge_history_rows_dropped_total", "table" => table)
        .increment(rows + report.deleted_from_default);
    metrics::counter!("onecharge_history_rows_kept_total", "table" => table).increment(kept);
}

/// True when `partition` covers part of `[from, to)`; DEFAULT covers nothing.
fn overlaps(partition: &Partition, from: OffsetDateTime, to: OffsetDateTime) -> bool {
    match (partition.from, partition.to) {
        (Some(lower), Some(upper)) => lower < to && from < upper,
        (None, Some(upper)) => from < upper,
        (Some(lower), None) => lower < to,
        (None, None) => false,
    }
}

/// The month containing `now` and the `ahead` after it, as `[start, end)` in UTC.
pub fn months_ahead(now: OffsetDateTime, ahead: u32) -> Vec<(OffsetDateTime, OffsetDateTime)> {
    let mut start = month_start(now);
    let mut months = Vec::new();
    for _ in 0..=ahead {
        let end = next_month(start);
        months.push((start, end));
        start = end;
    }
    months
}

fn month_start(at: OffsetDateTime) -> OffsetDateTime {
    let at = at.to_offset(time::UtcOffset::UTC);
    Date::from_calendar_date(at.year(), at.month(), 1)
        .expect("the first of a month exists")
        .with_time(Time::MIDNIGHT)
        .assume_utc()
}

fn next_month(start: OffsetDateTime) -> OffsetDateTime {
    let (year, month) = match start.month() {
        Month::December => (start.year() + 1, Month::January),
        month => (start.year(), month.next()),
    };
    Date::from_calendar_date(year, month, 1)
        .expect("the first of a month exists")
        .with_time(Time::MIDNIGHT)
        .assume_utc()
}

impl HistoryReport {
    /// One line per table for the operator.
    pub fn summary(&self, retention: Duration) -> String {
        let (dry, drop, delete) = if self.dry_run {
            ("dry run: ", "would drop", "would delete")
        } else {
            ("", "dropped", "deleted")
        };
        let mut lines = Vec::new();
        for t in &self.tables {
            let gone: u64 = t.dropped.iter().map(|d| d.rows - d.kept).sum();
            let kept: u64 = t.dropped.iter().map(|d| d.kept).sum();
            let names: Vec<&str> = t.dropped.iter().map(|d| d.partition.as_str()).collect();
            let mut line = format!(
                "{dry}history {table}: {drop} {n} month partition{s}{names}: {gone} rows gone, {kept} kept (attempt not final or event unpublished) in {table}_default; {delete} {d} expired rows from {table}_default",
                table = t.table,
                n = t.dropped.len(),
                s = if t.dropped.len() == 1 { "" } else { "s" },
                names = if names.is_empty() { String::new() } else { format!(" ({})", names.join(", ")) },
                d = t.deleted_from_default,
            );
            if !t.created.is_empty() {
                line.push_str(&format!(
                    "; created {} ({} rows moved in from {}_default)",
                    t.created.join(", "),
                    t.moved_from_default,
                    t.table
                ));
            }
            line.push_str(&format!(
                "; months ending before {} go (purge.history_retention {})",
                format::at(self.cutoff),
                days(retention)
            ));
            lines.push(line);
        }
        lines.join("\n")
    }
}

/// A retention in whole days as `400d`, anything else as the settings print it.
fn days(retention: Duration) -> String {
    if retention.as_secs().is_multiple_of(86_400) && retention.subsec_nanos() == 0 {
        format!("{}d", retention.as_secs() / 86_400)
    } else {
        format::setting(retention)
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn months_ahead_start_at_the_current_utc_month_and_cross_the_year() {
        let months = months_ahead(datetime!(2026-11-30 23:30 -02:00), 2);
        assert_eq!(
            months,
            vec![
                (
                    datetime!(2026-12-01 0:00 UTC),
                    datetime!(2027-01-01 0:00 UTC)
                ),
                (
                    datetime!(2027-01-01 0:00 UTC),
                    datetime!(2027-02-01 0:00 UTC)
                ),
                (
                    datetime!(2027-02-01 0:00 UTC),
                    datetime!(2027-03-01 0:00 UTC)
                ),
            ]
        );
    }

    #[test]
    fn the_default_partition_overlaps_no_month_and_a_month_overlaps_itself_only() {
        let month = |from, to| Partition {
            name: "p".into(),
            from: Some(from),
            to: Some(to),
        };
        let (from, to) = (
            datetime!(2027-01-01 0:00 UTC),
            datetime!(2027-02-01 0:00 UTC),
        );
        assert!(overlaps(&month(from, to), from, to));
        assert!(!overlaps(
            &month(datetime!(2026-12-01 0:00 UTC), from),
            from,
            to
        ));
        assert!(!overlaps(
            &month(to, datetime!(2027-03-01 0:00 UTC)),
            from,
            to
        ));
        let default = Partition {
            name: "d".into(),
            from: None,
            to: None,
        };
        assert!(!overlaps(&default, from, to));
    }
}
