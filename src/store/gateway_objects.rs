//! The gateway object stored for an attempt before the call that can charge
//! (`payment_attempts.gateway_object_id`: Stripe's PaymentIntent id). The reconciler asks
//! the gateway about that object by id, strongly consistently; an attempt without one never
//! had a charging call sent.
//!
//! Invariants kept here:
//! - The id is written under the executor's lease (`lease_token = $n AND status =
//!   'in_flight'`), like every executor write: a worker whose lease was taken over stores
//!   nothing, and so never confirms.
//! - Set once: a stored id is never replaced by another (an attempt has one object, made
//!   under one derived key). Writing the same id again is accepted (a replayed create).
//! - The create call is recorded as evidence in the same transaction, fenced or not.

use super::attempts::record_gateway_call;
use super::Store;
use crate::domain::GatewayCallRecord;
use crate::domain::PaymentAttemptId;

/// Stores `object_id` as the gateway object of the attempt held under `lease_token`, with
/// the evidence of the call that made it. `Ok(true)`: stored (or already stored with the
/// same id), the caller may make the charging call. `Ok(false)`: the lease is no longer
/// this caller's, or another id is stored; it must not call.
pub async fn record_gateway_object(
    store: &Store,
    payment_attempt_id: PaymentAttemptId,
    lease_token: i64,
    object_id: &str,
    call: &GatewayCallRecord,
) -> Result<bool, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let stored = sqlx::query(
        "UPDATE payment_attempts
            SET gateway_object_id = $3, updated_at = now()
          WHERE payment_attempt_id = $1 AND lease_token = $2 AND status = 'in_flight'
            AND (gateway_object_id IS NULL OR gateway_object_id = $3)",
    )
    .bind(payment_attempt_id)
    .bind(lease_token)
    .bind(object_id)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    record_gateway_call(&mut tx, call).await?;
    tx.commit().await?;
    Ok(stored)
}

/// The gateway object stored for an attempt, if any (operators, tests).
pub async fn gateway_object_id(
    store: &Store,
    payment_attempt_id: PaymentAttemptId,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT gateway_object_id FROM payment_attempts WHERE payment_attempt_id = $1",
    )
    .bind(payment_attempt_id)
    .fetch_optional(store.pool())
    .await
    .map(Option::flatten)
}
