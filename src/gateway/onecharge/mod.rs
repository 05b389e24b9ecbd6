//! The `onecharge` connector: the contract's own §3 dialect, in one room. `POST
//! /v1/charges` under the attempt's stored key with the JSON body every try repeats;
//! lookup by `GET /v1/charges?idempotency_key=…`; and the table that reads each answer
//! into a [`GatewayOutcome`] or a [`LookupOutcome`] exactly as contract §3 says.
//!
//! The table is pure: the client turns what happened on the wire into a [`GatewayReply`]
//! and this module decides what it means, so every row of the contract's table is a unit
//! test below and the executor branches on a type, never on an error's text.
//!
//! The rule that keeps "at most once": whenever the gateway *may* have charged and the answer
//! does not prove what happened (5xx, a timeout, a connection dropped after the request was
//! sent, a success status without a readable charge), the outcome is
//! [`GatewayOutcome::Ambiguous`]: the attempt goes to `unknown` and only a lookup settles it.
//! Only answers that prove nothing was charged (`409`, `429`, a refused connection) are
//! retried with the same key.

pub(super) mod refunds;

use anyhow::Context as _;
use secrecy::ExposeSecret as _;
use serde::Deserialize;

use super::wire::{parse_retry_after, snippet, Answer, GatewayReply};
use super::{exchange, ChargeRequest, GatewayCall, Transport};
use crate::domain::outcome::{
    ChargeStatus, GatewayCharge, GatewayOutcome, LookupOutcome, RetryAfter, MAX_REASON_CHARS,
};
use crate::domain::{bounded, CallOperation, GatewayChargeId, IdempotencyKey};

/// The §3 URLs under `gateway_url`.
#[derive(Debug, Clone)]
pub(super) struct Endpoints {
    pub(super) charges_url: reqwest::Url,
    pub(super) refunds_url: reqwest::Url,
}

impl Endpoints {
    /// `base` ends with `/`: `http://host/api/` gives `http://host/api/v1/charges`.
    pub(super) fn new(base: &reqwest::Url) -> anyhow::Result<Self> {
        let charges_url = base
            .join("v1/charges")
            .with_context(|| format!("gateway_url `{base}` cannot take the path /v1/charges"))?;
        let refunds_url = base
            .join("v1/refunds")
            .with_context(|| format!("gateway_url `{base}` cannot take the path /v1/refunds"))?;
        Ok(Self {
            charges_url,
            refunds_url,
        })
    }

    /// `POST /v1/charges` with the request's key and bytes, read by [`classify_charge`].
    pub(super) async fn charge(
        &self,
        transport: &Transport,
        request: &ChargeRequest,
    ) -> GatewayCall<GatewayOutcome> {
        exchange(
            transport
                .http
                .post(self.charges_url.clone())
                .bearer_auth(transport.api_key.expose_secret())
                .header("Idempotency-Key", request.idempotency_key.as_str())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(request.body_for(transport.deployment.as_ref()).into_owned()),
            CallOperation::Charge,
            None,
            |reply, _| classify_charge(reply),
            GatewayOutcome::label,
        )
        .await
    }

    /// `GET /v1/charges?idempotency_key=…`, read by [`classify_lookup`]. Never charges.
    pub(super) async fn lookup(
        &self,
        transport: &Transport,
        idempotency_key: &IdempotencyKey,
    ) -> GatewayCall<LookupOutcome> {
        exchange(
            transport
                .http
                .get(self.charges_url.clone())
                .query(&[("idempotency_key", idempotency_key.as_str())])
                .bearer_auth(transport.api_key.expose_secret()),
            CallOperation::Lookup,
            None,
            |reply, _| classify_lookup(reply),
            LookupOutcome::label,
        )
        .await
    }
}

/// The contract's error shape: `{"error": {"type": …, "message": …}}`.
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
                    charge_id: GatewayChargeId::from_gateway(charge.id),
                    replayed,
                }
            }
            Ok(charge) if charge.status == ChargeStatus::Declined => GatewayOutcome::Declined {
                charge_id: GatewayChargeId::from_gateway(charge.id),
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::outcome::MAX_RETRY_AFTER;

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
                charge_id: GatewayChargeId::from_gateway("ch_1"),
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
                charge_id: GatewayChargeId::from_gateway("ch_1"),
                replayed: true
            }
        );
        let declined = GatewayOutcome::Declined {
            charge_id: GatewayChargeId::from_gateway("ch_1"),
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
                charge_id: GatewayChargeId::from_gateway("ch_1"),
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
