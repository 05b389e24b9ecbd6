//! Several real `onecharge serve` processes (the binary cargo built) on one database and one
//! broker: started, SIGKILLed, restarted, supervised and finally stopped with SIGTERM.
//! Dropping the fleet SIGKILLs whatever still runs.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::support;

/// A `onecharge` command (see [`support::onecharge`]) reading the soak's configuration file,
/// logging at `SOAK_LOG` (default `info,async_nats=warn,sqlx=warn`) in plain text.
pub fn onecharge(config: &Path) -> Command {
    let mut command = support::onecharge();
    command
        .env("NO_COLOR", "1")
        .env(
            "RUST_LOG",
            std::env::var("SOAK_LOG").unwrap_or_else(|_| "info,async_nats=warn,sqlx=warn".into()),
        )
        .arg("--config")
        .arg(config);
    command
}

struct ServeProcess {
    child: Option<Child>,
    /// Where its webhook listener binds, every generation (`ONECHARGE_WEBHOOK_ADDR`).
    webhook_addr: Option<SocketAddr>,
    /// Where its admin listener binds (`/readyz`, `/metrics`); a free port when `None`.
    admin_addr: Option<SocketAddr>,
    generation: u32,
    log: PathBuf,
}

/// The serve processes and what happened to them.
pub struct Fleet {
    config: PathBuf,
    log_dir: PathBuf,
    processes: Vec<ServeProcess>,
    /// SIGKILLs the soak sent.
    pub kills: usize,
    /// Processes that ended without being killed, with their exit status and log file;
    /// the fleet restarts them, as a supervisor would.
    pub unexpected_exits: Vec<String>,
}

impl Fleet {
    /// Starts `count` processes running every role; process `i` listens for webhooks on
    /// `webhook_addrs[i]` and for the admin API on `admin_addrs[i]` when there is one.
    pub fn start(
        config: &Path,
        log_dir: &Path,
        count: usize,
        webhook_addrs: &[SocketAddr],
        admin_addrs: &[SocketAddr],
    ) -> Self {
        let mut fleet = Self {
            config: config.to_owned(),
            log_dir: log_dir.to_owned(),
            processes: Vec::new(),
            kills: 0,
            unexpected_exits: Vec::new(),
        };
        for index in 0..count {
            fleet.processes.push(ServeProcess {
                child: None,
                webhook_addr: webhook_addrs.get(index).copied(),
                admin_addr: admin_addrs.get(index).copied(),
                generation: 0,
                log: PathBuf::new(),
            });
            fleet.spawn(index);
        }
        fleet
    }

    pub fn len(&self) -> usize {
        self.processes.len()
    }

    fn spawn(&mut self, index: usize) {
        let process = &mut self.processes[index];
        process.generation += 1;
        process.log = self
            .log_dir
            .join(format!("serve-{index}.{}.log", process.generation));
        let log = File::create(&process.log).expect("serve log file");
        let mut command = onecharge(&self.config);
        if let Some(addr) = process.webhook_addr {
            command.env("ONECHARGE_WEBHOOK_ADDR", addr.to_string());
        }
        let admin = process
            .admin_addr
            .map_or_else(|| "127.0.0.1:0".to_owned(), |addr| addr.to_string());
        let child = command
            .args(["serve", "--admin-addr", &admin])
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("start onecharge serve");
        process.child = Some(child);
    }

    /// SIGKILLs process `index` (no drain, no goodbye: a crash) and reaps it.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.processes[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
            self.kills += 1;
        }
    }

    /// Starts process `index` again (a new generation with its own log file).
    pub fn restart(&mut self, index: usize) {
        assert!(self.processes[index].child.is_none());
        self.spawn(index);
    }

    /// Restarts every process that ended on its own, noting why it ended.
    pub fn supervise(&mut self) {
        for index in 0..self.processes.len() {
            let exited = match self.processes[index].child.as_mut() {
                Some(child) => child.try_wait().expect("try_wait"),
                None => None,
            };
            if let Some(status) = exited {
                self.processes[index].child = None;
                let log = &self.processes[index].log;
                self.unexpected_exits.push(format!(
                    "serve-{index} ended by itself ({status}); last log line: {}",
                    last_line(log)
                ));
                self.spawn(index);
            }
        }
    }

    /// Waits until every process logged that it is serving: only then has it installed its
    /// SIGTERM handler (a process still starting dies of the signal with nothing in hand,
    /// which says nothing about draining). Restarts processes that end meanwhile.
    pub async fn wait_until_serving(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            self.supervise();
            let starting: Vec<&PathBuf> = self
                .processes
                .iter()
                .map(|p| &p.log)
                .filter(|log| {
                    !std::fs::read_to_string(log)
                        .unwrap_or_default()
                        .contains("onecharge serving")
                })
                .collect();
            if starting.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "serve processes still starting after {timeout:?}: {starting:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERMs every process and waits for each to drain and exit, SIGKILLing those still
    /// running after `timeout`. Returns each process's exit status (`None`: it had to be
    /// killed) with its log file.
    pub async fn terminate(&mut self, timeout: Duration) -> Vec<(Option<ExitStatus>, PathBuf)> {
        for process in &self.processes {
            if let Some(child) = &process.child {
                support::sigterm(child.id());
            }
        }
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        for process in &mut self.processes {
            let Some(mut child) = process.child.take() else {
                continue;
            };
            let status = loop {
                if let Some(status) = child.try_wait().expect("try_wait") {
                    break Some(status);
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            out.push((status, process.log.clone()));
        }
        out
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for process in &mut self.processes {
            if let Some(mut child) = process.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The last non-empty line of a log file, for a one-line report.
pub fn last_line(path: &Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| format!("(no output in {})", path.display()))
}

/// Every serve log in `dir` (each generation of each process, `serve-<index>.<generation>.log`):
/// its file name and its text.
fn serve_logs(dir: &Path) -> Vec<(String, String)> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.starts_with("serve-").then(|| {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                (name, text)
            })
        })
        .collect()
}

/// Lines of the serve logs in `dir` that report a panic.
pub fn panics(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (name, text) in serve_logs(dir) {
        for line in text.lines().filter(|l| l.contains("panicked")) {
            out.push(format!("{name}: {line}"));
        }
    }
    out
}

/// Lines of the serve logs in `dir` that contain `text`.
pub fn count_lines(dir: &Path, text: &str) -> usize {
    serve_logs(dir)
        .iter()
        .map(|(_, log)| log.lines().filter(|l| l.contains(text)).count())
        .sum()
}

/// The lines of the serve logs in `dir` that contain `text`.
pub fn lines_with(dir: &Path, text: &str) -> Vec<String> {
    serve_logs(dir)
        .iter()
        .flat_map(|(_, log)| log.lines().filter(|l| l.contains(text)).map(str::to_owned))
        .collect()
}
