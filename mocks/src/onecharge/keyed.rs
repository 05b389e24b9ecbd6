//! The onecharge dialect's idempotency layer, the one both of its POSTs go through
//! (`POST /v1/charges` in `crate::onecharge::charges`, `POST /v1/refunds` in `crate::onecharge::refunds`):
//! credentials, the `Idempotency-Key`, the body, then the key claimed — a replay, `409
//! idempotency_in_progress` or `422 idempotency_key_reused` answered here, and a request
//! that owns its key executed in a task of its own ([`KeyedPost::execute`]); and the
//! lookup by key both have ([`lookup`]). Also the answers of the faults both share.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use serde_json::{json, Value};

use crate::answer::{pause, Answer, Outcome};
use crate::charge::{validate_idempotency_key, Charge, InvalidRequest, MAX_IDEMPOTENCY_KEY_LEN};
use crate::config::FaultKind;
use crate::keys::{Claim, Keys};
use crate::record::ResponseClass;
use crate::respond::{deliver, raw_idempotency_key, recorded_body, IDEMPOTENCY_KEY};
use crate::state::{ConnectionControl, Shared};

/// A POST of the onecharge dialect whose key binds its parameters: the validated
/// parameters are the request ("the same request" is equal parameters), and a completed
/// request saves [`KeyedPost::Saved`] under its key.
pub(crate) trait KeyedPost: Clone + PartialEq + Send + Sync + Sized + 'static {
    /// What a completed request keeps under its key for replays.
    type Saved: Clone + Send + 'static;

    /// The route, for the access log.
    const PATH: &'static str;

    /// Validates the body, naming the first field that is wrong.
    fn parse(body: &[u8]) -> Result<Self, InvalidRequest>;

    /// The key store of this POST.
    fn keys(shared: &Shared) -> &Keys<Self, Self::Saved>;

    /// The answer to the same request again under a completed key.
    fn replay(shared: &Shared, saved: Self::Saved) -> Answer;

    /// What the lookup `GET {PATH}?idempotency_key=` lists for a completed key, as it
    /// stands now.
    fn found(shared: &Shared, saved: Self::Saved) -> Option<Value>;

    /// The fault a lookup that would answer `200` gets; none by default (the charges'
    /// lookups are never faulted).
    fn lookup_fault(_shared: &Shared) -> Option<FaultKind> {
        None
    }

    /// Executes a request that owns its key, and commits or releases the key.
    fn execute(self, claimed: Claimed<Self>) -> impl Future<Output = Outcome> + Send;
}

/// A request that owns its idempotency key until it commits or releases it.
pub(crate) struct Claimed<P: KeyedPost> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) key: String,
    generation: u64,
    /// No earlier request used the key (within retention): payment-method fault triggers
    /// fire only then.
    pub(crate) first_request: bool,
    /// The request's latency, spent while the key is in progress.
    pub(crate) latency: Duration,
    _post: std::marker::PhantomData<fn() -> P>,
}

impl<P: KeyedPost> Claimed<P> {
    /// Saves the outcome under the key; a charge, when the request charged, enters the
    /// ledger in the same step.
    pub(crate) fn commit(&self, saved: P::Saved, charged: Option<Charge>) {
        P::keys(&self.shared).commit(&self.key, self.generation, saved, charged);
    }

    /// Frees the key after a request that executed nothing, so that a retry can.
    pub(crate) fn release(&self) {
        P::keys(&self.shared).release(&self.key, self.generation);
    }

    /// Frees the key and answers a refusal (the request changed nothing).
    pub(crate) fn refuse(&self, outcome: Outcome) -> Outcome {
        self.release();
        outcome
    }
}

/// Serves one keyed POST: records it, decides it, delivers the outcome.
pub(crate) async fn serve<P: KeyedPost>(
    shared: Arc<Shared>,
    connection: ConnectionControl,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let raw_key = raw_idempotency_key(&headers);
    let seq = shared.begin("POST", &uri, raw_key.clone(), recorded_body(&body));
    let outcome = decide::<P>(&shared, &headers, &body).await;
    deliver(&shared, &connection, seq, P::PATH, raw_key, outcome).await
}

async fn decide<P: KeyedPost>(shared: &Arc<Shared>, headers: &HeaderMap, body: &Bytes) -> Outcome {
    if !shared.authorized(headers) {
        return Outcome::unauthorized();
    }
    let key = match validate_idempotency_key(headers.get(IDEMPOTENCY_KEY).map(|v| v.as_bytes())) {
        Ok(key) => key,
        Err(err) => return Outcome::invalid(err),
    };
    let params = match P::parse(body) {
        Ok(params) => params,
        Err(err) => return Outcome::invalid(err),
    };
    let latency = shared.request_latency();
    let refusal = match P::keys(shared).claim(&key, &params, shared.clock.now()) {
        Claim::Charge {
            generation,
            first_request,
        } => {
            // The key is ours until commit or release. Finish in a task of its own so that
            // a client hanging up (hyper then drops this future) cannot leave the key in
            // progress forever.
            let claimed = Claimed {
                shared: Arc::clone(shared),
                key,
                generation,
                first_request,
                latency,
                _post: std::marker::PhantomData,
            };
            return tokio::spawn(params.execute(claimed))
                .await
                .unwrap_or_else(|_| internal_error());
        }
        Claim::Replay(saved) => Outcome::now(
            ResponseClass::Replayed,
            Answer {
                replayed: true,
                ..P::replay(shared, saved)
            },
        ),
        Claim::InProgress => Outcome::now(
            ResponseClass::InProgress,
            Answer::error(
                StatusCode::CONFLICT,
                "idempotency_in_progress",
                "a request with this Idempotency-Key is still running; retry later",
            ),
        ),
        Claim::Reused => Outcome::now(
            ResponseClass::KeyReused,
            Answer::error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "this Idempotency-Key was used with different parameters",
            ),
        ),
    };
    pause(latency).await;
    refusal
}

/// `GET {PATH}?idempotency_key=K`: `{"data":[…]}` with what completed under the live key
/// `K` as it stands now, or `{"data":[]}` when nothing did (nothing executed, its first
/// request still running, or the key expired).
pub(crate) async fn lookup<P: KeyedPost>(
    shared: Arc<Shared>,
    connection: ConnectionControl,
    uri: Uri,
    headers: HeaderMap,
    key: Option<String>,
) -> Response {
    let seq = shared.begin("GET", &uri, key.clone(), Value::Null);
    let outcome = if !shared.authorized(&headers) {
        Outcome::unauthorized()
    } else {
        match key.as_deref() {
            Some(key) if (1..=MAX_IDEMPOTENCY_KEY_LEN).contains(&key.chars().count()) => {
                pause(shared.request_latency()).await;
                let data: Vec<Value> = P::keys(&shared)
                    .lookup(key, shared.clock.now())
                    .and_then(|saved| P::found(&shared, saved))
                    .into_iter()
                    .collect();
                let answer = Answer::json(StatusCode::OK, &json!({ "data": data }));
                Outcome::looked_up(answer, P::lookup_fault(&shared), shared.hang_for, refused)
            }
            _ => Outcome::invalid(InvalidRequest(format!(
                "the idempotency_key query parameter is required (1 to \
                 {MAX_IDEMPOTENCY_KEY_LEN} characters)"
            ))),
        }
    };
    deliver(&shared, &connection, seq, P::PATH, key, outcome).await
}

fn internal_error() -> Outcome {
    Outcome::now(
        ResponseClass::ServerError,
        Answer::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "internal error",
        ),
    )
}

/// The `500` of `error_after`: the request changed the gateway's books first.
pub(crate) fn server_error_after() -> Answer {
    Answer::error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "api_error",
        "injected fault: error_after",
    )
}

/// The answer of a fault that fires before anything is charged or refunded (and of a
/// lookup's `rate_limit` or `error_before`).
pub(crate) fn refused(kind: FaultKind) -> Outcome {
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
