//! Sending refunds: the executor's side of a refund (contract §2.5, §4.1), beside the
//! charges' executor and built the same way. Each pass:
//! 1. admits waiting refunds whose attempt is final (reserving their amount), and refuses
//!    those that can never be sent, with their reason;
//! 2. claims due `pending` refunds under a fenced lease (a permit of the fleet's
//!    `gateway_max_rate` each, the breaker's word first) and sends each under its own key;
//! 3. writes where each goes, decided by the one lookup policy (`domain::refund_call`,
//!    `domain::lookup`).
//!
//! Lookups of refunds left `unknown` or `processing`, and expired leases, are the
//! reconciler's (`reconciler::refunds`), as for charges.
//!
//! Invariants:
//! - A refund is sent only under a lease whose claim committed first, and every result is
//!   written fenced by that lease's token: a late result is refused.
//! - Only an answer that proves nothing was done sends a refund again, under the same key,
//!   within the resend limits (tries, maximum age, key window).
//! - Every time written (the call's `started_at`, `finished_at`, the next due time) is the
//!   database's: the claim's `now()` plus the time elapsed here since.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::clock::{Clock, SystemClock};
use crate::config::Settings;
use crate::domain::refund_call::{after_request, evidence, RefundPolicy};
use crate::domain::{Actor, HeldRefund};
use crate::gateway::{Admission, GatewayClient, GatewayHealth, RefundRequest};
use crate::gateway_access::limit::Take;
use crate::gateway_access::GatewayAccess;
use crate::nudge::Nudges;
use crate::store::refunds::{self, RefundAdmission, Written};
use crate::store::Store;

/// The refund sender of one process.
#[derive(Clone)]
pub struct RefundSender {
    store: Store,
    /// The executor's client and health, and a lease of its own on the fleet's rate limit:
    /// a refund is one request under `gateway_max_rate`.
    gateway: GatewayAccess,
    policy: RefundPolicy,
    actor: Actor,
    lease: Duration,
    batch_size: usize,
    max_wait: Duration,
    recheck: Duration,
    poll_interval: Duration,
    nudges: Nudges,
    /// The host's clock: only the breaker reads it (its cooldowns are this process's own).
    clock: Arc<dyn Clock>,
}

/// What one pass did, for tests and logs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SendReport {
    pub admitted: usize,
    pub refused: usize,
    pub sent: usize,
}

impl RefundSender {
    pub fn new(
        store: Store,
        gateway: GatewayClient,
        health: GatewayHealth,
        settings: &Settings,
    ) -> Self {
        let executor = &settings.executor;
        Self {
            gateway: GatewayAccess::new(store.clone(), gateway, health, settings),
            store,
            policy: RefundPolicy::from_settings(settings),
            actor: Actor::Executor(crate::identity::default_owner()),
            lease: executor.lease,
            batch_size: settings.refunds.batch_size,
            max_wait: settings.refunds.max_wait,
            recheck: settings.refunds.recheck_interval,
            poll_interval: executor.poll_interval.max(Duration::from_millis(200)),
            nudges: Nudges::default(),
            clock: Arc::new(SystemClock),
        }
    }

    /// The same sender, woken by this process's intake when it records refunds.
    pub fn with_nudges(mut self, nudges: Nudges) -> Self {
        self.nudges = nudges;
        self
    }

    /// The same sender on `clock` (a test's host clock, skewed).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Works until `shutdown`; a pass in hand is finished first.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        tracing::info!("refund sender started");
        crate::nudge::work_until(
            &shutdown,
            "refund pass",
            self.poll_interval,
            || async { Ok(self.pass().await? != SendReport::default()) },
            || self.nudges.refunds_due(),
        )
        .await;
        tracing::info!("refund sender stopped");
        Ok(())
    }

    /// One pass: admit, then send what is due; for `run` and for tests.
    pub async fn pass(&self) -> anyhow::Result<SendReport> {
        let mut report = SendReport::default();
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
                RefundAdmission::Admitted => report.admitted += 1,
                RefundAdmission::Refused(reason) => {
                    report.refused += 1;
                    crate::metrics::refund_settled("refused");
                    tracing::info!(%refund_id, reason, "refund refused");
                }
                RefundAdmission::StillWaiting => {}
            }
        }
        if report.refused > 0 {
            self.nudges.events_written();
        }
        // Refunds go out as the charges do: all of a batch while the breaker is closed, one
        // as its probe once an open breaker's cooldown has passed (nothing else may be left
        // to probe with), none while it waits.
        let now = self.clock.now();
        let calls = self.gateway.health.admit_refunds(now);
        // Under `gateway_max_rate`, permits are asked for what is due, never for a whole
        // batch: an idle pass every poll would otherwise take tokens from the fleet's bucket
        // and let them expire unspent (decision 211).
        let due = if self.gateway.rate_limit.is_limited() {
            refunds::due(&self.store, self.batch_size as i64)
                .await?
                .sends
        } else {
            self.batch_size as i64
        };
        let limit = match calls {
            Admission::Open => due,
            Admission::Probe => due.min(1),
            Admission::Wait { .. } => 0,
        } as usize;
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
        if calls == Admission::Probe && !probe_used {
            self.gateway.health.return_probe(now);
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
            let now = held.database_time();
            let started_at = now();
            let call = self.gateway.client.refund(&RefundRequest::from(held)).await;
            self.gateway
                .health
                .record_refund(&call.outcome, self.clock.now());
            let at = now();
            let next = after_request(held, &call.outcome, &self.policy, at);
            let evidence = evidence(held, &call, call.outcome.label(), started_at, &next);
            let answer = format!("{:?}", call.outcome);
            written(
                refunds::write(
                    &self.store,
                    held,
                    next,
                    "refund_answer",
                    &self.actor,
                    &evidence,
                    &self.policy,
                    &answer,
                    at,
                )
                .await,
                &self.nudges,
            );
        }
        .instrument(span)
        .await
    }
}

/// Logs and counts what writing a refund's move came to.
fn written(result: Result<Written, sqlx::Error>, nudges: &Nudges) {
    match result {
        Ok(Written::Moved(to)) => {
            tracing::info!(to = to.as_str(), "refund moved");
            crate::metrics::refund_moved(to);
            if to.is_final() {
                nudges.events_written();
            }
        }
        Ok(Written::Fenced) => {
            tracing::warn!("the refund's lease was taken over; its result was not written (the call is on record)");
        }
        Err(err) => {
            // The lease runs out and the reconciler looks the refund up: nothing is lost.
            tracing::error!(error = %err, "writing the refund's result failed; it will be looked up when its lease runs out");
        }
    }
}
