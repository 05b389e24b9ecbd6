//! The database's work per settled charge over one phase of a benchmark: statements
//! (`pg_stat_statements`: calls, rows and time by normalised statement, top level and
//! nested in triggers and functions), transactions and rows (`pg_stat_database`), WAL
//! (`pg_stat_wal`), and CPU time of the cluster's processes, of `onecharge serve` and of
//! the benchmark itself (`/proc/<pid>/stat`).
//!
//! Meant for a cluster that serves the benchmark alone (`own_postgres`): `pg_stat_wal` and
//! the cluster's CPU are the whole cluster's. Statements and CPU are read the moment the
//! phase's last event arrives; the counters PostgreSQL flushes lazily (transactions, rows,
//! WAL: a backend reports at most once a second, an idle one after 10 s) are read after
//! [`STATS_SETTLE`], so they include that quiet tail (its statements are printed).
//!
//! What the phase wrote — rows by table, HOT updates, WAL records by kind and index entries
//! by index — is `write_budget.rs`'s, read from the same snapshots.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use sqlx::PgPool;

use crate::support::thousands;
use crate::write_budget::{self, RowCounts, WalSource, WriteBudget};

/// Long enough for every backend, busy or idle, to have reported its counters.
pub const STATS_SETTLE: Duration = Duration::from_secs(11);

/// Where the statistics are read: the cluster's `postgres` database (with the extension),
/// about the benchmark's database, and which processes' CPU is counted.
pub struct Observer {
    pool: PgPool,
    /// A connection to the benchmark's database itself: its tables' counters and file nodes.
    database_pool: PgPool,
    database: String,
    /// Where the phase's WAL is read back from; `None`: the budget has no WAL records.
    wal: Option<WalSource>,
    postmaster: u32,
    ticks_per_second: f64,
}

/// Statements by (user, query id, top level or nested), as `pg_stat_statements` keeps them.
type StatementKey = (i64, i64, bool);

/// One row of `pg_stat_statements`.
#[derive(sqlx::FromRow)]
struct StatementRow {
    userid: i64,
    queryid: Option<i64>,
    toplevel: bool,
    query: String,
    calls: i64,
    rows: i64,
    millis: f64,
    plan_millis: f64,
}

#[derive(Clone, Default)]
struct Statement {
    query: String,
    toplevel: bool,
    calls: i64,
    rows: i64,
    /// Execution plus planning time, in milliseconds.
    millis: f64,
    /// Of it, planning.
    plan_millis: f64,
}

/// `pg_stat_database` of the benchmark's database and `pg_stat_wal`.
#[derive(Clone, Copy, Default, sqlx::FromRow)]
struct Counters {
    xact_commit: i64,
    xact_rollback: i64,
    tup_inserted: i64,
    tup_updated: i64,
    tup_deleted: i64,
    blks_read: i64,
    blks_hit: i64,
    wal_records: i64,
    wal_bytes: i64,
    wal_sync: i64,
}

/// CPU seconds of the cluster's processes. `exited` is what the postmaster collected from
/// its children that ended (a closed connection, an autovacuum worker).
#[derive(Clone, Default)]
struct ClusterCpu {
    /// Live processes by pid: (serves the benchmark's database, CPU seconds).
    live: HashMap<u32, (bool, f64)>,
    postmaster: f64,
    exited: f64,
}

/// One reading of everything the report compares.
pub struct Snapshot {
    taken: Instant,
    statements: HashMap<StatementKey, Statement>,
    counters: Counters,
    cluster: ClusterCpu,
    serve: f64,
    benchmark: f64,
    /// The WAL insert position.
    wal_position: String,
    /// Row counters by table.
    rows: HashMap<String, RowCounts>,
}

impl Observer {
    /// Connects to `server`'s `postgres` database and creates `pg_stat_statements` there;
    /// `database` is the one whose work is counted.
    pub async fn connect(
        server: &str,
        database: &str,
        postmaster: u32,
        wal: Option<WalSource>,
    ) -> anyhow::Result<Self> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(&format!("{server}/postgres"))
            .await
            .context("connecting to the benchmark's cluster for its statistics")?;
        // Its own statements are not the service's: pg_stat_statements leaves them out.
        let database_pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::query("SET pg_stat_statements.track = 'none'")
                        .execute(conn)
                        .await
                        .map(|_| ())
                })
            })
            .connect(&format!("{server}/{database}"))
            .await
            .context("connecting to the benchmark's database for its tables' counters")?;
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&pool)
            .await
            .context("pg_stat_statements (is it in shared_preload_libraries?)")?;
        Ok(Self {
            pool,
            database_pool,
            database: database.to_owned(),
            wal,
            postmaster,
            ticks_per_second: clock_ticks_per_second()?,
        })
    }

    /// Lets every backend report, then empties `pg_stat_statements`: what came before
    /// (setup, warm-up) is not counted. Returns the snapshot the first phase starts from.
    pub async fn reset(&self, serve_pid: u32) -> anyhow::Result<Snapshot> {
        tokio::time::sleep(STATS_SETTLE).await;
        sqlx::query("SELECT pg_stat_statements_reset()")
            .execute(&self.pool)
            .await?;
        self.snapshot(serve_pid).await
    }

    /// Statements and CPU now; the lazily flushed counters once they settled
    /// ([`STATS_SETTLE`]). Returns the phase's work from `start` and the snapshot the next
    /// phase starts from.
    pub async fn phase_end(
        &self,
        start: &Snapshot,
        charges: usize,
        serve_pid: u32,
    ) -> anyhow::Result<(PhaseWork, Snapshot)> {
        let end = self.snapshot(serve_pid).await?;
        tokio::time::sleep(STATS_SETTLE).await;
        let settled = self.snapshot(serve_pid).await?;
        let wal = match &self.wal {
            Some(source) => {
                let to = write_budget::flushed_wal_position(&self.pool).await?;
                let read = write_budget::read_wal(
                    &source.waldump,
                    &source.wal_dir,
                    &start.wal_position,
                    &to,
                    &self.database_pool,
                )
                .await;
                // A phase that wrote more WAL than the cluster keeps (`wal_keep_size`, a
                // million-command run) has lost its first segments: its rates, CPU and
                // pg_stat_wal's counts are still the phase's, so they are printed without
                // the read-back rather than lost with it.
                match read {
                    Ok(read) => Some(read),
                    Err(err) => {
                        println!(
                            "\nthe phase's WAL was not read back ({err:#}); its records and bytes below are pg_stat_wal's"
                        );
                        None
                    }
                }
            }
            None => None,
        };
        let statements = statement_deltas(&start.statements, &end.statements);
        let toplevel = statements.iter().filter(|s| s.toplevel);
        let counters = settled.counters.minus(&start.counters);
        let budget = WriteBudget {
            charges,
            rows: WriteBudget::rows_between(&start.rows, &settled.rows),
            wal,
            wal_records_counted: counters.wal_records,
            wal_bytes_counted: counters.wal_bytes,
            planning_millis: toplevel.clone().map(|s| s.plan_millis).sum(),
            statement_millis: toplevel.map(|s| s.millis).sum(),
        };
        let work = PhaseWork {
            budget,
            charges,
            wall: end.taken - start.taken,
            statements,
            tail: statement_deltas(&end.statements, &settled.statements),
            counters,
            cpu: CpuDelta::between(start, &end),
        };
        Ok((work, settled))
    }

    async fn snapshot(&self, serve_pid: u32) -> anyhow::Result<Snapshot> {
        let taken = Instant::now();
        let cluster = self.cluster_cpu()?;
        let serve = self.process_cpu(serve_pid)?.0;
        let benchmark = self.process_cpu(std::process::id())?.0;
        Ok(Snapshot {
            taken,
            statements: self.statements().await?,
            counters: self.counters().await?,
            cluster,
            serve,
            benchmark,
            wal_position: write_budget::wal_position(&self.pool).await?,
            rows: write_budget::row_counts(&self.database_pool).await?,
        })
    }

    async fn statements(&self) -> anyhow::Result<HashMap<StatementKey, Statement>> {
        let rows: Vec<StatementRow> = sqlx::query_as(
            "SELECT s.userid::oid::int8 AS userid, s.queryid, s.toplevel, s.query, s.calls,
                    s.rows, s.total_exec_time + s.total_plan_time AS millis,
                    s.total_plan_time AS plan_millis
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
             WHERE d.datname = $1",
        )
        .bind(&self.database)
        .fetch_all(&self.pool)
        .await
        .context("reading pg_stat_statements")?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let key = (row.userid, row.queryid.unwrap_or_default(), row.toplevel);
                let statement = Statement {
                    query: row.query,
                    toplevel: row.toplevel,
                    calls: row.calls,
                    rows: row.rows,
                    millis: row.millis,
                    plan_millis: row.plan_millis,
                };
                (key, statement)
            })
            .collect())
    }

    async fn counters(&self) -> anyhow::Result<Counters> {
        sqlx::query_as(
            "SELECT d.xact_commit, d.xact_rollback, d.tup_inserted, d.tup_updated,
                    d.tup_deleted, d.blks_read, d.blks_hit,
                    w.wal_records, w.wal_bytes::int8 AS wal_bytes, w.wal_sync
             FROM pg_stat_database d, pg_stat_wal w
             WHERE d.datname = $1",
        )
        .bind(&self.database)
        .fetch_one(&self.pool)
        .await
        .context("reading pg_stat_database and pg_stat_wal")
    }

    /// Every child of the postmaster by pid, and the postmaster's own and collected time.
    fn cluster_cpu(&self) -> anyhow::Result<ClusterCpu> {
        let (postmaster, exited, _) = self.process_cpu(self.postmaster)?;
        let mut live = HashMap::new();
        for entry in std::fs::read_dir("/proc")?.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            let Ok((cpu, _, parent)) = self.process_cpu(pid) else {
                continue; // ended while the folder was read
            };
            if parent == self.postmaster {
                live.insert(pid, (self.serves_database(pid), cpu));
            }
        }
        Ok(ClusterCpu {
            live,
            postmaster,
            exited,
        })
    }

    /// A backend connected to the benchmark's database (its process title names the
    /// database; an autovacuum worker's does too, but it is the cluster's housekeeping).
    fn serves_database(&self, pid: u32) -> bool {
        let title = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let title = String::from_utf8_lossy(&title);
        title.contains(&format!(" {} ", self.database)) && !title.contains("autovacuum")
    }

    /// (own CPU seconds, CPU seconds of its collected children, parent pid) of `pid`.
    fn process_cpu(&self, pid: u32) -> anyhow::Result<(f64, f64, u32)> {
        let path = format!("/proc/{pid}/stat");
        let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        // The fields after the command name, which is in parentheses and may hold spaces:
        // state, ppid, …; utime, stime, cutime, cstime are the 14th to 17th of the line.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let number = |i: usize| -> anyhow::Result<f64> {
            fields
                .get(i)
                .and_then(|field| field.parse::<f64>().ok())
                .with_context(|| format!("no field {} in {path}", i + 3))
        };
        let own = (number(11)? + number(12)?) / self.ticks_per_second;
        let children = (number(13)? + number(14)?) / self.ticks_per_second;
        Ok((own, children, number(1)? as u32))
    }
}

/// `getconf CLK_TCK`: the unit of the CPU times in `/proc/<pid>/stat`.
fn clock_ticks_per_second() -> anyhow::Result<f64> {
    let output = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("running getconf CLK_TCK")?;
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .context("getconf CLK_TCK did not print a number")
}

impl Counters {
    fn minus(&self, before: &Counters) -> Counters {
        Counters {
            xact_commit: self.xact_commit - before.xact_commit,
            xact_rollback: self.xact_rollback - before.xact_rollback,
            tup_inserted: self.tup_inserted - before.tup_inserted,
            tup_updated: self.tup_updated - before.tup_updated,
            tup_deleted: self.tup_deleted - before.tup_deleted,
            blks_read: self.blks_read - before.blks_read,
            blks_hit: self.blks_hit - before.blks_hit,
            wal_records: self.wal_records - before.wal_records,
            wal_bytes: self.wal_bytes - before.wal_bytes,
            wal_sync: self.wal_sync - before.wal_sync,
        }
    }
}

/// The statements run between two readings (those run at least once).
fn statement_deltas(
    before: &HashMap<StatementKey, Statement>,
    after: &HashMap<StatementKey, Statement>,
) -> Vec<Statement> {
    after
        .iter()
        .filter_map(|(key, now)| {
            let was = before.get(key).cloned().unwrap_or_default();
            (now.calls > was.calls).then(|| Statement {
                query: now.query.clone(),
                toplevel: now.toplevel,
                calls: now.calls - was.calls,
                rows: now.rows - was.rows,
                millis: now.millis - was.millis,
                plan_millis: now.plan_millis - was.plan_millis,
            })
        })
        .collect()
}

/// CPU seconds spent between two snapshots.
struct CpuDelta {
    /// Every process of the cluster: live, ended, and the postmaster.
    cluster: f64,
    /// Live backends connected to the benchmark's database.
    backends: f64,
    serve: f64,
    benchmark: f64,
}

impl CpuDelta {
    fn between(start: &Snapshot, end: &Snapshot) -> Self {
        let total = |cpu: &ClusterCpu| {
            cpu.postmaster + cpu.exited + cpu.live.values().map(|(_, s)| s).sum::<f64>()
        };
        let backends = end
            .cluster
            .live
            .iter()
            .filter(|(_, (backend, _))| *backend)
            .map(|(pid, (_, now))| now - start.cluster.live.get(pid).map_or(0.0, |(_, s)| *s))
            .sum();
        Self {
            cluster: total(&end.cluster) - total(&start.cluster),
            backends,
            serve: end.serve - start.serve,
            benchmark: end.benchmark - start.benchmark,
        }
    }
}

/// What the database did for one phase's charges.
pub struct PhaseWork {
    /// What the phase wrote.
    budget: WriteBudget,
    charges: usize,
    wall: Duration,
    statements: Vec<Statement>,
    /// Statements run between the last event and the settled reading (idle polling).
    tail: Vec<Statement>,
    counters: Counters,
    cpu: CpuDelta,
}

/// Statements of transaction control: round trips that carry no work of their own.
fn is_transaction_control(query: &str) -> bool {
    let word = query
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase();
    matches!(
        word.as_str(),
        "BEGIN" | "COMMIT" | "ROLLBACK" | "START" | "SAVEPOINT" | "RELEASE"
    )
}

impl PhaseWork {
    /// Prints the totals per charge, then the `top` statements by calls and by time.
    pub fn print(&self, phase: &str, top: usize) {
        println!();
        println!(
            "### Database work per charge: {phase} ({} charges settled in {:.1} s)",
            thousands(self.charges as f64),
            self.wall.as_secs_f64()
        );
        println!();
        self.print_totals();
        self.budget.print(phase);
        println!();
        self.print_statements("by calls", top, |s| s.calls as f64);
        println!();
        self.print_statements("by time", top, |s| s.millis);
    }

    fn print_totals(&self) {
        let (toplevel, nested): (Vec<&Statement>, Vec<&Statement>) =
            self.statements.iter().partition(|s| s.toplevel);
        let calls = |list: &[&Statement]| list.iter().map(|s| s.calls).sum::<i64>() as f64;
        let control: Vec<&Statement> = toplevel
            .iter()
            .copied()
            .filter(|s| is_transaction_control(&s.query))
            .collect();
        let millis: f64 = toplevel.iter().map(|s| s.millis).sum();
        let c = &self.counters;
        let cpu = &self.cpu;
        let wall = self.wall.as_secs_f64();
        println!("| measure | total | per charge |");
        println!("|---|---:|---:|");
        let row = |name: &str, total: f64, digits: usize| {
            println!(
                "| {name} | {} | {:.digits$} |",
                thousands(total),
                total / self.charges as f64
            );
        };
        row(
            "statements sent (top level = round trips)",
            calls(&toplevel),
            2,
        );
        row("… of them BEGIN / COMMIT / ROLLBACK", calls(&control), 2);
        row(
            "statements run inside triggers and functions",
            calls(&nested),
            2,
        );
        row("transactions committed", c.xact_commit as f64, 2);
        row("transactions rolled back", c.xact_rollback as f64, 2);
        row("rows inserted", c.tup_inserted as f64, 2);
        row("rows updated", c.tup_updated as f64, 2);
        row("rows deleted", c.tup_deleted as f64, 2);
        row("buffers hit + read", (c.blks_hit + c.blks_read) as f64, 1);
        row("WAL records", c.wal_records as f64, 2);
        row("WAL bytes", c.wal_bytes as f64, 0);
        row("WAL flushes (fsync)", c.wal_sync as f64, 3);
        row("statement time, exec + plan (ms; top level)", millis, 3);
        row("CPU of the PostgreSQL cluster (ms)", cpu.cluster * 1e3, 3);
        row(
            "… of it backends serving the database, alive at the end (ms)",
            cpu.backends * 1e3,
            3,
        );
        row("CPU of onecharge serve (ms)", cpu.serve * 1e3, 3);
        row(
            "CPU of the benchmark: publisher, mock gateway, collector (ms)",
            cpu.benchmark * 1e3,
            3,
        );
        println!();
        println!(
            "cores busy over the {wall:.1} s: PostgreSQL {:.2}, onecharge serve {:.2}, benchmark {:.2}. Counters read {} s after the last event include that quiet tail, in which {} statements ran (not counted above).",
            cpu.cluster / wall,
            cpu.serve / wall,
            cpu.benchmark / wall,
            STATS_SETTLE.as_secs(),
            thousands(self.tail.iter().filter(|s| s.toplevel).map(|s| s.calls).sum::<i64>() as f64),
        );
    }

    /// The `top` statements by `key`, largest first.
    fn print_statements(&self, order: &str, top: usize, key: impl Fn(&Statement) -> f64) {
        let mut sorted: Vec<&Statement> = self.statements.iter().collect();
        sorted.sort_by(|a, b| key(b).total_cmp(&key(a)));
        let time: f64 = self
            .statements
            .iter()
            .filter(|s| s.toplevel)
            .map(|s| s.millis)
            .sum();
        let charges = self.charges as f64;
        println!("Top {top} statements {order} (nested: run by a trigger or function; its time is inside its caller's):");
        println!();
        println!("| calls/charge | rows/call | ms/charge | of it planning | share of top-level time | level | statement |");
        println!("|---:|---:|---:|---:|---:|---|---|");
        for s in sorted.into_iter().take(top) {
            println!(
                "| {:.3} | {:.1} | {:.4} | {:.0} % | {:.1} % | {} | `{}` |",
                s.calls as f64 / charges,
                s.rows as f64 / s.calls as f64,
                s.millis / charges,
                100.0 * s.plan_millis / s.millis.max(f64::MIN_POSITIVE),
                100.0 * s.millis / time,
                if s.toplevel { "top" } else { "nested" },
                normalised(&s.query),
            );
        }
    }
}

/// The statement on one line, at most 220 characters, safe inside a table cell.
fn normalised(query: &str) -> String {
    let line = query.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut short: String = line.chars().take(220).collect();
    if short.len() < line.len() {
        short.push('…');
    }
    short.replace('|', "\\|").replace('`', "'")
}
