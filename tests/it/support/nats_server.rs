//! The soak's own `nats-server`: a child process on a free port with JetStream in a
//! directory of the soak's, so the soak can kill and restart the broker without disturbing
//! any other test. Dropping the guard kills the server.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian puts the server; `ONECHARGE_SOAK_NATS_SERVER` points elsewhere.
const DEFAULT_NATS_SERVER: &str = "/usr/sbin/nats-server";

/// A running (or, between `kill` and `start_again`, stopped) nats-server.
pub struct NatsServer {
    port: u16,
    store_dir: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
}

impl NatsServer {
    /// Starts a server on a free loopback port, storing JetStream data under `dir`, and
    /// waits until it accepts connections.
    pub async fn start(dir: &Path) -> Self {
        let mut server = Self {
            port: super::free_port(),
            store_dir: dir.join("jetstream"),
            log_path: dir.join("nats-server.log"),
            child: None,
        };
        server.start_again().await;
        server
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

    /// Starts the server again on the same port with the same store directory, so streams,
    /// consumers and their state come back as a restarted production broker's would.
    pub async fn start_again(&mut self) {
        assert!(self.child.is_none(), "the nats-server is still running");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("nats-server log file");
        let binary = std::env::var("ONECHARGE_SOAK_NATS_SERVER")
            .unwrap_or_else(|_| DEFAULT_NATS_SERVER.to_owned());
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
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen on port {} within 15s; see {}",
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
