//! The audit trail's SQL (`operator_audit`): one row per manual action — who, through what,
//! what, on which attempts, why, and what came of it.
//!
//! [`insert`] takes a connection, not the pool, so that the action's own transaction writes
//! its row: an action that is a database write and its audit row commit or roll back
//! together.

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::Actor;
use crate::domain::PaymentAttemptId;
use crate::store::Store;

/// Through what a person acted: the command line, the admin API or the console. Stored as
/// text in `operator_audit.via` (its CHECK constraint lists the same values) and decoded
/// straight into this type.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    serde::Deserialize,
    sqlx::Type,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum Via {
    Cli,
    Api,
    Console,
}

impl Via {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cli => "cli",
            Self::Api => "api",
            Self::Console => "console",
        }
    }
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a person did. Stored as text in `operator_audit.action` and decoded straight into
/// this type, so the trail is read as the actions this code writes, not as strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum AuditAction {
    /// `attempts resolve --as succeeded`.
    ResolveSucceeded,
    /// `attempts resolve --as declined`.
    ResolveDeclined,
    /// `attempts resolve --as retry`: sent again with the same key.
    ResolveRetry,
    /// `attempts recheck`: the reconciler's lookup for one attempt, now.
    Recheck,
    /// `dlq replay`.
    DlqReplay,
    /// `dlq discard`: a dead letter set aside, with the person's reason.
    DlqDiscard,
    /// `dlq bulk-replay`: every dead letter a filter matched, replayed.
    DlqBulkReplay,
    /// A retry of every `needs_review` attempt a filter matched.
    BulkRetry,
    /// A recheck of every attempt a filter matched.
    BulkRecheck,
    /// `findings resolve`: a reconciliation finding closed with what was done.
    ResolveFinding,
    /// `attempts cancel`: a pending attempt never sent, cancelled (`expired`).
    Cancel,
    /// `fleet pause`: no executor claims a new attempt until resumed.
    FleetPause,
    /// `fleet resume`.
    FleetResume,
    /// `refunds create`: a person's refund of a charge, published as a RefundPayment.
    Refund,
    /// `refunds resolve`: a person's settlement of a refund in review (or of one the
    /// gateway failed after it succeeded), checked against the gateway first.
    ResolveRefund,
}

impl AuditAction {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ResolveSucceeded => "resolve_succeeded",
            Self::ResolveDeclined => "resolve_declined",
            Self::ResolveRetry => "resolve_retry",
            Self::Recheck => "recheck",
            Self::DlqReplay => "dlq_replay",
            Self::DlqDiscard => "dlq_discard",
            Self::DlqBulkReplay => "dlq_bulk_replay",
            Self::BulkRetry => "bulk_retry",
            Self::BulkRecheck => "bulk_recheck",
            Self::ResolveFinding => "resolve_finding",
            Self::Cancel => "cancel",
            Self::FleetPause => "fleet_pause",
            Self::FleetResume => "fleet_resume",
            Self::Refund => "refund",
            Self::ResolveRefund => "resolve_refund",
        }
    }
}

impl std::fmt::Display for AuditAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row to write.
#[derive(Debug, Clone)]
pub struct NewAuditEntry {
    /// `operator:<name>`, `admin-api`, …
    pub actor: Actor,
    pub via: Via,
    pub action: AuditAction,
    pub payment_attempt_ids: Vec<PaymentAttemptId>,
    /// The dead letter's sequence, for a replay.
    pub dlq_sequence: Option<u64>,
    /// The person's words, when the action takes them.
    pub reason: Option<String>,
    /// One word a script can branch on: `applied`, `published`, `settled`, `unchanged`, …
    pub outcome: &'static str,
    /// What was found and done, for the person reading the trail.
    pub detail: serde_json::Value,
}

/// One stored row, as `audit list` and `GET /api/audit` show it.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct AuditEntry {
    pub id: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub actor: String,
    pub via: Via,
    pub action: AuditAction,
    #[schema(value_type = Vec<uuid::Uuid>)]
    pub payment_attempt_ids: Vec<PaymentAttemptId>,
    pub dlq_sequence: Option<i64>,
    pub reason: Option<String>,
    pub outcome: String,
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

/// Writes `entry` on `conn` (the action's transaction, when the action is a write); returns
/// the row's id.
pub async fn insert(conn: &mut PgConnection, entry: &NewAuditEntry) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO operator_audit
             (actor, via, action, payment_attempt_ids, dlq_sequence, reason, outcome, detail)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         RETURNING id",
    )
    .bind(crate::domain::bounded(&entry.actor.to_string(), 255))
    .bind(entry.via)
    .bind(entry.action)
    .bind(&entry.payment_attempt_ids)
    .bind(
        entry
            .dlq_sequence
            .map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
    )
    .bind(
        entry
            .reason
            .as_deref()
            .map(|r| crate::domain::bounded(r, 2048)),
    )
    .bind(entry.outcome)
    .bind(&entry.detail)
    .fetch_one(conn)
    .await
}

/// [`insert`] in a transaction of its own: for an action that is not a database write (a
/// replay, after the broker acknowledged it).
pub async fn insert_alone(store: &Store, entry: &NewAuditEntry) -> Result<i64, sqlx::Error> {
    let mut conn = store.pool().acquire().await?;
    insert(&mut conn, entry).await
}

/// What `audit list` narrows the trail to; `None` does not narrow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub payment_attempt_id: Option<PaymentAttemptId>,
    /// Only rows older than this id (the previous page's cursor).
    pub before_id: Option<i64>,
}

/// Rows matching `filter`, newest first, at most `limit` (`None`: all).
pub async fn list(
    store: &Store,
    filter: &AuditFilter,
    limit: Option<i64>,
) -> Result<Vec<AuditEntry>, sqlx::Error> {
    let mut query = sqlx::QueryBuilder::<sqlx::Postgres>::new(
        "SELECT id, at, actor, via, action, payment_attempt_ids, dlq_sequence, reason, outcome,
                detail
         FROM operator_audit WHERE true",
    );
    if let Some(actor) = &filter.actor {
        query.push(" AND actor = ").push_bind(actor.clone());
    }
    if let Some(id) = filter.payment_attempt_id {
        query
            .push(" AND payment_attempt_ids @> ARRAY[")
            .push_bind(Uuid::from(id))
            .push("]::uuid[]");
    }
    if let Some(before) = filter.before_id {
        query.push(" AND id < ").push_bind(before);
    }
    query.push(" ORDER BY id DESC LIMIT ").push_bind(limit);
    query.build_query_as().fetch_all(store.pool()).await
}
