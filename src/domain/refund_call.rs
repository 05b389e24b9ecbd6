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

use super::call::GatewayCall;
use super::lookup::{
    gateway_text, unstorable_gateway_id, FailedLookups, LookupSchedule, ResendLimits,
    StillProcessing,
};
use super::outcome::RetryAfter;
use super::refund::{HeldRefund, RefundStatus};
use super::retry::later;
use super::{GatewayCallRecord, GatewayChargeId, RefundId};

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
    /// At the gateway, not finished: looked up at `next`; the count of failed lookups
    /// starts again (the gateway answered).
    Processing {
        gateway_refund_id: String,
        next: OffsetDateTime,
    },
    /// Looked up at `next`; `checks` says what this does to the count of failed lookups.
    Unknown {
        reason: String,
        next: OffsetDateTime,
        checks: FailedLookups,
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

    /// What this move does to the refund's count of failed lookups (`failed_lookups`).
    pub fn failed_lookups(&self) -> FailedLookups {
        match self {
            Self::Unknown { checks, .. } => *checks,
            Self::Processing { .. } => FailedLookups::Restart,
            _ => FailedLookups::Keep,
        }
    }
}

/// The timings and limits a refund's moves are decided with: the executor's retry delays,
/// and the lookup schedule and resend limits every kind of work shares (`domain::lookup`).
#[derive(Debug, Clone)]
pub struct RefundPolicy {
    pub retry_min_delay: Duration,
    pub retry_max_delay: Duration,
    pub in_progress_delay: Duration,
    /// `executor.max_tries`, the maximum age and the key window: for every resend.
    pub limits: ResendLimits,
    /// How long the gateway may take to finish a request it was sent.
    pub max_processing_time: Duration,
    /// `reconciler.schedule` for failed lookups; `reconciler.processing_schedule` and
    /// `processing_max` for a refund still processing, measured in time since its last send.
    pub lookups: LookupSchedule,
}

impl RefundPolicy {
    fn retry_delay(&self, tries: i32) -> Duration {
        super::retry::backoff(
            self.retry_min_delay,
            self.retry_max_delay,
            u32::try_from(tries.max(1)).unwrap_or(u32::MAX),
        )
    }
}

/// What a person can do with a refund in review whose gateway refund is unclear.
fn resolve_advice(held: &HeldRefund) -> String {
    format!(
        "find it at the gateway (key {}) and settle it with `onecharge refunds resolve {} --as succeeded|failed --reason …` \
         (failed gives its amount back for a new refund_id)",
        held.idempotency_key, held.refund_id
    )
}

/// After the refund request: where `held` goes on `outcome`, at the database's `now`.
pub fn after_request(
    held: &HeldRefund,
    outcome: &RefundOutcome,
    policy: &RefundPolicy,
    now: OffsetDateTime,
) -> RefundMove {
    match outcome {
        RefundOutcome::Answered(refund) => adopt(held, refund, policy, now),
        RefundOutcome::RetryLater { after, reason } => {
            let (delay, count_try) = match after {
                RetryAfter::InProgress => (policy.in_progress_delay, false),
                RetryAfter::Delay(delay) => (*delay, true),
                RetryAfter::Backoff => (policy.retry_delay(held.tries), true),
            };
            resend_or_unknown(held, reason, later(now, delay), count_try, policy, now)
        }
        RefundOutcome::NotSent { reason } => resend_or_unknown(
            held,
            reason,
            later(now, policy.retry_delay(held.tries)),
            true,
            policy,
            now,
        ),
        RefundOutcome::ConfigurationFault { status } => resend_or_unknown(
            held,
            &match status {
                403 => format!(
                    "HTTP 403: {}; nothing was processed",
                    super::outcome::refused_key_words(*status)
                ),
                _ => format!("HTTP {status}: onecharge's gateway credentials or gateway_url are wrong; nothing was processed"),
            },
            later(now, policy.in_progress_delay.max(Duration::from_secs(30))),
            false,
            policy,
            now,
        ),
        RefundOutcome::Refused { reason } => RefundMove::Failed {
            gateway_refund_id: None,
            reason: gateway_text(reason, 1000),
        },
        RefundOutcome::NeedsReview { reason } => RefundMove::NeedsReview {
            reason: gateway_text(reason, 1000),
        },
        RefundOutcome::Ambiguous { reason } => RefundMove::Unknown {
            reason: gateway_text(reason, 1000),
            next: later(now, policy.lookups.first_delay()),
            checks: FailedLookups::Keep,
        },
    }
}

/// A request that proved nothing was done is sent again under the same key, within the
/// resend limits every kind of work shares: past its tries (a counted resend), its maximum
/// age or its key window (any resend, a `409` and a configuration fault included) it cannot
/// be told from one that might still run at the gateway, so a lookup decides.
fn resend_or_unknown(
    held: &HeldRefund,
    reason: &str,
    next: OffsetDateTime,
    count_try: bool,
    policy: &RefundPolicy,
    now: OffsetDateTime,
) -> RefundMove {
    let reason = gateway_text(reason, 900);
    let first_sent = held.first_sent_at.unwrap_or(now);
    if let Some(closed) =
        policy
            .limits
            .closed(held.tries, count_try, held.created_at, first_sent, next)
    {
        return RefundMove::Unknown {
            reason: format!("{}; the last: {reason}", closed.reason()),
            next: later(now, policy.lookups.first_delay()),
            checks: FailedLookups::Keep,
        };
    }
    RefundMove::Pending {
        reason,
        next,
        count_try,
    }
}

/// The gateway's refund, adopted as this refund's state; an id the database would refuse
/// is never adopted (a person is told why).
fn adopt(
    held: &HeldRefund,
    refund: &GatewayRefund,
    policy: &RefundPolicy,
    now: OffsetDateTime,
) -> RefundMove {
    if let Some(why) = unstorable_gateway_id(&refund.id) {
        return RefundMove::NeedsReview {
            reason: format!(
                "{why} for a refund it calls {}: onecharge cannot keep that answer; {}",
                gateway_text(refund.status.as_str(), 40),
                resolve_advice(held)
            ),
        };
    }
    match &refund.status {
        GatewayRefundStatus::Succeeded => RefundMove::Succeeded {
            gateway_refund_id: refund.id.clone(),
        },
        GatewayRefundStatus::Failed | GatewayRefundStatus::Canceled => RefundMove::Failed {
            gateway_refund_id: Some(refund.id.clone()),
            reason: gateway_text(
                &format!(
                    "the gateway's refund {} is {}{}",
                    refund.id,
                    refund.status.as_str(),
                    refund
                        .failure_reason
                        .as_deref()
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default()
                ),
                1000,
            ),
        },
        GatewayRefundStatus::Pending
        | GatewayRefundStatus::RequiresAction
        | GatewayRefundStatus::Other(_) => {
            let since = held.last_sent_at.unwrap_or(held.created_at);
            match policy.lookups.still_processing(since, now) {
                StillProcessing::TooLong => RefundMove::NeedsReview {
                    reason: format!(
                        "the gateway's refund {} is still {} {} after it was sent (reconciler.processing_max): {}",
                        refund.id,
                        gateway_text(refund.status.as_str(), 40),
                        humantime::format_duration(policy.lookups.processing_max),
                        resolve_advice(held)
                    ),
                },
                StillProcessing::LookAgain(delay) => RefundMove::Processing {
                    gateway_refund_id: refund.id.clone(),
                    next: later(now, delay),
                },
            }
        }
    }
}

/// After a lookup: where `held` (in `unknown` or `processing`) goes on what was found, at
/// the database's `now`.
pub fn after_lookup(
    held: &HeldRefund,
    lookup: &RefundLookup,
    policy: &RefundPolicy,
    now: OffsetDateTime,
) -> RefundMove {
    let found = match lookup {
        RefundLookup::Found(found) => found,
        RefundLookup::Failed { reason } => {
            return lookup_failed(held, &format!("lookup failed: {}", gateway_text(reason, 600)), policy, now)
        }
        // onecharge's configuration, not the refund's failure: asked again, not counted.
        RefundLookup::ConfigurationFault { status } => {
            return RefundMove::Unknown {
                reason: format!("lookup refused: HTTP {status}, onecharge's gateway credentials or gateway_url are wrong; not counted as a failed lookup"),
                next: later(now, policy.lookups.first_delay()),
                checks: FailedLookups::Keep,
            }
        }
    };
    let ours: Vec<&GatewayRefund> = found
        .iter()
        .filter(|r| r.refund_id == Some(held.refund_id))
        .collect();
    match ours.as_slice() {
        [] => nothing_found(held, policy, now),
        [one] => {
            let amount_differs = one
                .amount_minor
                .is_some_and(|a| a != held.money.amount_minor());
            if amount_differs {
                return RefundMove::NeedsReview {
                    reason: format!(
                        "the gateway's refund {} for this refund_id is for {} minor units, not {}: not adopted; {}",
                        gateway_text(&one.id, 255),
                        one.amount_minor.unwrap_or_default(),
                        held.money.amount_minor(),
                        resolve_advice(held)
                    ),
                };
            }
            adopt(held, one, policy, now)
        }
        several => {
            let moving: Vec<&&GatewayRefund> = several
                .iter()
                .filter(|r| {
                    !matches!(
                        r.status,
                        GatewayRefundStatus::Failed | GatewayRefundStatus::Canceled
                    )
                })
                .collect();
            match moving.as_slice() {
                // One refund moved money, the others failed: the one that moved is the answer.
                [one] => adopt(held, one, policy, now),
                [] => adopt(held, several[0], policy, now),
                _ => RefundMove::NeedsReview {
                    reason: format!(
                        "the gateway lists {} refunds that moved or may move money for this refund_id ({}): refunded more than once; \
                         cancel or recover the extra ones at the gateway, then resolve this one",
                        moving.len(),
                        gateway_text(
                            &several.iter().map(|r| r.id.as_str()).collect::<Vec<_>>().join(", "),
                            600
                        )
                    ),
                },
            }
        }
    }
}

/// No refund found for this `refund_id`. It proves "not refunded" only once the gateway
/// had its processing time since the last send; then, within the resend limits, it is sent
/// again under the same key, and otherwise a person decides.
fn nothing_found(held: &HeldRefund, policy: &RefundPolicy, now: OffsetDateTime) -> RefundMove {
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
            checks: FailedLookups::Keep,
        };
    }
    let first_sent = held.first_sent_at.unwrap_or(last_sent);
    match policy
        .limits
        .closed(held.tries, true, held.created_at, first_sent, now)
    {
        None => RefundMove::Pending {
            reason: "the gateway holds no refund for it after its processing time: sent again under the same key".into(),
            next: now,
            count_try: true,
        },
        Some(closed) => RefundMove::NeedsReview {
            reason: format!(
                "the gateway holds no refund for it and it may not be sent again ({}): nothing was refunded under key {}; \
                 resolve it as failed (`onecharge refunds resolve {} --as failed --reason …`) to give its amount back, \
                 then refund again with a new refund_id",
                closed.reason(),
                held.idempotency_key,
                held.refund_id
            ),
        },
    }
}

/// A lookup that did not answer: along `reconciler.schedule` by the refund's failed
/// lookups (never by its lookups that found it processing); used up, a person decides.
fn lookup_failed(
    held: &HeldRefund,
    reason: &str,
    policy: &RefundPolicy,
    now: OffsetDateTime,
) -> RefundMove {
    match policy.lookups.after_failure(held.failed_lookups) {
        Some(delay) => RefundMove::Unknown {
            reason: format!("failure {}: {reason}", held.failed_lookups + 1),
            next: later(now, delay),
            checks: FailedLookups::Count,
        },
        None => RefundMove::NeedsReview {
            reason: format!(
                "the gateway did not answer {} lookups in a row over the whole reconciliation schedule; the last: {reason}; {}",
                held.failed_lookups + 1,
                resolve_advice(held)
            ),
        },
    }
}

/// A move the database refused to store (`why`; the gateway had answered `answer`):
/// counted like a failed lookup, and once the schedule is used up a person decides, told
/// why and what the gateway answered. So no answer, however malformed, keeps a refund
/// cycling.
pub fn unstored(
    held: &HeldRefund,
    why: &str,
    answer: &str,
    policy: &RefundPolicy,
    now: OffsetDateTime,
) -> RefundMove {
    lookup_failed(
        held,
        &format!(
            "the gateway's answer could not be stored: {}; the gateway answered: {}",
            gateway_text(why, 300),
            gateway_text(answer, 300)
        ),
        policy,
        now,
    )
}

/// What a person established about a refund (`refunds resolve --as`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundResolution {
    /// The gateway refunded it.
    Succeeded,
    /// The gateway did not refund it (or its refund failed): the amount goes back to the
    /// charge, for a refund under a new `refund_id`.
    Failed,
}

/// A person's resolution of `held` (in `needs_review`, or `succeeded` when the gateway
/// later failed it), checked against what the gateway shows for its `refund_id` now:
/// the move to write, or why the gateway's word refuses it. Check, then act: nothing a
/// person says overrules what the gateway holds.
pub fn resolve(
    held: &HeldRefund,
    resolution: RefundResolution,
    lookup: &RefundLookup,
    reason: &str,
) -> Result<RefundMove, String> {
    let found = match lookup {
        RefundLookup::Found(found) => found,
        RefundLookup::Failed { reason } => {
            return Err(format!(
                "the gateway could not be read ({}): nothing was changed; try again",
                gateway_text(reason, 300)
            ))
        }
        RefundLookup::ConfigurationFault { status } => {
            return Err(format!(
                "the gateway refused onecharge's lookup (HTTP {status}: credentials or gateway_url): nothing was changed"
            ))
        }
    };
    let ours: Vec<&GatewayRefund> = found
        .iter()
        .filter(|r| r.refund_id == Some(held.refund_id))
        .collect();
    let moved: Vec<&&GatewayRefund> = ours
        .iter()
        .filter(|r| {
            !matches!(
                r.status,
                GatewayRefundStatus::Failed | GatewayRefundStatus::Canceled
            )
        })
        .collect();
    let ids = |list: &[&&GatewayRefund]| {
        gateway_text(
            &list
                .iter()
                .map(|r| format!("{} ({})", r.id, r.status.as_str()))
                .collect::<Vec<_>>()
                .join(", "),
            400,
        )
    };
    let said = gateway_text(reason, 900);
    match (resolution, moved.as_slice()) {
        (RefundResolution::Succeeded, [one]) if one.status == GatewayRefundStatus::Succeeded => {
            if held.status == RefundStatus::Succeeded {
                return Err("it is already succeeded".into());
            }
            match unstorable_gateway_id(&one.id) {
                Some(why) => Err(format!("{why}: onecharge cannot record it")),
                None => Ok(RefundMove::Succeeded {
                    gateway_refund_id: one.id.clone(),
                }),
            }
        }
        (RefundResolution::Succeeded, [_]) => Err(format!(
            "the gateway's refund {} has not succeeded yet: wait until it settles (the refund is looked up again once resolved as neither)",
            ids(&moved)
        )),
        (RefundResolution::Succeeded, []) => Err(if ours.is_empty() {
            "the gateway holds no refund for this refund_id: nothing was refunded; resolve it as failed".to_owned()
        } else {
            format!(
                "the gateway's refund {} did not move money: resolve it as failed",
                ids(&ours.iter().collect::<Vec<_>>())
            )
        }),
        (_, [_, _, ..]) => Err(format!(
            "the gateway holds {} refunds that moved or may move money for this refund_id ({}): recover the extra ones at the gateway first",
            moved.len(),
            ids(&moved)
        )),
        (RefundResolution::Failed, [one]) => Err(format!(
            "the gateway's refund {} is {}: money moved or may still move, so it cannot be called failed",
            gateway_text(&one.id, 255),
            gateway_text(one.status.as_str(), 40)
        )),
        (RefundResolution::Failed, []) => Ok(RefundMove::Failed {
            gateway_refund_id: ours
                .first()
                .filter(|r| unstorable_gateway_id(&r.id).is_none())
                .map(|r| r.id.clone()),
            reason: match ours.first() {
                Some(failed) => format!(
                    "resolved failed by a person: the gateway's refund {} is {}; {said}",
                    gateway_text(&failed.id, 255),
                    failed.status.as_str()
                ),
                None => format!(
                    "resolved failed by a person: the gateway holds no refund for it; {said}"
                ),
            },
        }),
    }
}

/// The evidence of one refund call, on its attempt's timeline: started at `started_at` by
/// the database's clock, finished that plus the call's own elapsed time.
pub fn evidence<T>(
    held: &HeldRefund,
    call: &GatewayCall<T>,
    outcome: &str,
    started_at: OffsetDateTime,
    next: &RefundMove,
) -> GatewayCallRecord {
    let gateway_refund_id = match next {
        RefundMove::Succeeded { gateway_refund_id }
        | RefundMove::Processing {
            gateway_refund_id, ..
        } => Some(gateway_refund_id.clone()),
        RefundMove::Failed {
            gateway_refund_id, ..
        } => gateway_refund_id.clone(),
        _ => None,
    };
    GatewayCallRecord {
        payment_attempt_id: held.payment_attempt_id,
        operation: call.operation,
        idempotency_key: held.idempotency_key.clone(),
        try_number: held.tries,
        lease_token: Some(held.lease_token),
        started_at,
        finished_at: started_at + call.elapsed,
        http_status: call.http_status,
        outcome: outcome.to_owned(),
        // `gateway_calls` has one id column: a refund call's is the refund's id.
        gateway_charge_id: gateway_refund_id.map(GatewayChargeId::from_gateway),
        error: call.error.as_deref().map(|e| gateway_text(e, 1000)),
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
            limits: ResendLimits {
                max_tries: 3,
                window: crate::domain::RetryWindow::new(
                    Duration::from_secs(24 * 3600),
                    Duration::from_secs(3600),
                    Duration::from_secs(72 * 3600),
                ),
            },
            max_processing_time: Duration::from_secs(600),
            lookups: LookupSchedule {
                schedule: vec![Duration::from_secs(60), Duration::from_secs(300)],
                processing_schedule: vec![Duration::from_secs(60), Duration::from_secs(3600)],
                processing_max: Duration::from_secs(7 * 24 * 3600),
            },
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
            lease_token: crate::domain::LeaseToken::from(1),
            tries: 1,
            lookups: 0,
            failed_lookups: 0,
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
                &p,
                h.now
            )
            .status(),
            RefundStatus::Succeeded
        );
        for processing in ["pending", "requires_action", "something_new"] {
            assert_eq!(
                after_request(
                    &h,
                    &RefundOutcome::Answered(Box::new(refund(&h, processing))),
                    &p,
                    h.now
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
                    &p,
                    h.now
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
            after_request(&h, &ambiguous, &p, h.now).status(),
            RefundStatus::Unknown
        );
        let in_progress = RefundOutcome::RetryLater {
            after: RetryAfter::InProgress,
            reason: "409".into(),
        };
        assert!(matches!(
            after_request(&h, &in_progress, &p, h.now),
            RefundMove::Pending {
                count_try: false,
                ..
            }
        ));
        let refused = RefundOutcome::Refused {
            reason: "amount_exceeds_charge".into(),
        };
        assert_eq!(
            after_request(&h, &refused, &p, h.now).status(),
            RefundStatus::Failed
        );
        h.tries = 3;
        let not_sent = RefundOutcome::NotSent {
            reason: "connection refused".into(),
        };
        assert_eq!(
            after_request(&h, &not_sent, &p, h.now).status(),
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
                &p,
                h.now
            ),
            RefundMove::Succeeded {
                gateway_refund_id: "re_succeeded".into()
            }
        );
        let mut twice = refund(&h, "succeeded");
        twice.id = "re_second".into();
        let found = RefundLookup::Found(vec![refund(&h, "succeeded"), twice]);
        let RefundMove::NeedsReview { reason } = after_lookup(&h, &found, &p, h.now) else {
            panic!()
        };
        assert!(reason.contains("more than once"), "{reason}");
        let mut wrong_amount = refund(&h, "succeeded");
        wrong_amount.amount_minor = Some(501);
        assert_eq!(
            after_lookup(&h, &RefundLookup::Found(vec![wrong_amount]), &p, h.now).status(),
            RefundStatus::NeedsReview
        );
    }

    #[test]
    fn nothing_found_proves_nothing_until_the_processing_time_has_passed() {
        let mut h = held();
        let p = policy();
        let empty = RefundLookup::Found(vec![other_integrations_only(&h)]);
        assert_eq!(
            after_lookup(&h, &empty, &p, h.now).status(),
            RefundStatus::Unknown
        );
        h.now = datetime!(2026-12-03 10:11 UTC);
        assert_eq!(
            after_lookup(&h, &empty, &p, h.now).status(),
            RefundStatus::Pending
        );
        h.tries = 3;
        assert_eq!(
            after_lookup(&h, &empty, &p, h.now).status(),
            RefundStatus::NeedsReview
        );
        h.tries = 1;
        h.now = datetime!(2026-12-04 10:00 UTC);
        let RefundMove::NeedsReview { reason } = after_lookup(&h, &empty, &p, h.now) else {
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
            after_lookup(&h, &failed, &p, h.now).status(),
            RefundStatus::Unknown
        );
        // Many lookups found it processing: they never use up the failures' schedule.
        h.lookups = 40;
        assert!(matches!(
            after_lookup(&h, &failed, &p, h.now),
            RefundMove::Unknown {
                checks: FailedLookups::Count,
                ..
            }
        ));
        h.failed_lookups = 2;
        let RefundMove::NeedsReview { reason } = after_lookup(&h, &failed, &p, h.now) else {
            panic!()
        };
        assert!(
            reason.contains("3 lookups in a row") && reason.contains("refunds resolve"),
            "{reason}"
        );
        // A lookup that finds it processing restarts the count.
        let pending = RefundLookup::Found(vec![refund(&h, "pending")]);
        let found = after_lookup(&h, &pending, &p, h.now);
        assert_eq!(found.status(), RefundStatus::Processing);
        assert_eq!(found.failed_lookups(), FailedLookups::Restart);
    }

    #[test]
    fn a_409_or_a_configuration_fault_is_not_resent_past_the_key_window() {
        let mut h = held();
        let p = policy();
        let in_progress = RefundOutcome::RetryLater {
            after: RetryAfter::InProgress,
            reason: "409".into(),
        };
        let fault = RefundOutcome::ConfigurationFault { status: 401 };
        h.now = datetime!(2026-12-04 09:30 UTC);
        for outcome in [&in_progress, &fault] {
            let RefundMove::Unknown { reason, .. } = after_request(&h, outcome, &p, h.now) else {
                panic!("{outcome:?} past the key window is looked up, not resent")
            };
            assert!(reason.contains("idempotency key"), "{reason}");
        }
    }

    #[test]
    fn an_id_the_database_would_refuse_goes_to_a_person_and_texts_are_cleaned() {
        let h = held();
        let p = policy();
        let mut long = refund(&h, "succeeded");
        long.id = "r".repeat(300);
        let RefundMove::NeedsReview { reason } =
            after_request(&h, &RefundOutcome::Answered(Box::new(long)), &p, h.now)
        else {
            panic!()
        };
        assert!(reason.contains("300 characters"), "{reason}");
        let mut nul = refund(&h, "failed");
        nul.failure_reason = Some("card\0closed".into());
        let RefundMove::Failed { reason, .. } =
            after_request(&h, &RefundOutcome::Answered(Box::new(nul)), &p, h.now)
        else {
            panic!()
        };
        assert!(
            !reason.contains('\0') && reason.contains("card\\u{0}closed"),
            "{reason}"
        );
    }
}
