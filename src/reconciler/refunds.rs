//! Looking refunds up: the reconciler's side of a refund (contract §2.5, §4.1), beside the
//! charges' reconciler and built the same way. Each pass:
//! 1. moves every refund whose sender's lease ran out to `unknown` (it may have been sent),
//!    moving its fence on so a late answer is refused;
//! 2. claims refunds due for a lookup (`unknown`, `processing`), whatever the breaker says
//!    (decision 210: a lookup moves no money), a permit of `gateway_max_rate` each;
//! 3. asks the gateway and writes where each goes, decided by the one lookup policy
//!    (`domain::refund_call`, `domain::lookup`): a refund still processing is followed by
//!    time since its last send, failed lookups count apart and never use that time up, and
//!    an answer the database would refuse goes to a person.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::config::Settings;
use crate::domain::refund_call::{after_lookup, evidence, RefundPolicy};
use crate::domain::{Actor, HeldRefund};
use crate::gateway::{GatewayClient, GatewayHealth, RefundRequest};
use crate::gateway_access::limit::Take;
use crate::gateway_access::GatewayAccess;
use crate::nudge::Nudges;
use crate::store::refunds::{self, Written};
use crate::store::Store;

/// The refund lookups of one process.
#[derive(Clone)]
pub struct RefundLookups {
    store: Store,
    /// The client and health, and a lease of its own on the fleet's rate limit: a lookup
    /// is one request under `gateway_max_rate`.
    gateway: GatewayAccess,
    policy: RefundPolicy,
    actor: Actor,
    /// How long a claimed lookup keeps the refund out of reach (`reconciler.claim_hold`).
    hold: Duration,
    batch_size: usize,
    poll_interval: Duration,
    nudges: Nudges,
}

/// What one pass did, for tests and logs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LookupReport {
    pub leases_expired: u64,
    pub looked_up: usize,
}

impl RefundLookups {
    pub fn new(
        store: Store,
        gateway: GatewayClient,
        health: GatewayHealth,
        settings: &Settings,
    ) -> Self {
        Self {
            gateway: GatewayAccess::new(store.clone(), gateway, health, settings),
            store,
            policy: RefundPolicy::from_settings(settings),
            actor: Actor::Reconciler(crate::identity::default_owner()),
            hold: settings.reconciler.claim_hold,
            batch_size: settings.refunds.batch_size,
            poll_interval: settings.reconciler.poll_interval,
            nudges: Nudges::default(),
        }
    }

    /// The same lookups, announcing the events they write to this process's relay.
    pub fn with_nudges(mut self, nudges: Nudges) -> Self {
        self.nudges = nudges;
        self
    }

    /// Works until `shutdown`; a pass in hand is finished first.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        tracing::info!("refund lookups started");
        crate::nudge::work_until(
            &shutdown,
            "refund lookup pass",
            self.poll_interval,
            || async { Ok(self.pass().await? != LookupReport::default()) },
            std::future::pending,
        )
        .await;
        tracing::info!("refund lookups stopped");
        Ok(())
    }

    /// One pass: expired leases to `unknown`, then the lookups that are due; for `run` and
    /// for tests.
    pub async fn pass(&self) -> anyhow::Result<LookupReport> {
        let mut report = LookupReport {
            leases_expired: refunds::expire_leases(&self.store, &self.actor).await?,
            looked_up: 0,
        };
        let due = if self.gateway.rate_limit.is_limited() {
            refunds::due(&self.store, self.batch_size as i64)
                .await?
                .lookups as usize
        } else {
            self.batch_size
        };
        if due == 0 {
            return Ok(report);
        }
        if let Take::Granted(permits) = self.gateway.rate_limit.for_lookups(due).await {
            let held =
                refunds::claim_lookups(&self.store, self.hold, permits.count() as i64).await?;
            permits.spend(held.len());
            report.looked_up = held.len();
            futures::future::join_all(held.iter().map(|held| self.look_up(held))).await;
        }
        Ok(report)
    }

    /// Looks up one refund and writes where it goes.
    async fn look_up(&self, held: &HeldRefund) {
        let span = tracing::info_span!(
            "refund_lookup",
            refund_id = %held.refund_id,
            payment_attempt_id = %held.payment_attempt_id
        );
        async {
            let now = held.database_time();
            let started_at = now();
            let call = self
                .gateway
                .client
                .lookup_refund(&RefundRequest::from(held))
                .await;
            let at = now();
            let next = after_lookup(held, &call.outcome, &self.policy, at);
            let evidence = evidence(held, &call, call.outcome.label(), started_at, &next);
            let answer = format!("{:?}", call.outcome);
            let result = refunds::write(
                &self.store,
                held,
                next,
                "refund_lookup",
                &self.actor,
                &evidence,
                &self.policy,
                &answer,
                at,
            )
            .await;
            match result {
                Ok(Written::Moved(to)) => {
                    tracing::info!(to = to.as_str(), "refund moved");
                    crate::metrics::refund_moved(to);
                    if to.is_final() {
                        self.nudges.events_written();
                    }
                }
                Ok(Written::Fenced) => {
                    tracing::warn!("another lookup holds the refund now; this one's result was not written (the call is on record)");
                }
                Err(err) => {
                    // Its hold runs out and the next pass looks it up again.
                    tracing::error!(error = %err, "writing the refund's lookup failed; it is looked up again after its hold");
                }
            }
        }
        .instrument(span)
        .await
    }
}
