//! The plumbing both dialects share between a request and its response: the request's
//! idempotency key and body as the request log keeps them, delivering an [`Outcome`] (record
//! it, then answer, hold, or close the connection) and the access log.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;

use crate::answer::{Delivery, Note, Outcome};
use crate::config::FaultKind;
use crate::record::Finish;
use crate::state::{ConnectionControl, Shared};

pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The `Idempotency-Key` header as sent, valid or not, for the request log and the access
/// log: a refused key must be visible there too, so this never validates.
pub(crate) fn raw_idempotency_key(headers: &HeaderMap) -> Option<String> {
    headers
        .get(IDEMPOTENCY_KEY)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// The body as the request log keeps it: JSON when it parses, else the raw text.
pub(crate) fn recorded_body(body: &Bytes) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// Records the outcome, then answers, holds, or closes the connection.
pub(crate) async fn deliver(
    shared: &Shared,
    connection: &ConnectionControl,
    seq: u64,
    path: &str,
    idempotency_key: Option<String>,
    outcome: Outcome,
) -> Response {
    let Outcome {
        class,
        fault,
        answer,
        delivery,
    } = outcome;
    shared.counters.count(class);
    // The request log's entry: the class and fault are known now; status and finish time
    // depend on how the answer is delivered.
    let finish = |status, finished_at| {
        shared.log.finish(
            seq,
            Finish {
                status,
                class,
                fault,
                finished_at,
            },
        );
    };
    match delivery {
        Delivery::Now => {}
        Delivery::Drop => {
            finish(None, Some(shared.clock.wall_now()));
            // The access log never sees this request (there is no response), so log it here.
            tracing::info!(
                method = "POST",
                path,
                idempotency_key,
                class = class.as_str(),
                fault = fault.map(FaultKind::as_str),
                "request: connection dropped without a response"
            );
            return connection.drop_now().await;
        }
        Delivery::Hold(hold) => {
            // Held: the log shows the class and fault now, but no answer yet.
            finish(None, None);
            tokio::select! {
                () = tokio::time::sleep(hold) => {}
                () = shared.shutdown.cancelled() => return connection.drop_now().await,
            }
        }
    }
    finish(Some(answer.status.as_u16()), Some(shared.clock.wall_now()));
    answer.into_response(Note {
        idempotency_key,
        class,
        fault,
    })
}

/// One log line per request, after its response (a dropped connection logs itself).
pub(crate) async fn log_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let note = response.extensions().get::<Note>();
    tracing::info!(
        method = %method,
        path,
        status = response.status().as_u16(),
        idempotency_key = note.and_then(|note| note.idempotency_key.as_deref()),
        class = note.map(|note| note.class.as_str()),
        fault = note.and_then(|note| note.fault).map(FaultKind::as_str),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}
