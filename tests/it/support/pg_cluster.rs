//! Scratch PostgreSQL 15 clusters for failover tests: a primary on a free loopback port, a
//! streaming standby made with `pg_basebackup -R`, optional synchronous replication, a
//! `kill -9` of a node and `pg_ctl promote`. Every node runs as the `postgres` OS user
//! (PostgreSQL refuses root) in a temp dir of its own, and is stopped on drop. The system
//! cluster on 5432 is never touched.
//!
//! [`Forwarder`] is a TCP address that can be moved from one node to another (or to
//! nowhere): the "one address" onecharge connects to, and the replication link between the
//! nodes, which a test can cut to make the standby fall behind.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::nats_server::free_port;
use super::process::assert_exited_ok;

/// Debian's PostgreSQL 15 binaries; `PG_BIN_DIR` points elsewhere.
fn pg_bin(tool: &str) -> PathBuf {
    let dir = std::env::var("PG_BIN_DIR").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into());
    Path::new(&dir).join(tool)
}

/// Longest wait for a node to start, stream, or be promoted.
const DEADLINE: Duration = Duration::from_secs(60);

/// `tool` of PostgreSQL, to be run as the `postgres` OS user when we are root.
fn postgres_command(tool: &str) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(pg_bin(tool));
        command
    } else {
        Command::new(pg_bin(tool))
    }
}

/// Runs `tool args…` as the `postgres` OS user and panics with its output when it fails.
fn run_as_postgres(tool: &str, args: &[&str]) {
    let output = postgres_command(tool)
        .args(args)
        .current_dir("/")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
    assert_exited_ok(&output, &format!("{tool} {args:?}"));
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// Gives `path` to the `postgres` OS user (PostgreSQL insists on owning its data dir).
fn chown_to_postgres(path: &Path) {
    if is_root() {
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(path)
            .status()
            .expect("chown");
        assert!(status.success(), "chown {}", path.display());
    }
}

/// One running (or killed) PostgreSQL server.
pub struct PgNode {
    pub name: String,
    pub port: u16,
    data_dir: PathBuf,
    log_path: PathBuf,
    running: bool,
    // Dropped last: the directory goes once the server is stopped.
    _dir: tempfile::TempDir,
}

impl PgNode {
    /// `initdb` a new cluster (trust authentication on loopback, replication allowed) and
    /// start it as a primary that can feed streaming standbys.
    pub fn start_primary(name: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir for a cluster");
        chown_to_postgres(dir.path());
        let data_dir = dir.path().join("data");
        let data = data_dir.to_str().unwrap();
        run_as_postgres(
            "initdb",
            &["-D", data, "--auth=trust", "-U", "postgres", "--no-sync"],
        );
        let port = free_port();
        std::fs::write(
            data_dir.join("postgresql.auto.conf"),
            format!(
                "listen_addresses = '127.0.0.1'\n\
                 port = {port}\n\
                 unix_socket_directories = '{}'\n\
                 wal_level = replica\n\
                 max_wal_senders = 5\n\
                 hot_standby = on\n\
                 wal_receiver_status_interval = 1s\n\
                 wal_retrieve_retry_interval = 500ms\n\
                 max_connections = 100\n\
                 shared_buffers = 32MB\n",
                dir.path().display()
            ),
        )
        .expect("configure the primary");
        chown_to_postgres(dir.path());
        Self::start_in(name, port, dir, data_dir)
    }

    /// Starts the server whose data directory `data_dir` (inside `dir`) is configured to
    /// listen on `port`; it logs to `server.log` in `dir`.
    fn start_in(name: &str, port: u16, dir: tempfile::TempDir, data_dir: PathBuf) -> PgNode {
        let mut node = PgNode {
            name: name.into(),
            port,
            log_path: dir.path().join("server.log"),
            data_dir,
            running: false,
            _dir: dir,
        };
        node.start();
        node
    }

    /// A streaming standby of this primary, copied with `pg_basebackup -R`, that reaches it
    /// through `link` (so the test can cut replication) and names itself `name` (the
    /// `application_name` that `synchronous_standby_names` refers to).
    pub fn start_standby(&self, name: &str, link: &Forwarder) -> PgNode {
        let dir = tempfile::tempdir().expect("temp dir for a standby");
        chown_to_postgres(dir.path());
        let data_dir = dir.path().join("data");
        let port = self.port.to_string();
        run_as_postgres(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                data_dir.to_str().unwrap(),
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",
                "--no-sync",
            ],
        );
        let standby_port = free_port();
        // Appended after what `-R` wrote: the last setting wins.
        let mut conf = std::fs::read_to_string(data_dir.join("postgresql.auto.conf")).unwrap();
        conf.push_str(&format!(
            "port = {standby_port}\n\
             unix_socket_directories = '{}'\n\
             primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={name}'\n",
            dir.path().display(),
            link.port()
        ));
        std::fs::write(data_dir.join("postgresql.auto.conf"), conf).unwrap();
        chown_to_postgres(dir.path());
        Self::start_in(name, standby_port, dir, data_dir)
    }

    /// Starts a killed node again (crash recovery), as a forensic copy: it is not put back
    /// behind any address.
    /// A killed postmaster may stay a zombie (nobody reaps it in a container); PostgreSQL
    /// would take its pid for a live server, so its lock files go first.
    pub fn restart(&mut self) {
        if self.postmaster_pid().is_some_and(|pid| !is_alive(pid)) {
            std::fs::remove_file(self.data_dir.join("postmaster.pid")).expect("stale lock file");
            let sockets = self.data_dir.parent().unwrap();
            let socket = format!(".s.PGSQL.{}", self.port);
            let _ = std::fs::remove_file(sockets.join(format!("{socket}.lock")));
            let _ = std::fs::remove_file(sockets.join(socket));
        }
        self.start();
    }

    fn start(&mut self) {
        let output = postgres_command("pg_ctl")
            .args([
                "-D",
                self.data_dir.to_str().unwrap(),
                "-l",
                self.log_path.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "start",
            ])
            .current_dir("/")
            .output()
            .expect("pg_ctl");
        assert!(
            output.status.success(),
            "{} does not start: {}\n{}",
            self.name,
            String::from_utf8_lossy(&output.stdout),
            self.log()
        );
        self.running = true;
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A URL of database `db` on this node (not through any forwarder).
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Runs one statement on this node's `postgres` database.
    pub async fn execute(&self, sql: &str) {
        let pool = sqlx::PgPool::connect(&self.url("postgres")).await.unwrap();
        sqlx::query(sql)
            .execute(&pool)
            .await
            .unwrap_or_else(|e| panic!("{sql} on {}: {e}", self.name));
        pool.close().await;
    }

    /// Makes this server refuse TCP logins without the password `password`, as Debian's
    /// own cluster does (`scram-sha-256` for `host` lines); sockets stay `trust`.
    pub async fn require_passwords(&self, password: &str) {
        self.execute(&format!("ALTER ROLE postgres PASSWORD '{password}'"))
            .await;
        std::fs::write(
            self.data_dir.join("pg_hba.conf"),
            "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
        )
        .expect("write pg_hba.conf");
        self.execute("SELECT pg_reload_conf()").await;
    }

    /// Waits until `standby` streams from this primary (`pg_stat_replication`) in `state`
    /// (`async` or `sync`).
    pub async fn wait_for_standby(&self, standby: &str, sync_state: &str) {
        let pool = sqlx::PgPool::connect(&self.url("postgres")).await.unwrap();
        let started = Instant::now();
        loop {
            let found: Option<String> = sqlx::query_scalar(
                "SELECT sync_state FROM pg_stat_replication \
                 WHERE application_name = $1 AND state = 'streaming'",
            )
            .bind(standby)
            .fetch_optional(&pool)
            .await
            .unwrap();
            if found.as_deref() == Some(sync_state) {
                break;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{standby} does not stream ({sync_state}) from {}: {found:?}\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        pool.close().await;
    }

    /// Makes every commit wait until `standby` has applied it (`synchronous_commit =
    /// remote_apply` with `standby` as the one synchronous standby), and waits until the
    /// primary reports it as synchronous.
    pub async fn require_synchronous_standby(&self, standby: &str) {
        self.execute(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{standby}'"
        ))
        .await;
        self.execute("ALTER SYSTEM SET synchronous_commit = 'remote_apply'")
            .await;
        self.execute("SELECT pg_reload_conf()").await;
        self.wait_for_standby(standby, "sync").await;
    }

    /// The postmaster's pid (first line of `postmaster.pid`).
    fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.data_dir.join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// `kill -9` the postmaster and then every process it started, as a crashed host: no
    /// shutdown checkpoint, no goodbye to clients or standbys.
    pub fn kill(&mut self) {
        let pid = self.postmaster_pid().expect("the node runs");
        let children = Command::new("pgrep")
            .args(["-P", &pid.to_string()])
            .output()
            .expect("pgrep");
        let mut pids = vec![pid];
        pids.extend(
            String::from_utf8_lossy(&children.stdout)
                .split_whitespace()
                .filter_map(|child| child.parse::<u32>().ok()),
        );
        for pid in &pids {
            signal_kill(*pid);
        }
        // Gone once none is left holding the shared memory a restart would refuse to share.
        let started = Instant::now();
        while pids.iter().any(|pid| is_alive(*pid)) {
            assert!(
                started.elapsed() < DEADLINE,
                "{} survives kill -9",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.running = false;
    }

    /// `pg_ctl promote` (waits until the node accepts writes).
    pub fn promote(&self) {
        run_as_postgres(
            "pg_ctl",
            &[
                "-D",
                self.data_dir.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "promote",
            ],
        );
    }

    /// The server's log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

/// Whether `pid` is a live process (a zombie is dead: it holds nothing any more).
fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

fn signal_kill(pid: u32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}

impl Drop for PgNode {
    fn drop(&mut self) {
        if self.running {
            let _ = postgres_command("pg_ctl")
                .args([
                    "-D",
                    self.data_dir.to_str().unwrap(),
                    "-m",
                    "immediate",
                    "stop",
                ])
                .current_dir("/")
                .output();
        }
    }
}

/// A loopback TCP address whose connections are forwarded to a target that can be moved
/// (or removed: then new connections are closed at once). Moving it cuts every connection
/// it carries, as a moved virtual IP or a fenced node would.
pub struct Forwarder {
    port: u16,
    target: Arc<Mutex<Option<SocketAddr>>>,
    generation: watch::Sender<u64>,
    accept: tokio::task::JoinHandle<()>,
}

impl Forwarder {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(Mutex::new(Some(target)));
        let (generation, _) = watch::channel(0u64);
        let accept = tokio::spawn({
            let target = target.clone();
            let generation = generation.clone();
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let to = *target.lock().unwrap();
                    let mut moved = generation.subscribe();
                    tokio::spawn(async move {
                        let Some(to) = to else { return };
                        let Ok(mut server) = TcpStream::connect(to).await else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = moved.changed() => {}
                        }
                    });
                }
            }
        });
        Self {
            port,
            target,
            generation,
            accept,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends new connections to `target` (nowhere with `None`) and cuts the open ones.
    pub fn point_at(&self, target: Option<SocketAddr>) {
        *self.target.lock().unwrap() = target;
        self.generation.send_modify(|g| *g += 1);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.accept.abort();
        self.generation.send_modify(|g| *g += 1);
    }
}
