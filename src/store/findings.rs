//! Reconciliation findings (`reconciliation_findings`): what the sweep or a webhook found
//! wrong between the ledger and the gateway, for a person. Deduplicated by a key (class,
//! attempt or reference, gateway ids), so a discrepancy seen by every sweep is one row
//! whose `last_seen_at` moves; resolved with a reason and audited in the same transaction.

use serde::Serialize;
use time::OffsetDateTime;

use super::audit::NewAuditEntry;
use super::Store;
use crate::domain::PaymentAttemptId;

/// The kinds of discrepancy (docs/contract.md §5, `findings list`). Stored and serialised
/// as its snake_case name.
#[derive(Serialize, serde::Deserialize, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FindingClass {
    /// Money taken at the gateway for an attempt onecharge holds as declined or expired
    /// (or one never sent under this key): a person refunds or corrects.
    ChargedNotRecorded,
    /// More than one charge holding money names one attempt.
    ChargedTwice,
    /// A succeeded attempt whose charge is missing, failed, cancelled, refunded or disputed
    /// at the gateway.
    RecordedNotCharged,
    /// A charge for the attempt whose amount, currency or customer differ from it.
    Mismatch,
    /// A charge carrying onecharge's metadata for an attempt id onecharge does not know.
    UnknownReference,
}

impl FindingClass {
    pub const ALL: [FindingClass; 5] = [
        Self::ChargedNotRecorded,
        Self::ChargedTwice,
        Self::RecordedNotCharged,
        Self::Mismatch,
        Self::UnknownReference,
    ];

    /// The stored spelling (and the metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ChargedNotRecorded => "charged_not_recorded",
            Self::ChargedTwice => "charged_twice",
            Self::RecordedNotCharged => "recorded_not_charged",
            Self::Mismatch => "mismatch",
            Self::UnknownReference => "unknown_reference",
        }
    }
}

impl std::fmt::Display for FindingClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What saw a finding first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, sqlx::Type)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum FindingSource {
    Sweep,
    Webhook,
}

/// A finding to record (or, when its key is known, to see again): also what a stored
/// [`Finding`] says, besides its bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct NewFinding {
    pub class: FindingClass,
    pub payment_attempt_id: Option<PaymentAttemptId>,
    /// The attempt id the gateway's record names, as written there.
    pub reference: Option<String>,
    /// Sorted, so that one discrepancy always has one key.
    pub gateway_ids: Vec<String>,
    pub attempt_status: Option<String>,
    pub attempt_amount_minor: Option<i64>,
    pub attempt_currency: Option<String>,
    pub gateway_amount_minor: Option<i64>,
    pub gateway_currency: Option<String>,
    pub detail: String,
}

impl NewFinding {
    /// The deduplication key: the class, what it is about, and the gateway's ids.
    pub fn dedupe_key(&self) -> String {
        let subject = match (&self.payment_attempt_id, &self.reference) {
            (Some(id), _) => id.to_string(),
            (None, Some(reference)) => reference.clone(),
            (None, None) => String::new(),
        };
        format!("{}:{subject}:{}", self.class, self.gateway_ids.join(","))
    }
}

/// A stored finding, as `findings list|show` and `GET /api/findings` show it: what was
/// found (its fields flattened into the JSON, and read through `Deref`), where it came
/// from, and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
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

const COLUMNS: &str = "id, class, payment_attempt_id, reference, gateway_ids, attempt_status, \
     attempt_amount_minor, attempt_currency, gateway_amount_minor, gateway_currency, detail, \
     source, first_seen_at, last_seen_at, seen_count, state, resolved_at, resolved_by, resolution";

/// Records `finding`, or, when one with its key exists (open or resolved), marks it seen
/// again. Returns whether it is new. One statement: two sweeps at once cannot both insert.
pub async fn record(
    conn: &mut sqlx::PgConnection,
    finding: &NewFinding,
    source: FindingSource,
) -> Result<bool, sqlx::Error> {
    let inserted: bool = sqlx::query_scalar(
        "INSERT INTO reconciliation_findings
             (class, dedupe_key, payment_attempt_id, reference, gateway_ids, attempt_status,
              attempt_amount_minor, attempt_currency, gateway_amount_minor, gateway_currency,
              detail, source)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         ON CONFLICT ON CONSTRAINT reconciliation_findings_dedupe DO UPDATE SET
             last_seen_at = now(),
             seen_count = reconciliation_findings.seen_count + 1
         RETURNING xmax = 0",
    )
    .bind(finding.class)
    .bind(finding.dedupe_key())
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
    .fetch_one(conn)
    .await?;
    Ok(inserted)
}

/// Which findings to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
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
pub enum Resolved {
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
    actor: &str,
    reason: &str,
    audit: impl FnOnce(&Finding) -> NewAuditEntry,
) -> Result<Resolved, sqlx::Error> {
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
            Some(finding) => Resolved::AlreadyResolved(finding),
            None => Resolved::NotFound,
        });
    };
    super::audit::insert(&mut tx, &audit(&finding)).await?;
    tx.commit().await?;
    Ok(Resolved::Done(finding))
}

/// Open findings per class, for `onecharge_reconciliation_findings_open{class}`.
pub async fn count_open(store: &Store) -> Result<Vec<(FindingClass, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT class, count(*) AS n FROM reconciliation_findings WHERE state = 'open' GROUP BY class",
    )
    .fetch_all(store.pool())
    .await
}
