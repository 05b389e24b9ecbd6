//! The open routes of the admin listener (contract §6): `/healthz` (the process answers),
//! `/readyz` (it can do its work) and `/metrics` (Prometheus). No token: probes and scrapers
//! carry none; the origin guard still applies.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::AdminState;

/// `/healthz`, `/readyz` and `/metrics`.
pub fn routes() -> Router<AdminState> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

/// Ready when the database and NATS answer and the gateway accepts the credentials; the
/// body says what is wrong otherwise, and, when ready, each open pause on a line. One
/// statement asks the database both things: a probe anyone may send costs one query on
/// the admin listener's own pool.
async fn readyz(State(state): State<AdminState>) -> impl IntoResponse {
    let (pause, nats) = tokio::join!(
        crate::store::fleet::open_pauses(&state.store),
        state.broker.ping()
    );
    let mut problems: Vec<String> = Vec::new();
    if let Err(err) = &pause {
        problems.push(crate::store::Unreachable::of(err).to_string());
    }
    if !nats {
        problems.push("NATS unreachable".to_owned());
    }
    if let Some(problem) = state
        .gateway_health
        .as_ref()
        .and_then(|h| h.pause_problem())
    {
        problems.push(problem.to_owned());
    }
    if problems.is_empty() {
        // A pause is an operator's decision, not a fault: the instance stays ready (a
        // probe that failed would have every pod restarted), and the body says it.
        let mut body = "ready\n".to_owned();
        for pause in pause.unwrap_or_default() {
            body.push_str(&crate::operator::fleet::paused_line(&pause));
            body.push('\n');
        }
        (StatusCode::OK, body)
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", problems.join(", ")),
        )
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}
