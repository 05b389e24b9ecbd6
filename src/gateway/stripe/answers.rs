//! Stripe's answer table: what each answer to a create, confirm, cancel or retrieve call
//! means ([`Prepared`], [`GatewayOutcome`], [`CancelOutcome`], [`LookupOutcome`]). Every
//! function here is pure (the wire arrives as a [`GatewayReply`]), so each row of the table
//! in `docs/stripe.md` is a unit test below.
//! Each row of the table in `docs/stripe.md` is a test in `answers/tests.rs`.

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
mod tests;
