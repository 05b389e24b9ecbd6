//! The reconciler against real PostgreSQL and the in-process mock gateway: every branch of
//! a lookup, the key window, the schedule, expired leases and concurrent reconcilers.

use std::time::Duration;

use crate::support::{self, charge_request, eventually, run_leaving_one_in, Harness, Records};
use mock_gateway::{payment_methods as pm, MockConfig};
use onecharge::domain::outcome::LookupOutcome;
use onecharge::domain::{AttemptStatus, PaymentAttemptId};
use onecharge::reconciler::{Reconciler, Resolution};
use time::format_description::well_known::Rfc3339;

/// Seeds an attempt and lets the executor take it to `unknown` through `payment_method`'s
/// fault.
async fn unknown_attempt(h: &Harness, payment_method: &str) -> PaymentAttemptId {
    let command = h.seed(payment_method).await;
    let report = h.executor().run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Unknown), 1, "{report:?}");
    command.payment_attempt_id
}

/// A harness whose reconciler looks up an attempt three times: at once, a minute later and
/// five minutes after that, then gives up.
async fn harness_with_a_two_step_schedule() -> Harness {
    Harness::with(MockConfig::default(), |s| {
        s.reconciler.schedule = vec![Duration::from_secs(60), Duration::from_secs(300)];
    })
    .await
}

/// The rest of [`harness_with_a_two_step_schedule`] after a first lookup of `id` settled
/// nothing: the second lookup, a minute later, reschedules it five minutes on, and the
/// third sends it to review.
async fn run_out_the_schedule(h: &Harness, reconciler: &Reconciler, id: PaymentAttemptId) {
    h.advance(Duration::from_secs(60)).await;
    assert_eq!(reconciler.run_once().await.unwrap().rescheduled(), 1);
    let row = h.attempt(id).await;
    assert_eq!(row.next_run_at - row.updated_at, Duration::from_secs(300));

    h.advance(Duration::from_secs(300)).await;
    let last = reconciler.run_once().await.unwrap();
    assert_eq!(last.count(AttemptStatus::NeedsReview), 1, "{last:?}");
}

/// The reconciler gave up on `id` when its schedule ran out, after `lookups` lookups that
/// each stored `outcome` as evidence: `needs_review`, with one event.
async fn assert_gave_up_after(h: &Harness, id: PaymentAttemptId, lookups: usize, outcome: &str) {
    let calls = h.gateway_calls(id).await;
    let stored = calls.iter().filter(|c| c.3 == outcome).count();
    assert_eq!(stored, lookups, "every lookup is evidence: {calls:?}");
    let event = h.only_event(id).await;
    assert_eq!(event.0, "needs_review");
    assert_eq!(
        h.transitions(id).await.last().unwrap().2,
        "reconciliation_schedule_exhausted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_found_after_a_500_is_adopted_as_succeeded_with_its_event() {
    let h = Harness::new().await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_AFTER).await;

    let report = h.reconciler().run_once().await.unwrap();

    assert_eq!(
        report.resolutions,
        vec![(id, Resolution::Moved(AttemptStatus::Succeeded))]
    );
    // The lookup charged nothing: the one charge is the first try's.
    h.assert_charged_once(id).await;
    let ledger = h.gateway.ledger();
    let transitions = h.transitions(id).await;
    assert_eq!(transitions.last().unwrap().2, "lookup_found_charge");
    let calls = h.gateway_calls(id).await;
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].3, "found");
    assert_eq!(calls[1].4.as_deref(), Some(ledger[0].id.as_str()));
    let events = h.events(id).await;
    assert_eq!(events[0].1["gateway_charge_id"], ledger[0].id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decline_found_by_lookup_is_adopted_as_declined_with_its_code() {
    let h = Harness::new().await;
    let command = h.seed(pm::CARD_DECLINED).await;
    let id = command.payment_attempt_id;
    // An earlier try reached the gateway and was declined, but its answer was lost.
    let earlier = h.charge_directly(&charge_request(&command)).await;
    assert_eq!(earlier.http_status, Some(402));
    h.set_attempt(
        id,
        "status = 'unknown', tries = 1, first_dispatched_at = now(), next_run_at = now()",
    )
    .await;

    let report = h.reconciler().run_once().await.unwrap();

    assert_eq!(report.count(AttemptStatus::Declined), 1);
    let row = h.attempt(id).await;
    assert_eq!(row.status, "declined");
    assert_eq!(row.decline_code.as_deref(), Some("card_declined"));
    assert_eq!(h.events(id).await[0].0, "declined");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_found_inside_the_key_window_is_resent_with_the_same_key_and_charged_once() {
    let h = Harness::new().await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_BEFORE).await;
    assert!(h.gateway.ledger().is_empty());

    let report = h.reconciler().run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Pending), 1);
    assert_eq!(h.attempt(id).await.status, "pending");

    run_leaving_one_in(&h.executor(), AttemptStatus::Succeeded).await;
    let ledger = h.gateway.ledger();
    assert_eq!(ledger.len(), 1);
    let row = h.attempt(id).await;
    assert_eq!(row.status, "succeeded");
    assert_eq!(row.tries, 2);
    let keys: Vec<_> = h.gateway.request_keys().into_iter().flatten().collect();
    assert!(
        keys.iter().all(|k| *k == row.idempotency_key),
        "one key on every call: {keys:?}"
    );
    let causes = h.causes(id).await;
    assert!(
        causes.contains(&"lookup_found_nothing".to_owned()),
        "{causes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_found_outside_the_key_window_goes_to_review_and_is_never_resent() {
    let h = Harness::new().await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_BEFORE).await;
    let requests_before = h.gateway.requests().len();
    // The gateway's key retention (24 h) minus the margin (1 h) has passed.
    h.advance(Duration::from_secs(23 * 3600 + 1)).await;

    let report = h.reconciler().run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::NeedsReview), 1);
    let executor = h.executor().run_once().await.unwrap();

    assert_eq!(executor.claimed(), 0);
    let reason = h.review_reason(id).await;
    assert!(
        reason.contains("cannot prove whether the customer was charged"),
        "{reason}"
    );
    assert!(h.gateway.ledger().is_empty());
    assert_eq!(
        h.gateway.requests().len(),
        requests_before + 1,
        "one lookup, no charge"
    );
    let event = h.only_event(id).await;
    assert_eq!(event.0, "needs_review");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_lookup_is_rescheduled_and_the_exhausted_schedule_goes_to_review() {
    let h = harness_with_a_two_step_schedule().await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_AFTER).await;
    let unreachable = h.reconciler_with(h.client_with_url("http://127.0.0.1:9"));

    let first = unreachable.run_once().await.unwrap();
    assert_eq!(first.rescheduled(), 1);
    let row = h.attempt(id).await;
    assert_eq!(row.status, "unknown");
    assert_eq!(row.next_run_at - row.updated_at, Duration::from_secs(60));
    assert!(row.last_error.unwrap().contains("lookup 1 failed"));
    assert_eq!(
        unreachable.run_once().await.unwrap().resolutions.len(),
        0,
        "not due before its time"
    );

    run_out_the_schedule(&h, &unreachable, id).await;

    let row = h.attempt(id).await;
    assert!(row
        .review_reason
        .unwrap()
        .contains("3 gateway lookups failed"));
    assert_gave_up_after(&h, id, 3, "failed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_executors_attempt_is_found_by_its_expired_lease_and_settled_without_a_second_charge(
) {
    let h = Harness::with(
        MockConfig {
            hang_for: Duration::from_millis(300),
            ..MockConfig::default()
        },
        |_| {},
    )
    .await;
    let command = h.seed(pm::FAULT_HANG_AFTER).await;
    let id = command.payment_attempt_id;
    let executor = h.executor();
    let running = tokio::spawn(async move { executor.run_once().await });
    h.gateway.wait_for_ledger(1).await;
    running.abort(); // the process dies mid-call
    let _ = running.await;
    // The gateway finishes the held request on its own; wait until a lookup can see it.
    let key = command_key(id);
    let client = h.client_with_key(support::API_KEY);
    eventually(
        "the held charge becomes visible",
        Duration::from_secs(5),
        || async {
            matches!(client.lookup(&key).await.outcome, LookupOutcome::Found(ref c) if !c.is_empty())
        },
    )
    .await;
    assert_eq!(h.attempt(id).await.status, "in_flight");
    assert_eq!(
        h.reconciler()
            .run_once()
            .await
            .unwrap()
            .leases_expired
            .len(),
        0,
        "lease still valid"
    );

    h.advance(h.settings.executor.lease + Duration::from_secs(1))
        .await;
    let report = h.reconciler().run_once().await.unwrap();
    let restarted = h.executor().run_once().await.unwrap();

    assert_eq!(report.leases_expired, vec![id]);
    assert_eq!(report.count(AttemptStatus::Succeeded), 1);
    assert_eq!(restarted.claimed(), 0);
    assert_eq!(h.gateway.ledger().len(), 1, "no second charge");
    let causes = h.causes(id).await;
    assert_eq!(
        causes,
        vec![
            "command_accepted",
            "dispatched",
            "lease_expired",
            "lookup_found_charge"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_executor_result_after_its_lease_expired_changes_nothing() {
    let h = Harness::new().await;
    let command = h.seed(pm::CARD_VISA).await;
    let id = command.payment_attempt_id;
    let slow = h.executor();
    let claimed = slow.claim(1).await.unwrap();
    h.advance(h.settings.executor.lease + Duration::from_secs(1))
        .await;
    // The reconciler takes over before the slow executor's call even starts.
    let report = h.reconciler().run_once().await.unwrap();
    assert_eq!(report.leases_expired, vec![id]);
    assert_eq!(
        report.count(AttemptStatus::Pending),
        1,
        "nothing under the key yet"
    );

    let late = slow.execute(claimed.into_iter().next().unwrap()).await;

    assert_eq!(late.disposition, onecharge::executor::Disposition::Fenced);
    assert_eq!(h.attempt(id).await.status, "pending");
    run_leaving_one_in(&h.executor(), AttemptStatus::Succeeded).await;
    assert_eq!(
        h.gateway.ledger().len(),
        1,
        "the late call and the re-send share one key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reconcilers_settle_each_attempt_once() {
    let h = Harness::new().await;
    let methods = vec![pm::FAULT_ERROR_AFTER; 12];
    let commands = h.seed_many(&methods).await;
    let executor = h.executor();
    while executor.run_once().await.unwrap().claimed() > 0 {}
    assert_eq!(h.attempts_in("unknown").await, 12);

    let (first, second) = (h.reconciler(), h.reconciler());
    let (a, b) = tokio::join!(first.run_once(), second.run_once());
    let (a, b) = (a.unwrap(), b.unwrap());

    assert_eq!(a.resolutions.len() + b.resolutions.len(), 12);
    assert_eq!(h.attempts_in("succeeded").await, 12);
    assert_eq!(h.gateway_calls_of("lookup").await, 12);
    let outbox = h.outbox().await;
    assert_eq!(
        outbox.iter().filter(|e| e.status == "succeeded").count(),
        12
    );
    assert_eq!(h.gateway.ledger().len(), commands.len());
}

fn command_key(id: onecharge::domain::PaymentAttemptId) -> onecharge::domain::IdempotencyKey {
    onecharge::domain::IdempotencyKey::for_attempt(id)
}

// ---- issue 11: the reconciler can always escalate ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_answer_with_nul_characters_is_stored_escaped_and_settles_the_attempt() {
    let h = Harness::new().await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_AFTER).await;
    // The contract's answer for this attempt (a lookup is adopted only when it matches),
    // with NULs where the gateway's own text goes.
    let row = h.attempt(id).await;
    let (key, amount_minor, currency) = (row.idempotency_key, row.amount_minor, row.currency);
    let url = support::gateway_answering(serde_json::json!({
        "id": "ch_\u{0}nul", "status": "declined", "decline_code": "do_not\u{0}honor",
        "idempotency_key": key, "reference": id.to_string(),
        "amount_minor": amount_minor, "currency": currency
    }))
    .await;

    let report = h
        .reconciler_with(h.client_with_url(&url))
        .run_once()
        .await
        .unwrap();

    assert_eq!(
        report.resolutions,
        vec![(id, Resolution::Moved(AttemptStatus::Declined))]
    );
    let row = h.attempt(id).await;
    assert_eq!(row.status, "declined");
    let code = row.decline_code.unwrap();
    assert!(
        !code.contains('\0') && code.starts_with("do_not") && code.ends_with("honor"),
        "{code:?}"
    );
    let charge = row.gateway_charge_id.unwrap();
    assert!(!charge.contains('\0'), "{charge:?}");
    let calls = h.gateway_calls(id).await;
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].3, "found");
    assert_eq!(calls[1].4.as_deref(), Some(charge.as_str()));
    let event = h.only_event(id).await;
    assert_eq!(event.0, "declined");
    assert_eq!(event.1["decline_code"], code.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_answer_the_database_keeps_refusing_is_counted_and_ends_in_review_with_why() {
    let h = harness_with_a_two_step_schedule().await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_AFTER).await;
    let charge_id = h.gateway.ledger()[0].id.clone();
    // The database refuses every charge id: the answer found can never be stored.
    h.refuse_charge_ids().await;
    let reconciler = h.reconciler();

    let first = reconciler.run_once().await.unwrap();
    assert_eq!(first.rescheduled(), 1, "{first:?}");
    let row = h.attempt(id).await;
    assert_eq!(row.status, "unknown");
    assert_eq!(row.next_run_at - row.updated_at, Duration::from_secs(60));
    let last_error = row.last_error.unwrap();
    assert!(
        last_error.contains("the gateway's answer could not be stored"),
        "{last_error}"
    );

    run_out_the_schedule(&h, &reconciler, id).await;

    let reason = h.review_reason(id).await;
    assert!(
        reason.contains("the gateway's answer could not be stored") && reason.contains(&charge_id),
        "{reason}"
    );
    assert_gave_up_after(&h, id, 3, "found").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_still_processing_is_never_reported_as_not_charged() {
    let h = Harness::still_processing(|s| s.executor.max_tries = 1).await;
    let id = unknown_attempt(&h, pm::FAULT_SLOW_CHARGE).await;
    assert!(h.gateway.ledger().is_empty(), "still processing");

    // The lookup finds nothing yet, and the attempt is past its retry limits: that proves
    // nothing while the send may still be in progress at the gateway.
    let report = h.reconciler().run_once().await.unwrap();

    assert_eq!(report.count(AttemptStatus::NeedsReview), 0, "{report:?}");
    assert_eq!(report.rescheduled(), 1);
    let row = h.attempt(id).await;
    assert_eq!(row.status, "unknown");
    let said = row.last_error.unwrap();
    assert!(said.contains("may still be in progress"), "{said}");
    assert!(!said.contains("not charged"), "{said}");
    // Due when the processing time has passed since the last send. The reconciler sends
    // the delay and the database adds it to its own `now()`, so allow the pass's own
    // duration between the two clocks' readings.
    let due = row.dispatched_at.unwrap() + h.settings.gateway_max_processing_time;
    let drift = (row.next_run_at - due).abs();
    assert!(
        drift < time::Duration::seconds(2),
        "next check at {}, expected {due}",
        row.next_run_at
    );
    assert!(h.events(id).await.is_empty(), "no needs-review event");
    assert_eq!(
        h.executor().run_once().await.unwrap().claimed(),
        0,
        "never re-sent"
    );

    // The gateway finishes: it charged.
    h.finish_slow_charge().await;
    assert_eq!(
        h.reconciler().run_once().await.unwrap().resolutions.len(),
        0,
        "not due before the gateway's maximum processing time"
    );
    h.advance(h.settings.gateway_max_processing_time).await;
    let report = h.reconciler().run_once().await.unwrap();

    assert_eq!(report.count(AttemptStatus::Succeeded), 1, "{report:?}");
    h.assert_charged_once(id).await;
    let causes = h.causes(id).await;
    assert!(!causes.iter().any(|c| c.contains("review")), "{causes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_found_past_the_gateways_processing_time_and_past_the_retry_limits_goes_to_review_saying_what_is_known(
) {
    let h = Harness::with(MockConfig::default(), |s| s.executor.max_tries = 1).await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_BEFORE).await;
    h.advance(h.settings.gateway_max_processing_time).await;
    let sent_at = h.attempt(id).await.dispatched_at.unwrap();

    let report = h.reconciler().run_once().await.unwrap();

    assert_eq!(report.count(AttemptStatus::NeedsReview), 1, "{report:?}");
    let reason = h.attempt(id).await.review_reason.unwrap();
    assert!(reason.contains("no charge under key"), "{reason}");
    assert!(
        reason.contains(&sent_at.to_string()),
        "names the last send: {reason}"
    );
    assert!(h.gateway.ledger().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_found_under_the_key_for_another_amount_is_never_adopted() {
    let h = Harness::new().await;
    let command = h.seed(pm::CARD_VISA).await;
    let id = command.payment_attempt_id;
    // Something charged under this attempt's key, but not this attempt's amount.
    let other = h
        .charge_directly(&support::charge_request_with_amount(&command, 5000))
        .await;
    assert_eq!(other.http_status, Some(201));
    let now = h.now().format(&Rfc3339).unwrap();
    h.set_attempt(
        id,
        &format!(
            "status = 'unknown', tries = 1, first_dispatched_at = '{now}',
             dispatched_at = '{now}', next_run_at = '{now}'"
        ),
    )
    .await;

    let report = h.reconciler().run_once().await.unwrap();

    assert_eq!(report.count(AttemptStatus::Succeeded), 0, "{report:?}");
    assert_eq!(report.count(AttemptStatus::NeedsReview), 1, "{report:?}");
    let row = h.attempt(id).await;
    assert_eq!(row.gateway_charge_id, None, "not adopted");
    let reason = row.review_reason.unwrap();
    assert!(reason.contains("amount_minor 5000"), "{reason}");
    assert_eq!(h.events(id).await[0].0, "needs_review");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_answered_404_by_a_wrong_url_is_checked_again_without_using_up_the_schedule() {
    let h = Harness::new().await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_AFTER).await;
    let wrong =
        h.reconciler_with(h.client_with_url(&format!("{}/wrong-prefix", h.gateway.base_url())));

    let report = wrong.run_once().await.unwrap();

    assert_eq!(report.rescheduled(), 1, "{report:?}");
    let row = h.attempt(id).await;
    assert_eq!(row.status, "unknown");
    assert!(row.last_error.unwrap().contains("gateway_url"));
    assert_eq!(
        h.attempt(id).await.reconcile_checks,
        0,
        "a configuration fault is not the attempt's check"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_that_works_never_ends_a_pause_that_charges_still_hit() {
    let h = Harness::new().await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_AFTER).await;
    h.seed(pm::CARD_VISA).await;
    // One health shared by a paused executor (its key may not charge) and a reconciler
    // whose lookups work.
    let misconfigured = h.executor_with(h.client_with_key("sk_cannot_charge"));
    assert_eq!(misconfigured.run_once().await.unwrap().claimed(), 1);
    assert!(misconfigured.health().credentials_rejected());
    let reconciler = onecharge::reconciler::Reconciler::new(
        h.store.clone(),
        h.client_with_key(support::API_KEY),
        misconfigured.health().clone(),
        &h.settings,
    )
    .with_clock(h.clock.clone());

    let report = reconciler.run_once().await.unwrap();

    assert_eq!(report.count(AttemptStatus::Succeeded), 1, "{report:?}");
    assert_eq!(h.attempt(id).await.status, "succeeded");
    assert!(
        misconfigured.health().credentials_rejected(),
        "still paused"
    );
    let next = misconfigured.run_once().await.unwrap();
    assert!(
        matches!(next.admission, onecharge::gateway::Admission::Wait { .. }),
        "{next:?}"
    );
    assert_eq!(next.claimed(), 0, "no charge sent with the rejected key");
}
