//! Prometheus metrics. Every label is bounded: consumer names, outcome classes, states —
//! never message, attempt or customer ids (those belong in logs and traces).
//!
//! Counters and histograms are recorded where things happen (intake, the gateway client,
//! the executor, the relay, purge, the reconciler); the gauges only the database can answer
//! are refreshed here, by [`DatabaseGaugesRefresher`]. docs/operations.md lists every metric
//! and the alert it deserves.

use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::broker::{Broker, ConsumerLag};
use crate::domain::AttemptStatus;
use crate::store::metrics::DatabaseGauges;
use crate::store::{self, Store};

/// Installs the process-wide recorder once and returns the handle `/metrics` renders.
pub fn install() -> PrometheusHandle {
    static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0,
                ])
                .expect("static buckets are valid")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (an embedding program); then ours
            // still renders, it just sees nothing.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// Drains the recorder's histogram samples into their buckets every few seconds until
/// `shutdown`. The recorder keeps every sample until a render or an upkeep takes it: a
/// `serve` nobody scraped grew by ~25 bytes per command before this (docs/performance.md).
pub async fn upkeep(
    handle: PrometheusHandle,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = every.tick() => handle.run_upkeep(),
        }
    }
}

/// One publish retried after an error that may pass (a stream-leader election, a
/// reconnect), by what was published.
pub fn publish_retry(kind: crate::broker::PublishKind) {
    metrics::counter!("onecharge_publish_retries_total", "kind" => kind.as_str()).increment(1);
}

/// One delivery settled by intake, by result (`processed`, `duplicate`, …).
pub fn delivery(consumer: &str, result: &'static str) {
    metrics::counter!("onecharge_intake_deliveries_total", "consumer" => consumer.to_owned(), "result" => result).increment(1);
}

/// How long intake took to record and settle one batch.
pub fn batch_duration(elapsed: Duration) {
    metrics::histogram!("onecharge_intake_batch_duration_seconds").record(elapsed.as_secs_f64());
}

/// A database error intake retries that no message causes (a missing grant, table or
/// migration), by SQLSTATE class (`42`, `XX`, …; `none` when not from the server).
pub fn deployment_fault(sqlstate_class: String) {
    metrics::counter!("onecharge_intake_database_faults_total", "sqlstate_class" => sqlstate_class)
        .increment(1);
}

/// A command that ended without being recorded or dead-lettered, by why (bounded: a
/// fixed set of reasons in `src/intake/`). Every increment is a command to recover by hand.
pub fn message_lost(consumer: &str, reason: &'static str) {
    metrics::counter!("onecharge_intake_messages_lost_total", "consumer" => consumer.to_owned(), "reason" => reason).increment(1);
}

/// Messages the command stream holds that intake never recorded nor dead-lettered, as the
/// stream audit last counted its open findings (docs/operations.md §13). Anything above 0 is
/// a command to look at: `onecharge intake audit`.
pub fn unrecorded_messages(consumer: &str, open: i64) {
    metrics::gauge!("onecharge_intake_unrecorded_messages", "consumer" => consumer.to_owned())
        .set(open as f64);
}

/// A message dead-lettered, by class.
pub fn dead_letter(class: &'static str) {
    metrics::counter!("onecharge_dead_letters_total", "class" => class).increment(1);
}

/// One looked-up attempt, by where it went (`succeeded`, `declined`, `pending`,
/// `needs_review`, `rescheduled`, `fenced`).
pub fn reconciliation(result: &'static str) {
    metrics::counter!("onecharge_reconciliations_total", "result" => result).increment(1);
}

/// One reconciliation sweep ended after `seconds` (`ok`: it read and compared everything).
pub fn sweep(seconds: f64, ok: bool) {
    let result = if ok { "ok" } else { "failed" };
    metrics::histogram!("onecharge_reconciliation_sweep_duration_seconds").record(seconds);
    metrics::counter!("onecharge_reconciliation_sweeps_total", "result" => result).increment(1);
}

/// One page of the gateway's list read by a sweep, with its records.
pub fn sweep_page(records: usize) {
    metrics::counter!("onecharge_reconciliation_sweep_pages_total").increment(1);
    metrics::counter!("onecharge_reconciliation_sweep_records_total").increment(records as u64);
}

/// Open findings per class; every class is set, so a class with none reads 0.
pub fn findings_open(counts: &[(crate::store::findings::FindingClass, i64)]) {
    for class in crate::store::findings::FindingClass::ALL {
        let open = counts
            .iter()
            .find(|(c, _)| *c == class)
            .map_or(0, |(_, n)| *n);
        metrics::gauge!("onecharge_reconciliation_findings_open", "class" => class.as_str())
            .set(open as f64);
    }
}

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
        metrics::gauge!("onecharge_intake_consumer_pending", "consumer" => consumer.clone())
            .set(lag.pending as f64);
        metrics::gauge!("onecharge_intake_consumer_ack_pending", "consumer" => consumer.clone())
            .set(lag.ack_pending as f64);
        Ok(Some(lag))
    }

    /// One refresh, ages measured at `now`: reads the database and sets every gauge. Every
    /// status is set, so a status whose last attempt moved on drops to 0 instead of keeping
    /// its old value.
    pub async fn refresh_once(&self, now: OffsetDateTime) -> Result<DatabaseGauges, sqlx::Error> {
        let gauges = match store::metrics::database_gauges(&self.store).await {
            Ok(gauges) => gauges,
            Err(err) => {
                metrics::counter!("onecharge_database_gauges_refresh_failures_total").increment(1);
                return Err(err);
            }
        };
        let age = |at: OffsetDateTime| (now - at).as_seconds_f64().max(0.0);
        for status in AttemptStatus::ALL {
            let count = gauges
                .attempts_by_status
                .iter()
                .find(|(s, _)| *s == status)
                .map_or(0, |(_, n)| *n);
            metrics::gauge!("onecharge_attempts", "status" => status.as_str()).set(count as f64);
            if !status.is_final() {
                let oldest = gauges
                    .oldest_non_final
                    .iter()
                    .find(|(s, _)| *s == status)
                    .map_or(0.0, |(_, at)| age(*at));
                metrics::gauge!("onecharge_attempts_oldest_age_seconds", "status" => status.as_str())
                    .set(oldest);
            }
        }
        metrics::gauge!("onecharge_outbox_pending").set(gauges.outbox_pending as f64);
        metrics::gauge!("onecharge_outbox_oldest_pending_age_seconds")
            .set(gauges.outbox_oldest_pending.map_or(0.0, age));
        metrics::gauge!("onecharge_database_gauges_refreshed_timestamp_seconds")
            .set(now.unix_timestamp() as f64);
        crate::reconciler::sweep::refresh_findings_gauge(&self.store).await;
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
