//! The mock's own clock.
//!
//! Key retention is measured on this clock rather than on the wall clock, so that tests can
//! expire a 24 h idempotency key in microseconds with [`MockGateway::advance_clock`]
//! instead of sleeping.
//!
//! [`MockGateway::advance_clock`]: crate::MockGateway::advance_clock

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use time::OffsetDateTime;

/// A point on the mock clock: real time since the gateway started plus every advance.
///
/// It is monotonic (real time only grows, advances only add), which is what lets the key
/// store expire keys in the order they were first seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct MockInstant(Duration);

impl MockInstant {
    /// The instant `by` later, saturating instead of overflowing on absurd retentions.
    pub(crate) fn after(self, by: Duration) -> MockInstant {
        MockInstant(self.0.saturating_add(by))
    }

    #[cfg(test)]
    pub(crate) fn from_start(since_start: Duration) -> MockInstant {
        MockInstant(since_start)
    }
}

/// Real elapsed time plus a forward skew that only [`MockClock::advance`] changes.
pub(crate) struct MockClock {
    started_wall: OffsetDateTime,
    started: Instant,
    skew: Mutex<Duration>,
}

impl MockClock {
    pub(crate) fn new() -> Self {
        MockClock {
            started_wall: OffsetDateTime::now_utc(),
            started: Instant::now(),
            skew: Mutex::new(Duration::ZERO),
        }
    }

    pub(crate) fn now(&self) -> MockInstant {
        let skew = *self.skew.lock();
        MockInstant(self.started.elapsed().saturating_add(skew))
    }

    /// Moves the clock forward; it never goes back, so expiry order stays first-seen order.
    pub(crate) fn advance(&self, by: Duration) {
        let mut skew = self.skew.lock();
        *skew = skew.saturating_add(by);
    }

    /// The calendar time of `at`, for `created_at` and request timestamps.
    pub(crate) fn wall(&self, at: MockInstant) -> OffsetDateTime {
        time::Duration::try_from(at.0)
            .ok()
            .and_then(|since_start| self.started_wall.checked_add(since_start))
            .unwrap_or(self.started_wall)
    }

    pub(crate) fn wall_now(&self) -> OffsetDateTime {
        self.wall(self.now())
    }
}
