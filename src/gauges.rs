//! The gauges only the database and the broker can answer — attempts by status, the oldest
//! waiting attempt, the refunds not settled yet and the oldest of each state, the outbox
//! backlog, open findings, the intake consumer's lag — read
//! every few seconds beside the admin role and set through `crate::metrics`. Above the
//! store, the broker and the reconciler (whose sweep owns the findings gauge), so that
//! `crate::metrics` stays a low module every role records through.

use std::time::Duration;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::broker::{Broker, ConsumerLag};
use crate::domain::{AttemptStatus, RefundStatus};
use crate::metrics;
use crate::store::reads::gauges::DatabaseGauges;
use crate::store::{self, Store};

/// How often `serve` (with the admin role) refreshes the database-backed gauges.
pub const DATABASE_GAUGES_INTERVAL: Duration = Duration::from_secs(5);

/// Keeps the gauges that only the database knows — attempts by status, the oldest waiting
/// attempt of each non-final status, the outbox backlog — fresh on `/metrics`, and, given a
/// broker, the intake consumer's lag.
///
/// It runs beside the admin role, so every process that serves `/metrics` reports them; with
/// several such processes, aggregate with `max` (they read one database). A failed read
/// leaves the previous values in place and counts a failure: alert on
/// `onecharge_database_gauges_refreshed_timestamp_seconds` going stale, not on the values.
#[derive(Clone)]
pub struct DatabaseGaugesRefresher {
    store: Store,
    interval: Duration,
    /// The broker and intake consumer whose lag is reported, when this process knows them.
    intake_consumer: Option<(Broker, String)>,
}

impl DatabaseGaugesRefresher {
    /// A refresher reading `store` every [`DATABASE_GAUGES_INTERVAL`].
    pub fn new(store: Store) -> Self {
        Self {
            store,
            interval: DATABASE_GAUGES_INTERVAL,
            intake_consumer: None,
        }
    }

    /// Also reports the lag of the durable intake `consumer` on `broker`'s command stream:
    /// growing lag means commands wait to be recorded, which no database gauge shows.
    pub fn with_intake_consumer(mut self, broker: Broker, consumer: impl Into<String>) -> Self {
        self.intake_consumer = Some((broker, consumer.into()));
        self
    }

    /// Reads the intake consumer's lag from JetStream and sets
    /// `onecharge_intake_consumer_pending` and `onecharge_intake_consumer_ack_pending`.
    /// `None` when no consumer was given; a failed read leaves the previous values.
    pub async fn refresh_consumer_lag(&self) -> anyhow::Result<Option<ConsumerLag>> {
        let Some((broker, consumer)) = &self.intake_consumer else {
            return Ok(None);
        };
        let lag = broker.intake_consumer_lag(consumer).await?;
        metrics::intake_consumer_lag(consumer, lag.pending, lag.ack_pending);
        Ok(Some(lag))
    }

    /// One refresh, ages measured at `now`: reads the database and sets every gauge. Every
    /// status is set, so a status whose last attempt moved on drops to 0 instead of keeping
    /// its old value.
    pub async fn refresh_once(&self, now: OffsetDateTime) -> Result<DatabaseGauges, sqlx::Error> {
        let gauges = match store::reads::gauges::database_gauges(&self.store).await {
            Ok(gauges) => gauges,
            Err(err) => {
                metrics::database_gauges_refresh_failed();
                return Err(err);
            }
        };
        record(&gauges, now);
        crate::reconciler::sweep::refresh_findings_gauge(&self.store).await;
        match store::reads::gauges::last_sweep_succeeded(&self.store).await {
            Ok(Some(at)) => metrics::last_sweep_succeeded(at),
            Ok(None) => {}
            Err(err) => tracing::warn!(error = %err, "cannot read when the last sweep succeeded"),
        }
        match store::fleet::open_pauses(&self.store).await {
            Ok(pauses) => {
                metrics::fleet_paused(&pauses.iter().map(|p| p.scope).collect::<Vec<_>>())
            }
            Err(err) => tracing::warn!(error = %err, "cannot read whether the fleet is paused"),
        }
        Ok(gauges)
    }

    /// Refreshes every interval until `shutdown` fires. A database that does not answer is
    /// logged and retried at the next tick; it never stops the service.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut gauges_log =
            RefreshLog::new("database gauges", "cannot refresh the database gauges");
        let mut lag_log =
            RefreshLog::new("intake consumer lag", "cannot read the intake consumer lag");
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticker.tick() => {}
            }
            gauges_log.record(&self.refresh_once(OffsetDateTime::now_utc()).await);
            lag_log.record(&self.refresh_consumer_lag().await);
        }
        Ok(())
    }
}

/// Sets the gauges of what the database said, ages measured at `now`.
fn record(gauges: &DatabaseGauges, now: OffsetDateTime) {
    let age = |at: OffsetDateTime| (now - at).as_seconds_f64().max(0.0);
    for status in AttemptStatus::ALL {
        let count = gauges
            .attempts_by_status
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n);
        let oldest = gauges
            .oldest_non_final
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0.0, |(_, at)| age(*at));
        metrics::attempts(status, count, oldest);
    }
    // Every unsettled refund status, so one whose last refund settled drops to 0.
    for status in RefundStatus::ALL.into_iter().filter(|s| !s.is_final()) {
        let (count, oldest) = gauges
            .unsettled_refunds
            .iter()
            .find(|(s, _, _)| *s == status)
            .map_or((0, 0.0), |(_, n, at)| (*n, age(*at)));
        metrics::refunds(status, count, oldest);
    }
    metrics::outbox_backlog(
        gauges.outbox_pending,
        gauges.outbox_oldest_pending.map_or(0.0, age),
    );
    metrics::database_gauges_refreshed(now);
}

/// The log of a refresh that runs every tick and may fail for a long while (a database down
/// for an hour): the first failure is a warning, the failures after it are debug lines, and
/// the first success after them says so — one warning per outage, not one per tick.
struct RefreshLog {
    /// What is refreshed, as the log lines name it.
    what: &'static str,
    /// The warning's opening words, naming what could not be done.
    cannot: &'static str,
    /// The last refresh failed.
    failing: bool,
}

impl RefreshLog {
    fn new(what: &'static str, cannot: &'static str) -> Self {
        Self {
            what,
            cannot,
            failing: false,
        }
    }

    fn record<T, E: std::fmt::Display>(&mut self, result: &Result<T, E>) {
        match (result, self.failing) {
            (Ok(_), true) => {
                self.failing = false;
                tracing::info!("{} refreshed again", self.what);
            }
            (Ok(_), false) => {}
            (Err(err), false) => {
                self.failing = true;
                tracing::warn!(
                    error = format!("{err:#}"),
                    "{}; /metrics keeps the last values",
                    self.cannot
                );
            }
            (Err(err), true) => {
                tracing::debug!(
                    error = format!("{err:#}"),
                    "{} still not refreshed",
                    self.what
                )
            }
        }
    }
}
