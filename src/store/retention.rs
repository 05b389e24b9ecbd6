//! The history retention's SQL: the month partitions of `attempt_transitions`,
//! `gateway_calls` and `outbox` (decision 85), created ahead and
//! dropped whole once past `purge.history_retention`.
//!
//! A row is *kept* — never dropped, whatever its age — while its attempt is not final or
//! changed after the cutoff, and, in the outbox, while it is unpublished. Dropping a month
//! detaches it, copies its kept rows into the DEFAULT partition (their month is no longer
//! covered) in one short transaction that locks only
//! the history table, then drops it ([`drop_partition`]): a failure before the detach
//! commits leaves the month attached and whole. Rows in DEFAULT (kept ones, and
//! rows written while no month covered them) are deleted row by row once they are no longer
//! kept. DDL names come from the catalog or from [`HistoryTable`], never from input.
//!
//! Creating, attaching, detaching and dropping a month take the owner's rights, which the
//! runtime role `serve` runs as does not have: each of those steps is a function of the
//! schema that runs as its owner and refuses every table but a month of a history table
//! (the `onecharge_history_*` functions of the baseline migration, docs/decisions/160-setup-migrates-as-the-owner-serve-only-checks.md). Reading, counting
//! and copying rows is done here, with the caller's own rights.

use std::time::{Duration, Instant};

use time::OffsetDateTime;

use crate::domain::AttemptStatus;
use crate::store::Store;

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

    /// The columns that identify a row (unique within the table) and lead an index of it,
    /// so that a kept row is found by one index probe: the attempt and the id from its
    /// sequence (`…_attempt_idx`; these tables have no primary key, decision 170), the event
    /// id (`outbox_pkey`).
    fn row_key(self) -> &'static [&'static str] {
        match self {
            Self::Transitions | Self::GatewayCalls => &["payment_attempt_id", "id"],
            Self::Outbox => &["event_id"],
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
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Partition {
    pub name: String,
    #[sqlx(rename = "lower")]
    pub from: Option<OffsetDateTime>,
    #[sqlx(rename = "upper")]
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
    sqlx::query_as(
        "SELECT c.relname::text AS name,
                (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']+)''\\)'))[1]::timestamptz AS lower,
                (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]::timestamptz AS upper
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = $1::regclass
         ORDER BY lower NULLS LAST, name",
    )
    .bind(table.name())
    .fetch_all(store.pool())
    .await
}

/// Makes sure the DEFAULT partition exists, so that an insert no month covers never fails.
pub async fn ensure_default_partition(
    store: &Store,
    table: HistoryTable,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT onecharge_history_ensure_default($1)")
        .bind(table.name())
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Creates the partition `[from, to)` named `name` and moves into it, in the same
/// statement, the rows DEFAULT holds for that range (written while no month covered them);
/// says how many moved. The new table is filled before it is attached, so PostgreSQL never
/// refuses the range because DEFAULT holds rows of it, and it is granted what its table is.
pub async fn create_partition(
    store: &Store,
    table: HistoryTable,
    name: &str,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> Result<u64, sqlx::Error> {
    let moved: i64 = sqlx::query_scalar("SELECT onecharge_history_create_month($1, $2, $3, $4)")
        .bind(table.name())
        .bind(name)
        .bind(from)
        .bind(to)
        .fetch_one(store.pool())
        .await?;
    Ok(moved as u64)
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

/// What dropping one month did, and what it cost the table's writers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    pub count: RowCount,
    /// Transactions it took to have the lock within [`DROP_LOCK_TIMEOUT`] (1 when the first
    /// did).
    pub tries: u32,
    /// How long the transaction that had the lock ran: the longest a writer of the table
    /// waited on it once it had the lock.
    pub held: Duration,
}

/// How long the detaching transaction waits for the history table's lock before it gives
/// up and tries again. While it waits, every writer of that table queues behind it, so this
/// bounds how long a writer waits on retention for the lock; once had, the lock is held for
/// [`Dropped::held`] (the catalog change and the copy of the kept rows by key).
pub const DROP_LOCK_TIMEOUT: Duration = Duration::from_millis(20);

/// How many times the detaching transaction tries for the lock before the pass gives up on
/// this month (the next pass tries again), and the pause between tries: a transaction of the
/// table that outlasts the timeout (a relay batch waiting for its publish acks) is let
/// through before the next try.
const DROP_TRIES: u32 = 100;
const DROP_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Drops `partition` so that no writer waits on it for more than [`DROP_LOCK_TIMEOUT`] and
/// one short transaction, and says how many rows it held and kept.
///
/// 1. Under no lock a writer waits on (reads only): count its rows and note, in a temporary
///    table, the keys of the rows that must be kept — the slow part, a scan of the whole
///    month joined with the attempts.
/// 2. One short transaction with `lock_timeout` = [`DROP_LOCK_TIMEOUT`]: detach the month
///    (ACCESS EXCLUSIVE on the history table, never a lock on `payment_attempts`: the
///    history has no foreign key to it, decision 101)
///    and copy the noted rows that are still kept into DEFAULT, each looked up by its key.
///    A failure leaves the month attached and whole; a lock not
///    had in time (55P03) rolls back and tries again after a pause.
/// 3. Drop the detached month, which no one else uses. A month left detached by a crash
///    between 2 and 3 already had its kept rows copied: the next pass drops it
///    ([`drop_detached_months`]).
///
/// The kept set can only shrink between 1 and 2 (an event gets published, an attempt
/// becomes final; a final attempt never changes), and a month past retention is written no
/// more, so re-checking the noted rows under the lock keeps exactly what must be kept.
pub async fn drop_partition(
    store: &Store,
    table: HistoryTable,
    partition: &str,
    cutoff: OffsetDateTime,
) -> Result<Dropped, sqlx::Error> {
    let quoted_partition = quoted(partition);
    let key = table
        .row_key()
        .iter()
        .map(|column| format!("t.{column} AS kept_{column}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut conn = store.pool().acquire().await?;
    sqlx::query("DROP TABLE IF EXISTS pg_temp.retention_kept")
        .execute(&mut *conn)
        .await?;
    let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {quoted_partition}"))
        .fetch_one(&mut *conn)
        .await?;
    sqlx::query(&format!(
        "CREATE TEMPORARY TABLE retention_kept AS
         SELECT {key} FROM {quoted_partition} t JOIN payment_attempts a USING (payment_attempt_id)
         WHERE {kept}",
        kept = table.kept()
    ))
    .bind(cutoff)
    .bind(final_states())
    .execute(&mut *conn)
    .await?;
    sqlx::query("ANALYZE pg_temp.retention_kept")
        .execute(&mut *conn)
        .await?;

    let mut tries = 0;
    let copied = loop {
        tries += 1;
        let started = Instant::now();
        match detach_and_copy_kept(&mut conn, table, partition, cutoff).await {
            Ok(kept) => break Ok((kept, started.elapsed())),
            Err(err) if is_lock_not_available(&err) && tries < DROP_TRIES => {
                tracing::debug!(
                    table = table.name(),
                    tries,
                    "detaching a history month waited too long for its lock; trying again"
                );
                tokio::time::sleep(DROP_RETRY_PAUSE).await;
            }
            Err(err) => break Err(err),
        }
    };
    let forgotten = sqlx::query("DROP TABLE IF EXISTS pg_temp.retention_kept")
        .execute(&mut *conn)
        .await;
    let (kept, held) = copied?;
    forgotten?;
    drop_detached_month(&mut conn, table, partition).await?;
    Ok(Dropped {
        count: RowCount {
            rows: rows as u64,
            kept,
        },
        tries,
        held,
    })
}

/// Step 2 of [`drop_partition`]: one transaction, its locks had within
/// [`DROP_LOCK_TIMEOUT`] or not at all. The noted rows are looked up one by one by their key
/// (the `OFFSET 0` keeps the planner from turning the lookups into a scan of the month while
/// the table is locked). They are written into the DEFAULT partition itself, not through
/// the table: they are the same rows again, which the outbox's statement triggers must not
/// take for new events (their final states are recorded, and their queue rows for the relay
/// still name them by the same key, decision 171).
async fn detach_and_copy_kept(
    conn: &mut sqlx::PgConnection,
    table: HistoryTable,
    partition: &str,
    cutoff: OffsetDateTime,
) -> Result<u64, sqlx::Error> {
    let (parent, default) = (table.name(), table.default_partition());
    let found = table
        .row_key()
        .iter()
        .map(|column| format!("p.{column} = k.kept_{column}"))
        .collect::<Vec<_>>()
        .join(" AND ");
    let mut tx = sqlx::Connection::begin(conn).await?;
    sqlx::query(&format!(
        "SET LOCAL lock_timeout = '{}ms'",
        DROP_LOCK_TIMEOUT.as_millis()
    ))
    .execute(&mut *tx)
    .await?;
    sqlx::query("SELECT onecharge_history_detach_month($1, $2)")
        .bind(parent)
        .bind(partition)
        .execute(&mut *tx)
        .await?;
    let partition = quoted(partition);
    let kept = sqlx::query(&format!(
        "INSERT INTO {default}
         SELECT t.* FROM pg_temp.retention_kept k
         CROSS JOIN LATERAL (SELECT * FROM {partition} p WHERE {found} OFFSET 0) t
         JOIN payment_attempts a USING (payment_attempt_id)
         WHERE {kept}",
        kept = table.kept()
    ))
    .bind(cutoff)
    .bind(final_states())
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(kept)
}

/// Drops the months of `table` that a pass detached (and copied the kept rows of) but did
/// not get to drop; their names. Only retention detaches a month, and a month is created
/// attached in one transaction, so a month-named table that is not a partition is one of
/// those.
pub async fn drop_detached_months(
    store: &Store,
    table: HistoryTable,
) -> Result<Vec<String>, sqlx::Error> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c
         WHERE c.relkind = 'r' AND NOT c.relispartition
           AND c.relnamespace = current_schema()::regnamespace
           AND c.relname ~ ('^' || $1 || '_p[0-9]{6}$')",
    )
    .bind(table.name())
    .fetch_all(store.pool())
    .await?;
    let mut conn = store.pool().acquire().await?;
    for name in &names {
        drop_detached_month(&mut conn, table, name).await?;
    }
    Ok(names)
}

/// Drops `partition`, a month of `table` that is no longer attached.
async fn drop_detached_month(
    conn: &mut sqlx::PgConnection,
    table: HistoryTable,
    partition: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT onecharge_history_drop_month($1, $2)")
        .bind(table.name())
        .bind(partition)
        .execute(conn)
        .await?;
    Ok(())
}

/// SQLSTATE 55P03: a lock not had within `lock_timeout`.
fn is_lock_not_available(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03"))
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
