//! PostgreSQL failover (issue 16): onecharge refuses connections to a read-only node and
//! drops a pooled connection that became one; and the failover drill — onecharge serving
//! through one address in front of a scratch primary with a streaming standby, the
//! replication link cut, the primary killed, the standby promoted and the address moved —
//! run with and without synchronous replication. A short synchronous drill runs with the
//! suite; the full drills (300 commands each) are `#[ignore]`d: run them with
//! `cargo test --test it failover:: -- --ignored --nocapture --test-threads=1`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::support::pg_cluster::{Forwarder, PgNode};
use crate::support::throwaway::{nats_url, ThrowawayNamespace};
use crate::support::{
    self, command, commands_stream, eventually, stream, Harness, Records, API_KEY,
};
use async_nats::HeaderMap;
use mock_gateway::{MockConfig, MockGateway};
use onecharge::app::{Application, Role};
use onecharge::broker::Broker;
use onecharge::config::{DatabaseSettings, Settings};
use onecharge::store::intake::record_batch;
use onecharge::store::{is_transient, Store};
use secrecy::SecretString;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A pool of one connection (so a retry can only succeed if the pool replaces it) whose
/// node was then demoted: every write on that connection now fails with 25006.
async fn pool_on_a_demoted_connection(h: &Harness) -> Store {
    let store = Store::connect_with(&h.settings.database_url, 1, &DatabaseSettings::default())
        .await
        .unwrap();
    let mut conn = store.pool().acquire().await.unwrap();
    sqlx::query("SET default_transaction_read_only = on")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_that_turned_read_only_is_dropped_and_the_retried_write_lands_on_a_fresh_one(
) {
    let h = Harness::new().await;
    let store = pool_on_a_demoted_connection(&h).await;

    let record = support::record("pm_card_visa", false);
    let mut failures = Vec::new();
    for _ in 0..3 {
        match record_batch(&store, "onecharge-intake", std::slice::from_ref(&record)).await {
            Ok(_) => break,
            Err(err) => {
                assert!(is_transient(&err), "{err}");
                failures.push(err.to_string());
            }
        }
    }
    assert!(
        failures.len() < 3,
        "every retry ran on the read-only connection: {failures:?}"
    );
    assert_eq!(
        h.attempt(record.command.payment_attempt_id).await.status,
        "pending"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_that_turned_read_only_while_idle_is_dropped_before_its_first_write() {
    // A process that writes rarely (the admin API) sees no refusal of its own before a
    // person's action: a connection idle for a second is asked again when handed out.
    let h = Harness::new().await;
    let store = pool_on_a_demoted_connection(&h).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    let record = support::record("pm_card_visa", false);
    record_batch(&store, "onecharge-intake", std::slice::from_ref(&record))
        .await
        .expect("the first write lands on a fresh connection");
    assert_eq!(
        h.attempt(record.command.payment_attempt_id).await.status,
        "pending"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_server_is_refused_when_the_pool_connects() {
    let h = Harness::new().await;
    let db_name = h
        .settings
        .database_url
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    let admin = PgPool::connect(&format!("{}/postgres", support::server_url()))
        .await
        .unwrap();
    sqlx::query(&format!(
        "ALTER DATABASE {db_name} SET default_transaction_read_only = on"
    ))
    .execute(&admin)
    .await
    .unwrap();
    let connected =
        Store::connect_with(&h.settings.database_url, 1, &DatabaseSettings::default()).await;
    assert!(
        connected.is_err(),
        "a pool to a read-only database was handed out"
    );
    admin.close().await;
}

/// What one drill saw, printed for docs/operations.md.
#[derive(Debug, Default)]
struct Figures {
    published: usize,
    /// Commands recorded when the replication link was cut.
    recorded_before_the_cut: i64,
    /// Sessions whose commit waited for the cut-off standby (synchronous replication).
    commit_waits_for_the_standby: i64,
    /// Commands intake acknowledged (at the end, all: the consumer has nothing pending)
    /// that have no attempt on the new primary: lost.
    acked_commands_lost: usize,
    /// Dedupe rows the old primary committed alone (read from its files afterwards).
    recorded_only_on_the_old_primary: usize,
    /// Stream sequences at or below the consumer's ack floor with no dedupe row: what an
    /// operator can compute after a failover.
    acked_sequences_without_dedupe_row: Sequences,
    dead_letters: u64,
    attempts: usize,
    succeeded: usize,
    gateway_charges: usize,
    double_charges: usize,
    /// Ledger charges whose attempt the new primary does not know: charged, unrecorded.
    charges_without_attempt: usize,
    seconds_to_settle: f64,
    /// After the lost sequences were published again under new message ids.
    after_replay_attempts: usize,
    after_replay_succeeded: usize,
    after_replay_gateway_charges: usize,
    after_replay_double_charges: usize,
    after_replay_charges_without_attempt: usize,
}

/// Stream sequences, printed as ranges (`29 sequences [103..=131]`).
#[derive(Default)]
struct Sequences(Vec<u64>);

impl std::fmt::Debug for Sequences {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for &s in &self.0 {
            match ranges.last_mut() {
                Some((_, end)) if *end + 1 == s => *end = s,
                _ => ranges.push((s, s)),
            }
        }
        let shown: Vec<String> = ranges
            .iter()
            .map(|(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}..={b}")
                }
            })
            .collect();
        write!(f, "{} sequences [{}]", self.0.len(), shown.join(", "))
    }
}

fn settings(address: &Forwarder, gateway: &MockGateway) -> Settings {
    let id = Uuid::new_v4().simple().to_string();
    let mut settings = Settings {
        database_url: format!("postgres://postgres@127.0.0.1:{}/onecharge", address.port()),
        nats_url: nats_url(),
        namespace: format!("f{}", &id[..12]),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        gateway_url: gateway.base_url(),
        gateway_api_key: Some(SecretString::from(API_KEY)),
        gateway_connect_timeout: Duration::from_secs(1),
        gateway_request_timeout: Duration::from_secs(2),
        ..Settings::default()
    };
    settings.intake.ack_wait = Duration::from_secs(2);
    // The outage must not exhaust a command into the dead-letter stream.
    settings.intake.max_deliver = 1000;
    settings.intake.retry_min_delay = Duration::from_millis(100);
    settings.intake.retry_max_delay = Duration::from_secs(1);
    settings.executor.lease = Duration::from_secs(5);
    // The shortest processing window the configuration accepts: a send may outlive neither
    // its lease nor its timeouts.
    settings.gateway_max_processing_time = settings.executor.lease
        + settings.gateway_connect_timeout
        + settings.gateway_request_timeout;
    settings.executor.poll_interval = Duration::from_millis(50);
    settings.executor.retry_min_delay = Duration::from_millis(100);
    settings.executor.retry_max_delay = Duration::from_secs(1);
    settings.reconciler.poll_interval = Duration::from_millis(200);
    settings.validate().expect("drill settings are valid");
    settings
}

/// The suite's one ChargePayment, for an order and a customer of the drill's own.
fn body(attempt: Uuid) -> Vec<u8> {
    serde_json::to_vec(&command(
        attempt,
        serde_json::json!({
            "order_id": format!("ord_{}", &attempt.simple().to_string()[..8]),
            "customer_id": "cus_failover",
            "description": null,
            "requested_at": null,
        }),
    ))
    .unwrap()
}

/// The drill. `synchronous`: every commit waits until the standby applied it.
async fn drill(synchronous: bool, commands: usize) -> Figures {
    onecharge::tls::install_crypto_provider();
    let mut figures = Figures {
        published: commands,
        ..Figures::default()
    };
    let mut primary = PgNode::start_primary("primary");
    let link = Forwarder::start(primary.addr()).await;
    let standby = primary.start_standby("standby1", &link);
    primary.wait_for_standby("standby1", "async").await;
    if synchronous {
        primary.require_synchronous_standby("standby1").await;
    }
    let address = Forwarder::start(primary.addr()).await;
    let gateway = MockGateway::start(MockConfig {
        api_key: API_KEY.to_owned(),
        ..MockConfig::default()
    })
    .await
    .expect("the mock gateway starts");
    let settings = settings(&address, &gateway);
    crate::support::set_up(&settings).await;
    let app = Application::build(
        settings.clone(),
        &[Role::Intake, Role::Executor, Role::Reconciler, Role::Relay],
    )
    .await
    .expect("onecharge builds against the primary");
    let stop = CancellationToken::new();
    let running = tokio::spawn(app.run(stop.clone()));

    // The standby is read-only until promoted: onecharge refuses to use it.
    assert!(
        Store::connect_with(&standby.url("onecharge"), 1, &DatabaseSettings::default())
            .await
            .is_err(),
        "a pool to the standby was handed out"
    );

    // The publisher runs through the whole drill, as producers do.
    let broker = Broker::connect(&settings).await.expect("NATS");
    // The drill's streams are deleted when it ends, whether it passed or failed.
    let _streams = ThrowawayNamespace::new(&settings.nats_url, &broker.names);
    let attempts: Vec<Uuid> = (0..commands).map(|_| Uuid::new_v4()).collect();
    let publisher = tokio::spawn({
        let broker = broker.clone();
        let attempts = attempts.clone();
        async move {
            for attempt in attempts {
                let mut headers = HeaderMap::new();
                headers.insert("Nats-Msg-Id", format!("msg-{attempt}").as_str());
                broker
                    .jetstream
                    .publish_with_headers(
                        broker.names.charge_subject(),
                        headers,
                        body(attempt).into(),
                    )
                    .await
                    .expect("publish")
                    .await
                    .expect("publish ack");
                // Paced like a producer, so that the failover falls mid-stream (not a wait
                // for anything).
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });

    // Watches the old primary directly (not through the address).
    let old = PgPool::connect(&primary.url("onecharge")).await.unwrap();
    eventually(
        "a third of the commands are recorded",
        Duration::from_secs(60),
        || async { old.dedupe_rows().await >= (commands / 3) as i64 },
    )
    .await;

    // A network partition between the nodes: the standby stops receiving WAL.
    link.point_at(None);
    figures.recorded_before_the_cut = old.dedupe_rows().await;
    if synchronous {
        // Commits now wait for a standby that cannot answer: nothing more is acknowledged.
        eventually(
            "commits wait for the standby",
            Duration::from_secs(30),
            || async {
                old.scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
                    .await
                    > 0
            },
        )
        .await;
        figures.commit_waits_for_the_standby = old
            .scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
            .await;
    } else {
        let at_cut = figures.recorded_before_the_cut;
        eventually(
            "the primary records more commands alone",
            Duration::from_secs(30),
            || async { old.dedupe_rows().await >= at_cut + 20 },
        )
        .await;
    }
    // The primary's host dies; the operator promotes the standby and moves the address.
    primary.kill();
    old.close().await;
    address.point_at(None);
    standby.promote();
    address.point_at(Some(standby.addr()));
    let failed_over = Instant::now();

    publisher.await.expect("every command published");
    let new = PgPool::connect(&standby.url("onecharge")).await.unwrap();
    let consumer = settings.intake.consumer.clone();
    settle(&broker, &consumer, &new).await;
    figures.seconds_to_settle = failed_over.elapsed().as_secs_f64();
    tally(&mut figures, &attempts, &gateway, &new).await;

    // Forensics: the old primary's files, started again after the crash (crash recovery)
    // but never put back behind the address, hold what it committed alone.
    primary.restart();
    let old = PgPool::connect(&primary.url("onecharge")).await.unwrap();
    let on_new: HashSet<String> = new
        .processed_messages()
        .await
        .into_iter()
        .map(|row| row.message_id)
        .collect();
    let on_old = old.processed_messages().await;
    figures.recorded_only_on_the_old_primary = on_old
        .iter()
        .filter(|row| !on_new.contains(&row.message_id))
        .count();
    old.close().await;

    // The operator's comparison: the sequences the consumer acknowledged against dedupe rows
    // and dead letters.
    figures.dead_letters = stream(&broker, &broker.names.dlq_stream())
        .await
        .info()
        .await
        .unwrap()
        .state
        .messages;
    let ack_floor = consumer_info(&broker, &consumer)
        .await
        .ack_floor
        .stream_sequence;
    let recorded: HashSet<u64> = new
        .processed_messages()
        .await
        .into_iter()
        .filter(|row| row.consumer == consumer)
        .map(|row| row.stream_sequence as u64)
        .collect();
    figures.acked_sequences_without_dedupe_row =
        Sequences((1..=ack_floor).filter(|s| !recorded.contains(s)).collect());

    // The repair: each missing sequence is published again under a new message id. Its
    // attempt id is the same, so is the idempotency key: the gateway answers with the charge
    // it already made, and onecharge records it without charging again.
    let commands_stream = stream(&broker, &broker.names.commands_stream()).await;
    for sequence in &figures.acked_sequences_without_dedupe_row.0 {
        let original = commands_stream.get_raw_message(*sequence).await.unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            "Nats-Msg-Id",
            format!("failover-replay-{sequence}").as_str(),
        );
        broker
            .jetstream
            .publish_with_headers(broker.names.charge_subject(), headers, original.payload)
            .await
            .expect("replay")
            .await
            .expect("replay ack");
    }
    settle(&broker, &consumer, &new).await;
    let mut repaired = Figures::default();
    tally(&mut repaired, &attempts, &gateway, &new).await;
    figures.after_replay_attempts = repaired.attempts;
    figures.after_replay_succeeded = repaired.succeeded;
    figures.after_replay_gateway_charges = repaired.gateway_charges;
    figures.after_replay_double_charges = repaired.double_charges;
    figures.after_replay_charges_without_attempt = repaired.charges_without_attempt;

    stop.cancel();
    running
        .await
        .unwrap()
        .expect("onecharge ran through the failover");
    new.close().await;
    println!(
        "failover drill ({}): {figures:#?}",
        if synchronous {
            "synchronous_commit = remote_apply"
        } else {
            "asynchronous replication"
        }
    );
    figures
}

/// Waits until every command was acknowledged, every attempt settled and every event
/// published, on the new primary.
async fn settle(broker: &Broker, consumer: &str, new: &PgPool) {
    eventually(
        "everything settles on the new primary",
        Duration::from_secs(180),
        || async {
            let (pending, ack_pending) = backlog(broker, consumer).await;
            pending == 0
                && ack_pending == 0
                && new.unsettled_attempts().await == 0
                && new.unpublished_events().await == 0
        },
    )
    .await;
}

/// The business effects, on the new primary and at the gateway.
async fn tally(figures: &mut Figures, attempts: &[Uuid], gateway: &MockGateway, new: &PgPool) {
    let rows = new.attempt_outcomes().await;
    let status: HashMap<Uuid, (String, Option<String>)> = rows
        .into_iter()
        .map(|(id, status, charge)| (id, (status, charge)))
        .collect();
    figures.attempts = status.len();
    figures.succeeded = status.values().filter(|(s, _)| s == "succeeded").count();
    figures.acked_commands_lost = attempts.iter().filter(|a| !status.contains_key(a)).count();
    let ledger = gateway.ledger();
    figures.gateway_charges = ledger.len();
    let mut per_attempt: HashMap<&str, usize> = HashMap::new();
    for charge in &ledger {
        *per_attempt.entry(charge.reference.as_str()).or_default() += 1;
        let attempt: Uuid = charge.reference.parse().unwrap();
        match status.get(&attempt) {
            None => figures.charges_without_attempt += 1,
            Some((state, recorded)) => {
                assert_eq!(state, "succeeded", "{attempt} was charged");
                assert_eq!(recorded.as_deref(), Some(charge.id.as_str()));
            }
        }
    }
    figures.double_charges = per_attempt.values().filter(|n| **n > 1).count();
}

async fn consumer_info(broker: &Broker, consumer: &str) -> async_nats::jetstream::consumer::Info {
    let stream = commands_stream(broker).await;
    let mut consumer: async_nats::jetstream::consumer::PullConsumer =
        stream.get_consumer(consumer).await.unwrap();
    consumer.info().await.unwrap().clone()
}

async fn backlog(broker: &Broker, consumer: &str) -> (u64, usize) {
    let info = consumer_info(broker, consumer).await;
    (info.num_pending, info.num_ack_pending)
}

/// The promise of synchronous replication, checked on a drill's figures.
fn assert_no_acknowledged_command_lost(figures: &Figures) {
    assert!(figures.commit_waits_for_the_standby > 0, "{figures:#?}");
    assert_eq!(figures.acked_commands_lost, 0, "{figures:#?}");
    assert_eq!(figures.recorded_only_on_the_old_primary, 0, "{figures:#?}");
    assert!(
        figures.acked_sequences_without_dedupe_row.0.is_empty(),
        "{figures:#?}"
    );
    assert_eq!(figures.attempts, figures.published, "{figures:#?}");
    assert_eq!(figures.succeeded, figures.published, "{figures:#?}");
    assert_eq!(figures.gateway_charges, figures.published, "{figures:#?}");
    assert_eq!(figures.double_charges, 0, "{figures:#?}");
    assert_eq!(figures.charges_without_attempt, 0, "{figures:#?}");
    assert_eq!(figures.dead_letters, 0, "{figures:#?}");
}

/// The short drill CI runs (about 10 s): fewer commands, the same steps and checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_under_synchronous_replication_loses_no_acknowledged_command() {
    assert_no_acknowledged_command_lost(&drill(true, 60).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "builds two PostgreSQL clusters; run with --ignored (docs/operations.md)"]
async fn with_synchronous_replication_no_acknowledged_command_is_lost_in_a_failover() {
    assert_no_acknowledged_command_lost(&drill(true, 300).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "builds two PostgreSQL clusters; run with --ignored (docs/operations.md)"]
async fn without_synchronous_replication_acked_commands_are_lost_the_ack_floor_finds_them_and_a_replay_charges_nothing_twice(
) {
    let figures = drill(false, 300).await;
    // What the old primary committed alone is gone, and JetStream will not redeliver it.
    assert!(figures.acked_commands_lost > 0, "{figures:#?}");
    assert_eq!(
        figures.acked_commands_lost, figures.recorded_only_on_the_old_primary,
        "{figures:#?}"
    );
    // Charged at the gateway, unknown to the new primary.
    assert!(figures.charges_without_attempt > 0, "{figures:#?}");
    // The operator's comparison finds exactly those.
    assert_eq!(
        figures.acked_sequences_without_dedupe_row.0.len(),
        figures.acked_commands_lost,
        "{figures:#?}"
    );
    assert_eq!(figures.double_charges, 0, "{figures:#?}");
    assert_eq!(figures.dead_letters, 0, "{figures:#?}");
    // Replayed, every command is an attempt with one charge: the charge made before the
    // failover is adopted, one never made is made now, none is made twice.
    assert_eq!(
        figures.after_replay_attempts, figures.published,
        "{figures:#?}"
    );
    assert_eq!(
        figures.after_replay_succeeded, figures.published,
        "{figures:#?}"
    );
    assert_eq!(
        figures.after_replay_gateway_charges, figures.published,
        "{figures:#?}"
    );
    assert_eq!(figures.after_replay_double_charges, 0, "{figures:#?}");
    assert_eq!(
        figures.after_replay_charges_without_attempt, 0,
        "{figures:#?}"
    );
}
