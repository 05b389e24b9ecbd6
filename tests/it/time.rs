//! Time comes from the database's clock: leases, due times, dispatch stamps and the key
//! window are computed with `now()` in the SQL statements, so an executor or reconciler on
//! a host whose clock is an hour off neither stretches the key window nor expires leases
//! early or late. Each test skews one role's host clock and moves rows' timestamps (by the
//! database's clock) instead of faking time.

use std::sync::Arc;
use std::time::Duration;

use crate::support::Harness;
use crate::support::Records;
use mock_gateway::payment_methods as pm;
use onecharge::clock::ManualClock;
use onecharge::domain::Actor;
use onecharge::domain::AttemptStatus;
use onecharge::reconciler::ReconcileReport;

const HOUR: Duration = Duration::from_secs(3600);

/// A host clock `ahead` of the real time by an hour, or behind it.
fn skewed(ahead: bool) -> Arc<ManualClock> {
    let now = time::OffsetDateTime::now_utc();
    Arc::new(ManualClock::new(if ahead {
        now + HOUR
    } else {
        now - HOUR
    }))
}

/// One pass of the reconciler on a host whose clock is `clock`.
async fn reconcile_on_a_host(h: &Harness, clock: Arc<ManualClock>) -> ReconcileReport {
    h.reconciler().with_clock(clock).run_once().await.unwrap()
}

/// A harness whose attempts reach the executor's maximum age only after 48 hours, so that
/// the key window alone decides what happens to an attempt a day old.
async fn harness_where_the_key_window_decides() -> Harness {
    Harness::with(mock_gateway::MockConfig::default(), |s| {
        s.executor.max_age = Duration::from_secs(48 * 3600);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_stamps_the_dispatch_and_the_lease_by_the_database_clock_whatever_the_host_says() {
    let h = Harness::new().await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;

    let claimed = h
        .executor()
        .with_clock(skewed(true))
        .claim(1)
        .await
        .unwrap();

    assert_eq!(claimed.len(), 1, "due by the database's clock");
    let off_by_a_minute_or_more: bool = sqlx::query_scalar(
        "SELECT abs(extract(epoch FROM now() - dispatched_at)) > 60
             OR abs(extract(epoch FROM now() - first_dispatched_at)) > 60
             OR lease_expires_at - dispatched_at <> make_interval(secs => $2)
         FROM payment_attempts WHERE payment_attempt_id = $1",
    )
    .bind(id)
    .bind(h.settings.executor.lease.as_secs_f64())
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    assert!(
        !off_by_a_minute_or_more,
        "dispatched_at and the lease follow the database's clock, not the host's hour ahead"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciler_whose_clock_runs_an_hour_ahead_does_not_expire_a_live_lease() {
    let h = Harness::new().await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    h.executor().claim(1).await.unwrap();

    let report = reconcile_on_a_host(&h, skewed(true)).await;

    assert!(report.leases_expired.is_empty(), "{report:?}");
    assert_eq!(h.attempt(id).await.status, "in_flight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciler_whose_clock_runs_an_hour_behind_still_expires_a_lapsed_lease() {
    let h = Harness::new().await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    h.executor().claim(1).await.unwrap();
    h.set_attempt(id, "lease_expires_at = now() - interval '1 second'")
        .await;

    let report = reconcile_on_a_host(&h, skewed(false)).await;

    assert_eq!(report.leases_expired, vec![id]);
    assert_ne!(h.attempt(id).await.status, "in_flight");
}

/// An attempt first sent 23 h 30 min ago by the database's clock: past the default key
/// window (24 h retention − 1 h margin), but inside it for a host an hour behind.
async fn first_sent_23h30m_ago(h: &Harness, status: &str) -> onecharge::domain::PaymentAttemptId {
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    h.set_attempt(
        id,
        &format!(
            "status = '{status}', tries = 1, next_run_at = now(),
             first_dispatched_at = now() - interval '23 hours 30 minutes',
             dispatched_at = now() - interval '23 hours 30 minutes'"
        ),
    )
    .await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_whose_clock_runs_an_hour_behind_never_resends_past_the_key_window() {
    let h = harness_where_the_key_window_decides().await;
    let id = first_sent_23h30m_ago(&h, "pending").await;

    let report = h
        .executor()
        .with_clock(skewed(false))
        .run_once()
        .await
        .unwrap();

    assert_eq!(report.count(AttemptStatus::Unknown), 1, "{report:?}");
    assert!(h.gateway.ledger().is_empty(), "nothing re-sent");
    assert!(h.gateway_calls(id).await.is_empty());
    assert_eq!(
        h.transitions(id).await.last().unwrap().2,
        "retry_window_closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciler_whose_clock_runs_an_hour_behind_never_requeues_past_the_key_window() {
    let h = harness_where_the_key_window_decides().await;
    let id = first_sent_23h30m_ago(&h, "unknown").await;

    let report = reconcile_on_a_host(&h, skewed(false)).await;

    assert_eq!(report.count(AttemptStatus::NeedsReview), 1, "{report:?}");
    assert!(
        h.review_reason(id).await.contains("past the key window"),
        "the gateway may have forgotten the key: a re-send could charge twice"
    );
}

/// An attempt in review first sent 23 h 30 min ago by the database's clock: past the key
/// window. An operator whose console or API host runs an hour behind must not be able to
/// retry it: the gateway may have forgotten its key, and a retry could charge twice. The
/// resolution takes no time from its caller any more (it took the host's `now`, which let
/// this retry through); the window is measured back from the database's `now()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_on_a_host_an_hour_behind_cannot_retry_past_the_key_window() {
    use onecharge::operator::resolve::{resolve, ResolveAs, ResolveError, ResolveRequest};
    use onecharge::operator::{RetryWindow, Via};
    let h = harness_where_the_key_window_decides().await;
    let id = first_sent_23h30m_ago(&h, "pending").await;
    h.set_attempt(
        id,
        "status = 'needs_review', review_reason = 'the gateway timed out'",
    )
    .await;

    let refused = resolve(
        &h.store,
        None, // a retry cancels nothing
        id,
        &ResolveRequest {
            as_: ResolveAs::Retry,
            reason: "gateway outage over".into(),
            gateway_charge_id: None,
            decline_code: None,
        },
        &Actor::operator("alice"),
        Via::Console,
        &RetryWindow::from_settings(&h.settings),
    )
    .await;

    assert!(
        matches!(&refused, Err(ResolveError::Refused(why)) if why.contains("key window")),
        "{refused:?}"
    );
    assert_eq!(h.attempt(id).await.status, "needs_review");
}

/// Intake on a host an hour behind records its attempts by the database's clock: an
/// attempt due an hour "ago" would jump the queue, and one created an hour early would
/// reach the maximum age an hour early. Recording takes no time from its caller any more
/// (it took the intake host's `now`: an hour behind, the attempt was stamped 3,600 s off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intake_on_a_host_an_hour_behind_stamps_attempts_by_the_database_clock() {
    let h = Harness::new().await;
    let record = crate::support::record(pm::CARD_VISA, false);
    let id = record.command.payment_attempt_id;

    crate::support::record_batch(&h.store, "test-intake", &[record])
        .await
        .unwrap();

    let off_by: f64 = sqlx::query_scalar(
        "SELECT greatest(abs(extract(epoch FROM now() - created_at)),
                         abs(extract(epoch FROM now() - next_run_at)),
                         abs(extract(epoch FROM now() - t.at)))::float8
         FROM payment_attempts a JOIN attempt_history t USING (payment_attempt_id)
         WHERE payment_attempt_id = $1",
    )
    .bind(id)
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    assert!(
        off_by < 60.0,
        "stamped {off_by} s away from the database's now()"
    );
}

/// A command is stale by the database's clock: intake reads no clock of its own, so an
/// intake host a day off neither expires a fresh command nor charges a stale one. Judged
/// against the database's `now()`, a command requested a minute inside the maximum age is
/// recorded `pending`, one a minute past it `expired` (with its event), and a maximum age
/// of zero expires nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_is_stale_by_the_database_clock_and_a_zero_age_expires_nothing() {
    use onecharge::store::intake::Recorded;
    let h = Harness::new().await;
    let db_now = h.db_now().await;
    let day = Duration::from_secs(24 * 3600);
    let requested = |ago: time::Duration| {
        let attempt = uuid::Uuid::new_v4();
        let at = (db_now - ago)
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        let body = crate::support::command(attempt, serde_json::json!({"requested_at": at}));
        crate::support::intake_record(&body, &format!("msg-{attempt}"), None)
    };
    let minute = time::Duration::minutes(1);
    let inside = requested(time::Duration::DAY - minute);
    let past = requested(time::Duration::DAY + minute);
    let a_year = requested(time::Duration::days(365));

    let recorded =
        onecharge::store::intake::record_batch(&h.store, "test-intake", &[inside, past], day)
            .await
            .unwrap();
    assert_eq!(recorded, [Recorded::Accepted, Recorded::Stale]);
    let never = onecharge::store::intake::record_batch(
        &h.store,
        "test-intake",
        std::slice::from_ref(&a_year),
        Duration::ZERO,
    )
    .await
    .unwrap();
    assert_eq!(never, [Recorded::Accepted]);

    let statuses = h.attempts_by_status().await;
    assert_eq!(
        statuses,
        [("expired".to_owned(), 1), ("pending".to_owned(), 2)]
    );
    let outbox = h.outbox().await;
    let expired_events = outbox.iter().filter(|e| e.status == "expired").count();
    assert_eq!(expired_events, 1, "the stale one is announced, once");
}
