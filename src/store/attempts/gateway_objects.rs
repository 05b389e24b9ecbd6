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
//! - The create call is recorded as evidence in the same statement, fenced or not.
//! - Storing the id also stamps the confirm's send (`dispatched_at`), under the same
//!   lease check [`stamp_confirm_send`] makes: nothing that can charge leaves unstamped.

use std::sync::LazyLock;

use sqlx::postgres::PgArguments;

use crate::domain::GatewayCallRecord;
use crate::domain::{GatewayObjectId, LeaseToken, PaymentAttemptId};
use crate::store::attempts::{add_call_columns, bind, calls_insert, LOCKED_IN_KEY_ORDER};
use crate::store::{column, Store};

/// Stores `object_id` as the gateway object of the attempt held under `lease_token`, with
/// the evidence of the call that made it, and stamps the confirm's send as
/// [`stamp_confirm_send`] does — one statement (decision 123). [`ConfirmSend::Go`]: stored
/// (or already stored with the same id) and stamped, the caller confirms now.
/// [`ConfirmSend::LeaseTooShort`]: stored, not stamped; nothing may be sent.
/// [`ConfirmSend::Fenced`]: the lease is no longer this caller's, or another id is stored;
/// nothing stored, nothing may be sent. The evidence is recorded in every case.
pub async fn record_gateway_object(
    store: &Store,
    payment_attempt_id: PaymentAttemptId,
    lease_token: LeaseToken,
    object_id: &GatewayObjectId,
    call: &GatewayCallRecord,
    call_limit: std::time::Duration,
) -> Result<ConfirmSend, sqlx::Error> {
    let write = ObjectWrite {
        payment_attempt_id,
        lease_token,
        object_id: object_id.clone(),
        call: call.clone(),
        call_limit,
    };
    let answers = record_gateway_objects(store, std::slice::from_ref(&write)).await?;
    Ok(answers[0])
}

/// One attempt's write before its confirm: what [`record_gateway_object`] takes.
#[derive(Debug, Clone)]
pub struct ObjectWrite {
    pub payment_attempt_id: PaymentAttemptId,
    pub lease_token: LeaseToken,
    pub object_id: GatewayObjectId,
    /// The evidence of the call that made the object.
    pub call: GatewayCallRecord,
    /// The longest the confirm may take: the send is stamped only if the lease covers it.
    pub call_limit: std::time::Duration,
}

/// [`record_gateway_object`] for several attempts in one statement (one commit for all):
/// element `i` of the answer is `writes[i]`'s. Each write keeps its own fence; the rows are
/// taken in one global order ([`LOCKED_IN_KEY_ORDER`]), so two batches cannot deadlock on
/// each other.
pub async fn record_gateway_objects(
    store: &Store,
    writes: &[ObjectWrite],
) -> Result<Vec<ConfirmSend>, sqlx::Error> {
    static STATEMENT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "WITH input AS (
                 SELECT * FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::float8[])
                     WITH ORDINALITY AS i(payment_attempt_id, lease_token, object_id, call_limit, ord)
             ),
             {LOCKED_IN_KEY_ORDER},
             stored AS (
                 UPDATE payment_attempts a
                    SET gateway_object_id = i.object_id, {}, updated_at = now()
                   FROM input i JOIN locked USING (payment_attempt_id)
                  WHERE a.payment_attempt_id = ANY($1::uuid[])
                    AND a.payment_attempt_id = i.payment_attempt_id
                    AND a.lease_token = i.lease_token AND a.status = 'in_flight'
                    AND (a.gateway_object_id IS NULL OR a.gateway_object_id = i.object_id)
                  RETURNING i.ord, {}
             ),
             evidence AS ({})
             SELECT ord, may_send FROM stored",
            stamp_send("i.call_limit"),
            may_send("i.call_limit"),
            calls_insert(5)
        )
    });
    if writes.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = PgArguments::default();
    bind(&mut args, column(writes, |w| w.payment_attempt_id))?;
    bind(&mut args, column(writes, |w| w.lease_token))?;
    bind(&mut args, column(writes, |w| w.object_id.clone()))?;
    bind(&mut args, column(writes, |w| w.call_limit.as_secs_f64()))?;
    let calls = column(writes, |w| Some(&w.call));
    add_call_columns(&mut args, &calls)?;
    let stored: Vec<(i64, bool)> = sqlx::query_as_with(&STATEMENT, args)
        .fetch_all(store.pool())
        .await?;
    let mut answers = vec![ConfirmSend::Fenced; writes.len()];
    for (ord, may_send) in stored {
        answers[ord as usize - 1] = ConfirmSend::from_row(Some(may_send));
    }
    Ok(answers)
}

/// `dispatched_at = now()` when the lease left (`lease_expires_at`) covers a whole call of
/// `limit` seconds (a parameter or a column); the send is not stamped otherwise, and must
/// not happen.
fn stamp_send(limit: &str) -> String {
    format!(
        "dispatched_at = CASE WHEN lease_expires_at > now() + make_interval(secs => {limit})
                              THEN now() ELSE dispatched_at END"
    )
}

/// Whether the lease covered the call of `limit` seconds: the column `may_send` a stamping
/// update returns.
fn may_send(limit: &str) -> String {
    format!("lease_expires_at > now() + make_interval(secs => {limit}) AS may_send")
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

/// Which derived key an attempt moves on from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStep {
    /// After a create answered `5xx` (Stripe saved that answer under the key and would
    /// replay it to every retry), by the executor under its lease, and only while no
    /// PaymentIntent is stored (one that is stored is never created again).
    Create,
    /// When the reconciler, holding the `unknown` attempt under its claim, found its
    /// PaymentIntent still `requires_confirmation`: the last confirm charged nothing, and
    /// its answer (a saved `5xx`) would be replayed under the old key.
    Confirm,
}

/// Moves the attempt held under `lease_token` on to the next key of `step`
/// (`create_key_seq + 1` or `confirm_key_seq + 1`). `Ok(false)`: fenced (the lease or
/// claim is no longer the caller's, or the attempt is not where `step` needs it); nothing
/// changed.
pub async fn advance_key(
    store: &Store,
    payment_attempt_id: PaymentAttemptId,
    lease_token: LeaseToken,
    step: KeyStep,
) -> Result<bool, sqlx::Error> {
    let statement = match step {
        KeyStep::Create => {
            "UPDATE payment_attempts
                SET create_key_seq = create_key_seq + 1, updated_at = now()
              WHERE payment_attempt_id = $1 AND lease_token = $2 AND status = 'in_flight'
                AND gateway_object_id IS NULL"
        }
        KeyStep::Confirm => {
            "UPDATE payment_attempts
                SET confirm_key_seq = confirm_key_seq + 1, updated_at = now()
              WHERE payment_attempt_id = $1 AND lease_token = $2 AND status = 'unknown'
                AND gateway_object_id IS NOT NULL"
        }
    };
    sqlx::query(statement)
        .bind(payment_attempt_id)
        .bind(lease_token)
        .execute(store.pool())
        .await
        .map(|done| done.rows_affected() == 1)
}

/// Whether the confirm may leave now, by the database's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmSend {
    /// The lease covers the whole call; `dispatched_at` now says when it left, and the
    /// reconciler measures `gateway_max_processing_time` from there.
    Go,
    /// The lease left is shorter than a whole call: the confirm must not be sent.
    LeaseTooShort,
    /// The lease is no longer this caller's.
    Fenced,
}

/// Re-checks the lease right before a confirm and stamps the send: `dispatched_at =
/// now()` when the lease still covers `call_limit` (connect plus request timeout), so that
/// "may still be processing" is measured from the request that can charge, not from the
/// claim (a slow create comes between them).
pub async fn stamp_confirm_send(
    store: &Store,
    payment_attempt_id: PaymentAttemptId,
    lease_token: LeaseToken,
    call_limit: std::time::Duration,
) -> Result<ConfirmSend, sqlx::Error> {
    static STATEMENT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "UPDATE payment_attempts SET {}, updated_at = now()
              WHERE payment_attempt_id = $1 AND lease_token = $2 AND status = 'in_flight'
              RETURNING {}",
            stamp_send("$3::float8"),
            may_send("$3::float8")
        )
    });
    let may_send: Option<bool> = sqlx::query_scalar(&STATEMENT)
        .bind(payment_attempt_id)
        .bind(lease_token)
        .bind(call_limit.as_secs_f64())
        .fetch_optional(store.pool())
        .await?;
    Ok(ConfirmSend::from_row(may_send))
}

impl ConfirmSend {
    /// What a stamping update answered: no row, the lease is gone.
    fn from_row(may_send: Option<bool>) -> Self {
        match may_send {
            Some(true) => Self::Go,
            Some(false) => Self::LeaseTooShort,
            None => Self::Fenced,
        }
    }
}

/// What cancelling an attempt's gateway object needs to know of the attempt.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ObjectOf {
    pub idempotency_key: crate::domain::IdempotencyKey,
    pub gateway_object_id: Option<String>,
    pub tries: i32,
}

/// The attempt's stored key, gateway object and tries, if the attempt exists.
pub async fn object_of(
    store: &Store,
    payment_attempt_id: PaymentAttemptId,
) -> Result<Option<ObjectOf>, sqlx::Error> {
    sqlx::query_as(
        "SELECT idempotency_key, gateway_object_id, tries FROM payment_attempts
          WHERE payment_attempt_id = $1",
    )
    .bind(payment_attempt_id)
    .fetch_optional(store.pool())
    .await
}
