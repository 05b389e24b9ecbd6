//! Intake throughput: commands durably recorded and acknowledged per second, batch mode vs
//! single-message mode vs the ceiling of the same inserts straight to PostgreSQL, measured
//! side by side in one run on this machine.
//!
//! `cargo run --release --example bench_intake -- [--commands 20000] [--batch-size 256] [--concurrency 2]`
//!
//! Needs PostgreSQL on 127.0.0.1:5432 and NATS JetStream on 127.0.0.1:4222. Each mode gets
//! a fresh database and namespace, dropped afterwards.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::HeaderMap;
use onecharge::broker::Broker;
use onecharge::config::Settings;
use onecharge::domain::command::{self, CommandHeaders};
use onecharge::intake::Intake;
use onecharge::store::intake::{record_batch, IntakeRecord};
use onecharge::store::Store;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

struct Args {
    commands: usize,
    batch_size: usize,
    concurrency: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        commands: 20_000,
        batch_size: 256,
        concurrency: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--commands" => args.commands = value.parse()?,
            "--batch-size" => args.batch_size = value.parse()?,
            "--concurrency" => args.concurrency = value.parse()?,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    Ok(args)
}

fn body(i: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "payment_attempt_id": Uuid::new_v4(),
        "order_id": format!("ord_{i}"),
        "customer_id": "cus_bench",
        "amount_minor": 1000 + i as i64,
        "currency": "EUR",
        "payment_method": "pm_card_visa",
    }))
    .unwrap()
}

async fn environment(
    tag: &str,
    batch_size: usize,
    concurrency: usize,
) -> anyhow::Result<(Settings, Store, Broker)> {
    let id = &Uuid::new_v4().simple().to_string()[..10];
    let mut settings = Settings {
        database_url: format!("postgres://127.0.0.1:5432/onecharge_bench_{tag}_{id}"),
        namespace: format!("bench{tag}{id}"),
        ..Settings::default()
    };
    settings.intake.batch_size = batch_size;
    settings.intake.concurrency = concurrency;
    // Migrate once, then a pool large enough for the batches in flight.
    drop(Store::setup(&settings.database_url).await?);
    let store = Store::connect(&settings.database_url, 8).await?;
    let broker = Broker::connect(&settings).await?;
    broker.ensure_streams().await?;
    Ok((settings, store, broker))
}

async fn teardown(settings: &Settings, store: Store, broker: &Broker) {
    store.pool().close().await;
    for name in [
        broker.names.commands_stream(),
        broker.names.events_stream(),
        broker.names.dlq_stream(),
    ] {
        let _ = broker.jetstream.delete_stream(name).await;
    }
    if let Ok(pool) = sqlx::PgPool::connect("postgres://127.0.0.1:5432/postgres").await {
        let db = settings.database_url.rsplit('/').next().unwrap();
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
            .execute(&pool)
            .await;
    }
}

/// Publishes `n` commands with pipelined acks; returns when JetStream stored them all.
async fn publish(broker: &Broker, n: usize) -> anyhow::Result<()> {
    let subject = broker.names.charge_subject();
    for chunk_start in (0..n).step_by(1000) {
        let mut acks = Vec::new();
        for i in chunk_start..(chunk_start + 1000).min(n) {
            let mut headers = HeaderMap::new();
            headers.insert("Nats-Msg-Id", format!("bench-{i}").as_str());
            acks.push(
                broker
                    .jetstream
                    .publish_with_headers(subject.clone(), headers, body(i).into())
                    .await?,
            );
        }
        for ack in acks {
            ack.await?;
        }
    }
    Ok(())
}

/// Runs intake until all `n` commands are recorded and acknowledged; returns the elapsed time.
async fn run_intake(
    settings: &Settings,
    store: &Store,
    broker: &Broker,
    n: usize,
) -> anyhow::Result<Duration> {
    let intake = Intake::new(store.clone(), broker.clone(), settings).await?;
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let task = tokio::spawn(intake.run(shutdown.clone()));
    let stream = broker
        .jetstream
        .get_stream(broker.names.commands_stream())
        .await?;
    loop {
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = stream
            .get_consumer(&settings.intake.consumer)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let info = consumer.info().await?;
        if info.ack_floor.stream_sequence as usize >= n {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "intake did not finish in 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed();
    shutdown.cancel();
    task.await??;
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM payment_attempts")
        .fetch_one(store.pool())
        .await?;
    anyhow::ensure!(recorded as usize == n, "recorded {recorded} of {n}");
    Ok(elapsed)
}

/// The ceiling: the same validation and inserts, batch by batch, with no broker at all.
async fn run_direct(
    store: &Store,
    n: usize,
    batch_size: usize,
    concurrency: usize,
) -> anyhow::Result<Duration> {
    let records: Vec<IntakeRecord> = (0..n)
        .map(|i| {
            let headers = CommandHeaders {
                message_id: Some(format!("bench-{i}")),
                ..Default::default()
            };
            let valid = command::validate(&headers, &body(i)).expect("valid");
            IntakeRecord {
                message_id: valid.message_id,
                stream_sequence: i as u64 + 1,
                body_sha256: valid.body_sha256,
                command: valid.command,
                correlation_id: None,
                traceparent: None,
                stale: false,
            }
        })
        .collect();
    let started = Instant::now();
    let chunks: Vec<Vec<IntakeRecord>> = records.chunks(batch_size).map(|c| c.to_vec()).collect();
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in chunks {
        let permit = permits.clone().acquire_owned().await?;
        let store = store.clone();
        tasks.spawn(async move {
            let result = record_batch(
                &store,
                "onecharge-intake",
                &chunk,
                OffsetDateTime::now_utc(),
            )
            .await;
            drop(permit);
            result
        });
    }
    while let Some(result) = tasks.join_next().await {
        result??;
    }
    Ok(started.elapsed())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let single_n = (args.commands / 10).max(500);
    println!(
        "intake benchmark: {} commands (single-message mode: {single_n}), batch size {}, concurrency {}, {} cores",
        args.commands,
        args.batch_size,
        args.concurrency,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );

    let mut rows = Vec::new();
    for (mode, n, batch) in [
        (
            "direct to PostgreSQL (ceiling)",
            args.commands,
            args.batch_size,
        ),
        ("intake, batch mode", args.commands, args.batch_size),
        ("intake, single-message mode", single_n, 1),
    ] {
        let (settings, store, broker) =
            environment(if batch == 1 { "s" } else { "b" }, batch, args.concurrency).await?;
        let elapsed = if mode.starts_with("direct") {
            run_direct(&store, n, batch, args.concurrency).await?
        } else {
            let published = Instant::now();
            publish(&broker, n).await?;
            eprintln!("  published {n} commands in {:.2?}", published.elapsed());
            run_intake(&settings, &store, &broker, n).await?
        };
        let rate = n as f64 / elapsed.as_secs_f64();
        println!(
            "  {mode:<32} {n:>7} commands in {:>8.2?}  {rate:>9.0} commands/s",
            elapsed
        );
        rows.push(rate);
        teardown(&settings, store, &broker).await;
    }
    println!(
        "batch mode / single-message mode: {:.1}x",
        rows[1] / rows[2]
    );
    println!(
        "batch mode / direct ceiling:      {:.0}%",
        100.0 * rows[1] / rows[0]
    );
    Ok(())
}
