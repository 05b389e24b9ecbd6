//! Operator tooling against real PostgreSQL and real NATS: `attempts resolve | stuck | show |
//! list`, `dlq list | replay` and `purge`, through the library and through the built binary
//! exactly as an operator types them. Each test asserts rows, events and JSON.

use std::time::Duration;

use crate::support::{
    command, command_file, commands_stream, edit_stream, eventually, header, intake_record,
    Records, Served, TestEnv,
};
use onecharge::domain::{AttemptStatus, PaymentAttemptId};
use onecharge::intake::{DeliveryOutcome, DlqClass};
use onecharge::operator::resolve::{ResolveAs, ResolveError, ResolveRequest};
use onecharge::operator::Via;
use onecharge::purge::{purge_once, PurgeRefused, PurgeReport};
use onecharge::store::intake::{IntakeRecord, Recorded};
use serde_json::{json, Value};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(5);
const OPERATOR: &str = crate::support::env::OPERATOR;

/// The record intake would make for a valid command with this message id.
fn record(attempt: Uuid, message_id: &str) -> IntakeRecord {
    let order_id = format!("ord_{}", &attempt.simple().to_string()[..8]);
    let body = command(
        attempt,
        json!({"order_id": order_id, "description": null, "requested_at": null}),
    );
    intake_record(&body, message_id, Some("corr-ops"))
}

/// Records `n` pending attempts the way intake does; returns their ids in order.
async fn seed(env: &TestEnv, n: usize) -> Vec<PaymentAttemptId> {
    let records: Vec<IntakeRecord> = (0..n)
        .map(|i| record(Uuid::new_v4(), &format!("seed-{i}-{}", Uuid::new_v4())))
        .collect();
    env.record(&records).await;
    records
        .iter()
        .map(|r| r.command.payment_attempt_id)
        .collect()
}

/// Puts `id` into `needs_review`, first sent `first_sent` ago and recorded `age` ago.
async fn put_in_review(env: &TestEnv, id: PaymentAttemptId, first_sent: Option<&str>, age: &str) {
    let first = first_sent
        .map(|ago| format!("now() - interval '{ago}'"))
        .unwrap_or_else(|| "NULL".into());
    env.set_attempt(
        id,
        &format!(
            "status = 'needs_review', tries = 3, reconcile_checks = 6,
             review_reason = 'cannot prove whether the customer was charged',
             last_error = 'lookup failed: 503', first_dispatched_at = {first},
             dispatched_at = {first}, created_at = now() - interval '{age}'"
        ),
    )
    .await;
}

/// Runs the built `onecharge` binary against this test's database and namespace (see
/// [`TestEnv::cli`]) with `extra_env` added, as the operator [`OPERATOR`].
async fn cli(env: &TestEnv, args: &[&str], extra_env: &[(&str, &str)]) -> (i32, String, String) {
    env.cli(args, extra_env).await
}

fn request(as_: ResolveAs, charge: Option<&str>) -> ResolveRequest {
    ResolveRequest {
        as_,
        reason: "checked the gateway dashboard".into(),
        gateway_charge_id: charge.map(str::to_owned),
        decline_code: None,
    }
}

/// Resolves `id` as `as_` (with the usual reason, no charge id) through the library, which
/// must refuse; its error.
async fn resolve_fails(env: &TestEnv, id: PaymentAttemptId, as_: ResolveAs) -> ResolveError {
    env.resolve(id, &request(as_, None), "operator:t", Via::Cli)
        .await
        .expect_err("the resolve is refused")
}

#[tokio::test]
async fn resolve_refuses_an_attempt_that_is_not_in_review_and_changes_nothing() {
    let env = TestEnv::new().await;
    let ids = seed(&env, 1).await;
    let pending = ids[0];

    let err = resolve_fails(&env, pending, ResolveAs::Declined).await;
    assert!(matches!(err, ResolveError::Refused(_)), "{err:?}");
    assert!(
        err.to_string().contains("is pending, not needs_review"),
        "{err}"
    );

    // the same through the binary: a runtime refusal, exit 1, one line
    let id = pending.to_string();
    let (code, stdout, stderr) = env.cli_resolve(&id, "retry", "try again").await;
    assert_eq!(code, 1, "stdout: {stdout} stderr: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("not needs_review") && stderr.contains("the executor owns it"),
        "{stderr}"
    );

    assert_eq!(env.status(pending).await, "pending");
    assert_eq!(env.history(pending).await.len(), 1);
    assert!(env.outbox().await.is_empty());

    let unknown = PaymentAttemptId::random();
    let err = resolve_fails(&env, unknown, ResolveAs::Declined).await;
    assert!(
        matches!(err, ResolveError::NotFound(id) if id == unknown),
        "{err:?}"
    );
}

#[tokio::test]
async fn resolving_as_succeeded_records_the_charge_the_reason_the_os_user_and_one_event() {
    let env = TestEnv::new().await;
    let id = seed(&env, 1).await[0];
    put_in_review(&env, id, Some("2 hours"), "3 hours").await;
    let id_text = id.to_string();

    // --as succeeded without the charge id is a usage error: exit 2, nothing changes
    let (code, _, stderr) = env
        .cli_resolve(&id_text, "succeeded", "seen in dashboard")
        .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--gateway-charge-id"), "{stderr}");
    assert_eq!(env.status(id).await, "needs_review");

    let (code, stdout, stderr) = cli(
        &env,
        &[
            "attempts",
            "resolve",
            &id_text,
            "--as",
            "succeeded",
            "--gateway-charge-id",
            "ch_dash_1",
            "--reason",
            "seen in dashboard",
        ],
        &[],
    )
    .await;
    assert_eq!(code, 0, "stdout: {stdout} stderr: {stderr}");
    assert!(
        stdout.contains("needs_review -> succeeded") && stdout.contains("operator:test-operator"),
        "{stdout}"
    );

    let row: (String, Option<String>, Option<String>) = env
        .attempt_columns(id, "status, gateway_charge_id, review_reason")
        .await;
    assert_eq!(
        (row.0.as_str(), row.1.as_deref()),
        ("succeeded", Some("ch_dash_1"))
    );
    let last = env.last_transition(id).await;
    assert_eq!(
        (
            last.from_status.as_deref(),
            last.to_status.as_str(),
            last.cause.as_str(),
            last.actor.as_str()
        ),
        (
            Some("needs_review"),
            "succeeded",
            "operator_resolved",
            "operator:test-operator"
        )
    );
    assert!(last.detail.unwrap().contains("seen in dashboard"));
    let events = env.events(id).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "succeeded");
    assert_eq!(events[0].1["gateway_charge_id"], "ch_dash_1");
    assert_eq!(events[0].1["status"], "succeeded");
    assert!(events[0].1["reason"]
        .as_str()
        .unwrap()
        .contains("seen in dashboard"));

    // resolving again is refused: it is final now
    let (code, _, stderr) = env.cli_resolve(&id_text, "declined", "oops").await;
    assert_eq!(code, 1);
    assert!(
        stderr.contains("is succeeded, not needs_review") && stderr.contains("final"),
        "{stderr}"
    );
    assert_eq!(env.events(id).await.len(), 1);
}

#[tokio::test]
async fn resolving_as_declined_settles_the_attempt_with_a_declined_event() {
    let env = TestEnv::new().await;
    let id = seed(&env, 1).await[0];
    put_in_review(&env, id, Some("30 minutes"), "40 minutes").await;

    let resolved = env
        .resolve(
            id,
            &ResolveRequest {
                decline_code: Some("card_declined".into()),
                ..request(ResolveAs::Declined, None)
            },
            "operator:alice",
            Via::Cli,
        )
        .await
        .unwrap();

    assert_eq!(resolved.status, AttemptStatus::Declined);
    let row: (String, Option<String>) = env.attempt_columns(id, "status, decline_code").await;
    assert_eq!(
        (row.0.as_str(), row.1.as_deref()),
        ("declined", Some("card_declined"))
    );
    let events = env.events(id).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "declined");
    assert_eq!(events[0].1["decline_code"], "card_declined");
    assert_eq!(
        events[0].1["event_id"],
        resolved.event_id.unwrap().to_string()
    );
    let last = env.last_transition(id).await;
    assert_eq!(
        (last.to_status.as_str(), last.actor.as_str()),
        ("declined", "operator:alice")
    );
}

#[tokio::test]
async fn a_retry_inside_the_key_window_requeues_the_attempt_with_the_same_key_and_no_event() {
    let env = TestEnv::new().await;
    let ids = seed(&env, 2).await;
    let (sent, never_sent) = (ids[0], ids[1]);
    put_in_review(&env, sent, Some("30 minutes"), "40 minutes").await;
    // never sent: the gateway has not seen the key, so any age may be retried
    put_in_review(&env, never_sent, None, "3 days").await;

    for id in [sent, never_sent] {
        let resolved = env
            .resolve(
                id,
                &request(ResolveAs::Retry, None),
                "operator:bob",
                Via::Cli,
            )
            .await
            .unwrap();
        assert_eq!(
            (resolved.status, resolved.event_id),
            (AttemptStatus::Pending, None)
        );
        let row: (String, Option<String>, i32, String, bool) = env
            .attempt_columns(
                id,
                "status, review_reason, reconcile_checks, idempotency_key, next_run_at <= now()",
            )
            .await;
        assert_eq!(
            row,
            ("pending".into(), None, 0, format!("onecharge-{id}"), true)
        );
        let last = env.last_transition(id).await;
        assert_eq!(
            (
                last.from_status.as_deref(),
                last.to_status.as_str(),
                last.cause.as_str()
            ),
            (Some("needs_review"), "pending", "operator_resolved")
        );
    }
    assert!(env.outbox().await.is_empty());
}

#[tokio::test]
async fn a_retry_outside_the_key_window_is_refused_saying_it_could_charge_twice() {
    let env = TestEnv::new().await;
    let ids = seed(&env, 2).await;
    let (forgotten, too_old) = (ids[0], ids[1]);
    // first sent 23h30m ago: past 24h retention minus the 1h margin
    put_in_review(
        &env,
        forgotten,
        Some("23 hours 30 minutes"),
        "23 hours 31 minutes",
    )
    .await;
    // first sent 30m ago, but recorded 2h ago: past executor.max_age (1h)
    put_in_review(&env, too_old, Some("30 minutes"), "2 hours").await;

    let err = resolve_fails(&env, forgotten, ResolveAs::Retry).await;
    let text = err.to_string();
    assert!(matches!(err, ResolveError::Refused(_)));
    assert!(
        text.contains(&format!(
            "the gateway may have forgotten key onecharge-{forgotten}; a retry could charge twice"
        )),
        "{text}"
    );

    let id = too_old.to_string();
    let (code, _, stderr) = env.cli_resolve(&id, "retry", "gateway was down").await;
    assert_eq!(code, 1);
    assert!(stderr.contains("past executor.max_age"), "{stderr}");

    for id in [forgotten, too_old] {
        assert_eq!(env.status(id).await, "needs_review");
        assert_eq!(
            env.last_transition(id).await.to_status,
            "pending",
            "only the seed's transition"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_operators_resolving_one_attempt_at_once_settle_it_exactly_once() {
    let env = TestEnv::new().await;
    let id = seed(&env, 1).await[0];
    put_in_review(&env, id, Some("10 minutes"), "20 minutes").await;
    let succeeded = request(ResolveAs::Succeeded, Some("ch_a"));
    let declined = request(ResolveAs::Declined, None);

    let (a, b) = tokio::join!(
        env.resolve(id, &succeeded, "operator:a", Via::Cli),
        env.resolve(id, &declined, "operator:b", Via::Cli),
    );

    let loser = match (a, b) {
        (Ok(_), Err(loser)) | (Err(loser), Ok(_)) => loser,
        other => panic!("exactly one decision must win: {other:?}"),
    };
    assert!(matches!(loser, ResolveError::Refused(_)), "{loser:?}");
    assert_eq!(env.outbox().await.len(), 1);
    assert_eq!(env.transitions_caused_by("operator_resolved").await, 1);
}

#[tokio::test]
async fn stuck_shows_old_unsettled_attempts_and_every_review_with_last_response_and_next_action() {
    let env = TestEnv::new().await;
    let ids = seed(&env, 5).await;
    let (retrying, unknown, review, young, done) = (ids[0], ids[1], ids[2], ids[3], ids[4]);
    env.exec(&format!(
        "UPDATE payment_attempts SET tries = 2, created_at = now() - interval '50 minutes',
             first_dispatched_at = now() - interval '45 minutes', next_run_at = now() + interval '5 minutes',
             last_error = 'gateway answered 503'
         WHERE payment_attempt_id = '{retrying}';
         INSERT INTO gateway_calls (payment_attempt_id, operation, idempotency_key, try_number,
             started_at, finished_at, http_status, outcome, error)
         VALUES ('{retrying}', 'charge', 'onecharge-{retrying}', 2, now() - interval '2 minutes',
             now() - interval '119 seconds', 503, 'ambiguous', 'HTTP 503');
         UPDATE payment_attempts SET status = 'unknown', tries = 1, created_at = now() - interval '30 minutes',
             last_error = 'request timed out', next_run_at = now() + interval '1 minute'
         WHERE payment_attempt_id = '{unknown}';
         UPDATE payment_attempts SET status = 'succeeded', gateway_charge_id = 'ch_1',
             created_at = now() - interval '2 hours'
         WHERE payment_attempt_id = '{done}';"
    ))
    .await;
    // in review since moments ago: listed whatever its age
    put_in_review(&env, review, Some("1 minute"), "2 minutes").await;

    let stuck: Vec<Value> = env
        .cli_json(&["attempts", "stuck", "--older-than", "15m", "--json"])
        .await;

    let order: Vec<&str> = stuck
        .iter()
        .map(|a| a["payment_attempt_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        vec![
            retrying.to_string(),
            unknown.to_string(),
            review.to_string()
        ],
        "oldest first; the young pending and the final one are not stuck"
    );
    for attempt in &stuck {
        for field in [
            "payment_attempt_id",
            "status",
            "order_id",
            "amount_minor",
            "currency",
            "tries",
            "gateway_charge_id",
            "last_error",
            "next_run_at",
            "created_at",
            "updated_at",
        ] {
            assert!(attempt.get(field).is_some(), "{field} missing in {attempt}");
        }
    }
    let first = &stuck[0];
    assert_eq!(first["status"], "pending");
    assert_eq!(first["tries"], 2);
    assert_eq!(first["last_error"], "gateway answered 503");
    assert!(first["age_seconds"].as_i64().unwrap() >= 50 * 60);
    assert_eq!(first["last_gateway_call"]["http_status"], 503);
    assert_eq!(first["last_gateway_call"]["outcome"], "ambiguous");
    assert_eq!(first["next_action"]["by"], "executor");
    assert_eq!(first["next_action"]["action"], "executor retries (try 3)");
    assert_eq!(first["next_action"]["at"], first["next_run_at"]);
    assert_eq!(stuck[1]["next_action"]["by"], "reconciler");
    assert_eq!(stuck[1]["last_gateway_call"], Value::Null);
    assert_eq!(stuck[2]["status"], "needs_review");
    assert_eq!(
        stuck[2]["review_reason"],
        "cannot prove whether the customer was charged"
    );
    assert_eq!(stuck[2]["next_action"]["by"], "operator");
    assert_eq!(stuck[2]["next_action"]["at"], Value::Null);

    let (code, table, _) = cli(&env, &["attempts", "stuck"], &[]).await;
    assert_eq!(code, 0);
    assert!(
        table.starts_with("3 attempts need attention: 1 in needs_review, 2 unsettled for more than 15m; oldest first"),
        "{table}"
    );
    assert!(
        table.contains("NEXT ACTION") && table.contains("charge 503 ambiguous"),
        "{table}"
    );
    assert!(!table.contains(&young.to_string()) && !table.contains(&done.to_string()));
}

#[tokio::test]
async fn list_is_newest_first_filtered_by_status_and_limited() {
    let env = TestEnv::new().await;
    let ids = seed(&env, 4).await;
    for (i, id) in ids.iter().enumerate() {
        let created_at = format!("created_at = now() - interval '{i} minutes'");
        env.set_attempt(*id, &created_at).await;
    }
    env.set_attempt(ids[0], "status = 'expired'").await;

    let listed: Vec<Value> = env
        .cli_json(&[
            "attempts", "list", "--status", "pending", "--limit", "2", "--json",
        ])
        .await;
    let got: Vec<&str> = listed
        .iter()
        .map(|a| a["payment_attempt_id"].as_str().unwrap())
        .collect();
    assert_eq!(got, vec![ids[1].to_string(), ids[2].to_string()]);

    let (_, stdout, _) = cli(&env, &["attempts", "list", "--limit", "0", "--json"], &[]).await;
    assert_eq!(
        serde_json::from_str::<Vec<Value>>(&stdout).unwrap().len(),
        4
    );

    let (code, _, stderr) = cli(&env, &["attempts", "list", "--status", "done"], &[]).await;
    assert_eq!(code, 2, "an unknown status is a usage error: {stderr}");
}

#[tokio::test]
async fn show_json_has_the_attempt_with_its_transitions_gateway_calls_and_events() {
    let env = TestEnv::new().await;
    let id = seed(&env, 1).await[0];
    env.exec(&format!(
        "INSERT INTO gateway_calls (payment_attempt_id, operation, idempotency_key, try_number,
             started_at, finished_at, http_status, outcome, error)
         VALUES ('{id}', 'charge', 'onecharge-{id}', 1, now() - interval '10 minutes',
             now() - interval '9 minutes', NULL, 'ambiguous', 'request timed out'),
                ('{id}', 'lookup', 'onecharge-{id}', 1, now() - interval '5 minutes',
             now() - interval '299 seconds', 200, 'found', NULL)"
    ))
    .await;
    put_in_review(&env, id, Some("10 minutes"), "11 minutes").await;
    env.resolve(
        id,
        &request(ResolveAs::Succeeded, Some("ch_found")),
        "operator:carol",
        Via::Cli,
    )
    .await
    .unwrap();

    let id_text = id.to_string();
    let shown: Value = env
        .cli_json(&["attempts", "show", &id_text, "--json"])
        .await;
    assert_eq!(shown["payment_attempt_id"], id_text);
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["gateway_charge_id"], "ch_found");
    let causes: Vec<&str> = shown["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["cause"].as_str().unwrap())
        .collect();
    assert_eq!(causes, vec!["command_accepted", "operator_resolved"]);
    assert_eq!(shown["transitions"][1]["actor"], "operator:carol");
    let calls = shown["gateway_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["operation"], "charge");
    assert_eq!(calls[0]["http_status"], Value::Null);
    assert_eq!(calls[0]["duration_ms"], 60_000);
    assert_eq!(calls[1]["outcome"], "found");
    let events = shown["events"].as_array().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["status"], "succeeded");
    assert_eq!(events[0]["subject"], "payments.events.payment-succeeded.v1");
    assert_eq!(events[0]["published_at"], Value::Null);

    let (code, timeline, _) = cli(&env, &["attempts", "show", &id_text], &[]).await;
    assert_eq!(code, 0);
    for expected in [
        "TIME (UTC)",
        "new -> pending (command_accepted)",
        "charge try 1 -> no answer ambiguous",
        "needs_review -> succeeded (operator_resolved)",
        "NOT YET PUBLISHED",
    ] {
        assert!(
            timeline.contains(expected),
            "`{expected}` missing in\n{timeline}"
        );
    }

    let unknown = Uuid::new_v4().to_string();
    let (code, _, stderr) = cli(&env, &["attempts", "show", &unknown], &[]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("no payment attempt"), "{stderr}");
}

/// Seeds `n` dedupe rows (with their attempts); the first `aged` of them recorded 15 days ago.
async fn seed_dedupe_rows(env: &TestEnv, n: usize, aged: usize) -> Vec<IntakeRecord> {
    let records: Vec<IntakeRecord> = (0..n)
        .map(|i| record(Uuid::new_v4(), &format!("purge-{i:03}")))
        .collect();
    env.record(&records).await;
    let old: Vec<String> = records[..aged]
        .iter()
        .map(|r| r.message_id.to_string())
        .collect();
    for message_id in &old {
        env.set_dedupe_row(message_id, "recorded_at = now() - interval '15 days'")
            .await;
    }
    records
}

/// One purge pass over this test's database and streams with its purge settings, never
/// cancelled; `dry_run` only counts.
async fn purge(env: &TestEnv, dry_run: bool, now: OffsetDateTime) -> anyhow::Result<PurgeReport> {
    purge_once(
        &env.store,
        &env.broker,
        &env.settings.purge,
        dry_run,
        now,
        &CancellationToken::new(),
    )
    .await
}

#[tokio::test]
async fn purge_refuses_a_retention_shorter_than_the_command_streams_max_age_and_deletes_nothing() {
    let env =
        TestEnv::with_settings(|s| s.purge.dedupe_retention = Duration::from_secs(86_400)).await;
    seed_dedupe_rows(&env, 3, 3).await;

    let err = purge(&env, false, OffsetDateTime::now_utc())
        .await
        .unwrap_err();
    let refused = err
        .downcast_ref::<PurgeRefused>()
        .expect("a refusal, not a failure");
    assert!(
        refused
            .0
            .contains("purge.dedupe_retention (1day) is shorter than the max_age (7days)"),
        "{refused}"
    );
    assert_eq!(env.dedupe_rows().await, 3);

    let (code, _, stderr) = cli(
        &env,
        &["purge"],
        &[("ONECHARGE_PURGE__DEDUPE_RETENTION", "1d")],
    )
    .await;
    assert_eq!(code, 1);
    assert!(
        stderr.contains("purge refused") && stderr.contains("processed again"),
        "{stderr}"
    );
    assert_eq!(env.dedupe_rows().await, 3);

    // a stream that keeps messages without an age limit gives no bound at all
    edit_stream(&env.broker, &env.broker.names.commands_stream(), |config| {
        config.max_age = Duration::ZERO
    })
    .await;
    let (code, _, stderr) = cli(&env, &["purge"], &[]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("without an age limit"), "{stderr}");
    assert_eq!(env.dedupe_rows().await, 3);
}

#[tokio::test]
async fn purge_deletes_rows_past_retention_in_batches_and_keeps_newer_ones_and_dry_run_deletes_nothing(
) {
    let env = TestEnv::with_settings(|s| s.purge.batch_size = 10).await;
    let records = seed_dedupe_rows(&env, 25, 23).await;
    let now = OffsetDateTime::now_utc();

    let dry = purge(&env, true, now).await.unwrap();
    assert_eq!(
        (dry.expired, dry.deleted, dry.batches, dry.kept),
        (23, 0, 0, 2)
    );
    assert_eq!(env.dedupe_rows().await, 25);
    let (code, stdout, _) = cli(&env, &["purge", "--dry-run"], &[]).await;
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with("dry run: 23 dedupe rows") && stdout.contains("nothing was deleted"),
        "{stdout}"
    );
    assert_eq!(env.dedupe_rows().await, 25);

    let report = purge(&env, false, now).await.unwrap();

    assert_eq!(
        (report.deleted, report.batches, report.kept, report.complete),
        (23, 3, 2, true)
    );
    let left: Vec<String> = env
        .processed_messages()
        .await
        .into_iter()
        .map(|row| row.message_id)
        .collect();
    assert_eq!(left, vec!["purge-023".to_owned(), "purge-024".to_owned()]);
    assert_eq!(env.attempt_rows().await, 25, "attempts are never purged");
    drop(records);
}

#[tokio::test]
async fn a_command_whose_dedupe_row_was_purged_is_stopped_by_the_attempts_table() {
    let env = TestEnv::new().await;
    let records = seed_dedupe_rows(&env, 1, 1).await;
    let report = purge(&env, false, OffsetDateTime::now_utc()).await.unwrap();
    assert_eq!(report.deleted, 1);

    // the same message again (a replay from the stream): no dedupe row any more…
    let again = env.record(&records).await;

    // …but the attempt with the same payment_attempt_id makes it a business duplicate
    assert_eq!(again, vec![Recorded::BusinessDuplicate]);
    assert_eq!(env.attempt_rows().await, 1);
    assert_eq!(env.all_transitions().await.len(), 1);
}

#[tokio::test]
async fn serve_runs_the_purge_role_on_its_own() {
    let env = TestEnv::new().await;
    seed_dedupe_rows(&env, 4, 3).await;
    let served = Served::start(&env.settings, &[onecharge::app::Role::Purge]).await;

    eventually("the purge role purges", Duration::from_secs(10), || async {
        env.dedupe_rows().await == 1
    })
    .await;
    served.stop().await;
}

#[tokio::test]
async fn a_dead_lettered_invalid_command_replayed_with_a_corrected_body_becomes_an_attempt() {
    let env = TestEnv::new().await;
    let intake = env.intake().await;
    let attempt = Uuid::new_v4();
    env.dead_letter_invalid(&intake, "m-bad-currency", attempt)
        .await;

    let letters: Vec<Value> = env.cli_json(&["dlq", "list", "--json"]).await;
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!(letter["class"], "invalid");
    assert!(
        letter["reason"].as_str().unwrap().contains("EURO"),
        "{letter}"
    );
    assert_eq!(letter["original_msg_id"], "m-bad-currency");
    assert_eq!(
        letter["original_subject"],
        env.broker.names.charge_subject()
    );
    assert_eq!(letter["delivery_count"], 1);
    assert_eq!(letter["payment_attempt_id"], attempt.to_string());
    let sequence = letter["sequence"].as_u64().unwrap();
    let (_, table, _) = cli(&env, &["dlq", "list"], &[]).await;
    assert!(
        table.contains("m-bad-currency") && table.contains("invalid"),
        "{table}"
    );

    // replaying it unchanged would only dead-letter it again: refused, nothing published
    let seq = sequence.to_string();
    let (code, _, stderr) = cli(&env, &["dlq", "replay", &seq], &[]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--body-file"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let fixed = command_file(dir.path(), attempt, json!({"currency": "EUR"}));
    let fixed = fixed.to_str().unwrap();
    let (code, stdout, stderr) =
        cli(&env, &["dlq", "replay", &seq, "--body-file", fixed], &[]).await;
    assert_eq!(code, 0, "stdout: {stdout} stderr: {stderr}");
    let new_id = format!("m-bad-currency-replay-{sequence}");
    assert!(
        stdout.contains(&new_id) && stdout.contains("Replayed-From-Dlq-Sequence"),
        "{stdout}"
    );

    let report = intake.process_batch(WAIT).await.unwrap();
    assert_eq!(report.outcomes, vec![DeliveryOutcome::Processed]);
    let row: (String, String, Option<String>) = env
        .attempt_columns(attempt, "status, first_message_id, correlation_id")
        .await;
    assert_eq!(
        row,
        ("pending".into(), new_id.clone(), Some("corr-test".into()))
    );

    // the command on the stream says where it came from and carries no Dlq-* headers
    let mut stream = commands_stream(&env.broker).await;
    let last = stream.info().await.unwrap().state.last_sequence;
    let replayed = stream.get_raw_message(last).await.unwrap();
    assert_eq!(
        header(&replayed, "Replayed-From-Dlq-Sequence"),
        Some(seq.clone())
    );
    assert_eq!(header(&replayed, "Nats-Msg-Id"), Some(new_id));
    assert_eq!(
        header(&replayed, "Replayed-By").as_deref(),
        Some("operator:test-operator")
    );
    assert!(replayed
        .headers
        .iter()
        .all(|(name, _)| !name.to_string().to_ascii_lowercase().starts_with("dlq-")));

    // replaying the same dead letter twice publishes nothing new
    let (code, _, stderr) = cli(&env, &["dlq", "replay", &seq, "--body-file", fixed], &[]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("duplicate"), "{stderr}");
    assert_eq!(stream.info().await.unwrap().state.last_sequence, last);
}

#[tokio::test]
async fn a_conflict_replayed_unchanged_keeps_its_original_message_id() {
    let env = TestEnv::new().await;
    let intake = env.intake().await;
    let attempt = env.publish_new("m-first").await;
    env.publish(
        "m-other-amount",
        &command(attempt, json!({"amount_minor": 5000})),
    )
    .await;
    let report = intake.process_batch(WAIT).await.unwrap();
    assert_eq!(report.dead_lettered, vec![DlqClass::Conflict]);
    let sequence = env.dead_letters().await[0].sequence.to_string();

    // Unchanged, the replay is the same message: same Nats-Msg-Id, which JetStream (inside its
    // duplicate window) recognises — proof the original id is reused; nothing is published.
    let (code, _, stderr) = cli(&env, &["dlq", "replay", &sequence], &[]).await;

    assert_eq!(code, 1);
    assert!(
        stderr.contains("Nats-Msg-Id m-other-amount") && stderr.contains("duplicate"),
        "{stderr}"
    );
    assert_eq!(env.attempt_rows().await, 1);
    let (code, _, stderr) = cli(&env, &["dlq", "replay", "999"], &[]).await;
    assert_eq!(code, 1);
    assert!(
        stderr.contains("no dead letter with sequence 999"),
        "{stderr}"
    );
}

/// Bytes a terminal would act on: C0 controls other than the newline, DEL and C1 controls.
fn terminal_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect()
}

/// Runs `args` for a person (no `--json`): it must succeed, print nothing a terminal would
/// act on, and show each of `escaped` (a control character as its `\u{..}` escape).
async fn assert_shows_escaped(env: &TestEnv, args: &[&str], escaped: &[&str]) {
    let (code, stdout, stderr) = cli(env, args, &[]).await;
    assert_eq!(code, 0, "{args:?}: {stderr}");
    assert_eq!(
        terminal_controls(&stdout),
        Vec::<char>::new(),
        "{args:?}: {stdout:?}"
    );
    for escaped in escaped {
        assert!(
            stdout.contains(escaped),
            "{args:?} shows {escaped}: {stdout}"
        );
    }
}

#[tokio::test]
async fn human_output_shows_control_characters_from_producers_escaped() {
    let env = TestEnv::new().await;
    let id = Uuid::new_v4();
    let mut hostile = record(id, &format!("m-{id}"));
    hostile.command.order_id = "ord\u{1b}]0;pwned\u{7}\u{1b}[2J".into();
    hostile.command.customer_id = "cus\r\u{1b}[1A".into();
    hostile.command.payment_method = "pm\u{9b}31m".into();
    hostile.command.description = Some("desc\u{1b}[5m".into());
    env.record(&[hostile]).await;
    put_in_review(&env, id.into(), Some("10 minutes"), "20 minutes").await;
    env.set_attempt(
        id,
        "review_reason = E'gateway said \\x1b]0;owned\\x07',
         last_error = E'boom\\x1b[2J', gateway_charge_id = E'ch_\\x1b[31m'",
    )
    .await;

    let order = r"ord\u{1b}]0;pwned\u{7}\u{1b}[2J";
    let reason = r"gateway said \u{1b}]0;owned\u{7}";
    let id_text = id.to_string();
    for (args, escaped) in [
        (&["attempts", "list"][..], &[order][..]),
        (&["attempts", "stuck"], &[reason]),
        (
            &["attempts", "show", &id_text],
            &[
                order,
                r"cus\r\u{1b}[1A",
                r"pm\u{9b}31m",
                reason,
                r"ch_\u{1b}[31m",
            ],
        ),
    ] {
        assert_shows_escaped(&env, args, escaped).await;
    }
    // JSON stays JSON: the exact values, escaped by JSON's own rules.
    let listed: Vec<Value> = env.cli_json(&["attempts", "list", "--json"]).await;
    assert_eq!(listed[0]["order_id"], "ord\u{1b}]0;pwned\u{7}\u{1b}[2J");

    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Dlq-Class", "invalid\u{1b}]0;pwned\u{7}");
    headers.insert("Dlq-Reason", "order_id \u{1b}[2J is wrong\u{7}");
    headers.insert("Dlq-Original-Msg-Id", "m\u{1b}[2J");
    headers.insert("Dlq-Original-Subject", "payments\u{1b}[1A");
    env.publish_to(
        env.broker.names.dlq_subject(),
        headers,
        b"{\"order_id\":\"\x1b[2J\"}",
    )
    .await;
    assert_shows_escaped(
        &env,
        &["dlq", "list"],
        &[
            r"invalid\u{1b}]0;pwned\u{7}",
            r"order_id \u{1b}[2J is wrong\u{7}",
            r"m\u{1b}[2J",
            r"payments\u{1b}[1A",
        ],
    )
    .await;
    let letters: Vec<Value> = env.cli_json(&["dlq", "list", "--json"]).await;
    assert_eq!(letters[0]["reason"], "order_id \u{1b}[2J is wrong\u{7}");
}

#[tokio::test]
async fn a_nul_in_a_resolve_reason_charge_id_or_decline_code_is_invalid_and_changes_nothing() {
    let env = TestEnv::new().await;
    let id = seed(&env, 1).await[0];
    put_in_review(&env, id, Some("10 minutes"), "20 minutes").await;
    let nul_reason = ResolveRequest {
        reason: "checked\0".into(),
        ..request(ResolveAs::Declined, None)
    };
    let nul_charge = request(ResolveAs::Succeeded, Some("ch_\u{0}1"));
    let nul_code = ResolveRequest {
        decline_code: Some("do_not\0honor".into()),
        ..request(ResolveAs::Declined, None)
    };
    for (request, field) in [
        (nul_reason, "--reason"),
        (nul_charge, "--gateway-charge-id"),
        (nul_code, "--decline-code"),
    ] {
        let err = env
            .resolve(id, &request, OPERATOR, Via::Cli)
            .await
            .unwrap_err();
        match err {
            ResolveError::Invalid(why) => {
                assert!(why.contains(field) && why.contains("NUL"), "{why}")
            }
            other => panic!("{field}: expected Invalid (exit 2 / 400), got {other:?}"),
        }
    }
    assert_eq!(env.status(id).await, "needs_review");
}
