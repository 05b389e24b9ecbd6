//! Reading a payment gateway's answer (contract §3): which [`GatewayOutcome`] one reply to
//! `POST /v1/charges` is, and which [`LookupOutcome`] one reply to
//! `GET /v1/charges?idempotency_key=…` is.
//!
//! Pure: the HTTP client turns what happened on the wire into a [`GatewayReply`] and this
//! module decides what it means, so every row of the contract's table is a unit test and the
//! executor branches on a type, never on an error's text.
//!
//! The rule that keeps "at most once": whenever the gateway *may* have charged and the answer
//! does not prove what happened (5xx, a timeout, a connection dropped after the request was
//! sent, a success status without a readable charge), the outcome is
//! [`GatewayOutcome::Ambiguous`]: the attempt goes to `unknown` and only a lookup settles it.
//! Only answers that prove nothing was charged (`409`, `429`, a refused connection) are
//! retried with the same key.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::bounded;

/// Longest delay a `Retry-After` is honoured for. A gateway that asks for more (or sends a
/// number too large for any clock) is asked again after this: a bounded wait, never a panic
/// on a time that overflows, and at worst one more `429`.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Longest text kept from a gateway's answer in a reason or error (the database bounds
/// `review_reason`, `last_error` and `gateway_calls.error` to 1024 characters).
pub const MAX_REASON_CHARS: usize = 1000;

/// What happened to one request on the wire, as the HTTP client saw it. Carries no I/O
/// types so that classification stays pure and testable.
#[derive(Debug, Clone, Copy)]
pub enum GatewayReply<'a> {
    /// A complete HTTP response arrived.
    Answered {
        status: u16,
        /// The `Idempotent-Replayed: true` header was present.
        replayed: bool,
        /// The raw `Retry-After` header, if any.
        retry_after: Option<&'a str>,
        body: &'a [u8],
    },
    /// The request never left this process: connection refused, DNS failure, connect
    /// timeout. The gateway cannot have charged.
    NotSent { error: &'a str },
    /// The request was (or may have been) sent and no complete answer came back: a
    /// timeout, or the connection closed after sending. The gateway may have charged.
    Lost { error: &'a str },
}

/// The parts of a complete answer ([`GatewayReply::Answered`]).
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    pub status: u16,
    pub replayed: bool,
    pub retry_after: Option<&'a str>,
    pub body: &'a [u8],
}

impl<'a> GatewayReply<'a> {
    /// The answer to a request that can charge, or, when none came, its outcome:
    /// `NotSent` (nothing reached the gateway) or `Ambiguous` (it may have charged), the
    /// reason naming `request` ("the request", "the confirm of pi_…"). Every connector reads
    /// the missing answer of a charging call this one way.
    pub fn charge_answer(self, request: &str) -> Result<Answer<'a>, GatewayOutcome> {
        match self {
            GatewayReply::NotSent { error } => Err(GatewayOutcome::NotSent {
                reason: bounded(error, MAX_REASON_CHARS),
            }),
            GatewayReply::Lost { error } => Err(GatewayOutcome::Ambiguous {
                reason: bounded(
                    &format!("no answer after {request} was sent: {error}"),
                    MAX_REASON_CHARS,
                ),
            }),
            GatewayReply::Answered {
                status,
                replayed,
                retry_after,
                body,
            } => Ok(Answer {
                status,
                replayed,
                retry_after,
                body,
            }),
        }
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
    Succeeded { charge_id: String, replayed: bool },
    /// Declined by the gateway; the decline is stored under the key too. Final.
    #[error("declined: {}", decline_code.as_deref().unwrap_or("no decline code"))]
    Declined {
        charge_id: String,
        decline_code: Option<String>,
        replayed: bool,
    },
    /// Accepted and not finished: the gateway is still processing charge `charge_id`
    /// (Stripe's `processing`, e.g. a bank debit). Not final and not a failure: the attempt
    /// goes to `unknown` and the reconciler reads the charge by id until it settles.
    #[error("processing: charge {charge_id} is not final yet")]
    Processing { charge_id: String },
    /// Stripe's `requires_action` after an off-session confirm: PaymentIntent `charge_id`
    /// waits for a customer who is not there to authenticate. Not charged yet, but it could
    /// be if the customer acted: the executor cancels it (then it is a decline,
    /// `authentication_required`) or leaves it for a person (`stripe_requires_action`).
    #[error("requires action: PaymentIntent {charge_id} waits for the customer to authenticate")]
    RequiresAction { charge_id: String },
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
    pub fn charge_id(&self) -> Option<&str> {
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
    pub id: String,
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

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// Reads one answer to `POST /v1/charges` exactly as the contract's table says.
pub fn classify_charge(reply: GatewayReply<'_>) -> GatewayOutcome {
    let Answer {
        status,
        replayed,
        retry_after,
        body,
    } = match reply.charge_answer("the request") {
        Ok(answer) => answer,
        Err(outcome) => return outcome,
    };
    match status {
        // A charge: its body's status decides, whether it is new (201), replayed (200 or the
        // stored status) or a decline (402).
        200..=299 | 402 => match serde_json::from_slice::<GatewayCharge>(body) {
            Ok(charge) if charge.status == ChargeStatus::Succeeded && status != 402 => {
                GatewayOutcome::Succeeded {
                    charge_id: charge.id,
                    replayed,
                }
            }
            Ok(charge) if charge.status == ChargeStatus::Declined => GatewayOutcome::Declined {
                charge_id: charge.id,
                decline_code: charge.decline_code,
                replayed,
            },
            // A charging status whose body does not prove what happened.
            _ => GatewayOutcome::Ambiguous {
                reason: bounded(
                    &format!("HTTP {status} without a readable charge: {}", snippet(body)),
                    MAX_REASON_CHARS,
                ),
            },
        },
        409 => GatewayOutcome::RetryLater {
            after: RetryAfter::InProgress,
            reason: gateway_words(status, body),
        },
        429 => GatewayOutcome::RetryLater {
            after: retry_after
                .and_then(parse_retry_after)
                .map_or(RetryAfter::Backoff, RetryAfter::Delay),
            reason: gateway_words(status, body),
        },
        401 | 403 => GatewayOutcome::CredentialsFault { status },
        300..=399 | 404 | 405 => GatewayOutcome::EndpointFault { status },
        500..=599 => GatewayOutcome::Ambiguous {
            reason: gateway_words(status, body),
        },
        // 400, 422, and anything else the contract does not list: the request was refused
        // as it stands.
        _ => GatewayOutcome::NeedsReview {
            reason: gateway_words(status, body),
        },
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
    pub idempotency_key: &'a str,
    /// The `payment_attempt_id`, sent as the charge's `reference`.
    pub reference: &'a str,
    pub amount_minor: i64,
    pub currency: &'a str,
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
    SeveralSucceeded(Vec<String>),
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
    differs(
        "idempotency_key",
        charge.idempotency_key.as_deref(),
        expected.idempotency_key,
    )
    .or_else(|| differs("reference", charge.reference.as_deref(), expected.reference))
    .or_else(|| {
        differs(
            "amount_minor",
            charge.amount_minor.as_ref(),
            &expected.amount_minor,
        )
    })
    .or_else(|| differs("currency", charge.currency.as_deref(), expected.currency))
}

#[derive(Deserialize)]
struct LookupBody {
    data: Vec<GatewayCharge>,
}

/// Reads one answer to `GET /v1/charges?idempotency_key=…`.
pub fn classify_lookup(reply: GatewayReply<'_>) -> LookupOutcome {
    match reply {
        GatewayReply::NotSent { error } | GatewayReply::Lost { error } => LookupOutcome::Failed {
            reason: bounded(error, MAX_REASON_CHARS),
        },
        GatewayReply::Answered {
            status: status @ (401 | 403),
            ..
        } => LookupOutcome::CredentialsFault { status },
        GatewayReply::Answered {
            status: status @ (300..=399 | 404 | 405),
            ..
        } => LookupOutcome::EndpointFault { status },
        GatewayReply::Answered {
            status: 200, body, ..
        } => match serde_json::from_slice::<LookupBody>(body) {
            Ok(found) => LookupOutcome::Found(found.data),
            Err(err) => LookupOutcome::Failed {
                reason: bounded(
                    &format!(
                        "HTTP 200 with an unreadable body ({err}): {}",
                        snippet(body)
                    ),
                    MAX_REASON_CHARS,
                ),
            },
        },
        GatewayReply::Answered { status, body, .. } => LookupOutcome::Failed {
            reason: gateway_words(status, body),
        },
    }
}

/// `Retry-After` in delta-seconds (the form the contract names), capped at
/// [`MAX_RETRY_AFTER`]: a number too large for a `u64` (or for any clock) is the cap, not an
/// error. An HTTP date or anything else that is not plain digits is not honoured: the caller
/// falls back to its own backoff.
fn parse_retry_after(raw: &str) -> Option<Duration> {
    let digits = raw.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds = digits.parse::<u64>().unwrap_or(u64::MAX);
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// "HTTP 422 idempotency_key_reused: <message>", or the start of a body that is not the
/// contract's error shape. Bounded.
fn gateway_words(status: u16, body: &[u8]) -> String {
    let words = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(ErrorBody { error }) => match (error.kind, error.message) {
            (Some(kind), Some(message)) => format!("{kind}: {message}"),
            (Some(kind), None) => kind,
            (None, Some(message)) => message,
            (None, None) => snippet(body),
        },
        Err(_) => snippet(body),
    };
    let text = if words.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status} {words}")
    };
    bounded(&text, MAX_REASON_CHARS)
}

fn snippet(body: &[u8]) -> String {
    bounded(String::from_utf8_lossy(body).trim(), 300)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16, body: &str) -> GatewayOutcome {
        classify_charge(GatewayReply::Answered {
            status,
            replayed: false,
            retry_after: None,
            body: body.as_bytes(),
        })
    }

    fn charge(status: &str, decline_code: Option<&str>) -> String {
        serde_json::json!({
            "id": "ch_1", "status": status, "amount_minor": 1999, "currency": "EUR",
            "reference": "r", "idempotency_key": "k", "decline_code": decline_code,
            "created_at": "2026-11-29T10:15:01Z"
        })
        .to_string()
    }

    #[test]
    fn a_201_succeeded_charge_is_succeeded() {
        assert_eq!(
            answered(201, &charge("succeeded", None)),
            GatewayOutcome::Succeeded {
                charge_id: "ch_1".into(),
                replayed: false
            }
        );
    }

    #[test]
    fn a_replayed_answer_reads_as_its_body_status_says() {
        let replay = |status, body: &str| {
            classify_charge(GatewayReply::Answered {
                status,
                replayed: true,
                retry_after: None,
                body: body.as_bytes(),
            })
        };
        assert_eq!(
            replay(200, &charge("succeeded", None)),
            GatewayOutcome::Succeeded {
                charge_id: "ch_1".into(),
                replayed: true
            }
        );
        let declined = GatewayOutcome::Declined {
            charge_id: "ch_1".into(),
            decline_code: Some("card_declined".into()),
            replayed: true,
        };
        assert_eq!(
            replay(200, &charge("declined", Some("card_declined"))),
            declined
        );
        assert_eq!(
            replay(402, &charge("declined", Some("card_declined"))),
            declined
        );
    }

    #[test]
    fn a_402_declined_charge_is_declined_with_its_code() {
        assert_eq!(
            answered(402, &charge("declined", Some("insufficient_funds"))),
            GatewayOutcome::Declined {
                charge_id: "ch_1".into(),
                decline_code: Some("insufficient_funds".into()),
                replayed: false
            }
        );
    }

    #[test]
    fn a_409_in_progress_is_retried_soon_with_the_same_key() {
        let outcome = answered(
            409,
            r#"{"error":{"type":"idempotency_in_progress","message":"still running"}}"#,
        );
        assert!(
            matches!(
                outcome,
                GatewayOutcome::RetryLater {
                    after: RetryAfter::InProgress,
                    ..
                }
            ),
            "{outcome:?}"
        );
        assert_eq!(outcome.label(), "in_progress");
    }

    /// A 422 (key reused), a 400 (invalid request) and any status the contract does not
    /// list need review, with the gateway's own words.
    #[test]
    fn a_422_a_400_or_an_unlisted_status_needs_review_with_the_gateways_words() {
        for (status, body, reason) in [
            (
                422,
                r#"{"error":{"type":"idempotency_key_reused","message":"different parameters"}}"#,
                "HTTP 422 idempotency_key_reused: different parameters",
            ),
            (
                400,
                r#"{"error":{"type":"invalid_request","message":"currency is wrong"}}"#,
                "HTTP 400 invalid_request: currency is wrong",
            ),
            (
                418,
                r#"{"error":{"type":"teapot","message":"short and stout"}}"#,
                "HTTP 418 teapot: short and stout",
            ),
        ] {
            assert_eq!(
                answered(status, body),
                GatewayOutcome::NeedsReview {
                    reason: reason.into()
                },
                "{status}"
            );
        }
    }

    #[test]
    fn a_401_or_403_is_a_credentials_fault() {
        assert_eq!(
            answered(401, ""),
            GatewayOutcome::CredentialsFault { status: 401 }
        );
        assert_eq!(
            answered(403, "{}"),
            GatewayOutcome::CredentialsFault { status: 403 }
        );
        assert!(!answered(401, "").is_gateway_failure());
    }

    #[test]
    fn a_429_is_retried_after_the_retry_after_seconds() {
        let with = |retry_after| {
            classify_charge(GatewayReply::Answered {
                status: 429,
                replayed: false,
                retry_after,
                body: br#"{"error":{"type":"rate_limited"}}"#,
            })
        };
        assert!(matches!(
            with(Some("7")),
            GatewayOutcome::RetryLater { after: RetryAfter::Delay(d), .. } if d == Duration::from_secs(7)
        ));
        // an HTTP-date or a missing header leaves the delay to the executor's backoff
        assert!(matches!(
            with(Some("Wed, 21 Oct 2026 07:28:00 GMT")),
            GatewayOutcome::RetryLater {
                after: RetryAfter::Backoff,
                ..
            }
        ));
        assert!(matches!(
            with(None),
            GatewayOutcome::RetryLater {
                after: RetryAfter::Backoff,
                ..
            }
        ));
    }

    #[test]
    fn a_huge_retry_after_is_capped_to_a_bounded_delay_never_a_panic() {
        let with = |retry_after| {
            classify_charge(GatewayReply::Answered {
                status: 429,
                replayed: false,
                retry_after: Some(retry_after),
                body: br#"{"error":{"type":"rate_limited"}}"#,
            })
        };
        for huge in [
            "99999999999999999999",
            "18446744073709551615",
            "315360000000",
            " 86401 ",
        ] {
            assert!(
                matches!(
                    with(huge),
                    GatewayOutcome::RetryLater { after: RetryAfter::Delay(d), .. } if d == MAX_RETRY_AFTER
                ),
                "Retry-After: {huge} gave {:?}",
                with(huge)
            );
        }
        assert!(matches!(
            with("3600"),
            GatewayOutcome::RetryLater { after: RetryAfter::Delay(d), .. } if d == Duration::from_secs(3600)
        ));
        // not a number of seconds at all: the executor's own backoff decides
        for odd in ["-5", "1.5", "", "9x"] {
            assert!(
                matches!(
                    with(odd),
                    GatewayOutcome::RetryLater {
                        after: RetryAfter::Backoff,
                        ..
                    }
                ),
                "Retry-After: {odd:?}"
            );
        }
    }

    #[test]
    fn a_5xx_is_ambiguous_because_it_may_have_charged() {
        for status in [500, 502, 503, 504] {
            let outcome = answered(status, r#"{"error":{"type":"api_error","message":"boom"}}"#);
            assert!(
                matches!(outcome, GatewayOutcome::Ambiguous { .. }),
                "{status}: {outcome:?}"
            );
            assert!(outcome.is_gateway_failure());
        }
    }

    #[test]
    fn a_timeout_or_a_connection_dropped_after_sending_is_ambiguous() {
        let outcome = classify_charge(GatewayReply::Lost {
            error: "operation timed out",
        });
        assert!(
            matches!(&outcome, GatewayOutcome::Ambiguous { reason } if reason.contains("timed out"))
        );
    }

    #[test]
    fn a_request_never_sent_is_retried_with_backoff() {
        let outcome = classify_charge(GatewayReply::NotSent {
            error: "connection refused",
        });
        assert_eq!(
            outcome,
            GatewayOutcome::NotSent {
                reason: "connection refused".into()
            }
        );
        assert!(outcome.is_gateway_failure());
    }

    #[test]
    fn a_charging_status_without_a_readable_charge_is_ambiguous_never_a_success() {
        assert!(matches!(
            answered(201, "not json"),
            GatewayOutcome::Ambiguous { .. }
        ));
        assert!(matches!(
            answered(200, r#"{"id":"ch_1","status":"pending"}"#),
            GatewayOutcome::Ambiguous { .. }
        ));
        assert!(matches!(
            answered(402, &charge("succeeded", None)),
            GatewayOutcome::Ambiguous { .. }
        ));
    }

    #[test]
    fn a_404_405_or_redirect_is_a_configuration_fault_for_charges_and_lookups() {
        for status in [301, 302, 307, 308, 404, 405] {
            let outcome = answered(
                status,
                r#"{"error":{"type":"not_found","message":"no such endpoint"}}"#,
            );
            assert_eq!(outcome, GatewayOutcome::EndpointFault { status });
            assert_eq!(outcome.label(), "endpoint_fault");
            assert!(!outcome.is_gateway_failure());
            let lookup = classify_lookup(GatewayReply::Answered {
                status,
                replayed: false,
                retry_after: None,
                body: b"",
            });
            assert_eq!(lookup, LookupOutcome::EndpointFault { status });
        }
    }

    #[test]
    fn reasons_stay_bounded_whatever_the_gateway_says() {
        let long = format!(
            r#"{{"error":{{"type":"invalid_request","message":"{}"}}}}"#,
            "x".repeat(5000)
        );
        let GatewayOutcome::NeedsReview { reason } = answered(400, &long) else {
            panic!()
        };
        assert!(reason.chars().count() <= MAX_REASON_CHARS);
    }

    #[test]
    fn only_the_contracts_lookup_answer_for_this_attempt_is_adopted() {
        let expected = ExpectedCharge {
            idempotency_key: "k",
            reference: "r",
            amount_minor: 1999,
            currency: "EUR",
        };
        let found = |overrides: serde_json::Value| -> GatewayCharge {
            let mut value: serde_json::Value =
                serde_json::from_str(&charge("succeeded", None)).unwrap();
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
            LookupReading::SeveralSucceeded(vec!["ch_1".into(), "ch_2".into()])
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

    #[test]
    fn a_lookup_lists_the_outcomes_under_the_key() {
        let body = format!(r#"{{"data":[{}]}}"#, charge("succeeded", None));
        let found = classify_lookup(GatewayReply::Answered {
            status: 200,
            replayed: false,
            retry_after: None,
            body: body.as_bytes(),
        });
        let LookupOutcome::Found(charges) = found else {
            panic!("{found:?}")
        };
        assert_eq!(charges[0].id, "ch_1");
        let empty = classify_lookup(GatewayReply::Answered {
            status: 200,
            replayed: false,
            retry_after: None,
            body: br#"{"data":[]}"#,
        });
        assert_eq!(empty.label(), "not_found");
        let denied = classify_lookup(GatewayReply::Answered {
            status: 401,
            replayed: false,
            retry_after: None,
            body: b"",
        });
        assert_eq!(denied, LookupOutcome::CredentialsFault { status: 401 });
        let failed = classify_lookup(GatewayReply::Answered {
            status: 503,
            replayed: false,
            retry_after: None,
            body: b"",
        });
        assert_eq!(failed.label(), "failed");
        assert_eq!(
            classify_lookup(GatewayReply::Lost { error: "timeout" }).label(),
            "failed"
        );
    }
}
