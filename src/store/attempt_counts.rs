//! Attempts per status, kept by the database instead of counted (decision 91; migration
//! `…_attempt_status_counts`). Triggers on `payment_attempts` append, in the writer's own
//! transaction, one delta per status a statement changed to `attempt_status_count_deltas`;
//! [`fold`] moves the deltas into `attempt_status_counts`; [`read`] adds both.
//!
//! Invariants:
//! - **Exact, never estimated**: the triggers commit or roll back with the write they count,
//!   a fold moves deltas and counts in one transaction, and [`read`] is one statement, so it
//!   sees one snapshot: the figures equal `count(*) … GROUP BY status` at that snapshot.
//! - **No hot row for writers**: writers only insert deltas (no key, no update), so they never
//!   wait on each other or on a fold. Folds wait only for each other: a delta row is deleted
//!   by exactly one of them (READ COMMITTED skips rows another fold deleted), and each adds
//!   what it deleted to the counts with `ON CONFLICT DO UPDATE`, which reads the latest count;
//!   counts rows are locked in status order, so two folds cannot deadlock.

use super::Store;

/// Moves every committed delta into the folded counts, in one transaction. Readers call it
/// before they read (`store::operator::count_by_status`), so the deltas stay as few as the
/// last few seconds' writes and a read stays one small scan, whichever roles a deployment
/// runs.
pub async fn fold(store: &Store) -> Result<(), sqlx::Error> {
    sqlx::query(
        "WITH moved AS (DELETE FROM attempt_status_count_deltas RETURNING status, n)
         INSERT INTO attempt_status_counts AS counts (status, n)
         SELECT status, sum(n) FROM moved GROUP BY status ORDER BY status
         ON CONFLICT (status) DO UPDATE SET n = counts.n + excluded.n",
    )
    .execute(store.pool())
    .await?;
    Ok(())
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
