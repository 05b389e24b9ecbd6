//! The two-step charge (Stripe): what the executor does around a connector whose charging
//! call needs an object made first, and may be answered "requires action".
//!
//! - **Prepare**: the PaymentIntent is created unconfirmed under `<key>-create[-N]`, and its
//!   id is stored under the lease, with the confirm's send stamped in the same statement,
//!   before anything that can charge is sent: a reconciler can always find it by id.
//! - **May confirm**: an object stored by an earlier try is confirmed only when the lease
//!   left covers a whole call.
//! - **Key advance**: after a create answered `5xx` (which Stripe saves and replays for a
//!   day) the create key's sequence moves on; an unconfirmed PaymentIntent cannot charge.
//! - **Cancel**: a confirm answered `requires_action` (3-D Secure, off-session) is cancelled
//!   under `<key>-cancel` when `executor.requires_action = cancel`, and is "declined" only
//!   once the cancel proves it can never charge.
//!
//! A connector without a first step (contract §3) passes through [`Executor::prepare`]
//! untouched. Kept apart from the executor's loop so that each reads in one sitting.

use std::time::Duration;

use super::metrics;
use super::writer::{GatewayObjectWriter, WriteError};
use super::{Disposition, Executor};
use crate::config::RequiresAction;
use crate::domain::call::{CancelOutcome, GatewayCall, Prepared};
use crate::domain::outcome::GatewayOutcome;
use crate::domain::{ChargeClaim, GatewayCallRecord, GatewayChargeId, GatewayObjectId};
use crate::gateway::ChargeRequest;
use crate::store::attempts as sql;
use crate::store::attempts::gateway_objects::{
    advance_key, stamp_confirm_send, ConfirmSend, KeyStep, ObjectWrite,
};

impl Executor {
    /// Everything before the charging call. For a connector with a first step (Stripe:
    /// create the PaymentIntent unconfirmed) that has not run yet: stores the object's id
    /// under this lease, with the call's evidence, and stamps the confirm's send in the
    /// same statement, and puts the id in `request`, so that nothing that can charge is
    /// sent before the reconciler could find it by id. For an object stored by an earlier
    /// try, only the stamp ([`Self::may_confirm`]). `Ok(None)`: charge now.
    /// `Ok(Some(call))`: answered without charging — the gateway refused to make the
    /// object, or the lease left cannot cover the confirm; the attempt settles on that
    /// call. `Err`: the lease was taken over, or the database failed: nothing is confirmed,
    /// and an attempt left `in_flight` is found uncharged by the reconciler.
    pub(super) async fn prepare(
        &self,
        claim: &ChargeClaim,
        request: &mut ChargeRequest,
        started_at: time::OffsetDateTime,
    ) -> Result<Option<GatewayCall<GatewayOutcome>>, Disposition> {
        let inner = &self.inner;
        let Some(prepared) = inner.gateway.client.prepare(request).await else {
            return self.may_confirm(claim, request).await;
        };
        let id = match prepared.outcome {
            Prepared::Object { ref id } => id.clone(),
            // Recorded in the health with the rest of the call's outcome, by the caller.
            Prepared::Refused(outcome) => {
                // A create answered 5xx: Stripe saved that answer under the key and would
                // replay it to every retry. Whatever it made is unconfirmed and cannot
                // charge, so the next try creates under the next derived key.
                if prepared.http_status.is_some_and(|status| status >= 500) {
                    self.advance_create_key(claim).await;
                }
                return Ok(Some(GatewayCall {
                    outcome,
                    operation: prepared.operation,
                    sent_key: prepared.sent_key,
                    answered_locally: prepared.answered_locally,
                    http_status: prepared.http_status,
                    elapsed: prepared.elapsed,
                    error: prepared.error,
                }));
            }
        };
        inner
            .gateway
            .health
            .record_prepared(&prepared.outcome, inner.clock.now());
        let evidence = claim.attempt.evidence(
            &prepared,
            prepared.outcome.label(),
            started_at,
            Some(GatewayChargeId::from_gateway(id.as_str())),
            None,
        );
        let stored =
            store_gateway_object(&inner.objects, claim, &id, &evidence, inner.call_limit).await;
        if matches!(stored, Ok(ConfirmSend::Go | ConfirmSend::LeaseTooShort)) {
            *request = request.clone().with_gateway_object(Some(id));
        }
        confirm_send_answer(stored)
    }

    /// Moves the attempt to its next create key (fenced by its lease). A failure only
    /// means the next try replays the saved answer once more and moves on then.
    pub(super) async fn advance_create_key(&self, claim: &ChargeClaim) {
        let store = &self.inner.store;
        let advanced = advance_key(
            store,
            claim.attempt.payment_attempt_id,
            claim.attempt.lease_token,
            KeyStep::Create,
        )
        .await;
        match advanced {
            Ok(true) => tracing::info!(
                create_key_seq = claim.attempt.key_seq.create + 1,
                "the create answered 5xx: the next try creates under the next derived key"
            ),
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(error = %err, "cannot move on to the next create key; the next try asks under this one again")
            }
        }
    }

    /// Right before a confirm of an object an earlier try stored (Stripe), re-checks the
    /// lease by the database's clock and stamps the send (`dispatched_at`), so that the
    /// reconciler measures `gateway_max_processing_time` from the request that can charge.
    /// Answers as [`confirm_send_answer`]; `Ok(None)` at once when there is no object (a §3
    /// gateway's charge is one call, stamped by its claim).
    pub(super) async fn may_confirm(
        &self,
        claim: &ChargeClaim,
        request: &ChargeRequest,
    ) -> Result<Option<GatewayCall<GatewayOutcome>>, Disposition> {
        let inner = &self.inner;
        if request.gateway_object_id().is_none() {
            return Ok(None);
        }
        let stamped = stamp_confirm_send(
            &inner.store,
            claim.attempt.payment_attempt_id,
            claim.attempt.lease_token,
            inner.call_limit,
        )
        .await;
        confirm_send_answer(stamped)
    }

    /// A confirm that left the PaymentIntent waiting for an absent customer
    /// (`requires_action`): with `stripe_requires_action = cancel`, cancels it first (one
    /// permit of `gateway_max_rate`, or, when none comes within a call's time, no cancel and
    /// a person decides) and reads the answer — `canceled` is a decline `authentication_required` (it can never
    /// charge), `succeeded` or `processing` is adopted, no proof leaves it for a person.
    /// The cancel's evidence is stored on its own.
    pub(super) async fn cancel_if_action_required(
        &self,
        claim: &ChargeClaim,
        call: GatewayCall<GatewayOutcome>,
        now: &impl Fn() -> time::OffsetDateTime,
    ) -> GatewayCall<GatewayOutcome> {
        let inner = &self.inner;
        let GatewayOutcome::RequiresAction { charge_id } = &call.outcome else {
            return call;
        };
        if inner.requires_action != RequiresAction::Cancel {
            return call;
        }
        // A third request after the charge's two: it takes a permit of the fleet's rate
        // like any other, waiting no longer than a call may take (the lease runs). None in
        // time: the PaymentIntent is left for a person, as `review` would leave it.
        let permit = match inner.gateway.cancel_permit_within(inner.call_limit).await {
            Ok(permit) => permit,
            Err(why) => {
                tracing::warn!(why, "no gateway rate permit for the cancel after requires_action: left for a person");
                return call;
            }
        };
        let started_at = now();
        let Some(cancel) = inner
            .gateway
            .client
            .cancel_object(&claim.attempt.idempotency_key, Some(charge_id))
            .await
        else {
            return call;
        };
        permit.spend(1);
        let evidence = claim.attempt.cancel_evidence(&cancel, started_at);
        if let Err(err) = sql::record_gateway_call_alone(&inner.store, &evidence).await {
            tracing::warn!(error = %err, "cannot store the cancel's evidence");
        }
        let outcome = match cancel.outcome {
            CancelOutcome::Canceled { charge_id } => GatewayOutcome::Declined {
                charge_id,
                decline_code: Some("authentication_required".into()),
                replayed: false,
            },
            CancelOutcome::Succeeded { charge_id } => GatewayOutcome::Succeeded {
                charge_id,
                replayed: false,
            },
            CancelOutcome::Processing { charge_id } => GatewayOutcome::Processing { charge_id },
            CancelOutcome::Unproven { .. } => return call,
        };
        GatewayCall { outcome, ..call }
    }
}

/// What the executor does on the answer of the write that precedes a confirm (storing the
/// PaymentIntent with the stamp, or the stamp alone): `Ok(None)`: confirm now.
/// `Ok(Some(call))`: the lease left cannot cover a whole call, so nothing is sent (an
/// outcome `not_sent`). `Err`: fenced, or the database failed: nothing is sent.
fn confirm_send_answer(
    answer: Result<ConfirmSend, impl std::fmt::Display>,
) -> Result<Option<GatewayCall<GatewayOutcome>>, Disposition> {
    match answer {
        Ok(ConfirmSend::Go) => Ok(None),
        Ok(ConfirmSend::LeaseTooShort) => Ok(Some(GatewayCall {
            outcome: GatewayOutcome::NotSent {
                reason: "the lease left could not cover the confirm: not sent".into(),
            },
            operation: crate::domain::CallOperation::Charge,
            sent_key: None,
            answered_locally: true,
            http_status: None,
            elapsed: Duration::ZERO,
            error: Some("not sent: the lease left could not cover a whole gateway call".into()),
        })),
        Ok(ConfirmSend::Fenced) => {
            metrics::fenced();
            tracing::warn!("the lease was taken over before the confirm (or another gateway object is stored): nothing confirmed");
            Err(Disposition::Fenced)
        }
        Err(err) => {
            metrics::unrecorded();
            tracing::error!(error = %err, "cannot store the gateway object or stamp the confirm's send: nothing confirmed; the lease expires and the reconciler reads what the gateway holds");
            Err(Disposition::Unrecorded(crate::domain::bounded(
                &err.to_string(),
                500,
            )))
        }
    }
}

/// Stores the gateway object under the attempt's lease (fenced) and stamps the confirm's
/// send, group-committed with other slots' (decision 123), retrying a transient database
/// failure briefly (three more tries from 50 ms, the one jittered backoff). Only a stored,
/// stamped object is confirmed.
async fn store_gateway_object(
    objects: &GatewayObjectWriter,
    claim: &ChargeClaim,
    object_id: &GatewayObjectId,
    evidence: &GatewayCallRecord,
    call_limit: Duration,
) -> Result<ConfirmSend, WriteError> {
    use backon::Retryable as _;
    let write = || {
        objects.write(ObjectWrite {
            payment_attempt_id: claim.attempt.payment_attempt_id,
            lease_token: claim.attempt.lease_token,
            object_id: object_id.clone(),
            call: evidence.clone(),
            call_limit,
        })
    };
    write
        .retry(
            crate::domain::retry::exponential(
                Duration::from_millis(50),
                Duration::from_millis(800),
            )
            .with_max_times(3),
        )
        .when(|err: &WriteError| err.transient)
        .notify(|err, _| tracing::warn!(error = %err.message, "storing the gateway object failed; retrying"))
        .await
}
