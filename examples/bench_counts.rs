//! What the attempt-count triggers (decision 91, migration `…_attempt_status_counts`) cost
//! the writers: the same intake and settlement work against two fresh databases per round,
//! one as migrated and one whose counting triggers this benchmark dropped, in one run,
//! alternating which goes first, printing each rate and the ratio with ÷ without. Needs
//! PostgreSQL at 127.0.0.1:5432 (trust auth); NATS is not used; the databases are dropped.
//!
//! ```text
//! cargo run --release --example bench_counts -- [--commands 20000] [--rounds 3] [--batch-size 64]
//! ```
//!
//! Intake: `--commands` fresh attempts recorded by `store::intake::record_batch` in batches of
//! 500 one after another (`fleet::seed`: intake's transaction without the broker), so every
//! batch pays one INSERT trigger. Settlement: the executor's
//! own step (`Executor::run_once`: one claim of `--batch-size` attempts, the calls to the
//! in-process mock gateway with no latency, one `settle_all` transaction) repeated until
//! every attempt is `succeeded`, so every claim and every batch of results pays an UPDATE
//! trigger. Both loops are sequential, with nothing to hide the triggers' work behind: the
//! ratio is the cost at its most visible.

use std::time::{Duration, Instant};

use anyhow::ensure;
use clap::Parser as _;
use onecharge::config::Settings;
use onecharge::domain::AttemptStatus;
use onecharge::store::Store;
use secrecy::SecretString;

#[path = "support/bench_gateway.rs"]
mod bench_gateway;
#[path = "support/fleet.rs"]
mod fleet;
#[path = "support/mod.rs"]
mod support;
#[path = "../tests/it/support/throwaway.rs"]
mod throwaway;

use throwaway::ThrowawayDatabase;

#[derive(Debug, clap::Parser)]
struct Args {
    /// Attempts recorded and then settled per database
    #[arg(long, default_value_t = 20_000)]
    commands: usize,
    /// Rounds (each measures both databases)
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Attempts per executor claim (`executor.batch_size`; also its concurrency)
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
}

/// The counting triggers, as `…_attempt_status_counts` creates them.
const TRIGGERS: [&str; 4] = [
    "attempt_status_count_inserted",
    "attempt_status_count_updated",
    "attempt_status_count_deleted",
    "attempt_status_count_truncated",
];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(
        args.commands > 0 && args.batch_size > 0,
        "nothing to measure"
    );
    onecharge::config::tls::install_crypto_provider();
    let gateway = bench_gateway::start(0, None, 0).await?;
    println!(
        "{} commands per database, intake batches of 500, executor batches of {}",
        support::thousands(args.commands as f64),
        args.batch_size
    );
    println!("\n| round | counted first | intake with | intake without | ratio | settlement with | settlement without | ratio |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    let mut ratios = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        let counted_first = round % 2 == 1;
        let mut with = None;
        let mut without = None;
        for counted in [counted_first, !counted_first] {
            let rates = measure(&args, &gateway.base_url(), counted).await?;
            *if counted { &mut with } else { &mut without } = Some(rates);
        }
        let (with, without) = (with.expect("measured"), without.expect("measured"));
        let intake = with.0 / without.0;
        let settlement = with.1 / without.1;
        println!(
            "| {round} | {} | {}/s | {}/s | {intake:.3} | {}/s | {}/s | {settlement:.3} |",
            if counted_first { "yes" } else { "no" },
            support::thousands(with.0),
            support::thousands(without.0),
            support::thousands(with.1),
            support::thousands(without.1),
        );
        ratios.0.push(intake);
        ratios.1.push(settlement);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "\nmean ratio with ÷ without: intake {:.3}, settlement {:.3}",
        mean(&ratios.0),
        mean(&ratios.1)
    );
    Ok(())
}

/// (intake commands/s, settled attempts/s) on a fresh database, with the counting triggers
/// or without them.
async fn measure(args: &Args, gateway_url: &str, counted: bool) -> anyhow::Result<(f64, f64)> {
    let database = ThrowawayDatabase::named(&throwaway::server_url(), "onecharge_bench_counts");
    let mut settings = Settings {
        database_url: database.url(),
        gateway_url: gateway_url.to_owned(),
        gateway_api_key: Some(SecretString::from(bench_gateway::API_KEY)),
        ..Settings::default()
    };
    settings.executor.concurrency = args.batch_size;
    settings.executor.batch_size = args.batch_size;
    settings.validate()?;
    let store = Store::setup(&settings.database_url).await?;
    if !counted {
        for trigger in TRIGGERS {
            sqlx::query(&format!("DROP TRIGGER {trigger} ON payment_attempts"))
                .execute(store.pool())
                .await?;
        }
    }

    let started = Instant::now();
    fleet::seed(&store, args.commands).await?;
    let intake = rate(args.commands, started.elapsed());

    let executor = fleet::executors(&settings, 1).await?.remove(0);
    let started = Instant::now();
    let mut settled = 0;
    while settled < args.commands {
        let report = executor.run_once().await?;
        ensure!(report.claimed() > 0, "nothing left to claim at {settled}");
        settled += report.count(AttemptStatus::Succeeded);
    }
    let settlement = rate(args.commands, started.elapsed());

    // Counted from the table: without the triggers there are no kept counts to read.
    let counts: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM payment_attempts GROUP BY status")
            .fetch_all(store.pool())
            .await?;
    ensure!(
        counts == [("succeeded".to_owned(), args.commands as i64)],
        "every attempt succeeded: {counts:?}"
    );
    if counted {
        let kept = onecharge::store::reads::attempts::count_by_status(&store).await?;
        ensure!(kept == counts, "kept {kept:?} ≠ counted {counts:?}");
    }
    store.pool().close().await;
    Ok((intake, settlement))
}

fn rate(n: usize, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64()
}
