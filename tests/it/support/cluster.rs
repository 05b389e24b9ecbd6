//! A three-node NATS JetStream cluster for tests: three `nats-server` 2.9 children on free
//! loopback ports, routed to each other, each with its own store directory, killed on drop.
//! Like `tests/soak_support/nats.rs`, but clustered, so that replicated streams and stream
//! leader elections can be exercised.
#![allow(dead_code)]

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Where Debian puts the server; `ONECHARGE_TEST_NATS_SERVER` points elsewhere.
const DEFAULT_NATS_SERVER: &str = "/usr/sbin/nats-server";

/// Longest wait for the cluster to elect a JetStream meta leader or a stream leader.
const DEADLINE: Duration = Duration::from_secs(30);

struct Node {
    name: String,
    port: u16,
    cluster_port: u16,
    store_dir: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
}

/// Three routed servers named `n0`, `n1`, `n2`.
pub struct NatsCluster {
    nodes: Vec<Node>,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl NatsCluster {
    /// Starts the three servers and waits until JetStream answers through the cluster (a
    /// meta leader is elected).
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("cluster temp dir");
        let nodes = (0..3)
            .map(|i| Node {
                name: format!("n{i}"),
                port: free_port(),
                cluster_port: free_port(),
                store_dir: dir.path().join(format!("n{i}-js")),
                log_path: dir.path().join(format!("n{i}.log")),
                child: None,
            })
            .collect();
        let mut cluster = Self { nodes, dir };
        for i in 0..3 {
            cluster.start_node(i);
        }
        for i in 0..3 {
            cluster.wait_listening(i).await;
        }
        cluster.wait_for_meta_leader().await;
        cluster
    }

    /// The URL of node `i`; a client connected to one learns the others from the server.
    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].port)
    }

    /// Node names in order (`n0`, `n1`, `n2`).
    pub fn names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    fn start_node(&mut self, i: usize) {
        let routes: Vec<String> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, n)| format!("nats://127.0.0.1:{}", n.cluster_port))
            .collect();
        let node = &mut self.nodes[i];
        assert!(node.child.is_none(), "node {} is still running", node.name);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log_path)
            .expect("nats-server log file");
        let binary = std::env::var("ONECHARGE_TEST_NATS_SERVER")
            .unwrap_or_else(|_| DEFAULT_NATS_SERVER.to_owned());
        let child = Command::new(&binary)
            .args(["-a", "127.0.0.1", "-p", &node.port.to_string()])
            .args(["-n", &node.name, "--cluster_name", "onecharge-test"])
            .args([
                "--cluster",
                &format!("nats://127.0.0.1:{}", node.cluster_port),
            ])
            .args(["--routes", &routes.join(",")])
            .arg("-js")
            .arg("-sd")
            .arg(&node.store_dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
        node.child = Some(child);
    }

    async fn wait_listening(&self, i: usize) {
        let node = &self.nodes[i];
        let deadline = Instant::now() + DEADLINE;
        while tokio::net::TcpStream::connect(("127.0.0.1", node.port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "nats-server {} did not listen on port {} in time; see {}",
                node.name,
                node.port,
                node.log_path.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A JetStream API request through any running node; `None` while nobody answers or the
    /// answer is an error (no meta leader yet, no stream leader yet).
    pub async fn api(&self, subject: &str) -> Option<Value> {
        let i = self.nodes.iter().position(|n| n.child.is_some())?;
        let client = async_nats::connect(self.url(i)).await.ok()?;
        let reply = tokio::time::timeout(
            Duration::from_secs(2),
            client.request(subject.to_owned(), "".into()),
        )
        .await
        .ok()?
        .ok()?;
        let value: Value = serde_json::from_slice(&reply.payload).ok()?;
        value.get("error").is_none().then_some(value)
    }

    async fn wait_for_meta_leader(&self) {
        let deadline = Instant::now() + DEADLINE;
        while self.api("$JS.API.INFO").await.is_none() {
            assert!(
                Instant::now() < deadline,
                "the cluster elected no JetStream meta leader in time; logs in {}",
                self.dir.path().display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The stream's info once it has a leader (waits for one, with a deadline).
    pub async fn stream_info(&self, stream: &str) -> Value {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(info) = self.api(&format!("$JS.API.STREAM.INFO.{stream}")).await {
                if info["cluster"]["leader"].as_str().is_some() {
                    return info;
                }
            }
            assert!(
                Instant::now() < deadline,
                "stream {stream} has no leader in time"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The name of the server leading `stream` now.
    pub async fn stream_leader(&self, stream: &str) -> String {
        self.stream_info(stream).await["cluster"]["leader"]
            .as_str()
            .expect("a leader")
            .to_owned()
    }

    /// Asks the stream's leader to step down; another replica is elected.
    pub async fn step_down(&self, stream: &str) {
        let answer = self
            .api(&format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}"))
            .await;
        assert!(
            answer.is_some_and(|a| a["success"] == true),
            "the leader of {stream} did not step down"
        );
    }

    /// SIGKILLs the named server, as a crash would.
    pub fn kill(&mut self, name: &str) {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no server {name}"));
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
