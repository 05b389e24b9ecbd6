//! What a person reads of refunds (issue 37): a refund as an operator sees it, the listing
//! and its filters, one refund's history (its transitions, its gateway calls, its events),
//! what a charge has refunded and has left, and the counts behind the refund gauges.
//!
//! Nothing here writes: every move of a refund is `crate::store::refunds`'. The listing's filters
//! enter the SQL only when set, each served by an index of `refunds` (decision
//! 54's rule for attempts); an order or a customer is found through the refund's attempt.

use std::collections::BTreeMap;

use serde::Serialize;
use sqlx::postgres::PgRow;
use sqlx::Row as _;
use time::OffsetDateTime;

use crate::domain::{
    Currency, GatewayChargeId, IdempotencyKey, Money, PaymentAttemptId, RefundId, RefundStatus,
};
use crate::store::reads::attempts::{gateway_call_from_row, CallRecord, OutboxEvent, Transition};
use crate::store::reads::cursor::RefundCursor;
use crate::store::Store;

/// One refund as an operator sees it: the stored row, and the order and customer of its
/// attempt (absent while the attempt is not recorded). Serialised as is into `--json`
/// output and the admin API.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StoredRefund {
    #[schema(value_type = uuid::Uuid)]
    pub refund_id: RefundId,
    /// The charge it refunds.
    #[schema(value_type = uuid::Uuid)]
    pub payment_attempt_id: PaymentAttemptId,
    /// `waiting`, `pending`, `in_flight`, `processing`, `unknown`, `succeeded`, `failed`,
    /// `refused` or `needs_review` (contract §4.1).
    #[serde(serialize_with = "status_text")]
    #[schema(value_type = String)]
    pub status: RefundStatus,
    /// As the command asked; `null` asked for whatever is left of the charge.
    pub requested_minor: Option<i64>,
    /// Fixed when the refund is admitted (what the gateway is asked to refund); `null`
    /// while it waits, and for a refund refused before it was admitted.
    pub amount_minor: Option<i64>,
    #[schema(value_type = Option<String>)]
    pub currency: Option<Currency>,
    pub reason: String,
    #[schema(value_type = Object)]
    pub metadata: BTreeMap<String, String>,
    /// The key every try sends: `onecharge-refund-<refund_id>`.
    #[schema(value_type = String)]
    pub idempotency_key: IdempotencyKey,
    /// The charge being refunded, as the gateway names it.
    #[schema(value_type = Option<String>)]
    pub gateway_charge_id: Option<GatewayChargeId>,
    /// The gateway's refund, once it made one.
    pub gateway_refund_id: Option<String>,
    /// Why it failed, or why onecharge refused it (set when `failed` or `refused`).
    pub failure_reason: Option<String>,
    /// Why it needs a person (set while `needs_review`).
    pub review_reason: Option<String>,
    /// The last thing that went wrong on the way (a retry's or a lookup's reason).
    pub last_error: Option<String>,
    pub tries: i32,
    pub lookups: i32,
    /// When the refund worker next looks at it (admits, sends or looks it up).
    #[serde(with = "time::serde::rfc3339")]
    pub next_run_at: OffsetDateTime,
    pub lease_owner: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub lease_expires_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub first_sent_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_sent_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub requested_at: Option<OffsetDateTime>,
    /// The `Nats-Msg-Id` of the command that recorded it.
    pub first_message_id: String,
    pub correlation_id: Option<String>,
    /// Its attempt's order and customer; `null` while the attempt is not recorded.
    pub order_id: Option<String>,
    pub customer_id: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// When it reached `succeeded`, `failed` or `refused`.
    #[serde(with = "time::serde::rfc3339::option")]
    pub settled_at: Option<OffsetDateTime>,
}

impl StoredRefund {
    /// What it refunds, once admitted.
    pub fn money(&self) -> Option<Money> {
        Some(Money::new(self.amount_minor?, self.currency?))
    }
}

fn status_text<S: serde::Serializer>(status: &RefundStatus, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(status.as_str())
}

/// The columns of a [`StoredRefund`]: the refund on the alias `r`, its attempt on `a`.
const REFUND_SELECT: &str = "
    SELECT r.refund_id, r.payment_attempt_id, r.status, r.requested_minor, r.amount_minor,
           r.currency, r.reason, r.metadata, r.idempotency_key, r.gateway_charge_id,
           r.gateway_refund_id, r.failure_reason, r.review_reason, r.last_error, r.tries,
           r.lookups, r.next_run_at, r.lease_owner, r.lease_expires_at, r.first_sent_at,
           r.last_sent_at, r.requested_at, r.first_message_id, r.correlation_id,
           a.order_id, a.customer_id, r.created_at, r.updated_at, r.settled_at
    FROM refunds r
    LEFT JOIN payment_attempts a ON a.payment_attempt_id = r.payment_attempt_id";

impl sqlx::FromRow<'_, PgRow> for StoredRefund {
    fn from_row(row: &PgRow) -> Result<Self, sqlx::Error> {
        let metadata: Option<sqlx::types::Json<BTreeMap<String, String>>> =
            row.try_get("metadata")?;
        Ok(Self {
            refund_id: row.try_get("refund_id")?,
            payment_attempt_id: row.try_get("payment_attempt_id")?,
            status: row.try_get("status")?,
            requested_minor: row.try_get("requested_minor")?,
            amount_minor: row.try_get("amount_minor")?,
            currency: row.try_get("currency")?,
            reason: row.try_get("reason")?,
            metadata: metadata.map(|m| m.0).unwrap_or_default(),
            idempotency_key: row.try_get("idempotency_key")?,
            gateway_charge_id: row.try_get("gateway_charge_id")?,
            gateway_refund_id: row.try_get("gateway_refund_id")?,
            failure_reason: row.try_get("failure_reason")?,
            review_reason: row.try_get("review_reason")?,
            last_error: row.try_get("last_error")?,
            tries: row.try_get("tries")?,
            lookups: row.try_get("lookups")?,
            next_run_at: row.try_get("next_run_at")?,
            lease_owner: row.try_get("lease_owner")?,
            lease_expires_at: row.try_get("lease_expires_at")?,
            first_sent_at: row.try_get("first_sent_at")?,
            last_sent_at: row.try_get("last_sent_at")?,
            requested_at: row.try_get("requested_at")?,
            first_message_id: row.try_get("first_message_id")?,
            correlation_id: row.try_get("correlation_id")?,
            order_id: row.try_get("order_id")?,
            customer_id: row.try_get("customer_id")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
            settled_at: row.try_get("settled_at")?,
        })
    }
}

/// What `refunds list`, `GET /api/refunds` and the console's refunds page narrow the list
/// to; a field left `None` does not narrow it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefundFilter {
    pub payment_attempt_id: Option<PaymentAttemptId>,
    pub status: Option<RefundStatus>,
    /// The refunds of this order's attempts.
    pub order_id: Option<String>,
    /// The refunds of this customer's attempts.
    pub customer_id: Option<String>,
    /// Only refunds recorded at or after this.
    pub created_after: Option<OffsetDateTime>,
    /// Only refunds recorded before this.
    pub created_before: Option<OffsetDateTime>,
    /// Only refunds after this cursor in the listing's order (the next page).
    pub before: Option<RefundCursor>,
}

impl RefundCursor {
    /// The cursor of the page that ends with `refund`.
    pub fn after(refund: &StoredRefund) -> Self {
        Self {
            created_at: refund.created_at,
            id: refund.refund_id,
        }
    }
}

/// Refunds matching `filter`, newest first (after `filter.before`); `limit` `None` means all.
pub async fn list_refunds(
    store: &Store,
    filter: &RefundFilter,
    limit: Option<i64>,
) -> Result<Vec<StoredRefund>, sqlx::Error> {
    let mut query = sqlx::QueryBuilder::<sqlx::Postgres>::new(REFUND_SELECT);
    query.push(" WHERE true");
    if let Some(id) = filter.payment_attempt_id {
        query.push(" AND r.payment_attempt_id = ").push_bind(id);
    }
    if let Some(status) = filter.status {
        query.push(" AND r.status = ").push_bind(status.as_str());
    }
    // An order's or a customer's attempts are found in `attempt_search`'s indexes
    // (decision 214), their refunds by `refunds_attempt_idx`.
    let searches = [
        ("order_id", filter.order_id.as_ref()),
        ("customer_id", filter.customer_id.as_ref()),
    ];
    for (column, value) in searches {
        if let Some(value) = value {
            query
                .push(format_args!(
                    " AND r.payment_attempt_id IN (SELECT s.payment_attempt_id \
                     FROM attempt_search s WHERE s.{column} = "
                ))
                .push_bind(value.clone())
                .push(")");
        }
    }
    if let Some(after) = filter.created_after {
        query.push(" AND r.created_at >= ").push_bind(after);
    }
    if let Some(before) = filter.created_before {
        query.push(" AND r.created_at < ").push_bind(before);
    }
    if let Some(cursor) = filter.before {
        query
            .push(" AND (r.created_at, r.refund_id) < (")
            .push_bind(cursor.created_at)
            .push(", ")
            .push_bind(cursor.id)
            .push(")");
    }
    query
        .push(" ORDER BY r.created_at DESC, r.refund_id DESC LIMIT ")
        .push_bind(limit);
    query.build_query_as().fetch_all(store.pool()).await
}

/// One refund, or `None` when none has this id.
pub async fn get_refund(
    store: &Store,
    refund_id: RefundId,
) -> Result<Option<StoredRefund>, sqlx::Error> {
    sqlx::query_as(&format!("{REFUND_SELECT} WHERE r.refund_id = $1"))
        .bind(refund_id)
        .fetch_optional(store.pool())
        .await
}

/// Every refund of one attempt, oldest first.
pub async fn refunds_of_attempt(
    store: &Store,
    payment_attempt_id: PaymentAttemptId,
) -> Result<Vec<StoredRefund>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{REFUND_SELECT} WHERE r.payment_attempt_id = $1 ORDER BY r.created_at, r.refund_id"
    ))
    .bind(payment_attempt_id)
    .fetch_all(store.pool())
    .await
}

/// One refund's moves, in the order they happened.
pub async fn refund_transitions(
    store: &Store,
    refund_id: RefundId,
) -> Result<Vec<Transition>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, from_status, to_status, cause, actor, detail, at
         FROM refund_transitions WHERE refund_id = $1 ORDER BY id",
    )
    .bind(refund_id)
    .fetch_all(store.pool())
    .await
}

/// The moves of every refund of one attempt, in the order they happened, each with its
/// refund: the refunds' part of the attempt's timeline.
pub async fn refund_transitions_of_attempt(
    store: &Store,
    payment_attempt_id: PaymentAttemptId,
) -> Result<Vec<(RefundId, Transition)>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT refund_id, id, from_status, to_status, cause, actor, detail, at
         FROM refund_transitions WHERE payment_attempt_id = $1 ORDER BY id",
    )
    .bind(payment_attempt_id)
    .fetch_all(store.pool())
    .await?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get("refund_id")?,
                <Transition as sqlx::FromRow<PgRow>>::from_row(row)?,
            ))
        })
        .collect()
}

/// One refund's gateway calls (recorded under its attempt, sent under its own key), in
/// the order they were made.
pub async fn refund_gateway_calls(
    store: &Store,
    refund: &StoredRefund,
) -> Result<Vec<CallRecord>, sqlx::Error> {
    sqlx::query(
        "SELECT id, operation, idempotency_key, try_number, lease_token, started_at,
                finished_at, http_status, outcome, gateway_charge_id, error
         FROM gateway_call_records
         WHERE payment_attempt_id = $1 AND idempotency_key = $2
           AND operation IN ('refund', 'refund_lookup')
         ORDER BY id",
    )
    .bind(refund.payment_attempt_id)
    .bind(refund.idempotency_key.as_str())
    .fetch_all(store.pool())
    .await?
    .iter()
    .map(|row| gateway_call_from_row(row, ""))
    .collect::<Result<Vec<_>, _>>()
    .map(|calls| calls.into_iter().flatten().collect())
}

/// One refund's events and dead letter in the outbox (stored under its attempt), oldest
/// first: those of its attempt's events ([`crate::store::reads::attempts::events`]) that are a refund's
/// and name this refund.
pub async fn refund_events(
    store: &Store,
    refund: &StoredRefund,
) -> Result<Vec<OutboxEvent>, sqlx::Error> {
    let refund_id = refund.refund_id.to_string();
    let events = crate::store::reads::attempts::events(store, refund.payment_attempt_id).await?;
    Ok(events
        .into_iter()
        .filter(|event| {
            matches!(
                event.status.as_str(),
                "refund_succeeded" | "refund_failed" | "refund_dead_letter"
            ) && event.payload.get("refund_id").and_then(|id| id.as_str())
                == Some(refund_id.as_str())
        })
        .collect())
}

/// What an attempt's refunds have taken of its charge, as the database holds it now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefundTotals {
    /// Held against the charge (`refund_totals.reserved_minor`): every refund from its
    /// admission until it fails, the succeeded ones included.
    pub reserved_minor: i64,
    /// Of that, refunded for good (`succeeded`).
    pub refunded_minor: i64,
    /// Refunds recorded and not admitted yet (`waiting`): they reserve nothing yet.
    pub waiting: i64,
    /// What the waiting ones ask, those that name an amount.
    pub waiting_minor: i64,
    /// Whether a waiting one asks for whatever is left.
    pub waiting_for_the_rest: bool,
}

/// The refund totals of one attempt (all zero when it has no refund).
pub async fn refund_totals(
    store: &Store,
    payment_attempt_id: PaymentAttemptId,
) -> Result<RefundTotals, sqlx::Error> {
    let row = sqlx::query(
        "SELECT COALESCE((SELECT reserved_minor FROM refund_totals
                          WHERE payment_attempt_id = $1), 0) AS reserved_minor,
                COALESCE(sum(amount_minor) FILTER (WHERE status = 'succeeded'), 0)::bigint
                    AS refunded_minor,
                count(*) FILTER (WHERE status = 'waiting') AS waiting,
                COALESCE(sum(requested_minor) FILTER (WHERE status = 'waiting'), 0)::bigint
                    AS waiting_minor,
                COALESCE(bool_or(status = 'waiting' AND requested_minor IS NULL), false)
                    AS waiting_for_the_rest
         FROM refunds WHERE payment_attempt_id = $1",
    )
    .bind(payment_attempt_id)
    .fetch_one(store.pool())
    .await?;
    Ok(RefundTotals {
        reserved_minor: row.try_get("reserved_minor")?,
        refunded_minor: row.try_get("refunded_minor")?,
        waiting: row.try_get("waiting")?,
        waiting_minor: row.try_get("waiting_minor")?,
        waiting_for_the_rest: row.try_get("waiting_for_the_rest")?,
    })
}

/// The refunds not settled yet, per status, with the `created_at` of the oldest: the
/// refund gauges. Only the unsettled states are counted (through the status index, so the
/// read stays as small as they are); how many refunds settled is the counter
/// `onecharge_refunds_settled_total`'s, never a scan of every refund ever made.
pub async fn unsettled_refunds(
    store: &Store,
) -> Result<Vec<(RefundStatus, i64, OffsetDateTime)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT status, count(*), min(created_at) FROM refunds
         WHERE status IN ('waiting', 'pending', 'in_flight', 'processing', 'unknown',
                          'needs_review')
         GROUP BY status",
    )
    .fetch_all(store.pool())
    .await
}
