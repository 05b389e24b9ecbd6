//! End to end: ChargePayment commands published to JetStream the way producers publish them,
//! through one real `onecharge serve` process (intake, executor, relay and the other roles)
//! and the in-process mock gateway, to the events they cause on the events subject. One run,
//! in phases, against the same serve process:
//!
//! 1. **maximum rate**: `--max-commands` commands published as fast as JetStream acknowledges
//!    them; events/s from the first publish to the last event received (one per attempt),
//!    and by 10 s window with the serve process's RSS at each window's end; over two minutes
//!    or more, the last minute's rate against the first's and RSS after the first minute
//!    (the growth run: `--max-commands 1000000`);
//! 2. **latency**: `--latency-commands` commands paced at half that rate (or `--rate`);
//!    publish-to-event latency per attempt (p50, p90, p99, max), matched by
//!    `payment_attempt_id`;
//! 3. **resident memory** (`--memory-commands`, skipped by default): commands paced the same
//!    way while VmRSS of the serve process is sampled every 5 s; RSS after warm-up (10 % of
//!    the events) against RSS at the end.
//!
//! events/s is always counted from a phase's first publish to its last event. The maximum
//! rate is that of a burst of `--max-commands`: a short burst (1,000) overstates what the
//! service sustains, and then "half the maximum" is no longer well below capacity and the
//! latencies measure a queue; keep the default 5,000 or more, or give `--rate`.
//!
//! ```text
//! cargo build --release && cargo run --release --example bench_e2e      # under a minute
//! cargo build --release && cargo run --release --example bench_e2e -- \
//!     --max-commands 5000 --latency-commands 5000 --memory-commands 1000000 [--rate R]
//! ```
//!
//! The second is the long run: a million commands at half the maximum rate take about
//! 40 minutes on a 2-core machine.
//!
//! `--latency-median 300ms --latency-p99 1.5s [--latency-seed 7]` adds a log-normal gateway
//! latency on top of `--latency-ms`; the header prints the distribution (and its mean,
//! exp(mu + sigma²/2)), the final check the mean the mock really drew.
//!
//! `--intake-commands N` measures intake alone (issue 38): N commands published while no
//! serve process runs, then `serve --roles intake,admin` records the backlog; it prints the
//! commands recorded per second by the database's clock and ends.
//!
//! `--gateway stripe` charges through the Stripe connector (PaymentIntent create + confirm)
//! against the mock's Stripe dialect instead of the §3 API.
//!
//! `--own-postgres` (issue 28) runs on a PostgreSQL cluster of the benchmark's own
//! (`support/own_postgres.rs`: `initdb` into a temporary folder, `pg_stat_statements`
//! preloaded, autovacuum on, a free port; removed at the end, also on failure) and prints,
//! after each measured phase, the database's work per settled charge
//! (`support/db_work.rs`): statements sent (round trips), transactions, rows, WAL and
//! flushes, statement time and CPU of the cluster, of the serve process and of the
//! benchmark, and the top `--top-statements` statements by calls and by time; then what a
//! charge wrote (`support/write_budget.rs`, issue 38): rows inserted, updated (HOT or not)
//! and deleted by table, WAL records by kind and index entries by index, read back from the
//! phase's WAL with `pg_waldump`, against the issue's target. Statistics
//! are reset after the warm-up; each phase adds 11 s at its end for PostgreSQL's counters
//! to settle.
//!
//! ```text
//! cargo build --release --examples && cargo build --release
//! target/release/examples/bench_e2e --own-postgres --max-commands 4000 --latency-commands 0 [--gateway stripe]
//! ```
//!
//! Needs PostgreSQL on 127.0.0.1:5432 (trust auth; `--server`) and NATS JetStream on
//! 127.0.0.1:4222 (`--nats-url`), Linux (RSS is read from `/proc`), and the release binary
//! `onecharge` next to this example (`cargo build --release`: `cargo run --example` does not
//! build it), or the one `--service` names (`bench/e2e_against.sh` serves an older commit's
//! build that way, to compare in one sitting). The maximum-rate phase also prints its rate by
//! 10 s window, to see whether it holds as the tables grow. Each run creates its own database and stream namespace and removes both at the
//! end, also on failure, Ctrl-C or SIGTERM. The serve process gets its settings from `ONECHARGE_*`
//! variables; any other `ONECHARGE_*` variable set when the benchmark starts (for example
//! `ONECHARGE_EXECUTOR__CONCURRENCY=64`) is passed on to it and printed. Its log goes to a
//! file that is kept (and its end printed) only when the run fails.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::HeaderMap;
use clap::CommandFactory as _;
use futures::StreamExt as _;
use mock_gateway::{Dialect, MockGateway};
use onecharge::broker::{Broker, Names};
use onecharge::config::{Overrides, Settings};
use onecharge::gateway::GatewayKind;
use secrecy::SecretString;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use uuid::Uuid;

mod support;
use support::thousands;
#[path = "../tests/it/support/throwaway.rs"]
mod throwaway;
use throwaway::{ThrowawayDatabase, ThrowawayNamespace};
#[path = "support/bench_gateway.rs"]
mod bench_gateway;
#[path = "support/latency.rs"]
mod latency;
use latency::millis;
#[path = "support/own_postgres.rs"]
mod own_postgres;
use own_postgres::OwnPostgres;
#[path = "support/db_work.rs"]
mod db_work;
#[path = "support/write_budget.rs"]
mod write_budget;
use db_work::{Observer, PhaseWork, Snapshot};

/// Commands pushed through before the first measured phase: connections, pools and caches warm.
const WARM_UP_COMMANDS: usize = 200;
/// Publish acks awaited at most at once: the publisher never waits for one ack at a time,
/// and never runs unboundedly ahead of JetStream either.
const ACKS_IN_FLIGHT: usize = 1024;
/// A phase fails when no event arrives for this long while commands are outstanding.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);
const RSS_SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// The RSS compared with the end is taken when this share of the phase's events arrived.
const WARM_UP_SHARE: f64 = 0.10;
/// `ONECHARGE_*` variables the benchmark sets itself; everything else is passed through.
const OWN_VARIABLES: [&str; 9] = [
    "ONECHARGE_WEBHOOK_ADDR",
    "ONECHARGE_STRIPE_WEBHOOK_SECRETS",
    "ONECHARGE_DATABASE_URL",
    "ONECHARGE_NATS_URL",
    "ONECHARGE_GATEWAY_URL",
    "ONECHARGE_GATEWAY_KIND",
    "ONECHARGE_GATEWAY_API_KEY",
    "ONECHARGE_ADMIN_ADDR",
    "ONECHARGE_NAMESPACE",
];

#[derive(Debug, clap::Parser)]
struct Args {
    /// Commands of the maximum-rate phase (0 skips it; then --rate is required)
    #[arg(long, default_value_t = 5000)]
    max_commands: usize,
    /// Commands of the latency phase, paced at --rate (0 skips it)
    #[arg(long, default_value_t = 5000)]
    latency_commands: usize,
    /// Commands of the resident-memory phase, paced at --rate (0 skips it; the long run uses 1000000)
    #[arg(long, default_value_t = 0)]
    memory_commands: usize,
    /// Intake alone (issue 38): this many commands published while no serve process runs,
    /// then `serve --roles intake,admin` records them; prints commands recorded per second
    /// and ends (no charges, no other phase)
    #[arg(long, value_name = "N", default_value_t = 0)]
    intake_commands: usize,
    /// Commands per second of the latency and memory phases [default: half the measured maximum rate]
    #[arg(long)]
    rate: Option<f64>,
    /// Latency the mock gateway adds to every request, in milliseconds
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    #[command(flatten)]
    distribution: latency::LatencyArgs,
    /// PostgreSQL server (without database)
    #[arg(long, default_value = "postgres://127.0.0.1:5432")]
    server: String,
    /// NATS server
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// Keep the database at the end, to see where time went (`payment_attempts.created_at`,
    /// `dispatched_at`, `outbox.created_at`, `published_at`); streams are still removed
    #[arg(long)]
    keep_database: bool,
    /// The connector the serve process charges through; the mock gateway speaks its
    /// dialect [default: the §3 API, onecharge]
    #[arg(long, value_enum)]
    gateway: Option<GatewayKind>,
    /// Run on a PostgreSQL cluster of the benchmark's own (pg_stat_statements preloaded,
    /// autovacuum on, a free port, removed at the end) and report the database's work per
    /// charge after each measured phase
    #[arg(long, conflicts_with_all = ["server", "keep_database"])]
    own_postgres: bool,
    /// Statements listed by calls and by time in the per-charge report
    #[arg(long, value_name = "N", default_value_t = 15)]
    top_statements: usize,
    /// Signed Stripe webhooks (`payment_intent.succeeded` naming PaymentIntents nobody
    /// holds: every one verified, recorded and answered) sent to the serve process's webhook
    /// listener as fast as 64 connections go, starting one rate window into the maximum-rate
    /// phase: the events/s table shows what the burst costs the charges (0: none)
    #[arg(long, value_name = "N", default_value_t = 0)]
    webhook_burst: usize,
    /// The `onecharge` binary to serve with, e.g. an older commit's build to compare with
    /// (bench/e2e_against.sh) [default: target/release/onecharge beside this benchmark]
    #[arg(long, value_name = "PATH")]
    service: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    // reqwest is built without a bundled provider: the readiness probe's client needs ring.
    onecharge::config::tls::install_crypto_provider();
    let distribution = args.distribution.distribution().unwrap_or_else(|message| {
        Args::command()
            .error(clap::error::ErrorKind::ValueValidation, message)
            .exit()
    });
    if let Some(rate) = args.rate {
        ensure!(rate > 0.0, "--rate must be above zero");
    }
    ensure!(
        args.max_commands > 0 || args.rate.is_some() || args.intake_commands > 0,
        "--max-commands 0 needs --rate: the paced phases default to half the maximum rate"
    );
    let binary = match &args.service {
        // absolute: the serve process runs in the run's own folder
        Some(path) => std::fs::canonicalize(path)
            .with_context(|| format!("--service {}: no such binary", path.display()))?,
        None => service_binary(),
    };

    let tag = Uuid::new_v4().simple().to_string();
    // Declared before the database: dropped after it, so the database goes first.
    let own_postgres = match args.own_postgres {
        true => Some(OwnPostgres::start(&tag[..12], free_port()?)?),
        false => None,
    };
    let server = own_postgres
        .as_ref()
        .map_or_else(|| args.server.clone(), OwnPostgres::server_url);
    let database = ThrowawayDatabase::named(&server, "onecharge_bench").kept(args.keep_database);
    let workdir = std::env::temp_dir().join(format!("onecharge_bench_{}", &tag[..12]));
    std::fs::create_dir_all(&workdir).with_context(|| format!("creating {}", workdir.display()))?;
    // The serve process runs here and reads this empty file instead of whatever
    // onecharge.toml lies in the current directory; the benchmark loads the same.
    std::fs::write(workdir.join("onecharge.toml"), "")?;

    let kind = args.gateway.unwrap_or_default();
    let gateway =
        bench_gateway::start_speaking(dialect(kind), args.latency_ms, distribution, 0).await?;
    let settings = service_settings(&args, &workdir, &database, &gateway, &tag)?;
    let namespace = ThrowawayNamespace::new(&settings.nats_url, &Names::new(&settings.namespace));

    let mut service = None;
    let mut interrupted = false;
    let run = Run {
        args: &args,
        settings: &settings,
        binary: &binary,
        workdir: &workdir,
        gateway: &gateway,
        server: &server,
        own_postgres: own_postgres.as_ref(),
    };
    let outcome = tokio::select! {
        outcome = run.run(&mut service) => outcome,
        _ = stop_signal() => {
            interrupted = true;
            Err(anyhow::anyhow!("interrupted; the serve process, streams and database are removed"))
        }
    };
    if let Some(service) = service {
        match service.stop().await {
            Ok(status) if status.success() || outcome.is_err() => {}
            Ok(status) => eprintln!("warning: onecharge serve exited with {status} after SIGTERM"),
            Err(err) => eprintln!("warning: stopping onecharge serve: {err:#}"),
        }
    }
    // The run's streams, then its database (kept with --keep-database), then the cluster.
    drop(namespace);
    drop(database);
    drop(own_postgres);
    gateway.shutdown().await;
    clean_up_workdir(&workdir, outcome.is_ok() || interrupted);
    outcome
}

/// Ctrl-C, or SIGTERM (`timeout`, `kill`): either stops the run in order, so that the
/// serve process, the streams, the database and the own cluster are removed.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The mock's dialect for the connector under test.
fn dialect(kind: GatewayKind) -> Dialect {
    match kind {
        GatewayKind::Onecharge => Dialect::Onecharge,
        GatewayKind::Stripe => Dialect::Stripe,
    }
}

/// The serve process's settings (the benchmark loads them the same way): this run's
/// database, namespace, mock gateway and a free admin port.
fn service_settings(
    args: &Args,
    workdir: &Path,
    database: &ThrowawayDatabase,
    gateway: &MockGateway,
    tag: &str,
) -> anyhow::Result<Settings> {
    let mut settings = Settings::load(
        Some(&workdir.join("onecharge.toml")),
        &Overrides {
            database_url: Some(database.url()),
            nats_url: Some(args.nats_url.clone()),
            gateway_url: Some(gateway.base_url()),
            gateway_kind: Some(args.gateway.unwrap_or_default()),
            admin_addr: Some(format!("127.0.0.1:{}", free_port()?)),
            namespace: Some(format!("bench-e2e-{}", &tag[..10])),
            log_format: None,
        },
    )?;
    settings.gateway_api_key = Some(SecretString::from(bench_gateway::API_KEY));
    if args.webhook_burst > 0 {
        settings.webhook_addr = Some(format!("127.0.0.1:{}", free_port()?).parse()?);
        settings.stripe_webhook_secrets = Some(SecretString::from(BURST_SECRET));
    }
    settings.validate()?;
    Ok(settings)
}

/// The webhook signing secret of `--webhook-burst` runs.
const BURST_SECRET: &str = "whsec_bench_burst";

/// What a webhook burst came to.
#[derive(Debug, Default)]
struct BurstReport {
    sent: usize,
    accepted: usize,
    shed: usize,
    other: usize,
    started_after: Duration,
    took: Duration,
}

/// `count` signed events to the listener at `addr`, 64 connections at a time, after
/// `delay`.
async fn webhook_burst(addr: SocketAddr, count: usize, delay: Duration) -> BurstReport {
    tokio::time::sleep(delay).await;
    let client = reqwest::Client::new();
    let started = Instant::now();
    let statuses: Vec<Option<u16>> = futures::stream::iter(0..count)
        .map(|i| {
            let client = client.clone();
            async move {
                let body = serde_json::json!({
                    "id": format!("evt_burst_{i}"), "object": "event",
                    "type": "payment_intent.succeeded",
                    "data": {"object": {"id": format!("pi_burst{i}"), "object": "payment_intent"}},
                })
                .to_string();
                let now = time::OffsetDateTime::now_utc().unix_timestamp();
                client
                    .post(format!("http://{addr}/webhooks/stripe"))
                    .header("content-type", "application/json")
                    .header(
                        "Stripe-Signature",
                        onecharge::http::webhook::signature::header(
                            &[BURST_SECRET],
                            now,
                            body.as_bytes(),
                        ),
                    )
                    .body(body)
                    .send()
                    .await
                    .ok()
                    .map(|answer| answer.status().as_u16())
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let mut report = BurstReport {
        sent: count,
        started_after: delay,
        took: started.elapsed(),
        ..BurstReport::default()
    };
    for status in statuses {
        match status {
            Some(200) => report.accepted += 1,
            Some(503) => report.shed += 1,
            _ => report.other += 1,
        }
    }
    report
}

fn print_burst(burst: &BurstReport) {
    println!();
    println!(
        "Webhook burst: {} signed events from {:.0} s into the phase, in {:.1} s ({:.0}/s): {} accepted, {} shed (503), {} other. Compare the windows it falls in with the others above.",
        burst.sent,
        burst.started_after.as_secs_f64(),
        burst.took.as_secs_f64(),
        burst.sent as f64 / burst.took.as_secs_f64().max(1e-9),
        burst.accepted,
        burst.shed,
        burst.other,
    );
}

/// Removes the run's folder; after a failure keeps it and prints the end of the serve log.
fn clean_up_workdir(workdir: &Path, succeeded_or_interrupted: bool) {
    let log = workdir.join("serve.log");
    if succeeded_or_interrupted {
        let _ = std::fs::remove_dir_all(workdir);
        return;
    }
    eprintln!("the serve log is kept: {}; its last lines:", log.display());
    if let Ok(text) = std::fs::read_to_string(&log) {
        let lines: Vec<&str> = text.lines().collect();
        for line in &lines[lines.len().saturating_sub(10)..] {
            eprintln!("  {line}");
        }
    }
}

/// `target/release/onecharge`, two levels above this example's executable
/// (`target/release/examples/bench_e2e`); exits with one line when it is not built.
fn service_binary() -> PathBuf {
    let binary = std::env::current_exe().ok().and_then(|exe| {
        let release = exe.parent()?.parent()?;
        let binary = release.join(format!("onecharge{}", std::env::consts::EXE_SUFFIX));
        binary.is_file().then_some(binary)
    });
    let Some(binary) = binary else {
        eprintln!("build the service first: cargo build --release");
        std::process::exit(1);
    };
    // `cargo run --example` rebuilds the library, not the binary: sources newer than the
    // binary mean it may not contain the code being measured.
    let built = std::fs::metadata(&binary).and_then(|m| m.modified()).ok();
    let source = Path::new(env!("CARGO_MANIFEST_DIR"));
    let edited = [source.join("src"), source.join("migrations")]
        .iter()
        .filter_map(|dir| newest_file(dir))
        .max();
    if let (Some(built), Some(edited)) = (built, edited) {
        if edited > built {
            eprintln!(
                "warning: {} is older than the sources; run `cargo build --release` to measure the current code",
                binary.display()
            );
        }
    }
    binary
}

/// The latest modification time of any file under `dir`.
fn newest_file(dir: &Path) -> Option<std::time::SystemTime> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let metadata = entry.metadata().ok()?;
            if metadata.is_dir() {
                newest_file(&entry.path())
            } else {
                metadata.modified().ok()
            }
        })
        .max()
}

/// A port nobody listens on right now, for the serve process's admin HTTP.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// What one run is given: its flags, the serve process's settings and binary, and the
/// servers it started.
struct Run<'a> {
    args: &'a Args,
    settings: &'a Settings,
    binary: &'a Path,
    workdir: &'a Path,
    gateway: &'a MockGateway,
    /// PostgreSQL server URL without a database (`--server`, or the own cluster's).
    server: &'a str,
    own_postgres: Option<&'a OwnPostgres>,
}

impl Run<'_> {
    /// Sets up and starts the serve process (left in `service` for `main` to stop), runs
    /// the phases and prints a table each, then checks every charge.
    async fn run(&self, service: &mut Option<Service>) -> anyhow::Result<()> {
        let broker = Broker::connect(self.settings).await?;
        self.print_header(&broker).await?;
        self.setup().await?;
        if self.args.intake_commands > 0 {
            return self.intake_only(&broker, service).await;
        }
        let tracker = subscribe_events(&broker).await?;
        let service =
            service.insert(Service::start(self.binary, self.settings, self.workdir, None).await?);
        service.wait_until_ready().await?;
        let mut phases = Phases {
            rss_after: vec![("start (idle)", service.memory()?)],
            broker: &broker,
            tracker: &tracker,
            service,
            published: 0,
            work: None,
        };
        phases.warm_up().await?;
        if let Some(cluster) = self.own_postgres {
            let observer = Observer::connect(
                self.server,
                database_name(self.settings),
                cluster.postmaster_pid()?,
                Some(cluster.wal_source()),
            )
            .await?;
            phases.count_work(observer).await?;
        }
        self.measure(&mut phases).await?;
        phases.print_rss_after();
        verify(
            self.settings,
            self.gateway,
            &tracker,
            phases.published,
            self.args.latency_ms,
        )
        .await
    }

    /// `--intake-commands`: the commands published first, as a backlog on the stream, then
    /// a serve process that only records them (`--roles intake,admin`). The rate is taken
    /// from the database's own clock, from the first batch's `recorded_at` to the last's
    /// (each a batch transaction's start), so the process's start-up is not in it. Printed in
    /// the maximum-rate table's shape, so `bench/e2e_against.sh` reads it the same way.
    async fn intake_only(
        &self,
        broker: &Broker,
        service: &mut Option<Service>,
    ) -> anyhow::Result<()> {
        let commands = self.args.intake_commands;
        let tracker = Arc::new(Mutex::new(Tracker::default()));
        let (published_in, _) =
            publish_commands(broker.clone(), tracker, "intake", commands, None).await?;
        let db = sqlx::PgPool::connect(&self.settings.database_url).await?;
        let service = service.insert(
            Service::start(
                self.binary,
                self.settings,
                self.workdir,
                Some("intake,admin"),
            )
            .await?,
        );
        let mut last = (0_i64, Instant::now());
        loop {
            service.check_alive()?;
            let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM processed_messages")
                .fetch_one(&db)
                .await?;
            if recorded as usize >= commands {
                break;
            }
            if recorded > last.0 {
                last = (recorded, Instant::now());
            }
            ensure!(
                last.1.elapsed() < STALL_TIMEOUT,
                "intake stalled at {recorded} of {commands} commands recorded"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let span: f64 = sqlx::query_scalar(
            "SELECT extract(epoch FROM max(recorded_at) - min(recorded_at))::float8
             FROM processed_messages",
        )
        .fetch_one(&db)
        .await?;
        db.close().await;
        print_table(
            "## Intake alone",
            "commands | published in | publish rate | first batch → last batch recorded | commands/s",
            "rrrrr",
            &[
                thousands(commands as f64),
                format!("{:.2} s", published_in.as_secs_f64()),
                format!("{}/s", thousands(commands as f64 / published_in.as_secs_f64())),
                format!("{span:.2} s"),
                thousands(commands as f64 / span.max(1e-3)),
            ],
        );
        println!(
            "\nRecorded by `serve --roles intake,admin` from a backlog of {} commands published before it started; the time is the database's, from the first batch's transaction to the last's.",
            thousands(commands as f64)
        );
        Ok(())
    }

    /// The measured phases the flags ask for, each printed as it ends.
    async fn measure(&self, phases: &mut Phases<'_>) -> anyhow::Result<()> {
        let args = self.args;
        let top = args.top_statements;
        let mut max_rate = None;
        if args.max_commands > 0 {
            let burst = self
                .settings
                .webhook_addr
                .map(|addr| tokio::spawn(webhook_burst(addr, args.webhook_burst, RATE_WINDOW)));
            let max = phases
                .run("maximum rate", Phase::new("max", args.max_commands, None))
                .await?;
            print_maximum_rate(&max);
            if let Some(burst) = burst {
                print_burst(&burst.await.context("the webhook burst panicked")?);
            }
            max.print_work("maximum rate", top);
            max_rate = Some(max.events_per_second());
        }
        let (rate, rate_note) = match (args.rate, max_rate) {
            (Some(rate), _) => (rate, "--rate".to_owned()),
            (None, Some(max)) => (max / 2.0, "half the maximum".to_owned()),
            (None, None) => unreachable!("checked in main"),
        };
        if args.latency_commands > 0 {
            let phase = Phase::new("latency", args.latency_commands, Some(rate));
            let latency = phases.run("latency", phase).await?;
            print_latency(&latency, rate, &rate_note);
            latency.print_work("latency", top);
        }
        if args.memory_commands > 0 {
            let memory = memory_phase(phases, args.memory_commands, rate, &rate_note).await?;
            memory.print_work("memory", top);
        }
        Ok(())
    }

    /// `onecharge setup`: the database, its migrations and the streams.
    async fn setup(&self) -> anyhow::Result<()> {
        let binary = self.binary;
        let setup = service_command(binary, self.settings, self.workdir)
            .arg("setup")
            .output()
            .await
            .with_context(|| format!("running {} setup", binary.display()))?;
        ensure!(
            setup.status.success(),
            "onecharge setup failed ({}): {}",
            setup.status,
            String::from_utf8_lossy(&setup.stderr).trim()
        );
        Ok(())
    }

    async fn print_header(&self, broker: &Broker) -> anyhow::Result<()> {
        let (args, settings) = (self.args, self.settings);
        let postgres = sqlx::PgPool::connect(&format!("{}/postgres", self.server))
            .await
            .with_context(|| format!("cannot connect to PostgreSQL at {}", self.server))?;
        let postgres_version: String = sqlx::query_scalar("SHOW server_version")
            .fetch_one(&postgres)
            .await?;
        postgres.close().await;
        let memory_gib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| kib_field(&text, "MemTotal:"))
            .map_or(0.0, |kib| kib as f64 / (1024.0 * 1024.0));
        println!("# onecharge end to end");
        println!();
        println!(
            "machine: {} CPU(s), {memory_gib:.1} GiB; PostgreSQL {postgres_version}, nats-server {}, all on this host",
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            broker.client.server_info().version,
        );
        if let Some(cluster) = self.own_postgres {
            println!("PostgreSQL: {}", cluster.describe());
        }
        if let Some(kind) = args.gateway {
            println!(
                "connector: {} (the mock gateway speaks its dialect)",
                kind_name(kind)
            );
        }
        print_phases_line(args);
        print_service_line(settings, self.binary);
        print_passed_through();
        println!(
            "database {}, namespace {}",
            database_name(settings),
            settings.namespace
        );
        Ok(())
    }
}

/// The database's name, the last part of its URL.
fn database_name(settings: &Settings) -> &str {
    settings.database_url.rsplit('/').next().unwrap_or_default()
}

/// The connector's name as `--gateway` and `ONECHARGE_GATEWAY_KIND` spell it.
fn kind_name(kind: GatewayKind) -> String {
    clap::ValueEnum::to_possible_value(&kind)
        .map(|value| value.get_name().to_owned())
        .unwrap_or_default()
}

/// Subscribes to the run's events before the service starts, so that no event can pass
/// unseen, and collects them into the tracker it returns.
async fn subscribe_events(broker: &Broker) -> anyhow::Result<Arc<Mutex<Tracker>>> {
    let tracker = Arc::new(Mutex::new(Tracker::default()));
    let events = broker
        .client
        .subscribe(broker.names.subject("payments.events.>"))
        .await?;
    broker.client.flush().await?;
    tokio::spawn(collect_events(events, tracker.clone()));
    Ok(tracker)
}

/// Prints a markdown table's head: its column names (` | ` between them) and one
/// alignment a column (`r` right, anything else left).
fn table_head(columns: &str, alignment: &str) {
    let rules: String = alignment
        .chars()
        .map(|a| if a == 'r' { "---:|" } else { "---|" })
        .collect();
    println!("| {columns} |");
    println!("|{rules}");
}

/// A section with its title and a table of one row.
fn print_table(title: &str, columns: &str, alignment: &str, cells: &[String]) {
    println!();
    println!("{title}");
    println!();
    table_head(columns, alignment);
    println!("| {} |", cells.join(" | "));
}

fn print_maximum_rate(max: &PhaseReport) {
    let l = max.latencies();
    print_table(
        "## Maximum rate",
        "commands | published in | publish rate | first publish → last event | events/s | latency p50 | p99 | max",
        "rrrrrrrr",
        &[
            thousands(max.received as f64),
            format!("{:.2} s", max.publish_elapsed.as_secs_f64()),
            format!("{}/s", thousands(max.publish_rate())),
            format!("{:.2} s", max.span().as_secs_f64()),
            thousands(max.events_per_second()),
            [l.p50, l.p99, l.max].map(millis).join(" | "),
        ],
    );
    print_rate_by_window(max);
}

/// Whether the rate holds as the tables grow: events per second in each full window of
/// [`RATE_WINDOW`] from the first publish, and the last full window's rate against the first's.
/// Printed when the phase lasted at least two windows.
fn print_rate_by_window(max: &PhaseReport) {
    let window = RATE_WINDOW.as_secs_f64();
    let full = (max.span().as_secs_f64() / window).floor() as usize;
    if full < 2 {
        return;
    }
    let mut counts = vec![0usize; full];
    for arrived in &max.arrivals {
        let at = (*arrived - max.first_publish).as_secs_f64();
        if let Some(count) = counts.get_mut((at / window) as usize) {
            *count += 1;
        }
    }
    let rates: Vec<f64> = counts.iter().map(|&n| n as f64 / window).collect();
    println!();
    println!(
        "Events/s by {} s window from the first publish (full windows only):",
        RATE_WINDOW.as_secs()
    );
    println!();
    table_head("window | events | events/s | RSS MiB at its end", "rrrr");
    for (i, (count, rate)) in counts.iter().zip(&rates).enumerate() {
        let from = i as f64 * window;
        let rss = max
            .rss_at(from + window)
            .map_or_else(|| "–".to_owned(), |mib| format!("{mib:.1}"));
        println!(
            "| {:.0}–{:.0} s | {} | {} | {rss} |",
            from,
            from + window,
            thousands(*count as f64),
            thousands(*rate)
        );
    }
    println!();
    println!(
        "last window / first window: {:.2}",
        rates[full - 1] / rates[0]
    );
    let per_minute = (60.0 / window) as usize;
    if full >= 2 * per_minute {
        let minute = |windows: &[usize]| windows.iter().sum::<usize>() as f64;
        let first = minute(&counts[..per_minute]);
        let last = minute(&counts[full - per_minute..]);
        println!(
            "last minute / first minute: {:.2} ({} against {} events)",
            last / first,
            thousands(last),
            thousands(first)
        );
    }
    let after_first_minute: Vec<f64> = max
        .rss_trail
        .iter()
        .filter(|(at, _)| (*at - max.first_publish).as_secs_f64() >= 60.0)
        .map(|(_, mib)| *mib)
        .collect();
    if let (Some(low), Some(high), Some(end)) = (
        after_first_minute.iter().copied().reduce(f64::min),
        after_first_minute.iter().copied().reduce(f64::max),
        after_first_minute.last(),
    ) {
        println!(
            "RSS after the first minute: {low:.1}–{high:.1} MiB over {} readings, {end:.1} at the end",
            after_first_minute.len()
        );
    }
}

/// The width of the windows of [`print_rate_by_window`].
const RATE_WINDOW: Duration = Duration::from_secs(10);

fn print_latency(latency: &PhaseReport, rate: f64, rate_note: &str) {
    let l = latency.latencies();
    print_table(
        &format!("## Publish-to-event latency at {}/s ({rate_note})", thousands(rate)),
        "commands | target rate | publish rate | events/s | p50 | p90 | p99 | max | publisher behind schedule (max)",
        "rrrrrrrrr",
        &[
            thousands(latency.received as f64),
            format!("{}/s", thousands(rate)),
            format!("{}/s", thousands(latency.publish_rate())),
            thousands(latency.events_per_second()),
            [l.p50, l.p90, l.p99, l.max, latency.behind_schedule]
                .map(millis)
                .join(" | "),
        ],
    );
}

/// The resident-memory phase: RSS every 5 s while `commands` are paced at `rate`, then
/// RSS after warm-up against RSS at the end.
async fn memory_phase(
    phases: &mut Phases<'_>,
    commands: usize,
    rate: f64,
    rate_note: &str,
) -> anyhow::Result<PhaseReport> {
    println!();
    println!(
        "## Resident memory of `onecharge serve`: {} commands at {}/s ({rate_note})",
        thousands(commands as f64),
        thousands(rate)
    );
    println!();
    table_head(
        "elapsed | commands published | events received | RSS MiB |",
        "rrrrl",
    );
    let mut phase = Phase::new("memory", commands, Some(rate));
    phase.sample_memory = true;
    let memory = phases.run("memory", phase).await?;
    let (warm, end) = (
        memory
            .rss_at_warm_up
            .context("no RSS sample after warm-up")?,
        memory.rss_at_end.context("no RSS sample at the end")?,
    );
    println!();
    println!(
        "| RSS after warm-up ({:.0} % of events) | RSS at end | end / warm-up | peak RSS (VmHWM) | events/s | p50 | p99 | max |",
        WARM_UP_SHARE * 100.0
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let l = memory.latencies();
    println!(
        "| {:.1} MiB | {:.1} MiB | {:.2} | {:.1} MiB | {} | {} | {} | {} |",
        warm.rss_mib,
        end.rss_mib,
        end.rss_mib / warm.rss_mib,
        end.peak_mib,
        thousands(memory.events_per_second()),
        millis(l.p50),
        millis(l.p99),
        millis(l.max),
    );
    Ok(memory)
}

fn print_phases_line(args: &Args) {
    let distribution = match args.distribution.distribution() {
        Ok(Some(distribution)) => format!(" + {distribution}"),
        _ => String::new(),
    };
    if args.intake_commands > 0 {
        println!(
            "phases: intake alone, {} commands published before `serve --roles intake,admin` starts",
            args.intake_commands
        );
        return;
    }
    println!(
        "phases: warm-up {WARM_UP_COMMANDS}, maximum rate {}, latency {}, memory {} commands; paced at {}; mock gateway latency {} ms{distribution}, no faults",
        args.max_commands,
        args.latency_commands,
        args.memory_commands,
        args.rate
            .map_or("half the maximum rate".to_owned(), |r| format!("{r}/s")),
        args.latency_ms
    );
}

fn print_service_line(settings: &Settings, binary: &Path) {
    println!(
        "service: one `{} serve`, all roles; intake batch {} × {}, executor concurrency {} (batch {}, poll {}), relay batch {} (poll {})",
        binary.display(),
        settings.intake.batch_size,
        settings.intake.concurrency,
        settings.executor.concurrency,
        settings.executor.batch_size,
        humantime::format_duration(settings.executor.poll_interval),
        settings.relay.batch_size,
        humantime::format_duration(settings.relay.poll_interval),
    );
}

fn print_passed_through() {
    let passed: Vec<String> = passed_through()
        .into_iter()
        .map(|(name, value)| {
            if name.contains("KEY") || name.contains("TOKEN") {
                format!("{name}=[REDACTED]")
            } else {
                format!("{name}={value}")
            }
        })
        .collect();
    println!(
        "passed to the service: {}",
        if passed.is_empty() {
            "no other ONECHARGE_* variables (defaults)".to_owned()
        } else {
            passed.join(" ")
        }
    );
}

/// `ONECHARGE_*` variables of this process that the serve process inherits unchanged.
fn passed_through() -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(name, _)| name.starts_with("ONECHARGE_") && !OWN_VARIABLES.contains(&&**name))
        .collect();
    vars.sort();
    vars
}

/// A `onecharge` command configured for this run through `ONECHARGE_*` variables.
fn service_command(binary: &Path, settings: &Settings, workdir: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(binary);
    command
        .current_dir(workdir)
        .env("ONECHARGE_DATABASE_URL", &settings.database_url)
        .env("ONECHARGE_NATS_URL", &settings.nats_url)
        .env("ONECHARGE_GATEWAY_URL", &settings.gateway_url)
        .env("ONECHARGE_GATEWAY_KIND", kind_name(settings.gateway_kind))
        .env("ONECHARGE_GATEWAY_API_KEY", bench_gateway::API_KEY)
        .env("ONECHARGE_ADMIN_ADDR", settings.admin_addr.to_string())
        .env("ONECHARGE_NAMESPACE", &settings.namespace)
        // Its log goes to a file: plain text.
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(addr) = settings.webhook_addr {
        command
            .env("ONECHARGE_WEBHOOK_ADDR", addr.to_string())
            .env("ONECHARGE_STRIPE_WEBHOOK_SECRETS", BURST_SECRET);
    }
    // Its own process group: Ctrl-C in the terminal reaches only the benchmark, which
    // then stops the service in order (SIGTERM, drain) before removing its database.
    #[cfg(unix)]
    command.process_group(0);
    command
}

/// The `onecharge serve` child process.
struct Service {
    child: tokio::process::Child,
    pid: u32,
    admin_addr: std::net::SocketAddr,
    /// Set once the process was reaped: it must not be signalled any more.
    exited: Option<ExitStatus>,
}

/// One reading of `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy)]
struct Memory {
    rss_mib: f64,
    peak_mib: f64,
}

impl Service {
    /// `serve` with all roles, or with `roles` (`--roles`).
    async fn start(
        binary: &Path,
        settings: &Settings,
        workdir: &Path,
        roles: Option<&str>,
    ) -> anyhow::Result<Self> {
        let log = std::fs::File::create(workdir.join("serve.log"))?;
        let mut command = service_command(binary, settings, workdir);
        command.arg("serve");
        if let Some(roles) = roles {
            command.arg("--roles").arg(roles);
        }
        let child = command
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} serve", binary.display()))?;
        Ok(Self {
            pid: child.id().context("the serve process has no pid")?,
            child,
            admin_addr: settings.admin_addr,
            exited: None,
        })
    }

    /// Fails when the process has exited.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait()?;
        }
        match self.exited {
            Some(status) => bail!("onecharge serve exited: {status}"),
            None => Ok(()),
        }
    }

    /// Waits for `/readyz` to answer 200 (database and NATS reachable).
    async fn wait_until_ready(&mut self) -> anyhow::Result<()> {
        let url = format!("http://{}/readyz", self.admin_addr);
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.check_alive()?;
            if let Ok(response) = client.get(&url).send().await {
                if response.status().is_success() {
                    return Ok(());
                }
            }
            ensure!(
                Instant::now() < deadline,
                "onecharge serve not ready at {url} after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Resident and peak resident memory, from `/proc/<pid>/status`.
    fn memory(&mut self) -> anyhow::Result<Memory> {
        self.check_alive()?;
        let path = format!("/proc/{}/status", self.pid);
        let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let mib = |field| {
            kib_field(&status, field)
                .map(|kib| kib as f64 / 1024.0)
                .with_context(|| format!("no {field} in {path}"))
        };
        Ok(Memory {
            rss_mib: mib("VmRSS:")?,
            peak_mib: mib("VmHWM:")?,
        })
    }

    /// SIGTERM, then SIGKILL when it has not drained and exited within 30 s.
    async fn stop(mut self) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.exited {
            return Ok(status);
        }
        let signalled = tokio::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await;
        if signalled.is_ok_and(|s| s.success()) {
            if let Ok(status) =
                tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await
            {
                return Ok(status?);
            }
            eprintln!("warning: onecharge serve did not exit within 30 s of SIGTERM; killing it");
        }
        self.child.kill().await?;
        Ok(self.child.wait().await?)
    }
}

/// The number of kB of a `/proc` field such as `VmRSS:   1234 kB`.
fn kib_field(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What the publisher and the event collector share. Phases run one after the other, so
/// there is one current phase.
#[derive(Default)]
struct Tracker {
    /// Published attempts whose event has not arrived yet, with their publish instant.
    in_flight: HashMap<Uuid, Instant>,
    phase: PhaseStats,
    /// Events for attempts not in flight: a broker-level repeat of an event already counted.
    repeats: usize,
    /// Event bodies that do not parse as an event.
    unreadable: usize,
}

#[derive(Default)]
struct PhaseStats {
    published: usize,
    first_publish: Option<Instant>,
    received: usize,
    last_event: Option<Instant>,
    /// Publish-to-event latency of each attempt, in arrival order.
    latencies: Vec<Duration>,
    /// When each event arrived, in arrival order.
    arrivals: Vec<Instant>,
    /// Events whose status is not `succeeded` (none are expected from a mock without faults).
    not_succeeded: usize,
}

fn lock(tracker: &Mutex<Tracker>) -> MutexGuard<'_, Tracker> {
    tracker
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(serde::Deserialize)]
struct EventBody {
    payment_attempt_id: Uuid,
    status: String,
}

/// Stamps every event with its arrival instant and matches it to its publish by
/// `payment_attempt_id`.
async fn collect_events(mut events: async_nats::Subscriber, tracker: Arc<Mutex<Tracker>>) {
    while let Some(message) = events.next().await {
        let arrived = Instant::now();
        let event = serde_json::from_slice::<EventBody>(&message.payload);
        let mut tracker = lock(&tracker);
        let Ok(event) = event else {
            tracker.unreadable += 1;
            continue;
        };
        match tracker.in_flight.remove(&event.payment_attempt_id) {
            Some(published) => {
                let phase = &mut tracker.phase;
                phase.received += 1;
                phase.last_event = Some(arrived);
                phase.latencies.push(arrived - published);
                phase.arrivals.push(arrived);
                if event.status != "succeeded" {
                    phase.not_succeeded += 1;
                }
            }
            None => tracker.repeats += 1,
        }
    }
}

/// What one phase publishes.
struct Phase {
    name: &'static str,
    commands: usize,
    /// Commands per second; `None` publishes as fast as JetStream acknowledges.
    rate: Option<f64>,
    /// Print a row of RSS every 5 s, and sample it after warm-up and at the end.
    sample_memory: bool,
}

impl Phase {
    fn new(name: &'static str, commands: usize, rate: Option<f64>) -> Self {
        Self {
            name,
            commands,
            rate,
            sample_memory: false,
        }
    }
}

/// What one phase measured.
struct PhaseReport {
    published: usize,
    received: usize,
    /// From the first publish to the last ack.
    publish_elapsed: Duration,
    /// How far the paced publisher fell behind its schedule at worst.
    behind_schedule: Duration,
    first_publish: Instant,
    last_event: Instant,
    latencies: Vec<Duration>,
    arrivals: Vec<Instant>,
    rss_at_warm_up: Option<Memory>,
    rss_at_end: Option<Memory>,
    /// `serve`'s RSS in MiB, read every [`RATE_WINDOW`] through the phase and once at its end.
    rss_trail: Vec<(Instant, f64)>,
    /// The database's work for the phase, when the run counts it.
    work: Option<PhaseWork>,
}

struct Percentiles {
    p50: Duration,
    p90: Duration,
    p99: Duration,
    max: Duration,
}

impl PhaseReport {
    /// `serve`'s RSS as last read at `seconds` after the first publish, if it was read by then.
    fn rss_at(&self, seconds: f64) -> Option<f64> {
        self.rss_trail
            .iter()
            .take_while(|(at, _)| {
                at.saturating_duration_since(self.first_publish)
                    .as_secs_f64()
                    <= seconds
            })
            .last()
            .map(|(_, mib)| *mib)
    }

    /// First publish to last event.
    fn span(&self) -> Duration {
        self.last_event - self.first_publish
    }

    fn events_per_second(&self) -> f64 {
        self.received as f64 / self.span().as_secs_f64()
    }

    /// Commands acknowledged per second, from the first publish to the last ack.
    fn publish_rate(&self) -> f64 {
        self.published as f64 / self.publish_elapsed.as_secs_f64()
    }

    /// The database's work per charge, when the run counted it.
    fn print_work(&self, phase: &str, top: usize) {
        if let Some(work) = &self.work {
            work.print(phase, top);
        }
    }

    /// Nearest-rank percentiles of the publish-to-event latencies.
    fn latencies(&self) -> Percentiles {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let at = |q: f64| {
            let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
            sorted[rank - 1]
        };
        Percentiles {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

/// The phases of one run, one after the other against the same serve process.
struct Phases<'a> {
    broker: &'a Broker,
    tracker: &'a Arc<Mutex<Tracker>>,
    service: &'a mut Service,
    /// Commands published by every phase so far: what [`verify`] expects charged.
    published: usize,
    /// The serve process's memory at the start and after each phase, by phase.
    rss_after: Vec<(&'static str, Memory)>,
    /// Set when the run counts the database's work per charge (`--own-postgres`).
    work: Option<Work>,
}

/// The database's statistics of a run that counts its work: where they are read, and the
/// reading the next phase starts from.
struct Work {
    observer: Observer,
    start: Snapshot,
}

impl Phases<'_> {
    /// Runs `phase` ([`run_phase`]), then reads the serve process's memory as that after
    /// `label`, and the database's work for it when the run counts it.
    async fn run(&mut self, label: &'static str, phase: Phase) -> anyhow::Result<PhaseReport> {
        let commands = phase.commands;
        let mut report = run_phase(self.broker, self.tracker, self.service, phase).await?;
        self.published += commands;
        self.rss_after.push((label, self.service.memory()?));
        if let Some(work) = &mut self.work {
            let (done, next) = work
                .observer
                .phase_end(&work.start, report.received, self.service.pid)
                .await?;
            work.start = next;
            report.work = Some(done);
        }
        Ok(report)
    }

    /// Commands pushed through before the first measured phase.
    async fn warm_up(&mut self) -> anyhow::Result<()> {
        let warm_up = self
            .run("warm-up", Phase::new("warmup", WARM_UP_COMMANDS, None))
            .await?;
        eprintln!(
            "warm-up: {WARM_UP_COMMANDS} commands, last event after {:.2} s",
            warm_up.span().as_secs_f64()
        );
        Ok(())
    }

    /// From now on each phase reports the database's work; what came before is not counted.
    async fn count_work(&mut self, observer: Observer) -> anyhow::Result<()> {
        let start = observer.reset(self.service.pid).await?;
        self.work = Some(Work { observer, start });
        Ok(())
    }

    fn print_rss_after(&self) {
        println!();
        println!("## RSS of `onecharge serve` after each phase");
        println!();
        println!("| after | RSS MiB | peak RSS (VmHWM) MiB |");
        println!("|---|---:|---:|");
        for (phase, memory) in &self.rss_after {
            println!(
                "| {phase} | {:.1} | {:.1} |",
                memory.rss_mib, memory.peak_mib
            );
        }
        println!();
    }
}

/// Publishes the phase's commands while watching the events arrive; returns once every
/// attempt's event arrived. Fails when the service exits or the events stop coming.
async fn run_phase(
    broker: &Broker,
    tracker: &Arc<Mutex<Tracker>>,
    service: &mut Service,
    phase: Phase,
) -> anyhow::Result<PhaseReport> {
    {
        let mut tracker = lock(tracker);
        ensure!(
            tracker.in_flight.is_empty(),
            "{} attempts of an earlier phase are still in flight",
            tracker.in_flight.len()
        );
        tracker.phase = PhaseStats::default();
    }
    let publisher = tokio::spawn(publish_commands(
        broker.clone(),
        tracker.clone(),
        phase.name,
        phase.commands,
        phase.rate,
    ));
    let mut publisher = Some(publisher);
    let mut published_in = None;
    let mut stall = StallWatch::new(phase.name);
    let mut memory = phase
        .sample_memory
        .then(|| MemorySampler::new(phase.commands));
    let mut rss_trail = Vec::new();
    let mut next_rss = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        if Instant::now() >= next_rss {
            rss_trail.push((Instant::now(), service.memory()?.rss_mib));
            next_rss += RATE_WINDOW;
        }
        if publisher.as_ref().is_some_and(|p| p.is_finished()) {
            let finished = publisher.take().expect("checked above");
            published_in = Some(finished.await.context("the publisher panicked")??);
        }
        service.check_alive()?;
        let (published, received) = {
            let tracker = lock(tracker);
            (tracker.phase.published, tracker.phase.received)
        };
        stall.check(published, received)?;
        let done = publisher.is_none() && received == phase.commands;
        if let Some(memory) = &mut memory {
            memory.sample(service, published, received, done)?;
        }
        if done {
            break;
        }
    }
    let published_in = published_in.expect("the publisher finished");
    rss_trail.push((Instant::now(), service.memory()?.rss_mib));
    finish_phase(tracker, phase.name, published_in, memory, rss_trail)
}

/// Fails a phase in which no event arrived for [`STALL_TIMEOUT`] while commands are
/// outstanding.
struct StallWatch {
    phase: &'static str,
    received: usize,
    since: Instant,
}

impl StallWatch {
    fn new(phase: &'static str) -> Self {
        Self {
            phase,
            received: 0,
            since: Instant::now(),
        }
    }

    fn check(&mut self, published: usize, received: usize) -> anyhow::Result<()> {
        let now = Instant::now();
        if received > self.received || published == received {
            (self.received, self.since) = (received, now);
        } else if now - self.since > STALL_TIMEOUT {
            bail!(
                "{} phase stalled: no event for {} s, {received} of {published} published commands have their event",
                self.phase,
                STALL_TIMEOUT.as_secs()
            );
        }
        Ok(())
    }
}

/// The memory phase's RSS: a row every [`RSS_SAMPLE_EVERY`], one when the warm-up share
/// of the events arrived and one at the end.
struct MemorySampler {
    started: Instant,
    next_sample: Instant,
    /// Events after which the warm-up sample is taken.
    warm_up: usize,
    at_warm_up: Option<Memory>,
    at_end: Option<Memory>,
}

impl MemorySampler {
    fn new(commands: usize) -> Self {
        let started = Instant::now();
        Self {
            started,
            next_sample: started + RSS_SAMPLE_EVERY,
            warm_up: (commands as f64 * WARM_UP_SHARE).ceil() as usize,
            at_warm_up: None,
            at_end: None,
        }
    }

    fn sample(
        &mut self,
        service: &mut Service,
        published: usize,
        received: usize,
        done: bool,
    ) -> anyhow::Result<()> {
        let now = Instant::now();
        let started = self.started;
        let row = |memory: Memory, note: &str| {
            println!(
                "| {:.0} s | {} | {} | {:.1} | {note} |",
                (now - started).as_secs_f64(),
                thousands(published as f64),
                thousands(received as f64),
                memory.rss_mib
            );
        };
        let mut printed = false;
        if self.at_warm_up.is_none() && received >= self.warm_up {
            let memory = service.memory()?;
            row(memory, "after warm-up");
            self.at_warm_up = Some(memory);
            printed = true;
        }
        if done {
            let memory = service.memory()?;
            row(memory, "end: every event arrived");
            self.at_end = Some(memory);
        } else if now >= self.next_sample && !printed {
            row(service.memory()?, "");
        }
        if now >= self.next_sample {
            self.next_sample += RSS_SAMPLE_EVERY;
        }
        Ok(())
    }
}

/// The phase's report from what the tracker counted and the publisher's and sampler's
/// figures; warns about events that are not payment-succeeded.
fn finish_phase(
    tracker: &Mutex<Tracker>,
    name: &str,
    (publish_elapsed, behind_schedule): (Duration, Duration),
    memory: Option<MemorySampler>,
    rss_trail: Vec<(Instant, f64)>,
) -> anyhow::Result<PhaseReport> {
    let stats = std::mem::take(&mut lock(tracker).phase);
    if stats.not_succeeded > 0 {
        eprintln!(
            "warning: {} events of the {name} phase are not payment-succeeded",
            stats.not_succeeded
        );
    }
    Ok(PhaseReport {
        published: stats.published,
        received: stats.received,
        publish_elapsed,
        behind_schedule,
        first_publish: stats.first_publish.context("nothing published")?,
        last_event: stats.last_event.context("no event received")?,
        latencies: stats.latencies,
        arrivals: stats.arrivals,
        rss_at_warm_up: memory.as_ref().and_then(|m| m.at_warm_up),
        rss_at_end: memory.as_ref().and_then(|m| m.at_end),
        rss_trail,
        work: None,
    })
}

/// Publishes `commands` ChargePayment commands as producers do (JetStream publish with a
/// unique `Nats-Msg-Id`), at `rate` per second or as fast as possible, awaiting the acks in
/// a bounded pipeline. Returns the time from the first publish to the last ack, and how far
/// it fell behind the schedule at worst.
async fn publish_commands(
    broker: Broker,
    tracker: Arc<Mutex<Tracker>>,
    phase: &'static str,
    commands: usize,
    rate: Option<f64>,
) -> anyhow::Result<(Duration, Duration)> {
    let (acks, mut pending) = tokio::sync::mpsc::channel::<PublishAckFuture>(ACKS_IN_FLIGHT);
    let acker = tokio::spawn(async move {
        while let Some(ack) = pending.recv().await {
            let ack = ack
                .await
                .context("JetStream did not acknowledge a command")?;
            ensure!(
                !ack.duplicate,
                "JetStream took command {} as a duplicate",
                ack.sequence
            );
        }
        anyhow::Ok(())
    });
    let subject = broker.names.charge_subject();
    let started = Instant::now();
    let mut behind = Duration::ZERO;
    for i in 0..commands {
        if let Some(rate) = rate {
            let due = started + Duration::from_secs_f64(i as f64 / rate);
            let now = Instant::now();
            if due > now {
                tokio::time::sleep_until(due.into()).await;
            } else {
                behind = behind.max(now - due);
            }
        }
        let attempt = Uuid::new_v4();
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("bench-{attempt}").as_str());
        headers.insert("Correlation-Id", format!("bench-e2e-{phase}").as_str());
        let body = command_body(attempt, phase, i);
        {
            let mut tracker = lock(&tracker);
            let now = Instant::now();
            tracker.in_flight.insert(attempt, now);
            tracker.phase.published += 1;
            tracker.phase.first_publish.get_or_insert(now);
        }
        let ack = broker
            .jetstream
            .publish_with_headers(subject.clone(), headers, body.into())
            .await
            .with_context(|| format!("publishing to {subject}"))?;
        if acks.send(ack).await.is_err() {
            break; // the acker failed; its error is returned below
        }
    }
    drop(acks);
    acker.await.context("the ack task panicked")??;
    Ok((started.elapsed(), behind))
}

fn command_body(attempt: Uuid, phase: &str, i: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "payment_attempt_id": attempt,
        "order_id": format!("ord_{phase}_{i}"),
        "customer_id": "cus_bench",
        "amount_minor": 1000 + (i % 1000) as i64,
        "currency": "EUR",
        "payment_method": "pm_card_visa",
        "requested_at": OffsetDateTime::now_utc().format(&Rfc3339).expect("now formats"),
    }))
    .expect("json")
}

/// Every command charged once and settled, every event published and received once.
async fn verify(
    settings: &Settings,
    gateway: &MockGateway,
    tracker: &Mutex<Tracker>,
    total: usize,
    constant_latency_ms: u64,
) -> anyhow::Result<()> {
    let pool = sqlx::PgPool::connect(&settings.database_url).await?;
    let succeeded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM payment_attempts WHERE status = 'succeeded'")
            .fetch_one(&pool)
            .await?;
    let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM payment_attempts")
        .fetch_one(&pool)
        .await?;
    let unpublished: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL")
            .fetch_one(&pool)
            .await?;
    pool.close().await;
    let charges = gateway.stats().created;
    let (repeats, unreadable) = {
        let tracker = lock(tracker);
        (tracker.repeats, tracker.unreadable)
    };
    println!(
        "checked: {total} commands published, {attempts} attempts ({succeeded} succeeded), {charges} gateway charges, {unpublished} events unpublished, {repeats} repeated and {unreadable} unreadable events received"
    );
    let drawn = gateway.latency_drawn();
    if drawn.draws > 0 {
        println!(
            "gateway latency: {} requests drew from the log-normal; observed mean with the constant {} ms: {}",
            drawn.draws,
            constant_latency_ms,
            latency::observed_mean(Duration::from_millis(constant_latency_ms), drawn)
        );
    }
    ensure!(
        attempts as usize == total && succeeded as usize == total && charges as usize == total,
        "expected {total} attempts, succeeded, and charged"
    );
    Ok(())
}
