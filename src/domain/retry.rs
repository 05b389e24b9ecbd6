//! How long onecharge may keep trying, and how long it waits between tries: the one retry
//! window (the gateway's key retention minus its safety margin, and the maximum age) that
//! the executor's claim and policy, the reconciler and an operator's retry all measure
//! against, and the one exponential backoff (on `backon`, with jitter) that every retry
//! delay — intake's Naks, the executor's re-sends, the relay's refused events and failed
//! steps, JetStream publish retries — is drawn from. Pure: times are passed in.

use std::time::Duration;

use backon::{BackoffBuilder as _, ExponentialBuilder};
use time::OffsetDateTime;

/// What the retry rules need to know of an attempt's sends so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendHistory {
    /// Tries made, including the one being decided.
    pub tries: i32,
    /// When the attempt was recorded: the maximum age counts from here.
    pub created_at: OffsetDateTime,
    /// When the gateway first saw the key: the key window counts from here.
    pub first_dispatched_at: OffsetDateTime,
}

/// How far a re-send may reach: past it, the gateway may have forgotten the attempt's key
/// (a re-send could charge twice) or the attempt is too old to charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryWindow {
    /// `gateway_key_retention - gateway_key_retention_margin`: past this since the first
    /// gateway call, the gateway may have forgotten the key and a re-send could charge twice.
    pub key_window: Duration,
    /// `executor.max_age`: an attempt already sent and older than this is not sent again.
    pub max_age: Duration,
    /// The configured key retention and margin, for messages.
    pub key_retention: Duration,
    pub key_retention_margin: Duration,
}

impl RetryWindow {
    /// The window of a gateway that keeps keys for `key_retention`, used up to
    /// `key_retention_margin` before it ends, for attempts up to `max_age` old. A margin
    /// above the retention leaves an empty window, never a panic. (From the configuration:
    /// `RetryWindow::from_settings`, in `crate::config`.)
    pub fn new(key_retention: Duration, key_retention_margin: Duration, max_age: Duration) -> Self {
        Self {
            key_window: key_retention.saturating_sub(key_retention_margin),
            max_age,
            key_retention,
            key_retention_margin,
        }
    }

    /// Attempts first sent at or before this may no longer be sent.
    pub fn key_window_cutoff(&self, now: OffsetDateTime) -> OffsetDateTime {
        now - self.key_window
    }

    /// Attempts (already sent once) recorded at or before this are not sent again.
    pub fn age_cutoff(&self, now: OffsetDateTime) -> OffsetDateTime {
        now - self.max_age
    }

    /// Whether the gateway may have forgotten a key first sent at `first_sent` by `at`.
    pub fn key_may_be_forgotten(&self, first_sent: OffsetDateTime, at: OffsetDateTime) -> bool {
        at >= later(first_sent, self.key_window)
    }

    /// Whether an attempt recorded at `created_at` is past the maximum age at `at`.
    pub fn too_old(&self, created_at: OffsetDateTime, at: OffsetDateTime) -> bool {
        at >= later(created_at, self.max_age)
    }

    /// Why an attempt recorded at `created_at` and first sent at `first_sent` may not be
    /// sent at `at`, if it may not.
    pub fn closed_at(
        &self,
        created_at: OffsetDateTime,
        first_sent: OffsetDateTime,
        at: OffsetDateTime,
    ) -> Option<String> {
        if self.too_old(created_at, at) {
            return Some(format!(
                "no retry past the maximum age of {} (recorded {created_at})",
                humantime::format_duration(self.max_age),
            ));
        }
        if self.key_may_be_forgotten(first_sent, at) {
            return Some(format!(
                "the gateway may forget the idempotency key (first sent {first_sent}, key window {}): not re-sent",
                humantime::format_duration(self.key_window)
            ));
        }
        None
    }
}

/// The one exponential backoff: from `min`, doubling, capped at `max`, with jitter so that
/// a burst of failures does not retry in step, and no limit on the number of tries (each
/// caller has its own). For a caller that drives `backon`'s retry loop itself.
pub fn exponential(min: Duration, max: Duration) -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(min.min(max))
        .with_max_delay(max)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
}

/// The wait before retry number `retry` (1 for the first retry) of [`exponential`]: `min`
/// to twice `min` first, then doubling, never more than twice `max`.
pub fn backoff(min: Duration, max: Duration, retry: u32) -> Duration {
    exponential(min, max)
        .build()
        .nth(retry.saturating_sub(1) as usize)
        .unwrap_or(max)
}

/// `at + delay`, or the end of the calendar when that overflows: a delay too long for any
/// clock is "never" for a window check, and is capped before it schedules a retry.
pub fn later(at: OffsetDateTime, delay: Duration) -> OffsetDateTime {
    time::Duration::try_from(delay)
        .ok()
        .and_then(|delay| at.checked_add(delay))
        .unwrap_or_else(|| time::PrimitiveDateTime::MAX.assume_utc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-29 10:00 UTC);

    #[test]
    fn a_minimum_above_the_maximum_waits_the_maximum() {
        let wait = backoff(Duration::from_secs(60), Duration::from_secs(30), 1);
        assert!(wait >= Duration::from_secs(30) && wait <= Duration::from_secs(60));
    }

    #[test]
    fn the_window_closes_at_the_maximum_age_and_at_the_key_window() {
        let window = RetryWindow {
            key_window: Duration::from_secs(23 * 3600),
            max_age: Duration::from_secs(3600),
            key_retention: Duration::from_secs(24 * 3600),
            key_retention_margin: Duration::from_secs(3600),
        };
        let recent = NOW - Duration::from_secs(60);
        assert_eq!(window.closed_at(recent, recent, NOW), None);
        let old = NOW - Duration::from_secs(3600);
        assert!(window
            .closed_at(old, recent, NOW)
            .is_some_and(|why| why.contains("maximum age")));
        let wide = RetryWindow {
            max_age: Duration::MAX,
            ..window
        };
        let first = NOW - Duration::from_secs(23 * 3600);
        assert!(wide
            .closed_at(first, first, NOW)
            .is_some_and(|why| why.contains("forget the idempotency key")));
        assert!(!wide.key_may_be_forgotten(first, NOW - Duration::from_secs(1)));
    }
}
