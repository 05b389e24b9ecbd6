//! Stripe's answer table: what each answer to a create, confirm, cancel or retrieve call
//! means ([`Prepared`], [`GatewayOutcome`], [`CancelOutcome`], [`LookupOutcome`]). Every
//! function here is pure (the wire arrives as a [`GatewayReply`]), so each row of the table
//! in `docs/stripe.md` is a unit test below.
//!
//! Over 600 lines only with its tests: each row of the table in `docs/stripe.md` is a test.

use std::collections::HashMap;

use serde::Deserialize;

use super::is_intent_id;
use crate::domain::bounded;
use crate::domain::outcome::{
    ChargeStatus, GatewayCharge, GatewayOutcome, LookupOutcome, RetryAfter, MAX_REASON_CHARS,
};
use crate::domain::{Currency, GatewayChargeId, GatewayObjectId, Money};
use crate::gateway::wire::{parse_retry_after, snippet, Answer, GatewayReply, Hints};
use crate::gateway::{CancelOutcome, Prepared};

/// The fields of a PaymentIntent that every reader of one takes (a retrieve's, the
/// sweep's list page).
#[derive(Debug, Clone, Deserialize)]
pub(in crate::gateway) struct IntentFields {
    pub(in crate::gateway) id: String,
    pub(in crate::gateway) status: String,
    #[serde(default)]
    pub(in crate::gateway) amount: Option<i64>,
    #[serde(default)]
    pub(in crate::gateway) currency: Option<String>,
    #[serde(default)]
    pub(in crate::gateway) metadata: HashMap<String, String>,
}

impl IntentFields {
    /// Its amount in ISO 4217 minor units (when Stripe says both amount and currency and
    /// the amount converts) and its currency in upper case.
    pub(in crate::gateway) fn money(&self) -> (Option<i64>, Option<String>) {
        let currency = self.currency.as_deref().map(str::to_ascii_uppercase);
        let amount_minor = match (self.amount, self.known_currency()) {
            (Some(amount), Some(currency)) => {
                Money::from_stripe(amount, currency).map(|m| m.amount_minor())
            }
            _ => None,
        };
        (amount_minor, currency)
    }

    /// Another amount Stripe reports about this PaymentIntent (its charge's
    /// `amount_refunded`), in the PaymentIntent's currency, read back into ISO 4217 minor
    /// units by the one conversion ([`Money::from_stripe_reported`]); `None` when Stripe
    /// names no currency onecharge knows.
    pub(in crate::gateway) fn reported_minor(&self, amount: i64) -> Option<i64> {
        self.known_currency()
            .and_then(|currency| Money::from_stripe_reported(amount, currency))
            .map(|m| m.amount_minor())
    }

    fn known_currency(&self) -> Option<Currency> {
        self.currency
            .as_deref()
            .and_then(|code| Currency::from_any_case(code).ok())
    }

    /// What onecharge records as the charge of this PaymentIntent: the intent's own id,
    /// which every later lookup, refund and check asks Stripe about (decision 123).
    pub(in crate::gateway) fn charge_id(&self) -> GatewayChargeId {
        GatewayChargeId::from_gateway(self.id.clone())
    }
}

/// A PaymentIntent as Stripe describes it; only what onecharge reads.
#[derive(Debug, Clone, Deserialize)]
struct PaymentIntent {
    #[serde(flatten)]
    fields: IntentFields,
    #[serde(default)]
    last_payment_error: Option<ErrorDetail>,
    #[serde(default)]
    cancellation_reason: Option<String>,
}

impl std::ops::Deref for PaymentIntent {
    type Target = IntentFields;

    fn deref(&self) -> &IntentFields {
        &self.fields
    }
}

#[derive(Debug, Clone, Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

/// Stripe's error object (docs.stripe.com/api/errors).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct ErrorDetail {
    #[serde(rename = "type", default)]
    pub(super) kind: Option<String>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    decline_code: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    payment_intent: Option<Box<PaymentIntent>>,
}

impl ErrorDetail {
    /// The most specific code: the issuer's `decline_code`, else Stripe's `code`.
    fn decline_code(&self) -> Option<String> {
        self.decline_code.clone().or_else(|| self.code.clone())
    }
}

/// Reads the create call's answer. Nothing here can have charged: the PaymentIntent is
/// created unconfirmed. So an answer that proves nothing (5xx, a timeout, a dropped
/// connection) is retried with backoff under the same create key — Stripe replays the
/// PaymentIntent it made, if it made one.
pub fn classify_create(reply: GatewayReply<'_>, hints: Hints) -> Prepared {
    let (status, retry_after, body) = match reply {
        GatewayReply::NotSent { error } => {
            return Prepared::Refused(GatewayOutcome::NotSent {
                reason: bounded(error, MAX_REASON_CHARS),
            })
        }
        GatewayReply::Lost { error } => {
            return Prepared::Refused(GatewayOutcome::NotSent {
                reason: bounded(
                    &format!(
                        "creating the PaymentIntent got no answer ({error}); an unconfirmed PaymentIntent never charges, \
                         so it is asked for again under the same key"
                    ),
                    MAX_REASON_CHARS,
                ),
            })
        }
        GatewayReply::Answered {
            status,
            retry_after,
            body,
            ..
        } => (status, retry_after, body),
    };
    match status {
        200..=299 => match serde_json::from_slice::<PaymentIntent>(body) {
            Ok(intent) if is_intent_id(&intent.id) => Prepared::Object {
                id: GatewayObjectId::from_gateway(intent.fields.id),
            },
            _ => Prepared::Refused(GatewayOutcome::NotSent {
                reason: bounded(
                    &format!(
                        "HTTP {status} to the create call without a readable PaymentIntent: {}; nothing confirmed, \
                         asked for again under the same key",
                        snippet(body)
                    ),
                    MAX_REASON_CHARS,
                ),
            }),
        },
        500..=599 => Prepared::Refused(GatewayOutcome::NotSent {
            reason: bounded(
                &format!(
                    "{}; the PaymentIntent is unconfirmed, so nothing was charged",
                    words(status, body, hints)
                ),
                MAX_REASON_CHARS,
            ),
        }),
        _ => Prepared::Refused(refusal(status, retry_after, body, hints)),
    }
}

/// Reads the confirm call's answer for PaymentIntent `intent` (docs/stripe.md).
pub fn classify_confirm(reply: GatewayReply<'_>, hints: Hints, intent: &str) -> GatewayOutcome {
    let Answer {
        status,
        replayed,
        retry_after,
        body,
    } = match reply.charge_answer(&format!("the confirm of {intent}")) {
        Ok(answer) => answer,
        Err(outcome) => return outcome,
    };
    match status {
        200..=299 => match serde_json::from_slice::<PaymentIntent>(body) {
            Ok(pi) => read_confirmed(&pi, replayed),
            Err(_) => GatewayOutcome::Ambiguous {
                reason: bounded(
                    &format!(
                        "HTTP {status} to the confirm of {intent} without a readable PaymentIntent: {}",
                        snippet(body)
                    ),
                    MAX_REASON_CHARS,
                ),
            },
        },
        // A card error: declined by the issuer (`decline_code`), or off-session
        // authentication required (`authentication_required`). The PaymentIntent goes back
        // to `requires_payment_method` and charges only if confirmed again with a payment
        // method — which onecharge never sends: the decline is final.
        402 => match error_of(body) {
            Some(error) if error.kind.as_deref() == Some("card_error") => {
                GatewayOutcome::Declined {
                    charge_id: error
                        .payment_intent
                        .as_ref()
                        .map_or_else(
                            || GatewayChargeId::from_gateway(intent),
                            |pi| pi.charge_id(),
                        ),
                    decline_code: error.decline_code(),
                    replayed,
                }
            }
            _ => GatewayOutcome::Ambiguous {
                reason: words(status, body, hints),
            },
        },
        // `payment_intent_unexpected_state`: the PaymentIntent was already confirmed (by an
        // earlier try whose answer was lost, under a key Stripe no longer holds): its state,
        // embedded in the error, is the answer.
        400 => match error_of(body) {
            Some(ErrorDetail {
                code: Some(code),
                payment_intent: Some(pi),
                ..
            }) if code == "payment_intent_unexpected_state" => match read_confirmed(&pi, replayed) {
                outcome @ (GatewayOutcome::Succeeded { .. }
                | GatewayOutcome::Declined { .. }
                | GatewayOutcome::Processing { .. }) => outcome,
                _ => GatewayOutcome::NeedsReview {
                    reason: words(status, body, hints),
                },
            },
            _ => refusal(status, retry_after, body, hints),
        },
        500..=599 => GatewayOutcome::Ambiguous {
            reason: words(status, body, hints),
        },
        _ => refusal(status, retry_after, body, hints),
    }
}

/// A PaymentIntent returned by a confirm, read into the executor's outcome.
fn read_confirmed(pi: &PaymentIntent, replayed: bool) -> GatewayOutcome {
    match pi.status.as_str() {
        "succeeded" => GatewayOutcome::Succeeded {
            charge_id: pi.charge_id(),
            replayed,
        },
        "processing" => GatewayOutcome::Processing {
            charge_id: pi.charge_id(),
        },
        "requires_payment_method" if pi.last_payment_error.is_some() => GatewayOutcome::Declined {
            charge_id: pi.charge_id(),
            decline_code: pi
                .last_payment_error
                .as_ref()
                .and_then(ErrorDetail::decline_code),
            replayed,
        },
        "canceled" => GatewayOutcome::Declined {
            charge_id: pi.charge_id(),
            decline_code: Some(canceled_code(pi)),
            replayed,
        },
        // Off-session, Stripe answers a needed authentication with a 402; a PaymentIntent
        // left waiting for the customer is not something onecharge can finish: the executor
        // cancels it or leaves it for a person (`stripe_requires_action`).
        "requires_action" => GatewayOutcome::RequiresAction {
            charge_id: pi.charge_id(),
        },
        other => GatewayOutcome::Ambiguous {
            reason: bounded(
                &format!(
                    "the confirm of {} left it `{other}`: the reconciler reads it by id",
                    pi.id
                ),
                MAX_REASON_CHARS,
            ),
        },
    }
}

/// Reads the answer to `POST /v1/payment_intents/{id}/cancel`. Only a PaymentIntent Stripe
/// shows `canceled` proves that nothing was or will be charged: a canceled PaymentIntent
/// can never be confirmed. One that already `succeeded` or is `processing` (Stripe refuses
/// the cancel with `payment_intent_unexpected_state` and embeds it) is adopted instead;
/// anything else proves nothing, and the caller asks again later.
pub fn classify_cancel(reply: GatewayReply<'_>, intent: &str) -> CancelOutcome {
    let (status, body) = match reply {
        GatewayReply::NotSent { error } | GatewayReply::Lost { error } => {
            return CancelOutcome::Unproven {
                reason: bounded(
                    &format!("cancelling {intent} got no answer: {error}"),
                    MAX_REASON_CHARS,
                ),
            }
        }
        GatewayReply::Answered { status, body, .. } => (status, body),
    };
    let pi = match status {
        200..=299 => serde_json::from_slice::<PaymentIntent>(body).ok(),
        400 => error_of(body)
            .filter(|e| e.code.as_deref() == Some("payment_intent_unexpected_state"))
            .and_then(|e| e.payment_intent.map(|pi| *pi)),
        _ => None,
    };
    match pi {
        Some(pi) if pi.status == "canceled" => CancelOutcome::Canceled {
            charge_id: pi.charge_id(),
        },
        Some(pi) if pi.status == "succeeded" => CancelOutcome::Succeeded {
            charge_id: pi.charge_id(),
        },
        Some(pi) if pi.status == "processing" => CancelOutcome::Processing {
            charge_id: pi.charge_id(),
        },
        Some(pi) => CancelOutcome::Unproven {
            reason: format!(
                "cancelling {} left it `{}`: not proven unable to charge",
                pi.id, pi.status
            ),
        },
        None => CancelOutcome::Unproven {
            reason: bounded(
                &format!(
                    "cancelling {intent}: {}",
                    words(status, body, Hints::default())
                ),
                MAX_REASON_CHARS,
            ),
        },
    }
}

/// `canceled`, or why, when Stripe says (`cancellation_reason`).
fn canceled_code(pi: &PaymentIntent) -> String {
    match &pi.cancellation_reason {
        Some(reason) => bounded(&format!("canceled:{reason}"), 100),
        None => "canceled".into(),
    }
}

/// A 4xx that is not a decline: what Stripe refused, read the same for create and confirm.
fn refusal(status: u16, retry_after: Option<&str>, body: &[u8], hints: Hints) -> GatewayOutcome {
    let error = error_of(body);
    match status {
        401 | 403 => GatewayOutcome::CredentialsFault { status },
        // Stripe answers an unknown object with its own error body (`resource_missing`):
        // that is this request's fault. A 404 without one is the wrong URL.
        404 if error.is_some() => GatewayOutcome::NeedsReview {
            reason: words(status, body, hints),
        },
        300..=399 | 404 | 405 => GatewayOutcome::EndpointFault { status },
        // Another request with this key is still running at Stripe.
        409 => GatewayOutcome::RetryLater {
            after: RetryAfter::InProgress,
            reason: words(status, body, hints),
        },
        // Rate limited: not processed, whatever Stripe-Should-Retry says.
        429 => GatewayOutcome::RetryLater {
            after: retry_after
                .and_then(parse_retry_after)
                .map_or(RetryAfter::Backoff, RetryAfter::Delay),
            reason: words(status, body, hints),
        },
        // The same key with other parameters (or for another endpoint): retrying cannot
        // help, and a person must see why the request changed.
        _ if error.as_ref().and_then(|e| e.kind.as_deref()) == Some("idempotency_error") => {
            GatewayOutcome::NeedsReview {
                reason: words(status, body, hints),
            }
        }
        // Any other 4xx was not processed; Stripe says whether the same request may succeed
        // later.
        400..=499 if hints.should_retry == Some(true) => GatewayOutcome::RetryLater {
            after: RetryAfter::Backoff,
            reason: words(status, body, hints),
        },
        _ => GatewayOutcome::NeedsReview {
            reason: words(status, body, hints),
        },
    }
}

/// Reads the answer to `GET /v1/payment_intents/{id}` for the attempt whose stored key is
/// `idempotency_key`, as the charges the reconciler compares with the attempt: a
/// PaymentIntent that never charged is an empty list, one that did (or finally did not) is
/// one charge. Its `idempotency_key` is the attempt's: the id was stored in that attempt's
/// row, which is the link; its reference, amount and currency are Stripe's own, checked
/// by the reconciler.
pub fn classify_retrieve(reply: GatewayReply<'_>, idempotency_key: &str) -> LookupOutcome {
    let (status, body) = match reply {
        GatewayReply::NotSent { error } | GatewayReply::Lost { error } => {
            return LookupOutcome::Failed {
                reason: bounded(error, MAX_REASON_CHARS),
            }
        }
        GatewayReply::Answered { status, body, .. } => (status, body),
    };
    match status {
        200 => match serde_json::from_slice::<PaymentIntent>(body) {
            Ok(pi) => {
                LookupOutcome::Found(read_retrieved(&pi, idempotency_key).into_iter().collect())
            }
            Err(err) => LookupOutcome::Failed {
                reason: bounded(
                    &format!(
                        "HTTP 200 with an unreadable PaymentIntent ({err}): {}",
                        snippet(body)
                    ),
                    MAX_REASON_CHARS,
                ),
            },
        },
        401 | 403 => LookupOutcome::CredentialsFault { status },
        404 if error_of(body).is_some() => LookupOutcome::Failed {
            reason: format!(
                "{}: Stripe has no PaymentIntent with the stored id under this API key",
                words(status, body, Hints::default())
            ),
        },
        300..=399 | 404 | 405 => LookupOutcome::EndpointFault { status },
        _ => LookupOutcome::Failed {
            reason: words(status, body, Hints::default()),
        },
    }
}

/// The charge a retrieved PaymentIntent amounts to, if any.
fn read_retrieved(pi: &PaymentIntent, idempotency_key: &str) -> Option<GatewayCharge> {
    let (status, decline_code) = match pi.status.as_str() {
        "succeeded" => (ChargeStatus::Succeeded, None),
        // Never confirmed, or a confirm Stripe refused before charging: nothing charged,
        // nothing final.
        "requires_confirmation" => return None,
        "requires_payment_method" => match &pi.last_payment_error {
            Some(error) => (ChargeStatus::Declined, error.decline_code()),
            None => return None,
        },
        "canceled" => (ChargeStatus::Declined, Some(canceled_code(pi))),
        // `processing`, `requires_action`, `requires_capture`, anything new: not final, or
        // not onecharge's flow; never adopted (the reconciler looks again, then a person).
        other => (ChargeStatus::Other(other.to_owned()), None),
    };
    let (amount_minor, currency) = pi.money();
    Some(GatewayCharge {
        id: pi.charge_id(),
        status,
        decline_code,
        idempotency_key: Some(idempotency_key.to_owned()),
        reference: pi.metadata.get("payment_attempt_id").cloned(),
        amount_minor,
        currency,
    })
}

pub(super) fn error_of(body: &[u8]) -> Option<ErrorDetail> {
    serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .map(|b| b.error)
}

/// "HTTP 402 card_error/card_declined (insufficient_funds): <message>", with
/// `Stripe-Should-Retry` when sent. Bounded.
pub(super) fn words(status: u16, body: &[u8], hints: Hints) -> String {
    let mut text = format!("HTTP {status}");
    match error_of(body) {
        Some(error) => {
            let kind = [error.kind.as_deref(), error.code.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("/");
            if !kind.is_empty() {
                text.push(' ');
                text.push_str(&kind);
            }
            if let Some(decline) = &error.decline_code {
                text.push_str(&format!(" ({decline})"));
            }
            if let Some(message) = &error.message {
                text.push_str(": ");
                text.push_str(message);
            }
        }
        None => {
            let raw = snippet(body);
            if !raw.is_empty() {
                text.push(' ');
                text.push_str(&raw);
            }
        }
    }
    if let Some(retry) = hints.should_retry {
        text.push_str(&format!(" [Stripe-Should-Retry: {retry}]"));
    }
    bounded(&text, MAX_REASON_CHARS)
}

#[cfg(test)]
mod tests {
    //! One test per row of the table in docs/stripe.md.

    use std::time::Duration;

    use super::*;

    const PI: &str = "pi_3Nx1";

    fn answer(status: u16, body: &str) -> GatewayReply<'_> {
        GatewayReply::Answered {
            status,
            replayed: false,
            retry_after: None,
            body: body.as_bytes(),
        }
    }

    fn confirm(status: u16, body: &str) -> GatewayOutcome {
        classify_confirm(answer(status, body), Hints::default(), PI)
    }

    fn intent(status: &str) -> serde_json::Value {
        serde_json::json!({
            "id": PI, "object": "payment_intent", "status": status, "amount": 1999,
            "currency": "eur", "customer": "cus_42", "payment_method": "pm_card_visa",
            "metadata": {"payment_attempt_id": "6f1c2a9e", "order_id": "ord_1001"},
            "last_payment_error": null, "latest_charge": null,
        })
    }

    fn declined_intent(code: &str, decline_code: Option<&str>) -> serde_json::Value {
        let mut pi = intent("requires_payment_method");
        pi["last_payment_error"] = serde_json::json!({
            "type": "card_error", "code": code, "decline_code": decline_code,
            "message": "Your card was declined."
        });
        pi
    }

    fn card_error(code: &str, decline_code: Option<&str>) -> String {
        serde_json::json!({"error": {
            "type": "card_error", "code": code, "decline_code": decline_code,
            "message": "Your card was declined.",
            "payment_intent": declined_intent(code, decline_code),
        }})
        .to_string()
    }

    fn error(kind: &str, code: Option<&str>) -> String {
        serde_json::json!({"error": {"type": kind, "code": code, "message": "words"}}).to_string()
    }

    #[test]
    fn a_succeeded_payment_intent_is_succeeded_with_its_id() {
        assert_eq!(
            confirm(200, &intent("succeeded").to_string()),
            GatewayOutcome::Succeeded {
                charge_id: GatewayChargeId::from_gateway(PI),
                replayed: false
            }
        );
        let replayed = classify_confirm(
            GatewayReply::Answered {
                status: 200,
                replayed: true,
                retry_after: None,
                body: intent("succeeded").to_string().as_bytes(),
            },
            Hints::default(),
            PI,
        );
        assert_eq!(
            replayed,
            GatewayOutcome::Succeeded {
                charge_id: GatewayChargeId::from_gateway(PI),
                replayed: true
            }
        );
    }

    #[test]
    fn a_card_error_with_a_decline_code_is_declined_with_that_code() {
        for (code, decline, expected) in [
            (
                "card_declined",
                Some("insufficient_funds"),
                "insufficient_funds",
            ),
            ("card_declined", Some("generic_decline"), "generic_decline"),
            ("expired_card", None, "expired_card"),
        ] {
            assert_eq!(
                confirm(402, &card_error(code, decline)),
                GatewayOutcome::Declined {
                    charge_id: GatewayChargeId::from_gateway(PI),
                    decline_code: Some(expected.into()),
                    replayed: false
                },
                "{code}/{decline:?}"
            );
        }
    }

    #[test]
    fn authentication_required_off_session_is_declined_with_that_code() {
        assert_eq!(
            confirm(
                402,
                &card_error("authentication_required", Some("authentication_required"))
            ),
            GatewayOutcome::Declined {
                charge_id: GatewayChargeId::from_gateway(PI),
                decline_code: Some("authentication_required".into()),
                replayed: false
            }
        );
        // Without Stripe's decline_code, its error code says it.
        assert!(matches!(
            confirm(402, &card_error("authentication_required", None)),
            GatewayOutcome::Declined { decline_code: Some(ref c), .. } if c == "authentication_required"
        ));
    }

    #[test]
    fn a_payment_intent_left_in_requires_action_is_cancelled_or_left_for_a_person() {
        // The executor cancels it (stripe_requires_action = cancel) or hands it to a person.
        assert_eq!(
            confirm(200, &intent("requires_action").to_string()),
            GatewayOutcome::RequiresAction {
                charge_id: GatewayChargeId::from_gateway(PI)
            }
        );
    }

    #[test]
    fn an_off_session_authentication_failure_read_back_is_declined_authentication_required() {
        // Off-session SCA failures come back as requires_payment_method with
        // last_payment_error.code = authentication_required (and no decline_code).
        let pi = declined_intent("authentication_required", None);
        assert!(matches!(
            confirm(200, &pi.to_string()),
            GatewayOutcome::Declined { decline_code: Some(ref c), .. } if c == "authentication_required"
        ));
        let LookupOutcome::Found(found) = classify_retrieve(answer(200, &pi.to_string()), "k")
        else {
            panic!()
        };
        assert_eq!(found[0].status, ChargeStatus::Declined);
        assert_eq!(
            found[0].decline_code.as_deref(),
            Some("authentication_required")
        );
    }

    #[test]
    fn only_a_canceled_payment_intent_proves_a_cancel_and_a_charge_is_adopted() {
        let cancel = |status: u16, body: &str| classify_cancel(answer(status, body), PI);
        assert_eq!(
            cancel(200, &intent("canceled").to_string()),
            CancelOutcome::Canceled {
                charge_id: GatewayChargeId::from_gateway(PI)
            }
        );
        let unexpected = |pi: serde_json::Value| {
            serde_json::json!({"error": {
                "type": "invalid_request_error", "code": "payment_intent_unexpected_state",
                "message": "cannot cancel", "payment_intent": pi,
            }})
            .to_string()
        };
        assert_eq!(
            cancel(400, &unexpected(intent("succeeded"))),
            CancelOutcome::Succeeded {
                charge_id: GatewayChargeId::from_gateway(PI)
            }
        );
        assert_eq!(
            cancel(400, &unexpected(intent("processing"))),
            CancelOutcome::Processing {
                charge_id: GatewayChargeId::from_gateway(PI)
            }
        );
        // Already canceled under another key: still the proof.
        assert!(matches!(
            cancel(400, &unexpected(intent("canceled"))),
            CancelOutcome::Canceled { .. }
        ));
        for outcome in [
            cancel(500, &error("api_error", None)),
            cancel(
                409,
                &error("idempotency_error", Some("idempotency_key_in_use")),
            ),
            cancel(429, &error("invalid_request_error", Some("lock_timeout"))),
            cancel(200, &intent("requires_confirmation").to_string()),
            classify_cancel(GatewayReply::Lost { error: "timeout" }, PI),
        ] {
            assert!(
                matches!(outcome, CancelOutcome::Unproven { .. }),
                "{outcome:?}"
            );
        }
    }

    #[test]
    fn a_decline_returned_as_a_payment_intent_is_declined() {
        assert_eq!(
            confirm(
                200,
                &declined_intent("card_declined", Some("do_not_honor")).to_string()
            ),
            GatewayOutcome::Declined {
                charge_id: GatewayChargeId::from_gateway(PI),
                decline_code: Some("do_not_honor".into()),
                replayed: false
            }
        );
    }

    #[test]
    fn processing_is_not_final_and_not_a_failure() {
        let outcome = confirm(200, &intent("processing").to_string());
        assert_eq!(
            outcome,
            GatewayOutcome::Processing {
                charge_id: GatewayChargeId::from_gateway(PI)
            }
        );
        assert!(!outcome.is_gateway_failure());
        assert_eq!(outcome.label(), "processing");
    }

    #[test]
    fn a_canceled_payment_intent_is_declined_as_canceled() {
        let mut pi = intent("canceled");
        assert_eq!(
            confirm(200, &pi.to_string()),
            GatewayOutcome::Declined {
                charge_id: GatewayChargeId::from_gateway(PI),
                decline_code: Some("canceled".into()),
                replayed: false
            }
        );
        pi["cancellation_reason"] = "abandoned".into();
        assert!(matches!(
            confirm(200, &pi.to_string()),
            GatewayOutcome::Declined { decline_code: Some(ref c), .. } if c == "canceled:abandoned"
        ));
    }

    #[test]
    fn an_idempotency_error_needs_review() {
        let outcome = confirm(400, &error("idempotency_error", None));
        assert!(
            matches!(&outcome, GatewayOutcome::NeedsReview { reason } if reason.contains("idempotency_error")),
            "{outcome:?}"
        );
        let prepared = classify_create(
            answer(400, &error("idempotency_error", None)),
            Hints::default(),
        );
        assert!(matches!(
            prepared,
            Prepared::Refused(GatewayOutcome::NeedsReview { .. })
        ));
    }

    #[test]
    fn a_409_is_retried_later_with_the_same_key_and_no_try_consumed() {
        let body = error("idempotency_error", Some("idempotency_key_in_use"));
        for outcome in [
            confirm(409, &body),
            match classify_create(answer(409, &body), Hints::default()) {
                Prepared::Refused(outcome) => outcome,
                other => panic!("{other:?}"),
            },
        ] {
            // The label of `RetryLater { after: InProgress, .. }` and of nothing else.
            assert_eq!(outcome.label(), "in_progress", "{outcome:?}");
        }
    }

    #[test]
    fn a_429_is_retried_after_retry_after_or_with_backoff() {
        let with = |retry_after: Option<&'static str>, should_retry| {
            classify_confirm(
                GatewayReply::Answered {
                    status: 429,
                    replayed: false,
                    retry_after,
                    body: br#"{"error":{"type":"invalid_request_error","code":"rate_limit"}}"#,
                },
                Hints { should_retry },
                PI,
            )
        };
        assert!(matches!(
            with(Some("3"), Some(true)),
            GatewayOutcome::RetryLater { after: RetryAfter::Delay(d), .. } if d == Duration::from_secs(3)
        ));
        for should_retry in [Some(true), Some(false), None] {
            assert!(matches!(
                with(None, should_retry),
                GatewayOutcome::RetryLater {
                    after: RetryAfter::Backoff,
                    ..
                }
            ));
        }
    }

    #[test]
    fn stripe_should_retry_decides_an_unlisted_4xx() {
        let body = error("invalid_request_error", Some("lock_timeout"));
        let with = |should_retry| classify_confirm(answer(400, &body), Hints { should_retry }, PI);
        assert!(matches!(
            with(Some(true)),
            GatewayOutcome::RetryLater {
                after: RetryAfter::Backoff,
                ..
            }
        ));
        assert!(
            matches!(with(Some(false)), GatewayOutcome::NeedsReview { ref reason } if reason.contains("Stripe-Should-Retry: false"))
        );
        assert!(matches!(with(None), GatewayOutcome::NeedsReview { .. }));
    }

    #[test]
    fn a_5xx_timeout_or_dropped_connection_on_confirm_is_ambiguous() {
        for should_retry in [Some(true), Some(false), None] {
            let outcome = classify_confirm(
                answer(500, &error("api_error", None)),
                Hints { should_retry },
                PI,
            );
            assert!(
                matches!(outcome, GatewayOutcome::Ambiguous { .. }),
                "{outcome:?}"
            );
        }
        assert!(matches!(
            confirm(503, "<html>bad gateway</html>"),
            GatewayOutcome::Ambiguous { .. }
        ));
        assert!(matches!(
            classify_confirm(
                GatewayReply::Lost {
                    error: "operation timed out"
                },
                Hints::default(),
                PI
            ),
            GatewayOutcome::Ambiguous { ref reason } if reason.contains(PI) && reason.contains("timed out")
        ));
        assert!(matches!(
            confirm(200, "{not json"),
            GatewayOutcome::Ambiguous { .. }
        ));
        assert!(matches!(
            confirm(402, "not stripe's error"),
            GatewayOutcome::Ambiguous { .. }
        ));
    }

    #[test]
    fn a_request_never_sent_is_retried_with_backoff() {
        let outcome = classify_confirm(
            GatewayReply::NotSent {
                error: "connection refused",
            },
            Hints::default(),
            PI,
        );
        assert!(matches!(outcome, GatewayOutcome::NotSent { .. }));
    }

    #[test]
    fn a_401_or_403_pauses_on_credentials() {
        for status in [401, 403] {
            let body = error("invalid_request_error", None);
            assert_eq!(
                confirm(status, &body),
                GatewayOutcome::CredentialsFault { status }
            );
            assert_eq!(
                classify_create(answer(status, &body), Hints::default()),
                Prepared::Refused(GatewayOutcome::CredentialsFault { status })
            );
            assert_eq!(
                classify_retrieve(answer(status, &body), "k"),
                LookupOutcome::CredentialsFault { status }
            );
        }
    }

    #[test]
    fn a_404_from_stripe_is_this_requests_fault_and_a_bare_404_the_wrong_url() {
        let missing = error("invalid_request_error", Some("resource_missing"));
        assert!(matches!(
            confirm(404, &missing),
            GatewayOutcome::NeedsReview { .. }
        ));
        assert_eq!(
            confirm(404, "Not Found"),
            GatewayOutcome::EndpointFault { status: 404 }
        );
        assert!(
            matches!(classify_retrieve(answer(404, &missing), "k"), LookupOutcome::Failed { ref reason } if reason.contains("no PaymentIntent"))
        );
        assert_eq!(
            classify_retrieve(answer(404, ""), "k"),
            LookupOutcome::EndpointFault { status: 404 }
        );
    }

    #[test]
    fn a_confirm_of_an_already_confirmed_payment_intent_reads_its_state() {
        let unexpected = |pi: serde_json::Value| {
            serde_json::json!({"error": {
                "type": "invalid_request_error", "code": "payment_intent_unexpected_state",
                "message": "already succeeded", "payment_intent": pi,
            }})
            .to_string()
        };
        assert!(matches!(
            confirm(400, &unexpected(intent("succeeded"))),
            GatewayOutcome::Succeeded { ref charge_id, .. } if charge_id == PI
        ));
        assert!(matches!(
            confirm(400, &unexpected(intent("canceled"))),
            GatewayOutcome::Declined { .. }
        ));
        assert!(matches!(
            confirm(400, &unexpected(intent("requires_capture"))),
            GatewayOutcome::NeedsReview { .. }
        ));
        assert!(matches!(
            confirm(400, &error("invalid_request_error", Some("parameter_invalid_integer"))),
            GatewayOutcome::NeedsReview { ref reason } if reason.contains("parameter_invalid_integer")
        ));
    }

    #[test]
    fn the_create_call_yields_the_payment_intent_id_and_never_an_ambiguity() {
        assert_eq!(
            classify_create(
                answer(200, &intent("requires_confirmation").to_string()),
                Hints::default()
            ),
            Prepared::Object {
                id: GatewayObjectId::from_gateway(PI)
            }
        );
        // Nothing can have charged: an unconfirmed PaymentIntent. Retried under the same key.
        for reply in [
            answer(500, &error("api_error", None)),
            answer(200, "garbage"),
            GatewayReply::Lost { error: "timeout" },
            GatewayReply::NotSent { error: "refused" },
        ] {
            let prepared = classify_create(reply, Hints::default());
            assert!(
                matches!(prepared, Prepared::Refused(GatewayOutcome::NotSent { .. })),
                "{reply:?}: {prepared:?}"
            );
        }
        assert!(matches!(
            classify_create(
                answer(
                    400,
                    &error("invalid_request_error", Some("resource_missing"))
                ),
                Hints::default()
            ),
            Prepared::Refused(GatewayOutcome::NeedsReview { .. })
        ));
    }

    #[test]
    fn a_retrieved_payment_intent_reads_as_the_charges_it_made() {
        let read =
            |pi: serde_json::Value| classify_retrieve(answer(200, &pi.to_string()), "onecharge-x");
        let LookupOutcome::Found(found) = read(intent("succeeded")) else {
            panic!()
        };
        assert_eq!(
            found,
            vec![GatewayCharge {
                id: GatewayChargeId::from_gateway(PI),
                status: ChargeStatus::Succeeded,
                decline_code: None,
                idempotency_key: Some("onecharge-x".into()),
                reference: Some("6f1c2a9e".into()),
                amount_minor: Some(1999),
                currency: Some("EUR".into()),
            }]
        );
        // Nothing was charged: never confirmed, or refused before charging.
        for pi in [
            intent("requires_confirmation"),
            intent("requires_payment_method"),
        ] {
            assert_eq!(read(pi), LookupOutcome::Found(Vec::new()));
        }
        let declined = read(declined_intent("card_declined", Some("insufficient_funds")));
        assert!(
            matches!(&declined, LookupOutcome::Found(c) if c[0].status == ChargeStatus::Declined && c[0].decline_code.as_deref() == Some("insufficient_funds"))
        );
        assert!(
            matches!(read(intent("canceled")), LookupOutcome::Found(c) if c[0].status == ChargeStatus::Declined)
        );
        // Not final: never adopted by the reconciler (it looks again).
        for status in ["processing", "requires_action", "requires_capture"] {
            assert!(
                matches!(read(intent(status)), LookupOutcome::Found(ref c) if c[0].status.to_string() == status)
            );
        }
        assert!(matches!(
            classify_retrieve(answer(503, ""), "k"),
            LookupOutcome::Failed { .. }
        ));
        assert!(matches!(
            classify_retrieve(GatewayReply::Lost { error: "reset" }, "k"),
            LookupOutcome::Failed { .. }
        ));
    }
}
