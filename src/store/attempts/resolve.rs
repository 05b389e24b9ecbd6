//! An operator's resolution of a `needs_review` attempt, in SQL: the claim that comes
//! before anything is asked of the gateway on the decision's behalf, and the guarded write.
//!
//! Invariants kept here:
//! - A resolution is one guarded statement (`UPDATE … WHERE status = 'needs_review'`, for a
//!   retry also the gateway key window, and for a success the stored PaymentIntent, when
//!   there is one, as the charge), judged by the rows it touched; what the attempt
//!   looked like before is read only afterwards, to explain a refusal. Two operators racing
//!   on one attempt: exactly one wins.
//! - The resolution, its transition, its event and its audit row commit in one transaction.

use crate::domain::Actor;
use crate::domain::GatewayChargeId;
use sqlx::PgConnection;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::event::PaymentEvent;
use crate::domain::{
    bounded, Announced, AttemptStatus, EventAttempt, HeldAttempt, IllegalMove, LeaseToken,
    PaymentAttemptId, RetryWindow, TransitionCause,
};
use crate::store::attempts::HELD_COLUMNS;
use crate::store::audit::{self, AuditAction, NewAuditEntry, Via};
use crate::store::{outbox, Store};

/// Where an operator sends a `needs_review` attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveTarget {
    /// The operator established that the gateway charged the customer, under this charge.
    Succeeded { gateway_charge_id: GatewayChargeId },
    /// The operator established that the customer was not charged.
    Declined {
        gateway_charge_id: Option<GatewayChargeId>,
        decline_code: Option<String>,
    },
    /// Back to `pending` for the executor to send again with the same key.
    Retry,
}

impl ResolveTarget {
    /// The state the attempt moves to.
    pub fn status(&self) -> AttemptStatus {
        match self {
            Self::Succeeded { .. } => AttemptStatus::Succeeded,
            Self::Declined { .. } => AttemptStatus::Declined,
            Self::Retry => AttemptStatus::Pending,
        }
    }
}

/// One operator decision, with the boundaries a retry must stay inside.
#[derive(Debug, Clone)]
pub struct OperatorDecision<'a> {
    pub payment_attempt_id: PaymentAttemptId,
    pub target: ResolveTarget,
    /// The operator's words, recorded on the transition and the event.
    pub reason: &'a str,
    /// `operator:<user>` or `admin-api`.
    pub actor: &'a Actor,
    /// Through what the operator acted: recorded in the audit row.
    pub via: Via,
    /// How far a retry may reach, measured back from the database's `now()` when the
    /// resolution runs (never a host's clock: an operator's host an hour slow would retry an
    /// hour past the gateway's key retention): a retry is refused for an attempt first sent
    /// at or before `now − key_window` (the gateway may have forgotten its key) or already
    /// sent and recorded at or before `now − max_age` (the executor would hand it straight
    /// back to the reconciler without sending it).
    pub window: RetryWindow,
    /// The token of the claim this decision was made under ([`claim_for_decision`]), when
    /// the gateway was asked first: the write goes through only if nobody moved the attempt
    /// since (its `lease_token` unchanged).
    pub claim: Option<LeaseToken>,
}

/// What a resolution came to. Every refusal says what the attempt looked like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveOutcome {
    /// Moved to the target; `event_id` is the event queued in the outbox (none for a retry).
    Resolved {
        status: AttemptStatus,
        event_id: Option<Uuid>,
    },
    /// No attempt has this id.
    NotFound,
    /// The attempt is not in `needs_review` (someone else resolved it, or it never was).
    NotInReview { status: AttemptStatus },
    /// Still in `needs_review`, but claimed by someone else (a recheck, another operator)
    /// after this decision's own claim.
    ClaimedMeanwhile,
    /// A retry outside the gateway's key window, at the database's `now`.
    KeyWindowClosed {
        first_dispatched_at: OffsetDateTime,
        idempotency_key: String,
        now: OffsetDateTime,
    },
    /// A retry of an attempt past the executor's maximum age, at the database's `now`.
    TooOldToRetry {
        created_at: OffsetDateTime,
        now: OffsetDateTime,
    },
    /// A success under a charge that is not the gateway object onecharge created for the
    /// attempt (its stored PaymentIntent): a later refund would go to another payment.
    NotItsPaymentIntent { payment_intent: String },
}

impl ResolveTarget {
    /// The gateway's charge id and decline code the resolution records, as far as the
    /// target names them.
    fn gateway_ids(&self) -> (Option<&str>, Option<&str>) {
        match self {
            Self::Succeeded { gateway_charge_id } => (Some(gateway_charge_id.as_str()), None),
            Self::Declined {
                gateway_charge_id,
                decline_code,
            } => (gateway_charge_id.as_deref(), decline_code.as_deref()),
            Self::Retry => (None, None),
        }
    }

    fn audit_action(&self) -> AuditAction {
        match self {
            Self::Succeeded { .. } => AuditAction::ResolveSucceeded,
            Self::Declined { .. } => AuditAction::ResolveDeclined,
            Self::Retry => AuditAction::ResolveRetry,
        }
    }
}

impl OperatorDecision<'_> {
    /// The transition's detail: what the operator established, and their words.
    fn detail(&self) -> String {
        let detail = match &self.target {
            ResolveTarget::Succeeded { gateway_charge_id } => {
                format!("charge {gateway_charge_id}: {}", self.reason)
            }
            ResolveTarget::Declined { decline_code, .. } => format!(
                "decline code {}: {}",
                decline_code.as_deref().unwrap_or("none"),
                self.reason
            ),
            ResolveTarget::Retry => format!("re-queued with the same key: {}", self.reason),
        };
        bounded(&detail, 2048)
    }

    /// The move from `needs_review` to the target, checked like every settlement
    /// ([`IllegalMove::check`]) before anything is written.
    fn check_move(&self) -> Result<(), sqlx::Error> {
        IllegalMove::check(
            self.payment_attempt_id,
            AttemptStatus::NeedsReview,
            self.target.status(),
            TransitionCause::OperatorResolved,
        )
        .map_err(|illegal| sqlx::Error::Encode(Box::new(illegal)))
    }

    /// What the event of a final resolution says.
    fn announced(&self) -> Announced {
        let (charge_id, decline_code) = self.target.gateway_ids();
        Announced {
            status: self.target.status(),
            gateway_charge_id: charge_id.map(GatewayChargeId::from_gateway),
            decline_code: decline_code.map(str::to_owned),
            reason: Some(format!("resolved by {}: {}", self.actor, self.reason)),
        }
    }
}

/// Resolves a `needs_review` attempt: the move checked, one guarded update with its
/// transition (cause `operator_resolved`, the operator's reason as detail), for a final
/// state its event, and the audit row — all in one transaction. Nothing is written when the
/// guard refuses.
pub async fn resolve_attempt(
    store: &Store,
    resolution: &OperatorDecision<'_>,
) -> Result<ResolveOutcome, sqlx::Error> {
    resolution.check_move()?;
    let mut tx = store.pool().begin().await?;
    // The transaction's `now()`: what the writes below stamp, and what the window is
    // measured back from.
    let now: OffsetDateTime = sqlx::query_scalar("SELECT now()")
        .fetch_one(&mut *tx)
        .await?;
    let Some(attempt) = write_resolution(&mut tx, resolution, now).await? else {
        let key_window_cutoff = resolution.window.key_window_cutoff(now);
        let outcome = explain_refusal(&mut tx, resolution, now, key_window_cutoff).await?;
        tx.rollback().await?;
        return Ok(outcome);
    };
    let status = resolution.target.status();
    let mut event_id = None;
    if status.is_final() {
        let event = PaymentEvent::for_settlement(&attempt, resolution.announced(), now);
        outbox::insert_event(&mut tx, &event, &attempt.provenance).await?;
        event_id = Some(event.event_id);
    }
    audit::insert(&mut tx, &resolution_audit(resolution, event_id)).await?;
    tx.commit().await?;
    Ok(ResolveOutcome::Resolved { status, event_id })
}

/// The guarded update and its transition, stamped `now`: the attempt moves only from
/// `needs_review`, and a retry only inside the key window and the maximum age. Returns
/// what its event repeats, or `None` when the guard refused.
async fn write_resolution(
    conn: &mut PgConnection,
    resolution: &OperatorDecision<'_>,
    now: OffsetDateTime,
) -> Result<Option<EventAttempt>, sqlx::Error> {
    let (charge_id, decline_code) = resolution.target.gateway_ids();
    // A retry also resets the reconciler's schedule: the attempt starts a new round of
    // sending, and whatever comes of it deserves the reconciler's full schedule again.
    sqlx::query_as(
        "WITH resolved AS (
             UPDATE payment_attempts SET
                 status = $2,
                 gateway_charge_id = COALESCE($3, gateway_charge_id),
                 decline_code = COALESCE($4, decline_code),
                 review_reason = CASE WHEN $2 = 'pending' THEN NULL ELSE review_reason END,
                 next_run_at = CASE WHEN $2 = 'pending' THEN $5 ELSE next_run_at END,
                 reconcile_checks = CASE WHEN $2 = 'pending' THEN 0 ELSE reconcile_checks END,
                 updated_at = $5
             WHERE payment_attempt_id = $1
               AND status = 'needs_review'
               AND ($11::int8 IS NULL OR lease_token = $11)
               AND ($2 <> 'pending'
                    OR first_dispatched_at IS NULL
                    OR (first_dispatched_at > $6 AND created_at > $7))
               AND ($2 <> 'succeeded' OR gateway_object_id IS NULL OR gateway_object_id = $3)
             RETURNING payment_attempt_id, order_id, amount_minor, currency, first_message_id,
                       correlation_id, traceparent
         ),
         transition AS (
             INSERT INTO attempt_transitions
                 (payment_attempt_id, from_status, to_status, cause, actor, detail, at)
             SELECT payment_attempt_id, 'needs_review', $2, $10, $8, $9, $5
             FROM resolved
         )
         SELECT * FROM resolved",
    )
    .bind(resolution.payment_attempt_id)
    .bind(resolution.target.status().as_str())
    .bind(charge_id)
    .bind(decline_code)
    .bind(now)
    .bind(resolution.window.key_window_cutoff(now))
    .bind(resolution.window.age_cutoff(now))
    .bind(resolution.actor)
    .bind(resolution.detail())
    .bind(TransitionCause::OperatorResolved.as_str())
    .bind(resolution.claim)
    .fetch_optional(conn)
    .await
}

/// The audit row of an applied resolution.
fn resolution_audit(resolution: &OperatorDecision<'_>, event_id: Option<Uuid>) -> NewAuditEntry {
    let (charge_id, decline_code) = resolution.target.gateway_ids();
    NewAuditEntry {
        actor: resolution.actor.to_owned(),
        via: resolution.via,
        action: resolution.target.audit_action(),
        payment_attempt_ids: vec![resolution.payment_attempt_id],
        dlq_sequence: None,
        reason: Some(resolution.reason.to_owned()),
        outcome: "applied",
        detail: serde_json::json!({
            "from": AttemptStatus::NeedsReview,
            "to": resolution.target.status(),
            "gateway_charge_id": charge_id,
            "decline_code": decline_code,
            "event_id": event_id,
        }),
    }
}

/// Why the guarded update touched nothing. Read after the write, only to explain it.
async fn explain_refusal(
    conn: &mut PgConnection,
    resolution: &OperatorDecision<'_>,
    now: OffsetDateTime,
    key_window_cutoff: OffsetDateTime,
) -> Result<ResolveOutcome, sqlx::Error> {
    let attempt: Option<RefusedAttempt> = sqlx::query_as(
        "SELECT status, first_dispatched_at, created_at, idempotency_key, lease_token,
                gateway_object_id
         FROM payment_attempts WHERE payment_attempt_id = $1",
    )
    .bind(resolution.payment_attempt_id)
    .fetch_optional(conn)
    .await?;
    let Some(attempt) = attempt else {
        return Ok(ResolveOutcome::NotFound);
    };
    if attempt.status != AttemptStatus::NeedsReview {
        return Ok(ResolveOutcome::NotInReview {
            status: attempt.status,
        });
    }
    if resolution
        .claim
        .is_some_and(|claim| claim != attempt.lease_token)
    {
        return Ok(ResolveOutcome::ClaimedMeanwhile);
    }
    if let (ResolveTarget::Succeeded { .. }, Some(payment_intent)) =
        (&resolution.target, attempt.gateway_object_id)
    {
        return Ok(ResolveOutcome::NotItsPaymentIntent { payment_intent });
    }
    Ok(match attempt.first_dispatched_at {
        Some(first) if first <= key_window_cutoff => ResolveOutcome::KeyWindowClosed {
            first_dispatched_at: first,
            idempotency_key: attempt.idempotency_key,
            now,
        },
        _ => ResolveOutcome::TooOldToRetry {
            created_at: attempt.created_at,
            now,
        },
    })
}

/// What [`explain_refusal`] reads of the attempt.
#[derive(sqlx::FromRow)]
struct RefusedAttempt {
    status: AttemptStatus,
    first_dispatched_at: Option<OffsetDateTime>,
    created_at: OffsetDateTime,
    idempotency_key: String,
    lease_token: LeaseToken,
    gateway_object_id: Option<String>,
}

/// What an operator's decision that asks the gateway first holds: the attempt claimed in
/// `needs_review` (its fencing token moved, so a recheck or a reconciler claiming it after
/// fences this decision out, and this claim fences out a recheck made before it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecisionClaim {
    /// Held in `needs_review` under the new token; its gateway object, if any, is what
    /// could still charge (Stripe's PaymentIntent).
    Claimed(HeldAttempt),
    NotFound,
    /// Not in review: nothing may be asked of the gateway on the decision's behalf.
    NotInReview(AttemptStatus),
}

/// Claims a `needs_review` attempt for an operator's decision before the gateway is asked
/// anything on its behalf: check, then act. Any other state claims nothing.
pub async fn claim_for_decision(
    store: &Store,
    id: PaymentAttemptId,
) -> Result<DecisionClaim, sqlx::Error> {
    let claimed: Option<HeldAttempt> = sqlx::query_as(&format!(
        "UPDATE payment_attempts a SET lease_token = a.lease_token + 1, updated_at = now()
         WHERE a.payment_attempt_id = $1 AND a.status = 'needs_review'
         RETURNING {HELD_COLUMNS}"
    ))
    .bind(id)
    .fetch_optional(store.pool())
    .await?;
    if let Some(attempt) = claimed {
        return Ok(DecisionClaim::Claimed(attempt));
    }
    let status: Option<AttemptStatus> =
        sqlx::query_scalar("SELECT status FROM payment_attempts WHERE payment_attempt_id = $1")
            .bind(id)
            .fetch_optional(store.pool())
            .await?;
    Ok(status.map_or(DecisionClaim::NotFound, DecisionClaim::NotInReview))
}
