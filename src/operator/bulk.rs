//! Bulk actions (`attempts bulk-retry | bulk-recheck`, `POST /api/attempts/bulk`): one
//! decision applied to every attempt a filter matches — retry every `needs_review` attempt
//! of an incident, or recheck every `unknown` one after a gateway outage.
//!
//! A preview acts on nothing and says how many attempts match and which (every one, up to
//! the cap). A confirmation that passes the previewed `ids` back acts on those alone — the
//! ones that still match — never on an attempt that began to match after the preview (the
//! console always does; issue 23). A set larger than
//! [`BULK_CAP`] (or than the caller's own `max`) is refused whole, never cut: a person
//! narrows the filter instead of acting on an arbitrary first slice. Each attempt goes
//! through the single-attempt path (`resolve` with `as retry`, `recheck`), with its own
//! guard, transaction and audit row; one more audit row records the bulk action itself,
//! its filter and every attempt's outcome.

use crate::domain::GatewayChargeId;
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::attempts::{AttemptCursor, AttemptFilter};
use super::resolve::{self, ResolveAs, ResolveError, ResolveRequest};
use super::RetryWindow;
use crate::domain::{Actor, AttemptStatus, PaymentAttemptId};
use crate::reconciler::{RecheckOutcome, Reconciler};
use crate::store::audit::{self, AuditAction, NewAuditEntry, Via};
use crate::store::reads::attempts as sql;
use crate::store::Store;

/// The most attempts one bulk action touches. Larger sets are refused; narrow the filter
/// (by time, order, customer) and act in several steps.
pub const BULK_CAP: usize = 500;

/// How many of a preview's ids `attempts bulk-* --dry-run` prints.
pub const PREVIEW_IDS: usize = 20;

/// What to do to each matching attempt.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum BulkAction {
    /// `attempts resolve --as retry` for each `needs_review` attempt.
    Retry,
    /// `attempts recheck` for each `unknown` or `needs_review` attempt.
    Recheck,
}

/// Which attempts: the filters `attempts list` and the bulk actions share, as the CLI flags,
/// the API's query and its bulk filter name them (one type for all three, so a filter added
/// to one is a filter of each). Times are RFC 3339.
#[derive(Debug, Clone, Default, Deserialize, Serialize, clap::Args, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkFilter {
    /// Only attempts in this state (pending, in_flight, succeeded, declined, unknown,
    /// needs_review, expired)
    #[serde(default)]
    #[arg(long, value_parser = super::parse_status)]
    pub status: Option<AttemptStatus>,
    /// Only the attempts of this order
    #[serde(default)]
    #[arg(long, value_name = "ORDER_ID")]
    pub order_id: Option<String>,
    /// Only the attempts of this customer
    #[serde(default)]
    #[arg(long, value_name = "CUSTOMER_ID")]
    pub customer_id: Option<String>,
    /// Only the attempt the gateway recorded under this charge id
    #[serde(default)]
    #[arg(long, value_name = "CHARGE_ID")]
    #[schema(value_type = Option<String>)]
    pub gateway_charge_id: Option<GatewayChargeId>,
    /// Only the attempt with this idempotency key
    #[serde(default)]
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// Only attempts recorded at or after this time (RFC 3339)
    #[serde(default, with = "time::serde::rfc3339::option")]
    #[arg(long, value_name = "TIME", value_parser = super::parse_time)]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub created_after: Option<OffsetDateTime>,
    /// Only attempts recorded before this time (RFC 3339)
    #[serde(default, with = "time::serde::rfc3339::option")]
    #[arg(long, value_name = "TIME", value_parser = super::parse_time)]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub created_before: Option<OffsetDateTime>,
}

impl BulkFilter {
    /// The listing's filter matching the same attempts, from the page after `before`: the
    /// bulk filter is the listing's without its paging cursor.
    pub fn listing(self, before: Option<AttemptCursor>) -> AttemptFilter {
        AttemptFilter {
            status: self.status,
            order_id: self.order_id,
            customer_id: self.customer_id,
            gateway_charge_id: self.gateway_charge_id,
            idempotency_key: self.idempotency_key,
            created_after: self.created_after,
            created_before: self.created_before,
            before,
        }
    }
}

/// One bulk request as the CLI or the API received it (`POST /api/attempts/bulk`).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    pub action: BulkAction,
    #[serde(default)]
    pub filter: BulkFilter,
    pub reason: String,
    /// Count and list, act on nothing.
    #[serde(default)]
    pub preview: bool,
    /// Refuse when more than this many match (at most [`BULK_CAP`]): the caller's own
    /// expectation of the set's size, from a preview.
    #[serde(default)]
    pub max: Option<usize>,
    /// Act only on these attempts (a preview's `ids`), those of them the filter still
    /// matches: one that stopped matching is reported `refused` and left alone, and one that
    /// began to match after the preview is not acted on. `None`: every attempt the filter
    /// matches now.
    #[serde(default)]
    #[schema(value_type = Option<Vec<uuid::Uuid>>)]
    pub ids: Option<Vec<PaymentAttemptId>>,
}

/// What happened to one attempt.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BulkItem {
    #[schema(value_type = uuid::Uuid)]
    pub payment_attempt_id: PaymentAttemptId,
    /// `retried`, `settled`, `unchanged`, `fenced`, `refused`, `failed`.
    pub outcome: String,
    pub detail: String,
}

/// What a bulk request came to.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BulkOutcome {
    pub action: BulkAction,
    pub preview: bool,
    /// How many attempts the filter matched (among the request's `ids`, when given).
    pub matched: usize,
    /// Every matching id (a preview: pass them back as `ids` to act on exactly these), or
    /// every one acted on.
    #[schema(value_type = Vec<uuid::Uuid>)]
    pub ids: Vec<PaymentAttemptId>,
    /// Per attempt, when acted on.
    pub results: Vec<BulkItem>,
    /// The bulk action's own audit row, when acted on.
    pub audit_id: Option<i64>,
}

/// Why a bulk request was not carried out. `Invalid` and `TooMany` are the caller's to fix
/// (exit 2 / 400, 422); `Failed` exit 1 / 500 or 503.
#[derive(Debug, thiserror::Error)]
pub enum BulkError {
    #[error("{0}")]
    Invalid(String),
    #[error("{matched} attempts match, more than {limit} ({why}): narrow the filter (created_after/created_before, order_id, customer_id) and act in steps; nothing was done")]
    TooMany {
        /// At least this many (counting stops past the cap).
        matched: usize,
        limit: usize,
        why: &'static str,
    },
    #[error("{0}")]
    Unavailable(String),
    #[error("{0:#}")]
    Failed(#[from] anyhow::Error),
}

impl From<sqlx::Error> for BulkError {
    fn from(err: sqlx::Error) -> Self {
        Self::Failed(anyhow::Error::new(err).context("bulk action"))
    }
}

/// Carries out (or previews) `request` on behalf of `actor` through `via`. `reconciler` is
/// needed to recheck (it looks attempts up at the gateway); `None` refuses a recheck.
pub async fn bulk(
    store: &Store,
    reconciler: Option<&Reconciler>,
    request: &BulkRequest,
    actor: &Actor,
    via: Via,
    window: &RetryWindow,
) -> Result<BulkOutcome, BulkError> {
    let reason = checked_reason(request)?;
    let limit = Limit::of(request)?;
    let filter = narrowed(request.action, &request.filter)?;
    let ids = matching(store, request, &filter, &limit).await?;
    if request.preview {
        return Ok(BulkOutcome {
            action: request.action,
            preview: true,
            matched: ids.len(),
            ids,
            results: Vec::new(),
            audit_id: None,
        });
    }
    let mut results = stopped_matching(request, &ids);
    results.extend(match request.action {
        BulkAction::Retry => retry_each(store, &ids, reason, actor, via, window).await,
        BulkAction::Recheck => {
            let reconciler = reconciler.ok_or_else(|| {
                BulkError::Unavailable(
                    "this process has no gateway client (it runs neither the executor nor the reconciler): recheck from the command line or a process that does".into(),
                )
            })?;
            recheck_each(reconciler, &ids, reason, actor, via).await
        }
    });
    let audit_id = audit_bulk(store, request, &ids, &results, reason, actor, via).await?;
    Ok(BulkOutcome {
        action: request.action,
        preview: false,
        matched: ids.len(),
        ids,
        results,
        audit_id: Some(audit_id),
    })
}

/// The request's reason, trimmed: it must say something, and be recordable.
fn checked_reason(request: &BulkRequest) -> Result<&str, BulkError> {
    let reason = request.reason.trim();
    if reason.is_empty() {
        return Err(BulkError::Invalid(
            "reason must say why (it is recorded with every attempt acted on)".into(),
        ));
    }
    super::recordable("reason", reason).map_err(BulkError::Invalid)?;
    Ok(reason)
}

/// The most attempts this request may act on, and why that many.
struct Limit {
    most: usize,
    why: &'static str,
}

impl Limit {
    fn of(request: &BulkRequest) -> Result<Self, BulkError> {
        let (most, why) = match request.max {
            Some(0) => return Err(BulkError::Invalid("max must be at least 1".into())),
            Some(max) if max < BULK_CAP => (max, "the max you gave"),
            _ => (BULK_CAP, "the bulk cap"),
        };
        Ok(Self { most, why })
    }

    /// Refuses `matched` attempts when they are more than the limit.
    fn check(&self, matched: usize) -> Result<(), BulkError> {
        if matched > self.most {
            return Err(BulkError::TooMany {
                matched,
                limit: self.most,
                why: self.why,
            });
        }
        Ok(())
    }
}

/// The ids of the attempts `filter` matches (among the previewed `ids`, when given), or
/// the refusal of a set larger than `limit`.
async fn matching(
    store: &Store,
    request: &BulkRequest,
    filter: &AttemptFilter,
    limit: &Limit,
) -> Result<Vec<PaymentAttemptId>, BulkError> {
    let rows = match &request.ids {
        Some(previewed) => {
            limit.check(previewed.len())?;
            sql::list_attempts_among(store, filter, previewed).await?
        }
        // One more than the limit tells "too many" from "exactly the limit" without
        // counting the whole table.
        None => sql::list_attempts(store, filter, Some(limit.most as i64 + 1)).await?,
    };
    let ids: Vec<PaymentAttemptId> = rows.iter().map(|a| a.payment_attempt_id).collect();
    limit.check(ids.len())?;
    Ok(ids)
}

/// The previewed attempts that no longer match: refused, left alone.
fn stopped_matching(request: &BulkRequest, ids: &[PaymentAttemptId]) -> Vec<BulkItem> {
    let stopped = request.ids.iter().flatten().filter(|id| !ids.contains(id));
    stopped
        .map(|&id| BulkItem {
            payment_attempt_id: id,
            outcome: "refused".into(),
            detail: "no longer matches the filter (it changed since the preview): left alone"
                .into(),
        })
        .collect()
}

/// The bulk action's own audit row: its filter and every attempt's outcome.
async fn audit_bulk(
    store: &Store,
    request: &BulkRequest,
    ids: &[PaymentAttemptId],
    results: &[BulkItem],
    reason: &str,
    actor: &Actor,
    via: Via,
) -> Result<i64, BulkError> {
    let mut conn = store.pool().acquire().await?;
    let audit_id = audit::insert(
        &mut conn,
        &NewAuditEntry {
            actor: actor.to_owned(),
            via,
            action: match request.action {
                BulkAction::Retry => AuditAction::BulkRetry,
                BulkAction::Recheck => AuditAction::BulkRecheck,
            },
            payment_attempt_ids: ids.to_vec(),
            dlq_sequence: None,
            reason: Some(reason.to_owned()),
            outcome: "done",
            detail: serde_json::json!({"filter": request.filter, "results": results}),
        },
    )
    .await?;
    Ok(audit_id)
}

/// The filter the action applies: a retry only ever touches `needs_review` attempts, and a
/// recheck `unknown` or `needs_review` ones, named explicitly.
fn narrowed(action: BulkAction, filter: &BulkFilter) -> Result<AttemptFilter, BulkError> {
    let status = match (action, filter.status) {
        (BulkAction::Retry, None | Some(AttemptStatus::NeedsReview)) => AttemptStatus::NeedsReview,
        (BulkAction::Retry, Some(other)) => {
            return Err(BulkError::Invalid(format!(
                "retry applies to needs_review attempts only, not {other}"
            )))
        }
        (BulkAction::Recheck, Some(s @ (AttemptStatus::Unknown | AttemptStatus::NeedsReview))) => s,
        (BulkAction::Recheck, _) => {
            return Err(BulkError::Invalid(
                "recheck needs status unknown or needs_review (the states a lookup can settle)"
                    .into(),
            ))
        }
    };
    Ok(AttemptFilter {
        status: Some(status),
        ..filter.clone().listing(None)
    })
}

async fn retry_each(
    store: &Store,
    ids: &[PaymentAttemptId],
    reason: &str,
    actor: &Actor,
    via: Via,
    window: &RetryWindow,
) -> Vec<BulkItem> {
    let request = ResolveRequest {
        as_: ResolveAs::Retry,
        reason: reason.to_owned(),
        gateway_charge_id: None,
        decline_code: None,
    };
    let mut results = Vec::with_capacity(ids.len());
    for &id in ids {
        let (outcome, detail) =
            // A retry cancels nothing: no gateway client needed.
            match resolve::resolve(store, None, id, &request, actor, via, window).await {
                Ok(resolved) => ("retried", resolved.summary()),
                Err(err @ (ResolveError::Refused(_) | ResolveError::NotFound(_))) => {
                    ("refused", err.to_string())
                }
                Err(err) => ("failed", err.to_string()),
            };
        results.push(BulkItem {
            payment_attempt_id: id,
            outcome: outcome.into(),
            detail,
        });
    }
    results
}

/// Lookups in parallel, a few at a time: a gateway outage's backlog is rechecked in
/// seconds without a burst the gateway would rate-limit.
const RECHECK_CONCURRENCY: usize = 4;

async fn recheck_each(
    reconciler: &Reconciler,
    ids: &[PaymentAttemptId],
    reason: &str,
    actor: &Actor,
    via: Via,
) -> Vec<BulkItem> {
    futures::stream::iter(ids.iter().copied())
        .map(|id| async move {
            let (outcome, detail) = match reconciler.recheck(id, actor, via, Some(reason)).await {
                Ok(RecheckOutcome::Done(report)) => (
                    if report.after == report.before {
                        "unchanged"
                    } else {
                        "settled"
                    },
                    format!("{}; {}", report.found, report.did),
                ),
                Ok(RecheckOutcome::NotFound) => ("refused", format!("no payment attempt {id}")),
                Ok(RecheckOutcome::NoPermit(why)) => ("failed", why),
                Ok(RecheckOutcome::WrongState(status)) => {
                    ("refused", format!("now {status}: not rechecked"))
                }
                Err(err) => ("failed", format!("{err:#}")),
            };
            BulkItem {
                payment_attempt_id: id,
                outcome: outcome.into(),
                detail,
            }
        })
        .buffered(RECHECK_CONCURRENCY)
        .collect()
        .await
}
