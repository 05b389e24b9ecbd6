//! Prometheus metrics. Every label is bounded: consumer names, outcome classes, states —
//! never message, attempt or customer ids (those belong in logs and traces).
//!
//! Counters and histograms are recorded where things happen (intake, the gateway client,
//! the executor, the relay, purge, the reconciler); the gauges only the database or the
//! broker can answer are set through here by whoever reads them (`crate::gauges`, the
//! reconciler's sweep). docs/operations.md lists every metric and the alert it deserves.
//!
//! A low module: it defines and records metrics, and imports no role, store or broker, so
//! that every one of them may record.

use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use time::OffsetDateTime;

use crate::domain::AttemptStatus;

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
/// reconnect), by what was published (the broker's `PublishKind`).
pub fn publish_retry(kind: &'static str) {
    metrics::counter!("onecharge_publish_retries_total", "kind" => kind).increment(1);
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

/// Open findings per class, from the `counts` of the classes that have any; every one of
/// `all` classes (named by `label`) is set, so a class with none reads 0.
pub fn findings_open<C: Copy + PartialEq>(
    all: impl IntoIterator<Item = C>,
    label: fn(C) -> &'static str,
    counts: &[(C, i64)],
) {
    for class in all {
        let open = counts
            .iter()
            .find(|(c, _)| *c == class)
            .map_or(0, |(_, n)| *n);
        metrics::gauge!("onecharge_reconciliation_findings_open", "class" => label(class))
            .set(open as f64);
    }
}

/// Attempts in `status`, and (for a status that is not final) how long its oldest attempt
/// has waited.
pub fn attempts(status: AttemptStatus, count: i64, oldest_age_seconds: f64) {
    metrics::gauge!("onecharge_attempts", "status" => status.as_str()).set(count as f64);
    if !status.is_final() {
        metrics::gauge!("onecharge_attempts_oldest_age_seconds", "status" => status.as_str())
            .set(oldest_age_seconds);
    }
}

/// Outbox rows not yet acknowledged by JetStream, and the age of the oldest.
pub fn outbox_backlog(pending: i64, oldest_age_seconds: f64) {
    metrics::gauge!("onecharge_outbox_pending").set(pending as f64);
    metrics::gauge!("onecharge_outbox_oldest_pending_age_seconds").set(oldest_age_seconds);
}

/// The database-backed gauges were read at `now`: alert on this going stale.
pub fn database_gauges_refreshed(now: OffsetDateTime) {
    metrics::gauge!("onecharge_database_gauges_refreshed_timestamp_seconds")
        .set(now.unix_timestamp() as f64);
}

/// A read of the database-backed gauges failed (they keep their previous values).
pub fn database_gauges_refresh_failed() {
    metrics::counter!("onecharge_database_gauges_refresh_failures_total").increment(1);
}

/// The durable intake `consumer`'s lag: messages not yet delivered and messages delivered
/// but not yet acknowledged.
pub fn intake_consumer_lag(consumer: &str, pending: u64, ack_pending: u64) {
    metrics::gauge!("onecharge_intake_consumer_pending", "consumer" => consumer.to_owned())
        .set(pending as f64);
    metrics::gauge!("onecharge_intake_consumer_ack_pending", "consumer" => consumer.to_owned())
        .set(ack_pending as f64);
}
