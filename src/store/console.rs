//! The console's own SQL: its sessions (`console_sessions`), shared by every admin instance
//! on this database (see `crate::http::console::session` for what a session is and why it lives
//! here), and the review queue's pages.
//!
//! Invariants kept here:
//! - A session is found by the SHA-256 of its id; the id itself is never stored.
//! - Expiry is judged by the database's clock (`now()` in the statement), never a host's:
//!   an expired row is never returned, and is deleted when it is presented.
//! - The table is bounded: each sign-in keeps at most `keep_per_actor` sessions of its actor
//!   (the newest) and deletes up to `SWEEP_BATCH` expired rows of anyone. Sign-ins hold one
//!   transaction-level advisory lock, so two at once cannot deadlock trimming the same rows.

use std::time::Duration;

use time::OffsetDateTime;

use crate::domain::{Money, PaymentAttemptId};
use crate::store::reads::cursor::AttemptCursor;
use crate::store::Store;

/// Most expired rows one sign-in deletes, so that a sign-in after a long quiet spell stays a
/// short statement; the rest go with the next sign-ins.
const SWEEP_BATCH: i64 = 1_000;

/// What a live session row holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    /// Who signed in (`operator:<name>`, `admin-api` or `console`); the role is not stored.
    pub actor: String,
    /// The CSRF token of every POST form of the session.
    pub csrf: String,
    /// A labelled digest of the credential the session was signed in with
    /// (`Operators::session_principal`): the session is honoured only while it matches the
    /// configuration's.
    pub binding: [u8; 32],
}

/// Records a new session valid for `ttl` from the database's `now()`, deletes expired
/// sessions (at most [`SWEEP_BATCH`]) and `actor`'s sessions beyond its newest
/// `keep_per_actor`, in one transaction.
pub async fn start_session(
    store: &Store,
    id_sha256: &[u8; 32],
    session: &StoredSession,
    ttl: Duration,
    keep_per_actor: usize,
) -> Result<(), sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    // One sign-in at a time (per database): the trims below delete rows in no guaranteed
    // order, and two of them interleaved could deadlock each other.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('onecharge.console_sessions', 0))")
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "DELETE FROM console_sessions
         WHERE id_sha256 = ANY(ARRAY(
             SELECT id_sha256 FROM console_sessions
             WHERE expires_at <= now()
             ORDER BY expires_at
             LIMIT $1
         ))
           AND expires_at <= now()",
    )
    .bind(SWEEP_BATCH)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO console_sessions (id_sha256, actor, csrf, binding_sha256, expires_at)
         VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5::float8))",
    )
    .bind(&id_sha256[..])
    .bind(&session.actor)
    .bind(&session.csrf)
    .bind(&session.binding[..])
    .bind(ttl.as_secs_f64())
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "DELETE FROM console_sessions
         WHERE actor = $1
           AND id_sha256 = ANY(ARRAY(
               SELECT id_sha256 FROM console_sessions
               WHERE actor = $1
               ORDER BY created_at DESC, id_sha256
               OFFSET $2
           ))",
    )
    .bind(&session.actor)
    .bind(i64::try_from(keep_per_actor).unwrap_or(i64::MAX))
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// The live session whose id hashes to `id_sha256`; an expired one is deleted in the same
/// statement and reported as absent.
pub async fn live_session(
    store: &Store,
    id_sha256: &[u8; 32],
) -> Result<Option<StoredSession>, sqlx::Error> {
    let row: Option<(String, String, Vec<u8>)> = sqlx::query_as(
        "WITH expired AS (
             DELETE FROM console_sessions WHERE id_sha256 = $1 AND expires_at <= now()
         )
         SELECT actor, csrf, binding_sha256 FROM console_sessions
         WHERE id_sha256 = $1 AND expires_at > now()",
    )
    .bind(&id_sha256[..])
    .fetch_optional(store.pool())
    .await?;
    Ok(row.and_then(|(actor, csrf, binding)| {
        Some(StoredSession {
            actor,
            csrf,
            // 32 bytes by the table's CHECK; anything else is no session of ours
            binding: binding.try_into().ok()?,
        })
    }))
}

/// Deletes every session bound to none of `bindings` (those the configuration in force
/// lets sign in): an operator removed, or a token replaced, ends its sessions on every
/// instance as soon as one admin instance starts with the new configuration, presented or
/// not. Returns how many.
pub async fn end_sessions_bound_elsewhere(
    store: &Store,
    bindings: &[[u8; 32]],
) -> Result<u64, sqlx::Error> {
    let bindings: Vec<&[u8]> = bindings.iter().map(|b| &b[..]).collect();
    let deleted =
        sqlx::query("DELETE FROM console_sessions WHERE NOT (binding_sha256 = ANY($1::bytea[]))")
            .bind(&bindings)
            .execute(store.pool())
            .await?;
    Ok(deleted.rows_affected())
}

/// Deletes the session whose id hashes to `id_sha256` (sign out, or a principal that no
/// longer exists); says whether there was one.
pub async fn end_session(store: &Store, id_sha256: &[u8; 32]) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query("DELETE FROM console_sessions WHERE id_sha256 = $1")
        .bind(&id_sha256[..])
        .execute(store.pool())
        .await?;
    Ok(deleted.rows_affected() > 0)
}

/// What the review queue shows of an attempt in `needs_review`: enough to find it at the
/// gateway and open it; the attempt page has the rest.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ReviewEntry {
    pub payment_attempt_id: PaymentAttemptId,
    pub order_id: String,
    #[sqlx(flatten)]
    pub money: Money,
    pub review_reason: Option<String>,
    pub created_at: OffsetDateTime,
    /// When the attempt last changed: since then it has waited for a person.
    pub updated_at: OffsetDateTime,
}

impl ReviewEntry {
    /// The cursor of the page that ends with this entry.
    pub fn cursor(&self) -> AttemptCursor {
        AttemptCursor {
            created_at: self.created_at,
            id: self.payment_attempt_id,
        }
    }
}

/// At most `limit` attempts in `needs_review`, oldest first by (`created_at`, id), after
/// `after` (the last entry of the previous page). A keyset page: an attempt resolved between
/// two pages moves no other one across the boundary, so each is shown once.
pub async fn review_page(
    store: &Store,
    after: Option<AttemptCursor>,
    limit: usize,
) -> Result<Vec<ReviewEntry>, sqlx::Error> {
    // Two statements rather than `$1 IS NULL OR …`, whose generic plan could not start the
    // index scan at the cursor; `created_at >= $1` beside the row comparison is what lets
    // the (status, created_at) index start there.
    let after_cursor = if after.is_some() {
        "AND created_at >= $2 AND (created_at, payment_attempt_id) > ($2, $3)"
    } else {
        ""
    };
    let sql = format!(
        "SELECT payment_attempt_id, order_id, amount_minor, currency, review_reason,
                created_at, updated_at
         FROM payment_attempts
         WHERE status = 'needs_review' {after_cursor}
         ORDER BY created_at, payment_attempt_id
         LIMIT $1"
    );
    let query = sqlx::query_as(&sql).bind(i64::try_from(limit).unwrap_or(i64::MAX));
    AttemptCursor::bind_to(after, query)
        .fetch_all(store.pool())
        .await
}

/// Every attempt in `needs_review` (the queue's length, shown on each of its pages).
pub async fn count_in_review(store: &Store) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM payment_attempts WHERE status = 'needs_review'")
        .fetch_one(store.pool())
        .await
}

/// One reconciliation sweep as the console's sweeps page shows it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SweepRow {
    pub id: i64,
    pub window_from: OffsetDateTime,
    pub window_to: OffsetDateTime,
    pub actor: String,
    pub started_at: OffsetDateTime,
    pub finished_at: Option<OffsetDateTime>,
    pub heartbeat_at: Option<OffsetDateTime>,
    pub pages: i32,
    pub records_seen: i64,
    pub records: i64,
    pub records_skipped: i64,
    pub findings: i32,
    pub settled: i32,
    pub error: Option<String>,
}

/// The newest `limit` sweeps, newest first.
pub async fn recent_sweeps(store: &Store, limit: i64) -> Result<Vec<SweepRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, window_from, window_to, actor, started_at, finished_at, heartbeat_at, pages,
                records_seen, records, records_skipped, findings, settled, error
           FROM reconciliation_sweeps
          ORDER BY started_at DESC, id DESC
          LIMIT $1",
    )
    .bind(limit)
    .fetch_all(store.pool())
    .await
}

/// One accepted Stripe webhook event as the console's webhooks page shows it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct WebhookEventRow {
    pub event_id: String,
    pub event_type: String,
    pub payment_intent_id: Option<String>,
    pub payment_attempt_id: Option<uuid::Uuid>,
    pub outcome: String,
    pub received_at: OffsetDateTime,
}

/// The newest `limit` accepted webhook events (their ids are kept for the dedupe window),
/// newest first.
pub async fn recent_webhook_events(
    store: &Store,
    limit: i64,
) -> Result<Vec<WebhookEventRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT event_id, event_type, payment_intent_id, payment_attempt_id, outcome, received_at
           FROM stripe_webhook_events
          ORDER BY received_at DESC, event_id
          LIMIT $1",
    )
    .bind(limit)
    .fetch_all(store.pool())
    .await
}
