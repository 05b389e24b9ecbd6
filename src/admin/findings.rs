//! `GET /api/findings?state=open|resolved` and `POST /api/findings/{id}/resolve`
//! (docs/contract.md §6): the findings `onecharge findings list|resolve` shows and closes,
//! through the same functions, the actor being the caller's principal.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::Json;

use super::{AdminState, ApiError};
use crate::console::access::Principal;
use crate::operator::findings::resolve;
use crate::operator::Via;
use crate::store::findings::{self, Finding, FindingState, Resolved};

/// `GET /api/findings` query.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FindingsQuery {
    state: Option<FindingState>,
    limit: Option<i64>,
}

/// `GET /api/findings?state=open|resolved|all&limit=N`: newest first, 100 by default.
pub(super) async fn list(
    State(state): State<AdminState>,
    query: Result<Query<FindingsQuery>, QueryRejection>,
) -> Result<Json<Vec<Finding>>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
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
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ResolveBody {
    reason: String,
}

/// `POST /api/findings/{id}/resolve` `{"reason": "…"}`: 200 with the finding, 404, or 409
/// when it was resolved already.
pub(super) async fn resolve_finding(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    id: Result<Path<i64>, PathRejection>,
    body: Result<Json<ResolveBody>, JsonRejection>,
) -> Result<Json<Finding>, ApiError> {
    let Path(id) = id.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    match resolve(&state.store, id, &principal.actor, Via::Api, &body.reason).await {
        Ok(Resolved::Done(finding)) => Ok(Json(finding)),
        Ok(Resolved::NotFound) => Err(ApiError::not_found(format!("no finding {id}"))),
        Ok(Resolved::AlreadyResolved(finding)) => Err(ApiError::conflict(format!(
            "finding {id} was already resolved by {}",
            finding.resolved_by.unwrap_or_default()
        ))),
        Err(err) if err.is::<crate::config::UsageError>() => {
            Err(ApiError::bad_request(err.to_string()))
        }
        Err(err) => Err(ApiError::internal(format!("{err:#}"))),
    }
}
