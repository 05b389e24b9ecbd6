//! What every Stripe handler answers the same way: a GET recorded, authenticated and
//! delivered with the connection's faults ([`serve_get`]), and the refusals as Stripe words
//! them.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use serde_json::Value;

use super::error::StripeError;
use crate::answer::Outcome;
use crate::record::ResponseClass;
use crate::respond::deliver;
use crate::state::{ConnectionControl, Shared};

/// A Stripe GET: recorded, authenticated, answered by `answer`, and delivered with the
/// connection's faults.
pub(crate) async fn serve_get<F: std::future::Future<Output = Outcome>>(
    shared: &Arc<Shared>,
    connection: &ConnectionControl,
    uri: &Uri,
    headers: &HeaderMap,
    answer: impl FnOnce() -> F,
) -> Response {
    let seq = shared.begin("GET", uri, None, Value::Null);
    let outcome = if !shared.authorized(headers) {
        unauthorized()
    } else {
        answer().await
    };
    deliver(shared, connection, seq, uri.path(), None, outcome).await
}

pub(crate) fn refused(class: ResponseClass, err: StripeError) -> Outcome {
    Outcome::now(class, err.answer())
}

pub(crate) fn unauthorized() -> Outcome {
    refused(
        ResponseClass::Unauthorized,
        StripeError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "Invalid API Key provided. Send `Authorization: Bearer <secret key>`.",
        ),
    )
}

pub(crate) fn internal_error(_: ()) -> Outcome {
    refused(
        ResponseClass::ServerError,
        StripeError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "internal error",
        ),
    )
}
