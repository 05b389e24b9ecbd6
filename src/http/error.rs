//! The admin listener's JSON refusal: [`ApiError`], written by the API's handlers, its
//! authorisation and the origin guard, and [`ErrorBody`], the same answer as the OpenAPI
//! document describes it.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa::ToSchema;

/// An API failure: its status and a JSON body `{"error": {"type": …, "message": …}}`, so a
/// script can branch on `type` without parsing prose.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// The attempt's state refuses the action (it is not, or no longer, in a state the
    /// action applies to).
    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    pub(crate) fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "admin API request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the request failed on the server; see its log",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"type": self.kind, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// The answer of every failed API request (`ApiError`): a script branches on `type`.
#[derive(serde::Serialize, ToSchema)]
#[allow(dead_code)] // documents the JSON `ApiError` writes
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

#[derive(serde::Serialize, ToSchema)]
#[allow(dead_code)]
struct ErrorDetail {
    /// `invalid_request`, `unauthorized`, `forbidden`, `not_found`, `conflict`,
    /// `too_many`, `exceeds_remaining`, `unavailable`, `internal`, or what a published
    /// action could not audit (`replayed_not_audited`, `refund_not_audited`).
    #[serde(rename = "type")]
    kind: String,
    /// What went wrong, for a person.
    message: String,
}

/// The refusals of a listing (`GET` with query parameters), described once for the OpenAPI
/// document: `responses(…, QueryRefused)`.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // documents what the listings and `api::authorize` answer
pub(crate) enum QueryRefused {
    #[response(status = 400, description = "A parameter is not understood")]
    Invalid(ErrorBody),
    #[response(status = 401, description = "No or an unknown bearer token")]
    Unauthorized(ErrorBody),
}
