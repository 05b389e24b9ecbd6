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
pub mod client;
pub mod console;
pub mod error;
pub mod health;
pub mod listener;
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

/// The admin listener's own database connections (`AdminState::store` in `serve`): a flood
/// of admin requests waits on these, never on the pool intake, the relay and the reconciler
/// share.
pub const DATABASE_CONNECTIONS: u32 = 3;

/// Admin requests handled at once (`/healthz` and `/metrics` aside, which touch no
/// database); one more is answered `503` with `Retry-After` at once.
pub const MAX_IN_FLIGHT: usize = 32;

/// Connections open at once; at the cap the listener accepts no more until one closes.
pub const MAX_CONNECTIONS: usize = 256;

/// How long a connection may take to send a request's headers (and may idle between
/// requests), and a request's body to arrive: an operator's browser or a probe sends both
/// at once.
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
pub const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves [`router`] on `listener` until `shutdown` fires, bounded as [`listener::serve`]
/// says: at most [`MAX_CONNECTIONS`], headers within [`HEADER_READ_TIMEOUT`], bodies within
/// [`BODY_READ_TIMEOUT`], and [`MAX_IN_FLIGHT`] requests that may touch the database. Each
/// request carries its peer address (the console's sign-in throttle reads it).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AdminState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "admin HTTP listening");
    // A cookie whose credential is gone is refused without asking the database, so its row
    // is deleted here, for every instance that shares the database.
    let bindings = state
        .console
        .operators
        .session_bindings(state.admin_token.as_ref());
    match crate::store::console::end_sessions_bound_elsewhere(&state.store, &bindings).await {
        Ok(0) => {}
        Ok(ended) => tracing::info!(
            ended,
            "console sessions of credentials no longer configured ended"
        ),
        Err(err) => {
            tracing::warn!(error = %err, "cannot end the console sessions of credentials no longer configured; they are refused all the same")
        }
    }
    let in_flight = listener::InFlight::new("admin", MAX_IN_FLIGHT, || {
        metrics::counter!("onecharge_admin_requests_shed_total").increment(1)
    });
    let app = router(state).layer(middleware::from_fn_with_state(in_flight, shed_unless_free));
    listener::serve(
        listener,
        app,
        listener::Limits {
            name: "admin",
            max_connections: MAX_CONNECTIONS,
            header_read: HEADER_READ_TIMEOUT,
            body_read: BODY_READ_TIMEOUT,
        },
        shutdown,
    )
    .await
}

/// `/healthz` and `/metrics` answer from memory, so a flood of the rest never keeps a
/// liveness probe or a scrape out; every other route counts against the in-flight cap.
async fn shed_unless_free(
    in_flight: axum::extract::State<listener::InFlight>,
    request: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    if matches!(request.uri().path(), "/healthz" | "/metrics") {
        return next.run(request).await;
    }
    listener::within(in_flight, request, next).await
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
