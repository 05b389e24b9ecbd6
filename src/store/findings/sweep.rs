//! The reconciliation sweep's SQL: a row per sweep, the gateway's records it read (a page
//! at a time, into `reconciliation_sweep_records`, so that the comparison walks a table and
//! the process holds one page), the attempts those records name, the succeeded attempts
//! they do not, and the schedule `serve` claims so a fleet sweeps once per interval.

use crate::domain::GatewayChargeId;
use sqlx::{FromRow as _, Row as _};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::listing::{ListWindow, ListedCharge, ListedStatus};
use crate::domain::{
    Actor, AttemptStatus, GatewayObjectId, IdempotencyKey, Money, PaymentAttemptId,
};
use crate::store::Store;

/// How long a running sweep may go without a heartbeat (one per page read, and one per
/// batch compared) before a new sweep takes its instance for dead and ends its row as
/// abandoned. Far longer than a page or a batch takes, retries and rate-limit waits
/// included. A sweep that was only stalled finds out at its next heartbeat, which fences it.
pub const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// Why a sweep could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A sweep of an overlapping window is running (the database's exclusion constraint).
    #[error(
        "a sweep of an overlapping window ({from} .. {to}) is running: sweep {id} by {actor}, started {started_at}; \
         two sweeps never read one window at once"
    )]
    Overlapping {
        id: i64,
        actor: String,
        started_at: OffsetDateTime,
        from: OffsetDateTime,
        to: OffsetDateTime,
    },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Starts a sweep of `window` by `actor`: first ends, as abandoned, every sweep whose
/// instance has not been heard from for [`ABANDONED_AFTER`] and removes the records of
/// ended sweeps (never a running one's, however long it has run), then inserts its row,
/// which the database refuses while a sweep of an overlapping window runs. Returns the
/// sweep's id.
pub async fn start(store: &Store, window: ListWindow, actor: &Actor) -> Result<i64, StartError> {
    sqlx::query(
        "UPDATE reconciliation_sweeps SET finished_at = now(),
             error = 'abandoned: no heartbeat since '
                     || onecharge_rfc3339(coalesce(heartbeat_at, started_at))
                     || '; its instance stopped mid-run, and the next sweep reads the window again'
         WHERE finished_at IS NULL
           AND coalesce(heartbeat_at, started_at) < now() - make_interval(secs => $1)",
    )
    .bind(ABANDONED_AFTER.as_secs_f64())
    .execute(store.pool())
    .await?;
    sqlx::query(
        "DELETE FROM reconciliation_sweep_records WHERE sweep_id IN (
             SELECT id FROM reconciliation_sweeps WHERE finished_at IS NOT NULL)",
    )
    .execute(store.pool())
    .await?;
    let inserted = sqlx::query_scalar(
        "INSERT INTO reconciliation_sweeps (window_from, window_to, actor, heartbeat_at)
         VALUES ($1, $2, $3, now()) RETURNING id",
    )
    .bind(window.from)
    .bind(window.to)
    .bind(actor)
    .fetch_one(store.pool())
    .await;
    match inserted {
        Ok(id) => Ok(id),
        Err(sqlx::Error::Database(db))
            if db.constraint() == Some("reconciliation_sweeps_one_running_per_window") =>
        {
            let running: Option<(i64, String, OffsetDateTime, OffsetDateTime, OffsetDateTime)> =
                sqlx::query_as(
                    "SELECT id, actor, started_at, window_from, window_to FROM reconciliation_sweeps
                     WHERE finished_at IS NULL
                       AND tstzrange(window_from, window_to) && tstzrange($1, $2)
                     ORDER BY id LIMIT 1",
                )
                .bind(window.from)
                .bind(window.to)
                .fetch_optional(store.pool())
                .await?;
            match running {
                Some((id, actor, started_at, from, to)) => Err(StartError::Overlapping {
                    id,
                    actor,
                    started_at,
                    from,
                    to,
                }),
                // It ended in between: the caller may simply try again.
                None => Err(StartError::Database(sqlx::Error::Database(db))),
            }
        }
        Err(err) => Err(err.into()),
    }
}

/// A running sweep's heartbeat, with its progress so far: it is alive (see
/// [`ABANDONED_AFTER`]), and `reconciliation_sweeps` shows how far it has read. Also its
/// fence: `false` when its row was ended meanwhile (by the next sweep's start, as
/// abandoned), and its records with it: nothing read before this answer may then be
/// trusted, nor anything written on it.
pub async fn heartbeat(
    store: &Store,
    sweep: i64,
    counts: SweepCounts,
) -> Result<bool, sqlx::Error> {
    let beat = sqlx::query(
        "UPDATE reconciliation_sweeps SET heartbeat_at = now(), pages = $2, records = $3,
             records_seen = $4, records_skipped = $5
         WHERE id = $1 AND finished_at IS NULL",
    )
    .bind(sweep)
    .bind(counts.pages as i32)
    .bind(counts.records_kept as i64)
    .bind(counts.records_seen as i64)
    .bind(counts.records_skipped as i64)
    .execute(store.pool())
    .await?;
    Ok(beat.rows_affected() == 1)
}

/// Stores one page's records for `sweep` (a record listed twice is kept once).
pub async fn add_records(
    store: &Store,
    sweep: i64,
    records: &[ListedCharge],
) -> Result<(), sqlx::Error> {
    if records.is_empty() {
        return Ok(());
    }
    let column = |f: fn(&ListedCharge) -> Option<String>| records.iter().map(f).collect::<Vec<_>>();
    let ids: Vec<String> = records.iter().map(|r| r.id.to_string()).collect();
    let attempt_ids: Vec<Option<Uuid>> = records
        .iter()
        .map(|r| r.reference.as_deref().and_then(|r| r.parse::<Uuid>().ok()))
        .collect();
    let statuses: Vec<String> = records
        .iter()
        .map(|r| r.status.as_str().to_owned())
        .collect();
    let amounts: Vec<Option<i64>> = records.iter().map(|r| r.amount_minor).collect();
    let refunded: Vec<Option<i64>> = records.iter().map(|r| r.amount_refunded).collect();
    sqlx::query(
        "INSERT INTO reconciliation_sweep_records
             (sweep_id, charge_id, reference, payment_attempt_id, status, amount_minor, currency,
              customer, idempotency_key, amount_refunded)
         SELECT $1, * FROM UNNEST($2::text[], $3::text[], $4::uuid[], $5::text[], $6::int8[],
                                  $7::text[], $8::text[], $9::text[], $10::int8[])
         ON CONFLICT DO NOTHING",
    )
    .bind(sweep)
    .bind(ids)
    .bind(column(|r| r.reference.clone()))
    .bind(attempt_ids)
    .bind(statuses)
    .bind(amounts)
    .bind(column(|r| r.currency.clone()))
    .bind(column(|r| r.customer.clone()))
    .bind(column(|r| r.idempotency_key.clone()))
    .bind(refunded)
    .execute(store.pool())
    .await?;
    Ok(())
}

/// Refreshes the planner's statistics of the records table once a sweep has read every
/// page: without them (a table that was empty a moment ago) each batch of the comparison
/// is planned as a scan of all the sweep's records instead of a walk of its index. Through
/// a function that runs as the table's owner: PostgreSQL skips an ANALYZE by anyone else
/// (the runtime role, docs/decisions/160-setup-migrates-as-the-owner-serve-only-checks.md) with only a warning.
pub async fn analyze_records(store: &Store) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT onecharge_analyze_sweep_records()")
        .execute(store.pool())
        .await?;
    Ok(())
}

/// One attempt id the sweep's records name, the attempt (when onecharge knows it), and
/// every record naming it.
#[derive(Debug, Clone)]
pub struct Named {
    pub reference: String,
    pub attempt: Option<SweptAttempt>,
    pub records: Vec<ListedCharge>,
}

/// What the sweep knows of one attempt: the row its comparison
/// (`reconciler::sweep::compare`) reads.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SweptAttempt {
    pub payment_attempt_id: PaymentAttemptId,
    pub status: AttemptStatus,
    #[sqlx(flatten)]
    pub money: Money,
    pub customer_id: String,
    pub idempotency_key: IdempotencyKey,
    pub gateway_charge_id: Option<GatewayChargeId>,
    /// Stripe's PaymentIntent id, stored before the charging call.
    pub gateway_object_id: Option<GatewayObjectId>,
    /// A succeeded attempt first sent and settled inside the swept window (with a margin
    /// for clock skew): its charge must be in the listing, so its absence is a finding.
    pub in_window: bool,
    /// onecharge's own refunds of this charge, weighed against a read of the gateway: what
    /// they surely refunded before the read began, and what they may have by the time it
    /// ended. A gateway's refunded amount between the two is explained by them and is no
    /// finding.
    #[sqlx(flatten)]
    pub own_refunds: OwnRefunds,
}

/// The refunds onecharge itself made of one charge (contract §2.5), as a comparison weighs
/// what one read of the gateway showed refunded against them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct OwnRefunds {
    /// The sum of the refunds recorded `succeeded` before the gateway's read began: the
    /// gateway had said so before then, so what it showed includes them.
    pub refunded_surely: i64,
    /// The sum of those that may have been at the gateway when its read ended: sent and
    /// not settled (`in_flight`, `processing`, `unknown`, `needs_review`, and `pending`
    /// once sent: a send answered `409` or handed back, held while the fleet is paused,
    /// may have refunded), `succeeded` whenever, and `failed` since the read began (the
    /// gateway may still have shown it pending).
    pub refunded_at_most: i64,
}

/// The [`OwnRefunds`] columns of the attempt on the alias `a`, for a read of the gateway
/// that began at the timestamp parameter `read_began` (the database's clock). Correct only
/// when the rows are read after the gateway's answer came: a refund is `in_flight`, committed,
/// before it is sent, so every refund of onecharge's the answer can show is counted in
/// `refunded_at_most`; and `succeeded` before the read began, never after it, in
/// `refunded_surely` (a refund that succeeds while the read runs may or may not be in it).
fn own_refunds(read_began: &str) -> String {
    format!(
        "COALESCE((SELECT sum(r.amount_minor) FROM refunds r \
         WHERE r.payment_attempt_id = a.payment_attempt_id AND r.status = 'succeeded' \
           AND r.settled_at < {read_began}::timestamptz), 0)::int8 AS refunded_surely, \
         COALESCE((SELECT sum(r.amount_minor) FROM refunds r \
         WHERE r.payment_attempt_id = a.payment_attempt_id \
           AND (r.status IN ('succeeded', 'in_flight', 'processing', 'unknown', 'needs_review') \
                OR (r.status = 'pending' AND r.first_sent_at IS NOT NULL) \
                OR (r.status = 'failed' AND r.settled_at >= {read_began}::timestamptz))), 0)::int8 \
         AS refunded_at_most"
    )
}

/// The attempt columns an [`SweptAttempt`] reads, with `in_window` computed for `$from`,
/// `$to` and the skew `$margin` (seconds).
const VIEW: &str = "a.payment_attempt_id, a.status, a.amount_minor, a.currency, a.customer_id, \
     a.idempotency_key, a.gateway_charge_id, a.gateway_object_id, \
     (a.status = 'succeeded' AND a.first_dispatched_at >= $2::timestamptz + make_interval(secs => $4) \
      AND a.updated_at < $3::timestamptz - make_interval(secs => $4)) AS in_window";

fn record(row: &sqlx::postgres::PgRow) -> Result<ListedCharge, sqlx::Error> {
    Ok(ListedCharge {
        id: row.try_get("charge_id")?,
        status: ListedStatus::parse(row.try_get::<&str, _>("status")?),
        reference: row.try_get("reference")?,
        amount_minor: row.try_get("amount_minor")?,
        currency: row.try_get("currency")?,
        customer: row.try_get("customer")?,
        idempotency_key: row.try_get("idempotency_key")?,
        amount_refunded: row.try_get("amount_refunded")?,
    })
}

/// One page of a sweep's comparison, for [`named_attempts`] and [`unlisted_succeeded`]:
/// which sweep and window, the clock margin that decides `in_window`, the attempt id the
/// previous page ended at, and how many attempts at the most.
#[derive(Debug, Clone, Copy)]
pub struct ComparePage {
    pub sweep: i64,
    pub window: ListWindow,
    /// When the sweep began reading the gateway's pages (the database's clock): what the
    /// attempts' own refunds are weighed against ([`OwnRefunds`]).
    pub read_began: OffsetDateTime,
    pub margin: std::time::Duration,
    pub after: Option<Uuid>,
    pub limit: usize,
}

/// The next `limit` attempt ids (UUID references) the sweep's records name, after `after`,
/// each with its attempt and records. The margin (skew) decides `in_window`.
pub async fn named_attempts(store: &Store, page: ComparePage) -> Result<Vec<Named>, sqlx::Error> {
    let ComparePage {
        sweep,
        window,
        margin,
        read_began,
        after,
        limit,
    } = page;
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "SELECT DISTINCT payment_attempt_id FROM reconciliation_sweep_records
         WHERE sweep_id = $1 AND payment_attempt_id IS NOT NULL
           AND ($2::uuid IS NULL OR payment_attempt_id > $2)
         ORDER BY payment_attempt_id LIMIT $3",
    )
    .bind(sweep)
    .bind(after)
    .bind(limit as i64)
    .fetch_all(store.pool())
    .await?;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let attempts: Vec<SweptAttempt> = sqlx::query_as(&format!(
        "SELECT {VIEW}, {} FROM payment_attempts a WHERE a.payment_attempt_id = ANY($1)",
        own_refunds("$5")
    ))
    .bind(&ids)
    .bind(window.from)
    .bind(window.to)
    .bind(margin.as_secs_f64())
    .bind(read_began)
    .fetch_all(store.pool())
    .await?;
    let rows = sqlx::query(
        "SELECT charge_id, status, reference, payment_attempt_id, amount_minor, currency, customer,
                idempotency_key, amount_refunded
         FROM reconciliation_sweep_records
         WHERE sweep_id = $1 AND payment_attempt_id = ANY($2)
         ORDER BY payment_attempt_id, charge_id",
    )
    .bind(sweep)
    .bind(&ids)
    .fetch_all(store.pool())
    .await?;
    let mut named: Vec<Named> = ids
        .iter()
        .map(|id| Named {
            reference: id.to_string(),
            attempt: attempts
                .iter()
                .find(|a| Uuid::from(a.payment_attempt_id) == *id)
                .cloned(),
            records: Vec::new(),
        })
        .collect();
    for row in &rows {
        let id: Uuid = row.try_get("payment_attempt_id")?;
        if let Ok(i) = ids.binary_search(&id) {
            named[i].records.push(record(row)?);
        }
    }
    Ok(named)
}

/// The next `limit` succeeded attempts inside the window (see [`SweptAttempt::in_window`])
/// that no record of the sweep names, after the attempt `after`: their charge is missing.
///
/// Paged in the order of `payment_attempts_succeeded_dispatched_idx` (when first sent, then
/// the id; decision 244), so that a page reads the window's part of that index and never the
/// whole ledger: the cursor is `after`'s own first send, read by its key. The range is
/// bounded above as well: an attempt is first sent before its last change
/// (`first_dispatched_at <= updated_at`, both stamped `now()` by the statement that sends), so
/// one changed before the window's end was first sent before it.
pub async fn unlisted_succeeded(
    store: &Store,
    page: ComparePage,
) -> Result<Vec<SweptAttempt>, sqlx::Error> {
    let Some(cursor) = unlisted_cursor(store, page).await? else {
        return Ok(Vec::new());
    };
    let sql = unlisted_sql();
    bind_unlisted(sqlx::query(&sql), page, cursor)
        .try_map(|row: sqlx::postgres::PgRow| SweptAttempt::from_row(&row))
        .fetch_all(store.pool())
        .await
}

/// The plan PostgreSQL makes of the statement [`unlisted_succeeded`] runs for `page`, as
/// `EXPLAIN` prints it: what the test holding that step to its index reads (decision 244).
pub async fn unlisted_succeeded_plan(
    store: &Store,
    page: ComparePage,
) -> Result<String, sqlx::Error> {
    let Some(cursor) = unlisted_cursor(store, page).await? else {
        return Ok(String::new());
    };
    let sql = format!("EXPLAIN {}", unlisted_sql());
    let lines = bind_unlisted(sqlx::query(&sql), page, cursor)
        .try_map(|row: sqlx::postgres::PgRow| row.try_get::<String, _>(0))
        .fetch_all(store.pool())
        .await?;
    Ok(lines.join("\n"))
}

/// Where the page after `page.after` begins in the index's order: that attempt's first send
/// and id (none before the first page). `None` when there is nothing after it to place:
/// the attempt the previous page ended at is gone from the order (never, for a succeeded
/// attempt, whose first send is stamped once), and the next sweep of the window reads it.
async fn unlisted_cursor(
    store: &Store,
    page: ComparePage,
) -> Result<Option<(Option<OffsetDateTime>, Uuid)>, sqlx::Error> {
    let Some(after) = page.after else {
        return Ok(Some((None, Uuid::nil())));
    };
    let sent: Option<OffsetDateTime> = sqlx::query_scalar(
        "SELECT first_dispatched_at FROM payment_attempts
         WHERE payment_attempt_id = $1 AND first_dispatched_at IS NOT NULL",
    )
    .bind(after)
    .fetch_optional(store.pool())
    .await?;
    Ok(sent.map(|sent| (Some(sent), after)))
}

fn unlisted_sql() -> String {
    format!(
        "SELECT {VIEW}, {} FROM payment_attempts a
         WHERE a.status = 'succeeded'
           AND a.first_dispatched_at >= $2::timestamptz + make_interval(secs => $4)
           AND a.first_dispatched_at < $3::timestamptz - make_interval(secs => $4)
           AND a.updated_at < $3::timestamptz - make_interval(secs => $4)
           AND (a.first_dispatched_at, a.payment_attempt_id)
               > (COALESCE($5::timestamptz, '-infinity'::timestamptz), $8::uuid)
           AND NOT EXISTS (SELECT 1 FROM reconciliation_sweep_records r
                           WHERE r.sweep_id = $1 AND r.payment_attempt_id = a.payment_attempt_id)
         ORDER BY a.first_dispatched_at, a.payment_attempt_id LIMIT $6",
        own_refunds("$7")
    )
}

fn bind_unlisted<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    page: ComparePage,
    (cursor_sent, cursor_id): (Option<OffsetDateTime>, Uuid),
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query
        .bind(page.sweep)
        .bind(page.window.from)
        .bind(page.window.to)
        .bind(page.margin.as_secs_f64())
        .bind(cursor_sent)
        .bind(page.limit as i64)
        .bind(page.read_began)
        .bind(cursor_id)
}

/// What the sweep's comparison reads of one attempt, outside any window (`in_window`
/// false: a single object read by id proves nothing about what a listing left out), for a
/// webhook's check of its PaymentIntent: read after the gateway answered a read that began
/// at `read_began` ([`OwnRefunds`]).
pub async fn attempt_view(
    store: &Store,
    id: PaymentAttemptId,
    read_began: OffsetDateTime,
) -> Result<Option<SweptAttempt>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT a.payment_attempt_id, a.status, a.amount_minor, a.currency, a.customer_id,
                a.idempotency_key, a.gateway_charge_id, a.gateway_object_id, false AS in_window,
                {}
         FROM payment_attempts a WHERE a.payment_attempt_id = $1",
        own_refunds("$2")
    ))
    .bind(id)
    .bind(read_began)
    .fetch_optional(store.pool())
    .await
}

/// A `pending` attempt due now (its charge is at the gateway under its key: the
/// executor's re-send replays it). Returns whether it was still pending.
pub async fn make_pending_due(store: &Store, id: PaymentAttemptId) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query(
        "UPDATE payment_attempts SET next_run_at = now(), updated_at = now()
         WHERE payment_attempt_id = $1 AND status = 'pending' AND next_run_at > now()",
    )
    .bind(id)
    .execute(store.pool())
    .await?
    .rows_affected()
        == 1)
}

/// What one sweep did, written to its row when it ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepCounts {
    pub pages: u32,
    pub records_seen: u64,
    pub records_kept: u64,
    pub records_skipped: u64,
    pub findings: u32,
    pub settled: u32,
}

/// Ends `sweep` with its counts (and error, if it failed) and removes its records. A row
/// another sweep already ended (as abandoned) keeps the end it was given: `false` then.
pub async fn finish(
    store: &Store,
    sweep: i64,
    counts: SweepCounts,
    error: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let ended = sqlx::query(
        "UPDATE reconciliation_sweeps SET finished_at = now(), pages = $2, records = $3,
             findings = $4, settled = $5, error = $6, records_seen = $7, records_skipped = $8
         WHERE id = $1 AND finished_at IS NULL",
    )
    .bind(sweep)
    .bind(counts.pages as i32)
    .bind(counts.records_kept as i64)
    .bind(counts.findings as i32)
    .bind(counts.settled as i32)
    .bind(error.map(|e| crate::domain::bounded(e, 1000)))
    .bind(counts.records_seen as i64)
    .bind(counts.records_skipped as i64)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    sqlx::query("DELETE FROM reconciliation_sweep_records WHERE sweep_id = $1")
        .bind(sweep)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(ended)
}

/// Claims the fleet's next scheduled sweep: true for exactly one caller once `next_at` has
/// passed, which moves it `interval` on (by the database's clock). The first sweep of a
/// new database falls due one interval after the first `serve` started.
pub async fn claim_scheduled(
    store: &Store,
    interval: std::time::Duration,
) -> Result<bool, sqlx::Error> {
    sqlx::query(
        "INSERT INTO reconciliation_sweep_schedule (name, next_at)
         VALUES ('serve', now() + make_interval(secs => $1))
         ON CONFLICT DO NOTHING",
    )
    .bind(interval.as_secs_f64())
    .execute(store.pool())
    .await?;
    Ok(sqlx::query(
        "UPDATE reconciliation_sweep_schedule SET next_at = now() + make_interval(secs => $1)
         WHERE name = 'serve' AND next_at <= now()",
    )
    .bind(interval.as_secs_f64())
    .execute(store.pool())
    .await?
    .rows_affected()
        == 1)
}

/// The database's clock, which the sweep's default window is measured on.
pub async fn now(store: &Store) -> Result<OffsetDateTime, sqlx::Error> {
    sqlx::query_scalar("SELECT now()")
        .fetch_one(store.pool())
        .await
}
