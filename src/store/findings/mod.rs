//! Reconciliation findings (`reconciliation_findings`): what the sweep or a webhook found
//! wrong between the ledger and the gateway, for a person (the types are the domain's,
//! `crate::domain::finding`). Deduplicated by a key of the finding's subject and evidence,
//! so a discrepancy seen by every sweep is one row whose `last_seen_at` moves, while new
//! evidence about the same charge is a new row, its event published in the same
//! transaction; resolved with a reason and audited in the same transaction.

pub mod stream_audit;
pub mod sweep;
pub mod webhooks;

use serde::Serialize;
use sqlx::Acquire as _;
use time::OffsetDateTime;
use uuid::Uuid;

pub use crate::domain::finding::{
    EarlierFinding, FindingClass, FindingEvent, FindingSource, NewFinding,
};
use crate::domain::Actor;
use crate::store::audit::NewAuditEntry;
use crate::store::Store;

/// A stored finding, as `findings list|show` and `GET /api/findings` show it: what was
/// found (its fields flattened into the JSON, and read through `Deref`), where it came
/// from, and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Finding {
    pub id: i64,
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub found: NewFinding,
    pub source: FindingSource,
    #[serde(with = "time::serde::rfc3339")]
    pub first_seen_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub last_seen_at: OffsetDateTime,
    pub seen_count: i32,
    pub state: String,
    #[serde(with = "time::serde::rfc3339::option")]
    pub resolved_at: Option<OffsetDateTime>,
    pub resolved_by: Option<String>,
    pub resolution: Option<String>,
}

impl std::ops::Deref for Finding {
    type Target = NewFinding;

    fn deref(&self) -> &NewFinding {
        &self.found
    }
}

const COLUMNS: &str = "id, class, payment_attempt_id, reference, gateway_ids, evidence, \
     attempt_status, attempt_amount_minor, attempt_currency, gateway_amount_minor, \
     gateway_currency, detail, source, first_seen_at, last_seen_at, seen_count, state, \
     resolved_at, resolved_by, resolution";

/// Records `finding`, or, when one with its key (subject and evidence) exists, open or
/// resolved, marks it seen again. A new finding's `payments.events.reconciliation-finding.v1`
/// event goes into the outbox in the same transaction (a savepoint inside the caller's),
/// naming the earlier findings about the same charge and the Stripe event that asked, if
/// one did (`stripe_event`, also the event's `Causation-Id`). Returns the new finding's id,
/// or `None` when it was seen before. One statement decides: two sweeps at once cannot
/// both insert.
pub async fn record(
    conn: &mut sqlx::PgConnection,
    finding: &NewFinding,
    source: FindingSource,
    stripe_event: Option<&str>,
) -> Result<Option<i64>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let (id, inserted, first_seen_at): (i64, bool, OffsetDateTime) = sqlx::query_as(
        "INSERT INTO reconciliation_findings
             (class, dedupe_key, subject_key, evidence, payment_attempt_id, reference, gateway_ids,
              attempt_status, attempt_amount_minor, attempt_currency, gateway_amount_minor,
              gateway_currency, detail, source)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
         ON CONFLICT ON CONSTRAINT reconciliation_findings_dedupe DO UPDATE SET
             last_seen_at = now(),
             seen_count = reconciliation_findings.seen_count + 1
         RETURNING id, xmax = 0, first_seen_at",
    )
    .bind(finding.class)
    .bind(finding.dedupe_key())
    .bind(finding.subject_key())
    .bind(crate::domain::bounded(&finding.evidence, 200))
    .bind(finding.payment_attempt_id)
    .bind(&finding.reference)
    .bind(&finding.gateway_ids)
    .bind(&finding.attempt_status)
    .bind(finding.attempt_amount_minor)
    .bind(&finding.attempt_currency)
    .bind(finding.gateway_amount_minor)
    .bind(&finding.gateway_currency)
    .bind(crate::domain::bounded(&finding.detail, 2000))
    .bind(source)
    .fetch_one(&mut *tx)
    .await?;
    if !inserted {
        tx.commit().await?;
        return Ok(None);
    }
    let event = FindingEvent {
        event_id: Uuid::new_v4(),
        finding_id: id,
        class: finding.class,
        payment_attempt_id: finding.payment_attempt_id,
        reference: finding.reference.clone(),
        gateway_ids: finding.gateway_ids.clone(),
        evidence: finding.evidence.clone(),
        detail: crate::domain::bounded(&finding.detail, 2000),
        source,
        stripe_event_id: stripe_event.map(str::to_owned),
        occurred_at: first_seen_at,
        earlier: earlier_in(&mut tx, &finding.subject_key(), id).await?,
    };
    sqlx::query(
        "INSERT INTO outbox (event_id, payment_attempt_id, status, subject, headers, payload, created_at)
         VALUES ($1, $2, 'finding', $3, $4, $5, $6)",
    )
    .bind(event.event_id)
    .bind(event.payment_attempt_id)
    .bind(FindingEvent::SUBJECT)
    .bind(match stripe_event {
        Some(cause) => serde_json::json!({"Nats-Msg-Id": event.event_id.to_string(), "Causation-Id": cause}),
        None => serde_json::json!({"Nats-Msg-Id": event.event_id.to_string()}),
    })
    .bind(serde_json::to_value(&event).expect("a finding event always serialises"))
    .bind(first_seen_at)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(id))
}

/// The findings about the same charge as `subject_key` recorded before finding `before`,
/// oldest first: a finding's history.
async fn earlier_in(
    conn: &mut sqlx::PgConnection,
    subject_key: &str,
    before: i64,
) -> Result<Vec<EarlierFinding>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id AS finding_id, evidence, state, first_seen_at, resolved_at, resolved_by, resolution
         FROM reconciliation_findings WHERE subject_key = $1 AND id < $2 ORDER BY id",
    )
    .bind(subject_key)
    .bind(before)
    .fetch_all(conn)
    .await
}

/// Every finding about the same charge as `finding`, but it, oldest first: what
/// `findings show`, `GET /api/findings/{id}` and the console's finding page list as its
/// history.
pub async fn history(store: &Store, finding: &Finding) -> Result<Vec<EarlierFinding>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id AS finding_id, evidence, state, first_seen_at, resolved_at, resolved_by, resolution
         FROM reconciliation_findings WHERE subject_key = $1 AND id <> $2 ORDER BY id",
    )
    .bind(finding.subject_key())
    .bind(finding.id)
    .fetch_all(store.pool())
    .await
}

/// Which findings to list.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Deserialize,
    clap::ValueEnum,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum FindingState {
    Open,
    Resolved,
    #[default]
    All,
}

/// Findings in `state`, newest first, at most `limit`.
pub async fn list(
    store: &Store,
    state: FindingState,
    limit: i64,
) -> Result<Vec<Finding>, sqlx::Error> {
    let state = match state {
        FindingState::Open => Some("open"),
        FindingState::Resolved => Some("resolved"),
        FindingState::All => None,
    };
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM reconciliation_findings
         WHERE ($1::text IS NULL OR state = $1)
         ORDER BY id DESC LIMIT $2"
    ))
    .bind(state)
    .bind(limit)
    .fetch_all(store.pool())
    .await
}

pub async fn get(store: &Store, id: i64) -> Result<Option<Finding>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM reconciliation_findings WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(store.pool())
    .await
}

/// What a resolution came to.
#[derive(Debug, Clone, PartialEq)]
pub enum FindingResolved {
    Done(Finding),
    NotFound,
    /// Resolved before (by whom, when): nothing changed.
    AlreadyResolved(Finding),
}

/// Resolves an open finding by `actor` for `reason`; the change and its audit row (built by
/// `audit` from the result) commit together. Resolving a resolved finding changes nothing
/// and writes no audit row.
pub async fn resolve(
    store: &Store,
    id: i64,
    actor: &Actor,
    reason: &str,
    audit: impl FnOnce(&Finding) -> NewAuditEntry,
) -> Result<FindingResolved, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let resolved: Option<Finding> = sqlx::query_as(&format!(
        "UPDATE reconciliation_findings SET
             state = 'resolved', resolved_at = now(), resolved_by = $2, resolution = $3
         WHERE id = $1 AND state = 'open'
         RETURNING {COLUMNS}"
    ))
    .bind(id)
    .bind(actor)
    .bind(reason)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(finding) = resolved else {
        tx.rollback().await?;
        return Ok(match get(store, id).await? {
            Some(finding) => FindingResolved::AlreadyResolved(finding),
            None => FindingResolved::NotFound,
        });
    };
    crate::store::audit::insert(&mut tx, &audit(&finding)).await?;
    tx.commit().await?;
    Ok(FindingResolved::Done(finding))
}

/// Open findings per class, for `onecharge_reconciliation_findings_open{class}`.
pub async fn count_open(store: &Store) -> Result<Vec<(FindingClass, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT class, count(*) AS n FROM reconciliation_findings WHERE state = 'open' GROUP BY class",
    )
    .fetch_all(store.pool())
    .await
}
