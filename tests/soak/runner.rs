//! The crash-and-fault soak (issue 7): several real `onecharge serve` processes on one
//! database and one broker of the soak's own, a mock gateway injecting every fault kind,
//! thousands of commands with retries, duplicates, conflicts and invalid messages, processes
//! SIGKILLed and restarted at seeded random moments and the broker restarted — then, once
//! everything has settled, the promise of contract §1 checked against the gateway's ledger,
//! the database and the streams.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mock_gateway::{
    Dialect, FaultConfig, FaultRule, Latency, MockConfig, MockGateway, RefundFaults,
};
use onecharge::broker::{CommandKind, Names};
use onecharge::config::IntakeSettings;
use onecharge::gateway::GatewayKind;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use sqlx::PgPool;
use uuid::Uuid;

use crate::broker::{SoakBroker, Topology};
use crate::fleet::{self, onecharge, Fleet};
use crate::mix::{self, Kind, Plan};
use crate::patroni::{self, Drill, FailoverReport};
use crate::refunds::{self, RefundsSeen};
use crate::support::throwaway::{server_url, ThrowawayDatabase};
use crate::support::Records as _;
use crate::verify::{self, Observed};
use crate::webhooks;

/// How big and how rough one soak run is.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    pub seed: u64,
    /// About this many messages are published.
    pub commands: usize,
    /// `onecharge serve` processes.
    pub processes: usize,
    /// Original commands per publishing round, and the pause between rounds.
    pub round_size: usize,
    pub round_interval: Duration,
    /// Pause between two kills, drawn uniformly from this range.
    pub kill_every: (Duration, Duration),
    /// How long a killed process stays down, drawn uniformly from this range.
    pub down_for: (Duration, Duration),
    /// At least this many kills (the soak keeps killing after publishing until it got them),
    /// and never more than `max_kills`.
    pub min_kills: usize,
    pub max_kills: usize,
    /// Broker faults, spread over the publishing time: restarts of the one server, or on a
    /// cluster SIGKILLs of a stream's leader (one server down at a time).
    pub broker_restarts: usize,
    /// One server, or a three-node cluster with R3 streams.
    pub topology: Topology,
    /// Longest wait for quiescence once the killing stopped.
    pub settle_timeout: Duration,
    /// The protocol onecharge and the mock gateway speak.
    pub gateway: GatewayKind,
    /// The chance of a `500` after a request began executing, nothing charged
    /// (`error_before`). The Stripe dialect saves it under the key and replays it to every
    /// request with that key, as Stripe does, on the create and on the confirm.
    pub server_errors: f64,
    /// Stripe only: every serve process also listens for webhooks on a port of its own,
    /// the mock sends its signed events to all of them, and a forger posts forged, stale
    /// and unsigned ones about real attempts throughout the chaos (`crate::webhooks`).
    pub webhooks: bool,
    /// The first `spared` serve processes are never killed (a drill watches serve 0).
    pub spared: usize,
    /// A PostgreSQL failover drill (`crate::patroni`): the soak's database is a Patroni
    /// cluster's, reached through HAProxy, and the drill's fault comes mid-run.
    pub database: Option<Drill>,
}

/// The figures of one run.
#[derive(Debug)]
pub struct SoakReport {
    pub problems: Vec<verify::Problem>,
    /// What the failover drill saw, when the run was one.
    pub failover: Option<FailoverReport>,
}

/// The soak's database and work directory: removed at the end, kept when the run panicked
/// or found a problem (the paths are printed) so the logs and rows can be read.
struct Workspace {
    dir: Option<tempfile::TempDir>,
    database: Option<ThrowawayDatabase>,
    /// Set when the checks found a problem (the caller's assertion fails after the drop).
    keep: bool,
}

impl Workspace {
    fn path(&self) -> &Path {
        self.dir.as_ref().expect("work dir").path()
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if std::thread::panicking() || self.keep {
            let dir = self.dir.take().expect("work dir").keep();
            eprintln!("soak failed: kept its logs in {}", dir.display());
            drop(self.database.take().map(|d| d.kept(true)));
        }
    }
}

/// The gateway's faults: every kind, by seeded chance, on top of the payment methods that
/// trigger one on their first try; and the refunds' own: every fault of a refund call and
/// of a refund lookup, and refunds that start `pending` (settling 2 s later) or `failed`.
fn soak_faults(server_errors: f64) -> FaultConfig {
    FaultConfig {
        error_before: FaultRule::probability(server_errors),
        error_after: FaultRule::probability(0.03),
        hang_after: FaultRule::probability(0.01),
        drop_after: FaultRule::probability(0.02),
        rate_limit: FaultRule::probability(0.03),
        latency: Latency {
            fixed_ms: 1,
            jitter_ms: 15,
        },
        // no slow_charge: a key held in progress for a minute would only stall the run
        refunds: RefundFaults {
            error_before: FaultRule::probability(0.02),
            error_after: FaultRule::probability(0.03),
            hang_after: FaultRule::probability(0.02),
            drop_after: FaultRule::probability(0.03),
            rate_limit: FaultRule::probability(0.03),
            pending: FaultRule::probability(0.15),
            failed: FaultRule::probability(0.03),
            lookup_error: FaultRule::probability(0.03),
            lookup_hang: FaultRule::probability(0.01),
            lookup_drop: FaultRule::probability(0.02),
            // no requires_action: it waits for a person's control at the gateway, and would
            // end in review after reconciler.processing_max
            ..RefundFaults::default()
        },
        ..FaultConfig::default()
    }
}

/// The settings of every onecharge process: short timeouts and intervals so that ambiguous
/// outcomes, expired leases and retries settle within seconds.
fn config_file(
    dir: &Path,
    database_url: &str,
    broker: &SoakBroker,
    gateway: &MockGateway,
    api_key: &str,
    namespace: &str,
    config: &SoakConfig,
) -> PathBuf {
    let path = dir.join("onecharge.toml");
    // Each process's webhook_addr is its own (ONECHARGE_WEBHOOK_ADDR); the secret is one.
    let webhook_secrets = if config.webhooks {
        format!("stripe_webhook_secrets = \"{}\"\n", crate::webhooks::SECRET)
    } else {
        String::new()
    };
    let text = format!(
        r#"# written by tests/soak.rs
{webhook_secrets}
database_url = "{database_url}"
nats_url = "{nats_url}"
gateway_url = "{gateway_url}"
gateway_kind = "{gateway_kind}"
gateway_api_key = "{api_key}"
admin_addr = "127.0.0.1:0"
namespace = "{namespace}"
gateway_connect_timeout = "500ms"
gateway_request_timeout = "1s"
# The mock finishes every request within 1.5 s (a held answer): a lookup that finds nothing
# 5 s after the last send (the least the settings allow: lease + both timeouts) proves
# nothing was done, so a refund whose send never reached the gateway (a 500 before it, a
# kill between its claim and its call) is sent again within the run, not 10 minutes later.
gateway_max_processing_time = "5s"

[intake]
ack_wait = "2s"
# A kill or the broker restart costs each message in hand one delivery; 20 keeps a message
# that is unlucky several times from being dead-lettered as exhausted.
max_deliver = 20
retry_min_delay = "100ms"
retry_max_delay = "1s"
# The stream audit runs in every serve process through the kills (one at a time); the soak
# checks at the end that it found exactly the commands never recorded.
audit_interval = "2s"
audit_grace = "1s"
audit_batch_size = 100000

[executor]
lease = "3s"
poll_interval = "50ms"
retry_min_delay = "100ms"
retry_max_delay = "1s"
in_progress_delay = "300ms"
credentials_probe_interval = "1s"
breaker_cooldown = "1s"

[streams]
replicas = {replicas}

[relay]
poll_interval = "50ms"
publish_timeout = "2s"

[refunds]
# A refund published before its charge asks again this often whether the charge is final,
# and gives up (refused, with the charge's state as the reason) after max_wait.
recheck_interval = "300ms"
max_wait = "1m"

[reconciler]
schedule = ["1s", "2s", "4s"]
# A refund the gateway holds `pending` settles there 2 s later.
processing_schedule = ["1s", "2s"]
poll_interval = "200ms"
claim_hold = "3s"
"#,
        nats_url = broker.url(),
        replicas = broker.replicas(),
        gateway_url = gateway.base_url(),
        gateway_kind = config.gateway.as_str(),
    );
    std::fs::write(&path, text).expect("write config");
    path
}

fn between(rng: &mut StdRng, range: (Duration, Duration)) -> Duration {
    let (low, high) = (range.0.as_millis() as u64, range.1.as_millis() as u64);
    Duration::from_millis(rng.gen_range(low..=high))
}

/// Runs one soak and returns the problems found (the caller asserts there are none).
pub async fn run(config: SoakConfig) -> SoakReport {
    let started = Instant::now();
    let tag = Uuid::new_v4().simple().to_string();
    // A drill's database is its Patroni cluster's (through HAProxy); `setup` creates it.
    let mut cluster = match &config.database {
        Some(drill) => Some(patroni::start_cluster(drill).await),
        None => None,
    };
    let workspace = Workspace {
        dir: Some(
            tempfile::Builder::new()
                .prefix("onecharge-soak-")
                .tempdir()
                .expect("tempdir"),
        ),
        database: cluster.is_none().then(|| {
            ThrowawayDatabase::named(&server_url(), "onecharge_test_soak").kept_if_failing()
        }),
        keep: false,
    };
    let dir = workspace.path().to_owned();
    let database_url = match &cluster {
        Some(cluster) => cluster.database_url("onecharge"),
        None => workspace.database.as_ref().expect("database").url(),
    };
    let namespace = format!("soak-{}", &tag[..8]);
    let names = Names::new(&namespace);
    let mut rng = StdRng::seed_from_u64(config.seed);
    println!(
        "soak: seed {}, ~{} commands, {} serve processes, gateway {}, broker {:?}; work dir {}",
        config.seed,
        config.commands,
        config.processes,
        config.gateway.as_str(),
        config.topology,
        dir.display()
    );

    let mut nats = SoakBroker::start(&dir, config.topology).await;
    let api_key = format!("sk_soak_{}", &tag[8..]);
    let gateway = MockGateway::start(MockConfig {
        api_key: api_key.clone(),
        seed: config.seed,
        hang_for: Duration::from_millis(1500),
        faults: soak_faults(config.server_errors),
        // A PaymentIntent left `processing` (Stripe dialect) succeeds 2 s later, inside the
        // reconciler's schedule (1 s, 2 s, 4 s).
        slow_charge_for: Duration::from_secs(2),
        // A refund that starts `pending` succeeds 2 s later, inside the processing schedule.
        refund_settle_after: Duration::from_secs(2),
        dialect: match config.gateway {
            GatewayKind::Onecharge => Dialect::Onecharge,
            GatewayKind::Stripe => Dialect::Stripe,
        },
        ..MockConfig::default()
    })
    .await
    .expect("mock gateway");
    let config_path = config_file(
        &dir,
        &database_url,
        &nats,
        &gateway,
        &api_key,
        &namespace,
        &config,
    );

    // The soak's producer. A short duplicate window on the command stream lets producer
    // retries reach intake, as they do in production once JetStream's window has passed.
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .max_reconnects(None)
        .connect(nats.urls())
        .await
        .expect("connect to the soak's nats-server");
    let jetstream = async_nats::jetstream::new(client);
    jetstream
        .create_stream(async_nats::jetstream::stream::Config {
            name: names.commands_stream(),
            subjects: vec![format!("{namespace}.payments.commands.>")],
            storage: async_nats::jetstream::stream::StorageType::File,
            duplicate_window: Duration::from_millis(100),
            num_replicas: nats.replicas(),
            max_age: Duration::from_secs(24 * 3600),
            ..Default::default()
        })
        .await
        .expect("command stream");
    let setup = onecharge(&config_path)
        .arg("setup")
        .output()
        .expect("run onecharge setup");
    crate::support::assert_exited_ok(&setup, "onecharge setup");
    let pool = PgPool::connect(&database_url).await.expect("soak database");

    let plan = std::sync::Arc::new(Plan::new(
        config.seed,
        config.commands,
        config.round_size,
        config.gateway,
    ));
    let webhook_addrs = if config.webhooks {
        assert_eq!(config.gateway, GatewayKind::Stripe, "webhooks are Stripe's");
        let addrs = webhooks::free_addrs(config.processes);
        webhooks::register(&gateway.base_url(), &addrs).await;
        addrs
    } else {
        Vec::new()
    };
    // A drill watches serve 0's `/readyz` and `/metrics` on an address it knows.
    let admin_addrs = if config.database.is_some() {
        webhooks::free_addrs(1)
    } else {
        Vec::new()
    };
    let mut fleet = Fleet::start(
        &config_path,
        &dir,
        config.processes,
        &webhook_addrs,
        &admin_addrs,
    );
    let mut failover = None;
    let stop_forging = tokio_util::sync::CancellationToken::new();
    let forger = config.webhooks.then(|| {
        tokio::spawn(webhooks::forge(
            pool.clone(),
            webhook_addrs.clone(),
            config.seed,
            stop_forging.clone(),
        ))
    });

    // Round 0 (the messages without an id) goes out before the first fault; the rest while
    // processes and the broker are being killed.
    let publisher = tokio::spawn({
        let plan = plan.clone();
        let jetstream = jetstream.clone();
        let subjects = mix::Subjects {
            charge: names.charge_subject(),
            refund: names.command_subject(CommandKind::Refund),
        };
        let pool = pool.clone();
        let interval = config.round_interval;
        async move { mix::publish(&plan, jetstream, subjects, pool, interval).await }
    });

    let chaos_started = Instant::now();
    let expected_publishing = config.round_interval * plan.rounds.len() as u32;
    let fault_at = config
        .database
        .as_ref()
        .map(|drill| expected_publishing.mul_f64(drill.at));
    let restart_at: Vec<Duration> = (1..=config.broker_restarts)
        .map(|k| expected_publishing * k as u32 / (config.broker_restarts as u32 + 1))
        .collect();
    let chaos_deadline = chaos_started + expected_publishing * 3 + Duration::from_secs(60);
    let mut broker_restarts = 0;
    let mut fleet_crashes = 0;
    tokio::time::sleep(Duration::from_millis(500)).await;
    loop {
        fleet.supervise();
        if let (Some(at), Some(drill)) = (fault_at, &config.database) {
            if failover.is_none() && chaos_started.elapsed() >= at {
                println!(
                    "  {:>5.1}s database fault: {:?}",
                    started.elapsed().as_secs_f64(),
                    drill.fault
                );
                let watch = patroni::Watch {
                    admin: format!("http://{}", admin_addrs[0]),
                    log_dir: dir.clone(),
                };
                failover = Some(tokio::spawn(patroni::make_fault(
                    cluster.take().expect("the cluster"),
                    drill.fault,
                    watch,
                )));
            }
        }
        let done = publisher.is_finished()
            && fleet.kills >= config.min_kills.min(config.max_kills)
            && broker_restarts >= config.broker_restarts
            && (fault_at.is_none() || failover.is_some());
        if done || Instant::now() > chaos_deadline {
            break;
        }
        tokio::time::sleep(between(&mut rng, config.kill_every)).await;
        if broker_restarts < config.broker_restarts
            && (chaos_started.elapsed() >= restart_at[broker_restarts] || publisher.is_finished())
        {
            let down = between(
                &mut rng,
                (Duration::from_millis(500), Duration::from_millis(2000)),
            );
            let at = started.elapsed().as_secs_f64();
            let streams = [
                names.commands_stream(),
                names.events_stream(),
                names.dlq_stream(),
            ];
            let what = nats.fault(broker_restarts, down, &streams).await;
            println!("  {at:>5.1}s {what}");
            broker_restarts += 1;
            continue;
        }
        if fleet.kills >= config.max_kills {
            continue;
        }
        // Now and then the whole fleet crashes at once (a host going down); otherwise one.
        let victims: Vec<usize> = if rng.gen_range(0..100) < 15 {
            fleet_crashes += 1;
            (config.spared..fleet.len()).collect()
        } else {
            vec![rng.gen_range(config.spared..fleet.len())]
        };
        for &victim in &victims {
            fleet.kill(victim);
        }
        let down = between(&mut rng, config.down_for);
        println!(
            "  {:>5.1}s SIGKILL serve {victims:?}, down for {down:?}",
            started.elapsed().as_secs_f64()
        );
        tokio::time::sleep(down).await;
        for &victim in &victims {
            fleet.restart(victim);
        }
    }
    let published = publisher.await.expect("publisher");
    let chaos_time = chaos_started.elapsed();
    let mut failover_report = None;
    if let Some(failover) = failover {
        let (back, mut report) = failover.await.expect("the database fault");
        cluster = Some(back);
        if config
            .database
            .as_ref()
            .is_some_and(|drill| drill.fault == patroni::Fault::LeaderLostAheadOfItsReplicas)
        {
            fleet.supervise();
            report.loss = Some(
                patroni::account_for_loss(&pool, &jetstream, &names, &plan, &config_path).await,
            );
        }
        failover_report = Some(report);
    }
    stop_forging.cancel();
    let forged = match forger {
        Some(forger) => Some(forger.await.expect("forger")),
        None => None,
    };
    println!(
        "  {:>5.1}s chaos over: {} kills ({} whole-fleet crashes), {} broker restarts; waiting for quiescence",
        started.elapsed().as_secs_f64(),
        fleet.kills,
        fleet_crashes,
        broker_restarts
    );

    let settle_started = Instant::now();
    let settled = wait_for_quiescence(
        &pool,
        &jetstream,
        &names,
        &plan,
        &mut fleet,
        config.settle_timeout,
    )
    .await;
    let settle_time = settle_started.elapsed();
    fleet.wait_until_serving(Duration::from_secs(30)).await;
    let exits = fleet.terminate(Duration::from_secs(30)).await;
    if let Err(state) = settled {
        let stuck: Vec<Uuid> = pool.try_open_attempt_ids(5).await.unwrap_or_default();
        let shown: Vec<String> = stuck
            .iter()
            .map(|id| show_attempt(&config_path, *id))
            .collect();
        let unsettled_refunds: Vec<String> = pool
            .all_refunds()
            .await
            .into_iter()
            .filter(|r| {
                !["succeeded", "failed", "refused", "needs_review"].contains(&r.status.as_str())
            })
            .take(5)
            .map(|r| format!("{r:?}"))
            .collect();
        panic!(
            "the soak did not settle within {:?}: {state}\nunsettled attempts (first 5):\n{}\nunsettled refunds (first 5):\n{}",
            config.settle_timeout,
            shown.join("\n"),
            unsettled_refunds.join("\n")
        );
    }
    for (status, log) in &exits {
        assert!(
            status.is_some_and(|s| s.success()),
            "a serve process did not drain and exit 0 on SIGTERM ({status:?}); last line of {}: {}",
            log.display(),
            fleet::last_line(log)
        );
    }

    let observed = Observed::read(&pool, &jetstream, &names, gateway.ledger()).await;
    let mut problems = verify::check(&plan, &observed);
    let refunds_seen = RefundsSeen::read(&pool, gateway.refunds()).await;
    let (refund_problems, refund_figures) = refunds::check(&plan, &observed, &refunds_seen);
    problems.extend(refund_problems);
    let audited = audit_findings(&config_path);
    problems.extend(verify::check_audit(&plan, &observed, &audited));
    let webhooks_seen = match &forged {
        Some(forged) => {
            let seen =
                webhooks::WebhooksSeen::read(&pool, gateway.webhook_deliveries(), &dir).await;
            let (webhook_problems, figures) = webhooks::check(&observed, forged, &seen);
            problems.extend(webhook_problems);
            Some((seen, figures))
        }
        None => None,
    };
    if let (Some(report), Some(drill)) = (&failover_report, &config.database) {
        problems.extend(patroni::gates(
            report,
            drill.fault,
            &plan,
            &observed,
            &refund_figures.review_reasons,
            &fleet.unexpected_exits,
        ));
    }
    for panic in fleet::panics(&dir) {
        problems.push(verify::Problem {
            attempt: None,
            text: format!("a serve process panicked: {panic}"),
        });
    }
    let stats = gateway.stats();
    let event_copies = observed.events.len();
    println!(
        "soak summary (seed {}, gateway {}, broker {:?})",
        config.seed,
        config.gateway.as_str(),
        config.topology
    );
    println!(
        "  messages published        {} ({} originals, {} producer retries, {} business duplicates, {} conflicts, {} invalid, {} refund messages); {} publishes retried after a broker error",
        published.messages,
        published.of_kind(Kind::Original),
        published.of_kind(Kind::ProducerRetry),
        published.of_kind(Kind::BusinessDuplicate),
        published.of_kind(Kind::Conflict),
        published.of_kind(Kind::Invalid),
        published.of_kind(Kind::Refund)
            + published.of_kind(Kind::RefundRetry)
            + published.of_kind(Kind::RefundDuplicate),
        published.retried_after_error,
    );
    println!(
        "  serve processes           {} ({} SIGKILLs, {} whole-fleet crashes, {} exits on their own)",
        fleet.len(),
        fleet.kills,
        fleet_crashes,
        fleet.unexpected_exits.len()
    );
    for exit in &fleet.unexpected_exits {
        println!("    {exit}");
    }
    match config.topology {
        Topology::Single => println!("  broker restarts           {broker_restarts}"),
        Topology::Cluster => println!(
            "  stream leaders killed     {broker_restarts} (one server of three at a time, R3 streams)"
        ),
    }
    println!(
        "  payment attempts          {} (of {} published)",
        observed.attempts.len(),
        plan.attempts.len()
    );
    for (status, n) in observed.by_status() {
        println!("    {status:<23} {n}");
    }
    for (reason, n) in observed.review_reasons() {
        println!("      {n:>4} × {reason}");
    }
    println!(
        "  gateway                   {} succeeded charges, {} declined; {} requests ({} lookups)",
        observed.succeeded_charges(),
        observed.ledger.len() - observed.succeeded_charges(),
        stats.requests,
        stats.lookups
    );
    println!(
        "  onecharge publish retries {} (serve log lines \"publish not acknowledged\")",
        fleet::count_lines(&dir, "publish not acknowledged")
    );
    println!(
        "  killed mid-charge         {} attempts whose lease expired",
        observed.lease_expired
    );
    refunds::print(&plan, &published, &refund_figures);
    println!(
        "  events on the stream      {event_copies} messages for {} outbox events",
        observed
            .outbox
            .iter()
            .filter(|row| row.status != "refund_dead_letter")
            .count()
    );
    println!(
        "  dead letters              {}",
        observed.dead_letters.len()
    );
    if let (Some(forged), Some((seen, figures))) = (&forged, &webhooks_seen) {
        webhooks::print(forged, seen, figures);
    }
    println!(
        "  time                      {:.1?} total: publishing {:.1?}, chaos {:.1?}, settling {:.1?}",
        started.elapsed(),
        published.duration,
        chaos_time,
        settle_time
    );
    if let Some(report) = &failover_report {
        report.print();
    }
    if !problems.is_empty() {
        println!("PROBLEMS ({}), by kind:", problems.len());
        for (count, kind) in problem_kinds(&problems) {
            println!("  {count:>5} × {kind}");
        }
        println!("PROBLEMS ({}):", problems.len());
        for problem in problems.iter().take(50) {
            println!("  {}", problem.text);
        }
        print_where_unrecorded_messages_are(&problems, &jetstream, &names).await;
        let mut shown = std::collections::HashSet::new();
        for id in problems.iter().filter_map(|p| p.attempt) {
            if shown.len() >= 5 {
                break;
            }
            if shown.insert(id) {
                println!("{}", show_attempt(&config_path, id));
            }
        }
    }
    drop(fleet);
    gateway.shutdown().await;
    drop(nats);
    if let Some(cluster) = &mut cluster {
        if !problems.is_empty() {
            cluster.keep_logs();
        }
    }
    drop(cluster);
    let mut workspace = workspace;
    workspace.keep = !problems.is_empty();
    drop(workspace);
    SoakReport {
        problems,
        failover: failover_report,
    }
}

/// The problems by kind: each text with every word that holds a digit (ids, amounts,
/// sequences) as `#`, cut at 90 characters, counted, most first.
fn problem_kinds(problems: &[verify::Problem]) -> Vec<(usize, String)> {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for problem in problems {
        let kind: Vec<&str> = problem
            .text
            .split(' ')
            .map(|word| {
                if word.chars().any(|c| c.is_ascii_digit()) {
                    "#"
                } else {
                    word
                }
            })
            .collect();
        *counts
            .entry(kind.join(" ").chars().take(90).collect())
            .or_default() += 1;
    }
    let mut out: Vec<(usize, String)> = counts.into_iter().map(|(k, n)| (n, k)).collect();
    out.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    out
}

/// For each valid message never recorded as processed, the command stream's sequences that
/// hold it: none means JetStream lost an acknowledged publish, some means intake did.
async fn print_where_unrecorded_messages_are(
    problems: &[verify::Problem],
    jetstream: &async_nats::jetstream::Context,
    names: &Names,
) {
    let unrecorded: Vec<&str> = problems
        .iter()
        .filter_map(|p| p.text.strip_prefix("valid message "))
        .filter(|t| t.ends_with(" was never recorded as processed"))
        .filter_map(|t| t.split(' ').next())
        .collect();
    if unrecorded.is_empty() {
        return;
    }
    let commands = verify::stream_messages(jetstream, &names.commands_stream()).await;
    for id in unrecorded {
        let sequences: Vec<u64> = commands
            .iter()
            .filter(|m| m.header("Nats-Msg-Id") == Some(id))
            .map(|m| m.sequence)
            .collect();
        println!("  the command stream holds {id} at sequences {sequences:?}");
    }
}

/// `onecharge attempts show <id> --json`: the evidence for a report.
/// The message ids (`-` for none) of the stream audit's open findings after a last pass,
/// from `onecharge intake audit --json` (the serve processes are stopped by then, so the
/// intake consumer's ack floor is the end of the stream).
fn audit_findings(config: &Path) -> Vec<String> {
    let out = onecharge(config)
        .args(["intake", "audit", "--json"])
        .output()
        .expect("run onecharge intake audit");
    crate::support::assert_exited_ok(&out, "onecharge intake audit");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("intake audit --json is JSON");
    report["unrecorded"]
        .as_array()
        .expect("an unrecorded array")
        .iter()
        .map(|m| m["message_id"].as_str().unwrap_or("-").to_owned())
        .collect()
}

fn show_attempt(config: &Path, id: Uuid) -> String {
    match onecharge(config)
        .args(["attempts", "show", &id.to_string(), "--json"])
        .output()
    {
        Ok(out) => format!(
            "attempts show {id}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(err) => format!("attempts show {id}: {err}"),
    }
}

/// Waits until every attempt and every refund is recorded and settled, every event
/// published, every dead letter written and both intake consumers have nothing left;
/// restarts processes that end by themselves meanwhile. `Err` carries the last state seen.
async fn wait_for_quiescence(
    pool: &PgPool,
    jetstream: &async_nats::jetstream::Context,
    names: &Names,
    plan: &Plan,
    fleet: &mut Fleet,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let expected_dead = (plan.dead_letter_ids.len() + plan.invalid_without_id) as u64;
    let mut last;
    let mut last_print = Instant::now();
    loop {
        fleet.supervise();
        match quiescence_state(
            pool,
            jetstream,
            names,
            plan.attempts.len() as i64,
            plan.refunds.len() as i64,
            expected_dead,
        )
        .await
        {
            Ok((true, state)) => {
                println!("  settled: {state}");
                return Ok(());
            }
            Ok((false, state)) => last = state,
            Err(err) => last = format!("(cannot read state: {err})"),
        }
        if last_print.elapsed() > Duration::from_secs(5) {
            println!("  settling: {last}");
            last_print = Instant::now();
        }
        if Instant::now() > deadline {
            return Err(last);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn quiescence_state(
    pool: &PgPool,
    jetstream: &async_nats::jetstream::Context,
    names: &Names,
    expected_attempts: i64,
    expected_refunds: i64,
    expected_dead: u64,
) -> anyhow::Result<(bool, String)> {
    // A webhook's check (a PaymentIntent to read again) must be done too: what it finds is
    // checked at the end.
    let (attempts, open, unpublished, checks) = pool.try_drain_counts().await?;
    let (refunds, open_refunds) = pool.refund_counts().await;
    let mut dlq = jetstream.get_stream(names.dlq_stream()).await?;
    let dead = dlq.info().await?.state.messages;
    let commands = jetstream.get_stream(names.commands_stream()).await?;
    let intake = IntakeSettings::default();
    let mut backlog = Vec::new();
    for kind in [CommandKind::Charge, CommandKind::Refund] {
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = commands
            .get_consumer(&kind.consumer_name(&intake))
            .await
            .map_err(|e| anyhow::anyhow!("{} intake consumer: {e}", kind.command_name()))?;
        let info = consumer.info().await?;
        backlog.push((info.num_pending, info.num_ack_pending));
    }
    let state = format!(
        "attempts {attempts}/{expected_attempts}, open {open}, refunds {refunds}/{expected_refunds}, open {open_refunds}, unpublished events {unpublished}, webhook checks {checks}, dead letters {dead}/{expected_dead}+, intake backlog {} pending + {} unacknowledged, refund intake backlog {} + {}",
        backlog[0].0, backlog[0].1, backlog[1].0, backlog[1].1
    );
    let quiet = attempts == expected_attempts
        && open == 0
        && refunds == expected_refunds
        && open_refunds == 0
        && unpublished == 0
        && checks == 0
        && dead >= expected_dead
        && backlog
            .iter()
            .all(|&(pending, unacked)| pending == 0 && unacked == 0);
    Ok((quiet, state))
}
