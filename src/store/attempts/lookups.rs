//! The reconciler's SQL: turning expired leases into `unknown`, claiming due `unknown`
//! attempts under a fencing token, and rescheduling a lookup that settled nothing.
//! Resolutions go through [`crate::store::attempts::settle`] with an `unknown` fence.

use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::domain::outcome::FailedLookups;
use crate::domain::{Actor, AttemptStatus, GatewayCallRecord, HeldAttempt, PaymentAttemptId};
use crate::store::attempts::{gateway_text, record_gateway_call, HELD_COLUMNS};
use crate::store::audit::NewAuditEntry;
use crate::store::kernel::{Claim, ATTEMPTS};
use crate::store::Store;

/// Moves up to `limit` `in_flight` attempts whose lease expired to `unknown` (cause
/// `lease_expired`), due for a lookup now. Their executor may have died mid-call: only the
/// gateway can say whether it charged, so they are never re-sent blindly. The fencing token
/// is incremented, so the old executor's late result is refused. The flight's claim gets
/// its own history row first (the trigger `attempt_claim_written`, decision 220): this rare
/// move does not carry it. Returns the attempt ids.
/// A lease has expired by the database's clock (`now()`), the one that set it, so a
/// reconciler whose host clock is off expires leases neither early nor late.
pub async fn expire_leases(
    store: &Store,
    actor: &Actor,
    limit: usize,
) -> Result<Vec<PaymentAttemptId>, sqlx::Error> {
    sqlx::query_scalar(
        &Claim {
            queue: ATTEMPTS,
            due_columns: ", lease_owner, lease_expires_at",
            due: "status = 'in_flight' AND lease_expires_at <= now()",
            order: "lease_expires_at",
            limit: "$1",
            set: "status = 'unknown',
                lease_token = a.lease_token + 1,
                lease_owner = NULL,
                lease_expires_at = NULL,
                next_run_at = now(),
                last_error = 'lease of ' || COALESCE(due.lease_owner, '?')
                             || ' expired while in flight: the gateway may have charged',
                updated_at = now()",
            returning: "a.payment_attempt_id, due.lease_owner, due.lease_expires_at",
        }
        .sql(
            ",
             transitions AS (
                 INSERT INTO attempt_transitions
                     (payment_attempt_id, from_status, to_status, cause, actor, detail, at)
                 SELECT payment_attempt_id, 'in_flight', 'unknown', 'lease_expired', $2,
                        'lease of ' || COALESCE(lease_owner, '?') || ' expired at ' || lease_expires_at,
                        now()
                 FROM claimed
             )
             SELECT payment_attempt_id FROM claimed",
        ),
    )
    .bind(limit as i64)
    .bind(actor)
    .fetch_all(store.pool())
    .await
}

/// Claims up to `limit` due `unknown` attempts, oldest due first, skipping those another
/// reconciler holds. Each claim increments the fencing token and pushes `next_run_at` to
/// `hold` past the database's `now()`, so that a reconciler that dies mid-lookup leaves the
/// attempt to be claimed again after that time, and nobody else looks it up meanwhile.
pub async fn claim_unknown(
    store: &Store,
    hold: std::time::Duration,
    limit: usize,
) -> Result<Vec<HeldAttempt>, sqlx::Error> {
    sqlx::query_as(
        &Claim {
            queue: ATTEMPTS,
            due_columns: "",
            due: "status = 'unknown' AND next_run_at <= now()",
            order: "next_run_at",
            limit: "$1",
            set: "lease_token = a.lease_token + 1,
                next_run_at = now() + make_interval(secs => $2::float8),
                updated_at = now()",
            returning: HELD_COLUMNS,
        }
        .sql(" SELECT * FROM claimed"),
    )
    .bind(limit as i64)
    .bind(hold.as_secs_f64())
    .fetch_all(store.pool())
    .await
}

/// A lookup that settled nothing: the attempt stays `unknown`, due again `next_run_at -
/// now` after the database's `now()` (the caller's clock only measures the delay).
/// `checks` says what it does to the count of failed lookups ([`FailedLookups`]). The lookup's evidence, when given, is written in the same transaction (a
/// caller whose settlement was refused has stored it alone already). Returns false when
/// the fence refused (another reconciler or an operator moved the attempt meanwhile).
pub async fn reschedule_lookup(
    store: &Store,
    attempt: &HeldAttempt,
    next_run_at: OffsetDateTime,
    reason: &str,
    checks: FailedLookups,
    call: Option<&GatewayCallRecord>,
    now: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let updated = reschedule_in(&mut tx, attempt, next_run_at, reason, checks, now).await?;
    if let Some(call) = call {
        record_gateway_call(&mut tx, call).await?;
    }
    tx.commit().await?;
    Ok(updated)
}

/// [`reschedule_lookup`] for a person's recheck of an `unknown` attempt: the reschedule (not
/// counted against the reconciler's schedule), the lookup's evidence and the audit row `audit(rescheduled)` describes
/// commit in one transaction.
pub async fn reschedule_lookup_audited(
    store: &Store,
    attempt: &HeldAttempt,
    next_run_at: OffsetDateTime,
    reason: &str,
    call: &GatewayCallRecord,
    now: OffsetDateTime,
    audit: impl FnOnce(bool) -> NewAuditEntry,
) -> Result<bool, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let updated = reschedule_in(
        &mut tx,
        attempt,
        next_run_at,
        reason,
        FailedLookups::Keep,
        now,
    )
    .await?;
    record_gateway_call(&mut tx, call).await?;
    crate::store::audit::insert(&mut tx, &audit(updated)).await?;
    tx.commit().await?;
    Ok(updated)
}

/// A recheck whose answer changes nothing (a `needs_review` attempt the lookup did not
/// settle): the lookup's evidence and the audit row, in one transaction.
pub async fn record_unchanged_recheck(
    store: &Store,
    call: &GatewayCallRecord,
    audit: &NewAuditEntry,
) -> Result<(), sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    record_gateway_call(&mut tx, call).await?;
    crate::store::audit::insert(&mut tx, audit).await?;
    tx.commit().await
}

async fn reschedule_in(
    conn: &mut PgConnection,
    attempt: &HeldAttempt,
    next_run_at: OffsetDateTime,
    reason: &str,
    checks: FailedLookups,
    now: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query(
        "UPDATE payment_attempts SET
             reconcile_checks = CASE $3::text WHEN 'count' THEN reconcile_checks + 1
                                              WHEN 'restart' THEN 0
                                              ELSE reconcile_checks END,
             next_run_at = now() + ($4::timestamptz - $6::timestamptz),
             last_error = $5,
             updated_at = now()
         WHERE payment_attempt_id = $1 AND lease_token = $2 AND status = 'unknown'",
    )
    .bind(attempt.payment_attempt_id)
    .bind(attempt.lease_token)
    .bind(checks.as_str())
    .bind(next_run_at)
    .bind(gateway_text(reason, 1024))
    .bind(now)
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}

/// Why a person's recheck could not claim the attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecheckClaim {
    /// Claimed (in the state it holds as `held_as`): look it up and write under this
    /// claim's fence.
    Claimed(HeldAttempt),
    NotFound,
    /// The attempt is in a state a recheck does not touch.
    WrongState(AttemptStatus),
}

/// Claims one `unknown` or `needs_review` attempt for a person's recheck, due or not: the
/// fencing token is incremented (so a reconciler looking it up at the same moment is
/// fenced out, and vice versa) and an `unknown` attempt's next lookup is pushed `hold`
/// past now, as [`claim_unknown`] does. Any other state is not claimed.
pub async fn claim_for_recheck(
    store: &Store,
    id: PaymentAttemptId,
    hold: std::time::Duration,
) -> Result<RecheckClaim, sqlx::Error> {
    let claimed: Option<HeldAttempt> = sqlx::query_as(&format!(
        "UPDATE payment_attempts a SET
             lease_token = a.lease_token + 1,
             next_run_at = CASE WHEN a.status = 'unknown'
                                THEN now() + make_interval(secs => $2::float8)
                                ELSE a.next_run_at END,
             updated_at = now()
         WHERE a.payment_attempt_id = $1 AND a.status IN ('unknown', 'needs_review')
         RETURNING {HELD_COLUMNS}"
    ))
    .bind(id)
    .bind(hold.as_secs_f64())
    .fetch_optional(store.pool())
    .await?;
    if let Some(attempt) = claimed {
        return Ok(RecheckClaim::Claimed(attempt));
    }
    let status: Option<AttemptStatus> =
        sqlx::query_scalar("SELECT status FROM payment_attempts WHERE payment_attempt_id = $1")
            .bind(id)
            .fetch_optional(store.pool())
            .await?;
    Ok(status.map_or(RecheckClaim::NotFound, RecheckClaim::WrongState))
}
