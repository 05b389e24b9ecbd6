//! The fleet-wide gateway rate limit under load: several executor instances (their real
//! `run` loops, each built as `serve` builds one, each with its own pool) charge against one
//! in-process mock gateway with `gateway_max_rate` set and far more work due than the limit
//! lets through. Needs PostgreSQL at 127.0.0.1:5432 (trust auth); creates and drops its own
//! database per run; NATS is not used.
//!
//! ```text
//! cargo run --release --example bench_rate_limit -- [--rate 200] [--instances 2] [--seconds 10] [--concurrency 64] [--latency-ms 20]
//! ```
//!
//! It reads the time the mock received each charge (its request log, on one monotonic clock)
//! and prints, per run: the most requests in any sliding one-second window ÷ the limit (the
//! target is ≤ 1.05) and the mean rate from the first request to the last ÷ the limit (the
//! target is ≥ 0.90, since work waits all along).

use std::time::{Duration, Instant};

use anyhow::ensure;
use onecharge::config::Settings;
use onecharge::executor::Executor;
use onecharge::store::Store;
use secrecy::SecretString;
use time::OffsetDateTime;

#[path = "support/bench_gateway.rs"]
mod bench_gateway;
#[path = "support/fleet.rs"]
mod fleet;
#[path = "support/running.rs"]
mod running;
#[path = "../tests/it/support/throwaway.rs"]
mod throwaway;

use fleet::{executors, seed};
use running::Running;
use throwaway::ThrowawayDatabase;

#[derive(Debug, clap::Parser)]
struct Args {
    /// gateway_max_rate values to measure (requests per second, fleet-wide)
    #[arg(long, value_delimiter = ',', default_values_t = vec![200.0f64])]
    rate: Vec<f64>,
    /// gateway_rate_burst values to measure (0: the default, 1/30 s of the rate)
    #[arg(long, value_delimiter = ',', default_values_t = vec![0u32])]
    burst: Vec<u32>,
    /// Executor instances running at once
    #[arg(long, value_delimiter = ',', default_values_t = vec![2usize])]
    instances: Vec<usize>,
    /// How long each run charges (the work seeded is 1.5 × rate × seconds, so it never runs out)
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// executor.concurrency per instance
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Constant gateway latency, in milliseconds
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    /// PostgreSQL server (without database)
    #[arg(long, default_value = "postgres://127.0.0.1:5432")]
    server: String,
}

/// What one run measured, from the mock's request log.
struct Measured {
    requests: usize,
    /// First to last request, on the mock's clock.
    span: Duration,
    /// The most requests received in any window of one second, and when (seconds after the
    /// first request) that window opened.
    max_in_one_second: (usize, f64),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    println!(
        "gateway rate limit: {} s per run, concurrency {} per instance, {} ms gateway latency, {} CPU(s)",
        args.seconds,
        args.concurrency,
        args.latency_ms,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("| gateway_max_rate | burst | instances | requests | seconds (first → last) | mean rate | mean ÷ limit | max in any 1 s window | opened at | max ÷ limit |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &rate in &args.rate {
        for &burst in &args.burst {
            for &instances in &args.instances {
                let measured = run(&args, rate, burst, instances).await?;
                let mean = (measured.requests - 1) as f64 / measured.span.as_secs_f64();
                let (most, opened) = measured.max_in_one_second;
                let burst = match burst {
                    0 => onecharge::gateway_access::limit::default_burst(rate),
                    burst => burst,
                };
                println!(
                    "| {rate:.0}/s | {burst} | {instances} | {} | {:.2} | {mean:.1}/s | {:.3} | {most} | {opened:.2} s | {:.3} |",
                    measured.requests,
                    measured.span.as_secs_f64(),
                    mean / rate,
                    most as f64 / rate,
                );
            }
        }
    }
    Ok(())
}

async fn run(args: &Args, rate: f64, burst: u32, instances: usize) -> anyhow::Result<Measured> {
    let gateway = bench_gateway::start(args.latency_ms, None, 1_000_000).await?;
    let database = ThrowawayDatabase::named(&args.server, "onecharge_bench");
    let mut settings = Settings {
        database_url: database.url(),
        gateway_url: gateway.base_url(),
        gateway_api_key: Some(SecretString::from(bench_gateway::API_KEY)),
        gateway_max_rate: rate,
        gateway_rate_burst: burst,
        ..Settings::default()
    };
    settings.executor.concurrency = args.concurrency;
    settings.executor.batch_size = args.concurrency.min(64);
    settings.executor.poll_interval = Duration::from_millis(10);
    settings.validate()?;
    drop(Store::setup(&settings.database_url).await?);
    let observer = Store::connect(&settings.database_url, 2).await?;
    let seeded = (rate * args.seconds as f64 * 1.5).ceil() as usize;
    seed(&observer, seeded).await?;

    let executors = executors(&settings, instances).await?;
    let started = Instant::now();
    let running = Running::start(executors, Executor::run);
    // The run lasts as long as asked; the work seeded outlasts it, so work waits throughout.
    while started.elapsed() < Duration::from_secs(args.seconds) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.stop().await?;
    let charged: i64 =
        sqlx::query_scalar("SELECT count(*) FROM payment_attempts WHERE status = 'succeeded'")
            .fetch_one(observer.pool())
            .await?;
    observer.pool().close().await;
    let mut received: Vec<OffsetDateTime> = gateway
        .requests()
        .into_iter()
        .map(|request| request.received_at)
        .collect();
    gateway.shutdown().await;
    drop(database);
    ensure!(
        received.len() >= 2,
        "only {} requests reached the gateway",
        received.len()
    );
    ensure!(
        charged as usize <= received.len(),
        "{charged} charges settled but only {} requests received",
        received.len()
    );
    received.sort();
    Ok(Measured {
        requests: received.len(),
        span: (received[received.len() - 1] - received[0]).unsigned_abs(),
        max_in_one_second: max_in_window(&received, time::Duration::SECOND),
    })
}

/// The most timestamps of the sorted `times` inside any window `[t, t + window)`, and the
/// seconds from the first timestamp to that window's first.
fn max_in_window(times: &[OffsetDateTime], window: time::Duration) -> (usize, f64) {
    let (mut most, mut opened) = (0, 0.0);
    let mut start = 0;
    for (end, &at) in times.iter().enumerate() {
        while at - times[start] >= window {
            start += 1;
        }
        if end - start + 1 > most {
            most = end - start + 1;
            opened = (times[start] - times[0]).as_seconds_f64();
        }
    }
    (most, opened)
}
