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
    /// NATS server URL, or several of one cluster separated by commas. `tls://host:port`
    /// requires TLS.
    pub nats_url: String,
    /// PEM file of CA certificates trusted for NATS's TLS, besides the system's roots
    /// (a private CA). Setting it also requires TLS, whatever the URL's scheme.
    #[serde(default)]
    pub nats_ca_file: Option<PathBuf>,
    /// Base URL of the payment gateway (contract §3). Its default follows `gateway_kind`
    /// (`https://api.stripe.com` for `stripe`).
    pub gateway_url: String,
    /// Which protocol the gateway speaks (contract §3.1): `onecharge` or `stripe`.
    #[serde(default)]
    pub gateway_kind: crate::gateway::GatewayKind,
    /// PEM file of CA certificates trusted for an `https://` gateway, besides the system's
    /// roots (a private CA, or a test gateway's own).
    #[serde(default)]
    pub gateway_ca_file: Option<PathBuf>,
    /// Bearer key for the gateway. Needed by the executor and reconciler only. Always a
    /// string, whatever it looks like (`424242` is the key "424242").
    #[serde(serialize_with = "redact", deserialize_with = "secret", default)]
    pub gateway_api_key: Option<SecretString>,
    /// Where `serve` binds its admin HTTP.
    pub admin_addr: SocketAddr,
    /// Where the webhook listener binds (docs/contract.md §3.3): only `POST
    /// /webhooks/stripe`, the one thing meant to face the internet. Off unless set.
    #[serde(default)]
    pub webhook_addr: Option<SocketAddr>,
    /// Stripe's webhook signing secrets (`whsec_…`), comma-separated: every one is tried, so
    /// an endpoint's secret can be rolled without refusing events. Never printed.
    #[serde(serialize_with = "redact", deserialize_with = "secret", default)]
    pub stripe_webhook_secrets: Option<SecretString>,
    /// How far a webhook's signed timestamp may be from now (either way) before it is
    /// refused as stale: a replayed capture stops working after this.
    #[serde(with = "bounded_duration", default = "default_webhook_tolerance")]
    pub webhook_tolerance: Duration,
    /// When set, `/api/*` requires `Authorization: Bearer <admin_token>`. Always a string.
    #[serde(serialize_with = "redact", deserialize_with = "secret", default)]
    pub admin_token: Option<SecretString>,
    /// The origins, besides the loopback names, under which browsers and clients reach the
    /// admin listener (`https://ops.example.com` behind a proxy, a tunnel's name), comma
    /// separated in `ONECHARGE_ADMIN_PUBLIC_ORIGINS`. Every route answers only a `Host` that
    /// is a loopback name or one of these hosts, and a change only from a page of its own
    /// origin or of one of these (contract §6; DNS rebinding, `crate::http::origin`).
    #[serde(deserialize_with = "comma_separated", default)]
    pub admin_public_origins: Vec<String>,
    /// Lets `serve` run the admin API on a non-loopback `admin_addr` without an
    /// `admin_token` (`--insecure-admin`). Off: such a `serve` refuses to start, because
    /// anyone who reaches the address could read attempts and resolve them.
    #[serde(default)]
    pub insecure_admin: bool,
    /// Named operators (`[[operators]]` in the file): each signs in to the console, or calls
    /// `/api/*`, with its own token, and every action it takes is recorded as
    /// `operator:<name>`. The file holds only the token's SHA-256 (`onecharge operators
    /// new-token` mints a pair), never the token.
    #[serde(default)]
    pub operators: Vec<OperatorSetting>,
    /// The operator console under `/console/` (sessions and their cookie).
    #[serde(default)]
    pub console: ConsoleSettings,
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
    #[serde(with = "bounded_duration", default = "default_gateway_connect_timeout")]
    pub gateway_connect_timeout: Duration,
    /// Longest wait for a whole gateway request. Past it the answer is ambiguous (the
    /// gateway may have charged) and the attempt goes to the reconciler.
    #[serde(with = "bounded_duration", default = "default_gateway_request_timeout")]
    pub gateway_request_timeout: Duration,
    /// How long the gateway remembers an idempotency key (contract §3: 24 h by default).
    /// Counted from an attempt's first gateway call.
    #[serde(with = "bounded_duration", default = "default_gateway_key_retention")]
    pub gateway_key_retention: Duration,
    /// Safety margin inside the key retention: once `gateway_key_retention` minus this has
    /// passed since the first call, onecharge never re-sends a charge for the attempt (the
    /// key may be forgotten and a re-send could charge twice); it looks up instead.
    #[serde(
        with = "bounded_duration",
        default = "default_gateway_key_retention_margin"
    )]
    pub gateway_key_retention_margin: Duration,
    /// The longest the gateway (and the bank behind it) may keep a request in progress.
    /// Until this much time has passed since an attempt's last send, an empty lookup or a
    /// `409` proves nothing (the send may still charge): the attempt is never called "not
    /// charged" nor handed to a person for that. Must be less than the key window
    /// (`gateway_key_retention` − `gateway_key_retention_margin`).
    #[serde(
        with = "bounded_duration",
        default = "default_gateway_max_processing_time"
    )]
    pub gateway_max_processing_time: Duration,
    /// What a Stripe PaymentIntent left `requires_action` by an off-session confirm comes
    /// to: `cancel` (the default) cancels it and declines the attempt
    /// `authentication_required` (the customer is not there to authenticate); `review`
    /// leaves it for a person.
    #[serde(default)]
    pub stripe_requires_action: RequiresAction,
    /// Requests per second the whole fleet may send to the gateway (charges and lookups
    /// together, as a gateway counts them against one API key; a `stripe` charge is two).
    /// Enforced through a token bucket in the database that every instance shares. 0 (the
    /// default): unlimited.
    #[serde(default)]
    pub gateway_max_rate: f64,
    /// How many requests the fleet may send at once after a quiet spell, on top of
    /// `gateway_max_rate` (the bucket's size). 0 (the default): 1/30 s worth of the rate,
    /// at least 1 — small, so that no one-second window exceeds the rate by more than ~5 %.
    #[serde(default)]
    pub gateway_rate_burst: u32,
    /// How long `serve` waits, after SIGTERM or Ctrl-C, for the work in hand (gateway calls
    /// and their writes, a relay step, a batch being recorded) before it exits anyway and
    /// logs what it abandoned. Safe either way: an attempt left `in_flight` is settled by
    /// the reconciler once its lease expires.
    #[serde(with = "bounded_duration", default = "default_shutdown_timeout")]
    pub shutdown_timeout: Duration,
    #[serde(default)]
    pub executor: ExecutorSettings,
    #[serde(default)]
    pub relay: RelaySettings,
    #[serde(default)]
    pub purge: PurgeSettings,
    #[serde(default)]
    pub reconciler: ReconcilerSettings,
    #[serde(default)]
    pub database: DatabaseSettings,
    #[serde(default)]
    pub streams: StreamsSettings,
}

/// One named operator (`[[operators]]`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OperatorSetting {
    /// Recorded as the actor of every action (`operator:<name>`): letters, digits, `_`, `-`
    /// and `.`, at most 64.
    pub name: String,
    /// `viewer` reads; `operator` also acts (resolve, recheck, replay, bulk actions).
    pub role: OperatorRole,
    /// The hex SHA-256 of the operator's token. Tokens are random and long (`onecharge
    /// operators new-token`), so one unsalted hash is enough to keep the token out of the
    /// file; a guessable password would need a slow hash instead.
    pub token_sha256: String,
}

/// What a named operator may do.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OperatorRole {
    /// Reads every page and `GET /api/*`; every action is refused with why.
    Viewer,
    /// Reads and acts.
    Operator,
}

impl OperatorRole {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
        }
    }
}

/// The operator console's sessions.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleSettings {
    /// How long a console sign-in lasts, by the database's clock (sessions are rows of
    /// `console_sessions`, honoured by every admin instance on the database).
    #[serde(with = "bounded_duration")]
    pub session_ttl: Duration,
    /// Marks the console's cookies `Secure`, so a browser sends them over https only (and
    /// to `http://localhost`, which browsers count as secure). Unset: on when `admin_addr`
    /// is not a loopback address, off on loopback; `false` off loopback is refused
    /// (`Settings::check_admin_exposure`).
    pub secure_cookie: Option<bool>,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self {
            session_ttl: Duration::from_secs(8 * 3600),
            secure_cookie: None,
        }
    }
}

impl ConsoleSettings {
    /// Whether the console's cookies are `Secure` when the admin listener binds
    /// `admin_addr`: as configured, else off loopback only.
    pub fn secure_cookie_on(&self, admin_addr: SocketAddr) -> bool {
        self.secure_cookie.unwrap_or(!admin_addr.ip().is_loopback())
    }
}

/// How `setup` (and `serve`) create the three streams when they are missing. An existing
/// stream is used as it is: these settings never change one.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamsSettings {
    /// Copies JetStream keeps of each stream (1..=5): 1 on a single server, 3 on a cluster,
    /// so that a stream survives the loss of one server.
    pub replicas: usize,
}

impl Default for StreamsSettings {
    fn default() -> Self {
        Self { replicas: 1 }
    }
}

/// PostgreSQL session limits, set on every pooled connection when it opens, so that no
/// statement, lock wait or forgotten transaction can hold rows (and the attempts behind
/// them) for longer than this. A statement that hits one fails as a transient error and
/// is retried like any other database hiccup.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSettings {
    /// Longest any one statement may run (`statement_timeout`).
    #[serde(with = "bounded_duration")]
    pub statement_timeout: Duration,
    /// Longest a statement waits for a lock another session holds (`lock_timeout`): a
    /// claim behind a stuck session gives up instead of hanging.
    #[serde(with = "bounded_duration")]
    pub lock_timeout: Duration,
    /// Longest a session may sit idle inside an open transaction before PostgreSQL ends it
    /// and releases its locks (`idle_in_transaction_session_timeout`): a client cut off
    /// mid-transaction cannot hold row locks for hours. Must outlast the relay's wait for
    /// publish acks, which happens inside its transaction.
    #[serde(with = "bounded_duration")]
    pub idle_in_transaction_session_timeout: Duration,
    /// Longest a pooled connection lives before it is closed and reopened. After a failover
    /// that moved the database's address (DNS, a virtual IP, a proxy), connections still
    /// open to the old node are replaced within this time even if that node stays up.
    #[serde(with = "bounded_duration")]
    pub max_lifetime: Duration,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            statement_timeout: Duration::from_secs(30),
            lock_timeout: Duration::from_secs(5),
            idle_in_transaction_session_timeout: Duration::from_secs(60),
            max_lifetime: Duration::from_secs(300),
        }
    }
}

/// `stripe_requires_action`: what becomes of a PaymentIntent that wants the absent
/// customer to authenticate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RequiresAction {
    /// Cancel it (proof that it cannot charge) and decline `authentication_required`.
    #[default]
    Cancel,
    /// Leave it for a person (`needs_review`).
    Review,
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
    /// Delays between lookups of a PaymentIntent still `processing` at the gateway (bank
    /// debits can take days): the attempt stays `unknown` ("processing at the gateway")
    /// and is looked at again after each delay in turn, then every last delay, until
    /// `processing_max` has passed since its last send; only then does a person decide.
    #[serde(with = "duration_list")]
    pub processing_schedule: Vec<Duration>,
    /// How long a payment may stay `processing` at the gateway before a person looks.
    #[serde(with = "bounded_duration")]
    pub processing_max: Duration,
    /// Attempts claimed per pass.
    pub batch_size: usize,
    /// How long an idle reconciler waits before the next pass.
    #[serde(with = "bounded_duration")]
    pub poll_interval: Duration,
    /// How long a claimed `unknown` attempt is held by one reconciler; if it dies mid-lookup,
    /// another may take the attempt after this.
    #[serde(with = "bounded_duration")]
    pub claim_hold: Duration,
    /// How often `serve` sweeps (docs/contract.md §3.2): lists every charge the gateway made
    /// in the last `sweep_window` and compares it with the attempts. Claimed fleet-wide: one
    /// instance sweeps per interval. 0 turns the scheduled sweep off.
    #[serde(with = "bounded_duration")]
    pub sweep_interval: Duration,
    /// How far back each scheduled sweep looks. Longer than `sweep_interval`, so that
    /// consecutive sweeps overlap and a charge the gateway records late is still read.
    #[serde(with = "bounded_duration")]
    pub sweep_window: Duration,
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
            processing_schedule: vec![
                minutes(1),
                minutes(5),
                minutes(30),
                minutes(120),
                minutes(360),
            ],
            processing_max: Duration::from_secs(15 * 24 * 3600),
            batch_size: 32,
            poll_interval: Duration::from_secs(1),
            claim_hold: Duration::from_secs(120),
            sweep_interval: Duration::from_secs(3600),
            sweep_window: Duration::from_secs(25 * 3600),
        }
    }
}

/// Executor settings: how attempts are claimed, leased and retried.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorSettings {
    /// Gateway calls one instance has in flight at once.
    pub concurrency: usize,
    /// Most attempts claimed by one query (never more than the free concurrency plus the
    /// claim-ahead queue).
    pub batch_size: usize,
    /// Most attempts claimed ahead of a free call slot (0: claim only for free slots). The
    /// queue holds what the calls consume while one claim runs (observed call rate ×
    /// claim latency × 2), at least one, at most this: each queued attempt holds its lease
    /// unsent, and is handed back if the gateway health or its lease forbids the call.
    pub claim_ahead: usize,
    /// How long a claim is exclusive. Must outlast a whole gateway call (connect plus
    /// request timeout): a lease that expires mid-call hands the attempt to the reconciler.
    #[serde(with = "bounded_duration")]
    pub lease: Duration,
    /// How long an idle executor waits before looking for due attempts again.
    #[serde(with = "bounded_duration")]
    pub poll_interval: Duration,
    /// Gateway tries per attempt (credentials faults do not count); then the reconciler
    /// takes over.
    pub max_tries: u32,
    /// No retry is scheduled for an attempt older than this (since it was recorded); it
    /// goes to the reconciler instead.
    #[serde(with = "bounded_duration")]
    pub max_age: Duration,
    /// First retry delay; it doubles (with jitter) up to `retry_max_delay`.
    #[serde(with = "bounded_duration")]
    pub retry_min_delay: Duration,
    #[serde(with = "bounded_duration")]
    pub retry_max_delay: Duration,
    /// Delay before retrying after `409 idempotency_in_progress`.
    #[serde(with = "bounded_duration")]
    pub in_progress_delay: Duration,
    /// While the gateway rejects the credentials, one probe call is made this often.
    #[serde(with = "bounded_duration")]
    pub credentials_probe_interval: Duration,
    /// Consecutive gateway failures (unreachable, 5xx, timeouts) that open the circuit breaker.
    pub breaker_failure_threshold: u32,
    /// How long an open breaker stops all calls before one probe may test the gateway.
    #[serde(with = "bounded_duration")]
    pub breaker_cooldown: Duration,
}

impl Default for ExecutorSettings {
    fn default() -> Self {
        Self {
            concurrency: 32,
            batch_size: 32,
            claim_ahead: 32,
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
    #[serde(with = "bounded_duration")]
    pub poll_interval: Duration,
    /// Longest wait for JetStream to acknowledge one publish.
    #[serde(with = "bounded_duration")]
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

/// Purge settings — dedupe rows and history (`onecharge purge`, and the `purge` role of
/// `serve`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PurgeSettings {
    /// How long a `processed_messages` row is kept. Must be at least the command stream's
    /// `max_age`: while the stream still holds a message, its dedupe row must exist, or a
    /// redelivery or replay of it would look new (the attempts table would still stop a
    /// second charge, but the message would no longer be a plain `duplicate`).
    #[serde(with = "bounded_duration")]
    pub dedupe_retention: Duration,
    /// How long the history of a final attempt is kept: transitions, gateway calls and
    /// published events go a month partition at a time once the whole month is older than
    /// this. The history of an attempt that is not final, and an unpublished event, is
    /// kept whatever its age. `payment_attempts` itself is never purged.
    #[serde(with = "bounded_duration")]
    pub history_retention: Duration,
    /// How often `serve` purges.
    #[serde(with = "bounded_duration")]
    pub interval: Duration,
    /// Rows deleted per statement, so that a purge never holds many locks or a long
    /// transaction against intake.
    pub batch_size: usize,
}

impl Default for PurgeSettings {
    fn default() -> Self {
        Self {
            dedupe_retention: Duration::from_secs(14 * 24 * 3600),
            history_retention: Duration::from_secs(400 * 24 * 3600),
            interval: Duration::from_secs(3600),
            batch_size: 1000,
        }
    }
}

/// The longest duration any setting, flag or query parameter accepts. Far beyond any
/// sensible value and far inside what time arithmetic (`now - max_age`) and PostgreSQL
/// timestamps hold, so an absurd value is refused by name instead of panicking later.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Parses a duration such as `15m`, `2h` or `14days`, at most [`MAX_DURATION`]. The one
/// parser for every duration onecharge reads: settings, `--older-than`, `?stuck=`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text.trim())
        .map_err(|e| format!("`{text}` is not a duration such as 15m or 2h ({e})"))?;
    if duration > MAX_DURATION {
        return Err(format!("`{text}` is too long: at most 100 years"));
    }
    Ok(duration)
}

/// `database.max_lifetime`: long enough that connections are not reopened all the time,
/// short enough that a moved database address is followed soon after a failover.
fn validate_max_lifetime(database: &DatabaseSettings) -> Result<(), ConfigError> {
    if !(Duration::from_secs(10)..=Duration::from_secs(3600)).contains(&database.max_lifetime) {
        return Err(ConfigError(
            "database.max_lifetime: must be between 10s and 1h (connections to a node that lost its role are replaced within it)".into(),
        ));
    }
    Ok(())
}

/// A duration setting, read with [`parse_duration`] and written as humantime text. Every
/// duration setting uses it, so none escapes the bound.
mod bounded_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(duration: &Duration, s: S) -> Result<S::Ok, S::Error> {
        humantime_serde::serialize(duration, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

/// A list of durations written like `["1m", "5m", "2h"]`, each bounded like any duration.
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
            .map(|text| super::parse_duration(text).map_err(serde::de::Error::custom))
            .collect()
    }
}

/// Reads a secret setting as a string, whatever it looks like: `424242` in TOML is the key
/// "424242". A value that cannot be read as text exactly (a float, a table, a list) is
/// refused with a message that never repeats it.
fn secret<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SecretString>, D::Error> {
    struct Text;
    impl<'de> serde::de::Visitor<'de> for Text {
        type Value = Option<SecretString>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(SecretString::from(v.to_owned())))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_char<E: serde::de::Error>(self, v: char) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Err(not_text())
        }
        fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<Self::Value, E> {
            Err(not_text())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(not_text())
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(not_text())
        }
    }
    fn not_text<E: serde::de::Error>() -> E {
        E::custom("a secret must be a string: put it in quotes (its value is not shown)")
    }
    d.deserialize_any(Text)
}

fn default_webhook_tolerance() -> Duration {
    Duration::from_secs(300)
}

fn default_gateway_connect_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_gateway_request_timeout() -> Duration {
    Duration::from_secs(20)
}

/// A gateway call in hand may take connect + request timeouts (25 s by default): the
/// default lets it finish, and fits a 30 s termination grace period when the drain is short.
fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(30)
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
    /// Deliveries before a transiently failing message is dead-lettered as `exhausted`. The
    /// application counts them: the consumer itself is created with no `max_deliver`, so
    /// JetStream never ends a message before its dead letter is stored (decision 28).
    pub max_deliver: i64,
    /// How long JetStream waits for an ack before redelivering.
    #[serde(with = "bounded_duration")]
    pub ack_wait: Duration,
    /// Commands whose `requested_at` is older than this are recorded as `expired` and never
    /// charged. 0 disables the check.
    #[serde(with = "bounded_duration")]
    pub max_command_age: Duration,
    /// First delay of the Nak backoff for transient failures; it doubles up to `retry_max_delay`.
    #[serde(with = "bounded_duration")]
    pub retry_min_delay: Duration,
    #[serde(with = "bounded_duration")]
    pub retry_max_delay: Duration,
    /// How often `serve` audits the command stream against what intake recorded
    /// (docs/operations.md §13: a command the broker stored and never delivered, or whose
    /// record a failover lost). 0 turns the audit off.
    #[serde(with = "bounded_duration")]
    pub audit_interval: Duration,
    /// How long after JetStream stored a command the audit first judges it (it judges only
    /// what intake's ack floor has also passed).
    #[serde(with = "bounded_duration")]
    pub audit_grace: Duration,
    /// Most command-stream messages one audit pass reads.
    pub audit_batch_size: usize,
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
            nats_ca_file: None,
            gateway_url: crate::gateway::GatewayKind::default().default_url().into(),
            gateway_kind: crate::gateway::GatewayKind::default(),
            gateway_ca_file: None,
            gateway_api_key: None,
            admin_addr: SocketAddr::from(([127, 0, 0, 1], 9464)),
            admin_token: None,
            admin_public_origins: Vec::new(),
            webhook_addr: None,
            stripe_webhook_secrets: None,
            webhook_tolerance: default_webhook_tolerance(),
            insecure_admin: false,
            operators: Vec::new(),
            console: ConsoleSettings::default(),
            namespace: String::new(),
            log_format: LogFormat::Human,
            otlp_endpoint: None,
            intake: IntakeSettings::default(),
            gateway_connect_timeout: default_gateway_connect_timeout(),
            gateway_request_timeout: default_gateway_request_timeout(),
            gateway_key_retention: default_gateway_key_retention(),
            gateway_key_retention_margin: default_gateway_key_retention_margin(),
            gateway_max_processing_time: default_gateway_max_processing_time(),
            gateway_max_rate: 0.0,
            stripe_requires_action: RequiresAction::default(),
            gateway_rate_burst: 0,
            shutdown_timeout: default_shutdown_timeout(),
            executor: ExecutorSettings::default(),
            relay: RelaySettings::default(),
            purge: PurgeSettings::default(),
            reconciler: ReconcilerSettings::default(),
            database: DatabaseSettings::default(),
            streams: StreamsSettings::default(),
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
            audit_interval: Duration::from_secs(60),
            audit_grace: Duration::from_secs(120),
            audit_batch_size: 1000,
        }
    }
}

/// A list given as one comma-separated string (`ONECHARGE_ADMIN_PUBLIC_ORIGINS=a,b`) or as
/// a list (TOML `["a", "b"]`); blank items are dropped.
fn comma_separated<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    let items = match OneOrMany::deserialize(d)? {
        OneOrMany::One(text) => text.split(',').map(str::to_owned).collect(),
        OneOrMany::Many(items) => items,
    };
    Ok(items
        .into_iter()
        .map(|item| item.trim().to_owned())
        .filter(|item| !item.is_empty())
        .collect())
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
    pub gateway_kind: Option<crate::gateway::GatewayKind>,
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
        check_toml_syntax(&file)?;
        // Secrets from the environment are taken as the raw text: figment would read
        // `ONECHARGE_GATEWAY_API_KEY=0042` as the number 42.
        let secret_keys = ["gateway_api_key", "admin_token", "stripe_webhook_secrets"];
        let layered = |defaults: Settings| {
            let mut figment = Figment::from(Serialized::defaults(defaults))
                .merge(Toml::file(&file))
                .merge(Env::prefixed("ONECHARGE_").ignore(&secret_keys).split("__"));
            for (key, value) in Env::prefixed("ONECHARGE_").only(&secret_keys).iter() {
                figment = figment.merge(Serialized::default(key.as_str(), value));
            }
            figment.merge(Serialized::defaults(overrides))
        };
        let figment = layered(Settings::default());
        // The default gateway_url is the chosen gateway kind's (contract §3.1).
        let figment = match figment.extract_inner::<crate::gateway::GatewayKind>("gateway_kind") {
            Ok(kind) if kind != crate::gateway::GatewayKind::default() => layered(Settings {
                gateway_url: kind.default_url().into(),
                ..Settings::default()
            }),
            _ => figment,
        };
        let settings: Settings = figment.extract().map_err(|e| {
            ConfigError(
                Redactor::from_figment(&figment)
                    .scrub(&one_line(&e))
                    .into_owned(),
            )
        })?;
        settings.validate().map_err(|e| {
            ConfigError(Redactor::from_settings(&settings).scrub(&e.0).into_owned())
        })?;
        Ok(settings)
    }

    /// A Stripe secret key never travels in clear text: `gateway_kind = stripe` needs an
    /// `https://` gateway_url, or `http://` to a loopback address (a local mock).
    fn validate_gateway_kind(&self) -> Result<(), ConfigError> {
        if self.gateway_kind != crate::gateway::GatewayKind::Stripe {
            return Ok(());
        }
        let Ok(url) = reqwest::Url::parse(&self.gateway_url) else {
            return Ok(()); // reported by `validate` as not a URL
        };
        let loopback = url.host_str().is_some_and(|host| {
            host == "localhost"
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        });
        if url.scheme() == "http" && !loopback {
            return Err(ConfigError(format!(
                "gateway_url (ONECHARGE_GATEWAY_URL): `{}` is plain http:// to a remote host; with gateway_kind = stripe use https:// (http:// only to a loopback mock)",
                redact_url(&self.gateway_url)
            )));
        }
        Ok(())
    }

    /// `serve` with the admin API refuses a non-loopback `admin_addr` without an
    /// `admin_token`, unless `insecure_admin` says the operator means it: anyone who could
    /// reach the address could read every attempt and resolve the ones in review. Off
    /// loopback it also refuses console cookies without `Secure` (`insecure_admin` does not
    /// lift that): a session cookie sent over plain HTTP is anyone's on the path.
    pub fn check_admin_exposure(&self) -> Result<(), ConfigError> {
        if !self.admin_addr.ip().is_loopback() && self.console.secure_cookie == Some(false) {
            return Err(ConfigError(format!(
                "console.secure_cookie (ONECHARGE_CONSOLE__SECURE_COOKIE) is false but admin_addr {} is not a loopback address, so the console's session cookie could travel over plain HTTP: serve the console through https and unset it (it defaults to true off loopback), or bind admin_addr to 127.0.0.1 and reach it through ssh -L",
                self.admin_addr
            )));
        }
        if self.admin_addr.ip().is_loopback()
            || self.admin_token.is_some()
            || !self.operators.is_empty()
            || self.insecure_admin
        {
            return Ok(());
        }
        Err(ConfigError(format!(
            "admin_addr {} is not a loopback address and no admin token is set, so anyone who reaches it could read and resolve attempts: set ONECHARGE_ADMIN_TOKEN (admin_token), bind admin_addr to 127.0.0.1, or pass --insecure-admin (ONECHARGE_INSECURE_ADMIN=true) if an open admin API is intended",
            self.admin_addr
        )))
    }

    /// Checks what serde cannot: ranges, URL shapes and settings that must agree with each
    /// other. The first setting at fault is the error, one line naming it. Each check below
    /// covers one section (or the settings of one concern); a new setting adds its own.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_urls()?;
        self.validate_gateway_kind()?;
        self.check_namespace()?;
        self.streams.check()?;
        self.intake.check()?;
        self.check_gateway_timing()?;
        self.check_gateway_rate()?;
        self.check_executor()?;
        self.relay.check()?;
        self.check_admin_token()?;
        self.check_admin_public_origins()?;
        self.check_webhooks()?;
        self.check_operators()?;
        self.console.check()?;
        self.purge.check()?;
        self.check_reconciler()?;
        self.check_database()?;
        validate_max_lifetime(&self.database)?;
        self.check_shutdown_timeout()?;
        Ok(())
    }

    /// `shutdown_timeout` bounds the drain on SIGTERM: zero would abandon every call in
    /// hand at once, and longer than an hour is a process nobody can stop.
    fn check_shutdown_timeout(&self) -> Result<(), ConfigError> {
        require(
            !self.shutdown_timeout.is_zero() && self.shutdown_timeout <= Duration::from_secs(3600),
            "shutdown_timeout (ONECHARGE_SHUTDOWN_TIMEOUT)",
            format!(
                "must be above zero and at most 1h, got {}",
                humantime::format_duration(self.shutdown_timeout)
            ),
        )
    }

    fn check_urls(&self) -> Result<(), ConfigError> {
        require(
            self.database_url.starts_with("postgres://")
                || self.database_url.starts_with("postgresql://"),
            "database_url (ONECHARGE_DATABASE_URL)",
            "must start with postgres:// or postgresql://",
        )?;
        require(
            self.nats_url.contains("://") || !self.nats_url.contains(' '),
            "nats_url (ONECHARGE_NATS_URL)",
            "is not a NATS URL such as nats://127.0.0.1:4222",
        )?;
        require(
            reqwest::Url::parse(&self.gateway_url).is_ok_and(|u| u.scheme().starts_with("http")),
            "gateway_url (ONECHARGE_GATEWAY_URL)",
            format_args!("`{}` is not an http(s) URL", redact_url(&self.gateway_url)),
        )?;
        match &self.otlp_endpoint {
            Some(endpoint) => require(
                reqwest::Url::parse(endpoint).is_ok_and(|u| u.scheme() == "http"),
                "otlp_endpoint (ONECHARGE_OTLP_ENDPOINT)",
                format_args!(
                    "`{}` is not an http:// URL (the span exporter speaks plain HTTP: send it to a local collector)",
                    redact_url(endpoint)
                ),
            ),
            None => Ok(()),
        }
    }

    fn check_namespace(&self) -> Result<(), ConfigError> {
        require(
            self.namespace.is_empty() || is_name(&self.namespace),
            "namespace (ONECHARGE_NAMESPACE)",
            "may contain only letters, digits, `_` and `-`",
        )
    }

    /// The gateway's timeouts, and how long it keeps keys against how long it may take.
    fn check_gateway_timing(&self) -> Result<(), ConfigError> {
        require(
            !self.gateway_connect_timeout.is_zero() && !self.gateway_request_timeout.is_zero(),
            "gateway_connect_timeout / gateway_request_timeout",
            "must be above zero",
        )?;
        require(
            self.gateway_key_retention_margin < self.gateway_key_retention,
            "gateway_key_retention_margin",
            "must be less than gateway_key_retention",
        )?;
        let key_window = self.gateway_key_retention - self.gateway_key_retention_margin;
        require(
            !self.gateway_max_processing_time.is_zero()
                && self.gateway_max_processing_time < key_window,
            "gateway_max_processing_time (ONECHARGE_GATEWAY_MAX_PROCESSING_TIME)",
            format_args!(
                "must be above zero and less than gateway_key_retention - gateway_key_retention_margin ({}), got {}",
                humantime::format_duration(key_window),
                humantime::format_duration(self.gateway_max_processing_time)
            ),
        )?;
        // A send may leave until the lease ends and then run for the request timeout: the
        // window in which an empty lookup proves nothing must cover both.
        let longest_send = self.executor.lease + self.gateway_call_limit();
        require(
            self.gateway_max_processing_time >= longest_send,
            "gateway_max_processing_time (ONECHARGE_GATEWAY_MAX_PROCESSING_TIME)",
            format_args!(
                "must be at least executor.lease + gateway_connect_timeout + gateway_request_timeout ({}), got {}",
                humantime::format_duration(longest_send),
                humantime::format_duration(self.gateway_max_processing_time)
            ),
        )
    }

    /// The fleet-wide rate limit: a finite, non-negative rate (0: none); a burst only with a
    /// rate.
    fn check_gateway_rate(&self) -> Result<(), ConfigError> {
        require(
            self.gateway_max_rate.is_finite()
                && (0.0..=1_000_000.0).contains(&self.gateway_max_rate),
            "gateway_max_rate (ONECHARGE_GATEWAY_MAX_RATE)",
            format_args!(
                "must be requests per second between 0 (unlimited) and 1000000, got {}",
                self.gateway_max_rate
            ),
        )?;
        require(
            self.gateway_rate_burst == 0 || self.gateway_max_rate > 0.0,
            "gateway_rate_burst (ONECHARGE_GATEWAY_RATE_BURST)",
            "is set but gateway_max_rate is not: set the rate too, or unset the burst",
        )?;
        within(
            "gateway_rate_burst (ONECHARGE_GATEWAY_RATE_BURST)",
            self.gateway_rate_burst,
            0..=1_000_000,
        )
    }

    /// The longest a whole gateway call may take: connect plus request timeout.
    pub fn gateway_call_limit(&self) -> Duration {
        self.gateway_connect_timeout + self.gateway_request_timeout
    }

    fn check_executor(&self) -> Result<(), ConfigError> {
        let executor = &self.executor;
        within("executor.concurrency", executor.concurrency, 1..=4096)?;
        within("executor.batch_size", executor.batch_size, 1..=1000)?;
        within("executor.claim_ahead", executor.claim_ahead, 0..=1000)?;
        require(
            executor.lease >= self.gateway_call_limit() + Duration::from_secs(1),
            "executor.lease",
            "must exceed gateway_connect_timeout + gateway_request_timeout by at least 1s, so that a live call never outlasts its lease",
        )?;
        require(
            executor.max_tries > 0,
            "executor.max_tries",
            "must be at least 1",
        )?;
        require(
            !executor.retry_min_delay.is_zero()
                && executor.retry_min_delay <= executor.retry_max_delay,
            "executor.retry_min_delay",
            "must be above zero and at most executor.retry_max_delay",
        )?;
        require(
            !executor.poll_interval.is_zero() && executor.breaker_failure_threshold > 0,
            "executor.poll_interval / executor.breaker_failure_threshold",
            "must be above zero",
        )
    }

    /// A webhook listener needs the Stripe connector and at least one secret; the tolerance
    /// is between 1s and 1h.
    fn check_webhooks(&self) -> Result<(), ConfigError> {
        require(
            (Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.webhook_tolerance),
            "webhook_tolerance (ONECHARGE_WEBHOOK_TOLERANCE)",
            "must be between 1s and 1h",
        )?;
        if self.webhook_addr.is_none() {
            return Ok(());
        }
        require(
            self.gateway_kind == crate::gateway::GatewayKind::Stripe,
            "webhook_addr (ONECHARGE_WEBHOOK_ADDR)",
            "answers Stripe's webhooks only: set gateway_kind = stripe, or unset webhook_addr",
        )?;
        let secrets = self
            .stripe_webhook_secrets
            .as_ref()
            .map(|s| {
                s.expose_secret()
                    .split(',')
                    .map(str::trim)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        require(
            !secrets.is_empty() && secrets.iter().all(|s| !s.is_empty()),
            "stripe_webhook_secrets (ONECHARGE_STRIPE_WEBHOOK_SECRETS)",
            "webhook_addr is set, so give the endpoint's signing secret(s), comma-separated, none empty",
        )
    }

    fn check_admin_token(&self) -> Result<(), ConfigError> {
        require(
            !self
                .admin_token
                .as_ref()
                .is_some_and(|t| t.expose_secret().trim().is_empty()),
            "admin_token (ONECHARGE_ADMIN_TOKEN)",
            "is set but empty: set a token, or unset it to leave /api open on loopback",
        )
    }

    /// Each of `admin_public_origins` is an origin a browser would send: `http(s)://host[:port]`.
    fn check_admin_public_origins(&self) -> Result<(), ConfigError> {
        for origin in &self.admin_public_origins {
            crate::http::origin::WebOrigin::parse(origin).map_err(|why| {
                ConfigError(format!(
                    "admin_public_origins (ONECHARGE_ADMIN_PUBLIC_ORIGINS): {why}"
                ))
            })?;
        }
        Ok(())
    }

    /// Each operator named once, with a role and the 64 hex digits of a SHA-256; no two
    /// sharing a token. The messages name the operator, never the hash.
    fn check_operators(&self) -> Result<(), ConfigError> {
        let mut names = std::collections::HashSet::new();
        let mut hashes = std::collections::HashSet::new();
        for (i, operator) in self.operators.iter().enumerate() {
            let name = &operator.name;
            require(
                (1..=64).contains(&name.chars().count())
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)),
                &format!("operators[{i}].name"),
                "must be 1 to 64 letters, digits, `_`, `-` or `.`",
            )?;
            require(
                names.insert(name.as_str()),
                &format!("operators[{i}].name"),
                format_args!("`{name}` is named twice: give each operator its own name"),
            )?;
            let hash = operator.token_sha256.trim().to_ascii_lowercase();
            require(
                hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
                &format!("operators[{i}].token_sha256 (operator `{name}`)"),
                "must be the 64 hex digits of the token's SHA-256 (onecharge operators new-token prints one)",
            )?;
            require(
                hashes.insert(hash),
                &format!("operators[{i}].token_sha256 (operator `{name}`)"),
                "is the same as another operator's: each operator needs a token of their own",
            )?;
        }
        Ok(())
    }

    fn check_reconciler(&self) -> Result<(), ConfigError> {
        let reconciler = &self.reconciler;
        require(
            !reconciler.schedule.is_empty() && !reconciler.schedule.iter().any(Duration::is_zero),
            "reconciler.schedule",
            "must list at least one delay, each above zero (e.g. [\"1m\", \"5m\"])",
        )?;
        require(
            !reconciler.processing_schedule.is_empty()
                && !reconciler.processing_schedule.iter().any(Duration::is_zero),
            "reconciler.processing_schedule",
            "must list at least one delay, each above zero (e.g. [\"1m\", \"5m\", \"30m\", \"2h\", \"6h\"])",
        )?;
        require(
            reconciler.processing_max >= self.gateway_max_processing_time,
            "reconciler.processing_max",
            "must be at least gateway_max_processing_time",
        )?;
        within("reconciler.batch_size", reconciler.batch_size, 1..=1000)?;
        require(
            reconciler.claim_hold > self.gateway_call_limit(),
            "reconciler.claim_hold",
            "must be longer than gateway_connect_timeout + gateway_request_timeout",
        )?;
        require(
            reconciler.sweep_window >= Duration::from_secs(60)
                && reconciler.sweep_window <= Duration::from_secs(90 * 86_400)
                && (reconciler.sweep_interval.is_zero()
                    || reconciler.sweep_window > reconciler.sweep_interval),
            "reconciler.sweep_window (ONECHARGE_RECONCILER__SWEEP_WINDOW)",
            "must be between 1m and 90days and longer than reconciler.sweep_interval, so that consecutive sweeps overlap",
        )
    }

    fn check_database(&self) -> Result<(), ConfigError> {
        let database = &self.database;
        let hour = Duration::from_secs(3600);
        require(
            (Duration::from_secs(1)..=hour).contains(&database.statement_timeout),
            "database.statement_timeout",
            "must be between 1s and 1h (every statement onecharge runs is short)",
        )?;
        require(
            database.lock_timeout >= Duration::from_millis(100)
                && database.lock_timeout <= database.statement_timeout,
            "database.lock_timeout",
            "must be at least 100ms and at most database.statement_timeout",
        )?;
        require(
            database.idle_in_transaction_session_timeout > self.relay.publish_timeout
                && database.idle_in_transaction_session_timeout <= hour,
            "database.idle_in_transaction_session_timeout",
            "must be longer than relay.publish_timeout (the relay waits for acks inside its transaction) and at most 1h",
        )
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

impl ConsoleSettings {
    fn check(&self) -> Result<(), ConfigError> {
        require(
            self.session_ttl >= Duration::from_secs(60)
                && self.session_ttl <= Duration::from_secs(7 * 86_400),
            "console.session_ttl (ONECHARGE_CONSOLE__SESSION_TTL)",
            "must be between 1m and 7days",
        )
    }
}

impl StreamsSettings {
    fn check(&self) -> Result<(), ConfigError> {
        require(
            (1..=5).contains(&self.replicas),
            "streams.replicas (ONECHARGE_STREAMS__REPLICAS)",
            format_args!(
                "must be between 1 and 5 (3 on a NATS cluster), got {}",
                self.replicas
            ),
        )
    }
}

impl IntakeSettings {
    fn check(&self) -> Result<(), ConfigError> {
        within("intake.batch_size", self.batch_size, 1..=1000)?;
        within("intake.concurrency", self.concurrency, 1..=64)?;
        within("intake.max_deliver", self.max_deliver, 2..=1000)?;
        within(
            "intake.audit_batch_size",
            self.audit_batch_size,
            1..=100_000,
        )?;
        require(
            self.ack_wait >= Duration::from_secs(1),
            "intake.ack_wait",
            "must be at least 1s",
        )?;
        require(
            !self.consumer.is_empty() && is_name(&self.consumer),
            "intake.consumer",
            "must be non-empty letters, digits, `_` and `-`",
        )?;
        require(
            !self.retry_min_delay.is_zero() && self.retry_min_delay <= self.retry_max_delay,
            "intake.retry_min_delay",
            "must be above zero and at most intake.retry_max_delay",
        )
    }
}

impl RelaySettings {
    fn check(&self) -> Result<(), ConfigError> {
        within("relay.batch_size", self.batch_size, 1..=1000)?;
        require(
            !self.poll_interval.is_zero() && !self.publish_timeout.is_zero(),
            "relay.poll_interval / relay.publish_timeout",
            "must be above zero",
        )
    }
}

impl PurgeSettings {
    fn check(&self) -> Result<(), ConfigError> {
        require(
            self.dedupe_retention >= Duration::from_secs(60),
            "purge.dedupe_retention",
            "must be at least 1m",
        )?;
        require(
            self.history_retention >= Duration::from_secs(86_400),
            "purge.history_retention",
            "must be at least 1d (history is dropped a month at a time)",
        )?;
        require(
            self.interval >= Duration::from_secs(1),
            "purge.interval",
            "must be at least 1s",
        )?;
        within("purge.batch_size", self.batch_size, 1..=100_000)
    }
}

/// `Ok` when `ok`, else the error naming `key` and what it `must` be.
fn require(ok: bool, key: &str, must: impl std::fmt::Display) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError(format!("{key}: {must}")))
    }
}

/// `key`'s `value` must lie in `range`.
fn within<T>(key: &str, value: T, range: std::ops::RangeInclusive<T>) -> Result<(), ConfigError>
where
    T: PartialOrd + std::fmt::Display,
{
    require(
        range.contains(&value),
        key,
        format_args!(
            "must be between {} and {}, got {value}",
            range.start(),
            range.end()
        ),
    )
}

/// Letters, digits, `_` and `-` only: safe inside stream, subject and consumer names.
fn is_name(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
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

/// Refuses a configuration file that is not valid TOML with the place and the parser's
/// complaint only: the usual message quotes the offending line, which may hold a secret.
fn check_toml_syntax(file: &Path) -> Result<(), ConfigError> {
    let Ok(text) = std::fs::read_to_string(file) else {
        // Missing (the optional default file) or unreadable: figment reports the latter.
        return Ok(());
    };
    let Err(error) = toml::from_str::<toml::Table>(&text) else {
        return Ok(());
    };
    let place = error
        .span()
        .map(|span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!(" at line {line}, column {column}")
        })
        .unwrap_or_default();
    Err(ConfigError(format!(
        "{}: not valid TOML{place}: {} (the line is not shown: it may hold a secret)",
        file.display(),
        error.message().trim().replace('\n', "; ")
    )))
}

/// The secret values of one configuration (keys, tokens, the credentials inside URLs), to be
/// blotted out of every line onecharge prints: errors, and log lines at any level, including
/// those of libraries that print a URL or their connection options.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Longest first, so that a secret containing another is blotted out whole.
    secrets: Vec<String>,
}

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Secrets shorter than this are not searched for in printed text (every `1` of a line
/// would go); they are still never printed by onecharge itself.
const MIN_SCRUBBED_CHARS: usize = 4;

impl Redactor {
    /// The secrets of loaded settings.
    pub fn from_settings(settings: &Settings) -> Self {
        let mut redactor = Self::default();
        for secret in [&settings.gateway_api_key, &settings.admin_token]
            .into_iter()
            .flatten()
        {
            redactor.add(secret.expose_secret());
        }
        if let Some(secrets) = &settings.stripe_webhook_secrets {
            redactor.add(secrets.expose_secret());
            for secret in secrets.expose_secret().split(',') {
                redactor.add(secret.trim());
            }
        }
        for url in [
            Some(&settings.database_url),
            Some(&settings.nats_url),
            Some(&settings.gateway_url),
            settings.otlp_endpoint.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            redactor.add_url(url);
        }
        redactor.finish()
    }

    /// The secrets of a configuration that did not load, read from its sources as they are.
    fn from_figment(figment: &Figment) -> Self {
        let mut redactor = Self::default();
        let text = |key: &str| {
            let value = figment.find_value(key).ok()?;
            match value.deserialize::<serde_json::Value>().ok()? {
                serde_json::Value::String(text) => Some(text),
                serde_json::Value::Null => None,
                other => Some(other.to_string()),
            }
        };
        for key in ["gateway_api_key", "admin_token", "stripe_webhook_secrets"] {
            if let Some(secret) = text(key) {
                redactor.add(&secret);
            }
        }
        for key in ["database_url", "nats_url", "gateway_url", "otlp_endpoint"] {
            if let Some(url) = text(key) {
                redactor.add_url(&url);
            }
        }
        redactor.finish()
    }

    fn add(&mut self, secret: &str) {
        for form in [
            secret.to_owned(),
            percent_encoding::percent_decode_str(secret)
                .decode_utf8_lossy()
                .into_owned(),
        ] {
            if form.chars().count() >= MIN_SCRUBBED_CHARS && !self.secrets.contains(&form) {
                self.secrets.push(form);
            }
        }
    }

    fn add_url(&mut self, url: &str) {
        for range in url_secrets(url) {
            self.add(&url[range]);
        }
    }

    fn finish(mut self) -> Self {
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        self
    }

    /// `text` with every secret replaced by `[REDACTED]`.
    pub fn scrub<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        let mut out = std::borrow::Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = std::borrow::Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        out
    }
}

/// `url` with its credentials replaced by `[REDACTED]` (see [`url_secrets`]), for messages
/// that name a server. Works on URLs that do not parse, too.
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_owned();
    let mut ranges = url_secrets(url);
    ranges.sort_by_key(|r| std::cmp::Reverse(r.start));
    for range in ranges {
        out.replace_range(range, REDACTED);
    }
    out
}

/// Where the credentials of a URL are, found by its shape alone so that a URL that does not
/// parse is covered too: the password of `user:password@`, a lone `token@` userinfo (NATS
/// token authentication; a lone PostgreSQL user name is not a secret), and the value of
/// every query parameter whose name says it holds a credential (`password`, `api_key`,
/// `token`, …). A NATS URL may list several servers, comma-separated.
pub fn url_secrets(url: &str) -> Vec<std::ops::Range<usize>> {
    let is_postgres = url.starts_with("postgres");
    let mut ranges = Vec::new();
    let mut start = 0;
    for part in url.split(',') {
        url_part_secrets(part, is_postgres, start, &mut ranges);
        start += part.len() + 1;
    }
    ranges
}

fn url_part_secrets(
    url: &str,
    is_postgres: bool,
    offset: usize,
    ranges: &mut Vec<std::ops::Range<usize>>,
) {
    let authority_start = url.find("://").map_or(0, |i| i + 3);
    let authority_end = url[authority_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| authority_start + i);
    if let Some(at) = url[authority_start..authority_end].rfind('@') {
        let userinfo = authority_start..authority_start + at;
        match url[userinfo.clone()].find(':') {
            Some(colon) => ranges.push(offset + userinfo.start + colon + 1..offset + userinfo.end),
            None if !is_postgres && !userinfo.is_empty() => {
                ranges.push(offset + userinfo.start..offset + userinfo.end)
            }
            None => {}
        }
    }
    let Some(question) = url[authority_start..].find('?') else {
        return;
    };
    let query_start = authority_start + question + 1;
    let query_end = url[query_start..]
        .find('#')
        .map_or(url.len(), |i| query_start + i);
    let mut at = query_start;
    for pair in url[query_start..query_end].split('&') {
        if let Some(eq) = pair.find('=') {
            let name = pair[..eq].to_ascii_lowercase();
            let credential = [
                "pass",
                "pwd",
                "secret",
                "token",
                "key",
                "auth",
                "credential",
                "sig",
            ]
            .iter()
            .any(|word| name.contains(word));
            if credential && eq + 1 < pair.len() {
                ranges.push(offset + at + eq + 1..offset + at + pair.len());
            }
        }
        at += pair.len() + 1;
    }
}

#[cfg(test)]
// figment::Jail's closures return figment::Error, which is large; that is its API.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;

    /// The settings a jail's files and environment give, with no overrides.
    fn load() -> Settings {
        Settings::load(None, &Overrides::default()).unwrap()
    }

    /// The one-line error a jail's files and environment give, with no overrides.
    fn load_error() -> String {
        Settings::load(None, &Overrides::default())
            .unwrap_err()
            .to_string()
    }

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
    fn the_gateway_kind_chooses_the_default_gateway_url_and_an_explicit_url_wins() {
        figment::Jail::expect_with(|jail| {
            let s = load();
            assert_eq!(s.gateway_kind, crate::gateway::GatewayKind::Onecharge);
            assert_eq!(s.gateway_url, "http://127.0.0.1:8080");
            jail.set_env("ONECHARGE_GATEWAY_KIND", "stripe");
            let s = load();
            assert_eq!(s.gateway_kind, crate::gateway::GatewayKind::Stripe);
            assert_eq!(s.gateway_url, "https://api.stripe.com");
            jail.set_env("ONECHARGE_GATEWAY_URL", "http://127.0.0.1:12111");
            let s = load();
            assert_eq!(s.gateway_url, "http://127.0.0.1:12111");
            jail.set_env("ONECHARGE_GATEWAY_KIND", "paypal");
            let err = Settings::load(None, &Overrides::default()).unwrap_err();
            assert!(
                err.0.contains("paypal") && err.0.contains("stripe"),
                "{}",
                err.0
            );
            Ok(())
        });
    }

    #[test]
    fn a_stripe_key_never_goes_over_plain_http_to_a_remote_host() {
        let stripe = |url: &str| Settings {
            gateway_kind: crate::gateway::GatewayKind::Stripe,
            gateway_url: url.into(),
            ..Settings::default()
        };
        let err = stripe("http://api.stripe.com").validate().unwrap_err();
        assert!(err.0.starts_with("gateway_url"), "{}", err.0);
        assert!(err.0.contains("https://"), "{}", err.0);
        for ok in [
            "https://api.stripe.com",
            "http://127.0.0.1:12111",
            "http://localhost:8420",
            "http://[::1]:9",
        ] {
            assert!(stripe(ok).validate().is_ok(), "{ok}");
        }
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
    fn operators_are_read_from_the_file_and_each_mistake_is_one_line_without_the_hash() {
        const HASH: &str = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8";
        let entry = |name: &str, role: &str, hash: &str| {
            format!(
                "[[operators]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{hash}\"\n"
            )
        };
        figment::Jail::expect_with(|jail| {
            let load = |jail: &mut figment::Jail, text: String| {
                jail.create_file("ops.toml", &text).unwrap();
                Settings::load(Some(Path::new("ops.toml")), &Overrides::default())
            };
            let s = load(
                jail,
                entry("ada", "operator", HASH) + &entry("vic", "viewer", &HASH.replace('5', "6")),
            )
            .unwrap();
            assert_eq!(s.operators.len(), 2);
            assert_eq!(
                (s.operators[1].name.as_str(), s.operators[1].role),
                ("vic", OperatorRole::Viewer)
            );

            let refused = [
                (
                    entry("ada", "operator", HASH)
                        + &entry("ada", "viewer", &HASH.replace('5', "6")),
                    "operators[1].name: `ada` is named twice",
                ),
                (
                    entry("ada", "admin", HASH),
                    "found `admin`, expected ``viewer` or `operator``",
                ),
                (
                    entry("ada", "viewer", "not-hex"),
                    "operators[0].token_sha256 (operator `ada`): must be the 64 hex digits",
                ),
                (
                    entry("ada", "viewer", &HASH[1..]),
                    "must be the 64 hex digits",
                ),
                (
                    entry("ada", "viewer", HASH) + &entry("bob", "viewer", HASH),
                    "operators[1].token_sha256 (operator `bob`): is the same as another operator's",
                ),
                (
                    entry("a b", "viewer", HASH),
                    "operators[0].name: must be 1 to 64 letters",
                ),
            ];
            for (text, expected) in refused {
                let err = load(jail, text).unwrap_err().to_string();
                assert!(err.contains(expected), "{err}");
                assert!(
                    !err.contains('\n') && !err.contains(&HASH[1..]),
                    "one line, no hash: {err}"
                );
            }
            Ok(())
        });
    }

    #[test]
    fn a_session_cookie_without_secure_is_refused_on_an_admin_address_off_loopback() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("ONECHARGE_ADMIN_ADDR", "0.0.0.0:9464");
            jail.set_env("ONECHARGE_ADMIN_TOKEN", "tok-admin-0123456789");
            jail.set_env("ONECHARGE_CONSOLE__SECURE_COOKIE", "false");
            let err = load().check_admin_exposure().unwrap_err().to_string();
            assert!(
                err.contains("console.secure_cookie") && !err.contains('\n'),
                "one line naming the setting: {err}"
            );
            assert!(!err.contains("tok-admin"), "{err}");
            jail.set_env("ONECHARGE_ADMIN_ADDR", "127.0.0.1:9464");
            load().check_admin_exposure().unwrap();
            Ok(())
        });
    }

    #[test]
    fn console_cookies_are_secure_by_default_off_loopback_only() {
        let console = ConsoleSettings::default();
        assert!(!console.secure_cookie_on("127.0.0.1:9464".parse().unwrap()));
        assert!(!console.secure_cookie_on("[::1]:9464".parse().unwrap()));
        assert!(console.secure_cookie_on("0.0.0.0:9464".parse().unwrap()));
        let forced = ConsoleSettings {
            secure_cookie: Some(true),
            ..ConsoleSettings::default()
        };
        assert!(forced.secure_cookie_on("127.0.0.1:9464".parse().unwrap()));
    }

    #[test]
    fn admin_public_origins_are_a_comma_separated_list_of_plain_origins() {
        figment::Jail::expect_with(|jail| {
            assert!(load().admin_public_origins.is_empty());
            jail.create_file(
                "onecharge.toml",
                "admin_public_origins = [\"https://a.example\"]",
            )?;
            assert_eq!(load().admin_public_origins, ["https://a.example"]);
            jail.set_env(
                "ONECHARGE_ADMIN_PUBLIC_ORIGINS",
                "https://ops.example.com, http://tunnel.internal:8080",
            );
            assert_eq!(
                load().admin_public_origins,
                ["https://ops.example.com", "http://tunnel.internal:8080"],
                "the environment wins"
            );
            jail.set_env("ONECHARGE_ADMIN_PUBLIC_ORIGINS", "https://ops.example.com");
            assert_eq!(load().admin_public_origins, ["https://ops.example.com"]);
            for bad in ["ops.example.com", "https://ops.example.com/console"] {
                jail.set_env("ONECHARGE_ADMIN_PUBLIC_ORIGINS", bad);
                let err = load_error();
                assert!(
                    err.contains("admin_public_origins (ONECHARGE_ADMIN_PUBLIC_ORIGINS)")
                        && !err.contains('\n'),
                    "{err}"
                );
            }
            Ok(())
        });
    }

    #[test]
    fn operators_count_as_credentials_for_an_admin_address_off_loopback() {
        let mut s = Settings {
            admin_addr: "0.0.0.0:9464".parse().unwrap(),
            ..Settings::default()
        };
        assert!(s.check_admin_exposure().is_err());
        s.operators.push(OperatorSetting {
            name: "ada".into(),
            role: OperatorRole::Viewer,
            token_sha256: "ab".repeat(32),
        });
        assert!(s.check_admin_exposure().is_ok());
    }

    #[test]
    fn a_bad_value_is_one_line_naming_the_setting() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("ONECHARGE_INTAKE__BATCH_SIZE", "lots");
            let err = load_error();
            assert!(err.contains("batch_size"), "{err}");
            assert!(!err.contains('\n'));
            jail.set_env("ONECHARGE_INTAKE__BATCH_SIZE", "0");
            let err = load_error();
            assert!(
                err.contains("intake.batch_size: must be between 1 and 1000, got 0"),
                "{err}"
            );
            Ok(())
        });
    }

    #[test]
    fn stream_replicas_default_to_one_and_outside_one_to_five_are_refused_by_name() {
        figment::Jail::expect_with(|jail| {
            let s = load();
            assert_eq!(s.streams.replicas, 1);
            jail.set_env("ONECHARGE_STREAMS__REPLICAS", "3");
            let s = load();
            assert_eq!(s.streams.replicas, 3);
            for bad in ["0", "6"] {
                jail.set_env("ONECHARGE_STREAMS__REPLICAS", bad);
                let err = load_error();
                assert_eq!(
                    err,
                    format!("configuration error: streams.replicas (ONECHARGE_STREAMS__REPLICAS): must be between 1 and 5 (3 on a NATS cluster), got {bad}")
                );
            }
            Ok(())
        });
    }

    #[test]
    fn the_otlp_endpoint_is_off_by_default_and_must_be_an_http_url() {
        figment::Jail::expect_with(|jail| {
            let s = load();
            assert_eq!(s.otlp_endpoint, None);
            jail.set_env("ONECHARGE_OTLP_ENDPOINT", "http://127.0.0.1:4318");
            let s = load();
            assert_eq!(s.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318"));
            jail.set_env("ONECHARGE_OTLP_ENDPOINT", "collector:4318");
            let err = load_error();
            assert!(
                err.contains("otlp_endpoint (ONECHARGE_OTLP_ENDPOINT)"),
                "{err}"
            );
            assert!(!err.contains('\n'));
            Ok(())
        });
    }

    #[test]
    fn credentials_inside_urls_are_redacted_even_when_the_url_does_not_parse() {
        for (url, shown) in [
            (
                "postgres://app:pa%40ss@db:5432/x?sslmode=require&password=q1q1",
                "postgres://app:[REDACTED]@db:5432/x?sslmode=require&password=[REDACTED]",
            ),
            (
                "postgres://app:secret@db:notaport/x",
                "postgres://app:[REDACTED]@db:notaport/x",
            ),
            ("postgres://app@db/x", "postgres://app@db/x"),
            (
                "nats://tok3n@n1:4222,nats://u:pw12@n2:4222",
                "nats://[REDACTED]@n1:4222,nats://u:[REDACTED]@n2:4222",
            ),
            (
                "https://gw.example/v1?api_key=k123&region=eu",
                "https://gw.example/v1?api_key=[REDACTED]&region=eu",
            ),
        ] {
            assert_eq!(redact_url(url), shown);
        }
        let redactor = Redactor::from_settings(&Settings {
            database_url: "postgres://app:pa%40ss1@db/x".into(),
            ..Settings::default()
        });
        assert_eq!(
            redactor.scrub("password: Some(\"pa@ss1\") pa%40ss1"),
            "password: Some(\"[REDACTED]\") [REDACTED]"
        );
    }

    #[test]
    fn a_secret_written_as_a_number_is_that_string_and_a_float_is_refused_unshown() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("onecharge.toml", "gateway_api_key = 424242\n")?;
            jail.set_env("ONECHARGE_ADMIN_TOKEN", "0042");
            let s = load();
            assert_eq!(s.require_gateway_api_key().unwrap(), "424242");
            assert_eq!(s.admin_token.unwrap().expose_secret(), "0042");
            jail.create_file("onecharge.toml", "gateway_api_key = 4242.5\n")?;
            let err = load_error();
            assert!(err.contains("gateway_api_key"), "{err}");
            assert!(!err.contains("4242"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn database_timeouts_have_defaults_and_a_bad_one_is_one_line_naming_it() {
        figment::Jail::expect_with(|jail| {
            let s = load();
            assert_eq!(s.database.statement_timeout, Duration::from_secs(30));
            assert_eq!(s.database.lock_timeout, Duration::from_secs(5));
            assert_eq!(
                s.database.idle_in_transaction_session_timeout,
                Duration::from_secs(60)
            );
            jail.set_env("ONECHARGE_DATABASE__LOCK_TIMEOUT", "2m");
            let err = load_error();
            assert!(
                err.contains("database.lock_timeout: must be at least 100ms and at most database.statement_timeout"),
                "{err}"
            );
            jail.set_env("ONECHARGE_DATABASE__LOCK_TIMEOUT", "2s");
            jail.set_env(
                "ONECHARGE_DATABASE__IDLE_IN_TRANSACTION_SESSION_TIMEOUT",
                "1s",
            );
            let err = load_error();
            assert!(
                err.contains("database.idle_in_transaction_session_timeout: must be longer than relay.publish_timeout"),
                "{err}"
            );
            jail.set_env(
                "ONECHARGE_DATABASE__IDLE_IN_TRANSACTION_SESSION_TIMEOUT",
                "2m",
            );
            jail.set_env("ONECHARGE_DATABASE__STATEMENT_TIMEOUT", "soon");
            let err = load_error();
            assert!(err.contains("statement_timeout"), "{err}");
            assert!(!err.contains('\n'));
            jail.set_env("ONECHARGE_DATABASE__STATEMENT_TIMEOUT", "10s");
            let s = load();
            assert_eq!(s.database.statement_timeout, Duration::from_secs(10));
            assert_eq!(s.database.lock_timeout, Duration::from_secs(2));
            Ok(())
        });
    }

    #[test]
    fn the_gateways_maximum_processing_time_must_fit_inside_the_key_window() {
        figment::Jail::expect_with(|jail| {
            let s = load();
            assert_eq!(s.gateway_max_processing_time, Duration::from_secs(600));
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "23h");
            let err = load_error();
            assert_eq!(
                err,
                "configuration error: gateway_max_processing_time (ONECHARGE_GATEWAY_MAX_PROCESSING_TIME): \
                 must be above zero and less than gateway_key_retention - gateway_key_retention_margin (23h), got 23h"
            );
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "0s");
            assert!(Settings::load(None, &Overrides::default()).is_err());
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "2m");
            let s = load();
            assert_eq!(s.gateway_max_processing_time, Duration::from_secs(120));
            Ok(())
        });
    }

    #[test]
    fn a_processing_time_shorter_than_the_lease_plus_a_whole_call_is_refused() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("ONECHARGE_EXECUTOR__LEASE", "5m");
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "5m");
            let err = load_error();
            assert!(
                err.starts_with("configuration error: gateway_max_processing_time (ONECHARGE_GATEWAY_MAX_PROCESSING_TIME): must be at least executor.lease"),
                "{err}"
            );
            assert!(!err.contains('\n'));
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "10m");
            let s = load();
            assert_eq!(
                s.reconciler.processing_max,
                Duration::from_secs(15 * 24 * 3600)
            );
            assert_eq!(s.stripe_requires_action, RequiresAction::Cancel);
            Ok(())
        });
    }

    #[test]
    fn secrets_never_show_in_debug_or_serialised_settings() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("ONECHARGE_GATEWAY_API_KEY", "sk_live_very_secret");
            let s = load();
            assert_eq!(s.require_gateway_api_key().unwrap(), "sk_live_very_secret");
            assert!(!format!("{s:?}").contains("very_secret"));
            assert!(!serde_json::to_string(&s).unwrap().contains("very_secret"));
            Ok(())
        });
    }

    #[test]
    fn database_max_lifetime_defaults_to_five_minutes_and_more_than_an_hour_is_refused() {
        figment::Jail::expect_with(|jail| {
            let s = load();
            assert_eq!(s.database.max_lifetime, Duration::from_secs(300));
            jail.set_env("ONECHARGE_DATABASE__MAX_LIFETIME", "2h");
            let err = load_error();
            assert!(
                err.contains("database.max_lifetime: must be between 10s and 1h"),
                "{err}"
            );
            Ok(())
        });
    }
}
