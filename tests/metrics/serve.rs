//! A `onecharge serve` process of a test's own, and what its `/metrics` exposes. A process
//! of its own has its own recorder and its own database-failover state (both are the
//! process's), so no other test of this binary moves them meanwhile.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::nats_server::free_port;
use crate::support::{onecharge, sigterm, TestEnv};

/// A `onecharge serve` process of the test's own, its log in a file.
pub(crate) struct Serve {
    child: Child,
    admin: String,
    log: tempfile::NamedTempFile,
}

impl Serve {
    /// `serve --roles <roles>` (all roles when empty) against `env`'s database and
    /// namespace, the admin HTTP on a free loopback port, with `extra` settings.
    pub(crate) fn start(env: &TestEnv, roles: &[&str], extra: &[(&str, &str)]) -> Self {
        let admin = format!("127.0.0.1:{}", free_port());
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut command = onecharge();
        command.arg("serve");
        if !roles.is_empty() {
            command.args(["--roles", &roles.join(",")]);
        }
        let child = command
            .env("RUST_LOG", "warn")
            .env("ONECHARGE_DATABASE_URL", &env.settings.database_url)
            .env("ONECHARGE_NATS_URL", &env.settings.nats_url)
            .env("ONECHARGE_NAMESPACE", &env.settings.namespace)
            .env("ONECHARGE_INTAKE__CONSUMER", &env.settings.intake.consumer)
            .env("ONECHARGE_INTAKE__RETRY_MIN_DELAY", "50ms")
            .env("ONECHARGE_INTAKE__RETRY_MAX_DELAY", "200ms")
            .env("ONECHARGE_EXECUTOR__POLL_INTERVAL", "50ms")
            // The stream audit's first pass waits one interval: a short one shows its gauge.
            .env("ONECHARGE_INTAKE__AUDIT_INTERVAL", "200ms")
            .env("ONECHARGE_ADMIN_ADDR", &admin)
            .envs(extra.iter().copied())
            .stdout(Stdio::null())
            .stderr(File::create(log.path()).unwrap())
            .spawn()
            .expect("run onecharge serve");
        Self { child, admin, log }
    }

    /// Scrapes `/metrics` until `condition` holds of it (the process may still be
    /// starting); panics after 60 s with the process's log.
    pub(crate) async fn wait_until(
        &mut self,
        what: &str,
        condition: impl Fn(&Exposed) -> bool,
    ) -> Exposed {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("serve exited ({status}) before {what}:\n{}", self.log());
            }
            if let Some(scrape) = self.scrape().await {
                if condition(&scrape) {
                    return scrape;
                }
            }
            assert!(
                Instant::now() < deadline,
                "not within 60 s: {what}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) async fn scrape(&self) -> Option<Exposed> {
        let response = reqwest::get(format!("http://{}/metrics", self.admin))
            .await
            .ok()?;
        (response.status() == 200).then_some(())?;
        Some(Exposed::parse(&response.text().await.ok()?))
    }

    /// The last scrape, then SIGTERM; the process must exit 0 within the drain.
    pub(crate) async fn stop(mut self) -> Exposed {
        let last = self.wait_until("a last scrape", |_| true).await;
        assert!(sigterm(self.child.id()));
        let deadline = Instant::now() + Duration::from_secs(40);
        let exit = loop {
            if let Some(exit) = self.child.try_wait().unwrap() {
                break exit;
            }
            assert!(
                Instant::now() < deadline,
                "serve still runs 40 s after SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            exit.success(),
            "serve exits 0 after SIGTERM: {exit}\n{}",
            self.log()
        );
        last
    }

    /// `GET /readyz`: its status and body.
    pub(crate) async fn readyz(&self) -> (u16, String) {
        let response = reqwest::get(format!("http://{}/readyz", self.admin))
            .await
            .expect("GET /readyz");
        (response.status().as_u16(), response.text().await.unwrap())
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Serve {
    /// A test that fails midway leaves no `serve` behind.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One sample line: metric name, labels, value.
pub(crate) type Sample = (String, Vec<(String, String)>, f64);

/// What `/metrics` exposes: each metric's labels and the values each label took.
#[derive(Debug, Default)]
pub(crate) struct Exposed {
    pub(crate) metrics: HashMap<String, HashMap<String, HashSet<String>>>,
    pub(crate) samples: Vec<Sample>,
}

impl Exposed {
    /// Reads a Prometheus text exposition.
    pub(crate) fn parse(text: &str) -> Self {
        let mut exposed = Self::default();
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, label_pairs(rest.strip_suffix('}').unwrap())),
                None => (series, Vec::new()),
            };
            let known = exposed.metrics.entry(name.to_owned()).or_default();
            for (label, value) in &labels {
                known
                    .entry(label.clone())
                    .or_default()
                    .insert(value.clone());
            }
            let value = value.parse().expect("a sample value");
            exposed.samples.push((name.to_owned(), labels, value));
        }
        exposed
    }

    /// The value of the one series of `name` with `labels`, `None` when none is exposed
    /// (where [`Exposed::value`] would say 0).
    pub(crate) fn labelled(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<f64> = self.matching(name, labels).collect();
        (found.len() == 1).then(|| found[0])
    }

    /// The sum of `name`'s samples whose labels include `labels`; 0 when there is none.
    pub(crate) fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).sum()
    }

    /// The values of `name`'s samples whose labels include `labels`.
    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = f64> + 'a {
        self.samples
            .iter()
            .filter(move |(n, found, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| found.iter().any(|(fk, fv)| fk == k && fv == v))
            })
            .map(|(_, _, value)| *value)
    }
}

/// `a="x",b="y"` as pairs (values unescaped).
fn label_pairs(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut rest = text;
    while let Some((label, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => value.extend(chars.next().map(|(_, c)| c)),
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        pairs.push((label.trim_start_matches(',').trim().to_owned(), value));
        rest = &after[end..];
    }
    pairs
}
