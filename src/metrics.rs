//! Prometheus metrics. Every label is bounded: consumer names, outcome classes, states —
//! never message, attempt or customer ids (those belong in logs and traces).

use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

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

/// One delivery settled by intake, by result (`processed`, `duplicate`, …).
pub fn delivery(consumer: &str, result: &'static str) {
    metrics::counter!("onecharge_intake_deliveries_total", "consumer" => consumer.to_owned(), "result" => result).increment(1);
}

/// How long intake took to record and settle one batch.
pub fn batch_duration(elapsed: Duration) {
    metrics::histogram!("onecharge_intake_batch_duration_seconds").record(elapsed.as_secs_f64());
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
