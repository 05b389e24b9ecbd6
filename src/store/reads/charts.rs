//! What the console overview's charts show, read from the history the service already
//! keeps: settlements from `attempt_transitions`, gateway latency from `gateway_calls` and
//! from the calls the moves in `attempt_transitions` carry (decision 221), the review queue
//! from both. Every window ends at the database's `now()`, so hosts whose
//! clocks disagree draw the same picture.
//!
//! Each query reads only the window's rows: the BRIN indexes of `at` / `started_at`
//! (decision 98) let a scan skip every block of a month partition outside it, at almost no
//! cost to the writers.

use std::time::Duration;

use sqlx::postgres::PgRow;
use time::OffsetDateTime;

use crate::store::Store;

/// The span a chart covers and the width of one of its buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub span: Duration,
    pub step: Duration,
}

/// Settlements that began in one bucket, per state reached.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SettlementCount {
    /// The bucket's start (buckets are aligned on the epoch, `step` wide).
    pub bucket: OffsetDateTime,
    /// `succeeded`, `declined`, `expired` or `needs_review`.
    pub status: String,
    pub count: i64,
}

/// The latency of the charge calls that started in one bucket.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct LatencyPercentiles {
    pub bucket: OffsetDateTime,
    pub p50_seconds: f64,
    pub p99_seconds: f64,
    pub calls: i64,
}

/// The review queue at one instant.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ReviewQueueSample {
    pub at: OffsetDateTime,
    /// Attempts in `needs_review` then.
    pub size: i64,
    /// How long the one that had waited longest had waited then; 0 when none waited.
    pub oldest_seconds: f64,
}

/// Everything the overview's charts need, read for one window.
#[derive(Debug, Clone, PartialEq)]
pub struct OverviewSeries {
    /// The database's `now()`: where every chart ends.
    pub now: OffsetDateTime,
    pub settlements: Vec<SettlementCount>,
    pub latency: Vec<LatencyPercentiles>,
    pub review_queue: Vec<ReviewQueueSample>,
}

/// Reads the three series of `window`, ending now.
pub async fn overview_series(store: &Store, window: Window) -> Result<OverviewSeries, sqlx::Error> {
    let now: OffsetDateTime = sqlx::query_scalar("SELECT now()")
        .fetch_one(store.pool())
        .await?;
    Ok(OverviewSeries {
        now,
        settlements: series(store, SETTLEMENTS, window, now).await?,
        latency: series(store, CHARGE_LATENCY, window, now).await?,
        review_queue: series(store, REVIEW_QUEUE, window, now).await?,
    })
}

/// One series: `sql` with `$1` the span and `$2` the step (seconds) and `$3` the `now()`
/// read once, so the three series share one right edge.
async fn series<T>(
    store: &Store,
    sql: &'static str,
    window: Window,
    now: OffsetDateTime,
) -> Result<Vec<T>, sqlx::Error>
where
    T: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
{
    sqlx::query_as(sql)
        .bind(window.span.as_secs_f64())
        .bind(window.step.as_secs_f64())
        .bind(now)
        .fetch_all(store.pool())
        .await
}

/// Settlements per bucket and state reached.
const SETTLEMENTS: &str =
    "SELECT date_bin(make_interval(secs => $2), at, timestamptz 'epoch') AS bucket,
            to_status AS status, count(*) AS count
     FROM attempt_transitions
     WHERE at > $3 - make_interval(secs => $1) AND at <= $3
       AND to_status IN ('succeeded', 'declined', 'expired', 'needs_review')
     GROUP BY 1, 2
     ORDER BY 1, 2";

/// Percentiles of the charge calls' durations per bucket: the calls recorded as rows of
/// their own and those carried by the move they caused (decision 221), each found by its
/// table's time index: a move is written after the call that caused it started (both
/// times by the database's clock), so the window's carried calls are on moves written
/// since the window began.
const CHARGE_LATENCY: &str = "WITH calls AS (
         SELECT started_at, finished_at FROM gateway_calls
         WHERE started_at > $3 - make_interval(secs => $1) AND started_at <= $3
           AND operation = 'charge'
         UNION ALL
         SELECT call_started_at, call_finished_at FROM attempt_transitions
         WHERE at > $3 - make_interval(secs => $1)
           AND call_started_at > $3 - make_interval(secs => $1) AND call_started_at <= $3
           AND call_operation = 'charge'
     )
     SELECT date_bin(make_interval(secs => $2), started_at, timestamptz 'epoch') AS bucket,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at))::float8 AS p50_seconds,
            percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at))::float8 AS p99_seconds,
            count(*) AS calls
     FROM calls
     GROUP BY 1
     ORDER BY 1";

/// The review queue at each tick. A stay in review runs from the attempt's last move into
/// `needs_review` to its move out (or now). The stays that matter are the open ones (the
/// attempts in review now, found by the status index) and those that ended inside the
/// window (found by the time index); each stay's start is the attempt's own latest entry
/// before, by its history index. An attempt in review with no recorded entry (written by
/// hand) counts from its last change.
const REVIEW_QUEUE: &str = "WITH stays AS (
         SELECT coalesce(entered.at, a.updated_at) AS entered, NULL::timestamptz AS left_at
         FROM payment_attempts a
         LEFT JOIN LATERAL (
             SELECT t.at FROM attempt_transitions t
             WHERE t.payment_attempt_id = a.payment_attempt_id
               AND t.to_status = 'needs_review'
             ORDER BY t.id DESC LIMIT 1
         ) entered ON true
         WHERE a.status = 'needs_review'
         UNION ALL
         SELECT entered.at, x.at
         FROM attempt_transitions x
         JOIN LATERAL (
             SELECT t.at FROM attempt_transitions t
             WHERE t.payment_attempt_id = x.payment_attempt_id
               AND t.to_status = 'needs_review' AND t.id < x.id
             ORDER BY t.id DESC LIMIT 1
         ) entered ON true
         WHERE x.from_status = 'needs_review'
           AND x.at > $3 - make_interval(secs => $1) AND x.at <= $3
     ),
     ticks AS (
         SELECT generate_series($3 - make_interval(secs => $1), $3, make_interval(secs => $2)) AS at
     )
     SELECT ticks.at, count(stays.entered) AS size,
            coalesce(max(extract(epoch FROM ticks.at - stays.entered)), 0)::float8 AS oldest_seconds
     FROM ticks
     LEFT JOIN stays ON stays.entered <= ticks.at
                    AND (stays.left_at IS NULL OR stays.left_at > ticks.at)
     GROUP BY ticks.at
     ORDER BY ticks.at";

/// How the attempts that reached a final state in one window ended: the overview's and
/// `GET /api/stats`'s success rate and top decline codes (decision 149).
///
/// An attempt counts in the window when its transition into `succeeded`, `declined` or
/// `expired` is in it (`at` in `(now − window, now]`, the database's `now()`). A final state
/// never changes and each is entered once, so each attempt counts at most once. `needs_review`
/// is not an outcome: an attempt resolved from it counts when it is resolved.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct OutcomeFigures {
    /// The window's length in seconds (3600: the last hour; 86400: the last 24 hours).
    pub window_seconds: i64,
    pub succeeded: i64,
    pub declined: i64,
    pub expired: i64,
    /// `succeeded / (succeeded + declined + expired)`, from 0 to 1; `null` when no attempt
    /// reached a final state in the window.
    pub success_rate: Option<f64>,
    /// The 5 most frequent decline codes among the window's declines, most frequent first
    /// (ties by code); a decline the gateway gave no code for counts under `null`.
    pub top_decline_codes: Vec<DeclineCodeCount>,
}

impl OutcomeFigures {
    /// Attempts that reached a final state in the window.
    pub fn finals(&self) -> i64 {
        self.succeeded + self.declined + self.expired
    }

    /// The success rate as people read it: `97.5% (39 of 40)`, or `none final` when the
    /// window holds no outcome (a rate of 0 would be a claim).
    pub fn success_rate_text(&self) -> String {
        match self.success_rate {
            Some(rate) => format!(
                "{:.1}% ({} of {})",
                rate * 100.0,
                self.succeeded,
                self.finals()
            ),
            None => "none final".to_owned(),
        }
    }
}

impl DeclineCodeCount {
    /// The code, or `(no code)` for declines the gateway gave none for.
    pub fn code_text(&self) -> &str {
        self.decline_code.as_deref().unwrap_or("(no code)")
    }
}

/// Declines with one decline code.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct DeclineCodeCount {
    /// The gateway's code (`insufficient_funds`, `card_declined`, …); `null`: none given.
    pub decline_code: Option<String>,
    pub count: i64,
}

/// How many decline codes the figures list.
const TOP_DECLINE_CODES: i64 = 5;

/// Reads the [`OutcomeFigures`] of each of `windows`, each ending at the same `now()`. The
/// window's transitions are found by the BRIN index on `attempt_transitions.at`; the
/// declines' codes by the attempts' primary key, one probe per decline in the window.
pub async fn outcome_figures(
    store: &Store,
    windows: &[Duration],
) -> Result<Vec<OutcomeFigures>, sqlx::Error> {
    let now: OffsetDateTime = sqlx::query_scalar("SELECT now()")
        .fetch_one(store.pool())
        .await?;
    let mut figures = Vec::with_capacity(windows.len());
    for window in windows {
        let (succeeded, declined, expired): (i64, i64, i64) = sqlx::query_as(FINAL_COUNTS)
            .bind(window.as_secs_f64())
            .bind(now)
            .fetch_one(store.pool())
            .await?;
        let top_decline_codes = sqlx::query_as(TOP_DECLINE_CODES_SQL)
            .bind(window.as_secs_f64())
            .bind(now)
            .bind(TOP_DECLINE_CODES)
            .fetch_all(store.pool())
            .await?;
        let finals = succeeded + declined + expired;
        figures.push(OutcomeFigures {
            window_seconds: window.as_secs() as i64,
            succeeded,
            declined,
            expired,
            success_rate: (finals > 0).then(|| succeeded as f64 / finals as f64),
            top_decline_codes,
        });
    }
    Ok(figures)
}

/// Attempts that reached each final state in the window ($1 seconds ending at $2).
const FINAL_COUNTS: &str = "SELECT count(*) FILTER (WHERE to_status = 'succeeded'),
            count(*) FILTER (WHERE to_status = 'declined'),
            count(*) FILTER (WHERE to_status = 'expired')
     FROM attempt_transitions
     WHERE at > $2 - make_interval(secs => $1) AND at <= $2
       AND to_status IN ('succeeded', 'declined', 'expired')";

/// The window's declines by the attempt's decline code, the $3 most frequent.
const TOP_DECLINE_CODES_SQL: &str = "SELECT a.decline_code, count(*) AS count
     FROM attempt_transitions t
     JOIN payment_attempts a ON a.payment_attempt_id = t.payment_attempt_id
     WHERE t.at > $2 - make_interval(secs => $1) AND t.at <= $2
       AND t.to_status = 'declined'
     GROUP BY a.decline_code
     ORDER BY count DESC, a.decline_code NULLS LAST
     LIMIT $3";
