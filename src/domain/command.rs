//! ChargePayment v1 (contract §2.1): parsing and validation of one inbound command.
//!
//! Validation is total and pure: given the headers and body of a broker message it says
//! either "this is a valid command" or "this is permanently invalid, because …". A message
//! that is invalid now will be invalid on every redelivery, so it is dead-lettered at once.

use serde::Deserialize;
use sha2::{Digest, Sha256};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::{Currency, IdempotencyKey, MessageId, Money};
use crate::domain::PaymentAttemptId;

/// Largest accepted body. Bigger messages are dead-lettered unread.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Largest accepted amount in minor units (10^12).
pub const MAX_AMOUNT_MINOR: i64 = 1_000_000_000_000;
/// Longest accepted `Nats-Msg-Id`.
pub const MAX_MESSAGE_ID_CHARS: usize = 200;

/// The headers of a command message that intake reads.
#[derive(Debug, Clone, Default)]
pub struct CommandHeaders {
    /// `Nats-Msg-Id`: stable across producer retries; the dedupe key together with the consumer.
    pub message_id: Option<String>,
    /// `Correlation-Id`: copied to every log line, event and dead letter this command causes.
    pub correlation_id: Option<String>,
    /// `traceparent`: the producer's W3C trace context.
    pub traceparent: Option<String>,
}

/// A validated ChargePayment command: every field within the contract's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargePayment {
    pub payment_attempt_id: PaymentAttemptId,
    pub order_id: String,
    pub customer_id: String,
    pub money: Money,
    pub payment_method: String,
    pub description: Option<String>,
    pub requested_at: Option<OffsetDateTime>,
}

impl ChargePayment {
    /// SHA-256 over the parameters that define *which charge* this is (amount, currency,
    /// customer, payment method, order). Two commands for one attempt with equal fingerprints
    /// are one charge; with different fingerprints they are a conflict. Description and
    /// request time are not part of it: they do not change what the customer pays.
    pub fn fingerprint(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        // Length-prefixed fields: no two different parameter sets hash the same input.
        for field in [
            self.order_id.as_bytes(),
            self.customer_id.as_bytes(),
            self.money.amount_minor().to_string().as_bytes(),
            self.money.currency().code().as_bytes(),
            self.payment_method.as_bytes(),
        ] {
            hasher.update((field.len() as u64).to_be_bytes());
            hasher.update(field);
        }
        hasher.finalize().into()
    }

    /// The `Idempotency-Key` sent to the gateway on every try of this attempt. Derived from
    /// the attempt id alone, so every instance and every retry computes the same value; it is
    /// also stored with the attempt, and the stored value is what the executor sends.
    pub fn idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey::for_attempt(self.payment_attempt_id)
    }
}

/// A command that passed validation, with what intake needs to record it.
#[derive(Debug, Clone)]
pub struct ValidCommand {
    pub message_id: MessageId,
    pub body_sha256: [u8; 32],
    pub correlation_id: Option<String>,
    pub traceparent: Option<String>,
    pub command: ChargePayment,
}

/// Why a message can never be processed. The text becomes the dead letter's `Dlq-Reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidCommand(pub String);

impl InvalidCommand {
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        Self(super::bounded(&reason.into(), 512))
    }
}

/// The wire shape. Field types are the loosest that still let serde report precise errors;
/// unknown fields are ignored (tolerant reader). It is also the published JSON Schema of
/// the command (`docs/schemas/charge-payment.v1.json`, `crate::documents::schemas`): the bounds below
/// are the ones `validate` checks, written once more for the schema's reader.
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(
    title = "ChargePayment v1",
    description = "The body of a command on payments.commands.charge-payment.v1 (contract §2.1): UTF-8 JSON, at most 64 KiB. Headers: Nats-Msg-Id (required, 1-200 printable ASCII characters, stable across producer retries), Correlation-Id and traceparent (optional). Unknown fields are ignored."
)]
pub(crate) struct Wire {
    /// The business idempotency key: a UUID. The same id with other parameters (amount,
    /// currency, customer, payment method, order) is dead-lettered as a conflict.
    #[schemars(extend("format" = "uuid"))]
    payment_attempt_id: String,
    #[schemars(length(min = 1, max = 128))]
    order_id: String,
    #[schemars(length(min = 1, max = 128))]
    customer_id: String,
    /// In the currency's minor unit (cents for EUR).
    #[schemars(range(min = 1, max = MAX_AMOUNT_MINOR))]
    amount_minor: i64,
    /// An active ISO 4217 alphabetic code, upper case; checked against the code list.
    #[schemars(regex(pattern = r"^[A-Z]{3}$"))]
    currency: String,
    #[schemars(length(min = 1, max = 255))]
    payment_method: String,
    #[serde(default)]
    #[schemars(length(max = 500))]
    description: Option<String>,
    /// RFC 3339. A command older than the configured maximum command age is recorded and
    /// ends `expired`, never charged.
    #[serde(default)]
    #[schemars(extend("format" = "date-time"))]
    requested_at: Option<String>,
}

/// The example command of contract §2.1, the base of every test's command (the unit tests'
/// here and the integration tests' `support::command`), so the example is written once.
#[doc(hidden)]
pub fn contract_example() -> serde_json::Value {
    serde_json::json!({
        "payment_attempt_id": "6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11",
        "order_id": "ord_1001",
        "customer_id": "cus_42",
        "amount_minor": 1999,
        "currency": "EUR",
        "payment_method": "pm_card_visa",
        "description": "Order ord_1001",
        "requested_at": "2026-11-29T10:15:00Z"
    })
}

/// SHA-256 of a message body, kept with the dedupe row to recognise a reused message id.
pub fn body_sha256(body: &[u8]) -> [u8; 32] {
    Sha256::digest(body).into()
}

/// Validates one command message. Pure: the same input always gives the same answer.
pub fn validate(headers: &CommandHeaders, body: &[u8]) -> Result<ValidCommand, InvalidCommand> {
    let message_id = validate_message_id(headers.message_id.as_deref())?;
    let wire: Wire = decode(body, "ChargePayment")?;

    let payment_attempt_id: PaymentAttemptId = wire
        .payment_attempt_id
        .parse()
        .map_err(|e| InvalidCommand::new(format!("payment_attempt_id is not a UUID: {e}")))?;
    check_length("order_id", &wire.order_id, 1, 128)?;
    check_length("customer_id", &wire.customer_id, 1, 128)?;
    check_length("payment_method", &wire.payment_method, 1, 255)?;
    if let Some(description) = &wire.description {
        check_length("description", description, 0, 500)?;
    }
    if wire.amount_minor <= 0 || wire.amount_minor > MAX_AMOUNT_MINOR {
        return Err(InvalidCommand::new(format!(
            "amount_minor must be between 1 and {MAX_AMOUNT_MINOR}, got {}",
            wire.amount_minor
        )));
    }
    let currency = validate_currency(&wire.currency)?;
    let requested_at = parse_requested_at(wire.requested_at.as_deref())?;

    Ok(ValidCommand {
        message_id,
        body_sha256: body_sha256(body),
        correlation_id: headers.correlation_id.clone(),
        traceparent: headers.traceparent.clone(),
        command: ChargePayment {
            payment_attempt_id,
            order_id: wire.order_id,
            customer_id: wire.customer_id,
            money: Money::new(wire.amount_minor, currency),
            payment_method: wire.payment_method,
            description: wire.description,
            requested_at,
        },
    })
}

/// `Nats-Msg-Id`: required, 1–200 printable ASCII characters.
/// Reads a command body of the wire type `W` (named `what` in the reasons): at most
/// [`MAX_BODY_BYTES`], UTF-8, JSON of that shape.
pub(crate) fn decode<W: serde::de::DeserializeOwned>(
    body: &[u8],
    what: &str,
) -> Result<W, InvalidCommand> {
    if body.len() > MAX_BODY_BYTES {
        return Err(InvalidCommand::new(format!(
            "body is {} bytes, more than the {MAX_BODY_BYTES} allowed",
            body.len()
        )));
    }
    let text = std::str::from_utf8(body)
        .map_err(|e| InvalidCommand::new(format!("body is not UTF-8: {e}")))?;
    serde_json::from_str(text)
        .map_err(|e| InvalidCommand::new(format!("body is not a valid {what} JSON: {e}")))
}

/// A command's optional `requested_at`: RFC 3339, or the command is invalid.
pub(crate) fn parse_requested_at(
    raw: Option<&str>,
) -> Result<Option<OffsetDateTime>, InvalidCommand> {
    raw.map(|raw| {
        OffsetDateTime::parse(raw, &Rfc3339)
            .map_err(|e| InvalidCommand::new(format!("requested_at `{raw}` is not RFC 3339: {e}")))
    })
    .transpose()
}

/// The message id of a delivered command, checked against contract §2.1: the only way one
/// is read from a delivery.
pub fn validate_message_id(id: Option<&str>) -> Result<MessageId, InvalidCommand> {
    let id = id.ok_or_else(|| InvalidCommand::new("missing Nats-Msg-Id header"))?;
    if id.is_empty() || id.len() > MAX_MESSAGE_ID_CHARS {
        return Err(InvalidCommand::new(format!(
            "Nats-Msg-Id must be 1 to {MAX_MESSAGE_ID_CHARS} characters, got {}",
            id.len()
        )));
    }
    if !id.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(InvalidCommand::new("Nats-Msg-Id must be printable ASCII"));
    }
    Ok(MessageId::checked(id))
}

fn check_length(field: &str, value: &str, min: usize, max: usize) -> Result<(), InvalidCommand> {
    let chars = value.chars().count();
    if chars < min || chars > max {
        return Err(InvalidCommand::new(format!(
            "{field} must be {min} to {max} characters, got {chars}"
        )));
    }
    Ok(())
}

/// An active ISO 4217 alphabetic code: known to the code list, upper case, not superseded,
/// and not a special code (precious metals, testing, "no currency").
fn validate_currency(code: &str) -> Result<Currency, InvalidCommand> {
    let currency = Currency::from_code(code).map_err(|e| InvalidCommand::new(e.to_string()))?;
    let known = currency.iso();
    if let Some(successor) = known.is_superseded() {
        return Err(InvalidCommand::new(format!(
            "currency `{code}` is no longer active (superseded by {})",
            successor.code()
        )));
    }
    if known.flags().contains(&iso_currency::Flag::Special) {
        return Err(InvalidCommand::new(format!(
            "currency `{code}` is a special ISO 4217 code, not a payable currency"
        )));
    }
    Ok(currency)
}

/// `base` with `patch`'s fields set, a null removing one, as bytes: a test's command that
/// differs from the contract's example in what the test is about.
#[cfg(test)]
pub(crate) fn patched_body(mut base: serde_json::Value, patch: &serde_json::Value) -> Vec<u8> {
    for (k, v) in patch.as_object().expect("a patch is an object") {
        if v.is_null() {
            base.as_object_mut()
                .expect("a command is an object")
                .remove(k);
        } else {
            base[k] = v.clone();
        }
    }
    serde_json::to_vec(&base).expect("json serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn headers() -> CommandHeaders {
        CommandHeaders {
            message_id: Some("msg-1".into()),
            ..Default::default()
        }
    }

    fn body(patch: serde_json::Value) -> Vec<u8> {
        patched_body(contract_example(), &patch)
    }

    fn reason(patch: serde_json::Value) -> String {
        validate(&headers(), &body(patch)).unwrap_err().0
    }

    #[test]
    fn the_contract_example_is_valid_and_unknown_fields_are_ignored() {
        let valid = validate(&headers(), &body(serde_json::json!({"extra": [1, 2]}))).unwrap();
        assert_eq!(valid.command.money.amount_minor(), 1999);
        assert_eq!(
            valid.command.requested_at,
            Some(datetime!(2026-11-29 10:15:00 UTC))
        );
        assert_eq!(valid.message_id, "msg-1");
    }

    #[test]
    fn each_invalid_field_is_named_in_the_reason() {
        assert!(reason(serde_json::json!({"amount_minor": 0})).contains("amount_minor"));
        assert!(reason(serde_json::json!({"amount_minor": -5})).contains("amount_minor"));
        assert!(
            reason(serde_json::json!({"amount_minor": 1_000_000_000_001i64}))
                .contains("amount_minor")
        );
        assert!(reason(serde_json::json!({"amount_minor": "12"})).contains("invalid type"));
        assert!(reason(serde_json::json!({"currency": "EURO"})).contains("currency"));
        assert!(reason(serde_json::json!({"currency": "eur"})).contains("currency"));
        assert!(reason(serde_json::json!({"currency": "HRK"})).contains("superseded"));
        assert!(reason(serde_json::json!({"currency": "XXX"})).contains("special"));
        assert!(reason(serde_json::json!({"order_id": ""})).contains("order_id"));
        assert!(reason(serde_json::json!({"customer_id": "c".repeat(129)})).contains("customer_id"));
        assert!(reason(serde_json::json!({"payment_attempt_id": "nope"})).contains("UUID"));
        assert!(reason(serde_json::json!({"requested_at": "yesterday"})).contains("RFC 3339"));
        assert!(reason(serde_json::json!({"description": "d".repeat(501)})).contains("description"));
        assert!(reason(serde_json::json!({"order_id": null})).contains("missing field `order_id`"));
    }

    #[test]
    fn bodies_that_are_not_json_or_too_big_are_invalid() {
        assert!(validate(&headers(), b"not json")
            .unwrap_err()
            .0
            .contains("JSON"));
        assert!(validate(&headers(), &[0xff, 0xfe])
            .unwrap_err()
            .0
            .contains("UTF-8"));
        let big = vec![b' '; MAX_BODY_BYTES + 1];
        assert!(validate(&headers(), &big).unwrap_err().0.contains("bytes"));
    }

    #[test]
    fn message_ids_must_be_present_bounded_and_printable() {
        let no_id = CommandHeaders::default();
        assert!(validate(&no_id, &body(serde_json::json!({})))
            .unwrap_err()
            .0
            .contains("missing Nats-Msg-Id"));
        assert!(validate_message_id(Some(&"a".repeat(201))).is_err());
        assert!(validate_message_id(Some("tab\there")).is_err());
        assert!(validate_message_id(Some(&"a".repeat(200))).is_ok());
    }

    #[test]
    fn fingerprint_covers_what_is_charged_and_nothing_else() {
        let a = validate(&headers(), &body(serde_json::json!({})))
            .unwrap()
            .command;
        let same = validate(
            &headers(),
            &body(serde_json::json!({"description": "other", "requested_at": null})),
        )
        .unwrap()
        .command;
        let more = validate(&headers(), &body(serde_json::json!({"amount_minor": 2000})))
            .unwrap()
            .command;
        assert_eq!(a.fingerprint(), same.fingerprint());
        assert_ne!(a.fingerprint(), more.fingerprint());
        assert_eq!(
            a.idempotency_key(),
            "onecharge-6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11"
        );
    }
}
