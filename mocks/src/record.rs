//! What the gateway saw and answered: the request log and the per-class counters.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::config::FaultKind;

/// How a `/v1` request was answered, the unit of [`Stats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseClass {
    /// `201`, a new successful charge.
    Created,
    /// `402`, a new declined charge.
    Declined,
    /// The stored outcome replayed with `Idempotent-Replayed: true`.
    Replayed,
    /// `409 idempotency_in_progress`.
    InProgress,
    /// `422 idempotency_key_reused`.
    KeyReused,
    /// `400 invalid_request` (including the `bad_request` trigger).
    InvalidRequest,
    /// `401`.
    Unauthorized,
    /// `429`.
    RateLimited,
    /// `500` from `error_before` or `error_after`.
    ServerError,
    /// Charged, response held by `hang_after`.
    Hung,
    /// Charged, connection closed by `drop_after`.
    Dropped,
    /// `200` from `GET /v1/charges` or `GET /v1/refunds`, or a Stripe PaymentIntent,
    /// refund or list retrieved.
    Lookup,
    /// Stripe dialect: a new `200` that charged nothing (a PaymentIntent created or left
    /// waiting, canceled, or processing; a customer created).
    Accepted,
    /// A new refund recorded (whatever its status): `201` (onecharge) or `200` (Stripe).
    Refunded,
}

impl ResponseClass {
    const ALL: [ResponseClass; 14] = [
        ResponseClass::Created,
        ResponseClass::Declined,
        ResponseClass::Replayed,
        ResponseClass::InProgress,
        ResponseClass::KeyReused,
        ResponseClass::InvalidRequest,
        ResponseClass::Unauthorized,
        ResponseClass::RateLimited,
        ResponseClass::ServerError,
        ResponseClass::Hung,
        ResponseClass::Dropped,
        ResponseClass::Lookup,
        ResponseClass::Accepted,
        ResponseClass::Refunded,
    ];

    /// The snake_case name used in JSON and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ResponseClass::Created => "created",
            ResponseClass::Declined => "declined",
            ResponseClass::Replayed => "replayed",
            ResponseClass::InProgress => "in_progress",
            ResponseClass::KeyReused => "key_reused",
            ResponseClass::InvalidRequest => "invalid_request",
            ResponseClass::Unauthorized => "unauthorized",
            ResponseClass::RateLimited => "rate_limited",
            ResponseClass::ServerError => "server_error",
            ResponseClass::Hung => "hung",
            ResponseClass::Dropped => "dropped",
            ResponseClass::Lookup => "lookup",
            ResponseClass::Accepted => "accepted",
            ResponseClass::Refunded => "refunded",
        }
    }
}

/// One `/v1` request (`POST /v1/charges`, `GET /v1/charges`, `POST /v1/refunds`, …) as
/// received, and how it ended.
///
/// Kept so that a test can assert what onecharge actually sent (same key on every try,
/// same body) and when, not only what was charged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// Arrival order, from 0.
    pub seq: u64,
    /// `POST` (a charge, a refund) or `GET` (a lookup).
    pub method: String,
    /// Path and query, e.g. `/v1/charges?idempotency_key=k`.
    pub path: String,
    /// The raw `Idempotency-Key` header (POST), or the lookup's key (GET), if present.
    pub idempotency_key: Option<String>,
    /// The body parsed as JSON; a JSON string of the raw text when it is not JSON; `null`
    /// when empty.
    pub body: serde_json::Value,
    /// The status sent; `None` while pending, while a `hang_after` holds it, and for a
    /// dropped connection.
    pub status: Option<u16>,
    /// `None` until the request was classified.
    pub class: Option<ResponseClass>,
    /// The injected fault, if one fired.
    pub fault: Option<FaultKind>,
    /// Mock-clock time of arrival.
    #[serde(with = "time::serde::rfc3339")]
    pub received_at: OffsetDateTime,
    /// Mock-clock time the response was handed to the connection (or it was dropped).
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
}

/// Counts of `/v1` requests by how they were answered, plus the ledger size.
///
/// Lets a benchmark or soak test check the mix it produced (how many faults fired, how
/// many retries were replays) without scanning the request log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// `/v1` requests received, answered or not.
    pub requests: u64,
    /// `201`: new successful charges.
    pub created: u64,
    /// `402` for a new decline (a replayed decline counts as `replayed`).
    pub declined: u64,
    /// Stored outcomes answered again with `Idempotent-Replayed: true`.
    pub replayed: u64,
    /// `409 idempotency_in_progress`.
    pub in_progress: u64,
    /// `422 idempotency_key_reused`.
    pub key_reused: u64,
    /// `400`, including the `pm_fault_bad_request` trigger.
    pub invalid_request: u64,
    /// `401`.
    pub unauthorized: u64,
    /// `429`.
    pub rate_limited: u64,
    /// `500` from `error_before` and `error_after`.
    pub server_error: u64,
    /// `hang_after` fired (charged, response held).
    pub hung: u64,
    /// `drop_after` fired (charged, connection closed).
    pub dropped: u64,
    /// `200` answers to lookups and lists (`GET /v1/charges`, `GET /v1/refunds`, Stripe's
    /// GETs).
    pub lookups: u64,
    /// Stripe dialect: new `200` answers that charged nothing.
    pub accepted: u64,
    /// New refunds recorded by `POST /v1/refunds` (whatever their status; replays count
    /// as `replayed`).
    pub refunded: u64,
    /// Ledger entries: committed charges (onecharge: succeeded or declined; Stripe:
    /// PaymentIntents that succeeded).
    pub charges: u64,
    /// Refund ledger entries: every refund recorded, by either dialect's API or a control.
    pub refunds: u64,
    /// Keys whose first request (a charge, or a refund) is running right now (a gauge, not
    /// a count).
    pub charges_in_progress: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    received: AtomicU64,
    by_class: [AtomicU64; ResponseClass::ALL.len()],
}

impl Counters {
    pub(crate) fn received(&self) {
        self.received.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count(&self, class: ResponseClass) {
        self.by_class[class as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(
        &self,
        charges: usize,
        refunds: usize,
        charges_in_progress: usize,
    ) -> Stats {
        let get = |class: ResponseClass| self.by_class[class as usize].load(Ordering::Relaxed);
        Stats {
            requests: self.received.load(Ordering::Relaxed),
            created: get(ResponseClass::Created),
            declined: get(ResponseClass::Declined),
            replayed: get(ResponseClass::Replayed),
            in_progress: get(ResponseClass::InProgress),
            key_reused: get(ResponseClass::KeyReused),
            invalid_request: get(ResponseClass::InvalidRequest),
            unauthorized: get(ResponseClass::Unauthorized),
            rate_limited: get(ResponseClass::RateLimited),
            server_error: get(ResponseClass::ServerError),
            hung: get(ResponseClass::Hung),
            dropped: get(ResponseClass::Dropped),
            lookups: get(ResponseClass::Lookup),
            accepted: get(ResponseClass::Accepted),
            refunded: get(ResponseClass::Refunded),
            charges: charges as u64,
            refunds: refunds as u64,
            charges_in_progress: charges_in_progress as u64,
        }
    }
}

/// The most recent `capacity` requests, oldest first.
pub(crate) struct RequestLog {
    capacity: usize,
    inner: Mutex<LogInner>,
}

#[derive(Default)]
struct LogInner {
    next_seq: u64,
    records: VecDeque<RecordedRequest>,
}

/// What a handler learned about its request, written into the log entry.
pub(crate) struct Finish {
    pub(crate) status: Option<u16>,
    pub(crate) class: ResponseClass,
    pub(crate) fault: Option<FaultKind>,
    pub(crate) finished_at: Option<OffsetDateTime>,
}

impl RequestLog {
    pub(crate) fn new(capacity: usize) -> Self {
        RequestLog {
            capacity,
            inner: Mutex::new(LogInner::default()),
        }
    }

    /// Appends a request and returns its sequence number.
    pub(crate) fn begin(
        &self,
        method: &str,
        path: &str,
        idempotency_key: Option<String>,
        body: serde_json::Value,
        received_at: OffsetDateTime,
    ) -> u64 {
        let mut inner = self.inner.lock();
        let seq = inner.next_seq;
        inner.next_seq += 1;
        if self.capacity == 0 {
            return seq;
        }
        if inner.records.len() == self.capacity {
            inner.records.pop_front();
        }
        inner.records.push_back(RecordedRequest {
            seq,
            method: method.to_owned(),
            path: path.to_owned(),
            idempotency_key,
            body,
            status: None,
            class: None,
            fault: None,
            received_at,
            finished_at: None,
        });
        seq
    }

    pub(crate) fn finish(&self, seq: u64, finish: Finish) {
        let mut inner = self.inner.lock();
        let Some(oldest) = inner.records.front().map(|r| r.seq) else {
            return;
        };
        let Some(record) = seq
            .checked_sub(oldest)
            .and_then(|index| inner.records.get_mut(index as usize))
        else {
            return;
        };
        record.status = finish.status;
        record.class = Some(finish.class);
        record.fault = finish.fault;
        record.finished_at = finish.finished_at;
    }

    pub(crate) fn snapshot(&self) -> Vec<RecordedRequest> {
        self.inner.lock().records.iter().cloned().collect()
    }
}

/// List pages whose build time is kept at each end of [`PageTimes`].
pub const PAGE_TIMES_KEPT: usize = 1_000;

/// How long the mock took to build its list pages (`GET /v1/charges` with a window, `GET
/// /v1/payment_intents`), from parsing the query to the page's JSON, the configured latency
/// excluded: the first and the last [`PAGE_TIMES_KEPT`] pages answered, so a benchmark can
/// show what a page costs at the start of a long listing and at its end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageTimes {
    /// Pages answered `200`.
    pub pages: u64,
    /// The first pages' times, in order.
    pub first: Vec<Duration>,
    /// The last pages' times, oldest first; the same pages as `first` while fewer than
    /// [`PAGE_TIMES_KEPT`] were answered.
    pub last: Vec<Duration>,
}

/// Records [`PageTimes`]: a bounded amount, however long the mock runs.
#[derive(Default)]
pub(crate) struct PageTimer(Mutex<PageTimerInner>);

#[derive(Default)]
struct PageTimerInner {
    pages: u64,
    first: Vec<Duration>,
    last: VecDeque<Duration>,
}

impl PageTimer {
    pub(crate) fn record(&self, took: Duration) {
        let mut inner = self.0.lock();
        inner.pages += 1;
        if inner.first.len() < PAGE_TIMES_KEPT {
            inner.first.push(took);
        }
        if inner.last.len() == PAGE_TIMES_KEPT {
            inner.last.pop_front();
        }
        inner.last.push_back(took);
    }

    pub(crate) fn snapshot(&self) -> PageTimes {
        let inner = self.0.lock();
        PageTimes {
            pages: inner.pages,
            first: inner.first.clone(),
            last: inner.last.iter().copied().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_times_keep_the_first_and_the_last_pages_and_count_them_all() {
        let timer = PageTimer::default();
        let pages = 3 * PAGE_TIMES_KEPT as u64;
        for page in 0..pages {
            timer.record(Duration::from_micros(page));
        }

        let times = timer.snapshot();
        assert_eq!(times.pages, pages);
        assert_eq!(times.first.len(), PAGE_TIMES_KEPT);
        assert_eq!(times.first[0], Duration::ZERO);
        assert_eq!(times.last.len(), PAGE_TIMES_KEPT);
        assert_eq!(
            times.last[PAGE_TIMES_KEPT - 1],
            Duration::from_micros(pages - 1)
        );
        assert_eq!(
            times.last[0],
            Duration::from_micros(pages - PAGE_TIMES_KEPT as u64)
        );
    }
}
