//! The HTTP surface: `/v1/charges` as contract §3 defines it, and the `/__*` test controls
//! both dialects serve; the answer, fault-delivery and access-log plumbing the Stripe
//! dialect ([`crate::stripe`]) shares.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::charge::{
    decline_code, fault_trigger, validate_idempotency_key, Charge, ChargeParams, ChargeStatus,
    InvalidRequest, MAX_IDEMPOTENCY_KEY_LEN,
};
use crate::config::{FaultConfig, FaultKind};
use crate::keys::Claim;
use crate::record::{Finish, ResponseClass};
use crate::server::{ConnectionControl, Shared};

pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";
const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
const STRIPE_SHOULD_RETRY: &str = "stripe-should-retry";

/// Longest clock advance accepted over HTTP; far beyond any retention, short of overflow.
const MAX_CLOCK_ADVANCE_SECS: f64 = 100.0 * 365.0 * 24.0 * 3600.0;

/// The onecharge dialect: contract §3 and the test controls.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    with_controls(
        Router::new()
            .route(
                "/v1/charges",
                post(create_charge).get(crate::list::get_charges),
            )
            .route("/__charges/{id}", post(crate::list::change_charge)),
        not_found,
        shared,
    )
}

/// Adds the `/__*` test controls, the dialect's 404 for unknown paths and the access log
/// to a dialect's routes.
pub(crate) fn with_controls<H, T>(
    routes: Router<Arc<Shared>>,
    not_found: H,
    shared: Arc<Shared>,
) -> Router
where
    H: axum::handler::Handler<T, Arc<Shared>>,
    T: 'static,
{
    routes
        .route("/__faults", get(get_faults).put(put_faults))
        .route("/__ledger", get(get_ledger))
        .route("/__stats", get(get_stats))
        .route("/__requests", get(get_requests))
        .route("/__clock/advance", post(advance_clock))
        .route("/__health", get(health))
        .fallback(not_found)
        .layer(middleware::from_fn(log_request))
        .with_state(shared)
}

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

    fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Answer {
        Answer::json(
            status,
            &json!({"error": {"type": kind, "message": message.into()}}),
        )
    }

    /// A `/v1` response: the contract's headers, and the note the access log reads.
    fn into_response(self, note: Note) -> Response {
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
enum Delivery {
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
    delivery: Delivery,
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
            None | Some(FaultKind::SlowCharge) => (class, answer, Delivery::Now),
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
    idempotency_key: Option<String>,
    class: ResponseClass,
    fault: Option<FaultKind>,
}

async fn create_charge(
    State(shared): State<Arc<Shared>>,
    Extension(connection): Extension<ConnectionControl>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let raw_key = raw_idempotency_key(&headers);
    let seq = shared.begin("POST", &uri, raw_key.clone(), recorded_body(&body));
    let outcome = decide_charge(&shared, &headers, &body).await;
    deliver(&shared, &connection, seq, "/v1/charges", raw_key, outcome).await
}

/// The `Idempotency-Key` header as sent, valid or not, for the request log and the access
/// log: a refused key must be visible there too, so this never validates.
pub(crate) fn raw_idempotency_key(headers: &HeaderMap) -> Option<String> {
    headers
        .get(IDEMPOTENCY_KEY)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
}

async fn decide_charge(shared: &Arc<Shared>, headers: &HeaderMap, body: &Bytes) -> Outcome {
    if !shared.authorized(headers) {
        return Outcome::unauthorized();
    }
    let key = match validate_idempotency_key(headers.get(IDEMPOTENCY_KEY).map(|v| v.as_bytes())) {
        Ok(key) => key,
        Err(err) => return Outcome::invalid(err),
    };
    let params = match ChargeParams::from_json(body) {
        Ok(params) => params,
        Err(err) => return Outcome::invalid(err),
    };
    let latency = shared.request_latency();
    let (generation, first_request) = match shared.keys.claim(&key, &params, shared.clock.now()) {
        Claim::Charge {
            generation,
            first_request,
        } => (generation, first_request),
        Claim::Replay(charge) => {
            pause(latency).await;
            let status = shared.replay_status(&charge);
            return Outcome::now(
                ResponseClass::Replayed,
                Answer {
                    replayed: true,
                    ..Answer::json(status, &charge)
                },
            );
        }
        Claim::InProgress => {
            pause(latency).await;
            return Outcome::now(
                ResponseClass::InProgress,
                Answer::error(
                    StatusCode::CONFLICT,
                    "idempotency_in_progress",
                    "a request with this Idempotency-Key is still running; retry later",
                ),
            );
        }
        Claim::Reused => {
            pause(latency).await;
            return Outcome::now(
                ResponseClass::KeyReused,
                Answer::error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "idempotency_key_reused",
                    "this Idempotency-Key was used with different parameters",
                ),
            );
        }
    };
    // The key is ours until commit or release. Finish in a task of its own so that a client
    // hanging up (hyper then drops this future) cannot leave the key in progress forever.
    let claimed = Claimed {
        shared: Arc::clone(shared),
        key,
        params,
        generation,
        first_request,
        latency,
    };
    tokio::spawn(claimed.charge()).await.unwrap_or_else(|_| {
        Outcome::now(
            ResponseClass::ServerError,
            Answer::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "internal error",
            ),
        )
    })
}

/// A charge request that owns its idempotency key.
struct Claimed {
    shared: Arc<Shared>,
    key: String,
    params: ChargeParams,
    generation: u64,
    first_request: bool,
    latency: Duration,
}

impl Claimed {
    async fn charge(self) -> Outcome {
        let Claimed {
            shared,
            key,
            params,
            generation,
            first_request,
            latency,
        } = self;
        // Spent while the key is in progress: concurrent duplicates see `409` meanwhile.
        pause(latency).await;
        let trigger = first_request
            .then(|| fault_trigger(&params.payment_method))
            .flatten();
        let fault = trigger.or_else(|| shared.faults.draw());
        if let Some(kind) = fault.filter(|kind| !kind.charges()) {
            shared.keys.release(&key, generation);
            return refused(kind);
        }

        if fault == Some(FaultKind::SlowCharge) {
            // Still processing: a re-send meanwhile gets `409`, a lookup finds nothing.
            shared.hold_slow_charge().await;
        }
        let decline = decline_code(&params.payment_method);
        let charge = Charge {
            id: shared.ids.next(),
            status: if decline.is_some() {
                ChargeStatus::Declined
            } else {
                ChargeStatus::Succeeded
            },
            amount_minor: params.amount_minor,
            currency: params.currency,
            customer_id: params.customer_id,
            payment_method: params.payment_method,
            reference: params.reference,
            idempotency_key: key.clone(),
            decline_code: decline.map(str::to_owned),
            created_at: shared.clock.wall_now(),
        };
        shared
            .keys
            .commit(&key, generation, charge.clone(), Some(charge.clone()));

        let (class, status) = match charge.status {
            ChargeStatus::Succeeded => (ResponseClass::Created, StatusCode::CREATED),
            ChargeStatus::Declined => (ResponseClass::Declined, StatusCode::PAYMENT_REQUIRED),
        };
        let answer = Answer::json(status, &charge);
        Outcome::charged(class, answer, fault, shared.hang_for, || {
            Answer::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "injected fault: error_after",
            )
        })
    }
}

/// The answer of a fault that fires before anything is charged.
fn refused(kind: FaultKind) -> Outcome {
    let (class, answer) = match kind {
        FaultKind::RateLimit => (
            ResponseClass::RateLimited,
            Answer {
                retry_after_secs: Some(1),
                ..Answer::error(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    "injected fault: rate_limit",
                )
            },
        ),
        FaultKind::BadRequest => (
            ResponseClass::InvalidRequest,
            Answer::error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "injected fault: bad_request",
            ),
        ),
        _ => (
            ResponseClass::ServerError,
            Answer::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "injected fault: error_before",
            ),
        ),
    };
    Outcome {
        class,
        fault: Some(kind),
        answer,
        delivery: Delivery::Now,
    }
}

/// Records the outcome, then answers, holds, or closes the connection.
pub(crate) async fn deliver(
    shared: &Shared,
    connection: &ConnectionControl,
    seq: u64,
    path: &str,
    idempotency_key: Option<String>,
    outcome: Outcome,
) -> Response {
    let Outcome {
        class,
        fault,
        answer,
        delivery,
    } = outcome;
    shared.counters.count(class);
    // The request log's entry: the class and fault are known now; status and finish time
    // depend on how the answer is delivered.
    let finish = |status, finished_at| {
        shared.log.finish(
            seq,
            Finish {
                status,
                class,
                fault,
                finished_at,
            },
        );
    };
    match delivery {
        Delivery::Now => {}
        Delivery::Drop => {
            finish(None, Some(shared.clock.wall_now()));
            // The access log never sees this request (there is no response), so log it here.
            tracing::info!(
                method = "POST",
                path,
                idempotency_key,
                class = class.as_str(),
                fault = fault.map(FaultKind::as_str),
                "request: connection dropped without a response"
            );
            return connection.drop_now().await;
        }
        Delivery::Hold(hold) => {
            // Held: the log shows the class and fault now, but no answer yet.
            finish(None, None);
            tokio::select! {
                () = tokio::time::sleep(hold) => {}
                () = shared.shutdown.cancelled() => return connection.drop_now().await,
            }
        }
    }
    finish(Some(answer.status.as_u16()), Some(shared.clock.wall_now()));
    answer.into_response(Note {
        idempotency_key,
        class,
        fault,
    })
}

/// The lookup's `{"data":[charge…]}`.
#[derive(Serialize)]
struct ChargeList<'a> {
    data: &'a [Charge],
}

#[derive(Deserialize)]
pub(crate) struct LookupQuery {
    idempotency_key: Option<String>,
}

pub(crate) async fn lookup_charges(
    State(shared): State<Arc<Shared>>,
    Extension(connection): Extension<ConnectionControl>,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<LookupQuery>, QueryRejection>,
) -> Response {
    let key = query.ok().and_then(|Query(query)| query.idempotency_key);
    let seq = shared.begin("GET", &uri, key.clone(), Value::Null);
    let outcome = if !shared.authorized(&headers) {
        Outcome::unauthorized()
    } else {
        match key.as_deref() {
            Some(key) if (1..=MAX_IDEMPOTENCY_KEY_LEN).contains(&key.chars().count()) => {
                pause(shared.request_latency()).await;
                let charges = Vec::from_iter(shared.keys.lookup(key, shared.clock.now()));
                Outcome::now(
                    ResponseClass::Lookup,
                    Answer::json(StatusCode::OK, &ChargeList { data: &charges }),
                )
            }
            _ => Outcome::invalid(InvalidRequest(format!(
                "the idempotency_key query parameter is required (1 to \
                 {MAX_IDEMPOTENCY_KEY_LEN} characters)"
            ))),
        }
    };
    deliver(&shared, &connection, seq, "/v1/charges", key, outcome).await
}

pub(crate) async fn pause(latency: Duration) {
    // A zero-length tokio sleep still waits for the next timer tick (about 1 ms).
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
}

/// The body as the request log keeps it: JSON when it parses, else the raw text.
pub(crate) fn recorded_body(body: &Bytes) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

async fn get_faults(State(shared): State<Arc<Shared>>) -> Json<FaultConfig> {
    Json(shared.faults.config())
}

async fn put_faults(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let faults = serde_json::from_slice::<FaultConfig>(&body)
        .map_err(|e| format!("not a fault configuration: {e}"))
        .and_then(|faults| faults.validate().map(|()| faults));
    match faults {
        Ok(faults) => {
            tracing::info!(?faults, "faults changed");
            shared.faults.set(faults.clone());
            Json(faults).into_response()
        }
        Err(message) => {
            Answer::error(StatusCode::BAD_REQUEST, "invalid_request", message).into_response_plain()
        }
    }
}

async fn get_ledger(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.ledger.charges()).into_response()
}

async fn get_stats(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.stats()).into_response()
}

async fn get_requests(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.log.snapshot()).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClockAdvance {
    seconds: f64,
}

async fn advance_clock(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let by = serde_json::from_slice::<ClockAdvance>(&body)
        .map_err(|e| format!("expected {{\"seconds\": N}}: {e}"))
        .and_then(|advance| {
            if (0.0..=MAX_CLOCK_ADVANCE_SECS).contains(&advance.seconds) {
                Ok(Duration::from_secs_f64(advance.seconds))
            } else {
                Err(format!(
                    "seconds must be between 0 and {MAX_CLOCK_ADVANCE_SECS}"
                ))
            }
        });
    match by {
        Ok(by) => {
            shared.advance_clock(by);
            let now = shared
                .clock
                .wall_now()
                .format(&time::format_description::well_known::Rfc3339)
                .expect("the mock clock formats as RFC 3339");
            Json(json!({ "now": now })).into_response()
        }
        Err(message) => {
            Answer::error(StatusCode::BAD_REQUEST, "invalid_request", message).into_response_plain()
        }
    }
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn not_found() -> Response {
    Answer::error(StatusCode::NOT_FOUND, "not_found", "no such endpoint").into_response_plain()
}

/// One log line per request, after its response (a dropped connection logs itself).
async fn log_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let note = response.extensions().get::<Note>();
    tracing::info!(
        method = %method,
        path,
        status = response.status().as_u16(),
        idempotency_key = note.and_then(|note| note.idempotency_key.as_deref()),
        class = note.map(|note| note.class.as_str()),
        fault = note.and_then(|note| note.fault).map(FaultKind::as_str),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}
