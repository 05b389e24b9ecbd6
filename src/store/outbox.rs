//! The transactional outbox: events are written in the transaction that changes the state
//! they announce, and published by the relay afterwards.

use sqlx::PgConnection;

use crate::domain::event::{EventProvenance, PaymentEvent};
use crate::store::column;

/// Adds one event to the outbox inside the caller's transaction. The key
/// `outbox_one_event_per_final_state` of `outbox_final_states` (kept by the outbox's
/// statement trigger) makes a second event for the same final state fail, which aborts the
/// transaction that tried to settle an attempt twice. Settlements write their events in
/// their own statement instead (`attempts::write_settlements`).
pub async fn insert_event(
    conn: &mut PgConnection,
    event: &PaymentEvent,
    provenance: &EventProvenance,
) -> Result<(), sqlx::Error> {
    insert_events(conn, &[(event, provenance)]).await
}

/// Adds several events in one statement inside the caller's transaction, with the same
/// guarantee as [`insert_event`]: one duplicate final state aborts the whole transaction.
pub async fn insert_events(
    conn: &mut PgConnection,
    events: &[(&PaymentEvent, &EventProvenance)],
) -> Result<(), sqlx::Error> {
    if events.is_empty() {
        return Ok(());
    }
    let headers = |event: &PaymentEvent, provenance: &EventProvenance| {
        serde_json::Value::Object(
            event
                .headers(provenance)
                .into_iter()
                .map(|(name, value)| (name, serde_json::Value::String(value)))
                .collect(),
        )
    };
    sqlx::query(
        "INSERT INTO outbox (event_id, payment_attempt_id, status, subject, headers, payload, created_at)
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::jsonb[],
                              $6::jsonb[], $7::timestamptz[])",
    )
    .bind(column(events, |(e, _)| e.event_id))
    .bind(column(events, |(e, _)| e.payment_attempt_id))
    .bind(column(events, |(e, _)| e.status.as_str()))
    .bind(column(events, |(e, _)| e.subject()))
    .bind(column(events, |(e, p)| headers(e, p)))
    .bind(column(events, |(e, _)| serde_json::to_value(e).expect("an event always serialises")))
    .bind(column(events, |(e, _)| e.occurred_at))
    .execute(conn)
    .await?;
    Ok(())
}
