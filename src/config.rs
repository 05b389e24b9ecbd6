//! Typed settings: defaults < `onecharge.toml` (or `--config`) < `ONECHARGE_*` environment <
//! command-line flags. A wrong value is a [`ConfigError`]: the process exits 2 with one line
//! naming the setting and what to fix. Secrets are [`SecretString`]s: they print as
//! `[REDACTED]` in every `Debug` and never appear in `--help`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

/// The file read when `--config` is not given, if it exists.
pub const DEFAULT_CONFIG_FILE: &str = "onecharge.toml";

/// A configuration the operator must fix. Its `Display` is the one line printed before exit 2.
#[derive(Debug, thiserror::Error)]
#[error("configuration error: {0}")]
pub struct ConfigError(pub String);

/// A command line that asks for something impossible (an invalid command to publish, a
/// status that does not exist). Also exits 2, with its one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Everything onecharge can be told. Field names are the TOML keys; the environment
/// variable is `ONECHARGE_` + the upper-case name, with `__` between section and key
/// (`ONECHARGE_INTAKE__BATCH_SIZE`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// PostgreSQL URL. `setup` creates the database when it is missing.
    pub database_url: String,
    /// NATS server URL.
    pub nats_url: String,
    /// Base URL of the payment gateway (contract §3).
    pub gateway_url: String,
    /// Bearer key for the gateway. Needed by the executor and reconciler only.
    #[serde(serialize_with = "redact", default)]
    pub gateway_api_key: Option<SecretString>,
    /// Where `serve` binds its admin HTTP.
    pub admin_addr: SocketAddr,
    /// When set, `/api/*` requires `Authorization: Bearer <admin_token>`.
    #[serde(serialize_with = "redact", default)]
    pub admin_token: Option<SecretString>,
    /// Prefix for stream names and subjects, so that several deployments (the demo, tests)
    /// can share one broker. Empty in production: the contract's names are used unchanged.
    pub namespace: String,
    /// `human` or `json` log lines.
    pub log_format: LogFormat,
    /// Where to send spans over OTLP/HTTP (protobuf), e.g. `http://collector:4318`; the
    /// exporter posts to `<endpoint>/v1/traces`. Unset (the default), no span leaves the
    /// process. Plain `http://` only: no TLS client is built in.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    pub intake: IntakeSettings,
    /// Longest wait for a TCP connection to the gateway. A connect failure means the
    /// request was never sent, so it is retried safely.
    #[serde(with = "humantime_serde", default = "default_gateway_connect_timeout")]
    pub gateway_connect_timeout: Duration,
    /// Longest wait for a whole gateway request. Past it the answer is ambiguous (the
    /// gateway may have charged) and the attempt goes to the reconciler.
    #[serde(with = "humantime_serde", default = "default_gateway_request_timeout")]
    pub gateway_request_timeout: Duration,
    /// How long the gateway remembers an idempotency key (contract §3: 24 h by default).
    /// Counted from an attempt's first gateway call.
    #[serde(with = "humantime_serde", default = "default_gateway_key_retention")]
    pub gateway_key_retention: Duration,
    /// Safety margin inside the key retention: once `gateway_key_retention` minus this has
    /// passed since the first call, onecharge never re-sends a charge for the attempt (the
    /// key may be forgotten and a re-send could charge twice); it looks up instead.
    #[serde(
        with = "humantime_serde",
        default = "default_gateway_key_retention_margin"
    )]
    pub gateway_key_retention_margin: Duration,
    /// The longest the gateway (and the bank behind it) may keep a request in progress.
    /// Until this much time has passed since an attempt's last send, an empty lookup or a
    /// `409` proves nothing (the send may still charge): the attempt is never called "not
    /// charged" nor handed to a person for that. Must be less than the key window
    /// (`gateway_key_retention` − `gateway_key_retention_margin`).
    #[serde(
        with = "humantime_serde",
        default = "default_gateway_max_processing_time"
    )]
    pub gateway_max_processing_time: Duration,
    #[serde(default)]
    pub executor: ExecutorSettings,
    #[serde(default)]
    pub relay: RelaySettings,
    #[serde(default)]
    pub purge: PurgeSettings,
    #[serde(default)]
    pub reconciler: ReconcilerSettings,
}

/// Reconciler settings: how ambiguous outcomes are looked up at the gateway.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReconcilerSettings {
    /// Delays between lookups that could not settle an attempt (the gateway failed to
    /// answer). The first lookup is made as soon as the attempt becomes `unknown`; after one
    /// failed lookup per entry here, the attempt goes to `needs_review`.
    #[serde(with = "duration_list")]
    pub schedule: Vec<Duration>,
    /// Attempts claimed per pass.
    pub batch_size: usize,
    /// How long an idle reconciler waits before the next pass.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// How long a claimed `unknown` attempt is held by one reconciler; if it dies mid-lookup,
    /// another may take the attempt after this.
    #[serde(with = "humantime_serde")]
    pub claim_hold: Duration,
}

impl Default for ReconcilerSettings {
    fn default() -> Self {
        let minutes = |m: u64| Duration::from_secs(m * 60);
        Self {
            schedule: vec![
                minutes(1),
                minutes(5),
                minutes(30),
                minutes(120),
                minutes(360),
                minutes(1440),
            ],
            batch_size: 32,
            poll_interval: Duration::from_secs(1),
            claim_hold: Duration::from_secs(120),
        }
    }
}

/// Executor settings: how attempts are claimed, leased and retried.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorSettings {
    /// Gateway calls one instance has in flight at once.
    pub concurrency: usize,
    /// Most attempts claimed by one query (never more than the free concurrency).
    pub batch_size: usize,
    /// How long a claim is exclusive. Must outlast a whole gateway call (connect plus
    /// request timeout): a lease that expires mid-call hands the attempt to the reconciler.
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// How long an idle executor waits before looking for due attempts again.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Gateway tries per attempt (credentials faults do not count); then the reconciler
    /// takes over.
    pub max_tries: u32,
    /// No retry is scheduled for an attempt older than this (since it was recorded); it
    /// goes to the reconciler instead.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
    /// First retry delay; it doubles (with jitter) up to `retry_max_delay`.
    #[serde(with = "humantime_serde")]
    pub retry_min_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub retry_max_delay: Duration,
    /// Delay before retrying after `409 idempotency_in_progress`.
    #[serde(with = "humantime_serde")]
    pub in_progress_delay: Duration,
    /// While the gateway rejects the credentials, one probe call is made this often.
    #[serde(with = "humantime_serde")]
    pub credentials_probe_interval: Duration,
    /// Consecutive gateway failures (unreachable, 5xx, timeouts) that open the circuit breaker.
    pub breaker_failure_threshold: u32,
    /// How long an open breaker stops all calls before one probe may test the gateway.
    #[serde(with = "humantime_serde")]
    pub breaker_cooldown: Duration,
}

impl Default for ExecutorSettings {
    fn default() -> Self {
        Self {
            concurrency: 16,
            batch_size: 32,
            lease: Duration::from_secs(60),
            poll_interval: Duration::from_millis(250),
            max_tries: 8,
            max_age: Duration::from_secs(3600),
            retry_min_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(300),
            in_progress_delay: Duration::from_secs(2),
            credentials_probe_interval: Duration::from_secs(30),
            breaker_failure_threshold: 5,
            breaker_cooldown: Duration::from_secs(30),
        }
    }
}

/// Outbox relay settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelaySettings {
    /// Outbox rows claimed and published per step.
    pub batch_size: usize,
    /// How long an idle relay waits before looking for unpublished events again.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Longest wait for JetStream to acknowledge one publish.
    #[serde(with = "humantime_serde")]
    pub publish_timeout: Duration,
}

impl Default for RelaySettings {
    fn default() -> Self {
        Self {
            batch_size: 128,
            poll_interval: Duration::from_millis(200),
            publish_timeout: Duration::from_secs(5),
        }
    }
}

/// Dedupe-row purge settings (`onecharge purge`, and the `purge` role of `serve`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PurgeSettings {
    /// How long a `processed_messages` row is kept. Must be at least the command stream's
    /// `max_age`: while the stream still holds a message, its dedupe row must exist, or a
    /// redelivery or replay of it would look new (the attempts table would still stop a
    /// second charge, but the message would no longer be a plain `duplicate`).
    #[serde(with = "humantime_serde")]
    pub dedupe_retention: Duration,
    /// How often `serve` purges.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Rows deleted per statement, so that a purge never holds many locks or a long
    /// transaction against intake.
    pub batch_size: usize,
}

impl Default for PurgeSettings {
    fn default() -> Self {
        Self {
            dedupe_retention: Duration::from_secs(14 * 24 * 3600),
            interval: Duration::from_secs(3600),
            batch_size: 1000,
        }
    }
}

/// A list of durations written like `["1m", "5m", "2h"]`.
mod duration_list {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(list: &[Duration], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            list.iter()
                .map(|d| humantime::format_duration(*d).to_string()),
        )
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|text| humantime::parse_duration(text).map_err(serde::de::Error::custom))
            .collect()
    }
}

fn default_gateway_connect_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_gateway_request_timeout() -> Duration {
    Duration::from_secs(20)
}

fn default_gateway_key_retention() -> Duration {
    Duration::from_secs(24 * 3600)
}

fn default_gateway_key_retention_margin() -> Duration {
    Duration::from_secs(3600)
}

fn default_gateway_max_processing_time() -> Duration {
    Duration::from_secs(10 * 60)
}

/// Intake consumer settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct IntakeSettings {
    /// Durable consumer name, also the first half of the dedupe key. Changing it makes every
    /// message the stream still holds look new to the dedupe table (the attempts table
    /// still stops a second charge); see docs/decisions.md.
    pub consumer: String,
    /// Messages fetched and recorded per database transaction. 1 is single-message mode.
    pub batch_size: usize,
    /// Batches in hand at once; with `batch_size` it bounds the consumer's `max_ack_pending`.
    pub concurrency: usize,
    /// Deliveries before a transiently failing message is dead-lettered as `exhausted`.
    pub max_deliver: i64,
    /// How long JetStream waits for an ack before redelivering.
    #[serde(with = "humantime_serde")]
    pub ack_wait: Duration,
    /// Commands whose `requested_at` is older than this are recorded as `expired` and never
    /// charged. 0 disables the check.
    #[serde(with = "humantime_serde")]
    pub max_command_age: Duration,
    /// First delay of the Nak backoff for transient failures; it doubles up to `retry_max_delay`.
    #[serde(with = "humantime_serde")]
    pub retry_min_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub retry_max_delay: Duration,
}

/// How log lines look.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Human,
    Json,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            database_url: "postgres://127.0.0.1:5432/onecharge".into(),
            nats_url: "nats://127.0.0.1:4222".into(),
            gateway_url: "http://127.0.0.1:8080".into(),
            gateway_api_key: None,
            admin_addr: SocketAddr::from(([127, 0, 0, 1], 9464)),
            admin_token: None,
            namespace: String::new(),
            log_format: LogFormat::Human,
            otlp_endpoint: None,
            intake: IntakeSettings::default(),
            gateway_connect_timeout: default_gateway_connect_timeout(),
            gateway_request_timeout: default_gateway_request_timeout(),
            gateway_key_retention: default_gateway_key_retention(),
            gateway_key_retention_margin: default_gateway_key_retention_margin(),
            gateway_max_processing_time: default_gateway_max_processing_time(),
            executor: ExecutorSettings::default(),
            relay: RelaySettings::default(),
            purge: PurgeSettings::default(),
            reconciler: ReconcilerSettings::default(),
        }
    }
}

impl Default for IntakeSettings {
    fn default() -> Self {
        Self {
            consumer: "onecharge-intake".into(),
            batch_size: 256,
            concurrency: 2,
            max_deliver: 10,
            ack_wait: Duration::from_secs(30),
            max_command_age: Duration::from_secs(24 * 3600),
            retry_min_delay: Duration::from_millis(500),
            retry_max_delay: Duration::from_secs(60),
        }
    }
}

fn redact<S: serde::Serializer>(value: &Option<SecretString>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(_) => s.serialize_some("[REDACTED]"),
        None => s.serialize_none(),
    }
}

/// Values given as flags: they win over the file and the environment.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Overrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_addr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
}

impl Settings {
    /// Loads settings from, in rising precedence: defaults, the config file, the
    /// environment, `overrides`. An explicitly named file that does not exist is an error;
    /// the default file is optional.
    pub fn load(config_file: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let file: PathBuf = match config_file {
            Some(path) if !path.exists() => {
                return Err(ConfigError(format!(
                    "--config {}: no such file",
                    path.display()
                )))
            }
            Some(path) => path.to_owned(),
            None => PathBuf::from(DEFAULT_CONFIG_FILE),
        };
        let figment = Figment::from(Serialized::defaults(Settings::default()))
            .merge(Toml::file(file))
            .merge(Env::prefixed("ONECHARGE_").split("__"))
            .merge(Serialized::defaults(overrides));
        let settings: Settings = figment.extract().map_err(|e| ConfigError(one_line(&e)))?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks what serde cannot: ranges and URL shapes.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |key: &str, what: String| Err(ConfigError(format!("{key}: {what}")));
        if !self.database_url.starts_with("postgres://")
            && !self.database_url.starts_with("postgresql://")
        {
            return fail(
                "database_url (ONECHARGE_DATABASE_URL)",
                "must start with postgres:// or postgresql://".into(),
            );
        }
        if !self.nats_url.contains("://") && self.nats_url.contains(' ') {
            return fail(
                "nats_url (ONECHARGE_NATS_URL)",
                "is not a NATS URL such as nats://127.0.0.1:4222".into(),
            );
        }
        if reqwest::Url::parse(&self.gateway_url).map(|u| u.scheme().starts_with("http"))
            != Ok(true)
        {
            return fail(
                "gateway_url (ONECHARGE_GATEWAY_URL)",
                format!("`{}` is not an http(s) URL", self.gateway_url),
            );
        }
        if let Some(endpoint) = &self.otlp_endpoint {
            if reqwest::Url::parse(endpoint).map(|u| u.scheme() == "http") != Ok(true) {
                return fail(
                    "otlp_endpoint (ONECHARGE_OTLP_ENDPOINT)",
                    format!("`{endpoint}` is not an http:// URL (https is not built in)"),
                );
            }
        }
        if !self.namespace.is_empty()
            && !self
                .namespace
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return fail(
                "namespace (ONECHARGE_NAMESPACE)",
                "may contain only letters, digits, `_` and `-`".into(),
            );
        }
        let intake = &self.intake;
        if !(1..=1000).contains(&intake.batch_size) {
            return fail(
                "intake.batch_size",
                format!("must be between 1 and 1000, got {}", intake.batch_size),
            );
        }
        if !(1..=64).contains(&intake.concurrency) {
            return fail(
                "intake.concurrency",
                format!("must be between 1 and 64, got {}", intake.concurrency),
            );
        }
        if !(2..=1000).contains(&intake.max_deliver) {
            return fail(
                "intake.max_deliver",
                format!("must be between 2 and 1000, got {}", intake.max_deliver),
            );
        }
        if intake.ack_wait < Duration::from_secs(1) {
            return fail("intake.ack_wait", "must be at least 1s".into());
        }
        if intake.consumer.is_empty()
            || !intake
                .consumer
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return fail(
                "intake.consumer",
                "must be non-empty letters, digits, `_` and `-`".into(),
            );
        }
        if intake.retry_min_delay.is_zero() || intake.retry_min_delay > intake.retry_max_delay {
            return fail(
                "intake.retry_min_delay",
                "must be above zero and at most intake.retry_max_delay".into(),
            );
        }
        if self.gateway_connect_timeout.is_zero() || self.gateway_request_timeout.is_zero() {
            return fail(
                "gateway_connect_timeout / gateway_request_timeout",
                "must be above zero".into(),
            );
        }
        if self.gateway_key_retention_margin >= self.gateway_key_retention {
            return fail(
                "gateway_key_retention_margin",
                "must be less than gateway_key_retention".into(),
            );
        }
        let key_window = self.gateway_key_retention - self.gateway_key_retention_margin;
        if self.gateway_max_processing_time.is_zero()
            || self.gateway_max_processing_time >= key_window
        {
            return fail(
                "gateway_max_processing_time (ONECHARGE_GATEWAY_MAX_PROCESSING_TIME)",
                format!(
                    "must be above zero and less than gateway_key_retention - gateway_key_retention_margin ({}), got {}",
                    humantime::format_duration(key_window),
                    humantime::format_duration(self.gateway_max_processing_time)
                ),
            );
        }
        let executor = &self.executor;
        if !(1..=1024).contains(&executor.concurrency) {
            return fail(
                "executor.concurrency",
                format!("must be between 1 and 1024, got {}", executor.concurrency),
            );
        }
        if !(1..=1000).contains(&executor.batch_size) {
            return fail(
                "executor.batch_size",
                format!("must be between 1 and 1000, got {}", executor.batch_size),
            );
        }
        if executor.lease
            < self.gateway_connect_timeout + self.gateway_request_timeout + Duration::from_secs(1)
        {
            return fail("executor.lease", "must exceed gateway_connect_timeout + gateway_request_timeout by at least 1s, so that a live call never outlasts its lease".into());
        }
        if executor.max_tries == 0 {
            return fail("executor.max_tries", "must be at least 1".into());
        }
        if executor.retry_min_delay.is_zero() || executor.retry_min_delay > executor.retry_max_delay
        {
            return fail(
                "executor.retry_min_delay",
                "must be above zero and at most executor.retry_max_delay".into(),
            );
        }
        if executor.poll_interval.is_zero() || executor.breaker_failure_threshold == 0 {
            return fail(
                "executor.poll_interval / executor.breaker_failure_threshold",
                "must be above zero".into(),
            );
        }
        if !(1..=1000).contains(&self.relay.batch_size) {
            return fail(
                "relay.batch_size",
                format!("must be between 1 and 1000, got {}", self.relay.batch_size),
            );
        }
        if self.relay.poll_interval.is_zero() || self.relay.publish_timeout.is_zero() {
            return fail(
                "relay.poll_interval / relay.publish_timeout",
                "must be above zero".into(),
            );
        }
        if self
            .admin_token
            .as_ref()
            .is_some_and(|t| t.expose_secret().trim().is_empty())
        {
            return fail(
                "admin_token (ONECHARGE_ADMIN_TOKEN)",
                "is set but empty: set a token, or unset it to leave /api open on loopback".into(),
            );
        }
        if self.purge.dedupe_retention < Duration::from_secs(60) {
            return fail("purge.dedupe_retention", "must be at least 1m".into());
        }
        if self.purge.interval < Duration::from_secs(1) {
            return fail("purge.interval", "must be at least 1s".into());
        }
        let reconciler = &self.reconciler;
        if reconciler.schedule.is_empty() || reconciler.schedule.iter().any(Duration::is_zero) {
            return fail(
                "reconciler.schedule",
                "must list at least one delay, each above zero (e.g. [\"1m\", \"5m\"])".into(),
            );
        }
        if !(1..=1000).contains(&reconciler.batch_size) {
            return fail(
                "reconciler.batch_size",
                format!("must be between 1 and 1000, got {}", reconciler.batch_size),
            );
        }
        if reconciler.claim_hold <= self.gateway_connect_timeout + self.gateway_request_timeout {
            return fail(
                "reconciler.claim_hold",
                "must be longer than gateway_connect_timeout + gateway_request_timeout".into(),
            );
        }
        if !(1..=100_000).contains(&self.purge.batch_size) {
            return fail(
                "purge.batch_size",
                format!(
                    "must be between 1 and 100000, got {}",
                    self.purge.batch_size
                ),
            );
        }
        Ok(())
    }

    /// The gateway key, or the configuration error that names where to set it.
    pub fn require_gateway_api_key(&self) -> Result<&str, ConfigError> {
        self.gateway_api_key
            .as_ref()
            .map(|key| key.expose_secret())
            .filter(|key| !key.is_empty())
            .ok_or_else(|| ConfigError("gateway_api_key is not set: set ONECHARGE_GATEWAY_API_KEY (or gateway_api_key in onecharge.toml)".into()))
    }
}

fn one_line(error: &figment::Error) -> String {
    let mut text = error.to_string().replace('\n', " ");
    if let Some(profile_key) = error.path.first() {
        if !text.contains(profile_key.as_str()) {
            text = format!("{}: {text}", error.path.join("."));
        }
    }
    text
}

#[cfg(test)]
// figment::Jail's closures return figment::Error, which is large; that is its API.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_contract() {
        let s = Settings::default();
        assert_eq!(s.database_url, "postgres://127.0.0.1:5432/onecharge");
        assert_eq!(s.nats_url, "nats://127.0.0.1:4222");
        assert_eq!(s.admin_addr.to_string(), "127.0.0.1:9464");
        assert_eq!(s.intake.max_command_age, Duration::from_secs(86_400));
        s.validate().unwrap();
    }

    #[test]
    fn file_then_environment_then_flags_take_precedence() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("c.toml", "nats_url = \"nats://file:1\"\ndatabase_url = \"postgres://file/db\"\n[intake]\nbatch_size = 7\n")?;
            jail.set_env("ONECHARGE_DATABASE_URL", "postgres://env/db");
            jail.set_env("ONECHARGE_INTAKE__MAX_COMMAND_AGE", "2h");
            let overrides = Overrides {
                nats_url: Some("nats://flag:2".into()),
                ..Default::default()
            };
            let s = Settings::load(Some(Path::new("c.toml")), &overrides).unwrap();
            assert_eq!(s.nats_url, "nats://flag:2");
            assert_eq!(s.database_url, "postgres://env/db");
            assert_eq!(s.intake.batch_size, 7);
            assert_eq!(s.intake.max_command_age, Duration::from_secs(7200));
            Ok(())
        });
    }

    #[test]
    fn a_bad_value_is_one_line_naming_the_setting() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("ONECHARGE_INTAKE__BATCH_SIZE", "lots");
            let err = Settings::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("batch_size"), "{err}");
            assert!(!err.contains('\n'));
            jail.set_env("ONECHARGE_INTAKE__BATCH_SIZE", "0");
            let err = Settings::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("intake.batch_size: must be between 1 and 1000, got 0"),
                "{err}"
            );
            Ok(())
        });
    }

    #[test]
    fn the_otlp_endpoint_is_off_by_default_and_must_be_an_http_url() {
        figment::Jail::expect_with(|jail| {
            let s = Settings::load(None, &Overrides::default()).unwrap();
            assert_eq!(s.otlp_endpoint, None);
            jail.set_env("ONECHARGE_OTLP_ENDPOINT", "http://127.0.0.1:4318");
            let s = Settings::load(None, &Overrides::default()).unwrap();
            assert_eq!(s.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318"));
            jail.set_env("ONECHARGE_OTLP_ENDPOINT", "collector:4318");
            let err = Settings::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("otlp_endpoint (ONECHARGE_OTLP_ENDPOINT)"),
                "{err}"
            );
            assert!(!err.contains('\n'));
            Ok(())
        });
    }

    #[test]
    fn the_gateways_maximum_processing_time_must_fit_inside_the_key_window() {
        figment::Jail::expect_with(|jail| {
            let s = Settings::load(None, &Overrides::default()).unwrap();
            assert_eq!(s.gateway_max_processing_time, Duration::from_secs(600));
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "23h");
            let err = Settings::load(None, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert_eq!(
                err,
                "configuration error: gateway_max_processing_time (ONECHARGE_GATEWAY_MAX_PROCESSING_TIME): \
                 must be above zero and less than gateway_key_retention - gateway_key_retention_margin (23h), got 23h"
            );
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "0s");
            assert!(Settings::load(None, &Overrides::default()).is_err());
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "2m");
            let s = Settings::load(None, &Overrides::default()).unwrap();
            assert_eq!(s.gateway_max_processing_time, Duration::from_secs(120));
            Ok(())
        });
    }

    #[test]
    fn secrets_never_show_in_debug_or_serialised_settings() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("ONECHARGE_GATEWAY_API_KEY", "sk_live_very_secret");
            let s = Settings::load(None, &Overrides::default()).unwrap();
            assert_eq!(s.require_gateway_api_key().unwrap(), "sk_live_very_secret");
            assert!(!format!("{s:?}").contains("very_secret"));
            assert!(!serde_json::to_string(&s).unwrap().contains("very_secret"));
            Ok(())
        });
    }
}
