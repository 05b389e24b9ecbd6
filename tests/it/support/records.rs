//! What the database holds, read the way the contract talks about it: an attempt and its
//! status, its transitions (its history), its gateway calls, its events in the outbox; the
//! dedupe rows of intake, the reconciler's findings, the operators' audit, the console's
//! sessions and the webhook events. Each reader holds its SQL once, so a test body asserts
//! on `h.last_transition(id)` or `env.open_findings()`, not on a query.
//!
//! Beside the readers, the few writes a test makes behind the service's back, each named for
//! what it arranges: a past the test cannot wait for (`h.add_transitions(id, at, n)`,
//! `h.set_sweeps(..)`), or a database that fails on purpose (`env.rename_table(..)`,
//! `env.refuse_attempts(..)`). `tests/test_sql.rs` counts the SQL left in test bodies.
//!
//! [`Records`] is implemented by every world a test holds ([`Harness`], [`TestEnv`], a
//! [`Store`] or a bare pool): `use crate::support::Records;` and ask it.
#![allow(dead_code, async_fn_in_trait)]

use onecharge::domain::PaymentAttemptId;
use onecharge::store::Store;
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{FromRow, PgPool, Postgres, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

use super::env::TestEnv;
use super::harness::{AttemptRow, GatewayCallRow, Harness};

/// One transition of an attempt's history (`attempt_history`).
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct Transition {
    pub payment_attempt_id: Uuid,
    pub from_status: Option<String>,
    pub to_status: String,
    pub cause: String,
    pub actor: String,
    pub detail: Option<String>,
    pub at: OffsetDateTime,
}

/// One event in the outbox: what the relay publishes, once per settled attempt.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct Event {
    pub event_id: Uuid,
    pub payment_attempt_id: Uuid,
    pub status: String,
    pub subject: String,
    pub headers: Value,
    pub payload: Value,
    pub created_at: OffsetDateTime,
    pub published_at: Option<OffsetDateTime>,
    pub publish_attempts: i32,
}

/// One gateway call of any attempt, as recorded (`gateway_call_records`).
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct GatewayCall {
    pub payment_attempt_id: Uuid,
    pub operation: String,
    pub try_number: i32,
    pub lease_token: Option<i64>,
    pub http_status: Option<i32>,
    pub outcome: String,
    pub gateway_charge_id: Option<String>,
}

/// One finding of the reconciler (`reconciliation_findings`), sweep's or webhook's.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct Finding {
    pub id: i64,
    pub class: String,
    pub payment_attempt_id: Option<Uuid>,
    pub reference: Option<String>,
    pub seen_count: i32,
    pub state: String,
    pub detail: String,
    pub evidence: String,
    pub source: String,
    pub resolved_by: Option<String>,
    pub resolution: Option<String>,
}

/// One sweep of the reconciler (`reconciliation_sweeps`).
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct Sweep {
    pub id: i64,
    pub finished: bool,
    pub error: Option<String>,
}

/// One entry of the operators' audit (`operator_audit`): who did what, through which face.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct AuditEntry {
    pub id: i64,
    pub actor: String,
    pub via: String,
    pub action: String,
    pub payment_attempt_ids: Vec<Uuid>,
    pub dlq_sequence: Option<i64>,
    pub reason: Option<String>,
    pub outcome: String,
    pub detail: Value,
}

impl AuditEntry {
    /// Whether the entry names `id` among the attempts it acted on.
    pub fn names(&self, id: impl Into<Uuid>) -> bool {
        self.payment_attempt_ids.contains(&id.into())
    }
}

/// One dedupe row of intake (`processed_messages`): a message taken in, and what it became.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct DedupeRow {
    pub consumer: String,
    pub message_id: String,
    pub payment_attempt_id: Uuid,
    pub result: String,
    pub stream_sequence: i64,
    pub recorded_at: OffsetDateTime,
}

/// One console session (`console_sessions`): the id is stored only as its SHA-256.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct ConsoleSession {
    pub id_sha256_hex: String,
    pub actor: String,
    pub created_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
}

/// One Stripe webhook event taken in (`stripe_webhook_events`).
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct WebhookEvent {
    pub event_id: String,
    pub event_type: String,
    pub payment_attempt_id: Option<Uuid>,
    pub outcome: String,
}

/// One refund (`refunds`), as the contract's §4.1 speaks of it.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct RefundRow {
    pub refund_id: Uuid,
    pub payment_attempt_id: Uuid,
    pub status: String,
    /// As the command asked; `None` asked for what is left of the charge.
    pub requested_minor: Option<i64>,
    /// Fixed on admission.
    pub amount_minor: Option<i64>,
    pub gateway_refund_id: Option<String>,
    pub failure_reason: Option<String>,
    pub review_reason: Option<String>,
    pub tries: i32,
    pub lookups: i32,
    pub created_at: OffsetDateTime,
    /// When it reached `succeeded`, `failed` or `refused`.
    pub settled_at: Option<OffsetDateTime>,
}

/// The columns of a [`RefundRow`].
const REFUND_COLUMNS: &str = "refund_id, payment_attempt_id, status, requested_minor, \
     amount_minor, gateway_refund_id, failure_reason, review_reason, tries, lookups, created_at, \
     settled_at";

/// What one charge has promised back (`refund_totals`).
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct RefundTotal {
    pub payment_attempt_id: Uuid,
    pub charged_minor: i64,
    /// Every admitted refund's amount until it fails: never above `charged_minor`.
    pub reserved_minor: i64,
}

/// What a refund's command asked, as recorded: the amount (`None`: the rest), the reason,
/// the metadata and the message that recorded it.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct RefundCommandRow {
    pub requested_minor: Option<i64>,
    pub reason: String,
    pub metadata: Option<Value>,
    pub first_message_id: String,
}

/// One event's publishing, as the relay left it: whether it is published, how often it was
/// tried, when it is tried next (seconds from the database's now; negative when due) and why
/// its last try failed.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct EventTries {
    pub event_id: Uuid,
    pub subject: String,
    pub published: bool,
    pub publish_attempts: i32,
    pub next_try_in_secs: Option<f64>,
    pub last_error: Option<String>,
}

/// The readers of one test's database. Every method has its SQL here and nowhere else.
pub trait Records {
    /// The test database.
    fn pool(&self) -> &PgPool;

    // The attempt.

    /// One attempt's row, for assertions.
    async fn attempt(&self, id: impl Into<PaymentAttemptId>) -> AttemptRow {
        let id: PaymentAttemptId = id.into();
        self.find_attempt(id)
            .await
            .unwrap_or_else(|| panic!("the attempt {id} is not recorded"))
    }

    /// One attempt's row, if it is recorded (yet).
    async fn find_attempt(&self, id: impl Into<PaymentAttemptId>) -> Option<AttemptRow> {
        let id: PaymentAttemptId = id.into();
        sqlx::query_as(
            "SELECT payment_attempt_id, status, tries, lease_token, lease_owner, lease_expires_at, next_run_at,
                    dispatched_at, first_dispatched_at, gateway_charge_id, decline_code,
                    last_error, review_reason, idempotency_key, updated_at, order_id,
                    amount_minor, currency, correlation_id, reconcile_checks, gateway_object_id
             FROM payment_attempts WHERE payment_attempt_id = $1",
        )
        .bind(id)
        .fetch_optional(self.pool())
        .await
        .unwrap_or_else(|e| panic!("the attempt {id}: {e}"))
    }

    /// The status of one attempt, as stored.
    async fn status(&self, id: impl Into<PaymentAttemptId>) -> String {
        self.attempt_columns::<(String,)>(id, "status").await.0
    }

    /// Every attempt's row, oldest first.
    async fn all_attempts(&self) -> Vec<AttemptRow> {
        sqlx::query_as(
            "SELECT payment_attempt_id, status, tries, lease_token, lease_owner, lease_expires_at,
                    next_run_at, dispatched_at, first_dispatched_at, gateway_charge_id,
                    decline_code, last_error, review_reason, idempotency_key, updated_at, order_id,
                    amount_minor, currency, correlation_id, reconcile_checks, gateway_object_id
             FROM payment_attempts ORDER BY created_at, payment_attempt_id",
        )
        .fetch_all(self.pool())
        .await
        .unwrap()
    }

    /// Whether the attempt is recorded at all.
    async fn attempt_exists(&self, id: impl Into<PaymentAttemptId>) -> bool {
        let id: PaymentAttemptId = id.into();
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM payment_attempts WHERE payment_attempt_id = $1)",
        )
        .bind(id)
        .fetch_one(self.pool())
        .await
        .unwrap_or_else(|e| panic!("whether {id} exists: {e}"))
    }

    /// The `columns` (SQL, e.g. `"status, decline_code"`) of one attempt's row, read as `T`
    /// (a tuple in their order): for the columns [`AttemptRow`] leaves out.
    async fn attempt_columns<T>(&self, id: impl Into<PaymentAttemptId>, columns: &str) -> T
    where
        T: for<'r> FromRow<'r, PgRow> + Send + Unpin,
    {
        let id: PaymentAttemptId = id.into();
        sqlx::query_as(&format!(
            "SELECT {columns} FROM payment_attempts WHERE payment_attempt_id = $1"
        ))
        .bind(id)
        .fetch_one(self.pool())
        .await
        .unwrap_or_else(|e| panic!("{columns} of {id}: {e}"))
    }

    /// The review reason of an attempt that must be waiting for a person (`needs_review`).
    async fn review_reason(&self, id: impl Into<PaymentAttemptId>) -> String {
        let row = self.attempt(id).await;
        assert_eq!(row.status, "needs_review");
        row.review_reason.expect("a review reason")
    }

    /// How many payment attempts are recorded.
    async fn attempt_rows(&self) -> i64 {
        self.scalar("SELECT count(*) FROM payment_attempts").await
    }

    /// How many attempts are in `status`.
    async fn attempts_in(&self, status: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM payment_attempts WHERE status = $1")
            .bind(status)
            .fetch_one(self.pool())
            .await
            .unwrap()
    }

    /// How many attempts are not settled yet (not `succeeded`, `declined`, `expired` or
    /// `needs_review`).
    async fn unsettled_attempts(&self) -> i64 {
        self.scalar(
            "SELECT count(*) FROM payment_attempts
             WHERE status NOT IN ('succeeded', 'declined', 'expired', 'needs_review')",
        )
        .await
    }

    /// Every attempt as (id, status, gateway charge id).
    async fn attempt_outcomes(&self) -> Vec<(Uuid, String, Option<String>)> {
        sqlx::query_as("SELECT payment_attempt_id, status, gateway_charge_id FROM payment_attempts")
            .fetch_all(self.pool())
            .await
            .unwrap()
    }

    /// Rewrites columns of one attempt directly (`set`: the SQL after `SET`; times by the
    /// database's clock), to arrange a past the test cannot wait for.
    async fn set_attempt(&self, id: impl Into<PaymentAttemptId>, set: &str) {
        let id: PaymentAttemptId = id.into();
        sqlx::query(&format!(
            "UPDATE payment_attempts SET {set} WHERE payment_attempt_id = $1"
        ))
        .bind(id)
        .execute(self.pool())
        .await
        .unwrap_or_else(|e| panic!("SET {set}: {e}"));
    }

    /// Rewrites columns of every attempt in `status` directly, like [`Records::set_attempt`].
    async fn set_attempts_in(&self, status: &str, set: &str) {
        sqlx::query(&format!(
            "UPDATE payment_attempts SET {set} WHERE status = $1"
        ))
        .bind(status)
        .execute(self.pool())
        .await
        .unwrap_or_else(|e| panic!("SET {set} WHERE status = {status}: {e}"));
    }

    // The attempt's history.

    /// The attempt's transitions as (from, to, cause), in order.
    async fn transitions(
        &self,
        id: impl Into<PaymentAttemptId>,
    ) -> Vec<(Option<String>, String, String)> {
        let history = self.history(id).await;
        history
            .into_iter()
            .map(|t| (t.from_status, t.to_status, t.cause))
            .collect()
    }

    /// The causes of the attempt's transitions, in order: the path it took, in short.
    async fn causes(&self, id: impl Into<PaymentAttemptId>) -> Vec<String> {
        let history = self.history(id).await;
        history.into_iter().map(|t| t.cause).collect()
    }

    /// The statuses the attempt went through, in order (each transition's `to`).
    async fn path(&self, id: impl Into<PaymentAttemptId>) -> Vec<String> {
        let history = self.history(id).await;
        history.into_iter().map(|t| t.to_status).collect()
    }

    /// The attempt's transitions, whole (actor, detail, time), in order.
    async fn history(&self, id: impl Into<PaymentAttemptId>) -> Vec<Transition> {
        let id: PaymentAttemptId = id.into();
        sqlx::query_as(
            "SELECT payment_attempt_id, from_status, to_status, cause, actor, detail, at
             FROM attempt_history WHERE payment_attempt_id = $1 ORDER BY id",
        )
        .bind(id)
        .fetch_all(self.pool())
        .await
        .unwrap_or_else(|e| panic!("the history of {id}: {e}"))
    }

    /// The attempt's latest transition.
    async fn last_transition(&self, id: impl Into<PaymentAttemptId>) -> Transition {
        let id: PaymentAttemptId = id.into();
        let mut history = self.history(id).await;
        history
            .pop()
            .unwrap_or_else(|| panic!("{id} has no transition"))
    }

    /// Every transition of every attempt, in order.
    async fn all_transitions(&self) -> Vec<Transition> {
        sqlx::query_as(
            "SELECT payment_attempt_id, from_status, to_status, cause, actor, detail, at
             FROM attempt_history ORDER BY id",
        )
        .fetch_all(self.pool())
        .await
        .unwrap()
    }

    /// How many transitions of any attempt had `cause`.
    async fn transitions_caused_by(&self, cause: &str) -> usize {
        let all = self.all_transitions().await;
        all.iter().filter(|t| t.cause == cause).count()
    }

    // Its gateway calls.

    /// The attempt's gateway calls, in order.
    async fn gateway_calls(&self, id: impl Into<PaymentAttemptId>) -> Vec<GatewayCallRow> {
        let id: PaymentAttemptId = id.into();
        sqlx::query_as(
            "SELECT try_number, lease_token, http_status, outcome, gateway_charge_id
             FROM gateway_call_records WHERE payment_attempt_id = $1 ORDER BY id",
        )
        .bind(id)
        .fetch_all(self.pool())
        .await
        .unwrap_or_else(|e| panic!("the gateway calls of {id}: {e}"))
    }

    /// The operations of the attempt's gateway calls (`prepare`, `charge`, `lookup`,
    /// `list`, …), in order.
    async fn call_operations(&self, id: impl Into<PaymentAttemptId>) -> Vec<String> {
        let id: PaymentAttemptId = id.into();
        self.all_gateway_calls()
            .await
            .into_iter()
            .filter(|c| PaymentAttemptId::from(c.payment_attempt_id) == id)
            .map(|c| c.operation)
            .collect()
    }

    /// Every gateway call of every attempt, in order.
    async fn all_gateway_calls(&self) -> Vec<GatewayCall> {
        sqlx::query_as(
            "SELECT payment_attempt_id, operation, try_number, lease_token, http_status, outcome,
                    gateway_charge_id
             FROM gateway_call_records ORDER BY id",
        )
        .fetch_all(self.pool())
        .await
        .unwrap()
    }

    /// How many gateway calls of any attempt were `operation`s (`charge`, `lookup`, …).
    async fn gateway_calls_of(&self, operation: &str) -> usize {
        let calls = self.all_gateway_calls().await;
        calls.iter().filter(|c| c.operation == operation).count()
    }

    // Its events.

    /// The attempt's outbox events as (status, payload, headers).
    async fn events(&self, id: impl Into<PaymentAttemptId>) -> Vec<(String, Value, Value)> {
        let id: PaymentAttemptId = id.into();
        self.outbox()
            .await
            .into_iter()
            .filter(|e| PaymentAttemptId::from(e.payment_attempt_id) == id)
            .map(|e| (e.status, e.payload, e.headers))
            .collect()
    }

    /// The attempt's one outbox event as (status, payload, headers): a settled attempt
    /// announces itself exactly once.
    async fn only_event(&self, id: impl Into<PaymentAttemptId>) -> (String, Value, Value) {
        let id: PaymentAttemptId = id.into();
        let mut events = self.events(id).await;
        assert_eq!(events.len(), 1, "one event for {id}: {events:?}");
        events.remove(0)
    }

    /// The attempt's latest event, whole.
    async fn last_event(&self, id: impl Into<PaymentAttemptId>) -> Event {
        let id: PaymentAttemptId = id.into();
        let mut events: Vec<Event> = self
            .outbox()
            .await
            .into_iter()
            .filter(|e| PaymentAttemptId::from(e.payment_attempt_id) == id)
            .collect();
        events.pop().unwrap_or_else(|| panic!("{id} has no event"))
    }

    /// Every event in the outbox, oldest first.
    async fn outbox(&self) -> Vec<Event> {
        sqlx::query_as(
            "SELECT event_id, payment_attempt_id, status, subject, headers, payload, created_at,
                    published_at, publish_attempts
             FROM outbox ORDER BY created_at, event_id",
        )
        .fetch_all(self.pool())
        .await
        .unwrap()
    }

    /// How many events wait for the relay (never published).
    async fn unpublished_events(&self) -> usize {
        let outbox = self.outbox().await;
        outbox.iter().filter(|e| e.published_at.is_none()).count()
    }

    /// The relay's queue (`outbox_unpublished`, decision 171): every event id it names, one
    /// entry per time it is named, sorted; and how many queue rows name them.
    async fn queued_events(&self) -> (Vec<Uuid>, i64) {
        let mut events: Vec<Uuid> =
            sqlx::query_scalar("SELECT unnest(event_ids) FROM outbox_unpublished")
                .fetch_all(self.pool())
                .await
                .unwrap();
        events.sort();
        let rows = self.scalar("SELECT count(*) FROM outbox_unpublished").await;
        (events, rows)
    }

    /// The ids of the events never published, sorted.
    async fn unpublished_event_ids(&self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = self
            .outbox()
            .await
            .into_iter()
            .filter(|e| e.published_at.is_none())
            .map(|e| e.event_id)
            .collect();
        ids.sort();
        ids
    }

    // Intake's dedupe rows.

    /// How many dedupe rows (`processed_messages`) are recorded.
    async fn dedupe_rows(&self) -> i64 {
        self.scalar("SELECT count(*) FROM processed_messages").await
    }

    /// Every dedupe row, by message id.
    async fn processed_messages(&self) -> Vec<DedupeRow> {
        sqlx::query_as(
            "SELECT consumer, message_id, payment_attempt_id, result, stream_sequence, recorded_at
             FROM processed_messages ORDER BY message_id",
        )
        .fetch_all(self.pool())
        .await
        .unwrap()
    }

    /// The dedupe row of the message `message_id`, if intake recorded one.
    async fn dedupe_row(&self, message_id: &str) -> Option<DedupeRow> {
        let rows = self.processed_messages().await;
        rows.into_iter().find(|r| r.message_id == message_id)
    }

    /// What intake made of the message `message_id` (`accepted`, `business_duplicate`,
    /// `stale`), if it recorded it.
    async fn dedupe_result(&self, message_id: &str) -> Option<String> {
        self.dedupe_row(message_id).await.map(|row| row.result)
    }

    // The reconciler's findings.

    /// Every finding, oldest first.
    async fn findings(&self) -> Vec<Finding> {
        sqlx::query_as(
            "SELECT id, class, payment_attempt_id, reference, seen_count, state, detail, evidence,
                    source, resolved_by, resolution
             FROM reconciliation_findings ORDER BY id",
        )
        .fetch_all(self.pool())
        .await
        .unwrap()
    }

    /// Plants an open finding about attempt `id`, as the sweep records one (a refund at the
    /// gateway), for the faces that show findings: its id.
    async fn plant_finding(&self, id: impl Into<PaymentAttemptId>) -> i64 {
        sqlx::query_scalar(
            "INSERT INTO reconciliation_findings
                 (class, dedupe_key, payment_attempt_id, gateway_ids, detail, source)
             VALUES ('recorded_not_charged', 'recorded_not_charged:' || $1 || ':ch_console', $1,
                     '{ch_console}', 'the charge was refunded at the gateway', 'sweep')
             RETURNING id",
        )
        .bind(id.into())
        .fetch_one(self.pool())
        .await
        .expect("a planted finding")
    }

    /// The findings no one has resolved yet, oldest first.
    async fn open_findings(&self) -> Vec<Finding> {
        let findings = self.findings().await;
        findings.into_iter().filter(|f| f.state == "open").collect()
    }

    /// The findings about one attempt, oldest first.
    async fn findings_about(&self, id: impl Into<PaymentAttemptId>) -> Vec<Finding> {
        let id: PaymentAttemptId = id.into();
        let findings = self.findings().await;
        findings
            .into_iter()
            .filter(|f| f.payment_attempt_id.map(PaymentAttemptId::from) == Some(id))
            .collect()
    }

    /// The finding `id`.
    async fn finding(&self, id: i64) -> Finding {
        let findings = self.findings().await;
        findings
            .into_iter()
            .find(|f| f.id == id)
            .unwrap_or_else(|| panic!("no finding {id}"))
    }

    /// The newest finding.
    async fn last_finding(&self) -> Finding {
        let mut findings = self.findings().await;
        findings.pop().expect("a finding")
    }

    // The sweeps.

    /// Every sweep, oldest first.
    async fn sweeps(&self) -> Vec<Sweep> {
        sqlx::query_as(
            "SELECT id, finished_at IS NOT NULL AS finished, error
             FROM reconciliation_sweeps ORDER BY id",
        )
        .fetch_all(self.pool())
        .await
        .unwrap()
    }

    /// How many listed charges the sweeps hold (none once every sweep finished).
    async fn sweep_records(&self) -> i64 {
        self.scalar("SELECT count(*) FROM reconciliation_sweep_records")
            .await
    }

    // The operators' audit.

    /// Every audit entry, in order.
    async fn audit_entries(&self) -> Vec<AuditEntry> {
        sqlx::query_as(
            "SELECT id, actor, via, action, payment_attempt_ids, dlq_sequence, reason, outcome,
                    detail
             FROM operator_audit ORDER BY id",
        )
        .fetch_all(self.pool())
        .await
        .unwrap()
    }

    /// The audit entries that name the attempt `id`, in order.
    async fn audit_entries_about(&self, id: impl Into<PaymentAttemptId>) -> Vec<AuditEntry> {
        let id: Uuid = id.into().into();
        let entries = self.audit_entries().await;
        entries.into_iter().filter(|e| e.names(id)).collect()
    }

    // The console's sessions and the webhook events.

    /// Every console session, oldest first.
    async fn console_sessions(&self) -> Vec<ConsoleSession> {
        sqlx::query_as(
            "SELECT encode(id_sha256, 'hex') AS id_sha256_hex, actor, created_at, expires_at
             FROM console_sessions ORDER BY created_at, id_sha256",
        )
        .fetch_all(self.pool())
        .await
        .unwrap()
    }

    /// How many console sessions `actor` holds.
    async fn sessions_of(&self, actor: &str) -> usize {
        let sessions = self.console_sessions().await;
        sessions.iter().filter(|s| s.actor == actor).count()
    }

    /// Every Stripe webhook event taken in, by event id.
    async fn webhook_events(&self) -> Vec<WebhookEvent> {
        sqlx::query_as(
            "SELECT event_id, event_type, payment_attempt_id, outcome
             FROM stripe_webhook_events ORDER BY event_id",
        )
        .fetch_all(self.pool())
        .await
        .unwrap()
    }

    /// How many audit entries `matches`: who did what through which face, and why.
    async fn audit_count(&self, matches: impl Fn(&AuditEntry) -> bool) -> usize {
        let entries = self.audit_entries().await;
        entries.iter().filter(|e| matches(e)).count()
    }

    /// Attempts per status, counted from the table, by status.
    async fn attempts_by_status(&self) -> Vec<(String, i64)> {
        sqlx::query_as(
            "SELECT status, count(*) FROM payment_attempts GROUP BY status ORDER BY status",
        )
        .fetch_all(self.pool())
        .await
        .expect("attempts by status")
    }

    /// Rewrites columns of every event in the outbox directly (`set`: the SQL after `SET`),
    /// like [`Records::set_attempt`]: events the relay published, or failed to, long ago.
    async fn set_events(&self, set: &str) {
        sqlx::query(&format!("UPDATE outbox SET {set}"))
            .execute(self.pool())
            .await
            .unwrap_or_else(|e| panic!("SET {set}: {e}"));
    }

    // The rate bucket and the fleet's pause.

    /// The tokens left in the fleet's one rate bucket.
    async fn bucket_tokens(&self) -> f64 {
        sqlx::query_scalar("SELECT tokens FROM gateway_rate_buckets")
            .fetch_one(self.pool())
            .await
            .expect("the fleet's rate bucket")
    }

    /// When the fleet's bucket was last taken from (every take moves it, by the database
    /// clock).
    async fn bucket_last_take(&self) -> OffsetDateTime {
        sqlx::query_scalar("SELECT max(refilled_at) FROM gateway_rate_buckets")
            .fetch_one(self.pool())
            .await
            .expect("the fleet's rate bucket")
    }

    /// Fills the fleet's one rate bucket with `tokens`, as of now.
    async fn fill_bucket(&self, tokens: f64) {
        sqlx::query("UPDATE gateway_rate_buckets SET tokens = $1, refilled_at = now()")
            .bind(tokens)
            .execute(self.pool())
            .await
            .expect("the fleet's rate bucket");
    }

    /// Pauses the fleet as `by` would, for `reason`, without the audit a face writes: set-up
    /// that holds every worker still.
    async fn pause_fleet(&self, by: &str, reason: &str) {
        sqlx::query("INSERT INTO fleet_pauses (paused_by, reason) VALUES ($1, $2)")
            .bind(by)
            .bind(reason)
            .execute(self.pool())
            .await
            .expect("a pause");
    }

    /// How many pauses of the fleet are in force (not resumed).
    async fn pauses_in_force(&self) -> i64 {
        self.open_pauses().await.len() as i64
    }

    /// The pauses in force, oldest first: (id, scope, currency).
    async fn open_pauses(&self) -> Vec<(i64, String, Option<String>)> {
        sqlx::query_as(
            "SELECT id, scope, currency FROM fleet_pauses WHERE resumed_at IS NULL ORDER BY id",
        )
        .fetch_all(self.pool())
        .await
        .expect("the open pauses")
    }

    // Arranging a past the test cannot wait for.

    /// Adds `n` transitions of attempt `id` from `pending` to `pending` (cause and actor
    /// `test`), at `at` (`None`: now): history of a month retention must drop or keep.
    async fn add_transitions(
        &self,
        id: impl Into<PaymentAttemptId>,
        at: Option<OffsetDateTime>,
        n: i64,
    ) {
        sqlx::query(
            "INSERT INTO attempt_transitions (payment_attempt_id, from_status, to_status, cause, actor, at)
             SELECT $1, 'pending', 'pending', 'test', 'test', coalesce($2, now())
             FROM generate_series(1, $3)",
        )
        .bind(id.into())
        .bind(at)
        .bind(n)
        .execute(self.pool())
        .await
        .expect("transitions added");
    }

    /// How many rows of `attempt_transitions` (every month and the default) are attempt
    /// `id`'s: its moves, not its creation, which is its own row (decision 219).
    async fn transition_rows(&self, id: impl Into<PaymentAttemptId>) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM attempt_transitions WHERE payment_attempt_id = $1")
            .bind(id.into())
            .fetch_one(self.pool())
            .await
            .expect("transition rows")
    }

    /// Marks attempt `id`'s events published now, as the relay would have.
    async fn mark_published(&self, id: impl Into<PaymentAttemptId>) {
        sqlx::query("UPDATE outbox SET published_at = now() WHERE payment_attempt_id = $1")
            .bind(id.into())
            .execute(self.pool())
            .await
            .expect("events marked published");
    }

    /// Deletes attempt `id` and its transitions, as a person with the database could.
    async fn delete_attempt(&self, id: impl Into<PaymentAttemptId>) {
        let id: PaymentAttemptId = id.into();
        sqlx::query("DELETE FROM attempt_transitions WHERE payment_attempt_id = $1")
            .bind(id)
            .execute(self.pool())
            .await
            .unwrap_or_else(|e| panic!("the transitions of {id}: {e}"));
        sqlx::query("DELETE FROM payment_attempts WHERE payment_attempt_id = $1")
            .bind(id)
            .execute(self.pool())
            .await
            .unwrap_or_else(|e| panic!("the attempt {id}: {e}"));
    }

    /// Rewrites columns of every sweep directly (`set`: the SQL after `SET`), like
    /// [`Records::set_attempt`]: a sweep that stalled or started long ago.
    async fn set_sweeps(&self, set: &str) {
        sqlx::query(&format!("UPDATE reconciliation_sweeps SET {set}"))
            .execute(self.pool())
            .await
            .unwrap_or_else(|e| panic!("SET {set}: {e}"));
    }

    /// Moves every stored time of the refunds back by `by`, as [`Harness::advance`] does
    /// for attempts.
    async fn advance_refunds(&self, by: std::time::Duration) {
        sqlx::query(
            "UPDATE refunds SET
                 next_run_at = next_run_at - make_interval(secs => $1),
                 lease_expires_at = lease_expires_at - make_interval(secs => $1),
                 first_sent_at = first_sent_at - make_interval(secs => $1),
                 last_sent_at = last_sent_at - make_interval(secs => $1),
                 created_at = created_at - make_interval(secs => $1),
                 updated_at = updated_at - make_interval(secs => $1)",
        )
        .bind(by.as_secs_f64())
        .execute(self.pool())
        .await
        .expect("refunds moved back");
    }

    /// Rewrites columns of the dedupe row of `message_id` directly (`set`: the SQL after
    /// `SET`), like [`Records::set_attempt`]: a message recorded long ago.
    async fn set_dedupe_row(&self, message_id: &str, set: &str) {
        sqlx::query(&format!(
            "UPDATE processed_messages SET {set} WHERE message_id = $1"
        ))
        .bind(message_id)
        .execute(self.pool())
        .await
        .unwrap_or_else(|e| panic!("SET {set}: {e}"));
    }

    /// Deletes the dedupe row of `message_id`: a message acknowledged that intake has no
    /// record of.
    async fn forget_dedupe_row(&self, message_id: &str) {
        sqlx::query("DELETE FROM processed_messages WHERE message_id = $1")
            .bind(message_id)
            .execute(self.pool())
            .await
            .unwrap_or_else(|e| panic!("the dedupe row of {message_id}: {e}"));
    }

    /// Expires `actor`'s console sessions, as if signed in nine hours ago: how many.
    async fn expire_sessions_of(&self, actor: &str) -> u64 {
        sqlx::query(
            "UPDATE console_sessions SET created_at = now() - interval '9 hours',
                    expires_at = now() - interval '1 second' WHERE actor = $1",
        )
        .bind(actor)
        .execute(self.pool())
        .await
        .expect("sessions expired")
        .rows_affected()
    }

    /// Forgets when the sweep last ran and is next due: the schedule's next sweep falls due
    /// at once.
    async fn clear_sweep_schedule(&self) {
        sqlx::query("DELETE FROM reconciliation_sweep_schedule")
            .execute(self.pool())
            .await
            .expect("the sweep schedule");
    }

    /// The webhook deliveries refused before they were read, tallied by result:
    /// (result, how many, the last reason), by result.
    async fn webhook_refusals(&self) -> Vec<(String, i64, String)> {
        sqlx::query_as("SELECT result, refused, last_why FROM webhook_refusals ORDER BY result")
            .fetch_all(self.pool())
            .await
            .expect("webhook refusals")
    }

    // The schema, broken or read on purpose.

    /// How many rows `table` holds (a table, a view, or one partition of a table).
    async fn rows_in(&self, table: &str) -> i64 {
        self.scalar(&format!("SELECT count(*) FROM {table}")).await
    }

    /// Whether a table, index or other relation named `name` exists.
    async fn relation_exists(&self, name: &str) -> bool {
        sqlx::query_scalar("SELECT EXISTS (SELECT FROM pg_class WHERE relname = $1)")
            .bind(name)
            .fetch_one(self.pool())
            .await
            .unwrap_or_else(|e| panic!("whether {name} exists: {e}"))
    }

    /// The month partitions of the history table `table`, by name (so oldest first): every
    /// partition but the default.
    async fn months_of(&self, table: &str) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = to_regclass($1) AND c.relname <> $1 || '_default'
             ORDER BY c.relname",
        )
        .bind(table)
        .fetch_all(self.pool())
        .await
        .unwrap_or_else(|e| panic!("the months of {table}: {e}"))
    }

    /// The newest migration recorded as applied: (version, description).
    async fn newest_migration(&self) -> (i64, String) {
        sqlx::query_as(
            "SELECT version, description FROM _sqlx_migrations ORDER BY version DESC LIMIT 1",
        )
        .fetch_one(self.pool())
        .await
        .expect("a migration applied")
    }

    /// Forgets that migration `version` was applied: the schema of a release whose
    /// migration has not run.
    async fn forget_migration(&self, version: i64) {
        sqlx::query("DELETE FROM _sqlx_migrations WHERE version = $1")
            .bind(version)
            .execute(self.pool())
            .await
            .unwrap_or_else(|e| panic!("forget migration {version}: {e}"));
    }

    /// Makes the insert of every new attempt whose row meets `condition` (SQL on `NEW`;
    /// `true` for all) fail with the SQLSTATE named `errcode` (`serialization_failure`, a
    /// transient failure; `check_violation`, the message's own), inside the transaction that
    /// records it, until [`Records::accept_attempts`].
    async fn refuse_attempts(&self, condition: &str, errcode: &str) {
        self.exec(&format!(
            "CREATE OR REPLACE FUNCTION refuse_attempt() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN IF {condition} THEN
               RAISE EXCEPTION 'attempt refused' USING ERRCODE = '{errcode}'; END IF;
             RETURN NEW; END $$;
             CREATE TRIGGER refuse_attempt BEFORE INSERT ON payment_attempts
                 FOR EACH ROW EXECUTE FUNCTION refuse_attempt();"
        ))
        .await;
    }

    /// Ends [`Records::refuse_attempts`].
    async fn accept_attempts(&self) {
        self.exec("DROP TRIGGER refuse_attempt ON payment_attempts")
            .await;
    }

    /// Renames the table `from` to `to`: what the code asks for is gone until it is renamed
    /// back (a database failure of one table, without stopping the database).
    async fn rename_table(&self, from: &str, to: &str) {
        self.exec(&format!("ALTER TABLE {from} RENAME TO {to}"))
            .await;
    }

    /// The plan PostgreSQL makes for `sql` with sequential scans priced out, one line per
    /// node: the planner scans only when no index serves.
    async fn plan_without_seq_scans(&self, sql: &str) -> String {
        let mut conn = self.pool().acquire().await.unwrap().detach();
        sqlx::query("SET enable_seqscan = off")
            .execute(&mut conn)
            .await
            .unwrap();
        let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {sql}"))
            .fetch_all(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e}"));
        sqlx::Connection::close(conn).await.unwrap();
        plan.join("\n")
    }

    /// Takes the lock that stops a sweep before its comparison (its ANALYZE of the records
    /// it read waits for it) until the returned transaction ends.
    async fn hold_sweep_records(&self) -> Transaction<'static, Postgres> {
        let mut blocker = self.pool().begin().await.unwrap();
        sqlx::query("LOCK TABLE reconciliation_sweep_records IN SHARE UPDATE EXCLUSIVE MODE")
            .execute(&mut *blocker)
            .await
            .unwrap();
        blocker
    }

    /// Whether a sweep has read its pages and waits on [`Records::hold_sweep_records`] to
    /// compare them.
    async fn sweep_waits_to_compare(&self) -> bool {
        self.scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND query LIKE '%onecharge_analyze_sweep_records%'",
        )
        .await
            == 1
    }

    // The relay's retries and queue.

    /// Every event's publishing (published or not), oldest first.
    async fn event_tries(&self) -> Vec<EventTries> {
        sqlx::query_as(
            "SELECT event_id, subject, published_at IS NOT NULL AS published, publish_attempts,
                    extract(epoch FROM next_attempt_at - now())::float8 AS next_try_in_secs,
                    last_error
             FROM outbox ORDER BY created_at, event_id",
        )
        .fetch_all(self.pool())
        .await
        .expect("the events' tries")
    }

    /// How many rows of the relay's queue are not due yet (they wait for their next try).
    async fn queue_rows_not_due(&self) -> i64 {
        self.scalar("SELECT count(*) FROM outbox_unpublished WHERE next_attempt_at > now()")
            .await
    }

    /// Sends the event the relay meets first (the first of the oldest queue row) to
    /// `subject`: one no stream stores is refused by JetStream every time.
    async fn send_first_queued_event_to(&self, subject: &str) {
        sqlx::query(
            "UPDATE outbox SET subject = $1
             WHERE event_id = (SELECT event_ids[1] FROM outbox_unpublished ORDER BY id LIMIT 1)",
        )
        .bind(subject)
        .execute(self.pool())
        .await
        .expect("the first queued event moved");
    }

    /// Makes every unpublished event and queue row due now, as if its next try had come.
    async fn make_unpublished_events_due(&self) {
        self.exec(
            "UPDATE outbox SET next_attempt_at = now() - interval '1 second' WHERE published_at IS NULL;
             UPDATE outbox_unpublished SET next_attempt_at = now() - interval '1 second'",
        )
        .await;
    }

    /// Queues the events again `per_row` to a queue row, oldest first, as inserts of
    /// `per_row` events each would have queued them.
    async fn queue_events_in_rows_of(&self, per_row: usize) {
        self.exec(&format!(
            "DELETE FROM outbox_unpublished;
             INSERT INTO outbox_unpublished (event_ids, created_ats)
             SELECT array_agg(event_id ORDER BY n), array_agg(created_at ORDER BY n)
             FROM (SELECT event_id, created_at,
                          row_number() OVER (ORDER BY created_at, event_id) - 1 AS n
                   FROM outbox) e
             GROUP BY n / {per_row} ORDER BY n / {per_row}"
        ))
        .await;
    }

    /// Adds `count` published events of no attempt (status `finding`), `per_millisecond` to
    /// each millisecond back from now, as settlements write them: a month's bulk.
    async fn add_published_events(&self, count: i64, per_millisecond: i64) {
        sqlx::query(
            "INSERT INTO outbox (event_id, status, subject, headers, payload, created_at, published_at)
             SELECT gen_random_uuid(), 'finding', 'payments.events.test', '{}', '{}',
                    now() - (g / $2) * interval '1 ms', now()
             FROM generate_series(1, $1) g",
        )
        .bind(count)
        .bind(per_millisecond)
        .execute(self.pool())
        .await
        .expect("published events added");
    }

    /// Adds `count` unpublished `needs_review` events, each of an attempt of its own that is
    /// not recorded: other attempts' events.
    async fn add_events_of_other_attempts(&self, count: i64) {
        sqlx::query(
            "INSERT INTO outbox (event_id, payment_attempt_id, status, subject, headers, payload)
             SELECT gen_random_uuid(), gen_random_uuid(), 'needs_review', 'payments.events.x',
                    '{}', '{}'
             FROM generate_series(1, $1)",
        )
        .bind(count)
        .execute(self.pool())
        .await
        .expect("other attempts' events added");
    }

    /// Plants an event of attempt `id` in `status` (subject `payments.events.<status>`),
    /// empty, as a settlement would have written it.
    async fn plant_event(&self, id: impl Into<PaymentAttemptId>, status: &str) {
        sqlx::query(
            "INSERT INTO outbox (event_id, payment_attempt_id, status, subject, headers, payload)
             VALUES ($1, $2, $3, 'payments.events.' || $3, '{}', '{}')",
        )
        .bind(Uuid::new_v4())
        .bind(id.into())
        .bind(status)
        .execute(self.pool())
        .await
        .expect("an event planted");
    }

    /// The keys (event id, creation time) of `limit` events after the first `offset`,
    /// oldest first: what one relay step marks.
    async fn event_keys(&self, limit: i64, offset: i64) -> Vec<(Uuid, OffsetDateTime)> {
        sqlx::query_as(
            "SELECT event_id, created_at FROM outbox ORDER BY created_at, event_id
             LIMIT $1 OFFSET $2",
        )
        .bind(limit)
        .bind(offset)
        .fetch_all(self.pool())
        .await
        .expect("event keys")
    }

    // Copies and bulk, for the plans and limits of large tables.

    /// Adds `count` copies of attempt `id` under new ids (and keys and message ids).
    async fn copy_attempt(&self, id: impl Into<PaymentAttemptId>, count: i64) {
        sqlx::query(
            "INSERT INTO payment_attempts
             SELECT (jsonb_populate_record(a, jsonb_build_object(
                        'payment_attempt_id', n.id, 'idempotency_key', 'onecharge-' || n.id,
                        'first_message_id', 'm-' || n.id))).*
             FROM payment_attempts a,
                  (SELECT gen_random_uuid() AS id FROM generate_series(1, $2)) n
             WHERE a.payment_attempt_id = $1",
        )
        .bind(id.into())
        .bind(count)
        .execute(self.pool())
        .await
        .expect("copies of the attempt");
    }

    /// Adds `count` copies of the charged attempt `id`, each with a charge of its own, one
    /// every `every` back from now (sent, updated and created then).
    async fn copy_attempt_back_in_time(
        &self,
        id: impl Into<PaymentAttemptId>,
        count: i64,
        every: std::time::Duration,
    ) {
        sqlx::query(
            "INSERT INTO payment_attempts
             SELECT (jsonb_populate_record(a, jsonb_build_object(
                        'payment_attempt_id', n.id, 'idempotency_key', 'onecharge-' || n.id,
                        'first_message_id', 'm-' || n.id, 'gateway_charge_id', 'ch_' || n.id,
                        'first_dispatched_at', n.at, 'dispatched_at', n.at,
                        'updated_at', n.at, 'created_at', n.at))).*
             FROM payment_attempts a,
                  (SELECT gen_random_uuid() AS id,
                          now() - i * make_interval(secs => $3) AS at
                   FROM generate_series(1, $2) i) n
             WHERE a.payment_attempt_id = $1",
        )
        .bind(id.into())
        .bind(count)
        .bind(every.as_secs_f64())
        .execute(self.pool())
        .await
        .expect("copies of the attempt back in time");
    }

    /// Adds `count` dedupe rows of messages `m-1`… accepted by `onecharge-intake`, each for
    /// an attempt of its own.
    async fn add_dedupe_rows(&self, count: i64) {
        sqlx::query(
            "INSERT INTO processed_messages
                 (consumer, message_id, body_sha256, payment_attempt_id, result, stream_sequence)
             SELECT 'onecharge-intake', 'm-' || g, sha256(g::text::bytea), gen_random_uuid(),
                    'accepted', g
             FROM generate_series(1, $1) g",
        )
        .bind(count)
        .execute(self.pool())
        .await
        .expect("dedupe rows added");
    }

    /// How many succeeded attempts were first sent at or after `from` and last changed
    /// before `to`: what a sweep's window, less its margins, holds.
    async fn succeeded_first_sent_between(&self, from: OffsetDateTime, to: OffsetDateTime) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM payment_attempts
             WHERE status = 'succeeded' AND first_dispatched_at >= $1 AND updated_at < $2",
        )
        .bind(from)
        .bind(to)
        .fetch_one(self.pool())
        .await
        .expect("succeeded attempts in the window")
    }

    /// How many search rows (`attempt_search`) equal their attempt's columns (id, creation
    /// time, order, customer).
    async fn search_rows_equal_to_their_attempts(&self) -> i64 {
        self.scalar(
            "SELECT count(*) FROM attempt_search s JOIN payment_attempts a
             ON s.payment_attempt_id = a.payment_attempt_id AND s.created_at = a.created_at
                AND s.order_id = a.order_id AND s.customer_id = a.customer_id",
        )
        .await
    }

    /// How many moves of any attempt carry the gateway call that caused them.
    async fn moves_carrying_a_call(&self) -> i64 {
        self.scalar("SELECT count(*) FROM attempt_transitions WHERE call_id IS NOT NULL")
            .await
    }

    /// The attempt counts as folded (`attempt_status_counts`), the nonzero ones, by status.
    async fn folded_attempt_counts(&self) -> Vec<(String, i64)> {
        sqlx::query_as("SELECT status, n FROM attempt_status_counts WHERE n <> 0 ORDER BY status")
            .fetch_all(self.pool())
            .await
            .expect("the folded counts")
    }

    /// When the newest attempt was created, by the database's clock.
    async fn newest_attempt_created_at(&self) -> OffsetDateTime {
        sqlx::query_scalar("SELECT max(created_at) FROM payment_attempts")
            .fetch_one(self.pool())
            .await
            .expect("an attempt")
    }

    // The console's planted rows: what other roles would have written, for its pages.

    /// How many console sessions hold any of `texts` anywhere in their row.
    async fn sessions_holding_any(&self, texts: &[&str]) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM console_sessions
             WHERE EXISTS (SELECT FROM unnest($1::text[]) t
                           WHERE position(t IN row(console_sessions)::text) > 0)",
        )
        .bind(texts)
        .fetch_one(self.pool())
        .await
        .expect("console sessions")
    }

    /// Plants two findings about attempt `id`'s charge `pi_console`: a refund at the
    /// gateway, resolved by `operator:ada`, and a dispute after it, open (the webhook's):
    /// their ids.
    async fn plant_earlier_findings(&self, id: impl Into<PaymentAttemptId>) -> (i64, i64) {
        let id: PaymentAttemptId = id.into();
        let subject = format!("recorded_not_charged:{id}:pi_console");
        let refund = self
            .scalar(&format!(
                "INSERT INTO reconciliation_findings
                     (class, dedupe_key, subject_key, evidence, payment_attempt_id, gateway_ids, detail,
                      source, state, resolved_at, resolved_by, resolution)
                 VALUES ('recorded_not_charged', '{subject}|refunded:500', '{subject}', 'refunded:500',
                         '{id}', '{{pi_console}}', 'refunded at the gateway', 'sweep', 'resolved', now(),
                         'operator:ada', 'partial refund agreed with the customer')
                 RETURNING id"
            ))
            .await;
        let dispute = self
            .scalar(&format!(
                "INSERT INTO reconciliation_findings
                     (class, dedupe_key, subject_key, evidence, payment_attempt_id, gateway_ids, detail,
                      source)
                 VALUES ('disputed', '{subject}|dispute:open;refunded:500', '{subject}',
                         'dispute:open;refunded:500', '{id}', '{{pi_console}}', 'disputed at the gateway',
                         'webhook')
                 RETURNING id"
            ))
            .await;
        (refund, dispute)
    }

    /// Plants three sweeps: one by the schedule, finished two hours ago (7 pages, 2
    /// findings); one by `operator:ada` that failed (`the gateway answered 401`); one
    /// running since now.
    async fn plant_finished_failed_and_running_sweeps(&self) {
        self.exec(
            "INSERT INTO reconciliation_sweeps
                 (window_from, window_to, actor, started_at, finished_at, pages, records_seen,
                  records, records_skipped, findings, settled, error)
             VALUES (now() - interval '25 hours', now(), 'schedule', now() - interval '2 hours',
                     now() - interval '2 hours' + interval '40 seconds', 7, 1400, 1350, 50, 2, 1, NULL),
                    (now() - interval '26 hours', now() - interval '1 hour', 'operator:ada',
                     now() - interval '3 hours', now() - interval '3 hours', 1, 0, 0, 0, 0, 0,
                     'the gateway answered 401'),
                    (now() - interval '24 hours', now() - interval '1 minute', 'schedule', now(),
                     NULL, 3, 300, 290, 10, 0, 0, NULL)",
        )
        .await;
    }

    /// Plants a sweep by `actor` that started `ago` over a window of the last day and never
    /// ended: its instance died.
    async fn plant_sweep_left_running(&self, actor: &str, ago: std::time::Duration) {
        sqlx::query(
            "INSERT INTO reconciliation_sweeps (window_from, window_to, actor, started_at)
             VALUES (now() - interval '1 day', now(), $1, now() - make_interval(secs => $2))",
        )
        .bind(actor)
        .bind(ago.as_secs_f64())
        .execute(self.pool())
        .await
        .expect("a sweep left running");
    }

    /// Plants a Stripe webhook event taken in: `event_id` of `event_type` about PaymentIntent
    /// `pi` of `attempt`, which came to `outcome`.
    async fn plant_webhook_event(
        &self,
        event_id: &str,
        event_type: &str,
        pi: &str,
        attempt: impl Into<Uuid>,
        outcome: &str,
    ) {
        sqlx::query(
            "INSERT INTO stripe_webhook_events
                 (event_id, event_type, payment_intent_id, payment_attempt_id, outcome)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(event_id)
        .bind(event_type)
        .bind(pi)
        .bind(attempt.into())
        .bind(outcome)
        .execute(self.pool())
        .await
        .expect("a webhook event planted");
    }

    /// Plants the tally of webhook deliveries refused as `result`: `refused` of them, the
    /// last for `why`.
    async fn plant_webhook_refusals(&self, result: &str, refused: i64, why: &str) {
        sqlx::query("INSERT INTO webhook_refusals (result, refused, last_why) VALUES ($1, $2, $3)")
            .bind(result)
            .bind(refused)
            .bind(why)
            .execute(self.pool())
            .await
            .expect("webhook refusals planted");
    }

    // The stream audit and the history's months.

    /// How far the stream audit has checked the commands stream (0 before it has).
    async fn audited_through(&self) -> i64 {
        self.scalar("SELECT coalesce(max(checked_through), 0) FROM stream_audit_watermarks")
            .await
    }

    /// How many messages intake did not record were replayed by `actor`.
    async fn unrecorded_replayed_by(&self, actor: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM intake_unrecorded_messages WHERE replayed_by = $1")
            .bind(actor)
            .fetch_one(self.pool())
            .await
            .expect("unrecorded messages")
    }

    /// How many relations named `name` have the storage option `option` (`fillfactor=50`).
    async fn relations_with_option(&self, name: &str, option: &str) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_class WHERE relname = $1 AND reloptions @> ARRAY[$2]",
        )
        .bind(name)
        .bind(option)
        .fetch_one(self.pool())
        .await
        .unwrap_or_else(|e| panic!("the options of {name}: {e}"))
    }

    /// Moves every transition, every event (created and published) and attempt `id`'s last
    /// change to `at`: history of a month long past.
    async fn move_history_to(&self, at: OffsetDateTime, id: impl Into<PaymentAttemptId>) {
        let id: PaymentAttemptId = id.into();
        let mut tx = self.pool().begin().await.unwrap();
        for sql in [
            "UPDATE attempt_transitions SET at = $1",
            "UPDATE outbox SET created_at = $1, published_at = $1",
        ] {
            sqlx::query(sql)
                .bind(at)
                .execute(&mut *tx)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        sqlx::query("UPDATE payment_attempts SET updated_at = $1 WHERE payment_attempt_id = $2")
            .bind(at)
            .bind(id)
            .execute(&mut *tx)
            .await
            .expect("the attempt's last change moved");
        tx.commit().await.unwrap();
    }

    /// Detaches the month `partition` from `table`, as a retention pass interrupted between
    /// its detach and its drop leaves it.
    async fn detach_partition(&self, table: &str, partition: &str) {
        self.exec(&format!("ALTER TABLE {table} DETACH PARTITION {partition}"))
            .await;
    }

    /// How many databases of this server are named `name`.
    async fn databases_named(&self, name: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
            .bind(name)
            .fetch_one(self.pool())
            .await
            .expect("pg_database")
    }

    // For the soak: readers that may fail (a failover under way), and its verdict's.

    /// When the first attempt that succeeded after `after` did, if one has.
    async fn try_first_success_after(
        &self,
        after: OffsetDateTime,
    ) -> sqlx::Result<Option<OffsetDateTime>> {
        sqlx::query_scalar(
            "SELECT min(updated_at) FROM payment_attempts
             WHERE status = 'succeeded' AND updated_at > $1",
        )
        .bind(after)
        .fetch_one(self.pool())
        .await
    }

    /// How many backends wait for a synchronous standby now.
    async fn try_sync_rep_waits(&self) -> sqlx::Result<i64> {
        sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
            .fetch_one(self.pool())
            .await
    }

    /// Up to `limit` attempts with a PaymentIntent, at random, as (id, PaymentIntent id); only
    /// those in `status` if one is given.
    async fn try_random_intents(
        &self,
        status: Option<&str>,
        limit: i64,
    ) -> sqlx::Result<Vec<(Uuid, String)>> {
        sqlx::query_as(
            "SELECT payment_attempt_id, gateway_object_id FROM payment_attempts
             WHERE ($1::text IS NULL OR status = $1) AND gateway_object_id IS NOT NULL
             ORDER BY random() LIMIT $2",
        )
        .bind(status)
        .bind(limit)
        .fetch_all(self.pool())
        .await
    }

    /// The ids of up to `limit` attempts not settled and not in review (`pending`,
    /// `in_flight`, `unknown`).
    async fn try_open_attempt_ids(&self, limit: i64) -> sqlx::Result<Vec<Uuid>> {
        sqlx::query_scalar(
            "SELECT payment_attempt_id FROM payment_attempts
             WHERE status IN ('pending', 'in_flight', 'unknown') LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self.pool())
        .await
    }

    /// What is left to drain, at once: (attempts, of them open, unpublished events,
    /// webhook checks to do).
    async fn try_drain_counts(&self) -> sqlx::Result<(i64, i64, i64, i64)> {
        sqlx::query_as(
            "SELECT (SELECT count(*) FROM payment_attempts),
                    (SELECT count(*) FROM payment_attempts WHERE status IN ('pending', 'in_flight', 'unknown')),
                    (SELECT count(*) FROM outbox WHERE published_at IS NULL),
                    (SELECT count(*) FROM gateway_object_checks)",
        )
        .fetch_one(self.pool())
        .await
    }

    /// Which of `message_ids` intake has recorded.
    async fn try_recorded_message_ids(&self, message_ids: &[String]) -> sqlx::Result<Vec<String>> {
        sqlx::query_scalar("SELECT message_id FROM processed_messages WHERE message_id = ANY($1)")
            .bind(message_ids)
            .fetch_all(self.pool())
            .await
    }

    /// How many dedupe rows name an attempt that is not recorded.
    async fn orphan_dedupe_rows(&self) -> i64 {
        self.scalar(
            "SELECT count(*) FROM processed_messages p
             WHERE NOT EXISTS (SELECT 1 FROM payment_attempts a
                               WHERE a.payment_attempt_id = p.payment_attempt_id)",
        )
        .await
    }

    /// The webhook events whose PaymentIntent is still to be read again (`gateway_object_checks`).
    async fn gateway_object_check_events(&self) -> Vec<String> {
        sqlx::query_scalar("SELECT webhook_event_id FROM gateway_object_checks")
            .fetch_all(self.pool())
            .await
            .expect("read gateway_object_checks")
    }

    // Raw access, for what belongs to one test alone.

    /// The database's `now()`, the clock every lease, due time and key window is measured on.
    async fn db_now(&self) -> OffsetDateTime {
        sqlx::query_scalar("SELECT now()")
            .fetch_one(self.pool())
            .await
            .unwrap()
    }

    // Refunds.

    /// One refund's row.
    async fn refund(&self, id: impl Into<Uuid>) -> RefundRow {
        self.find_refund(id).await.expect("the refund exists")
    }

    /// One refund's row, when intake has recorded it.
    async fn find_refund(&self, id: impl Into<Uuid>) -> Option<RefundRow> {
        sqlx::query_as(&format!(
            "SELECT {REFUND_COLUMNS} FROM refunds WHERE refund_id = $1"
        ))
        .bind(id.into())
        .fetch_optional(self.pool())
        .await
        .expect("refunds")
    }

    /// Every refund of one attempt, oldest first.
    async fn refunds_of(&self, id: impl Into<PaymentAttemptId>) -> Vec<RefundRow> {
        sqlx::query_as(&format!(
            "SELECT {REFUND_COLUMNS} FROM refunds WHERE payment_attempt_id = $1
             ORDER BY created_at, refund_id"
        ))
        .bind(id.into())
        .fetch_all(self.pool())
        .await
        .expect("refunds")
    }

    /// What one refund's command asked, as recorded.
    async fn refund_command(&self, id: impl Into<Uuid>) -> RefundCommandRow {
        sqlx::query_as(
            "SELECT requested_minor, reason, metadata, first_message_id
             FROM refunds WHERE refund_id = $1",
        )
        .bind(id.into())
        .fetch_one(self.pool())
        .await
        .expect("the refund exists")
    }

    /// Every refund recorded, any attempt's.
    async fn refund_count(&self) -> i64 {
        self.scalar("SELECT count(*) FROM refunds").await
    }

    /// Rewrites columns of one refund directly (set-up of a state no test drives the
    /// refund worker to), like [`Records::set_attempt`].
    async fn set_refund(&self, id: impl Into<Uuid>, set: &str) {
        sqlx::query(&format!("UPDATE refunds SET {set} WHERE refund_id = $1"))
            .bind(id.into())
            .execute(self.pool())
            .await
            .unwrap_or_else(|e| panic!("SET {set}: {e}"));
    }

    /// Every refund, oldest first (the soak's verdict reads them all at once).
    async fn all_refunds(&self) -> Vec<RefundRow> {
        sqlx::query_as(&format!(
            "SELECT {REFUND_COLUMNS} FROM refunds ORDER BY created_at, refund_id"
        ))
        .fetch_all(self.pool())
        .await
        .expect("refunds")
    }

    /// Refunds recorded, and of them those not settled yet: neither final nor in review.
    async fn refund_counts(&self) -> (i64, i64) {
        sqlx::query_as(
            "SELECT count(*),
                    count(*) FILTER (WHERE status NOT IN ('succeeded', 'failed', 'refused',
                                                          'needs_review'))
             FROM refunds",
        )
        .fetch_one(self.pool())
        .await
        .expect("refund counts")
    }

    /// Every charge's `refund_totals` row.
    async fn refund_totals(&self) -> Vec<RefundTotal> {
        sqlx::query_as(
            "SELECT payment_attempt_id, charged_minor, reserved_minor FROM refund_totals",
        )
        .fetch_all(self.pool())
        .await
        .expect("refund totals")
    }

    /// What the charge has promised back: `refund_totals.reserved_minor` (0 when none).
    async fn reserved(&self, id: impl Into<PaymentAttemptId>) -> i64 {
        sqlx::query_scalar(
            "SELECT COALESCE((SELECT reserved_minor FROM refund_totals
                              WHERE payment_attempt_id = $1), 0)",
        )
        .bind(id.into())
        .fetch_one(self.pool())
        .await
        .expect("reserved")
    }

    /// A refund's path through its states (`refund_transitions`).
    async fn refund_path(&self, id: impl Into<Uuid>) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT to_status FROM refund_transitions WHERE refund_id = $1 ORDER BY id",
        )
        .bind(id.into())
        .fetch_all(self.pool())
        .await
        .expect("refund transitions")
    }

    /// The outbox's rows about refunds of one attempt (events and dead letters), oldest first.
    async fn refund_outbox(&self, id: impl Into<PaymentAttemptId>) -> Vec<Event> {
        sqlx::query_as(
            "SELECT event_id, payment_attempt_id, status, subject, headers, payload, created_at,
                    published_at, publish_attempts
             FROM outbox WHERE payment_attempt_id = $1 AND status LIKE 'refund%'
             ORDER BY created_at, event_id",
        )
        .bind(id.into())
        .fetch_all(self.pool())
        .await
        .expect("refund outbox")
    }

    /// The outbox's rows about every refund (events and dead letters), oldest first.
    async fn all_refund_outbox(&self) -> Vec<Event> {
        sqlx::query_as(
            "SELECT event_id, payment_attempt_id, status, subject, headers, payload, created_at,
                    published_at, publish_attempts
             FROM outbox WHERE status LIKE 'refund%'
             ORDER BY created_at, event_id",
        )
        .fetch_all(self.pool())
        .await
        .expect("refund outbox")
    }

    /// A scalar from the test database.
    async fn scalar(&self, sql: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(self.pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs `sql` (one or more statements) on the test database: set-up that moves state
    /// directly, or breaks the schema on purpose.
    async fn exec(&self, sql: &str) {
        sqlx::raw_sql(sql)
            .execute(self.pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

impl Records for PgPool {
    fn pool(&self) -> &PgPool {
        self
    }
}

impl Records for Store {
    fn pool(&self) -> &PgPool {
        Store::pool(self)
    }
}

impl Records for Harness {
    fn pool(&self) -> &PgPool {
        self.store.pool()
    }
}

impl Records for TestEnv {
    fn pool(&self) -> &PgPool {
        self.store.pool()
    }
}
