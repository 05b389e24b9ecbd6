//! The JetStream side of onecharge: stream and subject names, creating what is missing at
//! `setup`, and checking that what exists can be used.
//!
//! Over 600 lines only with its tests: every JetStream name, setting and check is here, so a
//! stream's settings are never spread over files.

use async_nats::header::NATS_MESSAGE_ID;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context as _};
use async_nats::jetstream::context::{
    ConsumerInfoError, ConsumerInfoErrorKind, CreateStreamError, CreateStreamErrorKind,
    GetStreamError, GetStreamErrorKind,
};
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::stream::{
    ConsumerError, ConsumerErrorKind, ConsumerUpdateError, ConsumerUpdateErrorKind,
};
use async_nats::jetstream::{self, consumer, stream};
use async_nats::HeaderMap;
use backon::Retryable as _;
use bytes::Bytes;

use crate::config::{IntakeSettings, NatsAuth, NatsUser, Settings};

/// Stream names and subjects for one deployment. With an empty namespace these are exactly
/// the contract's names; a namespace prefixes every stream and subject so that several
/// deployments (the demo, each test) can share one broker without seeing each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    prefix_stream: String,
    prefix_subject: String,
}

impl Names {
    pub fn new(namespace: &str) -> Self {
        if namespace.is_empty() {
            Self {
                prefix_stream: String::new(),
                prefix_subject: String::new(),
            }
        } else {
            Self {
                prefix_stream: format!("{}_", namespace.to_uppercase().replace('-', "_")),
                prefix_subject: format!("{namespace}."),
            }
        }
    }

    /// The kind of command whose dead letters `subject` holds (the dead-letter subject a
    /// letter was published to), if it is one of ours.
    pub fn kind_of_dead_letter(&self, subject: &str) -> Option<CommandKind> {
        [CommandKind::Charge, CommandKind::Refund]
            .into_iter()
            .find(|kind| self.dlq_subject_for(*kind) == subject)
    }

    pub fn commands_stream(&self) -> String {
        format!("{}PAYMENTS_COMMANDS", self.prefix_stream)
    }
    pub fn events_stream(&self) -> String {
        format!("{}PAYMENTS_EVENTS", self.prefix_stream)
    }
    pub fn dlq_stream(&self) -> String {
        format!("{}PAYMENTS_DLQ", self.prefix_stream)
    }
    /// `payments.commands.charge-payment.v1`
    pub fn charge_subject(&self) -> String {
        format!("{}payments.commands.charge-payment.v1", self.prefix_subject)
    }
    /// `payments.dlq.charge-payment.v1`
    pub fn dlq_subject(&self) -> String {
        self.dlq_subject_for(CommandKind::Charge)
    }
    /// The subject of one command family: `payments.commands.<family>.v1`.
    pub fn command_subject(&self, kind: CommandKind) -> String {
        format!(
            "{}payments.commands.{}.v1",
            self.prefix_subject,
            kind.family()
        )
    }
    /// Where that family's dead letters go: `payments.dlq.<family>.v1`.
    pub fn dlq_subject_for(&self, kind: CommandKind) -> String {
        format!("{}payments.dlq.{}.v1", self.prefix_subject, kind.family())
    }
    /// Prefixes a contract subject (an event subject from the outbox) with the namespace.
    pub fn subject(&self, contract_subject: &str) -> String {
        format!("{}{contract_subject}", self.prefix_subject)
    }
    fn wildcard(&self, family: &str) -> String {
        format!("{}payments.{family}.>", self.prefix_subject)
    }
}

/// The command families intake reads, each through a durable consumer of its own
/// (contract §2): a deployment that never sends refunds loses nothing, and a backlog of one
/// family never holds the other up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandKind {
    /// ChargePayment (§2.1).
    Charge,
    /// RefundPayment (§2.5).
    Refund,
}

impl CommandKind {
    /// The subject's family: `charge-payment`, `refund-payment`.
    pub fn family(self) -> &'static str {
        match self {
            Self::Charge => "charge-payment",
            Self::Refund => "refund-payment",
        }
    }

    pub fn command_name(self) -> &'static str {
        match self {
            Self::Charge => "ChargePayment",
            Self::Refund => "RefundPayment",
        }
    }

    /// The durable consumer's name: `intake.consumer` for charges (as it always was),
    /// `<intake.consumer>-refunds` for refunds.
    pub fn consumer_name(self, intake: &IntakeSettings) -> String {
        match self {
            Self::Charge => intake.consumer.clone(),
            Self::Refund => format!("{}-refunds", intake.consumer),
        }
    }
}

/// Which publish a retry belongs to: the `kind` label of `onecharge_publish_retries_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishKind {
    /// `publish charge`.
    Command,
    /// Intake's dead letters.
    DeadLetter,
    /// The relay's events.
    Event,
    /// `dlq replay`.
    Replay,
}

impl PublishKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Command => "command",
            Self::DeadLetter => "dead_letter",
            Self::Event => "event",
            Self::Replay => "replay",
        }
    }
}

/// The longest a publish keeps retrying, counted in waits between tries (each try also
/// waits up to its acknowledgement timeout). A stream-leader election in a NATS cluster
/// takes a few seconds, up to about ten when the leader's server died.
pub const PUBLISH_RETRY_FOR: Duration = Duration::from_secs(20);

/// Whether a failed publish may pass on its own (a stream-leader election, a reconnect) and
/// is worth another try under the same `Nats-Msg-Id`. A refusal (over-size message, a
/// JetStream error other than "temporarily unavailable") never is. "No responders" reads
/// as [`PublishErrorKind::StreamNotFound`]: in a cluster it is what an election looks like,
/// so it is retried too ([`Broker::publish_retrying`] first asks JetStream whether a stream
/// captures the subject at all, and gives up at once when none does).
pub fn publish_may_pass(err: &PublishError) -> bool {
    match err.kind() {
        PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe
        | PublishErrorKind::MaxAckPending
        | PublishErrorKind::StreamNotFound => true,
        PublishErrorKind::Other => std::error::Error::source(err)
            .and_then(|source| source.downcast_ref::<jetstream::Error>())
            .is_some_and(|e| e.code() == 503),
        _ => false,
    }
}

/// Whether JetStream answered a publish with a refusal of this very message, one that no
/// retry of the same message can pass: too large (after whatever the caller cut), a failed
/// `Nats-Expected-*` expectation, or any other JetStream error but "temporarily unavailable"
/// (503). No answer, no responders or a missing stream are never this message's fault: they
/// are the deployment's, and pass when it is mended.
pub fn publish_refused_for_good(err: &PublishError) -> bool {
    match err.kind() {
        PublishErrorKind::MaxPayloadExceeded
        | PublishErrorKind::WrongLastMessageId
        | PublishErrorKind::WrongLastSequence => true,
        PublishErrorKind::Other => std::error::Error::source(err)
            .and_then(|source| source.downcast_ref::<jetstream::Error>())
            .is_some_and(|e| e.code() != 503),
        _ => false,
    }
}

/// A message's headers that are its producer's own: every one but the NATS control headers
/// (`Nats-*`: a message id, an expected stream or last sequence, a rollup, a TTL) and
/// onecharge's dead-letter headers (`Dlq-*`). Whatever republishes a message elsewhere (a
/// dead letter, a replay) starts from these: a control header meant for the command stream
/// makes any other stream refuse the message, for ever (an expected stream that is not the
/// dead-letter stream).
pub fn producer_headers(original: &HeaderMap) -> HeaderMap {
    let mut kept = HeaderMap::new();
    for (name, values) in original.iter() {
        let name = name.to_string();
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("nats-") || lower.starts_with("dlq-") {
            continue;
        }
        for value in values {
            kept.append(name.as_str(), value.as_str());
        }
    }
    kept
}

/// A durable consumer's backlog, from JetStream consumer info.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerLag {
    /// Matching messages the consumer has not delivered yet (`num_pending`).
    pub pending: u64,
    /// Messages delivered and not yet acknowledged (`num_ack_pending`).
    pub ack_pending: u64,
}

/// What the NATS server refused this connection: its `-ERR` lines after the connection was
/// accepted (`Permissions Violation for Publish to "$JS.API.STREAM.INFO.PAYMENTS_COMMANDS"`
/// when the user lacks a permission, docs/operations.md §24). A refused request is dropped
/// by the server without an answer, so the client would only see it time out: the
/// start-up questions stop asking again once a refusal arrived while they asked, and say
/// what the server said.
#[derive(Clone, Debug, Default)]
pub struct Refusals(Arc<RefusalsInner>);

#[derive(Debug, Default)]
struct RefusalsInner {
    count: AtomicU64,
    last: Mutex<Option<String>>,
}

impl Refusals {
    fn note(&self, said: String) {
        *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(said);
        self.0.count.fetch_add(1, Ordering::SeqCst);
    }

    /// How many refusals so far: compare with a later count to learn whether one came since.
    pub fn count(&self) -> u64 {
        self.0.count.load(Ordering::SeqCst)
    }

    /// The server's words for the last refusal.
    pub fn last(&self) -> Option<String> {
        self.0
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `err`, with what the server said when it refused something since `before` (a
    /// [`Refusals::count`]): the reason a question went unanswered.
    pub fn explain(&self, before: u64, err: anyhow::Error) -> anyhow::Error {
        match self.last().filter(|_| self.count() > before) {
            Some(said) => err.context(format!(
                "the NATS server refused onecharge's user: {said} (grant the permissions of docs/operations.md §24)"
            )),
            None => err,
        }
    }
}

/// The one way onecharge connects to NATS (serve, setup, publish, dlq, purge, demo all come
/// through here), signed in as `user` (`crate::config::NatsUser`: `setup` as the setup user,
/// everything else as the runtime user) with its replies under `nats_inbox_prefix`. The
/// first connection is tried once and its failure returned as it is (refused, timed out, a
/// certificate not trusted), so a wrong URL or CA fails the command within seconds with the
/// reason; once connected, the client reconnects for ever. `tls://` URLs require TLS;
/// `nats_ca_file` adds a CA to the system's roots and also requires TLS, so a configured CA
/// never silently falls back to plain text. An unusable CA or credentials file is a
/// [`crate::config::ConfigError`].
pub async fn connect_client(
    settings: &Settings,
    user: NatsUser,
) -> anyhow::Result<async_nats::Client> {
    connect_noting_refusals(settings, user, Refusals::default()).await
}

/// [`connect_client`], noting in `refusals` (and logging) every request the server refuses.
async fn connect_noting_refusals(
    settings: &Settings,
    user: NatsUser,
    refusals: Refusals,
) -> anyhow::Result<async_nats::Client> {
    let extra_roots = match &settings.nats_ca_file {
        Some(path) => {
            crate::config::tls::read_ca_file("nats_ca_file (ONECHARGE_NATS_CA_FILE)", path)?
        }
        None => Vec::new(),
    };
    let sign_in = settings.nats_sign_in(user);
    // A comma-separated list names several servers of one cluster: the client tries them in
    // turn, so a process that starts while one is down connects to another.
    let servers: Vec<&str> = sign_in
        .url
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let require_tls = settings.nats_ca_file.is_some()
        || servers
            .iter()
            .any(|s| s.to_ascii_lowercase().starts_with("tls://"));
    let tls = crate::config::tls::client_config(extra_roots).map_err(|err| {
        crate::config::ConfigError(format!("nats_ca_file (ONECHARGE_NATS_CA_FILE): {err:#}"))
    })?;
    let mut options = async_nats::ConnectOptions::new();
    match &sign_in.auth {
        NatsAuth::Url => match url_credentials(&servers, sign_in.url_setting)? {
            Some(UrlCredentials::UserAndPassword(user, password)) => {
                options = options.user_and_password(user, password)
            }
            Some(UrlCredentials::Token(token)) => options = options.token(token),
            None => {}
        },
        // The URL's own credentials, if any, are not sent: the file is the user.
        NatsAuth::CredentialsFile(path) => {
            let setting = match user {
                NatsUser::Runtime => "nats_credentials_file (ONECHARGE_NATS_CREDENTIALS_FILE)",
                NatsUser::Setup => {
                    "nats_setup_credentials_file (ONECHARGE_NATS_SETUP_CREDENTIALS_FILE)"
                }
            };
            options = options.credentials_file(path).await.map_err(|_| {
                crate::config::ConfigError(format!(
                    "{setting} {}: cannot be read as a NATS credentials file (its content is not shown)",
                    path.display()
                ))
            })?;
        }
        NatsAuth::NKeyFile(path) => {
            let setting = match user {
                NatsUser::Runtime => "nats_nkey_file (ONECHARGE_NATS_NKEY_FILE)",
                NatsUser::Setup => "nats_setup_nkey_file (ONECHARGE_NATS_SETUP_NKEY_FILE)",
            };
            options = options.nkey(crate::config::read_nkey_seed(setting, path)?);
        }
    }
    let client = options
        .connection_timeout(Duration::from_secs(5))
        .max_reconnects(None)
        .name("onecharge")
        .custom_inbox_prefix(&settings.nats_inbox_prefix)
        .event_callback(move |event| {
            let refusals = refusals.clone();
            async move {
                if let async_nats::Event::ServerError(async_nats::ServerError::Other(said)) = event
                {
                    tracing::error!(server_said = %said, "the NATS server refused a request of onecharge's (a missing permission: docs/operations.md §24)");
                    refusals.note(said);
                }
            }
        })
        .tls_client_config(tls)
        .require_tls(require_tls)
        .connect(servers);
    tokio::time::timeout(Duration::from_secs(8), client)
        .await
        .map_err(|_| anyhow::anyhow!("timed out"))
        // A ConnectError's Display already ends with its source: keep it as one message so
        // the reason is not printed twice.
        .and_then(|r| r.map_err(|err| anyhow::anyhow!("{err}")))
        .with_context(|| format!("cannot connect to NATS at {}", sign_in.url))
}

/// The credentials a NATS URL carries: `nats://user:password@host` or `nats://token@host`,
/// percent-decoded. The client library reads none from its URLs, so onecharge hands them to
/// it itself.
#[derive(Debug, Clone, PartialEq, Eq)]
enum UrlCredentials {
    UserAndPassword(String, String),
    Token(String),
}

/// The one set of credentials `servers` carry; none when no URL has any. Servers of one
/// cluster are one user: URLs that carry different credentials are a
/// [`crate::config::ConfigError`], never one of them picked.
fn url_credentials(
    servers: &[&str],
    url_setting: &str,
) -> Result<Option<UrlCredentials>, crate::config::ConfigError> {
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8_lossy()
            .into_owned()
    };
    let mut found: Option<UrlCredentials> = None;
    for server in servers {
        let Ok(address) = server.parse::<async_nats::ServerAddr>() else {
            continue;
        };
        let credentials = match (address.username(), address.password()) {
            (Some(user), Some(password)) => {
                UrlCredentials::UserAndPassword(decode(user), decode(password))
            }
            (Some(token), None) => UrlCredentials::Token(decode(token)),
            _ => continue,
        };
        match &found {
            Some(other) if *other != credentials => {
                return Err(crate::config::ConfigError(format!(
                    "{url_setting}: its servers carry different credentials; one user connects to every server of a cluster"
                )))
            }
            _ => found = Some(credentials),
        }
    }
    Ok(found)
}

/// A connected JetStream context with this deployment's names.
#[derive(Clone)]
pub struct Broker {
    pub client: async_nats::Client,
    pub jetstream: jetstream::Context,
    pub names: Names,
    /// Replicas of a stream that [`Broker::ensure_streams`] creates (`streams.replicas`).
    pub replicas: usize,
    /// What the server refused this connection.
    pub refusals: Refusals,
}

impl Broker {
    /// Connects to NATS as the runtime user (see [`connect_client`]) with this deployment's
    /// names.
    pub async fn connect(settings: &Settings) -> anyhow::Result<Self> {
        Self::connect_as(settings, NatsUser::Runtime).await
    }

    /// [`Broker::connect`] as `user`: `setup` connects as the setup user.
    pub async fn connect_as(settings: &Settings, user: NatsUser) -> anyhow::Result<Self> {
        let refusals = Refusals::default();
        let client = connect_noting_refusals(settings, user, refusals.clone()).await?;
        Ok(Self {
            jetstream: jetstream::new(client.clone()),
            client,
            names: Names::new(&settings.namespace),
            replicas: settings.streams.replicas,
            refusals,
        })
    }

    /// Creates the three streams when missing (`setup`). An existing stream is used as it is
    /// (its settings are the operator's), unless it cannot serve: then a clear error says why.
    pub async fn ensure_streams(&self) -> anyhow::Result<()> {
        let before = self.refusals.count();
        for (name, required) in self.streams() {
            self.ensure_stream(&name, &required)
                .await
                .map_err(|err| self.refusals.explain(before, err))?;
        }
        Ok(())
    }

    /// Checks that the three streams exist and can serve, creating nothing: what `serve` and
    /// `setup --check` ask at start (only `setup` creates streams, docs/decisions/160-setup-migrates-as-the-owner-serve-only-checks.md). A
    /// missing stream is an error that names `onecharge setup`.
    pub async fn check_streams(&self) -> anyhow::Result<()> {
        let before = self.refusals.count();
        for (name, required) in self.streams() {
            match self.lookup_stream(&name).await {
                Ok(existing) => {
                    check_stream_compatible(&name, &existing.cached_info().config, &required)?
                }
                Err(err) if is_not_found(&err) => {
                    bail!("stream {name} is missing: run `onecharge setup`")
                }
                Err(err) => {
                    let err = anyhow::Error::new(err).context(format!("looking up stream {name}"));
                    return Err(self.refusals.explain(before, err));
                }
            }
        }
        Ok(())
    }

    /// The command, event and dead-letter streams, each with the subjects it must capture.
    fn streams(&self) -> [(String, String); 3] {
        [
            (
                self.names.commands_stream(),
                self.names.wildcard("commands"),
            ),
            (self.names.events_stream(), self.names.wildcard("events")),
            (self.names.dlq_stream(), self.names.wildcard("dlq")),
        ]
    }

    async fn ensure_stream(&self, name: &str, required_subject: &str) -> anyhow::Result<()> {
        match self.lookup_stream(name).await {
            Ok(existing) => {
                check_stream_compatible(name, &existing.cached_info().config, required_subject)
            }
            Err(err) if is_not_found(&err) => {
                let config = stream::Config {
                    name: name.to_owned(),
                    subjects: vec![required_subject.to_owned()],
                    storage: stream::StorageType::File,
                    retention: stream::RetentionPolicy::Limits,
                    // Producer retries carry the same Nats-Msg-Id; JetStream drops them
                    // inside this window, the dedupe table catches the rest.
                    duplicate_window: Duration::from_secs(120),
                    max_age: Duration::from_secs(7 * 24 * 3600),
                    num_replicas: self.replicas,
                    ..Default::default()
                };
                // Asked again while the cluster elects (a create that timed out may have
                // landed: asking again with the same configuration is answered with the
                // stream); one created meanwhile under another configuration is checked.
                let created = ask_until_answered(
                    &self.refusals,
                    &format!("creating stream {name}"),
                    || self.jetstream.create_stream(config.clone()),
                    stream_create_may_pass,
                )
                .await;
                match created {
                    Ok(_) => {
                        tracing::info!(
                            stream = name,
                            subjects = required_subject,
                            replicas = self.replicas,
                            "created stream"
                        );
                        Ok(())
                    }
                    Err(err) if is_name_in_use(&err) => {
                        let existing = self
                            .lookup_stream(name)
                            .await
                            .with_context(|| format!("looking up stream {name}"))?;
                        check_stream_compatible(
                            name,
                            &existing.cached_info().config,
                            required_subject,
                        )
                    }
                    Err(err) => Err(err)
                        .with_context(|| format!("creating stream {name} for {required_subject}")),
                }
            }
            Err(err) => Err(err).with_context(|| format!("looking up stream {name}")),
        }
    }

    /// Creates (or updates to the configured limits) the durable pull consumer of the
    /// command stream and returns it. Every question it asks JetStream is asked again while
    /// nobody answers (an election: [`ask_until_answered`]), so `serve` started while the
    /// cluster elects a leader waits for it; only the server saying the stream is not found
    /// reports it missing.
    pub async fn ensure_intake_consumer(
        &self,
        settings: &Settings,
    ) -> anyhow::Result<consumer::PullConsumer> {
        self.ensure_consumer(settings, CommandKind::Charge).await
    }

    /// [`Self::ensure_intake_consumer`] for the consumer of one command family: charges
    /// (`intake.consumer`) or refunds (`<intake.consumer>-refunds`). A refusal by the
    /// server's permissions is reported in its own words.
    pub async fn ensure_consumer(
        &self,
        settings: &Settings,
        kind: CommandKind,
    ) -> anyhow::Result<consumer::PullConsumer> {
        let before = self.refusals.count();
        self.ensure_consumer_once(settings, kind)
            .await
            .map_err(|err| self.refusals.explain(before, err))
    }

    async fn ensure_consumer_once(
        &self,
        settings: &Settings,
        kind: CommandKind,
    ) -> anyhow::Result<consumer::PullConsumer> {
        let intake = &settings.intake;
        let durable = kind.consumer_name(intake);
        let stream = self.command_stream().await?;
        let config = intake_consumer_config(&self.names, intake, kind);
        let what = format!("consumer {durable} on {}", self.names.commands_stream());
        let existing = ask_until_answered(
            &self.refusals,
            &what,
            || stream.consumer_info(&durable),
            consumer_info_may_pass,
        )
        .await;
        let current = match existing {
            Ok(info) => info.config,
            Err(err) if err.kind() == ConsumerInfoErrorKind::NotFound => {
                return ask_until_answered(
                    &self.refusals,
                    &what,
                    || stream.create_consumer(config.clone()),
                    |err: &ConsumerError| consumer_write_may_pass(err.kind()),
                )
                .await
                .with_context(|| format!("creating durable {what}"));
            }
            Err(err) => return Err(err).with_context(|| format!("looking up {what}")),
        };
        if current.filter_subject != config.filter_subject {
            bail!(
                "{what} filters `{}`, expected `{}`: delete it or choose another intake.consumer",
                current.filter_subject,
                config.filter_subject
            );
        }
        if limits_differ(&current, &config) {
            return ask_until_answered(
                &self.refusals,
                &what,
                || stream.update_consumer(config.clone()),
                consumer_update_may_pass,
            )
            .await
            .context("updating the intake consumer's limits");
        }
        bind_consumer(&self.refusals, &stream, &durable, &what).await
    }

    /// The command stream, which `setup` creates: missing, it is the operator's to create.
    async fn command_stream(&self) -> anyhow::Result<stream::Stream> {
        let name = self.names.commands_stream();
        match self.lookup_stream(&name).await {
            Ok(stream) => Ok(stream),
            Err(err) if is_not_found(&err) => {
                Err(err).with_context(|| format!("stream {name} is missing: run `onecharge setup`"))
            }
            Err(err) => Err(err).with_context(|| format!("looking up stream {name}")),
        }
    }

    /// Looks a stream up, asking again while nobody answers (see [`ask_until_answered`]);
    /// any answer, "not found" included, is returned as it is.
    async fn lookup_stream(&self, name: &str) -> Result<stream::Stream, GetStreamError> {
        ask_until_answered(
            &self.refusals,
            &format!("stream {name}"),
            || self.jetstream.get_stream(name),
            stream_lookup_may_pass,
        )
        .await
    }

    /// What JetStream says about stream `name` now, or an error an operator can act on.
    pub async fn stream_info(
        &self,
        name: &str,
    ) -> anyhow::Result<async_nats::jetstream::stream::Info> {
        let stream = self
            .jetstream
            .get_stream(name)
            .await
            .with_context(|| format!("reading stream {name}: is `onecharge setup` done?"))?;
        Ok(stream.cached_info().clone())
    }

    /// How many messages stream `name` holds now.
    pub async fn stream_messages(&self, name: &str) -> anyhow::Result<u64> {
        Ok(self.stream_info(name).await?.state.messages)
    }

    /// How far `consumer` on the command stream is behind: messages not yet delivered and
    /// messages delivered but not yet acknowledged, as the server counts them.
    pub async fn intake_consumer_lag(&self, consumer: &str) -> anyhow::Result<ConsumerLag> {
        let stream = self
            .jetstream
            .get_stream_no_info(self.names.commands_stream())
            .await
            .with_context(|| format!("stream {}", self.names.commands_stream()))?;
        let info = stream
            .consumer_info(consumer)
            .await
            .with_context(|| format!("reading consumer {consumer}"))?;
        Ok(ConsumerLag {
            pending: info.num_pending,
            ack_pending: info.num_ack_pending as u64,
        })
    }

    /// Publishes and waits for JetStream's acknowledgement, retrying what may pass (see
    /// [`publish_may_pass`]) with jittered exponential waits for up to [`PUBLISH_RETRY_FOR`].
    /// Every try is the same message with the same `Nats-Msg-Id` (the caller's headers must
    /// carry one), so a try that was stored although its ack was lost makes the next one a
    /// duplicate, never a second copy. `ack_timeout` bounds each try's wait for its ack
    /// (`None`: the client's default).
    pub async fn publish_retrying(
        &self,
        kind: PublishKind,
        subject: String,
        headers: HeaderMap,
        payload: Bytes,
        ack_timeout: Option<Duration>,
    ) -> Result<PublishAck, PublishError> {
        debug_assert!(
            headers.get(NATS_MESSAGE_ID).is_some(),
            "a retried publish needs a Nats-Msg-Id"
        );
        // The error, and whether another try may pass.
        let once = || async {
            let tried = async {
                let ack = self
                    .jetstream
                    .publish_with_headers(subject.clone(), headers.clone(), payload.clone())
                    .await?;
                match ack_timeout {
                    Some(limit) => {
                        tokio::time::timeout(limit, std::future::IntoFuture::into_future(ack))
                            .await
                            .unwrap_or_else(|_| Err(PublishError::new(PublishErrorKind::TimedOut)))
                    }
                    None => ack.await,
                }
            }
            .await;
            match tried {
                Ok(ack) => Ok(ack),
                Err(err) if err.kind() == PublishErrorKind::StreamNotFound => {
                    // "No responders": an election, unless no stream captures the subject
                    // at all (then no retry will help, and the caller says so at once).
                    let stream_missing = matches!(
                        self.jetstream.stream_by_subject(subject.clone()).await,
                        Err(e) if e.kind() == jetstream::context::GetStreamByNameErrorKind::NotFound
                    );
                    Err((err, !stream_missing))
                }
                Err(err) => {
                    let may_pass = publish_may_pass(&err);
                    Err((err, may_pass))
                }
            }
        };
        once.retry(
            crate::domain::retry::exponential(Duration::from_millis(100), Duration::from_secs(2))
                .with_total_delay(Some(PUBLISH_RETRY_FOR)),
        )
        .sleep(tokio::time::sleep)
        .when(|(_, may_pass)| *may_pass)
        .notify(|(err, _), wait| {
            crate::metrics::publish_retry(kind.as_str());
            tracing::warn!(kind = kind.as_str(), subject = %subject, error = %err, retry_in_ms = wait.as_millis() as u64, "publish not acknowledged; retrying under the same Nats-Msg-Id");
        })
        .await
        .map_err(|(err, _)| err)
    }

    /// True when the server answers (readiness).
    pub async fn ping(&self) -> bool {
        matches!(
            self.client.connection_state(),
            async_nats::connection::State::Connected
        ) && tokio::time::timeout(Duration::from_secs(2), self.client.flush())
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// The longest a start-up question to JetStream (a stream or the intake consumer looked up,
/// created or updated) keeps being asked again while nobody answers, counted in waits
/// between tries (each try also waits up to the request timeout, 5 s): a stream-leader or
/// meta-leader election takes a few seconds, up to about ten when the leader's server died.
pub const LOOKUP_RETRY_FOR: Duration = PUBLISH_RETRY_FOR;

/// Asks `ask` again, with jittered exponential waits for up to [`LOOKUP_RETRY_FOR`], while
/// its error `may_pass` — no answer (a timeout, no responders: the stream or meta leader
/// being elected, a reconnect) or JetStream's "temporarily unavailable" (503). An answer,
/// such as "not found", is returned at once: only the server's word says something is
/// missing, never a silence. So is a silence while the server refused something of this
/// connection (`refusals`): a request the user may not make is never answered, and asking
/// again would only wait longer.
async fn ask_until_answered<T, E, Fut>(
    refusals: &Refusals,
    what: &str,
    ask: impl FnMut() -> Fut,
    may_pass: impl Fn(&E) -> bool,
) -> Result<T, E>
where
    Fut: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let before = refusals.count();
    let may_pass = |err: &E| may_pass(err) && refusals.count() == before;
    ask.retry(
        crate::domain::retry::exponential(Duration::from_millis(100), Duration::from_secs(2))
            .with_total_delay(Some(LOOKUP_RETRY_FOR)),
    )
    .sleep(tokio::time::sleep)
    .when(may_pass)
    .notify(|err, wait| {
        tracing::warn!(what, error = %err, retry_in_ms = wait.as_millis() as u64, "JetStream did not answer; asking again");
    })
    .await
}

/// The durable intake consumer as this deployment wants it: explicit acks, the
/// configured `ack_wait`, no `max_deliver`, and as many messages in hand as intake can hold.
fn intake_consumer_config(
    names: &Names,
    intake: &IntakeSettings,
    kind: CommandKind,
) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(kind.consumer_name(intake)),
        description: Some(format!(
            "onecharge intake: records {} commands",
            kind.command_name()
        )),
        filter_subject: names.command_subject(kind),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: intake.ack_wait,
        // Unlimited: JetStream never ends a message's life on its own (it would drop it
        // silently when the dead-letter publish failed on the last delivery). Intake
        // decides when a message is exhausted and keeps it until its dead letter is
        // stored (docs/decisions/028-the-application-not-jetstream-ends-a-commands.md).
        max_deliver: -1,
        // Bounded by what this deployment can have in hand at once.
        max_ack_pending: (intake.batch_size * intake.concurrency) as i64,
        max_batch: (intake.batch_size * intake.concurrency) as i64,
        ..Default::default()
    }
}

/// Whether an existing consumer's limits are not the configured ones (and it must be
/// updated to them).
fn limits_differ(current: &consumer::Config, wanted: &consumer::pull::Config) -> bool {
    current.ack_wait != wanted.ack_wait
        || current.max_deliver != wanted.max_deliver
        || current.max_ack_pending != wanted.max_ack_pending
        || current.max_batch != wanted.max_batch
}

/// Binds to the existing consumer `what`, whose configuration is already the wanted one.
async fn bind_consumer(
    refusals: &Refusals,
    stream: &stream::Stream,
    consumer: &str,
    what: &str,
) -> anyhow::Result<consumer::PullConsumer> {
    ask_until_answered(
        refusals,
        what,
        || stream.get_consumer::<consumer::pull::Config>(consumer),
        |err: &async_nats::Error| {
            err.downcast_ref::<ConsumerInfoError>()
                .is_some_and(consumer_info_may_pass)
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("binding to {what}: {e}"))
}

/// A JetStream API error that says "not now" rather than "no": 503, JetStream or its
/// cluster temporarily unavailable (no meta leader yet, 10008).
fn api_error_may_pass(err: &jetstream::Error) -> bool {
    err.code() == 503 || err.error_code() == jetstream::ErrorCode::CLUSTER_NOT_AVAILABLE
}

fn stream_lookup_may_pass(err: &GetStreamError) -> bool {
    match err.kind() {
        GetStreamErrorKind::Request => true,
        GetStreamErrorKind::JetStream(e) => api_error_may_pass(&e),
        _ => false,
    }
}

fn stream_create_may_pass(err: &CreateStreamError) -> bool {
    match err.kind() {
        CreateStreamErrorKind::TimedOut | CreateStreamErrorKind::JetStreamUnavailable => true,
        CreateStreamErrorKind::JetStream(e) => api_error_may_pass(&e),
        _ => false,
    }
}

fn is_name_in_use(err: &CreateStreamError) -> bool {
    matches!(
        err.kind(),
        CreateStreamErrorKind::JetStream(e)
            if e.error_code() == jetstream::ErrorCode::STREAM_NAME_EXIST
    )
}

fn consumer_info_may_pass(err: &ConsumerInfoError) -> bool {
    match err.kind() {
        ConsumerInfoErrorKind::TimedOut
        | ConsumerInfoErrorKind::NoResponders
        | ConsumerInfoErrorKind::Request
        | ConsumerInfoErrorKind::Offline => true,
        ConsumerInfoErrorKind::JetStream(e) => api_error_may_pass(&e),
        _ => false,
    }
}

fn consumer_write_may_pass(kind: ConsumerErrorKind) -> bool {
    match kind {
        ConsumerErrorKind::TimedOut | ConsumerErrorKind::Request => true,
        ConsumerErrorKind::JetStream(e) => api_error_may_pass(&e),
        _ => false,
    }
}

fn consumer_update_may_pass(err: &ConsumerUpdateError) -> bool {
    match err.kind() {
        ConsumerUpdateErrorKind::TimedOut | ConsumerUpdateErrorKind::Request => true,
        ConsumerUpdateErrorKind::JetStream(e) => api_error_may_pass(&e),
        _ => false,
    }
}

fn is_not_found(err: &jetstream::context::GetStreamError) -> bool {
    matches!(
        err.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(e)
            if e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}

/// An existing stream must capture the subjects onecharge uses and must acknowledge
/// publishes (otherwise "recorded" can never be confirmed).
fn check_stream_compatible(
    name: &str,
    config: &stream::Config,
    required_subject: &str,
) -> anyhow::Result<()> {
    if config.no_ack {
        bail!("stream {name} exists with no_ack=true: onecharge needs acknowledged publishes; recreate it without no_ack");
    }
    let covered = config
        .subjects
        .iter()
        .any(|s| s == required_subject || s == ">" || subject_covers(s, required_subject));
    if !covered {
        bail!(
            "stream {name} exists with subjects {:?}, which do not include `{required_subject}`: fix the stream or choose another namespace",
            config.subjects
        );
    }
    Ok(())
}

/// Whether the subject filter `pattern` matches every subject that `wanted` matches.
fn subject_covers(pattern: &str, wanted: &str) -> bool {
    let mut p = pattern.split('.');
    let mut w = wanted.split('.');
    loop {
        match (p.next(), w.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(t)) if t != ">" => continue,
            (Some(a), Some(b)) if a == b => continue,
            (None, None) => return true,
            _ => return false,
        }
    }
}

pub mod publish;
#[cfg(test)]
mod tests;
