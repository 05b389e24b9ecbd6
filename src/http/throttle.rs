//! The console's sign-in throttle: how many failed sign-ins one client address, and all of
//! them together, may make before `POST /console/login` stops checking tokens for a while
//! (`429 Too Many Requests` with `Retry-After`).
//!
//! Two token buckets of failures, in memory: one per client address ([`ClientKey`]: an IPv4
//! address, or an IPv6 /64, which one host may hold whole) and one for everybody. A failed
//! sign-in takes a token from both; a sign-in is refused, before its token is looked at,
//! while either is empty — so the answer is the same for a right and a wrong token, and a
//! throttled guesser learns nothing. Success takes nothing. Each admin instance keeps its own
//! buckets (decision 142).
//!
//! Memory stays bounded: an address's bucket exists only after a failure the global bucket
//! allowed, and once refilled it says nothing an absent one would not, so it may be dropped
//! (swept out once the map reaches a thousand or so). A bucket refills within 10 × 30 s of
//! its last failure, so at most the failures [`GLOBAL`] allows over that time (100 + 300)
//! keep one from refilling; [`MAX_ADDRESSES`] caps the map even so.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A bucket's size and how fast it refills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Failures allowed at once, from full.
    pub burst: u32,
    /// One more failure is allowed after each such period.
    pub refill_every: Duration,
}

/// One client address: 10 failures at once, then one every 30 s (a person who mistypes a
/// pasted token a few times never meets it; a guesser gets 120 an hour).
pub const PER_ADDRESS: Rule = Rule {
    burst: 10,
    refill_every: Duration::from_secs(30),
};

/// Every address together: 100 failures at once, then one a second — what many addresses
/// (a botnet, or rotating IPv6 prefixes) may try between them.
pub const GLOBAL: Rule = Rule {
    burst: 100,
    refill_every: Duration::from_secs(1),
};

/// Most addresses tracked; past it, a new address is limited by the global bucket alone.
pub const MAX_ADDRESSES: usize = 10_000;

/// From this many tracked addresses, a failure from a new one first drops the refilled
/// ones; the next such sweep waits until the map has doubled (a sweep is paid for by as
/// many inserts as it looked at).
const PRUNE_FROM: usize = 1_024;

/// Whose failures a bucket counts: an IPv4 address, or the /64 of an IPv6 one (an
/// IPv4-mapped IPv6 address is its IPv4 address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientKey(IpAddr);

impl ClientKey {
    pub fn of(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    Self(IpAddr::V6(prefix.into()))
                }
            },
            v4 => Self(v4),
        }
    }
}

/// Which bucket refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The client's address made too many failed sign-ins.
    Address,
    /// All addresses together did.
    Global,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Address => "address",
            Self::Global => "global",
        }
    }
}

/// A sign-in refused unchecked: by which bucket, and how long until it allows one more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    pub scope: Scope,
    pub retry_after: Duration,
}

impl Throttled {
    /// `Retry-After` in whole seconds, rounded up (at least 1).
    pub fn retry_after_secs(&self) -> u64 {
        let secs = self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0);
        secs.max(1)
    }
}

/// A bucket of failures: how many were left at `at`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    left: f64,
    at: Instant,
}

impl Bucket {
    fn full(rule: Rule, now: Instant) -> Self {
        Self {
            left: f64::from(rule.burst),
            at: now,
        }
    }

    /// What is left at `now`, refilled since `at`, at most the burst.
    fn level(&self, rule: Rule, now: Instant) -> f64 {
        let refilled =
            now.saturating_duration_since(self.at).as_secs_f64() / rule.refill_every.as_secs_f64();
        (self.left + refilled).min(f64::from(rule.burst))
    }

    /// How long from `now` until one failure is allowed; `None`: allowed now.
    fn wait(&self, rule: Rule, now: Instant) -> Option<Duration> {
        let level = self.level(rule, now);
        (level < 1.0).then(|| rule.refill_every.mul_f64(1.0 - level))
    }

    fn take(&mut self, rule: Rule, now: Instant) {
        self.left = (self.level(rule, now) - 1.0).max(0.0);
        self.at = now;
    }

    fn is_full(&self, rule: Rule, now: Instant) -> bool {
        self.level(rule, now) >= f64::from(rule.burst)
    }
}

/// The buckets, and the decisions on them, at a given instant (no clock of their own).
#[derive(Debug)]
pub struct Buckets {
    per_address: Rule,
    global_rule: Rule,
    global: Bucket,
    addresses: HashMap<ClientKey, Bucket>,
    /// The size at which the next failure from a new address sweeps the refilled ones out.
    prune_at: usize,
}

impl Buckets {
    pub fn new(per_address: Rule, global: Rule, now: Instant) -> Self {
        Self {
            per_address,
            global_rule: global,
            global: Bucket::full(global, now),
            addresses: HashMap::new(),
            prune_at: PRUNE_FROM,
        }
    }

    /// Whether a sign-in from `client` (unknown: `None`) may be checked at `now`; refused
    /// while its address's bucket or the global one is empty, saying which and for how long
    /// (the longer wait when both are).
    pub fn check(&self, client: Option<ClientKey>, now: Instant) -> Result<(), Throttled> {
        let address = client
            .and_then(|key| self.addresses.get(&key))
            .and_then(|bucket| bucket.wait(self.per_address, now))
            .map(|wait| Throttled {
                scope: Scope::Address,
                retry_after: wait,
            });
        let global = self
            .global
            .wait(self.global_rule, now)
            .map(|wait| Throttled {
                scope: Scope::Global,
                retry_after: wait,
            });
        match (address, global) {
            (None, None) => Ok(()),
            (Some(one), None) | (None, Some(one)) => Err(one),
            (Some(a), Some(g)) => Err(if a.retry_after >= g.retry_after { a } else { g }),
        }
    }

    /// Counts a failed sign-in from `client` at `now`.
    pub fn record_failure(&mut self, client: Option<ClientKey>, now: Instant) {
        self.global.take(self.global_rule, now);
        let Some(key) = client else { return };
        if !self.addresses.contains_key(&key) {
            if self.addresses.len() >= self.prune_at {
                let rule = self.per_address;
                self.addresses
                    .retain(|_, bucket| !bucket.is_full(rule, now));
                self.prune_at = (2 * self.addresses.len()).clamp(PRUNE_FROM, MAX_ADDRESSES);
            }
            if self.addresses.len() >= MAX_ADDRESSES {
                return;
            }
        }
        let rule = self.per_address;
        self.addresses
            .entry(key)
            .or_insert_with(|| Bucket::full(rule, now))
            .take(rule, now);
    }

    /// How many addresses are tracked.
    pub fn addresses(&self) -> usize {
        self.addresses.len()
    }
}

/// The throttle an admin instance's console shares across its requests: [`Buckets`] with
/// the [`PER_ADDRESS`] and [`GLOBAL`] rules, timed by the monotonic clock.
#[derive(Debug, Clone)]
pub struct SignInThrottle {
    buckets: Arc<Mutex<Buckets>>,
}

impl Default for SignInThrottle {
    fn default() -> Self {
        Self {
            buckets: Arc::new(Mutex::new(Buckets::new(
                PER_ADDRESS,
                GLOBAL,
                Instant::now(),
            ))),
        }
    }
}

impl SignInThrottle {
    /// See [`Buckets::check`], now.
    pub fn check(&self, client: Option<IpAddr>) -> Result<(), Throttled> {
        self.lock().check(client.map(ClientKey::of), Instant::now())
    }

    /// See [`Buckets::record_failure`], now.
    pub fn record_failure(&self, client: Option<IpAddr>) {
        self.lock()
            .record_failure(client.map(ClientKey::of), Instant::now());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buckets> {
        // Nothing panics while holding it; a poisoned map is still a valid count.
        self.buckets.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    const ADDRESS: Rule = Rule {
        burst: 3,
        refill_every: Duration::from_secs(10),
    };
    const ALL: Rule = Rule {
        burst: 5,
        refill_every: Duration::from_secs(2),
    };

    fn key(text: &str) -> Option<ClientKey> {
        Some(ClientKey::of(text.parse().unwrap()))
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// `wait` is `seconds`, give or take what floating point loses.
    fn about(wait: Duration, seconds: f64) {
        assert!(
            (wait.as_secs_f64() - seconds).abs() < 1e-6,
            "{wait:?} is not {seconds} s"
        );
    }

    #[test]
    fn an_address_is_refused_after_its_burst_and_allowed_again_one_refill_later() {
        let t0 = Instant::now();
        let mut buckets = Buckets::new(ADDRESS, ALL, t0);
        let ada = key("192.0.2.1");
        for _ in 0..3 {
            assert_eq!(buckets.check(ada, t0), Ok(()));
            buckets.record_failure(ada, t0);
        }
        assert_eq!(
            buckets.check(ada, t0),
            Err(Throttled {
                scope: Scope::Address,
                retry_after: secs(10)
            })
        );
        assert_eq!(
            buckets.check(key("192.0.2.2"), t0),
            Ok(()),
            "another address is not this one"
        );
        about(
            buckets.check(ada, t0 + secs(4)).unwrap_err().retry_after,
            6.0,
        );
        assert_eq!(buckets.check(ada, t0 + secs(10)), Ok(()));
        buckets.record_failure(ada, t0 + secs(10));
        assert!(
            buckets.check(ada, t0 + secs(10)).is_err(),
            "one refill is one more try"
        );
    }

    #[test]
    fn all_addresses_together_are_refused_after_the_global_burst_known_or_not() {
        let t0 = Instant::now();
        let mut buckets = Buckets::new(ADDRESS, ALL, t0);
        for i in 0..5 {
            buckets.record_failure(key(&format!("198.51.100.{i}")), t0);
        }
        for client in [key("203.0.113.9"), None] {
            assert_eq!(
                buckets.check(client, t0),
                Err(Throttled {
                    scope: Scope::Global,
                    retry_after: secs(2)
                })
            );
        }
        assert_eq!(buckets.check(None, t0 + secs(2)), Ok(()));
    }

    #[test]
    fn when_both_are_empty_the_longer_wait_is_given() {
        let t0 = Instant::now();
        let mut buckets = Buckets::new(ADDRESS, ADDRESS, t0);
        let ada = key("192.0.2.1");
        for _ in 0..3 {
            buckets.record_failure(ada, t0);
        }
        let refused = buckets.check(ada, t0 + secs(1)).unwrap_err();
        about(refused.retry_after, 9.0);
    }

    #[test]
    fn an_ipv6_host_is_its_64_and_a_mapped_ipv4_address_is_the_ipv4_address() {
        assert_eq!(key("2001:db8:1:2:aaaa::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(
            key("::ffff:192.0.2.1"),
            Some(ClientKey(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))))
        );
        assert_eq!(
            ClientKey::of(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            ClientKey(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
            "::1 is in ::/64"
        );
    }

    #[test]
    fn refilled_addresses_are_dropped_and_the_map_never_passes_its_cap() {
        let t0 = Instant::now();
        let lenient = Rule {
            burst: u32::MAX,
            refill_every: secs(1),
        };
        let mut buckets = Buckets::new(ADDRESS, lenient, t0);
        for i in 0..(MAX_ADDRESSES as u32 + 50) {
            buckets.record_failure(Some(ClientKey(IpAddr::V4(Ipv4Addr::from(i)))), t0);
        }
        assert_eq!(buckets.addresses(), MAX_ADDRESSES);
        // 30 s later every one of them has refilled: the next failure drops them all
        buckets.record_failure(key("192.0.2.1"), t0 + secs(30));
        assert_eq!(buckets.addresses(), 1);
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up() {
        let throttled = |ms| Throttled {
            scope: Scope::Address,
            retry_after: Duration::from_millis(ms),
        };
        assert_eq!(throttled(0).retry_after_secs(), 1);
        assert_eq!(throttled(1).retry_after_secs(), 1);
        assert_eq!(throttled(1000).retry_after_secs(), 1);
        assert_eq!(throttled(1001).retry_after_secs(), 2);
    }
}
