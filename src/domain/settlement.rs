//! Where an attempt goes after a gateway answer (or a hand-over), as data: the decisions
//! the executor's retry policy and the reconciler make, and the fenced write that carries
//! one to the store. Pure: the store turns a [`SettleWrite`] into one statement, and
//! nothing here knows SQL.

use super::GatewayChargeId;
use std::fmt;

use time::OffsetDateTime;

use super::{AttemptStatus, IdempotencyKey, LeaseToken};
use crate::domain::PaymentAttemptId;

/// Where an attempt goes after its gateway call (or its hand-over, or a lookup).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Final, with the gateway's charge id.
    Succeeded { charge_id: GatewayChargeId },
    /// Final.
    Declined {
        charge_id: GatewayChargeId,
        decline_code: Option<String>,
    },
    /// A person decides; the reason is the gateway's words.
    NeedsReview { reason: String },
    /// Back to `pending`, due at `next_run_at`. `refund_try` un-counts the try (a
    /// credentials fault is onecharge's fault, not the attempt's).
    Retry {
        next_run_at: OffsetDateTime,
        reason: String,
        refund_try: bool,
    },
    /// The reconciler's: the gateway may have charged, or retries are over.
    Unknown { reason: String },
}

impl Settlement {
    /// What this settlement says, in a few words, for a reason an operator reads (e.g.
    /// `succeeded, charge ch_1`).
    pub fn describe(&self) -> String {
        match self {
            Self::Succeeded { charge_id } => format!("succeeded, charge {charge_id}"),
            Self::Declined {
                charge_id,
                decline_code,
            } => format!(
                "declined, charge {charge_id}, decline code {}",
                decline_code.as_deref().unwrap_or("none")
            ),
            Self::NeedsReview { reason } => format!("needs review: {reason}"),
            Self::Retry { reason, .. } | Self::Unknown { reason } => reason.clone(),
        }
    }

    /// The state the attempt moves to.
    pub fn status(&self) -> AttemptStatus {
        match self {
            Self::Succeeded { .. } => AttemptStatus::Succeeded,
            Self::Declined { .. } => AttemptStatus::Declined,
            Self::NeedsReview { .. } => AttemptStatus::NeedsReview,
            Self::Retry { .. } => AttemptStatus::Pending,
            Self::Unknown { .. } => AttemptStatus::Unknown,
        }
    }
}

/// Why an attempt moved, as recorded in `attempt_transitions.cause`: the causes of the
/// fenced settlements the executor and the reconciler write, and an operator's resolution.
/// (The moves written by one fixed statement — `dispatched`, `claimed_for_hand_over`,
/// `handed_back`, `lease_expired`, `stale_at_dispatch`, `command_accepted` — name their cause
/// in that statement.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransitionCause {
    /// The gateway charged.
    GatewaySucceeded,
    /// The gateway declined.
    GatewayDeclined,
    /// The gateway refused the request itself (400, 422, an unlisted answer).
    GatewayRefusedRequest,
    /// The gateway rejected onecharge's credentials; the try is refunded.
    CredentialsFault,
    /// The gateway URL answers like something else (404, 405, 3xx); the try is refunded.
    EndpointFault,
    /// The gateway may have charged (5xx, timeout, dropped connection).
    AmbiguousResult,
    /// The gateway is still processing the charge (Stripe's `processing`); the reconciler
    /// reads it until it settles.
    GatewayProcessing,
    /// No tries left.
    RetriesExhausted,
    /// Past the maximum age or the key window: no further send.
    RetryWindowClosed,
    /// Not processed; sent again later under the same key.
    RetryScheduled,
    /// The database refused the settlement for good; handed to the reconciler.
    SettlementRefused,
    /// A lookup found this attempt's charge.
    LookupFoundCharge,
    /// A lookup found several successful charges under one key.
    LookupFoundSeveralCharges,
    /// A lookup found a charge that does not match the attempt.
    LookupFoundAnotherCharge,
    /// A lookup found nothing; re-sent under the same key.
    LookupFoundNothing,
    /// A lookup found nothing, but the gateway may have forgotten the key.
    LookupFoundNothingOutsideKeyWindow,
    /// A lookup found nothing, and the attempt is past its retry limits.
    LookupFoundNothingRetriesExhausted,
    /// The reconciliation schedule is used up.
    ReconciliationScheduleExhausted,
    /// A person resolved a `needs_review` attempt (`attempts resolve`).
    OperatorResolved,
    /// A person cancelled a `pending` attempt (`attempts cancel`).
    OperatorCancelled,
}

impl TransitionCause {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::GatewaySucceeded => "gateway_succeeded",
            Self::GatewayDeclined => "gateway_declined",
            Self::GatewayRefusedRequest => "gateway_refused_request",
            Self::CredentialsFault => "credentials_fault",
            Self::EndpointFault => "endpoint_fault",
            Self::AmbiguousResult => "ambiguous_result",
            Self::GatewayProcessing => "gateway_processing",
            Self::RetriesExhausted => "retries_exhausted",
            Self::RetryWindowClosed => "retry_window_closed",
            Self::RetryScheduled => "retry_scheduled",
            Self::SettlementRefused => "settlement_refused",
            Self::LookupFoundCharge => "lookup_found_charge",
            Self::LookupFoundSeveralCharges => "lookup_found_several_charges",
            Self::LookupFoundAnotherCharge => "lookup_found_another_charge",
            Self::LookupFoundNothing => "lookup_found_nothing",
            Self::LookupFoundNothingOutsideKeyWindow => "lookup_found_nothing_outside_key_window",
            Self::LookupFoundNothingRetriesExhausted => "lookup_found_nothing_retries_exhausted",
            Self::ReconciliationScheduleExhausted => "reconciliation_schedule_exhausted",
            Self::OperatorResolved => "operator_resolved",
            Self::OperatorCancelled => "operator_cancelled",
        }
    }
}

impl fmt::Display for TransitionCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a write about an attempt must still find true to be allowed: the attempt is in
/// `from` under the token the writer was given. The executor's fence is `in_flight` + its
/// lease token; the reconciler's is `unknown` + the token of its claim.
#[derive(Debug, Clone)]
pub struct Fence {
    pub payment_attempt_id: PaymentAttemptId,
    pub lease_token: LeaseToken,
    pub from: AttemptStatus,
    /// Recorded on the transition, e.g. `executor:host-123`.
    pub actor: String,
}

/// Which gateway endpoint a call went to (`gateway_calls.operation`, decoded by `sqlx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, sqlx::Type)]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum CallOperation {
    /// `POST /v1/charges`.
    Charge,
    /// `GET /v1/charges?idempotency_key=…`, or Stripe's retrieve by id.
    Lookup,
    /// A connector's step before the charging call that cannot charge (Stripe's create of
    /// an unconfirmed PaymentIntent).
    Prepare,
    /// Stripe's cancel of a stored PaymentIntent: the proof, before anything says "not
    /// charged", that it can never charge.
    Cancel,
    /// A page of the gateway's own list of charges (the reconciliation sweep, contract
    /// §3.2); as an attempt's evidence, the listed record the sweep settled it by.
    List,
    /// A refund's request (`POST /v1/refunds`), recorded on its attempt's timeline.
    Refund,
    /// A refund's lookup (§3 by its key; Stripe by listing the PaymentIntent's refunds).
    RefundLookup,
}

impl CallOperation {
    /// The stored spelling (and the metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Charge => "charge",
            Self::Lookup => "lookup",
            Self::Prepare => "prepare",
            Self::Cancel => "cancel",
            Self::List => "list",
            Self::Refund => "refund",
            Self::RefundLookup => "refund_lookup",
        }
    }
}

/// The evidence of one gateway call: carried by the history row of the move it caused, else
/// appended to `gateway_calls` (decision 221).
#[derive(Debug, Clone)]
pub struct GatewayCallRecord {
    pub payment_attempt_id: PaymentAttemptId,
    pub operation: CallOperation,
    pub idempotency_key: IdempotencyKey,
    pub try_number: i32,
    pub lease_token: Option<LeaseToken>,
    pub started_at: OffsetDateTime,
    pub finished_at: OffsetDateTime,
    pub http_status: Option<u16>,
    /// The classified outcome's label.
    pub outcome: String,
    /// The id the answer named: the charge's (for Stripe, its PaymentIntent's); a refund
    /// call's is the gateway's refund id, in the same column.
    pub gateway_charge_id: Option<GatewayChargeId>,
    /// Made storable (control characters escaped, 1000 characters) when written.
    pub error: Option<String>,
}

/// One fenced write about an attempt: where it goes, why, and the gateway call that led
/// there.
#[derive(Debug, Clone)]
pub struct SettleWrite {
    pub fence: Fence,
    pub settlement: Settlement,
    pub cause: TransitionCause,
    /// The call's evidence: stored whether or not the fence lets the write through.
    pub call: Option<GatewayCallRecord>,
    /// The writer's reading of the database's clock when it decided; due times in the
    /// settlement are relative to it.
    pub now: OffsetDateTime,
}

/// A write that would move an attempt along a path contract §4 does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "attempt {payment_attempt_id}: contract §4 allows no move from {from} to {to} (cause {cause})"
)]
pub struct IllegalMove {
    pub payment_attempt_id: PaymentAttemptId,
    pub from: AttemptStatus,
    pub to: AttemptStatus,
    pub cause: TransitionCause,
}

impl IllegalMove {
    /// The one check of every state change a writer decides (a settlement, an operator's
    /// resolution): `Ok` when [`AttemptStatus::allows`] the move `from → to`, else the
    /// refusal, so a wrong decision fails loudly before anything is written instead of
    /// moving an attempt where the contract says it cannot go.
    pub fn check(
        payment_attempt_id: PaymentAttemptId,
        from: AttemptStatus,
        to: AttemptStatus,
        cause: TransitionCause,
    ) -> Result<(), Self> {
        if AttemptStatus::allows(Some(from), to) {
            return Ok(());
        }
        Err(Self {
            payment_attempt_id,
            from,
            to,
            cause,
        })
    }
}

impl SettleWrite {
    /// Refuses a write whose move [`AttemptStatus::allows`] does not allow
    /// ([`IllegalMove::check`]): the store checks every settlement with this before it
    /// writes anything.
    pub fn check_move(&self) -> Result<(), IllegalMove> {
        IllegalMove::check(
            self.fence.payment_attempt_id,
            self.fence.from,
            self.settlement.status(),
            self.cause,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(from: AttemptStatus, settlement: Settlement) -> SettleWrite {
        SettleWrite {
            fence: Fence {
                payment_attempt_id: PaymentAttemptId::from(uuid::Uuid::nil()),
                lease_token: LeaseToken::from(1),
                from,
                actor: "test".into(),
            },
            settlement,
            cause: TransitionCause::RetryScheduled,
            call: None,
            now: OffsetDateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn every_settlement_of_an_attempt_in_flight_is_a_move_the_contract_allows() {
        let now = OffsetDateTime::UNIX_EPOCH;
        for settlement in [
            Settlement::Succeeded {
                charge_id: GatewayChargeId::from_gateway("ch"),
            },
            Settlement::Declined {
                charge_id: GatewayChargeId::from_gateway("ch"),
                decline_code: None,
            },
            Settlement::NeedsReview { reason: "r".into() },
            Settlement::Retry {
                next_run_at: now,
                reason: "r".into(),
                refund_try: false,
            },
            Settlement::Unknown { reason: "r".into() },
        ] {
            assert_eq!(
                write(AttemptStatus::InFlight, settlement).check_move(),
                Ok(())
            );
        }
    }

    #[test]
    fn a_settlement_the_contract_does_not_allow_is_refused_before_it_is_written() {
        let unknown_again = write(
            AttemptStatus::Unknown,
            Settlement::Unknown { reason: "r".into() },
        );
        let refused = unknown_again.check_move().unwrap_err();
        assert_eq!(
            (refused.from, refused.to),
            (AttemptStatus::Unknown, AttemptStatus::Unknown)
        );
        let from_final = write(
            AttemptStatus::Succeeded,
            Settlement::Succeeded {
                charge_id: GatewayChargeId::from_gateway("ch"),
            },
        );
        assert!(from_final.check_move().is_err());
    }

    #[test]
    fn an_operators_resolution_is_checked_like_a_settlement() {
        let id = PaymentAttemptId::from(uuid::Uuid::nil());
        let cause = TransitionCause::OperatorResolved;
        for to in [
            AttemptStatus::Succeeded,
            AttemptStatus::Declined,
            AttemptStatus::Pending,
        ] {
            assert_eq!(
                IllegalMove::check(id, AttemptStatus::NeedsReview, to, cause),
                Ok(())
            );
        }
        let refused = IllegalMove::check(
            id,
            AttemptStatus::NeedsReview,
            AttemptStatus::Unknown,
            cause,
        )
        .unwrap_err();
        assert_eq!(refused.to, AttemptStatus::Unknown);
    }
}
