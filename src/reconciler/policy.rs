//! What a lookup's answer means for one `unknown` attempt: the reconciler's decisions. Pure
//! (time and the attempt's facts are passed in), so every rule is a row of the tables below;
//! the role ([`super::Reconciler`]) asks the gateway, writes what is decided, and proves a
//! "not charged" before it is written ([`Decision::proof`], [`LookupPolicy::after_cancel`]).
//!
//! - A charge found that is the attempt's is adopted (`succeeded`, `declined`); several
//!   successes, or a charge that is not the attempt's, go to a person.
//! - Nothing found proves "not charged" only once `gateway_max_processing_time` has passed
//!   since the last send, and only inside the key window ([`LookupPolicy::nothing_found`]):
//!   before that the attempt is re-sent under the same key, or looked up again.
//! - A charge still `processing` at the gateway is followed along its own, longer schedule
//!   until `reconciler.processing_max`; anything else unsettled, or a failed lookup, along
//!   `reconciler.schedule`; a used-up schedule goes to a person.
//! - A credentials or endpoint fault is onecharge's configuration: asked again after the
//!   schedule's first delay, not counted as a check.
//!
//! Over 600 lines only with its tests: each rule is a row of the tables below.

use std::time::Duration;

use time::OffsetDateTime;

use crate::config::Settings;
use crate::domain::call::CancelOutcome;
use crate::domain::lookup::{unstorable_gateway_id, LookupSchedule, StillProcessing};
use crate::domain::outcome::{
    read_lookup, ChargeStatus, FailedLookups, GatewayCharge, LookupOutcome, LookupReading,
};
use crate::domain::{
    AttemptStatus, GatewayChargeId, HeldAttempt, RetryWindow, Settlement, TransitionCause,
};

/// The rules, from the configuration.
#[derive(Debug, Clone)]
pub struct LookupPolicy {
    /// `reconciler.schedule`, `reconciler.processing_schedule`, `reconciler.processing_max`:
    /// the one lookup schedule charges and refunds share (`domain::lookup`).
    pub lookups: LookupSchedule,
    /// The key window and the maximum age, as the executor's claim applies them.
    pub window: RetryWindow,
    /// The executor's limit on tries: with the maximum age, re-pending an attempt past it
    /// would only bounce it back here without a call.
    pub max_tries: u32,
    /// `gateway_max_processing_time`: until this has passed since the last send, an empty
    /// lookup proves nothing.
    pub max_processing_time: Duration,
}

/// Where a looked-up attempt goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Settled (or re-pended, or handed to a person) with this cause.
    Settle {
        settlement: Settlement,
        cause: TransitionCause,
    },
    /// Stays `unknown`, looked up again at `at`; `checks` says what this does to the count
    /// of failed lookups (the schedule's position).
    CheckAgain {
        at: OffsetDateTime,
        reason: String,
        checks: FailedLookups,
    },
}

/// What must happen at the gateway before a decision may be written, for an attempt whose
/// gateway object could still charge (Stripe: a stored PaymentIntent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// Re-sending after the PaymentIntent read `requires_confirmation`: the next confirm goes
    /// under the next derived key (the last one's `5xx` may be saved and replayed).
    NextConfirmKey,
    /// Telling a person nothing was charged: the PaymentIntent is cancelled first, and the
    /// cancel's answer decides ([`LookupPolicy::after_cancel`]); `reason` is what the
    /// decision told the person.
    Cancel { reason: String },
}

impl Decision {
    /// The decision in words (what the gateway's answer means).
    pub fn describe(&self) -> String {
        match self {
            Self::Settle { settlement, .. } => settlement.describe(),
            Self::CheckAgain { reason, .. } => reason.clone(),
        }
    }

    /// What this decision needs proven first when the attempt has a gateway object that
    /// could still charge; `None` when it says nothing a cancel or a new key must back.
    pub fn proof(&self) -> Option<Proof> {
        match self {
            Self::Settle {
                settlement: Settlement::Retry { .. },
                cause: TransitionCause::LookupFoundNothing,
            } => Some(Proof::NextConfirmKey),
            Self::Settle {
                settlement: Settlement::NeedsReview { reason },
                cause: TransitionCause::LookupFoundNothingRetriesExhausted,
            } => Some(Proof::Cancel {
                reason: reason.clone(),
            }),
            _ => None,
        }
    }
}

impl LookupPolicy {
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            lookups: LookupSchedule::from_settings(settings),
            window: RetryWindow::from_settings(settings),
            max_tries: settings.executor.max_tries,
            max_processing_time: settings.gateway_max_processing_time,
        }
    }

    /// The decision for one lookup answer about `attempt`, at the database's `now`.
    pub fn decide(
        &self,
        attempt: &HeldAttempt,
        outcome: &LookupOutcome,
        now: OffsetDateTime,
    ) -> Decision {
        match outcome {
            LookupOutcome::Found(charges) => self.read_found(attempt, charges, now),
            LookupOutcome::CredentialsFault { status } => Decision::CheckAgain {
                at: now + self.first_delay(),
                reason: format!(
                    "lookup refused: {} (HTTP {status})",
                    crate::domain::outcome::refused_key_words(*status)
                ),
                checks: FailedLookups::Keep,
            },
            LookupOutcome::EndpointFault { status } => Decision::CheckAgain {
                at: now + self.first_delay(),
                reason: format!("lookup refused: the gateway answered HTTP {status}, gateway_url looks wrong; not counted as a check"),
                checks: FailedLookups::Keep,
            },
            LookupOutcome::Failed { reason } => self.check_again(attempt, now, reason),
        }
    }

    /// The charges a lookup found, read against the attempt.
    fn read_found(
        &self,
        attempt: &HeldAttempt,
        charges: &[GatewayCharge],
        now: OffsetDateTime,
    ) -> Decision {
        let expected = attempt.expected();
        // An id the database would refuse is never adopted nor cut to fit: a person is
        // told why (decision 232), as for every kind of work.
        if let Some(why) = charges
            .iter()
            .find_map(|charge| unstorable_gateway_id(charge.id.as_str()))
        {
            return Decision::Settle {
                settlement: Settlement::NeedsReview {
                    reason: format!(
                        "{why}: onecharge cannot keep that answer; find the charge at the gateway and resolve the attempt"
                    ),
                },
                cause: TransitionCause::LookupFoundAnotherCharge,
            };
        }
        match read_lookup(charges, &expected) {
            LookupReading::Nothing => self.nothing_found(attempt, now),
            LookupReading::Succeeded(charge) => Decision::Settle {
                settlement: Settlement::Succeeded {
                    charge_id: charge.id,
                },
                cause: TransitionCause::LookupFoundCharge,
            },
            LookupReading::Declined(charge) => Decision::Settle {
                settlement: Settlement::Declined {
                    charge_id: charge.id,
                    decline_code: charge.decline_code,
                },
                cause: TransitionCause::LookupFoundCharge,
            },
            LookupReading::SeveralSucceeded(ids) => Decision::Settle {
                settlement: Settlement::NeedsReview {
                    reason: format!(
                        "the gateway holds {} successful charges under one key ({}): refund all but one",
                        ids.len(),
                        ids.iter().map(GatewayChargeId::as_str).collect::<Vec<_>>().join(", ")
                    ),
                },
                cause: TransitionCause::LookupFoundSeveralCharges,
            },
            LookupReading::Mismatch { reason } => Decision::Settle {
                settlement: Settlement::NeedsReview {
                    reason: format!(
                        "cannot tell whether this attempt was charged: {reason}; check the charge at the gateway"
                    ),
                },
                cause: TransitionCause::LookupFoundAnotherCharge,
            },
            // Processing at the gateway (a bank debit can take days): along its own, longer
            // schedule.
            LookupReading::Unsettled { .. } if is_processing(charges) => {
                self.still_processing(attempt, charges, now)
            }
            // Maybe not final yet: like a lookup that did not answer, along the schedule.
            LookupReading::Unsettled { reason } => self.check_again(attempt, now, &reason),
        }
    }

    /// The schedule's first delay: when a lookup refused for onecharge's configuration is
    /// asked again.
    fn first_delay(&self) -> Duration {
        self.lookups.first_delay()
    }

    /// A lookup that settled nothing: look again after the schedule's next delay; when the
    /// schedule is used up, a person decides.
    pub fn check_again(
        &self,
        attempt: &HeldAttempt,
        now: OffsetDateTime,
        reason: &str,
    ) -> Decision {
        let checks = attempt.reconcile_checks.max(0) as usize;
        match self.lookups.after_failure(attempt.reconcile_checks) {
            Some(delay) => Decision::CheckAgain {
                at: now + delay,
                reason: format!("lookup {} failed: {reason}", checks + 1),
                checks: FailedLookups::Count,
            },
            None => Decision::Settle {
                settlement: Settlement::NeedsReview {
                    reason: format!(
                        "cannot settle: {} gateway lookups failed over the whole reconciliation schedule; last: {reason}",
                        checks + 1
                    ),
                },
                cause: TransitionCause::ReconciliationScheduleExhausted,
            },
        }
    }

    /// A reconciliation the database refused to store (`why`; the gateway had answered
    /// `answer`): counted like a failed lookup — checked again after the schedule's next
    /// delay, and once the schedule is used up a person decides, told why and what the
    /// gateway answered. So no answer, however malformed, keeps an attempt cycling.
    pub fn unstored(
        &self,
        attempt: &HeldAttempt,
        why: &str,
        answer: &str,
        now: OffsetDateTime,
    ) -> Decision {
        let checks = attempt.reconcile_checks.max(0) as usize;
        match self.lookups.after_failure(attempt.reconcile_checks) {
            Some(delay) => Decision::CheckAgain {
                at: now + delay,
                reason: format!(
                    "the gateway's answer could not be stored (failure {}): {why}; the gateway answered: {answer}",
                    checks + 1
                ),
                checks: FailedLookups::Count,
            },
            None => Decision::Settle {
                settlement: Settlement::NeedsReview {
                    reason: format!(
                        "cannot settle: the gateway's answer could not be stored, {} times over the whole reconciliation schedule: {why}; \
                         the gateway answered: {answer}",
                        checks + 1
                    ),
                },
                cause: TransitionCause::ReconciliationScheduleExhausted,
            },
        }
    }

    /// A payment still `processing` at the gateway: it stays `unknown` ("processing at the
    /// gateway"), looked at again along `reconciler.processing_schedule` (its last delay
    /// repeating), until `reconciler.processing_max` has passed since its last send; only
    /// then does a person decide.
    pub fn still_processing(
        &self,
        attempt: &HeldAttempt,
        charges: &[GatewayCharge],
        now: OffsetDateTime,
    ) -> Decision {
        let id = charges
            .iter()
            .find(|c| c.status == ChargeStatus::Other("processing".into()))
            .map_or("?", |c| c.id.as_str());
        let since = attempt.dispatched_at.unwrap_or(attempt.created_at);
        match self.lookups.still_processing(since, now) {
            StillProcessing::TooLong => Decision::Settle {
                settlement: Settlement::NeedsReview {
                    reason: format!(
                        "{id} is still processing at the gateway, {} after the last send at {since} \
                         (reconciler.processing_max): check it at the gateway and resolve",
                        humantime::format_duration(self.lookups.processing_max)
                    ),
                },
                cause: TransitionCause::ReconciliationScheduleExhausted,
            },
            StillProcessing::LookAgain(delay) => {
                let at = now + delay;
                Decision::CheckAgain {
                    at,
                    reason: format!(
                        "processing at the gateway: {id} is not final yet; looking again at {at}"
                    ),
                    checks: FailedLookups::Restart,
                }
            }
        }
    }

    /// What the cancel of the attempt's gateway object ([`Proof::Cancel`]) makes of a
    /// decision that told a person `reason`: `canceled` proves it; `succeeded` is adopted;
    /// `processing` is followed; no proof keeps the attempt `unknown`, looked at again
    /// along the schedule, and nothing is announced.
    pub fn after_cancel(
        &self,
        attempt: &HeldAttempt,
        reason: &str,
        cancel: CancelOutcome,
        now: OffsetDateTime,
    ) -> Decision {
        match cancel {
            CancelOutcome::Canceled { charge_id } => Decision::Settle {
                settlement: Settlement::NeedsReview {
                    reason: format!(
                        "{reason}; PaymentIntent {charge_id} was cancelled at the gateway, so it can never charge"
                    ),
                },
                cause: TransitionCause::LookupFoundNothingRetriesExhausted,
            },
            CancelOutcome::Succeeded { charge_id } => Decision::Settle {
                settlement: Settlement::Succeeded { charge_id },
                cause: TransitionCause::LookupFoundCharge,
            },
            CancelOutcome::Processing { charge_id } => {
                let charge = GatewayCharge {
                    id: charge_id,
                    status: ChargeStatus::Other("processing".into()),
                    decline_code: None,
                    idempotency_key: None,
                    reference: None,
                    amount_minor: None,
                    currency: None,
                };
                self.still_processing(attempt, &[charge], now)
            }
            CancelOutcome::Unproven { reason } => self.check_again(
                attempt,
                now,
                &format!("nothing found, but the PaymentIntent could not be cancelled yet: {reason}"),
            ),
        }
    }

    /// The lookup found nothing under the key. That proves "not charged" only once the
    /// gateway's maximum processing time has passed since the last send (and only while the
    /// gateway still remembers the key); before that the send may still be running and
    /// charge, so nothing here says "not charged" and nothing goes to a person for it.
    pub fn nothing_found(&self, attempt: &HeldAttempt, now: OffsetDateTime) -> Decision {
        let key = &attempt.idempotency_key;
        if let Some(first) = attempt.first_dispatched_at {
            if self.window.key_may_be_forgotten(first, now) {
                return Decision::Settle {
                    settlement: Settlement::NeedsReview {
                        reason: format!(
                            "cannot prove whether the customer was charged: the gateway finds nothing under key {key} \
                             but it was first sent at {first}, past the key window ({}), so the gateway may have forgotten it; \
                             a re-send could charge twice",
                            humantime::format_duration(self.window.key_window)
                        ),
                    },
                    cause: TransitionCause::LookupFoundNothingOutsideKeyWindow,
                };
            }
        }
        let past_limits = attempt.tries.max(0) as u32 >= self.max_tries
            || self.window.too_old(attempt.created_at, now);
        match (self.last_send_running(attempt, now), past_limits) {
            (Some((last, until)), true) => Decision::CheckAgain {
                at: until,
                reason: format!(
                    "no charge found yet under key {key}; the last send at {last} may still be in progress at the gateway \
                     (gateway_max_processing_time {}): looking it up again at {until}",
                    self.processing_time()
                ),
                checks: FailedLookups::Keep,
            },
            (Some((last, _)), false) => resend(format!(
                "no charge found yet under this key; the last send at {last} may still be in progress: \
                 re-sending with the same key (the gateway answers 409 while it runs, or replays its outcome)"
            ), now),
            (None, true) => Decision::Settle {
                settlement: Settlement::NeedsReview {
                    reason: self.nothing_charged_past_limits(attempt),
                },
                cause: TransitionCause::LookupFoundNothingRetriesExhausted,
            },
            (None, false) => resend(format!(
                "the gateway has no charge under this key and the last send is past gateway_max_processing_time \
                 ({}): re-sending with the same key",
                self.processing_time()
            ), now),
        }
    }

    /// The last send and when `gateway_max_processing_time` after it ends, while it has not
    /// ended at `now`: the send may still be running at the gateway.
    fn last_send_running(
        &self,
        attempt: &HeldAttempt,
        now: OffsetDateTime,
    ) -> Option<(OffsetDateTime, OffsetDateTime)> {
        let last = attempt.dispatched_at?;
        let until = time::Duration::try_from(self.max_processing_time)
            .ok()
            .and_then(|d| last.checked_add(d))?;
        (now < until).then_some((last, until))
    }

    /// Why nothing was charged for an attempt past its retry limits, for the person who
    /// decides what happens to it.
    fn nothing_charged_past_limits(&self, attempt: &HeldAttempt) -> String {
        let key = &attempt.idempotency_key;
        match attempt.dispatched_at {
            Some(last) => format!(
                "the gateway has no charge under key {key}, and the last send at {last} is older than \
                 gateway_max_processing_time ({}), so nothing was charged under this key; the attempt is past \
                 its retry limits ({} tries, recorded {}): decline it, or publish a new attempt",
                self.processing_time(),
                attempt.tries,
                attempt.created_at
            ),
            None => format!(
                "nothing was ever sent under key {key} and the gateway has no charge under it; the attempt is past \
                 its retry limits ({} tries, recorded {}): decline it, or publish a new attempt",
                attempt.tries, attempt.created_at
            ),
        }
    }

    fn processing_time(&self) -> humantime::FormattedDuration {
        humantime::format_duration(self.max_processing_time)
    }
}

/// Back to `pending`, due now: the executor re-sends under the same key.
fn resend(reason: String, now: OffsetDateTime) -> Decision {
    Decision::Settle {
        settlement: Settlement::Retry {
            next_run_at: now,
            reason,
            refund_try: false,
        },
        cause: TransitionCause::LookupFoundNothing,
    }
}

/// Whether a lookup found the charge still `processing` at the gateway.
fn is_processing(charges: &[GatewayCharge]) -> bool {
    charges
        .iter()
        .any(|c| c.status == ChargeStatus::Other("processing".into()))
}

/// Whether a claim made like a recheck's (`claim_for_recheck`) of an attempt that was
/// `before` may write `settlement`: an `unknown` attempt takes whatever the decision says; a
/// `needs_review` one only a found charge's outcome (re-sending it stays a person's call).
pub fn claim_may_write(before: AttemptStatus, settlement: &Settlement) -> bool {
    before == AttemptStatus::Unknown
        || matches!(
            settlement,
            Settlement::Succeeded { .. } | Settlement::Declined { .. }
        )
}

/// The charge a lookup found that decides the attempt: a success wins over declines (a
/// decline followed by a success under one key cannot happen at a conforming gateway, but
/// money taken is what matters).
pub fn found_charge(outcome: &LookupOutcome) -> Option<&GatewayCharge> {
    match outcome {
        LookupOutcome::Found(charges) => charges
            .iter()
            .find(|c| c.status == ChargeStatus::Succeeded)
            .or_else(|| charges.first()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const NOW: OffsetDateTime = datetime!(2026-11-29 10:00 UTC);
    const MINUTE: Duration = Duration::from_secs(60);

    fn policy() -> LookupPolicy {
        LookupPolicy {
            lookups: LookupSchedule {
                schedule: vec![MINUTE, 5 * MINUTE],
                processing_schedule: vec![30 * MINUTE, 60 * MINUTE],
                processing_max: Duration::from_secs(3 * 24 * 3600),
            },
            window: RetryWindow {
                key_window: Duration::from_secs(23 * 3600),
                max_age: Duration::from_secs(3600),
                key_retention: Duration::from_secs(24 * 3600),
                key_retention_margin: Duration::from_secs(3600),
            },
            max_tries: 5,
            max_processing_time: 2 * MINUTE,
        }
    }

    /// An attempt recorded 10 minutes ago, sent twice, last 5 minutes ago (past the
    /// processing time), inside every window, no failed lookup yet.
    fn attempt() -> HeldAttempt {
        HeldAttempt {
            tries: 2,
            reconcile_checks: 0,
            created_at: NOW - 10 * MINUTE,
            first_dispatched_at: Some(NOW - 9 * MINUTE),
            dispatched_at: Some(NOW - 5 * MINUTE),
            claimed_at: NOW,
            ..crate::domain::held::fixture::held()
        }
    }

    /// The attempt's own charge, with `status`.
    fn charge(status: &str) -> GatewayCharge {
        let facts = attempt();
        GatewayCharge {
            id: GatewayChargeId::from_gateway("ch_1"),
            status: ChargeStatus::from(status.to_owned()),
            decline_code: (status == "declined").then(|| "card_declined".into()),
            idempotency_key: Some(facts.idempotency_key.to_string()),
            reference: Some(facts.payment_attempt_id.to_string()),
            amount_minor: Some(facts.money.amount_minor()),
            currency: Some(facts.money.currency().code().to_owned()),
        }
    }

    /// What a decision came to, without its words: settled to a status with a cause, or
    /// looked up again at a time, counted or not.
    #[derive(Debug, PartialEq, Eq)]
    enum Came {
        Settled(AttemptStatus, TransitionCause),
        Again(OffsetDateTime, FailedLookups),
    }

    fn came(decision: &Decision) -> Came {
        match decision {
            Decision::Settle { settlement, cause } => Came::Settled(settlement.status(), *cause),
            Decision::CheckAgain { at, checks, .. } => Came::Again(*at, *checks),
        }
    }

    use AttemptStatus::{Declined, NeedsReview, Pending, Succeeded};
    use TransitionCause::*;

    #[test]
    fn every_lookup_answer_decides_as_the_table_says() {
        let mut other = charge("succeeded");
        other.id = GatewayChargeId::from_gateway("ch_2");
        let mut wrong_amount = charge("succeeded");
        wrong_amount.amount_minor = Some(1);
        let rows: Vec<(&str, HeldAttempt, LookupOutcome, Came)> = vec![
            (
                "the attempt's success is adopted",
                attempt(),
                LookupOutcome::Found(vec![charge("succeeded")]),
                Came::Settled(Succeeded, LookupFoundCharge),
            ),
            (
                "the attempt's decline is adopted",
                attempt(),
                LookupOutcome::Found(vec![charge("declined")]),
                Came::Settled(Declined, LookupFoundCharge),
            ),
            (
                "two successes under one key go to a person",
                attempt(),
                LookupOutcome::Found(vec![charge("succeeded"), other]),
                Came::Settled(NeedsReview, LookupFoundSeveralCharges),
            ),
            (
                "a charge that is not the attempt's goes to a person",
                attempt(),
                LookupOutcome::Found(vec![wrong_amount]),
                Came::Settled(NeedsReview, LookupFoundAnotherCharge),
            ),
            (
                "a charge processing is followed along the processing schedule",
                attempt(),
                LookupOutcome::Found(vec![charge("processing")]),
                Came::Again(NOW + 30 * MINUTE, FailedLookups::Restart),
            ),
            (
                "the processing schedule's step is the one the time since the last send reached",
                HeldAttempt {
                    dispatched_at: Some(NOW - 45 * MINUTE),
                    ..attempt()
                },
                LookupOutcome::Found(vec![charge("processing")]),
                Came::Again(NOW + 60 * MINUTE, FailedLookups::Restart),
            ),
            (
                "past the processing schedule its last delay repeats",
                HeldAttempt {
                    dispatched_at: Some(NOW - Duration::from_secs(2 * 24 * 3600)),
                    ..attempt()
                },
                LookupOutcome::Found(vec![charge("processing")]),
                Came::Again(NOW + 60 * MINUTE, FailedLookups::Restart),
            ),
            (
                "failed lookups before a processing answer neither end nor shorten its schedule",
                HeldAttempt {
                    reconcile_checks: 7,
                    ..attempt()
                },
                LookupOutcome::Found(vec![charge("processing")]),
                Came::Again(NOW + 30 * MINUTE, FailedLookups::Restart),
            ),
            (
                "a charge processing past processing_max goes to a person",
                HeldAttempt {
                    dispatched_at: Some(NOW - Duration::from_secs(3 * 24 * 3600)),
                    ..attempt()
                },
                LookupOutcome::Found(vec![charge("processing")]),
                Came::Settled(NeedsReview, ReconciliationScheduleExhausted),
            ),
            (
                "another unsettled status is looked up again along the schedule",
                HeldAttempt {
                    reconcile_checks: 1,
                    ..attempt()
                },
                LookupOutcome::Found(vec![charge("pending")]),
                Came::Again(NOW + 5 * MINUTE, FailedLookups::Count),
            ),
            (
                "an unsettled status with the schedule used up goes to a person",
                HeldAttempt {
                    reconcile_checks: 2,
                    ..attempt()
                },
                LookupOutcome::Found(vec![charge("pending")]),
                Came::Settled(NeedsReview, ReconciliationScheduleExhausted),
            ),
            (
                "a failed lookup is asked again after the schedule's next delay",
                attempt(),
                LookupOutcome::Failed {
                    reason: "HTTP 503".into(),
                },
                Came::Again(NOW + MINUTE, FailedLookups::Count),
            ),
            (
                "a failed lookup with the schedule used up goes to a person",
                HeldAttempt {
                    reconcile_checks: 7,
                    ..attempt()
                },
                LookupOutcome::Failed {
                    reason: "HTTP 503".into(),
                },
                Came::Settled(NeedsReview, ReconciliationScheduleExhausted),
            ),
            (
                "refused credentials are asked again, not counted",
                HeldAttempt {
                    reconcile_checks: 1,
                    ..attempt()
                },
                LookupOutcome::CredentialsFault { status: 401 },
                Came::Again(NOW + MINUTE, FailedLookups::Keep),
            ),
            (
                "a wrong gateway_url is asked again, not counted",
                attempt(),
                LookupOutcome::EndpointFault { status: 404 },
                Came::Again(NOW + MINUTE, FailedLookups::Keep),
            ),
        ];
        let policy = policy();
        for (row, facts, outcome, expected) in rows {
            let decision = policy.decide(&facts, &outcome, NOW);
            assert_eq!(came(&decision), expected, "{row}: {decision:?}");
        }
    }

    #[test]
    fn nothing_found_proves_not_charged_only_after_the_processing_time_and_inside_the_key_window() {
        let rows: Vec<(&str, HeldAttempt, Came)> = vec![
            (
                "last send past the processing time, inside the limits: re-sent, same key",
                attempt(),
                Came::Settled(Pending, LookupFoundNothing),
            ),
            (
                "last send may still run, inside the limits: re-sent, same key",
                HeldAttempt {
                    dispatched_at: Some(NOW - MINUTE),
                    ..attempt()
                },
                Came::Settled(Pending, LookupFoundNothing),
            ),
            (
                "last send may still run, past the tries: looked up when it cannot",
                HeldAttempt {
                    tries: 5,
                    dispatched_at: Some(NOW - MINUTE),
                    ..attempt()
                },
                Came::Again(NOW + MINUTE, FailedLookups::Keep),
            ),
            (
                "last send past the processing time, past the tries: a person",
                HeldAttempt {
                    tries: 5,
                    ..attempt()
                },
                Came::Settled(NeedsReview, LookupFoundNothingRetriesExhausted),
            ),
            (
                "never sent, past the maximum age: a person",
                HeldAttempt {
                    created_at: NOW - Duration::from_secs(2 * 3600),
                    first_dispatched_at: None,
                    dispatched_at: None,
                    ..attempt()
                },
                Came::Settled(NeedsReview, LookupFoundNothingRetriesExhausted),
            ),
            (
                "first sent past the key window: a person, a re-send could charge twice",
                HeldAttempt {
                    first_dispatched_at: Some(NOW - Duration::from_secs(23 * 3600)),
                    ..attempt()
                },
                Came::Settled(NeedsReview, LookupFoundNothingOutsideKeyWindow),
            ),
        ];
        let policy = policy();
        for (row, facts, expected) in rows {
            let decision = policy.decide(&facts, &LookupOutcome::Found(Vec::new()), NOW);
            assert_eq!(came(&decision), expected, "{row}: {decision:?}");
            assert_eq!(
                decision,
                policy.nothing_found(&facts, NOW),
                "{row}: an empty lookup is nothing found"
            );
        }
    }

    #[test]
    fn a_cancel_proves_not_charged_adopts_a_success_or_keeps_looking() {
        let rows: Vec<(&str, CancelOutcome, Came)> = vec![
            (
                "canceled proves it",
                CancelOutcome::Canceled {
                    charge_id: GatewayChargeId::from_gateway("pi_1"),
                },
                Came::Settled(NeedsReview, LookupFoundNothingRetriesExhausted),
            ),
            (
                "succeeded is adopted",
                CancelOutcome::Succeeded {
                    charge_id: GatewayChargeId::from_gateway("pi_1"),
                },
                Came::Settled(Succeeded, LookupFoundCharge),
            ),
            (
                "processing is followed",
                CancelOutcome::Processing {
                    charge_id: GatewayChargeId::from_gateway("pi_1"),
                },
                Came::Again(NOW + 30 * MINUTE, FailedLookups::Restart),
            ),
            (
                "no proof: looked up again along the schedule",
                CancelOutcome::Unproven {
                    reason: "HTTP 500".into(),
                },
                Came::Again(NOW + MINUTE, FailedLookups::Count),
            ),
        ];
        let policy = policy();
        for (row, cancel, expected) in rows {
            let decision = policy.after_cancel(&attempt(), "nothing charged", cancel, NOW);
            assert_eq!(came(&decision), expected, "{row}: {decision:?}");
        }
        let Decision::Settle {
            settlement: Settlement::NeedsReview { reason },
            ..
        } = policy.after_cancel(
            &attempt(),
            "nothing charged",
            CancelOutcome::Canceled {
                charge_id: GatewayChargeId::from_gateway("pi_1"),
            },
            NOW,
        )
        else {
            panic!()
        };
        assert!(reason.starts_with("nothing charged; PaymentIntent pi_1 was cancelled"));
    }

    #[test]
    fn only_a_re_send_or_a_not_charged_for_a_person_needs_a_proof() {
        let retry = Decision::Settle {
            settlement: Settlement::Retry {
                next_run_at: NOW,
                reason: "r".into(),
                refund_try: false,
            },
            cause: LookupFoundNothing,
        };
        let exhausted = Decision::Settle {
            settlement: Settlement::NeedsReview { reason: "r".into() },
            cause: LookupFoundNothingRetriesExhausted,
        };
        let outside = Decision::Settle {
            settlement: Settlement::NeedsReview { reason: "r".into() },
            cause: LookupFoundNothingOutsideKeyWindow,
        };
        let again = Decision::CheckAgain {
            at: NOW,
            reason: "r".into(),
            checks: FailedLookups::Count,
        };
        assert_eq!(retry.proof(), Some(Proof::NextConfirmKey));
        assert_eq!(
            exhausted.proof(),
            Some(Proof::Cancel { reason: "r".into() })
        );
        assert_eq!(outside.proof(), None);
        assert_eq!(again.proof(), None);
    }

    #[test]
    fn an_unstorable_answer_counts_like_a_failed_lookup() {
        let policy = policy();
        assert_eq!(
            came(&policy.unstored(&attempt(), "value too long", "succeeded", NOW)),
            Came::Again(NOW + MINUTE, FailedLookups::Count)
        );
        let used_up = HeldAttempt {
            reconcile_checks: 2,
            ..attempt()
        };
        let decision = policy.unstored(&used_up, "value too long", "succeeded", NOW);
        assert_eq!(
            came(&decision),
            Came::Settled(NeedsReview, ReconciliationScheduleExhausted)
        );
        assert!(decision
            .describe()
            .contains("the gateway answered: succeeded"));
    }

    #[test]
    fn a_recheck_of_needs_review_writes_only_a_found_charge() {
        let succeeded = Settlement::Succeeded {
            charge_id: GatewayChargeId::from_gateway("ch_1"),
        };
        let retry = Settlement::Retry {
            next_run_at: NOW,
            reason: "r".into(),
            refund_try: false,
        };
        for (before, settlement, may) in [
            (AttemptStatus::Unknown, &retry, true),
            (AttemptStatus::Unknown, &succeeded, true),
            (AttemptStatus::NeedsReview, &succeeded, true),
            (AttemptStatus::NeedsReview, &retry, false),
        ] {
            assert_eq!(
                claim_may_write(before, settlement),
                may,
                "{before} {settlement:?}"
            );
        }
    }

    #[test]
    fn the_deciding_charge_is_a_success_over_declines() {
        let declined = charge("declined");
        let mut succeeded = charge("succeeded");
        succeeded.id = GatewayChargeId::from_gateway("ch_2");
        let found = LookupOutcome::Found(vec![declined.clone(), succeeded]);
        assert_eq!(found_charge(&found).map(|c| c.id.as_str()), Some("ch_2"));
        let only_declined = LookupOutcome::Found(vec![declined]);
        assert_eq!(
            found_charge(&only_declined).map(|c| c.id.as_str()),
            Some("ch_1")
        );
        assert_eq!(found_charge(&LookupOutcome::Found(Vec::new())), None);
        assert_eq!(
            found_charge(&LookupOutcome::EndpointFault { status: 404 }),
            None
        );
    }
}
