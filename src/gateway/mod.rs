//! The payment gateway's connector layer: one HTTP client, shared by every caller, that
//! speaks the wire protocol `gateway_kind` names (contract §3.1) — the §3 dialect
//! ([`onecharge`]) or Stripe's PaymentIntents ([`stripe`]) — plus the shared view of the
//! gateway's health (credentials pause, circuit breaker).
//!
//! What is generic lives here: timeouts, TLS, reading a response, the split between "not
//! sent" and "lost", metrics and spans, and the dispatch to the connector `gateway_kind`
//! chose. Each connector is a room of its own — its requests and the pure table that reads
//! its answers into the shared outcomes ([`GatewayOutcome`], [`LookupOutcome`]), with that
//! table's tests: [`onecharge`] (§3) and [`stripe`]. What connectors share when they read
//! the wire sits beside them in [`wire`]; the request every connector takes in [`request`],
//! what a call came to in [`call`]. The executor, reconciler, operator commands and console
//! never know which connector runs.
//!
//! Invariants:
//! - The client never touches the database and never decides what an answer means: the
//!   connector's pure classification does. A connector that needs an object stored before
//!   the charging call ([`GatewayClient::prepare`]) hands its id back to the executor, which
//!   stores it under its lease before it calls [`GatewayClient::charge`].
//! - A charge request is built once from the stored attempt ([`ChargeRequest`]); every try
//!   sends the same bytes under the same key (or the same keys derived from it).
//! - The bearer key lives in a [`SecretString`] and is never logged or printed (`Debug` of
//!   the client redacts it; reqwest marks the header sensitive).

mod health;
pub mod list;
pub mod onecharge;
pub mod permission;
mod refund;
mod request;
pub mod stripe;
pub mod wire;

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rustls::pki_types::CertificateDer;
use secrecy::SecretString;
use tracing::Instrument as _;

pub use crate::domain::call::{CancelOutcome, GatewayCall, Prepared};
pub use crate::domain::KeySeq;
pub use health::{Admission, BreakerState, GatewayHealth, HealthSnapshot, Work};
pub use permission::Permission;
pub use refund::RefundRequest;
pub use request::{ChargeBody, ChargeRequest};
pub use wire::Hints;

use crate::config::Settings;
use crate::domain::outcome::{GatewayOutcome, LookupOutcome};
use crate::domain::{bounded, CallOperation, Deployment, IdempotencyKey};
use wire::GatewayReply;

/// Longest transport error text kept (it goes to `gateway_calls.error`, bounded at 1024).
const MAX_ERROR_CHARS: usize = 1000;

pub use crate::config::GatewayKind;

/// One pooled HTTP client for the gateway. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct GatewayClient {
    transport: Transport,
    connector: Connector,
}

/// What every connector sends through: the pooled HTTP client (timeouts, TLS, no
/// redirects), the bearer key, and the name of the deployment the calls are made for
/// (decision 242), which every charge and refund carries in its metadata and by which a
/// listed record is told from a sibling deployment's.
#[derive(Clone)]
struct Transport {
    http: reqwest::Client,
    api_key: SecretString,
    deployment: Option<Deployment>,
    /// What every Stripe request names as `Stripe-Version` (`stripe_api_version`).
    stripe_version: std::sync::Arc<str>,
}

impl Transport {
    /// A Stripe `GET` of `url`: the bearer key and the configured `Stripe-Version`.
    fn stripe_get(&self, url: reqwest::Url) -> reqwest::RequestBuilder {
        use secrecy::ExposeSecret as _;
        self.http
            .get(url)
            .bearer_auth(self.api_key.expose_secret())
            .header("Stripe-Version", &*self.stripe_version)
    }
}

/// The connector `gateway_kind` chose, with its resolved URLs.
#[derive(Clone)]
enum Connector {
    Onecharge(onecharge::Endpoints),
    Stripe(stripe::Endpoints),
}

impl fmt::Debug for GatewayClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, url) = match &self.connector {
            Connector::Onecharge(e) => ("onecharge", e.charges_url.as_str()),
            Connector::Stripe(e) => ("stripe", e.base.as_str()),
        };
        f.debug_struct("GatewayClient")
            .field("kind", &kind)
            .field("url", &url)
            .field("api_key", &"[REDACTED]")
            .finish()
    }
}

/// A raw answer before classification.
struct Raw {
    status: u16,
    replayed: bool,
    retry_after: Option<String>,
    hints: Hints,
    body: Vec<u8>,
}

/// A transport failure, split by whether the request can have reached the gateway.
enum Failure {
    NotSent(String),
    Lost(String),
}

impl GatewayClient {
    /// A §3 client for the gateway at `base_url` (e.g. `http://127.0.0.1:8080`), with a
    /// connect timeout (a connect failure is "not sent") and a whole-request timeout (past
    /// it the answer is ambiguous). Redirects are not followed: a charge is never re-sent
    /// elsewhere. `https://` trusts the system's roots only; see
    /// [`GatewayClient::for_kind`].
    pub fn new(
        base_url: &str,
        api_key: SecretString,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> anyhow::Result<Self> {
        Self::for_kind(
            GatewayKind::Onecharge,
            base_url,
            api_key,
            connect_timeout,
            request_timeout,
            Vec::new(),
        )
    }

    /// A client speaking `kind`'s protocol to `base_url`, as [`GatewayClient::new`], trusting
    /// `extra_roots` (a private CA) besides the system's roots for an `https://` gateway. A
    /// TLS handshake the gateway fails (an untrusted certificate) happens before any byte of
    /// the request is sent: it is "not sent".
    pub fn for_kind(
        kind: GatewayKind,
        base_url: &str,
        api_key: SecretString,
        connect_timeout: Duration,
        request_timeout: Duration,
        extra_roots: Vec<CertificateDer<'static>>,
    ) -> anyhow::Result<Self> {
        let mut base = reqwest::Url::parse(base_url)
            .with_context(|| format!("gateway_url `{base_url}` is not a URL"))?;
        // `http://host/api` means `http://host/api/v1/…`, not `http://host/v1/…`.
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let connector = match kind {
            GatewayKind::Onecharge => Connector::Onecharge(onecharge::Endpoints::new(&base)?),
            GatewayKind::Stripe => Connector::Stripe(stripe::Endpoints::new(&base)?),
        };
        let extra_roots = extra_roots
            .iter()
            .map(|der| reqwest::Certificate::from_der(der))
            .collect::<Result<Vec<_>, _>>()
            .context("reading the gateway's CA certificates")?;
        crate::config::tls::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .timeout(request_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("onecharge/", env!("CARGO_PKG_VERSION")))
            .tls_certs_merge(extra_roots)
            .build()
            .context("building the gateway HTTP client")?;
        Ok(Self {
            transport: Transport {
                http,
                api_key,
                deployment: None,
                stripe_version: std::sync::Arc::from(stripe::STRIPE_VERSION),
            },
            connector,
        })
    }

    /// The same client, making its calls for the deployment `deployment` (the
    /// `deployment` setting): its charges and refunds carry it, and a listed record naming
    /// another deployment is not this one's.
    pub fn for_deployment(mut self, deployment: Option<Deployment>) -> Self {
        self.transport.deployment = deployment;
        self
    }

    /// The same client, naming `version` as the `Stripe-Version` of every Stripe request
    /// (`stripe_api_version`, checked at start).
    pub fn with_stripe_version(mut self, version: &str) -> Self {
        self.transport.stripe_version = std::sync::Arc::from(version);
        self
    }

    /// The deployment this client's calls are made for.
    pub fn deployment(&self) -> Option<&Deployment> {
        self.transport.deployment.as_ref()
    }

    /// The client configured by `gateway_kind`, `gateway_url`, `gateway_api_key`,
    /// `gateway_ca_file`, `deployment`, `stripe_api_version` and the gateway timeouts. A missing key or an unusable CA file is
    /// a [`crate::config::ConfigError`] (exit 2).
    pub fn from_settings(settings: &Settings) -> anyhow::Result<Self> {
        let key = SecretString::from(settings.require_gateway_api_key()?.to_owned());
        let extra_roots = match &settings.gateway_ca_file {
            Some(path) => crate::config::tls::read_ca_file(
                "gateway_ca_file (ONECHARGE_GATEWAY_CA_FILE)",
                path,
            )?,
            None => Vec::new(),
        };
        Ok(Self::for_kind(
            settings.gateway_kind,
            &settings.gateway_url,
            key,
            settings.gateway_connect_timeout,
            settings.gateway_request_timeout,
            extra_roots,
        )?
        .for_deployment(settings.deployment_name()?)
        .with_stripe_version(&settings.stripe_api_version))
    }

    /// The protocol this client speaks.
    pub fn kind(&self) -> GatewayKind {
        match self.connector {
            Connector::Onecharge(_) => GatewayKind::Onecharge,
            Connector::Stripe(_) => GatewayKind::Stripe,
        }
    }

    /// The first step of a two-step charge, for connectors whose lookup needs the id of an
    /// object made before the charging call (Stripe: a PaymentIntent created unconfirmed,
    /// which cannot charge). `None` when there is nothing to prepare: a §3 gateway, or an
    /// object already stored for the attempt. The caller stores the id under its lease
    /// before it calls [`GatewayClient::charge`] with it.
    pub async fn prepare(&self, request: &ChargeRequest) -> Option<GatewayCall<Prepared>> {
        match &self.connector {
            Connector::Onecharge(_) => None,
            Connector::Stripe(_) if request.gateway_object_id.is_some() => None,
            Connector::Stripe(stripe) => Some(stripe.create(&self.transport, request).await),
        }
    }

    /// The charging call, classified by the connector. Never fails: every transport
    /// problem is an outcome (not sent, or ambiguous). §3: `POST /v1/charges` with the
    /// request's key and bytes. Stripe: confirms the stored PaymentIntent off-session.
    ///
    /// One span per call, with the OpenTelemetry HTTP client attribute names; the caller's
    /// span (the executor's `execute`) carries the `payment_attempt_id`.
    pub async fn charge(&self, request: &ChargeRequest) -> GatewayCall<GatewayOutcome> {
        match &self.connector {
            Connector::Onecharge(onecharge) => onecharge.charge(&self.transport, request).await,
            Connector::Stripe(stripe) => stripe.confirm(&self.transport, request).await,
        }
    }

    /// Cancels the gateway object stored for an attempt (Stripe: `POST
    /// /v1/payment_intents/{id}/cancel` under `<stored key>-cancel`), so that a "not
    /// charged" said about it is proven: a canceled PaymentIntent can never be confirmed.
    /// `None` when there is nothing that could still charge: a §3 gateway (whose charge is
    /// one call), or no object stored (no confirm was ever sent).
    pub async fn cancel_object(
        &self,
        idempotency_key: &IdempotencyKey,
        gateway_object_id: Option<&str>,
    ) -> Option<GatewayCall<CancelOutcome>> {
        let (Connector::Stripe(stripe), Some(intent)) = (&self.connector, gateway_object_id) else {
            return None;
        };
        Some(
            stripe
                .cancel(&self.transport, idempotency_key, intent)
                .await,
        )
    }

    /// The charge (`ch_…`) of the PaymentIntent `intent` (Stripe), read by id: `None` for a
    /// connector without PaymentIntents. Never charges.
    pub async fn latest_charge_of(
        &self,
        intent: &str,
    ) -> Option<GatewayCall<Result<Option<String>, String>>> {
        match &self.connector {
            Connector::Stripe(stripe) => Some(stripe.latest_charge(&self.transport, intent).await),
            Connector::Onecharge(_) => None,
        }
    }

    /// `GET /v1/charges?idempotency_key=…` at a §3 gateway: the outcomes recorded under the
    /// key. Safe to repeat; never charges. For a Stripe client this is
    /// [`GatewayClient::lookup_attempt`] with no stored object.
    pub async fn lookup(&self, idempotency_key: &IdempotencyKey) -> GatewayCall<LookupOutcome> {
        self.lookup_attempt(idempotency_key, None).await
    }

    /// What the gateway holds for one attempt, asked in the connector's strongly consistent
    /// way: §3 by the attempt's idempotency key; Stripe by the id of the PaymentIntent stored
    /// for the attempt (`gateway_object_id`). A Stripe attempt with no stored PaymentIntent
    /// never had a confirm sent, so nothing can have charged: the answer is an empty list,
    /// given without a call (and said so in the call's `error`).
    pub async fn lookup_attempt(
        &self,
        idempotency_key: &IdempotencyKey,
        gateway_object_id: Option<&str>,
    ) -> GatewayCall<LookupOutcome> {
        match (&self.connector, gateway_object_id) {
            (Connector::Onecharge(onecharge), _) => {
                onecharge.lookup(&self.transport, idempotency_key).await
            }
            (Connector::Stripe(_), None) => GatewayCall::answered_locally(LookupOutcome::Found(Vec::new()), CallOperation::Lookup, None, Some(
                    "no HTTP call: no PaymentIntent was stored for this attempt, so no confirm was ever sent and nothing was charged".into(),
                )),
            (Connector::Stripe(stripe), Some(intent)) => {
                stripe.retrieve(&self.transport, idempotency_key, intent).await
            }
        }
    }
}

/// Sends `request`, reads the answer, classifies it with `classify`, and records the call's
/// metrics and span: the part every kind of gateway call shares.
///
/// One span per call (`gateway_call`), with the OpenTelemetry HTTP client attribute names;
/// the caller's span (the executor's `execute`) carries the `payment_attempt_id`.
async fn exchange<T>(
    request: reqwest::RequestBuilder,
    operation: CallOperation,
    sent_key: Option<IdempotencyKey>,
    classify: impl FnOnce(GatewayReply<'_>, Hints) -> T,
    label: impl Fn(&T) -> &'static str,
) -> GatewayCall<T> {
    let (http, request) = request.build_split();
    let span = tracing::info_span!(
        "gateway_call",
        operation = operation.as_str(),
        http.request.method = request.as_ref().ok().map(|r| r.method().as_str()),
        url.path = request.as_ref().ok().map(|r| r.url().path()),
        http.response.status_code = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    exchanged(http, request, operation, sent_key, classify, label)
        .instrument(span)
        .await
}

/// [`exchange`] inside the call's span: the call is timed from its sending.
async fn exchanged<T>(
    http: reqwest::Client,
    request: Result<reqwest::Request, reqwest::Error>,
    operation: CallOperation,
    sent_key: Option<IdempotencyKey>,
    classify: impl FnOnce(GatewayReply<'_>, Hints) -> T,
    label: impl Fn(&T) -> &'static str,
) -> GatewayCall<T> {
    let started = Instant::now();
    let permission = request
        .as_ref()
        .ok()
        .map(|r| Permission::of(r.method(), r.url().path()));
    let sent = match request {
        Ok(request) => http.execute(request).await,
        Err(err) => Err(err),
    };
    let (outcome, http_status, error) = match read(sent).await {
        Ok(raw) => (
            classify(
                GatewayReply::Answered {
                    status: raw.status,
                    replayed: raw.replayed,
                    retry_after: raw.retry_after.as_deref(),
                    body: &raw.body,
                },
                raw.hints,
            ),
            Some(raw.status),
            None,
        ),
        Err(Failure::NotSent(error)) => (
            classify(GatewayReply::NotSent { error: &error }, Hints::default()),
            None,
            Some(error),
        ),
        Err(Failure::Lost(error)) => (
            classify(GatewayReply::Lost { error: &error }, Hints::default()),
            None,
            Some(error),
        ),
    };
    let elapsed = started.elapsed();
    record_metrics(operation.as_str(), label(&outcome), elapsed);
    if http_status == Some(403) {
        permission::record_denied(operation.as_str(), permission.unwrap_or(Permission::Other));
    }
    record_span(http_status, label(&outcome), elapsed);
    GatewayCall {
        outcome,
        operation,
        sent_key,
        answered_locally: false,
        http_status,
        elapsed,
        error,
    }
}

/// Every call, by operation (`prepare`, `charge`, `lookup`) and classified outcome;
/// bounded labels.
fn record_metrics(operation: &'static str, outcome: &'static str, elapsed: Duration) {
    metrics::counter!("onecharge_gateway_calls_total", "operation" => operation, "outcome" => outcome)
        .increment(1);
    metrics::histogram!("onecharge_gateway_call_duration_seconds", "operation" => operation)
        .record(elapsed.as_secs_f64());
}

/// Completes the call's span and logs the call at debug level.
fn record_span(http_status: Option<u16>, outcome: &'static str, elapsed: Duration) {
    let span = tracing::Span::current();
    if let Some(status) = http_status {
        span.record("http.response.status_code", status);
    }
    span.record("outcome", outcome);
    tracing::debug!(
        elapsed_ms = elapsed.as_millis() as u64,
        "gateway call finished"
    );
}

/// Reads a whole response. A failure before the connection was established (refused, DNS,
/// connect timeout, a request that could not be built) is "not sent"; anything later —
/// a timeout, a connection closed before or while the answer arrived — may have charged.
async fn read(sent: Result<reqwest::Response, reqwest::Error>) -> Result<Raw, Failure> {
    let response = sent.map_err(|err| {
        let text = bounded(&error_chain(&err), MAX_ERROR_CHARS);
        if err.is_connect() || err.is_builder() {
            Failure::NotSent(text)
        } else {
            Failure::Lost(text)
        }
    })?;
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let replayed = header("Idempotent-Replayed").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let retry_after = header("Retry-After");
    let hints = Hints {
        should_retry: header("Stripe-Should-Retry").and_then(|v| match v.trim() {
            v if v.eq_ignore_ascii_case("true") => Some(true),
            v if v.eq_ignore_ascii_case("false") => Some(false),
            _ => None,
        }),
    };
    let body = response.bytes().await.map_err(|err| {
        Failure::Lost(bounded(
            &format!("HTTP {status}, body lost: {}", error_chain(&err)),
            MAX_ERROR_CHARS,
        ))
    })?;
    Ok(Raw {
        status,
        replayed,
        retry_after,
        hints,
        body: body.to_vec(),
    })
}

/// The error with its causes ("error sending request: connection closed before message
/// completed"), which reqwest's own `Display` leaves out. URLs carry no secret here.
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stripe_connector_builds_its_urls_under_gateway_url() {
        let client = GatewayClient::for_kind(
            GatewayKind::Stripe,
            "http://127.0.0.1:1/stripe",
            SecretString::from("sk_test_secret"),
            Duration::from_secs(1),
            Duration::from_secs(1),
            Vec::new(),
        )
        .unwrap();
        assert_eq!(client.kind(), GatewayKind::Stripe);
        let Connector::Stripe(endpoints) = &client.connector else {
            panic!("{client:?}")
        };
        assert_eq!(
            endpoints.create_url.as_str(),
            "http://127.0.0.1:1/stripe/v1/payment_intents"
        );
        assert_eq!(
            endpoints.confirm_url("pi_123").unwrap().as_str(),
            "http://127.0.0.1:1/stripe/v1/payment_intents/pi_123/confirm"
        );
        assert_eq!(
            endpoints.intent_url("pi_123").unwrap().as_str(),
            "http://127.0.0.1:1/stripe/v1/payment_intents/pi_123"
        );
        assert!(endpoints.confirm_url("pi_1/../../v1/charges").is_err());
        let text = format!("{client:?}");
        assert!(!text.contains("sk_test_secret"), "{text}");
        assert!(text.contains("stripe"), "{text}");
    }

    #[test]
    fn the_api_key_never_shows_in_debug() {
        let client = GatewayClient::new(
            "http://127.0.0.1:1",
            SecretString::from("sk_live_secret"),
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
        .unwrap();
        let text = format!("{client:?}");
        assert!(!text.contains("sk_live_secret"), "{text}");
        assert!(text.contains("/v1/charges"));
    }
}
