//! The state every handler shares ([`Shared`]): the ledgers of charges and refunds, both
//! dialects' keys and stores, the faults, latency, request log and counters, and the clock;
//! and the
//! [`ConnectionControl`] a handler closes its own connection with. It sits below the
//! handlers and the server, which own it.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::Response;
use tokio_util::sync::CancellationToken;

use crate::charge::{Charge, ChargeParams, ChargeStatus};
use crate::clock::MockClock;
use crate::config::{Dialect, MockConfig};
use crate::faults::{ChargeIds, FaultInjector};
use crate::keys::Keys;
use crate::latency::LatencySampler;
use crate::ledger::Ledger;
use crate::record::{Counters, PageTimer, RequestLog, Stats};
use crate::refund::ledger::RefundLedger;
use crate::refund::RefundParams;
use crate::stripe::intent::Store as StripeStore;

/// Everything the handlers share; owned by the server and the `MockGateway` handle.
pub(crate) struct Shared {
    api_key: String,
    /// Which API the routes speak; the refund controls answer in its words.
    pub(crate) dialect: Dialect,
    pub(crate) clock: MockClock,
    /// Every charge either dialect committed.
    pub(crate) ledger: Arc<Ledger>,
    /// Every refund either dialect recorded; the Stripe store reads it too (a charge's
    /// `amount_refunded`).
    pub(crate) refunds: Arc<RefundLedger>,
    /// The onecharge dialect's keys: each stores its charge.
    pub(crate) keys: Keys<ChargeParams, Charge>,
    /// The onecharge dialect's refund keys, a space of their own: each stores the id of
    /// its refund, which replays and lookups show as it stands now.
    pub(crate) refund_keys: Keys<RefundParams, String>,
    /// The Stripe dialect's keys, PaymentIntents and customers.
    pub(crate) stripe: StripeStore,
    /// The versions Stripe requests named, and the permissions its key lacks.
    pub(crate) stripe_access: crate::stripe::access::Access,
    pub(crate) faults: FaultInjector,
    /// The log-normal latency, when configured.
    pub(crate) latency: Option<LatencySampler>,
    pub(crate) ids: ChargeIds,
    pub(crate) log: RequestLog,
    pub(crate) counters: Counters,
    /// How long list pages took to build (both dialects).
    pub(crate) page_times: PageTimer,
    pub(crate) hang_for: Duration,
    pub(crate) slow_charge_for: Duration,
    /// How long a refund that settles later waits before it does (real time).
    pub(crate) refund_settle_after: Duration,
    /// Woken by `MockGateway::finish_slow_charges`: every `slow_charge` held now charges.
    pub(crate) finish_slow: tokio::sync::Notify,
    replay_declined_with_200: bool,
    pub(crate) shutdown: CancellationToken,
}

impl Shared {
    pub(crate) fn new(config: &MockConfig) -> Shared {
        let ledger = Arc::new(Ledger::default());
        let refunds = Arc::new(RefundLedger::default());
        Shared {
            api_key: config.api_key.clone(),
            dialect: config.dialect,
            clock: MockClock::new(),
            keys: Keys::new(config.key_retention, Arc::clone(&ledger)),
            refund_keys: Keys::new(config.key_retention, Arc::clone(&ledger)),
            stripe: StripeStore::new(
                config.key_retention,
                Arc::clone(&ledger),
                Arc::clone(&refunds),
            ),
            stripe_access: Default::default(),
            ledger,
            refunds,
            faults: FaultInjector::new(config.faults.clone(), config.seed),
            latency: config
                .latency_distribution
                .as_ref()
                .map(LatencySampler::new),
            ids: ChargeIds::new(config.seed),
            log: RequestLog::new(config.request_log_capacity),
            counters: Counters::default(),
            page_times: PageTimer::default(),
            hang_for: config.hang_for,
            slow_charge_for: config.slow_charge_for,
            refund_settle_after: config.refund_settle_after,
            finish_slow: tokio::sync::Notify::new(),
            replay_declined_with_200: config.replay_declined_with_200,
            shutdown: CancellationToken::new(),
        }
    }

    /// Compares the bearer token in constant time, so the mock is not a timing oracle for
    /// anyone who reuses a real key with it.
    pub(crate) fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return false;
        };
        let value = value.as_bytes();
        let Some(token) = value
            .get(..7)
            .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
            .map(|_| &value[7..])
        else {
            return false;
        };
        let expected = self.api_key.as_bytes();
        token.len() == expected.len()
            && token
                .iter()
                .zip(expected)
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0
    }

    /// Counts and logs an arriving `/v1` request; returns its sequence number.
    pub(crate) fn begin(
        &self,
        method: &str,
        uri: &Uri,
        idempotency_key: Option<String>,
        body: serde_json::Value,
    ) -> u64 {
        self.counters.received();
        let path = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
        self.log
            .begin(method, path, idempotency_key, body, self.clock.wall_now())
    }

    /// A stored outcome answered again: `200` for a success; a decline keeps its `402`
    /// unless `replay_declined_with_200` is set.
    pub(crate) fn replay_status(&self, charge: &Charge) -> StatusCode {
        match charge.status {
            ChargeStatus::Declined if !self.replay_declined_with_200 => {
                StatusCode::PAYMENT_REQUIRED
            }
            _ => StatusCode::OK,
        }
    }

    /// The latency one charge or lookup waits: the fault latency (fixed plus jitter) plus
    /// a draw from the log-normal distribution, if one is configured.
    pub(crate) fn request_latency(&self) -> Duration {
        let fault = self.faults.latency();
        match &self.latency {
            Some(sampler) => fault.saturating_add(sampler.draw()),
            None => fault,
        }
    }

    /// A `slow_charge` (or `slow_refund`) still processing: waits `slow_charge_for`, or until
    /// `MockGateway::finish_slow_charges` or shutdown.
    pub(crate) async fn hold_slow_charge(&self) {
        tokio::select! {
            () = tokio::time::sleep(self.slow_charge_for) => {}
            () = self.finish_slow.notified() => {}
            () = self.shutdown.cancelled() => {}
        }
    }

    pub(crate) fn advance_clock(&self, by: Duration) {
        self.clock.advance(by);
        self.keys.purge_expired(self.clock.now());
        self.refund_keys.purge_expired(self.clock.now());
        self.stripe.purge_expired(self.clock.now());
    }

    pub(crate) fn stats(&self) -> Stats {
        self.counters.snapshot(
            self.ledger.len(),
            self.refunds.len(),
            self.keys.in_progress() + self.refund_keys.in_progress() + self.stripe.in_progress(),
        )
    }
}

/// Lets a handler close its own connection without answering (`drop_after`).
#[derive(Clone, Default)]
pub(crate) struct ConnectionControl {
    /// Cancelled to close the connection; the connection task waits on it.
    pub(crate) dropped: CancellationToken,
}

impl ConnectionControl {
    /// Tells the connection task to close the socket, then waits forever: the task drops
    /// this handler together with the connection, so no response is ever written.
    pub(crate) async fn drop_now(&self) -> Response {
        self.dropped.cancel();
        std::future::pending().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FaultConfig, Latency};
    use crate::latency::LatencyDistribution;

    #[test]
    fn the_log_normal_latency_adds_to_the_fault_latency() {
        let shared = Shared::new(&MockConfig {
            faults: FaultConfig {
                latency: Latency::fixed(100),
                ..FaultConfig::default()
            },
            // A p99 equal to the median draws the median every time.
            latency_distribution: Some(
                LatencyDistribution::log_normal(
                    Duration::from_millis(200),
                    Duration::from_millis(200),
                    7,
                )
                .unwrap(),
            ),
            ..MockConfig::default()
        });

        let latency = shared.request_latency();
        let millis = latency.as_secs_f64() * 1000.0;
        assert!((millis - 300.0).abs() < 1e-6, "waited {millis} ms");
        let drawn = shared.latency.as_ref().map(LatencySampler::drawn).unwrap();
        assert_eq!(drawn.draws, 1);
    }
}
