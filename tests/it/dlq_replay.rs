//! `dlq replay` refuses what it must not publish and says in one line what went wrong,
//! through the built binary exactly as an operator types it.

use onecharge::domain::Actor;
use std::path::Path;

use crate::support::{command, command_file, commands_stream, Records, TestEnv};
use serde_json::json;
use uuid::Uuid;

/// Runs `onecharge dlq replay <args>`; its exit code and its stderr, which every answer
/// here says in one line.
async fn replay(env: &TestEnv, args: &[&str]) -> (i32, String) {
    let (code, _, stderr) = env.cli(&[&["dlq", "replay"], args].concat(), &[]).await;
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    (code, stderr)
}

/// `onecharge dlq replay <sequence> --body-file <body>`, as [`replay`].
async fn replay_from_file(env: &TestEnv, sequence: &str, body: &Path) -> (i32, String) {
    replay(env, &[sequence, "--body-file", body.to_str().unwrap()]).await
}

/// [`replay_from_file`] refused as a wrong input (exit 2) with nothing published; its stderr.
async fn refused_replay_from_file(env: &TestEnv, sequence: &str, body: &Path) -> String {
    let before = commands_on_stream(env).await;
    let (code, stderr) = replay_from_file(env, sequence, body).await;
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(commands_on_stream(env).await, before);
    stderr
}

/// A dead-lettered invalid command; returns its dead-letter sequence.
async fn one_dead_letter(env: &TestEnv, attempt: Uuid) -> String {
    let intake = env.intake().await;
    env.dead_letter_invalid(&intake, "m-replay", attempt)
        .await
        .to_string()
}

async fn commands_on_stream(env: &TestEnv) -> u64 {
    let mut stream = commands_stream(&env.broker).await;
    stream.info().await.unwrap().state.messages
}

#[tokio::test]
async fn a_replay_body_with_a_nul_character_is_refused_before_anything_is_published() {
    let env = TestEnv::new().await;
    let attempt = Uuid::new_v4();
    let sequence = one_dead_letter(&env, attempt).await;
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("nul.json");
    // Valid JSON whose order id holds a NUL: PostgreSQL text cannot store it.
    let text = serde_json::to_string(&command(attempt, json!({"order_id": "ord\u{0}1"}))).unwrap();
    assert!(text.contains("\\u0000"));
    std::fs::write(&body, text).unwrap();

    let stderr = refused_replay_from_file(&env, &sequence, &body).await;

    assert!(stderr.contains("NUL"), "{stderr}");
    assert!(stderr.contains("nothing was published"), "{stderr}");
}

#[tokio::test]
async fn a_replay_body_file_over_the_contract_limit_is_refused_without_reading_it_all() {
    let env = TestEnv::new().await;
    let sequence = one_dead_letter(&env, Uuid::new_v4()).await;
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("huge.json");
    // A sparse 10 GB file: reading it whole would take the operator's memory.
    std::fs::File::create(&body)
        .unwrap()
        .set_len(10 * 1024 * 1024 * 1024)
        .unwrap();

    let stderr = refused_replay_from_file(&env, &sequence, &body).await;

    assert!(stderr.contains("65536"), "{stderr}");
}

#[tokio::test]
async fn a_replay_with_no_command_stream_says_so_in_one_line() {
    let env = TestEnv::new().await;
    let sequence = one_dead_letter(&env, Uuid::new_v4()).await;
    env.broker
        .jetstream
        .delete_stream(env.broker.names.commands_stream())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let body = command_file(dir.path(), Uuid::new_v4(), json!({}));

    let (code, stderr) = replay_from_file(&env, &sequence, &body).await;

    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "no stream stores {}",
            env.broker.names.charge_subject()
        )) && stderr.contains("onecharge setup"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_replay_with_no_dead_letter_stream_says_so_in_one_line() {
    let env = TestEnv::new().await;
    env.delete_dead_letter_stream().await;

    let (code, stderr) = replay(&env, &["1"]).await;

    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "stream {} does not exist",
            env.broker.names.dlq_stream()
        )),
        "{stderr}"
    );
}

/// `/api/dlq…` (issue 39): the dead letters the CLI and the console list, one by its
/// sequence, and a replay of its correction, audited as the API's caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_lists_shows_and_replays_a_corrected_dead_letter_audited() {
    let env = TestEnv::new().await;
    let attempt = Uuid::new_v4();
    let sequence = one_dead_letter(&env, attempt).await;
    let api = crate::support::api::AdminApi::start(&env.settings).await;

    let (status, list) = api.get("/api/dlq", None).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{list}");
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["sequence"].to_string(), sequence);
    let (status, one) = api.get(&format!("/api/dlq/{sequence}"), None).await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(one, list[0]);
    let (status, _) = api.get("/api/dlq/999", None).await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);

    let before = commands_on_stream(&env).await;
    let (status, replayed) = api
        .post(
            &format!("/api/dlq/{sequence}/replay"),
            None,
            json!({"reason": "fixed the amount", "body": command(attempt, json!({}))}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{replayed}");
    assert_eq!(replayed["body_corrected"], true);
    assert_eq!(commands_on_stream(&env).await, before + 1);
    assert_eq!(
        env.audit_count(|e| e.action == "dlq_replay"
            && e.via == "api"
            && e.reason.as_deref() == Some("fixed the amount"))
            .await,
        1
    );
    api.stop().await;
}

/// A refund's dead letter is replayed as a refund (issue 52, item 8): its body is checked as
/// a RefundPayment and published to the refund subject, where the refund intake records it.
#[tokio::test]
async fn a_refunds_dead_letter_is_replayed_as_a_refund_and_recorded_by_the_refund_intake() {
    use onecharge::broker::CommandKind;
    let env = TestEnv::new().await;
    let intake = env.refund_intake().await;
    let refund_id = Uuid::new_v4();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", "m-refund-typo");
    env.publish_to(
        env.broker.names.command_subject(CommandKind::Refund),
        headers,
        json!({"refund_id": "not-a-uuid", "payment_attempt_id": Uuid::new_v4(), "reason": "returned"})
            .to_string()
            .as_bytes(),
    )
    .await;
    let report = intake
        .process_batch(std::time::Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(report.dead_lettered.len(), 1, "{report:?}");
    let letter = env.dead_letters().await.remove(0);

    let corrected =
        json!({"refund_id": refund_id, "payment_attempt_id": Uuid::new_v4(), "reason": "returned"});
    let replayed = onecharge::operator::dlq::replay(
        &env.broker,
        &env.store,
        letter.sequence,
        Some(corrected.to_string().into_bytes()),
        &Actor::operator("test"),
        onecharge::store::audit::Via::Cli,
        Some("refund id mistyped by the producer"),
    )
    .await
    .expect("a refund's dead letter is replayed as a refund");

    assert_eq!(
        replayed.subject,
        env.broker.names.command_subject(CommandKind::Refund)
    );
    let report = intake
        .process_batch(std::time::Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(report.count("processed"), 1, "{report:?}");
    assert_eq!(env.refund(refund_id).await.status, "waiting");
}
