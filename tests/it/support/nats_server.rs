//! A `nats-server` of a test's own: a child process on a free loopback port with JetStream in
//! a directory of the test's and its output in a log file there, so the test can kill and
//! restart the broker (or require TLS of it) without disturbing any other test. Dropping the
//! guard kills the server. [`super::cluster`] routes three of them into a cluster.
#![allow(dead_code)]

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian puts the server (2.9 on this project's machine), used when neither
/// `NATS_SERVER_BIN` nor `.ci/run`'s pinned server is there.
const DEBIAN_NATS_SERVER: &str = "/usr/sbin/nats-server";

/// The `nats-server` a test starts: `NATS_SERVER_BIN` when set; else the pinned server
/// `.ci/run` installs into `.ci/venv-nats` (2.15) when it is there; else Debian's.
pub fn nats_server_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("NATS_SERVER_BIN") {
        return PathBuf::from(path);
    }
    let pinned = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/venv-nats/bin/nats-server");
    if pinned.exists() {
        pinned
    } else {
        PathBuf::from(DEBIAN_NATS_SERVER)
    }
}

/// The version `nats_server_bin()` reports (`2.15.1`), as (major, minor).
pub fn nats_server_version() -> (u32, u32) {
    let binary = nats_server_bin();
    let output = Command::new(&binary)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    // "nats-server: v2.15.1"
    let text = String::from_utf8_lossy(&output.stdout);
    let version = text.trim().rsplit('v').next().unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// How to get a current `nats-server` where only Debian's 2.9 is.
const HOW_TO_INSTALL: &str = "run `bash .ci/run` once (it installs the nats-server pinned in \
    .ci/nats-server-requirements.txt, 2.15, into .ci/venv-nats), or point NATS_SERVER_BIN at a \
    nats-server 2.10 or newer";

/// Whether the `nats-server` tests start keeps R3 replicas consistent across leader changes
/// (2.10 or newer; 2.9's diverge and lose acknowledged messages, docs/soak.md), so that a
/// cluster test's verdict is about onecharge. Outside CI an older server skips the test
/// with one line saying why and how to get a current one; in CI it fails the test.
pub fn current_server_or_skip(test: &str) -> bool {
    let (major, minor) = nats_server_version();
    if (major, minor) >= (2, 10) {
        return true;
    }
    let why = format!(
        "{test} needs nats-server 2.10 or newer and {} is {major}.{minor}",
        nats_server_bin().display()
    );
    // `support::env::in_ci`, read here because the benchmarks include this file alone.
    if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0") {
        panic!("{why}: {HOW_TO_INSTALL}");
    }
    // Straight to the process's stderr: libtest captures `eprintln!`, and a skip must not be
    // silent.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED (not in CI): {why}; {HOW_TO_INSTALL}"
    );
    false
}

/// Longest wait for a started server to accept connections.
const LISTEN_DEADLINE: Duration = Duration::from_secs(15);

/// A loopback port for a server a test starts a moment later.
///
/// Never one of the kernel's ephemeral ports (`net.ipv4.ip_local_port_range`): binding port 0
/// hands out exactly those, and so does every outgoing connection. A test opening hundreds of
/// connections (the hostile soak) would take the port as a source port between this call and
/// the server's bind, and the server would die of "address already in use" (seen in CI: an
/// etcd member of the Patroni drill that never became healthy). Below that range only
/// listeners bind; a port is handed out once per test process and only while it binds.
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let first_ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = 10_000u16.min(first_ephemeral / 2);
    let span = u32::from(first_ephemeral - low);
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    for _ in 0..1000 {
        let draw = u32::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..4].try_into().unwrap());
        let port = low + (draw % span) as u16;
        if handed_out.contains(&port) {
            continue;
        }
        // Free on every address a test server binds: loopback and the wildcard.
        let free = std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            && std::net::TcpListener::bind(("0.0.0.0", port)).is_ok();
        if free {
            handed_out.insert(port);
            return port;
        }
    }
    panic!("no free port below {first_ephemeral}");
}

/// A running (or, between `kill` and `start_again`, stopped) nats-server.
pub struct NatsServer {
    name: String,
    port: u16,
    store_dir: PathBuf,
    log_path: PathBuf,
    /// Arguments after the address, port and JetStream store (cluster routes, TLS files).
    args: Vec<OsString>,
    child: Option<Child>,
}

impl NatsServer {
    /// Starts a server on a free loopback port, storing JetStream data under `dir`, and
    /// waits until it accepts connections.
    pub async fn start(dir: &Path) -> Self {
        let mut server = Self::configured(dir, "nats-server", free_port(), Vec::new());
        server.start_again().await;
        server
    }

    /// A server named `name` on `port` that is not started yet; `args` follow the address,
    /// port and JetStream store on its command line. Its store is `<dir>/<name>-js`, its log
    /// `<dir>/<name>.log`.
    pub fn configured(dir: &Path, name: &str, port: u16, args: Vec<OsString>) -> Self {
        Self {
            name: name.to_owned(),
            port,
            store_dir: dir.join(format!("{name}-js")),
            log_path: dir.join(format!("{name}.log")),
            args,
            child: None,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, as a crash would: no chance to flush or say goodbye to clients.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the process (again) on the same port with the same store directory, so
    /// streams, consumers and their state come back as a restarted production broker's
    /// would. Does not wait; see [`NatsServer::wait_listening`].
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "{} is still running", self.name);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("nats-server log file");
        let binary = nats_server_bin();
        let child = Command::new(&binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.store_dir)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        self.child = Some(child);
    }

    /// [`NatsServer::spawn`], then waits until the server accepts connections.
    pub async fn start_again(&mut self) {
        self.spawn();
        self.wait_listening().await;
    }

    /// What the server has logged so far (every run of it on this store).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Waits until the server accepts connections, failing the test after 15 s.
    pub async fn wait_listening(&self) {
        let deadline = Instant::now() + LISTEN_DEADLINE;
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "{} did not listen on port {} within {LISTEN_DEADLINE:?}; see {}",
                self.name,
                self.port,
                self.log_path.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
