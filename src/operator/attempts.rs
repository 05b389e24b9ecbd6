//! `attempts list | stuck | show`: where attempts stand, and — the question at 3 a.m. — what
//! happens to each next, who does it and when.
//!
//! Over 600 lines only with its tests: the rules of "what happens next" read as one table, and
//! their tests sit beside them.

use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use super::page::{sql_limit, Page};
use super::RetryWindow;
use crate::domain::outcome::GatewayOutcome;
use crate::domain::PaymentAttemptId;
use crate::domain::{AttemptStatus, RefundStatus};
use crate::format;
pub use crate::store::reads::attempts::AttemptFilter;
use crate::store::reads::attempts::{
    self as sql, AttemptRecord, CallRecord, OutboxEvent, Transition,
};
pub use crate::store::reads::cursor::AttemptCursor;
use crate::store::refunds::reads::{self as refund_reads, StoredRefund};
use crate::store::Store;

/// One attempt in `--json` output and the admin API: the stored row (contract §5 fields and
/// more), how old it is and what happens to it next.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AttemptView {
    #[serde(flatten)]
    pub attempt: AttemptRecord,
    /// Seconds since the attempt was recorded.
    pub age_seconds: i64,
    pub next_action: NextAction,
    /// After this the charge is never sent again (the gateway may forget the key, or the
    /// attempt is past `executor.max_age`); only a lookup or a person can settle it. `null`
    /// when the gateway has never seen the key (no limit).
    #[serde(with = "time::serde::rfc3339::option")]
    pub retry_window_closes_at: Option<OffsetDateTime>,
}

/// Who moves an attempt next, what they do and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct NextAction {
    /// `executor`, `reconciler`, `operator`, or `none` for a final attempt.
    pub by: NextActor,
    /// In words, e.g. "executor retries (try 3)".
    pub action: String,
    /// When, if it is scheduled.
    #[serde(with = "time::serde::rfc3339::option")]
    pub at: Option<OffsetDateTime>,
    /// Set when the action is overdue: which role to check.
    pub warning: Option<String>,
}

/// The role that moves an attempt next; serialized as its lower-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NextActor {
    Executor,
    Reconciler,
    Operator,
    /// Nobody: the attempt is final.
    None,
}

impl NextActor {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Executor => "executor",
            Self::Reconciler => "reconciler",
            Self::Operator => "operator",
            Self::None => "none",
        }
    }
}

impl std::fmt::Display for NextActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `attempts show`: one attempt with its whole history.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AttemptDetail {
    #[serde(flatten)]
    pub view: AttemptView,
    pub transitions: Vec<Transition>,
    pub gateway_calls: Vec<CallRecord>,
    /// The attempt's events in the outbox, published or not (its refunds' among them).
    pub events: Vec<OutboxEvent>,
    /// The attempt's refunds, oldest first, each with its moves; their gateway calls are
    /// among `gateway_calls` (operation `refund`, `refund_lookup`), sent under each
    /// refund's own key.
    pub refunds: Vec<AttemptRefund>,
}

/// One refund of an attempt, on the attempt's page: the refund and its moves.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AttemptRefund {
    #[serde(flatten)]
    pub refund: StoredRefund,
    pub transitions: Vec<Transition>,
}

/// Attempts matching `filter`, newest first; `limit` 0 means all.
pub async fn list(
    store: &Store,
    filter: &AttemptFilter,
    limit: usize,
    now: OffsetDateTime,
    window: &RetryWindow,
) -> Result<Vec<AttemptView>, sqlx::Error> {
    Ok(page(store, filter, limit, now, window).await?.items)
}

/// One page of [`list`] or of the stuck list: the next is `before` the listing's last
/// attempt (newest first), `after` the stuck list's (oldest first).
pub type AttemptPage = Page<AttemptView, AttemptCursor>;

/// Attempts matching `filter` (after `filter.before`), newest first, at most `limit` (0 =
/// all), with the cursor of the next page.
pub async fn page(
    store: &Store,
    filter: &AttemptFilter,
    limit: usize,
    now: OffsetDateTime,
    window: &RetryWindow,
) -> Result<AttemptPage, sqlx::Error> {
    let limit = sql_limit(limit);
    let rows = sql::list_attempts(store, filter, limit).await?;
    Ok(Page::of_rows(rows, limit, AttemptCursor::after, |a| {
        view(a, now, window)
    }))
}

/// What `attempts stuck` and `GET /api/attempts?stuck=` ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StuckFilter {
    /// Age (since recorded) past which a non-final attempt counts as stuck; a
    /// `needs_review` attempt counts at any age.
    pub older_than: Duration,
    /// Only attempts in this state.
    pub status: Option<AttemptStatus>,
    /// Only attempts after this cursor, oldest first: the next page. The list is oldest
    /// first, so the next page continues after the last attempt of the previous one.
    pub after: Option<AttemptCursor>,
}

/// Non-final attempts recorded more than `filter.older_than` ago, plus every `needs_review`
/// attempt, oldest first (after `filter.after`), at most `limit` (0 = all, what contract
/// §5/§6 answer without a limit), with the cursor of the next page.
///
/// A keyset page, like the listing's: an attempt that settles between two pages moves no
/// other one across the boundary, so following the cursors shows each attempt once.
pub async fn stuck(
    store: &Store,
    filter: &StuckFilter,
    limit: usize,
    now: OffsetDateTime,
    window: &RetryWindow,
) -> Result<AttemptPage, sqlx::Error> {
    let limit = sql_limit(limit);
    let rows = sql::stuck_attempts(
        store,
        now - filter.older_than,
        filter.status,
        filter.after,
        limit,
    )
    .await?;
    Ok(Page::of_rows(rows, limit, AttemptCursor::after, |a| {
        view(a, now, window)
    }))
}

/// One attempt with its transitions, gateway calls and events; `None` for an unknown id.
pub async fn show(
    store: &Store,
    id: PaymentAttemptId,
    now: OffsetDateTime,
    window: &RetryWindow,
) -> Result<Option<AttemptDetail>, sqlx::Error> {
    let Some(attempt) = sql::get_attempt(store, id).await? else {
        return Ok(None);
    };
    let (transitions, gateway_calls, events, refunds, refund_moves) = tokio::try_join!(
        sql::transitions(store, id),
        sql::gateway_calls(store, id),
        sql::events(store, id),
        refund_reads::refunds_of_attempt(store, id),
        refund_reads::refund_transitions_of_attempt(store, id),
    )?;
    let refunds = refunds
        .into_iter()
        .map(|refund| AttemptRefund {
            transitions: refund_moves
                .iter()
                .filter(|(of, _)| *of == refund.refund_id)
                .map(|(_, t)| t.clone())
                .collect(),
            refund,
        })
        .collect();
    Ok(Some(AttemptDetail {
        view: view(attempt, now, window),
        transitions,
        gateway_calls,
        events,
        refunds,
    }))
}

pub fn view(attempt: AttemptRecord, now: OffsetDateTime, window: &RetryWindow) -> AttemptView {
    AttemptView {
        age_seconds: (now - attempt.created_at).whole_seconds().max(0),
        next_action: next_action(&attempt, now, window),
        retry_window_closes_at: attempt
            .first_dispatched_at
            .map(|first| (first + window.key_window).min(attempt.created_at + window.max_age)),
        attempt,
    }
}

/// How long a due attempt may wait before the listing says something is wrong with the
/// role that should have taken it.
const OVERDUE: time::Duration = time::Duration::minutes(1);

/// What happens next to `attempt`, judged from its row alone, with the same limits the
/// executor applies (`window`).
pub fn next_action(
    attempt: &AttemptRecord,
    now: OffsetDateTime,
    window: &RetryWindow,
) -> NextAction {
    match attempt.status {
        AttemptStatus::Pending => pending_next(attempt, now, window),
        AttemptStatus::InFlight => in_flight_next(attempt, now),
        AttemptStatus::Unknown => NextAction {
            by: NextActor::Reconciler,
            action: format!(
                "reconciler looks the charge up at the gateway (check {})",
                attempt.reconcile_checks + 1
            ),
            at: Some(attempt.next_run_at),
            warning: overdue(now, attempt.next_run_at, NextActor::Reconciler, ""),
        },
        AttemptStatus::NeedsReview => NextAction {
            by: NextActor::Operator,
            action: format!(
                "operator must resolve: onecharge attempts resolve {} --as succeeded|declined|retry --reason \"…\"",
                attempt.payment_attempt_id
            ),
            at: None,
            warning: None,
        },
        AttemptStatus::Succeeded | AttemptStatus::Declined | AttemptStatus::Expired => {
            NextAction {
                by: NextActor::None,
                action: "nothing: final".to_owned(),
                at: None,
                warning: None,
            }
        }
    }
}

/// "overdue by 4m10s: is the executor running…?" once `at` is more than [`OVERDUE`] past.
pub(super) fn overdue(
    now: OffsetDateTime,
    at: OffsetDateTime,
    role: NextActor,
    hint: &str,
) -> Option<String> {
    (now - at > OVERDUE).then(|| {
        format!(
            "overdue by {}: is the {role} running{hint}?",
            format::short(now - at)
        )
    })
}

/// A `pending` attempt: the executor sends it (first try or a retry), or hands it over
/// unsent once its retry window closed; a paused executor says why.
fn pending_next(attempt: &AttemptRecord, now: OffsetDateTime, window: &RetryWindow) -> NextAction {
    let window_closed = attempt.first_dispatched_at.is_some_and(|first| {
        first <= window.key_window_cutoff(now) || attempt.created_at <= window.age_cutoff(now)
    });
    let what = if window_closed {
        "executor hands it to the reconciler without sending (retry window closed)".to_owned()
    } else if attempt.tries == 0 {
        "executor sends the first try".to_owned()
    } else {
        format!("executor retries (try {})", attempt.tries + 1)
    };
    let warning = match paused_by(attempt) {
        Some(paused) => Some(paused.to_owned()),
        None => overdue(
            now,
            attempt.next_run_at,
            NextActor::Executor,
            ", or paused because the gateway rejects its API key (401), or its breaker open",
        ),
    };
    NextAction {
        by: NextActor::Executor,
        action: what,
        at: Some(attempt.next_run_at),
        warning,
    }
}

/// Why the executor is paused, read from the attempt's last gateway call, if it is.
fn paused_by(attempt: &AttemptRecord) -> Option<&'static str> {
    let call = attempt.last_gateway_call.as_ref()?;
    match call.outcome.as_str() {
        GatewayOutcome::CREDENTIALS_FAULT => Some("the gateway rejected onecharge's API key on the last call: the executor is paused until gateway_api_key is fixed (see /readyz)"),
        GatewayOutcome::ENDPOINT_FAULT => Some("the gateway answered 404/405/3xx on the last call, so gateway_url looks wrong: the executor is paused until it is fixed (see /readyz)"),
        _ => None,
    }
}

/// An `in_flight` attempt: its executor's call is in progress until the lease expires;
/// then the reconciler takes it over.
fn in_flight_next(attempt: &AttemptRecord, now: OffsetDateTime) -> NextAction {
    match attempt.lease_expires_at {
        Some(expires) if expires > now => NextAction {
            by: NextActor::Executor,
            action: format!(
                "gateway call in progress ({}); lease expires",
                attempt.lease_owner.as_deref().unwrap_or("unknown executor")
            ),
            at: Some(expires),
            warning: None,
        },
        expires => NextAction {
            by: NextActor::Reconciler,
            action: "lease expired: reconciler takes it over and looks it up".to_owned(),
            at: expires,
            warning: expires.and_then(|e| overdue(now, e, NextActor::Reconciler, "")),
        },
    }
}

/// Whether the attempt's PaymentIntent was cancelled (Stripe), from its last `cancel`
/// call: what a person deciding "not charged" needs to know. `None` without a cancel.
fn cancel_fact(calls: &[CallRecord]) -> Option<String> {
    let cancel = calls.iter().rev().find(|c| c.operation == "cancel")?;
    let id = cancel
        .gateway_charge_id
        .as_deref()
        .unwrap_or("its PaymentIntent");
    Some(match cancel.outcome.as_str() {
        "canceled" => format!("{id} cancelled at the gateway: it can never charge"),
        other => format!("{id} not cancelled (the last cancel answered {other})"),
    })
}

/// `executor retries (try 3) at 2026-11-29 10:15:01Z (in 4m) — WARNING: …`
pub fn next_action_text(next: &NextAction, now: OffsetDateTime) -> String {
    let mut text = match next.at {
        Some(at) => format!("{} at {}", next.action, format::at_relative(at, now)),
        None => next.action.clone(),
    };
    if let Some(warning) = &next.warning {
        text.push_str(" — WARNING: ");
        text.push_str(warning);
    }
    text
}

/// The facts of `attempts show`, one per row (name, value): where the attempt stands, what
/// it charges, and what is next. The console's attempt page shows the same rows.
pub fn fact_rows(detail: &AttemptDetail, now: OffsetDateTime) -> Vec<(&'static str, String)> {
    let a = &detail.view.attempt;
    let mut facts = Vec::new();
    let mut fact = |name: &'static str, value: String| facts.push((name, value));
    fact("payment attempt", a.payment_attempt_id.to_string());
    fact("status", a.status.to_string());
    fact("next", next_action_text(&detail.view.next_action, now));
    if let Some(reason) = &a.review_reason {
        fact("review reason", format::cell(reason, 300));
    }
    if let Some(error) = &a.last_error {
        fact("last error", format::cell(error, 300));
    }
    if let Some(cancelled) = cancel_fact(&detail.gateway_calls) {
        fact("payment intent", cancelled);
    }
    fact(
        "amount",
        format!("{} ({} minor units)", a.money, a.money.amount_minor()),
    );
    fact(
        "order / customer",
        format!("{} / {}", a.order_id, a.customer_id),
    );
    fact("payment method", a.payment_method.clone());
    fact("idempotency key", a.idempotency_key.to_string());
    fact("gateway charge", gateway_charge_text(a));
    fact(
        "tries",
        format!(
            "{} charge tries, {} reconciler checks",
            a.tries, a.reconcile_checks
        ),
    );
    fact("created", format::at_relative(a.created_at, now));
    fact("updated", format::at_relative(a.updated_at, now));
    fact(
        "first sent",
        a.first_dispatched_at
            .map(|t| format::at_relative(t, now))
            .unwrap_or_else(|| "never (the gateway has not seen this key)".to_owned()),
    );
    if !a.status.is_final() {
        fact(
            "retry window",
            retry_window_text(detail.view.retry_window_closes_at, now),
        );
    }
    if !detail.refunds.is_empty() {
        fact("refunds", refunds_text(a.money, &detail.refunds));
    }
    if let Some(expires) = a.lease_expires_at {
        fact(
            "lease",
            format!(
                "{} until {}",
                a.lease_owner.as_deref().unwrap_or("?"),
                format::at_relative(expires, now)
            ),
        );
    }
    fact(
        "command",
        format!(
            "message {}{}",
            a.first_message_id,
            suffix(", correlation ", a.correlation_id.as_deref())
        ),
    );
    facts
}

/// `2 refunds: 5.00 EUR refunded, 3.00 EUR being refunded, 1 waiting; 11.99 EUR left`:
/// what the attempt's refunds have taken of its charge, from the refunds themselves (what
/// they hold is what the database reserved for them).
fn refunds_text(charged: crate::domain::Money, refunds: &[AttemptRefund]) -> String {
    let sum = |keep: &dyn Fn(&StoredRefund) -> bool| -> i64 {
        refunds
            .iter()
            .map(|r| &r.refund)
            .filter(|r| keep(r))
            .filter_map(|r| r.amount_minor)
            .sum()
    };
    let refunded = sum(&|r| r.status == RefundStatus::Succeeded);
    let held = sum(&|r| r.status.holds_amount());
    let waiting = refunds
        .iter()
        .filter(|r| r.refund.status == RefundStatus::Waiting)
        .count();
    let money = |minor| crate::domain::Money::new(minor, charged.currency());
    let mut text = format!(
        "{} refund{}: {} refunded",
        refunds.len(),
        if refunds.len() == 1 { "" } else { "s" },
        money(refunded)
    );
    if held > refunded {
        text.push_str(&format!(", {} being refunded", money(held - refunded)));
    }
    if waiting > 0 {
        text.push_str(&format!(", {waiting} waiting"));
    }
    text.push_str(&format!("; {} left", money(charged.amount_minor() - held)));
    text
}

/// `ch_1 (decline code insufficient_funds)`, `ch_1`, or `-`.
fn gateway_charge_text(a: &AttemptRecord) -> String {
    match (&a.gateway_charge_id, &a.decline_code) {
        (Some(charge), Some(code)) => format!("{charge} (decline code {code})"),
        (Some(charge), None) => charge.to_string(),
        (None, Some(code)) => format!("- (decline code {code})"),
        (None, None) => "-".to_owned(),
    }
}

/// Whether the charge may still be re-sent, and until when.
fn retry_window_text(closes_at: Option<OffsetDateTime>, now: OffsetDateTime) -> String {
    match closes_at {
        None => "open: the gateway has never seen the key".to_owned(),
        Some(closes) if closes > now => {
            format!("open until {}", format::at_relative(closes, now))
        }
        Some(closes) => format!(
            "closed since {}: never re-sent; settle by lookup (--as succeeded|declined)",
            format::at_relative(closes, now)
        ),
    }
}

/// `label` + `value`, or nothing when there is no value.
pub(super) fn suffix(label: &str, value: Option<&str>) -> String {
    value.map(|v| format!("{label}{v}")).unwrap_or_default()
}

/// One row of the timeline: when, a tie-breaker for rows at the same time (transitions,
/// then gateway calls, then events), and the kind, what and detail columns.
pub(super) type TimelineEntry = (OffsetDateTime, u8, [String; 3]);

/// One entry of an attempt's merged timeline: a transition, a gateway call or an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineRow {
    pub at: OffsetDateTime,
    /// `state`, `gateway` or `event`.
    pub kind: String,
    pub what: String,
    pub detail: String,
}

/// Transitions, gateway calls and events in the order they happened, each refund's moves
/// beside the attempt's own: what `attempts show` prints and the console's attempt page
/// lists.
pub fn timeline_rows(detail: &AttemptDetail) -> Vec<TimelineRow> {
    let refund_moves = detail.refunds.iter().flat_map(|r| {
        r.transitions
            .iter()
            .map(|t| refund_transition_entry(r.refund.refund_id, t))
    });
    timeline(
        &detail.transitions,
        &detail.gateway_calls,
        &detail.events,
        refund_moves,
    )
}

/// One timeline of `transitions` (kind `state`), `calls`, `events` and `more` (entries of
/// another kind), in the order they happened: an attempt's and a refund's alike.
pub(super) fn timeline(
    transitions: &[Transition],
    calls: &[CallRecord],
    events: &[OutboxEvent],
    more: impl Iterator<Item = TimelineEntry>,
) -> Vec<TimelineRow> {
    let mut entries: Vec<TimelineEntry> = transitions
        .iter()
        .map(transition_entry)
        .chain(calls.iter().map(gateway_call_entry))
        .chain(events.iter().map(event_entry))
        .chain(more)
        .collect();
    entries.sort_by_key(|(at, order, _)| (*at, *order));
    entries
        .into_iter()
        .map(|(at, _, [kind, what, detail])| TimelineRow {
            at,
            kind,
            what,
            detail,
        })
        .collect()
}

/// `pending -> in_flight (claimed)`, `by executor:…: …`
fn transition_entry(t: &Transition) -> TimelineEntry {
    let what = format!(
        "{} -> {} ({})",
        t.from_status.as_deref().unwrap_or("new"),
        t.to_status,
        t.cause
    );
    let detail = t.detail.as_deref().map(|d| format::cell(d, 160));
    let by = format!("by {}{}", t.actor, suffix(": ", detail.as_deref()));
    (t.at, 0, ["state".to_owned(), what, by])
}

/// `refund <refund_id>: waiting -> pending (admitted)`, `by executor:…: …`: a refund's move
/// on its attempt's timeline, told apart from the attempt's own by its kind.
fn refund_transition_entry(refund_id: crate::domain::RefundId, t: &Transition) -> TimelineEntry {
    let (at, order, [_, what, by]) = transition_entry(t);
    (
        at,
        order,
        [
            "refund".to_owned(),
            format!("refund {refund_id}: {what}"),
            by,
        ],
    )
}

/// `charge try 1 -> HTTP 201 succeeded`, `312 ms, charge ch_…, <error>`; a refund's call
/// names its refund and the gateway's refund id.
fn gateway_call_entry(c: &CallRecord) -> TimelineEntry {
    let answer = c
        .http_status
        .map(|s| format!("HTTP {s}"))
        .unwrap_or_else(|| "no answer".to_owned());
    let what = format!(
        "{} try {} -> {answer} {}",
        c.operation, c.try_number, c.outcome
    );
    let error = c.error.as_deref().map(|e| format::cell(e, 160));
    let object = match c.idempotency_key.refund_of() {
        Some(refund_id) => format!(
            ", refund {refund_id}{}",
            suffix(", gateway refund ", c.gateway_charge_id.as_deref())
        ),
        None => suffix(", charge ", c.gateway_charge_id.as_deref()),
    };
    let detail = format!(
        "{} ms{object}{}",
        c.duration_ms,
        suffix(", ", error.as_deref())
    );
    (c.started_at, 1, ["gateway".to_owned(), what, detail])
}

/// `payments.events.payment-succeeded.v1`, `<event id> published …` or why not yet.
fn event_entry(e: &OutboxEvent) -> TimelineEntry {
    let detail = match e.published_at {
        Some(p) => format!("{} published {}", e.event_id, format::at(p)),
        None => {
            let error = e.last_error.as_deref().map(|err| format::cell(err, 120));
            format!(
                "{} NOT YET PUBLISHED ({} tries{})",
                e.event_id,
                e.publish_attempts,
                suffix(", last error: ", error.as_deref())
            )
        }
    };
    (
        e.created_at,
        2,
        ["event".to_owned(), e.subject.clone(), detail],
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use time::macros::datetime;

    /// An attempt in `status` with every field set, for the tests of what is shown.
    pub(crate) fn attempt(status: AttemptStatus) -> AttemptRecord {
        let t = datetime!(2026-11-29 10:00:00 UTC);
        AttemptRecord {
            payment_attempt_id: PaymentAttemptId::from(uuid::Uuid::nil()),
            status,
            order_id: "ord_1".into(),
            customer_id: "cus_1".into(),
            money: crate::domain::Money::of(1999, "EUR").unwrap(),
            payment_method: "pm_card_visa".into(),
            description: None,
            requested_at: None,
            idempotency_key: crate::domain::IdempotencyKey::for_attempt(uuid::Uuid::nil().into()),
            tries: 2,
            next_run_at: t + time::Duration::minutes(5),
            lease_owner: None,
            lease_expires_at: None,
            dispatched_at: Some(t),
            first_dispatched_at: Some(t),
            reconcile_checks: 1,
            gateway_charge_id: None,
            decline_code: None,
            last_error: None,
            review_reason: None,
            first_message_id: "m-1".into(),
            correlation_id: None,
            created_at: t,
            updated_at: t,
            last_gateway_call: None,
        }
    }

    #[test]
    fn each_state_names_who_moves_it_next_and_when() {
        let window = RetryWindow::default();
        let now = datetime!(2026-11-29 10:01:00 UTC);
        let pending = next_action(&attempt(AttemptStatus::Pending), now, &window);
        assert_eq!(pending.by, NextActor::Executor);
        assert_eq!(pending.action, "executor retries (try 3)");
        assert_eq!(pending.at, Some(datetime!(2026-11-29 10:05:00 UTC)));
        assert_eq!(pending.warning, None);

        let unknown = next_action(&attempt(AttemptStatus::Unknown), now, &window);
        assert_eq!(
            (unknown.by, unknown.action.as_str()),
            (
                NextActor::Reconciler,
                "reconciler looks the charge up at the gateway (check 2)"
            )
        );

        let mut in_flight = attempt(AttemptStatus::InFlight);
        in_flight.lease_expires_at = Some(datetime!(2026-11-29 10:00:30 UTC));
        let expired = next_action(&in_flight, now, &window);
        assert_eq!(expired.by, NextActor::Reconciler);
        assert!(
            expired.action.starts_with("lease expired"),
            "{}",
            expired.action
        );

        let review = next_action(&attempt(AttemptStatus::NeedsReview), now, &window);
        assert_eq!((review.by, review.at), (NextActor::Operator, None));
        assert_eq!(
            next_action(&attempt(AttemptStatus::Succeeded), now, &window).by,
            NextActor::None
        );
    }

    #[test]
    fn an_overdue_retry_asks_whether_the_executor_runs() {
        let window = RetryWindow::default();
        let now = datetime!(2026-11-29 10:15:00 UTC);
        let next = next_action(&attempt(AttemptStatus::Pending), now, &window);
        let warning = next.warning.expect("an overdue retry warns");
        assert!(warning.contains("overdue by 10m00s"), "{warning}");
        assert!(warning.contains("401"), "{warning}");
    }

    #[test]
    fn a_pending_attempt_past_the_key_window_is_handed_over_not_sent() {
        let window = RetryWindow::default();
        let now = datetime!(2026-11-30 10:00:00 UTC);
        let next = next_action(&attempt(AttemptStatus::Pending), now, &window);
        assert!(
            next.action
                .starts_with("executor hands it to the reconciler"),
            "{}",
            next.action
        );
    }
}
