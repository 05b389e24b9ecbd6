//! The purge's SQL: dedupe rows (`processed_messages`) past their retention, deleted in
//! bounded batches so that a purge never holds a long transaction or many locks against
//! intake.

use time::OffsetDateTime;

use crate::store::Store;

/// Dedupe rows recorded before `cutoff` (what a purge would delete).
pub async fn count_expired_dedupe_rows(
    store: &Store,
    cutoff: OffsetDateTime,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM processed_messages WHERE recorded_at < $1")
        .bind(cutoff)
        .fetch_one(store.pool())
        .await
}

/// All dedupe rows.
pub async fn count_dedupe_rows(store: &Store) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM processed_messages")
        .fetch_one(store.pool())
        .await
}

/// Deletes at most `batch_size` dedupe rows recorded before `cutoff`, in one short
/// statement, and says how many went. The rows are picked by the `recorded_at` index and
/// deleted by physical address (`ctid = ANY(ARRAY(…))` is a TID scan); a row an intake
/// transaction is touching at that moment is simply left for the next batch.
pub async fn delete_expired_dedupe_rows(
    store: &Store,
    cutoff: OffsetDateTime,
    batch_size: usize,
) -> Result<u64, sqlx::Error> {
    let deleted = sqlx::query(
        "DELETE FROM processed_messages
         WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM processed_messages
             WHERE recorded_at < $1
             ORDER BY recorded_at
             LIMIT $2
         ))
           AND recorded_at < $1",
    )
    .bind(cutoff)
    .bind(batch_size as i64)
    .execute(store.pool())
    .await?;
    Ok(deleted.rows_affected())
}
