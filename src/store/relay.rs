//! The relay's SQL: claiming unpublished outbox rows and marking them published.
//!
//! A claim is an open transaction holding the rows' locks (`FOR UPDATE SKIP LOCKED`): while
//! one relay publishes a row no other relay can take it, and when a relay dies its
//! connection closes, the transaction rolls back and the rows are free again, unmarked. The
//! next relay publishes them again under the same event id, which JetStream recognises
//! (`Nats-Msg-Id`), so an event is never published under two ids.

use sqlx::{Postgres, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{column, Store};
use crate::domain::PaymentAttemptId;

/// One outbox row to publish.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct OutboxRow {
    /// Also the `Nats-Msg-Id`.
    pub event_id: Uuid,
    /// The attempt the event is about; `None` for a finding that names no attempt.
    pub payment_attempt_id: Option<PaymentAttemptId>,
    /// The contract subject, without any deployment namespace.
    pub subject: String,
    /// Header name → value, as written with the event.
    pub headers: serde_json::Value,
    pub payload: serde_json::Value,
    pub publish_attempts: i32,
    /// What the event announces: an attempt's state (`succeeded`, `declined`, `expired`,
    /// `needs_review`) or `finding`.
    pub status: String,
    /// The command's `requested_at` (the producer's clock), read with the row so the relay
    /// can observe command-to-outcome latency without a query per event (decision 149);
    /// `None` when the command had none or the event names no attempt.
    pub requested_at: Option<OffsetDateTime>,
}

/// A row whose publish was not acknowledged.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedPublish {
    pub event_id: Uuid,
    pub error: String,
    /// How long until it may be claimed again, by the database's clock; `None`: at the
    /// next step.
    pub retry_in: Option<std::time::Duration>,
}

/// Rows claimed by one relay step. Dropping it without [`OutboxClaim::finish`] releases the
/// rows unmarked (what a crash does).
pub struct OutboxClaim {
    tx: Transaction<'static, Postgres>,
    pub rows: Vec<OutboxRow>,
}

/// Claims up to `limit` unpublished rows that are due, oldest first, skipping rows another
/// relay holds. A row JetStream refused waits until its `next_attempt_at`, so it cannot keep
/// the rows behind it from being claimed. The attempt's `requested_at` comes along by its
/// primary key; only the outbox rows are locked (`FOR UPDATE OF o`), never the attempts.
pub async fn claim_unpublished(store: &Store, limit: usize) -> Result<OutboxClaim, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let rows = sqlx::query_as(
        "SELECT o.event_id, o.payment_attempt_id, o.subject, o.headers, o.payload,
                o.publish_attempts, o.status, a.requested_at
         FROM outbox o
         LEFT JOIN payment_attempts a ON a.payment_attempt_id = o.payment_attempt_id
         WHERE o.published_at IS NULL
           AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
         ORDER BY o.created_at, o.event_id
         LIMIT $1
         FOR UPDATE OF o SKIP LOCKED",
    )
    .bind(limit as i64)
    .fetch_all(&mut *tx)
    .await?;
    Ok(OutboxClaim { tx, rows })
}

impl OutboxClaim {
    /// Marks `published` rows published (after their JetStream ack), records the error of
    /// each `failed` row and when it may be tried next (`None`: at the next step; it stays
    /// unpublished either way), and releases the claim. Both times are the database's
    /// `now()`, like every time the other roles store, never this host's clock.
    pub async fn finish(
        mut self,
        published: &[Uuid],
        failed: &[FailedPublish],
    ) -> Result<(), sqlx::Error> {
        if !published.is_empty() {
            sqlx::query(
                "UPDATE outbox SET published_at = now(), publish_attempts = publish_attempts + 1, last_error = NULL
                 WHERE event_id = ANY($1) AND published_at IS NULL",
            )
            .bind(published)
            .execute(&mut *self.tx)
            .await?;
        }
        if !failed.is_empty() {
            sqlx::query(
                "UPDATE outbox o SET publish_attempts = o.publish_attempts + 1, last_error = f.error,
                     next_attempt_at = now() + make_interval(secs => f.retry_in)
                 FROM UNNEST($1::uuid[], $2::text[], $3::float8[]) AS f(event_id, error, retry_in)
                 WHERE o.event_id = f.event_id",
            )
            .bind(column(failed, |f| f.event_id))
            .bind(column(failed, |f| crate::domain::bounded(&f.error, 1000)))
            .bind(column(failed, |f| f.retry_in.map(|d| d.as_secs_f64())))
            .execute(&mut *self.tx)
            .await?;
        }
        self.tx.commit().await
    }
}
