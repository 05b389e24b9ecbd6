//! `/api/refunds…` and `POST /api/attempts/{id}/refunds` (contract §6): list refunds, show
//! one, and a person's refund of a charge — through the same functions as `onecharge
//! refunds …`.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use time::OffsetDateTime;

use super::{page_limit, page_response, ApiQuery};
use crate::domain::{PaymentAttemptId, RefundId};
use crate::http::access::Principal;
use crate::http::error::{ErrorBody, QueryRefused};
use crate::http::{AdminState, ApiError};
use crate::operator::refunds::{
    self, NewRefund, RefundCursor, RefundDetail, RefundError, RefundFilter, RefundPublished,
    RefundResolveError, RefundResolveRequest, RefundResolved, RefundView,
};
use crate::operator::Via;

impl From<RefundError> for ApiError {
    fn from(err: RefundError) -> Self {
        match err {
            RefundError::Invalid(why) => Self::bad_request(why),
            err @ RefundError::NotFound(_) => Self::not_found(err.to_string()),
            RefundError::NotRefundable(why) => Self::conflict(why),
            RefundError::TooMuch(why) => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "exceeds_remaining", why)
            }
            err @ RefundError::Store(_) => Self::internal(err),
            RefundError::Publish(err) => {
                tracing::error!(error = %format!("{err:#}"), "a refund could not be published");
                Self::unavailable(
                    "JetStream did not take the refund command: nothing was published; try again (the same refund_id is the same refund)",
                )
            }
            err @ RefundError::NotAudited { .. } => {
                tracing::error!(error = %format!("{err:#}"), "a refund was published but not audited");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "refund_not_audited",
                    err.to_string(),
                )
            }
        }
    }
}

/// `GET /api/refunds` query: `payment_attempt_id`, `status`, `order_id`, `customer_id`
/// (through the refund's attempt), `created_after` / `created_before` (RFC 3339), `before`
/// (the `X-Next-Cursor` of the previous page), `limit` (1 to 1000, default 100).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct RefundsQuery {
    /// Only the refunds of this charge
    #[param(value_type = Option<uuid::Uuid>)]
    payment_attempt_id: Option<String>,
    /// Only refunds in this state
    #[param(schema_with = refund_status_schema)]
    status: Option<String>,
    order_id: Option<String>,
    customer_id: Option<String>,
    /// Only refunds recorded at or after this time (RFC 3339)
    #[param(value_type = Option<String>, format = DateTime)]
    created_after: Option<String>,
    /// Only refunds recorded before this time (RFC 3339)
    #[param(value_type = Option<String>, format = DateTime)]
    created_before: Option<String>,
    before: Option<String>,
    /// At most this many, 1 to 1000, the rest behind `X-Next-Cursor` (default 100)
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// A refund's states as the query's `status` takes them (contract §4.1).
fn refund_status_schema() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(
            crate::domain::RefundStatus::ALL.map(crate::domain::RefundStatus::as_str),
        ))
        .build()
}

impl RefundsQuery {
    fn filter(self) -> Result<RefundFilter, ApiError> {
        let bad = |name: &str, e: String| ApiError::bad_request(format!("{name}: {e}"));
        let time = |name: &str, value: Option<String>| {
            value
                .map(|text| crate::operator::parse_time(&text).map_err(|e| bad(name, e)))
                .transpose()
        };
        Ok(RefundFilter {
            payment_attempt_id: self
                .payment_attempt_id
                .map(|id| {
                    id.parse::<PaymentAttemptId>()
                        .map_err(|e| bad("payment_attempt_id", e.to_string()))
                })
                .transpose()?,
            status: self
                .status
                .map(|s| refunds::parse_status(&s).map_err(ApiError::bad_request))
                .transpose()?,
            order_id: self.order_id,
            customer_id: self.customer_id,
            created_after: time("created_after", self.created_after)?,
            created_before: time("created_before", self.created_before)?,
            before: self
                .before
                .map(|c| c.parse::<RefundCursor>().map_err(|e| bad("before", e)))
                .transpose()?,
        })
    }
}

/// `GET /api/refunds`: refunds newest first, narrowed by the query.
#[utoipa::path(get, path = "/api/refunds", operation_id = "listRefunds", tag = "refunds", params(RefundsQuery), responses(
    (status = 200, description = "The refunds, as `refunds list --json` prints them", body = Vec<RefundView>,
        headers(("x-next-cursor" = String, description = "The cursor of the next page (`before`), when there is one"))),
    QueryRefused,
))]
pub(crate) async fn list_refunds(
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<RefundsQuery>,
) -> Result<Response, ApiError> {
    let limit = page_limit(query.limit, 100)?;
    let filter = query.filter()?;
    let page = refunds::page(&state.store, &filter, limit, OffsetDateTime::now_utc())
        .await
        .map_err(ApiError::internal)?;
    Ok(page_response(page))
}

/// `GET /api/refunds/{refund_id}`: one refund, as `refunds show --json` prints it.
#[utoipa::path(get, path = "/api/refunds/{refund_id}", operation_id = "showRefund", tag = "refunds", params(("refund_id" = uuid::Uuid, Path, description = "The refund_id")), responses(
    (status = 200, description = "The refund with its moves, gateway calls and events, as `refunds show --json` prints it", body = RefundDetail),
    (status = 400, description = "Not a refund_id", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 404, description = "No such refund", body = ErrorBody),
))]
pub(crate) async fn show_refund(
    State(state): State<AdminState>,
    id: Result<Path<RefundId>, PathRejection>,
) -> Result<Json<RefundDetail>, ApiError> {
    let Path(id) =
        id.map_err(|e| ApiError::bad_request(format!("not a refund_id: {}", e.body_text())))?;
    refunds::show(&state.store, id, OffsetDateTime::now_utc())
        .await
        .map_err(ApiError::internal)?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no refund {id}")))
}

/// `POST /api/attempts/{id}/refunds` with `{"amount_minor": …, "reason": …, "refund_id":
/// …}`: what `refunds create --yes` does — checked against the attempt and its refunds,
/// published as a RefundPayment command, audited as the caller.
#[utoipa::path(post, path = "/api/attempts/{id}/refunds", operation_id = "refundAttempt", tag = "refunds", params(("id" = uuid::Uuid, Path, description = "The payment_attempt_id of the charge to refund")), request_body = NewRefund, responses(
    (status = 200, description = "The refund command was published (or, `duplicate`, already had been: the same refund); the refund worker sends it. Follow it at `GET /api/refunds/{refund_id}`", body = RefundPublished),
    (status = 400, description = "No reason, an amount that is no amount, or a body not understood", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
    (status = 404, description = "No such attempt", body = ErrorBody),
    (status = 409, description = "The attempt did not succeed (`conflict`): nothing to refund", body = ErrorBody),
    (status = 422, description = "More than is left of the charge (`exceeds_remaining`), with what was charged, refunded and is being refunded", body = ErrorBody),
    (status = 500, description = "Published but not audited (`refund_not_audited`: it is published; do not send it under another id), or a failure", body = ErrorBody),
    (status = 503, description = "JetStream did not take the command: nothing was published", body = ErrorBody),
))]
pub(crate) async fn refund_attempt(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    id: Result<Path<PaymentAttemptId>, PathRejection>,
    body: Result<Json<NewRefund>, JsonRejection>,
) -> Result<Json<RefundPublished>, ApiError> {
    let Path(id) = id.map_err(|e| {
        ApiError::bad_request(format!("not a payment_attempt_id: {}", e.body_text()))
    })?;
    let Json(request) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let published = refunds::create(
        &state.store,
        &state.broker,
        id,
        &request,
        &principal.actor,
        Via::Api,
    )
    .await?;
    Ok(Json(published))
}

impl From<RefundResolveError> for ApiError {
    fn from(err: RefundResolveError) -> Self {
        match err {
            RefundResolveError::Invalid(why) => Self::bad_request(why),
            err @ RefundResolveError::NotFound(_) => Self::not_found(err.to_string()),
            RefundResolveError::Refused(why) => Self::conflict(why),
            RefundResolveError::Unavailable(why) => Self::unavailable(why),
            err @ RefundResolveError::Store(_) => Self::internal(err),
        }
    }
}

/// `POST /api/refunds/{refund_id}/resolve` with `{"as": "succeeded|failed", "reason": …}`:
/// what `refunds resolve` does — the gateway is read first, a choice it contradicts is
/// refused with why, and the resolution is audited as the caller.
#[utoipa::path(post, path = "/api/refunds/{refund_id}/resolve", operation_id = "resolveRefund", tag = "refunds", params(("refund_id" = uuid::Uuid, Path, description = "The refund_id")), request_body = RefundResolveRequest, responses(
    (status = 200, description = "Resolved: the refund's move, its event queued for publishing (`failed` gives its amount back)", body = RefundResolved),
    (status = 400, description = "No reason, or a body not understood", body = ErrorBody),
    (status = 401, description = "No or an unknown bearer token", body = ErrorBody),
    (status = 403, description = "A viewer's token: it only reads", body = ErrorBody),
    (status = 404, description = "No such refund", body = ErrorBody),
    (status = 409, description = "The refund's state, or the gateway's answer, refuses the choice (with why); nothing was changed", body = ErrorBody),
    (status = 503, description = "This process has no gateway client to check with", body = ErrorBody),
))]
pub(crate) async fn resolve_refund(
    State(state): State<AdminState>,
    Extension(principal): Extension<Principal>,
    id: Result<Path<RefundId>, PathRejection>,
    body: Result<Json<RefundResolveRequest>, JsonRejection>,
) -> Result<Json<RefundResolved>, ApiError> {
    let Path(id) =
        id.map_err(|e| ApiError::bad_request(format!("not a refund_id: {}", e.body_text())))?;
    let Json(request) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let resolved = refunds::resolve(
        &state.store,
        state
            .reconciler
            .as_ref()
            .map(crate::reconciler::Reconciler::gateway),
        id,
        &request,
        &principal.actor,
        Via::Api,
    )
    .await?;
    Ok(Json(resolved))
}
