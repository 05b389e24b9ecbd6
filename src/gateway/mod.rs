//! The payment gateway's connector layer: one HTTP client, shared by every caller, that
//! speaks the wire protocol `gateway_kind` names (contract §3.1) — the §3 dialect
//! ([`onecharge`]) or Stripe's PaymentIntents ([`stripe`]) — plus the shared view of the
//! gateway's health (credentials pause, circuit breaker).
//!
//! What is generic lives here: timeouts, TLS, reading a response, the split between "not
//! sent" and "lost", metrics and spans. What is per connector lives in its module: the
//! requests, and a pure function per call that reads the answer into the existing outcomes
//! ([`GatewayOutcome`], [`LookupOutcome`]). The executor, reconciler, operator commands and
//! console never know which connector runs.
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
mod onecharge;
pub mod stripe;

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rustls::pki_types::CertificateDer;
use secrecy::{ExposeSecret as _, SecretString};
use serde::Serialize;
use tracing::Instrument as _;

pub use health::{Admission, BreakerState, GatewayHealth, HealthSnapshot};

use crate::config::Settings;
use crate::domain::outcome::{GatewayOutcome, GatewayReply, LookupOutcome};
use crate::domain::{bounded, CallOperation, IdempotencyKey};

/// Longest transport error text kept (it goes to `gateway_calls.error`, bounded at 1024).
const MAX_ERROR_CHARS: usize = 1000;

pub use crate::config::GatewayKind;

/// One pooled HTTP client for the gateway. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct GatewayClient {
    http: reqwest::Client,
    connector: Connector,
    api_key: SecretString,
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

/// A charge ready to send: the stored idempotency key, the serialised §3 body, and what
/// other connectors need besides (the order id, the gateway object stored for the attempt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeRequest {
    pub idempotency_key: String,
    body: Vec<u8>,
    charge: ChargeBody,
    order_id: Option<String>,
    gateway_object_id: Option<String>,
    /// Which derived key each step sends (`payment_attempts.create_key_seq`,
    /// `confirm_key_seq`; Stripe): 1 is the first.
    key_seq: KeySeq,
}

/// The sequence numbers of the derived keys an attempt sends next (Stripe's
/// `<key>-create[-N]`, `<key>-confirm[-N]`), stored with the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySeq {
    pub create: i32,
    pub confirm: i32,
}

impl Default for KeySeq {
    fn default() -> Self {
        Self {
            create: 1,
            confirm: 1,
        }
    }
}

impl ChargeRequest {
    /// Serialises `body` once; the bytes are what every try sends.
    pub fn new(idempotency_key: impl Into<String>, body: &ChargeBody) -> Self {
        Self {
            idempotency_key: idempotency_key.into(),
            body: serde_json::to_vec(body).expect("a charge body always serialises"),
            charge: body.clone(),
            order_id: None,
            gateway_object_id: None,
            key_seq: KeySeq::default(),
        }
    }

    /// The derived keys' sequence numbers stored with the attempt.
    pub fn with_key_seq(mut self, key_seq: KeySeq) -> Self {
        self.key_seq = key_seq;
        self
    }

    /// The attempt's order id (Stripe carries it in the PaymentIntent's metadata; the §3
    /// body has no place for it, so its bytes do not change).
    pub fn for_order(mut self, order_id: impl Into<String>) -> Self {
        self.order_id = Some(order_id.into());
        self
    }

    /// The gateway object stored for the attempt (`payment_attempts.gateway_object_id`,
    /// Stripe's PaymentIntent id), if one was: then nothing is prepared again.
    pub fn with_gateway_object(mut self, id: Option<String>) -> Self {
        self.gateway_object_id = id;
        self
    }

    /// The exact bytes sent to a §3 gateway.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The charge's fields.
    pub fn charge(&self) -> &ChargeBody {
        &self.charge
    }

    /// The stored gateway object, if any.
    pub fn gateway_object_id(&self) -> Option<&str> {
        self.gateway_object_id.as_deref()
    }
}

/// What cancelling the gateway object stored for an attempt came to
/// ([`GatewayClient::cancel_object`]): the proof behind every "not charged" a Stripe
/// attempt with a stored PaymentIntent may announce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The object is canceled and can never charge: "not charged" is proven.
    Canceled { charge_id: String },
    /// It had already charged: adopt that.
    Succeeded { charge_id: String },
    /// It is processing at the gateway and may still charge: the attempt stays `unknown`.
    Processing { charge_id: String },
    /// No proof either way (no answer, an error, another state): the attempt stays where it
    /// is and the cancel is tried again; nothing is announced.
    Unproven { reason: String },
}

impl CancelOutcome {
    /// A bounded label for metrics and `gateway_calls.outcome`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Canceled { .. } => "canceled",
            Self::Succeeded { .. } => "succeeded",
            Self::Processing { .. } => "processing",
            Self::Unproven { .. } => "not_canceled",
        }
    }

    /// The object's id, when the gateway named it.
    pub fn charge_id(&self) -> Option<&str> {
        match self {
            Self::Canceled { charge_id }
            | Self::Succeeded { charge_id }
            | Self::Processing { charge_id } => Some(charge_id),
            Self::Unproven { .. } => None,
        }
    }
}

impl GatewayCall<CancelOutcome> {
    /// This cancel's `gateway_calls` row, for the attempt whose stored key is `stored_key`,
    /// made on try `try_number` under `lease_token` (none for a person's), started at
    /// `started_at` by the database's clock.
    pub fn evidence(
        &self,
        payment_attempt_id: crate::domain::PaymentAttemptId,
        stored_key: &IdempotencyKey,
        try_number: i32,
        lease_token: Option<crate::domain::LeaseToken>,
        started_at: time::OffsetDateTime,
    ) -> crate::domain::GatewayCallRecord {
        crate::domain::GatewayCallRecord {
            payment_attempt_id,
            operation: self.operation,
            idempotency_key: self.sent_key.clone().unwrap_or_else(|| stored_key.clone()),
            try_number,
            lease_token,
            started_at,
            finished_at: started_at + self.elapsed,
            http_status: self.http_status,
            outcome: self.outcome.label().to_owned(),
            gateway_charge_id: self.outcome.charge_id().map(str::to_owned),
            error: match &self.outcome {
                CancelOutcome::Unproven { reason } => Some(reason.clone()),
                _ => self.error.clone(),
            },
        }
    }
}

/// What the first step of a two-step charge came to ([`GatewayClient::prepare`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// The gateway holds an object that cannot charge until it is confirmed; its id must be
    /// stored (fenced) before the charging call.
    Object { id: String },
    /// The object was not made; the outcome says what the attempt does next. None of these
    /// can have charged.
    Refused(GatewayOutcome),
}

impl Prepared {
    /// A bounded label for metrics and `gateway_calls.outcome`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Object { .. } => "prepared",
            Self::Refused(outcome) => outcome.label(),
        }
    }
}

impl<T> GatewayCall<T> {
    /// A call onecharge answered itself, sending nothing (`operation` under `sent_key`, had
    /// it been sent): it took no time and says nothing of the gateway.
    fn answered_locally(
        outcome: T,
        operation: CallOperation,
        sent_key: Option<String>,
        error: Option<String>,
    ) -> Self {
        GatewayCall {
            outcome,
            operation,
            sent_key: sent_key.map(IdempotencyKey::sent),
            http_status: None,
            elapsed: Duration::ZERO,
            answered_locally: true,
            error,
        }
    }

    /// A call onecharge refused to send for `reason` (a request it cannot build): the
    /// outcome `refused` makes of the reason, with `not sent: <reason>` as the call's error.
    fn refused_locally(
        refused: impl FnOnce(String) -> T,
        operation: CallOperation,
        sent_key: Option<String>,
        reason: String,
    ) -> Self {
        let error = format!("not sent: {reason}");
        Self::answered_locally(refused(reason), operation, sent_key, Some(error))
    }
}

/// What one gateway call came to, with the evidence `gateway_calls` records.
#[derive(Debug, Clone)]
pub struct GatewayCall<T> {
    /// The classified answer.
    pub outcome: T,
    /// `prepare`, `charge` or `lookup`: the `gateway_calls.operation` of this call.
    pub operation: CallOperation,
    /// The `Idempotency-Key` this call sent, when it is not the attempt's stored key
    /// itself (Stripe's derived keys); `None` for the stored key or no key.
    pub sent_key: Option<IdempotencyKey>,
    /// Answered by onecharge itself, with no request sent (Stripe with no stored
    /// PaymentIntent, an amount Stripe cannot take): says nothing of the gateway's health.
    pub answered_locally: bool,
    /// The HTTP status, when a response arrived.
    pub http_status: Option<u16>,
    /// Wall time from sending to the classified answer.
    pub elapsed: Duration,
    /// The transport error, bounded, when no complete response arrived (or, for an answer
    /// given without a call, why none was needed).
    pub error: Option<String>,
}

/// Headers some connectors read besides the status and body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    /// Stripe's `Stripe-Should-Retry`, when present.
    pub should_retry: Option<bool>,
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
            connector,
            api_key,
        })
    }

    /// The client configured by `gateway_kind`, `gateway_url`, `gateway_api_key`,
    /// `gateway_ca_file` and the gateway timeouts. A missing key or an unusable CA file is
    /// a [`crate::config::ConfigError`] (exit 2).
    pub fn from_settings(settings: &Settings) -> anyhow::Result<Self> {
        let key = SecretString::from(settings.require_gateway_api_key()?.to_owned());
        let extra_roots = match &settings.gateway_ca_file {
            Some(path) => {
                crate::tls::read_ca_file("gateway_ca_file (ONECHARGE_GATEWAY_CA_FILE)", path)?
            }
            None => Vec::new(),
        };
        Self::for_kind(
            settings.gateway_kind,
            &settings.gateway_url,
            key,
            settings.gateway_connect_timeout,
            settings.gateway_request_timeout,
            extra_roots,
        )
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
            Connector::Stripe(endpoints) => Some(self.stripe_create(endpoints, request).await),
        }
    }

    async fn stripe_create(
        &self,
        endpoints: &stripe::Endpoints,
        request: &ChargeRequest,
    ) -> GatewayCall<Prepared> {
        let key = stripe::create_key_at(&request.idempotency_key, request.key_seq.create);
        let form = match stripe::create_form(request) {
            Ok(form) => form,
            // Refused before sending: nothing left this process.
            Err(reason) => {
                return GatewayCall::refused_locally(
                    |reason| Prepared::Refused(GatewayOutcome::NeedsReview { reason }),
                    CallOperation::Prepare,
                    Some(key),
                    reason,
                )
            }
        };
        exchange(
            self.stripe_post(endpoints.create_url.clone(), &key, form),
            CallOperation::Prepare,
            Some(key),
            stripe::classify_create,
            Prepared::label,
        )
        .await
    }

    /// The charging call, classified by the connector. Never fails: every transport
    /// problem is an outcome (not sent, or ambiguous). §3: `POST /v1/charges` with the
    /// request's key and bytes. Stripe: confirms the stored PaymentIntent off-session.
    ///
    /// One span per call, with the OpenTelemetry HTTP client attribute names; the caller's
    /// span (the executor's `execute`) carries the `payment_attempt_id`.
    pub async fn charge(&self, request: &ChargeRequest) -> GatewayCall<GatewayOutcome> {
        match &self.connector {
            Connector::Onecharge(endpoints) => self.onecharge_charge(endpoints, request).await,
            Connector::Stripe(endpoints) => self.stripe_confirm(endpoints, request).await,
        }
    }

    async fn onecharge_charge(
        &self,
        endpoints: &onecharge::Endpoints,
        request: &ChargeRequest,
    ) -> GatewayCall<GatewayOutcome> {
        exchange(
            self.http
                .post(endpoints.charges_url.clone())
                .bearer_auth(self.api_key.expose_secret())
                .header("Idempotency-Key", &request.idempotency_key)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(request.body.clone()),
            CallOperation::Charge,
            None,
            |reply, _| onecharge::classify_charge(reply),
            GatewayOutcome::label,
        )
        .await
    }

    async fn stripe_confirm(
        &self,
        endpoints: &stripe::Endpoints,
        request: &ChargeRequest,
    ) -> GatewayCall<GatewayOutcome> {
        let key = stripe::confirm_key_at(&request.idempotency_key, request.key_seq.confirm);
        let Some(intent) = request.gateway_object_id.as_deref() else {
            // The executor confirms only what it stored; reaching here is a bug, and
            // nothing was sent.
            return GatewayCall::answered_locally(
                GatewayOutcome::NotSent {
                    reason: "no PaymentIntent is stored for this attempt yet: nothing to confirm"
                        .into(),
                },
                CallOperation::Charge,
                Some(key),
                None,
            );
        };
        let url = match endpoints.confirm_url(intent) {
            Ok(url) => url,
            Err(reason) => {
                return GatewayCall::refused_locally(
                    |reason| GatewayOutcome::NeedsReview { reason },
                    CallOperation::Charge,
                    Some(key),
                    reason,
                )
            }
        };
        exchange(
            self.stripe_post(url, &key, stripe::confirm_form()),
            CallOperation::Charge,
            Some(key),
            |reply, hints| stripe::classify_confirm(reply, hints, intent),
            GatewayOutcome::label,
        )
        .await
    }

    /// Cancels the gateway object stored for an attempt (Stripe: `POST
    /// /v1/payment_intents/{id}/cancel` under `<stored key>-cancel`), so that a "not
    /// charged" said about it is proven: a canceled PaymentIntent can never be confirmed.
    /// `None` when there is nothing that could still charge: a §3 gateway (whose charge is
    /// one call), or no object stored (no confirm was ever sent).
    pub async fn cancel_object(
        &self,
        idempotency_key: &str,
        gateway_object_id: Option<&str>,
    ) -> Option<GatewayCall<CancelOutcome>> {
        let (Connector::Stripe(endpoints), Some(intent)) = (&self.connector, gateway_object_id)
        else {
            return None;
        };
        let key = stripe::cancel_key(idempotency_key);
        let url = match endpoints.intent_url(intent) {
            Ok(url) => {
                let mut url = url;
                let path = format!("{}/cancel", url.path());
                url.set_path(&path);
                url
            }
            Err(reason) => {
                return Some(GatewayCall::refused_locally(
                    |reason| CancelOutcome::Unproven { reason },
                    CallOperation::Cancel,
                    Some(key),
                    reason,
                ))
            }
        };
        Some(
            exchange(
                self.stripe_post(url, &key, stripe::cancel_form()),
                CallOperation::Cancel,
                Some(key),
                |reply, _| stripe::classify_cancel(reply, intent),
                CancelOutcome::label,
            )
            .await,
        )
    }

    /// `GET /v1/charges?idempotency_key=…` at a §3 gateway: the outcomes recorded under the
    /// key. Safe to repeat; never charges. For a Stripe client this is
    /// [`GatewayClient::lookup_attempt`] with no stored object.
    pub async fn lookup(&self, idempotency_key: &str) -> GatewayCall<LookupOutcome> {
        self.lookup_attempt(idempotency_key, None).await
    }

    /// What the gateway holds for one attempt, asked in the connector's strongly consistent
    /// way: §3 by the attempt's idempotency key; Stripe by the id of the PaymentIntent stored
    /// for the attempt (`gateway_object_id`). A Stripe attempt with no stored PaymentIntent
    /// never had a confirm sent, so nothing can have charged: the answer is an empty list,
    /// given without a call (and said so in the call's `error`).
    pub async fn lookup_attempt(
        &self,
        idempotency_key: &str,
        gateway_object_id: Option<&str>,
    ) -> GatewayCall<LookupOutcome> {
        match (&self.connector, gateway_object_id) {
            (Connector::Onecharge(endpoints), _) => {
                self.onecharge_lookup(endpoints, idempotency_key).await
            }
            (Connector::Stripe(_), None) => GatewayCall::answered_locally(LookupOutcome::Found(Vec::new()), CallOperation::Lookup, None, Some(
                    "no HTTP call: no PaymentIntent was stored for this attempt, so no confirm was ever sent and nothing was charged".into(),
                )),
            (Connector::Stripe(endpoints), Some(intent)) => {
                self.stripe_retrieve(endpoints, idempotency_key, intent).await
            }
        }
    }

    async fn onecharge_lookup(
        &self,
        endpoints: &onecharge::Endpoints,
        idempotency_key: &str,
    ) -> GatewayCall<LookupOutcome> {
        exchange(
            self.http
                .get(endpoints.charges_url.clone())
                .query(&[("idempotency_key", idempotency_key)])
                .bearer_auth(self.api_key.expose_secret()),
            CallOperation::Lookup,
            None,
            |reply, _| onecharge::classify_lookup(reply),
            LookupOutcome::label,
        )
        .await
    }

    async fn stripe_retrieve(
        &self,
        endpoints: &stripe::Endpoints,
        idempotency_key: &str,
        intent: &str,
    ) -> GatewayCall<LookupOutcome> {
        let url = match endpoints.intent_url(intent) {
            Ok(url) => url,
            Err(reason) => {
                return GatewayCall::refused_locally(
                    |reason| LookupOutcome::Failed { reason },
                    CallOperation::Lookup,
                    None,
                    reason,
                )
            }
        };
        exchange(
            self.http
                .get(url)
                .bearer_auth(self.api_key.expose_secret())
                .header("Stripe-Version", stripe::STRIPE_VERSION),
            CallOperation::Lookup,
            None,
            |reply, _| stripe::classify_retrieve(reply, idempotency_key),
            LookupOutcome::label,
        )
        .await
    }

    /// A form-encoded Stripe POST under `key`, with the pinned `Stripe-Version`.
    fn stripe_post(
        &self,
        url: reqwest::Url,
        key: &str,
        form: Vec<(&'static str, String)>,
    ) -> reqwest::RequestBuilder {
        self.http
            .post(url)
            .bearer_auth(self.api_key.expose_secret())
            .header("Idempotency-Key", key)
            .header("Stripe-Version", stripe::STRIPE_VERSION)
            .form(&form)
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
    sent_key: Option<String>,
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
    sent_key: Option<String>,
    classify: impl FnOnce(GatewayReply<'_>, Hints) -> T,
    label: impl Fn(&T) -> &'static str,
) -> GatewayCall<T> {
    let started = Instant::now();
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
    record_span(http_status, label(&outcome), elapsed);
    GatewayCall {
        outcome,
        operation,
        sent_key: sent_key.map(IdempotencyKey::sent),
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
