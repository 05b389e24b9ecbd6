//! How a mock gateway is set up: credentials, key retention, faults.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::latency::LatencyDistribution;

/// Everything [`MockGateway::start`](crate::MockGateway::start) needs.
///
/// The defaults are what tests want: a free loopback port, no faults, a fixed seed (so a
/// sequential run is reproducible), and the 24 h key retention of real gateways.
#[derive(Clone)]
pub struct MockConfig {
    /// The only bearer token `/v1/*` accepts; anything else is a `401`.
    pub api_key: String,
    /// How long an idempotency key is remembered after its first request, on the mock's
    /// clock. After that the key is forgotten and the same key charges again, as real
    /// gateways do; this is the window onecharge's reconciler must respect.
    pub key_retention: Duration,
    /// Random (and counted) fault injection; changeable later with
    /// [`MockGateway::set_faults`](crate::MockGateway::set_faults) or `PUT /__faults`.
    pub faults: FaultConfig,
    /// Seeds both the fault dice and the charge ids, so a run with the same sequence of
    /// requests produces the same faults and the same ids.
    pub seed: u64,
    /// How long a `hang_after` fault holds the response (real time), to outlast the
    /// client's timeout.
    pub hang_for: Duration,
    /// How long a `slow_charge` fault keeps its key in progress before it charges (real
    /// time), unless [`MockGateway::finish_slow_charges`](crate::MockGateway::finish_slow_charges)
    /// ends it sooner: a gateway (or a bank behind it) still processing after the client gave
    /// up.
    pub slow_charge_for: Duration,
    /// Where to listen; port 0 picks a free port (see
    /// [`MockGateway::base_url`](crate::MockGateway::base_url)).
    pub bind: SocketAddr,
    /// Replay a stored decline as `200` instead of its stored `402`. The contract allows
    /// both ("`200` or the stored status"); the default keeps `402` like the gateways
    /// onecharge talks to, and this switch lets the executor's tests cover the other reading.
    pub replay_declined_with_200: bool,
    /// How many of the most recent `/v1` requests [`MockGateway::requests`](crate::MockGateway::requests)
    /// keeps; older ones are forgotten so a long benchmark does not grow without bound.
    pub request_log_capacity: usize,
    /// Serve HTTPS with this certificate chain and key instead of plain HTTP, so a client's
    /// `https://` gateway URL and CA settings can be tried against the mock.
    pub tls: Option<TlsFiles>,
    /// A log-normal latency added to every charge and lookup, on top of the fault
    /// latencies (`faults.latency`, `hang_after`, `slow_charge`); `None` adds nothing.
    pub latency_distribution: Option<LatencyDistribution>,
    /// Which API the gateway speaks: onecharge's contract §3 (the default) or Stripe's
    /// PaymentIntents. The `/__*` test controls are the same in both.
    pub dialect: Dialect,
    /// How long (real time) a refund that settles later (`pending` by `faults.refunds.pending`
    /// or `pm_card_pendingRefund`; `succeeded` then `failed` by `pm_card_refundFail`) waits
    /// before it settles, unless [`MockGateway::settle_refunds`](crate::MockGateway::settle_refunds)
    /// or `POST /__refunds/{id}` settles it sooner.
    pub refund_settle_after: Duration,
}

/// The wire protocol a mock gateway speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// `POST`/`GET /v1/charges`, JSON, as contract §3 defines them.
    #[default]
    Onecharge,
    /// Stripe's PaymentIntents API (`/v1/payment_intents`, `/v1/customers`), form-encoded,
    /// with Stripe's idempotency semantics, errors and test payment methods.
    Stripe,
}

impl Dialect {
    /// The name used on the command line and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Onecharge => "onecharge",
            Dialect::Stripe => "stripe",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// PEM files for HTTPS: the server's certificate chain (leaf first) and its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            api_key: "sk_test_mock_gateway".to_owned(),
            key_retention: Duration::from_secs(24 * 60 * 60),
            faults: FaultConfig::default(),
            seed: 0,
            hang_for: Duration::from_secs(30),
            slow_charge_for: Duration::from_secs(60),
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            replay_declined_with_200: false,
            request_log_capacity: 100_000,
            tls: None,
            latency_distribution: None,
            dialect: Dialect::Onecharge,
            refund_settle_after: Duration::from_secs(60),
        }
    }
}

/// Hand-written so that the API key never reaches a log line.
impl fmt::Debug for MockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockConfig")
            .field("api_key", &"<redacted>")
            .field("key_retention", &self.key_retention)
            .field("faults", &self.faults)
            .field("seed", &self.seed)
            .field("hang_for", &self.hang_for)
            .field("slow_charge_for", &self.slow_charge_for)
            .field("bind", &self.bind)
            .field("replay_declined_with_200", &self.replay_declined_with_200)
            .field("tls", &self.tls)
            .field("request_log_capacity", &self.request_log_capacity)
            .field("latency_distribution", &self.latency_distribution)
            .field("dialect", &self.dialect)
            .field("refund_settle_after", &self.refund_settle_after)
            .finish()
    }
}

/// Which faults are injected into charge requests (and, in `refunds`, into refunds), and
/// how often.
///
/// This is also the JSON of `GET`/`PUT /__faults`; every field may be left out (it then
/// means "off"), and unknown fields are rejected so that a typo does not silently disable
/// a fault. Faults apply only to requests that would charge (a new key, or a key whose
/// earlier request failed before charging); replays, `409` and `422` answers are never
/// faulted, so a retry can always settle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultConfig {
    /// `500` before charging: nothing is committed, the key is free for a retry.
    pub error_before: FaultRule,
    /// The charge is committed, then the answer is a `500`: the ambiguous case.
    pub error_after: FaultRule,
    /// The charge is committed, then the response is held for `hang_for`: a client timeout.
    pub hang_after: FaultRule,
    /// The charge is committed, then the TCP connection is closed with no response at all.
    pub drop_after: FaultRule,
    /// `429` with `Retry-After: 1`, nothing charged.
    pub rate_limit: FaultRule,
    /// The key stays in progress for `slow_charge_for` (meanwhile a re-send gets `409` and a
    /// lookup finds nothing), then the charge is committed: "not found yet" is not "not
    /// charged".
    pub slow_charge: FaultRule,
    /// Delay added to every `/v1` request; for a new charge it is spent while the key is
    /// in progress, which is how tests make concurrent duplicates overlap.
    pub latency: Latency,
    /// The faults of refunds (`POST /v1/refunds` and its lookups), apart from the charges'
    /// so that a test can fail the next refund while charges go on, and how new refunds
    /// start (`pending`, `requires_action`, `failed`).
    pub refunds: RefundFaults,
}

/// Which faults are injected into refunds and their lookups, and how new refunds start.
///
/// The first six are the charges' faults on the call that refunds (a new key, or one whose
/// earlier request refunded nothing), drawn by the same dice and in the same order; the
/// `lookup_*` ones fault a refund lookup that would answer `200`; `pending`,
/// `requires_action` and `failed` choose how a new refund starts when its charge's card
/// does not (see `crate::refund::Start`). Every field may be left out (= off).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RefundFaults {
    /// `500` before refunding: nothing recorded, the key is free for a retry.
    pub error_before: FaultRule,
    /// The refund is recorded, then the answer is a `500`.
    pub error_after: FaultRule,
    /// The refund is recorded, then the response is held for `hang_for`.
    pub hang_after: FaultRule,
    /// The refund is recorded, then the connection is closed with no response.
    pub drop_after: FaultRule,
    /// `429` with `Retry-After: 1`, nothing recorded.
    pub rate_limit: FaultRule,
    /// The key stays in progress for `slow_charge_for` (or until `finish_slow_charges`),
    /// then the refund is recorded.
    pub slow_refund: FaultRule,
    /// The new refund starts `pending` and succeeds after `refund_settle_after`.
    pub pending: FaultRule,
    /// Stripe dialect: the new refund starts `requires_action` and stays so until a control
    /// moves it (the onecharge dialect, whose refunds have no such status, never draws it).
    pub requires_action: FaultRule,
    /// The new refund is recorded `failed` at once (`failure_reason: "declined"`): nothing
    /// refunded, and its amount stays refundable.
    pub failed: FaultRule,
    /// A refund lookup answers `500`.
    pub lookup_error: FaultRule,
    /// A refund lookup answers `429` with `Retry-After: 1`.
    pub lookup_rate_limit: FaultRule,
    /// A refund lookup's answer is held for `hang_for`.
    pub lookup_hang: FaultRule,
    /// A refund lookup's connection is closed with no response.
    pub lookup_drop: FaultRule,
}

impl RefundFaults {
    fn rules(&self) -> [(&'static str, &FaultRule); 13] {
        [
            ("refunds.error_before", &self.error_before),
            ("refunds.error_after", &self.error_after),
            ("refunds.hang_after", &self.hang_after),
            ("refunds.drop_after", &self.drop_after),
            ("refunds.rate_limit", &self.rate_limit),
            ("refunds.slow_refund", &self.slow_refund),
            ("refunds.pending", &self.pending),
            ("refunds.requires_action", &self.requires_action),
            ("refunds.failed", &self.failed),
            ("refunds.lookup_error", &self.lookup_error),
            ("refunds.lookup_rate_limit", &self.lookup_rate_limit),
            ("refunds.lookup_hang", &self.lookup_hang),
            ("refunds.lookup_drop", &self.lookup_drop),
        ]
    }
}

impl FaultConfig {
    /// Rejects probabilities outside `0..=1`, so that `PUT /__faults` and the command line
    /// say what is wrong instead of quietly treating `50` as "always".
    pub fn validate(&self) -> Result<(), String> {
        for (name, rule) in self.rules().into_iter().chain(self.refunds.rules()) {
            if !(0.0..=1.0).contains(&rule.probability) {
                return Err(format!(
                    "{name}.probability must be between 0 and 1, got {}",
                    rule.probability
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn rules(&self) -> [(&'static str, &FaultRule); 6] {
        [
            ("rate_limit", &self.rate_limit),
            ("error_before", &self.error_before),
            ("error_after", &self.error_after),
            ("hang_after", &self.hang_after),
            ("drop_after", &self.drop_after),
            ("slow_charge", &self.slow_charge),
        ]
    }
}

/// When one fault kind fires.
///
/// A request gets the fault if `count` is above zero (it is then decremented, so
/// `GET /__faults` shows what is left) or, failing that, with `probability`. `count` makes
/// a test exact ("the next request fails"); `probability` makes a soak test realistic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultRule {
    /// Chance per eligible request, `0..=1`.
    pub probability: f64,
    /// How many of the next eligible requests get this fault for certain.
    pub count: u64,
}

impl FaultRule {
    /// Fires on each of the next `count` eligible requests.
    pub fn times(count: u64) -> FaultRule {
        FaultRule {
            probability: 0.0,
            count,
        }
    }

    /// Fires on each eligible request with this chance.
    pub fn probability(probability: f64) -> FaultRule {
        FaultRule {
            probability,
            count: 0,
        }
    }
}

/// Added response time: `fixed_ms` plus a uniform draw from `0..=jitter_ms`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Latency {
    /// Milliseconds added to every `/v1` request.
    pub fixed_ms: u64,
    /// Upper bound of a uniform random extra, in milliseconds, from the seeded dice.
    pub jitter_ms: u64,
}

impl Latency {
    /// A constant `fixed_ms` milliseconds on every `/v1` request, without jitter.
    pub const fn fixed(fixed_ms: u64) -> Self {
        Self {
            fixed_ms,
            jitter_ms: 0,
        }
    }
}

/// The faults the mock can produce; recorded per request and in logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// `500`, nothing charged.
    ErrorBefore,
    /// Charged, then `500`.
    ErrorAfter,
    /// Charged, then the response is held for `hang_for`.
    HangAfter,
    /// Charged, then the connection is closed without a response.
    DropAfter,
    /// `429` with `Retry-After: 1`, nothing charged.
    RateLimit,
    /// Only from the `pm_fault_bad_request` trigger: a `400` for a valid request.
    BadRequest,
    /// The key stays in progress for `slow_charge_for`, then the charge is committed.
    SlowCharge,
    /// The key stays in progress for `slow_charge_for`, then the refund is recorded.
    SlowRefund,
}

impl FaultKind {
    /// The snake_case name used in JSON, flags and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::ErrorBefore => "error_before",
            FaultKind::ErrorAfter => "error_after",
            FaultKind::HangAfter => "hang_after",
            FaultKind::DropAfter => "drop_after",
            FaultKind::RateLimit => "rate_limit",
            FaultKind::BadRequest => "bad_request",
            FaultKind::SlowCharge => "slow_charge",
            FaultKind::SlowRefund => "slow_refund",
        }
    }

    /// Whether the charge (or refund) is committed before the fault shows.
    pub fn charges(self) -> bool {
        matches!(
            self,
            FaultKind::ErrorAfter
                | FaultKind::HangAfter
                | FaultKind::DropAfter
                | FaultKind::SlowCharge
                | FaultKind::SlowRefund
        )
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
