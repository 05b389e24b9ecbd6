//! Operator search at 10 million attempts: fills a scratch database with `--rows`
//! `payment_attempts` (default 10,000,000) in a few `INSERT … SELECT generate_series`
//! statements, then asks the admin HTTP (the real router, `onecharge::http::router`) every
//! search the API (`/api/attempts…`) and the console (`/console/…`, open: nothing
//! configured to sign in with) answer, and prints for each the plan PostgreSQL ran and
//! the latency over HTTP. Needs PostgreSQL at 127.0.0.1:5432 (trust auth, a superuser: the
//! plans are read with `auto_explain`) and NATS at 127.0.0.1:4222 (for `/api/stats`). The
//! scratch database is dropped at the end unless `--keep-database`. Before the searches it
//! times the overview's counts per status both ways, the old scan and the kept counts
//! (decision 91), side by side.
//!
//! ```text
//! cargo run --release --example bench_search -- [--rows 10000000] [--requests 200] [--keep-database]
//! ```
//!
//! The plans are those of the statements the handlers really send: for one request per
//! search the database runs with `auto_explain` (`log_analyze`, `log_buffers`,
//! `client_min_messages = log`), so each plan, with its query text, arrives at the client as
//! a notice and is printed as it came. Then `auto_explain` is switched off and each search
//! is timed over `--requests` sequential requests (or as many as fit in 30 s), each with a
//! value of its own (an order, customer or charge drawn from the table), after 10
//! unmeasured ones.
//!
//! The rows: created over the past 365 days in time order (heap order follows
//! `created_at`, as intake writes it); random attempt ids (`md5`, like v4 ids scattered over
//! the primary key); 8 million orders (one in five has a second attempt); 500,000 customers
//! plus one big customer with 1 % of all attempts; 90 % succeeded (with a gateway charge
//! id), 8 % declined, 2 % expired; the newest 2,000 attempts and one in 50,000 older ones
//! not final (pending, unknown, needs_review). `gateway_calls` stays empty: the list's
//! `LEFT JOIN LATERAL` on it is one index probe per row returned.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _};
use clap::Parser as _;
use onecharge::broker::Broker;
use onecharge::config::{DatabaseSettings, Settings};
use onecharge::domain::RetryWindow;
use onecharge::http::AdminState;
use onecharge::store::Store;
use sqlx::{Connection as _, Executor as _, PgConnection};
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer;

#[path = "support/mod.rs"]
mod support;
#[path = "../tests/it/support/throwaway.rs"]
mod throwaway;

use throwaway::{ThrowawayDatabase, ThrowawayNamespace};

#[derive(Debug, clap::Parser)]
struct Args {
    /// payment_attempts rows to fill the scratch database with
    #[arg(long, default_value_t = 10_000_000)]
    rows: i64,
    /// Timed requests per search
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Keep the scratch database (and print how to drop it)
    #[arg(long)]
    keep_database: bool,
    /// Measure a database a `--keep-database` run filled, instead of filling one (it is
    /// left as it is); e.g. to measure again after the console's searches changed
    #[arg(long, value_name = "NAME")]
    reuse_database: Option<String>,
}

/// Longest a search is timed for: a search that scans the table stops early (the table
/// says how many requests were measured).
const BUDGET_PER_SEARCH: Duration = Duration::from_secs(30);

/// Rows per `INSERT … SELECT`: progress every million, no statement runs for long.
const CHUNK: i64 = 1_000_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(args.rows >= 100_000, "--rows must be at least 100000");
    onecharge::config::tls::install_crypto_provider();
    let plans = Plans::default();
    tracing_subscriber::registry()
        .with(
            plans.clone().with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("sqlx::postgres::notice", tracing::Level::TRACE),
            ),
        )
        .init();

    // Dropped at the end unless kept; a reused database is never dropped here.
    let scratch = args.reuse_database.is_none().then(|| {
        ThrowawayDatabase::named(&throwaway::server_url(), "onecharge_bench_search")
            .kept(args.keep_database)
    });
    let database_name = match (&scratch, &args.reuse_database) {
        (Some(scratch), _) => scratch.name().to_owned(),
        (None, reused) => reused.clone().expect("reused when not a scratch database"),
    };
    let url = format!("{}/{database_name}", throwaway::server_url());
    let mut conn = prepare_database(&args, &url).await?;
    let rows = describe_database(&mut conn, &database_name).await?;

    compare_counts(&url, &mut conn).await?;

    let searches = searches(&mut conn, args.requests + 10).await?;
    let namespace = format!(
        "bench-search-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let settings = Settings {
        database_url: url.clone(),
        nats_url: throwaway::nats_url(),
        namespace,
        ..Settings::default()
    };
    let broker = Broker::connect(&settings).await?;
    // Its streams are deleted at the end, also when a search fails.
    let _namespace = ThrowawayNamespace::new(&settings.nats_url, &broker.names);
    broker.ensure_streams().await?;

    print_plans(
        &mut conn,
        &database_name,
        &settings,
        &broker,
        &plans,
        &searches,
    )
    .await?;
    let admin = Admin::start(&settings, &broker).await?;
    println!(
        "\n## Latency over HTTP ({} sequential requests each, after 10 unmeasured; {} attempts)\n",
        args.requests,
        support::thousands(rows as f64)
    );
    println!("| search | requests | rows returned (median) | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    for search in &searches {
        time_search(&admin, search, args.requests).await?;
    }
    admin.stop().await;
    Ok(())
}

/// Migrates the database at `url` (a reused one too: indexes added since it was filled
/// are built now) and fills it unless it is reused; returns the connection that did.
async fn prepare_database(args: &Args, url: &str) -> anyhow::Result<PgConnection> {
    drop(Store::setup_with(url, &DatabaseSettings::default()).await?);
    let mut conn = PgConnection::connect(url).await?;
    if args.reuse_database.is_none() {
        let started = Instant::now();
        fill(&mut conn, args.rows).await?;
        println!(
            "filled {} attempts in {:.0?}",
            support::thousands(args.rows as f64),
            started.elapsed(),
        );
    }
    Ok(conn)
}

/// Analyses the table and prints its rows and size; returns the rows.
async fn describe_database(conn: &mut PgConnection, database_name: &str) -> anyhow::Result<i64> {
    conn.execute("ANALYZE payment_attempts").await?;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM payment_attempts")
        .fetch_one(&mut *conn)
        .await?;
    println!(
        "database {database_name}: {} attempts; table + indexes {}",
        support::thousands(rows as f64),
        table_size(conn).await?
    );
    Ok(rows)
}

/// One request per search with auto_explain on: prints the plans the handlers'
/// statements get, then switches auto_explain off again.
async fn print_plans(
    conn: &mut PgConnection,
    database_name: &str,
    settings: &Settings,
    broker: &Broker,
    plans: &Plans,
    searches: &[Search],
) -> anyhow::Result<()> {
    conn.execute(
        format!(
            "ALTER DATABASE {database_name} SET session_preload_libraries = 'auto_explain';
             ALTER DATABASE {database_name} SET auto_explain.log_min_duration = 0;
             ALTER DATABASE {database_name} SET auto_explain.log_analyze = on;
             ALTER DATABASE {database_name} SET auto_explain.log_buffers = on;
             ALTER DATABASE {database_name} SET auto_explain.log_timing = on;
             ALTER DATABASE {database_name} SET client_min_messages = log;"
        )
        .as_str(),
    )
    .await?;
    let admin = Admin::start(settings, broker).await?;
    println!("\n## Plans (auto_explain, one request each)");
    for search in searches {
        plans.take();
        let (status, _) = admin.get(&search.paths[0]).await?;
        ensure!(status.is_success(), "{} answered {status}", search.paths[0]);
        println!("\n### {} — GET {}\n", search.name, search.paths[0]);
        for plan in plans.take() {
            if ["payment_attempts", "outbox", "attempt_status_count"]
                .iter()
                .any(|table| plan.contains(table))
            {
                println!("{}\n", plan.trim_end());
            }
        }
    }
    admin.stop().await;
    conn.execute(format!("ALTER DATABASE {database_name} RESET ALL").as_str())
        .await?;
    Ok(())
}

/// Times `search` over `requests` sequential requests after 10 unmeasured ones (fewer
/// when [`BUDGET_PER_SEARCH`] runs out) and prints its row.
async fn time_search(admin: &Admin, search: &Search, requests: usize) -> anyhow::Result<()> {
    let mut latencies = Vec::with_capacity(requests);
    let mut returned = Vec::with_capacity(requests);
    let budget = Instant::now() + BUDGET_PER_SEARCH;
    for (i, path) in search.paths.iter().cycle().take(requests + 10).enumerate() {
        if i > 10 && Instant::now() > budget {
            break;
        }
        let begun = Instant::now();
        let (status, rows) = admin.get(path).await?;
        let took = begun.elapsed();
        ensure!(status.is_success(), "{path} answered {status}");
        if i >= 10 {
            latencies.push(took);
            returned.push(rows);
        }
    }
    latencies.sort_unstable();
    returned.sort_unstable();
    println!(
        "| {} | {} | {} | {:.1} | {:.1} | {:.1} |",
        search.name,
        latencies.len(),
        returned[returned.len() / 2],
        ms(percentile(&latencies, 0.50)),
        ms(percentile(&latencies, 0.99)),
        ms(*latencies.last().expect("requests > 0")),
    );
    Ok(())
}

/// Drops the secondary indexes of `payment_attempts` and `attempt_search` (which its trigger
/// fills with every insert, decision 214), inserts `rows` in chunks, builds the indexes
/// again (each from its own definition, so indexes added by later migrations are measured
/// too) and analyses both tables.
async fn fill(conn: &mut PgConnection, rows: i64) -> anyhow::Result<()> {
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
         FROM pg_index i
         WHERE i.indrelid IN ('payment_attempts'::regclass, 'attempt_search'::regclass)
           AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)",
    )
    .fetch_all(&mut *conn)
    .await?;
    for (name, _) in &indexes {
        conn.execute(format!("DROP INDEX {name}").as_str()).await?;
    }
    conn.execute("SET synchronous_commit = off; SET maintenance_work_mem = '512MB'")
        .await?;
    let mut from = 1;
    while from <= rows {
        let to = (from + CHUNK - 1).min(rows);
        let begun = Instant::now();
        sqlx::query(FILL)
            .bind(from)
            .bind(to)
            .bind(rows)
            .execute(&mut *conn)
            .await
            .context("filling payment_attempts")?;
        println!("  rows {from}..{to} in {:.1?}", begun.elapsed());
        from = to + 1;
    }
    for (name, definition) in &indexes {
        let begun = Instant::now();
        conn.execute(definition.as_str()).await?;
        println!("  index {name} in {:.1?}", begun.elapsed());
    }
    let begun = Instant::now();
    conn.execute("VACUUM ANALYZE payment_attempts").await?;
    conn.execute("VACUUM ANALYZE attempt_search").await?;
    println!("  VACUUM ANALYZE in {:.1?}", begun.elapsed());
    Ok(())
}

/// Times for the overview's counts per status, run alternately in this process
/// (decision 91): the old scan (`count(*) … GROUP BY status`), `count_by_status` as the
/// handlers call it (fold, then read the kept counts), and the read alone with
/// `DELTAS_WAITING` deltas not folded yet (cancelling pairs, so the figures stay exact).
/// Checks that all three give the same figures; prints the medians and the ratios.
async fn compare_counts(url: &str, conn: &mut PgConnection) -> anyhow::Result<()> {
    const RUNS: usize = 5;
    const DELTAS_WAITING: i64 = 10_000;
    const SCAN: &str =
        "SELECT status, count(*) FROM payment_attempts GROUP BY status ORDER BY status";
    let store = Store::connect(url, 2).await?;
    let (mut scan, mut kept, mut waiting) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let begun = Instant::now();
        let scanned: Vec<(String, i64)> = sqlx::query_as(SCAN).fetch_all(&mut *conn).await?;
        scan.push(begun.elapsed());

        let begun = Instant::now();
        let counted = onecharge::store::reads::attempts::count_by_status(&store).await?;
        kept.push(begun.elapsed());
        ensure!(counted == scanned, "kept {counted:?} ≠ scanned {scanned:?}");

        sqlx::query(
            "INSERT INTO attempt_status_count_deltas (status, n)
             SELECT 'pending', CASE WHEN i % 2 = 0 THEN 1 ELSE -1 END
             FROM generate_series(1, $1) AS i",
        )
        .bind(DELTAS_WAITING)
        .execute(&mut *conn)
        .await?;
        let begun = Instant::now();
        let read = onecharge::store::attempts::counts::read(&store).await?;
        waiting.push(begun.elapsed());
        ensure!(read == scanned, "read {read:?} ≠ scanned {scanned:?}");
        onecharge::store::attempts::counts::fold(&store).await?;
    }
    store.pool().close().await;
    for times in [&mut scan, &mut kept, &mut waiting] {
        times.sort_unstable();
    }
    let (scan, kept, waiting) = (
        percentile(&scan, 0.5),
        percentile(&kept, 0.5),
        percentile(&waiting, 0.5),
    );
    println!("\n## Counts per status (median of {RUNS}, alternating)\n");
    println!("| statement | ms | the scan's time ÷ this |");
    println!("|---|---:|---:|");
    for (name, took) in [
        ("scan: count(*) … GROUP BY status", scan),
        ("count_by_status: fold, then read the kept counts", kept),
        (
            "read the kept counts with 10,000 deltas not folded",
            waiting,
        ),
    ] {
        println!(
            "| {name} | {:.2} | {:.0}× |",
            ms(took),
            scan.as_secs_f64() / took.as_secs_f64()
        );
    }
    Ok(())
}

/// Rows `$1..=$2` of `$3`. `h` is a stable pseudo-random number per row.
const FILL: &str = "
INSERT INTO payment_attempts (
    payment_attempt_id, order_id, customer_id, amount_minor, currency, payment_method,
    description, requested_at, fingerprint, idempotency_key, status, tries, next_run_at,
    first_dispatched_at, dispatched_at, gateway_charge_id, decline_code, review_reason,
    last_error, first_message_id, correlation_id, created_at, updated_at)
SELECT id, 'ord_' || (i * 4 / 5), customer, 100 + h % 50000, 'EUR', 'pm_card_visa',
       'Order ' || (i * 4 / 5), at, decode(repeat('00', 32), 'hex'),
       'onecharge-' || id, status, CASE WHEN status = 'pending' THEN 0 ELSE 1 END, at,
       CASE WHEN status <> 'pending' THEN at + interval '1 second' END,
       CASE WHEN status <> 'pending' THEN at + interval '1 second' END,
       CASE WHEN status = 'succeeded' THEN 'ch_' || substr(md5('c' || i), 1, 24) END,
       CASE WHEN status = 'declined' THEN 'card_declined' END,
       CASE WHEN status = 'needs_review' THEN 'the gateway does not know this key after its retention window' END,
       CASE WHEN status IN ('unknown', 'needs_review') THEN 'gateway timeout after 10s' END,
       'msg-' || i, 'corr-' || i, at, at + interval '2 seconds'
FROM (
    SELECT i, h, md5('a' || i)::uuid AS id,
           now() - interval '365 days' * (1 - i::float8 / $3) AS at,
           CASE WHEN h % 100 = 0 THEN 'cus_big' ELSE 'cus_' || (h / 100) % 500000 END AS customer,
           CASE
               WHEN i > $3 - 2000 OR i % 50000 = 7 THEN
                   (ARRAY['pending', 'unknown', 'needs_review'])[1 + h % 3]
               WHEN h % 100 < 90 THEN 'succeeded'
               WHEN h % 100 < 98 THEN 'declined'
               ELSE 'expired'
           END AS status
    FROM (SELECT i, abs(hashint8(i)) AS h FROM generate_series($1::bigint, $2::bigint) AS i) s
) r";

async fn table_size(conn: &mut PgConnection) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar(
        "SELECT pg_size_pretty(pg_table_size('payment_attempts')) || ' + '
             || pg_size_pretty(pg_indexes_size('payment_attempts'))",
    )
    .fetch_one(conn)
    .await?)
}

/// One search of the API or console, with a path per request.
struct Search {
    name: &'static str,
    paths: Vec<String>,
}

/// The searches an operator runs, in the order the tables list them: a name and a path in
/// which `{attempt}`, `{key}`, `{order}`, `{customer}` and `{charge}` stand for a sampled
/// attempt's values (a path without any is asked as it is, every time).
const SEARCHES: [(&str, &str); 20] = [
    ("attempt by id", "/api/attempts/{attempt}"),
    ("order_id", "/api/attempts?order_id={order}"),
    (
        "customer_id (≈20 attempts)",
        "/api/attempts?customer_id={customer}",
    ),
    (
        "customer_id with 100,000 attempts, newest 100",
        "/api/attempts?customer_id=cus_big",
    ),
    (
        "gateway_charge_id",
        "/api/attempts?gateway_charge_id={charge}",
    ),
    (
        "status=needs_review, newest 100",
        "/api/attempts?status=needs_review",
    ),
    (
        "status=succeeded, newest 100",
        "/api/attempts?status=succeeded",
    ),
    ("every attempt, newest 100", "/api/attempts"),
    (
        "stuck=15m, oldest 1000 (the largest page)",
        "/api/attempts?stuck=15m&limit=1000",
    ),
    (
        "stuck=15m, oldest 100 (a page)",
        "/api/attempts?stuck=15m&limit=100",
    ),
    ("stats (overview figures)", "/api/stats"),
    ("console: attempt page", "/console/attempts/{attempt}"),
    (
        "console: idempotency key (redirects to the attempt page)",
        "/console/attempts?idempotency_key={key}",
    ),
    ("console: order_id", "/console/attempts?order_id={order}"),
    (
        "console: customer_id (≈20 attempts)",
        "/console/attempts?customer_id={customer}",
    ),
    (
        "console: gateway_charge_id",
        "/console/attempts?gateway_charge_id={charge}",
    ),
    (
        "console: status=needs_review, newest 50",
        "/console/attempts?status=needs_review",
    ),
    (
        "console: search page without a filter (newest 50)",
        "/console/attempts",
    ),
    ("console: review queue", "/console/review"),
    ("console: overview", "/console/"),
];

/// One succeeded attempt drawn from the table: the values a search asks for.
#[derive(sqlx::FromRow)]
struct Sampled {
    payment_attempt_id: String,
    idempotency_key: String,
    order_id: String,
    customer_id: String,
    gateway_charge_id: String,
}

impl Sampled {
    /// `path` with this attempt's values in place of the placeholders of [`SEARCHES`].
    fn fill(&self, path: &str) -> String {
        path.replace("{attempt}", &self.payment_attempt_id)
            .replace("{key}", &self.idempotency_key)
            .replace("{order}", &self.order_id)
            .replace("{customer}", &self.customer_id)
            .replace("{charge}", &self.gateway_charge_id)
    }
}

/// [`SEARCHES`], each with `n` values drawn from the table.
async fn searches(conn: &mut PgConnection, n: usize) -> anyhow::Result<Vec<Search>> {
    let sample: Vec<Sampled> = sqlx::query_as(
        "SELECT payment_attempt_id::text, idempotency_key, order_id, customer_id, gateway_charge_id
         FROM payment_attempts TABLESAMPLE SYSTEM (1)
         WHERE customer_id <> 'cus_big' AND status = 'succeeded'
         ORDER BY random() LIMIT $1",
    )
    .bind(n as i64)
    .fetch_all(&mut *conn)
    .await?;
    ensure!(sample.len() == n, "the sample has {} rows", sample.len());
    Ok(SEARCHES
        .into_iter()
        .map(|(name, path)| Search {
            name,
            paths: if path.contains('{') {
                sample.iter().map(|s| s.fill(path)).collect()
            } else {
                vec![path.to_owned()]
            },
        })
        .collect())
}

/// The admin router on a port of its own, over a fresh pool (so that database settings
/// changed since apply), and a client for it.
struct Admin {
    base: String,
    client: reqwest::Client,
    shutdown: CancellationToken,
    served: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Admin {
    async fn start(settings: &Settings, broker: &Broker) -> anyhow::Result<Self> {
        let store = Store::connect_with(&settings.database_url, 4, &settings.database).await?;
        let state = AdminState {
            store,
            broker: broker.clone(),
            metrics: onecharge::metrics::install(),
            admin_token: None,
            gateway_health: None,
            retry_window: RetryWindow::from_settings(settings),
            console: onecharge::http::Console::from_settings(settings),
            reconciler: None,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let shutdown = CancellationToken::new();
        let served = tokio::spawn(onecharge::http::serve(listener, state, shutdown.clone()));
        Ok(Self {
            base,
            client: reqwest::Client::new(),
            shutdown,
            served,
        })
    }

    /// The status and the rows answered: a JSON array's length, a console page's rows (its
    /// first `data-page-count`, or its first `data-count` where the page shows everything it
    /// counts), 1 for anything else.
    async fn get(&self, path: &str) -> anyhow::Result<(reqwest::StatusCode, usize)> {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await?;
        let status = response.status();
        let body = response.bytes().await?;
        let rows = match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(serde_json::Value::Array(items)) => items.len(),
            _ => {
                let page = String::from_utf8_lossy(&body);
                attribute_number(&page, "data-page-count")
                    .or_else(|| attribute_number(&page, "data-count"))
                    .unwrap_or(1)
            }
        };
        Ok((status, rows))
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.served.await;
    }
}

/// Collects the `auto_explain` notices that sqlx reports as tracing events.
#[derive(Clone, Default)]
struct Plans(Arc<Mutex<Vec<String>>>);

impl Plans {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().expect("not poisoned"))
    }
}

impl<S: tracing::Subscriber> Layer<S> for Plans {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        struct Message(String);
        impl Visit for Message {
            fn record_str(&mut self, field: &Field, value: &str) {
                if field.name() == "message" {
                    self.0 = value.to_owned();
                }
            }
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" && self.0.is_empty() {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        if message.0.contains("plan:") {
            self.0.lock().expect("not poisoned").push(message.0);
        }
    }
}

/// `N` of the first `name="N"` on a console page: the review queue counts the whole queue in
/// `data-count` and its page's rows in `data-page-count`.
fn attribute_number(page: &str, name: &str) -> Option<usize> {
    let opening = format!("{name}=\"");
    let start = page.find(&opening)? + opening.len();
    let end = start + page[start..].find('"')?;
    page[start..end].parse().ok()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
