//! Building and running the service: `setup`, and `serve` with its roles. Tests start the
//! real thing through [`Application`], not a copy of it.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::broker::{Broker, CommandKind};
use crate::config::Settings;
use crate::domain::RetryWindow;
use crate::executor::Executor;
use crate::gateway::{GatewayClient, GatewayHealth};
use crate::intake::Intake;
use crate::nudge::Nudges;
use crate::reconciler::Reconciler;
use crate::shutdown::cancel_on_signal;
use crate::store::Store;

/// How much longer than `shutdown_timeout` `serve` waits for its roles: a role that bounds
/// its own drain by `shutdown_timeout` (the executor) stops and reports first.
const ROLE_STOP_GRACE: Duration = Duration::from_secs(2);

/// A part of `serve` that can run alone (`--roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Role {
    /// Records commands from the command stream
    Intake,
    /// Admin HTTP: health, readiness, metrics, operator API
    Admin,
    /// Charges due payment attempts through the gateway
    Executor,
    /// Publishes outbox events to the events stream
    Relay,
    /// Deletes dedupe rows past purge.dedupe_retention and history past purge.history_retention, every purge.interval
    Purge,
    /// Settles ambiguous outcomes by looking charges up at the gateway
    Reconciler,
    /// Answers Stripe's signed webhooks on webhook_addr, when it is set
    Webhook,
}

impl Role {
    pub const ALL: [Role; 7] = [
        Role::Intake,
        Role::Admin,
        Role::Executor,
        Role::Relay,
        Role::Purge,
        Role::Reconciler,
        Role::Webhook,
    ];
}

/// What `onecharge setup` made sure of: the names an operator checks against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupDone {
    /// The command, event and dead-letter streams, in that order.
    pub streams: [String; 3],
    /// Intake's durable consumer.
    pub consumer: String,
}

/// `onecharge setup`: database (created if missing), migrations, streams, durable consumer.
pub async fn setup(settings: &Settings) -> anyhow::Result<SetupDone> {
    let store = Store::setup_with(&settings.database_url, &settings.database).await?;
    let broker = Broker::connect_as(settings, crate::config::NatsUser::Setup).await?;
    broker.ensure_streams().await?;
    broker.ensure_intake_consumer(settings).await?;
    broker
        .ensure_consumer(settings, crate::broker::CommandKind::Refund)
        .await?;
    drop(store);
    Ok(SetupDone {
        streams: [
            broker.names.commands_stream(),
            broker.names.events_stream(),
            broker.names.dlq_stream(),
        ],
        consumer: settings.intake.consumer.clone(),
    })
}

/// `onecharge setup --check`: whether `setup` has made what this onecharge needs — every
/// migration applied, the three streams there and usable — changing nothing; the streams'
/// names. The same checks `serve` makes at start ([`Application::build`]), so a runtime
/// role that may not change the schema (docs/decisions/160-setup-migrates-as-the-owner-serve-only-checks.md) can run it.
pub async fn check(settings: &Settings) -> anyhow::Result<[String; 3]> {
    let store = Store::connect_to_schema(&settings.database_url, 1, &settings.database).await?;
    store.check_schema().await?;
    let broker = Broker::connect(settings).await?;
    broker.check_streams().await?;
    Ok([
        broker.names.commands_stream(),
        broker.names.events_stream(),
        broker.names.dlq_stream(),
    ])
}

/// [`check`] again every `every` until it passes or `wait` has passed: an init container
/// that holds a new pod back until the setup Job of its release has run. `waiting` hears
/// each new reason to wait (the database not up yet, a migration missing). After `wait`,
/// the last reason is the error.
pub async fn check_until_ready(
    settings: &Settings,
    wait: Duration,
    every: Duration,
    mut waiting: impl FnMut(&anyhow::Error),
) -> anyhow::Result<[String; 3]> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut last_reason = String::new();
    loop {
        match check(settings).await {
            Ok(streams) => return Ok(streams),
            Err(err) if tokio::time::Instant::now() + every < deadline => {
                let reason = format!("{err:#}");
                if reason != last_reason {
                    waiting(&err);
                    last_reason = reason;
                }
                tokio::time::sleep(every).await;
            }
            Err(err) => {
                return Err(err.context(format!(
                    "not ready after {}",
                    humantime::format_duration(wait)
                )))
            }
        }
    }
}

/// Connects `serve` to its database, asking again for up to `database.startup_wait` while
/// no writable primary answers (a failover: connections cut, refused or read-only); any
/// other error, and the last one after the wait, ends the start (decision 251).
async fn connect_waiting_for_a_primary(settings: &Settings) -> anyhow::Result<Store> {
    let deadline = tokio::time::Instant::now() + settings.database.startup_wait;
    let mut pause = Duration::from_millis(250);
    let mut said = false;
    loop {
        let err =
            match Store::connect_to_schema(&settings.database_url, 4, &settings.database).await {
                Ok(store) => return Ok(store),
                Err(err) => err,
            };
        let no_primary_yet = err.chain().any(|cause| {
            cause.downcast_ref::<sqlx::Error>().is_some_and(|e| {
                matches!(e, sqlx::Error::PoolTimedOut)
                    || crate::store::availability::means_no_primary(e)
            })
        });
        if !no_primary_yet || tokio::time::Instant::now() + pause > deadline {
            return Err(err);
        }
        if !said {
            tracing::warn!(
                error = %format!("{err:#}"),
                wait_s = settings.database.startup_wait.as_secs(),
                "no writable PostgreSQL primary answers yet (a failover?); asking again until database.startup_wait has passed"
            );
            said = true;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// `onecharge serve`: runs the roles until SIGTERM or Ctrl-C, then drains.
pub async fn serve(settings: Settings, roles: &[Role]) -> anyhow::Result<()> {
    // Listen before building: a SIGTERM while connecting and checking then ends the
    // process cleanly as soon as it is built, instead of killing it mid-start.
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    // Before connecting to anything: an exposed, open admin API is a configuration error.
    if roles.is_empty() || roles.contains(&Role::Admin) {
        settings.check_admin_exposure()?;
    }
    let app = Application::build(settings, roles).await?;
    app.run(shutdown).await
}

/// A built, not yet running, service: connections made, schema and streams checked, the
/// admin listener bound (so its address is known before `run`).
pub struct Application {
    settings: Settings,
    store: Store,
    broker: Broker,
    roles: Vec<Role>,
    admin_listener: Option<tokio::net::TcpListener>,
    /// The webhook listener (docs/contract.md §3.3), when `webhook_addr` is set.
    webhook_listener: Option<tokio::net::TcpListener>,
}

impl Application {
    /// Connects, checks that `setup` made the schema and the streams this onecharge needs
    /// (it changes neither: it runs as a role that may not, docs/decisions/160-setup-migrates-as-the-owner-serve-only-checks.md), and
    /// binds the admin address when that role runs. An empty `roles` means all of them.
    pub async fn build(settings: Settings, roles: &[Role]) -> anyhow::Result<Self> {
        let roles: Vec<Role> = if roles.is_empty() {
            Role::ALL.to_vec()
        } else {
            roles.to_vec()
        };
        if roles.contains(&Role::Admin) {
            settings.check_admin_exposure()?;
        }
        let store = connect_waiting_for_a_primary(&settings).await?;
        store.check_schema().await?;
        if roles.contains(&Role::Executor) {
            store.warn_without_autovacuum().await;
        }
        let broker = Broker::connect(&settings).await?;
        broker.check_streams().await?;
        let admin_listener = if roles.contains(&Role::Admin) {
            Some(
                tokio::net::TcpListener::bind(settings.admin_addr)
                    .await
                    .with_context(|| format!("cannot bind the admin HTTP address {} (set --admin-addr or ONECHARGE_ADMIN_ADDR)", settings.admin_addr))?,
            )
        } else {
            None
        };
        let webhook_listener = match settings.webhook_addr.filter(|_| roles.contains(&Role::Webhook)) {
            Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.with_context(|| {
                format!("cannot bind the webhook address {addr} (set webhook_addr or ONECHARGE_WEBHOOK_ADDR)")
            })?),
            None => None,
        };
        Ok(Self {
            settings,
            store,
            broker,
            roles,
            admin_listener,
            webhook_listener,
        })
    }

    /// Where the admin HTTP listens, when it runs.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// Where the webhook listener listens, when it runs.
    pub fn webhook_addr(&self) -> Option<SocketAddr> {
        self.webhook_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// Runs every role until `shutdown` fires and each has settled the work in its hands
    /// (for at most `shutdown_timeout`, see [`Roles::supervise`]). The first role to fail
    /// stops the others.
    pub async fn run(mut self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let metrics = crate::metrics::install();
        crate::metrics::register_at_zero(
            &[CommandKind::Charge, CommandKind::Refund]
                .map(|kind| kind.consumer_name(&self.settings.intake)),
        );
        let mut roles = Roles::default();
        roles.spawn(
            "metrics upkeep",
            crate::metrics::upkeep(metrics.clone(), shutdown.clone()),
        );
        // Built before any role starts: a missing gateway key fails `serve` with nothing running.
        let gateway = self.gateway()?;
        // Roles in this process wake each other instead of waiting out their poll intervals.
        let nudges = Nudges::default();
        // Built before intake, started after it: nothing is charged unless every role could
        // be built.
        let executor = self.executor(gateway.as_ref(), &nudges).await?;
        if let Some(reconciler) = self.reconciler(gateway.as_ref()) {
            roles.spawn("sweep", reconciler.clone().run_sweeps(shutdown.clone()));
            roles.spawn("reconciler", reconciler.run(shutdown.clone()));
        }
        if self.roles.contains(&Role::Intake) {
            let intake = Intake::new(self.store.clone(), self.broker.clone(), &self.settings)
                .await?
                .with_nudges(nudges.clone());
            roles.spawn("intake", intake.run(shutdown.clone()));
            let refund_intake = Intake::for_kind(
                self.store.clone(),
                self.broker.clone(),
                &self.settings,
                CommandKind::Refund,
            )
            .await?
            .with_nudges(nudges.clone());
            roles.spawn("refund intake", refund_intake.run(shutdown.clone()));
            for (kind, name) in [
                (CommandKind::Charge, "stream audit"),
                (CommandKind::Refund, "refund stream audit"),
            ] {
                let audit = crate::intake::audit::StreamAudit::new(
                    self.store.clone(),
                    self.broker.clone(),
                    &self.settings,
                    kind,
                );
                roles.spawn(name, audit.run(shutdown.clone()));
            }
        }
        if let Some(executor) = executor {
            roles.spawn("executor", executor.run(shutdown.clone()));
        }
        // Refunds along the charge's seam: sent where the executor runs, looked up (and
        // their expired leases taken back) where the reconciler runs.
        if let Some((client, health)) = gateway.as_ref() {
            if self.roles.contains(&Role::Executor) {
                let sender = crate::executor::refunds::RefundSender::new(
                    self.store.clone(),
                    client.clone(),
                    health.clone(),
                    &self.settings,
                )
                .with_nudges(nudges.clone());
                roles.spawn("refund sender", sender.run(shutdown.clone()));
            }
            if self.roles.contains(&Role::Reconciler) {
                let lookups = crate::reconciler::refunds::RefundLookups::new(
                    self.store.clone(),
                    client.clone(),
                    health.clone(),
                    &self.settings,
                )
                .with_nudges(nudges.clone());
                roles.spawn("refund lookups", lookups.run(shutdown.clone()));
            }
        }
        if self.roles.contains(&Role::Relay) {
            let relay =
                crate::relay::Relay::new(self.store.clone(), self.broker.clone(), &self.settings)
                    .with_nudges(nudges.clone());
            roles.spawn("relay", relay.run(shutdown.clone()));
        }
        if self.roles.contains(&Role::Purge) {
            let purger =
                crate::purge::Purger::new(self.store.clone(), self.broker.clone(), &self.settings);
            roles.spawn("purge", purger.run(shutdown.clone()));
        }
        if let Some(listener) = self.webhook_listener.take() {
            // Its own small pool: a redelivery burst waits on these connections, never on
            // the ones intake, the relay and the executor use.
            let webhook_store = Store::connect_with(
                &self.settings.database_url,
                crate::http::webhook::DATABASE_CONNECTIONS,
                &self.settings.database,
            )
            .await
            .context("connecting the webhook listener's pool")?;
            let state =
                crate::http::webhook::WebhookState::from_settings(webhook_store, &self.settings);
            roles.spawn(
                "webhook",
                crate::http::webhook::serve(listener, state, shutdown.clone()),
            );
        }
        let timeout = self.settings.shutdown_timeout;
        tracing::info!(roles = ?self.roles, "onecharge serving");
        self.spawn_admin(&mut roles, metrics, gateway, &shutdown)
            .await?;
        roles.supervise(shutdown, timeout).await
    }

    /// The gateway client and health, when a role here calls the gateway. The executor and
    /// the reconciler share one client and one health: a credentials fault seen by either
    /// pauses both.
    fn gateway(&self) -> anyhow::Result<Option<(GatewayClient, GatewayHealth)>> {
        if !(self.roles.contains(&Role::Executor) || self.roles.contains(&Role::Reconciler)) {
            return Ok(None);
        }
        Ok(Some((
            GatewayClient::from_settings(&self.settings)?,
            GatewayHealth::from_settings(&self.settings.executor),
        )))
    }

    /// The executor, when it runs here, on a pool of its own so that charges never queue
    /// behind intake.
    async fn executor(
        &self,
        gateway: Option<&(GatewayClient, GatewayHealth)>,
        nudges: &Nudges,
    ) -> anyhow::Result<Option<Executor>> {
        let Some((client, health)) = gateway.filter(|_| self.roles.contains(&Role::Executor))
        else {
            return Ok(None);
        };
        let store = Store::connect_with(
            &self.settings.database_url,
            crate::executor::DATABASE_CONNECTIONS,
            &self.settings.database,
        )
        .await?;
        let executor = Executor::new(store, client.clone(), health.clone(), &self.settings)
            .with_nudges(nudges.clone());
        Ok(Some(executor))
    }

    /// The reconciler, when it runs here.
    fn reconciler(&self, gateway: Option<&(GatewayClient, GatewayHealth)>) -> Option<Reconciler> {
        let (client, health) = gateway.filter(|_| self.roles.contains(&Role::Reconciler))?;
        Some(Reconciler::new(
            self.store.clone(),
            client.clone(),
            health.clone(),
            &self.settings,
        ))
    }

    /// The admin HTTP, when it runs here, and the refresher of the database-backed gauges:
    /// whoever serves /metrics keeps them fresh. The admin face has a pool of its own
    /// ([`crate::http::DATABASE_CONNECTIONS`]): a flood of its requests waits on those
    /// connections, never on the ones intake, the relay and the reconciler use. Its
    /// recheck runs the reconciler's lookup on this process's gateway client and health,
    /// whichever role built them, over that pool.
    async fn spawn_admin(
        self,
        roles: &mut Roles,
        metrics: metrics_exporter_prometheus::PrometheusHandle,
        gateway: Option<(GatewayClient, GatewayHealth)>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<()> {
        let Some(listener) = self.admin_listener else {
            return Ok(());
        };
        let admin_store = Store::connect_with(
            &self.settings.database_url,
            crate::http::DATABASE_CONNECTIONS,
            &self.settings.database,
        )
        .await
        .context("connecting the admin listener's pool")?;
        let recheck = gateway.as_ref().map(|(client, health)| {
            Reconciler::new(
                admin_store.clone(),
                client.clone(),
                health.clone(),
                &self.settings,
            )
        });
        let state = crate::http::AdminState {
            store: admin_store,
            broker: self.broker.clone(),
            metrics,
            admin_token: self.settings.admin_token.clone(),
            gateway_health: gateway.map(|(_, health)| health),
            retry_window: RetryWindow::from_settings(&self.settings),
            console: crate::http::Console::from_settings(&self.settings),
            reconciler: recheck,
        };
        roles.spawn(
            "admin",
            crate::http::serve(listener, state, shutdown.clone()),
        );
        let refresher = crate::gauges::DatabaseGaugesRefresher::new(self.store.clone())
            .with_intake_consumer(self.broker.clone(), &self.settings.intake.consumer);
        roles.spawn("metrics refresher", refresher.run(shutdown.clone()));
        Ok(())
    }
}

/// The roles of one `serve`, each task known by its role's name, so that the supervisor can
/// say which role failed or did not stop.
#[derive(Default)]
struct Roles {
    tasks: JoinSet<anyhow::Result<()>>,
    names: HashMap<tokio::task::Id, &'static str>,
}

impl Roles {
    fn spawn(
        &mut self,
        name: &'static str,
        role: impl Future<Output = anyhow::Result<()>> + Send + 'static,
    ) {
        let handle = self.tasks.spawn(role);
        self.names.insert(handle.id(), name);
    }

    /// Waits for every role. The first one to fail cancels `shutdown`, so the others stop
    /// too. Once `shutdown` has fired, the roles get `timeout` (plus [`ROLE_STOP_GRACE`], so
    /// that a role's own bounded drain reports first) to finish the work in their hands; the
    /// roles still running then are stopped and named in the log.
    async fn supervise(
        mut self,
        shutdown: CancellationToken,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let mut result = Ok(());
        let deadline = async {
            shutdown.cancelled().await;
            tokio::time::sleep(timeout + ROLE_STOP_GRACE).await;
        };
        tokio::pin!(deadline);
        loop {
            let joined = tokio::select! {
                joined = self.tasks.join_next_with_id() => joined,
                () = &mut deadline => break,
            };
            let Some(joined) = joined else {
                return result;
            };
            let (id, outcome) = match joined {
                Ok((id, outcome)) => (id, outcome),
                Err(err) => (
                    err.id(),
                    Err(anyhow::Error::new(err).context("a role panicked")),
                ),
            };
            let role = self.names.remove(&id).unwrap_or("unnamed");
            if let Err(err) = outcome {
                tracing::error!(role, error = %format!("{err:#}"), "a role failed; stopping the others");
                shutdown.cancel();
                if result.is_ok() {
                    result = Err(err);
                }
            }
        }
        let mut still_running: Vec<&str> = self.names.into_values().collect();
        still_running.sort_unstable();
        tracing::warn!(
            roles = ?still_running,
            shutdown_timeout = %humantime::format_duration(timeout),
            "shutdown_timeout passed with roles still running: stopping them; attempts left in_flight are settled by the reconciler once their leases expire"
        );
        self.tasks.abort_all();
        result
    }
}
