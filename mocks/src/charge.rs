//! The charge: its wire body, the request parameters that identify it, and the
//! deterministic outcomes that tests select by payment method.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::config::FaultKind;

/// Largest accepted `amount_minor`, the same bound as the ChargePayment command's.
pub const MAX_AMOUNT_MINOR: i64 = 1_000_000_000_000;

/// Longest accepted `Idempotency-Key`, in characters (contract §3).
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// Payment methods with a fixed meaning, so tests and `onecharge demo` can ask for an
/// outcome instead of hoping for one. Any other payment method succeeds.
pub mod payment_methods {
    /// Always declined with `decline_code: "card_declined"`.
    pub const CARD_DECLINED: &str = "pm_card_declined";
    /// Always declined with `decline_code: "insufficient_funds"`.
    pub const INSUFFICIENT_FUNDS: &str = "pm_card_insufficient_funds";
    /// An ordinary card that succeeds.
    pub const CARD_VISA: &str = "pm_card_visa";

    // Fault triggers: each fires only on the first request under an idempotency key; later
    // requests with that key behave normally (and the card succeeds), so a retry or a
    // lookup can settle the attempt.

    /// `500`, nothing charged.
    pub const FAULT_ERROR_BEFORE: &str = "pm_fault_error_before";
    /// Charged, then `500`.
    pub const FAULT_ERROR_AFTER: &str = "pm_fault_error_after";
    /// Charged, then the response is held for `hang_for`.
    pub const FAULT_HANG_AFTER: &str = "pm_fault_hang_after";
    /// Charged, then the connection is closed without any response.
    pub const FAULT_DROP_AFTER: &str = "pm_fault_drop_after";
    /// `429` + `Retry-After: 1`, nothing charged.
    pub const FAULT_RATE_LIMIT: &str = "pm_fault_rate_limit";
    /// `400 invalid_request` although the request is valid, nothing charged.
    pub const FAULT_BAD_REQUEST: &str = "pm_fault_bad_request";
    /// The key stays in progress for `slow_charge_for` (`409` to re-sends, nothing found by
    /// lookups), then the charge succeeds.
    pub const FAULT_SLOW_CHARGE: &str = "pm_fault_slow_charge";

    // Refund behaviour, by the charge's card, as Stripe's test cards of the same names (the
    // charge itself succeeds): every refund of a charge made with one of them.

    /// Each refund starts `pending`, then succeeds after `refund_settle_after` (or when
    /// settled sooner).
    pub const PENDING_REFUND: &str = "pm_card_pendingRefund";
    /// Each refund starts `succeeded`, then fails (`failure_reason:
    /// "expired_or_canceled_card"`) after `refund_settle_after` (or when settled sooner).
    pub const REFUND_FAIL: &str = "pm_card_refundFail";
}

/// The fault a payment method triggers on the first request under a key, if any.
pub fn fault_trigger(payment_method: &str) -> Option<FaultKind> {
    use payment_methods::*;
    match payment_method {
        FAULT_ERROR_BEFORE => Some(FaultKind::ErrorBefore),
        FAULT_ERROR_AFTER => Some(FaultKind::ErrorAfter),
        FAULT_HANG_AFTER => Some(FaultKind::HangAfter),
        FAULT_DROP_AFTER => Some(FaultKind::DropAfter),
        FAULT_RATE_LIMIT => Some(FaultKind::RateLimit),
        FAULT_BAD_REQUEST => Some(FaultKind::BadRequest),
        FAULT_SLOW_CHARGE => Some(FaultKind::SlowCharge),
        _ => None,
    }
}

/// The decline code a payment method always gets, or `None` when it succeeds.
pub fn decline_code(payment_method: &str) -> Option<&'static str> {
    match payment_method {
        payment_methods::CARD_DECLINED => Some("card_declined"),
        payment_methods::INSUFFICIENT_FUNDS => Some("insufficient_funds"),
        _ => None,
    }
}

/// Whether the customer was charged. Both are final and both are stored under the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChargeStatus {
    /// The customer was charged: `201` when new.
    Succeeded,
    /// The card was refused (`decline_code` says why): `402`, final, never retried.
    Declined,
}

/// A committed charge: exactly the charge body of contract §3, and one ledger entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// `ch_` followed by 24 hex digits drawn from the seeded generator.
    pub id: String,
    /// Succeeded or declined; decided by the payment method alone.
    pub status: ChargeStatus,
    /// In the currency's minor unit, as requested (1 to 10^12).
    pub amount_minor: i64,
    /// ISO 4217 alphabetic code, as requested.
    pub currency: String,
    /// As requested; lets a test tell whose charge a ledger entry is.
    pub customer_id: String,
    /// As requested; it selected the outcome and any fault trigger.
    pub payment_method: String,
    /// onecharge's `payment_attempt_id`; what an operator searches the gateway for.
    pub reference: String,
    /// The key the charge is stored under; a key charges once per retention window.
    pub idempotency_key: String,
    /// Why a declined charge was declined; `null` when it succeeded.
    pub decline_code: Option<String>,
    /// On the mock's clock, so it jumps with `advance_clock`.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// The request's `metadata` as sent (onecharge's `onecharge_deployment`), echoed by the
    /// charge and the list; left out when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

#[cfg(test)]
impl Charge {
    /// A succeeded charge `id` made at `created_at`, the one fixture the crate's unit tests
    /// share (keys, ledger, the §3 list).
    pub(crate) fn sample(id: &str, created_at: OffsetDateTime) -> Charge {
        Charge {
            id: id.to_owned(),
            status: ChargeStatus::Succeeded,
            amount_minor: 1000,
            currency: "EUR".into(),
            customer_id: "cus_1".into(),
            payment_method: "pm_card_visa".into(),
            reference: format!("ref-{id}"),
            idempotency_key: format!("key-{id}"),
            decline_code: None,
            created_at,
            metadata: BTreeMap::new(),
        }
    }
}

/// A request body the gateway refuses with `400 invalid_request`; the message says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRequest(pub String);

/// The validated parameters of `POST /v1/charges`.
///
/// Two requests under one idempotency key are "the same request" exactly when these are
/// equal; otherwise the second is `422 idempotency_key_reused`. Unknown body fields are
/// ignored and take no part in that comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChargeParams {
    /// 1 to [`MAX_AMOUNT_MINOR`]; a JSON integer, not a float or a string.
    pub amount_minor: i64,
    /// Three upper-case letters (the code list itself is onecharge's intake's to check).
    pub currency: String,
    /// 1 to 128 characters.
    pub customer_id: String,
    /// 1 to 255 characters; selects the outcome ([`payment_methods`]).
    pub payment_method: String,
    /// 1 to 255 characters; onecharge sends the `payment_attempt_id`.
    pub reference: String,
    /// Optional, at most 500 characters; part of the comparison like every other field.
    pub description: Option<String>,
    /// Optional string pairs (Stripe's limits: 50 keys of 40 characters, values of 500);
    /// part of the comparison.
    pub metadata: BTreeMap<String, String>,
}

impl ChargeParams {
    /// Parses and validates a request body, naming the first field that is wrong.
    pub fn from_json(body: &[u8]) -> Result<ChargeParams, InvalidRequest> {
        let fields = json_object(body)?;
        let amount_minor = amount_field(&fields)?;
        let currency = currency_field(&fields)?;
        Ok(ChargeParams {
            amount_minor,
            currency,
            customer_id: text_field(&fields, "customer_id", 128)?,
            payment_method: text_field(&fields, "payment_method", 255)?,
            reference: text_field(&fields, "reference", 255)?,
            description: optional_text_field(&fields, "description", 500)?,
            metadata: metadata_field(&fields)?,
        })
    }
}

/// `metadata`: left out, `null`, or an object of at most 50 string values, keys of 1 to 40
/// characters and values of at most 500 (Stripe's limits).
pub(crate) fn metadata_field(
    fields: &Map<String, Value>,
) -> Result<BTreeMap<String, String>, InvalidRequest> {
    let object = match fields.get("metadata") {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(object)) if object.len() <= 50 => object,
        Some(_) => {
            return Err(InvalidRequest(
                "metadata must be an object of at most 50 string values".to_owned(),
            ))
        }
    };
    object
        .iter()
        .map(|(key, value)| match value {
            Value::String(text)
                if (1..=40).contains(&key.chars().count()) && text.chars().count() <= 500 =>
            {
                Ok((key.clone(), text.clone()))
            }
            _ => Err(InvalidRequest(format!(
                "metadata `{key}`: keys are 1 to 40 characters, values strings of at most 500"
            ))),
        })
        .collect()
}

/// A request body's JSON object, the one shape the dialect's POST bodies take.
pub(crate) fn json_object(body: &[u8]) -> Result<Map<String, Value>, InvalidRequest> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| InvalidRequest(format!("the body is not valid JSON: {e}")))?;
    match value {
        Value::Object(fields) => Ok(fields),
        _ => Err(InvalidRequest("the body must be a JSON object".to_owned())),
    }
}

/// `amount_minor`: a JSON integer from 1 to [`MAX_AMOUNT_MINOR`], not a float or a string.
pub(crate) fn amount_field(fields: &Map<String, Value>) -> Result<i64, InvalidRequest> {
    fields
        .get("amount_minor")
        .ok_or_else(|| InvalidRequest("amount_minor is required".to_owned()))?
        .as_i64()
        .filter(|amount| (1..=MAX_AMOUNT_MINOR).contains(amount))
        .ok_or_else(|| {
            InvalidRequest(format!(
                "amount_minor must be an integer from 1 to {MAX_AMOUNT_MINOR}"
            ))
        })
}

/// `currency`: three upper-case letters (the code list itself is onecharge's intake's to
/// check).
pub(crate) fn currency_field(fields: &Map<String, Value>) -> Result<String, InvalidRequest> {
    let currency = text_field(fields, "currency", 3)?;
    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(InvalidRequest(
            "currency must be a three-letter upper-case ISO 4217 code".to_owned(),
        ));
    }
    Ok(currency)
}

/// A required string field of 1 to `max_chars` characters.
pub(crate) fn text_field(
    fields: &Map<String, Value>,
    name: &str,
    max_chars: usize,
) -> Result<String, InvalidRequest> {
    let text = match fields.get(name) {
        None | Some(Value::Null) => return Err(InvalidRequest(format!("{name} is required"))),
        Some(Value::String(text)) => text,
        Some(_) => return Err(InvalidRequest(format!("{name} must be a string"))),
    };
    let chars = text.chars().count();
    if chars == 0 || chars > max_chars {
        return Err(InvalidRequest(format!(
            "{name} must be 1 to {max_chars} characters"
        )));
    }
    Ok(text.clone())
}

/// [`text_field`] that may be left out or `null`.
pub(crate) fn optional_text_field(
    fields: &Map<String, Value>,
    name: &str,
    max_chars: usize,
) -> Result<Option<String>, InvalidRequest> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => text_field(fields, name, max_chars).map(Some),
    }
}

/// Checks an `Idempotency-Key` header value: 1–255 printable ASCII characters.
pub fn validate_idempotency_key(raw: Option<&[u8]>) -> Result<String, InvalidRequest> {
    let raw = raw.ok_or_else(|| InvalidRequest("the Idempotency-Key header is required".into()))?;
    let printable = raw.iter().all(|b| (0x20..0x7f).contains(b));
    if raw.is_empty() || raw.len() > MAX_IDEMPOTENCY_KEY_LEN || !printable {
        return Err(InvalidRequest(format!(
            "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} printable ASCII characters"
        )));
    }
    Ok(String::from_utf8_lossy(raw).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(overrides: Value) -> Vec<u8> {
        let mut value = serde_json::json!({
            "amount_minor": 1999, "currency": "EUR", "customer_id": "cus_42",
            "payment_method": "pm_card_visa", "reference": "ref-1", "description": "Order 1"
        });
        for (k, v) in overrides.as_object().unwrap() {
            value[k] = v.clone();
        }
        serde_json::to_vec(&value).unwrap()
    }

    #[test]
    fn a_complete_body_is_accepted_and_unknown_fields_are_ignored() {
        let params = ChargeParams::from_json(&body(serde_json::json!({"extra": 1}))).unwrap();
        assert_eq!(params.amount_minor, 1999);
        assert_eq!(params.description.as_deref(), Some("Order 1"));
    }

    #[test]
    fn each_malformed_field_is_named_in_the_error() {
        let cases = [
            (serde_json::json!({"amount_minor": 0}), "amount_minor"),
            (serde_json::json!({"amount_minor": 1.5}), "amount_minor"),
            (serde_json::json!({"amount_minor": "10"}), "amount_minor"),
            (
                serde_json::json!({"amount_minor": MAX_AMOUNT_MINOR + 1}),
                "amount_minor",
            ),
            (serde_json::json!({"currency": "eur"}), "currency"),
            (serde_json::json!({"currency": "EURO"}), "currency"),
            (serde_json::json!({"customer_id": ""}), "customer_id"),
            (
                serde_json::json!({"payment_method": null}),
                "payment_method",
            ),
            (serde_json::json!({"reference": 7}), "reference"),
            (
                serde_json::json!({"description": "x".repeat(501)}),
                "description",
            ),
        ];
        for (overrides, field) in cases {
            let err = ChargeParams::from_json(&body(overrides.clone())).unwrap_err();
            assert!(err.0.contains(field), "{overrides}: {err}");
        }
    }

    #[test]
    fn idempotency_keys_must_be_1_to_255_printable_characters() {
        assert!(validate_idempotency_key(None).is_err());
        assert!(validate_idempotency_key(Some(b"")).is_err());
        assert!(validate_idempotency_key(Some("k".repeat(256).as_bytes())).is_err());
        assert!(validate_idempotency_key(Some(b"tab\tkey")).is_err());
        assert_eq!(
            validate_idempotency_key(Some("k".repeat(255).as_bytes())).unwrap(),
            "k".repeat(255)
        );
    }
}
