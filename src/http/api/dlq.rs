//! `/api/dlq…` (contract §6): the dead letters and a person's replay of one, through the
//! same functions as `onecharge dlq …` and the console's dead-letter pages.

use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use time::OffsetDateTime;

use super::{page_limit, page_response, ApiQuery};
use crate::http::access::Principal;
use crate::http::error::{ErrorBody, QueryRefused};
use crate::http::{AdminState, ApiError};
use crate::operator::dlq::{
    self, AlreadyDiscarded, BulkReplayOutcome, BulkReplayRequest, DeadLetter, DeadLetterFilter,
    Discarded, DuplicateReplay, LetterClass, LetterKind, NoSuchDeadLetter, ReplayNotAudited,
    Replayed,
};
use crate::operator::Via;

/// `GET /api/dlq` query: the filter of `dlq list`, `discarded` (`true`: the discarded
/// letters too), `after` (the cursor of the next page, from the previous answer's
/// `X-Next-Cursor`), `limit` (1 to 1000, default 100).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadLetterQuery {
    /// Only letters of this class
    class: Option<LetterClass>,
    /// Only letters of this kind of command
    kind: Option<LetterKind>,
    /// Only letters dead-lettered at or after this time
    #[serde(default, with = "time::serde::rfc3339::option")]
    #[param(value_type = Option<String>, format = DateTime)]
    since: Option<OffsetDateTime>,
    /// Only letters dead-lettered before this time
    #[serde(default, with = "time::serde::rfc3339::option")]
    #[param(value_type = Option<String>, format = DateTime)]
    until: Option<OffsetDateTime>,
    /// Include the discarded letters (each with its `discarded`)
    #[serde(default)]
    discarded: bool,
    /// The letters after this sequence: the previous page's `X-Next-Cursor`
    after: Option<u64>,
    /// At most this many, 1 to 1000 (default 100); follow `X-Next-Cursor` for more
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// `GET /api/dlq`: a page of the dead letters, oldest first, as `dlq list --json`.
#[utoipa::path(get, path = "/api/dlq", operation_id = "listDeadLetters", tag = "dlq", params(DeadLetterQuery), responses(
    (status = 200, description = "A page of the dead letters no one discarded (all with `discarded=true`), oldest first", body = Vec<DeadLetter>,
        headers(("x-next-cursor" = String, description = "The cursor of the next page (`after`), when there is one"))),
    QueryRefused,
))]
pub(crate) async fn list_dead_letters(
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<DeadLetterQuery>,
) -> Result<Response, ApiError> {
    let limit = page_limit(query.limit, 100)?;
    let filter = DeadLetterFilter {
        class: query.class,
        kind: query.kind,
        since: query.since,
        until: query.until,
    };
    let page = dlq::page_dead_letters(
        &state.broker,
        &state.store,
        &filter,
        query.discarded,
        query.after,
        Some(limit),
    )
    .await
    .map_err(|err| ApiError::internal(format!("{err:#}")))?;
    Ok(page_response(page))
}

/// Dead letter `sequence`, or the 404 that says there is none.
async fn named(state: &AdminState, sequence: u64) -> Result<DeadLetter, ApiError> {
    dlq::find_dead_letter(&state.broker, &state.store, sequence)
        .await
        .map_err(|err| ApiError::internal(format!("{err:#}")))?
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

/// `GET /api/dlq/{sequence}`: one dead letter, discarded or not.
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
    (status = 409, description = "JetStream holds the same message already, or the letter was discarded: nothing new was published", body = ErrorBody),
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
        Err(err) if err.is::<AlreadyDiscarded>() => Err(ApiError::conflict(err.to_string())),
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

/// The body of `POST /api/dlq/{sequence}/discard`.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiscardRequest {
    /// Why it is given up: required, recorded in the audit trail
    reason: String,
}

/// `POST /api/dlq/{sequence}/discard` (`{"reason": …}`): what `dlq discard` does — the letter
/// set aside (left out of listings, never replayed), recorded and audited in one
/// transaction.
#[utoipa::path(post, path = "/api/dlq/{sequence}/discard", operation_id = "discardDeadLetter", tag = "dlq", params(("sequence" = u64, Path, description = "Its sequence in the dead-letter stream")), request_body = DiscardRequest, responses(
    (status = 200, description = "What was recorded", body = Discarded),
    (status = 400, description = "The body is not understood, or holds no reason", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
    (status = 404, description = "No such dead letter", body = ErrorBody),
    (status = 409, description = "Discarded before: nothing was done", body = ErrorBody),
))]
pub(crate) async fn discard_dead_letter(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    path: Result<Path<u64>, PathRejection>,
    body: axum::body::Bytes,
) -> Result<Json<Discarded>, ApiError> {
    let sequence = sequence(path)?;
    let request: DiscardRequest =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    match dlq::discard(
        &state.broker,
        &state.store,
        sequence,
        &principal.actor,
        Via::Api,
        &request.reason,
    )
    .await
    {
        Ok(discarded) => Ok(Json(discarded)),
        Err(err) if err.is::<crate::config::UsageError>() => {
            Err(ApiError::bad_request(err.to_string()))
        }
        Err(err) if err.is::<NoSuchDeadLetter>() => Err(ApiError::not_found(err.to_string())),
        Err(err) if err.is::<AlreadyDiscarded>() => Err(ApiError::conflict(err.to_string())),
        Err(err) => Err(ApiError::internal(format!("{err:#}"))),
    }
}

/// `POST /api/dlq/bulk-replay`: what `dlq bulk-replay` does — a preview (`"preview": true`)
/// counts and lists the letters the filter matches and publishes nothing; a confirmation
/// (best with the preview's `sequences`) replays each, audited one by one and as a whole.
#[utoipa::path(post, path = "/api/dlq/bulk-replay", operation_id = "bulkReplayDeadLetters", tag = "dlq", request_body = BulkReplayRequest, responses(
    (status = 200, description = "The letters matched, and each one's outcome unless a preview", body = BulkReplayOutcome),
    (status = 400, description = "The body is not understood, holds no reason, or more letters match than `max` (or 500): nothing was published", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
))]
pub(crate) async fn bulk_replay(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    body: axum::body::Bytes,
) -> Result<Json<BulkReplayOutcome>, ApiError> {
    let request: BulkReplayRequest =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    match dlq::bulk_replay(
        &state.broker,
        &state.store,
        &request,
        &principal.actor,
        Via::Api,
    )
    .await
    {
        Ok(outcome) => Ok(Json(outcome)),
        Err(err) if err.is::<crate::config::UsageError>() => {
            Err(ApiError::bad_request(err.to_string()))
        }
        Err(err) => Err(ApiError::internal(format!("{err:#}"))),
    }
}
