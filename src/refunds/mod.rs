//! The refund worker: everything that moves a refund after intake recorded it (contract
//! §2.5, §4.1). It runs wherever the executor runs, on the executor's gateway client and
//! health and under the fleet's `gateway_max_rate` (a permit per request), and each pass:
//! 1. admits waiting refunds whose attempt is final (reserving their amount), and refuses
//!    those that can never be sent, with their reason;
//! 2. claims due `pending` refunds under a fenced lease and sends each under its own key;
//! 3. moves refunds whose executor's lease ran out to `unknown`;
//! 4. looks up `unknown` and `processing` refunds and settles them by what the gateway holds,
//!    whatever the breaker says.
//!
//! Invariants:
//! - A refund is sent only under a lease whose claim committed first, and every result is
//!   written fenced by that lease's token: a late result is refused.
//! - Only an answer that proves nothing was done sends a refund again, under the same key;
//!   anything ambiguous is looked up, and a lookup adopts only a refund carrying this
//!   `refund_id`.

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::clock::{Clock, SystemClock};
use crate::config::Settings;
use crate::domain::refund_call::{after_lookup, after_request, RefundMove, RefundPolicy};
use crate::domain::{Actor, GatewayCallRecord, GatewayChargeId, HeldRefund};
use crate::gateway::{
    Admission as Calls, GatewayCall, GatewayClient, GatewayHealth, RefundRequest,
};
use crate::gateway_access::GatewayAccess;
use crate::gateway_limit::Take;
use crate::nudge::Nudges;
use crate::store::refunds::{self, Admission};
use crate::store::Store;

/// The refund worker of one process.
#[derive(Clone)]
pub struct RefundWorker {
    store: Store,
    /// The executor's client and health, and a lease of its own on the fleet's rate limit:
    /// a refund and a refund's lookup are one request each under `gateway_max_rate`.
    gateway: GatewayAccess,
    policy: RefundPolicy,
    actor: Actor,
    lease: Duration,
    lookup_hold: Duration,
    batch_size: usize,
    max_wait: Duration,
    recheck: Duration,
    poll_interval: Duration,
    nudges: Nudges,
    /// The host's clock: the gateway health's breaker reads it.
    clock: Arc<dyn Clock>,
}

/// What one pass did, for tests and logs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    pub admitted: usize,
    pub refused: usize,
    pub sent: usize,
    pub looked_up: usize,
    pub leases_expired: u64,
}

impl RefundWorker {
    pub fn new(
        store: Store,
        gateway: GatewayClient,
        health: GatewayHealth,
        settings: &Settings,
    ) -> Self {
        let executor = &settings.executor;
        let reconciler = &settings.reconciler;
        Self {
            gateway: GatewayAccess::new(store.clone(), gateway, health, settings),
            store,
            policy: RefundPolicy {
                retry_min_delay: executor.retry_min_delay,
                retry_max_delay: executor.retry_max_delay,
                in_progress_delay: executor.in_progress_delay,
                max_tries: i32::try_from(executor.max_tries).unwrap_or(i32::MAX),
                max_processing_time: settings.gateway_max_processing_time,
                key_window: settings
                    .gateway_key_retention
                    .saturating_sub(settings.gateway_key_retention_margin),
                schedule: reconciler.schedule.clone(),
                processing_schedule: reconciler.processing_schedule.clone(),
                processing_max: reconciler.processing_max,
            },
            actor: Actor::Executor(crate::identity::default_owner()),
            lease: executor.lease,
            lookup_hold: reconciler.claim_hold,
            batch_size: settings.refunds.batch_size,
            max_wait: settings.refunds.max_wait,
            recheck: settings.refunds.recheck_interval,
            poll_interval: executor.poll_interval.max(Duration::from_millis(200)),
            nudges: Nudges::default(),
            clock: Arc::new(SystemClock),
        }
    }

    /// The same worker on `clock` (a test's host clock, skewed).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The same worker, woken by this process's intake when it records refunds.
    pub fn with_nudges(mut self, nudges: Nudges) -> Self {
        self.nudges = nudges;
        self
    }

    /// Works until `shutdown`; a pass in hand is finished first.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        tracing::info!("refund worker started");
        while !shutdown.is_cancelled() {
            let busy = match self.pass().await {
                Ok(report) => report != PassReport::default(),
                Err(err) => {
                    let quiet = crate::store::notice_failure(&err);
                    step_failed!(quiet, warn, error = %format!("{err:#}"), "refund pass failed; trying again");
                    false
                }
            };
            if busy {
                continue;
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.nudges.refunds_due() => {}
                _ = tokio::time::sleep(self.poll_interval) => {}
            }
        }
        tracing::info!("refund worker stopped");
        Ok(())
    }

    /// One pass of every step, for `run` and for tests.
    pub async fn pass(&self) -> anyhow::Result<PassReport> {
        let mut report = PassReport::default();
        for (refund_id, admission) in refunds::admit_due(
            &self.store,
            &self.actor,
            self.batch_size as i64,
            self.max_wait,
            self.recheck,
        )
        .await?
        {
            match admission {
                Admission::Admitted => report.admitted += 1,
                Admission::Refused(reason) => {
                    report.refused += 1;
                    crate::metrics::refund_settled("refused");
                    tracing::info!(%refund_id, reason, "refund refused");
                }
                Admission::StillWaiting => {}
            }
        }
        if report.refused > 0 {
            self.nudges.events_written();
        }
        report.leases_expired = refunds::expire_leases(&self.store, &self.actor).await?;
        // Refunds go out as the charges do: all of a batch while the breaker is closed, one
        // as its probe once an open breaker's cooldown has passed (nothing else may be left
        // to probe with), none while it waits.
        let now = self.clock.now();
        let calls = self.gateway.health.admit(now);
        // Under `gateway_max_rate`, permits are asked for what is due, never for a whole
        // batch: an idle pass every poll would otherwise take tokens from the fleet's bucket
        // and let them expire unspent (decision 211).
        let due = if self.gateway.rate_limit.is_limited() {
            refunds::due(&self.store, self.batch_size as i64).await?
        } else {
            refunds::Due {
                sends: self.batch_size as i64,
                lookups: self.batch_size as i64,
            }
        };
        let limit = match calls {
            Calls::Open => due.sends,
            Calls::Probe => due.sends.min(1),
            Calls::Wait { .. } => 0,
        } as usize;
        // Claimed only with a permit of the fleet's rate limit each, as charges are.
        let mut probe_used = false;
        if limit > 0 {
            if let Take::Granted(permits) = self.gateway.rate_limit.for_refunds(limit).await {
                let claimed = refunds::claim_pending(
                    &self.store,
                    &self.actor,
                    self.lease,
                    permits.count() as i64,
                )
                .await?;
                permits.spend(claimed.len());
                probe_used = !claimed.is_empty();
                report.sent = claimed.len();
                futures::future::join_all(claimed.iter().map(|held| self.send(held))).await;
            }
        }
        if calls == Calls::Probe && !probe_used {
            self.gateway.health.return_probe(now);
        }
        // Lookups go out whatever the breaker says, as the reconciler's lookups of charges
        // do (decision 19): a lookup moves no money, and held behind an open breaker, a
        // refund left `unknown` by the failures that opened it would wait for a send that
        // may never come to close it (decision 210).
        let lookups = due.lookups as usize;
        if lookups == 0 {
            return Ok(report);
        }
        if let Take::Granted(permits) = self.gateway.rate_limit.for_lookups(lookups).await {
            let due = refunds::claim_lookups(&self.store, self.lookup_hold, permits.count() as i64)
                .await?;
            permits.spend(due.len());
            report.looked_up = due.len();
            futures::future::join_all(due.iter().map(|held| self.look_up(held))).await;
        }
        Ok(report)
    }

    /// Sends one claimed refund and writes where it goes.
    async fn send(&self, held: &HeldRefund) {
        let span = tracing::info_span!(
            "refund",
            refund_id = %held.refund_id,
            payment_attempt_id = %held.payment_attempt_id,
            try_number = held.tries
        );
        async {
            let started = self.clock.now();
            let call = self.gateway.client.refund(&RefundRequest::from(held)).await;
            self.gateway
                .health
                .record_refund(&call.outcome, self.clock.now());
            let next = after_request(held, &call.outcome, &self.policy);
            let evidence = evidence(held, &call, call.outcome.label(), started, &next);
            self.write(held, &next, "refund_answer", &evidence).await;
        }
        .instrument(span)
        .await
    }

    /// Looks up one refund and writes where it goes.
    async fn look_up(&self, held: &HeldRefund) {
        let span = tracing::info_span!(
            "refund_lookup",
            refund_id = %held.refund_id,
            payment_attempt_id = %held.payment_attempt_id
        );
        async {
            let started = self.clock.now();
            let call = self
                .gateway
                .client
                .lookup_refund(&RefundRequest::from(held))
                .await;
            let next = after_lookup(held, &call.outcome, &self.policy);
            let evidence = evidence(held, &call, call.outcome.label(), started, &next);
            self.write(held, &next, "refund_lookup", &evidence).await;
        }
        .instrument(span)
        .await
    }

    async fn write(
        &self,
        held: &HeldRefund,
        next: &RefundMove,
        cause: &str,
        call: &GatewayCallRecord,
    ) {
        match refunds::settle(&self.store, held, next, cause, &self.actor, Some(call)).await {
            Ok(true) => {
                let to = next.status();
                tracing::info!(to = to.as_str(), "refund moved");
                if to.is_final() {
                    crate::metrics::refund_settled(to.as_str());
                    self.nudges.events_written();
                } else if to == crate::domain::RefundStatus::NeedsReview {
                    crate::metrics::refund_settled("needs_review");
                }
            }
            Ok(false) => {
                tracing::warn!("the refund's lease was taken over; its result was not written (the call is on record)");
            }
            Err(err) => {
                // The lease runs out and the reconciler looks the refund up: nothing is lost.
                tracing::error!(error = %err, "writing the refund's result failed; it will be looked up when its lease runs out");
            }
        }
    }
}

/// The evidence of one refund call, on its attempt's timeline.
fn evidence<T>(
    held: &HeldRefund,
    call: &GatewayCall<T>,
    outcome: &str,
    started_at: OffsetDateTime,
    next: &RefundMove,
) -> GatewayCallRecord {
    let gateway_refund_id = match next {
        RefundMove::Succeeded { gateway_refund_id }
        | RefundMove::Processing {
            gateway_refund_id, ..
        } => Some(gateway_refund_id.clone()),
        RefundMove::Failed {
            gateway_refund_id, ..
        } => gateway_refund_id.clone(),
        _ => None,
    };
    GatewayCallRecord {
        payment_attempt_id: held.payment_attempt_id,
        operation: call.operation,
        idempotency_key: held.idempotency_key.clone(),
        try_number: held.tries,
        lease_token: Some(crate::domain::LeaseToken::from(held.lease_token)),
        started_at,
        finished_at: started_at + call.elapsed,
        http_status: call.http_status,
        outcome: outcome.to_owned(),
        // `gateway_calls` has one id column: a refund call's is the refund's id.
        gateway_charge_id: gateway_refund_id.map(GatewayChargeId::from_gateway),
        error: call.error.clone(),
    }
}
