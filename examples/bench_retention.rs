//! What dropping a history month costs the writers (issue 23, decision 101): intake writers
//! record fresh attempts without pause (an attempt, then its first transition, the order of
//! every writer) while the retention job's drop (`store::retention::drop_partition`) drops a
//! month a year old of `attempt_transitions`, `gateway_calls` and `outbox`. Prints each
//! writer batch's latency before and during the drop (p50, p99, worst), the drop's own time
//! (and, per month, how long its locking transaction ran × the tries it took) and what it
//! dropped. `--before` measures the drop as it was before instead. Needs PostgreSQL at
//! 127.0.0.1:5432 (trust auth); NATS is not used; the database is dropped.
//!
//! ```text
//! cargo run --release --example bench_retention -- [--attempts 20000] [--rows 200000]
//!     [--not-final 0.01] [--writers 4] [--rounds 3] [--before]
//! ```
//!
//! The old month holds `--rows` transitions, `--rows / 2` gateway calls and `--rows / 10`
//! published events over `--attempts` attempts, `--not-final` of them (one in a hundred)
//! not final (their rows are kept). A writer batch is `store::intake::record_batch` of 10 fresh commands.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::ensure;
use clap::Parser as _;
use onecharge::purge::retention::months_ahead;
use onecharge::store::retention::{create_partition, drop_partition, partitions, HistoryTable};
use onecharge::store::Store;
use time::OffsetDateTime;

#[path = "support/fleet.rs"]
#[allow(dead_code)]
mod fleet;
#[path = "support/mod.rs"]
mod support;
#[path = "../tests/it/support/throwaway.rs"]
mod throwaway;

use throwaway::ThrowawayDatabase;

#[derive(Debug, clap::Parser)]
struct Args {
    /// Attempts the old month's history belongs to
    #[arg(long, default_value_t = 20_000)]
    attempts: usize,
    /// Transitions in the old month (half as many gateway calls, a tenth as many events)
    #[arg(long, default_value_t = 200_000)]
    rows: usize,
    /// Share of the attempts left not final (their old rows are kept)
    #[arg(long, default_value_t = 0.01)]
    not_final: f64,
    /// Concurrent intake writers
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// Rounds (each a fresh database and one drop)
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Measure the drop as it was before decision 101 instead: the history's foreign keys to
    /// `payment_attempts` put back, and each month detached, its kept rows copied and
    /// dropped in one transaction
    #[arg(long)]
    before: bool,
}

const DAY: Duration = Duration::from_secs(86_400);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(args.attempts > 0 && args.writers > 0, "nothing to measure");
    println!(
        "{}{} attempts; old month: {} transitions, {} gateway calls, {} events; {} writers of 10-command intake batches",
        if args.before { "BEFORE decision 101 (foreign keys, one long transaction): " } else { "" },
        support::thousands(args.attempts as f64),
        support::thousands(args.rows as f64),
        support::thousands((args.rows / 2) as f64),
        support::thousands((args.rows / 10) as f64),
        args.writers
    );
    println!("\n| round | drop took | rows dropped | kept | batches before | p50 / p99 / worst before | batches during | p50 / p99 / worst during | writer errors |");
    println!("|---:|---:|---:|---:|---:|---|---:|---|---:|");
    for round in 1..=args.rounds {
        round_once(&args, round).await?;
    }
    Ok(())
}

async fn round_once(args: &Args, round: usize) -> anyhow::Result<()> {
    let database = ThrowawayDatabase::named(&throwaway::server_url(), "onecharge_bench_retention");
    let store = Store::setup(&database.url()).await?;
    let now: OffsetDateTime = sqlx::query_scalar("SELECT now()")
        .fetch_one(store.pool())
        .await?;
    fill_old_month(&store, args, now).await?;
    if args.before {
        put_foreign_keys_back(&store).await?;
    }

    let writers_store = Store::connect(&database.url(), args.writers as u32 + 2).await?;
    let writers = Writers::start(&writers_store, args.writers);
    // Two seconds of writes alone, then the drop, then a second more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    writers.during.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let report = if args.before {
        drop_as_before(&store, now - 30 * DAY).await
    } else {
        drop_old_months(&store, now - 30 * DAY).await
    };
    let took = started.elapsed();
    writers.during.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let WriterTimes {
        mut before,
        during: mut during_drop,
        errors,
    } = writers.stop().await?;
    let (took, dropped, kept) = match report {
        Ok((dropped, kept, locked)) => (
            format!("{:.0} ms ({locked})", ms(took)),
            support::thousands(dropped as f64),
            support::thousands(kept as f64),
        ),
        Err(err) => (
            format!("failed after {:.0} ms: {err:#}", ms(took)),
            "–".into(),
            "–".into(),
        ),
    };
    println!(
        "| {round} | {took} | {dropped} | {kept} | {} | {} | {} | {} | {errors} |",
        before.len(),
        spread(&mut before),
        during_drop.len(),
        spread(&mut during_drop),
    );
    writers_store.pool().close().await;
    store.pool().close().await;
    Ok(())
}

/// Writers recording 10-command intake batches back to back until stopped, each batch's
/// time counted as before or during the drop.
struct Writers {
    /// Set while the drop runs.
    during: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    tasks: tokio::task::JoinSet<WriterTimes>,
}

/// Intake batch times before the drop and during it, and the batches that failed.
#[derive(Default)]
struct WriterTimes {
    before: Vec<Duration>,
    during: Vec<Duration>,
    errors: usize,
}

impl Writers {
    fn start(store: &Store, count: usize) -> Self {
        let during = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..count {
            let (store, during, stop) = (store.clone(), during.clone(), stop.clone());
            tasks.spawn(write_until_stopped(w, store, during, stop));
        }
        Self {
            during,
            stop,
            tasks,
        }
    }

    /// Stops every writer; returns their times together.
    async fn stop(mut self) -> anyhow::Result<WriterTimes> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = WriterTimes::default();
        while let Some(writer) = self.tasks.join_next().await {
            let writer = writer?;
            all.before.extend(writer.before);
            all.during.extend(writer.during);
            all.errors += writer.errors;
        }
        Ok(all)
    }
}

/// Writer `w`'s loop, until `stop`.
async fn write_until_stopped(
    w: usize,
    store: Store,
    during: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> WriterTimes {
    let mut times = WriterTimes::default();
    let mut batch = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let records = records(w, batch);
        let in_drop = during.load(Ordering::Relaxed);
        let started = Instant::now();
        if onecharge::store::intake::record_batch(
            &store,
            "bench",
            &records,
            onecharge::config::IntakeSettings::default().max_command_age,
        )
        .await
        .is_err()
        {
            times.errors += 1;
        }
        let took = started.elapsed();
        // A batch that overlapped the drop's start counts as during.
        if in_drop || during.load(Ordering::Relaxed) {
            times.during.push(took);
        } else {
            times.before.push(took);
        }
        batch += 1;
    }
    times
}

/// The retention job's own drop of each month past `cutoff` (`store::retention::
/// drop_partition`, what `retain_history` calls). (rows dropped, rows kept, how long each
/// month's lock was held and in how many tries)
async fn drop_old_months(
    store: &Store,
    cutoff: OffsetDateTime,
) -> anyhow::Result<(u64, u64, String)> {
    let (mut rows, mut kept, mut locked) = (0, 0, Vec::new());
    for table in HistoryTable::ALL {
        for old in partitions(store, table).await? {
            if old.to.is_none_or(|to| to > cutoff) {
                continue;
            }
            let dropped = drop_partition(store, table, &old.name, cutoff).await?;
            rows += dropped.count.rows;
            kept += dropped.count.kept;
            locked.push(format!("{:.1} ms × {}", ms(dropped.held), dropped.tries));
        }
    }
    Ok((rows, kept, format!("held {}", locked.join(", "))))
}

/// The history's foreign keys to `payment_attempts`, as they were before decision 101.
async fn put_foreign_keys_back(store: &Store) -> anyhow::Result<()> {
    for table in HistoryTable::ALL {
        let table = table.name();
        sqlx::query(&format!(
            "ALTER TABLE {table} ADD CONSTRAINT {table}_payment_attempt_id_fkey
             FOREIGN KEY (payment_attempt_id) REFERENCES payment_attempts ON DELETE RESTRICT"
        ))
        .execute(store.pool())
        .await?;
    }
    Ok(())
}

/// The drop before decision 101, for `--before`: per table, the old month detached, its
/// kept rows copied back and the month dropped in one transaction. (rows dropped, rows kept)
async fn drop_as_before(
    store: &Store,
    cutoff: OffsetDateTime,
) -> anyhow::Result<(u64, u64, String)> {
    let (mut rows, mut kept) = (0, 0);
    for (table, keep) in [
        (
            "attempt_transitions",
            "a.status <> ALL($2) OR a.updated_at >= $1",
        ),
        ("gateway_calls", "a.status <> ALL($2) OR a.updated_at >= $1"),
        (
            "outbox",
            "t.published_at IS NULL OR a.status <> ALL($2) OR a.updated_at >= $1",
        ),
    ] {
        let old = partitions(
            store,
            match table {
                "attempt_transitions" => HistoryTable::Transitions,
                "gateway_calls" => HistoryTable::GatewayCalls,
                _ => HistoryTable::Outbox,
            },
        )
        .await?
        .into_iter()
        .find(|p| p.to.is_some_and(|to| to <= cutoff))
        .expect("the old month");
        let mut tx = store.pool().begin().await?;
        sqlx::query(&format!(
            "ALTER TABLE {table} DETACH PARTITION {}",
            old.name
        ))
        .execute(&mut *tx)
        .await?;
        kept += sqlx::query(&format!(
            "INSERT INTO {table} SELECT t.* FROM {} t JOIN payment_attempts a USING (payment_attempt_id) WHERE {keep}",
            old.name
        ))
        .bind(cutoff)
        .bind(["succeeded", "declined", "expired"])
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}", old.name))
            .fetch_one(&mut *tx)
            .await?;
        rows += n as u64;
        sqlx::query(&format!("DROP TABLE {}", old.name))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
    }
    Ok((rows, kept, "one transaction".into()))
}

/// A month a year before `now` for each history table, filled; its attempts final and last
/// changed 400 days ago, but `--not-final` of them still `unknown`.
async fn fill_old_month(store: &Store, args: &Args, now: OffsetDateTime) -> anyhow::Result<()> {
    fleet::seed(store, args.attempts).await?;
    sqlx::query(
        "UPDATE payment_attempts SET status = CASE WHEN random() < $1 THEN 'unknown' ELSE 'declined' END,
                updated_at = now() - interval '400 days'",
    )
    .bind(args.not_final)
    .execute(store.pool())
    .await?;
    let (from, to) = months_ahead(now - 365 * DAY, 0)[0];
    for table in HistoryTable::ALL {
        create_partition(store, table, &table.month_partition(from), from, to).await?;
    }
    let spread_in_month = "$1::timestamptz + random() * interval '27 days'";
    let numbered =
        "(SELECT payment_attempt_id, row_number() OVER () - 1 AS n FROM payment_attempts)";
    for (sql, rows) in [
        (
            format!(
                "INSERT INTO attempt_transitions (payment_attempt_id, from_status, to_status, cause, actor, at)
                 SELECT a.payment_attempt_id, 'pending', 'declined', 'bench', 'bench', {spread_in_month}
                 FROM generate_series(1, $2) i JOIN {numbered} a ON a.n = i % $3"
            ),
            args.rows,
        ),
        (
            format!(
                "INSERT INTO gateway_calls (payment_attempt_id, operation, idempotency_key, try_number, started_at, finished_at, outcome)
                 SELECT a.payment_attempt_id, 'charge', 'onecharge-' || a.payment_attempt_id, 1, t, t, 'declined'
                 FROM (SELECT i, {spread_in_month} AS t FROM generate_series(1, $2) i) s
                 JOIN {numbered} a ON a.n = s.i % $3"
            ),
            args.rows / 2,
        ),
        (
            format!(
                "INSERT INTO outbox (event_id, payment_attempt_id, status, subject, headers, payload, created_at, published_at)
                 SELECT gen_random_uuid(), a.payment_attempt_id, 'needs_review', 'bench', '{{}}', '{{}}', t, t
                 FROM (SELECT i, {spread_in_month} AS t FROM generate_series(1, $2) i) s
                 JOIN {numbered} a ON a.n = s.i % $3"
            ),
            args.rows / 10,
        ),
    ] {
        sqlx::query(&sql)
            .bind(from)
            .bind(rows as i64)
            .bind(args.attempts as i64)
            .execute(store.pool())
            .await?;
    }
    sqlx::query("ANALYZE").execute(store.pool()).await?;
    Ok(())
}

/// Ten fresh commands for writer `w`'s batch `batch`.
fn records(w: usize, batch: usize) -> Vec<onecharge::store::intake::IntakeRecord> {
    (0..10)
        .map(|i| {
            fleet::charge_record(
                &format!("w{w}-{batch}-{i}"),
                &format!("ord_{w}_{batch}_{i}"),
                0,
            )
        })
        .collect()
}

/// `p50 / p99 / worst` of `latencies`, in ms.
fn spread(latencies: &mut [Duration]) -> String {
    if latencies.is_empty() {
        return "–".into();
    }
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    format!(
        "{:.1} / {:.1} / {:.1} ms",
        ms(at(0.5)),
        ms(at(0.99)),
        ms(latencies[latencies.len() - 1])
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
