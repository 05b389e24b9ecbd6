//! The accept loop both HTTP listeners share (the admin one and the webhook one), bounded
//! against clients that are slow or many: a process that also runs intake, the executor and
//! the relay must not run out of file descriptors, memory or database connections because
//! of what one HTTP client does.
//!
//! - **Connections** are capped ([`Limits::max_connections`]): at the cap the loop stops
//!   accepting (the kernel's backlog holds newcomers) until one closes.
//! - **Headers** must arrive within [`Limits::header_read`], which hyper also applies to a
//!   kept-alive connection waiting for its next request: a connection that trickles its
//!   headers, or idles, is closed.
//! - **Bodies** must arrive within [`Limits::body_read`] (a layer on the router).
//! - **Requests in flight** are capped by [`InFlight`], a middleware each listener places
//!   where it sheds: one more is answered `503` with `Retry-After` at once, never queued.
//!
//! `axum::serve` can set none of the first two, so this is hyper's HTTP/1 server driven by
//! hand, with graceful shutdown: at shutdown it stops accepting and lets requests in flight
//! finish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// What one listener allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Which listener, for the logs (`admin`, `webhook`).
    pub name: &'static str,
    /// Connections open at once.
    pub max_connections: usize,
    /// How long a connection may take to send a request's headers, and may idle between
    /// requests.
    pub header_read: Duration,
    /// How long a request's body may take to arrive.
    pub body_read: Duration,
}

/// Serves `app` on `listener` under `limits` until `shutdown`. Each request carries its
/// connection's peer address as axum's `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
        limits.body_read,
    ));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read);
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = connections.clone().acquire_owned() => permit?,
        };
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors, say: pause instead of spinning.
                    tracing::warn!(listener = limits.name, error = %err, "cannot accept a connection; pausing");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        if connections.available_permits() == 0 {
            tracing::warn!(
                listener = limits.name,
                limit = limits.max_connections,
                "connection cap reached; accepting no more until one closes"
            );
        }
        let service = app.clone().map_request(
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                request
                    .extensions_mut()
                    .insert(ConnectInfo::<SocketAddr>(peer));
                request
            },
        );
        let service = hyper_util::service::TowerToHyperService::new(service);
        let connection =
            graceful.watch(http.serve_connection(hyper_util::rt::TokioIo::new(stream), service));
        let name = limits.name;
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(listener = name, error = %err, "a connection ended with an error");
            }
            drop(permit);
        });
    }
    graceful.shutdown().await;
    Ok(())
}

/// A cap on the requests a listener handles at once: the state of [`within`].
#[derive(Clone)]
pub struct InFlight {
    permits: Arc<Semaphore>,
    limit: usize,
    name: &'static str,
    /// Counts one shed request (each listener has its own metric).
    count_shed: fn(),
}

impl InFlight {
    pub fn new(name: &'static str, limit: usize, count_shed: fn()) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            name,
            count_shed,
        }
    }
}

/// Lets a request in while fewer than the limit are in flight; sheds it with `503` and
/// `Retry-After: 1` otherwise. The permit is held until the answer, body read included.
pub async fn within(State(in_flight): State<InFlight>, request: Request, next: Next) -> Response {
    let Ok(_permit) = in_flight.permits.clone().try_acquire_owned() else {
        (in_flight.count_shed)();
        tracing::warn!(
            listener = in_flight.name,
            limit = in_flight.limit,
            "request shed: too many in flight"
        );
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(axum::http::header::RETRY_AFTER, "1")],
        )
            .into_response();
    };
    next.run(request).await
}
