//! `attempts recheck` / `POST /api/attempts/{id}/recheck`: the reconciler's lookup for one
//! attempt, now, on a person's request — settling what the answer settles, refusing states a
//! lookup has nothing to say about, and auditing what it found and did.

use crate::support::{Harness, Records};
use mock_gateway::payment_methods as pm;
use onecharge::domain::Actor;
use onecharge::domain::{AttemptStatus, PaymentAttemptId};
use onecharge::operator::audit::{self, AuditFilter};
use onecharge::operator::recheck::{recheck, RecheckError};
use onecharge::operator::Via;
use serde_json::Value;

/// Seeds an attempt and lets the executor take it to `unknown` through `payment_method`'s
/// fault.
async fn unknown_attempt(h: &Harness, payment_method: &str) -> PaymentAttemptId {
    let command = h.seed(payment_method).await;
    let report = h.executor().run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Unknown), 1, "{report:?}");
    command.payment_attempt_id
}

async fn audit_rows(h: &Harness) -> Vec<Value> {
    audit::list(&h.store, &AuditFilter::default(), 0)
        .await
        .unwrap()
        .items
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_of_an_unknown_attempt_the_gateway_charged_settles_it_with_its_event_and_audit_row(
) {
    let h = Harness::new().await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_AFTER).await;
    // Not due yet: a recheck does not wait for the reconciler's schedule.
    h.set_attempt(id, "next_run_at = now() + interval '1 hour'")
        .await;

    let report = recheck(
        &h.reconciler(),
        id,
        &Actor::operator("alice"),
        Via::Cli,
        Some("customer says they were charged"),
    )
    .await
    .unwrap();

    // one charge (the lookup charged nothing), adopted, with one `succeeded` event
    h.assert_charged_once(id).await;
    assert_eq!(report.before, AttemptStatus::Unknown);
    assert_eq!(report.after, AttemptStatus::Succeeded);
    assert_eq!(
        report.gateway_charge_id.as_deref(),
        Some(h.gateway.ledger()[0].id.as_str())
    );
    let last = h.last_transition(id).await;
    assert_eq!(
        (last.actor.as_str(), last.cause.as_str()),
        ("operator:alice", "lookup_found_charge")
    );
    let calls = h.gateway_calls(id).await;
    assert_eq!(calls.last().unwrap().3, "found", "the lookup is evidence");

    let rows = audit_rows(&h).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["actor"], "operator:alice");
    assert_eq!(rows[0]["via"], "cli");
    assert_eq!(rows[0]["action"], "recheck");
    assert_eq!(rows[0]["outcome"], "settled");
    assert_eq!(rows[0]["reason"], "customer says they were charged");
    assert_eq!(rows[0]["payment_attempt_ids"][0], id.to_string());
    assert_eq!(rows[0]["detail"]["after"], "succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_of_a_pending_attempt_is_refused_and_asks_the_gateway_nothing() {
    let h = Harness::new().await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;

    let err = recheck(
        &h.reconciler(),
        id,
        &Actor::operator("alice"),
        Via::Cli,
        None,
    )
    .await
    .unwrap_err();

    match err {
        RecheckError::Refused(why) => {
            assert!(
                why.contains("pending") && why.contains("unknown and needs_review"),
                "{why}"
            )
        }
        other => panic!("expected a refusal, got {other}"),
    }
    assert!(h.gateway.requests().is_empty(), "no lookup");
    assert_eq!(h.attempt(id).await.status, "pending");
    assert!(audit_rows(&h).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_of_a_needs_review_attempt_that_finds_nothing_leaves_it_in_review_and_resends_nothing(
) {
    let h = Harness::new().await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_BEFORE).await;
    h.set_attempt(
        id,
        "status = 'needs_review', review_reason = 'lookups failed'",
    )
    .await;
    let charges_before = h.gateway.ledger().len();

    let report = recheck(&h.reconciler(), id, &Actor::AdminApi, Via::Api, None)
        .await
        .unwrap();

    assert_eq!(report.after, AttemptStatus::NeedsReview, "{report:?}");
    assert!(report.did.contains("stays in needs_review"), "{report:?}");
    assert_eq!(h.attempt(id).await.status, "needs_review");
    assert_eq!(h.gateway.ledger().len(), charges_before, "nothing re-sent");
    let rows = audit_rows(&h).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["outcome"], "unchanged");
    assert_eq!(rows[0]["via"], "api");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recheck_endpoint_answers_409_for_a_pending_attempt_and_settles_an_unknown_one() {
    let mut h = Harness::new().await;
    let pending = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    let unknown = unknown_attempt(&h, pm::FAULT_ERROR_AFTER).await;
    let reconciler = h.reconciler();
    let admin = h.serve_admin(None, Some(reconciler)).await;
    let addr = admin.addr;
    let http = reqwest::Client::new();

    let refused = http
        .post(format!("http://{addr}/api/attempts/{pending}/recheck"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["type"], "conflict");

    let settled = http
        .post(format!("http://{addr}/api/attempts/{unknown}/recheck"))
        .json(&serde_json::json!({"reason": "support ticket 42"}))
        .send()
        .await
        .unwrap();
    assert_eq!(settled.status(), 200);
    let body: Value = settled.json().await.unwrap();
    assert_eq!(body["after"], "succeeded", "{body}");
    assert_eq!(h.attempt(unknown).await.status, "succeeded");
    let rows = audit_rows(&h).await;
    assert_eq!(rows.len(), 1, "the refusal is not audited: {rows:?}");
    assert_eq!(rows[0]["actor"], "admin-api");
    assert_eq!(rows[0]["reason"], "support ticket 42");

    admin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recheck_from_the_command_line_refuses_a_pending_attempt_with_exit_2_and_says_why() {
    let env = crate::support::TestEnv::new().await;
    let attempt = env.record_command(serde_json::json!({}), None).await;

    let (code, stdout, stderr) = env
        .cli(
            &["attempts", "recheck", &attempt.to_string(), "--reason", "x"],
            &[
                ("ONECHARGE_GATEWAY_URL", "http://127.0.0.1:9"),
                ("ONECHARGE_GATEWAY_API_KEY", "sk_test_unused"),
            ],
        )
        .await;

    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("is pending") && stderr.contains("only unknown and needs_review"),
        "{stderr}"
    );
    assert!(
        env.audit_entries().await.is_empty(),
        "a refusal is not audited"
    );
    let attempts = env.all_attempts().await;
    let untouched = attempts
        .iter()
        .filter(|a| a.status == "pending" && a.lease_token == 0);
    assert_eq!(untouched.count(), 1, "the attempt was not touched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_takes_its_lookup_from_the_fleet_wide_gateway_rate_limit() {
    let h = Harness::with_rate_limit(1000.0, 10).await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_AFTER).await;
    let taken_before = last_take(&h).await;

    let report = recheck(
        &h.reconciler(),
        id,
        &Actor::operator("alice"),
        Via::Cli,
        None,
    )
    .await
    .unwrap();

    assert_eq!(report.after, AttemptStatus::Succeeded);
    let taken_after = last_take(&h).await;
    assert!(
        taken_after > taken_before,
        "the recheck's lookup took a token from the bucket ({taken_before} -> {taken_after})"
    );
}

/// When the fleet's bucket was last taken from (every take moves it, by the database clock).
async fn last_take(h: &Harness) -> time::OffsetDateTime {
    h.bucket_last_take().await
}

/// Runs a recheck of `id` with a deadline far past the recheck's own bound: a recheck that
/// never returns fails the test instead of hanging it.
async fn bounded_recheck(
    h: &Harness,
    id: PaymentAttemptId,
) -> Result<onecharge::operator::recheck::Recheck, RecheckError> {
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        recheck(
            &h.reconciler(),
            id,
            &Actor::operator("alice"),
            Via::Cli,
            None,
        ),
    )
    .await
    .expect("the recheck returned within a minute instead of waiting for permits forever")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_refused_rate_permits_gives_up_and_says_the_rate_limit_stopped_it() {
    // One token, refilled every 100 s: the executor's charge takes it.
    let h = Harness::with_rate_limit(0.01, 1).await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_AFTER).await;

    let err = bounded_recheck(&h, id).await.unwrap_err();

    assert!(matches!(err, RecheckError::Unavailable(_)), "{err:?}");
    assert!(err.to_string().contains("gateway_max_rate"), "{err}");
    assert_eq!(h.attempt(id).await.status, "unknown");
    assert_eq!(
        h.gateway_calls_of("lookup").await,
        0,
        "nothing was asked of the gateway"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_whose_rate_bucket_the_database_cannot_answer_gives_up_and_says_so() {
    let h = Harness::with_rate_limit(1000.0, 10).await;
    let id = unknown_attempt(&h, pm::FAULT_ERROR_AFTER).await;
    // Every take from the bucket now fails in the database.
    h.rename_table("gateway_rate_buckets", "gateway_rate_buckets_gone")
        .await;

    let err = bounded_recheck(&h, id).await.unwrap_err();

    assert!(matches!(err, RecheckError::Unavailable(_)), "{err:?}");
    assert!(err.to_string().contains("gateway_rate_buckets"), "{err}");
    assert_eq!(h.attempt(id).await.status, "unknown");
}
