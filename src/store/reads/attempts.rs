//! The operator's SQL: reading attempts with their history (list, stuck, show, the counts),
//! and, re-exported from [`crate::store::attempts::resolve`], the one write an operator makes: resolving a
//! `needs_review` attempt.

use serde::Serialize;
use sqlx::postgres::PgRow;
use sqlx::Row as _;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::{
    AttemptStatus, GatewayChargeId, IdempotencyKey, LeaseToken, Money, PaymentAttemptId,
};
pub use crate::store::attempts::resolve::{
    claim_for_decision, resolve_attempt, DecisionClaim, OperatorDecision, ResolveOutcome,
    ResolveTarget,
};
use crate::store::reads::cursor::AttemptCursor;
use crate::store::Store;

/// One payment attempt as an operator sees it: the stored row plus its latest gateway call.
/// Serialised as is into `--json` output and the admin API (contract §5). Read from a row of
/// `ATTEMPT_SELECT` through [`AttemptRow`].
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct AttemptRecord {
    #[schema(value_type = uuid::Uuid)]
    pub payment_attempt_id: PaymentAttemptId,
    pub status: AttemptStatus,
    pub order_id: String,
    pub customer_id: String,
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub money: Money,
    pub payment_method: String,
    pub description: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub requested_at: Option<OffsetDateTime>,
    /// The key every gateway try sends; what to search for in the gateway's dashboard.
    #[schema(value_type = String)]
    pub idempotency_key: IdempotencyKey,
    pub tries: i32,
    #[serde(with = "time::serde::rfc3339")]
    pub next_run_at: OffsetDateTime,
    pub lease_owner: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub lease_expires_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub dispatched_at: Option<OffsetDateTime>,
    /// The gateway's key retention is counted from here.
    #[serde(with = "time::serde::rfc3339::option")]
    pub first_dispatched_at: Option<OffsetDateTime>,
    pub reconcile_checks: i32,
    #[schema(value_type = Option<String>)]
    pub gateway_charge_id: Option<GatewayChargeId>,
    pub decline_code: Option<String>,
    pub last_error: Option<String>,
    /// Why the attempt needs a person (set while `needs_review`).
    pub review_reason: Option<String>,
    /// The `Nats-Msg-Id` of the command that created the attempt.
    pub first_message_id: String,
    pub correlation_id: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// The most recent call to the gateway (charge or lookup), if any was made; read from
    /// the `g_` columns by [`AttemptRow`].
    #[sqlx(skip)]
    pub last_gateway_call: Option<CallRecord>,
}

/// One recorded call to the gateway (`gateway_call_records`: a row of `gateway_calls`, or
/// carried by the move it caused, decision 221): the evidence of what onecharge asked
/// and what it was told.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CallRecord {
    pub id: i64,
    /// `charge`, `lookup`, `prepare`, `cancel`, `list`; a refund's `refund` or
    /// `refund_lookup`.
    pub operation: String,
    /// The key the call was sent under: the attempt's (`onecharge-<id>`, or one derived
    /// from it), or for a refund's call the refund's (`onecharge-refund-<refund_id>`).
    #[schema(value_type = String)]
    pub idempotency_key: IdempotencyKey,
    pub try_number: i32,
    #[schema(value_type = Option<i64>)]
    pub lease_token: Option<LeaseToken>,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
    pub duration_ms: i64,
    /// `None` when no HTTP answer came (timeout, connection refused or dropped).
    pub http_status: Option<i32>,
    /// The classified outcome (`succeeded`, `ambiguous`, `not_found`, …).
    pub outcome: String,
    #[schema(value_type = Option<String>)]
    pub gateway_charge_id: Option<GatewayChargeId>,
    pub error: Option<String>,
}

/// One recorded state change (`attempt_history`: an accepted attempt's creation, read
/// from its row, then its `attempt_transitions`, a flight's claim listed from the row of
/// the move that ended it, and an open claim from the attempt's row).
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Transition {
    /// In the order the moves were made; 0 for an attempt's creation that its own row
    /// records (decision 219); a claim's is the id it took when it was made, whether the
    /// attempt's row, the row of the move that ended its flight or a row of its own records
    /// it (decision 220).
    pub id: i64,
    /// `None` for the attempt's creation.
    pub from_status: Option<String>,
    pub to_status: String,
    pub cause: String,
    pub actor: String,
    pub detail: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// One event of the attempt in the outbox, published or not.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct OutboxEvent {
    pub event_id: Uuid,
    pub status: String,
    pub subject: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// `None` while the relay has not published it yet.
    #[serde(with = "time::serde::rfc3339::option")]
    pub published_at: Option<OffsetDateTime>,
    pub publish_attempts: i32,
    pub last_error: Option<String>,
    /// The event's body (contract §2.3)
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
}

/// The attempt columns of `payment_attempts a` plus its latest gateway call (`LEFT JOIN
/// LATERAL`) from `$from`, so that every attempt query returns the same shape.
macro_rules! attempt_select {
    ($from:literal) => {
        concat!(
            "SELECT a.payment_attempt_id, a.status, a.order_id, a.customer_id, a.amount_minor,
                    a.currency, a.payment_method, a.description, a.requested_at,
                    a.idempotency_key, a.tries, a.next_run_at, a.lease_owner,
                    a.lease_expires_at, a.dispatched_at, a.first_dispatched_at,
                    a.reconcile_checks, a.gateway_charge_id, a.decline_code, a.last_error,
                    a.review_reason, a.first_message_id, a.correlation_id, a.created_at,
                    a.updated_at,
                    g.id AS g_id, g.operation AS g_operation, g.try_number AS g_try_number,
                    g.idempotency_key AS g_idempotency_key,
                    g.lease_token AS g_lease_token, g.started_at AS g_started_at,
                    g.finished_at AS g_finished_at, g.http_status AS g_http_status,
                    g.outcome AS g_outcome, g.gateway_charge_id AS g_gateway_charge_id,
                    g.error AS g_error
             FROM ",
            $from,
            "
             LEFT JOIN LATERAL (
                 SELECT * FROM gateway_call_records c
                 WHERE c.payment_attempt_id = a.payment_attempt_id
                 ORDER BY c.id DESC
                 LIMIT 1
             ) g ON true"
        )
    };
}

/// Attempts read from `payment_attempts` itself: by id, by state, the stuck list.
const ATTEMPT_SELECT: &str = attempt_select!("payment_attempts a");

/// Attempts found by their time, order or customer in `attempt_search s`, whose indexes
/// take one entry per attempt (decision 214), each then read by its key.
const SEARCH_SELECT: &str =
    attempt_select!("attempt_search s JOIN payment_attempts a USING (payment_attempt_id)");

/// What `attempts list` and `GET /api/attempts` narrow the list to; a field left `None`
/// does not narrow it. Each filter is answered from its own index — time, order and
/// customer from `attempt_search`'s (decision 214), a state from its own (decision 215), a
/// charge id and a key from `payment_attempts`' — and so is the paging cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttemptFilter {
    pub status: Option<AttemptStatus>,
    pub order_id: Option<String>,
    pub customer_id: Option<String>,
    pub gateway_charge_id: Option<GatewayChargeId>,
    pub idempotency_key: Option<String>,
    /// Only attempts recorded at or after this.
    pub created_after: Option<OffsetDateTime>,
    /// Only attempts recorded before this.
    pub created_before: Option<OffsetDateTime>,
    /// Only attempts after this cursor in the listing's order (the next page).
    pub before: Option<AttemptCursor>,
}

impl AttemptCursor {
    /// `query` with this cursor's (`created_at`, id) bound as its next two parameters, when
    /// there is a cursor: a page after (or before) it, written as its own statement.
    pub(in crate::store) fn bind_to<'q, O>(
        cursor: Option<Self>,
        query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        match cursor {
            Some(cursor) => query.bind(cursor.created_at).bind(cursor.id),
            None => query,
        }
    }

    /// The cursor of the page that ends with `attempt`.
    pub fn after(attempt: &AttemptRecord) -> Self {
        Self {
            created_at: attempt.created_at,
            id: attempt.payment_attempt_id,
        }
    }
}

/// Attempts matching `filter`, newest first (after `filter.before`); `limit` `None` means
/// all.
///
/// Only the filters that are set appear in the statement: a generic plan of `($n IS NULL OR
/// column = $n)` could not use the indexes and would scan every attempt.
pub async fn list_attempts(
    store: &Store,
    filter: &AttemptFilter,
    limit: Option<i64>,
) -> Result<Vec<AttemptRecord>, sqlx::Error> {
    let (mut query, by) = matching(filter, false);
    query
        .push(format_args!(
            " ORDER BY {by}.created_at DESC, {by}.payment_attempt_id DESC LIMIT "
        ))
        .push_bind(limit);
    query
        .build_query_as()
        .fetch_all(store.pool())
        .await
        .map(AttemptRow::records)
}

/// The attempts among `ids` that match `filter` now, newest first: a bulk confirmation acts
/// on the set its preview showed, less the attempts that stopped matching since, and never
/// on one that began to match after it (issue 23).
pub async fn list_attempts_among(
    store: &Store,
    filter: &AttemptFilter,
    ids: &[PaymentAttemptId],
) -> Result<Vec<AttemptRecord>, sqlx::Error> {
    let (mut query, by) = matching(filter, true);
    query
        .push(" AND a.payment_attempt_id = ANY(")
        .push_bind(ids.to_vec())
        .push(format_args!(
            ") ORDER BY {by}.created_at DESC, {by}.payment_attempt_id DESC"
        ));
    query
        .build_query_as()
        .fetch_all(store.pool())
        .await
        .map(AttemptRow::records)
}

/// The attempts `filter` matches, unordered: `SELECT … WHERE …` with only the filters set,
/// and the alias (`s` or `a`) whose `created_at` and id the listing is ordered and paged by.
/// `among_ids`: the caller narrows the statement to a list of attempt ids.
///
/// The time, order and customer of an attempt are searched in `attempt_search` (`s`), whose
/// indexes take one entry per attempt, not one per version (decision 214); each attempt
/// found is then read by its key. The attempts that something narrower finds are read from
/// `payment_attempts` (`a`) alone, which holds the same three columns: by charge id, by key
/// or among ids (an attempt or a few, by their own indexes), and by a state that is not an
/// outcome (its own index's entries, sorted: bounded by the attempts in that state).
fn matching(
    filter: &AttemptFilter,
    among_ids: bool,
) -> (sqlx::QueryBuilder<'_, sqlx::Postgres>, &'static str) {
    let few = filter.gateway_charge_id.is_some() || filter.idempotency_key.is_some() || among_ids;
    let searched = filter.order_id.is_some() || filter.customer_id.is_some();
    let by_state = filter.status.is_some_and(has_a_state_index);
    let (select, by) = if few || (by_state && !searched) {
        (ATTEMPT_SELECT, "a")
    } else {
        (SEARCH_SELECT, "s")
    };
    let conditions = [
        (
            "a.status".to_owned(),
            filter.status.map(AttemptStatus::as_str),
        ),
        (format!("{by}.order_id"), filter.order_id.as_deref()),
        (format!("{by}.customer_id"), filter.customer_id.as_deref()),
        (
            "a.gateway_charge_id".to_owned(),
            filter.gateway_charge_id.as_deref(),
        ),
    ];
    let mut query = sqlx::QueryBuilder::<sqlx::Postgres>::new(select);
    query.push(" WHERE true");
    let set = conditions
        .into_iter()
        .filter_map(|(column, value)| value.map(|value| (column, value)));
    for (column, value) in set {
        query
            .push(" AND ")
            .push(column)
            .push(" = ")
            .push_bind(value);
    }
    // A key is the attempt id's (`onecharge-<id>`, held by a CHECK), so it is looked up by
    // the primary key: payment_attempts keeps no index on it (decision 122). Text that is
    // not such a key matches no attempt.
    if let Some(key) = filter.idempotency_key.as_deref() {
        match IdempotencyKey::attempt_of(key) {
            Some(id) => query.push(" AND a.payment_attempt_id = ").push_bind(id),
            None => query.push(" AND false"),
        };
    }
    if let Some(after) = filter.created_after {
        query
            .push(format_args!(" AND {by}.created_at >= "))
            .push_bind(after);
    }
    if let Some(before) = filter.created_before {
        query
            .push(format_args!(" AND {by}.created_at < "))
            .push_bind(before);
    }
    if let Some(cursor) = filter.before {
        query
            .push(format_args!(
                " AND ({by}.created_at, {by}.payment_attempt_id) < ("
            ))
            .push_bind(cursor.created_at)
            .push(", ")
            .push_bind(cursor.id)
            .push(")");
    }
    (query, by)
}

/// Whether an index of `payment_attempts` holds exactly the attempts in `status`, so that a
/// search by it reads those entries only: `pending` and `unknown` (their due indexes),
/// `in_flight` (the lease index), `needs_review` and `expired`
/// (`payment_attempts_review_expired_created_idx`, decision 215). Not the two outcomes,
/// which hold nearly every attempt.
fn has_a_state_index(status: AttemptStatus) -> bool {
    !matches!(status, AttemptStatus::Succeeded | AttemptStatus::Declined)
}

/// Attempts that should have settled by now: every non-final attempt recorded at or before
/// `created_before`, and every `needs_review` attempt whatever its age; oldest first by
/// (`created_at`, id), after `after` (the last attempt of the previous page), at most `limit`
/// (`None`: all). `status` narrows the result to one state.
pub async fn stuck_attempts(
    store: &Store,
    created_before: OffsetDateTime,
    status: Option<AttemptStatus>,
    after: Option<AttemptCursor>,
    limit: Option<i64>,
) -> Result<Vec<AttemptRecord>, sqlx::Error> {
    // Listing the non-final states (rather than excluding the final ones) lets the planner
    // read each state's own index instead of scanning every settled attempt: the due
    // indexes of `pending` and `unknown`, the lease index of `in_flight` and the index of
    // `needs_review` (decisions 173, 215) — one arm per state, so that the planner ORs the
    // four indexes (an `IN` list would imply no index's predicate, and scan the table). A
    // page after a cursor is its own statement (not `$4 IS NULL OR …`, whose generic plan
    // could not use it), and `created_at >= $4` beside the row comparison is what starts
    // the review index's scan at the cursor, as `store::console::review_page` does.
    //
    // Ordered by `created_at + interval '0 seconds'` (the same order) rather than the bare
    // column, so that no index provides the order: stuck attempts cluster among the newest,
    // which the planner cannot know, and for a small `LIMIT` it would walk a time index
    // from the oldest attempt past every settled one (10 rows read 450,000 and took 122 ms
    // at 2 million attempts). Now the plan reads only the stuck entries of those indexes
    // and keeps the page with a top-N sort: bounded by the stuck attempts, never by the
    // table.
    let after_cursor = if after.is_some() {
        "AND a.created_at >= $4 AND (a.created_at, a.payment_attempt_id) > ($4, $5)"
    } else {
        ""
    };
    let sql = format!(
        "{ATTEMPT_SELECT}
         WHERE (a.status = 'pending' OR a.status = 'unknown' OR a.status = 'in_flight'
                OR a.status = 'needs_review')
           AND (a.status = 'needs_review' OR a.created_at <= $1)
           AND ($2::text IS NULL OR a.status = $2)
           {after_cursor}
         ORDER BY a.created_at + interval '0 seconds', a.payment_attempt_id
         LIMIT $3"
    );
    let query = sqlx::query_as(&sql)
        .bind(created_before)
        .bind(status.map(AttemptStatus::as_str))
        .bind(limit);
    AttemptCursor::bind_to(after, query)
        .fetch_all(store.pool())
        .await
        .map(AttemptRow::records)
}

/// One attempt, or `None` when no attempt has this id.
pub async fn get_attempt(
    store: &Store,
    id: PaymentAttemptId,
) -> Result<Option<AttemptRecord>, sqlx::Error> {
    let sql = format!("{ATTEMPT_SELECT} WHERE a.payment_attempt_id = $1");
    let row: Option<AttemptRow> = sqlx::query_as(&sql)
        .bind(id)
        .fetch_optional(store.pool())
        .await?;
    Ok(row.map(|AttemptRow(attempt)| attempt))
}

/// The attempt's transitions, in the order they happened.
pub async fn transitions(
    store: &Store,
    id: PaymentAttemptId,
) -> Result<Vec<Transition>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, from_status, to_status, cause, actor, detail, at
         FROM attempt_history WHERE payment_attempt_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(store.pool())
    .await
}

/// The attempt's gateway calls, in the order they were made.
pub async fn gateway_calls(
    store: &Store,
    id: PaymentAttemptId,
) -> Result<Vec<CallRecord>, sqlx::Error> {
    sqlx::query(
        "SELECT id, operation, idempotency_key, try_number, lease_token, started_at,
                finished_at, http_status, outcome, gateway_charge_id, error
         FROM gateway_call_records WHERE payment_attempt_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(store.pool())
    .await?
    .into_iter()
    .map(|row| gateway_call_from_row(&row, ""))
    .collect::<Result<Vec<_>, _>>()
    .map(|calls| calls.into_iter().flatten().collect())
}

/// The statement of [`events`], public for its plan's test: `$1` is the attempt id.
pub const ATTEMPT_EVENTS: &str =
    "SELECT o.event_id, o.status, o.subject, o.created_at, o.published_at,
                o.publish_attempts, o.last_error, o.payload
         FROM (SELECT event_id, NULL::timestamptz AS created_at
               FROM outbox_final_states WHERE payment_attempt_id = $1
               UNION ALL
               SELECT event_id, created_at
               FROM outbox_attempt_events WHERE payment_attempt_id = $1) e
         CROSS JOIN LATERAL (
             SELECT * FROM outbox o
             WHERE o.event_id = e.event_id
               AND (e.created_at IS NULL OR o.created_at = e.created_at)
             OFFSET 0
         ) o
         WHERE o.payment_attempt_id = $1
         ORDER BY o.created_at, o.event_id";

/// The attempt's outbox events, oldest first: its final state's from
/// `outbox_final_states`, the others from `outbox_attempt_events` (decision 216), each read
/// by the outbox's key (the final state's by its event id in every month). No index of the
/// outbox holds the attempt id.
pub async fn events(store: &Store, id: PaymentAttemptId) -> Result<Vec<OutboxEvent>, sqlx::Error> {
    sqlx::query_as(ATTEMPT_EVENTS)
        .bind(id)
        .fetch_all(store.pool())
        .await
}

/// A row of `ATTEMPT_SELECT`: the attempt's columns ([`AttemptRecord`]'s `FromRow`) and its
/// latest call's, `g_`-prefixed (outer-joined, so a call of its own can be absent).
struct AttemptRow(AttemptRecord);

impl AttemptRow {
    fn records(rows: Vec<Self>) -> Vec<AttemptRecord> {
        rows.into_iter().map(|Self(attempt)| attempt).collect()
    }
}

impl sqlx::FromRow<'_, PgRow> for AttemptRow {
    fn from_row(row: &PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self(AttemptRecord {
            last_gateway_call: gateway_call_from_row(row, "g_")?,
            ..AttemptRecord::from_row(row)?
        }))
    }
}

/// A gateway call from columns named `<prefix>id`, `<prefix>operation`, …; `None` when the
/// (outer-joined) id is NULL.
pub(in crate::store) fn gateway_call_from_row(
    row: &PgRow,
    prefix: &str,
) -> Result<Option<CallRecord>, sqlx::Error> {
    let column = |name: &str| format!("{prefix}{name}");
    let Some(id) = row.try_get::<Option<i64>, _>(column("id").as_str())? else {
        return Ok(None);
    };
    let started_at: OffsetDateTime = row.try_get(column("started_at").as_str())?;
    let finished_at: OffsetDateTime = row.try_get(column("finished_at").as_str())?;
    Ok(Some(CallRecord {
        id,
        operation: row.try_get(column("operation").as_str())?,
        idempotency_key: row.try_get(column("idempotency_key").as_str())?,
        try_number: row.try_get(column("try_number").as_str())?,
        lease_token: row.try_get(column("lease_token").as_str())?,
        started_at,
        finished_at,
        duration_ms: (finished_at - started_at).whole_milliseconds() as i64,
        http_status: row.try_get(column("http_status").as_str())?,
        outcome: row.try_get(column("outcome").as_str())?,
        gateway_charge_id: row.try_get(column("gateway_charge_id").as_str())?,
        error: row.try_get(column("error").as_str())?,
    }))
}

/// How many attempts are in each state that has any, ordered by status: what the overview,
/// `GET /api/stats`, `attempts stats`, the `onecharge_attempts` gauge and the demo show.
/// Exact, from the counts the database keeps (`store::attempts::counts`) instead of a scan of
/// every attempt. Folding first (one short transaction) keeps the deltas to the last few
/// seconds' writes, so the read stays small whichever roles a deployment runs.
pub async fn count_by_status(store: &Store) -> Result<Vec<(String, i64)>, sqlx::Error> {
    crate::store::attempts::counts::fold(store).await?;
    crate::store::attempts::counts::read(store).await
}

/// Outbox events the relay has not published yet, found through the relay's queue (every
/// unpublished event is in it, decision 171) rather than a scan of the outbox.
pub async fn unpublished_events(store: &Store) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*)
         FROM outbox_unpublished q
         CROSS JOIN LATERAL unnest(q.event_ids, q.created_ats) AS e(event_id, created_at)
         JOIN outbox o ON o.event_id = e.event_id AND o.created_at = e.created_at
         WHERE o.published_at IS NULL",
    )
    .fetch_one(store.pool())
    .await
}

/// Every published event as (event id, status).
pub async fn published_event_ids(store: &Store) -> Result<Vec<(Uuid, String)>, sqlx::Error> {
    sqlx::query_as("SELECT event_id, status FROM outbox WHERE published_at IS NOT NULL")
        .fetch_all(store.pool())
        .await
}
