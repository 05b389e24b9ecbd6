//! Claiming ahead: a short queue of attempts claimed before a call slot frees, so that a
//! freed slot starts its next call at once instead of waiting for a claim statement.
//!
//! The queue's target length is what the slots consume while one claim runs — the observed
//! call rate × the observed claim latency × [`SAFETY`] — at least one, at most
//! `executor.claim_ahead` (0 switches claiming ahead off).
//!
//! Invariants:
//! - A queued attempt holds a lease and its dispatch stamp but has not been sent, so the
//!   queue stays short, and before it is sent the executor checks that the gateway health
//!   lets calls through and that the lease still covers a whole call
//!   ([`Queued::lease_left`]); what fails the check is handed back (`pending` at once, the
//!   try un-counted), never sent late.
//! - Nothing here touches the database or the gateway: it only holds and measures.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use time::OffsetDateTime;

use crate::domain::ChargeClaim;

/// How many claim latencies' worth of calls the queue holds: one covers the claim in
/// progress, the second its jitter (a claim that takes twice its average).
const SAFETY: f64 = 2.0;

/// How often the call rate is re-measured, and the weight of each new measurement.
const RATE_WINDOW: Duration = Duration::from_millis(250);
const SMOOTHING: f64 = 0.3;

/// One attempt claimed and not yet sent.
pub(super) struct Queued {
    pub(super) claim: ChargeClaim,
    /// The claim was the gateway health's one probe: it is sent whatever the health says
    /// now (asking again would refuse it, as the probe was handed out to this claim).
    pub(super) probe: bool,
    /// When its claim was asked for, on the monotonic clock and on the executor's clock: the
    /// database started the lease at the claim's `now()`, after this and before the claim
    /// returned, so a lease counted from here never looks longer than it is.
    claimed_at: Instant,
    claimed_on_clock: OffsetDateTime,
}

impl Queued {
    /// How much of the lease is left at `now` (the executor's clock): the lease minus the
    /// longer of the time since the claim on the monotonic clock and on the executor's
    /// clock — the monotonic one cannot jump, the executor's one is what tests move.
    pub(super) fn lease_left(&self, lease: Duration, now: OffsetDateTime) -> Duration {
        let on_clock = Duration::try_from(now - self.claimed_on_clock).unwrap_or_default();
        lease.saturating_sub(self.claimed_at.elapsed().max(on_clock))
    }
}

/// The queue and what it measures.
pub(super) struct ClaimAhead {
    /// `executor.claim_ahead`: the longest the queue may be; 0 queues nothing.
    max: usize,
    queue: VecDeque<Queued>,
    /// Calls started per second, smoothed.
    rate: f64,
    window_start: Instant,
    sent_in_window: u32,
    /// How long a claim statement takes, smoothed.
    claim_latency: Duration,
}

impl ClaimAhead {
    pub(super) fn new(max: usize) -> Self {
        Self {
            max,
            queue: VecDeque::new(),
            rate: 0.0,
            window_start: Instant::now(),
            sent_in_window: 0,
            claim_latency: Duration::ZERO,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    /// How many attempts to hold beyond the free call slots now.
    pub(super) fn target(&self) -> usize {
        if self.max == 0 {
            return 0;
        }
        let wanted = (self.rate * self.claim_latency.as_secs_f64() * SAFETY).ceil();
        (wanted as usize).clamp(1, self.max)
    }

    /// Attempts a claim returned at `now` (the executor's clock), `took` after it was asked
    /// for.
    pub(super) fn claimed(
        &mut self,
        attempts: Vec<ChargeClaim>,
        probe: bool,
        now: OffsetDateTime,
        took: Duration,
    ) {
        self.claim_latency = if self.claim_latency.is_zero() {
            took
        } else {
            self.claim_latency.mul_f64(1.0 - SMOOTHING) + took.mul_f64(SMOOTHING)
        };
        // The lease runs from the claim's `now()` in the database, which came before the claim
        // returned: count it from when the claim was asked for, not from its return.
        let returned = Instant::now();
        let claimed_at = returned.checked_sub(took).unwrap_or(returned);
        let claimed_on_clock = now - took;
        self.queue.extend(attempts.into_iter().map(|claim| Queued {
            claim,
            probe,
            claimed_at,
            claimed_on_clock,
        }));
    }

    /// The attempt claimed first, to be checked and sent (or handed back).
    pub(super) fn next(&mut self) -> Option<Queued> {
        self.queue.pop_front()
    }

    /// Counts one call started, for the rate.
    pub(super) fn sent(&mut self) {
        self.sent_in_window += 1;
        let elapsed = self.window_start.elapsed();
        if elapsed >= RATE_WINDOW {
            let measured = f64::from(self.sent_in_window) / elapsed.as_secs_f64();
            self.rate = self.rate * (1.0 - SMOOTHING) + measured * SMOOTHING;
            self.window_start = Instant::now();
            self.sent_in_window = 0;
        }
    }

    /// Returns `queued` to the front of the queue, in their order.
    pub(super) fn put_back(&mut self, queued: Vec<Queued>) {
        for queued in queued.into_iter().rev() {
            self.queue.push_front(queued);
        }
    }

    /// Everything still queued (shutdown, or the gateway health holding calls).
    pub(super) fn take_all(&mut self) -> Vec<Queued> {
        self.queue.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::MessageId;

    #[test]
    fn the_target_is_what_the_calls_consume_during_two_claims_within_one_and_the_maximum() {
        let mut ahead = ClaimAhead::new(64);
        assert_eq!(ahead.target(), 1, "nothing measured yet: one");
        ahead.rate = 2_000.0;
        ahead.claim_latency = Duration::from_millis(5);
        assert_eq!(ahead.target(), 20);
        ahead.claim_latency = Duration::from_millis(50);
        assert_eq!(ahead.target(), 64, "capped");
        assert_eq!(ClaimAhead::new(0).target(), 0, "switched off");
    }

    fn claimed_attempt() -> ChargeClaim {
        let at = time::macros::datetime!(2026-12-01 12:00 UTC);
        ChargeClaim {
            attempt: crate::domain::HeldAttempt {
                held_as: crate::domain::AttemptStatus::InFlight,
                lease_expires_at: Some(at),
                claimed_at: at,
                ..crate::domain::held::fixture::held()
            },
            order_id: "ord_1".into(),
            customer_id: "cus_1".into(),
            payment_method: "pm_card_visa".into(),
            description: None,
            lease_owner: "executor".into(),
            dispatch: true,
            first_message_id: MessageId::checked("m-1"),
            correlation_id: None,
        }
    }

    #[test]
    fn a_queued_attempts_lease_is_counted_from_before_its_claim_not_from_its_return() {
        let mut ahead = ClaimAhead::new(4);
        let returned = time::macros::datetime!(2026-12-01 12:00:03 UTC);
        // The claim statement took 3 s: the database started the lease 3 s before it returned.
        ahead.claimed(
            vec![claimed_attempt()],
            false,
            returned,
            Duration::from_secs(3),
        );
        let queued = ahead.next().expect("queued");

        let left = queued.lease_left(Duration::from_secs(10), returned);

        assert!(
            left <= Duration::from_secs(7),
            "{left:?} of a 10 s lease left"
        );
    }
}
