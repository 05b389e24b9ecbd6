//! `/api/attempts…` (contract §6): list and find attempts, show one, and the decisions on
//! one — resolve and recheck — through the same functions as `onecharge attempts …`.

use crate::domain::GatewayChargeId;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use time::OffsetDateTime;

use super::{page_limit, page_response, ApiQuery, MAX_PAGE};
use crate::domain::{AttemptStatus, PaymentAttemptId};
use crate::http::access::Principal;
use crate::http::error::{ErrorBody, QueryRefused};
use crate::http::{AdminState, ApiError};
use crate::operator::cancel::{self, CancelRequest, Cancelled};
use crate::operator::export::{self, ExportError};
use crate::operator::recheck::{self, Recheck, RecheckError};
use crate::operator::resolve::{self, ResolveError, ResolveRequest};
use crate::operator::{attempts, Page, Via};
use crate::reconciler::Reconciler;

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

/// `GET /api/attempts` query: `status`, `stuck` (a duration such as `15m`: non-final attempts
/// older than it plus every `needs_review`, oldest first) with `after` (the cursor of its
/// next page), and without `stuck`: `order_id`, `customer_id`, `gateway_charge_id` (only the
/// attempts that have it), `idempotency_key`, `created_after` / `created_before` (RFC 3339),
/// `before` (the cursor of the next page); the cursors come from the previous answer's
/// `X-Next-Cursor` header. `limit`: 1 to [`MAX_PAGE`], default 100 for the listing; `stuck`
/// without one answers every stuck attempt, or `422` past [`MAX_PAGE`] (contract §6).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Only attempts in this state
    #[param(value_type = Option<crate::domain::AttemptStatus>)]
    status: Option<String>,
    stuck: Option<String>,
    order_id: Option<String>,
    customer_id: Option<String>,
    #[param(value_type = Option<String>)]
    gateway_charge_id: Option<GatewayChargeId>,
    idempotency_key: Option<String>,
    /// Only attempts recorded at or after this time (RFC 3339)
    #[param(value_type = Option<String>, format = DateTime)]
    created_after: Option<String>,
    /// Only attempts recorded before this time (RFC 3339)
    #[param(value_type = Option<String>, format = DateTime)]
    created_before: Option<String>,
    before: Option<String>,
    after: Option<String>,
    /// At most this many, 1 to 1000, the rest behind `X-Next-Cursor` (default 100; `stuck`
    /// without it: every stuck attempt, or 422 `too_many` past 1000)
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
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
#[utoipa::path(get, path = "/api/attempts", operation_id = "listAttempts", tag = "attempts", params(ListQuery), responses(
    (status = 200, description = "The attempts, as `attempts list --json` (or `attempts stuck --json`) prints them (contract §5)", body = Vec<attempts::AttemptView>,
        headers(("x-next-cursor" = String, description = "The cursor of the next page (`before`, or `after` with `stuck`), when there is one"))),
    QueryRefused,
    (status = 422, description = "`stuck` without a `limit`, and more than 1000 attempts are stuck: ask for pages (`too_many`)", body = ErrorBody),
))]
pub(crate) async fn list_attempts(
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Response, ApiError> {
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
            let Some(limit) = query.limit else {
                return stuck_whole(&state, &filter, now).await;
            };
            let limit = page_limit(Some(limit), MAX_PAGE)?;
            attempts::stuck(store, &filter, limit, now, &state.retry_window).await
        }
        None if query.after.is_some() => {
            return Err(ApiError::bad_request(
                "after pages the stuck list (with stuck=…, oldest first); the listing pages newest first with before",
            ))
        }
        None => {
            let limit = page_limit(query.limit, 100)?;
            attempts::page(store, &filter, limit, now, &state.retry_window).await
        }
    }
    .map_err(ApiError::internal)?;
    Ok(page_response(page))
}

/// `GET /api/attempts.csv` query: the filters of `GET /api/attempts` (without `stuck`, whose
/// list is not a search, and without `limit`: an export holds everything it finds).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExportQuery {
    /// Only attempts in this state
    #[param(value_type = Option<crate::domain::AttemptStatus>)]
    status: Option<String>,
    order_id: Option<String>,
    customer_id: Option<String>,
    #[param(value_type = Option<String>)]
    gateway_charge_id: Option<GatewayChargeId>,
    idempotency_key: Option<String>,
    /// Only attempts recorded at or after this time (RFC 3339)
    #[param(value_type = Option<String>, format = DateTime)]
    created_after: Option<String>,
    /// Only attempts recorded before this time (RFC 3339)
    #[param(value_type = Option<String>, format = DateTime)]
    created_before: Option<String>,
    before: Option<String>,
}

/// `GET /api/attempts.csv`: every attempt the filters find, newest first, as CSV (one row
/// each, header first); `422 too_many` when more than 10,000 match (decision 146).
#[utoipa::path(get, path = "/api/attempts.csv", operation_id = "exportAttemptsCsv", tag = "attempts", params(ExportQuery), responses(
    (status = 200, description = "The attempts found, as CSV with a header row (RFC 4180)", content_type = "text/csv", body = String),
    QueryRefused,
    (status = 422, description = "More than 10,000 attempts match: narrow the search (`too_many`)", body = ErrorBody),
))]
pub(crate) async fn export_attempts(
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<ExportQuery>,
) -> Result<Response, ApiError> {
    let status = query
        .status
        .as_deref()
        .map(str::parse::<AttemptStatus>)
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let filter = attempts::AttemptFilter {
        status,
        order_id: query.order_id,
        customer_id: query.customer_id,
        gateway_charge_id: query.gateway_charge_id,
        idempotency_key: query.idempotency_key,
        created_after: time_param("created_after", query.created_after.as_deref())?,
        created_before: time_param("created_before", query.created_before.as_deref())?,
        before: cursor_param("before", query.before.as_deref())?,
    };
    let csv = export::attempts_csv(
        &state.store,
        &filter,
        OffsetDateTime::now_utc(),
        &state.retry_window,
    )
    .await
    .map_err(|err| match err {
        err @ ExportError::TooMany => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "too_many",
            err.to_string(),
        ),
        err => ApiError::internal(err),
    })?;
    Ok(crate::http::csv_download(csv))
}

/// `stuck=` without a `limit`: every stuck attempt in one answer, as contract §6 promises
/// (decision 93: a script counting the backlog must never get a silently cut list), or, when
/// more than [`MAX_PAGE`] are stuck, `422 too_many` saying to page; never more than one
/// page more than that read into this process.
async fn stuck_whole(
    state: &AdminState,
    filter: &attempts::StuckFilter,
    now: OffsetDateTime,
) -> Result<Response, ApiError> {
    let page = attempts::stuck(&state.store, filter, MAX_PAGE + 1, now, &state.retry_window)
        .await
        .map_err(ApiError::internal)?;
    if page.items.len() > MAX_PAGE {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "too_many",
            format!(
                "more than {MAX_PAGE} attempts are stuck, more than one answer holds: ask for them a page at a time, with limit (1 to {MAX_PAGE}) and after=<the X-Next-Cursor of the previous page>"
            ),
        ));
    }
    Ok(page_response(Page { next: None, ..page }))
}

fn attempt_id(
    id: Result<Path<PaymentAttemptId>, PathRejection>,
) -> Result<PaymentAttemptId, ApiError> {
    id.map(|Path(id)| id)
        .map_err(|e| ApiError::bad_request(format!("not a payment_attempt_id: {}", e.body_text())))
}

#[utoipa::path(get, path = "/api/attempts/{id}", operation_id = "showAttempt", tag = "attempts", params(("id" = uuid::Uuid, Path, description = "The payment_attempt_id")), responses(
    (status = 200, description = "The attempt with its transitions, gateway calls and events, as `attempts show --json` prints it (contract §5)", body = attempts::AttemptDetail),
    (status = 400, description = "Not a payment_attempt_id", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 404, description = "No such attempt", body = ErrorBody),
))]
/// `GET /api/attempts/{id}`: one attempt, as `attempts show --json` prints it.
pub(crate) async fn show_attempt(
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

/// `POST /api/attempts/{id}/resolve` with `{"as": "succeeded|declined|retry", "reason": …,
/// "gateway_charge_id": …, "decline_code": …}`: the decision of `attempts resolve`. Answers
/// `{"resolution": …, "attempt": <as GET /api/attempts/{id}>}`.
#[utoipa::path(post, path = "/api/attempts/{id}/resolve", operation_id = "resolveAttempt", tag = "attempts", params(("id" = uuid::Uuid, Path, description = "The payment_attempt_id")), request_body = ResolveRequest, responses(
    (status = 200, description = "What was decided, and the attempt as `GET /api/attempts/{id}` shows it now", body = ResolveAnswer),
    (status = 400, description = "The decision is incomplete or not understood", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
    (status = 404, description = "No such attempt", body = ErrorBody),
    (status = 409, description = "The attempt's state refuses the decision", body = ErrorBody),
))]
pub(crate) async fn resolve_attempt(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    id: Result<Path<PaymentAttemptId>, PathRejection>,
    body: Result<Json<ResolveRequest>, JsonRejection>,
) -> Result<Json<ResolveAnswer>, ApiError> {
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
    Ok(Json(ResolveAnswer {
        resolution,
        attempt,
    }))
}

/// The answer to a resolution: what was decided, and the attempt after it.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct ResolveAnswer {
    resolution: resolve::Resolved,
    attempt: Option<attempts::AttemptDetail>,
}

/// `POST /api/attempts/{id}/cancel` with `{"reason": …}`: what `attempts cancel` does — a
/// pending attempt never sent to the gateway becomes `expired`, one holding a Stripe
/// PaymentIntent `declined` once the gateway cancelled it (with this process's
/// reconciler's client), with its event. 409 with why for any other attempt (claimed, sent
/// before with nothing to cancel, final); the executor's claim and the cancel race on the
/// row and exactly one wins.
#[utoipa::path(post, path = "/api/attempts/{id}/cancel", operation_id = "cancelAttempt", tag = "attempts", params(("id" = uuid::Uuid, Path, description = "The payment_attempt_id")), request_body = CancelRequest, responses(
    (status = 200, description = "The attempt is cancelled (`expired`, or `declined` after its PaymentIntent was cancelled) and its event queued", body = Cancelled),
    (status = 400, description = "No reason, or the body is not understood", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
    (status = 404, description = "No such attempt", body = ErrorBody),
    (status = 409, description = "Not cancellable: claimed, sent before with nothing to cancel first, its PaymentIntent not cancelled, in review or final", body = ErrorBody),
))]
pub(crate) async fn cancel_attempt(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    id: Result<Path<PaymentAttemptId>, PathRejection>,
    body: Result<Json<CancelRequest>, JsonRejection>,
) -> Result<Json<Cancelled>, ApiError> {
    let id = attempt_id(id)?;
    let Json(request) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let cancelled = cancel::cancel(
        &state.store,
        state.reconciler.as_ref().map(Reconciler::gateway),
        id,
        &request.reason,
        &principal.actor,
        Via::Api,
    )
    .await?;
    Ok(Json(cancelled))
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
            RecheckError::Unavailable(why) => Self::unavailable(why),
            err @ RecheckError::Failed(_) => Self::internal(err),
        }
    }
}

fn no_gateway_client() -> ApiError {
    ApiError::unavailable(
        "this process has no gateway client (it runs neither the executor nor the reconciler role): recheck through one that does, or `onecharge attempts recheck`",
    )
}

/// `POST /api/attempts/{id}/recheck` (body optional: `{"reason": …}`): what `attempts
/// recheck` does — the reconciler's lookup now, applied when it settles the attempt.
/// Answers the [`Recheck`] report; 409 for an attempt that is not `unknown` or
/// `needs_review`.
#[utoipa::path(post, path = "/api/attempts/{id}/recheck", operation_id = "recheckAttempt", tag = "attempts", params(("id" = uuid::Uuid, Path, description = "The payment_attempt_id")), request_body(content = Option<RecheckBody>, description = "Optional: an empty body is no reason"), responses(
    (status = 200, description = "What the lookup found and did, as `attempts recheck --json` prints it", body = Recheck),
    (status = 400, description = "The body is not understood", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
    (status = 404, description = "No such attempt", body = ErrorBody),
    (status = 409, description = "The attempt is not unknown or needs_review", body = ErrorBody),
    (status = 503, description = "This process has no gateway client", body = ErrorBody),
))]
pub(crate) async fn recheck_attempt(
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
