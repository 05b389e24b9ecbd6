//! Stripe webhook events (`stripe_webhook_events`): each accepted event recorded by its id,
//! in the same transaction as what it makes happen — the named PaymentIntent's `unknown`
//! attempt due for a retrieve now, or a check of the PaymentIntent by id
//! (`gateway_object_checks`) for an event that may show money moved for an attempt the
//! ledger holds as final or in review. A redelivered event finds its row and does nothing;
//! nothing here trusts what an event says.

use time::OffsetDateTime;

use crate::domain::{AttemptStatus, Money, PaymentAttemptId};
use crate::store::Store;

/// The attempt a PaymentIntent belongs to, as the webhook's decision needs it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct IntentAttempt {
    pub payment_attempt_id: PaymentAttemptId,
    pub status: AttemptStatus,
    #[sqlx(flatten)]
    pub money: Money,
}

/// What an accepted event does, decided by `crate::http::webhook`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// The attempt is `unknown`: due for its retrieve now.
    Wake(PaymentAttemptId),
    /// Money may have moved for an attempt the ledger holds as final or in review: the
    /// reconciler reads the PaymentIntent again by id and records what it shows.
    Check(PaymentAttemptId),
    /// Recorded, nothing else.
    Ignore,
}

/// An accepted event as recorded.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    pub id: &'a str,
    pub kind: &'a str,
    pub payment_intent_id: Option<&'a str>,
}

/// What recording an event came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventRecorded {
    /// Seen before: nothing done.
    Duplicate,
    /// Recorded; the label of what it did (`woke`, `finding`, `ignored`).
    New(&'static str),
}

/// Records `event` and does what `decide` makes of the attempt its PaymentIntent belongs to
/// (read in the same transaction), all or nothing.
pub async fn record_event(
    store: &Store,
    event: &Event<'_>,
    decide: impl FnOnce(Option<&IntentAttempt>) -> Effect,
) -> Result<EventRecorded, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let attempt =
        match event.payment_intent_id {
            Some(pi) => sqlx::query_as(
                "SELECT payment_attempt_id, status, amount_minor, currency FROM payment_attempts
                 WHERE gateway_object_id = $1",
            )
            .bind(pi)
            .fetch_optional(&mut *tx)
            .await?,
            None => None,
        };
    let effect = decide(attempt.as_ref());
    let label = match &effect {
        Effect::Wake(_) => "woke",
        Effect::Check(_) => "check",
        Effect::Ignore => "ignored",
    };
    let inserted = sqlx::query(
        "INSERT INTO stripe_webhook_events
             (event_id, event_type, payment_intent_id, payment_attempt_id, outcome)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
    )
    .bind(event.id)
    .bind(event.kind)
    .bind(event.payment_intent_id)
    .bind(attempt.as_ref().map(|a| a.payment_attempt_id))
    .bind(label)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if !inserted {
        tx.rollback().await?;
        return Ok(EventRecorded::Duplicate);
    }
    match effect {
        Effect::Wake(id) => {
            sqlx::query(
                "UPDATE payment_attempts SET next_run_at = now(), updated_at = now()
                 WHERE payment_attempt_id = $1 AND status = 'unknown' AND next_run_at > now()",
            )
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        Effect::Check(id) => {
            let pi = event
                .payment_intent_id
                .expect("a check is only asked about a named PaymentIntent");
            sqlx::query(
                "INSERT INTO gateway_object_checks
                     (gateway_object_id, payment_attempt_id, reasons, webhook_event_id)
                 VALUES ($1, $2, ARRAY[$3], $4)
                 ON CONFLICT (gateway_object_id) DO UPDATE SET
                     reasons = (gateway_object_checks.reasons || EXCLUDED.reasons)[1:20],
                     webhook_event_id = EXCLUDED.webhook_event_id,
                     due_at = now()",
            )
            .bind(pi)
            .bind(id)
            .bind(event.kind)
            .bind(event.id)
            .execute(&mut *tx)
            .await?;
        }
        Effect::Ignore => {}
    }
    tx.commit().await?;
    Ok(EventRecorded::New(label))
}

/// A PaymentIntent a webhook asked to be read again, claimed by one reconciler.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ObjectCheck {
    pub gateway_object_id: String,
    pub payment_attempt_id: PaymentAttemptId,
    /// The event types that asked (the latest last).
    pub reasons: Vec<String>,
    pub webhook_event_id: String,
    /// Including this one.
    pub tries: i32,
}

/// Claims up to `limit` due checks for `hold` (a reconciler that dies leaves them due again
/// after it), oldest first, skipping those another reconciler holds.
pub async fn claim_checks(
    store: &Store,
    limit: usize,
    hold: std::time::Duration,
) -> Result<Vec<ObjectCheck>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE gateway_object_checks c SET due_at = now() + make_interval(secs => $2),
             tries = c.tries + 1
         WHERE c.gateway_object_id IN (
             SELECT gateway_object_id FROM gateway_object_checks WHERE due_at <= now()
             ORDER BY due_at LIMIT $1 FOR UPDATE SKIP LOCKED)
         RETURNING c.gateway_object_id, c.payment_attempt_id, c.reasons, c.webhook_event_id, c.tries",
    )
    .bind(limit as i64)
    .bind(hold.as_secs_f64())
    .fetch_all(store.pool())
    .await
}

/// A check done: removed, unless a newer event asked again meanwhile (under another event
/// id, due again now), which the next claim takes.
pub async fn finish_check(store: &Store, check: &ObjectCheck) -> Result<(), sqlx::Error> {
    sqlx::query(
        "DELETE FROM gateway_object_checks
         WHERE gateway_object_id = $1 AND webhook_event_id = $2",
    )
    .bind(&check.gateway_object_id)
    .bind(&check.webhook_event_id)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// A check that could not be done (the gateway did not answer): due again at `at`.
pub async fn retry_check(
    store: &Store,
    check: &ObjectCheck,
    at: OffsetDateTime,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE gateway_object_checks SET due_at = $2 WHERE gateway_object_id = $1")
        .bind(&check.gateway_object_id)
        .bind(at)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Deletes the ids of events received more than `kept` ago, a batch at a time, and says
/// how many. A delivery signed that long ago is refused as stale before its id is looked
/// at, so the id protects nothing any more; a later delivery of the same event is signed
/// anew, and what it asks for (a wake, a check by id) is safe to do twice.
pub async fn purge_events(store: &Store, kept: std::time::Duration) -> Result<u64, sqlx::Error> {
    let mut deleted = 0;
    loop {
        let batch = sqlx::query(
            "DELETE FROM stripe_webhook_events WHERE event_id IN (
                 SELECT event_id FROM stripe_webhook_events
                 WHERE received_at < now() - make_interval(secs => $1) LIMIT 5000)",
        )
        .bind(kept.as_secs_f64())
        .execute(store.pool())
        .await?
        .rows_affected();
        deleted += batch;
        if batch < 5000 {
            return Ok(deleted);
        }
    }
}

/// Adds `refused` refusals for `result` (the last one's words `why`) to its row.
pub async fn add_refusals(
    store: &Store,
    result: &str,
    refused: u64,
    why: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO webhook_refusals (result, refused, last_why) VALUES ($1, $2, $3)
         ON CONFLICT (result) DO UPDATE
            SET refused = webhook_refusals.refused + EXCLUDED.refused,
                last_at = now(),
                last_why = EXCLUDED.last_why",
    )
    .bind(result)
    .bind(i64::try_from(refused).unwrap_or(i64::MAX))
    .bind(crate::domain::bounded(why, 500))
    .execute(store.pool())
    .await?;
    Ok(())
}

/// What the listener refused, by reason, the most recent first.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct WebhookRefusals {
    pub result: String,
    pub refused: i64,
    pub first_at: time::OffsetDateTime,
    pub last_at: time::OffsetDateTime,
    pub last_why: String,
}

/// Every reason's tally, the most recently refused first.
pub async fn refusals(store: &Store) -> Result<Vec<WebhookRefusals>, sqlx::Error> {
    sqlx::query_as(
        "SELECT result, refused, first_at, last_at, last_why FROM webhook_refusals
          ORDER BY last_at DESC, result",
    )
    .fetch_all(store.pool())
    .await
}
