//! The fleet-wide gateway rate limit (`gateway_max_rate`): permits to call the gateway,
//! taken from one token bucket per gateway that every instance shares through PostgreSQL
//! (`store::rate_limit`). It lives outside `src/gateway/` because the gateway client never
//! touches the database.
//!
//! Callers take permits BEFORE they claim: the executor claims only as many attempts as it
//! holds permits for, the reconciler looks up only as many. A caller that gets none is told
//! how long to wait and waits in its own loop, where shutdown can end the wait; nothing is
//! claimed meanwhile, so no lease burns while an attempt waits for its turn (decision 62).
//!
//! To keep round trips few, a take may hand out a small lease of tokens — sized from this
//! instance's own recent rate, at most 1/40 s worth — kept in memory and spent by the next
//! takes; tokens unspent [`LEASE_HORIZON`] after their take are dropped. Over any window of
//! `T` seconds the fleet therefore sends at most `burst + rate × (T + LEASE_HORIZON)` plus
//! what the time between take and send varies by (decision 63).
//!
//! Invariants:
//! - One token is one request to the gateway: a charge costs [`requests_per_charge`]
//!   (`stripe`: create + confirm), a lookup one. Charges and lookups share the bucket.
//! - A token is never spent twice: the database grants it once, and a lease lives in one
//!   process. A token not spent within the horizon is dropped, never carried forward.
//! - Unlimited (`gateway_max_rate = 0`) costs nothing: no table is touched.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::gateway::GatewayKind;
use crate::store::rate_limit::{take_tokens, Taken, MAX_CLOCK_STEP_BACK};
use crate::store::Store;

/// How long tokens taken from the database may wait in an instance's lease before they are
/// dropped unspent.
pub const LEASE_HORIZON: Duration = Duration::from_millis(25);

/// The largest lease one take asks for, as seconds of the fleet's rate.
pub const MAX_LEASE_SECONDS: f64 = 1.0 / 40.0;

/// Longest a caller is told to wait: past it, it asks again (a bucket refilled by another
/// instance's configuration, a clock step).
const MAX_WAIT: Duration = Duration::from_secs(1);

/// Requests one charge makes to a gateway of `kind`: `stripe` creates the PaymentIntent and
/// then confirms it. Counted before the claim, when it is not yet known whether an object
/// is already stored, so a re-sent stripe charge may pay for a create it skips.
pub fn requests_per_charge(kind: GatewayKind) -> u32 {
    match kind {
        GatewayKind::Onecharge => 1,
        GatewayKind::Stripe => 2,
    }
}

/// The bucket's size for `rate` when `gateway_rate_burst` is 0: 1/30 s worth, at least 1 —
/// small enough that the busiest second stays under 1.05 × the rate with room for the
/// jitter of take → send (docs/performance.md), large enough that no token overflows.
pub fn default_burst(rate: f64) -> u32 {
    (rate / 30.0).ceil().max(1.0) as u32
}

/// How many tokens one take asks the database for: what the caller needs, or, if more,
/// what this instance spends in [`LEASE_HORIZON`] at its recent rate (at most
/// [`MAX_LEASE_SECONDS`] of the fleet's rate); never more than the bucket's size, never less
/// than one request of `cost`.
pub fn lease_size(need: u32, recent_rate: f64, rate: f64, burst: u32, cost: u32) -> u32 {
    let spare = ((recent_rate * LEASE_HORIZON.as_secs_f64()).ceil() as u32)
        .min((rate * MAX_LEASE_SECONDS).floor() as u32);
    need.max(spare).min(burst).max(cost)
}

/// How many tokens a caller that got none waits for: what it asked, but at most half the
/// bucket, so that a late wake-up loses nothing to a full bucket.
pub fn wait_target(ask: u32, burst: u32, cost: u32) -> u32 {
    ask.min(burst / 2).max(cost)
}

/// How long until a bucket holding `tokens` at `rate` holds `wanted`, at least 1 ms and at
/// most [`MAX_WAIT`].
pub fn time_until(tokens: f64, wanted: u32, rate: f64) -> Duration {
    let missing = (f64::from(wanted) - tokens).max(0.0);
    Duration::from_secs_f64(missing / rate).clamp(Duration::from_millis(1), MAX_WAIT)
}

/// The arithmetic of the shared bucket, as `store::rate_limit` computes it in SQL: refilled
/// at `rate` per second up to `burst`, whole tokens handed out. Pure, so that its bounds can
/// be tested without a database; the store's tests check the SQL against it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub tokens: f64,
    /// Seconds on some clock when `tokens` was true.
    pub at: f64,
}

impl Bucket {
    /// A full bucket at `at`.
    pub fn full(burst: u32, at: f64) -> Self {
        Self {
            tokens: f64::from(burst),
            at,
        }
    }

    /// Refills to `now` and takes up to `want` whole tokens; returns how many. A `now`
    /// before the last take refills nothing; it keeps the time when it is at most
    /// [`MAX_CLOCK_STEP_BACK`] behind (a take that waited for the row lock), and moves the
    /// time back to itself when it is further behind (the clock stepped back), so that the
    /// refill stops for at most that long, not for the size of the step.
    pub fn take(&mut self, now: f64, want: u32, rate: f64, burst: u32) -> u32 {
        let avail = (self.tokens + rate * (now - self.at).max(0.0)).min(f64::from(burst));
        let granted = f64::from(want).min(avail.floor());
        self.tokens = avail - granted;
        self.at = if now < self.at - MAX_CLOCK_STEP_BACK.as_secs_f64() {
            now
        } else {
            self.at.max(now)
        };
        granted as u32
    }
}

/// Tokens held by one instance between their take and their spending.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    pub tokens: u32,
    /// When the tokens are dropped if unspent.
    pub expires: Instant,
}

impl Lease {
    /// An empty lease.
    pub fn empty(now: Instant) -> Self {
        Self {
            tokens: 0,
            expires: now,
        }
    }

    /// Takes up to `n` tokens; an expired lease holds none.
    pub fn spend(&mut self, n: u32, now: Instant) -> u32 {
        if now >= self.expires {
            self.tokens = 0;
        }
        let spent = n.min(self.tokens);
        self.tokens -= spent;
        spent
    }

    /// Keeps `n` tokens that expire at `expires` (the earliest expiry wins: no token lives
    /// past its horizon by joining younger ones).
    pub fn keep(&mut self, n: u32, expires: Instant, now: Instant) {
        if n == 0 {
            return;
        }
        if self.tokens == 0 || now >= self.expires {
            *self = Self { tokens: n, expires };
        } else {
            self.tokens += n;
            self.expires = self.expires.min(expires);
        }
    }
}

/// Which kind of call permits are for (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Charge,
    /// A refund request: one request, whatever the connector.
    Refund,
    Lookup,
    /// Stripe's cancel of a PaymentIntent a confirm left `requires_action`: a third
    /// request after the charge's two, one permit of its own.
    Cancel,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Self::Charge => "charge",
            Self::Refund => "refund",
            Self::Lookup => "lookup",
            Self::Cancel => "cancel",
        }
    }
}

/// What a caller gets when it asks for permits.
#[derive(Debug)]
pub enum Take {
    /// Permits for at least one call.
    Granted(Permits),
    /// None now: ask again after this long (the caller waits where shutdown can end it).
    Wait(Duration),
}

/// Permits for `count` calls. Calls the holder does not make ([`Permits::spend`] fewer, or
/// drops them) go back to the lease, to be spent within the horizon or dropped.
#[derive(Debug)]
pub struct Permits {
    limiter: Option<Arc<Limiter>>,
    count: usize,
    cost: u32,
    expires: Instant,
}

impl Permits {
    /// Calls these permits allow.
    pub fn count(&self) -> usize {
        self.count
    }

    /// `used` calls were (or are about to be) made; the rest go back to the lease.
    pub fn spend(mut self, used: usize) {
        self.count -= used.min(self.count);
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        if let Some(limiter) = &self.limiter {
            let unused = self.count as u32 * self.cost;
            let now = Instant::now();
            let mut local = limiter
                .local
                .lock()
                .expect("the lease lock is never poisoned");
            local.lease.keep(unused, self.expires, now);
        }
    }
}

/// The fleet-wide rate limit as one role of one instance sees it. Cheap to clone; clones
/// share the lease. Each role holds its own (its own lease), all on the same bucket.
#[derive(Clone, Debug, Default)]
pub struct GatewayRateLimit {
    limiter: Option<Arc<Limiter>>,
}

#[derive(Debug)]
struct Limiter {
    store: Store,
    /// The bucket's key: `<gateway_kind> <gateway_url without credentials>`.
    gateway: String,
    rate: f64,
    burst: u32,
    /// Tokens one charge costs.
    charge_cost: u32,
    local: Mutex<Local>,
}

#[derive(Debug)]
struct Local {
    lease: Lease,
    /// Tokens this instance took in the current second, and the last whole second's count:
    /// its recent rate, which sizes its leases.
    window_start: Instant,
    taken_in_window: u32,
    recent_rate: f64,
    /// Why the last take from the database failed, until one succeeds: what a caller that
    /// gives up waiting tells its person.
    last_error: Option<String>,
}

impl GatewayRateLimit {
    /// No limit: every ask is granted in full, without a round trip.
    pub fn unlimited() -> Self {
        Self::default()
    }

    /// The limit `settings` ask for (`gateway_max_rate`, `gateway_rate_burst`) on the bucket
    /// of the configured gateway, for a client of `kind`.
    pub fn from_settings(store: Store, settings: &Settings, kind: GatewayKind) -> Self {
        if settings.gateway_max_rate <= 0.0 {
            return Self::unlimited();
        }
        let charge_cost = requests_per_charge(kind);
        let burst = match settings.gateway_rate_burst {
            0 => default_burst(settings.gateway_max_rate),
            burst => burst,
        }
        .max(charge_cost);
        let now = Instant::now();
        Self {
            limiter: Some(Arc::new(Limiter {
                store,
                gateway: bucket_name(kind, &settings.gateway_url),
                rate: settings.gateway_max_rate,
                burst,
                charge_cost,
                local: Mutex::new(Local {
                    lease: Lease::empty(now),
                    window_start: now,
                    taken_in_window: 0,
                    recent_rate: 0.0,
                    last_error: None,
                }),
            })),
        }
    }

    /// Whether a limit is set.
    pub fn is_limited(&self) -> bool {
        self.limiter.is_some()
    }

    /// Why a caller that asked for permits for `waited` got none, in one sentence for a
    /// person: the database not answering (its last error), or the fleet's bucket empty.
    pub fn why_refused(&self, waited: Duration) -> String {
        let waited = format!("{} s", waited.as_secs_f64());
        let Some(limiter) = &self.limiter else {
            return format!("no gateway rate permit in {waited}, though no limit is set");
        };
        let last_error = limiter
            .local
            .lock()
            .expect("the lease lock is never poisoned")
            .last_error
            .clone();
        match last_error {
            Some(err) => format!(
                "gave up after {waited} waiting for a gateway rate permit: the database did not answer the take from the fleet's token bucket ({err}); nothing was asked of the gateway"
            ),
            None => format!(
                "gave up after {waited} waiting for a gateway rate permit: the fleet's token bucket (gateway_max_rate {} a second, burst {}) had none to spare; nothing was asked of the gateway; try again later",
                limiter.rate, limiter.burst
            ),
        }
    }

    /// Permits for up to `charges` charges (at least one, or a wait).
    pub async fn for_charges(&self, charges: usize) -> Take {
        self.take(charges, Operation::Charge).await
    }

    /// Permits for up to `refunds` refund requests (at least one, or a wait).
    pub async fn for_refunds(&self, refunds: usize) -> Take {
        self.take(refunds, Operation::Refund).await
    }

    /// Permits for up to `lookups` lookups (at least one, or a wait).
    pub async fn for_lookups(&self, lookups: usize) -> Take {
        self.take(lookups, Operation::Lookup).await
    }

    /// Permits for up to `cancels` cancels of a PaymentIntent (at least one, or a wait).
    pub async fn for_cancels(&self, cancels: usize) -> Take {
        self.take(cancels, Operation::Cancel).await
    }

    async fn take(&self, calls: usize, operation: Operation) -> Take {
        let Some(limiter) = self.limiter.as_ref().filter(|_| calls > 0) else {
            return Take::Granted(Permits {
                limiter: None,
                count: calls,
                cost: 1,
                expires: Instant::now(),
            });
        };
        let cost = match operation {
            Operation::Charge => limiter.charge_cost,
            Operation::Refund | Operation::Lookup | Operation::Cancel => 1,
        };
        let need = u32::try_from(calls)
            .unwrap_or(u32::MAX)
            .saturating_mul(cost);
        let (from_lease, expires, ask) = limiter.spend_lease(need, cost);
        // The lease alone pays for at least one call: no round trip.
        if from_lease >= cost {
            return Take::Granted(limiter.permits(from_lease, cost, expires));
        }
        let (granted, wait) = limiter.take_from_bucket(ask, cost).await;
        let now = Instant::now();
        limiter.count_taken(granted, now);
        let tokens = from_lease + granted;
        if tokens >= cost {
            return Take::Granted(limiter.permits(tokens, cost, now + LEASE_HORIZON));
        }
        limiter.wait(tokens, operation, wait, now)
    }
}

impl Limiter {
    /// Spends what the lease holds toward `need` tokens: how many it paid, when they
    /// expire, and how many to ask the database for (at least one call of `cost`).
    fn spend_lease(&self, need: u32, cost: u32) -> (u32, Instant, u32) {
        let now = Instant::now();
        let mut local = self.local.lock().expect("the lease lock is never poisoned");
        let expires = local.lease.expires;
        let spent = local.lease.spend(need, now);
        let ask = lease_size(need - spent, local.recent_rate, self.rate, self.burst, cost);
        (spent, expires, ask)
    }

    /// One take of `ask` tokens from the fleet's bucket: how many it granted, and how long
    /// a caller it could not serve waits. A database that does not answer grants none, and
    /// its error is kept for [`GatewayRateLimit::why_refused`].
    async fn take_from_bucket(&self, ask: u32, cost: u32) -> (u32, Duration) {
        let taken = take_tokens(
            &self.store,
            &self.gateway,
            self.rate,
            f64::from(self.burst),
            ask,
            None,
        )
        .await;
        metrics::counter!("onecharge_gateway_rate_limit_takes_total").increment(1);
        match taken {
            Ok(Taken {
                granted, tokens, ..
            }) => {
                self.note_error(None);
                (
                    granted,
                    time_until(tokens, wait_target(ask, self.burst, cost), self.rate),
                )
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot take gateway rate tokens from the database; no call is made until it answers");
                self.note_error(Some(err.to_string()));
                (0, MAX_WAIT)
            }
        }
    }

    /// Not enough for one call: the `tokens` in hand go back to the lease and the caller
    /// waits `wait`.
    fn wait(&self, tokens: u32, operation: Operation, wait: Duration, now: Instant) -> Take {
        self.local
            .lock()
            .expect("the lease lock is never poisoned")
            .lease
            .keep(tokens, now + LEASE_HORIZON, now);
        metrics::counter!("onecharge_gateway_rate_limited_waits_total", "operation" => operation.as_str())
            .increment(1);
        metrics::histogram!("onecharge_gateway_rate_limited_wait_seconds", "operation" => operation.as_str())
            .record(wait.as_secs_f64());
        Take::Wait(wait)
    }

    fn note_error(&self, error: Option<String>) {
        self.local
            .lock()
            .expect("the lease lock is never poisoned")
            .last_error = error;
    }

    /// Permits for as many whole calls as `tokens` pay for; the change stays in the lease.
    fn permits(self: &Arc<Self>, tokens: u32, cost: u32, expires: Instant) -> Permits {
        let calls = tokens / cost;
        let now = Instant::now();
        self.local
            .lock()
            .expect("the lease lock is never poisoned")
            .lease
            .keep(tokens % cost, expires, now);
        Permits {
            limiter: Some(self.clone()),
            count: calls as usize,
            cost,
            expires,
        }
    }

    fn count_taken(&self, granted: u32, now: Instant) {
        let mut local = self.local.lock().expect("the lease lock is never poisoned");
        let elapsed = now.duration_since(local.window_start);
        if elapsed >= Duration::from_secs(1) {
            local.recent_rate = f64::from(local.taken_in_window) / elapsed.as_secs_f64();
            local.window_start = now;
            local.taken_in_window = 0;
        }
        local.taken_in_window += granted;
    }
}

/// The bucket's key: the kind and URL of the gateway, without any credentials in the URL
/// (they must not reach the database).
pub fn bucket_name(kind: GatewayKind, url: &str) -> String {
    let url = match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        Err(_) => url.to_owned(),
    };
    format!("{} {}", kind.as_str(), url)
}
