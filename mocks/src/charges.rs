//! The onecharge dialect's charges (contract §3): `POST /v1/charges`, charging at most once
//! per idempotency key, and the lookup `GET /v1/charges?idempotency_key=`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::Extension;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::answer::{pause, Answer, Outcome};
use crate::charge::{
    decline_code, fault_trigger, validate_idempotency_key, Charge, ChargeParams, ChargeStatus,
    InvalidRequest, MAX_IDEMPOTENCY_KEY_LEN,
};
use crate::config::FaultKind;
use crate::keys::Claim;
use crate::record::ResponseClass;
use crate::respond::{deliver, raw_idempotency_key, recorded_body, IDEMPOTENCY_KEY};
use crate::state::{ConnectionControl, Shared};

/// `POST /v1/charges`.
pub(crate) async fn create_charge(
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
    Outcome::now(class, answer).with_fault(kind)
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

/// The onecharge dialect's answer to a path it does not serve.
pub(crate) async fn not_found() -> Response {
    Answer::error(StatusCode::NOT_FOUND, "not_found", "no such endpoint").into_response_plain()
}
