//! The running gateway, on top of everything else: each dialect's routes assembled with the
//! test controls, the accept loop, and per-connection serving.
//!
//! Connections are served with hyper directly (not `axum::serve`) because the `drop_after`
//! fault must close a connection with no HTTP response at all, which only the task that owns
//! the connection can do.

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::http::Request;
use axum::routing::{get, post};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use time::OffsetDateTime;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::charge::Charge;
use crate::config::{Dialect, FaultConfig, MockConfig, TlsFiles};
use crate::controls::with_controls;
use crate::latency::{LatencyDrawn, LatencySampler};
use crate::onecharge::{charges, list, refunds};
use crate::record::{PageTimes, RecordedRequest, Stats};
use crate::refund::settle;
use crate::refund::{Refund, RefundStatus};
use crate::state::{ConnectionControl, Shared};
use crate::stripe::{
    api, disputes, list as stripe_list, refunds as stripe_refunds, webhooks, WebhookDeliveries,
};

/// The onecharge dialect: contract §3 and the test controls.
fn onecharge_router(shared: Arc<Shared>) -> Router {
    with_controls(
        Router::new()
            .route(
                "/v1/charges",
                post(charges::create_charge).get(list::get_charges),
            )
            .route(
                "/v1/refunds",
                post(refunds::create_refund).get(refunds::lookup_refunds),
            )
            .route("/__charges/{id}", post(list::change_charge)),
        charges::not_found,
        shared,
    )
}

/// Stripe's routes, the test controls, and Stripe's 404 for everything else (contract §3's
/// `/v1/charges` included).
fn stripe_router(shared: Arc<Shared>) -> Router {
    with_controls(
        Router::new()
            .route(
                "/v1/payment_intents",
                post(api::create_intent).get(stripe_list::list_intents),
            )
            .route(
                "/__stripe/payment_intents/{id}/{action}",
                post(stripe_list::control),
            )
            .route("/__stripe/webhooks", post(webhooks::configure))
            .route("/__stripe/webhooks/send", post(webhooks::send))
            .route(
                "/__stripe/webhooks/{event}/redeliver",
                post(webhooks::redeliver),
            )
            .route("/v1/payment_intents/{id}", get(api::retrieve_intent))
            .route(
                "/v1/payment_intents/{id}/confirm",
                post(api::confirm_intent),
            )
            .route("/v1/payment_intents/{id}/cancel", post(api::cancel_intent))
            .route("/v1/customers", post(api::create_customer))
            .route(
                "/v1/refunds",
                post(stripe_refunds::create_refund).get(stripe_refunds::list_refunds),
            )
            .route("/v1/refunds/{id}", get(stripe_refunds::retrieve_refund))
            .route("/v1/disputes", get(disputes::list_disputes))
            .route("/v1/disputes/{id}", get(disputes::retrieve_dispute))
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&shared),
                check_stripe_access,
            )),
        api::unrecognized_url,
        shared,
    )
}

/// Stripe's checks of every `/v1` request before its handler (`stripe::access`): its
/// version recorded, and a known key that lacks the request's permission refused `403`.
async fn check_stripe_access(
    axum::extract::State(shared): axum::extract::State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let path = request.uri().path().to_owned();
    if path.starts_with("/v1/") {
        let version = request
            .headers()
            .get("stripe-version")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let known_key = shared.authorized(request.headers());
        let admitted = shared
            .stripe_access
            .admit(request.method(), &path, version, known_key);
        if let Err(refused) = admitted {
            return refused.answer().into_response_plain();
        }
    }
    next.run(request).await
}

/// Pending connections the kernel queues before `accept`; bursts of thousands of clients
/// connecting at once must not be refused.
const LISTEN_BACKLOG: u32 = 4096;

/// How long `shutdown` lets in-flight requests finish before cutting connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long a client may take to finish the TLS handshake before its connection is closed.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A running mock gateway on a loopback (or configured) port.
///
/// Start it with [`MockGateway::start`], point the client at [`MockGateway::base_url`], and
/// verify with [`MockGateway::ledger`]. Dropping the handle stops the server too, so a
/// failing test does not leak it; [`MockGateway::shutdown`] also waits for it.
pub struct MockGateway {
    shared: Arc<Shared>,
    addr: SocketAddr,
    https: bool,
    server: tokio::task::JoinHandle<()>,
}

impl MockGateway {
    /// Binds, spawns the server on the current tokio runtime and returns at once: the port
    /// accepts connections when this returns.
    ///
    /// With [`MockConfig::tls`] it serves HTTPS only; unreadable certificate or key files
    /// fail here, before anything listens.
    pub async fn start(config: MockConfig) -> anyhow::Result<MockGateway> {
        let tls = config.tls.as_ref().map(tls_acceptor).transpose()?;
        let https = tls.is_some();
        let listener = bind(config.bind)
            .with_context(|| format!("binding the mock gateway to {}", config.bind))?;
        let addr = listener
            .local_addr()
            .context("reading the mock gateway's address")?;
        let shared = Arc::new(Shared::new(&config));
        let router = match config.dialect {
            Dialect::Onecharge => onecharge_router(Arc::clone(&shared)),
            Dialect::Stripe => stripe_router(Arc::clone(&shared)),
        };
        let server = tokio::spawn(accept_connections(
            listener,
            router,
            tls,
            shared.shutdown.clone(),
        ));
        tracing::debug!(%addr, ?config, "mock gateway started");
        Ok(MockGateway {
            shared,
            addr,
            https,
            server,
        })
    }

    /// `http://<ip>:<port>` (`https://` when serving TLS), without a trailing slash.
    pub fn base_url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The bound address, for clients that want a `SocketAddr` rather than a URL.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every committed charge in commit order: one per key per retention window, whatever
    /// the client sent. This is what "charged at most once" is checked against.
    pub fn ledger(&self) -> Vec<Charge> {
        self.shared.ledger.charges()
    }

    /// Appends `charges` to the ledger as if committed, without requests: a gateway that
    /// already holds many charges, for benchmarks of the reconciliation sweep.
    pub fn record_charges(&self, charges: impl IntoIterator<Item = Charge>) {
        self.shared.ledger.record_all(charges);
    }

    /// The ledger entries made under one idempotency key, expired or not.
    pub fn charges_for_key(&self, idempotency_key: &str) -> Vec<Charge> {
        self.ledger()
            .into_iter()
            .filter(|charge| charge.idempotency_key == idempotency_key)
            .collect()
    }

    /// Every refund recorded, by either dialect's `POST /v1/refunds` or a control, in
    /// creation order and as it stands now: what "never refunded twice, never over the
    /// charge" is checked against.
    pub fn refunds(&self) -> Vec<Refund> {
        self.shared.refunds.all()
    }

    /// The refunds recorded for one onecharge refund id (the body's `refund_id`, Stripe's
    /// `metadata[refund_id]`), whatever their key.
    pub fn refunds_for_refund_id(&self, refund_id: &str) -> Vec<Refund> {
        self.refunds()
            .into_iter()
            .filter(|refund| refund.refund_id.as_deref() == Some(refund_id))
            .collect()
    }

    /// The refunds recorded under one idempotency key, expired or not.
    pub fn refunds_for_key(&self, idempotency_key: &str) -> Vec<Refund> {
        self.refunds()
            .into_iter()
            .filter(|refund| refund.idempotency_key.as_deref() == Some(idempotency_key))
            .collect()
    }

    /// How much of ledger entry `charge_id` (a `ch_…`, or in the Stripe dialect a
    /// `pi_…`) went back to the customer: its `succeeded` refunds.
    pub fn refunded(&self, charge_id: &str) -> i64 {
        self.shared
            .refunds
            .sum(charge_id, |status| status == RefundStatus::Succeeded)
    }

    /// Settles at once every refund waiting to (`pending` ones succeed, a
    /// `pm_card_refundFail` refund fails), without waiting out `refund_settle_after`;
    /// returns them as they are now. Refunds made later wait as usual.
    pub fn settle_refunds(&self) -> Vec<Refund> {
        settle::settle_waiting(&self.shared, None)
    }

    /// Moves refund `id` to `status` as the gateway would (`POST /__refunds/{id}`); the
    /// error says why it cannot (no such refund, or a move its status does not allow).
    pub fn move_refund(&self, id: &str, status: RefundStatus) -> Result<Refund, String> {
        settle::move_refund(&self.shared, id, status, None)
    }

    /// Stripe dialect: every `/v1` request's method, path and `Stripe-Version` header (`None`
    /// when it sent none), oldest first.
    pub fn stripe_versions(&self) -> Vec<(String, String, Option<String>)> {
        self.shared.stripe_access.versions()
    }

    /// Stripe dialect: the key is a restricted key lacking `permissions` (as
    /// `payment_intents:write`, `refunds:write`, `payment_intents:read`, `disputes:read`):
    /// a request that needs one is answered `403` naming it, before anything is read.
    /// Empty: the key may do everything again.
    pub fn set_missing_permissions(&self, permissions: &[&str]) {
        self.shared.stripe_access.set_missing(permissions);
    }

    /// The most recent `/v1` requests (up to `request_log_capacity`), oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.log.snapshot()
    }

    /// The idempotency key of every recorded `/v1` request (see [`MockGateway::requests`]),
    /// oldest first; `None` for a request that sent none.
    pub fn request_keys(&self) -> Vec<Option<String>> {
        self.requests()
            .into_iter()
            .map(|request| request.idempotency_key)
            .collect()
    }

    /// How the Stripe dialect's signed webhooks went so far, one delivery per event and
    /// endpoint: begun, answered `2xx`, answered otherwise, not answered.
    pub fn webhook_deliveries(&self) -> WebhookDeliveries {
        self.shared.stripe.webhook_deliveries()
    }

    /// Counts by response class.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// How long the list pages took to build in the mock, at the start and at the end of
    /// what it listed: a page should cost the same wherever it falls in a long listing.
    pub fn list_page_times(&self) -> PageTimes {
        self.shared.page_times.snapshot()
    }

    /// Waits until `condition` holds of this gateway's state (its ledger, stats or request
    /// log), polling every 2 ms; panics after ten seconds. For tests that must let a request
    /// reach a point before they go on.
    pub async fn wait_until(&self, what: &str, condition: impl Fn(&MockGateway) -> bool) {
        const LIMIT: Duration = Duration::from_secs(10);
        let started = std::time::Instant::now();
        while !condition(self) {
            assert!(
                started.elapsed() < LIMIT,
                "timed out after {LIMIT:?} waiting until {what}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Waits until exactly `n` charges are in progress (hold their key), as
    /// [`MockGateway::wait_until`].
    pub async fn wait_for_charges_in_progress(&self, n: u64) {
        self.wait_until(&format!("{n} charges are in progress"), |g| {
            g.stats().charges_in_progress == n
        })
        .await;
    }

    /// Waits until the ledger holds exactly `n` charges, as [`MockGateway::wait_until`].
    pub async fn wait_for_ledger(&self, n: usize) {
        self.wait_until(&format!("the ledger holds {n} charges"), |g| {
            g.ledger().len() == n
        })
        .await;
    }

    /// Waits until exactly `n` requests are recorded, as [`MockGateway::wait_until`].
    pub async fn wait_for_requests(&self, n: usize) {
        self.wait_until(&format!("{n} requests are recorded"), |g| {
            g.requests().len() == n
        })
        .await;
    }

    /// The current fault configuration, with counts reduced by the faults already fired.
    pub fn faults(&self) -> FaultConfig {
        self.shared.faults.config()
    }

    /// Replaces the fault configuration for all requests that claim a key from now on.
    pub fn set_faults(&self, faults: FaultConfig) {
        self.shared.faults.set(faults);
    }

    /// Ends every `slow_charge` (and `slow_refund`) held now: each commits its charge (or
    /// refund) at once (as the gateway finishing its processing), without waiting out
    /// `slow_charge_for`. Charges that start later are held as usual.
    pub fn finish_slow_charges(&self) {
        self.shared.finish_slow.notify_waiters();
        api::finish_processing(&self.shared, None);
    }

    /// What the log-normal latency drew so far (all zero without one), so a benchmark can
    /// print the mean it really got beside the distribution's.
    pub fn latency_drawn(&self) -> LatencyDrawn {
        self.shared
            .latency
            .as_ref()
            .map_or_else(LatencyDrawn::default, LatencySampler::drawn)
    }

    /// Moves the mock's clock forward, expiring keys older than the retention, so tests
    /// exercise key expiry without sleeping.
    pub fn advance_clock(&self, by: Duration) {
        self.shared.advance_clock(by);
    }

    /// The mock clock's current time (the time `created_at` would get).
    pub fn now(&self) -> OffsetDateTime {
        self.shared.clock.wall_now()
    }

    /// Stops accepting, lets in-flight requests finish (up to 5 s; held `hang_after`
    /// responses are cut at once), and waits for the server to stop.
    pub async fn shutdown(mut self) {
        self.shared.shutdown.cancel();
        if let Err(err) = (&mut self.server).await {
            tracing::warn!(%err, "mock gateway server task failed");
        }
    }
}

impl Drop for MockGateway {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A TLS server configuration (ring, HTTP/1.1) from PEM certificate chain and key files.
fn tls_acceptor(files: &TlsFiles) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(&files.cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| {
            format!(
                "reading the TLS certificate chain {}",
                files.cert_file.display()
            )
        })?;
    anyhow::ensure!(
        !chain.is_empty(),
        "the TLS certificate file {} holds no PEM certificate",
        files.cert_file.display()
    );
    let key = PrivateKeyDer::from_pem_file(&files.key_file)
        .with_context(|| format!("reading the TLS private key {}", files.key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("choosing TLS versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the TLS certificate and key do not make a usable pair")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

async fn accept_connections(
    listener: TcpListener,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: CancellationToken,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let (router, shutdown) = (router.clone(), shutdown.clone());
                    match tls.clone() {
                        None => connections.spawn(serve_connection(stream, router, shutdown)),
                        Some(tls) => connections.spawn(serve_tls_connection(tls, stream, router, shutdown)),
                    };
                }
                Err(err) => {
                    // Usually out of file descriptors: back off instead of spinning, keep
                    // serving the connections we have.
                    tracing::warn!(%err, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "closing connections still busy after the shutdown grace period"
        );
        connections.shutdown().await;
    }
}

/// Completes the TLS handshake (in the connection's own task, so a slow client holds up no
/// one else), then serves the connection like a plain one.
async fn serve_tls_connection(
    tls: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    router: Router,
    shutdown: CancellationToken,
) {
    let handshake = tokio::select! {
        () = shutdown.cancelled() => return,
        handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.accept(stream)) => handshake,
    };
    match handshake {
        Ok(Ok(stream)) => serve_connection(stream, router, shutdown).await,
        Ok(Err(err)) => tracing::debug!(%err, "TLS handshake failed"),
        Err(_) => tracing::debug!("TLS handshake timed out"),
    }
}

async fn serve_connection<S>(stream: S, router: Router, shutdown: CancellationToken)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let control = ConnectionControl::default();
    let dropped = control.dropped.clone();
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(control.clone());
        router.clone().oneshot(request)
    });
    let mut connection =
        pin!(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
    let mut draining = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(%err, "connection ended with an error");
                }
                return;
            }
            // Returning drops the connection, and with it the socket: the client sees the
            // connection close with no response.
            () = dropped.cancelled() => return,
            () = shutdown.cancelled(), if !draining => {
                connection.as_mut().graceful_shutdown();
                draining = true;
            }
        }
    }
}
