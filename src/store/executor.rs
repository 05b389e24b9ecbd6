//! The executor's SQL: claiming due attempts under a fenced lease, and writing each result
//! together with its transition, its event and the gateway-call evidence.
//!
//! Invariants kept here:
//! - A claim and its `pending → in_flight` transition commit, with the dispatch stamp,
//!   before any gateway call (the claim is one statement).
//! - Every later write names the lease token it holds: `WHERE lease_token = $n AND status =
//!   'in_flight'`. A worker whose lease was taken over writes nothing (it only adds its
//!   gateway call to the evidence).
//! - A final state, its transition and its outbox event commit in one transaction; the
//!   unique index `outbox_one_event_per_final_state` refuses a second event.

use sqlx::{PgConnection, Row as _};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{outbox, Store};
use crate::domain::event::{EventProvenance, PaymentEvent};
use crate::domain::AttemptStatus;
use crate::gateway::{ChargeBody, ChargeRequest};

/// One attempt this executor holds under a lease: what to send, and the token that fences
/// every write about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedAttempt {
    pub payment_attempt_id: Uuid,
    pub order_id: String,
    pub customer_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub payment_method: String,
    pub description: Option<String>,
    /// The stored key: every try sends exactly this value.
    pub idempotency_key: String,
    /// Tries made including this one (a hand-over does not count one).
    pub tries: i32,
    /// The fencing token of this claim.
    pub lease_token: i64,
    pub lease_owner: String,
    pub lease_expires_at: OffsetDateTime,
    pub created_at: OffsetDateTime,
    /// When the gateway first saw the key; its retention window is counted from here.
    pub first_dispatched_at: OffsetDateTime,
    /// False when the claim is only a hand-over: a retry was due, but the attempt is past its
    /// retry window (maximum age, or the gateway's key retention minus the safety margin), so
    /// it must not be sent again and goes to `unknown`.
    pub dispatch: bool,
    /// The `Nats-Msg-Id` of the command that created the attempt (causation of its events).
    pub first_message_id: String,
    pub correlation_id: Option<String>,
}

impl ClaimedAttempt {
    /// The charge request, built from the stored attempt only, so that every try is the
    /// same request under the same key.
    pub fn charge_request(&self) -> ChargeRequest {
        ChargeRequest::new(
            self.idempotency_key.clone(),
            &ChargeBody {
                amount_minor: self.amount_minor,
                currency: self.currency.clone(),
                customer_id: self.customer_id.clone(),
                payment_method: self.payment_method.clone(),
                reference: self.payment_attempt_id.to_string(),
                description: self.description.clone(),
            },
        )
    }
}

/// Where a claim query draws the line for hand-overs.
#[derive(Debug, Clone, Copy)]
pub struct ClaimLimits {
    /// Claim at most this many.
    pub limit: usize,
    /// The lease ends here.
    pub lease_expires_at: OffsetDateTime,
    /// An attempt first sent at or before this is not re-sent: the gateway may forget its key.
    pub key_window_cutoff: OffsetDateTime,
    /// An attempt recorded at or before this gets no further retry.
    pub age_cutoff: OffsetDateTime,
}

/// Claims up to `limits.limit` due `pending` attempts, oldest due first, skipping rows other
/// executors hold (`FOR UPDATE SKIP LOCKED`). In one statement it moves them to `in_flight`
/// under a lease owned by `owner`, increments each fencing token, stamps `dispatched_at`
/// (and `first_dispatched_at` when unset), counts the try, and records the transition.
/// Attempts past their retry window are claimed as hand-overs: no stamp, no try.
pub async fn claim_due_attempts(
    store: &Store,
    owner: &str,
    now: OffsetDateTime,
    limits: ClaimLimits,
) -> Result<Vec<ClaimedAttempt>, sqlx::Error> {
    let rows = sqlx::query(
        "WITH due AS (
             SELECT payment_attempt_id,
                    (first_dispatched_at IS NOT NULL
                     AND (first_dispatched_at <= $5 OR created_at <= $6)) AS hand_over
             FROM payment_attempts
             WHERE status = 'pending' AND next_run_at <= $1
             ORDER BY next_run_at
             LIMIT $2
             FOR UPDATE SKIP LOCKED
         ),
         claimed AS (
             UPDATE payment_attempts a SET
                 status = 'in_flight',
                 lease_owner = $3,
                 lease_token = a.lease_token + 1,
                 lease_expires_at = $4,
                 tries = a.tries + CASE WHEN due.hand_over THEN 0 ELSE 1 END,
                 dispatched_at = CASE WHEN due.hand_over THEN a.dispatched_at ELSE $1 END,
                 first_dispatched_at = COALESCE(a.first_dispatched_at, $1),
                 updated_at = $1
             FROM due
             WHERE a.payment_attempt_id = due.payment_attempt_id
             RETURNING a.payment_attempt_id, a.order_id, a.customer_id, a.amount_minor,
                       a.currency, a.payment_method, a.description, a.idempotency_key,
                       a.tries, a.lease_token, a.lease_expires_at, a.created_at,
                       a.first_dispatched_at, a.next_run_at, a.first_message_id,
                       a.correlation_id, due.hand_over
         ),
         transitions AS (
             INSERT INTO attempt_transitions
                 (payment_attempt_id, from_status, to_status, cause, actor, detail, at)
             SELECT payment_attempt_id, 'pending', 'in_flight',
                    CASE WHEN hand_over THEN 'claimed_for_hand_over' ELSE 'dispatched' END,
                    $7,
                    CASE WHEN hand_over THEN 'past its retry window; lease token ' || lease_token
                         ELSE 'try ' || tries || ', lease token ' || lease_token END,
                    $1
             FROM claimed
         )
         SELECT * FROM claimed ORDER BY next_run_at",
    )
    .bind(now)
    .bind(limits.limit as i64)
    .bind(owner)
    .bind(limits.lease_expires_at)
    .bind(limits.key_window_cutoff)
    .bind(limits.age_cutoff)
    .bind(actor(owner))
    .fetch_all(store.pool())
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(ClaimedAttempt {
                payment_attempt_id: row.try_get("payment_attempt_id")?,
                order_id: row.try_get("order_id")?,
                customer_id: row.try_get("customer_id")?,
                amount_minor: row.try_get("amount_minor")?,
                currency: row.try_get("currency")?,
                payment_method: row.try_get("payment_method")?,
                description: row.try_get("description")?,
                idempotency_key: row.try_get("idempotency_key")?,
                tries: row.try_get("tries")?,
                lease_token: row.try_get("lease_token")?,
                lease_owner: owner.to_owned(),
                lease_expires_at: row.try_get("lease_expires_at")?,
                created_at: row.try_get("created_at")?,
                first_dispatched_at: row.try_get("first_dispatched_at")?,
                dispatch: !row.try_get::<bool, _>("hand_over")?,
                first_message_id: row.try_get("first_message_id")?,
                correlation_id: row.try_get("correlation_id")?,
            })
        })
        .collect()
}

/// The actor name recorded on transitions.
pub fn actor(owner: &str) -> String {
    format!("executor:{owner}")
}

/// The evidence of one gateway call, appended to `gateway_calls`.
#[derive(Debug, Clone)]
pub struct GatewayCallRecord {
    pub payment_attempt_id: Uuid,
    /// `charge` or `lookup`.
    pub operation: &'static str,
    pub idempotency_key: String,
    pub try_number: i32,
    pub lease_token: Option<i64>,
    pub started_at: OffsetDateTime,
    pub finished_at: OffsetDateTime,
    pub http_status: Option<u16>,
    /// The classified outcome's label.
    pub outcome: String,
    pub gateway_charge_id: Option<String>,
    /// Bounded to 1000 characters by the caller.
    pub error: Option<String>,
}

/// Appends one call to `gateway_calls` on `conn` (inside the caller's transaction, or alone).
pub async fn record_gateway_call(
    conn: &mut PgConnection,
    call: &GatewayCallRecord,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO gateway_calls
             (payment_attempt_id, operation, idempotency_key, try_number, lease_token,
              started_at, finished_at, http_status, outcome, gateway_charge_id, error)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(call.payment_attempt_id)
    .bind(call.operation)
    .bind(&call.idempotency_key)
    .bind(call.try_number.max(0))
    .bind(call.lease_token)
    .bind(call.started_at)
    .bind(call.finished_at)
    .bind(call.http_status.map(i32::from))
    .bind(&call.outcome)
    .bind(&call.gateway_charge_id)
    .bind(
        call.error
            .as_deref()
            .map(|e| crate::domain::bounded(e, 1000)),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Where an in-flight attempt goes after its gateway call (or its hand-over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Final, with the gateway's charge id.
    Succeeded { charge_id: String },
    /// Final.
    Declined {
        charge_id: String,
        decline_code: Option<String>,
    },
    /// A person decides; the reason is the gateway's words.
    NeedsReview { reason: String },
    /// Back to `pending`, due at `next_run_at`. `refund_try` un-counts the try (a
    /// credentials fault is onecharge's fault, not the attempt's).
    Retry {
        next_run_at: OffsetDateTime,
        reason: String,
        refund_try: bool,
    },
    /// The reconciler's: the gateway may have charged, or retries are over.
    Unknown { reason: String },
}

impl Settlement {
    /// The state the attempt moves to.
    pub fn status(&self) -> AttemptStatus {
        match self {
            Self::Succeeded { .. } => AttemptStatus::Succeeded,
            Self::Declined { .. } => AttemptStatus::Declined,
            Self::NeedsReview { .. } => AttemptStatus::NeedsReview,
            Self::Retry { .. } => AttemptStatus::Pending,
            Self::Unknown { .. } => AttemptStatus::Unknown,
        }
    }
}

/// Writes where an in-flight attempt went, fenced by `attempt.lease_token`, in one
/// transaction with its transition (`cause`), its event (final states and `needs_review`)
/// and the gateway call's evidence. Returns false when the fence refused the write: the
/// lease was taken over, or the attempt already left `in_flight`; only the call's evidence
/// is then stored.
pub async fn settle_attempt(
    store: &Store,
    attempt: &ClaimedAttempt,
    settlement: &Settlement,
    cause: &str,
    call: Option<&GatewayCallRecord>,
    now: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    let fence = Fence {
        payment_attempt_id: attempt.payment_attempt_id,
        lease_token: attempt.lease_token,
        from: AttemptStatus::InFlight,
        actor: actor(&attempt.lease_owner),
    };
    settle(store, &fence, settlement, cause, call, now).await
}

/// What a write about an attempt must still find true to be allowed: the attempt is in
/// `from` under the token the writer was given. The executor's fence is `in_flight` + its
/// lease token; the reconciler's is `unknown` + the token of its claim.
#[derive(Debug, Clone)]
pub struct Fence {
    pub payment_attempt_id: Uuid,
    pub lease_token: i64,
    pub from: AttemptStatus,
    /// Recorded on the transition, e.g. `executor:host-123`.
    pub actor: String,
}

/// Moves a fenced attempt to where `settlement` says, in one transaction with its
/// transition, its event (final states and `needs_review`) and the call's evidence. Returns
/// false when the fence refused the write; only the call's evidence is then stored.
pub async fn settle(
    store: &Store,
    fence: &Fence,
    settlement: &Settlement,
    cause: &str,
    call: Option<&GatewayCallRecord>,
    now: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    let (charge_id, decline_code, review_reason, last_error, next_run_at, refund) = match settlement
    {
        Settlement::Succeeded { charge_id } => {
            (Some(charge_id.as_str()), None, None, None, None, 0)
        }
        Settlement::Declined {
            charge_id,
            decline_code,
        } => (
            Some(charge_id.as_str()),
            decline_code.as_deref(),
            None,
            None,
            None,
            0,
        ),
        Settlement::NeedsReview { reason } => (
            None,
            None,
            Some(reason.as_str()),
            Some(reason.as_str()),
            None,
            0,
        ),
        Settlement::Retry {
            next_run_at,
            reason,
            refund_try,
        } => (
            None,
            None,
            None,
            Some(reason.as_str()),
            Some(*next_run_at),
            i32::from(*refund_try),
        ),
        Settlement::Unknown { reason } => (None, None, None, Some(reason.as_str()), Some(now), 0),
    };
    let status = settlement.status();
    let detail = match settlement {
        Settlement::Succeeded { charge_id } => format!("charge {charge_id}"),
        Settlement::Declined { decline_code, .. } => {
            format!("decline code {}", decline_code.as_deref().unwrap_or("none"))
        }
        Settlement::Retry {
            next_run_at,
            reason,
            ..
        } => format!("due {next_run_at}: {reason}"),
        Settlement::NeedsReview { reason } | Settlement::Unknown { reason } => reason.clone(),
    };

    let mut tx = store.pool().begin().await?;
    let settled = sqlx::query(
        "WITH settled AS (
             UPDATE payment_attempts SET
                 status = $3,
                 lease_owner = NULL,
                 lease_expires_at = NULL,
                 gateway_charge_id = COALESCE($4, gateway_charge_id),
                 decline_code = COALESCE($5, decline_code),
                 review_reason = COALESCE($6, review_reason),
                 last_error = COALESCE($7, last_error),
                 next_run_at = COALESCE($8, next_run_at),
                 tries = GREATEST(tries - $9, 0),
                 updated_at = $10
             WHERE payment_attempt_id = $1 AND lease_token = $2 AND status = $14
             RETURNING payment_attempt_id, order_id, amount_minor, currency, first_message_id,
                       correlation_id, traceparent
         ),
         transition AS (
             INSERT INTO attempt_transitions
                 (payment_attempt_id, from_status, to_status, cause, actor, detail, at)
             SELECT payment_attempt_id, $14, $3, $11, $12, $13, $10 FROM settled
         )
         SELECT * FROM settled",
    )
    .bind(fence.payment_attempt_id)
    .bind(fence.lease_token)
    .bind(status.as_str())
    .bind(charge_id)
    .bind(decline_code)
    .bind(review_reason.map(|r| crate::domain::bounded(r, 1024)))
    .bind(last_error.map(|e| crate::domain::bounded(e, 1024)))
    .bind(next_run_at)
    .bind(refund)
    .bind(now)
    .bind(cause)
    .bind(&fence.actor)
    .bind(crate::domain::bounded(&detail, 2048))
    .bind(fence.from.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(call) = call {
        record_gateway_call(&mut tx, call).await?;
    }
    let Some(row) = settled else {
        tx.commit().await?;
        return Ok(false);
    };
    if status.event_name().is_some() {
        let (charge_id, decline_code, reason) = match settlement {
            Settlement::Succeeded { charge_id } => (Some(charge_id.clone()), None, None),
            Settlement::Declined {
                charge_id,
                decline_code,
            } => (Some(charge_id.clone()), decline_code.clone(), None),
            Settlement::NeedsReview { reason } => {
                (None, None, Some(crate::domain::bounded(reason, 1024)))
            }
            _ => (None, None, None),
        };
        let event = PaymentEvent {
            event_id: Uuid::new_v4(),
            payment_attempt_id: fence.payment_attempt_id,
            order_id: row.try_get("order_id")?,
            status,
            amount_minor: row.try_get("amount_minor")?,
            currency: row.try_get("currency")?,
            gateway_charge_id: charge_id,
            decline_code,
            reason,
            occurred_at: now,
        };
        let provenance = EventProvenance {
            correlation_id: row.try_get("correlation_id")?,
            causation_id: row.try_get("first_message_id")?,
            traceparent: row.try_get("traceparent")?,
        };
        outbox::insert_event(&mut tx, &event, &provenance).await?;
    }
    tx.commit().await?;
    Ok(true)
}
