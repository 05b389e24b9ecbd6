//! `/api/fleet…` (contract §6): whether charging is paused across the fleet, and a person's
//! pause and resume, through the same functions as `onecharge fleet …` (decision 145).

use axum::extract::rejection::JsonRejection;
use axum::extract::{Extension, State};
use axum::Json;

use crate::http::access::Principal;
use crate::http::error::ErrorBody;
use crate::http::{AdminState, ApiError};
use crate::operator::fleet::{self, FleetError, FleetState, Resumed};
use crate::operator::Via;
use crate::store::fleet::FleetPause;

impl From<FleetError> for ApiError {
    fn from(err: FleetError) -> Self {
        match err {
            FleetError::Invalid(why) => Self::bad_request(why),
            FleetError::Refused(why) => Self::conflict(why),
            err @ FleetError::Store(_) => Self::internal(err),
        }
    }
}

/// The body of `POST /api/fleet/pause` and (optional reason) `POST /api/fleet/resume`.
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FleetReason {
    #[serde(default)]
    reason: String,
}

/// `GET /api/fleet`: whether charging is paused, by whom, since when and why.
#[utoipa::path(get, path = "/api/fleet", operation_id = "getFleetState", tag = "fleet", responses(
    (status = 200, description = "Whether charging is paused", body = FleetState),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
))]
pub(crate) async fn fleet_state(
    State(state): State<AdminState>,
) -> Result<Json<FleetState>, ApiError> {
    Ok(Json(
        fleet::state(&state.store)
            .await
            .map_err(ApiError::internal)?,
    ))
}

/// `POST /api/fleet/pause` with `{"reason": …}`: no executor claims a new attempt until
/// resumed; calls already out finish. 409 while a pause is open.
#[utoipa::path(post, path = "/api/fleet/pause", operation_id = "pauseFleet", tag = "fleet", request_body = FleetReason, responses(
    (status = 200, description = "Charging is paused", body = FleetPause),
    (status = 400, description = "No reason, or the body is not understood", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
    (status = 409, description = "Already paused (by whom, since when, why)", body = ErrorBody),
))]
pub(crate) async fn pause_fleet(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    body: Result<Json<FleetReason>, JsonRejection>,
) -> Result<Json<FleetPause>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let pause = fleet::pause(&state.store, &body.reason, &principal.actor, Via::Api).await?;
    Ok(Json(pause))
}

/// `POST /api/fleet/resume` (body optional: `{"reason": …}`): the executors claim again.
/// 409 when charging is not paused.
#[utoipa::path(post, path = "/api/fleet/resume", operation_id = "resumeFleet", tag = "fleet", request_body(content = Option<FleetReason>, description = "Optional: an empty body is no reason"), responses(
    (status = 200, description = "Charging is resumed: the pause that ended", body = Resumed),
    (status = 400, description = "The body is not understood", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
    (status = 409, description = "Charging is not paused", body = ErrorBody),
))]
pub(crate) async fn resume_fleet(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    body: axum::body::Bytes,
) -> Result<Json<Resumed>, ApiError> {
    let body: FleetReason = if body.iter().all(u8::is_ascii_whitespace) {
        FleetReason::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(e.to_string()))?
    };
    let resumed = fleet::resume(&state.store, &body.reason, &principal.actor, Via::Api).await?;
    Ok(Json(resumed))
}
