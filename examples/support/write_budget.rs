//! What the database *writes* per settled charge (issue 38): rows inserted, updated (and how
//! many of those updates were HOT) and deleted, table by table (`pg_stat_user_tables`), and
//! the WAL records of the phase read back from the WAL itself (`pg_waldump` over the phase's
//! LSN range): how many, of which kind, and how many index entries each index received.
//!
//! These counts do not depend on the machine's load, only on what a charge writes and on how
//! full the batches are, so they can be compared between runs on a busy machine where times
//! cannot. Month partitions are counted under their partitioned table and their indexes
//! under the partitioned index, so a run that crosses a month boundary reads the same.
//!
//! An *index entry* is a tuple added to a B-tree leaf: an `INSERT_LEAF` or `INSERT_POST`
//! record, or a leaf split (`SPLIT_L`/`SPLIT_R` at level 0), which carries the new tuple
//! too. BRIN summaries are counted apart (`Brin/…` records).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{ensure, Context as _};
use sqlx::PgPool;

use crate::support::thousands;

/// The target for one §3 charge.
pub const TARGET_WAL_RECORDS: f64 = 27.0;
pub const TARGET_INDEX_ENTRIES: f64 = 17.0;

/// Row counters of one table (its partitions summed), as `pg_stat_user_tables` keeps them.
#[derive(Clone, Copy, Default, Debug, sqlx::FromRow)]
pub struct RowCounts {
    pub inserted: i64,
    pub updated: i64,
    pub hot_updated: i64,
    pub deleted: i64,
}

impl RowCounts {
    fn minus(self, before: RowCounts) -> RowCounts {
        RowCounts {
            inserted: self.inserted - before.inserted,
            updated: self.updated - before.updated,
            hot_updated: self.hot_updated - before.hot_updated,
            deleted: self.deleted - before.deleted,
        }
    }

    fn is_zero(&self) -> bool {
        self.inserted == 0 && self.updated == 0 && self.deleted == 0
    }
}

/// Every user table's row counters by table name (partitions under their root).
pub async fn row_counts(database: &PgPool) -> anyhow::Result<HashMap<String, RowCounts>> {
    let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT coalesce(root.relname, s.relname)::text,
                sum(s.n_tup_ins)::int8, sum(s.n_tup_upd)::int8, sum(s.n_tup_hot_upd)::int8,
                sum(s.n_tup_del)::int8
         FROM pg_stat_user_tables s
         LEFT JOIN pg_class root ON root.oid = pg_partition_root(s.relid)
         GROUP BY 1",
    )
    .fetch_all(database)
    .await
    .context("reading pg_stat_user_tables")?;
    Ok(rows
        .into_iter()
        .map(|(name, inserted, updated, hot_updated, deleted)| {
            let counts = RowCounts {
                inserted,
                updated,
                hot_updated,
                deleted,
            };
            (name, counts)
        })
        .collect())
}

/// The current WAL insert position, where a phase's WAL starts.
pub async fn wal_position(server: &PgPool) -> anyhow::Result<String> {
    sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
        .fetch_one(server)
        .await
        .context("reading the WAL position")
}

/// The WAL position up to which everything is on disk, where a phase's WAL is read to.
pub async fn flushed_wal_position(server: &PgPool) -> anyhow::Result<String> {
    sqlx::query_scalar("SELECT pg_current_wal_flush_lsn()::text")
        .fetch_one(server)
        .await
        .context("reading the flushed WAL position")
}

/// What a relation is, for the report: a table, or an index and the table it belongs to.
#[derive(Clone, Debug)]
struct Relation {
    name: String,
    /// For an index, its table; for a TOAST table, the table it serves.
    table: Option<String>,
    is_index: bool,
}

/// Every relation of the benchmark's database by its file node, partitions and partition
/// indexes named by their root (`outbox_p202612_pkey` counts as `outbox_pkey`).
async fn relations(database: &PgPool) -> anyhow::Result<HashMap<u32, Relation>> {
    let rows: Vec<(i64, String, Option<String>, bool)> = sqlx::query_as(
        "SELECT pg_relation_filenode(c.oid)::int8,
                coalesce(root.relname, c.relname)::text,
                CASE WHEN c.relkind = 'i' THEN coalesce(troot.relname, t.relname)::text
                     WHEN owner.oid IS NOT NULL THEN coalesce(oroot.relname, owner.relname)::text
                END,
                c.relkind = 'i'
         FROM pg_class c
         LEFT JOIN pg_class root ON root.oid = pg_partition_root(c.oid)
         LEFT JOIN pg_index x ON x.indexrelid = c.oid
         LEFT JOIN pg_class t ON t.oid = x.indrelid
         LEFT JOIN pg_class troot ON troot.oid = pg_partition_root(t.oid)
         LEFT JOIN pg_class owner ON owner.reltoastrelid = c.oid
                                  OR owner.reltoastrelid = t.oid
         LEFT JOIN pg_class oroot ON oroot.oid = pg_partition_root(owner.oid)
         WHERE pg_relation_filenode(c.oid) IS NOT NULL",
    )
    .fetch_all(database)
    .await
    .context("reading the relations' file nodes")?;
    Ok(rows
        .into_iter()
        .map(|(node, name, table, is_index)| {
            let relation = Relation {
                name,
                table,
                is_index,
            };
            (node as u32, relation)
        })
        .collect())
}

/// WAL records of one kind (`Heap/INSERT`, `Btree/INSERT_LEAF`, …) on one relation.
#[derive(Clone, Copy, Default, Debug)]
struct Tally {
    records: u64,
    bytes: u64,
    full_page_images: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.records += other.records;
        self.bytes += other.bytes;
        self.full_page_images += other.full_page_images;
    }
}

/// One record as `pg_waldump` prints it, reduced to what the report counts.
#[derive(Debug, PartialEq)]
struct Record {
    /// `Heap/INSERT`, `Btree/INSERT_LEAF`, `Transaction/COMMIT`, …
    kind: String,
    /// The file node of its first block reference; `None` for records about no relation.
    node: Option<u32>,
    bytes: u64,
    full_page_images: u64,
    /// A B-tree record that adds a tuple to a leaf.
    index_entry: bool,
}

/// Reads one line of `pg_waldump`'s output:
/// `rmgr: Heap len (rec/tot): 54/ 190, tx: 735, lsn: 0/0155A1E0, prev 0/0155A1A8, desc:
/// INSERT off 3 flags 0x00, blkref #0: rel 1663/5/16390 blk 0 FPW`.
fn parse_record(line: &str) -> Option<Record> {
    let rmgr = line.strip_prefix("rmgr:")?.split_whitespace().next()?;
    let total = line
        .split_once("len (rec/tot):")?
        .1
        .split_once(',')?
        .0
        .split_once('/')?
        .1
        .trim()
        .parse()
        .ok()?;
    let desc = line.split_once("desc: ")?.1;
    let operation = desc.split(|c: char| c.is_whitespace() || c == ',').next()?;
    let node = desc
        .split_once("rel ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|rel| rel.rsplit('/').next())
        .and_then(|node| node.parse().ok());
    let leaf_split = matches!(operation, "SPLIT_L" | "SPLIT_R") && desc.contains("level 0");
    let index_entry =
        rmgr == "Btree" && (matches!(operation, "INSERT_LEAF" | "INSERT_POST") || leaf_split);
    Some(Record {
        kind: format!("{rmgr}/{operation}"),
        node,
        bytes: total,
        full_page_images: desc.matches(" FPW").count() as u64,
        index_entry,
    })
}

/// The WAL of one phase, read back from the cluster's `pg_wal`.
#[derive(Default)]
pub struct WalRead {
    /// By (relation or "—", kind).
    by_relation_kind: BTreeMap<(String, String), Tally>,
    /// Index entries by (table, index).
    index_entries: BTreeMap<(String, String), u64>,
    /// Heap records (inserts, updates, HOT updates, deletes, locks) by (table, kind).
    heap: BTreeMap<(String, String), u64>,
    total: Tally,
    entries: u64,
}

/// Runs `pg_waldump` (of the cluster's own binaries) over `[start, end)` of `wal_dir` and
/// tallies its records.
pub async fn read_wal(
    waldump: &Path,
    wal_dir: &Path,
    start: &str,
    end: &str,
    database: &PgPool,
) -> anyhow::Result<WalRead> {
    let relations = relations(database).await?;
    let mut child = Command::new(waldump)
        .args(["-p", &wal_dir.to_string_lossy(), "-s", start, "-e", end])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", waldump.display()))?;
    let stdout = child.stdout.take().context("pg_waldump's output")?;
    let mut read = WalRead::default();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading pg_waldump's output")?;
        if let Some(record) = parse_record(&line) {
            read.add(&record, &relations);
        }
    }
    let output = child.wait_with_output().context("waiting for pg_waldump")?;
    let errors = String::from_utf8_lossy(&output.stderr);
    // pg_waldump ends with an error at the end of the written WAL when it is not told where
    // to stop exactly; any other complaint means the range could not be read.
    ensure!(
        output.status.success() || errors.contains("invalid record length"),
        "pg_waldump {start}..{end} failed ({}): {}",
        output.status,
        errors.trim()
    );
    Ok(read)
}

impl WalRead {
    fn add(&mut self, record: &Record, relations: &HashMap<u32, Relation>) {
        let tally = Tally {
            records: 1,
            bytes: record.bytes,
            full_page_images: record.full_page_images,
        };
        self.total.add(tally);
        let relation = record.node.and_then(|node| relations.get(&node));
        let name = match (record.node, relation) {
            (None, _) => "—".to_owned(),
            (Some(_), Some(relation)) => relation.name.clone(),
            (Some(_), None) => "(a catalog or dropped relation)".to_owned(),
        };
        self.by_relation_kind
            .entry((name.clone(), record.kind.clone()))
            .or_default()
            .add(tally);
        if let Some(relation) = relation {
            let table = relation.table.clone().unwrap_or_else(|| name.clone());
            if record.index_entry && relation.is_index {
                self.entries += 1;
                *self.index_entries.entry((table, name)).or_default() += 1;
            } else if record.kind.starts_with("Heap/") && !relation.is_index {
                *self.heap.entry((table, record.kind.clone())).or_default() += 1;
            }
        }
    }
}

/// What one phase wrote, per settled charge.
pub struct WriteBudget {
    pub charges: usize,
    pub rows: HashMap<String, RowCounts>,
    pub wal: Option<WalRead>,
    /// `pg_stat_wal` over the same phase, for comparison with what the WAL holds.
    pub wal_records_counted: i64,
    pub wal_bytes_counted: i64,
    /// Planning's share of top-level statement time (`pg_stat_statements`).
    pub planning_millis: f64,
    pub statement_millis: f64,
}

impl WriteBudget {
    pub fn rows_between(
        before: &HashMap<String, RowCounts>,
        after: &HashMap<String, RowCounts>,
    ) -> HashMap<String, RowCounts> {
        after
            .iter()
            .map(|(name, now)| {
                let was = before.get(name).copied().unwrap_or_default();
                (name.clone(), now.minus(was))
            })
            .filter(|(_, delta)| !delta.is_zero())
            .collect()
    }

    /// Prints the budget: totals against the target, rows by table, index entries by
    /// index, and the most frequent WAL records.
    pub fn print(&self, phase: &str) {
        let per = |n: f64| n / self.charges as f64;
        let sum = |f: fn(&RowCounts) -> i64| self.rows.values().map(f).sum::<i64>() as f64;
        let (inserted, updated, hot, deleted) = (
            sum(|r| r.inserted),
            sum(|r| r.updated),
            sum(|r| r.hot_updated),
            sum(|r| r.deleted),
        );
        println!();
        println!("### What a charge writes: {phase}");
        println!();
        println!("| per settled charge | measured | target (issue 38, §3) |");
        println!("|---|---:|---:|");
        println!(
            "| rows inserted / updated / deleted | {:.2} / {:.2} / {:.2} | |",
            per(inserted),
            per(updated),
            per(deleted)
        );
        println!(
            "| … of the updates HOT | {:.2} ({:.0} %) | |",
            per(hot),
            percent(hot, updated)
        );
        println!(
            "| WAL records (pg_stat_wal) | {:.2} | ≤ {TARGET_WAL_RECORDS} |",
            per(self.wal_records_counted as f64)
        );
        println!(
            "| WAL bytes (pg_stat_wal) | {} | |",
            thousands(per(self.wal_bytes_counted as f64))
        );
        if let Some(wal) = &self.wal {
            println!(
                "| WAL records read back (pg_waldump), of them full-page images | {:.2}, {:.2} | |",
                per(wal.total.records as f64),
                per(wal.total.full_page_images as f64)
            );
            println!(
                "| index entries inserted (B-tree leaf tuples) | {:.2} | ≤ {TARGET_INDEX_ENTRIES} |",
                per(wal.entries as f64)
            );
        }
        println!(
            "| planning's share of top-level statement time | {:.1} % | |",
            percent(self.planning_millis, self.statement_millis)
        );
        println!();
        self.print_tables(per);
        if let Some(wal) = &self.wal {
            println!();
            print_index_entries(wal, per);
            println!();
            print_wal_kinds(wal, per, 24);
        }
    }

    fn print_tables(&self, per: impl Fn(f64) -> f64) {
        let mut tables: Vec<(&String, &RowCounts)> = self.rows.iter().collect();
        tables.sort_by(|a, b| a.0.cmp(b.0));
        let heap = |table: &str, kind: &str| -> f64 {
            self.wal.as_ref().map_or(0.0, |wal| {
                wal.heap
                    .iter()
                    .filter(|((t, k), _)| t == table && k.starts_with(kind))
                    .fold(0.0, |sum, (_, n)| sum + *n as f64)
            })
        };
        println!(
            "Rows per charge by table (`pg_stat_user_tables`; heap WAL records from the WAL):"
        );
        println!();
        println!("| table | inserted | updated | of them HOT | deleted | heap records | of them row locks |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for (table, rows) in tables {
            println!(
                "| {table} | {:.2} | {:.2} | {:.2} ({:.0} %) | {:.2} | {:.2} | {:.2} |",
                per(rows.inserted as f64),
                per(rows.updated as f64),
                per(rows.hot_updated as f64),
                percent(rows.hot_updated as f64, rows.updated as f64),
                per(rows.deleted as f64),
                per(heap(table, "Heap/")),
                per(heap(table, "Heap/LOCK")),
            );
        }
    }
}

fn print_index_entries(wal: &WalRead, per: impl Fn(f64) -> f64) {
    println!("Index entries per charge by index (from the WAL):");
    println!();
    println!("| table | index | entries |");
    println!("|---|---|---:|");
    for ((table, index), entries) in &wal.index_entries {
        println!("| {table} | {index} | {:.2} |", per(*entries as f64));
    }
    println!("| **all** | | **{:.2}** |", per(wal.entries as f64));
}

fn print_wal_kinds(wal: &WalRead, per: impl Fn(f64) -> f64, top: usize) {
    let mut kinds: Vec<(&(String, String), &Tally)> = wal.by_relation_kind.iter().collect();
    kinds.sort_by_key(|kind| std::cmp::Reverse(kind.1.records));
    println!("The {top} most frequent WAL records per charge, by relation and kind:");
    println!();
    println!("| relation | record | records | bytes | full-page images |");
    println!("|---|---|---:|---:|---:|");
    for ((relation, kind), tally) in kinds.into_iter().take(top) {
        println!(
            "| {relation} | {kind} | {:.3} | {} | {:.3} |",
            per(tally.records as f64),
            thousands(per(tally.bytes as f64)),
            per(tally.full_page_images as f64)
        );
    }
}

fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

/// Where `pg_waldump` of a cluster's binaries is, and its `pg_wal` folder.
#[derive(Clone, Debug)]
pub struct WalSource {
    pub waldump: PathBuf,
    pub wal_dir: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heap_insert_a_leaf_insert_and_a_commit_are_read_from_pg_waldump_lines() {
        let insert = parse_record("rmgr: Heap        len (rec/tot):    131/   131, tx:       1891, lsn: 0/0A534DE0, prev 0/0A534DA8, desc: INSERT+INIT off 1 flags 0x00, blkref #0: rel 1663/29081/29377 blk 0").unwrap();
        assert_eq!(insert.kind, "Heap/INSERT+INIT");
        assert_eq!(insert.node, Some(29377));
        assert!(!insert.index_entry);
        let leaf = parse_record("rmgr: Btree       len (rec/tot):     80/  8272, tx:       1892, lsn: 0/0A535238, prev 0/0A5351E0, desc: INSERT_LEAF off 2, blkref #0: rel 1663/29081/29429 blk 1 FPW").unwrap();
        assert!(leaf.index_entry);
        assert_eq!((leaf.bytes, leaf.full_page_images), (8272, 1));
        let commit = parse_record("rmgr: Transaction len (rec/tot):     34/    34, tx:       1891, lsn: 0/0A535180, prev 0/0A535128, desc: COMMIT 2026-12-03 13:41:08.901325 UTC").unwrap();
        assert_eq!(
            (commit.kind.as_str(), commit.node),
            ("Transaction/COMMIT", None)
        );
    }
}
