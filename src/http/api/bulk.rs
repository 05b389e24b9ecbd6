//! `POST /api/attempts/bulk` (contract §6): retry or recheck every attempt a filter matches,
//! through the same function as `onecharge attempts bulk`.

use axum::extract::rejection::JsonRejection;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::Json;

use crate::http::access::Principal;
use crate::http::error::ErrorBody;
use crate::http::{AdminState, ApiError};
use crate::operator::bulk::{self, BulkError, BulkOutcome, BulkRequest};
use crate::operator::Via;

impl From<BulkError> for ApiError {
    fn from(err: BulkError) -> Self {
        match err {
            BulkError::Invalid(why) => Self::bad_request(why),
            err @ BulkError::TooMany { .. } => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "too_many",
                err.to_string(),
            ),
            BulkError::Unavailable(why) => Self::unavailable(why),
            err @ BulkError::Failed(_) => Self::internal(err),
        }
    }
}

/// `POST /api/attempts/bulk` with `{"action": "retry|recheck", "filter": {…}, "reason": …,
/// "preview": bool, "max": N}`: see [`crate::operator::bulk`]. 422 when more attempts match
/// than the cap (or `max`).
#[utoipa::path(post, path = "/api/attempts/bulk", operation_id = "actOnAttemptsInBulk", tag = "attempts", request_body(content = crate::operator::bulk::BulkRequest, description = "The action, the filter as `attempts bulk-*` takes it, the reason; `preview` to count and list only, `max` to refuse a larger set, `ids` to act on a preview's attempts alone"), responses(
    (status = 200, description = "What was (or, with preview, would be) done, per attempt", body = crate::operator::bulk::BulkOutcome),
    (status = 400, description = "The request is not understood", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
    (status = 422, description = "More attempts match than the cap (500) or `max`: nothing was done", body = ErrorBody),
    (status = 503, description = "A recheck, and this process has no gateway client", body = ErrorBody),
))]
pub(crate) async fn bulk_action(
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
