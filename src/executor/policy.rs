//! Where an attempt goes after one gateway answer: the executor's retry policy. Pure (time is
//! passed in), so every rule is a unit test.
//!
//! - Final answers (succeeded, declined) and refusals (needs review) settle at once.
//! - Answers that prove this request was not processed (`409`, `429`, not sent) schedule a
//!   durable retry with the same key: `409` after a short fixed delay, `429` after
//!   `Retry-After` (at most [`MAX_RETRY_AFTER`]), the rest after exponential backoff with
//!   jitter. A `409` proves nothing about the earlier send still in progress; it is not a try.
//! - No retry is scheduled past `max_tries`, past `max_age` since the attempt was recorded, or
//!   past the gateway's key retention minus the safety margin since the first call: the
//!   attempt goes to `unknown` and the reconciler settles it by lookup.
//! - A credentials fault keeps the attempt `pending`, due now, and un-counts its try: it is
//!   onecharge's configuration that is wrong, not the attempt.
//! - Anything that may have charged (ambiguous) goes to `unknown`, never to a retry.

use std::time::Duration;

use time::OffsetDateTime;

use crate::config::Settings;
use crate::domain::lookup::{unstorable_gateway_id, ResendClosed, ResendLimits};
use crate::domain::outcome::{GatewayOutcome, RetryAfter, MAX_RETRY_AFTER};
use crate::domain::retry::{backoff, later, SendHistory};
use crate::domain::{RetryWindow, Settlement, TransitionCause};

/// The retry rules, from the configuration.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub max_tries: u32,
    pub retry_min_delay: Duration,
    pub retry_max_delay: Duration,
    pub in_progress_delay: Duration,
    /// No charge is re-sent past the maximum age, nor once the key window has passed since
    /// the attempt's first gateway call.
    pub window: RetryWindow,
}

/// A gateway answer that blames onecharge's configuration (its credentials, its
/// `gateway_url`), not the attempt: the attempt stays `pending`, due at once, and the try is
/// refunded, so a wrong setting cannot use up an attempt's tries while it is fixed.
fn configuration_fault(
    now: OffsetDateTime,
    reason: String,
    cause: TransitionCause,
) -> (Settlement, TransitionCause) {
    (
        Settlement::Retry {
            next_run_at: now,
            reason,
            refund_try: true,
        },
        cause,
    )
}

impl RetryPolicy {
    pub fn from_settings(settings: &Settings) -> Self {
        let executor = &settings.executor;
        Self {
            max_tries: executor.max_tries,
            retry_min_delay: executor.retry_min_delay,
            retry_max_delay: executor.retry_max_delay,
            in_progress_delay: executor.in_progress_delay,
            window: RetryWindow::from_settings(settings),
        }
    }

    /// The delay before try `tries + 1`: exponential from `retry_min_delay`, doubling, capped
    /// at `retry_max_delay`, with jitter so that a burst of failures does not retry in step.
    pub fn backoff(&self, tries: i32) -> Duration {
        backoff(
            self.retry_min_delay,
            self.retry_max_delay,
            tries.max(1).unsigned_abs(),
        )
    }

    /// Where an attempt with these sends goes after `outcome`, and the transition's cause.
    pub fn settle(
        &self,
        attempt: &SendHistory,
        outcome: &GatewayOutcome,
        now: OffsetDateTime,
    ) -> (Settlement, TransitionCause) {
        // An id the database would refuse is never adopted nor cut to fit: a person is
        // told why (decision 232), as for every kind of work.
        if let Some(why) = outcome
            .charge_id()
            .and_then(|id| unstorable_gateway_id(id.as_str()))
        {
            return (
                Settlement::NeedsReview {
                    reason: format!(
                        "{why} for a charge it calls {}: onecharge cannot keep that answer; find the charge at the gateway and resolve the attempt",
                        outcome.label()
                    ),
                },
                TransitionCause::SettlementRefused,
            );
        }
        match outcome {
            GatewayOutcome::Succeeded { charge_id, .. } => {
                (Settlement::Succeeded { charge_id: charge_id.clone() }, TransitionCause::GatewaySucceeded)
            }
            GatewayOutcome::Declined { charge_id, decline_code, .. } => (
                Settlement::Declined { charge_id: charge_id.clone(), decline_code: decline_code.clone() },
                TransitionCause::GatewayDeclined,
            ),
            GatewayOutcome::RequiresAction { charge_id } => (
                Settlement::NeedsReview {
                    reason: format!(
                        "PaymentIntent {charge_id} requires customer action (authentication) although confirmed off-session; \
                         onecharge cannot authenticate an absent customer: cancel it at Stripe and resolve as declined \
                         (authentication_required), or resolve as succeeded if the customer completes it"
                    ),
                },
                TransitionCause::GatewayRefusedRequest,
            ),
            GatewayOutcome::NeedsReview { reason } => {
                (Settlement::NeedsReview { reason: reason.clone() }, TransitionCause::GatewayRefusedRequest)
            }
            GatewayOutcome::CredentialsFault { status } => configuration_fault(
                now,
                format!("{} (HTTP {status}); not counted as a try", crate::domain::outcome::refused_key_words(*status)),
                TransitionCause::CredentialsFault,
            ),
            GatewayOutcome::EndpointFault { status } => configuration_fault(
                now,
                format!("the gateway answered HTTP {status} to POST /v1/charges: gateway_url looks wrong; nothing was processed, not counted as a try"),
                TransitionCause::EndpointFault,
            ),
            GatewayOutcome::Processing { charge_id } => (
                Settlement::Unknown {
                    reason: format!("the gateway is still processing charge {charge_id}: the reconciler reads it until it settles"),
                },
                TransitionCause::GatewayProcessing,
            ),
            GatewayOutcome::Ambiguous { reason } => (
                Settlement::Unknown { reason: format!("the gateway may have charged: {reason}") },
                TransitionCause::AmbiguousResult,
            ),
            // An earlier send under this key is still running at the gateway: this request was
            // not processed, so it is not a try, and the limit on tries cannot turn a slow
            // gateway into "retries exhausted".
            GatewayOutcome::RetryLater {
                after: RetryAfter::InProgress,
                reason,
            } => self.retry_in_progress(attempt, now, reason),
            GatewayOutcome::RetryLater {
                after: RetryAfter::Delay(delay),
                reason,
            } => self.retry(attempt, now, *delay, reason),
            GatewayOutcome::RetryLater {
                after: RetryAfter::Backoff,
                reason,
            } => self.retry(attempt, now, self.backoff(attempt.tries), reason),
            GatewayOutcome::NotSent { reason } => {
                self.retry(attempt, now, self.backoff(attempt.tries), &format!("not sent: {reason}"))
            }
        }
    }

    fn retry(
        &self,
        attempt: &SendHistory,
        now: OffsetDateTime,
        delay: Duration,
        reason: &str,
    ) -> (Settlement, TransitionCause) {
        let next_run_at = later(now, delay.min(MAX_RETRY_AFTER.max(self.retry_max_delay)));
        match self.limits().closed(
            attempt.tries,
            true,
            attempt.created_at,
            attempt.first_dispatched_at,
            next_run_at,
        ) {
            Some(ResendClosed::Tries(_)) => (
                Settlement::Unknown {
                    reason: format!(
                        "retries exhausted after {} tries; last: {reason}",
                        attempt.tries
                    ),
                },
                TransitionCause::RetriesExhausted,
            ),
            Some(ResendClosed::Window(closed)) => (
                Settlement::Unknown {
                    reason: format!("{closed}; last: {reason}"),
                },
                TransitionCause::RetryWindowClosed,
            ),
            None => (
                Settlement::Retry {
                    next_run_at,
                    reason: reason.to_owned(),
                    refund_try: false,
                },
                TransitionCause::RetryScheduled,
            ),
        }
    }

    /// The resend limits every kind of work shares (`domain::lookup`).
    fn limits(&self) -> ResendLimits {
        ResendLimits {
            max_tries: self.max_tries,
            window: self.window,
        }
    }

    /// `409`: the same request again after `in_progress_delay`, the try refunded. Only the
    /// age and key windows stop it (to `unknown`, where the reconciler waits out the
    /// gateway's maximum processing time before it believes an empty lookup).
    fn retry_in_progress(
        &self,
        attempt: &SendHistory,
        now: OffsetDateTime,
        reason: &str,
    ) -> (Settlement, TransitionCause) {
        let next_run_at = later(now, self.in_progress_delay);
        if let Some(closed) = self
            .limits()
            .closed(
                attempt.tries,
                false,
                attempt.created_at,
                attempt.first_dispatched_at,
                next_run_at,
            )
            .map(|closed| closed.reason().to_owned())
        {
            return (
                Settlement::Unknown {
                    reason: format!(
                        "{closed}; last: {reason} (an earlier send may still be in progress)"
                    ),
                },
                TransitionCause::RetryWindowClosed,
            );
        }
        (
            Settlement::Retry {
                next_run_at,
                reason: format!(
                    "{reason}; an earlier send is still in progress, not counted as a try"
                ),
                refund_try: true,
            },
            TransitionCause::RetryScheduled,
        )
    }

    /// Why `attempt` may not be sent at `at`, if it may not.
    fn window_closed_by(&self, attempt: &SendHistory, at: OffsetDateTime) -> Option<String> {
        self.window
            .closed_at(attempt.created_at, attempt.first_dispatched_at, at)
    }

    /// Where a claimed hand-over goes: `unknown`, with the reason its window closed.
    pub fn hand_over(&self, attempt: &SendHistory, now: OffsetDateTime) -> Settlement {
        let reason = self
            .window_closed_by(attempt, now)
            .unwrap_or_else(|| "past its retry window".to_owned());
        Settlement::Unknown { reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::GatewayChargeId;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-29 10:00 UTC);

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_tries: 5,
            retry_min_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(60),
            in_progress_delay: Duration::from_secs(2),
            window: RetryWindow {
                key_window: Duration::from_secs(23 * 3600),
                max_age: Duration::from_secs(3600),
                key_retention: Duration::from_secs(24 * 3600),
                key_retention_margin: Duration::from_secs(3600),
            },
        }
    }

    fn attempt(tries: i32) -> SendHistory {
        SendHistory {
            tries,
            created_at: NOW - Duration::from_secs(60),
            first_dispatched_at: NOW - Duration::from_secs(30),
        }
    }

    fn not_sent() -> GatewayOutcome {
        GatewayOutcome::NotSent {
            reason: "connection refused".into(),
        }
    }

    #[test]
    fn a_409_retries_after_the_short_in_progress_delay_without_counting_a_try() {
        let outcome = GatewayOutcome::RetryLater {
            after: RetryAfter::InProgress,
            reason: "HTTP 409".into(),
        };
        let (settlement, cause) = policy().settle(&attempt(1), &outcome, NOW);
        assert_eq!(cause.as_str(), "retry_scheduled");
        assert!(
            matches!(settlement, Settlement::Retry { next_run_at, refund_try: true, .. } if next_run_at == NOW + Duration::from_secs(2))
        );
        // not even on the last allowed try
        let (settlement, _) = policy().settle(&attempt(5), &outcome, NOW);
        assert!(
            matches!(
                settlement,
                Settlement::Retry {
                    refund_try: true,
                    ..
                }
            ),
            "{settlement:?}"
        );
        // past the maximum age it goes to the reconciler, saying the send may still run
        let mut old = attempt(1);
        old.created_at = NOW - Duration::from_secs(3599);
        let (settlement, cause) = policy().settle(&old, &outcome, NOW);
        assert_eq!(cause.as_str(), "retry_window_closed");
        assert!(
            matches!(&settlement, Settlement::Unknown { reason } if reason.contains("may still be in progress") && !reason.contains("not charged")),
            "{settlement:?}"
        );
    }

    #[test]
    fn a_429_retries_after_exactly_the_retry_after_delay() {
        let outcome = GatewayOutcome::RetryLater {
            after: RetryAfter::Delay(Duration::from_secs(7)),
            reason: "HTTP 429".into(),
        };
        let (settlement, _) = policy().settle(&attempt(1), &outcome, NOW);
        assert!(
            matches!(settlement, Settlement::Retry { next_run_at, .. } if next_run_at == NOW + Duration::from_secs(7))
        );
    }

    #[test]
    fn a_retry_delay_beyond_any_clock_is_a_bounded_retry_never_a_panic() {
        let outcome = GatewayOutcome::RetryLater {
            after: RetryAfter::Delay(Duration::MAX),
            reason: "HTTP 429".into(),
        };
        let mut p = policy();
        p.window.max_age = Duration::MAX;
        p.window.key_window = Duration::MAX;
        let (settlement, cause) = p.settle(&attempt(1), &outcome, NOW);
        assert_eq!(cause.as_str(), "retry_scheduled");
        assert!(
            matches!(settlement, Settlement::Retry { next_run_at, .. } if next_run_at == NOW + crate::domain::outcome::MAX_RETRY_AFTER),
            "{settlement:?}"
        );
    }

    #[test]
    fn backoff_grows_exponentially_with_jitter_and_is_capped() {
        let p = policy();
        for _ in 0..20 {
            let first = p.backoff(1);
            assert!(
                first >= Duration::from_secs(1) && first <= Duration::from_secs(2),
                "{first:?}"
            );
            let third = p.backoff(3);
            assert!(
                third >= Duration::from_secs(4) && third <= Duration::from_secs(8),
                "{third:?}"
            );
            assert!(p.backoff(30) <= Duration::from_secs(120));
        }
    }

    #[test]
    fn the_last_allowed_try_hands_the_attempt_to_the_reconciler() {
        let (settlement, cause) = policy().settle(&attempt(5), &not_sent(), NOW);
        assert_eq!(cause.as_str(), "retries_exhausted");
        assert!(
            matches!(settlement, Settlement::Unknown { reason } if reason.contains("after 5 tries"))
        );
    }

    #[test]
    fn no_retry_is_scheduled_past_the_maximum_age() {
        let mut old = attempt(1);
        old.created_at = NOW - Duration::from_secs(3599);
        let (settlement, cause) = policy().settle(&old, &not_sent(), NOW);
        assert_eq!(cause.as_str(), "retry_window_closed");
        assert!(
            matches!(settlement, Settlement::Unknown { reason } if reason.contains("maximum age"))
        );
    }

    #[test]
    fn no_charge_is_re_sent_once_the_key_may_be_forgotten() {
        let mut p = policy();
        p.window.max_age = Duration::from_secs(48 * 3600);
        let mut old = attempt(1);
        old.created_at = NOW - Duration::from_secs(23 * 3600);
        old.first_dispatched_at = NOW - Duration::from_secs(23 * 3600 - 1);
        let (settlement, cause) = p.settle(&old, &not_sent(), NOW);
        assert_eq!(cause.as_str(), "retry_window_closed");
        assert!(
            matches!(settlement, Settlement::Unknown { reason } if reason.contains("forget the idempotency key"))
        );
        assert!(matches!(
            p.hand_over(&old, NOW + Duration::from_secs(2)),
            Settlement::Unknown { .. }
        ));
    }

    #[test]
    fn a_credentials_fault_keeps_the_attempt_due_and_refunds_its_try() {
        let (settlement, cause) = policy().settle(
            &attempt(5),
            &GatewayOutcome::CredentialsFault { status: 401 },
            NOW,
        );
        assert_eq!(cause.as_str(), "credentials_fault");
        assert!(
            matches!(settlement, Settlement::Retry { next_run_at, refund_try: true, .. } if next_run_at == NOW)
        );
    }

    #[test]
    fn an_ambiguous_answer_goes_to_unknown_never_to_a_retry() {
        let outcome = GatewayOutcome::Ambiguous {
            reason: "HTTP 500".into(),
        };
        let (settlement, cause) = policy().settle(&attempt(1), &outcome, NOW);
        assert_eq!(cause.as_str(), "ambiguous_result");
        assert!(matches!(settlement, Settlement::Unknown { .. }));
    }

    #[test]
    fn final_answers_and_refusals_settle_at_once() {
        let p = policy();
        let ok = GatewayOutcome::Succeeded {
            charge_id: GatewayChargeId::from_gateway("ch_1"),
            replayed: true,
        };
        assert_eq!(
            p.settle(&attempt(1), &ok, NOW).0,
            Settlement::Succeeded {
                charge_id: GatewayChargeId::from_gateway("ch_1")
            }
        );
        let review = GatewayOutcome::NeedsReview {
            reason: "HTTP 422".into(),
        };
        assert_eq!(
            p.settle(&attempt(1), &review, NOW).0,
            Settlement::NeedsReview {
                reason: "HTTP 422".into()
            }
        );
    }
}
