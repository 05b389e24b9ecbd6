//! RefundPayment v1 (contract §2.5): one refund of a charge, as a command with a charge's
//! guarantees. What a valid refund command is, the states a refund goes through and the
//! moves between them, the refund held under a lease, and the key it is sent under.
//!
//! Invariants:
//! - A refund is named by the producer's `refund_id`: one `refund_id`, at most one refund
//!   movement at the gateway, whatever the redeliveries, retries and instances.
//! - Its idempotency key is derived from the `refund_id` alone (`onecharge-refund-<id>`),
//!   so every instance and every try sends the same one.
//! - A final state (`succeeded`, `failed`, `refused`) never changes.

use super::GatewayChargeId;
use std::collections::BTreeMap;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use super::command::{
    body_sha256, decode, parse_requested_at, validate_message_id, CommandHeaders, InvalidCommand,
    MAX_AMOUNT_MINOR,
};
use super::ids::RefundId;
use super::{IdempotencyKey, LeaseToken, MessageId, Money, PaymentAttemptId};

/// Longest `reason`.
pub const MAX_REASON_CHARS: usize = 500;
/// Most `metadata` entries, and the longest key and value: Stripe's own limits, so that
/// what the producer sends can be carried to a Stripe refund as it is.
pub const MAX_METADATA_KEYS: usize = 40;
pub const MAX_METADATA_KEY_CHARS: usize = 40;
pub const MAX_METADATA_VALUE_CHARS: usize = 500;
/// Metadata keys onecharge writes on a refund itself; a producer may not use them (a
/// producer's `onecharge_deployment` would make the refund look like a sibling's).
pub const RESERVED_METADATA_KEYS: [&str; 4] = [
    "refund_id",
    "payment_attempt_id",
    "reason",
    super::deployment::METADATA_KEY,
];

/// A validated RefundPayment command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundPayment {
    pub refund_id: RefundId,
    pub payment_attempt_id: PaymentAttemptId,
    /// In the charge's minor unit; `None` asks for what is left of the charge.
    pub amount_minor: Option<i64>,
    pub reason: String,
    pub requested_at: Option<OffsetDateTime>,
    pub metadata: BTreeMap<String, String>,
}

impl RefundPayment {
    /// SHA-256 over what defines *which refund* this is: the charge it refunds and the
    /// amount asked. The same `refund_id` with another fingerprint is a conflict; reason,
    /// metadata and request time do not count.
    pub fn fingerprint(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        let amount = self
            .amount_minor
            .map_or_else(|| "rest".to_owned(), |a| a.to_string());
        for field in [
            self.payment_attempt_id.to_string().as_bytes(),
            amount.as_bytes(),
        ] {
            hasher.update((field.len() as u64).to_be_bytes());
            hasher.update(field);
        }
        hasher.finalize().into()
    }

    pub fn idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey::for_refund(self.refund_id)
    }
}

/// A refund command that passed validation, with what intake records with it.
#[derive(Debug, Clone)]
pub struct ValidRefund {
    pub message_id: MessageId,
    pub body_sha256: [u8; 32],
    pub correlation_id: Option<String>,
    pub traceparent: Option<String>,
    pub command: RefundPayment,
}

/// The wire shape, and the published JSON Schema (`docs/schemas/refund-payment.v1.json`).
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(
    title = "RefundPayment v1",
    description = "The body of a command on payments.commands.refund-payment.v1 (contract §2.5): UTF-8 JSON, at most 64 KiB. Headers as for ChargePayment: Nats-Msg-Id (required), Correlation-Id and traceparent (optional). Unknown fields are ignored."
)]
pub(crate) struct Wire {
    /// The producer's id of this refund, a UUID, and its dedupe key: one refund_id, at most
    /// one refund at the gateway. The same id for another charge or amount is a conflict.
    #[schemars(extend("format" = "uuid"))]
    refund_id: String,
    /// The charge to refund: its ChargePayment's payment_attempt_id.
    #[schemars(extend("format" = "uuid"))]
    payment_attempt_id: String,
    /// In the charge's minor unit. Omitted: whatever is left of the charge when the refund
    /// is admitted.
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_AMOUNT_MINOR))]
    amount_minor: Option<i64>,
    /// Why, in words, for people: stored, shown and sent to the gateway as metadata.
    #[schemars(length(min = 1, max = MAX_REASON_CHARS))]
    reason: String,
    /// RFC 3339.
    #[serde(default)]
    #[schemars(extend("format" = "date-time"))]
    requested_at: Option<String>,
    /// At most 40 string entries (keys up to 40 characters, values up to 500), carried to
    /// the gateway's refund. `refund_id`, `payment_attempt_id`, `reason` and
    /// `onecharge_deployment` are onecharge's.
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
}

#[doc(hidden)]
pub fn contract_example() -> serde_json::Value {
    serde_json::json!({
        "refund_id": "0d9c3b7a-5e21-4c8f-a1b2-7e6f5d4c3b2a",
        "payment_attempt_id": "6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11",
        "amount_minor": 500,
        "reason": "item returned",
        "requested_at": "2026-12-03T09:00:00Z",
        "metadata": {"return_id": "ret_77"}
    })
}

/// Validates one refund command message, as `command::validate` does a charge.
pub fn validate(headers: &CommandHeaders, body: &[u8]) -> Result<ValidRefund, InvalidCommand> {
    let message_id = validate_message_id(headers.message_id.as_deref())?;
    let wire: Wire = decode(body, "RefundPayment")?;
    let refund_id: RefundId = wire
        .refund_id
        .parse()
        .map_err(|e| InvalidCommand::new(format!("refund_id is not a UUID: {e}")))?;
    let payment_attempt_id: PaymentAttemptId = wire
        .payment_attempt_id
        .parse()
        .map_err(|e| InvalidCommand::new(format!("payment_attempt_id is not a UUID: {e}")))?;
    if let Some(amount) = wire.amount_minor {
        if amount <= 0 || amount > MAX_AMOUNT_MINOR {
            return Err(InvalidCommand::new(format!(
                "amount_minor must be between 1 and {MAX_AMOUNT_MINOR}, got {amount}"
            )));
        }
    }
    let reason_chars = wire.reason.chars().count();
    if reason_chars == 0 || reason_chars > MAX_REASON_CHARS {
        return Err(InvalidCommand::new(format!(
            "reason must be 1 to {MAX_REASON_CHARS} characters, got {reason_chars}"
        )));
    }
    let requested_at = parse_requested_at(wire.requested_at.as_deref())?;
    let metadata = wire.metadata.unwrap_or_default();
    check_metadata(&metadata)?;
    Ok(ValidRefund {
        message_id,
        body_sha256: body_sha256(body),
        correlation_id: headers.correlation_id.clone(),
        traceparent: headers.traceparent.clone(),
        command: RefundPayment {
            refund_id,
            payment_attempt_id,
            amount_minor: wire.amount_minor,
            reason: wire.reason,
            requested_at,
            metadata,
        },
    })
}

fn check_metadata(metadata: &BTreeMap<String, String>) -> Result<(), InvalidCommand> {
    if metadata.len() > MAX_METADATA_KEYS {
        return Err(InvalidCommand::new(format!(
            "metadata has {} entries, more than the {MAX_METADATA_KEYS} allowed",
            metadata.len()
        )));
    }
    for (key, value) in metadata {
        let key_chars = key.chars().count();
        if key_chars == 0 || key_chars > MAX_METADATA_KEY_CHARS {
            return Err(InvalidCommand::new(format!(
                "metadata keys must be 1 to {MAX_METADATA_KEY_CHARS} characters, got {key_chars}"
            )));
        }
        if RESERVED_METADATA_KEYS.contains(&key.as_str()) {
            return Err(InvalidCommand::new(format!(
                "metadata key `{key}` is onecharge's own; choose another"
            )));
        }
        if value.chars().count() > MAX_METADATA_VALUE_CHARS {
            return Err(InvalidCommand::new(format!(
                "metadata value of `{key}` is longer than {MAX_METADATA_VALUE_CHARS} characters"
            )));
        }
    }
    Ok(())
}

/// The states of a refund (contract §4.1). Read and bound as the text the database holds
/// (`sqlx::Type`, as `AttemptStatus`), so no stored status is parsed by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, sqlx::Type)]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum RefundStatus {
    /// Recorded; its attempt is not final yet (or not recorded yet).
    Waiting,
    /// Admitted: its amount is reserved against the charge; due for the gateway.
    Pending,
    /// Claimed by an executor under a lease; the gateway may be being called.
    InFlight,
    /// The gateway took it and has not finished it (Stripe's `pending`, `requires_action`).
    Processing,
    /// The gateway may or may not have refunded; the reconciler finds out.
    Unknown,
    Succeeded,
    /// The gateway refused or failed it: nothing refunded.
    Failed,
    /// Never sent, and never will be: the charge did not succeed, stayed unsettled too long,
    /// or the amount would pass what is left of it.
    Refused,
    NeedsReview,
}

impl RefundStatus {
    pub const ALL: [Self; 9] = [
        Self::Waiting,
        Self::Pending,
        Self::InFlight,
        Self::Processing,
        Self::Unknown,
        Self::Succeeded,
        Self::Failed,
        Self::Refused,
        Self::NeedsReview,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Pending => "pending",
            Self::InFlight => "in_flight",
            Self::Processing => "processing",
            Self::Unknown => "unknown",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Refused => "refused",
            Self::NeedsReview => "needs_review",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Final for the roles: nothing but a person's resolution (decision 234) moves it on.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Refused)
    }

    /// Whether the refund's amount is held against the charge in this state: from its
    /// admission until it fails. A refund in review still holds it: the gateway may have
    /// refunded.
    pub fn holds_amount(self) -> bool {
        !matches!(self, Self::Waiting | Self::Failed | Self::Refused)
    }

    /// The moves the contract allows (§4.1). The one move out of a final state is a
    /// person's: a `succeeded` refund the gateway has since failed, resolved `failed`
    /// (decision 234).
    pub fn allows(self, to: Self) -> bool {
        use RefundStatus::*;
        matches!(
            (self, to),
            (Waiting, Pending | Refused)
                | (Pending, InFlight)
                | (
                    InFlight,
                    Pending | Processing | Unknown | Succeeded | Failed | NeedsReview
                )
                | (
                    Processing | Unknown,
                    Pending | Processing | Unknown | Succeeded | Failed | NeedsReview
                )
                | (NeedsReview, Succeeded | Failed | Pending)
                | (Succeeded, Failed)
        )
    }
}

impl std::fmt::Display for RefundStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refund held under a lease (an executor's send, a reconciler's lookup): what every
/// call and decision about it needs, read from one column list.
#[derive(Debug, Clone)]
pub struct HeldRefund {
    pub refund_id: RefundId,
    pub payment_attempt_id: PaymentAttemptId,
    pub idempotency_key: IdempotencyKey,
    pub money: Money,
    pub reason: String,
    pub metadata: BTreeMap<String, String>,
    /// The charge being refunded, as the gateway names it (§3 `ch_…`, Stripe `pi_…`).
    pub gateway_charge_id: GatewayChargeId,
    pub gateway_refund_id: Option<String>,
    pub status: RefundStatus,
    /// The fence every write after the claim names.
    pub lease_token: LeaseToken,
    pub tries: i32,
    pub lookups: i32,
    /// Lookups in a row that the gateway did not answer: the position on
    /// `reconciler.schedule`. An answer that the refund is still processing restarts it.
    pub failed_lookups: i32,
    pub first_sent_at: Option<OffsetDateTime>,
    pub last_sent_at: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    /// The database's clock when the claim was made.
    pub now: OffsetDateTime,
}

impl HeldRefund {
    /// The database's time while this refund is in hand: its claim's `now()` plus the time
    /// elapsed here since. Every time a role writes about it (a call's `started_at` and
    /// `finished_at`, the next due time) is read from this, never from the host's clock.
    pub fn database_time(&self) -> impl Fn() -> OffsetDateTime {
        let claimed_at = self.now;
        let since = std::time::Instant::now();
        move || claimed_at + since.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers() -> CommandHeaders {
        CommandHeaders {
            message_id: Some("refund-msg-1".into()),
            ..Default::default()
        }
    }

    fn body(patch: serde_json::Value) -> Vec<u8> {
        super::super::command::patched_body(contract_example(), &patch)
    }

    fn reason(patch: serde_json::Value) -> String {
        validate(&headers(), &body(patch)).unwrap_err().0
    }

    #[test]
    fn the_contract_example_is_valid_and_an_amount_may_be_left_out() {
        let valid = validate(&headers(), &body(serde_json::json!({}))).unwrap();
        assert_eq!(valid.command.amount_minor, Some(500));
        assert_eq!(valid.command.metadata["return_id"], "ret_77");
        let whole = validate(&headers(), &body(serde_json::json!({"amount_minor": null}))).unwrap();
        assert_eq!(whole.command.amount_minor, None);
        assert_ne!(whole.command.fingerprint(), valid.command.fingerprint());
        assert_eq!(
            whole.command.idempotency_key().as_str(),
            "onecharge-refund-0d9c3b7a-5e21-4c8f-a1b2-7e6f5d4c3b2a"
        );
    }

    #[test]
    fn every_bound_is_checked_with_its_reason() {
        assert!(
            reason(serde_json::json!({"refund_id": "nope"})).contains("refund_id is not a UUID")
        );
        assert!(reason(serde_json::json!({"payment_attempt_id": 7})).contains("RefundPayment JSON"));
        assert!(reason(serde_json::json!({"amount_minor": 0})).contains("between 1 and"));
        assert!(reason(serde_json::json!({"reason": ""})).contains("reason must be 1 to 500"));
        assert!(reason(serde_json::json!({"reason": null})).contains("missing field `reason`"));
        assert!(reason(serde_json::json!({"requested_at": "yesterday"})).contains("RFC 3339"));
        assert!(
            reason(serde_json::json!({"metadata": {"refund_id": "x"}})).contains("onecharge's own")
        );
        let many: serde_json::Map<_, _> = (0..41).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(reason(serde_json::json!({"metadata": many})).contains("41 entries"));
    }

    #[test]
    fn reason_and_metadata_do_not_change_which_refund_it_is() {
        let a = validate(&headers(), &body(serde_json::json!({})))
            .unwrap()
            .command;
        let b = validate(
            &headers(),
            &body(serde_json::json!({"reason": "other words", "metadata": {}})),
        )
        .unwrap()
        .command;
        assert_eq!(a.fingerprint(), b.fingerprint());
        let c = validate(&headers(), &body(serde_json::json!({"amount_minor": 501})))
            .unwrap()
            .command;
        assert_ne!(a.fingerprint(), c.fingerprint());
    }

    #[test]
    fn final_states_move_only_by_a_persons_resolution_and_only_listed_moves_are_allowed() {
        for from in RefundStatus::ALL.into_iter().filter(|s| s.is_final()) {
            for to in RefundStatus::ALL {
                let a_person_s = (from, to) == (RefundStatus::Succeeded, RefundStatus::Failed);
                assert_eq!(from.allows(to), a_person_s, "{from} -> {to}");
            }
        }
        assert!(RefundStatus::Waiting.allows(RefundStatus::Pending));
        assert!(!RefundStatus::Waiting.allows(RefundStatus::InFlight));
        assert!(!RefundStatus::Pending.allows(RefundStatus::Succeeded));
        assert!(RefundStatus::Unknown.allows(RefundStatus::Succeeded));
        for status in RefundStatus::ALL {
            assert_eq!(RefundStatus::parse(status.as_str()), Some(status));
        }
    }
}
