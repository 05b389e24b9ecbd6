//! The operator API under `/api` (contract §6): JSON in and out, one file per route group.
//! Every handler calls the same `crate::operator` function the CLI and the console call, with
//! the caller's principal as the actor; [`authorize`] decides who that is.

pub(crate) mod attempts;
pub(crate) mod audit;
pub(crate) mod bulk;
pub(crate) mod dlq;
pub(crate) mod findings;
pub(crate) mod fleet;
pub(crate) mod refunds;
pub(crate) mod stats;

use axum::extract::{FromRequestParts, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::access::Principal;
use super::{is_open, AdminState, ApiError};
use crate::operator::Page;

/// The API's routes, without their authorisation: the admin router adds the OpenAPI
/// document's route beside them and then [`authorize`] over all of them.
pub fn routes() -> Router<AdminState> {
    Router::new()
        .route("/api/attempts", get(attempts::list_attempts))
        .route("/api/attempts.csv", get(attempts::export_attempts))
        .route("/api/attempts/{id}", get(attempts::show_attempt))
        .route(
            "/api/attempts/{id}/resolve",
            post(attempts::resolve_attempt),
        )
        .route("/api/attempts/{id}/cancel", post(attempts::cancel_attempt))
        .route(
            "/api/attempts/{id}/recheck",
            post(attempts::recheck_attempt),
        )
        .route("/api/attempts/{id}/refunds", post(refunds::refund_attempt))
        .route("/api/attempts/bulk", post(bulk::bulk_action))
        .route("/api/refunds", get(refunds::list_refunds))
        .route("/api/refunds/{refund_id}", get(refunds::show_refund))
        .route(
            "/api/refunds/{refund_id}/resolve",
            post(refunds::resolve_refund),
        )
        .route("/api/audit", get(audit::audit_list))
        .route("/api/dlq", get(dlq::list_dead_letters))
        .route("/api/dlq/{sequence}", get(dlq::show_dead_letter))
        .route("/api/dlq/bulk-replay", post(dlq::bulk_replay))
        .route("/api/dlq/{sequence}/replay", post(dlq::replay_dead_letter))
        .route(
            "/api/dlq/{sequence}/discard",
            post(dlq::discard_dead_letter),
        )
        .route("/api/stats", get(stats::stats))
        .route("/api/findings", get(findings::list))
        .route("/api/fleet", get(fleet::fleet_state))
        .route("/api/fleet/pause", post(fleet::pause_fleet))
        .route("/api/fleet/resume", post(fleet::resume_fleet))
        .route(
            "/api/findings/{id}/resolve",
            post(findings::resolve_finding),
        )
}

/// The actor recorded for decisions taken through the API with the shared admin token (or
/// on an open API); a named operator's are `operator:<name>`.
pub const API_ACTOR: &str = super::access::ADMIN_TOKEN_ACTOR;

/// When an admin token or named operators are configured, `/api/*` needs
/// `Authorization: Bearer <token>` of one of them (compared in constant time over SHA-256
/// digests, see `Operators::authenticate`), and a viewer's token only reads: anything but
/// GET is 403 with why. The principal found is handed to the handler, which records its
/// actor (`admin-api` for the admin token and an open API, `operator:<name>` otherwise).
pub async fn authorize(
    State(state): State<AdminState>,
    mut request: Request,
    next: Next,
) -> Response {
    let principal = if is_open(&state) {
        Principal::admin_token()
    } else {
        match bearer_principal(&state, &request) {
            Some(principal) => principal,
            None => {
                return ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "this API needs Authorization: Bearer <admin_token or an operator's token>",
                )
                .into_response()
            }
        }
    };
    let reads = matches!(*request.method(), Method::GET | Method::HEAD);
    if !reads && !principal.may_act() {
        return ApiError::new(StatusCode::FORBIDDEN, "forbidden", principal.refusal())
            .into_response();
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// Whose token the request's `Authorization: Bearer` carries, if anyone's.
fn bearer_principal(state: &AdminState, request: &Request) -> Option<Principal> {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)?;
    state
        .console
        .operators
        .authenticate(state.admin_token.as_ref(), presented)
}

/// The token of an `Authorization: Bearer <token>` value. The scheme name is matched in any
/// case (RFC 7235 §2.1; RFC 6750 §2.1), the token exactly.
fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

/// The header that carries the cursor of the next page: the body stays the JSON array of
/// contract §6.
pub const NEXT_CURSOR_HEADER: &str = "x-next-cursor";

/// A listing's page: its items as the JSON array, and the cursor of the next page in
/// [`NEXT_CURSOR_HEADER`].
fn page_response<T: serde::Serialize, C: std::fmt::Display>(page: Page<T, C>) -> Response {
    let mut response = Json(page.items).into_response();
    let next = page.next.map(|cursor| cursor.to_string());
    if let Some(value) = next.and_then(|n| header::HeaderValue::from_str(&n).ok()) {
        response.headers_mut().insert(NEXT_CURSOR_HEADER, value);
    }
    response
}

/// The most rows one answer of a listing (`GET /api/attempts`, with or without `stuck`, and
/// `GET /api/audit`) holds: every row is read into the admin process and written as JSON
/// before the answer leaves, so an answer is bounded whoever asks (a viewer too). More is a
/// matter of following `X-Next-Cursor`. The command line, which reads the database in the
/// operator's own process, keeps `--limit 0` (all).
pub const MAX_PAGE: usize = 1000;

/// A listing's `limit=`: `default` when absent, else 1 to [`MAX_PAGE`]; `0` (which once
/// meant all) and anything larger are the `400` that says the range, never clamped, so a
/// client that asked for everything learns that it did not get it.
fn page_limit(limit: Option<usize>, default: usize) -> Result<usize, ApiError> {
    match limit {
        None => Ok(default),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::bad_request(format!(
            "limit: {n} is out of range: a page is 1 to {MAX_PAGE} rows at most; follow X-Next-Cursor for the rest"
        ))),
    }
}

/// A listing's query string as `T`, or the API's `400 invalid_request` saying what is not
/// understood (never axum's plain-text rejection).
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Query(query) = Query::<T>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::bad_request(e.body_text()))?;
        Ok(Self(query))
    }
}
