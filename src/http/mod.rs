//! onecharge's HTTP faces. The admin listener (contract §6): liveness, readiness and
//! Prometheus metrics ([`health`]), the operator API under `/api` ([`api`], described by
//! [`openapi`]) and the operator console under `/console/` ([`console`]), every route behind
//! [`origin::guard`]. Bound to 127.0.0.1 by default; `/api/*` and the console require the
//! admin token or a named operator's token ([`access`]) when either is configured (a viewer's
//! token may only read). The signed Stripe webhooks have a listener of their own
//! ([`webhook`]), which shares nothing with the admin one.
//!
//! The rooms sit on one floor: [`AdminState`] (in [`state`]), [`ApiError`] (in [`error`]),
//! [`access`] and the console's sign-in [`throttle`] are below both faces; `api` and `console` never import each other; this
//! module assembles them.

pub mod access;
pub mod api;
pub mod console;
pub mod error;
pub mod health;
pub mod openapi;
pub mod origin;
pub mod state;
pub mod throttle;
pub mod webhook;

use axum::middleware;
use axum::routing::get;
use axum::Router;
use tokio_util::sync::CancellationToken;

pub use error::ApiError;
pub use state::{is_open, AdminState, Console};

/// The admin router: health, readiness, metrics, the operator API under `/api` (its
/// OpenAPI document included) and the console, every route behind [`origin::guard`].
pub fn router(state: AdminState) -> Router {
    let api = api::routes()
        .route("/api/openapi.json", get(openapi::serve))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            api::authorize,
        ));
    Router::new()
        .merge(health::routes())
        .merge(api)
        .merge(console::router(state.clone()))
        // Last before `with_state`, so that it wraps every route above, any added to this
        // router later, and the 404 of a path that is none (contract §6).
        .layer(middleware::from_fn_with_state(
            state.console.public_origins.clone(),
            origin::guard,
        ))
        .with_state(state)
}

/// Serves [`router`] on `listener` until `shutdown` fires.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AdminState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "admin HTTP listening");
    // With each connection's peer address: the console's sign-in throttle counts by it.
    let service = router(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, service)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}

/// A CSV download (an export of attempts, decision 146): its type, and a file name a
/// browser saves it under. Shared by both faces, so it sits below them.
pub(crate) fn csv_download(csv: Vec<u8>) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                axum::http::header::CONTENT_DISPOSITION,
                "attachment; filename=\"onecharge-attempts.csv\"",
            ),
        ],
        csv,
    )
        .into_response()
}
