//! What every Stripe POST goes through: the request read ([`Post`]), authentication and
//! validation, Stripe's idempotency layer (a saved answer replayed, `409
//! idempotency_key_in_use`, `400 idempotency_error`), and the execution of what the request
//! asks for ([`Execute`]) in a task of its own, its answer saved under the key when Stripe
//! would save it ([`Executed`]). Also the answers of the faults every executing POST shares.
//! The endpoints are above it: PaymentIntents and customers in `super::api`, refunds in
//! `super::refunds`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request as HttpRequest};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use super::error::StripeError;
use super::intent::KeyedRequest;
use super::params::Form;
use super::respond::{internal_error, refused, unauthorized};
use crate::answer::{pause, Answer, Outcome};
use crate::charge::validate_idempotency_key;
use crate::config::FaultKind;
use crate::keys::Claim;
use crate::record::ResponseClass;
use crate::respond::{deliver, raw_idempotency_key, IDEMPOTENCY_KEY};
use crate::state::{ConnectionControl, Shared};

/// What a Stripe POST asks for once its parameters passed validation: it executes under
/// the request's key (if any) and says whether Stripe would save its answer.
pub(crate) trait Execute: Send + Sync + 'static {
    fn execute(self, request: &Request) -> impl Future<Output = Executed> + Send;
}

/// The request an [`Execute`] runs for: the gateway, its idempotency key, and whether no
/// earlier request used the key (payment-method fault triggers fire only then).
pub(crate) struct Request {
    pub(crate) shared: Arc<Shared>,
    pub(crate) key: Option<String>,
    pub(crate) first_request: bool,
}

/// A request that passed validation and owns its key (if it has one).
struct Execution<A> {
    request: Request,
    action: A,
    latency: Duration,
}

impl<A: Execute> Execution<A> {
    async fn run(self) -> Executed {
        // Spent while the key is in progress: concurrent duplicates see `409` meanwhile.
        pause(self.latency).await;
        self.action.execute(&self.request).await
    }
}

/// What every Stripe POST reads of its request.
pub(crate) struct Post {
    connection: ConnectionControl,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

impl<S: Send + Sync> FromRequest<S> for Post {
    type Rejection = Response;

    async fn from_request(request: HttpRequest, state: &S) -> Result<Post, Response> {
        let connection = request
            .extensions()
            .get::<ConnectionControl>()
            .cloned()
            .unwrap_or_default();
        let uri = request.uri().clone();
        let headers = request.headers().clone();
        let body = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Post {
            connection,
            uri,
            headers,
            body,
        })
    }
}

/// Serves one Stripe POST: records it; then authentication, validation (`parse`), Stripe's
/// idempotency layer and the execution of what `parse` read; delivers the outcome.
pub(crate) async fn serve_post<A: Execute>(
    shared: Arc<Shared>,
    post: Post,
    parse: impl FnOnce(&Form) -> Result<A, StripeError>,
) -> Response {
    let Post {
        connection,
        uri,
        headers,
        body,
    } = post;
    let raw_key = raw_idempotency_key(&headers);
    let form = Form::parse(&body);
    let seq = shared.begin("POST", &uri, raw_key.clone(), form.to_json());
    let outcome = decide(&shared, &headers, uri.path(), form, parse).await;
    deliver(&shared, &connection, seq, uri.path(), raw_key, outcome).await
}

/// Authentication, validation, then Stripe's idempotency layer; only a request that
/// passed all three executes, and only its answer is saved under the key.
async fn decide<A: Execute>(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    path: &str,
    form: Form,
    parse: impl FnOnce(&Form) -> Result<A, StripeError>,
) -> Outcome {
    let (key, action) = match admit(shared, headers, &form, parse) {
        Ok(admitted) => admitted,
        Err(refusal) => return refusal,
    };
    let latency = shared.request_latency();
    let execution = Execution {
        request: Request {
            shared: Arc::clone(shared),
            key: key.clone(),
            first_request: true,
        },
        action,
        latency,
    };
    let Some(key) = key else {
        // Without a key every request executes, and nothing is saved.
        return run_detached(execution.run())
            .await
            .map_or_else(internal_error, |executed| executed.outcome);
    };
    let request = KeyedRequest {
        endpoint: path.to_owned(),
        form,
    };
    match claim_key(shared, &key, &request, latency).await {
        Ok((generation, first_request)) => {
            let mut execution = execution;
            execution.request.first_request = first_request;
            execute_under_key(shared, execution, key, generation).await
        }
        Err(refusal) => refusal,
    }
}

/// Authentication, then a well-formed key (if any) and parameters: the key and what the
/// request asks for, or the refusal.
fn admit<A>(
    shared: &Shared,
    headers: &HeaderMap,
    form: &Form,
    parse: impl FnOnce(&Form) -> Result<A, StripeError>,
) -> Result<(Option<String>, A), Outcome> {
    if !shared.authorized(headers) {
        return Err(unauthorized());
    }
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => None,
        Some(value) => match validate_idempotency_key(Some(value.as_bytes())) {
            Ok(key) => Some(key),
            Err(err) => {
                return Err(refused(
                    ResponseClass::InvalidRequest,
                    StripeError::invalid(err.0, "Idempotency-Key"),
                ))
            }
        },
    };
    let action = parse(form).map_err(|err| refused(ResponseClass::InvalidRequest, err))?;
    Ok((key, action))
}

/// Stripe's idempotency layer for `request` under `key`: the key's generation and whether
/// this is its first request, when the request may execute; otherwise the saved answer
/// replayed, or the refusal (another request in progress, the key reused with other
/// parameters).
async fn claim_key(
    shared: &Shared,
    key: &str,
    request: &KeyedRequest,
    latency: Duration,
) -> Result<(u64, bool), Outcome> {
    let refusal = match shared.stripe.keys.claim(key, request, shared.clock.now()) {
        Claim::Charge {
            generation,
            first_request,
        } => return Ok((generation, first_request)),
        Claim::Replay(answer) => Outcome::now(
            ResponseClass::Replayed,
            Answer {
                replayed: true,
                ..answer
            },
        ),
        Claim::InProgress => refused(
            ResponseClass::InProgress,
            StripeError::new(
                StatusCode::CONFLICT,
                "invalid_request_error",
                "There is currently another in-progress request using this Idempotent \
                 Key (that probably means you submitted twice, and the other request is \
                 still going through). Please try again later.",
            )
            .with_code("idempotency_key_in_use"),
        ),
        Claim::Reused => refused(
            ResponseClass::KeyReused,
            StripeError::new(
                StatusCode::BAD_REQUEST,
                "idempotency_error",
                "Keys for idempotent requests can only be used with the same parameters \
                 they were first used with, on the same endpoint.",
            ),
        ),
    };
    pause(latency).await;
    Err(refusal)
}

/// Executes a request that owns `key` (claimed at `generation`) and saves its answer under
/// the key, or releases the key when Stripe would not save it. The key is ours until commit
/// or release: this finishes in a task of its own so that a client hanging up (hyper then
/// drops this future) cannot leave the key in progress forever.
async fn execute_under_key<A: Execute>(
    shared: &Arc<Shared>,
    execution: Execution<A>,
    key: String,
    generation: u64,
) -> Outcome {
    let owner = Arc::clone(shared);
    run_detached(async move {
        let executed = execution.run().await;
        if executed.saved {
            let saved = executed.outcome.answer.clone();
            owner.stripe.keys.commit(&key, generation, saved, None);
        } else {
            owner.stripe.keys.release(&key, generation);
        }
        executed.outcome
    })
    .await
    .unwrap_or_else(internal_error)
}

async fn run_detached<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, ()> {
    tokio::spawn(future).await.map_err(|_| ())
}

/// The answer, and whether Stripe would save it under the key: only when the endpoint
/// executed (a state change, a decline, any `500`), never for a refusal before execution
/// (a `429`, a validation `400`, a 404, a PaymentIntent in the wrong state).
pub(crate) struct Executed {
    pub(crate) outcome: Outcome,
    saved: bool,
}

impl Executed {
    pub(crate) fn saved(outcome: Outcome) -> Executed {
        Executed {
            outcome,
            saved: true,
        }
    }

    pub(crate) fn not_saved(outcome: Outcome) -> Executed {
        Executed {
            outcome,
            saved: false,
        }
    }
}

/// Stripe's `500` after a request began executing (`error_after`): `what` happened first.
pub(crate) fn server_error_after(what: &str) -> Answer {
    StripeError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "api_error",
        format!("injected fault: error_after ({what})"),
    )
    .should_retry(false)
    .answer()
}

/// A fault that fires before anything charged. Stripe saves the result of every request
/// whose endpoint began executing, `500`s included, and replays it to every request under
/// the same key for 24 hours (docs.stripe.com/api/idempotent_requests): so `error_before`
/// is saved. A `429` (its rate limiter) and a `400` (validation) come before execution and
/// are not.
pub(crate) fn refused_before_charging(kind: FaultKind) -> Executed {
    match kind {
        FaultKind::ErrorBefore => Executed::saved(refused_by_fault(kind)),
        _ => Executed::not_saved(refused_by_fault(kind)),
    }
}

/// The answer of a fault that fires before anything charged.
pub(crate) fn refused_by_fault(kind: FaultKind) -> Outcome {
    let (class, err) = match kind {
        FaultKind::RateLimit => (
            ResponseClass::RateLimited,
            StripeError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "invalid_request_error",
                "injected fault: rate_limit (too many requests hit the API too quickly)",
            )
            .with_code("rate_limit")
            .should_retry(true),
        ),
        FaultKind::BadRequest => (
            ResponseClass::InvalidRequest,
            StripeError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "injected fault: bad_request",
            ),
        ),
        _ => (
            ResponseClass::ServerError,
            StripeError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "injected fault: error_before (nothing was processed)",
            )
            .should_retry(true),
        ),
    };
    refused(class, err).with_fault(kind)
}
