//! The stream audit's SQL (`stream_audit_watermarks`, `intake_unrecorded_messages`): how far
//! the audit has walked the command stream, which stored messages intake recorded, and what
//! it found unrecorded (docs/operations.md §16).
//!
//! A pass runs in one transaction that holds its consumer's watermark row `FOR UPDATE SKIP
//! LOCKED`: the row is the lock that makes the `serve` processes audit one at a time, and the
//! findings and the new watermark commit together.

use std::collections::HashSet;

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::Actor;
use crate::store::{column, Store};

/// A message the command stream holds that intake never recorded nor dead-lettered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct UnrecordedMessage {
    /// The intake consumer that never recorded it: which kind of command it is (the
    /// refund consumer's name ends in `-refunds`).
    pub consumer: String,
    /// Its sequence in the command stream: what `intake audit --replay` takes.
    pub stream_sequence: i64,
    /// Its `Nats-Msg-Id`, when it has one.
    pub message_id: Option<String>,
    /// Read from the body when it has one.
    pub payment_attempt_id: Option<Uuid>,
    /// When JetStream stored it.
    #[serde(with = "time::serde::rfc3339")]
    pub stored_at: OffsetDateTime,
    /// When the audit found it unrecorded.
    #[serde(with = "time::serde::rfc3339")]
    pub found_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub replayed_at: Option<OffsetDateTime>,
    pub replayed_by: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub resolved_at: Option<OffsetDateTime>,
}

/// Every column of [`UnrecordedMessage`], for the readers below to narrow.
const SELECT_FINDINGS: &str =
    "SELECT consumer, stream_sequence, message_id, payment_attempt_id, stored_at,
        found_at, replayed_at, replayed_by, resolved_at
    FROM intake_unrecorded_messages";

/// What a pass found, before it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditFinding {
    pub stream_sequence: u64,
    pub message_id: Option<String>,
    pub payment_attempt_id: Option<Uuid>,
    pub stored_at: OffsetDateTime,
}

/// Makes `consumer`'s watermark row when it is missing, in a statement of its own. Made
/// inside a pass's transaction instead, the row would stay uncommitted for the whole pass,
/// and every other process's first pass would wait on it until its `lock_timeout` (seen in
/// the soak: "canceling statement due to lock timeout" when three `serve`s started at once).
pub async fn ensure_watermark(store: &Store, consumer: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO stream_audit_watermarks (consumer) VALUES ($1) ON CONFLICT DO NOTHING",
    )
    .bind(consumer)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// Takes the audit's lock for `consumer` for the rest of `tx` and returns the last sequence
/// judged (0 before the first pass); `None` when another pass holds the lock (or the row
/// is missing: [`ensure_watermark`] first).
pub async fn lock_watermark(
    tx: &mut PgConnection,
    consumer: &str,
) -> Result<Option<u64>, sqlx::Error> {
    let through: Option<i64> = sqlx::query_scalar(
        "SELECT checked_through FROM stream_audit_watermarks WHERE consumer = $1
         FOR UPDATE SKIP LOCKED",
    )
    .bind(consumer)
    .fetch_optional(tx)
    .await?;
    Ok(through.map(|s| s as u64))
}

/// Moves the watermark forward (never back) to `through`.
pub async fn advance_watermark(
    tx: &mut PgConnection,
    consumer: &str,
    through: u64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE stream_audit_watermarks
         SET checked_through = GREATEST(checked_through, $2), updated_at = now()
         WHERE consumer = $1",
    )
    .bind(consumer)
    .bind(through as i64)
    .execute(tx)
    .await?;
    Ok(())
}

/// The message ids among `message_ids` that `consumer` recorded (a dedupe row).
pub async fn recorded_message_ids(
    tx: &mut PgConnection,
    consumer: &str,
    message_ids: &[String],
) -> Result<HashSet<String>, sqlx::Error> {
    if message_ids.is_empty() {
        return Ok(HashSet::new());
    }
    let found: Vec<String> = sqlx::query_scalar(
        "SELECT message_id FROM processed_messages WHERE consumer = $1 AND message_id = ANY($2)",
    )
    .bind(consumer)
    .bind(message_ids)
    .fetch_all(tx)
    .await?;
    Ok(found.into_iter().collect())
}

/// Stores what a pass found; returns the sequences that were not known before (a finding
/// is reported once, however many passes see it).
pub async fn insert_findings(
    tx: &mut PgConnection,
    consumer: &str,
    findings: &[AuditFinding],
) -> Result<Vec<u64>, sqlx::Error> {
    if findings.is_empty() {
        return Ok(Vec::new());
    }
    let inserted: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO intake_unrecorded_messages
             (consumer, stream_sequence, message_id, payment_attempt_id, stored_at)
         SELECT $1, f.seq, f.message_id, f.attempt, f.stored_at
         FROM UNNEST($2::int8[], $3::text[], $4::uuid[], $5::timestamptz[])
             AS f(seq, message_id, attempt, stored_at)
         ON CONFLICT (consumer, stream_sequence) DO NOTHING
         RETURNING stream_sequence",
    )
    .bind(consumer)
    .bind(column(findings, |f| f.stream_sequence as i64))
    .bind(column(findings, |f| f.message_id.clone()))
    .bind(column(findings, |f| f.payment_attempt_id))
    .bind(column(findings, |f| f.stored_at))
    .fetch_all(tx)
    .await?;
    Ok(inserted.into_iter().map(|s| s as u64).collect())
}

/// Closes the open findings whose message id is recorded now (replayed through intake, or
/// delivered late); returns how many.
pub async fn resolve_recorded_findings(
    tx: &mut PgConnection,
    consumer: &str,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE intake_unrecorded_messages u SET resolved_at = now()
         WHERE u.consumer = $1 AND u.resolved_at IS NULL
           AND EXISTS (SELECT 1 FROM processed_messages p
                       WHERE p.consumer = u.consumer AND p.message_id = u.message_id)",
    )
    .bind(consumer)
    .execute(tx)
    .await?;
    Ok(done.rows_affected())
}

/// The open findings of `consumer`, oldest sequence first.
pub async fn open_findings(
    store: &Store,
    consumer: &str,
) -> Result<Vec<UnrecordedMessage>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{SELECT_FINDINGS} WHERE consumer = $1 AND resolved_at IS NULL ORDER BY stream_sequence"
    ))
    .bind(consumer)
    .fetch_all(store.pool())
    .await
}

/// How many findings of `consumer` are open (the gauge).
pub async fn count_open_findings(store: &Store, consumer: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM intake_unrecorded_messages WHERE consumer = $1 AND resolved_at IS NULL",
    )
    .bind(consumer)
    .fetch_one(store.pool())
    .await
}

/// The open finding at `stream_sequence`, if there is one.
pub async fn open_finding(
    store: &Store,
    consumer: &str,
    stream_sequence: u64,
) -> Result<Option<UnrecordedMessage>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{SELECT_FINDINGS} WHERE consumer = $1 AND stream_sequence = $2 AND resolved_at IS NULL"
    ))
    .bind(consumer)
    .bind(stream_sequence as i64)
    .fetch_optional(store.pool())
    .await
}

/// Records that `actor` replayed the finding; `resolve` closes it at once (a message with
/// no id can only be dead-lettered again, so nothing would ever close it otherwise).
pub async fn mark_replayed(
    store: &Store,
    consumer: &str,
    stream_sequence: u64,
    actor: &Actor,
    resolve: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE intake_unrecorded_messages
         SET replayed_at = now(), replayed_by = $3,
             resolved_at = CASE WHEN $4 THEN now() ELSE resolved_at END
         WHERE consumer = $1 AND stream_sequence = $2",
    )
    .bind(consumer)
    .bind(stream_sequence as i64)
    .bind(actor)
    .bind(resolve)
    .execute(store.pool())
    .await?;
    Ok(())
}
