//! The SQL of refunds (contract §2.5, §4.1): recording a refund command with its dedupe
//! row, admitting it against what its charge has left, claiming it under a fenced lease,
//! and writing each move with its transition, its event and its gateway call.
//!
//! Invariants kept here:
//! - Intake records the dedupe row and the refund in one transaction; a duplicate is found
//!   by the database's keys (`processed_messages`, the `refunds` primary key).
//! - Admission reserves the refund's amount on its charge's `refund_totals` row, whose
//!   CHECK keeps the reserved sum within the charged amount: two admissions at once
//!   serialize on that row, and one past the charge is refused, never written.
//! - A refund's amount stays reserved from admission until it fails or is refused; a
//!   refund in review keeps it (the gateway may have refunded).
//! - Every write after a claim names the lease token it holds; a final state, its
//!   transition and its one event (`refund_final_events`) commit together.
//!
//! About 780 lines: every statement of a refund's life in the order it lives it (record,
//! admit or refuse, claim, write a send's outcome, expire a lease, look up, settle), so that
//! each guard sits beside the moves it races; what operators read is `refund_reads`.

pub mod reads;

use crate::domain::{GatewayChargeId, MessageId};
use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::{FromRow as _, PgConnection, Row as _};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::lookup::{gateway_text, GATEWAY_ID_MAX_CHARS};
use crate::domain::refund::RefundPayment;
use crate::domain::refund_call::{unstored, RefundMove, RefundPolicy};
use crate::domain::refund_event::{RefundEvent, REFUND_COMMAND_SUBJECT, REFUND_DLQ_SUBJECT};
use crate::domain::{
    bounded, Actor, AttemptStatus, GatewayCallRecord, HeldRefund, Money, PaymentAttemptId,
    RefundId, RefundStatus,
};
use crate::store::kernel::{lock_due, Claim, REFUNDS};
use crate::store::Store;

/// A validated refund command with what intake records with it.
#[derive(Debug, Clone)]
pub struct RefundRecord {
    pub message_id: MessageId,
    pub stream_sequence: u64,
    pub body_sha256: [u8; 32],
    pub command: RefundPayment,
    pub correlation_id: Option<String>,
    pub traceparent: Option<String>,
}

/// What recording one refund command came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordedRefund {
    Accepted,
    /// The same message again.
    Duplicate,
    /// Another message for the same refund, asking the same.
    BusinessDuplicate,
    /// The same message id with another body, or the same `refund_id` for another charge
    /// or amount: dead-lettered as `conflict`.
    Conflict(String),
}

/// Records one refund command: its dedupe row and its refund (`waiting`), in one
/// transaction. Admission happens after, in the refund worker.
pub async fn record_refund(
    store: &Store,
    consumer: &str,
    record: &RefundRecord,
) -> Result<RecordedRefund, sqlx::Error> {
    let command = &record.command;
    let mut tx = store.pool().begin().await?;
    let fresh: Option<(String,)> = sqlx::query_as(
        "INSERT INTO processed_messages
             (consumer, message_id, body_sha256, payment_attempt_id, result, stream_sequence)
         VALUES ($1, $2, $3, $4, 'refund_accepted', $5)
         ON CONFLICT (consumer, message_id) DO NOTHING
         RETURNING message_id",
    )
    .bind(consumer)
    .bind(&record.message_id)
    .bind(record.body_sha256.to_vec())
    .bind(command.payment_attempt_id)
    .bind(record.stream_sequence as i64)
    .fetch_optional(&mut *tx)
    .await?;
    if fresh.is_none() {
        let (stored,): (Vec<u8>,) = sqlx::query_as(
            "SELECT body_sha256 FROM processed_messages WHERE consumer = $1 AND message_id = $2",
        )
        .bind(consumer)
        .bind(&record.message_id)
        .fetch_one(&mut *tx)
        .await?;
        return Ok(if stored == record.body_sha256 {
            RecordedRefund::Duplicate
        } else {
            RecordedRefund::Conflict(format!(
                "Nats-Msg-Id `{}` was already used for another body",
                record.message_id
            ))
        });
    }
    let created: Option<(RefundId,)> = sqlx::query_as(
        "WITH created AS (
             INSERT INTO refunds
                 (refund_id, payment_attempt_id, requested_minor, reason, metadata, requested_at,
                  fingerprint, idempotency_key, status, first_message_id, correlation_id,
                  traceparent)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'waiting', $9, $10, $11)
             ON CONFLICT (refund_id) DO NOTHING
             RETURNING refund_id, payment_attempt_id
         ),
         born AS (
             INSERT INTO refund_transitions
                 (refund_id, payment_attempt_id, from_status, to_status, cause, actor, detail)
             SELECT refund_id, payment_attempt_id, NULL, 'waiting', 'command_accepted', $12,
                    'message ' || $9 || ' (stream sequence ' || $13 || ')'
             FROM created
         )
         SELECT refund_id FROM created",
    )
    .bind(command.refund_id)
    .bind(command.payment_attempt_id)
    .bind(command.amount_minor)
    .bind(&command.reason)
    .bind(metadata_json(&command.metadata))
    .bind(command.requested_at)
    .bind(command.fingerprint().to_vec())
    .bind(command.idempotency_key().as_str())
    .bind(&record.message_id)
    .bind(&record.correlation_id)
    .bind(&record.traceparent)
    .bind(Actor::Intake(consumer.to_owned()).to_string())
    .bind(record.stream_sequence.to_string())
    .fetch_optional(&mut *tx)
    .await?;
    if created.is_some() {
        tx.commit().await?;
        return Ok(RecordedRefund::Accepted);
    }
    let (fingerprint,): (Vec<u8>,) =
        sqlx::query_as("SELECT fingerprint FROM refunds WHERE refund_id = $1")
            .bind(command.refund_id)
            .fetch_one(&mut *tx)
            .await?;
    if fingerprint != command.fingerprint() {
        // Not recorded: the dedupe row goes with the rollback, so a corrected replay can pass.
        return Ok(RecordedRefund::Conflict(format!(
            "refund_id {} was already recorded for another charge or amount",
            command.refund_id
        )));
    }
    sqlx::query(
        "UPDATE processed_messages SET result = 'refund_duplicate'
         WHERE consumer = $1 AND message_id = $2",
    )
    .bind(consumer)
    .bind(&record.message_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(RecordedRefund::BusinessDuplicate)
}

fn metadata_json(metadata: &BTreeMap<String, String>) -> Option<serde_json::Value> {
    (!metadata.is_empty()).then(|| serde_json::to_value(metadata).expect("strings serialise"))
}

/// How admitting one waiting refund ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundAdmission {
    /// Reserved and due for the gateway.
    Admitted,
    /// Its attempt is not final yet (or not recorded): asked again later.
    StillWaiting,
    /// Refused with this reason: event and dead letter written.
    Refused(String),
}

/// A waiting refund and its attempt, as admission reads them.
struct WaitingRefund {
    refund_id: RefundId,
    payment_attempt_id: PaymentAttemptId,
    requested_minor: Option<i64>,
    created_at: OffsetDateTime,
    now: OffsetDateTime,
    attempt_status: Option<AttemptStatus>,
    attempt_money: Option<Money>,
    gateway_charge_id: Option<GatewayChargeId>,
}

/// Admits up to `limit` due waiting refunds, each in its own transaction. A refund whose
/// attempt succeeded reserves its amount; one whose attempt ended `declined` or `expired`,
/// or is still not final after `max_wait`, or asks more than is left, is refused with its
/// reason, a `refund-failed` event and a dead letter. One still waiting is asked again
/// after `recheck`.
pub async fn admit_due(
    store: &Store,
    actor: &Actor,
    limit: i64,
    max_wait: Duration,
    recheck: Duration,
) -> Result<Vec<(RefundId, RefundAdmission)>, sqlx::Error> {
    let mut done = Vec::new();
    for _ in 0..limit {
        let mut tx = store.pool().begin().await?;
        let row = sqlx::query(&lock_due(
            REFUNDS,
            "r.refund_id, r.payment_attempt_id, r.requested_minor, r.created_at,
             now() AS now, a.status AS attempt_status, a.amount_minor, a.currency,
             a.gateway_charge_id",
            "LEFT JOIN payment_attempts a USING (payment_attempt_id)",
            "r.status = 'waiting' AND r.next_run_at <= now()",
            "r.next_run_at",
            "1",
        ))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else { break };
        let waiting = WaitingRefund {
            refund_id: row.try_get("refund_id")?,
            payment_attempt_id: row.try_get("payment_attempt_id")?,
            requested_minor: row.try_get("requested_minor")?,
            created_at: row.try_get("created_at")?,
            now: row.try_get("now")?,
            attempt_status: row
                .try_get::<Option<String>, _>("attempt_status")?
                .and_then(|s| s.parse::<AttemptStatus>().ok()),
            attempt_money: match row.try_get::<Option<i64>, _>("amount_minor")? {
                Some(_) => Some(Money::from_row(&row)?),
                None => None,
            },
            gateway_charge_id: row.try_get("gateway_charge_id")?,
        };
        let admission = admit_one(&mut tx, actor, &waiting, max_wait, recheck).await?;
        tx.commit().await?;
        done.push((waiting.refund_id, admission));
    }
    Ok(done)
}

async fn admit_one(
    tx: &mut PgConnection,
    actor: &Actor,
    waiting: &WaitingRefund,
    max_wait: Duration,
    recheck: Duration,
) -> Result<RefundAdmission, sqlx::Error> {
    let waited_too_long = waiting.now - waiting.created_at
        > time::Duration::try_from(max_wait).unwrap_or(time::Duration::MAX);
    let refuse = |reason: String| RefundAdmission::Refused(reason);
    let decision = match (waiting.attempt_status, waiting.attempt_money) {
        (Some(AttemptStatus::Succeeded), Some(money)) => {
            return reserve(tx, actor, waiting, money).await;
        }
        (Some(status @ (AttemptStatus::Declined | AttemptStatus::Expired)), _) => refuse(format!(
            "payment attempt {} ended {status}: nothing was charged, so nothing can be refunded",
            waiting.payment_attempt_id
        )),
        (None, _) if waited_too_long => refuse(format!(
            "payment attempt {} was never recorded within {}",
            waiting.payment_attempt_id,
            humantime::format_duration(max_wait)
        )),
        (Some(status), _) if waited_too_long => refuse(format!(
            "payment attempt {} is still {status} after {}: a refund waits for its charge only that long",
            waiting.payment_attempt_id,
            humantime::format_duration(max_wait)
        )),
        _ => RefundAdmission::StillWaiting,
    };
    match &decision {
        RefundAdmission::Refused(reason) => {
            refuse_waiting(tx, actor, waiting.refund_id, reason).await?
        }
        _ => {
            sqlx::query(
                "UPDATE refunds SET next_run_at = now() + $2, updated_at = now()
                 WHERE refund_id = $1",
            )
            .bind(waiting.refund_id)
            .bind(recheck)
            .execute(&mut *tx)
            .await?;
        }
    }
    Ok(decision)
}

/// Reserves the refund's amount (or what is left, when none was asked) on its charge's
/// `refund_totals` row and makes it due. Asking more than is left refuses it.
async fn reserve(
    tx: &mut PgConnection,
    actor: &Actor,
    waiting: &WaitingRefund,
    charged: Money,
) -> Result<RefundAdmission, sqlx::Error> {
    sqlx::query(
        "INSERT INTO refund_totals (payment_attempt_id, charged_minor) VALUES ($1, $2)
         ON CONFLICT (payment_attempt_id) DO NOTHING",
    )
    .bind(waiting.payment_attempt_id)
    .bind(charged.amount_minor())
    .execute(&mut *tx)
    .await?;
    // Locks the charge's row: every admission for this charge waits here for the others.
    let (reserved,): (i64,) = sqlx::query_as(
        "SELECT reserved_minor FROM refund_totals WHERE payment_attempt_id = $1 FOR UPDATE",
    )
    .bind(waiting.payment_attempt_id)
    .fetch_one(&mut *tx)
    .await?;
    let left = charged.amount_minor() - reserved;
    let amount = waiting.requested_minor.unwrap_or(left);
    if amount <= 0 || amount > left {
        let reason = if left <= 0 {
            format!(
                "nothing is left to refund of payment attempt {}: {} already refunded or being refunded",
                waiting.payment_attempt_id,
                Money::new(reserved, charged.currency())
            )
        } else {
            format!(
                "refunding {} would pass what is left of payment attempt {}: {} of {} charged",
                Money::new(amount, charged.currency()),
                waiting.payment_attempt_id,
                Money::new(left, charged.currency()),
                charged
            )
        };
        refuse_waiting(tx, actor, waiting.refund_id, &reason).await?;
        return Ok(RefundAdmission::Refused(reason));
    }
    // The CHECK `refund_totals_never_above_the_charge` holds this even if the arithmetic
    // above were wrong.
    sqlx::query(
        "UPDATE refund_totals SET reserved_minor = reserved_minor + $2
         WHERE payment_attempt_id = $1",
    )
    .bind(waiting.payment_attempt_id)
    .bind(amount)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "WITH moved AS (
             UPDATE refunds SET status = 'pending', amount_minor = $2, currency = $3,
                    gateway_charge_id = $4, next_run_at = now(), updated_at = now()
             WHERE refund_id = $1 AND status = 'waiting'
             RETURNING refund_id, payment_attempt_id
         )
         INSERT INTO refund_transitions
             (refund_id, payment_attempt_id, from_status, to_status, cause, actor, detail)
         SELECT refund_id, payment_attempt_id, 'waiting', 'pending', 'admitted', $5, $6
         FROM moved",
    )
    .bind(waiting.refund_id)
    .bind(amount)
    .bind(charged.currency().code())
    .bind(&waiting.gateway_charge_id)
    .bind(actor.to_string())
    .bind(format!(
        "{} reserved of {} charged; {} now reserved",
        Money::new(amount, charged.currency()),
        charged,
        Money::new(reserved + amount, charged.currency())
    ))
    .execute(&mut *tx)
    .await?;
    Ok(RefundAdmission::Admitted)
}

/// `waiting → refused`, with its event and its dead letter.
async fn refuse_waiting(
    tx: &mut PgConnection,
    actor: &Actor,
    refund_id: RefundId,
    reason: &str,
) -> Result<(), sqlx::Error> {
    let reason = bounded(reason, 1000);
    sqlx::query(
        "WITH moved AS (
             UPDATE refunds SET status = 'refused', failure_reason = $2, settled_at = now(),
                    updated_at = now()
             WHERE refund_id = $1 AND status = 'waiting'
             RETURNING refund_id, payment_attempt_id
         )
         INSERT INTO refund_transitions
             (refund_id, payment_attempt_id, from_status, to_status, cause, actor, detail)
         SELECT refund_id, payment_attempt_id, 'waiting', 'refused', 'refused', $3, $2
         FROM moved",
    )
    .bind(refund_id)
    .bind(&reason)
    .bind(actor.to_string())
    .execute(&mut *tx)
    .await?;
    announce_final(tx, refund_id).await?;
    dead_letter(tx, refund_id, &reason).await
}

/// The columns of a [`HeldRefund`] on the alias `r`.
const HELD_REFUND_COLUMNS: &str = "r.refund_id, r.payment_attempt_id, r.idempotency_key, \
     r.amount_minor, r.currency, r.reason, r.metadata, r.gateway_charge_id, \
     r.gateway_refund_id, r.status, r.lease_token, r.tries, r.lookups, r.failed_lookups, \
     r.first_sent_at, r.last_sent_at, r.created_at, now() AS now";

impl sqlx::FromRow<'_, PgRow> for HeldRefund {
    fn from_row(row: &PgRow) -> Result<Self, sqlx::Error> {
        let metadata: Option<sqlx::types::Json<BTreeMap<String, String>>> =
            row.try_get("metadata")?;
        Ok(Self {
            refund_id: row.try_get("refund_id")?,
            payment_attempt_id: row.try_get("payment_attempt_id")?,
            idempotency_key: row.try_get("idempotency_key")?,
            money: Money::from_row(row)?,
            reason: row.try_get("reason")?,
            metadata: metadata.map(|m| m.0).unwrap_or_default(),
            gateway_charge_id: row.try_get("gateway_charge_id")?,
            gateway_refund_id: row.try_get("gateway_refund_id")?,
            status: row.try_get("status")?,
            lease_token: row.try_get("lease_token")?,
            tries: row.try_get("tries")?,
            lookups: row.try_get("lookups")?,
            failed_lookups: row.try_get("failed_lookups")?,
            first_sent_at: row.try_get("first_sent_at")?,
            last_sent_at: row.try_get("last_sent_at")?,
            created_at: row.try_get("created_at")?,
            now: row.try_get("now")?,
        })
    }
}

/// How many refunds are due now, each count up to `limit`: to be sent (`pending`) and to
/// be looked up (`unknown`, `processing`). What a worker under `gateway_max_rate` asks
/// permits for, so that an idle pass takes no token from the fleet's bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct Due {
    pub sends: i64,
    pub lookups: i64,
}

pub async fn due(store: &Store, limit: i64) -> Result<Due, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT (SELECT count(*) FROM (SELECT 1 FROM refunds WHERE {sendable} LIMIT $1) s)
                    AS sends,
                (SELECT count(*) FROM (SELECT 1 FROM refunds WHERE {LOOKUP_DUE} LIMIT $1) l)
                    AS lookups",
        sendable = SENDABLE.as_str()
    ))
    .bind(limit)
    .fetch_one(store.pool())
    .await
}

/// A refund [`claim_pending`] may claim now (and [`due`] counts): `pending`, due, and no
/// open pause covering it (its scope takes refunds, its currency is none or the refund's;
/// decisions 145 and 265).
static SENDABLE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "status = 'pending' AND next_run_at <= now() AND NOT {}",
        crate::store::fleet::HELD_REFUND
    )
});

/// A refund [`claim_lookups`] may claim now (and [`due`] counts).
const LOOKUP_DUE: &str = "status IN ('unknown', 'processing') AND next_run_at <= now()";

/// Claims up to `limit` due `pending` refunds for the gateway: `in_flight` under a lease,
/// fencing token + 1, try + 1, send times stamped; with each claim's transition, committed
/// before any call. Nothing an open pause covers is claimed.
pub async fn claim_pending(
    store: &Store,
    actor: &Actor,
    lease: Duration,
    limit: i64,
) -> Result<Vec<HeldRefund>, sqlx::Error> {
    let sql = Claim {
        queue: REFUNDS,
        due_columns: "",
        due: &SENDABLE,
        order: "next_run_at",
        limit: "$1",
        set: "status = 'in_flight', lease_owner = $2,
            lease_token = r.lease_token + 1, lease_expires_at = now() + $3,
            tries = r.tries + 1, first_sent_at = COALESCE(r.first_sent_at, now()),
            last_sent_at = now(), updated_at = now()",
        returning: HELD_REFUND_COLUMNS,
    }
    .sql(
        ",
         moved AS (
             INSERT INTO refund_transitions
                 (refund_id, payment_attempt_id, from_status, to_status, cause, actor, detail)
             SELECT refund_id, payment_attempt_id, 'pending', 'in_flight', 'claimed', $2,
                    'try ' || tries || ', lease token ' || lease_token
             FROM claimed
         )
         SELECT * FROM claimed",
    );
    sqlx::query_as(&sql)
        .bind(limit)
        .bind(actor.to_string())
        .bind(lease)
        .fetch_all(store.pool())
        .await
}

/// Claims up to `limit` refunds due for a lookup (`unknown`, `processing`): the fencing
/// token moves on and the refund is put out of reach for `lease`, so one reconciler asks
/// at a time and a slower one's answer is refused.
pub async fn claim_lookups(
    store: &Store,
    lease: Duration,
    limit: i64,
) -> Result<Vec<HeldRefund>, sqlx::Error> {
    let sql = Claim {
        queue: REFUNDS,
        due_columns: "",
        due: LOOKUP_DUE,
        order: "next_run_at",
        limit: "$1",
        set: "lease_token = r.lease_token + 1, next_run_at = now() + $2, updated_at = now()",
        returning: HELD_REFUND_COLUMNS,
    }
    .sql(" SELECT * FROM claimed");
    sqlx::query_as(&sql)
        .bind(limit)
        .bind(lease)
        .fetch_all(store.pool())
        .await
}

/// Moves every refund whose executor's lease ran out to `unknown`: it may have been sent.
/// The fencing token moves on, so a late answer from that executor is refused.
pub async fn expire_leases(store: &Store, actor: &Actor) -> Result<u64, sqlx::Error> {
    let moved = sqlx::query(
        "WITH expired AS (
             UPDATE refunds SET status = 'unknown', lease_expires_at = NULL,
                    lease_token = lease_token + 1, next_run_at = now(), updated_at = now(),
                    last_error = 'the lease expired while the refund may have been sent'
             WHERE status = 'in_flight' AND lease_expires_at < now()
             RETURNING refund_id, payment_attempt_id
         )
         INSERT INTO refund_transitions
             (refund_id, payment_attempt_id, from_status, to_status, cause, actor, detail)
         SELECT refund_id, payment_attempt_id, 'in_flight', 'unknown', 'lease_expired', $1,
                'its executor stopped answering; the reconciler looks it up'
         FROM expired",
    )
    .bind(actor.to_string())
    .execute(store.pool())
    .await?;
    Ok(moved.rows_affected())
}

/// What writing a refund's move came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Moved to this status.
    Moved(RefundStatus),
    /// The fence refused it: someone else holds the refund now (only the call is on record).
    Fenced,
}

/// Writes where a call moved `held` ([`settle`], with the call's evidence). When the
/// database refuses the move for its data (SQLSTATE class 22 or 23: a value it will not
/// keep), the call's evidence is stored alone and the failure is counted like a failed
/// lookup (`refund_call::unstored`): checked again along `reconciler.schedule`, and once it
/// is used up a person is told why and what the gateway answered. So no answer, however
/// malformed, keeps a refund cycling.
#[allow(clippy::too_many_arguments)]
pub async fn write(
    store: &Store,
    held: &HeldRefund,
    next: RefundMove,
    cause: &str,
    actor: &Actor,
    call: &GatewayCallRecord,
    policy: &RefundPolicy,
    answer: &str,
    now: OffsetDateTime,
) -> Result<Written, sqlx::Error> {
    let written = |moved: bool, to: RefundStatus| {
        if moved {
            Written::Moved(to)
        } else {
            Written::Fenced
        }
    };
    match settle(store, held, &next, cause, actor, Some(call)).await {
        Ok(moved) => Ok(written(moved, next.status())),
        Err(err) if crate::store::blames_the_data(&err) => {
            tracing::error!(error = %err, answer, "the database refused the refund's move; counting it like a failed lookup");
            if let Err(evidence_err) =
                crate::store::attempts::record_gateway_call_alone(store, call).await
            {
                tracing::error!(error = %evidence_err, "cannot store the call's evidence either");
            }
            let instead = unstored(held, &err.to_string(), answer, policy, now);
            let moved = settle(store, held, &instead, "settlement_refused", actor, None).await?;
            Ok(written(moved, instead.status()))
        }
        Err(err) => Err(err),
    }
}

/// Writes `next` for `held`, fenced by the lease token (and, for an executor's refund,
/// its `in_flight` status), with its transition, its gateway call, and for a final state
/// its event; a failed refund gives its amount back. `false` when the fence refused it:
/// someone else holds the refund now, and only the call was recorded.
pub async fn settle(
    store: &Store,
    held: &HeldRefund,
    next: &RefundMove,
    cause: &str,
    actor: &Actor,
    call: Option<&GatewayCallRecord>,
) -> Result<bool, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let moved = settle_in(&mut tx, held, next, cause, actor, call).await?;
    tx.commit().await?;
    Ok(moved)
}

/// [`settle`] inside the caller's transaction (a person's resolution writes its audit row
/// in the same one).
async fn settle_in(
    tx: &mut PgConnection,
    held: &HeldRefund,
    next: &RefundMove,
    cause: &str,
    actor: &Actor,
    call: Option<&GatewayCallRecord>,
) -> Result<bool, sqlx::Error> {
    let to = next.status();
    if let Some(call) = call {
        crate::store::attempts::record_gateway_call(&mut *tx, call).await?;
    }
    let (gateway_refund_id, reason, next_run_at, count_try) = match next {
        RefundMove::Succeeded { gateway_refund_id } => {
            (Some(gateway_refund_id.clone()), None, None, true)
        }
        RefundMove::Failed {
            gateway_refund_id,
            reason,
        } => (gateway_refund_id.clone(), Some(reason.clone()), None, true),
        RefundMove::Processing {
            gateway_refund_id,
            next,
        } => (Some(gateway_refund_id.clone()), None, Some(*next), true),
        RefundMove::Unknown { reason, next, .. } => (None, Some(reason.clone()), Some(*next), true),
        RefundMove::Pending {
            reason,
            next,
            count_try,
        } => (None, Some(reason.clone()), Some(*next), *count_try),
        RefundMove::NeedsReview { reason } => (None, Some(reason.clone()), None, true),
    };
    let reason = reason.map(|r| gateway_text(&r, 1000));
    let gateway_refund_id = gateway_refund_id.map(|id| gateway_text(&id, GATEWAY_ID_MAX_CHARS));
    let looked_up = held.status != RefundStatus::InFlight;
    let moved: Option<(String,)> = sqlx::query_as(
        "WITH before AS (
             SELECT refund_id, status FROM refunds
             WHERE refund_id = $1 AND lease_token = $2 AND status = $3
             FOR UPDATE
         ),
         moved AS (
             UPDATE refunds r SET status = $4,
                    lease_expires_at = NULL,
                    gateway_refund_id = COALESCE($5, r.gateway_refund_id),
                    failure_reason = CASE WHEN $4 = 'failed' THEN $6 ELSE r.failure_reason END,
                    review_reason = CASE WHEN $4 = 'needs_review' THEN $6 ELSE r.review_reason END,
                    last_error = CASE WHEN $4 IN ('pending', 'unknown') THEN $6 ELSE r.last_error END,
                    next_run_at = COALESCE($7, r.next_run_at),
                    tries = CASE WHEN $8 THEN r.tries ELSE GREATEST(r.tries - 1, 0) END,
                    lookups = CASE WHEN $9 THEN r.lookups + 1 ELSE r.lookups END,
                    failed_lookups = CASE $12::text WHEN 'count' THEN r.failed_lookups + 1
                                                    WHEN 'restart' THEN 0
                                                    ELSE r.failed_lookups END,
                    settled_at = CASE WHEN $4 IN ('succeeded', 'failed') THEN now() ELSE NULL END,
                    updated_at = now()
             FROM before WHERE r.refund_id = before.refund_id
             RETURNING r.refund_id, r.payment_attempt_id, before.status AS from_status
         ),
         noted AS (
             INSERT INTO refund_transitions
                 (refund_id, payment_attempt_id, from_status, to_status, cause, actor, detail)
             SELECT refund_id, payment_attempt_id, from_status, $4, $10, $11, $6 FROM moved
         )
         SELECT from_status FROM moved",
    )
    .bind(held.refund_id)
    .bind(held.lease_token)
    .bind(held.status.as_str())
    .bind(to.as_str())
    .bind(gateway_refund_id)
    .bind(&reason)
    .bind(next_run_at)
    .bind(count_try)
    .bind(looked_up)
    .bind(cause)
    .bind(actor.to_string())
    .bind(next.failed_lookups().as_str())
    .fetch_optional(&mut *tx)
    .await?;
    if moved.is_none() {
        return Ok(false);
    }
    if to == RefundStatus::Failed {
        release(&mut *tx, held.payment_attempt_id, held.money.amount_minor()).await?;
    }
    if to.is_final() {
        announce_final(&mut *tx, held.refund_id).await?;
    }
    Ok(true)
}

/// Claims refund `refund_id` for a person's resolution: in `needs_review`, or `succeeded`
/// (a refund the gateway failed after it succeeded), its fence moves on so that whatever
/// held it before writes nothing after; `None` when it is in another state or absent.
pub async fn claim_for_resolution(
    store: &Store,
    refund_id: RefundId,
) -> Result<Option<HeldRefund>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE refunds r SET lease_token = r.lease_token + 1, updated_at = now()
         WHERE r.refund_id = $1 AND r.status IN ('needs_review', 'succeeded')
         RETURNING {HELD_REFUND_COLUMNS}"
    ))
    .bind(refund_id)
    .fetch_optional(store.pool())
    .await
}

/// Writes a person's resolution of `held` (fenced by its claim) with the lookup that
/// checked it and the person's audit row, in one transaction: the move, its transition,
/// the amount given back for `failed`, and the refund's one event of that state. The audit
/// row's id, or `None` when the fence refused it (someone else moved the refund meanwhile).
pub async fn resolve(
    store: &Store,
    held: &HeldRefund,
    next: &RefundMove,
    actor: &Actor,
    call: &GatewayCallRecord,
    audit: &crate::store::audit::NewAuditEntry,
) -> Result<Option<i64>, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    if !settle_in(&mut tx, held, next, "operator_resolved", actor, Some(call)).await? {
        return Ok(None);
    }
    let audit_id = crate::store::audit::insert(&mut tx, audit).await?;
    tx.commit().await?;
    Ok(Some(audit_id))
}

/// Gives a failed refund's amount back to its charge.
async fn release(
    tx: &mut PgConnection,
    payment_attempt_id: PaymentAttemptId,
    amount_minor: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE refund_totals SET reserved_minor = reserved_minor - $2
         WHERE payment_attempt_id = $1",
    )
    .bind(payment_attempt_id)
    .bind(amount_minor)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Writes the one event of a refund's final state, read from its row; the key of
/// `refund_final_events` refuses a second one.
async fn announce_final(tx: &mut PgConnection, refund_id: RefundId) -> Result<(), sqlx::Error> {
    let row = sqlx::query(
        "SELECT refund_id, payment_attempt_id, status, amount_minor, currency,
                gateway_refund_id, failure_reason, first_message_id, correlation_id,
                traceparent, now() AS now
         FROM refunds WHERE refund_id = $1",
    )
    .bind(refund_id)
    .fetch_one(&mut *tx)
    .await?;
    let status: RefundStatus = row.try_get("status")?;
    let Some(subject) = RefundEvent::subject_of(status) else {
        return Ok(());
    };
    let event = RefundEvent {
        event_id: Uuid::new_v4(),
        refund_id,
        payment_attempt_id: row.try_get("payment_attempt_id")?,
        status: status.as_str().to_owned(),
        amount_minor: row.try_get("amount_minor")?,
        currency: row.try_get("currency")?,
        gateway_refund_id: row.try_get("gateway_refund_id")?,
        reason: row.try_get("failure_reason")?,
        occurred_at: row.try_get("now")?,
    };
    sqlx::query(
        "INSERT INTO refund_final_events (refund_id, status, event_id) VALUES ($1, $2, $3)",
    )
    .bind(refund_id)
    .bind(status.as_str())
    .bind(event.event_id)
    .execute(&mut *tx)
    .await?;
    let headers = provenance_headers(&row, &event.event_id.to_string())?;
    insert_outbox(
        tx,
        event.event_id,
        event.payment_attempt_id,
        RefundEvent::outbox_status(status),
        subject,
        headers,
        serde_json::to_value(&event).expect("an event always serialises"),
    )
    .await
}

/// The dead letter of a refund refused after it was recorded (contract §2.5): the command
/// as recorded, with the `Dlq-*` headers of §2.2 and class `refused`, published by the relay
/// on `payments.dlq.refund-payment.v1`.
async fn dead_letter(
    tx: &mut PgConnection,
    refund_id: RefundId,
    reason: &str,
) -> Result<(), sqlx::Error> {
    let row = sqlx::query(
        "SELECT refund_id, payment_attempt_id, requested_minor, reason, metadata,
                onecharge_rfc3339(requested_at) AS requested_at, first_message_id,
                correlation_id, traceparent
         FROM refunds WHERE refund_id = $1",
    )
    .bind(refund_id)
    .fetch_one(&mut *tx)
    .await?;
    let payment_attempt_id: PaymentAttemptId = row.try_get("payment_attempt_id")?;
    let mut body = serde_json::json!({
        "refund_id": refund_id,
        "payment_attempt_id": payment_attempt_id,
        "reason": row.try_get::<String, _>("reason")?,
    });
    if let Some(amount) = row.try_get::<Option<i64>, _>("requested_minor")? {
        body["amount_minor"] = amount.into();
    }
    if let Some(at) = row.try_get::<Option<String>, _>("requested_at")? {
        body["requested_at"] = at.into();
    }
    if let Some(metadata) = row.try_get::<Option<serde_json::Value>, _>("metadata")? {
        body["metadata"] = metadata;
    }
    let message_id = format!("dlq-refund-{refund_id}");
    let mut headers = provenance_headers(&row, &message_id)?;
    let first_message_id: String = row.try_get("first_message_id")?;
    for (name, value) in [
        ("Dlq-Reason", bounded(reason, 512).replace('\n', " ")),
        ("Dlq-Class", "refused".to_owned()),
        ("Dlq-Original-Subject", REFUND_COMMAND_SUBJECT.to_owned()),
        ("Dlq-Original-Msg-Id", first_message_id),
    ] {
        headers[name] = value.into();
    }
    insert_outbox(
        tx,
        Uuid::new_v4(),
        payment_attempt_id,
        "refund_dead_letter",
        REFUND_DLQ_SUBJECT,
        headers,
        body,
    )
    .await
}

/// `Nats-Msg-Id`, `Causation-Id` and the command's `Correlation-Id` and `traceparent`.
fn provenance_headers(row: &PgRow, message_id: &str) -> Result<serde_json::Value, sqlx::Error> {
    let mut headers = serde_json::json!({
        "Nats-Msg-Id": message_id,
        "Causation-Id": row.try_get::<String, _>("first_message_id")?,
    });
    for name in ["correlation_id", "traceparent"] {
        if let Some(value) = row.try_get::<Option<String>, _>(name)? {
            let header = if name == "correlation_id" {
                "Correlation-Id"
            } else {
                "traceparent"
            };
            headers[header] = value.into();
        }
    }
    Ok(headers)
}

async fn insert_outbox(
    tx: &mut PgConnection,
    event_id: Uuid,
    payment_attempt_id: PaymentAttemptId,
    status: &str,
    subject: &str,
    headers: serde_json::Value,
    payload: serde_json::Value,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO outbox (event_id, payment_attempt_id, status, subject, headers, payload)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(event_id)
    .bind(payment_attempt_id)
    .bind(status)
    .bind(subject)
    .bind(headers)
    .bind(payload)
    .execute(&mut *tx)
    .await?;
    Ok(())
}
