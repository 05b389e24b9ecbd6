//! Observability of the real service (issue 6): exact counters on `/metrics` after a scripted
//! run, the database-backed gauges, readiness following the database, the producer's
//! `traceparent` from command to delivery span to published event, and no secret in any
//! log line of the real binary.
//!
//! The Prometheus recorder is global to this test binary. Every test that records metrics in
//! this process holds [`RECORDER`] and measures counters as differences, so none sees
//! another's increments or gauges.

use std::io::{BufRead as _, BufReader, Read};
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::record_batch;
use async_nats::jetstream::publish::PublishAck;
use async_nats::HeaderMap;
use mock_gateway::{payment_methods as pm, MockConfig, MockGateway};
use onecharge::app::Role;
use onecharge::broker::Broker;
use onecharge::domain::Actor;
use onecharge::domain::AttemptStatus;
use onecharge::gauges::DatabaseGaugesRefresher;
use serde_json::{json, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::serve::{Exposed, Serve};
use crate::support::{
    self, command, eventually, onecharge, shrink_duplicate_window, sigterm, Harness, Records,
    Served, TestEnv,
};
use crate::RECORDER;

/// A W3C trace context as a producer would send it.
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A Prometheus text exposition: its text, and its samples read by [`Exposed`].
pub(crate) struct Scrape {
    text: String,
    exposed: Exposed,
}

impl Scrape {
    fn of(text: String) -> Self {
        let exposed = Exposed::parse(&text);
        Self { text, exposed }
    }

    /// The recorder's current exposition, as `/metrics` renders it.
    pub(crate) fn now() -> Self {
        Self::of(onecharge::metrics::install().render())
    }

    async fn from(admin: SocketAddr) -> Self {
        let response = reqwest::get(format!("http://{admin}/metrics"))
            .await
            .expect("GET /metrics");
        assert_eq!(response.status(), 200);
        Self::of(response.text().await.unwrap())
    }

    /// The sum of the samples of `name` whose labels include `labels`; 0 when there is none
    /// (a counter never incremented).
    pub(crate) fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.exposed.value(name, labels)
    }
}

/// Publishes `body` on the command subject under `message_id`, with `extra` headers.
async fn publish(
    broker: &Broker,
    message_id: &str,
    body: &[u8],
    extra: &[(&str, &str)],
) -> PublishAck {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", message_id);
    for (name, value) in extra {
        headers.insert(*name, *value);
    }
    broker
        .jetstream
        .publish_with_headers(broker.names.charge_subject(), headers, body.to_vec().into())
        .await
        .expect("publish")
        .await
        .expect("publish ack")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_exact_deliveries_dead_letters_and_gateway_calls_of_a_scripted_run() {
    let _recorder = RECORDER.lock().await;
    let consumer = format!("obs-{}", &Uuid::new_v4().simple().to_string()[..8]);
    let mut h = Harness::with(MockConfig::default(), |s| {
        s.intake.consumer = consumer.clone();
        s.admin_addr = "127.0.0.1:0".parse().unwrap();
        s.executor.poll_interval = Duration::from_millis(20);
    })
    .await;
    let broker = h.broker().await;
    shrink_duplicate_window(&broker).await;
    let before = Scrape::now();
    let served = Served::start(&h.settings, &[Role::Intake, Role::Executor, Role::Admin]).await;
    let admin = served.admin.expect("the admin role listens");

    // 3 valid commands: one charged, one declined, one rate-limited once and then charged.
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let body_a = serde_json::to_vec(&command(a, json!({"payment_method": pm::CARD_VISA}))).unwrap();
    let body_b = command(b, json!({"payment_method": pm::CARD_DECLINED}));
    let body_c = command(c, json!({"payment_method": pm::FAULT_RATE_LIMIT}));
    publish(&broker, "obs-a", &body_a, &[]).await;
    publish(&broker, "obs-b", &serde_json::to_vec(&body_b).unwrap(), &[]).await;
    publish(&broker, "obs-c", &serde_json::to_vec(&body_c).unwrap(), &[]).await;
    // a second command for attempt a under another message id: a business duplicate
    publish(&broker, "obs-a-again", &body_a, &[]).await;
    // 2 invalid: not JSON, and a negative amount
    publish(&broker, "obs-not-json", b"{not json", &[]).await;
    let negative = command(Uuid::new_v4(), json!({"amount_minor": -5}));
    publish(
        &broker,
        "obs-negative",
        &serde_json::to_vec(&negative).unwrap(),
        &[],
    )
    .await;
    // the producer retries obs-a after the broker's duplicate window: it reaches intake
    let started = Instant::now();
    while publish(&broker, "obs-a", &body_a, &[]).await.duplicate {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the broker never accepted the retry"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let delta = |after: &Scrape, name: &str, labels: &[(&str, &str)]| {
        after.value(name, labels) - before.value(name, labels)
    };
    let deliveries = "onecharge_intake_deliveries_total";
    let by_consumer = [("consumer", consumer.as_str())];
    eventually(
        "7 deliveries are settled and 3 attempts are final",
        Duration::from_secs(30),
        || async {
            let now = Scrape::from(admin).await;
            now.value(deliveries, &by_consumer) == 7.0
                && delta(
                    &now,
                    "onecharge_executor_settlements_total",
                    &[("state", "succeeded")],
                ) == 2.0
                && delta(
                    &now,
                    "onecharge_executor_settlements_total",
                    &[("state", "declined")],
                ) == 1.0
        },
    )
    .await;
    let after = Scrape::from(admin).await;

    let result = |r: &str| after.value(deliveries, &[("consumer", &consumer), ("result", r)]);
    for (r, n) in [
        ("processed", 3.0),
        ("duplicate", 1.0),
        ("business_duplicate", 1.0),
        ("permanent", 2.0),
        ("conflict", 0.0),
        ("stale", 0.0),
        ("transient", 0.0),
    ] {
        assert_eq!(result(r), n, "{r}");
    }
    assert_eq!(
        delta(
            &after,
            "onecharge_dead_letters_total",
            &[("class", "invalid")]
        ),
        2.0
    );
    let charge = |outcome: &str| {
        delta(
            &after,
            "onecharge_gateway_calls_total",
            &[("operation", "charge"), ("outcome", outcome)],
        )
    };
    assert_eq!(charge("succeeded"), 2.0);
    assert_eq!(charge("declined"), 1.0);
    assert_eq!(charge("rate_limited"), 1.0);
    assert_eq!(
        delta(
            &after,
            "onecharge_gateway_calls_total",
            &[("operation", "charge")]
        ),
        4.0
    );
    assert_eq!(
        delta(
            &after,
            "onecharge_gateway_call_duration_seconds_count",
            &[("operation", "charge")]
        ),
        4.0
    );
    assert_eq!(
        delta(
            &after,
            "onecharge_executor_settlements_total",
            &[("state", "pending")]
        ),
        1.0,
        "the rate-limited try went back to pending"
    );
    assert_eq!(after.value("onecharge_gateway_breaker_state", &[]), 0.0);
    assert_eq!(after.value("onecharge_gateway_paused", &[]), 0.0);
    // the business effect the counters describe
    let stats = h.gateway.stats();
    assert_eq!(
        (stats.created, stats.declined, stats.rate_limited),
        (2, 1, 1)
    );
    assert_eq!(h.attempt_rows().await, 3);
    assert_eq!(h.dedupe_rows().await, 4);

    // The database-backed gauges: 3 final attempts, 3 events waiting for a relay.
    let gauges = DatabaseGaugesRefresher::new(h.store.clone())
        .refresh_once(OffsetDateTime::now_utc())
        .await
        .unwrap();
    let mut by_status = gauges.attempts_by_status.clone();
    by_status.sort_by_key(|(s, _)| s.as_str());
    assert_eq!(
        by_status,
        vec![(AttemptStatus::Declined, 1), (AttemptStatus::Succeeded, 2)]
    );
    assert!(gauges.oldest_non_final.is_empty());
    assert_eq!(gauges.outbox_pending, 3);
    let scraped = Scrape::from(admin).await;
    let attempts = |status: &str| scraped.value("onecharge_attempts", &[("status", status)]);
    for (status, n) in [
        ("succeeded", 2.0),
        ("declined", 1.0),
        ("pending", 0.0),
        ("in_flight", 0.0),
        ("needs_review", 0.0),
    ] {
        assert_eq!(attempts(status), n, "{status}");
    }
    assert_eq!(
        scraped.value(
            "onecharge_attempts_oldest_age_seconds",
            &[("status", "pending")]
        ),
        0.0
    );
    assert_eq!(scraped.value("onecharge_outbox_pending", &[]), 3.0);
    let outbox_age = scraped.value("onecharge_outbox_oldest_pending_age_seconds", &[]);
    assert!((0.0..60.0).contains(&outbox_age), "{outbox_age}");
    served.stop().await;
}

#[tokio::test]
async fn the_oldest_waiting_attempt_and_outbox_row_are_reported_by_age_at_refresh_time() {
    let _recorder = RECORDER.lock().await;
    let env = TestEnv::new().await;
    let pending = support::record(pm::CARD_VISA, false);
    let expired = support::record(pm::CARD_VISA, true);
    record_batch(&env.store, "obs-age", &[pending, expired])
        .await
        .unwrap();
    // Recorded by the database's clock.
    let recorded_at = env.newest_attempt_created_at().await;
    onecharge::metrics::install();

    let gauges = DatabaseGaugesRefresher::new(env.store.clone())
        .refresh_once(recorded_at + Duration::from_secs(90))
        .await
        .unwrap();

    assert_eq!(
        gauges.oldest_non_final,
        vec![(AttemptStatus::Pending, recorded_at)]
    );
    assert_eq!(gauges.outbox_pending, 1, "the expired attempt's event");
    assert_eq!(gauges.outbox_oldest_pending, Some(recorded_at));
    let scraped = Scrape::now();
    let age = |status: &str| {
        scraped.value(
            "onecharge_attempts_oldest_age_seconds",
            &[("status", status)],
        )
    };
    assert_eq!(age("pending"), 90.0);
    assert_eq!(age("in_flight") + age("unknown") + age("needs_review"), 0.0);
    assert_eq!(
        scraped.value("onecharge_attempts", &[("status", "pending")]),
        1.0
    );
    assert_eq!(
        scraped.value("onecharge_attempts", &[("status", "expired")]),
        1.0
    );
    assert_eq!(scraped.value("onecharge_outbox_pending", &[]), 1.0);
    assert_eq!(
        scraped.value("onecharge_outbox_oldest_pending_age_seconds", &[]),
        90.0
    );
    assert_eq!(
        scraped.value("onecharge_database_gauges_refreshed_timestamp_seconds", &[]),
        (recorded_at.unix_timestamp() + 90) as f64
    );
}

/// Issue 37: the refund gauges cover every unsettled state, at 0 where no refund is (so a
/// state emptied drops to 0), and age the oldest of each from when it was recorded; a
/// settled refund is the counter's, never a gauge's.
/// Every open fleet pause counts under its scope, whatever its currency (issue 54):
/// `onecharge_fleet_paused` is 1 while any is open, and every scope reads 0 once resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_pause_gauges_count_the_open_pauses_of_each_scope_at_refresh_time() {
    use onecharge::domain::{Currency, PauseCover, PauseScope};
    use onecharge::operator::{fleet, Via};
    let _recorder = RECORDER.lock().await;
    let env = TestEnv::new().await;
    onecharge::metrics::install();
    let refresher = DatabaseGaugesRefresher::new(env.store.clone());
    let mut opened = Vec::new();
    for (scope, currency) in [
        (PauseScope::Charges, Some("ISK")),
        (PauseScope::Charges, Some("EUR")),
        (PauseScope::Refunds, None),
    ] {
        let cover = PauseCover {
            scope,
            currency: currency.map(|c| Currency::from_code(c).unwrap()),
        };
        let pause = fleet::pause(
            &env.store,
            "drill",
            cover,
            &Actor::operator("ana"),
            Via::Cli,
        )
        .await
        .unwrap();
        opened.push(pause.id);
    }

    refresher.refresh_once(env.db_now().await).await.unwrap();
    let scraped = Scrape::now();
    assert_eq!(scraped.value("onecharge_fleet_paused", &[]), 1.0);
    for (scope, open) in [("all", 0.0), ("charges", 2.0), ("refunds", 1.0)] {
        assert_eq!(
            scraped.value("onecharge_fleet_pauses_open", &[("scope", scope)]),
            open,
            "{scope}"
        );
    }

    for id in opened {
        let which = onecharge::store::fleet::PauseSelector {
            id: Some(id),
            ..Default::default()
        };
        fleet::resume(&env.store, "", which, &Actor::operator("ana"), Via::Cli)
            .await
            .unwrap();
    }
    refresher.refresh_once(env.db_now().await).await.unwrap();
    let scraped = Scrape::now();
    assert_eq!(scraped.value("onecharge_fleet_paused", &[]), 0.0);
    for scope in ["all", "charges", "refunds"] {
        assert!(
            scraped.text.contains(&format!(
                "onecharge_fleet_pauses_open{{scope=\"{scope}\"}} 0\n"
            )),
            "{scope} reads 0 once resumed"
        );
    }
}

#[tokio::test]
async fn refund_gauges_count_every_unsettled_state_and_age_the_oldest_at_refresh_time() {
    let _recorder = RECORDER.lock().await;
    let env = TestEnv::new().await;
    onecharge::metrics::install();
    let unsettled = [
        "waiting",
        "pending",
        "in_flight",
        "processing",
        "unknown",
        "needs_review",
    ];

    let refresher = DatabaseGaugesRefresher::new(env.store.clone());
    let gauges = refresher.refresh_once(env.db_now().await).await.unwrap();
    assert!(gauges.unsettled_refunds.is_empty());
    let scraped = Scrape::now();
    for status in unsettled {
        for name in ["onecharge_refunds", "onecharge_refunds_oldest_age_seconds"] {
            assert!(
                scraped
                    .text
                    .contains(&format!("{name}{{status=\"{status}\"}} 0\n")),
                "{name} {status} at 0 before any refund"
            );
        }
    }
    assert!(!scraped
        .text
        .contains(r#"onecharge_refunds{status="succeeded"}"#));

    // one waiting for an attempt not recorded (10 minutes old), one admitted, one in review
    let charged = env.succeeded_attempt("ord_gauges", "cus_gauges").await;
    let waiting = env.record_refund(Uuid::new_v4(), None).await;
    env.record_refund(charged, Some(100)).await;
    let review = env.record_refund(charged, Some(200)).await;
    env.admit_refunds().await;
    env.set_refund(waiting, "created_at = now() - interval '10 minutes'")
        .await;
    env.set_refund(
        review,
        "status = 'needs_review', review_reason = 'the gateway lists two refunds under its key'",
    )
    .await;

    let gauges = refresher.refresh_once(env.db_now().await).await.unwrap();
    let mut counted: Vec<(&str, i64)> = gauges
        .unsettled_refunds
        .iter()
        .map(|(status, n, _)| (status.as_str(), *n))
        .collect();
    counted.sort_unstable();
    assert_eq!(
        counted,
        [("needs_review", 1), ("pending", 1), ("waiting", 1)]
    );
    let scraped = Scrape::now();
    let count = |status: &str| scraped.value("onecharge_refunds", &[("status", status)]);
    let age = |status: &str| {
        scraped.value(
            "onecharge_refunds_oldest_age_seconds",
            &[("status", status)],
        )
    };
    assert_eq!(
        unsettled.map(count),
        [1.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        "{unsettled:?}"
    );
    assert!(
        (599.0..=605.0).contains(&age("waiting")),
        "{}",
        age("waiting")
    );
    assert!((0.0..60.0).contains(&age("pending")), "{}", age("pending"));
    assert_eq!(age("unknown"), 0.0);

    // the review settled by hand: its state drops back to 0
    env.set_refund(
        review,
        "status = 'succeeded', gateway_refund_id = 're_by_hand', settled_at = now()",
    )
    .await;
    refresher.refresh_once(env.db_now().await).await.unwrap();
    let scraped = Scrape::now();
    assert_eq!(
        scraped.value("onecharge_refunds", &[("status", "needs_review")]),
        0.0
    );
    assert_eq!(
        scraped.value(
            "onecharge_refunds_oldest_age_seconds",
            &[("status", "needs_review")]
        ),
        0.0
    );
}

async fn readyz(admin: SocketAddr) -> (u16, String) {
    let response = reqwest::get(format!("http://{admin}/readyz"))
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_names_the_database_while_it_refuses_connections_and_recovers_after() {
    let _recorder = RECORDER.lock().await;
    let env = TestEnv::new().await;
    let served = Served::start(&env.settings, &[Role::Admin]).await;
    let admin = served.admin.unwrap();
    assert_eq!(readyz(admin).await, (200, "ready\n".to_owned()));

    env.stop_database().await;
    let (status, body) = readyz(admin).await;
    assert_eq!(status, 503);
    // Why, when the cut connection told this process its primary is gone (decision 250).
    assert!(
        body.starts_with("not ready: database unreachable"),
        "{body}"
    );
    let healthz = reqwest::get(format!("http://{admin}/healthz"))
        .await
        .unwrap();
    assert_eq!(healthz.status(), 200, "alive, only not ready");

    env.start_database().await;
    eventually("readiness recovers", Duration::from_secs(15), || async {
        readyz(admin).await == (200, "ready\n".to_owned())
    })
    .await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_primary_is_one_failover_on_metrics_and_readiness_until_a_writable_one_answers() {
    let env = TestEnv::new().await;
    // The one address onecharge has, in front of the database: moved to nowhere, it cuts
    // every connection and refuses new ones, as a failover's proxy with no leader does.
    let server: SocketAddr = "127.0.0.1:5432".parse().unwrap();
    let address = support::pg_cluster::Forwarder::start(server).await;
    let behind = env
        .settings
        .database_url
        .replacen(":5432/", &format!(":{}/", address.port()), 1);
    assert_ne!(behind, env.settings.database_url);
    // A process of its own: the failover is the process's, and any pool of this test
    // binary reaching the database meanwhile would end it here.
    let mut serve = Serve::start(
        &env,
        &["admin"],
        &[("ONECHARGE_DATABASE_URL", behind.as_str())],
    );
    let before = serve.wait_until("the admin role answers", |_| true).await;
    assert_eq!(serve.readyz().await, (200, "ready\n".to_owned()));
    assert_eq!(before.value("onecharge_database_failover", &[]), 0.0);
    let failovers = before.value("onecharge_database_failovers_total", &[]);

    address.point_at(None);
    let failover =
        "not ready: database unreachable: no writable primary (a failover in progress?)\n";
    eventually(
        "readiness names the failover",
        Duration::from_secs(30),
        || async { serve.readyz().await == (503, failover.to_owned()) },
    )
    .await;
    let during = serve
        .scrape()
        .await
        .expect("/metrics answers in a failover");
    assert_eq!(during.value("onecharge_database_failover", &[]), 1.0);
    assert_eq!(
        during.value("onecharge_database_failovers_total", &[]),
        failovers + 1.0,
        "one failover, however many steps failed"
    );

    address.point_at(Some(server));
    eventually("readiness recovers", Duration::from_secs(30), || async {
        serve.readyz().await == (200, "ready\n".to_owned())
    })
    .await;
    let after = serve.stop().await;
    assert_eq!(after.value("onecharge_database_failover", &[]), 0.0);
}

/// Log lines written to memory, for a test-local subscriber.
#[derive(Clone, Default)]
struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLogs {
    /// Every line, parsed as JSON.
    fn lines(&self) -> Vec<Value> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).expect("each log line is JSON"))
            .collect()
    }
}

/// The span called `name` among a JSON log line's spans, if the line was logged inside one.
fn span<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    line["spans"]
        .as_array()?
        .iter()
        .find(|span| span["name"] == name)
}

// Current-thread runtime: every task of the service runs on this thread, under the
// test-local subscriber.
#[tokio::test]
async fn a_commands_traceparent_is_on_its_delivery_span_and_reaches_the_published_events_headers() {
    let _recorder = RECORDER.lock().await;
    let logs = CapturedLogs::default();
    let writer = logs.clone();
    let _subscriber = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .json()
            .with_env_filter("onecharge=debug")
            .with_writer(move || writer.clone())
            .finish(),
    );
    let mut h = Harness::new().await;
    let broker = h.broker().await;
    let served = Served::start(&h.settings, &[Role::Intake, Role::Executor, Role::Relay]).await;
    let attempt = Uuid::new_v4();
    let body = serde_json::to_vec(&command(attempt, json!({}))).unwrap();
    publish(
        &broker,
        "obs-traced",
        &body,
        &[
            ("traceparent", TRACEPARENT),
            ("Correlation-Id", "corr-traced"),
        ],
    )
    .await;

    let started = Instant::now();
    while h.event_messages().await.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no event was published"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    served.stop().await;

    let events = h.event_messages().await;
    assert_eq!(events.len(), 1);
    let event = &events[0];
    assert_eq!(
        support::header(event, "traceparent").as_deref(),
        Some(TRACEPARENT)
    );
    assert_eq!(
        support::header(event, "Correlation-Id").as_deref(),
        Some("corr-traced")
    );
    assert_eq!(
        support::header(event, "Causation-Id").as_deref(),
        Some("obs-traced")
    );
    let (stored,): (Option<String>,) = h.attempt_columns(attempt, "traceparent").await;
    assert_eq!(stored.as_deref(), Some(TRACEPARENT));

    let lines = logs.lines();
    let delivery = lines
        .iter()
        .find_map(|line| span(line, "settle"))
        .expect("a line logged inside the delivery span");
    assert_eq!(delivery["traceparent"], TRACEPARENT);
    assert_eq!(delivery["messaging.system"], "nats");
    assert_eq!(delivery["messaging.operation"], "process");
    assert_eq!(delivery["messaging.message.id"], "obs-traced");
    assert_eq!(
        delivery["messaging.destination.name"],
        broker.names.charge_subject()
    );
    assert_eq!(
        delivery["messaging.consumer.group.name"],
        h.settings.intake.consumer
    );
    assert_eq!(delivery["correlation_id"], "corr-traced");
    assert_eq!(delivery["payment_attempt_id"], attempt.to_string());

    let call = lines
        .iter()
        .find(|line| span(line, "gateway_call").is_some())
        .expect("a line logged inside the gateway call's span");
    let gateway_call = span(call, "gateway_call").unwrap();
    assert_eq!(gateway_call["http.request.method"], "POST");
    assert_eq!(gateway_call["url.path"], "/v1/charges");
    assert_eq!(gateway_call["http.response.status_code"], 201);
    assert_eq!(gateway_call["outcome"], "succeeded");
    let execute = span(call, "execute").expect("inside the executor's span");
    assert_eq!(execute["payment_attempt_id"], attempt.to_string());
    assert_eq!(execute["correlation_id"], "corr-traced");
    assert_eq!(execute["causation_id"], "obs-traced");
    // The pool's connections live on this test's runtime, which is blocked while the
    // harness cleans up on another: close them while this one still runs.
    h.store.pool().close().await;
}

/// Reads `pipe` line by line into `into` on a thread of its own.
fn collect_lines(
    pipe: impl Read + Send + 'static,
    into: Arc<Mutex<Vec<String>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            into.lock().unwrap().push(line);
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_run_whose_api_key_is_rejected_logs_json_with_ids_and_never_the_secrets() {
    const API_KEY: &str = "sk_test_obs_never_print_me_7f3a";
    const ADMIN_TOKEN: &str = "admin_obs_never_print_me_91c2";
    let gateway = MockGateway::start(MockConfig {
        api_key: "sk_the_gateway_expects_another_key".into(),
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let env = TestEnv::new().await;
    let attempt = Uuid::new_v4();
    env.publish("obs-secret", &command(attempt, json!({})))
        .await;

    let mut child = onecharge()
        .args([
            "serve",
            "--roles",
            "intake,executor,admin",
            "--log-format",
            "json",
        ])
        .env("RUST_LOG", "debug")
        .env("ONECHARGE_DATABASE_URL", &env.settings.database_url)
        .env("ONECHARGE_NATS_URL", &env.settings.nats_url)
        .env("ONECHARGE_NAMESPACE", &env.settings.namespace)
        .env("ONECHARGE_GATEWAY_URL", gateway.base_url())
        .env("ONECHARGE_GATEWAY_API_KEY", API_KEY)
        .env("ONECHARGE_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("ONECHARGE_ADMIN_ADDR", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run onecharge serve");
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let readers = [
        collect_lines(child.stdout.take().unwrap(), stdout.clone()),
        collect_lines(child.stderr.take().unwrap(), stderr.clone()),
    ];
    let rejected = |line: &String| line.contains("rejected onecharge's API key");
    eventually(
        "the executor reports the rejected key",
        Duration::from_secs(30),
        || async { stderr.lock().unwrap().iter().any(rejected) },
    )
    .await;
    assert!(sigterm(child.id()));
    let exit = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    for reader in readers {
        reader.join().unwrap();
    }
    assert!(exit.success(), "serve exits 0 after SIGTERM: {exit}");

    let stderr = stderr.lock().unwrap().clone();
    let all = format!(
        "{}\n{}",
        stdout.lock().unwrap().join("\n"),
        stderr.join("\n")
    );
    assert!(stderr.len() > 20, "RUST_LOG=debug logs the run");
    for secret in [API_KEY, ADMIN_TOKEN] {
        assert!(!all.contains(secret), "the output contains {secret}");
    }
    let lines: Vec<Value> = stderr
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let fault = lines
        .iter()
        .find(|line| {
            line["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("rejected onecharge's API key"))
        })
        .unwrap();
    assert_eq!(fault["level"], "ERROR");
    let execute = span(fault, "execute").expect("logged inside the executor's span");
    assert_eq!(execute["payment_attempt_id"], attempt.to_string());
    assert_eq!(execute["causation_id"], "obs-secret");
    assert_eq!(execute["correlation_id"], "corr-test");
    // the business effect: nothing charged, the attempt waits for a working key
    assert!(gateway.stats().unauthorized >= 1);
    assert!(gateway.ledger().is_empty());
    assert_eq!(env.status(attempt).await, "pending");
}
