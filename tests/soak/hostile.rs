//! Availability under hostile input (issue 52): one `serve` with every role charges a
//! stream of valid commands twice — once in quiet, once while a slowloris client holds
//! connections to its admin listener, a `/readyz` and forged-cookie flood hits it, and
//! producers publish commands that can never be dead-lettered (headers larger than the
//! dead-letter stream takes). Every valid command must be charged once and announced once
//! in both phases; the run prints the command → outcome latency of each, side by side.
//!
//! `SOAK_COMMANDS` (default 400) valid commands per phase;
//! `cargo test --release --test soak hostile -- --nocapture` prints the figures.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use mock_gateway::MockConfig;
use serde_json::json;
use time::OffsetDateTime;
use tokio::io::AsyncWriteExt as _;
use uuid::Uuid;

use crate::support::{command, edit_stream, Harness, Records, Served};

/// Commands that can never be dead-lettered, published during the attack.
const UNDELIVERABLE: usize = 600;
/// Connections the slowloris client keeps trickling headers on.
const SLOWLORIS_CONNECTIONS: usize = 300;
/// Concurrent loops of `/readyz` and forged-cookie console requests.
const FLOODERS: usize = 64;

/// What one phase measured.
struct Phase {
    /// Command → event latencies, milliseconds, sorted.
    latencies_ms: Vec<f64>,
}

impl Phase {
    fn quantile(&self, q: f64) -> f64 {
        let i = ((self.latencies_ms.len() - 1) as f64 * q).round() as usize;
        self.latencies_ms[i]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_a_readyz_flood_and_undeliverable_commands_leave_every_valid_command_charged_once_and_announced(
) {
    let per_phase = crate::commands(400);
    let mut h = Harness::with(MockConfig::default(), |s| {
        s.executor.concurrency = 64;
        s.intake.audit_interval = Duration::ZERO;
        s.admin_addr = "127.0.0.1:0".parse().unwrap();
    })
    .await;
    let broker = h.broker().await;
    let served = Served::start(&h.settings, &[]).await;
    let admin = served.admin.expect("the admin role listens");
    edit_stream(&broker, &broker.names.dlq_stream(), |config| {
        config.max_message_size = 1024
    })
    .await;

    let quiet = run_phase(&broker, per_phase).await;

    let attacking = Arc::new(AtomicBool::new(true));
    let shed = Arc::new(AtomicU64::new(0));
    let mut attackers = tokio::task::JoinSet::new();
    attackers.spawn(slowloris(admin, attacking.clone()));
    for i in 0..FLOODERS {
        attackers.spawn(flood(admin, i, attacking.clone(), shed.clone()));
    }
    attackers.spawn(undeliverable(broker.clone(), UNDELIVERABLE));
    let attacked = run_phase(&broker, per_phase).await;
    attacking.store(false, Ordering::SeqCst);
    while attackers.join_next().await.is_some() {}

    // Every valid command: one charge at the gateway, one event on the stream.
    let mut charges: HashMap<String, usize> = HashMap::new();
    for charge in h.gateway.ledger() {
        *charges.entry(charge.reference).or_default() += 1;
    }
    assert_eq!(charges.len(), 2 * per_phase, "every valid command charged");
    assert!(charges.values().all(|n| *n == 1), "a command charged twice");
    let attempts = h.attempt_rows().await;
    assert_eq!(
        attempts,
        (2 * per_phase) as i64,
        "only the valid commands became attempts"
    );
    // Nothing is held: the undeliverable commands were let go, not kept for ever.
    let consumer = h.settings.intake.consumer.clone();
    crate::support::eventually("intake holds nothing", Duration::from_secs(60), || async {
        let stream = broker
            .jetstream
            .get_stream(broker.names.commands_stream())
            .await
            .unwrap();
        let info = stream.consumer_info(&consumer).await.unwrap();
        info.num_pending == 0 && info.num_ack_pending == 0
    })
    .await;

    println!(
        "hostile soak: {per_phase} commands a phase; command -> outcome p50 {:.0} ms / p99 {:.0} ms quiet, p50 {:.0} ms / p99 {:.0} ms under attack (p50 ratio {:.2}); {} admin requests shed, {UNDELIVERABLE} undeliverable commands, {SLOWLORIS_CONNECTIONS} slowloris connections",
        quiet.quantile(0.5),
        quiet.quantile(0.99),
        attacked.quantile(0.5),
        attacked.quantile(0.99),
        attacked.quantile(0.5) / quiet.quantile(0.5).max(1.0),
        shed.load(Ordering::SeqCst),
    );
    served.stop().await;
}

/// Publishes `n` valid commands at about 200 a second and waits for each one's event;
/// every command's latency from its publish to its event's `occurred_at`.
async fn run_phase(broker: &onecharge::broker::Broker, n: usize) -> Phase {
    let mut published: HashMap<Uuid, OffsetDateTime> = HashMap::new();
    let events_before = event_count(broker).await;
    for i in 0..n {
        let attempt = Uuid::new_v4();
        let body = serde_json::to_vec(&command(attempt, json!({}))).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("m-{attempt}").as_str());
        published.insert(attempt, OffsetDateTime::now_utc());
        broker
            .jetstream
            .publish_with_headers(broker.names.charge_subject(), headers, body.into())
            .await
            .unwrap()
            .await
            .unwrap();
        if i % 10 == 9 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    crate::support::eventually(
        "every command of the phase is announced",
        Duration::from_secs(120),
        || async { event_count(broker).await >= events_before + n as u64 },
    )
    .await;
    let events =
        crate::support::nats::stream_messages(&broker.jetstream, &broker.names.events_stream())
            .await;
    let mut latencies_ms = Vec::new();
    let mut announced: HashMap<Uuid, usize> = HashMap::new();
    for event in events {
        let body: serde_json::Value = serde_json::from_slice(&event.payload).unwrap();
        let attempt: Uuid = body["payment_attempt_id"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let Some(sent) = published.get(&attempt) else {
            continue;
        };
        *announced.entry(attempt).or_default() += 1;
        assert_eq!(body["status"], "succeeded", "{body}");
        let occurred = OffsetDateTime::parse(
            body["occurred_at"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap();
        latencies_ms.push((occurred - *sent).as_seconds_f64() * 1000.0);
    }
    assert_eq!(announced.len(), n, "every command announced");
    assert!(announced.values().all(|n| *n == 1), "announced once each");
    latencies_ms.sort_by(f64::total_cmp);
    Phase { latencies_ms }
}

async fn event_count(broker: &onecharge::broker::Broker) -> u64 {
    let mut stream = broker
        .jetstream
        .get_stream(broker.names.events_stream())
        .await
        .unwrap();
    stream.info().await.unwrap().state.messages
}

/// Keeps `SLOWLORIS_CONNECTIONS` connections trickling headers, opening a new one for each
/// the server cuts off.
async fn slowloris(admin: SocketAddr, attacking: Arc<AtomicBool>) {
    let mut open = Vec::new();
    while attacking.load(Ordering::SeqCst) {
        while open.len() < SLOWLORIS_CONNECTIONS {
            let Ok(mut stream) = tokio::net::TcpStream::connect(admin).await else {
                break;
            };
            if stream
                .write_all(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .await
                .is_ok()
            {
                open.push(stream);
            }
        }
        let mut kept = Vec::new();
        for mut stream in open.drain(..) {
            if stream.write_all(b"X-Slow: 1\r\n").await.is_ok() {
                kept.push(stream);
            }
        }
        open = kept;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `/readyz`, and a console page with a made-up session cookie, as fast as answered.
async fn flood(admin: SocketAddr, n: usize, attacking: Arc<AtomicBool>, shed: Arc<AtomicU64>) {
    let client = reqwest::Client::new();
    while attacking.load(Ordering::SeqCst) {
        let request = if n.is_multiple_of(2) {
            client.get(format!("http://{admin}/readyz"))
        } else {
            client.get(format!("http://{admin}/console/")).header(
                "cookie",
                format!("onecharge_console={}.{}", "a".repeat(64), "b".repeat(64)),
            )
        };
        if let Ok(Ok(response)) = tokio::time::timeout(Duration::from_secs(5), request.send()).await
        {
            if response.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE {
                shed.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// `n` invalid commands whose headers alone are larger than the dead-letter stream takes.
async fn undeliverable(broker: onecharge::broker::Broker, n: usize) {
    for i in 0..n {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("m-undeliverable-{i}").as_str());
        headers.insert("X-Producer-Trace", "t".repeat(2000).as_str());
        broker
            .jetstream
            .publish_with_headers(broker.names.charge_subject(), headers, "{not json".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}
