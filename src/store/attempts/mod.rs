//! The SQL of payment attempts in motion: claiming due attempts under a fenced lease, and
//! writing each fenced settlement (the executor's and the reconciler's) together with its
//! transition, its event and the gateway-call evidence.
//!
//! Invariants kept here:
//! - A claim commits, with the dispatch stamp and the claim's history id and time on the
//!   attempt's row, before any gateway call (the claim is one statement). The claim's
//!   history entry (`pending → in_flight`) is written with the move that ends the flight:
//!   the settlement's history row records both moves; any other move out of `in_flight`
//!   gets the claim written as a row of its own by the trigger `attempt_claim_written`
//!   (decision 220).
//! - Every later write names the lease token it holds: `WHERE lease_token = $n AND status =
//!   'in_flight'`. A worker whose lease was taken over writes nothing (it only adds its
//!   gateway call to the evidence, as a `gateway_calls` row).
//! - A settlement's call is carried by the history row of the move it caused (its id from
//!   `gateway_calls_id_seq`); `gateway_call_records` lists both kinds (decision 221).
//! - A final state, its transition and its outbox event commit in one statement (a batch of
//!   settlements is one round trip); the key `outbox_one_event_per_final_state` of
//!   `outbox_final_states` refuses a second event.
//!
//! About 800 lines: every statement that writes an attempt in motion (claim, hand back,
//! expire, the settlement batches, the call evidence), because they share one fence, one
//! column list and one way of making gateway text storable.

pub mod cancel;
pub mod counts;
pub mod gateway_objects;
pub mod lookups;
pub mod resolve;

use std::sync::LazyLock;

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{Arguments as _, PgConnection, Row as _};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::event::PaymentEvent;
use crate::domain::{
    Actor, Announced, ChargeClaim, EventAttempt, GatewayCallRecord, GatewayChargeId, HeldAttempt,
    KeySeq, Money, PaymentAttemptId, SettleWrite, Settlement,
};
use crate::store::kernel::{Claim, ATTEMPTS};
use crate::store::{column, outbox, Store};

/// The columns of a [`HeldAttempt`], as every claim's `RETURNING` (or `SELECT`) names
/// them, on the alias `a`: the one place a held attempt is read.
pub(super) const HELD_COLUMNS: &str = "a.payment_attempt_id, a.idempotency_key, a.amount_minor, \
     a.currency, a.status, a.lease_token, a.lease_expires_at, a.tries, a.reconcile_checks, \
     a.created_at, a.first_dispatched_at, a.dispatched_at, now() AS claimed_at, \
     a.create_key_seq, a.confirm_key_seq, a.gateway_object_id";

/// A held attempt, read from a claim's row ([`HELD_COLUMNS`]).
impl sqlx::FromRow<'_, PgRow> for HeldAttempt {
    fn from_row(row: &PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            payment_attempt_id: row.try_get("payment_attempt_id")?,
            idempotency_key: row.try_get("idempotency_key")?,
            money: Money::from_row(row)?,
            held_as: row.try_get("status")?,
            lease_token: row.try_get("lease_token")?,
            lease_expires_at: row.try_get("lease_expires_at")?,
            tries: row.try_get("tries")?,
            reconcile_checks: row.try_get("reconcile_checks")?,
            created_at: row.try_get("created_at")?,
            first_dispatched_at: row.try_get("first_dispatched_at")?,
            dispatched_at: row.try_get("dispatched_at")?,
            claimed_at: row.try_get("claimed_at")?,
            key_seq: KeySeq {
                create: row.try_get("create_key_seq")?,
                confirm: row.try_get("confirm_key_seq")?,
            },
            gateway_object_id: row.try_get("gateway_object_id")?,
        })
    }
}

/// The executor's claim, read from [`claim_due_attempts`]' row.
impl sqlx::FromRow<'_, PgRow> for ChargeClaim {
    fn from_row(row: &PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            attempt: HeldAttempt::from_row(row)?,
            order_id: row.try_get("order_id")?,
            customer_id: row.try_get("customer_id")?,
            payment_method: row.try_get("payment_method")?,
            description: row.try_get("description")?,
            lease_owner: row.try_get("lease_owner")?,
            dispatch: row.try_get("dispatch")?,
            first_message_id: row.try_get("first_message_id")?,
            correlation_id: row.try_get("correlation_id")?,
        })
    }
}

/// Where a claim query draws the line for hand-overs.
#[derive(Debug, Clone, Copy)]
pub struct ClaimLimits {
    /// Claim at most this many.
    pub limit: usize,
    /// How long the lease lasts, from the database's `now()`.
    pub lease: std::time::Duration,
    /// An attempt first sent this long ago or more (by the database's clock) is not
    /// re-sent: the gateway may forget its key.
    pub key_window: std::time::Duration,
    /// An attempt recorded this long ago or more gets no further retry.
    pub max_age: std::time::Duration,
    /// `intake.max_command_age`: an attempt never sent whose command was requested longer
    /// ago than this (by the database's clock) is not claimed; [`expire_stale_commands`]
    /// expires it. Zero disables the check.
    pub max_command_age: std::time::Duration,
}

/// Claims up to `limits.limit` due `pending` attempts, oldest due first, skipping rows other
/// executors hold (the kernel's claim, `crate::store::kernel`). In one statement it moves them to `in_flight`
/// under a lease owned by `owner`, increments each fencing token, stamps `dispatched_at`
/// (and `first_dispatched_at` when unset), counts the try, and records the claim on the row
/// (its history id, time and kind: the history shows it from there, and the move that ends
/// the flight writes it; decision 220).
/// Attempts past their retry window are claimed as hand-overs: no stamp, no try.
///
/// Every time here is the database's `now()` — due times, the lease, the dispatch stamps,
/// the key window and age cut-offs — never the host's clock, so an executor whose clock is
/// off neither stretches the key window nor shortens a lease.
pub async fn claim_due_attempts(
    store: &Store,
    owner: &str,
    limits: ClaimLimits,
) -> Result<Vec<ChargeClaim>, sqlx::Error> {
    let returning = format!(
        "{HELD_COLUMNS}, a.order_id, a.customer_id, a.payment_method, a.description,
         a.lease_owner, a.next_run_at, a.first_message_id, a.correlation_id, due.hand_over"
    );
    // `IS TRUE`: due is a filter of the scan in next_run_at order, not a range the planner
    // sizes from statistics (decision 121); an attempt an open pause covers is not claimed
    // (decisions 145 and 265: its scope takes charges, its currency is none or the
    // attempt's), asked in this statement so that nothing is claimed once a pause commits
    let due = format!(
        "status = 'pending' AND (next_run_at <= now()) IS TRUE
         AND NOT ($6::float8 > 0 AND first_dispatched_at IS NULL
                  AND requested_at IS NOT NULL
                  AND requested_at <= now() - make_interval(secs => $6::float8))
         AND NOT {}",
        crate::store::fleet::HELD_CHARGE
    );
    sqlx::query_as(
        &Claim {
            queue: ATTEMPTS,
            due_columns: ",
                (first_dispatched_at IS NOT NULL
                 AND (first_dispatched_at <= now() - make_interval(secs => $4::float8)
                      OR created_at <= now() - make_interval(secs => $5::float8))) AS hand_over",
            due: &due,
            order: "next_run_at",
            limit: "$1",
            // the claim's history entry is written with the move that ends the flight
            // (decision 220): its id, in the order of every other move, its time and kind
            set: "status = 'in_flight',
                lease_owner = $2,
                lease_token = a.lease_token + 1,
                lease_expires_at = now() + make_interval(secs => $3::float8),
                tries = a.tries + CASE WHEN due.hand_over THEN 0 ELSE 1 END,
                dispatched_at = CASE WHEN due.hand_over THEN a.dispatched_at ELSE now() END,
                first_dispatched_at = COALESCE(a.first_dispatched_at, now()),
                claim_id = nextval('attempt_transitions_id_seq'),
                claim_at = now(),
                claim_hand_over = due.hand_over,
                updated_at = now()",
            returning: &returning,
        }
        .sql(" SELECT *, NOT hand_over AS dispatch FROM claimed ORDER BY next_run_at"),
    )
    .bind(limits.limit as i64)
    .bind(owner)
    .bind(limits.lease.as_secs_f64())
    .bind(limits.key_window.as_secs_f64())
    .bind(limits.max_age.as_secs_f64())
    .bind(limits.max_command_age.as_secs_f64())
    .fetch_all(store.pool())
    .await
}

/// Hands attempts this executor claimed but never sent back to `pending`, at once and
/// fenced by each lease token, so that any instance may claim them again without waiting
/// for the lease to expire: the lease is released, the try the claim counted is un-counted,
/// a first dispatch stamp that this claim set is cleared (no gateway has seen the key), and
/// `next_run_at` is left as it was, so the attempt keeps its place in the queue. Each gets
/// an `in_flight → pending` transition (`handed_back`, with `why`), after its claim's own
/// row (written by the trigger `attempt_claim_written`). Only for attempts no
/// call was made for. Returns how many the fences let through.
pub async fn hand_back(
    store: &Store,
    attempts: &[&ChargeClaim],
    why: &str,
) -> Result<usize, sqlx::Error> {
    let Some(first) = attempts.first() else {
        return Ok(0);
    };
    static STATEMENT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "WITH input AS (
             SELECT * FROM unnest($1::uuid[], $2::int8[], $3::int4[])
                 AS i(payment_attempt_id, lease_token, refund)
         ),
         {LOCKED_IN_KEY_ORDER},
         back AS (
             UPDATE payment_attempts a SET
                 status = 'pending',
                 lease_owner = NULL,
                 lease_expires_at = NULL,
                 tries = GREATEST(a.tries - i.refund, 0),
                 first_dispatched_at = CASE WHEN i.refund = 1 AND a.first_dispatched_at = a.dispatched_at
                                            THEN NULL ELSE a.first_dispatched_at END,
                 dispatched_at = CASE WHEN i.refund = 1 AND a.first_dispatched_at = a.dispatched_at
                                      THEN NULL ELSE a.dispatched_at END,
                 updated_at = now()
             FROM input i JOIN locked USING (payment_attempt_id)
             WHERE a.payment_attempt_id = i.payment_attempt_id
               AND a.lease_token = i.lease_token
               AND a.status = 'in_flight'
             RETURNING a.payment_attempt_id, i.lease_token
         ),
         transitions AS (
             INSERT INTO attempt_transitions
                 (payment_attempt_id, from_status, to_status, cause, actor, detail, at)
             SELECT payment_attempt_id, 'in_flight', 'pending', 'handed_back', $4,
                    $5 || '; lease token ' || lease_token || ', never sent, no try used', now()
             FROM back
         )
         SELECT count(*) FROM back"
        )
    });
    let handed: i64 = sqlx::query_scalar(&STATEMENT)
        .bind(column(attempts, |a| a.attempt.payment_attempt_id))
        .bind(column(attempts, |a| a.attempt.lease_token))
        .bind(column(attempts, |a| i32::from(a.dispatch)))
        .bind(Actor::Executor(first.lease_owner.clone()).to_string())
        .bind(gateway_text(why, 1900))
        .fetch_one(store.pool())
        .await?;
    Ok(usize::try_from(handed).unwrap_or(0))
}

/// Moves up to `limit` due `pending` attempts that were never sent, and whose command was
/// requested more than `max_command_age` ago, to `expired` — with their transition and
/// `payment-expired` event, in one transaction — instead of charging them late (after an
/// outage, say). The age is measured from `requested_at`, as intake measures it, by the
/// database's clock. An attempt sent before is left alone: the gateway may hold its charge,
/// and only the key window decides its fate. Zero disables the check. Returns the ids.
pub async fn expire_stale_commands(
    store: &Store,
    owner: &str,
    max_command_age: std::time::Duration,
    limit: usize,
) -> Result<Vec<PaymentAttemptId>, sqlx::Error> {
    if max_command_age.is_zero() {
        return Ok(Vec::new());
    }
    let reason = format!(
        "never sent to the gateway: the command was older than intake.max_command_age ({}) when it was due to be sent",
        humantime::format_duration(max_command_age)
    );
    let mut tx = store.pool().begin().await?;
    let rows: Vec<ExpiredRow> = sqlx::query_as(
        &Claim {
            queue: ATTEMPTS,
            due_columns: "",
            due: "status = 'pending' AND next_run_at <= now()
                AND first_dispatched_at IS NULL
                AND requested_at <= now() - make_interval(secs => $1::float8)",
            order: "next_run_at",
            limit: "$2",
            set: "status = 'expired', last_error = $3, updated_at = now()",
            returning: "a.payment_attempt_id, a.order_id, a.amount_minor, a.currency,
                a.requested_at, a.first_message_id, a.correlation_id, a.traceparent,
                a.updated_at",
        }
        .sql(
            ",
             transitions AS (
                 INSERT INTO attempt_transitions
                     (payment_attempt_id, from_status, to_status, cause, actor, detail, at)
                 SELECT payment_attempt_id, 'pending', 'expired', 'stale_at_dispatch', $4,
                        'requested at ' || requested_at || ': ' || $3, updated_at
                 FROM claimed
             )
             SELECT * FROM claimed ORDER BY payment_attempt_id",
        ),
    )
    .bind(max_command_age.as_secs_f64())
    .bind(limit as i64)
    .bind(&reason)
    .bind(Actor::Executor(owner.to_owned()).to_string())
    .fetch_all(&mut *tx)
    .await?;
    let events: Vec<PaymentEvent> = rows
        .iter()
        .map(|row| PaymentEvent::expired(&row.attempt, &reason, row.updated_at))
        .collect();
    let announced: Vec<_> = events
        .iter()
        .zip(&rows)
        .map(|(event, row)| (event, &row.attempt.provenance))
        .collect();
    outbox::insert_events(&mut tx, &announced).await?;
    tx.commit().await?;
    Ok(rows
        .into_iter()
        .map(|row| row.attempt.payment_attempt_id)
        .collect())
}

/// An attempt [`expire_stale_commands`] moved: what its event repeats, and when.
#[derive(sqlx::FromRow)]
struct ExpiredRow {
    #[sqlx(flatten)]
    attempt: EventAttempt,
    updated_at: OffsetDateTime,
}

pub use crate::domain::lookup::{gateway_text, GATEWAY_ID_MAX_CHARS};

/// Stores one call's evidence in a transaction of its own: for a result whose settlement
/// the database refused, so that the call is on record whatever became of the write.
pub async fn record_gateway_call_alone(
    store: &Store,
    call: &GatewayCallRecord,
) -> Result<(), sqlx::Error> {
    let mut conn = store.pool().acquire().await?;
    record_gateway_call(&mut conn, call).await
}

/// Appends one call to `gateway_calls` on `conn` (inside the caller's transaction, or alone).
pub async fn record_gateway_call(
    conn: &mut PgConnection,
    call: &GatewayCallRecord,
) -> Result<(), sqlx::Error> {
    record_gateway_calls(conn, &[call]).await
}

/// Appends several calls to `gateway_calls` in one statement.
pub async fn record_gateway_calls(
    conn: &mut PgConnection,
    calls: &[&GatewayCallRecord],
) -> Result<(), sqlx::Error> {
    if calls.is_empty() {
        return Ok(());
    }
    let calls: Vec<Option<&GatewayCallRecord>> = calls.iter().copied().map(Some).collect();
    let mut args = PgArguments::default();
    add_call_columns(&mut args, &calls)?;
    sqlx::query_with(&calls_insert(1), args)
        .execute(conn)
        .await?;
    Ok(())
}

/// `INSERT INTO gateway_calls … SELECT * FROM unnest(…)` of the arrays [`add_call_columns`]
/// binds, the first at `$first`: a statement alone, or a CTE of a larger one.
pub(super) fn calls_insert(first: usize) -> String {
    format!(
        "INSERT INTO gateway_calls {GATEWAY_CALL_COLUMNS} SELECT * FROM {}",
        unnest_calls(first)
    )
}

/// The columns of `gateway_calls` a call fills, in the order [`add_call_columns`] binds them.
const GATEWAY_CALL_COLUMNS: &str = "(payment_attempt_id, operation, idempotency_key, \
     try_number, lease_token, started_at, finished_at, http_status, outcome, \
     gateway_charge_id, error)";

/// `unnest(…)` of the arrays [`add_call_columns`] binds, the first at `$first`.
fn unnest_calls(first: usize) -> String {
    format!("unnest({})", call_arrays(first))
}

/// The eleven arrays [`add_call_columns`] binds, the first at `$first`, typed, for an
/// `unnest(…)`.
fn call_arrays(first: usize) -> String {
    let types = "uuid text text int4 int8 timestamptz timestamptz int4 text text text";
    let arrays: Vec<String> = types
        .split(' ')
        .enumerate()
        .map(|(i, ty)| format!("${}::{ty}[]", first + i))
        .collect();
    arrays.join(", ")
}

/// Binds `value` as the next parameter of a statement built with [`PgArguments`].
pub(super) fn bind<'q, T>(args: &mut PgArguments, value: T) -> Result<(), sqlx::Error>
where
    T: 'q + sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    args.add(value).map_err(sqlx::Error::Encode)
}

/// Binds the calls as eleven arrays, one per column of [`GATEWAY_CALL_COLUMNS`], each
/// gateway-provided text made storable; a `None` is a row of NULLs (a settlement's write
/// that no call caused, in the arrays aligned with its writes).
pub(super) fn add_call_columns(
    args: &mut PgArguments,
    calls: &[Option<&GatewayCallRecord>],
) -> Result<(), sqlx::Error> {
    bind(args, column(calls, |c| c.map(|c| c.payment_attempt_id)))?;
    bind(args, column(calls, |c| c.map(|c| c.operation)))?;
    bind(
        args,
        column(calls, |c| c.map(|c| c.idempotency_key.as_str().to_owned())),
    )?;
    bind(args, column(calls, |c| c.map(|c| c.try_number.max(0))))?;
    bind(args, column(calls, |c| c.and_then(|c| c.lease_token)))?;
    bind(args, column(calls, |c| c.map(|c| c.started_at)))?;
    bind(args, column(calls, |c| c.map(|c| c.finished_at)))?;
    bind(
        args,
        column(calls, |c| c.and_then(|c| c.http_status.map(i32::from))),
    )?;
    bind(args, column(calls, |c| c.map(|c| c.outcome.clone())))?;
    let charge_id = |c: &Option<&GatewayCallRecord>| {
        c.and_then(|c| c.gateway_charge_id.as_deref())
            .map(|id| gateway_text(id, GATEWAY_ID_MAX_CHARS))
    };
    bind(args, column(calls, charge_id))?;
    let error = |c: &Option<&GatewayCallRecord>| {
        c.and_then(|c| c.error.as_deref())
            .map(|e| gateway_text(e, 1000))
    };
    bind(args, column(calls, error))
}

/// Storing a settlement: its gateway-provided text made storable.
impl Settlement {
    /// The same settlement with every gateway-provided text made storable
    /// ([`gateway_text`]), so that the row, the transition and the event agree.
    fn storable(&self) -> Self {
        let id = |text: &str| gateway_text(text, GATEWAY_ID_MAX_CHARS);
        let reason = |text: &str| gateway_text(text, 1024);
        match self {
            Self::Succeeded { charge_id } => Self::Succeeded {
                charge_id: GatewayChargeId::from_gateway(id(charge_id)),
            },
            Self::Declined {
                charge_id,
                decline_code,
            } => Self::Declined {
                charge_id: GatewayChargeId::from_gateway(id(charge_id)),
                decline_code: decline_code.as_deref().map(id),
            },
            Self::NeedsReview { reason: r } => Self::NeedsReview { reason: reason(r) },
            Self::Retry {
                next_run_at,
                reason: r,
                refund_try,
            } => Self::Retry {
                next_run_at: *next_run_at,
                reason: reason(r),
                refund_try: *refund_try,
            },
            Self::Unknown { reason: r } => Self::Unknown { reason: reason(r) },
        }
    }
}

/// Storing a fenced write: its text made storable, its columns, its event.
impl SettleWrite {
    /// This write with every gateway-provided text made storable.
    fn storable(&self) -> Self {
        Self {
            settlement: self.settlement.storable(),
            ..self.clone()
        }
    }

    /// The columns this write sets, as the settle statement binds them.
    fn columns(&self) -> SettleColumns<'_> {
        let mut columns = SettleColumns {
            event: Announced::settlement(&self.settlement)
                .and_then(|announced| PaymentEvent::subject_of(announced.status))
                .map(|subject| (Uuid::new_v4(), subject)),
            ..SettleColumns::default()
        };
        match &self.settlement {
            Settlement::Succeeded { charge_id } => {
                columns.charge_id = Some(charge_id);
                columns.detail = format!("charge {charge_id}");
            }
            Settlement::Declined {
                charge_id,
                decline_code,
            } => {
                columns.charge_id = Some(charge_id);
                columns.decline_code = decline_code.as_deref();
                columns.detail =
                    format!("decline code {}", decline_code.as_deref().unwrap_or("none"));
            }
            Settlement::NeedsReview { reason } => {
                columns.review_reason = Some(reason);
                columns.last_error = Some(reason);
                columns.detail = reason.clone();
            }
            Settlement::Retry {
                next_run_at,
                reason,
                refund_try,
            } => {
                columns.last_error = Some(reason);
                columns.next_run_at = Some(*next_run_at);
                columns.refund = i32::from(*refund_try);
                columns.detail = format!("due {next_run_at}: {reason}");
            }
            Settlement::Unknown { reason } => {
                columns.last_error = Some(reason);
                columns.next_run_at = Some(self.now);
                columns.detail = reason.clone();
            }
        }
        columns
    }
}

#[derive(Default)]
struct SettleColumns<'a> {
    charge_id: Option<&'a str>,
    decline_code: Option<&'a str>,
    review_reason: Option<&'a str>,
    last_error: Option<&'a str>,
    next_run_at: Option<OffsetDateTime>,
    refund: i32,
    detail: String,
    /// The id and subject of the event this write announces, when its state has one.
    event: Option<(Uuid, String)>,
}

/// Moves a fenced attempt to where the write says, in one transaction with its transition
/// (which, for a move out of `in_flight`, also records the flight's claim),
/// its event (final states and `needs_review`) and the call's evidence. Returns false when
/// the fence refused the write; only the call's evidence is then stored.
pub async fn settle(store: &Store, write: &SettleWrite) -> Result<bool, sqlx::Error> {
    let settled = settle_all(store, std::slice::from_ref(write)).await?;
    Ok(settled[0])
}

/// [`settle`] for several writes in one transaction (one commit for all of them): element
/// `i` of the answer says whether the fence let `writes[i]` through. A write whose move
/// contract §4 does not allow ([`SettleWrite::check_move`]) fails the call before anything
/// is written. Every write keeps its
/// own fence, transition and event; if any statement fails, none of them is written. The
/// rows are taken in one global order ([`LOCKED_IN_KEY_ORDER`]), so two batches cannot
/// deadlock on each other.
pub async fn settle_all(store: &Store, writes: &[SettleWrite]) -> Result<Vec<bool>, sqlx::Error> {
    if writes.is_empty() {
        return Ok(Vec::new());
    }
    // One statement: atomic on its own, so no BEGIN and COMMIT round trips around it.
    let mut conn = store.pool().acquire().await?;
    settle_all_in(&mut conn, writes).await
}

/// [`settle`] for a person's action (`attempts recheck`): the settlement and the audit row
/// `audit(settled)` describes commit in one transaction, whether or not the fence let the
/// write through (a fenced recheck is audited as such).
pub async fn settle_audited(
    store: &Store,
    write: &SettleWrite,
    audit: impl FnOnce(bool) -> crate::store::audit::NewAuditEntry,
) -> Result<bool, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let settled = settle_all_in(&mut tx, std::slice::from_ref(write)).await?[0];
    crate::store::audit::insert(&mut tx, &audit(settled)).await?;
    tx.commit().await?;
    Ok(settled)
}

/// [`settle_all`] on the caller's connection or transaction: every move checked, then the fenced writes,
/// their transitions, the calls' evidence and the events of the writes the fences let
/// through, all in one statement.
async fn settle_all_in(
    tx: &mut PgConnection,
    writes: &[SettleWrite],
) -> Result<Vec<bool>, sqlx::Error> {
    for write in writes {
        write
            .check_move()
            .map_err(|illegal| sqlx::Error::Encode(Box::new(illegal)))?;
        if let Some(call) = write.call.as_ref() {
            if call.payment_attempt_id != write.fence.payment_attempt_id {
                // The move's row carries the call (decision 221): it must be this attempt's.
                return Err(sqlx::Error::Encode(
                    format!(
                        "attempt {}: the write's call evidence names attempt {}",
                        write.fence.payment_attempt_id, call.payment_attempt_id
                    )
                    .into(),
                ));
            }
        }
    }
    let writes: Vec<SettleWrite> = writes.iter().map(SettleWrite::storable).collect();
    let mut settled = vec![false; writes.len()];
    for ord in write_settlements(tx, &writes).await? {
        let index = usize::try_from(ord - 1).expect("WITH ORDINALITY counts from 1");
        settled[index] = true;
    }
    Ok(settled)
}

/// The one statement of a batch of fenced writes (one round trip, so a batch outside a
/// caller's transaction needs no BEGIN and COMMIT of its own): each row taken under its
/// advisory lock in one global order ([`LOCKED_IN_KEY_ORDER`]), moved when its own fence
/// holds, and given its transition; every call's evidence, fenced or not; and, for each
/// write let through whose state has one, its event in the outbox. Returns the `ord` (from
/// 1) of the writes let through.
///
/// The event is built here from the settled row, field for field what
/// [`PaymentEvent::for_settlement`] and [`PaymentEvent::headers`] build in Rust (the
/// settlement tests compare the two): `occurred_at` is the statement's `now()`, the time the
/// row and its transition carry.
async fn write_settlements(
    tx: &mut PgConnection,
    writes: &[SettleWrite],
) -> Result<Vec<i64>, sqlx::Error> {
    let columns: Vec<SettleColumns<'_>> = writes.iter().map(SettleWrite::columns).collect();
    let calls: Vec<Option<&GatewayCallRecord>> = writes.iter().map(|w| w.call.as_ref()).collect();
    let mut args = PgArguments::default();
    bind(&mut args, column(writes, |w| w.fence.payment_attempt_id))?;
    bind(&mut args, column(writes, |w| w.fence.lease_token))?;
    bind(&mut args, column(writes, |w| w.fence.from))?;
    bind(&mut args, column(writes, |w| w.settlement.status()))?;
    bind(&mut args, column(&columns, |c| c.charge_id))?;
    bind(&mut args, column(&columns, |c| c.decline_code))?;
    let review_reason =
        |c: &SettleColumns<'_>| c.review_reason.map(|r| crate::domain::bounded(r, 1024));
    bind(&mut args, column(&columns, review_reason))?;
    let last_error = |c: &SettleColumns<'_>| c.last_error.map(|e| crate::domain::bounded(e, 1024));
    bind(&mut args, column(&columns, last_error))?;
    bind(&mut args, column(&columns, |c| c.next_run_at))?;
    bind(&mut args, column(&columns, |c| c.refund))?;
    bind(&mut args, column(writes, |w| w.now))?;
    bind(&mut args, column(writes, |w| w.cause.as_str()))?;
    bind(&mut args, column(writes, |w| w.fence.actor.as_str()))?;
    bind(
        &mut args,
        column(&columns, |c| gateway_text(&c.detail, 2048)),
    )?;
    bind(
        &mut args,
        column(&columns, |c| c.event.as_ref().map(|(id, _)| *id)),
    )?;
    let subject = |c: &SettleColumns<'_>| c.event.as_ref().map(|(_, subject)| subject.clone());
    bind(&mut args, column(&columns, subject))?;
    add_call_columns(&mut args, &calls)?;
    let with_events = columns.iter().any(|c| c.event.is_some());
    let with_calls = calls.iter().any(Option::is_some);
    sqlx::query_scalar_with(settle_statement(with_calls, with_events), args)
        .fetch_all(&mut *tx)
        .await
}

/// The statement of [`write_settlements`], with the calls' and the events' inserts only
/// when the batch has some: a batch that writes neither (an attempt handed to the
/// reconciler after its result was refused for good) must not depend on those tables.
fn settle_statement(with_calls: bool, with_events: bool) -> &'static str {
    static STATEMENTS: [LazyLock<String>; 4] = [
        LazyLock::new(|| settle_sql(false, false)),
        LazyLock::new(|| settle_sql(false, true)),
        LazyLock::new(|| settle_sql(true, false)),
        LazyLock::new(|| settle_sql(true, true)),
    ];
    &STATEMENTS[usize::from(with_calls) * 2 + usize::from(with_events)]
}

/// The text of [`settle_statement`]: sixteen arrays of writes, then eleven of their calls,
/// aligned with them (NULL where a write has none). A write let through carries its call
/// on its transition row ([`CARRIED_CALL_COLUMNS`], decision 221); a fenced write's call is
/// a `gateway_calls` row of its own.
fn settle_sql(with_calls: bool, with_events: bool) -> String {
    let calls = if with_calls {
        format!(
            ",
         calls AS (
             INSERT INTO gateway_calls {GATEWAY_CALL_COLUMNS}
             SELECT {CALL_INPUT} FROM input i
             WHERE i.call_operation IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM settled s WHERE s.ord = i.ord)
         )"
        )
    } else {
        String::new()
    };
    let call_arrays = call_arrays(17);
    let events = if with_events { SETTLE_EVENTS } else { "" };
    format!(
        "WITH input AS (
             SELECT * FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::text[], $5::text[],
                                  $6::text[], $7::text[], $8::text[], $9::timestamptz[],
                                  $10::int4[], $11::timestamptz[], $12::text[], $13::text[],
                                  $14::text[], $15::uuid[], $16::text[], {call_arrays})
                 WITH ORDINALITY
                 AS i(payment_attempt_id, lease_token, from_status, to_status, charge_id,
                      decline_code, review_reason, last_error, next_run_at, refund, at, cause,
                      actor, detail, event_id, subject, {CALL_INPUT}, ord)
         ),
         {LOCKED_IN_KEY_ORDER},
         {OPEN_CLAIMS},
         settled AS (
             UPDATE payment_attempts a SET
                 status = i.to_status,
                 lease_owner = NULL,
                 lease_expires_at = NULL,
                 gateway_charge_id = COALESCE(i.charge_id, a.gateway_charge_id),
                 decline_code = COALESCE(i.decline_code, a.decline_code),
                 review_reason = COALESCE(i.review_reason, a.review_reason),
                 last_error = COALESCE(i.last_error, a.last_error),
                 next_run_at = COALESCE(now() + (i.next_run_at - i.at), a.next_run_at),
                 tries = GREATEST(a.tries - i.refund, 0),
                 {CLAIM_CARRIED},
                 updated_at = now()
             FROM input i JOIN locked USING (payment_attempt_id)
                  LEFT JOIN claims c USING (payment_attempt_id)
             WHERE a.payment_attempt_id = ANY($1::uuid[])
               AND a.payment_attempt_id = i.payment_attempt_id
               AND a.lease_token = i.lease_token
               AND a.status = i.from_status
             RETURNING i.*, a.order_id, a.amount_minor, a.currency, a.first_message_id,
                       a.correlation_id, a.traceparent, {CLAIM_RETURNED}
         ),
         transitions AS (
             INSERT INTO attempt_transitions
                 (payment_attempt_id, from_status, to_status, cause, actor, detail, at,
                  {CLAIM_COLUMNS}, {CARRIED_CALL_COLUMNS})
             SELECT payment_attempt_id, from_status, to_status, cause, actor, detail, now(),
                    {CLAIM_COLUMNS}, {CARRIED_CALL_VALUES}
             FROM settled ORDER BY ord
         ){calls}{events}
         SELECT ord FROM settled"
    )
}

/// The CTE `locked`: the attempts named by `$1` (a `uuid[]`), each taken under a
/// transaction-level advisory lock in one global order before a batch updates them, so
/// that two batches of fenced writes cannot deadlock on each other (decision 218).
///
/// The order is the lock key's (class `hashtext('onecharge.payment_attempts')`, object the
/// attempt id's `hashtext`), not the attempt id's, so two attempts whose keys collide are
/// still taken in one order; a collision only makes one batch wait for the other. An
/// advisory lock writes no WAL: the row lock this replaced was a `Heap/LOCK` record per
/// attempt per batch, and the `UPDATE` that follows locks each row itself. The subquery's
/// `ORDER BY` keeps it from being pulled up, so the locks are taken in its order; whatever
/// the join's plan, the update reaches a row only through its lock. Every writer that
/// updates several attempts in one statement takes this CTE first; one that updates a
/// single attempt, or skips locked rows, never waits holding a second one.
pub(super) const LOCKED_IN_KEY_ORDER: &str = "locked AS MATERIALIZED (
             SELECT k.payment_attempt_id, pg_advisory_xact_lock(k.class, k.object)
             FROM (SELECT u.payment_attempt_id, hashtext('onecharge.payment_attempts') AS class,
                          hashtext(u.payment_attempt_id::text) AS object
                   FROM unnest($1::uuid[]) AS u(payment_attempt_id)
                   ORDER BY object, u.payment_attempt_id) k
         )";

/// The CTE `claims`: the open claims ([`CLAIM_CARRIED`]) of the attempts named by `$1`, as
/// the statement's snapshot has them. For an attempt in flight whose fence holds, that is
/// its claim: the claim committed before its holder could write again, and nothing else
/// changes a claim while the attempt is in flight.
const OPEN_CLAIMS: &str = "claims AS (
             SELECT payment_attempt_id, id, cause, actor, detail, at
             FROM attempt_open_claims WHERE payment_attempt_id = ANY($1::uuid[])
         )";

/// The `SET` of a move out of `in_flight` that carries its claim into its own history row
/// (decision 220): the attempt's open claim, read as `c` ([`OPEN_CLAIMS`]), is cleared from
/// the row when it is the one the row still holds; its row of `attempt_transitions` then
/// records both moves ([`CLAIM_RETURNED`], [`CLAIM_COLUMNS`]). A claim the row holds and the
/// write does not carry is written as a row of its own by the trigger
/// `attempt_claim_written`, so none is ever lost or written twice.
const CLAIM_CARRIED: &str = "claim_id = CASE WHEN c.id = a.claim_id THEN NULL ELSE a.claim_id END,
                 claim_at = CASE WHEN c.id = a.claim_id THEN NULL ELSE a.claim_at END,
                 claim_hand_over = CASE WHEN c.id = a.claim_id THEN NULL ELSE a.claim_hand_over END";

/// What `RETURNING` says of the claim [`CLAIM_CARRIED`] carried: nothing when it did not
/// clear it.
const CLAIM_RETURNED: &str = "CASE WHEN a.claim_id IS NULL THEN c.id END AS claim_id,
                       CASE WHEN a.claim_id IS NULL THEN c.at END AS claim_at,
                       CASE WHEN a.claim_id IS NULL THEN c.cause END AS claim_cause,
                       CASE WHEN a.claim_id IS NULL THEN c.actor END AS claim_actor,
                       CASE WHEN a.claim_id IS NULL THEN c.detail END AS claim_detail";

/// The columns of `attempt_transitions` that record a carried claim.
const CLAIM_COLUMNS: &str = "claim_id, claim_at, claim_cause, claim_actor, claim_detail";

/// A call's evidence after its id and its attempt, in the order of [`GATEWAY_CALL_COLUMNS`],
/// as the settle statement's input and `attempt_transitions` both name it: the one list
/// the three below are made from.
macro_rules! call_evidence {
    () => {
        "call_operation, call_idempotency_key, call_try_number, call_lease_token, \
         call_started_at, call_finished_at, call_http_status, call_outcome, \
         call_gateway_charge_id, call_error"
    };
}

/// The input's names of a write's call, in the order of [`GATEWAY_CALL_COLUMNS`]: a fenced
/// write's call is inserted from them as a `gateway_calls` row.
const CALL_INPUT: &str = concat!("call_attempt_id, ", call_evidence!());

/// The columns of `attempt_transitions` that record the call that caused the row's move
/// (decision 221), as `gateway_call_records` lists them.
const CARRIED_CALL_COLUMNS: &str = concat!("call_id, ", call_evidence!());

/// A settled write's call, for [`CARRIED_CALL_COLUMNS`]: its id from `gateway_calls`' own
/// sequence, so that an attempt's calls keep their order whichever table holds them.
const CARRIED_CALL_VALUES: &str = concat!(
    "CASE WHEN call_operation IS NOT NULL THEN nextval('gateway_calls_id_seq') END, ",
    call_evidence!()
);

/// The events of the writes let through, built from the settled rows (decision 118).
const SETTLE_EVENTS: &str = ",
         events AS (
             INSERT INTO outbox
                 (event_id, payment_attempt_id, status, subject, headers, payload, created_at)
             SELECT event_id, payment_attempt_id, to_status, subject,
                    jsonb_strip_nulls(jsonb_build_object(
                        'Nats-Msg-Id', event_id::text, 'Causation-Id', first_message_id,
                        'Correlation-Id', correlation_id, 'traceparent', traceparent)),
                    jsonb_build_object(
                        'event_id', event_id, 'payment_attempt_id', payment_attempt_id,
                        'order_id', order_id, 'status', to_status,
                        'amount_minor', amount_minor, 'currency', currency,
                        'gateway_charge_id', charge_id, 'decline_code', decline_code,
                        'reason', review_reason,
                        'occurred_at', (SELECT onecharge_rfc3339(now()))),
                    now()
             FROM settled WHERE event_id IS NOT NULL ORDER BY ord
         )";
