//! What the demo published, to judge the outcome against (`super::verdict`): the counts of
//! each kind of message, the valid attempts and the cases left for a person on purpose.

use std::collections::HashMap;

use onecharge::domain::PaymentAttemptId;

use super::refunds::PublishedRefund;

/// What the demo published, to check the outcome against.
#[derive(Debug, Default)]
pub(super) struct Published {
    pub(super) messages: usize,
    pub(super) producer_retries: usize,
    pub(super) business_duplicates: usize,
    pub(super) conflicts: usize,
    pub(super) invalid: usize,
    /// Every valid attempt, with its payment method.
    pub(super) attempts: HashMap<PaymentAttemptId, String>,
    /// The attempts published to be left for a person ([`ReviewCase`]), each with its case.
    pub(super) for_review: Vec<(PaymentAttemptId, ReviewCase)>,
    /// The refunds asked for once the charges settled.
    pub(super) refunds: Vec<PublishedRefund>,
}

/// A case the gateway leaves for a person, which the demo makes on purpose after the main
/// run so that the console's review queue shows what it is for. Each goes through the
/// whole pipeline like any command; only the gateway is told what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReviewCase {
    /// The gateway answers 400 `invalid_request` to a valid charge.
    GatewayRejected,
    /// Another system already used the attempt's idempotency key with other parameters:
    /// the gateway answers 422 `idempotency_key_reused`.
    ParameterMismatch,
    /// Every send fails with a 500 and every lookup finds nothing; once the attempt is past
    /// its retry limits and the last send past the gateway's processing time, only a person
    /// can say what to do with it.
    NothingFoundPastProcessingTime,
}

impl Published {
    /// The dead letters the run must end with: every conflict and invalid command, and
    /// every refund onecharge must refuse (dead-lettered after the fact, contract §2.5).
    pub(super) fn expected_dead_letters(&self) -> u64 {
        let refused = self.refunds.iter().filter(|r| r.case.refused()).count();
        (self.conflicts + self.invalid + refused) as u64
    }

    /// The cases left for a person, in words, comma-separated.
    pub(super) fn describe_review_cases(&self) -> String {
        describe_all(self.for_review.iter().map(|(_, case)| *case))
    }
}

/// `cases` in words, comma-separated.
pub(super) fn describe_all(cases: impl Iterator<Item = ReviewCase>) -> String {
    cases
        .map(ReviewCase::describe)
        .collect::<Vec<_>>()
        .join(", ")
}

impl ReviewCase {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Self::GatewayRejected => "a gateway 400",
            Self::ParameterMismatch => "a parameter mismatch under the key",
            Self::NothingFoundPastProcessingTime => {
                "a lookup that found nothing past the processing time"
            }
        }
    }
}
