//! What a request answers, before it reaches the client: the body and headers
//! ([`Answer`]), how it is classified and whether a fault spoils its delivery ([`Outcome`]).
//! Plain values, below the shared state: the Stripe dialect's key store saves answers, and
//! the state holds that store.

use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;

use crate::charge::InvalidRequest;
use crate::config::FaultKind;
use crate::record::ResponseClass;

const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
const STRIPE_SHOULD_RETRY: &str = "stripe-should-retry";

/// A response body and status, before it is delivered (or not).
#[derive(Clone)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    /// Serialized JSON: a charge keeps the field order of its struct (`id` first).
    pub(crate) body: Vec<u8>,
    pub(crate) replayed: bool,
    pub(crate) retry_after_secs: Option<u32>,
    /// Stripe's `Stripe-Should-Retry` header; the onecharge dialect never sets it.
    pub(crate) should_retry: Option<bool>,
}

impl Answer {
    pub(crate) fn json(status: StatusCode, body: &impl Serialize) -> Answer {
        Answer {
            status,
            body: serde_json::to_vec(body).expect("response bodies serialize"),
            replayed: false,
            retry_after_secs: None,
            should_retry: None,
        }
    }

    pub(crate) fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Answer {
        Answer::json(
            status,
            &json!({"error": {"type": kind, "message": message.into()}}),
        )
    }

    /// A `/v1` response: the contract's headers, and the note the access log reads.
    pub(crate) fn into_response(self, note: Note) -> Response {
        let Answer {
            status,
            body,
            replayed,
            retry_after_secs,
            should_retry,
        } = self;
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if replayed {
            headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
        }
        if let Some(secs) = retry_after_secs {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(should_retry) = should_retry {
            let value = if should_retry { "true" } else { "false" };
            headers.insert(STRIPE_SHOULD_RETRY, HeaderValue::from_static(value));
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        let mut response = (status, headers, body).into_response();
        response.extensions_mut().insert(note);
        response
    }

    /// A response that is not counted or classified: the `/__*` endpoints and 404s.
    pub(crate) fn into_response_plain(self) -> Response {
        let content_type = [(header::CONTENT_TYPE, "application/json")];
        (self.status, content_type, self.body).into_response()
    }
}

/// How the answer reaches the client: that is where the "after" faults differ.
pub(crate) enum Delivery {
    Now,
    /// `hang_after`: hold the (already committed) answer this long.
    Hold(Duration),
    /// `drop_after`: close the connection instead of answering.
    Drop,
}

pub(crate) struct Outcome {
    pub(crate) class: ResponseClass,
    pub(crate) fault: Option<FaultKind>,
    pub(crate) answer: Answer,
    pub(crate) delivery: Delivery,
}

impl Outcome {
    pub(crate) fn now(class: ResponseClass, answer: Answer) -> Outcome {
        Outcome {
            class,
            fault: None,
            answer,
            delivery: Delivery::Now,
        }
    }

    /// The outcome of a request that charged: a charging fault spoils its answer
    /// (`error_after` answers the dialect's 500 instead, `hang_after` holds it, `drop_after`
    /// drops the connection).
    pub(crate) fn charged(
        class: ResponseClass,
        answer: Answer,
        fault: Option<FaultKind>,
        hang_for: Duration,
        server_error: impl FnOnce() -> Answer,
    ) -> Outcome {
        let (class, answer, delivery) = match fault {
            None | Some(FaultKind::SlowCharge | FaultKind::SlowRefund) => {
                (class, answer, Delivery::Now)
            }
            Some(FaultKind::ErrorAfter) => {
                (ResponseClass::ServerError, server_error(), Delivery::Now)
            }
            Some(FaultKind::HangAfter) => (ResponseClass::Hung, answer, Delivery::Hold(hang_for)),
            Some(_) => (ResponseClass::Dropped, answer, Delivery::Drop),
        };
        Outcome {
            class,
            fault,
            answer,
            delivery,
        }
    }

    /// The `200` of a lookup, spoiled by the lookup fault drawn for it: `hang_after` holds
    /// it for `hang_for`, `drop_after` closes the connection instead, and `refused` answers
    /// the faults that refuse it (`rate_limit`, `error_before`) in the dialect's words.
    pub(crate) fn looked_up(
        answer: Answer,
        fault: Option<FaultKind>,
        hang_for: Duration,
        refused: impl FnOnce(FaultKind) -> Outcome,
    ) -> Outcome {
        let (class, delivery) = match fault {
            Some(kind @ (FaultKind::RateLimit | FaultKind::ErrorBefore)) => return refused(kind),
            Some(FaultKind::HangAfter) => (ResponseClass::Hung, Delivery::Hold(hang_for)),
            Some(FaultKind::DropAfter) => (ResponseClass::Dropped, Delivery::Drop),
            _ => (ResponseClass::Lookup, Delivery::Now),
        };
        Outcome {
            class,
            fault,
            answer,
            delivery,
        }
    }

    /// The same outcome, noting the fault that caused it.
    pub(crate) fn with_fault(self, kind: FaultKind) -> Outcome {
        Outcome {
            fault: Some(kind),
            ..self
        }
    }

    pub(crate) fn invalid(err: InvalidRequest) -> Outcome {
        Outcome::now(
            ResponseClass::InvalidRequest,
            Answer::error(StatusCode::BAD_REQUEST, "invalid_request", err.0),
        )
    }

    pub(crate) fn unauthorized() -> Outcome {
        Outcome::now(
            ResponseClass::Unauthorized,
            Answer::error(
                StatusCode::UNAUTHORIZED,
                "authentication_failed",
                "a valid `Authorization: Bearer <api key>` header is required",
            ),
        )
    }
}

/// Carried on the response so the access log can name key, class and fault.
#[derive(Clone)]
pub(crate) struct Note {
    pub(crate) idempotency_key: Option<String>,
    pub(crate) class: ResponseClass,
    pub(crate) fault: Option<FaultKind>,
}

/// Waits a request's latency.
pub(crate) async fn pause(latency: Duration) {
    // A zero-length tokio sleep still waits for the next timer tick (about 1 ms).
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
}
