//! Refunds for operators (issue 37): `onecharge refunds list | show | create` and
//! `/api/refunds…` against the real binary and the real admin role. A person's refund is a
//! command like any other — published on the refund subject under `operator-refund-<id>`,
//! recorded by the refund intake, admitted by the refund worker — refused up front when it
//! can never pass, and audited with the person's name; a viewer's is refused with why.

use std::process::Stdio;
use std::time::Duration;

use crate::support::refund_roles::RefundRoles;
use mock_gateway::{payment_methods as pm, MockConfig};
use onecharge::domain::{AttemptStatus, PaymentAttemptId, RefundId};
use onecharge::gateway::{GatewayClient, GatewayHealth};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt as _;
use uuid::Uuid;

use crate::support::api::AdminApi;
use crate::support::env::OPERATOR;
use crate::support::harness::{run_leaving_one_in, Harness};
use crate::support::nats::{header, stream_messages};
use crate::support::process::run_onecharge;
use crate::support::{onecharge, with_ada_and_vic, Records, TestEnv};

const ADA: &str = "oc_ada-refunds-operator-token-0123456789";
const VIC: &str = "oc_vic-refunds-viewer-token-0123456789";

/// The commands on this test's command stream that are refunds, in order.
async fn refund_commands(env: &TestEnv) -> Vec<async_nats::jetstream::message::StreamMessage> {
    let subject = env
        .broker
        .names
        .command_subject(onecharge::broker::CommandKind::Refund);
    stream_messages(&env.broker.jetstream, &env.broker.names.commands_stream())
        .await
        .into_iter()
        .filter(|m| m.subject.as_str() == subject)
        .collect()
}

/// The refund id a `refunds create` line names: `refund <id> of …`.
fn refund_named(line: &str) -> Uuid {
    let at = line.find("refund ").expect("names a refund") + "refund ".len();
    line[at..at + 36].parse().expect("a refund id")
}

/// `onecharge refunds create …` as [`OPERATOR`], answering `answer` when it asks.
async fn create_answering(env: &TestEnv, args: &[&str], answer: &str) -> (i32, String, String) {
    let mut child = tokio::process::Command::from(onecharge())
        .args(["refunds", "create"])
        .args(args)
        .env("RUST_LOG", "warn")
        .env("USER", OPERATOR)
        .env("ONECHARGE_DATABASE_URL", &env.settings.database_url)
        .env("ONECHARGE_NATS_URL", &env.settings.nats_url)
        .env("ONECHARGE_NAMESPACE", &env.settings.namespace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("onecharge runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(answer.as_bytes()).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_refunds_from_the_command_line_once_confirmed_as_a_command_audited_with_their_name(
) {
    let env = TestEnv::new().await;
    let attempt = env.succeeded_attempt("ord_cli_refund", "cus_cli").await;
    let id = attempt.to_string();

    // Asked and not confirmed (stdin closed): what it would do, and nothing published.
    let (code, stdout, stderr) = env
        .cli(
            &[
                "refunds",
                "create",
                "--attempt",
                &id,
                "--amount",
                "500",
                "--reason",
                "item returned",
            ],
            &[],
        )
        .await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("not confirmed: nothing was published"),
        "{stderr}"
    );
    for shown in [
        &format!("refund 5.00 EUR of attempt {attempt} (order ord_cli_refund, customer cus_cli, gateway charge ch_ord_cli_refund)"),
        "charged:          19.99 EUR",
        "refunded:         0.00 EUR",
        "left:             19.99 EUR (after this refund: 14.99 EUR)",
        "reason:           item returned",
    ] {
        assert!(stdout.contains(shown), "{shown:?} in {stdout}");
    }
    assert!(refund_commands(&env).await.is_empty());
    assert!(env.audit_entries().await.is_empty());

    // Confirmed on the terminal: published as a RefundPayment, under the operator's id.
    let (code, stdout, stderr) = create_answering(
        &env,
        &[
            "--attempt",
            &id,
            "--amount",
            "500",
            "--reason",
            "item returned",
        ],
        "yes\n",
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let summary = stdout.lines().last().unwrap();
    assert!(
        summary.contains(&format!(
            "of 5.00 EUR for attempt {attempt} published by operator:{OPERATOR}"
        )),
        "{summary}"
    );
    let refund_id = refund_named(summary);
    let published = refund_commands(&env).await;
    assert_eq!(published.len(), 1);
    assert_eq!(
        header(&published[0], "Nats-Msg-Id").as_deref(),
        Some(format!("operator-refund-{refund_id}").as_str())
    );
    let body: Value = serde_json::from_slice(&published[0].payload).unwrap();
    assert_eq!(body["amount_minor"], 500);
    assert_eq!(body["payment_attempt_id"], json!(attempt));

    // The refund intake records it like a producer's, and the worker reserves it.
    assert_eq!(env.take_in_refunds().await, 1);
    let recorded = env.refund_command(refund_id).await;
    assert_eq!(recorded.requested_minor, Some(500));
    assert_eq!(recorded.reason, "item returned");
    assert_eq!(
        recorded.metadata.unwrap()["requested_by"],
        format!("operator:{OPERATOR}")
    );
    assert_eq!(
        recorded.first_message_id,
        format!("operator-refund-{refund_id}")
    );
    env.admit_refunds().await;
    assert_eq!(env.refund(refund_id).await.status, "pending");
    assert_eq!(env.reserved(attempt).await, 500);

    let audit = env.audit_entries().await;
    assert_eq!(audit.len(), 1);
    let entry = &audit[0];
    assert_eq!(
        (
            entry.action.as_str(),
            entry.actor.as_str(),
            entry.via.as_str(),
            entry.outcome.as_str()
        ),
        (
            "refund",
            format!("operator:{OPERATOR}").as_str(),
            "cli",
            "published"
        )
    );
    assert_eq!(entry.reason.as_deref(), Some("item returned"));
    assert!(entry.names(attempt));
    assert_eq!(entry.detail["refund_id"], json!(refund_id));
    assert_eq!(entry.detail["amount_minor"], 500);

    // No amount: all that is left, carried as that amount (never "the rest").
    let rest: Value = env
        .cli_json(&[
            "refunds",
            "create",
            "--attempt",
            &id,
            "--reason",
            "the rest, goodwill",
            "--yes",
            "--json",
        ])
        .await;
    assert_eq!(rest["amount_minor"], 1499);
    assert_eq!(rest["duplicate"], false);
    let body: Value = serde_json::from_slice(&refund_commands(&env).await[1].payload).unwrap();
    assert_eq!(body["amount_minor"], 1499);
    env.take_in_refunds().await;
    env.admit_refunds().await;
    assert_eq!(env.reserved(attempt).await, 1999);

    // What can never pass is refused up front, with why, and publishes nothing.
    let declined = env
        .record_command(json!({"order_id": "ord_cli_declined"}), None)
        .await;
    env.set_attempt(
        declined,
        "status = 'declined', decline_code = 'card_declined'",
    )
    .await;
    let declined = declined.to_string();
    let nobody = Uuid::new_v4().to_string();
    let cases: [(&[&str], i32, String); 5] = [
        (
            &["--attempt", &id, "--amount", "1", "--reason", "one more"],
            1,
            "nothing is left to refund (19.99 EUR charged, 0.00 EUR refunded, 19.99 EUR being refunded)".to_owned(),
        ),
        (
            &["--attempt", &declined, "--reason", "x"],
            1,
            format!("refusing to refund attempt {declined}: it is declined; it was never charged"),
        ),
        (
            &["--attempt", &id, "--amount", "1", "--reason", "  "],
            2,
            "a reason is required".to_owned(),
        ),
        (
            &["--attempt", &id, "--amount", "0", "--reason", "zero"],
            2,
            "the amount must be 1 to".to_owned(),
        ),
        (
            &["--attempt", &nobody, "--reason", "who"],
            1,
            "no payment attempt".to_owned(),
        ),
    ];
    for (args, code, why) in cases {
        let full = [&["refunds", "create", "--yes"], args].concat();
        let (got, stdout, stderr) = env.cli(&full, &[]).await;
        assert_eq!(got, code, "{full:?}: {stdout}{stderr}");
        assert!(stderr.contains(&why), "{why:?} in {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
    assert_eq!(refund_commands(&env).await.len(), 2);
    assert_eq!(env.audit_entries().await.len(), 2);
}

/// Short waits everywhere a refund waits, so a test walks its whole life in seconds.
fn quick(settings: &mut onecharge::config::Settings) {
    settings.refunds.recheck_interval = Duration::from_millis(1);
    settings.reconciler.schedule = vec![Duration::from_millis(1); 3];
    settings.reconciler.processing_schedule = vec![Duration::from_millis(1)];
}

/// Passes of a refund worker against `h`'s mock gateway until nothing moves.
async fn settle_refunds(h: &Harness) {
    let client = GatewayClient::from_settings(&h.settings).expect("client");
    let worker = RefundRoles::new(
        h.store.clone(),
        client,
        GatewayHealth::from_settings(&h.settings.executor),
        &h.settings,
    );
    for _ in 0..50 {
        if worker.pass().await.expect("a refund pass") == Default::default() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A refund of `attempt` recorded as the refund intake records it.
async fn record_refund(h: &Harness, attempt: PaymentAttemptId, amount: Option<i64>) -> RefundId {
    let refund_id = RefundId::random();
    let record = crate::support::command::refund_record(refund_id, attempt.into(), amount);
    onecharge::store::refunds::record_refund(&h.store, "onecharge-intake-refunds", &record)
        .await
        .expect("recorded");
    // Apart in time, so newest first is an order.
    tokio::time::sleep(Duration::from_millis(5)).await;
    refund_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_list_and_show_say_where_each_refund_stands_why_and_what_it_did_at_the_gateway() {
    let h = Harness::with(MockConfig::default(), quick).await;
    let charged = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    let client = GatewayClient::from_settings(&h.settings).expect("client");
    run_leaving_one_in(&h.executor_with(client), AttemptStatus::Succeeded).await;
    let order = h.attempt(charged).await.order_id;
    let succeeded = record_refund(&h, charged, Some(500)).await;
    let refused = record_refund(&h, charged, Some(1_000_000)).await;
    let waiting = record_refund(&h, PaymentAttemptId::random(), None).await;
    settle_refunds(&h).await;
    assert_eq!(h.refund(succeeded).await.status, "succeeded");
    assert_eq!(h.refund(refused).await.status, "refused");
    assert_eq!(h.refund(waiting).await.status, "waiting");
    let cli = |args: Vec<String>| {
        let settings = h.settings.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_onecharge(&settings, &args, &[]).await
        }
    };
    let listed = |json: &str| -> Vec<String> {
        serde_json::from_str::<Vec<Value>>(json)
            .unwrap_or_else(|e| panic!("{e}: {json}"))
            .iter()
            .map(|r| r["refund_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let ids =
        |refunds: &[RefundId]| -> Vec<String> { refunds.iter().map(ToString::to_string).collect() };

    let (code, all, stderr) = cli(vec!["refunds".into(), "list".into(), "--json".into()]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        listed(&all),
        ids(&[waiting, refused, succeeded]),
        "newest first"
    );
    for (filter, expected) in [
        (
            vec!["--attempt".to_owned(), charged.to_string()],
            vec![refused, succeeded],
        ),
        (
            vec!["--status".to_owned(), "refused".to_owned()],
            vec![refused],
        ),
        (
            vec!["--order".to_owned(), order.clone()],
            vec![refused, succeeded],
        ),
        (
            vec![
                "--status".to_owned(),
                "waiting".to_owned(),
                "--order".to_owned(),
                order.clone(),
            ],
            vec![],
        ),
        (
            vec![
                "--created-before".to_owned(),
                "2000-01-01T00:00:00Z".to_owned(),
            ],
            vec![],
        ),
    ] {
        let mut args = vec!["refunds".to_owned(), "list".to_owned(), "--json".to_owned()];
        args.extend(filter.clone());
        let (code, out, err) = cli(args).await;
        assert_eq!(code, 0, "{filter:?}: {err}");
        assert_eq!(listed(&out), ids(&expected), "{filter:?}");
    }
    // A page at a time: the cursor on stderr, the next page from it.
    let (_, first, stderr) = cli(vec![
        "refunds".into(),
        "list".into(),
        "--json".into(),
        "--limit".into(),
        "2".into(),
    ])
    .await;
    assert_eq!(listed(&first), ids(&[waiting, refused]));
    let cursor = stderr
        .trim()
        .strip_prefix("next page: --before ")
        .unwrap_or_else(|| panic!("{stderr}"))
        .to_owned();
    let (_, second, stderr) = cli(vec![
        "refunds".into(),
        "list".into(),
        "--json".into(),
        "--limit".into(),
        "2".into(),
        "--before".into(),
        cursor,
    ])
    .await;
    assert_eq!(listed(&second), ids(&[succeeded]));
    assert!(stderr.is_empty(), "the last page: {stderr}");
    let (code, _, stderr) = cli(vec![
        "refunds".into(),
        "list".into(),
        "--status".into(),
        "done".into(),
    ])
    .await;
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown refund status `done`"), "{stderr}");

    // The table says why a refund stands where it does.
    let (_, table, _) = cli(vec![
        "refunds".into(),
        "list".into(),
        "--attempt".into(),
        charged.to_string(),
    ])
    .await;
    let refused_line = table
        .lines()
        .find(|l| l.starts_with(&refused.to_string()))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        refused_line.contains("refused") && refused_line.contains("would pass what is left"),
        "{refused_line}"
    );
    assert!(table.ends_with("2 refunds (newest first)\n"), "{table}");

    // One refund: its facts, then its moves, its call and its event as one timeline.
    let row = h.refund(succeeded).await;
    let gateway_refund = row.gateway_refund_id.unwrap();
    let (code, shown, stderr) =
        cli(vec!["refunds".into(), "show".into(), succeeded.to_string()]).await;
    assert_eq!(code, 0, "{stderr}");
    for expected in [
        format!("refund            {succeeded}"),
        "status            succeeded".to_owned(),
        "next              nothing: final".to_owned(),
        format!("payment attempt   {charged}"),
        "amount            5.00 EUR (500 minor units)".to_owned(),
        "reason            item returned".to_owned(),
        "metadata          return_id=ret_1".to_owned(),
        format!("idempotency key   onecharge-refund-{succeeded}"),
        format!("gateway refund    {gateway_refund}"),
        "tries             1 sends, 0 lookups".to_owned(),
    ] {
        assert!(shown.contains(&expected), "{expected:?} in {shown}");
    }
    let timeline: Vec<&str> = shown
        .lines()
        .skip_while(|l| !l.starts_with("TIME (UTC)"))
        .collect();
    let kinds: Vec<(&str, &str)> = timeline[1..]
        .iter()
        .map(|l| {
            let mut cells = l
                .split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .skip(1);
            (cells.next().unwrap(), cells.next().unwrap())
        })
        .collect();
    assert_eq!(
        kinds[0],
        ("state", "new -> waiting (command_accepted)"),
        "{shown}"
    );
    assert_eq!(
        kinds[1],
        ("state", "waiting -> pending (admitted)"),
        "{shown}"
    );
    assert!(
        kinds.iter().any(|(kind, what)| *kind == "gateway"
            && what.starts_with("refund try 1 -> HTTP 2")
            && what.ends_with("succeeded")),
        "{shown}"
    );
    assert!(
        kinds.contains(&("event", "payments.events.refund-succeeded.v1")),
        "{shown}"
    );

    let (_, json, _) = cli(vec![
        "refunds".into(),
        "show".into(),
        refused.to_string(),
        "--json".into(),
    ])
    .await;
    let detail: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(detail["status"], "refused");
    assert!(detail["failure_reason"]
        .as_str()
        .unwrap()
        .contains("would pass what is left"));
    assert_eq!(detail["amount_minor"], Value::Null);
    assert_eq!(detail["requested_minor"], 1_000_000);
    assert_eq!(detail["next_action"]["by"], "none");
    assert_eq!(detail["transitions"].as_array().unwrap().len(), 2);
    assert!(detail["gateway_calls"].as_array().unwrap().is_empty());
    let mut events: Vec<&str> = detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["subject"].as_str().unwrap())
        .collect();
    events.sort_unstable();
    assert_eq!(
        events,
        [
            "payments.dlq.refund-payment.v1",
            "payments.events.refund-failed.v1"
        ],
        "its event and its dead letter"
    );
    let (_, json, _) = cli(vec![
        "refunds".into(),
        "show".into(),
        waiting.to_string(),
        "--json".into(),
    ])
    .await;
    let waits: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(waits["next_action"]["by"], "executor");
    assert!(waits["next_action"]["action"]
        .as_str()
        .unwrap()
        .contains("once its charge has succeeded"));

    // The attempt shows its refunds: a fact and each refund's moves on its timeline.
    let (_, attempt_page, _) =
        cli(vec!["attempts".into(), "show".into(), charged.to_string()]).await;
    assert!(
        attempt_page.contains("refunds           2 refunds: 5.00 EUR refunded; 14.99 EUR left"),
        "{attempt_page}"
    );
    assert!(
        attempt_page.contains(&format!(
            "refund   refund {succeeded}: waiting -> pending (admitted)"
        )),
        "{attempt_page}"
    );
    assert!(
        attempt_page.contains(&format!(
            "refund {succeeded}, gateway refund {gateway_refund}"
        )),
        "{attempt_page}"
    );

    let (code, _, stderr) = cli(vec![
        "refunds".into(),
        "show".into(),
        Uuid::new_v4().to_string(),
    ])
    .await;
    assert_eq!(code, 1);
    assert!(stderr.contains("no refund"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_lists_shows_and_takes_an_operators_refund_audited_and_refuses_a_viewer_with_why() {
    let env =
        TestEnv::with_settings(|s| with_ada_and_vic(s, "refund-admin-token-0123456789", ADA, VIC))
            .await;
    let charged = env
        .succeeded_attempt("ord_api_refund", "cus_api_refund")
        .await;
    let declined = env
        .record_command(json!({"order_id": "ord_api_declined"}), None)
        .await;
    env.set_attempt(
        declined,
        "status = 'declined', decline_code = 'card_declined'",
    )
    .await;
    let api = AdminApi::start(&env.settings).await;
    let refund_path = format!("/api/attempts/{charged}/refunds");
    let refund_id = RefundId::random();
    let asked =
        json!({"amount_minor": 700, "reason": "damaged in transit", "refund_id": refund_id});

    // A viewer reads, never refunds: 403 with why, nothing published or audited.
    let (status, body) = api.post(&refund_path, Some(VIC), asked.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let why = body["error"]["message"].as_str().unwrap();
    assert!(
        why.contains("vic signed in as a viewer") && why.contains("refunding"),
        "{why}"
    );

    // What can never pass is refused with why.
    for (path, body, status, kind, words) in [
        (
            refund_path.clone(),
            json!({"amount_minor": 5000, "reason": "too much"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "exceeds_remaining",
            "only 19.99 EUR is left",
        ),
        (
            format!("/api/attempts/{declined}/refunds"),
            json!({"reason": "never charged"}),
            StatusCode::CONFLICT,
            "conflict",
            "it is declined",
        ),
        (
            refund_path.clone(),
            json!({"amount_minor": 100, "reason": ""}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "a reason is required",
        ),
        (
            refund_path.clone(),
            json!({"amount": 100, "reason": "typo"}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "unknown field `amount`",
        ),
        (
            format!("/api/attempts/{}/refunds", Uuid::new_v4()),
            json!({"reason": "who"}),
            StatusCode::NOT_FOUND,
            "not_found",
            "no payment attempt",
        ),
    ] {
        let (got, answer) = api.post(&path, Some(ADA), body).await;
        assert_eq!(got, status, "{path}: {answer}");
        assert_eq!(answer["error"]["type"], kind, "{answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains(words),
            "{words:?} in {answer}"
        );
    }
    assert!(refund_commands(&env).await.is_empty());
    assert!(env.audit_entries().await.is_empty());

    // An operator's refund: published, audited; the same request again is the same refund.
    let (status, first) = api.post(&refund_path, Some(ADA), asked.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["refund_id"], json!(refund_id));
    assert_eq!(
        (first["amount_minor"].clone(), first["currency"].clone()),
        (json!(700), json!("EUR"))
    );
    assert_eq!(
        (first["actor"].clone(), first["duplicate"].clone()),
        (json!("operator:ada"), json!(false))
    );
    let (status, again) = api.post(&refund_path, Some(ADA), asked.clone()).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["stream_sequence"], first["stream_sequence"]);
    assert_eq!(
        refund_commands(&env).await.len(),
        1,
        "one message for one refund"
    );
    let audit = env.audit_entries().await;
    let outcomes: Vec<(&str, &str, &str, &str)> = audit
        .iter()
        .map(|e| {
            (
                e.action.as_str(),
                e.actor.as_str(),
                e.via.as_str(),
                e.outcome.as_str(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("refund", "operator:ada", "api", "published"),
            ("refund", "operator:ada", "api", "duplicate"),
        ]
    );
    assert!(audit
        .iter()
        .all(|e| e.names(charged) && e.reason.as_deref() == Some("damaged in transit")));

    // Recorded and admitted, it is listed and shown like any refund.
    assert_eq!(env.take_in_refunds().await, 1);
    env.admit_refunds().await;
    for query in [
        format!("payment_attempt_id={charged}"),
        "order_id=ord_api_refund".to_owned(),
        "customer_id=cus_api_refund".to_owned(),
        "status=pending".to_owned(),
    ] {
        let (status, listed) = api.get(&format!("/api/refunds?{query}"), Some(VIC)).await;
        assert_eq!(status, StatusCode::OK, "{query}: {listed}");
        let listed = listed.as_array().unwrap();
        assert_eq!(listed.len(), 1, "{query}");
        assert_eq!(listed[0]["refund_id"], json!(refund_id));
        assert_eq!(listed[0]["status"], "pending");
        assert_eq!(listed[0]["amount_minor"], 700);
        assert_eq!(listed[0]["next_action"]["by"], "executor");
    }
    let (_, none) = api.get("/api/refunds?status=refused", Some(VIC)).await;
    assert_eq!(none, json!([]));
    for bad in [
        "status=done",
        "payment_attempt_id=nope",
        "limit=0",
        "colour=red",
    ] {
        let (status, answer) = api.get(&format!("/api/refunds?{bad}"), Some(VIC)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {answer}");
    }
    let (status, shown) = api
        .get(&format!("/api/refunds/{refund_id}"), Some(VIC))
        .await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    let moves: Vec<&str> = shown["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["to_status"].as_str().unwrap())
        .collect();
    assert_eq!(moves, ["waiting", "pending"]);
    assert_eq!(shown["metadata"]["requested_by"], "operator:ada");
    let (status, _) = api
        .get(&format!("/api/refunds/{}", Uuid::new_v4()), Some(VIC))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api.get("/api/refunds/not-a-uuid", Some(VIC)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, attempt) = api
        .get(&format!("/api/attempts/{charged}"), Some(VIC))
        .await;
    assert_eq!(attempt["refunds"][0]["refund_id"], json!(refund_id));
    assert_eq!(
        attempt["refunds"][0]["transitions"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    api.stop().await;
}

/// Decision 181: a confirmation sent twice is one refund, and its second answer says so —
/// also when the refund took all that was left, and also once intake recorded and admitted
/// it (nothing is left then, but this refund is the one that took it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_refund_confirmed_twice_is_one_refund_and_the_second_answer_says_duplicate() {
    let env =
        TestEnv::with_settings(|s| with_ada_and_vic(s, "refund-admin-token-0123456789", ADA, VIC))
            .await;
    let charged = env.succeeded_attempt("ord_twice", "cus_twice").await;
    let api = AdminApi::start(&env.settings).await;
    let refund_path = format!("/api/attempts/{charged}/refunds");
    let asked = json!({"reason": "order cancelled", "refund_id": RefundId::random()});

    let (status, first) = api.post(&refund_path, Some(ADA), asked.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["amount_minor"], 1999, "all that was left");
    assert_eq!(env.take_in_refunds().await, 1);
    let (status, recorded) = api.post(&refund_path, Some(ADA), asked.clone()).await;
    env.admit_refunds().await;
    let (status_admitted, admitted) = api.post(&refund_path, Some(ADA), asked.clone()).await;

    for (status, again) in [(status, recorded), (status_admitted, admitted)] {
        assert_eq!(status, StatusCode::OK, "{again}");
        assert_eq!(again["duplicate"], true, "{again}");
        assert_eq!(again["refund_id"], first["refund_id"]);
        assert_eq!(again["amount_minor"], 1999);
    }
    assert_eq!(refund_commands(&env).await.len(), 1, "one refund");
    // Another refund of the same charge is still refused: nothing is left.
    let (status, other) = api
        .post(
            &refund_path,
            Some(ADA),
            json!({"reason": "again", "refund_id": RefundId::random()}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{other}");
}
