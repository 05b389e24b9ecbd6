//! What every Stripe handler answers the same way: a GET recorded, authenticated and
//! delivered with the connection's faults ([`serve_get`]), and the refusals as Stripe words
//! them.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use serde_json::Value;

use super::error::StripeError;
use crate::answer::{pause, Outcome};
use crate::record::ResponseClass;
use crate::respond::deliver;
use crate::state::{ConnectionControl, Shared};

/// What every Stripe GET reads of its request.
pub(crate) struct Get {
    connection: ConnectionControl,
    uri: Uri,
    headers: HeaderMap,
}

impl Get {
    /// The query string, empty when there is none.
    pub(crate) fn query(&self) -> &str {
        self.uri.query().unwrap_or_default()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Get {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Get, Infallible> {
        Ok(Get {
            connection: parts
                .extensions
                .get::<ConnectionControl>()
                .cloned()
                .unwrap_or_default(),
            uri: parts.uri.clone(),
            headers: parts.headers.clone(),
        })
    }
}

/// A Stripe GET: recorded, authenticated, held for the request's latency, answered by
/// `answer`, and delivered with the connection's faults.
pub(crate) async fn serve_get<F: std::future::Future<Output = Outcome>>(
    shared: &Arc<Shared>,
    get: &Get,
    answer: impl FnOnce() -> F,
) -> Response {
    let Get {
        connection,
        uri,
        headers,
    } = get;
    let seq = shared.begin("GET", uri, None, Value::Null);
    let outcome = if !shared.authorized(headers) {
        unauthorized()
    } else {
        pause(shared.request_latency()).await;
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
