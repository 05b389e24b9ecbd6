//! What can be set: [`Settings`] and one struct per section (`[intake]`, `[executor]`, …),
//! each with its defaults and the serde rules that read it. The checks serde cannot make are
//! in `validate`; how secrets are read and kept out of print, in `redact`. One struct per
//! configuration section with its defaults and its documentation: a reader looks a setting
//! up here by its section.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::duration::{bounded_duration, duration_list};
use super::redact::{redact, secret};
use super::ConfigError;
use crate::domain::lookup::{LookupSchedule, ResendLimits};
use crate::domain::refund_call::RefundPolicy;
use crate::domain::RetryWindow;

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
    /// A NATS credentials file (`.creds`: a user JWT and its NKey seed, as `nsc generate
    /// creds` writes it) that the runtime user (`serve`, the operator commands) signs in
    /// with, instead of a user and password in `nats_url`. Read at start; never printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats_credentials_file: Option<PathBuf>,
    /// A file holding the runtime user's NKey seed (`SU…`, one line, as `nk -gen user`
    /// writes it), for a server that lists the user by its public key (`nkey: U…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats_nkey_file: Option<PathBuf>,
    /// The subject prefix of every reply onecharge's connections wait on (JetStream API
    /// answers, publish acknowledgements, pulled messages). The client's default `_INBOX`
    /// is shared with every other user of the account that may subscribe to `_INBOX.>`,
    /// and so could read onecharge's replies; a prefix of its own (`_INBOX_onecharge`, as
    /// deploy/nats grants) keeps them onecharge's. Subject tokens without wildcards.
    #[serde(default = "default_nats_inbox_prefix")]
    pub nats_inbox_prefix: String,
    /// The URL `setup` connects with, carrying the setup user's credentials
    /// (`nats://onecharge-setup:<password>@nats:4222`): the only user that may create
    /// streams. Unset, `setup` connects to `nats_url`'s servers, as the setup user when
    /// `nats_setup_credentials_file` or `nats_setup_nkey_file` names one, else as the
    /// runtime user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats_setup_url: Option<String>,
    /// The setup user's `.creds` file (see `nats_credentials_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats_setup_credentials_file: Option<PathBuf>,
    /// The setup user's NKey seed file (see `nats_nkey_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats_setup_nkey_file: Option<PathBuf>,
    /// Base URL of the payment gateway (contract §3). Its default follows `gateway_kind`
    /// (`https://api.stripe.com` for `stripe`).
    pub gateway_url: String,
    /// Which protocol the gateway speaks (contract §3.1): `onecharge` or `stripe`.
    #[serde(default)]
    pub gateway_kind: GatewayKind,
    /// PEM file of CA certificates trusted for an `https://` gateway, besides the system's
    /// roots (a private CA, or a test gateway's own).
    #[serde(default)]
    pub gateway_ca_file: Option<PathBuf>,
    /// Whether this deployment moves real money: a Stripe key must then be live
    /// (`sk_live_…`, `rk_live_…`), and otherwise must not be (a test key, `sk_test_…`,
    /// `rk_test_…`): a key of the other mode refuses to start. Webhook events whose
    /// `livemode` differs are refused. Off by default: a deployment says it is production.
    #[serde(default)]
    pub production: bool,
    /// This deployment's name among the onecharge deployments that share one gateway
    /// account (`eu`, `us`: 1–64 letters, digits, `_`, `-`, `.`), sent as the metadata
    /// `onecharge_deployment` of every charge and refund. The sweep and the webhooks' checks
    /// skip a record naming another deployment (counted like another integration's,
    /// never a finding). Unset: nothing is sent, and only records naming no deployment
    /// are this one's. Every sibling must set its own (decision 242).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
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
    /// The reverse proxies in front of the admin listener, as addresses or networks
    /// (`127.0.0.1`, `10.0.0.0/8`), comma separated in `ONECHARGE_ADMIN_TRUSTED_PROXIES`. A
    /// request from one of them is counted by the console's sign-in throttle under the client
    /// address its `X-Forwarded-For` names (the rightmost one that is not itself a trusted
    /// proxy); anyone else's `X-Forwarded-For` is ignored. Empty: the TCP peer is the client.
    #[serde(deserialize_with = "comma_separated", default)]
    pub admin_trusted_proxies: Vec<String>,
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
    /// A TOML file of more `[[operators]]` (name, role, token_sha256 and nothing else),
    /// merged with those of the configuration: the file a Kubernetes Secret or ConfigMap
    /// mounts, where the configuration itself is environment variables. An operator named
    /// in both is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operators_file: Option<PathBuf>,
    // The files secret settings are read from instead of their values (`<setting>_file`,
    // `ONECHARGE_<SETTING>_FILE`): what a mounted Secret or a secret manager's agent gives,
    // each holding the value (a trailing newline is not part of it). A setting is given as a
    // value or as a file, never both: two sources would leave a reader guessing which one is
    // live. `Settings::load` reads them (`config::files`).
    /// `database_url` from a file: the URL holds the database password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_url_file: Option<PathBuf>,
    /// `nats_url` from a file: the URL may hold the NATS user's password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats_url_file: Option<PathBuf>,
    /// `nats_setup_url` from a file: the URL holds the setup user's password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats_setup_url_file: Option<PathBuf>,
    /// `gateway_api_key` from a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_api_key_file: Option<PathBuf>,
    /// `admin_token` from a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_token_file: Option<PathBuf>,
    /// `stripe_webhook_secrets` from a file (comma-separated, as the value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripe_webhook_secrets_file: Option<PathBuf>,
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
    /// The Stripe API version every request names (`Stripe-Version`), as Stripe's own
    /// libraries pin one: an account's default version moving on then changes nothing
    /// onecharge sends or reads. `YYYY-MM-DD`, with Stripe's release name after a dot from
    /// 2024-09-30 on (`2024-09-30.acacia`); no earlier than 2022-11-15, the first version
    /// with a PaymentIntent's `latest_charge`, which onecharge reads. Upgrade it only to a
    /// version whose changes docs/stripe.md was checked against.
    #[serde(default = "default_stripe_api_version")]
    pub stripe_api_version: String,
    /// What a Stripe PaymentIntent left `requires_action` by an off-session confirm comes
    /// to: `cancel` (the default) cancels it and declines the attempt
    /// `authentication_required` (the customer is not there to authenticate); `review`
    /// leaves it for a person.
    #[serde(default)]
    pub stripe_requires_action: RequiresAction,
    /// Requests per second the whole fleet may send to the gateway (charges, refunds and
    /// lookups together, as a gateway counts them against one API key; a `stripe` charge is
    /// two).
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
    pub refunds: RefundSettings,
    #[serde(default)]
    pub reconciler: ReconcilerSettings,
    #[serde(default)]
    pub database: DatabaseSettings,
    #[serde(default)]
    pub streams: StreamsSettings,
}

/// Which wire protocol the gateway speaks (`gateway_kind`, `ONECHARGE_GATEWAY_KIND`;
/// contract §3.1). A setting first: the gateway's connectors are chosen by it
/// (the gateway module re-exports it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum GatewayKind {
    /// The contract's own §3 API: `POST /v1/charges`, lookup by idempotency key.
    #[default]
    Onecharge,
    /// Stripe's PaymentIntents API; lookup by the PaymentIntent id stored before confirming.
    Stripe,
}

impl GatewayKind {
    /// The `gateway_url` used when none is configured.
    pub fn default_url(self) -> &'static str {
        match self {
            Self::Onecharge => "http://127.0.0.1:8080",
            Self::Stripe => "https://api.stripe.com",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Onecharge => "onecharge",
            Self::Stripe => "stripe",
        }
    }
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
    /// is not a loopback address or any of `admin_public_origins` is https (a proxy on the
    /// same host), off otherwise; `false` off loopback is refused
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
    /// `admin_addr` and is reached under `public_origins`: as configured, else off loopback
    /// or behind an https origin.
    pub fn secure_cookie_on(&self, admin_addr: SocketAddr, public_origins: &[String]) -> bool {
        // Behind an https proxy on the same host the bind is loopback, yet browsers reach
        // the console by https only: the cookie follows the public origin's scheme.
        let behind_https = public_origins
            .iter()
            .any(|origin| origin.to_ascii_lowercase().starts_with("https://"));
        self.secure_cookie
            .unwrap_or(!admin_addr.ip().is_loopback() || behind_https)
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
    /// How long `serve` keeps asking at start for a writable primary while the database is
    /// out of reach or read-only (a failover: Patroni electing a leader, CloudNativePG
    /// promoting a replica), before it exits with the error. A supervisor restarting a
    /// process that exited at once would back off for longer than the failover lasts.
    /// `0s` exits at once.
    #[serde(with = "bounded_duration")]
    pub startup_wait: Duration,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            statement_timeout: Duration::from_secs(30),
            lock_timeout: Duration::from_secs(5),
            idle_in_transaction_session_timeout: Duration::from_secs(60),
            max_lifetime: Duration::from_secs(300),
            startup_wait: Duration::from_secs(60),
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

/// Refund settings (contract §2.5): the refund worker runs wherever the executor does.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RefundSettings {
    /// How long a refund waits for its payment attempt to be recorded and final; past it
    /// the refund is refused (and dead-lettered) with the attempt's state as the reason.
    #[serde(with = "bounded_duration")]
    pub max_wait: Duration,
    /// How often a waiting refund asks again whether its attempt is final.
    #[serde(with = "bounded_duration")]
    pub recheck_interval: Duration,
    /// Refunds admitted, sent or looked up per pass.
    pub batch_size: usize,
}

impl Default for RefundSettings {
    fn default() -> Self {
        Self {
            max_wait: Duration::from_secs(24 * 3600),
            recheck_interval: Duration::from_secs(5),
            batch_size: 32,
        }
    }
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

/// The Stripe API version onecharge was written and tested against.
pub const DEFAULT_STRIPE_API_VERSION: &str = "2024-06-20";

fn default_stripe_api_version() -> String {
    DEFAULT_STRIPE_API_VERSION.to_owned()
}

/// The async-nats client's own inbox prefix: what a server configured by an earlier release
/// (subscribe `_INBOX.>`) grants.
pub const DEFAULT_NATS_INBOX_PREFIX: &str = "_INBOX";

fn default_nats_inbox_prefix() -> String {
    DEFAULT_NATS_INBOX_PREFIX.into()
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
    /// still stops a second charge); see docs/decisions/004-the-consumer-name-is-part-of-the-dedupe-key.md.
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
    /// (docs/operations.md §16: a command the broker stored and never delivered, or whose
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
            nats_credentials_file: None,
            nats_nkey_file: None,
            nats_inbox_prefix: default_nats_inbox_prefix(),
            nats_setup_url: None,
            nats_setup_credentials_file: None,
            nats_setup_nkey_file: None,
            gateway_url: GatewayKind::default().default_url().into(),
            gateway_kind: GatewayKind::default(),
            gateway_ca_file: None,
            gateway_api_key: None,
            production: false,
            deployment: None,
            admin_addr: SocketAddr::from(([127, 0, 0, 1], 9464)),
            admin_token: None,
            admin_public_origins: Vec::new(),
            admin_trusted_proxies: Vec::new(),
            webhook_addr: None,
            stripe_webhook_secrets: None,
            webhook_tolerance: default_webhook_tolerance(),
            insecure_admin: false,
            operators: Vec::new(),
            operators_file: None,
            database_url_file: None,
            nats_url_file: None,
            nats_setup_url_file: None,
            gateway_api_key_file: None,
            admin_token_file: None,
            stripe_webhook_secrets_file: None,
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
            stripe_api_version: default_stripe_api_version(),
            gateway_rate_burst: 0,
            shutdown_timeout: default_shutdown_timeout(),
            executor: ExecutorSettings::default(),
            relay: RelaySettings::default(),
            purge: PurgeSettings::default(),
            refunds: RefundSettings::default(),
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

impl Settings {
    /// The longest a whole gateway call may take: connect plus request timeout.
    pub fn gateway_call_limit(&self) -> Duration {
        self.gateway_connect_timeout + self.gateway_request_timeout
    }

    /// The gateway key, or the configuration error that names where to set it.
    pub fn require_gateway_api_key(&self) -> Result<&str, ConfigError> {
        self.gateway_api_key
            .as_ref()
            .map(|key| key.expose_secret())
            .filter(|key| !key.is_empty())
            .ok_or_else(|| ConfigError("gateway_api_key is not set: set ONECHARGE_GATEWAY_API_KEY or ONECHARGE_GATEWAY_API_KEY_FILE (or gateway_api_key or gateway_api_key_file in onecharge.toml)".into()))
    }
}

// The domain's retry window as the configuration describes it. Written here, beside the
// settings it reads, so that the domain takes plain durations and knows nothing of the
// configuration.
impl RetryWindow {
    /// The window the settings describe (`validate` has checked that the margin is below
    /// the retention).
    pub fn from_settings(settings: &Settings) -> Self {
        Self::new(
            settings.gateway_key_retention,
            settings.gateway_key_retention_margin,
            settings.executor.max_age,
        )
    }
}

// The one lookup schedule, and a refund's policy, as the configuration describes them.
impl LookupSchedule {
    /// `reconciler.schedule`, `reconciler.processing_schedule`, `reconciler.processing_max`.
    pub fn from_settings(settings: &Settings) -> Self {
        let reconciler = &settings.reconciler;
        Self {
            schedule: reconciler.schedule.clone(),
            processing_schedule: reconciler.processing_schedule.clone(),
            processing_max: reconciler.processing_max,
        }
    }
}

impl RefundPolicy {
    /// The executor's retry delays and limits, the gateway's processing time and key
    /// window, and the reconciler's lookup schedule: a refund is held to what a charge is.
    pub fn from_settings(settings: &Settings) -> Self {
        let executor = &settings.executor;
        Self {
            retry_min_delay: executor.retry_min_delay,
            retry_max_delay: executor.retry_max_delay,
            in_progress_delay: executor.in_progress_delay,
            limits: ResendLimits {
                max_tries: executor.max_tries,
                window: RetryWindow::from_settings(settings),
            },
            max_processing_time: settings.gateway_max_processing_time,
            lookups: LookupSchedule::from_settings(settings),
        }
    }
}

/// The window of the default settings.
impl Default for RetryWindow {
    fn default() -> Self {
        Self::from_settings(&Settings::default())
    }
}

#[cfg(test)]
// figment::Jail's closures return figment::Error, which is large; that is its API.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use crate::config::testing::{load, load_error};

    #[test]
    fn console_cookies_are_secure_by_default_off_loopback_only() {
        let console = ConsoleSettings::default();
        assert!(!console.secure_cookie_on("127.0.0.1:9464".parse().unwrap(), &[]));
        assert!(!console.secure_cookie_on("[::1]:9464".parse().unwrap(), &[]));
        assert!(console.secure_cookie_on("0.0.0.0:9464".parse().unwrap(), &[]));
        let forced = ConsoleSettings {
            secure_cookie: Some(true),
            ..ConsoleSettings::default()
        };
        assert!(forced.secure_cookie_on("127.0.0.1:9464".parse().unwrap(), &[]));
    }

    #[test]
    fn console_cookies_are_secure_behind_an_https_public_origin_on_a_loopback_bind() {
        let console = ConsoleSettings::default();
        let behind_https = ["https://ops.example.com".to_owned()];
        assert!(console.secure_cookie_on("127.0.0.1:9464".parse().unwrap(), &behind_https));
        let behind_http = ["http://ops.internal:8080".to_owned()];
        assert!(!console.secure_cookie_on("127.0.0.1:9464".parse().unwrap(), &behind_http));
    }

    #[test]
    fn admin_public_origins_are_a_comma_separated_list_of_plain_origins() {
        crate::config::testing::jail(|jail| {
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
}
