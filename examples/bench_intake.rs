//! Intake throughput: commands durably recorded and acknowledged per second, batch mode vs
//! single-message mode vs the ceiling of the same inserts straight to PostgreSQL, measured
//! side by side in one run on this machine; or, with lists of values, how that figure scales
//! with batch size, concurrency and the number of intake instances.
//!
//! ```text
//! cargo run --release --example bench_intake -- [--commands 20000] [--batch-size 256] [--concurrency 2] [--instances 1]
//! cargo run --release --example bench_intake -- --commands 20000 --batch-size 64,256 --concurrency 1,2,4 --instances 1,2 [--ceiling]
//! cargo run --release --example bench_intake -- --commands 20000 --cluster --replicas 1,3 --instances 1,2
//! ```
//!
//! - `--batch-size`, `--concurrency`, `--instances` take comma-separated lists. An instance
//!   is one `Intake` role built as `serve` builds it (its own `Store::setup` pool and its own
//!   NATS connection), all instances running at once in this process against the same
//!   durable consumer.
//! - With one value each (the default) it prints the three modes side by side and their
//!   ratios. The direct ceiling then keeps `concurrency × instances` transactions in flight.
//! - With `--sweep`, or when any list has more than one value, it prints one markdown table
//!   row per combination (batch size, then concurrency, then instances): intake's
//!   commands/s and its ratio to the first row. Batch size 1 is single-message mode and runs
//!   a tenth of `--commands` (at least 500), as it does side by side. `--ceiling` adds the
//!   direct-to-PostgreSQL ceiling of each combination and intake's share of it.
//!
//! - `--cluster` runs against a three-node JetStream cluster of the benchmark's own
//!   (`nats-server` processes on free loopback ports, as the cluster tests start them;
//!   `NATS_SERVER_BIN` overrides `/usr/sbin/nats-server`) instead of 127.0.0.1:4222, and
//!   `--replicas` (a list) sets `streams.replicas` of each run's streams; the sweep's table
//!   then gains a `replicas` column, the outermost loop.
//!
//! Needs PostgreSQL on 127.0.0.1:5432 and NATS JetStream on 127.0.0.1:4222 (unless
//! `--cluster`). Each mode and each combination gets a fresh database and namespace,
//! dropped afterwards.

use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use onecharge::broker::Broker;
use onecharge::config::Settings;
use onecharge::domain::command::{self, CommandHeaders};
use onecharge::intake::Intake;
use onecharge::store::intake::{record_batch, IntakeRecord};
use onecharge::store::Store;
use tokio::task::JoinSet;
use uuid::Uuid;

mod support;
use support::thousands;
#[path = "../tests/it/support/throwaway.rs"]
mod throwaway;
// `cluster` finds its servers at `super::nats_server`.
#[path = "../tests/it/support/cluster.rs"]
mod cluster;
#[path = "../tests/it/support/nats_server.rs"]
mod nats_server;
#[path = "support/running.rs"]
mod running;
use running::Running;
use throwaway::{ThrowawayDatabase, ThrowawayNamespace};

#[derive(Debug, clap::Parser)]
struct Args {
    /// Commands per run (single-message mode runs a tenth of them, at least 500)
    #[arg(long, default_value_t = 20_000)]
    commands: usize,
    /// Messages per transaction (intake.batch_size); a list sweeps
    #[arg(long, value_delimiter = ',', default_values_t = vec![256usize])]
    batch_size: Vec<usize>,
    /// Batches in hand per instance (intake.concurrency); a list sweeps
    #[arg(long, value_delimiter = ',', default_values_t = vec![2usize])]
    concurrency: Vec<usize>,
    /// Intake instances sharing the durable consumer; a list sweeps
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize])]
    instances: Vec<usize>,
    /// One table row per combination, even when every list has one value
    #[arg(long)]
    sweep: bool,
    /// In a sweep, also measure each combination's direct-to-PostgreSQL ceiling
    #[arg(long)]
    ceiling: bool,
    /// Run against a three-node NATS cluster of the benchmark's own instead of 127.0.0.1:4222
    #[arg(long)]
    cluster: bool,
    /// Replicas of each run's streams (streams.replicas); a list sweeps; above 1 needs --cluster
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize])]
    replicas: Vec<usize>,
}

impl Args {
    fn is_sweep(&self) -> bool {
        self.sweep
            || self.batch_size.len() > 1
            || self.concurrency.len() > 1
            || self.instances.len() > 1
            || self.replicas.len() > 1
            || self.cluster
    }

    /// Single-message mode is ten times slower; it runs fewer commands to finish as soon.
    fn commands_for(&self, batch_size: usize) -> usize {
        if batch_size == 1 {
            (self.commands / 10).max(500)
        } else {
            self.commands
        }
    }
}

/// One measured configuration.
#[derive(Debug, Clone, Copy)]
struct Shape {
    batch_size: usize,
    concurrency: usize,
    instances: usize,
    /// `streams.replicas`.
    replicas: usize,
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

/// One run's own database and namespace (removed when dropped), migrated, with its
/// streams; `store` is the benchmark's own pool (counting, the direct ceiling), not one an
/// intake instance uses.
struct Environment {
    settings: Settings,
    store: Store,
    broker: Broker,
    _namespace: ThrowawayNamespace,
    _database: ThrowawayDatabase,
}

async fn environment(tag: &str, shape: Shape, nats_url: &str) -> anyhow::Result<Environment> {
    let database = ThrowawayDatabase::named(
        "postgres://127.0.0.1:5432",
        &format!("onecharge_bench_{tag}"),
    );
    let id = &Uuid::new_v4().simple().to_string()[..10];
    let mut settings = Settings {
        database_url: database.url(),
        namespace: format!("bench{tag}{id}"),
        nats_url: nats_url.to_owned(),
        ..Settings::default()
    };
    settings.streams.replicas = shape.replicas;
    settings.intake.batch_size = shape.batch_size;
    settings.intake.concurrency = shape.concurrency;
    settings.validate()?;
    // Migrate once, then a pool large enough for the ceiling's batches in flight.
    drop(Store::setup(&settings.database_url).await?);
    let pool_size = (shape.concurrency * shape.instances).max(8) as u32;
    let store = Store::connect(&settings.database_url, pool_size).await?;
    let broker = Broker::connect(&settings).await?;
    // The throwaway's own client takes one URL; any server of a cluster deletes the streams.
    let first_server = settings.nats_url.split(',').next().unwrap_or_default();
    let namespace = ThrowawayNamespace::new(first_server, &broker.names);
    broker.ensure_streams().await?;
    Ok(Environment {
        settings,
        store,
        broker,
        _namespace: namespace,
        _database: database,
    })
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

/// Builds `instances` intake roles as `serve` builds one (`Application::build`: its own
/// `Store::setup` pool and broker connection), all bound to the same durable consumer.
async fn build_intakes(settings: &Settings, instances: usize) -> anyhow::Result<Vec<Intake>> {
    let mut intakes = Vec::with_capacity(instances);
    for _ in 0..instances {
        let store = Store::setup(&settings.database_url).await?;
        let broker = Broker::connect(settings).await?;
        broker.ensure_streams().await?;
        intakes.push(Intake::new(store, broker, settings).await?);
    }
    Ok(intakes)
}

/// Runs `instances` intakes at once until all `n` commands are recorded and acknowledged;
/// returns the elapsed time.
async fn run_intake(
    settings: &Settings,
    store: &Store,
    broker: &Broker,
    n: usize,
    instances: usize,
) -> anyhow::Result<Duration> {
    let intakes = build_intakes(settings, instances).await?;
    let started = Instant::now();
    let running = Running::start(intakes, Intake::run);
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
    running.stop().await?;
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
            }
        })
        .collect();
    let started = Instant::now();
    let chunks: Vec<Vec<IntakeRecord>> = records.chunks(batch_size).map(|c| c.to_vec()).collect();
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = JoinSet::new();
    for chunk in chunks {
        let permit = permits.clone().acquire_owned().await?;
        let store = store.clone();
        tasks.spawn(async move {
            let result = record_batch(
                &store,
                "onecharge-intake",
                &chunk,
                onecharge::config::IntakeSettings::default().max_command_age,
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

/// Measures `n` commands through intake (`direct` false) or straight to PostgreSQL with
/// `concurrency × instances` transactions in flight (`direct` true), in a fresh environment.
async fn measure(shape: Shape, n: usize, direct: bool, nats_url: &str) -> anyhow::Result<Duration> {
    let tag = if shape.batch_size == 1 { "s" } else { "b" };
    let env = environment(tag, shape, nats_url).await?;
    let (settings, store, broker) = (&env.settings, &env.store, &env.broker);
    let elapsed = if direct {
        run_direct(
            store,
            n,
            shape.batch_size,
            shape.concurrency * shape.instances,
        )
        .await
    } else {
        let published = Instant::now();
        match publish(broker, n).await {
            Ok(()) => {
                eprintln!("  published {n} commands in {:.2?}", published.elapsed());
                run_intake(settings, store, broker, n, shape.instances).await
            }
            Err(err) => Err(err),
        }
    };
    env.store.pool().close().await;
    elapsed
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Batch mode, single-message mode and the direct ceiling side by side, with their ratios.
async fn side_by_side(args: &Args, nats_url: &str) -> anyhow::Result<()> {
    let shape = Shape {
        batch_size: args.batch_size[0],
        concurrency: args.concurrency[0],
        instances: args.instances[0],
        replicas: args.replicas[0],
    };
    let single_n = args.commands_for(1);
    let instances = if shape.instances == 1 {
        String::new()
    } else {
        format!(", {} instances", shape.instances)
    };
    println!(
        "intake benchmark: {} commands (single-message mode: {single_n}), batch size {}, concurrency {}{instances}, {} cores",
        args.commands,
        shape.batch_size,
        shape.concurrency,
        cores()
    );

    let mut rows = Vec::new();
    for (mode, n, batch_size) in [
        (
            "direct to PostgreSQL (ceiling)",
            args.commands,
            shape.batch_size,
        ),
        ("intake, batch mode", args.commands, shape.batch_size),
        ("intake, single-message mode", single_n, 1),
    ] {
        let direct = mode.starts_with("direct");
        let elapsed = measure(
            Shape {
                batch_size,
                ..shape
            },
            n,
            direct,
            nats_url,
        )
        .await?;
        let rate = n as f64 / elapsed.as_secs_f64();
        println!(
            "  {mode:<32} {n:>7} commands in {:>8.2?}  {rate:>9.0} commands/s",
            elapsed
        );
        rows.push(rate);
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

/// One markdown table row per combination of batch size, concurrency and instances.
async fn sweep(args: &Args, nats_url: &str) -> anyhow::Result<()> {
    let broker = if args.cluster {
        "a three-node NATS cluster"
    } else {
        "NATS at 127.0.0.1:4222"
    };
    println!(
        "intake scaling: {} commands per run (batch size 1: {}), {broker}, {} cores",
        args.commands,
        args.commands_for(1),
        cores()
    );
    let (replicas_header, replicas_rule) = if args.cluster {
        ("| replicas ", "|---:")
    } else {
        ("", "")
    };
    let ceiling_header = if args.ceiling {
        " direct ceiling | of ceiling |"
    } else {
        ""
    };
    let ceiling_rule = if args.ceiling { "---:|---:|" } else { "" };
    println!(
        "{replicas_header}| batch size | concurrency | instances | commands | commands/s | vs first row |{ceiling_header}"
    );
    println!("{replicas_rule}|---:|---:|---:|---:|---:|---:|{ceiling_rule}");
    let mut first = None;
    for &replicas in &args.replicas {
        for &batch_size in &args.batch_size {
            for &concurrency in &args.concurrency {
                for &instances in &args.instances {
                    let shape = Shape {
                        batch_size,
                        concurrency,
                        instances,
                        replicas,
                    };
                    let n = args.commands_for(batch_size);
                    let rate = n as f64 / measure(shape, n, false, nats_url).await?.as_secs_f64();
                    let first = *first.get_or_insert(rate);
                    let ceiling = if args.ceiling {
                        let direct =
                            n as f64 / measure(shape, n, true, nats_url).await?.as_secs_f64();
                        format!(" {} | {:.0} % |", thousands(direct), 100.0 * rate / direct)
                    } else {
                        String::new()
                    };
                    let replicas = if args.cluster {
                        format!("| {replicas} ")
                    } else {
                        String::new()
                    };
                    println!(
                        "{replicas}| {batch_size} | {concurrency} | {instances} | {n} | {} | {:.2}× |{ceiling}",
                        thousands(rate),
                        rate / first
                    );
                }
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    anyhow::ensure!(
        !args.batch_size.is_empty() && !args.concurrency.is_empty() && !args.instances.is_empty(),
        "--batch-size, --concurrency and --instances each need at least one value"
    );
    anyhow::ensure!(
        args.instances.iter().all(|&i| i >= 1),
        "--instances must be at least 1"
    );
    // Refuse a value intake would refuse before measuring anything, not midway through a sweep.
    for &batch_size in args.batch_size.iter().chain([&1]) {
        for &concurrency in &args.concurrency {
            let mut settings = Settings::default();
            settings.intake.batch_size = batch_size;
            settings.intake.concurrency = concurrency;
            settings.validate()?;
        }
    }
    anyhow::ensure!(
        args.replicas.iter().all(|&r| r == 1) || args.cluster,
        "--replicas above 1 needs --cluster (the NATS at 127.0.0.1:4222 is one server)"
    );
    for &replicas in &args.replicas {
        let mut settings = Settings::default();
        settings.streams.replicas = replicas;
        settings.validate()?;
    }
    // Kept running until the end; killed on drop.
    let nats_cluster = match args.cluster {
        true => Some(cluster::NatsCluster::start().await),
        false => None,
    };
    let nats_url = match &nats_cluster {
        Some(cluster) => cluster.urls(),
        None => Settings::default().nats_url,
    };
    if args.is_sweep() {
        sweep(&args, &nats_url).await
    } else {
        side_by_side(&args, &nats_url).await
    }
}
