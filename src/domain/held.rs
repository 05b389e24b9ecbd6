//! The attempt a role holds under a fence: the one shape the executor sends, the reconciler
//! looks up and a person's recheck reads. The store fills it in from one column list and
//! writes from what it gives (the fence, a call's evidence); the pure policies decide on
//! it. Everything that is derived from the held attempt is derived here, once: the fence
//! of a write, the charge a lookup must find, the evidence of a call, the send history the
//! retry rules weigh.

use super::{GatewayChargeId, MessageId};
use time::OffsetDateTime;

use super::call::{CancelOutcome, GatewayCall};
use super::outcome::ExpectedCharge;
use super::retry::SendHistory;
use super::{
    Actor, AttemptStatus, CallOperation, Fence, GatewayCallRecord, GatewayObjectId, IdempotencyKey,
    KeySeq, LeaseToken, Money, PaymentAttemptId,
};

/// One attempt, claimed: the executor's `in_flight` lease, the reconciler's `unknown`
/// claim, or a person's recheck of an `unknown` or `needs_review` attempt. Every claim
/// increments the fencing token; every write under it names the token and `held_as`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldAttempt {
    pub payment_attempt_id: PaymentAttemptId,
    /// The stored key: every try sends exactly this value (or a key derived from it).
    pub idempotency_key: IdempotencyKey,
    pub money: Money,
    /// The status the claim found (or made): what every write under it must still find.
    pub held_as: AttemptStatus,
    /// The fencing token of this claim.
    pub lease_token: LeaseToken,
    /// When the claim lapses, by the database's clock: the executor's lease (the
    /// reconciler's hold ends at the attempt's next lookup instead).
    pub lease_expires_at: Option<OffsetDateTime>,
    /// Tries made, including the one this claim counted (a hand-over counts none).
    pub tries: i32,
    /// Failed lookups so far: the reconciler's schedule's position.
    pub reconcile_checks: i32,
    pub created_at: OffsetDateTime,
    /// When the gateway first saw the key (its retention window counts from here); `None`
    /// when it never did.
    pub first_dispatched_at: Option<OffsetDateTime>,
    /// The last send under the key: until the gateway's maximum processing time has passed
    /// since then, an empty lookup proves nothing.
    pub dispatched_at: Option<OffsetDateTime>,
    /// The database's `now()` when the claim was made: every decision under the claim is
    /// measured from it, never from the host's clock.
    pub claimed_at: OffsetDateTime,
    /// Which derived keys (Stripe's `-create[-N]`, `-confirm[-N]`) the next calls send.
    pub key_seq: KeySeq,
    /// The gateway object stored before the charging call (Stripe's PaymentIntent id),
    /// which a lookup asks about by id; `None` when none was made.
    pub gateway_object_id: Option<GatewayObjectId>,
}

impl HeldAttempt {
    /// The fence of every write under this claim, signed by `actor`.
    pub fn fence(&self, actor: impl Into<String>) -> Fence {
        Fence {
            payment_attempt_id: self.payment_attempt_id,
            lease_token: self.lease_token,
            from: self.held_as,
            actor: actor.into(),
        }
    }

    /// What the retry rules weigh: the tries, the age and the first send (the claim's time
    /// when the key was never sent: this claim is its first send).
    pub fn history(&self) -> SendHistory {
        SendHistory {
            tries: self.tries,
            created_at: self.created_at,
            first_dispatched_at: self.first_dispatched_at.unwrap_or(self.claimed_at),
        }
    }

    /// What a charge found under the key must match to be this attempt's: the key, the
    /// attempt id as its reference, and the money.
    pub fn expected(&self) -> ExpectedCharge<'_> {
        ExpectedCharge {
            idempotency_key: &self.idempotency_key,
            payment_attempt_id: self.payment_attempt_id,
            money: self.money,
        }
    }

    /// The evidence of one call made under this claim, as `gateway_call_records` lists it,
    /// with the key the call actually sent (a connector's derived key, else the stored
    /// one), `outcome` its label, started at `started_at` by the database's clock.
    pub fn evidence<T>(
        &self,
        call: &GatewayCall<T>,
        outcome: &str,
        started_at: OffsetDateTime,
        gateway_charge_id: Option<GatewayChargeId>,
        error: Option<String>,
    ) -> GatewayCallRecord {
        GatewayCallRecord {
            payment_attempt_id: self.payment_attempt_id,
            operation: call.operation,
            idempotency_key: call
                .sent_key
                .clone()
                .unwrap_or_else(|| self.idempotency_key.clone()),
            try_number: self.tries,
            lease_token: Some(self.lease_token),
            started_at,
            finished_at: started_at + call.elapsed,
            http_status: call.http_status,
            outcome: outcome.to_owned(),
            gateway_charge_id,
            error,
        }
    }

    /// The evidence of a cancel of the attempt's gateway object, at `started_at`.
    pub fn cancel_evidence(
        &self,
        cancel: &GatewayCall<CancelOutcome>,
        started_at: OffsetDateTime,
    ) -> GatewayCallRecord {
        self.evidence(
            cancel,
            cancel.outcome.label(),
            started_at,
            cancel.outcome.charge_id().cloned(),
            cancel.error_text(),
        )
    }

    /// The evidence of a reading that was not a call of this claim's (the sweep's listing
    /// showed the charge): a `list` row that says so, at `at`.
    pub fn listed_evidence(
        &self,
        at: OffsetDateTime,
        gateway_charge_id: Option<GatewayChargeId>,
        why: &str,
    ) -> GatewayCallRecord {
        GatewayCallRecord {
            payment_attempt_id: self.payment_attempt_id,
            operation: CallOperation::List,
            idempotency_key: self.idempotency_key.clone(),
            try_number: self.tries,
            lease_token: Some(self.lease_token),
            started_at: at,
            finished_at: at,
            http_status: Some(200),
            outcome: "found".into(),
            gateway_charge_id,
            error: Some(why.to_owned()),
        }
    }
}

/// What the executor's claim gives it: the held attempt, and what its charging call says
/// besides (contract §3.1's order, customer and payment method).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeClaim {
    pub attempt: HeldAttempt,
    pub order_id: String,
    pub customer_id: String,
    pub payment_method: String,
    pub description: Option<String>,
    /// The executor instance holding the lease.
    pub lease_owner: String,
    /// False when the claim is only a hand-over: a retry was due, but the attempt is past
    /// its retry window (maximum age, or the gateway's key retention minus the safety
    /// margin), so it must not be sent again and goes to `unknown`.
    pub dispatch: bool,
    /// The `Nats-Msg-Id` of the command that created the attempt (causation of its events).
    pub first_message_id: MessageId,
    pub correlation_id: Option<String>,
}

impl ChargeClaim {
    /// The fence of every write about this claim: `in_flight` under its lease token,
    /// signed by the executor that holds it.
    pub fn fence(&self) -> Fence {
        self.attempt
            .fence(Actor::Executor(self.lease_owner.clone()))
    }

    /// When the lease ends, by the database's clock (the claim's time when the row had no
    /// lease, which an executor's claim never leaves).
    pub fn lease_ends(&self) -> OffsetDateTime {
        self.attempt
            .lease_expires_at
            .unwrap_or(self.attempt.claimed_at)
    }
}

#[cfg(test)]
pub(crate) mod fixture {
    use time::macros::datetime;

    use super::*;

    /// An `unknown` attempt recorded at 10:00, sent twice, last at 10:05, claimed at 10:10,
    /// no failed lookup yet: what the policies' tests start from.
    pub(crate) fn held() -> HeldAttempt {
        let id: PaymentAttemptId = "6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11".parse().unwrap();
        HeldAttempt {
            payment_attempt_id: id,
            idempotency_key: IdempotencyKey::for_attempt(id),
            money: Money::of(1999, "EUR").unwrap(),
            held_as: AttemptStatus::Unknown,
            lease_token: LeaseToken::from(3),
            lease_expires_at: None,
            tries: 2,
            reconcile_checks: 0,
            created_at: datetime!(2026-12-01 10:00 UTC),
            first_dispatched_at: Some(datetime!(2026-12-01 10:00 UTC)),
            dispatched_at: Some(datetime!(2026-12-01 10:05 UTC)),
            claimed_at: datetime!(2026-12-01 10:10 UTC),
            key_seq: KeySeq::default(),
            gateway_object_id: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::held;
    use super::*;

    #[test]
    fn a_write_under_a_claim_names_its_token_and_the_state_it_was_claimed_in() {
        let attempt = HeldAttempt {
            held_as: AttemptStatus::NeedsReview,
            ..held()
        };
        let fence = attempt.fence("reconciler:r1");
        assert_eq!(fence.lease_token, attempt.lease_token);
        assert_eq!(fence.from, AttemptStatus::NeedsReview);
        assert_eq!(fence.actor, "reconciler:r1");
    }

    #[test]
    fn a_calls_evidence_names_the_key_it_sent_else_the_stored_one() {
        let attempt = held();
        let call = GatewayCall {
            outcome: (),
            operation: CallOperation::Prepare,
            sent_key: Some(attempt.idempotency_key.derived("create")),
            answered_locally: false,
            http_status: Some(200),
            elapsed: std::time::Duration::from_millis(250),
            error: None,
        };
        let at = attempt.claimed_at;
        let row = attempt.evidence(&call, "prepared", at, None, None);
        assert_eq!(
            row.idempotency_key,
            attempt.idempotency_key.derived("create")
        );
        assert_eq!(
            row.finished_at - row.started_at,
            time::Duration::milliseconds(250)
        );
        assert_eq!(row.lease_token, Some(attempt.lease_token));
        let stored = GatewayCall {
            sent_key: None,
            ..call
        };
        assert_eq!(
            attempt
                .evidence(&stored, "x", at, None, None)
                .idempotency_key,
            attempt.idempotency_key
        );
    }

    #[test]
    fn a_key_never_sent_counts_its_window_from_this_claim() {
        let attempt = HeldAttempt {
            first_dispatched_at: None,
            ..held()
        };
        assert_eq!(attempt.history().first_dispatched_at, attempt.claimed_at);
    }
}
