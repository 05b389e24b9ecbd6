//! Charges per second of one executor (its real `run` loop) against the in-process mock
//! gateway, for several gateway latencies and concurrencies. Needs PostgreSQL at
//! 127.0.0.1:5432 (trust auth); creates and drops its own database per run; NATS is not used.
//!
//! ```text
//! cargo run --release --example bench_executor -- [--charges N] [--latency-ms 0,50] [--concurrency 16,64]
//! ```
//!
//! Each run seeds N pending attempts the way intake records them, starts one executor with
//! the given concurrency (`executor.batch_size` = min(concurrency, 64), its pool sized as
//! `serve` sizes it), and measures from start until every attempt is `succeeded` in the
//! database; it then checks the mock's ledger has exactly N charges.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _};
use mock_gateway::{FaultConfig, Latency, MockConfig, MockGateway};
use onecharge::config::Settings;
use onecharge::domain::ChargePayment;
use onecharge::executor::Executor;
use onecharge::gateway::{GatewayClient, GatewayHealth};
use onecharge::store::intake::{record_batch, IntakeRecord};
use onecharge::store::Store;
use secrecy::SecretString;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const API_KEY: &str = "sk_bench";

#[derive(Debug, clap::Parser)]
struct Args {
    /// Charges per run
    #[arg(long, default_value_t = 2000)]
    charges: usize,
    /// Gateway latencies to measure, in milliseconds
    #[arg(long, value_delimiter = ',', default_values_t = vec![0u64, 50])]
    latency_ms: Vec<u64>,
    /// Executor concurrencies to measure
    #[arg(long, value_delimiter = ',', default_values_t = vec![16usize, 64])]
    concurrency: Vec<usize>,
    /// PostgreSQL server (without database)
    #[arg(long, default_value = "postgres://127.0.0.1:5432")]
    server: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    println!(
        "one executor, {} charges per run, in-process mock gateway, {} CPU(s)",
        args.charges,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("| gateway latency | concurrency | charges | seconds | charges/s |");
    println!("|---:|---:|---:|---:|---:|");
    for &latency in &args.latency_ms {
        for &concurrency in &args.concurrency {
            let (elapsed, charges) = run(&args, latency, concurrency).await?;
            println!(
                "| {latency} ms | {concurrency} | {charges} | {:.2} | {:.0} |",
                elapsed.as_secs_f64(),
                charges as f64 / elapsed.as_secs_f64()
            );
        }
    }
    Ok(())
}

async fn run(
    args: &Args,
    latency_ms: u64,
    concurrency: usize,
) -> anyhow::Result<(Duration, usize)> {
    let faults = FaultConfig {
        latency: Latency {
            fixed_ms: latency_ms,
            jitter_ms: 0,
        },
        ..FaultConfig::default()
    };
    let gateway = MockGateway::start(MockConfig {
        api_key: API_KEY.into(),
        faults,
        request_log_capacity: 0,
        ..MockConfig::default()
    })
    .await?;
    let db_name = format!("onecharge_bench_{}", Uuid::new_v4().simple());
    let mut settings = Settings {
        database_url: format!("{}/{db_name}", args.server),
        gateway_url: gateway.base_url(),
        gateway_api_key: Some(SecretString::from(API_KEY)),
        ..Settings::default()
    };
    settings.executor.concurrency = concurrency;
    settings.executor.batch_size = concurrency.min(64);
    settings.executor.poll_interval = Duration::from_millis(10);
    settings.validate()?;
    drop(Store::setup(&settings.database_url).await?);
    let result = measure(&settings, &gateway, args.charges).await;
    let admin = sqlx::PgPool::connect(&format!("{}/postgres", args.server)).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {db_name} WITH (FORCE)"))
        .execute(&admin)
        .await?;
    gateway.shutdown().await;
    result
}

async fn measure(
    settings: &Settings,
    gateway: &MockGateway,
    charges: usize,
) -> anyhow::Result<(Duration, usize)> {
    let store = Store::connect(
        &settings.database_url,
        settings.executor.concurrency.min(32) as u32 + 2,
    )
    .await?;
    seed(&store, charges).await?;

    let executor = Executor::new(
        store.clone(),
        GatewayClient::from_settings(settings)?,
        GatewayHealth::from_settings(&settings.executor),
        settings,
    );
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let running = tokio::spawn(executor.run(shutdown.clone()));
    let deadline = started + Duration::from_secs(600);
    loop {
        let done: i64 =
            sqlx::query_scalar("SELECT count(*) FROM payment_attempts WHERE status = 'succeeded'")
                .fetch_one(store.pool())
                .await?;
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
    shutdown.cancel();
    running.await.context("executor task")??;
    ensure!(
        gateway.ledger().len() == charges,
        "ledger has {} charges, expected {charges}",
        gateway.ledger().len()
    );
    Ok((elapsed, charges))
}

async fn seed(store: &Store, charges: usize) -> anyhow::Result<()> {
    let now = OffsetDateTime::now_utc();
    let records: Vec<IntakeRecord> = (0..charges)
        .map(|i| {
            let id = Uuid::new_v4();
            let message_id = format!("bench-{id}");
            IntakeRecord {
                body_sha256: onecharge::domain::command::body_sha256(message_id.as_bytes()),
                message_id,
                stream_sequence: i as u64,
                command: ChargePayment {
                    payment_attempt_id: id,
                    order_id: format!("ord_{i}"),
                    customer_id: "cus_bench".into(),
                    amount_minor: 1000,
                    currency: "EUR".into(),
                    payment_method: "pm_card_visa".into(),
                    description: None,
                    requested_at: None,
                },
                correlation_id: None,
                traceparent: None,
                stale: false,
            }
        })
        .collect();
    for chunk in records.chunks(500) {
        record_batch(store, "bench", chunk, now).await?;
    }
    Ok(())
}
