//! A person's cancel of a pending attempt that must not be charged (issue 39, decision 144).
//!
//! Invariants kept here:
//! - The cancel is one guarded statement: `UPDATE … WHERE status = 'pending' AND
//!   first_dispatched_at IS NULL AND gateway_object_id IS NULL`, which moves the fencing
//!   token on. The executor's claim takes due rows `FOR UPDATE SKIP LOCKED` and moves them to
//!   `in_flight` in the same statement, so the row lock decides: a claim that locked the row
//!   first makes the cancel find it `in_flight` and touch nothing; a cancel that locked it
//!   first is skipped by the claim and leaves nothing to claim. Never read-then-write.
//! - Only an attempt the gateway has never seen is cancelled: `first_dispatched_at` is set by
//!   the first claim that may send and cleared only by a hand-back that sent nothing.
//! - The move (`pending → expired`, cause `operator_cancelled`), its `payment-expired` event
//!   and the audit row commit in one transaction; a refused cancel writes nothing.

use time::OffsetDateTime;
use uuid::Uuid;

use super::audit::{self, AuditAction, NewAuditEntry, Via};
use super::{outbox, Store};
use crate::domain::event::PaymentEvent;
use crate::domain::{AttemptStatus, EventAttempt, PaymentAttemptId};

/// One person's cancel, validated.
#[derive(Debug, Clone)]
pub struct Cancellation<'a> {
    pub payment_attempt_id: PaymentAttemptId,
    /// The operator's words, recorded on the transition, the event and the audit row.
    pub reason: &'a str,
    /// `operator:<name>`, `admin-api`, `console`.
    pub actor: &'a str,
    pub via: Via,
}

/// What a cancel came to. Every refusal says what the attempt looked like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Now `expired`; `event_id` is its `payment-expired` event, queued in the outbox.
    Cancelled {
        event_id: Uuid,
        at: OffsetDateTime,
    },
    NotFound,
    /// Not `pending`: claimed by an executor, owned by the reconciler, in review or final.
    NotPending {
        status: AttemptStatus,
    },
    /// `pending`, but sent to the gateway before (a retry is due): a charge may still land.
    SentBefore {
        first_dispatched_at: OffsetDateTime,
    },
    /// `pending` and never sent, but a gateway object (Stripe's PaymentIntent) was made for
    /// it: cancelling it at the gateway is the proof this cancel does not make.
    HasGatewayObject {
        gateway_object_id: String,
    },
}

/// Cancels a pending attempt never sent to the gateway: the guarded move, its transition,
/// its event and the audit row in one transaction; nothing is written when the guard refuses.
pub async fn cancel_pending_attempt(
    store: &Store,
    cancellation: &Cancellation<'_>,
) -> Result<CancelOutcome, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let reason = format!(
        "cancelled by {} before it was sent to the gateway: {}",
        cancellation.actor, cancellation.reason
    );
    let moved: Option<CancelledRow> = sqlx::query_as(
        "WITH cancelled AS (
             UPDATE payment_attempts SET
                 status = 'expired',
                 lease_token = lease_token + 1,
                 last_error = $2,
                 updated_at = now()
             WHERE payment_attempt_id = $1
               AND status = 'pending'
               AND first_dispatched_at IS NULL
               AND gateway_object_id IS NULL
             RETURNING payment_attempt_id, order_id, amount_minor, currency, requested_at,
                       first_message_id, correlation_id, traceparent, lease_token, updated_at
         ),
         transition AS (
             INSERT INTO attempt_transitions
                 (payment_attempt_id, from_status, to_status, cause, actor, detail, at)
             SELECT payment_attempt_id, 'pending', 'expired', 'operator_cancelled', $3,
                    $2 || '; lease token ' || lease_token, updated_at
             FROM cancelled
         )
         SELECT * FROM cancelled",
    )
    .bind(cancellation.payment_attempt_id)
    .bind(crate::domain::bounded(&reason, 1900))
    .bind(cancellation.actor)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = moved else {
        let outcome = explain_refusal(&mut tx, cancellation.payment_attempt_id).await?;
        tx.rollback().await?;
        return Ok(outcome);
    };
    let event = PaymentEvent::expired(&row.attempt, &reason, row.updated_at);
    outbox::insert_event(&mut tx, &event, &row.attempt.provenance).await?;
    audit::insert(
        &mut tx,
        &NewAuditEntry {
            actor: cancellation.actor.to_owned(),
            via: cancellation.via,
            action: AuditAction::Cancel,
            payment_attempt_ids: vec![cancellation.payment_attempt_id],
            dlq_sequence: None,
            reason: Some(cancellation.reason.to_owned()),
            outcome: "applied",
            detail: serde_json::json!({
                "from": AttemptStatus::Pending,
                "to": AttemptStatus::Expired,
                "event_id": event.event_id,
            }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(CancelOutcome::Cancelled {
        event_id: event.event_id,
        at: row.updated_at,
    })
}

/// What the cancel moved: what its event repeats, and when.
#[derive(sqlx::FromRow)]
struct CancelledRow {
    #[sqlx(flatten)]
    attempt: EventAttempt,
    updated_at: OffsetDateTime,
}

/// Why the guarded update touched nothing. Read after the write, only to explain it.
async fn explain_refusal(
    conn: &mut sqlx::PgConnection,
    id: PaymentAttemptId,
) -> Result<CancelOutcome, sqlx::Error> {
    let row: Option<(AttemptStatus, Option<OffsetDateTime>, Option<String>)> = sqlx::query_as(
        "SELECT status, first_dispatched_at, gateway_object_id
         FROM payment_attempts WHERE payment_attempt_id = $1",
    )
    .bind(id)
    .fetch_optional(conn)
    .await?;
    Ok(match row {
        None => CancelOutcome::NotFound,
        Some((status, _, _)) if status != AttemptStatus::Pending => {
            CancelOutcome::NotPending { status }
        }
        Some((_, Some(first_dispatched_at), _)) => CancelOutcome::SentBefore {
            first_dispatched_at,
        },
        Some((_, None, Some(gateway_object_id))) => {
            CancelOutcome::HasGatewayObject { gateway_object_id }
        }
        // Pending and unsent now: it moved between the update and this read (handed back
        // by an executor), so it was not cancellable when the update looked.
        Some((status, None, None)) => CancelOutcome::NotPending { status },
    })
}
