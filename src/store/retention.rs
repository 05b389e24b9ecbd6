//! The history retention's SQL: the month partitions of `attempt_transitions`,
//! `gateway_calls` and `outbox` (migration `…_partitioned_history`), created ahead and
//! dropped whole once past `purge.history_retention`.
//!
//! A row is *kept* — never dropped, whatever its age — while its attempt is not final or
//! changed after the cutoff, and, in the outbox, while it is unpublished. Dropping a month
//! detaches it, copies its kept rows back into the parent (their month is no longer
//! covered, so they land in the DEFAULT partition) and drops it, in one transaction: a
//! failure anywhere leaves the month attached and whole. Rows in DEFAULT (kept ones, and
//! rows written while no month covered them) are deleted row by row once they are no longer
//! kept. DDL names come from the catalog or from [`HistoryTable`], never from input.

use sqlx::Row as _;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::Store;
use crate::domain::AttemptStatus;

/// A table whose history is partitioned by month and retained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryTable {
    Transitions,
    GatewayCalls,
    Outbox,
}

impl HistoryTable {
    pub const ALL: [HistoryTable; 3] = [Self::Transitions, Self::GatewayCalls, Self::Outbox];

    /// The table's name, also the prefix of its partitions' names.
    pub fn name(self) -> &'static str {
        match self {
            Self::Transitions => "attempt_transitions",
            Self::GatewayCalls => "gateway_calls",
            Self::Outbox => "outbox",
        }
    }

    /// The partition key: when the row was written.
    fn key(self) -> &'static str {
        match self {
            Self::Transitions => "at",
            Self::GatewayCalls => "started_at",
            Self::Outbox => "created_at",
        }
    }

    /// The DEFAULT partition, where rows go that no month covers.
    pub fn default_partition(self) -> String {
        format!("{}_default", self.name())
    }

    /// The partition of the month starting at `from`.
    pub fn month_partition(self, from: OffsetDateTime) -> String {
        format!(
            "{}_p{:04}{:02}",
            self.name(),
            from.year(),
            u8::from(from.month())
        )
    }

    /// True for a row (`t`, its attempt `a`) that must outlive the cutoff `$1`; `$2` is the
    /// final states.
    fn kept(self) -> &'static str {
        match self {
            Self::Outbox => "(t.published_at IS NULL OR a.status <> ALL($2) OR a.updated_at >= $1)",
            Self::Transitions | Self::GatewayCalls => "(a.status <> ALL($2) OR a.updated_at >= $1)",
        }
    }
}

/// The states after which an attempt never changes again.
fn final_states() -> Vec<&'static str> {
    AttemptStatus::ALL
        .into_iter()
        .filter(|s| s.is_final())
        .map(AttemptStatus::as_str)
        .collect()
}

/// One partition of a history table; `from`/`to` are `None` for DEFAULT (and for a bound
/// that is not a timestamp, such as `MAXVALUE`, which retention never drops).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    pub from: Option<OffsetDateTime>,
    pub to: Option<OffsetDateTime>,
}

/// Rows of a partition (or of DEFAULT) and how many of them are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowCount {
    pub rows: u64,
    pub kept: u64,
}

/// The table's partitions, oldest first (DEFAULT last). The bounds are read back as
/// timestamps by PostgreSQL itself, so the session time zone cannot skew them.
pub async fn partitions(store: &Store, table: HistoryTable) -> Result<Vec<Partition>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT c.relname::text AS name,
                (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']+)''\\)'))[1]::timestamptz AS lower,
                (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]::timestamptz AS upper
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = $1::regclass
         ORDER BY lower NULLS LAST, name",
    )
    .bind(table.name())
    .fetch_all(store.pool())
    .await?;
    rows.iter()
        .map(|row| {
            Ok(Partition {
                name: row.try_get("name")?,
                from: row.try_get("lower")?,
                to: row.try_get("upper")?,
            })
        })
        .collect()
}

/// Makes sure the DEFAULT partition exists, so that an insert no month covers never fails.
pub async fn ensure_default_partition(
    store: &Store,
    table: HistoryTable,
) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {} PARTITION OF {} DEFAULT",
        table.default_partition(),
        table.name()
    ))
    .execute(store.pool())
    .await?;
    Ok(())
}

/// Creates the partition `[from, to)` named `name` and moves into it, in the same
/// transaction, the rows DEFAULT holds for that range (written while no month covered them);
/// says how many moved. The new table is filled before it is attached, so PostgreSQL never
/// refuses the range because DEFAULT holds rows of it.
pub async fn create_partition(
    store: &Store,
    table: HistoryTable,
    name: &str,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> Result<u64, sqlx::Error> {
    let (parent, default, key) = (table.name(), table.default_partition(), table.key());
    let (name, from, to) = (quoted(name), rfc3339(from), rfc3339(to));
    let mut tx = store.pool().begin().await?;
    sqlx::query(&format!(
        "CREATE TABLE {name} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
    ))
    .execute(&mut *tx)
    .await?;
    let moved = sqlx::query(&format!(
        "WITH moved AS (
             DELETE FROM {default} WHERE {key} >= '{from}' AND {key} < '{to}' RETURNING *
         )
         INSERT INTO {name} SELECT * FROM moved"
    ))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query(&format!(
        "ALTER TABLE {parent} ATTACH PARTITION {name} FOR VALUES FROM ('{from}') TO ('{to}')"
    ))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(moved)
}

/// What dropping `partition` would do at `cutoff`: its rows and how many would be kept.
pub async fn count_partition(
    store: &Store,
    table: HistoryTable,
    partition: &str,
    cutoff: OffsetDateTime,
) -> Result<RowCount, sqlx::Error> {
    let (rows, kept): (i64, i64) = sqlx::query_as(&format!(
        "SELECT count(*), count(*) FILTER (WHERE {kept})
         FROM {partition} t JOIN payment_attempts a USING (payment_attempt_id)",
        partition = quoted(partition),
        kept = table.kept()
    ))
    .bind(cutoff)
    .bind(final_states())
    .fetch_one(store.pool())
    .await?;
    Ok(RowCount {
        rows: rows as u64,
        kept: kept as u64,
    })
}

/// Drops `partition` in one transaction: detaches it, copies its kept rows back into the
/// table (they land in DEFAULT), drops it. Detaching locks the whole table for the
/// transaction, which copies only the kept rows; the pool's `lock_timeout` bounds the wait
/// for writers ahead of it.
pub async fn drop_partition(
    store: &Store,
    table: HistoryTable,
    partition: &str,
    cutoff: OffsetDateTime,
) -> Result<RowCount, sqlx::Error> {
    let (parent, partition) = (table.name(), quoted(partition));
    let mut tx = store.pool().begin().await?;
    sqlx::query(&format!(
        "ALTER TABLE {parent} DETACH PARTITION {partition}"
    ))
    .execute(&mut *tx)
    .await?;
    let kept = sqlx::query(&format!(
        "INSERT INTO {parent}
         SELECT t.* FROM {partition} t JOIN payment_attempts a USING (payment_attempt_id)
         WHERE {kept}",
        kept = table.kept()
    ))
    .bind(cutoff)
    .bind(final_states())
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {partition}"))
        .fetch_one(&mut *tx)
        .await?;
    sqlx::query(&format!("DROP TABLE {partition}"))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(RowCount {
        rows: rows as u64,
        kept,
    })
}

/// Rows in DEFAULT older than `cutoff` that are no longer kept (what
/// [`delete_expired_default_rows`] would delete).
pub async fn count_expired_default_rows(
    store: &Store,
    table: HistoryTable,
    cutoff: OffsetDateTime,
) -> Result<u64, sqlx::Error> {
    let count: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {default} t JOIN payment_attempts a USING (payment_attempt_id)
         WHERE t.{key} < $1 AND NOT {kept}",
        default = table.default_partition(),
        key = table.key(),
        kept = table.kept()
    ))
    .bind(cutoff)
    .bind(final_states())
    .fetch_one(store.pool())
    .await?;
    Ok(count as u64)
}

/// Deletes the rows in DEFAULT older than `cutoff` that are no longer kept: the kept rows
/// of months dropped earlier whose attempts have since become final and old.
pub async fn delete_expired_default_rows(
    store: &Store,
    table: HistoryTable,
    cutoff: OffsetDateTime,
) -> Result<u64, sqlx::Error> {
    let deleted = sqlx::query(&format!(
        "DELETE FROM {default} t USING payment_attempts a
         WHERE a.payment_attempt_id = t.payment_attempt_id AND t.{key} < $1 AND NOT {kept}",
        default = table.default_partition(),
        key = table.key(),
        kept = table.kept()
    ))
    .bind(cutoff)
    .bind(final_states())
    .execute(store.pool())
    .await?
    .rows_affected();
    Ok(deleted)
}

/// `name` as a quoted identifier: partition names are read from the catalog.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339)
        .expect("a partition bound is a representable time")
}
