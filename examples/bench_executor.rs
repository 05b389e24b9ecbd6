//! Charges per second of executors (their real `run` loops) against the in-process mock
//! gateway, for several gateway latencies, concurrencies, claim batch sizes and numbers of
//! executor instances. Needs PostgreSQL at 127.0.0.1:5432 (trust auth); creates and drops its
//! own database per run; NATS is not used.
//!
//! ```text
//! cargo run --release --example bench_executor -- [--charges N] [--latency-ms 0,50] [--concurrency 16,64] [--batch-size 16,64] [--instances 1,2]
//! cargo run --release --example bench_executor -- --charges 3000 --latency-ms 0,50 --concurrency 16,64 --batch-size 16,64 --instances 1,2
//! cargo run --release --example bench_executor -- --charges 2000 --latency-median 300ms --latency-p99 1.5s --concurrency 64,256
//! ```
//!
//! Every flag takes a comma-separated list and the table has one row per combination
//! (latency, then concurrency, then batch size, then instances, then `--claim-ahead`). Each run seeds N pending
//! attempts the way intake records them, starts `--instances` executors at once in this
//! process, each built as `serve` builds one (its own pool of `executor::DATABASE_CONNECTIONS`
//! connections, its own gateway client and health), all against the same database and the
//! same mock, with `executor.concurrency` and `executor.batch_size` as given (without
//! `--batch-size`, min(concurrency, 64); `run` never claims more than its free call slots).
//! It measures from start until every attempt is `succeeded` in the database, then checks
//! the mock's ledger has exactly N charges. For a non-zero latency the bound is what the
//! gateway calls alone allow: concurrency × instances ÷ mean latency. Each row also shows
//! the rate over the steady middle of the run (from 20 % to 80 % settled, without ramp-up
//! and drain), the process's peak RSS during the run (`VmHWM`, reset before each run; it
//! includes the in-process mock and its ledger), and the most TCP connections the mock
//! held open at once (`/proc/net/tcp`, sampled every 10 polls).
//!
//! `--latency-median`/`--latency-p99` (with `--latency-seed`, default 7) add a log-normal
//! latency to every gateway call, on top of `--latency-ms` (which then defaults to 0 alone):
//! the bound uses the distribution's mean, exp(mu + sigma²/2), plus the constant, and each
//! row also shows the mean the mock really drew in that run.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _};
use clap::CommandFactory as _;
use mock_gateway::{LatencyDistribution, MockGateway};
use onecharge::config::Settings;
use onecharge::executor::Executor;
use onecharge::store::Store;
use secrecy::SecretString;

#[path = "support/bench_gateway.rs"]
mod bench_gateway;
#[path = "support/fleet.rs"]
mod fleet;
#[path = "support/latency.rs"]
mod latency;
#[path = "support/running.rs"]
mod running;
#[path = "../tests/it/support/throwaway.rs"]
mod throwaway;

use fleet::{executors, seed};
use running::Running;
use throwaway::ThrowawayDatabase;

#[derive(Debug, clap::Parser)]
struct Args {
    /// Charges per run
    #[arg(long, default_value_t = 2000)]
    charges: usize,
    /// Constant gateway latencies to measure, in milliseconds [default: 0,50; 0 with --latency-median]
    #[arg(long, value_delimiter = ',')]
    latency_ms: Vec<u64>,
    #[command(flatten)]
    distribution: latency::LatencyArgs,
    /// Executor concurrencies to measure (per instance)
    #[arg(long, value_delimiter = ',', default_values_t = vec![16usize, 64])]
    concurrency: Vec<usize>,
    /// Claim batch sizes (executor.batch_size) to measure [default: min(concurrency, 64)]
    #[arg(long, value_delimiter = ',')]
    batch_size: Vec<usize>,
    /// Claim-ahead maxima (executor.claim_ahead) to measure; 0 claims only for free slots
    /// [default: the setting's default]
    #[arg(long, value_delimiter = ',')]
    claim_ahead: Vec<usize>,
    /// Numbers of executor instances running at once
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize])]
    instances: Vec<usize>,
    /// PostgreSQL server (without database)
    #[arg(long, default_value = "postgres://127.0.0.1:5432")]
    server: String,
    /// Keep each run's database, to see where time went (`payment_attempts.dispatched_at`,
    /// `gateway_call_records.started_at` / `finished_at`, `attempt_transitions.at`)
    #[arg(long)]
    keep_database: bool,
}

/// One measured configuration.
#[derive(Debug, Clone, Copy)]
struct Shape {
    latency_ms: u64,
    distribution: Option<LatencyDistribution>,
    concurrency: usize,
    batch_size: usize,
    claim_ahead: usize,
    instances: usize,
}

/// What one run measured.
struct Measured {
    elapsed: Duration,
    charges: usize,
    /// Charges per second while 20 % to 80 % of them settled: the steady middle, without
    /// the ramp-up and the drain of the last, slowest calls.
    steady_rate: f64,
    /// The process's peak resident memory during the run (executors, mock, observer).
    peak_rss_kib: u64,
    /// The most TCP connections the mock gateway held open at once.
    gateway_connections: usize,
    /// The mean latency the mock drew from its distribution, if it has one.
    drawn: mock_gateway::LatencyDrawn,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = <Args as clap::Parser>::parse();
    let distribution = args.distribution.distribution().unwrap_or_else(|message| {
        Args::command()
            .error(clap::error::ErrorKind::ValueValidation, message)
            .exit()
    });
    fill_defaults(&mut args, distribution.is_some());
    check_args(&args)?;
    print_heading(&args, distribution.as_ref());
    for shape in shapes(&args, distribution) {
        let measured = run(&args, shape).await?;
        print_row(shape, &measured);
    }
    Ok(())
}

/// `--claim-ahead` and `--latency-ms` when not given: the setting's default, and 0,50 (0
/// alone with a latency distribution).
fn fill_defaults(args: &mut Args, distribution: bool) {
    if args.claim_ahead.is_empty() {
        args.claim_ahead = vec![Settings::default().executor.claim_ahead];
    }
    if args.latency_ms.is_empty() {
        args.latency_ms = if distribution { vec![0] } else { vec![0, 50] };
    }
}

/// Refuses a value the executor would refuse, before measuring anything.
fn check_args(args: &Args) -> anyhow::Result<()> {
    ensure!(
        args.instances.iter().all(|&i| i >= 1),
        "--instances must be at least 1"
    );
    for &concurrency in &args.concurrency {
        for batch_size in batch_sizes(args, concurrency) {
            let mut settings = Settings::default();
            settings.executor.concurrency = concurrency;
            settings.executor.batch_size = batch_size;
            for &claim_ahead in &args.claim_ahead {
                settings.executor.claim_ahead = claim_ahead;
                settings.validate()?;
            }
        }
    }
    Ok(())
}

fn print_heading(args: &Args, distribution: Option<&LatencyDistribution>) {
    println!(
        "executor scaling: instances {}, {} charges per run, in-process mock gateway, {} CPU(s)",
        args.instances
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        args.charges,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    match distribution {
        Some(distribution) => println!(
            "gateway latency: constant + {distribution}; observed = constant + the mean the mock drew"
        ),
        None => println!("gateway latency: constant"),
    }
    println!("| gateway latency | mean latency | observed mean | concurrency | batch size | claim ahead | instances | charges | seconds | charges/s | steady 20–80 % | bound (concurrency × instances ÷ mean latency) | of bound (whole / steady) | peak RSS | gateway connections |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
}

/// Every combination the flags ask for, in the table's order: latency, then concurrency,
/// then batch size, then instances, then claim-ahead.
fn shapes(args: &Args, distribution: Option<LatencyDistribution>) -> Vec<Shape> {
    let mut shapes = Vec::new();
    for &latency_ms in &args.latency_ms {
        for &concurrency in &args.concurrency {
            for batch_size in batch_sizes(args, concurrency) {
                for &instances in &args.instances {
                    for &claim_ahead in &args.claim_ahead {
                        shapes.push(Shape {
                            latency_ms,
                            distribution,
                            concurrency,
                            batch_size,
                            claim_ahead,
                            instances,
                        });
                    }
                }
            }
        }
    }
    shapes
}

/// One row of the table: the shape, what it measured, and the bound the gateway calls
/// alone allow.
fn print_row(shape: Shape, measured: &Measured) {
    let (latency_ms, distribution) = (shape.latency_ms, shape.distribution);
    let (concurrency, instances) = (shape.concurrency, shape.instances);
    let Measured {
        elapsed,
        charges,
        steady_rate,
        peak_rss_kib,
        gateway_connections,
        drawn,
    } = *measured;
    let rate = charges as f64 / elapsed.as_secs_f64();
    let constant = Duration::from_millis(latency_ms);
    let mean = constant + distribution.map_or(Duration::ZERO, |d| d.mean());
    let observed = match distribution {
        Some(_) => latency::observed_mean(constant, drawn),
        None => latency::millis(constant),
    };
    let (bound, of_bound) = if mean.is_zero() {
        ("—".to_string(), "—".to_string())
    } else {
        let bound = (concurrency * instances) as f64 / mean.as_secs_f64();
        (
            format!("{bound:.0}"),
            format!(
                "{:.0} % / {:.0} %",
                100.0 * rate / bound,
                100.0 * steady_rate / bound
            ),
        )
    };
    let latency_label = match distribution {
        Some(d) => format!(
            "{latency_ms} ms + log-normal {} / p99 {}",
            latency::millis(d.median()),
            latency::millis(d.p99())
        ),
        None => format!("{latency_ms} ms"),
    };
    println!(
        "| {latency_label} | {} | {observed} | {concurrency} | {} | {} | {instances} | {charges} | {:.2} | {rate:.0} | {steady_rate:.0} | {bound} | {of_bound} | {:.1} MiB | {gateway_connections} |",
        latency::millis(mean),
        shape.batch_size,
        shape.claim_ahead,
        elapsed.as_secs_f64(),
        peak_rss_kib as f64 / 1024.0,
    );
}

/// The claim batch sizes to measure at `concurrency`: `--batch-size`, or min(concurrency, 64).
fn batch_sizes(args: &Args, concurrency: usize) -> Vec<usize> {
    if args.batch_size.is_empty() {
        vec![concurrency.min(64)]
    } else {
        args.batch_size.clone()
    }
}

async fn run(args: &Args, shape: Shape) -> anyhow::Result<Measured> {
    let gateway = bench_gateway::start(shape.latency_ms, shape.distribution, 0).await?;
    let database =
        ThrowawayDatabase::named(&args.server, "onecharge_bench").kept(args.keep_database);
    let mut settings = Settings {
        database_url: database.url(),
        gateway_url: gateway.base_url(),
        gateway_api_key: Some(SecretString::from(bench_gateway::API_KEY)),
        ..Settings::default()
    };
    settings.executor.concurrency = shape.concurrency;
    settings.executor.batch_size = shape.batch_size;
    settings.executor.claim_ahead = shape.claim_ahead;
    settings.executor.poll_interval = Duration::from_millis(10);
    settings.validate()?;
    let admin = sqlx::PgPool::connect(&format!("{}/postgres", args.server)).await?;
    check_connection_budget(&admin, shape.instances).await?;
    drop(Store::setup(&settings.database_url).await?);
    reset_peak_rss();
    let result = measure(&settings, &gateway, args.charges, shape.instances)
        .await
        .map(|run| Measured {
            elapsed: run.elapsed,
            charges: args.charges,
            steady_rate: run.steady_rate,
            peak_rss_kib: peak_rss_kib(),
            gateway_connections: run.gateway_connections,
            drawn: gateway.latency_drawn(),
        });
    admin.close().await;
    drop(database);
    gateway.shutdown().await;
    result
}

/// Fails at once, rather than stalling on claim errors, when the executors' pools together
/// could ask the server for more connections than it accepts.
async fn check_connection_budget(admin: &sqlx::PgPool, instances: usize) -> anyhow::Result<()> {
    let max: String = sqlx::query_scalar("SHOW max_connections")
        .fetch_one(admin)
        .await?;
    let max: u32 = max.parse().context("max_connections")?;
    // The observer pool, the admin pool and migrations take a few more.
    let wanted = instances as u32 * onecharge::executor::DATABASE_CONNECTIONS + 4;
    ensure!(
        wanted <= max,
        "{instances} executors would need up to {wanted} connections; the server allows {max}"
    );
    Ok(())
}

/// What [`measure`] saw.
struct Run {
    elapsed: Duration,
    steady_rate: f64,
    gateway_connections: usize,
}

async fn measure(
    settings: &Settings,
    gateway: &MockGateway,
    charges: usize,
    instances: usize,
) -> anyhow::Result<Run> {
    // Seeding and watching use their own pool, not one an executor needs.
    let observer = Store::connect(&settings.database_url, 2).await?;
    seed(&observer, charges).await?;

    let executors = executors(settings, instances).await?;
    let started = Instant::now();
    let running = Running::start(executors, Executor::run);
    let deadline = started + Duration::from_secs(600);
    let mut progress: Vec<(Duration, usize)> = Vec::new();
    let mut gateway_connections = 0;
    let mut polls = 0u32;
    loop {
        let done: i64 =
            sqlx::query_scalar("SELECT count(*) FROM payment_attempts WHERE status = 'succeeded'")
                .fetch_one(observer.pool())
                .await?;
        progress.push((started.elapsed(), done as usize));
        polls += 1;
        if polls.is_multiple_of(10) {
            gateway_connections =
                gateway_connections.max(established_to(gateway.local_addr().port()));
        }
        if done as usize == charges {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "only {done} of {charges} settled after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed();
    running.stop().await?;
    observer.pool().close().await;
    ensure!(
        gateway.ledger().len() == charges,
        "ledger has {} charges, expected {charges}",
        gateway.ledger().len()
    );
    Ok(Run {
        elapsed,
        steady_rate: steady_rate(&progress, charges),
        gateway_connections,
    })
}

/// Charges per second between the first poll that saw 20 % settled and the first that saw
/// 80 %.
fn steady_rate(progress: &[(Duration, usize)], charges: usize) -> f64 {
    let first_at = |share: usize| {
        progress
            .iter()
            .find(|(_, done)| done * 100 >= charges * share)
            .copied()
    };
    match (first_at(20), first_at(80)) {
        (Some((t0, n0)), Some((t1, n1))) if t1 > t0 => (n1 - n0) as f64 / (t1 - t0).as_secs_f64(),
        _ => f64::NAN,
    }
}

/// Established TCP connections whose local port is `port` (the mock's side of each
/// connection a gateway client holds), from `/proc/net/tcp`.
fn established_to(port: u16) -> usize {
    let local = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .map(|table| {
            table
                .lines()
                .skip(1)
                .filter(|line| {
                    let mut fields = line.split_whitespace();
                    let local_address = fields.nth(1).unwrap_or("");
                    let state = fields.nth(1).unwrap_or("");
                    local_address.ends_with(&local) && state == "01"
                })
                .count()
        })
        .sum()
}

/// Starts a new peak for `VmHWM` (Linux: writing 5 to `clear_refs`).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// `VmHWM` of this process, in KiB: the peak resident memory since [`reset_peak_rss`].
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
