//! `/api/fleet…` (contract §6): which pauses are open across the fleet, and a person's
//! pause and resume, everything or narrower, through the same functions as `onecharge fleet
//! …` (decisions 145 and 265).

use axum::extract::rejection::JsonRejection;
use axum::extract::{Extension, State};
use axum::Json;

use crate::domain::{Currency, PauseCover, PauseScope};
use crate::http::access::Principal;
use crate::http::error::ErrorBody;
use crate::http::{AdminState, ApiError};
use crate::operator::fleet::{self, FleetError, FleetState, Resumed};
use crate::operator::Via;
use crate::store::fleet::{FleetPause, PauseSelector};

impl From<FleetError> for ApiError {
    fn from(err: FleetError) -> Self {
        match err {
            FleetError::Invalid(why) => Self::bad_request(why),
            FleetError::Refused(why) => Self::conflict(why),
            err @ FleetError::Store(_) => Self::internal(err),
        }
    }
}

/// The body of `POST /api/fleet/pause`: why, and what it holds back (by default everything).
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FleetPauseRequest {
    #[serde(default)]
    reason: String,
    /// `all` (the default: charges and refunds), `charges` or `refunds`
    #[serde(default)]
    scope: Option<PauseScope>,
    /// Only money in this currency (ISO 4217, upper case); absent: every currency
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "ISK")]
    currency: Option<Currency>,
}

/// The body of `POST /api/fleet/resume`, all optional: why, and which open pause (by id,
/// scope or currency; none given: the only one open).
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FleetResumeRequest {
    #[serde(default)]
    reason: String,
    /// The pause's id
    #[serde(default)]
    id: Option<i64>,
    /// The open pause of this scope
    #[serde(default)]
    scope: Option<PauseScope>,
    /// The open pause of this currency
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "ISK")]
    currency: Option<Currency>,
}

/// `GET /api/fleet`: which pauses are open, what each holds back, by whom, since when and why.
#[utoipa::path(get, path = "/api/fleet", operation_id = "getFleetState", tag = "fleet", responses(
    (status = 200, description = "The open pauses", body = FleetState),
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

/// `POST /api/fleet/pause` with `{"reason": …, "scope": …, "currency": …}`: no executor
/// claims a new charge or refund the pause covers until resumed; calls already out finish.
/// 409 while a pause of the same scope and currency is open.
#[utoipa::path(post, path = "/api/fleet/pause", operation_id = "pauseFleet", tag = "fleet", request_body = FleetPauseRequest, responses(
    (status = 200, description = "Paused: the pause opened", body = FleetPause),
    (status = 400, description = "No reason, an unknown scope or currency, or the body is not understood", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
    (status = 409, description = "A pause of the same scope and currency is open (by whom, since when, why)", body = ErrorBody),
))]
pub(crate) async fn pause_fleet(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    body: Result<Json<FleetPauseRequest>, JsonRejection>,
) -> Result<Json<FleetPause>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let cover = PauseCover {
        scope: body.scope.unwrap_or(PauseScope::All),
        currency: body.currency,
    };
    let pause = fleet::pause(
        &state.store,
        &body.reason,
        cover,
        &principal.actor,
        Via::Api,
    )
    .await?;
    Ok(Json(pause))
}

/// `POST /api/fleet/resume` (body optional: `{"reason": …, "id": …, "scope": …, "currency":
/// …}`): the executors claim again what the one selected open pause held back. 409 when no
/// open pause, or more than one, matches.
#[utoipa::path(post, path = "/api/fleet/resume", operation_id = "resumeFleet", tag = "fleet", request_body(content = Option<FleetResumeRequest>, description = "Optional: an empty body is no reason and the only open pause"), responses(
    (status = 200, description = "Resumed: the pause that ended", body = Resumed),
    (status = 400, description = "The body is not understood", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
    (status = 409, description = "No open pause matches, or several do (each named with its id)", body = ErrorBody),
))]
pub(crate) async fn resume_fleet(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    body: axum::body::Bytes,
) -> Result<Json<Resumed>, ApiError> {
    let body: FleetResumeRequest = if body.iter().all(u8::is_ascii_whitespace) {
        FleetResumeRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(e.to_string()))?
    };
    let which = PauseSelector {
        id: body.id,
        scope: body.scope,
        currency: body.currency,
    };
    let resumed = fleet::resume(
        &state.store,
        &body.reason,
        which,
        &principal.actor,
        Via::Api,
    )
    .await?;
    Ok(Json(resumed))
}
