//! The reconciliation sweep over a gateway holding many charges: one in-process mock gateway
//! (§3 dialect) whose ledger holds `--charges` succeeded charges, each matching a succeeded
//! attempt in a scratch database, and one `Reconciler::sweep` over the window that holds
//! them all. Needs PostgreSQL at 127.0.0.1:5432 (trust auth); creates and drops its own
//! database per run; NATS is not used.
//!
//! ```text
//! cargo run --release --example bench_sweep -- [--charges 20000,200000,1000000]
//! ```
//!
//! It prints three tables, a row per run:
//!
//! 1. pages and records read, the sweep's seconds and records per second, and the process's
//!    resident memory (VmRSS, sampled every 20 ms) when the sweep started and at its peak
//!    during the sweep. The mock's ledger lives in the same process and is built before the
//!    sweep starts, so the growth during the sweep is the sweep's: flat memory means the
//!    same growth whatever the number of charges.
//! 2. what the mock took to build a page (its own timing, `MockGateway::list_page_times`):
//!    over the first and the last 1 % of the sweep's pages (at least 10), and, once the
//!    sweep is done, for the window's very first and very last page asked for in turn:
//!    a page should cost the same wherever it falls in a long listing.
//! 3. each run's setup (seeding the attempts through intake's batch, settling them,
//!    filling the mock's ledger) and the machine's load average when its sweep started
//!    and ended.
//!
//! Progress, and each run's first row as soon as it is known, go to standard error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::ensure;
use futures::TryStreamExt as _;
use mock_gateway::{Charge, ChargeStatus, MockGateway};
use onecharge::config::Settings;
use onecharge::domain::listing::ListWindow;
use onecharge::gateway::list::{ListOutcome, MAX_PAGE};
use onecharge::gateway::{GatewayClient, GatewayHealth};
use onecharge::reconciler::Reconciler;
use onecharge::store::Store;
use secrecy::SecretString;
use sqlx::Row as _;

#[path = "support/bench_gateway.rs"]
mod bench_gateway;
#[path = "support/fleet.rs"]
#[allow(dead_code)]
mod fleet;
#[path = "support/mod.rs"]
#[allow(dead_code)]
mod support;
#[path = "../tests/it/support/throwaway.rs"]
mod throwaway;

use throwaway::ThrowawayDatabase;

#[derive(Debug, clap::Parser)]
struct Args {
    /// Gateway charges (and matching succeeded attempts) per run
    #[arg(long, value_delimiter = ',', default_values_t = vec![20_000usize, 200_000])]
    charges: Vec<usize>,
    /// PostgreSQL server (without database)
    #[arg(long, default_value = "postgres://127.0.0.1:5432")]
    server: String,
}

/// The process's resident set, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

/// Pages of each end of the window the mock is asked for once the sweep is done.
const PROBES: usize = 200;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let mut runs = Vec::with_capacity(args.charges.len());
    for &charges in &args.charges {
        runs.push(run(&args, charges).await?);
    }
    println!(
        "reconciliation sweep, §3 mock gateway in process, pages of 100, {} CPU(s)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("| gateway charges | pages | records | seconds (reading pages) | records/s | RSS at start | peak RSS during the sweep | growth |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for run in &runs {
        println!("{}", run.sweep);
    }
    println!();
    println!("the mock's own time to build a page, median (slowest)");
    println!("| gateway charges | the sweep's first 1 % of pages | its last 1 % | the first page alone, {PROBES}× | the last page alone, {PROBES}× |");
    println!("|---:|---:|---:|---:|---:|");
    for run in &runs {
        println!("{}", run.pages);
    }
    println!();
    println!("| gateway charges | seeding the attempts | settling them | filling the mock's ledger | load average (1 min) at the sweep's start / end |");
    println!("|---:|---:|---:|---:|---:|");
    for run in &runs {
        println!("{}", run.setup);
    }
    Ok(())
}

/// One run's row of each table.
struct Run {
    sweep: String,
    pages: String,
    setup: String,
}

async fn run(args: &Args, charges: usize) -> anyhow::Result<Run> {
    ensure!(
        charges > MAX_PAGE,
        "a run needs more charges than one page holds"
    );
    let gateway = bench_gateway::start(0, None, 0).await?;
    let database = ThrowawayDatabase::named(&args.server, "onecharge_bench");
    let settings = Settings {
        database_url: database.url(),
        gateway_url: gateway.base_url(),
        gateway_api_key: Some(SecretString::from(bench_gateway::API_KEY)),
        ..Settings::default()
    };
    settings.validate()?;
    drop(Store::setup(&settings.database_url).await?);
    let store = Store::connect(&settings.database_url, 4).await?;
    let step = Instant::now();
    fleet::seed(&store, charges).await?;
    let seeded = step.elapsed().as_secs_f64();
    eprintln!("{charges} charges: attempts seeded in {seeded:.1} s");
    let step = Instant::now();
    settle_all(&store).await?;
    let settled = step.elapsed().as_secs_f64();
    eprintln!("{charges} charges: attempts settled in {settled:.1} s");
    let step = Instant::now();
    let now = time::OffsetDateTime::now_utc();
    gateway.record_charges(ledger_of(&store, charges, now).await?);
    let filled = step.elapsed().as_secs_f64();
    eprintln!("{charges} charges: the mock's ledger filled in {filled:.1} s; sweeping");

    let reconciler = Reconciler::new(
        store.clone(),
        GatewayClient::from_settings(&settings)?,
        GatewayHealth::from_settings(&settings.executor),
        &settings,
    );
    let window = ListWindow {
        from: now - Duration::from_secs(3600),
        to: now + Duration::from_secs(3600),
    };
    let load_at_start = load_average();
    let peak = PeakRss::start();
    let started = Instant::now();
    let report = reconciler.sweep(window).await?;
    let seconds = started.elapsed().as_secs_f64();
    let (start_rss, peak) = peak.stop();
    let load_at_end = load_average();
    ensure!(
        report.records_kept == charges as u64,
        "read {} of {charges}",
        report.records_kept
    );
    ensure!(
        report.new_findings.is_empty(),
        "every charge matches its attempt: {:?}",
        report.new_findings.first()
    );
    let times = gateway.list_page_times();
    ensure!(
        times.pages == u64::from(report.pages),
        "the mock built {} pages, the sweep read {}",
        times.pages,
        report.pages
    );
    // The first and the last 1 % of the sweep's pages, at least 10 (all of them when fewer).
    let ends = (report.pages as usize / 100).clamp(10, mock_gateway::PAGE_TIMES_KEPT);
    let sweep_first = PageTime::of(&times.first[..ends.min(times.first.len())]);
    let sweep_last = PageTime::of(&times.last[times.last.len().saturating_sub(ends)..]);
    let sweep = format!(
        "| {} | {} | {} | {seconds:.1} ({:.1}) | {} | {} MiB | {} MiB | {} MiB |",
        support::thousands(charges as f64),
        support::thousands(f64::from(report.pages)),
        support::thousands(report.records_kept as f64),
        report.read_seconds,
        support::thousands(report.records_kept as f64 / seconds),
        start_rss / 1024,
        peak / 1024,
        (peak.saturating_sub(start_rss)) / 1024,
    );
    eprintln!("{sweep}");
    let (first, last) = probe_ends(&gateway, &settings, &store, window).await?;
    gateway.shutdown().await;
    Ok(Run {
        sweep,
        pages: format!(
            "| {} | {sweep_first} | {sweep_last} | {first} | {last} |",
            support::thousands(charges as f64),
        ),
        setup: format!(
            "| {} | {seeded:.1} s | {settled:.1} s | {filled:.1} s | {load_at_start} / {load_at_end} |",
            support::thousands(charges as f64),
        ),
    })
}

/// The mock's time to build the window's very first page and its very last, each asked for
/// [`PROBES`] times, in turn, by the sweep's client once the sweep is done: the same pages
/// on a mock nothing else is asking, so where a page falls is the only difference.
async fn probe_ends(
    gateway: &MockGateway,
    settings: &Settings,
    store: &Store,
    window: ListWindow,
) -> anyhow::Result<(PageTime, PageTime)> {
    // Every charge was created at the same instant, so the list's order is the ids' (bytes,
    // as the mock compares them): the last page is the one after the 101st largest.
    let cursor: String = sqlx::query_scalar(
        "SELECT gateway_charge_id FROM payment_attempts
         ORDER BY gateway_charge_id COLLATE \"C\" DESC OFFSET 100 LIMIT 1",
    )
    .fetch_one(store.pool())
    .await?;
    let client = GatewayClient::from_settings(settings)?;
    let built = gateway.list_page_times().pages;
    for _ in 0..PROBES {
        for (cursor, last) in [(None, false), (Some(cursor.as_str()), true)] {
            let call = client.list_page(window, cursor, MAX_PAGE).await;
            let ListOutcome::Page(page) = call.outcome else {
                anyhow::bail!("a probe of the list answered {:?}", call.outcome);
            };
            ensure!(
                page.records.len() == MAX_PAGE && page.next.is_none() == last,
                "the probe did not get the page it asked for"
            );
        }
    }
    let times = gateway.list_page_times();
    ensure!(
        times.pages == built + 2 * PROBES as u64,
        "the mock built other pages meanwhile"
    );
    let probes = &times.last[times.last.len() - 2 * PROBES..];
    let at =
        |end: usize| -> Vec<Duration> { probes.iter().skip(end).step_by(2).copied().collect() };
    Ok((PageTime::of(&at(0)), PageTime::of(&at(1))))
}

/// The median and the slowest of some pages' build times in the mock.
struct PageTime {
    median: Duration,
    slowest: Duration,
}

impl PageTime {
    fn of(times: &[Duration]) -> PageTime {
        let mut sorted = times.to_vec();
        sorted.sort_unstable();
        PageTime {
            median: sorted.get(sorted.len() / 2).copied().unwrap_or_default(),
            slowest: sorted.last().copied().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for PageTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let micros = |time: Duration| time.as_secs_f64() * 1e6;
        write!(
            f,
            "{:.0} µs ({:.0} µs)",
            micros(self.median),
            micros(self.slowest)
        )
    }
}

/// The machine's one-minute load average, as `uptime` prints it.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|loads| loads.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// Marks every seeded attempt succeeded ten minutes ago (on the database's clock), with a
/// charge id: 50,000 attempts a statement, in attempt id order, so that no statement nears
/// the pool's `statement_timeout` (one statement over a million attempts passed it).
async fn settle_all(store: &Store) -> anyhow::Result<()> {
    let mut after = uuid::Uuid::nil();
    loop {
        let last: Option<uuid::Uuid> = sqlx::query_scalar(
            "WITH batch AS (
                 SELECT payment_attempt_id FROM payment_attempts
                 WHERE payment_attempt_id > $1 ORDER BY payment_attempt_id LIMIT 50000
             ),
             settled AS (
                 UPDATE payment_attempts a SET status = 'succeeded', tries = 1,
                     gateway_charge_id = 'ch_' || replace(a.payment_attempt_id::text, '-', ''),
                     first_dispatched_at = now() - interval '10 minutes',
                     dispatched_at = now() - interval '10 minutes',
                     updated_at = now() - interval '10 minutes'
                 FROM batch WHERE a.payment_attempt_id = batch.payment_attempt_id
                 RETURNING a.payment_attempt_id
             )
             SELECT payment_attempt_id FROM settled ORDER BY payment_attempt_id DESC LIMIT 1",
        )
        .bind(after)
        .fetch_optional(store.pool())
        .await?;
        match last {
            Some(last) => after = last,
            None => return Ok(()),
        }
    }
}

/// The gateway's ledger of the settled attempts' charges, each created ten minutes before
/// `now`: the sweep finds each matching its attempt.
async fn ledger_of(
    store: &Store,
    charges: usize,
    now: time::OffsetDateTime,
) -> anyhow::Result<Vec<Charge>> {
    let mut rows = sqlx::query(
        "SELECT payment_attempt_id, gateway_charge_id, idempotency_key FROM payment_attempts",
    )
    .fetch(store.pool());
    let mut ledger = Vec::with_capacity(charges);
    while let Some(row) = rows.try_next().await? {
        let id: uuid::Uuid = row.try_get("payment_attempt_id")?;
        ledger.push(Charge {
            id: row.try_get("gateway_charge_id")?,
            status: ChargeStatus::Succeeded,
            amount_minor: 1000,
            currency: "EUR".into(),
            customer_id: "cus_bench".into(),
            payment_method: "pm_card_visa".into(),
            reference: id.to_string(),
            idempotency_key: row.try_get("idempotency_key")?,
            decline_code: None,
            created_at: now - Duration::from_secs(600),
            metadata: Default::default(),
        });
    }
    Ok(ledger)
}

/// This process's RSS sampled every 20 ms from its start until it stops.
struct PeakRss {
    start_kib: u64,
    peak: Arc<AtomicU64>,
    sampling: tokio::task::JoinHandle<()>,
}

impl PeakRss {
    fn start() -> Self {
        let start_kib = rss_kib();
        let peak = Arc::new(AtomicU64::new(start_kib));
        let sampling = {
            let peak = peak.clone();
            tokio::spawn(async move {
                loop {
                    peak.fetch_max(rss_kib(), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        Self {
            start_kib,
            peak,
            sampling,
        }
    }

    /// (RSS at the start, peak RSS), in KiB.
    fn stop(self) -> (u64, u64) {
        self.sampling.abort();
        (
            self.start_kib,
            self.peak.load(Ordering::Relaxed).max(rss_kib()),
        )
    }
}
