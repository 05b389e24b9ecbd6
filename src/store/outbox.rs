//! The transactional outbox: events are written in the transaction that changes the state
//! they announce, and published by the relay afterwards.

use sqlx::PgConnection;

use crate::domain::event::{EventProvenance, PaymentEvent};

/// Adds one event to the outbox inside the caller's transaction. The unique index
/// `outbox_one_event_per_final_state` makes a second event for the same final state fail,
/// which aborts the transaction that tried to settle an attempt twice.
pub async fn insert_event(
    conn: &mut PgConnection,
    event: &PaymentEvent,
    provenance: &EventProvenance,
) -> Result<(), sqlx::Error> {
    let headers: serde_json::Map<String, serde_json::Value> = event
        .headers(provenance)
        .into_iter()
        .map(|(name, value)| (name, serde_json::Value::String(value)))
        .collect();
    sqlx::query(
        "INSERT INTO outbox (event_id, payment_attempt_id, status, subject, headers, payload, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(event.event_id)
    .bind(event.payment_attempt_id)
    .bind(event.status.as_str())
    .bind(event.subject())
    .bind(serde_json::Value::Object(headers))
    .bind(serde_json::to_value(event).expect("an event always serialises"))
    .bind(event.occurred_at)
    .execute(conn)
    .await?;
    Ok(())
}
