//! localstripe (PyPI), a stateful Stripe fake that no one here wrote, run as a child process
//! on a free port for one test and killed when the test drops it.
//!
//! Where the executable comes from: `LOCALSTRIPE_BIN` (set by `.ci/run`), else the
//! virtualenv `.ci/run` installs (`.ci/venv-localstripe`). When neither is there, CI (`CI`
//! set) fails the test with how to install it; a developer's run skips it, saying so on the
//! process's stderr, which the test harness does not swallow.
//!
//! What the pinned localstripe (1.15.10) is, read from its source and tried by hand, so that
//! the tests built on it know what it can and cannot check:
//! - routes: `POST /v1/customers`, `POST /v1/payment_methods`, `POST /v1/payment_intents`,
//!   `POST /v1/payment_intents/{id}/confirm`, `GET /v1/payment_intents/{id}`; bodies are
//!   form-encoded (`metadata[k]=v` nests); any `Bearer sk_…` key is accepted, no key is a 401.
//! - It rejects parameters it does not know with 400 "Unexpected <name>": a PaymentIntent's
//!   `description`, and `off_session` on `/confirm` (it takes `off_session` only on a create
//!   with `confirm=true`), although Stripe's API reference documents both.
//! - It reads no header but `Authorization`: `Idempotency-Key` and `Stripe-Version` are
//!   ignored, so it replays nothing and any re-sent POST acts again.
//! - A `customer` must exist (404 otherwise, where Stripe answers 400 `resource_missing`), so
//!   customers are created first.
//! - Test payment methods: only `pm_card_visa`, `pm_card_visa_chargeDeclined` and
//!   `pm_card_chargeCustomerFail` are known. `pm_card_visa_chargeDeclined` *succeeds* on a
//!   PaymentIntent (localstripe declines card 4000000000000002 only when it is attached), so a
//!   charge decline is `pm_card_chargeCustomerFail` (card 4000000000000341). Cards that need
//!   authentication are created from their number with `POST /v1/payment_methods`.
//! - A decline is HTTP 402 with `error.type = "invalid_request_error"` and `error.code =
//!   "card_declined"`, without `decline_code`, where Stripe sends `type = "card_error"` and a
//!   `decline_code`; the PaymentIntent goes back to `requires_payment_method` with
//!   `last_payment_error.code = "card_declined"`.
//! - A card that needs authentication leaves the PaymentIntent in `requires_action` (200) even
//!   off-session, where Stripe answers 402 `authentication_required`.
//! - A SEPA Direct Debit (`type=sepa_debit`) that succeeds is `succeeded` at once; the failing
//!   IBAN `DE62370400440532013001` confirms to `processing` and 0.5 s later goes back to
//!   `requires_payment_method` with `last_payment_error.code = "card_declined"`. That is the
//!   only `processing` localstripe answers.
//! - `latest_charge` comes back as the whole Charge object, where Stripe (since API version
//!   2022-11-15) returns its id unless expanded.
//! - Confirming a PaymentIntent that is no longer `requires_confirmation` is a bare 400
//!   "Bad request" (Stripe: 400 `payment_intent_unexpected_state`).
//! - It writes its whole state to `/tmp/localstripe.pickle` after every change; started with
//!   `--from-scratch` it never reads it back, so concurrent instances do not share state.
//!
//! [`Shim`] stands between onecharge and localstripe where the two disagree because
//! localstripe is narrower than Stripe's documentation: it drops the documented parameters
//! localstripe refuses (and records that they were sent), and gives a decline the documented
//! error type. Everything else passes through untouched, and every request is recorded.
#![allow(dead_code)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse as _, Response};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::nats_server::free_port;

/// Any `sk_…` key opens localstripe.
pub const API_KEY: &str = "sk_test_localstripe";

/// How to install localstripe, said whenever it cannot be found.
const HOW_TO_INSTALL: &str = "install it with `bash .ci/run` (it puts the version pinned in \
    .ci/localstripe-requirements.txt into .ci/venv-localstripe), or with `python3 -m venv \
    .ci/venv-localstripe && .ci/venv-localstripe/bin/pip install -r \
    .ci/localstripe-requirements.txt`, or point LOCALSTRIPE_BIN at a localstripe executable";

/// How long localstripe may take to answer after it was started.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// A running localstripe, killed on drop.
pub struct Localstripe {
    /// Its base URL, e.g. `http://127.0.0.1:40123`: what `gateway_url` is set to.
    pub url: String,
    child: Child,
    log: tempfile::NamedTempFile,
    http: reqwest::Client,
}

use super::env::in_ci;

/// The localstripe executable, or why there is none.
fn executable() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("LOCALSTRIPE_BIN") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("LOCALSTRIPE_BIN={} is not a file", path.display()))
        };
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/venv-localstripe/bin/localstripe");
    if venv.is_file() {
        Ok(venv)
    } else {
        Err(format!(
            "localstripe is not installed at {} and LOCALSTRIPE_BIN is not set",
            venv.display()
        ))
    }
}

impl Localstripe {
    /// Starts localstripe and waits until it answers. `None` only outside CI when it is not
    /// installed (the reason is printed); in CI that panics with how to install it.
    pub async fn start() -> Option<Self> {
        onecharge::config::tls::install_crypto_provider();
        let program = match executable() {
            Ok(program) => program,
            Err(why) if in_ci() => panic!("{why}: {HOW_TO_INSTALL}"),
            Err(why) => {
                // Straight to the process's stderr: libtest captures `eprintln!`, and a skip
                // must not be silent.
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED (not in CI): {why}; {HOW_TO_INSTALL}"
                );
                return None;
            }
        };
        // The port is free when chosen but could be taken before localstripe binds it: a
        // localstripe that exits at once is started again on another port.
        let mut last_log = String::new();
        for _ in 0..3 {
            match Self::spawn(&program).await {
                Ok(running) => return Some(running),
                Err(log) => last_log = log,
            }
        }
        panic!(
            "localstripe ({}) did not start; its output:\n{last_log}",
            program.display()
        );
    }

    /// One try: spawn on a free port, poll until it answers. `Err(its output)` when it exited.
    async fn spawn(program: &Path) -> Result<Self, String> {
        let port = free_port();
        let log = tempfile::NamedTempFile::new().expect("a log file for localstripe");
        let child = Command::new(program)
            .args(["--port", &port.to_string(), "--from-scratch"])
            .stdin(Stdio::null())
            .stdout(log.reopen().expect("log file"))
            .stderr(log.reopen().expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}; {HOW_TO_INSTALL}", program.display()));
        let mut running = Self {
            url: format!("http://127.0.0.1:{port}"),
            child,
            log,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("a reqwest client"),
        };
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if running
                .child
                .try_wait()
                .expect("localstripe's status")
                .is_some()
            {
                return Err(running.output());
            }
            let probe = running
                .http
                .get(format!("{}/v1/customers", running.url))
                .bearer_auth(API_KEY)
                .timeout(Duration::from_millis(500))
                .send()
                .await;
            if probe.is_ok_and(|r| r.status().is_success()) {
                return Ok(running);
            }
            assert!(
                Instant::now() < deadline,
                "localstripe did not answer within {START_DEADLINE:?}; its output:\n{}",
                running.output()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What localstripe printed so far (its access log and errors), for failure messages.
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// `POST {path}` with a form body; the JSON answer, whatever its status.
    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> (u16, Value) {
        let body = form
            .iter()
            .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let request = self
            .http
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        answer(request, &format!("POST {path} to localstripe")).await
    }

    /// `GET {path}`; the JSON answer, whatever its status.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let request = self.http.get(format!("{}{path}", self.url));
        answer(request, &format!("GET {path} from localstripe")).await
    }

    /// Creates a customer and returns its id (`cus_…`): a PaymentIntent's customer must exist.
    pub async fn create_customer(&self, name: &str) -> String {
        let (status, customer) = self.post("/v1/customers", &[("name", name)]).await;
        assert_eq!(status, 200, "create customer: {customer}");
        customer["id"].as_str().expect("a customer id").to_owned()
    }

    /// Creates a card payment method from a Stripe test card number; returns its id (`pm_…`).
    pub async fn create_card(&self, number: &str) -> String {
        self.create_payment_method(&[
            ("type", "card"),
            ("card[number]", number),
            ("card[exp_month]", "12"),
            ("card[exp_year]", "2034"),
            ("card[cvc]", "123"),
        ])
        .await
    }

    /// Creates a SEPA Direct Debit payment method from an IBAN; returns its id (`pm_…`).
    /// `DE62370400440532013001` is localstripe's failing IBAN: `processing`, then failed.
    pub async fn create_sepa_debit(&self, iban: &str) -> String {
        self.create_payment_method(&[("type", "sepa_debit"), ("sepa_debit[iban]", iban)])
            .await
    }

    /// Creates a payment method from its form; returns its id (`pm_…`).
    async fn create_payment_method(&self, form: &[(&str, &str)]) -> String {
        let (status, method) = self.post("/v1/payment_methods", form).await;
        assert_eq!(status, 200, "create payment method: {method}");
        method["id"]
            .as_str()
            .expect("a payment method id")
            .to_owned()
    }

    /// Retrieves a PaymentIntent by id, as Stripe's dashboard or API would show it.
    pub async fn payment_intent(&self, id: &str) -> Value {
        let (status, intent) = self.get(&format!("/v1/payment_intents/{id}")).await;
        assert_eq!(status, 200, "retrieve {id}: {intent}");
        intent
    }

    /// Every PaymentIntent localstripe holds (it lists at most 10 unless asked for more).
    pub async fn payment_intents(&self) -> Vec<Value> {
        let (status, list) = self.get("/v1/payment_intents?limit=100").await;
        assert_eq!(status, 200, "list payment intents: {list}");
        list["data"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Localstripe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Form encoding of one key or value (`application/x-www-form-urlencoded`).
fn urlencode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Parameters Stripe's API reference documents for `POST /v1/payment_intents` that
/// localstripe answers with 400 "Unexpected …" (matched by their name before any `[`).
pub const CREATE_PARAMS_LOCALSTRIPE_REFUSES: [&str; 2] =
    ["description", "automatic_payment_methods"];

/// The same for `POST /v1/payment_intents/{id}/confirm`: localstripe takes `off_session`
/// only on a create with `confirm=true`.
pub const CONFIRM_PARAMS_LOCALSTRIPE_REFUSES: [&str; 1] = ["off_session"];

/// One request onecharge sent, as onecharge sent it (before the shim dropped anything).
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub idempotency_key: Option<String>,
    pub stripe_version: Option<String>,
    /// The form body, decoded, in order.
    pub form: Vec<(String, String)>,
    /// The status onecharge got back (`None`: the shim held the answer back).
    pub status: Option<u16>,
}

impl Seen {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.form
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn is_confirm(&self) -> bool {
        self.method == "POST" && self.path.ends_with("/confirm")
    }

    pub fn is_create(&self) -> bool {
        self.method == "POST" && self.path == "/v1/payment_intents"
    }
}

#[derive(Debug, Default)]
struct ShimState {
    seen: Vec<Seen>,
    /// Confirms whose answer is never sent, after localstripe acted on them: a charge made
    /// and its answer lost, as when a connection drops or the client times out.
    lose_confirm_answers: usize,
}

/// A loopback HTTP server in front of a [`Localstripe`]; stopped on drop.
pub struct Shim {
    /// What `gateway_url` is set to.
    pub url: String,
    state: Arc<Mutex<ShimState>>,
    stop: CancellationToken,
}

impl Shim {
    /// Points `settings` at localstripe through this shim, with the short timeouts and
    /// polls the localstripe tests share (the reconciler's schedule is the test's own).
    pub fn configure(&self, s: &mut onecharge::config::Settings) {
        s.gateway_kind = onecharge::gateway::GatewayKind::Stripe;
        s.gateway_url = self.url.clone();
        s.gateway_api_key = Some(secrecy::SecretString::from(API_KEY));
        s.gateway_connect_timeout = Duration::from_secs(1);
        s.gateway_request_timeout = Duration::from_secs(3);
        s.executor.lease = Duration::from_secs(10);
        s.executor.poll_interval = Duration::from_millis(50);
        s.reconciler.poll_interval = Duration::from_millis(100);
        s.relay.poll_interval = Duration::from_millis(50);
    }

    /// Starts the shim in front of `localstripe`.
    pub async fn start(localstripe: &Localstripe) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the shim");
        let url = format!("http://{}", listener.local_addr().expect("shim address"));
        let state = Arc::new(Mutex::new(ShimState::default()));
        let stop = CancellationToken::new();
        let upstream = localstripe.url.clone();
        let http = localstripe.http.clone();
        let app = axum::Router::new().fallback({
            let state = state.clone();
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                forward(
                    state.clone(),
                    http.clone(),
                    upstream.clone(),
                    method,
                    uri,
                    headers,
                    body,
                )
            }
        });
        tokio::spawn({
            let stop = stop.clone();
            async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await;
            }
        });
        Self { url, state, stop }
    }

    /// The next `n` confirms reach localstripe, which acts on them, and their answers are
    /// never sent: onecharge sees only its request timeout.
    pub fn lose_confirm_answers(&self, n: usize) {
        self.state.lock().unwrap().lose_confirm_answers = n;
    }

    /// Every request onecharge sent so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// How many confirms onecharge sent: a second one would be a second charge.
    pub fn confirms(&self) -> usize {
        self.seen().iter().filter(|s| s.is_confirm()).count()
    }

    /// Whether onecharge retrieved the PaymentIntent `intent` by its id (a lookup).
    pub fn retrieved(&self, intent: &str) -> bool {
        let path = format!("/v1/payment_intents/{intent}");
        self.seen()
            .iter()
            .any(|s| s.method == "GET" && s.path == path)
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Decodes an `application/x-www-form-urlencoded` body.
fn decode_form(body: &[u8]) -> Vec<(String, String)> {
    let decode = |raw: &str| {
        percent_encoding::percent_decode_str(&raw.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// The parameters localstripe refuses on this route, which the shim drops.
fn refused_params(method: &Method, path: &str) -> &'static [&'static str] {
    if method != Method::POST {
        &[]
    } else if path == "/v1/payment_intents" {
        &CREATE_PARAMS_LOCALSTRIPE_REFUSES
    } else if path.starts_with("/v1/payment_intents/") && path.ends_with("/confirm") {
        &CONFIRM_PARAMS_LOCALSTRIPE_REFUSES
    } else {
        &[]
    }
}

async fn forward(
    state: Arc<Mutex<ShimState>>,
    http: reqwest::Client,
    upstream: String,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let form = decode_form(&body);
    let refused = refused_params(&method, &path);
    let kept: Vec<String> = body
        .split(|b| *b == b'&')
        .filter(|raw| !raw.is_empty())
        .map(|raw| String::from_utf8_lossy(raw).into_owned())
        .filter(|raw| {
            let key = decode_form(raw.as_bytes())
                .first()
                .map(|(k, _)| k.clone())
                .unwrap_or_default();
            let root = key.split('[').next().unwrap_or_default();
            !refused.contains(&root)
        })
        .collect();
    let index = {
        let mut state = state.lock().unwrap();
        state.seen.push(Seen {
            method: method.to_string(),
            path: path.clone(),
            idempotency_key: header("idempotency-key"),
            stripe_version: header("stripe-version"),
            form,
            status: None,
        });
        state.seen.len() - 1
    };
    let mut request = http
        .request(method.clone(), format!("{upstream}{uri}"))
        .body(kept.join("&"));
    for name in ["authorization", "content-type"] {
        if let Some(value) = header(name) {
            request = request.header(name, value);
        }
    }
    let answer = match request.send().await {
        Ok(answer) => answer,
        Err(err) => {
            return (StatusCode::BAD_GATEWAY, format!("shim: localstripe: {err}")).into_response()
        }
    };
    let status = answer.status().as_u16();
    let mut body: Value = answer.json().await.unwrap_or(Value::Null);
    // Stripe's documented decline is `type: card_error`; localstripe calls it an
    // `invalid_request_error` with the same `code`.
    if status == 402 && body["error"]["code"] == "card_declined" {
        body["error"]["type"] = "card_error".into();
    }
    let lose = method == Method::POST && path.ends_with("/confirm") && {
        let mut state = state.lock().unwrap();
        let lose = state.lose_confirm_answers > 0;
        state.lose_confirm_answers = state.lose_confirm_answers.saturating_sub(1);
        lose
    };
    if lose {
        // Held until onecharge gives up and closes the connection, which drops this future.
        std::future::pending::<()>().await;
    }
    state.lock().unwrap().seen[index].status = Some(status);
    (
        StatusCode::from_u16(status).expect("an HTTP status"),
        axum::Json(body),
    )
        .into_response()
}

/// Sends `request` with the API key; the status and JSON answer, whatever the status.
async fn answer(request: reqwest::RequestBuilder, what: &str) -> (u16, Value) {
    let response = request
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}
