//! Stripe webhook events (`stripe_webhook_events`): each accepted event recorded by its id,
//! in the same transaction as what it makes happen — the named PaymentIntent's `unknown`
//! attempt due for a retrieve now, or a finding (and its published event) for a refund or a
//! dispute of a succeeded attempt. A redelivered event finds its row and does nothing.

use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use super::findings::{self, FindingSource, NewFinding};
use super::Store;
use crate::domain::{AttemptStatus, Money, PaymentAttemptId};

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
    /// A finding, published as `payments.events.reconciliation-finding.v1` when new.
    Finding(NewFinding),
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
pub enum Recorded {
    /// Seen before: nothing done.
    Duplicate,
    /// Recorded; the label of what it did (`woke`, `finding`, `ignored`).
    New(&'static str),
}

/// The subject of a finding's event (the relay puts the namespace in front).
pub const FINDING_SUBJECT: &str = "payments.events.reconciliation-finding.v1";

/// Records `event` and does what `decide` makes of the attempt its PaymentIntent belongs to
/// (read in the same transaction), all or nothing.
pub async fn record_event(
    store: &Store,
    event: &Event<'_>,
    decide: impl FnOnce(Option<&IntentAttempt>) -> Effect,
) -> Result<Recorded, sqlx::Error> {
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
        Effect::Finding(_) => "finding",
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
        return Ok(Recorded::Duplicate);
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
        Effect::Finding(finding) => {
            if findings::record(&mut tx, &finding, FindingSource::Webhook).await? {
                if let Some(id) = finding.payment_attempt_id {
                    publish_finding(&mut tx, id, &finding, event.id).await?;
                }
            }
        }
        Effect::Ignore => {}
    }
    tx.commit().await?;
    Ok(Recorded::New(label))
}

/// The finding's event in the outbox (status `finding`), published by the relay.
async fn publish_finding(
    conn: &mut sqlx::PgConnection,
    id: PaymentAttemptId,
    finding: &NewFinding,
    stripe_event: &str,
) -> Result<(), sqlx::Error> {
    let event_id = Uuid::new_v4();
    let now = OffsetDateTime::now_utc();
    let payload = json!({
        "event_id": event_id,
        "payment_attempt_id": id,
        "class": finding.class,
        "gateway_ids": finding.gateway_ids,
        "detail": finding.detail,
        "stripe_event_id": stripe_event,
        "occurred_at": now.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
    });
    sqlx::query(
        "INSERT INTO outbox (event_id, payment_attempt_id, status, subject, headers, payload)
         VALUES ($1, $2, 'finding', $3, $4, $5)",
    )
    .bind(event_id)
    .bind(id)
    .bind(FINDING_SUBJECT)
    .bind(json!({"Nats-Msg-Id": event_id.to_string(), "Causation-Id": stripe_event}))
    .bind(payload)
    .execute(conn)
    .await?;
    Ok(())
}
