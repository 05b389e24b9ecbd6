//! What a gateway's answer about a refund means, and where the refund goes after it: the
//! refund's side of `outcome` and `settlement`, pure, so every row is a unit test.
//!
//! The rule that keeps "at most one refund per `refund_id`" is the charge's: whenever the
//! gateway *may* have refunded and the answer does not prove what happened, the refund goes
//! to `unknown` and only a lookup settles it; only answers that prove nothing was done are
//! sent again, under the same key.
//!
//! About 650 lines, 200 of them the unit tests, one per rule: the refund's answers and
//! its moves are read together, as `outcome` and `settlement` are for a charge.

use std::time::Duration;

use time::OffsetDateTime;

use super::outcome::RetryAfter;
use super::refund::{HeldRefund, RefundStatus};
use super::retry::later;
use super::RefundId;

/// A refund's status as the gateway states it (§3 and Stripe share these words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayRefundStatus {
    Succeeded,
    /// Taken, not finished (Stripe: some debits and bank refunds take days).
    Pending,
    /// Stripe: the customer must act before the money can go back.
    RequiresAction,
    Failed,
    Canceled,
    /// Anything else: never adopted, looked up again.
    Other(String),
}

impl GatewayRefundStatus {
    pub fn parse(text: &str) -> Self {
        match text {
            "succeeded" => Self::Succeeded,
            "pending" => Self::Pending,
            "requires_action" => Self::RequiresAction,
            "failed" => Self::Failed,
            "canceled" => Self::Canceled,
            other => Self::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Pending => "pending",
            Self::RequiresAction => "requires_action",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
            Self::Other(text) => text,
        }
    }
}

/// One refund as the gateway shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayRefund {
    pub id: String,
    pub status: GatewayRefundStatus,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    /// The `refund_id` the gateway holds for it (§3: the body's; Stripe: its metadata).
    pub refund_id: Option<RefundId>,
    pub failure_reason: Option<String>,
}

/// What one refund request's answer means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundOutcome {
    /// The gateway answered with the refund (new or replayed under the key): its status says.
    Answered(Box<GatewayRefund>),
    /// Nothing was processed: send again under the same key.
    RetryLater { after: RetryAfter, reason: String },
    /// Nothing left this process, or nothing reached the gateway.
    NotSent { reason: String },
    /// The gateway refused the refund as asked (over what is left, no such charge): nothing
    /// was refunded, and sending it again cannot change that.
    Refused { reason: String },
    /// The request cannot be right (the key reused for other parameters): a person looks.
    NeedsReview { reason: String },
    /// It may have refunded and the answer does not say: the reconciler looks it up.
    Ambiguous { reason: String },
    /// onecharge's credentials or `gateway_url` are wrong: nothing was processed.
    ConfigurationFault { status: u16 },
}

impl RefundOutcome {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Answered(refund) => match refund.status {
                GatewayRefundStatus::Succeeded => "succeeded",
                GatewayRefundStatus::Failed | GatewayRefundStatus::Canceled => "failed",
                _ => "processing",
            },
            Self::RetryLater { .. } => "retry_later",
            Self::NotSent { .. } => "not_sent",
            Self::Refused { .. } => "refused",
            Self::NeedsReview { .. } => "needs_review",
            Self::Ambiguous { .. } => "ambiguous",
            Self::ConfigurationFault { .. } => "configuration_fault",
        }
    }
}

/// What a refund lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundLookup {
    /// The refunds the gateway holds for this refund's key (§3) or its charge (Stripe),
    /// onecharge's and others'.
    Found(Vec<GatewayRefund>),
    Failed {
        reason: String,
    },
    ConfigurationFault {
        status: u16,
    },
}

impl RefundLookup {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Found(_) => "found",
            Self::Failed { .. } => "failed",
            Self::ConfigurationFault { .. } => "configuration_fault",
        }
    }
}

/// Where a refund goes next, with what is written with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundMove {
    Succeeded {
        gateway_refund_id: String,
    },
    Failed {
        gateway_refund_id: Option<String>,
        reason: String,
    },
    /// At the gateway, not finished: looked up at `next`.
    Processing {
        gateway_refund_id: String,
        next: OffsetDateTime,
    },
    Unknown {
        reason: String,
        next: OffsetDateTime,
    },
    /// Sent again under the same key at `next`; `count_try` false gives the try back.
    Pending {
        reason: String,
        next: OffsetDateTime,
        count_try: bool,
    },
    NeedsReview {
        reason: String,
    },
}

impl RefundMove {
    pub fn status(&self) -> RefundStatus {
        match self {
            Self::Succeeded { .. } => RefundStatus::Succeeded,
            Self::Failed { .. } => RefundStatus::Failed,
            Self::Processing { .. } => RefundStatus::Processing,
            Self::Unknown { .. } => RefundStatus::Unknown,
            Self::Pending { .. } => RefundStatus::Pending,
            Self::NeedsReview { .. } => RefundStatus::NeedsReview,
        }
    }
}

/// The timings a refund's moves are decided with (from `executor.*`, `reconciler.*` and
/// the gateway settings).
#[derive(Debug, Clone)]
pub struct RefundPolicy {
    pub retry_min_delay: Duration,
    pub retry_max_delay: Duration,
    pub in_progress_delay: Duration,
    pub max_tries: i32,
    /// How long the gateway may take to finish a request it was sent.
    pub max_processing_time: Duration,
    /// How long the gateway keeps an idempotency key, less the margin.
    pub key_window: Duration,
    /// The reconciler's lookup delays; a failed lookup past the last goes to a person.
    pub schedule: Vec<Duration>,
    /// Delays between lookups of a refund the gateway is still processing (then every
    /// last delay), until `processing_max` has passed since its last send.
    pub processing_schedule: Vec<Duration>,
    pub processing_max: Duration,
}

impl RefundPolicy {
    fn retry_delay(&self, tries: i32) -> Duration {
        super::retry::backoff(
            self.retry_min_delay,
            self.retry_max_delay,
            u32::try_from(tries.max(1)).unwrap_or(u32::MAX),
        )
    }

    fn lookup_delay(&self, lookups: i32) -> Option<Duration> {
        self.schedule
            .get(usize::try_from(lookups).unwrap_or(usize::MAX))
            .copied()
    }
}

/// After the refund request: where `held` goes on `outcome`.
pub fn after_request(
    held: &HeldRefund,
    outcome: &RefundOutcome,
    policy: &RefundPolicy,
) -> RefundMove {
    let now = held.now;
    match outcome {
        RefundOutcome::Answered(refund) => adopt(held, refund, policy),
        RefundOutcome::RetryLater { after, reason } => {
            let (delay, count_try) = match after {
                RetryAfter::InProgress => (policy.in_progress_delay, false),
                RetryAfter::Delay(delay) => (*delay, true),
                RetryAfter::Backoff => (policy.retry_delay(held.tries), true),
            };
            resend_or_unknown(held, reason, later(now, delay), count_try, policy)
        }
        RefundOutcome::NotSent { reason } => resend_or_unknown(
            held,
            reason,
            later(now, policy.retry_delay(held.tries)),
            true,
            policy,
        ),
        RefundOutcome::ConfigurationFault { status } => RefundMove::Pending {
            reason: match status {
                403 => format!("HTTP 403: {}; nothing was processed", super::outcome::refused_key_words(*status)),
                _ => format!("HTTP {status}: onecharge's gateway credentials or gateway_url are wrong; nothing was processed"),
            },
            next: later(now, policy.in_progress_delay.max(Duration::from_secs(30))),
            count_try: false,
        },
        RefundOutcome::Refused { reason } => RefundMove::Failed {
            gateway_refund_id: None,
            reason: reason.clone(),
        },
        RefundOutcome::NeedsReview { reason } => RefundMove::NeedsReview {
            reason: reason.clone(),
        },
        RefundOutcome::Ambiguous { reason } => RefundMove::Unknown {
            reason: reason.clone(),
            next: later(now, policy.lookup_delay(0).unwrap_or(Duration::from_secs(60))),
        },
    }
}

/// A request that proved nothing was done is sent again under the same key, while tries
/// are left; past them, it cannot be told from one that might still run at the gateway, so
/// a lookup decides.
fn resend_or_unknown(
    held: &HeldRefund,
    reason: &str,
    next: OffsetDateTime,
    count_try: bool,
    policy: &RefundPolicy,
) -> RefundMove {
    if count_try && held.tries >= policy.max_tries {
        return RefundMove::Unknown {
            reason: format!("{} tries used up; the last: {reason}", held.tries),
            next,
        };
    }
    RefundMove::Pending {
        reason: reason.to_owned(),
        next,
        count_try,
    }
}

/// The gateway's refund, adopted as this refund's state.
fn adopt(held: &HeldRefund, refund: &GatewayRefund, policy: &RefundPolicy) -> RefundMove {
    match &refund.status {
        GatewayRefundStatus::Succeeded => RefundMove::Succeeded {
            gateway_refund_id: refund.id.clone(),
        },
        GatewayRefundStatus::Failed | GatewayRefundStatus::Canceled => RefundMove::Failed {
            gateway_refund_id: Some(refund.id.clone()),
            reason: format!(
                "the gateway's refund {} is {}{}",
                refund.id,
                refund.status.as_str(),
                refund
                    .failure_reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
        },
        GatewayRefundStatus::Pending
        | GatewayRefundStatus::RequiresAction
        | GatewayRefundStatus::Other(_) => {
            let since = held.last_sent_at.unwrap_or(held.created_at);
            if held.now >= later(since, policy.processing_max) {
                return RefundMove::NeedsReview {
                    reason: format!(
                        "the gateway's refund {} is still {} {} after it was sent: a person follows it up at the gateway",
                        refund.id,
                        refund.status.as_str(),
                        humantime::format_duration(policy.processing_max)
                    ),
                };
            }
            let step = usize::try_from(held.lookups).unwrap_or(usize::MAX);
            let delay = policy
                .processing_schedule
                .get(step)
                .or(policy.processing_schedule.last())
                .copied()
                .unwrap_or(Duration::from_secs(3600));
            RefundMove::Processing {
                gateway_refund_id: refund.id.clone(),
                next: later(held.now, delay),
            }
        }
    }
}

/// After a lookup: where `held` (in `unknown` or `processing`) goes on what was found.
pub fn after_lookup(held: &HeldRefund, lookup: &RefundLookup, policy: &RefundPolicy) -> RefundMove {
    let found = match lookup {
        RefundLookup::Found(found) => found,
        RefundLookup::Failed { reason } => return lookup_failed(held, reason, policy),
        RefundLookup::ConfigurationFault { status } => {
            return lookup_failed(
                held,
                &format!("HTTP {status}: onecharge's gateway credentials or gateway_url are wrong"),
                policy,
            )
        }
    };
    let ours: Vec<&GatewayRefund> = found
        .iter()
        .filter(|r| r.refund_id == Some(held.refund_id))
        .collect();
    match ours.as_slice() {
        [] => nothing_found(held, policy),
        [one] => {
            let amount_differs = one
                .amount_minor
                .is_some_and(|a| a != held.money.amount_minor());
            if amount_differs {
                return RefundMove::NeedsReview {
                    reason: format!(
                        "the gateway's refund {} for this refund_id is for {} minor units, not {}: not adopted",
                        one.id,
                        one.amount_minor.unwrap_or_default(),
                        held.money.amount_minor()
                    ),
                };
            }
            adopt(held, one, policy)
        }
        several => {
            let moving = several
                .iter()
                .filter(|r| {
                    !matches!(
                        r.status,
                        GatewayRefundStatus::Failed | GatewayRefundStatus::Canceled
                    )
                })
                .count();
            if moving <= 1 {
                // One refund moved money, the others failed: the one that moved is the answer.
                if let Some(one) = several.iter().find(|r| {
                    !matches!(
                        r.status,
                        GatewayRefundStatus::Failed | GatewayRefundStatus::Canceled
                    )
                }) {
                    return adopt(held, one, policy);
                }
                return adopt(held, several[0], policy);
            }
            RefundMove::NeedsReview {
                reason: format!(
                    "the gateway lists {moving} refunds that moved or may move money for this refund_id ({}): refunded more than once",
                    several.iter().map(|r| r.id.as_str()).collect::<Vec<_>>().join(", ")
                ),
            }
        }
    }
}

/// No refund found for this `refund_id`. It proves "not refunded" only once the gateway
/// had its processing time since the last send; then, inside the key window with tries
/// left, it is sent again under the same key, and otherwise a person decides.
fn nothing_found(held: &HeldRefund, policy: &RefundPolicy) -> RefundMove {
    let now = held.now;
    let Some(last_sent) = held.last_sent_at else {
        return RefundMove::Pending {
            reason: "never sent, and the gateway holds no refund for it".into(),
            next: now,
            count_try: false,
        };
    };
    let settled_by = later(last_sent, policy.max_processing_time);
    if now < settled_by {
        return RefundMove::Unknown {
            reason: "no refund found yet; the gateway may still be processing the last send".into(),
            next: settled_by,
        };
    }
    let first_sent = held.first_sent_at.unwrap_or(last_sent);
    let window_open = now < later(first_sent, policy.key_window);
    if window_open && held.tries < policy.max_tries {
        return RefundMove::Pending {
            reason: "the gateway holds no refund for it after its processing time: sent again under the same key".into(),
            next: now,
            count_try: true,
        };
    }
    RefundMove::NeedsReview {
        reason: if window_open {
            format!(
                "the gateway holds no refund for it, and its {} tries are used up: nothing was refunded; refund again with a new refund_id or close it",
                held.tries
            )
        } else {
            "the gateway holds no refund for it and its key window has closed: nothing was refunded; refund again with a new refund_id or close it".into()
        },
    }
}

fn lookup_failed(held: &HeldRefund, reason: &str, policy: &RefundPolicy) -> RefundMove {
    match policy.lookup_delay(held.lookups) {
        Some(delay) => RefundMove::Unknown {
            reason: format!("lookup failed: {reason}"),
            next: later(held.now, delay),
        },
        None => RefundMove::NeedsReview {
            reason: format!(
                "the gateway did not answer {} lookups about this refund; the last: {reason}",
                held.lookups + 1
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::GatewayChargeId;
    use crate::domain::{IdempotencyKey, Money, PaymentAttemptId};
    use time::macros::datetime;

    fn policy() -> RefundPolicy {
        RefundPolicy {
            retry_min_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(300),
            in_progress_delay: Duration::from_secs(2),
            max_tries: 3,
            max_processing_time: Duration::from_secs(600),
            key_window: Duration::from_secs(23 * 3600),
            schedule: vec![Duration::from_secs(60), Duration::from_secs(300)],
            processing_schedule: vec![Duration::from_secs(60), Duration::from_secs(3600)],
            processing_max: Duration::from_secs(7 * 24 * 3600),
        }
    }

    fn held() -> HeldRefund {
        let refund_id = RefundId::random();
        HeldRefund {
            refund_id,
            payment_attempt_id: PaymentAttemptId::random(),
            idempotency_key: IdempotencyKey::for_refund(refund_id),
            money: Money::of(500, "EUR").unwrap(),
            reason: "returned".into(),
            metadata: Default::default(),
            gateway_charge_id: GatewayChargeId::from_gateway("ch_1"),
            gateway_refund_id: None,
            status: RefundStatus::InFlight,
            lease_token: 1,
            tries: 1,
            lookups: 0,
            first_sent_at: Some(datetime!(2026-12-03 10:00 UTC)),
            last_sent_at: Some(datetime!(2026-12-03 10:00 UTC)),
            created_at: datetime!(2026-12-03 10:00 UTC),
            now: datetime!(2026-12-03 10:00:01 UTC),
        }
    }

    fn refund(held: &HeldRefund, status: &str) -> GatewayRefund {
        GatewayRefund {
            id: format!("re_{status}"),
            status: GatewayRefundStatus::parse(status),
            amount_minor: Some(held.money.amount_minor()),
            currency: Some("EUR".into()),
            refund_id: Some(held.refund_id),
            failure_reason: None,
        }
    }

    #[test]
    fn an_answered_refund_is_adopted_by_its_status() {
        let h = held();
        let p = policy();
        assert_eq!(
            after_request(
                &h,
                &RefundOutcome::Answered(Box::new(refund(&h, "succeeded"))),
                &p
            )
            .status(),
            RefundStatus::Succeeded
        );
        for processing in ["pending", "requires_action", "something_new"] {
            assert_eq!(
                after_request(
                    &h,
                    &RefundOutcome::Answered(Box::new(refund(&h, processing))),
                    &p
                )
                .status(),
                RefundStatus::Processing,
                "{processing}"
            );
        }
        for failed in ["failed", "canceled"] {
            assert_eq!(
                after_request(
                    &h,
                    &RefundOutcome::Answered(Box::new(refund(&h, failed))),
                    &p
                )
                .status(),
                RefundStatus::Failed
            );
        }
    }

    #[test]
    fn only_answers_proving_nothing_was_done_are_sent_again() {
        let mut h = held();
        let p = policy();
        let ambiguous = RefundOutcome::Ambiguous {
            reason: "HTTP 503".into(),
        };
        assert_eq!(
            after_request(&h, &ambiguous, &p).status(),
            RefundStatus::Unknown
        );
        let in_progress = RefundOutcome::RetryLater {
            after: RetryAfter::InProgress,
            reason: "409".into(),
        };
        assert!(matches!(
            after_request(&h, &in_progress, &p),
            RefundMove::Pending {
                count_try: false,
                ..
            }
        ));
        let refused = RefundOutcome::Refused {
            reason: "amount_exceeds_charge".into(),
        };
        assert_eq!(
            after_request(&h, &refused, &p).status(),
            RefundStatus::Failed
        );
        h.tries = 3;
        let not_sent = RefundOutcome::NotSent {
            reason: "connection refused".into(),
        };
        assert_eq!(
            after_request(&h, &not_sent, &p).status(),
            RefundStatus::Unknown
        );
    }

    #[test]
    fn a_lookup_adopts_only_this_refunds_own_and_never_two() {
        let h = held();
        let p = policy();
        let mut other = refund(&h, "succeeded");
        other.refund_id = None;
        other.id = "re_dashboard".into();
        assert_eq!(
            after_lookup(
                &h,
                &RefundLookup::Found(vec![other.clone(), refund(&h, "succeeded")]),
                &p
            ),
            RefundMove::Succeeded {
                gateway_refund_id: "re_succeeded".into()
            }
        );
        let mut twice = refund(&h, "succeeded");
        twice.id = "re_second".into();
        let found = RefundLookup::Found(vec![refund(&h, "succeeded"), twice]);
        let RefundMove::NeedsReview { reason } = after_lookup(&h, &found, &p) else {
            panic!()
        };
        assert!(reason.contains("more than once"), "{reason}");
        let mut wrong_amount = refund(&h, "succeeded");
        wrong_amount.amount_minor = Some(501);
        assert_eq!(
            after_lookup(&h, &RefundLookup::Found(vec![wrong_amount]), &p).status(),
            RefundStatus::NeedsReview
        );
    }

    #[test]
    fn nothing_found_proves_nothing_until_the_processing_time_has_passed() {
        let mut h = held();
        let p = policy();
        let empty = RefundLookup::Found(vec![other_integrations_only(&h)]);
        assert_eq!(after_lookup(&h, &empty, &p).status(), RefundStatus::Unknown);
        h.now = datetime!(2026-12-03 10:11 UTC);
        assert_eq!(after_lookup(&h, &empty, &p).status(), RefundStatus::Pending);
        h.tries = 3;
        assert_eq!(
            after_lookup(&h, &empty, &p).status(),
            RefundStatus::NeedsReview
        );
        h.tries = 1;
        h.now = datetime!(2026-12-04 10:00 UTC);
        let RefundMove::NeedsReview { reason } = after_lookup(&h, &empty, &p) else {
            panic!()
        };
        assert!(reason.contains("key window"), "{reason}");
    }

    fn other_integrations_only(h: &HeldRefund) -> GatewayRefund {
        let mut r = refund(h, "succeeded");
        r.refund_id = Some(RefundId::random());
        r
    }

    #[test]
    fn failed_lookups_follow_the_schedule_then_go_to_a_person() {
        let mut h = held();
        let p = policy();
        let failed = RefundLookup::Failed {
            reason: "HTTP 500".into(),
        };
        assert_eq!(
            after_lookup(&h, &failed, &p).status(),
            RefundStatus::Unknown
        );
        h.lookups = 2;
        let RefundMove::NeedsReview { reason } = after_lookup(&h, &failed, &p) else {
            panic!()
        };
        assert!(reason.contains("3 lookups"), "{reason}");
    }
}
