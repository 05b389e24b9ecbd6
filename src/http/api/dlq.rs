//! `/api/dlq…` (contract §6): the dead letters and a person's replay of one, through the
//! same functions as `onecharge dlq …` and the console's dead-letter pages.

use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::Json;

use crate::http::access::Principal;
use crate::http::error::ErrorBody;
use crate::http::{AdminState, ApiError};
use crate::operator::dlq::{self, DeadLetter, DuplicateReplay, ReplayNotAudited, Replayed};
use crate::operator::Via;

/// `GET /api/dlq`: every dead letter the stream holds, oldest first, as `dlq list --json`.
#[utoipa::path(get, path = "/api/dlq", operation_id = "listDeadLetters", tag = "dlq", responses(
    (status = 200, description = "The dead letters, oldest first", body = Vec<DeadLetter>),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
))]
pub(crate) async fn list_dead_letters(
    State(state): State<AdminState>,
) -> Result<Json<Vec<DeadLetter>>, ApiError> {
    let letters = dlq::list_dead_letters(&state.broker)
        .await
        .map_err(|err| ApiError::internal(format!("{err:#}")))?;
    Ok(Json(letters))
}

/// Dead letter `sequence`, or the 404 that says there is none.
async fn named(state: &AdminState, sequence: u64) -> Result<DeadLetter, ApiError> {
    dlq::list_dead_letters(&state.broker)
        .await
        .map_err(|err| ApiError::internal(format!("{err:#}")))?
        .into_iter()
        .find(|letter| letter.sequence == sequence)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "no dead letter with sequence {sequence} (GET /api/dlq lists what there is)"
            ))
        })
}

fn sequence(path: Result<Path<u64>, PathRejection>) -> Result<u64, ApiError> {
    path.map(|Path(sequence)| sequence).map_err(|e| {
        ApiError::bad_request(format!(
            "a dead letter is named by its sequence number: {}",
            e.body_text()
        ))
    })
}

/// `GET /api/dlq/{sequence}`: one dead letter.
#[utoipa::path(get, path = "/api/dlq/{sequence}", operation_id = "showDeadLetter", tag = "dlq", params(("sequence" = u64, Path, description = "Its sequence in the dead-letter stream")), responses(
    (status = 200, description = "The dead letter", body = DeadLetter),
    (status = 400, description = "Not a sequence number", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 404, description = "No such dead letter", body = ErrorBody),
))]
pub(crate) async fn show_dead_letter(
    State(state): State<AdminState>,
    path: Result<Path<u64>, PathRejection>,
) -> Result<Json<DeadLetter>, ApiError> {
    let sequence = sequence(path)?;
    Ok(Json(named(&state, sequence).await?))
}

/// The body of `POST /api/dlq/{sequence}/replay`, optional.
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplayRequest {
    /// Why: recorded in the audit trail
    #[serde(default)]
    reason: Option<String>,
    /// A corrected command to publish instead of the dead letter's body (a new message id)
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    body: Option<serde_json::Value>,
}

/// `POST /api/dlq/{sequence}/replay` (body optional: `{"reason": …, "body": <a corrected
/// command>}`): what `dlq replay` does — the dead letter, or its correction, published to
/// the command subject, then audited.
#[utoipa::path(post, path = "/api/dlq/{sequence}/replay", operation_id = "replayDeadLetter", tag = "dlq", params(("sequence" = u64, Path, description = "Its sequence in the dead-letter stream")), request_body(content = Option<ReplayRequest>, description = "Optional: an empty body replays the dead letter as it is"), responses(
    (status = 200, description = "What was published", body = Replayed),
    (status = 400, description = "The body is not understood, or the command to publish is not a valid one", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
    (status = 404, description = "No such dead letter", body = ErrorBody),
    (status = 409, description = "JetStream holds the same message already: nothing new was published", body = ErrorBody),
    (status = 500, description = "Published but not audited (`replayed_not_audited`: do not replay it again), or a failure", body = ErrorBody),
))]
pub(crate) async fn replay_dead_letter(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    path: Result<Path<u64>, PathRejection>,
    body: axum::body::Bytes,
) -> Result<Json<Replayed>, ApiError> {
    let sequence = sequence(path)?;
    let request: ReplayRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ReplayRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(e.to_string()))?
    };
    named(&state, sequence).await?;
    let corrected = request
        .body
        .map(|body| serde_json::to_vec(&body))
        .transpose()
        .map_err(ApiError::internal)?;
    match dlq::replay(
        &state.broker,
        &state.store,
        sequence,
        corrected,
        &principal.actor,
        Via::Api,
        request.reason.as_deref(),
    )
    .await
    {
        Ok(replayed) => Ok(Json(replayed)),
        Err(err) if err.is::<crate::config::UsageError>() => {
            Err(ApiError::bad_request(err.to_string()))
        }
        Err(err) if err.is::<DuplicateReplay>() => Err(ApiError::conflict(err.to_string())),
        Err(err) => match err.downcast_ref::<ReplayNotAudited>() {
            Some(published) => {
                tracing::error!(error = %format!("{err:#}"), "a replay was published but not audited");
                Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "replayed_not_audited",
                    published.to_string(),
                ))
            }
            None => Err(ApiError::internal(format!("{err:#}"))),
        },
    }
}
