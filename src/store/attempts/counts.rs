//! Attempts per status, kept by the database instead of counted (decision 91; the
//! baseline migration's `attempt_status_count_*`). Triggers on `payment_attempts` append, in the writer's own
//! transaction, one delta per status a statement changed to `attempt_status_count_deltas`;
//! [`fold`] moves the deltas into `attempt_status_counts`; [`read`] adds both.
//!
//! Invariants:
//! - **Exact, never estimated**: the triggers commit or roll back with the write they count,
//!   a fold moves deltas and counts in one transaction, and [`read`] is one statement, so it
//!   sees one snapshot: the figures equal `count(*) … GROUP BY status` at that snapshot.
//! - **No hot row for writers**: writers only insert deltas (no key, no update), so they never
//!   wait on each other or on a fold. Folds never wait for each other: one runs at a time (a
//!   transaction-level advisory lock, tried, not awaited), and a fold adds to the counts
//!   exactly the deltas it deleted, with `ON CONFLICT DO UPDATE`, in one transaction.

use crate::store::Store;

/// Moves every committed delta into the folded counts, in one transaction. Readers call it
/// before they read (`store::reads::attempts::count_by_status`), so the deltas stay as few as the
/// last few seconds' writes and a read stays one small scan, whichever roles a deployment
/// runs. One fold at a time: a fold that finds another running (every admin instance's
/// gauges fold every few seconds) leaves the deltas to it instead of queueing behind its row
/// locks; the read after it is exact either way.
pub async fn fold(store: &Store) -> Result<(), sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let alone: bool = sqlx::query_scalar(
        "SELECT pg_try_advisory_xact_lock(hashtextextended('onecharge.attempt_status_counts', 0))",
    )
    .fetch_one(&mut *tx)
    .await?;
    if !alone {
        return tx.rollback().await;
    }
    sqlx::query(
        "WITH moved AS (DELETE FROM attempt_status_count_deltas RETURNING status, n)
         INSERT INTO attempt_status_counts AS counts (status, n)
         SELECT status, sum(n) FROM moved GROUP BY status ORDER BY status
         ON CONFLICT (status) DO UPDATE SET n = counts.n + excluded.n",
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// The attempts in each status that has any, ordered by status: the folded counts plus the
/// deltas not folded yet, in one statement. A status whose count is 0 is absent, as it was
/// when the table itself was counted.
pub async fn read(store: &Store) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT status, sum(n)::bigint FROM (
             SELECT status, n FROM attempt_status_counts
             UNION ALL
             SELECT status, n FROM attempt_status_count_deltas
         ) parts
         GROUP BY status HAVING sum(n) <> 0 ORDER BY status",
    )
    .fetch_all(store.pool())
    .await
}
