//! Bulk actions on a filtered set: a preview acts on nothing, a set past the cap (or the
//! caller's `max`) is refused whole, and every attempt acted on goes through the
//! single-attempt path with its own audit row, plus one row for the bulk action.

use crate::audit::{attempt_in_review, audit_rows};
use crate::support::{orders, Records, TestEnv};
use onecharge::config::Settings;
use onecharge::domain::Actor;
use onecharge::domain::PaymentAttemptId;
use onecharge::operator::bulk::{
    bulk, BulkAction, BulkError, BulkFilter, BulkOutcome, BulkRequest, BULK_CAP,
};
use onecharge::operator::{RetryWindow, Via};
use onecharge::reconciler::Reconciler;
use onecharge::store::Store;

fn retry(order_id: Option<&str>, preview: bool, max: Option<usize>) -> BulkRequest {
    BulkRequest {
        action: BulkAction::Retry,
        filter: BulkFilter {
            order_id: order_id.map(str::to_owned),
            ..Default::default()
        },
        reason: "gateway outage 12:00-12:20 is over".into(),
        preview,
        max,
        ids: None,
    }
}

/// [`bulk`] as `operator:alice` through `via`, within the retry window of `settings`.
async fn bulk_as_alice(
    store: &Store,
    settings: &Settings,
    reconciler: Option<&Reconciler>,
    request: &BulkRequest,
    via: Via,
) -> Result<BulkOutcome, BulkError> {
    let window = RetryWindow::from_settings(settings);
    bulk(
        store,
        reconciler,
        request,
        &Actor::operator("alice"),
        via,
        &window,
    )
    .await
}

/// Asserts that the bulk action matched `matched` attempts and each came out as `outcome`.
fn assert_each_came_out(done: &BulkOutcome, matched: usize, outcome: &str) {
    assert_eq!(done.matched, matched);
    assert!(
        done.results.iter().all(|r| r.outcome == outcome),
        "{:?}",
        done.results
    );
}

/// `onecharge attempts bulk-retry` of the order `ord_bulk_cli`, with `last` arguments.
async fn bulk_retry_cli(env: &TestEnv, last: &[&str]) -> (i32, String, String) {
    let order = [
        "attempts",
        "bulk-retry",
        "--order-id",
        "ord_bulk_cli",
        "--reason",
        "outage over",
    ];
    env.cli(&[&order[..], last].concat(), &[]).await
}

/// `n` attempts of `order_id` in review (see [`attempt_in_review`]).
async fn attempts_in_review(env: &TestEnv, n: usize, order_id: &str) -> Vec<PaymentAttemptId> {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(attempt_in_review(env, order_id).await);
    }
    ids
}

async fn statuses(env: &TestEnv, ids: &[PaymentAttemptId]) -> Vec<String> {
    let mut out = Vec::new();
    for id in ids {
        out.push(env.status(*id).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_preview_counts_and_lists_the_matching_attempts_and_acts_on_nothing() {
    let env = TestEnv::new().await;
    let mut ids = attempts_in_review(&env, 3, "ord_bulk_outage").await;
    attempt_in_review(&env, "ord_other").await;

    let preview = bulk_as_alice(
        &env.store,
        &env.settings,
        None,
        &retry(Some("ord_bulk_outage"), true, None),
        Via::Console,
    )
    .await
    .unwrap();

    assert!(preview.preview);
    assert_eq!(preview.matched, 3);
    let mut listed = preview.ids.clone();
    listed.sort();
    ids.sort();
    assert_eq!(listed, ids);
    assert!(preview.results.is_empty());
    assert_eq!(statuses(&env, &ids).await, vec!["needs_review"; 3]);
    assert!(
        audit_rows(&env).await.is_empty(),
        "a preview is not an action"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_retry_given_the_previewed_ids_acts_on_those_still_matching_and_on_no_other() {
    let env = TestEnv::new().await;
    let ids = attempts_in_review(&env, 3, "ord_bulk_ids").await;
    let preview = bulk_as_alice(
        &env.store,
        &env.settings,
        None,
        &retry(Some("ord_bulk_ids"), true, None),
        Via::Api,
    )
    .await
    .unwrap();
    assert_eq!(preview.ids.len(), 3, "a preview lists every match");
    // since the preview: one settled elsewhere, one new in review
    env.set_attempt(ids[0], "status = 'declined', review_reason = NULL")
        .await;
    let newcomer = attempt_in_review(&env, "ord_bulk_ids").await;

    let confirmed = BulkRequest {
        ids: Some(preview.ids.clone()),
        ..retry(Some("ord_bulk_ids"), false, None)
    };
    let outcome = bulk_as_alice(&env.store, &env.settings, None, &confirmed, Via::Api)
        .await
        .unwrap();
    assert_eq!(outcome.matched, 2);
    let mut acted = outcome.ids.clone();
    acted.sort();
    let mut expected = ids[1..].to_vec();
    expected.sort();
    assert_eq!(acted, expected);
    assert_eq!(
        statuses(&env, &ids).await,
        vec!["declined", "pending", "pending"]
    );
    assert_eq!(statuses(&env, &[newcomer]).await, vec!["needs_review"]);
    let left_alone: Vec<_> = outcome
        .results
        .iter()
        .filter(|r| r.outcome == "refused")
        .map(|r| r.payment_attempt_id)
        .collect();
    assert_eq!(left_alone, vec![ids[0]], "{:?}", outcome.results);

    // more ids than the cap are refused whole, as a filter matching more would be
    let too_many = BulkRequest {
        ids: Some(vec![newcomer; BULK_CAP + 1]),
        ..retry(Some("ord_bulk_ids"), false, None)
    };
    let refused = bulk_as_alice(&env.store, &env.settings, None, &too_many, Via::Api).await;
    assert!(
        matches!(refused, Err(BulkError::TooMany { .. })),
        "{refused:?}"
    );
    assert_eq!(statuses(&env, &[newcomer]).await, vec!["needs_review"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_retry_resolves_each_match_as_retry_and_audits_each_and_the_whole() {
    let env = TestEnv::new().await;
    let ids = attempts_in_review(&env, 3, "ord_bulk_retry").await;
    let untouched = attempt_in_review(&env, "ord_other").await;

    let outcome = bulk_as_alice(
        &env.store,
        &env.settings,
        None,
        &retry(Some("ord_bulk_retry"), false, Some(3)),
        Via::Api,
    )
    .await
    .unwrap();

    assert_each_came_out(&outcome, 3, "retried");
    assert_eq!(statuses(&env, &ids).await, vec!["pending"; 3]);
    assert_eq!(statuses(&env, &[untouched]).await, vec!["needs_review"]);
    let rows = audit_rows(&env).await;
    assert_eq!(rows.len(), 4, "one per attempt and one for the bulk action");
    assert!(rows[..3]
        .iter()
        .all(|r| r["action"] == "resolve_retry" && r["actor"] == "operator:alice"));
    let whole = &rows[3];
    assert_eq!(whole["action"], "bulk_retry");
    assert_eq!(whole["via"], "api");
    assert_eq!(whole["reason"], "gateway outage 12:00-12:20 is over");
    assert_eq!(whole["detail"]["filter"]["order_id"], "ord_bulk_retry");
    let mut audited: Vec<String> = whole["payment_attempt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    audited.sort();
    let mut expected: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    expected.sort();
    assert_eq!(audited, expected);
    assert_eq!(outcome.audit_id, whole["id"].as_i64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_set_larger_than_the_callers_max_is_refused_whole() {
    let env = TestEnv::new().await;
    let ids = attempts_in_review(&env, 3, "ord_bulk_max").await;

    let err = bulk_as_alice(
        &env.store,
        &env.settings,
        None,
        &retry(None, false, Some(2)),
        Via::Cli,
    )
    .await
    .unwrap_err();

    assert!(matches!(err, BulkError::TooMany { limit: 2, .. }), "{err}");
    assert_eq!(statuses(&env, &ids).await, vec!["needs_review"; 3]);
    assert!(audit_rows(&env).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_set_larger_than_the_cap_is_refused_even_without_a_max_and_even_as_a_preview() {
    let env = TestEnv::new().await;
    env.record(&orders(BULK_CAP + 1, "cap")).await;
    env.set_attempts_in(
        "pending",
        "status = 'needs_review', review_reason = 'outage'",
    )
    .await;

    for preview in [true, false] {
        let err = bulk_as_alice(
            &env.store,
            &env.settings,
            None,
            &retry(None, preview, None),
            Via::Cli,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(
                err,
                BulkError::TooMany {
                    limit: BULK_CAP,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("narrow the filter"), "{err}");
    }
    assert_eq!(env.attempts_in("needs_review").await, BULK_CAP as i64 + 1);
    assert!(audit_rows(&env).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_retry_from_the_command_line_dry_run_lists_and_the_real_run_acts() {
    let env = TestEnv::new().await;
    let id = attempt_in_review(&env, "ord_bulk_cli").await;

    let (code, stdout, stderr) = bulk_retry_cli(&env, &["--dry-run"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("1 attempt match") && stdout.contains(&id.to_string()),
        "{stdout}"
    );
    assert_eq!(statuses(&env, &[id]).await, vec!["needs_review"]);

    let (code, stdout, stderr) = bulk_retry_cli(&env, &["--max", "1"]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("1 retried"), "{stdout}");
    assert_eq!(statuses(&env, &[id]).await, vec!["pending"]);

    // A recheck names the state it looks up.
    let (code, _, stderr) = env
        .cli(
            &["attempts", "bulk-recheck", "--reason", "x", "--dry-run"],
            &[],
        )
        .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("status unknown or needs_review"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_recheck_settles_every_unknown_attempt_the_gateway_charged_and_audits_it() {
    use mock_gateway::payment_methods as pm;
    use onecharge::domain::AttemptStatus;

    let h = crate::support::Harness::new().await;
    let commands = h
        .seed_many(&[pm::FAULT_ERROR_AFTER, pm::FAULT_ERROR_AFTER])
        .await;
    let report = h.executor().run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Unknown), 2, "{report:?}");
    let request = BulkRequest {
        action: BulkAction::Recheck,
        filter: BulkFilter {
            status: Some(AttemptStatus::Unknown),
            ..Default::default()
        },
        reason: "INC-42 outage over".into(),
        preview: false,
        max: Some(2),
        ids: None,
    };

    let refused = bulk_as_alice(&h.store, &h.settings, None, &request, Via::Api)
        .await
        .unwrap_err();
    assert!(matches!(refused, BulkError::Unavailable(_)), "{refused}");

    let outcome = bulk_as_alice(
        &h.store,
        &h.settings,
        Some(&h.reconciler()),
        &request,
        Via::Api,
    )
    .await
    .unwrap();

    assert_each_came_out(&outcome, 2, "settled");
    assert_eq!(h.gateway.ledger().len(), 2, "the lookups charged nothing");
    for command in &commands {
        assert_eq!(
            h.attempt(command.payment_attempt_id).await.status,
            "succeeded"
        );
        assert_eq!(h.events(command.payment_attempt_id).await.len(), 1);
    }
    let actions: Vec<(String, String)> = h
        .audit_entries()
        .await
        .into_iter()
        .map(|e| (e.action, e.outcome))
        .collect();
    assert_eq!(
        actions,
        vec![
            ("recheck".into(), "settled".into()),
            ("recheck".into(), "settled".into()),
            ("bulk_recheck".into(), "done".into()),
        ]
    );
}
