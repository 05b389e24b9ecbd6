//! What a payment gateway's answer means, whatever the connector that read it: the
//! [`GatewayOutcome`] of a charging call, the [`LookupOutcome`] of a lookup, the
//! [`GatewayCharge`] both describe charges with, and the one rule that reads a lookup's
//! charges against an attempt ([`read_lookup`]).
//!
//! Pure and connector-independent: each connector's own table (the §3 dialect in
//! `gateway/onecharge.rs`, Stripe's in `gateway/stripe/`) reads its wire into these types,
//! so the executor and the reconciler branch on a type, never on an error's text.
//!
//! The rule that keeps "at most once": whenever the gateway *may* have charged and the answer
//! does not prove what happened, the outcome is [`GatewayOutcome::Ambiguous`]: the attempt
//! goes to `unknown` and only a lookup settles it.

use super::GatewayChargeId;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::{bounded, IdempotencyKey, Money, PaymentAttemptId};

/// Longest delay a `Retry-After` is honoured for. A gateway that asks for more (or sends a
/// number too large for any clock) is asked again after this: a bounded wait, never a panic
/// on a time that overflows, and at worst one more `429`.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Longest text kept from a gateway's answer in a reason or error (the database bounds
/// `review_reason`, `last_error` and `gateway_calls.error` to 1024 characters).
pub const MAX_REASON_CHARS: usize = 1000;

/// What a configuration fault's status says, for a reason a person reads: `403` is a
/// permission the key lacks for this request (a restricted key, decision 245), anything
/// else the key itself.
pub fn refused_key_words(status: u16) -> &'static str {
    if status == 403 {
        "the gateway refused onecharge's key the permission for this request"
    } else {
        "the gateway rejected onecharge's credentials"
    }
}

/// When to try a request again that the gateway refused without charging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// `409 idempotency_in_progress`: an earlier request with this key is still running;
    /// try again shortly with the same key.
    InProgress,
    /// `429` with a usable `Retry-After`: not before this delay.
    Delay(Duration),
    /// `429` without a usable `Retry-After`: the executor's own backoff decides.
    Backoff,
}

/// What one `POST /v1/charges` answer means for the attempt (contract §3 table). Each
/// variant maps to exactly one next state; see the executor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayOutcome {
    /// Charged (now, or earlier under the same key and replayed). Final.
    #[error("succeeded: charge {charge_id}{}", if *replayed { " (replayed)" } else { "" })]
    Succeeded {
        charge_id: GatewayChargeId,
        replayed: bool,
    },
    /// Declined by the gateway; the decline is stored under the key too. Final.
    #[error("declined: {}", decline_code.as_deref().unwrap_or("no decline code"))]
    Declined {
        charge_id: GatewayChargeId,
        decline_code: Option<String>,
        replayed: bool,
    },
    /// Accepted and not finished: the gateway is still processing charge `charge_id`
    /// (Stripe's `processing`, e.g. a bank debit). Not final and not a failure: the attempt
    /// goes to `unknown` and the reconciler reads the charge by id until it settles.
    #[error("processing: charge {charge_id} is not final yet")]
    Processing { charge_id: GatewayChargeId },
    /// Stripe's `requires_action` after an off-session confirm: PaymentIntent `charge_id`
    /// waits for a customer who is not there to authenticate. Not charged yet, but it could
    /// be if the customer acted: the executor cancels it (then it is a decline,
    /// `authentication_required`) or leaves it for a person (`stripe_requires_action`).
    #[error("requires action: PaymentIntent {charge_id} waits for the customer to authenticate")]
    RequiresAction { charge_id: GatewayChargeId },
    /// Not processed; send the same request again later.
    #[error("retry later: {reason}")]
    RetryLater { after: RetryAfter, reason: String },
    /// The gateway refused the request itself (`400`, `422`, or another status the contract
    /// does not list): retrying cannot help and guessing could charge wrongly, so a person
    /// decides. The reason carries the gateway's own words.
    #[error("needs review: {reason}")]
    NeedsReview { reason: String },
    /// `401`/`403`: onecharge's configuration is wrong. Every gateway call must stop until
    /// it is fixed; the attempt stays retryable and its try is not counted.
    #[error("the gateway rejected onecharge's credentials (HTTP {status})")]
    CredentialsFault { status: u16 },
    /// `404`, `405` or a `3xx` (never followed): onecharge is calling the wrong URL (a
    /// wrong `gateway_url` after a deploy). Nothing was processed; like a credentials fault,
    /// every call pauses until it is fixed and the try is not counted.
    #[error("the gateway answered HTTP {status}: gateway_url looks wrong")]
    EndpointFault { status: u16 },
    /// The request never reached the gateway; retry with backoff.
    #[error("not sent: {reason}")]
    NotSent { reason: String },
    /// The gateway may or may not have charged: only a lookup under the key can tell.
    #[error("ambiguous: {reason}")]
    Ambiguous { reason: String },
}

impl GatewayOutcome {
    /// The label of [`GatewayOutcome::CredentialsFault`]: read back from stored calls.
    pub const CREDENTIALS_FAULT: &'static str = "credentials_fault";
    /// The label of [`GatewayOutcome::EndpointFault`]: read back from stored calls.
    pub const ENDPOINT_FAULT: &'static str = "endpoint_fault";

    /// A bounded label for metrics and the `gateway_calls.outcome` column.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Succeeded { .. } => "succeeded",
            Self::Declined { .. } => "declined",
            Self::Processing { .. } => "processing",
            Self::RequiresAction { .. } => "requires_action",
            Self::RetryLater {
                after: RetryAfter::InProgress,
                ..
            } => "in_progress",
            Self::RetryLater { .. } => "rate_limited",
            Self::NeedsReview { .. } => "needs_review",
            Self::CredentialsFault { .. } => Self::CREDENTIALS_FAULT,
            Self::EndpointFault { .. } => Self::ENDPOINT_FAULT,
            Self::NotSent { .. } => "not_sent",
            Self::Ambiguous { .. } => "ambiguous",
        }
    }

    /// The gateway's charge id, when the answer carried one.
    pub fn charge_id(&self) -> Option<&GatewayChargeId> {
        match self {
            Self::Succeeded { charge_id, .. }
            | Self::Declined { charge_id, .. }
            | Self::Processing { charge_id }
            | Self::RequiresAction { charge_id } => Some(charge_id),
            _ => None,
        }
    }

    /// Whether this answer says the gateway itself is failing (unreachable, erroring,
    /// timing out). The circuit breaker counts these; an answer that shows a working
    /// gateway (a charge, a decline, a refusal of the request) resets it.
    pub fn is_gateway_failure(&self) -> bool {
        matches!(self, Self::NotSent { .. } | Self::Ambiguous { .. })
    }
}

/// A charge as the gateway describes it (contract §3). Only the fields onecharge acts on
/// are required; the rest are kept when present for evidence.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GatewayCharge {
    pub id: GatewayChargeId,
    /// `succeeded` or `declined`; anything else is kept as said, and adopted never.
    pub status: ChargeStatus,
    #[serde(default)]
    pub decline_code: Option<String>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
    #[serde(default)]
    pub reference: Option<String>,
    #[serde(default)]
    pub amount_minor: Option<i64>,
    #[serde(default)]
    pub currency: Option<String>,
}

/// The status a gateway gives a charge. Contract §3 knows two; any other word is kept as
/// the gateway said it (for the reason an operator reads) and never adopted.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub enum ChargeStatus {
    Succeeded,
    Declined,
    /// A status contract §3 does not list (`pending`, say).
    Other(String),
}

impl From<String> for ChargeStatus {
    fn from(status: String) -> Self {
        match status.as_str() {
            "succeeded" => Self::Succeeded,
            "declined" => Self::Declined,
            _ => Self::Other(status),
        }
    }
}

impl fmt::Display for ChargeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Succeeded => "succeeded",
            Self::Declined => "declined",
            Self::Other(status) => status,
        })
    }
}

/// What a lookup that settled nothing does to the attempt's count of failed lookups
/// (`payment_attempts.reconcile_checks`), the position on `reconciler.schedule`: once the
/// count has used the schedule up, the next failure hands the attempt to a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailedLookups {
    /// A failed (or unsettled) lookup: one step of the schedule used up.
    Count,
    /// Not the attempt's failure (onecharge's credentials or URL, a person's recheck, a
    /// send that may still be running): the count stays.
    Keep,
    /// The gateway answered that the payment is still processing: the failures before this
    /// answer were not the gateway's last word, so the count starts again. A processing
    /// payment's own time runs from its last send (`reconciler.processing_max`), so a
    /// debit processing for days is never handed over by a transient failure on the way.
    Restart,
}

impl FailedLookups {
    /// The stored spelling the reschedule's SQL reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Count => "count",
            Self::Keep => "keep",
            Self::Restart => "restart",
        }
    }
}

/// What one `GET /v1/charges?idempotency_key=…` answer means (for the reconciler).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupOutcome {
    /// The outcomes recorded under the key; empty means nothing was charged under it (within
    /// the gateway's key retention window).
    #[error("found {} charge(s)", .0.len())]
    Found(Vec<GatewayCharge>),
    /// `401`/`403`: stop calling the gateway, as for a charge.
    #[error("the gateway rejected onecharge's credentials (HTTP {status})")]
    CredentialsFault { status: u16 },
    /// `404`, `405`, `3xx`: the wrong URL, as for a charge; ask again later, uncounted.
    #[error("the gateway answered HTTP {status}: gateway_url looks wrong")]
    EndpointFault { status: u16 },
    /// The lookup did not answer the question (not sent, timed out, 429, 5xx, an unreadable
    /// body): ask again later. A lookup never charges, so retrying it is always safe.
    #[error("lookup failed: {reason}")]
    Failed { reason: String },
}

impl LookupOutcome {
    /// A bounded label for metrics and the `gateway_calls.outcome` column.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Found(charges) if charges.is_empty() => "not_found",
            Self::Found(_) => "found",
            Self::CredentialsFault { .. } => GatewayOutcome::CREDENTIALS_FAULT,
            Self::EndpointFault { .. } => GatewayOutcome::ENDPOINT_FAULT,
            Self::Failed { .. } => "failed",
        }
    }
}

/// What a charge found under an attempt's key must say to be that attempt's charge.
#[derive(Debug, Clone, Copy)]
pub struct ExpectedCharge<'a> {
    pub idempotency_key: &'a IdempotencyKey,
    /// Sent as the charge's `reference`.
    pub payment_attempt_id: PaymentAttemptId,
    pub money: Money,
}

/// What the charges a lookup found mean for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupReading {
    /// Nothing recorded under the key (which alone does not prove "not charged": see the
    /// reconciler).
    Nothing,
    /// Exactly one successful charge, matching the attempt.
    Succeeded(GatewayCharge),
    /// Only declines, matching the attempt: the first one.
    Declined(GatewayCharge),
    /// Several successful charges under one key: money taken more than once.
    SeveralSucceeded(Vec<GatewayChargeId>),
    /// A charge whose status is neither `succeeded` nor `declined`: not the contract's
    /// answer, and maybe not final. Never adopted; look again later.
    Unsettled { reason: String },
    /// A charge that is not this attempt's (another key, reference, amount or currency, or
    /// one that does not say): never adopted; a person must look.
    Mismatch { reason: String },
}

/// Reads a lookup's charges against the attempt. Only the contract's answer is adopted: a
/// `succeeded` or `declined` charge under the same key, reference, amount and currency.
pub fn read_lookup(charges: &[GatewayCharge], expected: &ExpectedCharge<'_>) -> LookupReading {
    for charge in charges {
        if let Some(reason) = mismatch(charge, expected) {
            return LookupReading::Mismatch {
                reason: bounded(
                    &format!(
                        "the gateway's charge {} under key {} is not this attempt's: {reason}; not adopted",
                        charge.id, expected.idempotency_key
                    ),
                    MAX_REASON_CHARS,
                ),
            };
        }
    }
    if let Some(odd) = charges
        .iter()
        .find(|c| matches!(c.status, ChargeStatus::Other(_)))
    {
        return LookupReading::Unsettled {
            reason: bounded(
                &format!(
                    "the gateway's charge {} has status `{}`, neither succeeded nor declined; not adopted",
                    odd.id, odd.status
                ),
                MAX_REASON_CHARS,
            ),
        };
    }
    let succeeded: Vec<&GatewayCharge> = charges
        .iter()
        .filter(|c| c.status == ChargeStatus::Succeeded)
        .collect();
    match succeeded.as_slice() {
        [] => charges
            .first()
            .cloned()
            .map_or(LookupReading::Nothing, LookupReading::Declined),
        [one] => LookupReading::Succeeded((*one).clone()),
        several => LookupReading::SeveralSucceeded(several.iter().map(|c| c.id.clone()).collect()),
    }
}

/// Why `charge` is not the attempt's, if it is not.
fn mismatch(charge: &GatewayCharge, expected: &ExpectedCharge<'_>) -> Option<String> {
    fn differs<T: PartialEq + std::fmt::Display + ?Sized>(
        field: &str,
        got: Option<&T>,
        want: &T,
    ) -> Option<String> {
        match got {
            None => Some(format!("it does not say its {field}")),
            Some(got) if got != want => Some(format!("{field} {got}, the attempt's is {want}")),
            Some(_) => None,
        }
    }
    // The gateway's words are text; the attempt's values are compared as the text they were
    // sent as, so that a reference or key the gateway changed in any way is not adopted.
    let reference = expected.payment_attempt_id.to_string();
    differs(
        "idempotency_key",
        charge.idempotency_key.as_deref(),
        expected.idempotency_key.as_str(),
    )
    .or_else(|| differs("reference", charge.reference.as_deref(), reference.as_str()))
    .or_else(|| {
        differs(
            "amount_minor",
            charge.amount_minor.as_ref(),
            &expected.money.amount_minor(),
        )
    })
    .or_else(|| {
        differs(
            "currency",
            charge.currency.as_deref(),
            expected.money.currency().code(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ATTEMPT: &str = "6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11";

    /// The attempt's own succeeded charge, as contract §3 describes it.
    fn succeeded() -> serde_json::Value {
        serde_json::json!({"id": "ch_1", "status": "succeeded", "amount_minor": 1999,
            "currency": "EUR", "reference": ATTEMPT,
            "idempotency_key": format!("onecharge-{ATTEMPT}")})
    }

    #[test]
    fn only_the_contracts_lookup_answer_for_this_attempt_is_adopted() {
        let id: PaymentAttemptId = ATTEMPT.parse().unwrap();
        let key = IdempotencyKey::for_attempt(id);
        let expected = ExpectedCharge {
            idempotency_key: &key,
            payment_attempt_id: id,
            money: Money::of(1999, "EUR").unwrap(),
        };
        let found = |overrides: serde_json::Value| -> GatewayCharge {
            let mut value = succeeded();
            for (k, v) in overrides.as_object().unwrap() {
                value[k] = v.clone();
            }
            serde_json::from_value(value).unwrap()
        };
        let ok = found(serde_json::json!({}));
        let declined =
            found(serde_json::json!({"status": "declined", "decline_code": "card_declined"}));
        let read = |charges: &[GatewayCharge]| read_lookup(charges, &expected);
        let is_mismatch = |r: &LookupReading, word: &str| matches!(r, LookupReading::Mismatch { reason } if reason.contains(word));

        assert_eq!(read(&[]), LookupReading::Nothing);
        assert_eq!(
            read(std::slice::from_ref(&ok)),
            LookupReading::Succeeded(ok.clone())
        );
        assert_eq!(
            read(std::slice::from_ref(&declined)),
            LookupReading::Declined(declined.clone())
        );
        assert_eq!(
            read(&[declined.clone(), ok.clone()]),
            LookupReading::Succeeded(ok.clone()),
            "money taken wins over a decline"
        );
        assert_eq!(
            read(&[ok.clone(), found(serde_json::json!({"id": "ch_2"}))]),
            LookupReading::SeveralSucceeded(vec![
                GatewayChargeId::from_gateway("ch_1"),
                GatewayChargeId::from_gateway("ch_2")
            ])
        );
        for status in [
            "pending",
            "processing",
            "failed",
            "refunded",
            "",
            "Succeeded",
        ] {
            let odd = found(serde_json::json!({ "status": status }));
            assert!(
                matches!(read(&[odd]), LookupReading::Unsettled { ref reason } if reason.contains(&format!("`{status}`"))),
                "status {status:?} must never be adopted"
            );
        }
        let cases = [
            (
                serde_json::json!({"idempotency_key": "other"}),
                "idempotency_key other",
            ),
            (
                serde_json::json!({"reference": "someone-else"}),
                "reference someone-else",
            ),
            (
                serde_json::json!({"amount_minor": 2000}),
                "amount_minor 2000",
            ),
            (serde_json::json!({"currency": "USD"}), "currency USD"),
            (
                serde_json::json!({"currency": null}),
                "does not say its currency",
            ),
            (
                serde_json::json!({"amount_minor": null}),
                "does not say its amount_minor",
            ),
        ];
        for (overrides, words) in cases {
            let reading = read(&[found(overrides.clone())]);
            assert!(is_mismatch(&reading, words), "{overrides}: {reading:?}");
        }
        let mismatched_decline =
            found(serde_json::json!({"status": "declined", "amount_minor": 1}));
        assert!(is_mismatch(
            &read(&[ok, mismatched_decline]),
            "amount_minor 1"
        ));
    }
}
