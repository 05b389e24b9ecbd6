//! The executor's and relay's test harness: its own PostgreSQL database (UUID-named,
//! migrated with `Store::setup`, dropped afterwards), its own JetStream namespace (streams
//! deleted afterwards), an in-process mock gateway on a free port, and a manual clock.
//! Attempts are seeded the way intake records them (`store::intake::record_batch`).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::record_batch;
use mock_gateway::{MockConfig, MockGateway};
use onecharge::broker::Broker;
use onecharge::clock::ManualClock;
use onecharge::config::Settings;
use onecharge::domain::outcome::GatewayOutcome;
use onecharge::domain::ChargePayment;
use onecharge::domain::{AttemptStatus, PaymentAttemptId};
use onecharge::executor::{Executor, ExecutorReport};
use onecharge::gateway::{GatewayClient, GatewayHealth, GatewayKind};
use onecharge::reconciler::Reconciler;
use onecharge::relay::Relay;
use onecharge::store::intake::IntakeRecord;
use onecharge::store::Store;
use secrecy::SecretString;
use time::OffsetDateTime;

use super::command::record;
use super::mock_control::MockControl;
use super::nats::stream_messages;
use super::records::Records;
use super::throwaway::{own_settings, ThrowawayDatabase, ThrowawayNamespace};

/// The key the mock gateway accepts in these tests.
pub const API_KEY: &str = "sk_test_executor_suite";

/// One test's world.
pub struct Harness {
    pub settings: Settings,
    pub store: Store,
    pub gateway: MockGateway,
    pub clock: Arc<ManualClock>,
    broker: Option<Broker>,
    // Dropped last, in this order: the streams (once there are any), then the database.
    namespace: Option<ThrowawayNamespace>,
    database: ThrowawayDatabase,
}

impl Harness {
    /// The test controls of this harness's mock gateway.
    pub fn mock_control(&self) -> MockControl {
        MockControl::new(self.gateway.base_url())
    }

    /// Lets the mock's slow charge finish (it charges) and waits until it is in the ledger.
    pub async fn finish_slow_charge(&self) {
        self.gateway.finish_slow_charges();
        self.gateway.wait_for_ledger(1).await;
    }

    /// The attempt succeeded with the gateway's one and only charge, and has exactly one
    /// `succeeded` event.
    pub async fn assert_charged_once(&self, id: impl Into<PaymentAttemptId>) {
        let id: PaymentAttemptId = id.into();
        let ledger = self.gateway.ledger();
        assert_eq!(ledger.len(), 1, "exactly one charge");
        let row = self.attempt(id).await;
        assert_eq!(row.status, "succeeded");
        assert_eq!(
            row.gateway_charge_id.as_deref(),
            Some(ledger[0].id.as_str())
        );
        let events = self.events(id).await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].0, "succeeded");
    }

    /// A fresh database and mock gateway (default mock configuration).
    pub async fn new() -> Self {
        Self::with(MockConfig::default(), |_| {}).await
    }

    /// A harness whose gateway calls are limited fleet-wide to `rate` a second, in bursts of
    /// at most `burst` (`gateway_max_rate`, `gateway_rate_burst`).
    pub async fn with_rate_limit(rate: f64, burst: u32) -> Self {
        Self::with(MockConfig::default(), |settings| {
            settings.gateway_max_rate = rate;
            settings.gateway_rate_burst = burst;
        })
        .await
    }

    /// A mock gateway whose `pm_fault_slow_charge` holds its key in progress until the test
    /// calls [`Harness::finish_slow_charge`], and a request timeout far shorter than that
    /// (300 ms, unless `adjust` changes it).
    pub async fn still_processing(adjust: impl FnOnce(&mut Settings)) -> Self {
        Self::with(
            MockConfig {
                slow_charge_for: Duration::from_secs(600),
                ..MockConfig::default()
            },
            |s| {
                s.gateway_request_timeout = Duration::from_millis(300);
                adjust(s);
            },
        )
        .await
    }

    /// [`Harness::with`] a mock gateway that injects `faults`, and the test settings.
    pub async fn with_faults(faults: mock_gateway::FaultConfig) -> Self {
        Self::with(
            MockConfig {
                faults,
                ..MockConfig::default()
            },
            |_| {},
        )
        .await
    }

    /// A harness whose mock speaks Stripe and whose settings choose the stripe connector,
    /// adjusted by `adjust`.
    pub async fn stripe(adjust: impl FnOnce(&mut Settings)) -> Self {
        Self::with(
            MockConfig {
                dialect: mock_gateway::Dialect::Stripe,
                ..MockConfig::default()
            },
            |s| {
                s.gateway_kind = GatewayKind::Stripe;
                adjust(s);
            },
        )
        .await
    }

    /// A Stripe harness whose mock holds every confirm for ten minutes (a charge still
    /// processing at the gateway), with its settings adjusted.
    pub async fn stripe_processing(adjust: impl FnOnce(&mut Settings)) -> Self {
        Self::with(
            MockConfig {
                dialect: mock_gateway::Dialect::Stripe,
                slow_charge_for: Duration::from_secs(600),
                ..MockConfig::default()
            },
            |s| {
                s.gateway_kind = onecharge::gateway::GatewayKind::Stripe;
                adjust(s);
            },
        )
        .await
    }

    /// A fresh database, a mock gateway started from `mock`, and settings adjusted by `adjust`
    /// (after the test defaults: short gateway timeouts, a 10 s lease).
    pub async fn with(mock: MockConfig, adjust: impl FnOnce(&mut Settings)) -> Self {
        // The tests' own reqwest clients need the process's rustls provider, as onecharge's do.
        onecharge::config::tls::install_crypto_provider();
        let gateway = MockGateway::start(MockConfig {
            api_key: API_KEY.to_owned(),
            ..mock
        })
        .await
        .expect("the mock gateway starts");
        let (database, mut settings) = own_settings("x");
        settings.gateway_url = gateway.base_url();
        settings.gateway_api_key = Some(SecretString::from(API_KEY));
        settings.gateway_connect_timeout = Duration::from_secs(1);
        settings.gateway_request_timeout = Duration::from_secs(2);
        settings.executor.lease = Duration::from_secs(10);
        settings.executor.poll_interval = Duration::from_millis(20);
        adjust(&mut settings);
        settings.validate().expect("test settings are valid");
        drop(
            Store::setup(&settings.database_url)
                .await
                .expect("test database"),
        );
        let store = Store::connect_with(&settings.database_url, 16, &settings.database)
            .await
            .expect("test database pool");
        Self {
            settings,
            store,
            gateway,
            clock: Arc::new(ManualClock::starting_now()),
            broker: None,
            namespace: None,
            database,
        }
    }

    /// Connects to NATS and creates this test's streams (once).
    pub async fn broker(&mut self) -> Broker {
        if self.broker.is_none() {
            let broker = Broker::connect(&self.settings)
                .await
                .expect("NATS at 127.0.0.1:4222");
            self.namespace = Some(ThrowawayNamespace::new(
                &self.settings.nats_url,
                &broker.names,
            ));
            broker.ensure_streams().await.expect("streams");
            self.broker = Some(broker);
        }
        self.broker.clone().unwrap()
    }

    /// Serves the admin API (and the console) for this harness's store and broker on a free
    /// port in the test's process: readiness reads `gateway_health`, rechecks run `reconciler`.
    pub async fn serve_admin(
        &mut self,
        gateway_health: Option<GatewayHealth>,
        reconciler: Option<Reconciler>,
    ) -> AdminServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = onecharge::http::AdminState {
            store: self.store.clone(),
            broker: self.broker().await,
            metrics: onecharge::metrics::install(),
            admin_token: None,
            gateway_health,
            retry_window: onecharge::operator::RetryWindow::from_settings(&self.settings),
            reconciler,
            console: Default::default(),
        };
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(onecharge::http::serve(listener, state, stop.clone()));
        AdminServer { addr, stop, task }
    }

    /// The manual clock's time: what the breaker and the credentials pause read. Attempts'
    /// times come from the database's clock; see [`Records::db_now`] and [`Harness::advance`].
    pub fn now(&self) -> OffsetDateTime {
        onecharge::clock::Clock::now(&*self.clock)
    }

    /// Lets `by` pass for this test without waiting: every time stored on an attempt moves
    /// back by `by` (as if the database's clock had moved on), and the manual clock that the
    /// breaker and the credentials pause read moves forward.
    pub async fn advance(&self, by: Duration) {
        sqlx::query(
            "UPDATE payment_attempts SET
                 next_run_at = next_run_at - make_interval(secs => $1),
                 lease_expires_at = lease_expires_at - make_interval(secs => $1),
                 dispatched_at = dispatched_at - make_interval(secs => $1),
                 first_dispatched_at = first_dispatched_at - make_interval(secs => $1),
                 claim_at = claim_at - make_interval(secs => $1),
                 requested_at = requested_at - make_interval(secs => $1),
                 created_at = created_at - make_interval(secs => $1),
                 updated_at = updated_at - make_interval(secs => $1)",
        )
        .bind(by.as_secs_f64())
        .execute(self.store.pool())
        .await
        .unwrap();
        self.clock.advance(by);
    }

    /// A gateway client for this test's mock with `api_key`.
    pub fn client_with_key(&self, api_key: &str) -> GatewayClient {
        GatewayClient::new(
            &self.settings.gateway_url,
            SecretString::from(api_key.to_owned()),
            self.settings.gateway_connect_timeout,
            self.settings.gateway_request_timeout,
        )
        .expect("a gateway client")
    }

    /// Sends `request` to this test's mock with the right key, outside any executor: an
    /// earlier try whose answer was lost, or another caller under the same key.
    pub async fn charge_directly(
        &self,
        request: &onecharge::gateway::ChargeRequest,
    ) -> onecharge::gateway::GatewayCall<GatewayOutcome> {
        self.client_with_key(API_KEY).charge(request).await
    }

    /// A client speaking `kind` to this test's mock with `api_key` (a wrong or revoked key).
    pub fn client_of_kind_with_key(&self, kind: GatewayKind, api_key: &str) -> GatewayClient {
        GatewayClient::for_kind(
            kind,
            &self.settings.gateway_url,
            SecretString::from(api_key.to_owned()),
            Duration::from_secs(1),
            Duration::from_secs(2),
            Vec::new(),
        )
        .expect("a gateway client")
    }

    /// A client with the right key for a gateway at `url` (a closed port).
    pub fn client_with_url(&self, url: &str) -> GatewayClient {
        GatewayClient::new(
            url,
            SecretString::from(API_KEY),
            self.settings.gateway_connect_timeout,
            self.settings.gateway_request_timeout,
        )
        .expect("a gateway client")
    }

    /// An executor on this test's database, mock gateway and manual clock.
    pub fn executor(&self) -> Executor {
        self.executor_with(self.client_with_key(API_KEY))
    }

    /// An executor that calls through `client` (a wrong key, a closed port).
    pub fn executor_with(&self, client: GatewayClient) -> Executor {
        let health = GatewayHealth::from_settings(&self.settings.executor);
        Executor::new(self.store.clone(), client, health, &self.settings)
            .with_clock(self.clock.clone())
    }

    /// A reconciler on this test's database, mock gateway and manual clock.
    pub fn reconciler(&self) -> Reconciler {
        self.reconciler_with(self.client_with_key(API_KEY))
    }

    /// A reconciler that looks up through `client` (a closed port, a wrong key).
    pub fn reconciler_with(&self, client: GatewayClient) -> Reconciler {
        let health = GatewayHealth::from_settings(&self.settings.executor);
        Reconciler::new(self.store.clone(), client, health, &self.settings)
            .with_clock(self.clock.clone())
    }

    pub async fn relay(&mut self) -> Relay {
        let broker = self.broker().await;
        Relay::new(self.store.clone(), broker, &self.settings)
    }

    /// Records one pending attempt as intake would (at the clock's now) and returns it.
    pub async fn seed(&self, payment_method: &str) -> ChargePayment {
        self.seed_many(&[payment_method]).await.remove(0)
    }

    /// Records one pending attempt per payment method, in one intake batch.
    pub async fn seed_many(&self, payment_methods: &[&str]) -> Vec<ChargePayment> {
        let records: Vec<IntakeRecord> =
            payment_methods.iter().map(|pm| record(pm, false)).collect();
        record_batch(&self.store, "test-intake", &records)
            .await
            .expect("recorded");
        records.into_iter().map(|r| r.command).collect()
    }

    /// Records `n` stale commands: each becomes `expired` with an outbox event, no gateway.
    pub async fn seed_expired(&self, n: usize) -> Vec<IntakeRecord> {
        let records: Vec<IntakeRecord> = (0..n).map(|_| record("pm_card_visa", true)).collect();
        record_batch(&self.store, "test-intake", &records)
            .await
            .expect("recorded");
        records
    }

    /// Makes the database refuse every gateway charge id (a CHECK constraint): an answer
    /// that names a charge can never be stored.
    pub async fn refuse_charge_ids(&self) {
        sqlx::query(
            "ALTER TABLE payment_attempts ADD CONSTRAINT test_refuses_charge_ids
             CHECK (gateway_charge_id IS NULL)",
        )
        .execute(self.store.pool())
        .await
        .unwrap();
    }

    /// Plays the reconciler's two steps at once, without the lookup: after an executor's
    /// lease expired, the gateway has nothing under the key and the attempt returns to
    /// `pending` (contract §4: in_flight with an expired lease → unknown → pending). The
    /// lease token is left alone, so the fencing test sees only the executors' own claims.
    pub async fn reconciler_returns_to_pending(&self, id: impl Into<PaymentAttemptId>) {
        let id: PaymentAttemptId = id.into();
        let moved = sqlx::query(
            "WITH moved AS (
                 UPDATE payment_attempts SET status = 'pending', lease_owner = NULL,
                        lease_expires_at = NULL, next_run_at = now(), updated_at = now()
                 WHERE payment_attempt_id = $1 AND status = 'in_flight' AND lease_expires_at < now()
                 RETURNING payment_attempt_id)
             INSERT INTO attempt_transitions (payment_attempt_id, from_status, to_status, cause, actor, at)
             SELECT payment_attempt_id, 'in_flight', 'pending', 'test_reconciler', 'test', now() FROM moved",
        )
        .bind(id)
        .execute(self.store.pool())
        .await
        .unwrap();
        assert_eq!(
            moved.rows_affected(),
            1,
            "only an in-flight attempt with an expired lease is taken over"
        );
    }

    /// Every message on this test's events stream, in order.
    pub async fn event_messages(&mut self) -> Vec<async_nats::jetstream::message::StreamMessage> {
        let broker = self.broker().await;
        stream_messages(&broker.jetstream, &broker.names.events_stream()).await
    }
}

/// The admin HTTP server of [`Harness::serve_admin`].
pub struct AdminServer {
    pub addr: std::net::SocketAddr,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl AdminServer {
    /// Shuts the server down and waits until it has stopped cleanly.
    pub async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap().unwrap();
    }
}

/// A gateway call row: (try, lease token, http status, outcome, charge id).
pub type GatewayCallRow = (i32, Option<i64>, Option<i32>, String, Option<String>);

/// An attempt row.
#[derive(Debug, sqlx::FromRow)]
pub struct AttemptRow {
    pub payment_attempt_id: uuid::Uuid,
    pub status: String,
    pub tries: i32,
    pub lease_token: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<OffsetDateTime>,
    pub next_run_at: OffsetDateTime,
    pub dispatched_at: Option<OffsetDateTime>,
    pub first_dispatched_at: Option<OffsetDateTime>,
    pub gateway_charge_id: Option<String>,
    pub decline_code: Option<String>,
    pub last_error: Option<String>,
    pub review_reason: Option<String>,
    pub idempotency_key: String,
    /// When the attempt last changed (database clock): `next_run_at - updated_at` is the
    /// delay a write scheduled.
    pub updated_at: OffsetDateTime,
    pub order_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub correlation_id: Option<String>,
    /// How many times the reconciler looked the attempt up.
    pub reconcile_checks: i32,
    /// The gateway's own object for the attempt (Stripe's PaymentIntent), once prepared.
    pub gateway_object_id: Option<String>,
}

/// Runs intake batches until `n` messages are settled (recorded, duplicates or dead
/// letters); fails when a batch comes back empty first.
pub async fn take_in(intake: &onecharge::intake::Intake, n: usize) {
    let mut settled = 0;
    while settled < n {
        let report = intake
            .process_batch(Duration::from_millis(500))
            .await
            .unwrap();
        assert!(
            !report.outcomes.is_empty(),
            "intake ran dry after {settled} of {n}"
        );
        settled += report.outcomes.len();
    }
}

/// One pass of `executor`, which must leave exactly one attempt in `status`; its report.
pub async fn run_leaving_one_in(executor: &Executor, status: AttemptStatus) -> ExecutorReport {
    let report = executor.run_once().await.unwrap();
    assert_eq!(report.count(status), 1, "{report:?}");
    report
}

/// The label ([`GatewayOutcome::label`], one per kind of answer) of the gateway outcome of
/// the first attempt a run handled; `None` when it made no call.
pub fn first_outcome(report: &ExecutorReport) -> Option<&'static str> {
    report.attempts[0]
        .outcome
        .as_ref()
        .map(GatewayOutcome::label)
}

/// Waits until the asynchronous `condition` holds, polling every 50 ms, failing the test
/// after `deadline`.
pub async fn eventually<F, Fut>(what: &str, deadline: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !condition().await {
        assert!(
            started.elapsed() < deadline,
            "timed out after {deadline:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The charge request the executor sends for `command` (same key, same bytes), for tests
/// that play "an earlier try" against the gateway directly.
pub fn charge_request(command: &ChargePayment) -> onecharge::gateway::ChargeRequest {
    charge_request_with_amount(command, command.money.amount_minor())
}

/// The same request with another amount: what a key reused with different parameters looks like.
pub fn charge_request_with_amount(
    command: &ChargePayment,
    amount_minor: i64,
) -> onecharge::gateway::ChargeRequest {
    onecharge::gateway::ChargeRequest::new(
        command.idempotency_key(),
        &onecharge::gateway::ChargeBody {
            money: onecharge::domain::Money::new(amount_minor, command.money.currency()),
            customer_id: command.customer_id.clone(),
            payment_method: command.payment_method.clone(),
            reference: command.payment_attempt_id,
            description: command.description.clone(),
        },
    )
}

/// A loopback URL on which nothing listens: connections are refused (never sent).
pub fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

/// A gateway that answers every charge with `charge` (HTTP 201) and every lookup with
/// `{"data":[charge]}`: for the answers a real gateway may send but the mock never does
/// (a NUL in a charge id or decline code). Returns its base URL; it runs until the test ends.
pub async fn gateway_answering(charge: serde_json::Value) -> String {
    use axum::routing::get;
    let lookup = serde_json::json!({ "data": [charge.clone()] });
    let app = axum::Router::new().route(
        "/v1/charges",
        get(move || {
            let lookup = lookup.clone();
            async move { axum::Json(lookup) }
        })
        .post(move || {
            let charge = charge.clone();
            async move { (axum::http::StatusCode::CREATED, axum::Json(charge)) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}
