//! Admin HTTP (contract §6): liveness, readiness, Prometheus metrics and the operator API.
//! Bound to 127.0.0.1 by default; `/api/*` requires the admin token or a named operator's
//! token when either is configured (a viewer's token may only read). The operator console
//! (`crate::console`) is mounted under `/console/`. Every route, open or not, first passes
//! [`origin::guard`]: a loopback or configured `Host`, and no state change from another
//! origin's page (DNS rebinding, issue 23).

pub mod origin;

mod findings;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use secrecy::SecretString;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::console::access::Principal;
use crate::console::Console;
use crate::domain::AttemptStatus;
use crate::domain::PaymentAttemptId;
use crate::gateway::GatewayHealth;
use crate::operator::bulk::{self, BulkError, BulkOutcome, BulkRequest};
use crate::operator::recheck::{self, Recheck, RecheckError};
use crate::operator::resolve::{self, ResolveError, ResolveRequest};
use crate::operator::stats::Stats;
use crate::operator::{attempts, audit, RetryWindow, Via};
use crate::reconciler::Reconciler;
use crate::store::Store;

pub mod openapi;

/// What the handlers need.
#[derive(Clone)]
pub struct AdminState {
    pub store: Store,
    pub broker: Broker,
    pub metrics: PrometheusHandle,
    pub admin_token: Option<SecretString>,
    /// The executor's view of the gateway, when this process runs one: readiness fails
    /// while the gateway rejects onecharge's credentials (every call is paused).
    pub gateway_health: Option<GatewayHealth>,
    /// The configured limits of a retry (`RetryWindow::from_settings`): the resolve
    /// endpoint enforces them exactly as `onecharge attempts resolve` does, and the
    /// listings show when each attempt's window closes.
    pub retry_window: RetryWindow,
    /// The named operators, the console's sessions and settings
    /// (`Console::from_settings`; `Console::default()`: no operators, default settings).
    pub console: Console,
    /// The reconciler whose lookup `recheck` (and a bulk recheck) runs, when this process
    /// has a gateway client (it runs the executor or the reconciler); `None` answers 503.
    pub reconciler: Option<Reconciler>,
}

/// The admin router: health, readiness, metrics, the operator API under `/api` and the
/// console, every route behind [`origin::guard`].
pub fn router(state: AdminState) -> Router {
    let api = Router::new()
        .route("/api/attempts", get(list_attempts))
        .route("/api/attempts/{id}", get(show_attempt))
        .route("/api/attempts/{id}/resolve", post(resolve_attempt))
        .route("/api/attempts/{id}/recheck", post(recheck_attempt))
        .route("/api/attempts/bulk", post(bulk_action))
        .route("/api/audit", get(audit_list))
        .route("/api/stats", get(stats))
        .route("/api/openapi.json", get(openapi::serve))
        .route("/api/findings", get(findings::list))
        .route(
            "/api/findings/{id}/resolve",
            post(findings::resolve_finding),
        )
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize_api));
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .merge(api)
        .merge(crate::console::router(state.clone()))
        // Last before `with_state`, so that it wraps every route above, any added to this
        // router later, and the 404 of a path that is none (contract §6).
        .layer(middleware::from_fn_with_state(state.clone(), origin::guard))
        .with_state(state)
}

/// Serves [`router`] on `listener` until `shutdown` fires.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AdminState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "admin HTTP listening");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}

/// An API failure: its status and a JSON body `{"error": {"type": …, "message": …}}`, so a
/// script can branch on `type` without parsing prose.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// The attempt's state refuses the action (it is not, or no longer, in a state the
    /// action applies to).
    fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "admin API request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the request failed on the server; see its log",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"type": self.kind, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<ResolveError> for ApiError {
    fn from(err: ResolveError) -> Self {
        match err {
            ResolveError::Invalid(why) => Self::bad_request(why),
            err @ ResolveError::NotFound(_) => Self::not_found(err.to_string()),
            ResolveError::Refused(why) => Self::conflict(why),
            err @ ResolveError::Store(_) => Self::internal(err),
        }
    }
}

/// When an admin token or named operators are configured, `/api/*` needs
/// `Authorization: Bearer <token>` of one of them (compared in constant time over SHA-256
/// digests, see `Operators::authenticate`), and a viewer's token only reads: anything but
/// GET is 403 with why. The principal found is handed to the handler, which records its
/// actor (`admin-api` for the admin token and an open API, `operator:<name>` otherwise).
async fn authorize_api(
    State(state): State<AdminState>,
    mut request: Request,
    next: Next,
) -> Response {
    let principal = if crate::console::is_open(&state) {
        Principal::admin_token()
    } else {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        let found = presented.and_then(|token| {
            state
                .console
                .operators
                .authenticate(state.admin_token.as_ref(), token)
        });
        let Some(principal) = found else {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this API needs Authorization: Bearer <admin_token or an operator's token>",
            )
            .into_response();
        };
        principal
    };
    let reads = matches!(*request.method(), Method::GET | Method::HEAD);
    if !reads && !principal.may_act() {
        return ApiError::new(StatusCode::FORBIDDEN, "forbidden", principal.refusal())
            .into_response();
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// The token of an `Authorization: Bearer <token>` value. The scheme name is matched in any
/// case (RFC 7235 §2.1; RFC 6750 §2.1), the token exactly.
fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

/// `GET /api/attempts` query: `status`, `stuck` (a duration such as `15m`: non-final attempts
/// older than it plus every `needs_review`, oldest first) with `after` (the cursor of its
/// next page), and without `stuck`: `order_id`, `customer_id`, `gateway_charge_id` (only the
/// attempts that have it), `idempotency_key`, `created_after` / `created_before` (RFC 3339),
/// `before` (the cursor of the next page); the cursors come from the previous answer's
/// `X-Next-Cursor` header. `limit`: default 100 for the listing, all for `stuck` (contract
/// §6 answers every stuck attempt); 0 = all.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    status: Option<String>,
    stuck: Option<String>,
    order_id: Option<String>,
    customer_id: Option<String>,
    gateway_charge_id: Option<String>,
    idempotency_key: Option<String>,
    created_after: Option<String>,
    created_before: Option<String>,
    before: Option<String>,
    after: Option<String>,
    limit: Option<usize>,
}

/// The header that carries the cursor of the next page: the body stays the JSON array of
/// contract §6.
pub const NEXT_CURSOR_HEADER: &str = "x-next-cursor";

fn with_next_cursor<T: serde::Serialize>(body: T, next: Option<String>) -> Response {
    let mut response = Json(body).into_response();
    if let Some(value) = next.and_then(|n| header::HeaderValue::from_str(&n).ok()) {
        response.headers_mut().insert(NEXT_CURSOR_HEADER, value);
    }
    response
}

fn time_param(name: &str, value: Option<&str>) -> Result<Option<OffsetDateTime>, ApiError> {
    value
        .map(|text| {
            crate::operator::parse_time(text)
                .map_err(|e| ApiError::bad_request(format!("{name}: {e}")))
        })
        .transpose()
}

/// A page cursor (`before`, `after`): the `X-Next-Cursor` of the previous answer.
fn cursor_param(
    name: &str,
    value: Option<&str>,
) -> Result<Option<attempts::AttemptCursor>, ApiError> {
    value
        .map(str::parse::<attempts::AttemptCursor>)
        .transpose()
        .map_err(|e| ApiError::bad_request(format!("{name}: {e}")))
}

/// `GET /api/attempts`: attempts newest first, narrowed by the query; with `stuck`, the
/// unsettled attempts older than it, oldest first.
#[utoipa::path(
    get,
    path = "/api/attempts",
    tag = "attempts",
    params(ListQuery),
    responses(
        (status = 200, description = "The attempts, as `attempts list --json` (or `attempts stuck --json`) prints them (contract §5)", body = Vec<serde_json::Value>,
            headers(("x-next-cursor" = String, description = "The cursor of the next page (`before`, or `after` with `stuck`), when there is one"))),
        (status = 400, description = "A parameter is not understood", body = openapi::ErrorBody),
        (status = 401, description = "No or an unknown bearer token", body = openapi::ErrorBody),
    )
)]
async fn list_attempts(
    State(state): State<AdminState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if let Some(limit) = query.limit {
        crate::operator::parse_limit(&limit.to_string())
            .map_err(|e| ApiError::bad_request(format!("limit: {e}")))?;
    }
    let status = query
        .status
        .as_deref()
        .map(str::parse::<AttemptStatus>)
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let now = OffsetDateTime::now_utc();
    let store = &state.store;
    let before = cursor_param("before", query.before.as_deref())?;
    let filter = attempts::AttemptFilter {
        status,
        order_id: query.order_id,
        customer_id: query.customer_id,
        gateway_charge_id: query.gateway_charge_id,
        idempotency_key: query.idempotency_key,
        created_after: time_param("created_after", query.created_after.as_deref())?,
        created_before: time_param("created_before", query.created_before.as_deref())?,
        before,
    };
    let page = match query.stuck.as_deref() {
        Some(_) if filter != (attempts::AttemptFilter { status, ..Default::default() }) => {
            return Err(ApiError::bad_request(
                "stuck lists every unsettled attempt; it does not combine with order_id, customer_id, gateway_charge_id, idempotency_key, created_after, created_before or before",
            ))
        }
        Some(stuck) => {
            let older_than = crate::config::parse_duration(stuck)
                .map_err(|e| ApiError::bad_request(format!("stuck: {e}")))?;
            let filter = attempts::StuckFilter {
                older_than,
                status,
                after: cursor_param("after", query.after.as_deref())?,
            };
            let limit = query.limit.unwrap_or(0);
            attempts::stuck(store, &filter, limit, now, &state.retry_window).await
        }
        None if query.after.is_some() => {
            return Err(ApiError::bad_request(
                "after pages the stuck list (with stuck=…, oldest first); the listing pages newest first with before",
            ))
        }
        None => {
            let limit = query.limit.unwrap_or(100);
            attempts::page(store, &filter, limit, now, &state.retry_window).await
        }
    }
    .map_err(ApiError::internal)?;
    Ok(with_next_cursor(
        page.attempts,
        page.next.map(|c| c.to_string()),
    ))
}

fn attempt_id(
    id: Result<Path<PaymentAttemptId>, PathRejection>,
) -> Result<PaymentAttemptId, ApiError> {
    id.map(|Path(id)| id)
        .map_err(|e| ApiError::bad_request(format!("not a payment_attempt_id: {}", e.body_text())))
}

#[utoipa::path(
    get,
    path = "/api/attempts/{id}",
    tag = "attempts",
    params(("id" = uuid::Uuid, Path, description = "The payment_attempt_id")),
    responses(
        (status = 200, description = "The attempt with its transitions, gateway calls and events, as `attempts show --json` prints it (contract §5)", body = serde_json::Value),
        (status = 400, description = "Not a payment_attempt_id", body = openapi::ErrorBody),
        (status = 401, description = "No or an unknown bearer token", body = openapi::ErrorBody),
        (status = 404, description = "No such attempt", body = openapi::ErrorBody),
    )
)]
/// `GET /api/attempts/{id}`: one attempt, as `attempts show --json` prints it.
async fn show_attempt(
    State(state): State<AdminState>,
    id: Result<Path<PaymentAttemptId>, PathRejection>,
) -> Result<Json<attempts::AttemptDetail>, ApiError> {
    let id = attempt_id(id)?;
    attempts::show(
        &state.store,
        id,
        OffsetDateTime::now_utc(),
        &state.retry_window,
    )
    .await
    .map_err(ApiError::internal)?
    .map(Json)
    .ok_or_else(|| ApiError::not_found(format!("no payment attempt {id}")))
}

/// The actor recorded for decisions taken through the API with the shared admin token (or
/// on an open API); a named operator's are `operator:<name>`.
pub const API_ACTOR: &str = crate::console::access::ADMIN_TOKEN_ACTOR;

/// `POST /api/attempts/{id}/resolve` with `{"as": "succeeded|declined|retry", "reason": …,
/// "gateway_charge_id": …, "decline_code": …}`: the decision of `attempts resolve`. Answers
/// `{"resolution": …, "attempt": <as GET /api/attempts/{id}>}`.
#[utoipa::path(
    post,
    path = "/api/attempts/{id}/resolve",
    tag = "attempts",
    params(("id" = uuid::Uuid, Path, description = "The payment_attempt_id")),
    request_body = ResolveRequest,
    responses(
        (status = 200, description = "`{\"resolution\": …, \"attempt\": <as GET /api/attempts/{id}>}`", body = serde_json::Value),
        (status = 400, description = "The decision is incomplete or not understood", body = openapi::ErrorBody),
        (status = 401, description = "No or an unknown bearer token", body = openapi::ErrorBody),
        (status = 403, description = "A viewer's token: it only reads", body = openapi::ErrorBody),
        (status = 404, description = "No such attempt", body = openapi::ErrorBody),
        (status = 409, description = "The attempt's state refuses the decision", body = openapi::ErrorBody),
    )
)]
async fn resolve_attempt(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    id: Result<Path<PaymentAttemptId>, PathRejection>,
    body: Result<Json<ResolveRequest>, JsonRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let id = attempt_id(id)?;
    let Json(request) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let now = OffsetDateTime::now_utc();
    let store = &state.store;
    let resolution = resolve::resolve(
        store,
        state.reconciler.as_ref().map(Reconciler::gateway),
        id,
        &request,
        &principal.actor,
        Via::Api,
        &state.retry_window,
    )
    .await?;
    let attempt = attempts::show(store, id, now, &state.retry_window)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(
        serde_json::json!({"resolution": resolution, "attempt": attempt}),
    ))
}

/// The body of `POST /api/attempts/{id}/recheck`, optional.
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct RecheckBody {
    #[serde(default)]
    reason: Option<String>,
}

impl From<RecheckError> for ApiError {
    fn from(err: RecheckError) -> Self {
        match err {
            RecheckError::Invalid(why) => Self::bad_request(why),
            err @ RecheckError::NotFound(_) => Self::not_found(err.to_string()),
            RecheckError::Refused(why) => Self::conflict(why),
            RecheckError::Unavailable(why) => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", why)
            }
            err @ RecheckError::Failed(_) => Self::internal(err),
        }
    }
}

fn no_gateway_client() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "this process has no gateway client (it runs neither the executor nor the reconciler role): recheck through one that does, or `onecharge attempts recheck`",
    )
}

/// `POST /api/attempts/{id}/recheck` (body optional: `{"reason": …}`): what `attempts
/// recheck` does — the reconciler's lookup now, applied when it settles the attempt.
/// Answers the [`Recheck`] report; 409 for an attempt that is not `unknown` or
/// `needs_review`.
#[utoipa::path(
    post,
    path = "/api/attempts/{id}/recheck",
    tag = "attempts",
    params(("id" = uuid::Uuid, Path, description = "The payment_attempt_id")),
    request_body(content = Option<RecheckBody>, description = "Optional: an empty body is no reason"),
    responses(
        (status = 200, description = "What the lookup found and did, as `attempts recheck --json` prints it", body = serde_json::Value),
        (status = 400, description = "The body is not understood", body = openapi::ErrorBody),
        (status = 401, description = "No or an unknown bearer token", body = openapi::ErrorBody),
        (status = 403, description = "A viewer's token: it only reads", body = openapi::ErrorBody),
        (status = 404, description = "No such attempt", body = openapi::ErrorBody),
        (status = 409, description = "The attempt is not unknown or needs_review", body = openapi::ErrorBody),
        (status = 503, description = "This process has no gateway client", body = openapi::ErrorBody),
    )
)]
async fn recheck_attempt(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    id: Result<Path<PaymentAttemptId>, PathRejection>,
    body: axum::body::Bytes,
) -> Result<Json<Recheck>, ApiError> {
    let id = attempt_id(id)?;
    let body: RecheckBody = if body.iter().all(u8::is_ascii_whitespace) {
        RecheckBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(e.to_string()))?
    };
    let reconciler = state.reconciler.as_ref().ok_or_else(no_gateway_client)?;
    let report = recheck::recheck(
        reconciler,
        id,
        &principal.actor,
        Via::Api,
        body.reason.as_deref(),
    )
    .await?;
    Ok(Json(report))
}

impl From<BulkError> for ApiError {
    fn from(err: BulkError) -> Self {
        match err {
            BulkError::Invalid(why) => Self::bad_request(why),
            err @ BulkError::TooMany { .. } => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "too_many",
                err.to_string(),
            ),
            BulkError::Unavailable(why) => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", why)
            }
            err @ BulkError::Failed(_) => Self::internal(err),
        }
    }
}

/// `POST /api/attempts/bulk` with `{"action": "retry|recheck", "filter": {…}, "reason": …,
/// "preview": bool, "max": N}`: see [`crate::operator::bulk`]. 422 when more attempts match
/// than the cap (or `max`).
#[utoipa::path(
    post,
    path = "/api/attempts/bulk",
    tag = "attempts",
    request_body(content = serde_json::Value, description = "`{\"action\": \"retry|recheck\", \"filter\": {…}, \"reason\": …, \"preview\": bool, \"max\": N}`, the filter as `attempts bulk` takes it"),
    responses(
        (status = 200, description = "What was (or, with preview, would be) done, per attempt", body = serde_json::Value),
        (status = 400, description = "The request is not understood", body = openapi::ErrorBody),
        (status = 401, description = "No or an unknown bearer token", body = openapi::ErrorBody),
        (status = 403, description = "A viewer's token: it only reads", body = openapi::ErrorBody),
        (status = 422, description = "More attempts match than the cap (500) or `max`: nothing was done", body = openapi::ErrorBody),
        (status = 503, description = "A recheck, and this process has no gateway client", body = openapi::ErrorBody),
    )
)]
async fn bulk_action(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    body: Result<Json<BulkRequest>, JsonRejection>,
) -> Result<Json<BulkOutcome>, ApiError> {
    let Json(request) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let outcome = bulk::bulk(
        &state.store,
        state.reconciler.as_ref(),
        &request,
        &principal.actor,
        Via::Api,
        &state.retry_window,
    )
    .await?;
    Ok(Json(outcome))
}

/// `GET /api/audit` query: `actor`, `attempt` (a payment_attempt_id), `before` (the cursor
/// of the next page, from the previous answer's `X-Next-Cursor`), `limit` (default 100).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    actor: Option<String>,
    #[param(value_type = Option<uuid::Uuid>)]
    attempt: Option<PaymentAttemptId>,
    before: Option<String>,
    limit: Option<usize>,
}

/// `GET /api/audit`: the audit trail, newest first, as `audit list --json` prints it.
#[utoipa::path(
    get,
    path = "/api/audit",
    tag = "audit",
    params(AuditQuery),
    responses(
        (status = 200, description = "Audit entries, newest first, as `audit list --json` prints them", body = Vec<serde_json::Value>,
            headers(("x-next-cursor" = String, description = "The cursor of the next page (`before`), when there is one"))),
        (status = 400, description = "A parameter is not understood", body = openapi::ErrorBody),
        (status = 401, description = "No or an unknown bearer token", body = openapi::ErrorBody),
    )
)]
async fn audit_list(
    State(state): State<AdminState>,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let before_id = query
        .before
        .as_deref()
        .map(audit::parse_cursor)
        .transpose()
        .map_err(|e| ApiError::bad_request(format!("before: {e}")))?;
    let filter = audit::AuditFilter {
        actor: query.actor,
        payment_attempt_id: query.attempt,
        before_id,
    };
    let page = audit::list(&state.store, &filter, query.limit.unwrap_or(100))
        .await
        .map_err(ApiError::internal)?;
    Ok(with_next_cursor(page.entries, page.next))
}

/// `GET /api/stats`: what `onecharge attempts stats --json` prints.
#[utoipa::path(
    get,
    path = "/api/stats",
    tag = "attempts",
    responses(
        (status = 200, description = "Attempts per state, the oldest unsettled age, dead letters and the outbox backlog (contract §6)", body = Stats),
        (status = 401, description = "No or an unknown bearer token", body = openapi::ErrorBody),
    )
)]
async fn stats(State(state): State<AdminState>) -> Result<Json<Stats>, ApiError> {
    crate::operator::stats::stats(&state.store, &state.broker, OffsetDateTime::now_utc())
        .await
        .map(Json)
        .map_err(ApiError::internal)
}

/// Ready when the database and NATS answer and the gateway accepts the credentials; the
/// body says what is wrong otherwise.
async fn readyz(State(state): State<AdminState>) -> impl IntoResponse {
    let (db, nats) = tokio::join!(state.store.ping(), state.broker.ping());
    let mut problems = Vec::new();
    if !db {
        problems.push("database unreachable");
    }
    if !nats {
        problems.push("NATS unreachable");
    }
    if let Some(problem) = state
        .gateway_health
        .as_ref()
        .and_then(|h| h.pause_problem())
    {
        problems.push(problem);
    }
    if problems.is_empty() {
        (StatusCode::OK, "ready\n".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", problems.join(", ")),
        )
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        state.metrics.render(),
    )
}
