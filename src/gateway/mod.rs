//! The payment gateway's HTTP client (contract §3) and the shared view of the gateway's
//! health (credentials pause, circuit breaker).
//!
//! Invariants:
//! - The client never touches the database and never decides what an answer means: it turns
//!   the wire into a [`GatewayReply`] and [`crate::domain::outcome`] classifies it.
//! - A charge request is built once from the stored attempt ([`ChargeRequest`]); every try
//!   sends the same bytes under the same stored `Idempotency-Key`.
//! - The bearer key lives in a [`SecretString`] and is never logged or printed (`Debug` of
//!   the client redacts it; reqwest marks the header sensitive).

mod health;

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rustls::pki_types::CertificateDer;
use secrecy::{ExposeSecret as _, SecretString};
use serde::Serialize;

pub use health::{Admission, BreakerState, GatewayHealth, HealthSnapshot};

use crate::config::Settings;
use crate::domain::bounded;
use crate::domain::outcome::{
    classify_charge, classify_lookup, GatewayOutcome, GatewayReply, LookupOutcome,
};

/// Longest transport error text kept (it goes to `gateway_calls.error`, bounded at 1024).
const MAX_ERROR_CHARS: usize = 1000;

/// One pooled HTTP client for the gateway. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct GatewayClient {
    http: reqwest::Client,
    charges_url: reqwest::Url,
    api_key: SecretString,
}

impl fmt::Debug for GatewayClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewayClient")
            .field("charges_url", &self.charges_url.as_str())
            .field("api_key", &"[REDACTED]")
            .finish()
    }
}

/// The body of `POST /v1/charges`, in the contract's field order. Built from the stored
/// attempt only, so every try serialises to the same bytes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ChargeBody {
    pub amount_minor: i64,
    pub currency: String,
    pub customer_id: String,
    pub payment_method: String,
    /// The `payment_attempt_id`, which an operator searches the gateway for.
    pub reference: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A charge ready to send: the stored idempotency key and the serialised body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeRequest {
    pub idempotency_key: String,
    body: Vec<u8>,
}

impl ChargeRequest {
    /// Serialises `body` once; the bytes are what every try sends.
    pub fn new(idempotency_key: impl Into<String>, body: &ChargeBody) -> Self {
        Self {
            idempotency_key: idempotency_key.into(),
            body: serde_json::to_vec(body).expect("a charge body always serialises"),
        }
    }

    /// The exact bytes sent.
    pub fn body(&self) -> &[u8] {
        &self.body
    }
}

/// What one gateway call came to, with the evidence `gateway_calls` records.
#[derive(Debug, Clone)]
pub struct GatewayCall<T> {
    /// The classified answer.
    pub outcome: T,
    /// The HTTP status, when a response arrived.
    pub http_status: Option<u16>,
    /// Wall time from sending to the classified answer.
    pub elapsed: Duration,
    /// The transport error, bounded, when no complete response arrived.
    pub error: Option<String>,
}

/// A raw answer before classification.
struct Raw {
    status: u16,
    replayed: bool,
    retry_after: Option<String>,
    body: Vec<u8>,
}

/// A transport failure, split by whether the request can have reached the gateway.
enum Failure {
    NotSent(String),
    Lost(String),
}

impl GatewayClient {
    /// A client for the gateway at `base_url` (e.g. `http://127.0.0.1:8080`), with a connect
    /// timeout (a connect failure is "not sent") and a whole-request timeout (past it the
    /// answer is ambiguous). Redirects are not followed: a charge is never re-sent elsewhere.
    /// `https://` trusts the system's roots only; see [`GatewayClient::with_extra_roots`].
    pub fn new(
        base_url: &str,
        api_key: SecretString,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> anyhow::Result<Self> {
        Self::with_extra_roots(
            base_url,
            api_key,
            connect_timeout,
            request_timeout,
            Vec::new(),
        )
    }

    /// [`GatewayClient::new`], trusting `extra_roots` (a private CA) besides the system's
    /// roots for an `https://` gateway. A TLS handshake the gateway fails (an untrusted
    /// certificate) happens before any byte of the request is sent: it is "not sent".
    pub fn with_extra_roots(
        base_url: &str,
        api_key: SecretString,
        connect_timeout: Duration,
        request_timeout: Duration,
        extra_roots: Vec<CertificateDer<'static>>,
    ) -> anyhow::Result<Self> {
        let mut base = reqwest::Url::parse(base_url)
            .with_context(|| format!("gateway_url `{base_url}` is not a URL"))?;
        // `http://host/api` means `http://host/api/v1/charges`, not `http://host/v1/charges`.
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let charges_url = base.join("v1/charges").with_context(|| {
            format!("gateway_url `{base_url}` cannot take the path /v1/charges")
        })?;
        let extra_roots = extra_roots
            .iter()
            .map(|der| reqwest::Certificate::from_der(der))
            .collect::<Result<Vec<_>, _>>()
            .context("reading the gateway's CA certificates")?;
        crate::tls::install_crypto_provider();
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
            http,
            charges_url,
            api_key,
        })
    }

    /// The client configured by `gateway_url`, `gateway_api_key`, `gateway_ca_file` and the
    /// gateway timeouts. A missing key or an unusable CA file is a
    /// [`crate::config::ConfigError`] (exit 2).
    pub fn from_settings(settings: &Settings) -> anyhow::Result<Self> {
        let key = SecretString::from(settings.require_gateway_api_key()?.to_owned());
        let extra_roots = match &settings.gateway_ca_file {
            Some(path) => {
                crate::tls::read_ca_file("gateway_ca_file (ONECHARGE_GATEWAY_CA_FILE)", path)?
            }
            None => Vec::new(),
        };
        Self::with_extra_roots(
            &settings.gateway_url,
            key,
            settings.gateway_connect_timeout,
            settings.gateway_request_timeout,
            extra_roots,
        )
    }

    /// `POST /v1/charges` with the request's key and bytes, classified per contract §3.
    /// Never fails: every transport problem is an outcome (not sent, or ambiguous).
    ///
    /// One span per call, with the OpenTelemetry HTTP client attribute names; the caller's
    /// span (the executor's `execute`) carries the `payment_attempt_id`.
    #[tracing::instrument(name = "gateway_call", skip_all, fields(
        operation = "charge",
        http.request.method = "POST",
        url.path = self.charges_url.path(),
        http.response.status_code = tracing::field::Empty,
        outcome = tracing::field::Empty,
    ))]
    pub async fn charge(&self, request: &ChargeRequest) -> GatewayCall<GatewayOutcome> {
        let started = Instant::now();
        let sent = self
            .http
            .post(self.charges_url.clone())
            .bearer_auth(self.api_key.expose_secret())
            .header("Idempotency-Key", &request.idempotency_key)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(request.body.clone())
            .send()
            .await;
        finish(
            "charge",
            started,
            sent,
            classify_charge,
            GatewayOutcome::label,
        )
        .await
    }

    /// `GET /v1/charges?idempotency_key=…`: the outcomes recorded under the key. Safe to
    /// repeat; never charges. Its span is like [`GatewayClient::charge`]'s; the caller's
    /// (the reconciler's `reconcile`) carries the `payment_attempt_id`.
    #[tracing::instrument(name = "gateway_call", skip_all, fields(
        operation = "lookup",
        http.request.method = "GET",
        url.path = self.charges_url.path(),
        http.response.status_code = tracing::field::Empty,
        outcome = tracing::field::Empty,
    ))]
    pub async fn lookup(&self, idempotency_key: &str) -> GatewayCall<LookupOutcome> {
        let started = Instant::now();
        let sent = self
            .http
            .get(self.charges_url.clone())
            .query(&[("idempotency_key", idempotency_key)])
            .bearer_auth(self.api_key.expose_secret())
            .send()
            .await;
        finish(
            "lookup",
            started,
            sent,
            classify_lookup,
            LookupOutcome::label,
        )
        .await
    }
}

/// Reads the answer to a sent request, classifies it with `classify`, and records the
/// call's metrics and span: the part every kind of gateway call shares.
async fn finish<T>(
    operation: &'static str,
    started: Instant,
    sent: Result<reqwest::Response, reqwest::Error>,
    classify: impl Fn(GatewayReply<'_>) -> T,
    label: impl Fn(&T) -> &'static str,
) -> GatewayCall<T> {
    let (outcome, http_status, error) = match read(sent).await {
        Ok(raw) => (
            classify(GatewayReply::Answered {
                status: raw.status,
                replayed: raw.replayed,
                retry_after: raw.retry_after.as_deref(),
                body: &raw.body,
            }),
            Some(raw.status),
            None,
        ),
        Err(Failure::NotSent(error)) => (
            classify(GatewayReply::NotSent { error: &error }),
            None,
            Some(error),
        ),
        Err(Failure::Lost(error)) => (
            classify(GatewayReply::Lost { error: &error }),
            None,
            Some(error),
        ),
    };
    let elapsed = started.elapsed();
    record_metrics(operation, label(&outcome), elapsed);
    record_span(http_status, label(&outcome), elapsed);
    GatewayCall {
        outcome,
        http_status,
        elapsed,
        error,
    }
}

/// Every call, by operation (`charge`, `lookup`) and classified outcome; bounded labels.
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
    fn the_charge_body_is_the_contracts_shape_and_stable() {
        let body = ChargeBody {
            amount_minor: 1999,
            currency: "EUR".into(),
            customer_id: "cus_42".into(),
            payment_method: "pm_card_visa".into(),
            reference: "6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11".into(),
            description: Some("Order ord_1001".into()),
        };
        let request = ChargeRequest::new("onecharge-x", &body);
        assert_eq!(
            std::str::from_utf8(request.body()).unwrap(),
            r#"{"amount_minor":1999,"currency":"EUR","customer_id":"cus_42","payment_method":"pm_card_visa","reference":"6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11","description":"Order ord_1001"}"#
        );
        assert_eq!(ChargeRequest::new("onecharge-x", &body), request);
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
