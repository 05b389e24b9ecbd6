//! The `/__*` test controls both dialects serve (faults, ledger, stats, requests, clock,
//! health, and the refunds' controls of `crate::refund::settle`), and how a dialect's routes get
//! them.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::answer::Answer;
use crate::config::FaultConfig;
use crate::refund::settle;
use crate::respond::log_request;
use crate::state::Shared;

/// Longest clock advance accepted over HTTP; far beyond any retention, short of overflow.
const MAX_CLOCK_ADVANCE_SECS: f64 = 100.0 * 365.0 * 24.0 * 3600.0;

/// Adds the `/__*` test controls, the dialect's 404 for unknown paths and the access log
/// to a dialect's routes.
pub(crate) fn with_controls<H, T>(
    routes: Router<Arc<Shared>>,
    not_found: H,
    shared: Arc<Shared>,
) -> Router
where
    H: axum::handler::Handler<T, Arc<Shared>>,
    T: 'static,
{
    routes
        .route("/__faults", get(get_faults).put(put_faults))
        .route("/__ledger", get(get_ledger))
        .route("/__ledger/refunds", get(settle::refund_ledger))
        .route("/__refunds/settle", post(settle::settle_refunds))
        .route("/__refunds/{id}", post(settle::change_refund))
        .route("/__stats", get(get_stats))
        .route("/__requests", get(get_requests))
        .route("/__clock/advance", post(advance_clock))
        .route("/__health", get(health))
        .fallback(not_found)
        .layer(middleware::from_fn(log_request))
        .with_state(shared)
}

async fn get_faults(State(shared): State<Arc<Shared>>) -> Json<FaultConfig> {
    Json(shared.faults.config())
}

async fn put_faults(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let faults = serde_json::from_slice::<FaultConfig>(&body)
        .map_err(|e| format!("not a fault configuration: {e}"))
        .and_then(|faults| faults.validate().map(|()| faults));
    match faults {
        Ok(faults) => {
            tracing::info!(?faults, "faults changed");
            shared.faults.set(faults.clone());
            Json(faults).into_response()
        }
        Err(message) => {
            Answer::error(StatusCode::BAD_REQUEST, "invalid_request", message).into_response_plain()
        }
    }
}

async fn get_ledger(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.ledger.charges()).into_response()
}

async fn get_stats(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.stats()).into_response()
}

async fn get_requests(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.log.snapshot()).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClockAdvance {
    seconds: f64,
}

async fn advance_clock(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let by = serde_json::from_slice::<ClockAdvance>(&body)
        .map_err(|e| format!("expected {{\"seconds\": N}}: {e}"))
        .and_then(|advance| {
            if (0.0..=MAX_CLOCK_ADVANCE_SECS).contains(&advance.seconds) {
                Ok(Duration::from_secs_f64(advance.seconds))
            } else {
                Err(format!(
                    "seconds must be between 0 and {MAX_CLOCK_ADVANCE_SECS}"
                ))
            }
        });
    match by {
        Ok(by) => {
            shared.advance_clock(by);
            let now = shared
                .clock
                .wall_now()
                .format(&time::format_description::well_known::Rfc3339)
                .expect("the mock clock formats as RFC 3339");
            Json(json!({ "now": now })).into_response()
        }
        Err(message) => {
            Answer::error(StatusCode::BAD_REQUEST, "invalid_request", message).into_response_plain()
        }
    }
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}
