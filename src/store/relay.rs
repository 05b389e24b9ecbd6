//! The relay's SQL: claiming the queued events (`outbox_unpublished`, decision 171) and
//! marking them published.
//!
//! Every insert into the outbox queues its unpublished events in the same transaction (a
//! statement trigger, at most 64 events a queue row). A claim is an open transaction
//! holding the claimed queue rows' locks (`FOR UPDATE SKIP LOCKED`): while one relay
//! publishes their events no other relay can take them, and when a relay dies its
//! connection closes, the transaction rolls back and the rows are free again, unmarked. The
//! next relay publishes them again under the same event ids, which JetStream recognises
//! (`Nats-Msg-Id`), so an event is never published under two ids. The outbox rows
//! themselves are not locked: only the holder of its queue row publishes an event, and the
//! mark is a HOT update (no index holds `published_at`).

use std::collections::HashMap;

use sqlx::{FromRow as _, Postgres, Row as _, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::PaymentAttemptId;
use crate::store::{column, Store};

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
    /// With `event_id`, the row's key (the outbox is partitioned by it).
    pub created_at: OffsetDateTime,
    /// The command's `requested_at` (the producer's clock), read with the row so the relay
    /// can observe command-to-outcome latency without a query per event (decision 149): the
    /// ChargePayment's for an attempt's event, the RefundPayment's for a refund's final
    /// event; `None` when the command had none or the event names neither.
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

/// Events claimed by one relay step. Dropping it without [`OutboxClaim::finish`] releases
/// them unmarked (what a crash does).
pub struct OutboxClaim {
    tx: Transaction<'static, Postgres>,
    pub rows: Vec<OutboxRow>,
    /// The queue rows claimed, deleted when the claim finishes (their events published or
    /// queued again on their own).
    queued: Vec<i64>,
}

/// Claims the oldest due queue rows, skipping rows another relay holds, as many whole rows
/// as begin within `limit` events (so a step holds at most `limit + 63` events), and
/// returns their events that are not published yet, in queue order. A queue row whose
/// events are all published already (an older relay marked them during a rolling upgrade)
/// is claimed too, and deleted by [`OutboxClaim::finish`]. The rows are chosen before they
/// are locked: a second relay at the same moment finds the same rows held and waits for
/// its next step rather than claiming past them. The attempt's (or the refund's)
/// `requested_at` comes along by its primary key; neither outbox rows nor attempts are locked.
pub async fn claim_unpublished(store: &Store, limit: usize) -> Result<OutboxClaim, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let found = sqlx::query(
        "WITH head AS (
             SELECT id, cardinality(event_ids) AS events
             FROM outbox_unpublished
             WHERE next_attempt_at IS NULL OR next_attempt_at <= now()
             ORDER BY id
             LIMIT $1
         ),
         taken AS (
             SELECT id FROM (
                 SELECT id, sum(events) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING) - events AS before
                 FROM head
             ) h
             WHERE before < $1
         ),
         claimed AS (
             SELECT q.id, q.event_ids, q.created_ats
             FROM outbox_unpublished q
             WHERE q.id IN (SELECT id FROM taken)
               AND (q.next_attempt_at IS NULL OR q.next_attempt_at <= now())
             FOR UPDATE OF q SKIP LOCKED
         )
         SELECT c.id AS queue_id, x.*
         FROM claimed c
         CROSS JOIN LATERAL unnest(c.event_ids, c.created_ats) WITH ORDINALITY
             AS e(event_id, created_at, n)
         -- each event looked up by its key: one probe of the outbox's primary key (and of
         -- the attempt's) per event, whatever the planner thinks of the tables' sizes (the
         -- `OFFSET 0` keeps the lookup from being flattened into a join of whole tables)
         LEFT JOIN LATERAL (
             SELECT o.event_id, o.payment_attempt_id, o.subject, o.headers, o.payload,
                    o.publish_attempts, o.status, o.created_at,
                    CASE WHEN o.status IN ('refund_succeeded', 'refund_failed')
                         THEN r.requested_at ELSE a.requested_at END AS requested_at
             FROM outbox o
             LEFT JOIN payment_attempts a ON a.payment_attempt_id = o.payment_attempt_id
             LEFT JOIN refunds r ON o.status IN ('refund_succeeded', 'refund_failed')
                                AND r.refund_id = (o.payload->>'refund_id')::uuid
             WHERE o.event_id = e.event_id AND o.created_at = e.created_at
               AND o.published_at IS NULL
             OFFSET 0
         ) x ON true
         ORDER BY c.id, e.n",
    )
    .bind(limit as i64)
    .fetch_all(&mut *tx)
    .await?;
    let mut rows = Vec::with_capacity(found.len());
    let mut queued: Vec<i64> = Vec::new();
    for row in &found {
        let queue_id: i64 = row.try_get("queue_id")?;
        if queued.last() != Some(&queue_id) {
            queued.push(queue_id);
        }
        if row.try_get::<Option<Uuid>, _>("event_id")?.is_some() {
            rows.push(OutboxRow::from_row(row)?);
        }
    }
    Ok(OutboxClaim { tx, rows, queued })
}

/// Marks the events `$1` (created at `$2`, pair by pair) published and deletes the claimed
/// queue rows `$3`: [`OutboxClaim::finish`]'s statement, public for its plan's test. The
/// pairs are joined as rows, so each event is one probe of its month's primary key whatever
/// the planner knows of the month: written as `event_id = ANY($1) AND created_at = ANY($2)`
/// it was planned as a scan of the whole month while the partition had no statistics (a new
/// month before autovacuum analyzes it), 55 ms a step at 100,000 events (decision 212).
pub const MARK_PUBLISHED: &str = "WITH marked AS (
         UPDATE outbox o
         SET published_at = now(), publish_attempts = o.publish_attempts + 1,
             last_error = NULL
         FROM unnest($1::uuid[], $2::timestamptz[]) AS p(event_id, created_at)
         WHERE o.event_id = p.event_id AND o.created_at = p.created_at
           AND o.published_at IS NULL
     )
     DELETE FROM outbox_unpublished WHERE id = ANY($3)";

impl OutboxClaim {
    /// Marks `published` rows published (after their JetStream ack), records the error of
    /// each `failed` row and queues it again, due when it may be tried next (`None`: at the
    /// next step; it stays unpublished either way), deletes the claimed queue rows and
    /// releases the claim, in one transaction. Both times are the database's `now()`, like
    /// every time the other roles store, never this host's clock.
    pub async fn finish(
        mut self,
        published: &[Uuid],
        failed: &[FailedPublish],
    ) -> Result<(), sqlx::Error> {
        let created: HashMap<Uuid, OffsetDateTime> = self
            .rows
            .iter()
            .map(|row| (row.event_id, row.created_at))
            .collect();
        let created_at = |id: &Uuid| created.get(id).copied();
        if !published.is_empty() || !self.queued.is_empty() {
            sqlx::query(MARK_PUBLISHED)
                .bind(published)
                .bind(column(published, created_at))
                .bind(&self.queued)
                .execute(&mut *self.tx)
                .await?;
        }
        if !failed.is_empty() {
            sqlx::query(
                "WITH f AS (
                     SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::float8[])
                         AS f(event_id, created_at, error, retry_in)
                 ),
                 noted AS (
                     UPDATE outbox o
                     SET publish_attempts = o.publish_attempts + 1, last_error = f.error,
                         next_attempt_at = now() + make_interval(secs => f.retry_in)
                     FROM f
                     WHERE o.event_id = f.event_id AND o.created_at = f.created_at
                 )
                 INSERT INTO outbox_unpublished (event_ids, created_ats, next_attempt_at)
                 SELECT ARRAY[f.event_id], ARRAY[f.created_at],
                        now() + make_interval(secs => f.retry_in)
                 FROM f",
            )
            .bind(column(failed, |f| f.event_id))
            .bind(column(failed, |f| created_at(&f.event_id)))
            .bind(column(failed, |f| crate::domain::bounded(&f.error, 1000)))
            .bind(column(failed, |f| f.retry_in.map(|d| d.as_secs_f64())))
            .execute(&mut *self.tx)
            .await?;
        }
        self.tx.commit().await
    }
}
