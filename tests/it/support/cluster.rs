//! A three-node NATS JetStream cluster for tests: three [`NatsServer`]s (`.ci/run`'s pinned
//! nats-server 2.15 by default, see [`super::nats_server::nats_server_bin`]) on free loopback
//! ports, routed to each other, each with its own store directory, killed on drop. Replicated
//! streams and stream leader elections can be exercised against it.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::nats_server::{free_port, NatsServer};

/// Longest wait for the cluster to elect a JetStream meta leader or a stream leader.
const DEADLINE: Duration = Duration::from_secs(30);

/// Three routed servers named `n0`, `n1`, `n2`.
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
    /// Where the store directories and logs are.
    dir: PathBuf,
    /// The temporary directory [`NatsCluster::start`] made, removed on drop.
    _temp: Option<tempfile::TempDir>,
}

impl NatsCluster {
    /// Starts the three servers in a temporary directory of their own and waits until
    /// JetStream answers through the cluster (a meta leader is elected).
    pub async fn start() -> Self {
        let temp = tempfile::tempdir().expect("cluster temp dir");
        let mut cluster = Self::start_in(temp.path()).await;
        cluster._temp = Some(temp);
        cluster
    }

    /// [`NatsCluster::start`] with the store directories (`n0-js`, …) and logs (`n0.log`, …)
    /// in `dir`, which the caller keeps (a soak keeps it when it fails).
    pub async fn start_in(dir: &Path) -> Self {
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let mut nodes: Vec<NatsServer> = (0..3)
            .map(|i| {
                let routes: Vec<String> = (0..3)
                    .filter(|j| *j != i)
                    .map(|j| format!("nats://127.0.0.1:{}", ports[j].1))
                    .collect();
                let name = format!("n{i}");
                let args = [
                    "-n",
                    &name,
                    "--cluster_name",
                    "onecharge-test",
                    "--cluster",
                    &format!("nats://127.0.0.1:{}", ports[i].1),
                    "--routes",
                    &routes.join(","),
                ];
                NatsServer::configured(
                    dir,
                    &name,
                    ports[i].0,
                    args.iter().map(OsString::from).collect(),
                )
            })
            .collect();
        for node in &mut nodes {
            node.spawn();
        }
        for node in &nodes {
            node.wait_listening().await;
        }
        let cluster = Self {
            nodes,
            dir: dir.to_owned(),
            _temp: None,
        };
        cluster.wait_for_meta_leader().await;
        cluster.wait_for_three_peers().await;
        cluster
    }

    /// The URL of node `i`; a client connected to one learns the others from the server.
    pub fn url(&self, i: usize) -> String {
        self.nodes[i].url()
    }

    /// Every node's URL, comma-separated, as `nats_url` takes them.
    pub fn urls(&self) -> String {
        let urls: Vec<String> = self.nodes.iter().map(NatsServer::url).collect();
        urls.join(",")
    }

    /// Node names in order (`n0`, `n1`, `n2`).
    pub fn names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name().to_owned()).collect()
    }

    /// A JetStream API request through any running node; `None` while nobody answers or the
    /// answer is an error (no meta leader yet, no stream leader yet).
    pub async fn api(&self, subject: &str) -> Option<Value> {
        let i = self.nodes.iter().position(NatsServer::is_running)?;
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
                self.dir.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the meta leader knows all three servers: an R3 stream created before that
    /// is refused with "no suitable peers for placement" (seen). Creates and deletes a probe
    /// stream in memory until it can.
    async fn wait_for_three_peers(&self) {
        let deadline = Instant::now() + DEADLINE;
        let config = serde_json::json!({
            "name": "CLUSTER_PROBE",
            "subjects": ["cluster-probe"],
            "num_replicas": 3,
            "storage": "memory",
        });
        loop {
            if let Ok(client) = async_nats::connect(self.url(0)).await {
                let created = tokio::time::timeout(
                    Duration::from_secs(2),
                    client.request(
                        "$JS.API.STREAM.CREATE.CLUSTER_PROBE",
                        config.to_string().into(),
                    ),
                )
                .await;
                let answer: Option<Value> = match created {
                    Ok(Ok(reply)) => serde_json::from_slice(&reply.payload).ok(),
                    _ => None,
                };
                if answer.is_some_and(|a| a.get("error").is_none()) {
                    let _ = client
                        .request("$JS.API.STREAM.DELETE.CLUSTER_PROBE", "".into())
                        .await;
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the cluster could not place a stream on three servers in time; logs in {}",
                self.dir.display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
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

    /// The name of the server leading a consumer's replicas now, if one does.
    pub async fn consumer_leader(&self, stream: &str, consumer: &str) -> Option<String> {
        let info = self
            .api(&format!("$JS.API.CONSUMER.INFO.{stream}.{consumer}"))
            .await?;
        info["cluster"]["leader"].as_str().map(str::to_owned)
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
        self.node_mut(name).kill();
    }

    /// Starts the named server again on its port and store directory and waits until it
    /// accepts connections.
    pub async fn restart(&mut self, name: &str) {
        self.node_mut(name).start_again().await;
    }

    /// Names of the servers running now.
    pub fn running(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| n.name().to_owned())
            .collect()
    }

    /// Waits (with a deadline) until `stream` has a leader and both other replicas are
    /// online and current: only then can it lose another server without losing its quorum.
    pub async fn wait_until_current(&self, stream: &str) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let info = self.stream_info(stream).await;
            let replicas = info["cluster"]["replicas"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let current = replicas
                .iter()
                .filter(|r| r["current"] == true && r["offline"] != true)
                .count();
            if current + 1 == self.nodes.len() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "stream {stream} did not get all replicas current in time: {}",
                info["cluster"]
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn node_mut(&mut self, name: &str) -> &mut NatsServer {
        self.nodes
            .iter_mut()
            .find(|n| n.name() == name)
            .unwrap_or_else(|| panic!("no server {name}"))
    }
}
