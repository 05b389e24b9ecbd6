//! A PostgreSQL cluster of the benchmark's own: `initdb` into a temporary folder, started on
//! a free port with `pg_stat_statements` preloaded and autovacuum on (as production runs),
//! stopped and removed when the guard drops — also when the run fails or is interrupted.
//!
//! The machine's shared cluster does not preload `pg_stat_statements` (and runs with
//! autovacuum off), and every other test and helper uses it; counting statements needs a
//! cluster that serves the benchmark alone. Uses Debian's `/usr/lib/postgresql/<major>/bin`
//! (the newest installed); as root it runs them as the `postgres` user, since PostgreSQL
//! refuses to run as root.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context as _};

use crate::write_budget::WalSource;

/// Settings of the benchmark's cluster beyond initdb's defaults: statements counted,
/// top-level and nested (trigger and function bodies, told apart by `toplevel`), with their
/// planning time; autovacuum on; WAL kept for 4 GB, so that the write budget can read a
/// whole phase's WAL back after a checkpoint (`write_budget.rs`).
const SERVER_SETTINGS: [&str; 7] = [
    "shared_preload_libraries=pg_stat_statements",
    "pg_stat_statements.track=all",
    "pg_stat_statements.track_planning=on",
    "pg_stat_statements.max=10000",
    "autovacuum=on",
    "listen_addresses=127.0.0.1",
    "wal_keep_size=4GB",
];

/// A running cluster of the benchmark's own; dropping it stops the server and removes its
/// folder.
pub struct OwnPostgres {
    bin: PathBuf,
    folder: PathBuf,
    port: u16,
}

impl OwnPostgres {
    /// Creates and starts the cluster on `port` (trust authentication for the `postgres`
    /// user, on 127.0.0.1 only); `tag` names its folder under the temporary directory.
    pub fn start(tag: &str, port: u16) -> anyhow::Result<Self> {
        let bin = newest_bin()?;
        let folder = std::env::temp_dir().join(format!("onecharge_bench_pg_{tag}"));
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("creating {}", folder.display()))?;
        // From here on the guard removes the folder, whatever fails.
        let cluster = Self { bin, folder, port };
        cluster.hand_to_postgres_user()?;
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data().to_string_lossy(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        )?;
        let mut options = format!("-p {port} -k {}", cluster.folder.display());
        for setting in SERVER_SETTINGS {
            options.push_str(&format!(" -c {setting}"));
        }
        let log = cluster.folder.join("server.log");
        cluster.run(
            "pg_ctl",
            &[
                "start",
                "-w",
                "-D",
                &cluster.data().to_string_lossy(),
                "-l",
                &log.to_string_lossy(),
                "-o",
                &options,
            ],
        )?;
        Ok(cluster)
    }

    /// The server's URL without a database, as `--server` takes it.
    pub fn server_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}", self.port)
    }

    /// The postmaster's process id (the first line of `postmaster.pid`): the parent of
    /// every process of the cluster, whose CPU time the benchmark reads.
    pub fn postmaster_pid(&self) -> anyhow::Result<u32> {
        let path = self.data().join("postmaster.pid");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        text.lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .with_context(|| format!("no process id in {}", path.display()))
    }

    /// What the header prints: where it runs and the settings above.
    pub fn describe(&self) -> String {
        format!(
            "the benchmark's own cluster ({}, port {}; {}), removed at the end",
            self.bin.display(),
            self.port,
            SERVER_SETTINGS[..5].join(", ")
        )
    }

    /// `pg_waldump` of the cluster's binaries and its `pg_wal` folder, where the write budget
    /// reads each phase's WAL back (this process can read it: it made the cluster, or it is
    /// root).
    pub fn wal_source(&self) -> WalSource {
        WalSource {
            waldump: self.bin.join("pg_waldump"),
            wal_dir: self.data().join("pg_wal"),
        }
    }

    fn data(&self) -> PathBuf {
        self.folder.join("data")
    }

    /// Runs `program` of the PostgreSQL binaries, as the `postgres` user when this process
    /// is root; fails with its output when it fails.
    fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<()> {
        let path = self.bin.join(program);
        let mut command = if running_as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&path);
            command
        } else {
            Command::new(&path)
        };
        let output = command
            .args(args)
            .current_dir(&self.folder)
            .output()
            .with_context(|| format!("running {}", path.display()))?;
        ensure!(
            output.status.success(),
            "{program} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(())
    }

    /// As root, the folder belongs to the `postgres` user, who runs the server.
    fn hand_to_postgres_user(&self) -> anyhow::Result<()> {
        if !running_as_root() {
            return Ok(());
        }
        let status = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&self.folder)
            .status()
            .context("running chown")?;
        ensure!(
            status.success(),
            "chown postgres {} failed",
            self.folder.display()
        );
        Ok(())
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        if self.data().join("postmaster.pid").exists() {
            let data = self.data();
            if let Err(err) = self.run(
                "pg_ctl",
                &["stop", "-m", "fast", "-D", &data.to_string_lossy()],
            ) {
                eprintln!("warning: stopping the benchmark's PostgreSQL: {err:#}");
            }
        }
        if let Err(err) = std::fs::remove_dir_all(&self.folder) {
            eprintln!("warning: removing {}: {err}", self.folder.display());
        }
    }
}

/// `/usr/lib/postgresql/<major>/bin` of the newest major version installed.
fn newest_bin() -> anyhow::Result<PathBuf> {
    let root = Path::new("/usr/lib/postgresql");
    let newest = std::fs::read_dir(root)
        .with_context(|| format!("no PostgreSQL binaries under {}", root.display()))?
        .flatten()
        .filter_map(|entry| {
            let major: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((major, bin))
        })
        .max_by_key(|(major, _)| *major);
    newest
        .map(|(_, bin)| bin)
        .with_context(|| format!("no {}/<major>/bin/initdb", root.display()))
}

/// Whether this process runs as root: `/proc/self` belongs to the process's user.
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}
