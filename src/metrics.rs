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

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use time::OffsetDateTime;

use crate::domain::{AttemptStatus, CallOperation, RefundStatus};

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
                .set_buckets_for_metric(
                    Matcher::Full(CHARGE_LATENCY.histogram.to_owned()),
                    &COMMAND_TO_OUTCOME_BUCKETS,
                )
                .expect("static buckets are valid")
                .set_buckets_for_metric(
                    Matcher::Full(REFUND_LATENCY.histogram.to_owned()),
                    &COMMAND_TO_OUTCOME_BUCKETS,
                )
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

/// The command-to-outcome metrics of one kind of command: the histogram a payments team's
/// SLO is written on (decision 149), and the counts of commands it could not measure.
struct OutcomeLatency {
    histogram: &'static str,
    unmeasured: &'static str,
    clamped: &'static str,
}

/// A ChargePayment's, to the event of the attempt's state.
const CHARGE_LATENCY: OutcomeLatency = OutcomeLatency {
    histogram: "onecharge_command_to_outcome_seconds",
    unmeasured: "onecharge_command_to_outcome_unmeasured_total",
    clamped: "onecharge_command_to_outcome_clamped_total",
};

/// A RefundPayment's, to the refund's final event (decision 264).
const REFUND_LATENCY: OutcomeLatency = OutcomeLatency {
    histogram: "onecharge_refund_command_to_outcome_seconds",
    unmeasured: "onecharge_refund_command_to_outcome_unmeasured_total",
    clamped: "onecharge_refund_command_to_outcome_clamped_total",
};

impl OutcomeLatency {
    /// Registers `outcome`'s series at 0.
    fn register(&self, outcome: &'static str) {
        let _ = metrics::histogram!(self.histogram, "outcome" => outcome);
        metrics::counter!(self.unmeasured, "outcome" => outcome).absolute(0);
        metrics::counter!(self.clamped, "outcome" => outcome).absolute(0);
    }

    /// One observation: a command without `requested_at` is counted as unmeasured; a
    /// producer's clock ahead of ours is observed as 0 and counted as clamped.
    fn observe(
        &self,
        outcome: &'static str,
        requested_at: Option<OffsetDateTime>,
        published_at: OffsetDateTime,
    ) {
        let Some(requested_at) = requested_at else {
            metrics::counter!(self.unmeasured, "outcome" => outcome).increment(1);
            return;
        };
        let seconds = (published_at - requested_at).as_seconds_f64();
        if seconds < 0.0 {
            metrics::counter!(self.clamped, "outcome" => outcome).increment(1);
        }
        metrics::histogram!(self.histogram, "outcome" => outcome).record(seconds.max(0.0));
    }
}

/// From a card charge's second to a debit's week: a card charge settles in one or two
/// seconds, a retried or rate-limited one in minutes, one that waited for review or an outage
/// in hours, and a bank debit in days. The SLO thresholds people write (1 s, 5 s, 30 s, 5 min,
/// 1 h, 1 day) are bucket bounds, so `histogram_quantile` and `le` ratios are exact there.
const COMMAND_TO_OUTCOME_BUCKETS: [f64; 18] = [
    0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0,
    43200.0, 86400.0, 259200.0, 604800.0,
];

/// The states an event announces, the `outcome` label of the command-to-outcome metrics.
const ANNOUNCED_STATES: [AttemptStatus; 4] = [
    AttemptStatus::Succeeded,
    AttemptStatus::Declined,
    AttemptStatus::Expired,
    AttemptStatus::NeedsReview,
];

/// The final states a refund's event announces, the `outcome` label of its metrics.
const ANNOUNCED_REFUND_STATES: [RefundStatus; 3] = [
    RefundStatus::Succeeded,
    RefundStatus::Failed,
    RefundStatus::Refused,
];

/// The `code` label of `onecharge_declines_total`: Stripe's documented decline codes and
/// the generic one of onecharge's own protocol, a closed set so that a gateway cannot grow
/// the series; any other code is `other`, a decline without one `none`.
const DECLINE_CODES: [&str; 46] = [
    "approve_with_id",
    "authentication_required",
    "call_issuer",
    "card_declined",
    "card_not_supported",
    "card_velocity_exceeded",
    "currency_not_supported",
    "do_not_honor",
    "do_not_try_again",
    "duplicate_transaction",
    "expired_card",
    "fraudulent",
    "generic_decline",
    "incorrect_cvc",
    "incorrect_number",
    "incorrect_pin",
    "incorrect_zip",
    "insufficient_funds",
    "invalid_account",
    "invalid_amount",
    "invalid_cvc",
    "invalid_expiry_month",
    "invalid_expiry_year",
    "invalid_number",
    "invalid_pin",
    "issuer_not_available",
    "lost_card",
    "merchant_blacklist",
    "new_account_information_available",
    "no_action_taken",
    "not_permitted",
    "offline_pin_required",
    "online_or_offline_pin_required",
    "pickup_card",
    "pin_try_exceeded",
    "processing_error",
    "reenter_transaction",
    "restricted_card",
    "revocation_of_all_authorizations",
    "revocation_of_authorization",
    "security_violation",
    "service_not_allowed",
    "stolen_card",
    "stop_payment_order",
    "testmode_decline",
    "transaction_not_allowed",
];

/// Registers every series a rule or a panel names, at 0, before anything is recorded
/// (decision 143): a fresh `serve` then shows 0 where a dashboard would show "no data", and
/// `rate()`/`increase()` see the first increment as one. Each counter is registered with
/// every value of its bounded labels that is a closed set; `consumers` are this process's
/// intake consumers (charges, refunds). Labels whose values are open (`sqlstate_class`) appear with their first
/// increment. Gauges are not set here: each is set by whoever reads its value (the database
/// gauges' refresher at start, the stream audit after its first pass), since a 0 there would
/// be a claim. The names repeat those of the recording sites; `tests/metrics/deploy.rs`
/// holds both to the rules and the dashboard.
pub fn register_at_zero(consumers: &[String]) {
    const GATEWAY_OUTCOMES: [&str; 11] = [
        "succeeded",
        "declined",
        "processing",
        "requires_action",
        "in_progress",
        "rate_limited",
        "needs_review",
        "credentials_fault",
        "endpoint_fault",
        "not_sent",
        "ambiguous",
    ];
    const OPERATIONS: [CallOperation; 5] = [
        CallOperation::Charge,
        CallOperation::Lookup,
        CallOperation::Prepare,
        CallOperation::Cancel,
        CallOperation::List,
    ];
    for operation in OPERATIONS.map(CallOperation::as_str) {
        for outcome in GATEWAY_OUTCOMES {
            metrics::counter!("onecharge_gateway_calls_total", "operation" => operation, "outcome" => outcome)
                .absolute(0);
        }
        let _ = metrics::histogram!("onecharge_gateway_call_duration_seconds", "operation" => operation);
    }
    // A refund's calls read their answers as refunds (`RefundOutcome`, `RefundLookup`).
    for (operation, outcomes) in [
        (CallOperation::Refund, &REFUND_OUTCOMES[..]),
        (CallOperation::RefundLookup, &REFUND_LOOKUP_OUTCOMES[..]),
    ] {
        let operation = operation.as_str();
        for outcome in outcomes {
            metrics::counter!("onecharge_gateway_calls_total", "operation" => operation, "outcome" => *outcome)
                .absolute(0);
        }
        let _ = metrics::histogram!("onecharge_gateway_call_duration_seconds", "operation" => operation);
    }
    for operation in ["charge", "lookup", "refund", "cancel"] {
        metrics::counter!("onecharge_gateway_rate_limited_waits_total", "operation" => operation)
            .absolute(0);
        let _ = metrics::histogram!("onecharge_gateway_rate_limited_wait_seconds", "operation" => operation);
    }
    metrics::counter!("onecharge_gateway_rate_limit_takes_total").absolute(0);
    metrics::counter!("onecharge_gateway_credentials_faults_total").absolute(0);
    metrics::counter!("onecharge_gateway_endpoint_faults_total").absolute(0);
    for (operation, permission) in PERMISSION_DENIALS {
        metrics::counter!("onecharge_gateway_permission_denied_total", "operation" => operation, "permission" => permission)
            .absolute(0);
    }

    for consumer in consumers {
        for result in [
            "processed",
            "duplicate",
            "business_duplicate",
            "stale",
            "permanent",
            "conflict",
            "transient",
        ] {
            metrics::counter!("onecharge_intake_deliveries_total", "consumer" => consumer.clone(), "result" => result).absolute(0);
        }
        metrics::counter!("onecharge_intake_messages_lost_total", "consumer" => consumer.clone(), "reason" => "dead_letter_failed_on_last_delivery").absolute(0);
        metrics::counter!("onecharge_intake_dead_letters_refused_total", "consumer" => consumer.clone()).absolute(0);
    }
    let _ = metrics::histogram!("onecharge_intake_batch_duration_seconds");
    metrics::counter!("onecharge_intake_races_lost_total").absolute(0);
    // The deployment faults' classes (`classify_db_error`) are open; these are the ones a
    // broken deployment gives (a missing grant or table, an internal error, no server).
    for class in ["42", "XX", "none"] {
        metrics::counter!("onecharge_intake_database_faults_total", "sqlstate_class" => class)
            .absolute(0);
    }
    for class in ["invalid", "conflict", "exhausted"] {
        metrics::counter!("onecharge_dead_letters_total", "class" => class).absolute(0);
    }

    for kind in ["dispatch", "hand_over"] {
        metrics::counter!("onecharge_executor_claims_total", "kind" => kind).absolute(0);
    }
    for state in AttemptStatus::ALL
        .into_iter()
        .filter(|s| *s != AttemptStatus::InFlight)
    {
        metrics::counter!("onecharge_executor_settlements_total", "state" => state.as_str())
            .absolute(0);
    }
    metrics::counter!("onecharge_executor_fenced_writes_total").absolute(0);
    metrics::counter!("onecharge_executor_unrecorded_results_total").absolute(0);
    metrics::counter!("onecharge_executor_handed_back_total").absolute(0);

    for result in ["published", "duplicate", "failed", "refused"] {
        metrics::counter!("onecharge_relay_events_total", "result" => result).absolute(0);
    }
    let _ = metrics::histogram!("onecharge_relay_batch_duration_seconds");
    for outcome in ANNOUNCED_STATES.map(AttemptStatus::as_str) {
        CHARGE_LATENCY.register(outcome);
    }
    for outcome in ANNOUNCED_REFUND_STATES.map(RefundStatus::as_str) {
        REFUND_LATENCY.register(outcome);
    }
    for code in DECLINE_CODES.into_iter().chain(["other", "none"]) {
        metrics::counter!("onecharge_declines_total", "code" => code).absolute(0);
    }

    for result in [
        "succeeded",
        "declined",
        "pending",
        "needs_review",
        "rescheduled",
        "fenced",
    ] {
        metrics::counter!("onecharge_reconciliations_total", "result" => result).absolute(0);
    }
    for result in ["ok", "failed"] {
        metrics::counter!("onecharge_reconciliation_sweeps_total", "result" => result).absolute(0);
    }
    let _ = metrics::histogram!("onecharge_reconciliation_sweep_duration_seconds");
    metrics::counter!("onecharge_reconciliation_sweep_pages_total").absolute(0);
    metrics::counter!("onecharge_reconciliation_sweep_records_total").absolute(0);

    for result in [
        "accepted",
        "duplicate",
        "failed",
        "shed",
        "unreadable",
        "missing_signature",
        "malformed_signature",
        "stale",
        "bad_signature",
        "wrong_mode",
    ] {
        metrics::counter!("onecharge_webhooks_total", "result" => result).absolute(0);
    }

    metrics::counter!("onecharge_admin_requests_shed_total").absolute(0);
    build_info();

    for status in REFUND_SETTLEMENTS {
        metrics::counter!("onecharge_refunds_settled_total", "status" => status).absolute(0);
    }
    metrics::counter!("onecharge_database_failovers_total").absolute(0);
}

/// The outcomes of a refund's request (`RefundOutcome::label`) and of its lookup
/// (`RefundLookup::label`), the `outcome` of their `onecharge_gateway_calls_total`.
const REFUND_OUTCOMES: [&str; 9] = [
    "succeeded",
    "failed",
    "processing",
    "retry_later",
    "not_sent",
    "refused",
    "needs_review",
    "ambiguous",
    "configuration_fault",
];
const REFUND_LOOKUP_OUTCOMES: [&str; 3] = ["found", "failed", "configuration_fault"];

/// The `status` values of `onecharge_refunds_settled_total`: a refund's final states and a
/// person's review.
const REFUND_SETTLEMENTS: [&str; 4] = ["succeeded", "failed", "refused", "needs_review"];

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
/// Every (operation, permission) a `403` can be counted under: the calls each connector
/// makes and the permission each needs (`gateway::permission`, decision 245).
pub const PERMISSION_DENIALS: [(&str, &str); 11] = [
    ("prepare", "payment_intents:write"),
    ("charge", "payment_intents:write"),
    ("cancel", "payment_intents:write"),
    ("lookup", "payment_intents:read"),
    ("lookup", "disputes:read"),
    ("list", "payment_intents:read"),
    ("refund", "refunds:write"),
    ("refund_lookup", "refunds:read"),
    ("charge", "charges:write"),
    ("lookup", "charges:read"),
    ("list", "charges:read"),
];

/// A gateway call refused `403`: the key lacks `permission` for `operation` (decision 245).
pub fn gateway_permission_denied(operation: &'static str, permission: &'static str) {
    metrics::counter!(
        "onecharge_gateway_permission_denied_total",
        "operation" => operation,
        "permission" => permission
    )
    .increment(1);
}

pub fn publish_retry(kind: &'static str) {
    metrics::counter!("onecharge_publish_retries_total", "kind" => kind).increment(1);
}

/// An event announcing `outcome` was published at `published_at` (this host's clock, when
/// JetStream acknowledged it) for a command the producer sent at `requested_at` (its
/// clock): one observation of the command-to-outcome latency (decision 149). A command
/// without `requested_at` is counted as unmeasured instead; a producer clock ahead of ours
/// is observed as 0 and counted as clamped, so a skewed producer shows rather than hides.
pub fn command_to_outcome(
    outcome: AttemptStatus,
    requested_at: Option<OffsetDateTime>,
    published_at: OffsetDateTime,
) {
    CHARGE_LATENCY.observe(outcome.as_str(), requested_at, published_at);
}

/// The same for a refund: its final event (`succeeded`, `failed`, `refused`) published at
/// `published_at` for a RefundPayment sent at `requested_at` (decision 264).
pub fn refund_command_to_outcome(
    outcome: RefundStatus,
    requested_at: Option<OffsetDateTime>,
    published_at: OffsetDateTime,
) {
    REFUND_LATENCY.observe(outcome.as_str(), requested_at, published_at);
}

/// A `payment-declined` event published, by the gateway's decline code: one of
/// [`DECLINE_CODES`], `other`, or `none` when the gateway gave none.
pub fn declined(code: Option<&str>) {
    let code = match code {
        None => "none",
        Some(code) => DECLINE_CODES
            .iter()
            .copied()
            .find(|known| *known == code)
            .unwrap_or("other"),
    };
    metrics::counter!("onecharge_declines_total", "code" => code).increment(1);
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

/// An intake batch recorded again after another instance committed one of its keys first
/// (decision 201): harmless and rare; a steady rate says two instances keep receiving the
/// same messages (an ack wait shorter than a batch's commit).
pub fn intake_race_lost() {
    metrics::counter!("onecharge_intake_races_lost_total").increment(1);
}

/// A command that ended without being recorded or dead-lettered, by why (bounded: a
/// fixed set of reasons in `src/intake/`). Every increment is a command to recover by hand.
pub fn message_lost(consumer: &str, reason: &'static str) {
    metrics::counter!("onecharge_intake_messages_lost_total", "consumer" => consumer.to_owned(), "reason" => reason).increment(1);
}

/// A command whose dead letter the dead-letter stream refuses for good (its headers alone
/// too large, a JetStream refusal of something it carries): terminated, kept in the command
/// stream, named by the stream audit. Every increment is a command to look at by hand.
pub fn dead_letter_refused(consumer: &str) {
    metrics::counter!("onecharge_intake_dead_letters_refused_total", "consumer" => consumer.to_owned()).increment(1);
}

/// Messages the command stream holds that intake never recorded nor dead-lettered, as the
/// stream audit last counted its open findings (docs/operations.md §16). Anything above 0 is
/// a command to look at: `onecharge intake audit`.
pub fn unrecorded_messages(consumer: &str, open: i64) {
    metrics::gauge!("onecharge_intake_unrecorded_messages", "consumer" => consumer.to_owned())
        .set(open as f64);
}

/// A message dead-lettered, by class.
pub fn dead_letter(class: &'static str) {
    metrics::counter!("onecharge_dead_letters_total", "class" => class).increment(1);
}

/// A refund reaching a final state or a person (`succeeded`, `failed`, `refused`,
/// `needs_review`).
pub fn refund_settled(status: &'static str) {
    metrics::counter!("onecharge_refunds_settled_total", "status" => status).increment(1);
}

/// A refund moved to `to` by a send or a lookup: counted when it reached a final state or
/// review.
pub fn refund_moved(to: crate::domain::RefundStatus) {
    if to.is_final() || to == crate::domain::RefundStatus::NeedsReview {
        refund_settled(to.as_str());
    }
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

/// Refunds not settled yet in `status` (a state that is not final), and how long the oldest
/// of them has waited since it was recorded. Settled refunds are counted by
/// `onecharge_refunds_settled_total`, not here.
pub fn refunds(status: RefundStatus, count: i64, oldest_age_seconds: f64) {
    metrics::gauge!("onecharge_refunds", "status" => status.as_str()).set(count as f64);
    metrics::gauge!("onecharge_refunds_oldest_age_seconds", "status" => status.as_str())
        .set(oldest_age_seconds);
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

/// This process lost its writable PostgreSQL primary: a database failover began for it
/// (`crate::store::availability`, decision 250).
pub fn database_failover_began() {
    metrics::counter!("onecharge_database_failovers_total").increment(1);
    database_failover(true);
}

/// Whether this process is without a writable PostgreSQL primary (1) or reached one (0):
/// set by the database's own answers, so it appears with the first connection.
pub fn database_failover(on: bool) {
    metrics::gauge!("onecharge_database_failover").set(if on { 1.0 } else { 0.0 });
}

/// Whether any pause is open across the fleet (1) or none (0), and how many are open of
/// each scope (`all`, `charges`, `refunds`; every scope always set, so a resumed one reads
/// 0), given the scope of each open pause as the database said at the last refresh: every
/// instance that serves `/metrics` says the same (decisions 145 and 265). The currency of a
/// pause is not a label: `fleet status` names it.
pub fn fleet_paused(open: &[crate::domain::PauseScope]) {
    metrics::gauge!("onecharge_fleet_paused").set(if open.is_empty() { 0.0 } else { 1.0 });
    for scope in crate::domain::PauseScope::ALL {
        let count = open.iter().filter(|s| **s == scope).count();
        metrics::gauge!("onecharge_fleet_pauses_open", "scope" => scope.as_str()).set(count as f64);
    }
}

/// When the fleet's last reconciliation sweep that read and compared everything finished
/// (unix seconds), as the database says; unset until one has. With
/// `onecharge_reconciliation_sweep_interval_seconds` it makes the alert for sweeps that
/// stopped happening.
pub fn last_sweep_succeeded(at: OffsetDateTime) {
    metrics::gauge!("onecharge_reconciliation_last_sweep_succeeded_timestamp_seconds")
        .set(at.unix_timestamp() as f64);
}

/// `reconciler.sweep_interval` of a process that runs the reconciler (0: it sweeps never).
pub fn sweep_interval(interval: std::time::Duration) {
    metrics::gauge!("onecharge_reconciliation_sweep_interval_seconds").set(interval.as_secs_f64());
}

/// When this process's webhook listener started (unix seconds): with
/// `onecharge_webhooks_total{result="accepted"}` it makes the alert for webhooks that
/// stopped arriving (Stripe disables an endpoint that keeps failing).
pub fn webhook_listener_started(at: OffsetDateTime) {
    metrics::gauge!("onecharge_webhook_listener_started_timestamp_seconds")
        .set(at.unix_timestamp() as f64);
}

/// This build's version, as a constant 1 with labels: which build each instance runs.
pub fn build_info() {
    metrics::gauge!("onecharge_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::outcome::RetryAfter;
    use crate::domain::refund_call::{
        GatewayRefund, GatewayRefundStatus, RefundLookup, RefundOutcome,
    };

    #[test]
    fn every_refund_call_outcome_is_registered_at_zero() {
        let refund = |status| {
            RefundOutcome::Answered(Box::new(GatewayRefund {
                id: "re_1".into(),
                status,
                amount_minor: None,
                currency: None,
                refund_id: None,
                failure_reason: None,
            }))
        };
        let reason = || "why".to_owned();
        let outcomes = [
            refund(GatewayRefundStatus::Succeeded),
            refund(GatewayRefundStatus::Failed),
            refund(GatewayRefundStatus::Pending),
            RefundOutcome::RetryLater {
                after: RetryAfter::InProgress,
                reason: reason(),
            },
            RefundOutcome::NotSent { reason: reason() },
            RefundOutcome::Refused { reason: reason() },
            RefundOutcome::NeedsReview { reason: reason() },
            RefundOutcome::Ambiguous { reason: reason() },
            RefundOutcome::ConfigurationFault { status: 401 },
        ];
        for outcome in &outcomes {
            assert!(REFUND_OUTCOMES.contains(&outcome.label()), "{outcome:?}");
        }
        for lookup in [
            RefundLookup::Found(vec![]),
            RefundLookup::Failed { reason: reason() },
            RefundLookup::ConfigurationFault { status: 401 },
        ] {
            assert!(
                REFUND_LOOKUP_OUTCOMES.contains(&lookup.label()),
                "{lookup:?}"
            );
        }
        for status in RefundStatus::ALL
            .into_iter()
            .filter(|s| s.is_final() || *s == RefundStatus::NeedsReview)
        {
            assert!(REFUND_SETTLEMENTS.contains(&status.as_str()), "{status}");
        }
    }
}
