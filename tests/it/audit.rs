//! The audit trail: every manual action leaves one `operator_audit` row — who, through what,
//! what, on which attempts (or dead letter), why and what came of it — and `audit list` /
//! `GET /api/audit` read it back, newest first.

use crate::support::Records;
use crate::support::{command_file, TestEnv};
use onecharge::domain::PaymentAttemptId;
use onecharge::operator::audit::{self, AuditFilter};
use onecharge::operator::resolve::{ResolveAs, ResolveError, ResolveRequest};
use onecharge::operator::Via;
use serde_json::{json, Value};
use uuid::Uuid;

/// Records one attempt the way intake does and puts it into `needs_review`, never sent.
pub async fn attempt_in_review(env: &TestEnv, order_id: &str) -> PaymentAttemptId {
    let attempt = env
        .record_command(json!({"order_id": order_id}), Some("corr-audit"))
        .await;
    env.set_attempt(
        attempt,
        "status = 'needs_review', review_reason = 'cannot prove whether the customer was charged'",
    )
    .await;
    attempt.into()
}

/// Every audit row, oldest first, as JSON.
pub async fn audit_rows(env: &TestEnv) -> Vec<Value> {
    let page = audit::list(&env.store, &AuditFilter::default(), 0)
        .await
        .unwrap();
    let mut rows: Vec<Value> = page
        .items
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    rows.reverse();
    rows
}

fn declined(reason: &str) -> ResolveRequest {
    ResolveRequest {
        as_: ResolveAs::Declined,
        reason: reason.into(),
        gateway_charge_id: None,
        decline_code: Some("do_not_honor".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolve_writes_one_audit_row_saying_who_what_why_and_on_which_attempt() {
    let env = TestEnv::new().await;
    let id = attempt_in_review(&env, "ord_audit_1").await;

    let resolved = env
        .resolve(
            id,
            &declined("customer's bank confirmed no charge"),
            "operator:alice",
            Via::Console,
        )
        .await
        .unwrap();

    let rows = audit_rows(&env).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row["actor"], "operator:alice");
    assert_eq!(row["via"], "console");
    assert_eq!(row["action"], "resolve_declined");
    assert_eq!(row["payment_attempt_ids"], json!([id.to_string()]));
    assert_eq!(row["reason"], "customer's bank confirmed no charge");
    assert_eq!(row["outcome"], "applied");
    assert_eq!(row["detail"]["to"], "declined");
    assert_eq!(row["detail"]["decline_code"], "do_not_honor");
    assert_eq!(
        row["detail"]["event_id"],
        resolved.event_id.unwrap().to_string()
    );

    // A refused decision (the attempt is no longer in review) writes nothing.
    let err = env
        .resolve(id, &declined("again"), "operator:bob", Via::Api)
        .await
        .unwrap_err();
    assert!(matches!(err, ResolveError::Refused(_)), "{err}");
    assert_eq!(
        audit_rows(&env).await.len(),
        1,
        "a refusal is not an action"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolve_from_the_command_line_is_audited_and_audit_list_shows_it_filtered() {
    let env = TestEnv::new().await;
    let retried = attempt_in_review(&env, "ord_audit_2").await;
    let other = attempt_in_review(&env, "ord_audit_3").await;
    env.resolve(other, &declined("someone else"), "operator:zed", Via::Api)
        .await
        .unwrap();

    let id = retried.to_string();
    let (code, stdout, stderr) = env.cli_resolve(&id, "retry", "gateway outage over").await;
    assert_eq!(code, 0, "{stdout}{stderr}");

    let actor = format!("operator:{}", crate::support::env::OPERATOR);
    let (code, stdout, stderr) = env
        .cli(&["audit", "list", "--json", "--actor", &actor], &[])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rows.len(), 1, "only this actor's: {rows:?}");
    assert_eq!(rows[0]["action"], "resolve_retry");
    assert_eq!(rows[0]["via"], "cli");
    assert_eq!(rows[0]["reason"], "gateway outage over");
    assert_eq!(rows[0]["payment_attempt_ids"], json!([id]));

    let (code, stdout, _) = env
        .cli(&["audit", "list", "--attempt", &other.to_string()], &[])
        .await;
    assert_eq!(code, 0);
    assert!(
        stdout.contains("operator:zed") && !stdout.contains(&actor),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlq_replay_is_audited_with_the_dead_letter_and_the_new_message_id() {
    let env = TestEnv::new().await;
    let attempt = Uuid::new_v4();
    let intake = env.intake().await;
    let sequence = env
        .dead_letter_invalid(&intake, "m-audit-dlq", attempt)
        .await;

    let dir = tempfile::tempdir().unwrap();
    let fixed = command_file(dir.path(), attempt, json!({"currency": "EUR"}));
    let (code, stdout, stderr) = env
        .cli(
            &[
                "dlq",
                "replay",
                &sequence.to_string(),
                "--body-file",
                fixed.to_str().unwrap(),
                "--reason",
                "currency typo fixed",
            ],
            &[],
        )
        .await;
    assert_eq!(code, 0, "{stdout}{stderr}");

    let rows = audit_rows(&env).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(
        row["actor"],
        format!("operator:{}", crate::support::env::OPERATOR)
    );
    assert_eq!(row["action"], "dlq_replay");
    assert_eq!(row["dlq_sequence"], sequence);
    assert_eq!(row["reason"], "currency typo fixed");
    assert_eq!(row["payment_attempt_ids"], json!([attempt.to_string()]));
    assert_eq!(
        row["detail"]["message_id"],
        format!("m-audit-dlq-replay-{sequence}")
    );
    assert_eq!(row["detail"]["body_corrected"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_pages_walk_the_trail_newest_first_without_repeating_a_row() {
    let env = TestEnv::new().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let id = attempt_in_review(&env, &format!("ord_page_{i}")).await;
        env.resolve(id, &declined("bulk cleanup"), "admin-api", Via::Api)
            .await
            .unwrap();
        ids.push(id);
    }

    let mut seen = Vec::new();
    let mut filter = AuditFilter::default();
    loop {
        let page = audit::list(&env.store, &filter, 2).await.unwrap();
        seen.extend(page.items.iter().map(|e| e.payment_attempt_ids[0]));
        match page.next {
            Some(next) => filter.before_id = Some(next),
            None => break,
        }
    }
    ids.reverse();
    assert_eq!(seen, ids, "every action once, newest first");
}
