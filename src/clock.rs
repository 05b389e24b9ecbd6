//! The host's clock, the one clock module of the crate, for in-memory timing only: the
//! gateway health's credentials pause and circuit breaker read it (through the executor and
//! the reconciler, which share one health), so tests move it instead of sleeping. Nothing stored is timed
//! by it: claims, leases, due times, dispatch stamps and transitions use the database's
//! `now()`, and the executor's and reconciler's retry-window decisions are measured from
//! the time of their claim as the database gave it (see docs/decisions/024-time-comes-from-the-databases-clock-not-each.md).

use std::sync::Mutex;
use std::time::Duration;

use time::OffsetDateTime;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> OffsetDateTime;
}

/// The system's wall clock (production).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that stands still until told to move: for tests that need a lease to expire or
/// a retry to become due without waiting.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<OffsetDateTime>,
}

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: OffsetDateTime) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// A clock showing the current wall time, truncated to microseconds (PostgreSQL's
    /// precision), so values read back compare equal.
    pub fn starting_now() -> Self {
        let now = OffsetDateTime::now_utc();
        let micros = now.microsecond();
        Self::new(
            now.replace_microsecond(micros)
                .expect("a valid microsecond"),
        )
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}
