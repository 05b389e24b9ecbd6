//! A Patroni cluster of a test's own (issue 56), from Debian's packages: one to three `etcd`
//! members, three (or two) PostgreSQL nodes each run by its own `patroni` (PostgreSQL from
//! [`pg_bin_dir`], never one version written here), and `haproxy` routing one address, the
//! one onecharge connects to, to whichever node answers Patroni's REST check `/primary`.
//! Everything listens on loopback addresses and free ports, each member in a directory of
//! its own under one temporary directory; dropping the cluster SIGKILLs every process and
//! removes the directory (kept, with its path printed, when the test panicked).
//!
//! As root, Patroni and the PostgreSQL it starts run as the `postgres` OS user through
//! `setpriv` (PostgreSQL refuses root), as [`super::pg_cluster`]'s nodes do.
//!
//! Two cuts Patroni cannot make itself: with [`PatroniOptions::first_node_in_netns`], node
//! `n0` runs in a network namespace of the test's own (a veth pair, loopback-range addresses
//! only, routes in the `local` tables of both sides), so that [`PatroniCluster::cut_from_etcd`]
//! takes etcd away from it while HAProxy, the other nodes and onecharge still reach it; with
//! [`PatroniOptions::replication_forwarders`], every node's `connect_address` (what the
//! replicas stream from) is a [`Forwarder`] that [`PatroniCluster::cut_replication`] points
//! at nothing, so the leader commits what no replica receives.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::nats_server::free_port;
use super::pg_cluster::{chown_to_postgres, is_alive, is_root, pg_bin_dir, signal_kill, Forwarder};

/// Longest wait for the cluster to bootstrap, a node to join, or a leader to be elected.
const DEADLINE: Duration = Duration::from_secs(120);

/// The leader key's lifetime and Patroni's loop, shorter than Patroni's defaults (30 s,
/// 10 s, 10 s) so that a drill's failover takes seconds: `loop_wait + 2 × retry_timeout ≤
/// ttl`, as Patroni requires. A team on the defaults waits up to `ttl` (30 s) longer.
pub const TTL: Duration = Duration::from_secs(15);
pub const LOOP_WAIT: Duration = Duration::from_secs(3);
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(5);

/// How the cluster is built.
#[derive(Debug, Clone)]
pub struct PatroniOptions {
    /// 1 or 3 (3 keeps a quorum with one member down).
    pub etcd_members: usize,
    /// Patroni's `synchronous_mode`: one replica is synchronous, and only it may be promoted.
    pub synchronous_mode: bool,
    /// `synchronous_mode_strict`: with no synchronous replica left, commits wait rather than
    /// Patroni turning synchronous replication off.
    pub synchronous_mode_strict: bool,
    /// `maximum_lag_on_failover`, bytes: a replica further behind is not promoted.
    pub maximum_lag_on_failover: u64,
    /// Node `n0` (the first leader) runs in a network namespace of its own (needs root and
    /// `ip`), so that it can be cut off from etcd alone.
    pub first_node_in_netns: bool,
    /// Replicas stream through forwarders the test can cut.
    pub replication_forwarders: bool,
    /// PostgreSQL nodes: 3, or 2 (a leader and its one replica).
    pub nodes: usize,
}

impl Default for PatroniOptions {
    fn default() -> Self {
        Self {
            etcd_members: 1,
            synchronous_mode: true,
            synchronous_mode_strict: false,
            maximum_lag_on_failover: 1024 * 1024,
            first_node_in_netns: false,
            replication_forwarders: false,
            nodes: 3,
        }
    }
}

/// What a Patroni test needs on the machine: `patroni`, `patronictl`, `etcd`, `haproxy`,
/// PostgreSQL's server binaries, and `setpriv` as root (plus `ip` for a network
/// namespace). `Err` names what is missing and how to get it.
pub fn missing_tools(netns: bool) -> Result<PathBuf, String> {
    let mut missing = Vec::new();
    for tool in ["patroni", "patronictl", "etcd", "haproxy"] {
        if on_path(tool).is_none() {
            missing.push(tool.to_owned());
        }
    }
    if is_root() && on_path("setpriv").is_none() {
        missing.push("setpriv".to_owned());
    }
    if netns {
        if !is_root() {
            missing.push("root (for `ip netns`)".to_owned());
        }
        if on_path("ip").is_none() {
            missing.push("ip".to_owned());
        }
    }
    let bin = pg_bin_dir();
    if let Err(why) = &bin {
        missing.push(why.clone());
    }
    if missing.is_empty() {
        Ok(bin.expect("checked"))
    } else {
        Err(format!(
            "missing {} (Debian: apt-get install --no-install-recommends patroni etcd-server haproxy postgresql; `bash .ci/run` does)",
            missing.join(", ")
        ))
    }
}

/// Whether a Patroni test can run here: outside CI a missing tool skips it with one line
/// saying why; in CI (`CI` set) it fails the test.
pub fn tools_or_skip(test: &str, netns: bool) -> bool {
    let Err(why) = missing_tools(netns) else {
        return true;
    };
    if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0") {
        panic!("{test}: {why}");
    }
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED (not in CI): {test}: {why}");
    false
}

fn on_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(tool))
        .find(|file| file.is_file())
}

/// Runs a command to its end and panics with its output when it fails.
fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} exited with {:?}: {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A network namespace with a veth pair to the test's own namespace. Only loopback-range
/// addresses (127.a.b.x, a ≥ 100): both ends accept them (`route_localnet`), and a
/// `local`-table route on each side sends the other end's address over the pair instead of
/// to `lo`. Deleting the namespace deletes the pair and the routes on it.
struct Netns {
    name: String,
    inner_if: String,
    /// The address of the pair's outer end: nodes outside listen here, so that the node
    /// inside reaches them.
    outer: Ipv4Addr,
    /// The node inside listens here.
    inner: Ipv4Addr,
    /// etcd listens here (outside): a route of its own inside, so that it can be cut alone.
    etcd: Ipv4Addr,
}

impl Netns {
    fn create(tag: &str, bytes: [u8; 2]) -> Self {
        let (a, b) = (100 + bytes[0] % 100, bytes[1]);
        let netns = Self {
            name: format!("onecharge-{tag}"),
            inner_if: format!("oc{tag}i"),
            outer: Ipv4Addr::new(127, a, b, 1),
            inner: Ipv4Addr::new(127, a, b, 2),
            etcd: Ipv4Addr::new(127, a, b, 5),
        };
        let outer_if = format!("oc{tag}o");
        let (outer, inner, etcd) = (
            netns.outer.to_string(),
            netns.inner.to_string(),
            netns.etcd.to_string(),
        );
        run("ip", &["netns", "add", &netns.name]);
        run(
            "ip",
            &[
                "link",
                "add",
                &outer_if,
                "type",
                "veth",
                "peer",
                "name",
                &netns.inner_if,
                "netns",
                &netns.name,
            ],
        );
        run(
            "ip",
            &["addr", "add", &format!("{outer}/30"), "dev", &outer_if],
        );
        run("ip", &["link", "set", &outer_if, "up"]);
        std::fs::write(
            format!("/proc/sys/net/ipv4/conf/{outer_if}/route_localnet"),
            "1",
        )
        .expect("route_localnet outside");
        run(
            "ip",
            &[
                "route",
                "add",
                &format!("{inner}/32"),
                "dev",
                &outer_if,
                "table",
                "local",
            ],
        );
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &netns.name, "ip"];
            all.extend_from_slice(args);
            run("ip", &all);
        };
        inside(&["link", "set", "lo", "up"]);
        inside(&[
            "addr",
            "add",
            &format!("{inner}/30"),
            "dev",
            &netns.inner_if,
        ]);
        inside(&["link", "set", &netns.inner_if, "up"]);
        run(
            "ip",
            &[
                "netns",
                "exec",
                &netns.name,
                "sysctl",
                "-qw",
                &format!("net.ipv4.conf.{}.route_localnet=1", netns.inner_if),
            ],
        );
        for to in [&outer, &etcd] {
            inside(&[
                "route",
                "add",
                &format!("{to}/32"),
                "dev",
                &netns.inner_if,
                "table",
                "local",
            ]);
        }
        netns
    }

    /// `ip netns exec <name>` before a command: it runs inside.
    fn prefix(&self) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.name.clone(),
        ]
    }

    /// Drops every packet from inside to etcd (`blackhole`), or lets them through again.
    fn route_to_etcd(&self, cut: bool) {
        let etcd = format!("{}/32", self.etcd);
        let mut args = vec!["netns", "exec", &self.name, "ip", "route", "replace"];
        if cut {
            args.extend(["blackhole", &etcd, "table", "local"]);
        } else {
            args.extend([etcd.as_str(), "dev", &self.inner_if, "table", "local"]);
        }
        run("ip", &args);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// One etcd member.
struct EtcdMember {
    name: String,
    client_port: u16,
    peer_port: u16,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl EtcdMember {
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "{} runs", self.name);
        let log = log_file(&self.dir.join("etcd.log"));
        let child = Command::new(on_path("etcd").expect("etcd"))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn log_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One PostgreSQL node and the `patroni` that runs it.
pub struct PatroniNode {
    pub name: String,
    /// Where PostgreSQL and Patroni's REST API listen.
    pub host: Ipv4Addr,
    pub pg_port: u16,
    pub rest_port: u16,
    dir: PathBuf,
    config: PathBuf,
    /// `ip netns exec …` for the node inside the namespace.
    prefix: Vec<String>,
    /// `patroni` itself (`setpriv` and `ip netns exec` exec into it).
    patroni: Option<Child>,
    /// What replicas connect to when the replication goes through a forwarder.
    forwarder: Option<Forwarder>,
}

impl PatroniNode {
    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn spawn(&mut self) {
        assert!(self.patroni.is_none(), "{}'s patroni runs", self.name);
        self.forget_a_dead_postmaster();
        let log = log_file(&self.dir.join("patroni.log"));
        let patroni = on_path("patroni").expect("patroni");
        let mut argv: Vec<String> = self.prefix.clone();
        if is_root() {
            argv.extend(
                [
                    "setpriv",
                    "--reuid=postgres",
                    "--regid=postgres",
                    "--init-groups",
                ]
                .map(str::to_owned),
            );
        }
        argv.push(patroni.display().to_string());
        argv.push(self.config.display().to_string());
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(&self.dir)
            .env("HOME", &self.dir)
            .env("LC_ALL", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start patroni for {}: {e}", self.name));
        self.patroni = Some(child);
    }

    /// A postmaster killed with its node may stay a zombie (nobody reaps it in a
    /// container): its lock file would make a restarted node wait for it.
    fn forget_a_dead_postmaster(&self) {
        if self.postmaster_pid().is_some_and(|pid| !is_alive(pid)) {
            let _ = std::fs::remove_file(self.data_dir().join("postmaster.pid"));
        }
    }

    fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.data_dir().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// SIGKILL of `patroni`, the postmaster and every process the postmaster started: the
    /// node's host gone at once, nothing flushed, nobody told.
    fn kill(&mut self) {
        let mut pids = Vec::new();
        if let Some(child) = &self.patroni {
            pids.push(child.id());
        }
        if let Some(pid) = self.postmaster_pid().filter(|pid| is_alive(*pid)) {
            pids.push(pid);
            let children = Command::new("pgrep")
                .args(["-P", &pid.to_string()])
                .output()
                .expect("pgrep");
            pids.extend(
                String::from_utf8_lossy(&children.stdout)
                    .split_whitespace()
                    .filter_map(|child| child.parse::<u32>().ok()),
            );
        }
        for pid in &pids {
            signal_kill(*pid);
        }
        if let Some(mut child) = self.patroni.take() {
            let _ = child.wait();
        }
        let started = Instant::now();
        while pids.iter().any(|pid| is_alive(*pid)) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{} survives kill -9",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn is_running(&self) -> bool {
        self.patroni.is_some()
    }

    /// A URL of database `db` on this node itself (not through HAProxy).
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@{}:{}/{db}", self.host, self.pg_port)
    }

    fn rest(&self, path: &str) -> String {
        format!("http://{}:{}{path}", self.host, self.rest_port)
    }

    /// What this node's Patroni log holds (PostgreSQL's too: it logs to Patroni's output).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("patroni.log")).unwrap_or_default()
    }
}

/// The cluster: etcd, two or three Patroni nodes, HAProxy.
pub struct PatroniCluster {
    pub scope: String,
    pub options: PatroniOptions,
    pub nodes: Vec<PatroniNode>,
    etcd: Vec<EtcdMember>,
    haproxy: Option<Child>,
    haproxy_port: u16,
    http: reqwest::Client,
    netns: Option<Netns>,
    /// Keep the directory (logs, data) when dropped: set by a test that found a problem.
    keep: bool,
    // Dropped last: the directory goes once every process is gone.
    dir: Option<tempfile::TempDir>,
}

impl PatroniCluster {
    /// Starts etcd, bootstraps `n0` as the leader, has the other nodes clone it and stream
    /// from it (one of them synchronous in `synchronous_mode`), then starts HAProxy and
    /// waits until it routes a writable connection. Call [`tools_or_skip`] first.
    pub async fn start(options: PatroniOptions) -> Self {
        assert!(
            !(options.first_node_in_netns && options.replication_forwarders),
            "one cut at a time"
        );
        let bin_dir = missing_tools(options.first_node_in_netns).expect("tools_or_skip first");
        let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
        let dir = tempfile::Builder::new()
            .prefix("onecharge-patroni-")
            .tempdir()
            .expect("temp dir for the cluster");
        let netns = options.first_node_in_netns.then(|| {
            let bytes = uuid::Uuid::new_v4();
            Netns::create(&tag, [bytes.as_bytes()[0], bytes.as_bytes()[1]])
        });
        let localhost = Ipv4Addr::LOCALHOST;
        let etcd_host = netns.as_ref().map_or(localhost, |n| n.etcd);
        let outer_host = netns.as_ref().map_or(localhost, |n| n.outer);

        let ports: Vec<(u16, u16)> = (0..options.etcd_members)
            .map(|_| (free_port(), free_port()))
            .collect();
        let initial_cluster: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("e{i}=http://{etcd_host}:{peer}"))
            .collect();
        let etcd: Vec<EtcdMember> = ports
            .iter()
            .enumerate()
            .map(|(i, &(client_port, peer_port))| {
                let member_dir = dir.path().join(format!("etcd{i}"));
                std::fs::create_dir_all(&member_dir).expect("etcd dir");
                let client = format!("http://{etcd_host}:{client_port}");
                let peer = format!("http://{etcd_host}:{peer_port}");
                let args = [
                    "--name",
                    &format!("e{i}"),
                    "--data-dir",
                    &member_dir.join("data").display().to_string(),
                    "--listen-client-urls",
                    &client,
                    "--advertise-client-urls",
                    &client,
                    "--listen-peer-urls",
                    &peer,
                    "--initial-advertise-peer-urls",
                    &peer,
                    "--initial-cluster",
                    &initial_cluster.join(","),
                    "--initial-cluster-state",
                    "new",
                    "--initial-cluster-token",
                    &format!("onecharge-{tag}"),
                ]
                .map(str::to_owned)
                .to_vec();
                EtcdMember {
                    name: format!("e{i}"),
                    client_port,
                    peer_port,
                    dir: member_dir,
                    args,
                    child: None,
                }
            })
            .collect();

        let scope = format!("onecharge-{tag}");
        let etcd_hosts: Vec<String> = etcd
            .iter()
            .map(|m| format!("{etcd_host}:{}", m.client_port))
            .collect();
        let mut nodes = Vec::new();
        assert!((2..=3).contains(&options.nodes), "2 or 3 nodes");
        for i in 0..options.nodes {
            let inside = i == 0 && netns.is_some();
            let host = match &netns {
                Some(n) if inside => n.inner,
                _ => outer_host,
            };
            let node_dir = dir.path().join(format!("n{i}"));
            std::fs::create_dir_all(&node_dir).expect("node dir");
            let pg_port = free_port();
            let rest_port = free_port();
            let forwarder = if options.replication_forwarders {
                Some(Forwarder::start(std::net::SocketAddr::from((host, pg_port))).await)
            } else {
                None
            };
            let connect_port = forwarder.as_ref().map_or(pg_port, Forwarder::port);
            let config = node_dir.join("patroni.yml");
            let text = patroni_config(&PatroniConfig {
                scope: &scope,
                name: &format!("n{i}"),
                host,
                pg_port,
                connect_port,
                rest_port,
                dir: &node_dir,
                bin_dir: &bin_dir,
                etcd_hosts: &etcd_hosts,
                options: &options,
            });
            std::fs::write(&config, text).expect("patroni config");
            nodes.push(PatroniNode {
                name: format!("n{i}"),
                host,
                pg_port,
                rest_port,
                dir: node_dir,
                config,
                prefix: if inside {
                    netns.as_ref().expect("netns").prefix()
                } else {
                    Vec::new()
                },
                patroni: None,
                forwarder,
            });
        }
        for node in &nodes {
            chown_to_postgres(&node.dir);
        }
        // The processes running as `postgres` must reach their directories.
        set_mode(dir.path(), 0o755);

        let haproxy_port = free_port();
        // reqwest's client needs the process's rustls provider, as onecharge's do.
        onecharge::config::tls::install_crypto_provider();
        let mut cluster = Self {
            scope,
            options,
            nodes,
            etcd,
            haproxy: None,
            haproxy_port,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .no_proxy()
                .build()
                .expect("http client"),
            netns,
            keep: false,
            dir: Some(dir),
        };
        // Spawned once the cluster owns them: whatever fails from here, its drop stops them.
        for member in &mut cluster.etcd {
            member.spawn();
        }
        cluster.wait_for_etcd().await;
        cluster.nodes[0].spawn();
        cluster.wait_for_primary("n0").await;
        for replica in &mut cluster.nodes[1..] {
            replica.spawn();
        }
        let replicas = cluster.nodes.len() - 1;
        cluster.wait_until_replicas_stream("n0", replicas).await;
        cluster.start_haproxy();
        cluster.wait_until_routed_to("n0").await;
        cluster
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("cluster dir").path()
    }

    pub fn node(&self, name: &str) -> &PatroniNode {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    fn node_mut(&mut self, name: &str) -> &mut PatroniNode {
        self.nodes
            .iter_mut()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    /// The address onecharge connects to: HAProxy's, which leads to the leader.
    pub fn database_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.haproxy_port)
    }

    fn start_haproxy(&mut self) {
        let servers: Vec<String> = self
            .nodes
            .iter()
            .map(|n| {
                format!(
                    "    server {} {}:{} check port {}",
                    n.name, n.host, n.pg_port, n.rest_port
                )
            })
            .collect();
        // Patroni's example configuration, with checks every second: a node answering
        // `OPTIONS /primary` with 200 (no body to read) takes connections; one that stops answering so is marked down
        // after two checks and its sessions are cut (`on-marked-down shutdown-sessions`), so
        // nothing stays connected to a node that is no longer the primary.
        let config = format!(
            "global\n    maxconn 400\n    log stderr format raw local0 notice\n    \
             stats socket {} mode 600 level user\n\n\
             defaults\n    log global\n    mode tcp\n    retries 2\n    timeout client 30m\n    \
             timeout connect 2s\n    timeout server 30m\n    timeout check 2s\n\n\
             listen primary\n    bind 127.0.0.1:{}\n    option httpchk OPTIONS /primary\n    \
             http-check expect status 200\n    \
             default-server inter 1s fall 2 rise 1 on-marked-down shutdown-sessions\n{}\n",
            self.dir().join("haproxy.sock").display(),
            self.haproxy_port,
            servers.join("\n")
        );
        let path = self.dir().join("haproxy.cfg");
        std::fs::write(&path, config).expect("haproxy config");
        let log = log_file(&self.dir().join("haproxy.log"));
        let child = Command::new(on_path("haproxy").expect("haproxy"))
            .args(["-db", "-f"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("start haproxy");
        self.haproxy = Some(child);
    }

    async fn wait_for_etcd(&mut self) {
        let started = Instant::now();
        let dir = self.dir().display().to_string();
        let host = self.netns.as_ref().map_or(Ipv4Addr::LOCALHOST, |n| n.etcd);
        for i in 0..self.etcd.len() {
            let url = format!("http://{host}:{}/health", self.etcd[i].client_port);
            loop {
                let healthy = match self.http.get(&url).send().await {
                    Ok(response) => response.text().await.unwrap_or_default().contains("true"),
                    Err(_) => false,
                };
                if healthy {
                    break;
                }
                let member = &mut self.etcd[i];
                // One that died (its port taken, say) is named with its last words at once.
                if let Some(Ok(Some(status))) = member.child.as_mut().map(Child::try_wait) {
                    let log =
                        std::fs::read_to_string(member.dir.join("etcd.log")).unwrap_or_default();
                    let last: Vec<&str> = log.lines().rev().take(5).collect();
                    panic!(
                        "etcd {} exited ({status}); logs in {dir}; its last lines: {last:?}",
                        member.name
                    );
                }
                assert!(
                    started.elapsed() < DEADLINE,
                    "etcd {} is not healthy; logs in {dir}",
                    member.name
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// GET `path` of `node`'s REST API: its status and body, `None` when it does not answer.
    pub async fn rest(&self, node: &str, path: &str) -> Option<(u16, String)> {
        let response = self
            .http
            .get(self.node(node).rest(path))
            .send()
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.text().await.unwrap_or_default()))
    }

    /// Whether `node` answers `/primary` with 200: it holds the leader key and runs as the
    /// primary (what HAProxy checks).
    pub async fn is_primary(&self, node: &str) -> bool {
        matches!(self.rest(node, "/primary").await, Some((200, _)))
    }

    /// The cluster as Patroni's `/cluster` shows it, asked of the first running node that
    /// answers: its members (`name`, `role` leader / sync_standby / replica, `state`, …).
    pub async fn members(&self) -> Option<Value> {
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            if let Some((200, body)) = self.rest(&node.name, "/cluster").await {
                if let Ok(value) = serde_json::from_str::<Value>(&body) {
                    return Some(value);
                }
            }
        }
        None
    }

    /// `name → role` of every member the DCS knows.
    pub async fn roles(&self) -> HashMap<String, String> {
        let members = self.members().await.unwrap_or(Value::Null);
        members["members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                Some((
                    m["name"].as_str()?.to_owned(),
                    m["role"].as_str()?.to_owned(),
                ))
            })
            .collect()
    }

    /// The node whose Patroni answers `/primary` with 200, if one does.
    pub async fn primary(&self) -> Option<String> {
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            if self.is_primary(&node.name).await {
                return Some(node.name.clone());
            }
        }
        None
    }

    /// The replica the leader waits for in `synchronous_mode`, as the DCS says.
    pub async fn sync_standby(&self) -> Option<String> {
        self.roles()
            .await
            .into_iter()
            .find(|(_, role)| role == "sync_standby")
            .map(|(name, _)| name)
    }

    /// Waits until `node` answers `/primary` with 200.
    pub async fn wait_for_primary(&self, node: &str) {
        let started = Instant::now();
        while !self.is_primary(node).await {
            assert!(
                started.elapsed() < DEADLINE,
                "{node} did not become the primary; logs in {}:\n{}",
                self.dir().display(),
                tail(&self.node(node).log(), 30)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until a node other than `old` is the primary and returns it.
    pub async fn wait_for_new_primary(&self, old: &str, deadline: Duration) -> String {
        let started = Instant::now();
        loop {
            if let Some(new) = self.primary().await.filter(|n| n != old) {
                return new;
            }
            assert!(
                started.elapsed() < deadline,
                "no new primary after {old} within {deadline:?}; logs in {}",
                self.dir().display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `count` replicas stream from `primary` (`pg_stat_replication`), one of
    /// them `sync` when the cluster runs in `synchronous_mode`.
    pub async fn wait_until_replicas_stream(&self, primary: &str, count: usize) {
        let url = self.node(primary).url("postgres");
        let started = Instant::now();
        loop {
            let rows: Vec<(String, String, String)> = match sqlx::PgPool::connect(&url).await {
                Ok(pool) => {
                    let rows = sqlx::query_as(
                        "SELECT application_name, state, sync_state FROM pg_stat_replication",
                    )
                    .fetch_all(&pool)
                    .await
                    .unwrap_or_default();
                    pool.close().await;
                    rows
                }
                Err(_) => Vec::new(),
            };
            let streaming = rows.iter().filter(|(_, s, _)| s == "streaming").count();
            // In synchronous mode, the leader names its synchronous replica in the DCS too
            // (what Patroni promotes from), a moment after PostgreSQL reports it.
            let sync =
                rows.iter().any(|(_, _, s)| s == "sync") && self.sync_standby().await.is_some();
            if streaming >= count && (sync || !self.options.synchronous_mode) {
                return;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{count} replicas do not stream from {primary}: {rows:?}; logs in {}",
                self.dir().display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The node HAProxy routes a new connection to, when that connection reaches a writable
    /// primary: by the server's port.
    pub async fn routed_to(&self) -> Option<String> {
        let connect = sqlx::postgres::PgConnectOptions::new()
            .host("127.0.0.1")
            .port(self.haproxy_port)
            .username("postgres")
            .database("postgres");
        let mut conn = tokio::time::timeout(
            Duration::from_secs(2),
            sqlx::ConnectOptions::connect(&connect),
        )
        .await
        .ok()?
        .ok()?;
        let (port, writable): (i32, bool) =
            sqlx::query_as("SELECT inet_server_port(), NOT pg_is_in_recovery()")
                .fetch_one(&mut conn)
                .await
                .ok()?;
        let _ = sqlx::Connection::close(conn).await;
        writable
            .then(|| self.nodes.iter().find(|n| i32::from(n.pg_port) == port))
            .flatten()
            .map(|n| n.name.clone())
    }

    /// The servers HAProxy holds UP (its stats socket's `show stat`). At its start it holds
    /// every server UP until checks say otherwise.
    pub async fn haproxy_up(&self) -> Vec<String> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let Ok(mut socket) = tokio::net::UnixStream::connect(self.dir().join("haproxy.sock")).await
        else {
            return Vec::new();
        };
        if socket.write_all(b"show stat\n").await.is_err() {
            return Vec::new();
        }
        let mut csv = String::new();
        let _ = socket.read_to_string(&mut csv).await;
        // `# pxname,svname,…,status (18th),…`
        csv.lines()
            .filter(|l| l.starts_with("primary,"))
            .filter_map(|l| {
                let fields: Vec<&str> = l.split(',').collect();
                let (server, status) = (*fields.get(1)?, *fields.get(17)?);
                (server != "FRONTEND" && server != "BACKEND" && status.starts_with("UP"))
                    .then(|| server.to_owned())
            })
            .collect()
    }

    /// Waits until HAProxy holds `node` alone UP and routes a new connection to it,
    /// writable.
    pub async fn wait_until_routed_to(&self, node: &str) {
        let started = Instant::now();
        while self.haproxy_up().await != [node] || self.routed_to().await.as_deref() != Some(node) {
            assert!(
                started.elapsed() < DEADLINE,
                "HAProxy does not route to {node}; logs in {}",
                self.dir().display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The node's host is lost: SIGKILL of its Patroni and of its PostgreSQL.
    pub fn kill_node(&mut self, name: &str) {
        self.node_mut(name).kill();
    }

    /// Starts a killed node's Patroni again: it rejoins as a replica (rewound where it had
    /// commits the new leader lacks).
    pub fn start_node(&mut self, name: &str) {
        self.node_mut(name).spawn();
    }

    /// A planned switchover with `patronictl`, from `leader` to `candidate`; returns what
    /// it printed.
    pub fn switchover(&self, leader: &str, candidate: &str) -> String {
        run(
            on_path("patronictl")
                .expect("patronictl")
                .to_str()
                .expect("path"),
            &[
                "-c",
                self.node(leader).config.to_str().expect("path"),
                "switchover",
                "--leader",
                leader,
                "--candidate",
                candidate,
                "--force",
            ],
        )
    }

    /// SIGKILL of etcd member `i`.
    pub fn kill_etcd(&mut self, i: usize) {
        self.etcd[i].kill();
    }

    /// Starts etcd member `i` again on its data.
    pub fn start_etcd(&mut self, i: usize) {
        self.etcd[i].spawn();
    }

    /// Node `n0` (in its network namespace) loses etcd, or gets it back; HAProxy, the other
    /// nodes and onecharge still reach it.
    pub fn cut_from_etcd(&self, cut: bool) {
        self.netns
            .as_ref()
            .expect("first_node_in_netns")
            .route_to_etcd(cut);
    }

    /// Replication stops (every forwarder points nowhere and cuts what it carried), or
    /// resumes.
    pub fn cut_replication(&self, cut: bool) {
        for node in &self.nodes {
            let forwarder = node.forwarder.as_ref().expect("replication_forwarders");
            let target = std::net::SocketAddr::from((node.host, node.pg_port));
            forwarder.point_at((!cut).then_some(target));
        }
    }

    /// Where the logs are, for a failure message.
    pub fn logs(&self) -> PathBuf {
        self.dir().to_owned()
    }

    /// Keeps the directory (every member's log and data) when the cluster is dropped.
    pub fn keep_logs(&mut self) {
        self.keep = true;
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        if let Some(mut haproxy) = self.haproxy.take() {
            let _ = haproxy.kill();
            let _ = haproxy.wait();
        }
        for node in &mut self.nodes {
            node.kill();
        }
        for member in &mut self.etcd {
            member.kill();
        }
        self.netns.take();
        if std::thread::panicking() || self.keep {
            if let Some(dir) = self.dir.take() {
                eprintln!(
                    "the Patroni cluster's logs are kept in {}",
                    dir.keep().display()
                );
            }
        }
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

struct PatroniConfig<'a> {
    scope: &'a str,
    name: &'a str,
    host: Ipv4Addr,
    pg_port: u16,
    connect_port: u16,
    rest_port: u16,
    dir: &'a Path,
    bin_dir: &'a Path,
    etcd_hosts: &'a [String],
    options: &'a PatroniOptions,
}

/// One node's Patroni configuration (JSON, which is YAML). Trust authentication on
/// loopback; the `postgres` superuser replicates and rewinds; PostgreSQL's socket in the
/// node's directory.
fn patroni_config(c: &PatroniConfig) -> String {
    let hba = [
        "local all all trust",
        "host all all 127.0.0.0/8 trust",
        "host replication all 127.0.0.0/8 trust",
    ];
    let config = json!({
        "scope": c.scope,
        "namespace": "/onecharge-test/",
        "name": c.name,
        "log": {"level": "INFO"},
        "restapi": {
            "listen": format!("{}:{}", c.host, c.rest_port),
            "connect_address": format!("{}:{}", c.host, c.rest_port),
        },
        "etcd3": {"hosts": c.etcd_hosts},
        "bootstrap": {
            "dcs": {
                "ttl": TTL.as_secs(),
                "loop_wait": LOOP_WAIT.as_secs(),
                "retry_timeout": RETRY_TIMEOUT.as_secs(),
                "maximum_lag_on_failover": c.options.maximum_lag_on_failover,
                "synchronous_mode": c.options.synchronous_mode,
                "synchronous_mode_strict": c.options.synchronous_mode_strict,
                "postgresql": {
                    "use_pg_rewind": true,
                    "use_slots": true,
                    "parameters": {
                        "max_connections": 100,
                        "max_wal_senders": 10,
                        "max_replication_slots": 10,
                        "wal_log_hints": "on",
                        "wal_keep_size": "128MB",
                        "shared_buffers": "32MB",
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
        },
        "postgresql": {
            "listen": format!("{}:{}", c.host, c.pg_port),
            "connect_address": format!("{}:{}", c.host, c.connect_port),
            "data_dir": c.dir.join("data"),
            "bin_dir": c.bin_dir,
            "pgpass": c.dir.join("pgpass"),
            "authentication": {
                "superuser": {"username": "postgres"},
                "replication": {"username": "postgres"},
                "rewind": {"username": "postgres"},
            },
            "parameters": {"unix_socket_directories": c.dir},
            "pg_hba": hba,
        },
        "tags": {
            "nofailover": false,
            "noloadbalance": false,
            "clonefrom": false,
            "nosync": false,
        },
    });
    serde_json::to_string_pretty(&config).expect("json")
}
