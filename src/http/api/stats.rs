//! `GET /api/stats` (contract §6): the figures of `onecharge attempts stats`.

use axum::extract::State;
use axum::Json;
use time::OffsetDateTime;

use crate::http::error::ErrorBody;
use crate::http::{AdminState, ApiError};
use crate::operator::stats::Stats;

/// `GET /api/stats`: what `onecharge attempts stats --json` prints.
#[utoipa::path(get, path = "/api/stats", operation_id = "getAttemptStats", tag = "attempts", responses(
    (status = 200, description = "Attempts per state, the oldest unsettled age, dead letters and the outbox backlog (contract §6)", body = Stats),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
))]
pub(crate) async fn stats(State(state): State<AdminState>) -> Result<Json<Stats>, ApiError> {
    crate::operator::stats::stats(&state.store, &state.broker, OffsetDateTime::now_utc())
        .await
        .map(Json)
        .map_err(ApiError::internal)
}
