//! `GET /api/audit` (contract §6): the audit trail, as `onecharge audit list` reads it.

use axum::extract::State;
use axum::response::Response;

use super::{page_limit, page_response, ApiQuery};
use crate::domain::PaymentAttemptId;
use crate::http::error::QueryRefused;
use crate::http::{AdminState, ApiError};
use crate::operator::audit;

/// `GET /api/audit` query: `actor`, `attempt` (a payment_attempt_id), `before` (the cursor
/// of the next page, from the previous answer's `X-Next-Cursor`), `limit` (1 to
/// [`MAX_PAGE`](super::MAX_PAGE), default 100).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    actor: Option<String>,
    #[param(value_type = Option<uuid::Uuid>)]
    attempt: Option<PaymentAttemptId>,
    before: Option<String>,
    /// At most this many, 1 to 1000 (default 100); follow `X-Next-Cursor` for more
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// `GET /api/audit`: the audit trail, newest first, as `audit list --json` prints it.
#[utoipa::path(get, path = "/api/audit", operation_id = "listAuditEntries", tag = "audit", params(AuditQuery), responses(
    (status = 200, description = "Audit entries, newest first, as `audit list --json` prints them", body = Vec<crate::store::audit::AuditEntry>,
        headers(("x-next-cursor" = String, description = "The cursor of the next page (`before`), when there is one"))),
    QueryRefused,
))]
pub(crate) async fn audit_list(
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Response, ApiError> {
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
    let limit = page_limit(query.limit, 100)?;
    let page = audit::list(&state.store, &filter, limit)
        .await
        .map_err(ApiError::internal)?;
    Ok(page_response(page))
}
