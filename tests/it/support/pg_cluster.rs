//! What the failover tests share about PostgreSQL servers of their own: where Debian put
//! the server binaries ([`pg_bin_dir`]), running them as the `postgres` OS user when the
//! tests run as root (PostgreSQL refuses root), and killing a node's processes as a crash
//! would. The Patroni cluster ([`super::patroni`]) is built on these.
//!
//! [`Forwarder`] is a TCP address that can be moved from one server to another (or to
//! nowhere): the "one address" onecharge connects to, cut as a failover's proxy with no
//! leader cuts it, and the replication link of the asynchronous drill, which no Patroni
//! command can cut.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// PostgreSQL's server binaries: `PG_BIN_DIR` when set, else Debian's
/// `/usr/lib/postgresql/<version>/bin` (see [`debian_bin_dir_in`]). `Err` says what was
/// looked at, for a test that skips without them.
pub fn pg_bin_dir() -> Result<PathBuf, String> {
    match std::env::var_os("PG_BIN_DIR") {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => debian_bin_dir_in(Path::new("/usr/lib/postgresql")),
    }
}

/// `<root>/<version>/bin` of the highest PostgreSQL version under Debian's layout (`root`
/// is `/usr/lib/postgresql`) that holds `initdb`: whatever the machine installed, never one
/// version written here.
pub fn debian_bin_dir_in(root: &Path) -> Result<PathBuf, String> {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version)
        .map(|(_, bin)| bin)
        .ok_or_else(|| {
            format!(
                "no PostgreSQL server binaries: no {}/<version>/bin/initdb (Debian: apt-get install postgresql)",
                root.display()
            )
        })
}

/// Whether this process runs as root (PostgreSQL must then run as the `postgres` user).
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// Gives `path` to the `postgres` OS user (PostgreSQL insists on owning its data dir).
pub fn chown_to_postgres(path: &Path) {
    if is_root() {
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(path)
            .status()
            .expect("chown");
        assert!(status.success(), "chown {}", path.display());
    }
}

/// Whether `pid` is a live process (a zombie is dead: it holds nothing any more).
pub fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// SIGKILL to `pid` (a crash: nothing is flushed, nobody is told).
pub fn signal_kill(pid: u32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
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

/// A PostgreSQL server of its own that takes TCP logins with a password only
/// (`scram-sha-256`), as a fresh Debian's own cluster does; stopped and removed on drop.
pub struct PasswordServer {
    pub port: u16,
    data_dir: PathBuf,
    // Dropped last: the directory goes once the server is stopped.
    _dir: tempfile::TempDir,
}

impl PasswordServer {
    /// `initdb` (role `postgres` with `password`) and start it on a free loopback port.
    pub fn start(password: &str) -> Self {
        let bin = pg_bin_dir().expect("PostgreSQL's server binaries");
        let dir = tempfile::tempdir().expect("temp dir for a cluster");
        let data_dir = dir.path().join("data");
        let pwfile = dir.path().join("pwfile");
        std::fs::write(&pwfile, password).unwrap();
        chown_to_postgres(dir.path());
        let port = super::nats_server::free_port();
        as_postgres(&bin.join("initdb"))
            .args([
                "-D",
                data_dir.to_str().unwrap(),
                "-U",
                "postgres",
                "--no-sync",
            ])
            .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .status()
            .expect("initdb")
            .success()
            .then_some(())
            .expect("initdb succeeds");
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            dir.path().display()
        );
        as_postgres(&bin.join("pg_ctl"))
            .args([
                "start",
                "-w",
                "-D",
                data_dir.to_str().unwrap(),
                "-o",
                &options,
            ])
            .args(["-l", dir.path().join("server.log").to_str().unwrap()])
            .status()
            .expect("pg_ctl start")
            .success()
            .then_some(())
            .expect("the server starts");
        Self {
            port,
            data_dir,
            _dir: dir,
        }
    }
}

impl Drop for PasswordServer {
    fn drop(&mut self) {
        if let Ok(bin) = pg_bin_dir() {
            let _ = as_postgres(&bin.join("pg_ctl"))
                .args([
                    "stop",
                    "-m",
                    "immediate",
                    "-D",
                    self.data_dir.to_str().unwrap(),
                ])
                .status();
        }
    }
}

/// `program`, run as the `postgres` OS user when this process is root.
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}
