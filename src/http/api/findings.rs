//! `GET /api/findings?state=open|resolved` and `POST /api/findings/{id}/resolve`
//! (docs/contract.md §6): the findings `onecharge findings list|resolve` shows and closes,
//! through the same functions, the actor being the caller's principal.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Extension, Path, State};
use axum::Json;

use super::ApiQuery;
use crate::http::access::Principal;
use crate::http::error::{ErrorBody, QueryRefused};
use crate::http::{AdminState, ApiError};
use crate::operator::findings::resolve;
use crate::operator::Via;
use crate::store::findings::{self, Finding, FindingResolved, FindingState};

/// `GET /api/findings` query.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct FindingsQuery {
    /// `open` (the default), `resolved` or `all`
    #[param(value_type = Option<FindingState>)]
    state: Option<FindingState>,
    /// At most this many, newest first (default 100, at most 10,000)
    #[param(minimum = 0, maximum = 10000)]
    limit: Option<i64>,
}

#[utoipa::path(get, path = "/api/findings", operation_id = "listFindings", tag = "findings", params(FindingsQuery), responses(
    (status = 200, description = "The findings, newest first, as `findings list --json` prints them (contract §5)", body = Vec<crate::store::findings::Finding>),
    QueryRefused,
))]
/// `GET /api/findings?state=open|resolved|all&limit=N`: newest first, 100 by default.
pub(crate) async fn list(
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<FindingsQuery>,
) -> Result<Json<Vec<Finding>>, ApiError> {
    let list = findings::list(
        &state.store,
        query.state.unwrap_or_default(),
        query.limit.unwrap_or(100).clamp(0, 10_000),
    )
    .await
    .map_err(ApiError::internal)?;
    Ok(Json(list))
}

/// The body of `POST /api/findings/{id}/resolve`.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveBody {
    /// Why the discrepancy is closed (recorded in the audit trail)
    reason: String,
}

#[utoipa::path(post, path = "/api/findings/{id}/resolve", operation_id = "resolveFinding", tag = "findings", params(("id" = i64, Path, description = "The finding's id")), request_body = ResolveBody, responses(
    (status = 200, description = "The finding, now resolved by the caller", body = crate::store::findings::Finding),
    (status = 400, description = "No reason, or a malformed id or body", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: only operators act", body = ErrorBody),
    (status = 404, description = "No such finding", body = ErrorBody),
    (status = 409, description = "The finding was resolved already", body = ErrorBody),
))]

/// `POST /api/findings/{id}/resolve` `{"reason": "…"}`: 200 with the finding, 404, or 409
/// when it was resolved already.
pub(crate) async fn resolve_finding(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    id: Result<Path<i64>, PathRejection>,
    body: Result<Json<ResolveBody>, JsonRejection>,
) -> Result<Json<Finding>, ApiError> {
    let Path(id) = id.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    match resolve(&state.store, id, &principal.actor, Via::Api, &body.reason).await {
        Ok(FindingResolved::Done(finding)) => Ok(Json(finding)),
        Ok(FindingResolved::NotFound) => Err(ApiError::not_found(format!("no finding {id}"))),
        Ok(FindingResolved::AlreadyResolved(finding)) => Err(ApiError::conflict(format!(
            "finding {id} was already resolved by {}",
            finding.resolved_by.unwrap_or_default()
        ))),
        Err(err) if err.is::<crate::config::UsageError>() => {
            Err(ApiError::bad_request(err.to_string()))
        }
        Err(err) => Err(ApiError::internal(format!("{err:#}"))),
    }
}
