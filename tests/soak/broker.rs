//! The soak's broker: one `nats-server`, restarted by SIGKILL, or a three-node JetStream
//! cluster with R3 streams whose stream leaders are SIGKILLed one at a time (issue 16).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::cluster::NatsCluster;
use crate::support::nats_server::NatsServer;

/// Which broker a soak runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One server; a fault kills it and starts it again on the same store.
    Single,
    /// Three routed servers and streams with three replicas; a fault kills the server
    /// leading a stream and starts it again once the stream has a new leader.
    Cluster,
}

pub enum SoakBroker {
    Single(NatsServer),
    Cluster {
        cluster: NatsCluster,
        /// The server killed by the previous fault: the next one kills another.
        last_victim: Option<String>,
    },
}

impl SoakBroker {
    /// Starts the broker with its store directories and logs in `dir`.
    pub async fn start(dir: &Path, topology: Topology) -> Self {
        match topology {
            Topology::Single => Self::Single(NatsServer::start(dir).await),
            Topology::Cluster => Self::Cluster {
                cluster: NatsCluster::start_in(dir).await,
                last_victim: None,
            },
        }
    }

    /// `nats_url` for the serve processes: the server, or all three comma-separated.
    pub fn url(&self) -> String {
        match self {
            Self::Single(server) => server.url(),
            Self::Cluster { cluster, .. } => cluster.urls(),
        }
    }

    /// The servers a client may connect to.
    pub fn urls(&self) -> Vec<String> {
        self.url().split(',').map(str::to_owned).collect()
    }

    /// `streams.replicas` for `setup`, and the command stream's replicas.
    pub fn replicas(&self) -> usize {
        match self {
            Self::Single(_) => 1,
            Self::Cluster { .. } => 3,
        }
    }

    /// One broker fault, number `k` of the run: the single server SIGKILLed, or on the
    /// cluster the server leading `streams[k % streams.len()]` (another server when that one
    /// was the previous victim); it stays down for `down` and is started again. On the
    /// cluster this returns only once every stream has a leader and all three replicas
    /// current again, so the next fault never costs a stream its quorum. Returns what was
    /// done, for the soak's log.
    pub async fn fault(&mut self, k: usize, down: Duration, streams: &[String]) -> String {
        match self {
            Self::Single(server) => {
                server.kill();
                tokio::time::sleep(down).await;
                server.start_again().await;
                format!("broker killed, down for {down:?}")
            }
            Self::Cluster {
                cluster,
                last_victim,
            } => {
                let mut leaders = Vec::new();
                for stream in streams {
                    leaders.push((stream.clone(), cluster.stream_leader(stream).await));
                }
                let wanted = &leaders[k % leaders.len()].1;
                let victim = if Some(wanted) != last_victim.as_ref() {
                    wanted.clone()
                } else {
                    leaders
                        .iter()
                        .map(|(_, leader)| leader)
                        .chain(cluster.names().iter())
                        .find(|name| Some(*name) != last_victim.as_ref())
                        .expect("another server")
                        .clone()
                };
                let led: Vec<&str> = leaders
                    .iter()
                    .filter(|(_, leader)| *leader == victim)
                    .map(|(stream, _)| stream.as_str())
                    .collect();
                let consumer_leader = cluster
                    .consumer_leader(&streams[0], "onecharge-intake")
                    .await;
                let led_consumer = consumer_leader.as_deref() == Some(victim.as_str());
                cluster.kill(&victim);
                let killed = Instant::now();
                tokio::time::sleep(down).await;
                let new_leaders = {
                    let mut out = Vec::new();
                    for stream in led.iter() {
                        out.push(format!(
                            "{stream} → {}",
                            cluster.stream_leader(stream).await
                        ));
                    }
                    out
                };
                cluster.restart(&victim).await;
                let was_down = killed.elapsed();
                for stream in streams {
                    cluster.wait_until_current(stream).await;
                }
                *last_victim = Some(victim.clone());
                format!(
                    "server {victim} SIGKILLed (leader of {}{}), down for {was_down:.1?}; new leaders {}; all replicas current again",
                    if led.is_empty() {
                        "no stream".to_owned()
                    } else {
                        led.join(", ")
                    },
                    if led_consumer {
                        " and of the intake consumer"
                    } else {
                        ""
                    },
                    if new_leaders.is_empty() {
                        "-".to_owned()
                    } else {
                        new_leaders.join(", ")
                    }
                )
            }
        }
    }
}
