//! The SQL behind the database-backed gauges of `/metrics`: how many attempts are in each
//! state, how long the oldest attempt of each non-final state has waited, the refunds not
//! settled yet (`refund_reads::unsettled_refunds`), and the outbox backlog. One short round
//! trip per query, each served by indexes (each open state's own: the due indexes, the
//! lease index, `payment_attempts_review_expired_created_idx`) or a small
//! table (the relay's queue, `outbox_unpublished`), except the per-status counts, which
//! come from the counts the database keeps (`store::attempts::counts`; reading them first
//! folds the pending deltas, the refresher's only write).

use time::OffsetDateTime;

use crate::domain::{AttemptStatus, RefundStatus};
use crate::store::Store;

/// What the database says right now, for the gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatabaseGauges {
    /// Attempts per status; a status without attempts is absent.
    pub attempts_by_status: Vec<(AttemptStatus, i64)>,
    /// The `created_at` of the oldest attempt in each non-final status that has any.
    pub oldest_non_final: Vec<(AttemptStatus, OffsetDateTime)>,
    /// Outbox rows not yet acknowledged by JetStream.
    pub outbox_pending: i64,
    /// The `created_at` of the oldest of them.
    pub outbox_oldest_pending: Option<OffsetDateTime>,
    /// Refunds in each unsettled status that has any, with the `created_at` of the oldest.
    pub unsettled_refunds: Vec<(RefundStatus, i64, OffsetDateTime)>,
}

/// Reads every database-backed gauge. Statuses the database holds but this build does not
/// know are skipped (a newer schema), never an error.
pub async fn database_gauges(store: &Store) -> Result<DatabaseGauges, sqlx::Error> {
    let pool = store.pool();
    let counts = crate::store::reads::attempts::count_by_status(store).await?;
    let oldest: Vec<(String, OffsetDateTime)> = sqlx::query_as(
        // One arm per state, each its own index's predicate (decisions 173, 215): an `IN`
        // list naming all four would imply none of them, and scan.
        "SELECT status, min(created_at) FROM payment_attempts
         WHERE status = 'pending' OR status = 'unknown' OR status = 'in_flight'
            OR status = 'needs_review'
         GROUP BY status",
    )
    .fetch_all(pool)
    .await?;
    let (outbox_pending, outbox_oldest_pending): (i64, Option<OffsetDateTime>) =
        // The queue holds every unpublished event (decision 171); during a rolling upgrade
        // it may also hold a few an older relay published, until the next claim drops them.
        sqlx::query_as(
            "SELECT coalesce(sum(cardinality(event_ids)), 0)::int8, min(created_ats[1])
             FROM outbox_unpublished",
        )
        .fetch_one(pool)
        .await?;
    let unsettled_refunds = crate::store::refunds::reads::unsettled_refunds(store).await?;
    Ok(DatabaseGauges {
        attempts_by_status: known_statuses(counts),
        oldest_non_final: known_statuses(oldest),
        outbox_pending,
        outbox_oldest_pending,
        unsettled_refunds,
    })
}

/// When the last sweep that read and compared everything finished, if one has.
pub async fn last_sweep_succeeded(store: &Store) -> Result<Option<OffsetDateTime>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT max(finished_at) FROM reconciliation_sweeps
         WHERE finished_at IS NOT NULL AND error IS NULL",
    )
    .fetch_one(store.pool())
    .await
}

fn known_statuses<T>(rows: Vec<(String, T)>) -> Vec<(AttemptStatus, T)> {
    rows.into_iter()
        .filter_map(|(status, value)| status.parse().ok().map(|s| (s, value)))
        .collect()
}
