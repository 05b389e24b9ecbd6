//! A person's cancel of a pending attempt that must not be charged (issue 39, decision 144).
//!
//! Invariants kept here:
//! - The cancel is one guarded statement: `UPDATE … WHERE status = 'pending' AND
//!   first_dispatched_at IS NULL AND gateway_object_id IS NULL`, which moves the fencing
//!   token on. The executor's claim (`crate::store::kernel`) locks due rows, skipping held ones, and moves them to
//!   `in_flight` in the same statement, so the row lock decides: a claim that locked the row
//!   first makes the cancel find it `in_flight` and touch nothing; a cancel that locked it
//!   first is skipped by the claim and leaves nothing to claim. Never read-then-write.
//! - Only an attempt the gateway has never seen is cancelled: `first_dispatched_at` is set by
//!   the first claim that may send and cleared only by a hand-back that sent nothing.
//! - The move (`pending → expired`, cause `operator_cancelled`), its `payment-expired` event
//!   and the audit row commit in one transaction; a refused cancel writes nothing.
//! - A pending attempt that holds a Stripe PaymentIntent (prepared, or sent before and
//!   waiting for its retry) is cancelled in three steps, check then act (decision 163):
//!   [`hold_for_gateway_cancel`] moves its fencing token on and its next run past
//!   [`CANCEL_HOLD`] in one guarded statement, so no executor claims it meanwhile; the
//!   caller cancels the PaymentIntent; [`decline_held_attempt`] writes `pending → declined`
//!   only under the hold's token. A hold whose cancel proved nothing is released
//!   ([`release_hold`]); one whose process died runs out by itself.

use std::time::Duration;

use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::event::{Announced, PaymentEvent};
use crate::domain::Actor;
use crate::domain::{
    bounded, AttemptStatus, EventAttempt, HeldAttempt, IllegalMove, LeaseToken, PaymentAttemptId,
    TransitionCause,
};
use crate::store::attempts::HELD_COLUMNS;
use crate::store::audit::{self, AuditAction, NewAuditEntry, Via};
use crate::store::{outbox, Store};

/// How long a person's cancel keeps a pending attempt from the executor's claim while it
/// cancels the attempt's PaymentIntent at the gateway: longer than one gateway request can
/// take (connect and request timeouts are seconds), short enough that a cancel whose
/// process died delays the attempt's next try by at most this.
pub const CANCEL_HOLD: Duration = Duration::from_secs(120);

/// The decline code of an attempt a person cancelled after its PaymentIntent was cancelled.
pub const OPERATOR_CANCELLED: &str = "operator_cancelled";

/// One person's cancel, validated.
#[derive(Debug, Clone)]
pub struct Cancellation<'a> {
    pub payment_attempt_id: PaymentAttemptId,
    /// The operator's words, recorded on the transition, the event and the audit row.
    pub reason: &'a str,
    /// `operator:<name>`, `admin-api`, `console`.
    pub actor: &'a Actor,
    pub via: Via,
}

/// What a cancel came to. Every refusal says what the attempt looked like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelRecorded {
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
    /// Held for a cancel at the gateway, but moved by someone else since (the hold ran out
    /// and an executor claimed it, another person's cancel): nothing was written.
    ClaimedMeanwhile,
}

/// What [`hold_for_gateway_cancel`] came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelHold {
    /// Held `pending` under a new token until the hold runs out; its PaymentIntent is what
    /// must be cancelled first.
    Held(HeldAttempt),
    NotFound,
    /// Not `pending`: nothing may be asked of the gateway on the cancel's behalf.
    NotPending(AttemptStatus),
    /// `pending` with no gateway object: nothing at the gateway can be cancelled (a §3
    /// attempt sent before, whose retry may still charge).
    NoGatewayObject,
}

/// Holds a `pending` attempt that has a gateway object for a person's cancel, before the
/// gateway is asked anything: check, then act. One guarded statement moves its fencing
/// token on (a write of anyone who held it before is refused) and its next run to at least
/// `hold` from now (the executor's claim takes only due attempts).
pub async fn hold_for_gateway_cancel(
    store: &Store,
    id: PaymentAttemptId,
    hold: Duration,
) -> Result<CancelHold, sqlx::Error> {
    let held: Option<HeldAttempt> = sqlx::query_as(&format!(
        "UPDATE payment_attempts a SET
             lease_token = a.lease_token + 1,
             next_run_at = greatest(a.next_run_at, now() + make_interval(secs => $2::float8)),
             updated_at = now()
         WHERE a.payment_attempt_id = $1 AND a.status = 'pending'
           AND a.gateway_object_id IS NOT NULL
         RETURNING {HELD_COLUMNS}"
    ))
    .bind(id)
    .bind(hold.as_secs_f64())
    .fetch_optional(store.pool())
    .await?;
    if let Some(attempt) = held {
        return Ok(CancelHold::Held(attempt));
    }
    let status: Option<AttemptStatus> =
        sqlx::query_scalar("SELECT status FROM payment_attempts WHERE payment_attempt_id = $1")
            .bind(id)
            .fetch_optional(store.pool())
            .await?;
    Ok(match status {
        None => CancelHold::NotFound,
        Some(AttemptStatus::Pending) => CancelHold::NoGatewayObject,
        Some(status) => CancelHold::NotPending(status),
    })
}

/// Gives a held attempt back to the executor at once (its cancel at the gateway proved
/// nothing, or found a charge the executor's next try adopts), if nobody moved it since.
pub async fn release_hold(
    store: &Store,
    id: PaymentAttemptId,
    token: LeaseToken,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE payment_attempts SET next_run_at = now(), updated_at = now()
         WHERE payment_attempt_id = $1 AND status = 'pending' AND lease_token = $2",
    )
    .bind(id)
    .bind(token)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// Declines a held attempt whose PaymentIntent `gateway_object_id` the gateway has
/// cancelled: `pending → declined` (cause `operator_cancelled`, decline code
/// [`OPERATOR_CANCELLED`]) only under the hold's `token`, with its `payment-declined`
/// event and the audit row, in one transaction; nothing is written when the guard refuses.
pub async fn decline_held_attempt(
    store: &Store,
    cancellation: &Cancellation<'_>,
    token: LeaseToken,
    gateway_object_id: &str,
) -> Result<CancelRecorded, sqlx::Error> {
    let id = cancellation.payment_attempt_id;
    IllegalMove::check(
        id,
        AttemptStatus::Pending,
        AttemptStatus::Declined,
        TransitionCause::OperatorCancelled,
    )
    .map_err(|illegal| sqlx::Error::Encode(Box::new(illegal)))?;
    let reason = format!(
        "cancelled by {} after PaymentIntent {gateway_object_id} was cancelled at the gateway (it can never charge): {}",
        cancellation.actor, cancellation.reason
    );
    let mut tx = store.pool().begin().await?;
    let moved: Option<CancelledRow> = sqlx::query_as(
        "WITH declined AS (
             UPDATE payment_attempts SET
                 status = 'declined',
                 decline_code = $5,
                 lease_token = lease_token + 1,
                 last_error = $2,
                 updated_at = now()
             WHERE payment_attempt_id = $1 AND status = 'pending' AND lease_token = $4
             RETURNING payment_attempt_id, order_id, amount_minor, currency, requested_at,
                       first_message_id, correlation_id, traceparent, lease_token, updated_at
         ),
         transition AS (
             INSERT INTO attempt_transitions
                 (payment_attempt_id, from_status, to_status, cause, actor, detail, at)
             SELECT payment_attempt_id, 'pending', 'declined', $6, $3,
                    $2 || '; lease token ' || lease_token, updated_at
             FROM declined
         )
         SELECT * FROM declined",
    )
    .bind(id)
    .bind(bounded(&reason, 1900))
    .bind(cancellation.actor)
    .bind(token)
    .bind(OPERATOR_CANCELLED)
    .bind(TransitionCause::OperatorCancelled.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = moved else {
        let status: Option<AttemptStatus> =
            sqlx::query_scalar("SELECT status FROM payment_attempts WHERE payment_attempt_id = $1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        tx.rollback().await?;
        return Ok(match status {
            None => CancelRecorded::NotFound,
            Some(AttemptStatus::Pending) => CancelRecorded::ClaimedMeanwhile,
            Some(status) => CancelRecorded::NotPending { status },
        });
    };
    let event = PaymentEvent::for_settlement(
        &row.attempt,
        Announced {
            status: AttemptStatus::Declined,
            gateway_charge_id: None,
            decline_code: Some(OPERATOR_CANCELLED.to_owned()),
            reason: Some(reason),
        },
        row.updated_at,
    );
    let detail = serde_json::json!({
        "from": AttemptStatus::Pending,
        "to": AttemptStatus::Declined,
        "gateway_object_id": gateway_object_id,
        "decline_code": OPERATOR_CANCELLED,
    });
    announce_cancel(tx, cancellation, &row, &event, detail).await
}

/// Cancels a pending attempt never sent to the gateway: the guarded move, its transition,
/// its event and the audit row in one transaction; nothing is written when the guard refuses.
pub async fn cancel_pending_attempt(
    store: &Store,
    cancellation: &Cancellation<'_>,
) -> Result<CancelRecorded, sqlx::Error> {
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
    let detail = serde_json::json!({
        "from": AttemptStatus::Pending,
        "to": AttemptStatus::Expired,
    });
    announce_cancel(tx, cancellation, &row, &event, detail).await
}

/// What every cancel writes once its guarded move went through, and the commit: the
/// attempt's event, and the audit row whose `detail` names the event.
async fn announce_cancel(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    cancellation: &Cancellation<'_>,
    row: &CancelledRow,
    event: &PaymentEvent,
    mut detail: serde_json::Value,
) -> Result<CancelRecorded, sqlx::Error> {
    outbox::insert_event(&mut tx, event, &row.attempt.provenance).await?;
    detail["event_id"] = serde_json::json!(event.event_id);
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
            detail,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(CancelRecorded::Cancelled {
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
) -> Result<CancelRecorded, sqlx::Error> {
    let row: Option<(AttemptStatus, Option<OffsetDateTime>, Option<String>)> = sqlx::query_as(
        "SELECT status, first_dispatched_at, gateway_object_id
         FROM payment_attempts WHERE payment_attempt_id = $1",
    )
    .bind(id)
    .fetch_optional(conn)
    .await?;
    Ok(match row {
        None => CancelRecorded::NotFound,
        Some((status, _, _)) if status != AttemptStatus::Pending => {
            CancelRecorded::NotPending { status }
        }
        Some((_, Some(first_dispatched_at), _)) => CancelRecorded::SentBefore {
            first_dispatched_at,
        },
        Some((_, None, Some(gateway_object_id))) => {
            CancelRecorded::HasGatewayObject { gateway_object_id }
        }
        // Pending and unsent now: it moved between the update and this read (handed back
        // by an executor), so it was not cancellable when the update looked.
        Some((status, None, None)) => CancelRecorded::NotPending { status },
    })
}
