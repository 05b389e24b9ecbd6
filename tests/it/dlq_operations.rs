//! The dead letters as an operator reaches for them (issue 54): the API's list a page at a
//! time and by filter, a discard with a reason (audited, left out of the list, never
//! replayed), and a bulk replay by filter that previews first and then publishes only what
//! it previewed, each replay audited and the whole too.

use async_nats::HeaderMap;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::api::AdminApi;
use crate::support::{command, commands_stream, Records, TestEnv};

async fn commands_on_stream(env: &TestEnv) -> u64 {
    let mut stream = commands_stream(&env.broker).await;
    stream.info().await.unwrap().state.messages
}

/// Stores a dead letter of `class` whose body is a valid charge command of a new attempt,
/// as intake writes one (an `exhausted` letter's command was valid: the database was down);
/// its sequence in the dead-letter stream.
async fn valid_dead_letter(env: &TestEnv, class: &str, message_id: &str) -> u64 {
    let mut headers = HeaderMap::new();
    headers.insert("Dlq-Class", class);
    headers.insert("Dlq-Reason", "the database did not answer");
    headers.insert("Dlq-Original-Msg-Id", message_id);
    headers.insert(
        "Dlq-Original-Subject",
        env.broker.names.charge_subject().as_str(),
    );
    headers.insert("Nats-Msg-Id", format!("dlq-test-{message_id}").as_str());
    let body = serde_json::to_vec(&command(Uuid::new_v4(), json!({}))).unwrap();
    env.publish_to(env.broker.names.dlq_subject(), headers, &body)
        .await
}

/// `GET path`: the status, the JSON body and the `X-Next-Cursor` header.
async fn get_page(api: &AdminApi, path: &str) -> (StatusCode, Value, Option<String>) {
    let response = api.http().get(api.url(path)).send().await.unwrap();
    let status = response.status();
    let next = response
        .headers()
        .get("x-next-cursor")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, response.json().await.unwrap_or(Value::Null), next)
}

fn sequences(page: &Value) -> Vec<u64> {
    page.as_array()
        .unwrap()
        .iter()
        .map(|l| l["sequence"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_api_answers_a_page_at_a_time_and_by_filter() {
    let env = TestEnv::new().await;
    let mut stored = Vec::new();
    for i in 0..4 {
        stored.push(valid_dead_letter(&env, "exhausted", &format!("m-page-{i}")).await);
    }
    stored.push(valid_dead_letter(&env, "conflict", "m-page-conflict").await);
    let api = AdminApi::start(&env.settings).await;

    let (status, first, next) = get_page(&api, "/api/dlq?limit=2").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(sequences(&first), stored[..2]);
    assert_eq!(next, Some(stored[1].to_string()));
    let (_, second, next) = get_page(&api, &format!("/api/dlq?limit=2&after={}", stored[1])).await;
    assert_eq!(sequences(&second), stored[2..4]);
    let (_, last, next) =
        get_page(&api, &format!("/api/dlq?limit=2&after={}", next.unwrap())).await;
    assert_eq!(sequences(&last), stored[4..]);
    assert_eq!(next, None, "the last page names no next one");
    assert_eq!(last[0]["kind"], "charge");

    let (_, conflicts, _) = get_page(&api, "/api/dlq?class=conflict").await;
    assert_eq!(sequences(&conflicts), stored[4..]);
    let (_, refunds, _) = get_page(&api, "/api/dlq?kind=refund").await;
    assert_eq!(sequences(&refunds), Vec::<u64>::new());
    let (_, none_yet, _) = get_page(&api, "/api/dlq?since=2999-01-01T00:00:00Z").await;
    assert_eq!(sequences(&none_yet), Vec::<u64>::new());
    for bad in [
        "limit=0",
        "limit=1001",
        "class=lost",
        "since=yesterday",
        "sort=asc",
    ] {
        let (status, body, _) = get_page(&api, &format!("/api/dlq?{bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarded_dead_letter_is_audited_left_out_of_the_list_and_never_replayed() {
    let env = TestEnv::new().await;
    let kept = valid_dead_letter(&env, "exhausted", "m-keep").await;
    let given_up = valid_dead_letter(&env, "exhausted", "m-give-up").await;
    let sequence = given_up.to_string();

    // A discard needs a reason.
    let (code, _, stderr) = env
        .cli(&["dlq", "discard", &sequence, "--reason", "  "], &[])
        .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("needs a reason"), "{stderr}");

    let (code, stdout, stderr) = env
        .cli(
            &[
                "dlq",
                "discard",
                &sequence,
                "--reason",
                "producer resent it",
            ],
            &[],
        )
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with(&format!("discarded dead letter {sequence}")),
        "{stdout}"
    );
    assert_eq!(
        env.audit_count(|e| e.action == "dlq_discard"
            && e.via == "cli"
            && e.reason.as_deref() == Some("producer resent it")
            && e.outcome == "discarded")
            .await,
        1
    );

    let listed: Vec<Value> = env.cli_json(&["dlq", "list", "--json"]).await;
    assert_eq!(
        listed
            .iter()
            .map(|l| l["sequence"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![kept]
    );
    let all: Vec<Value> = env
        .cli_json(&["dlq", "list", "--json", "--discarded"])
        .await;
    assert_eq!(all.len(), 2);
    assert_eq!(all[1]["discarded"]["reason"], "producer resent it");

    // Never replayed, never discarded twice; nothing published, one audit row.
    let before = commands_on_stream(&env).await;
    let (code, _, stderr) = env.cli(&["dlq", "replay", &sequence], &[]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("was discarded by"), "{stderr}");
    let api = AdminApi::start(&env.settings).await;
    let (status, body) = api
        .post(
            &format!("/api/dlq/{sequence}/replay"),
            None,
            json!({"reason": "try"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, body) = api
        .post(
            &format!("/api/dlq/{sequence}/discard"),
            None,
            json!({"reason": "again"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(commands_on_stream(&env).await, before);
    assert_eq!(env.rows_in("dead_letter_discards").await, 1);

    // Through the API: a reason is required, an unknown letter is 404, and the discard of
    // the other letter is audited as the API's.
    let (status, _) = api
        .post(&format!("/api/dlq/{kept}/discard"), None, json!({}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = api
        .post("/api/dlq/999/discard", None, json!({"reason": "x"}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, discarded) = api
        .post(
            &format!("/api/dlq/{kept}/discard"),
            None,
            json!({"reason": "test message"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{discarded}");
    assert_eq!(discarded["dlq_sequence"], kept);
    assert_eq!(discarded["actor"], "admin-api");
    let (_, listed) = api.get("/api/dlq", None).await;
    assert_eq!(listed, json!([]));
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_replay_previews_then_publishes_only_what_it_previewed_each_audited() {
    let env = TestEnv::new().await;
    let mut exhausted = Vec::new();
    for i in 0..3 {
        exhausted.push(valid_dead_letter(&env, "exhausted", &format!("m-bulk-{i}")).await);
    }
    let invalid = valid_dead_letter(&env, "invalid", "m-bulk-other").await;

    // A dry run publishes nothing and names what matches; a larger set than --max is
    // refused whole.
    let before = commands_on_stream(&env).await;
    let (code, stdout, stderr) = env
        .cli(
            &[
                "dlq",
                "bulk-replay",
                "--class",
                "exhausted",
                "--reason",
                "database back",
                "--dry-run",
            ],
            &[],
        )
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("dry run: 3 dead letters match"),
        "{stdout}"
    );
    let (code, _, stderr) = env
        .cli(
            &[
                "dlq",
                "bulk-replay",
                "--class",
                "exhausted",
                "--reason",
                "database back",
                "--max",
                "2",
            ],
            &[],
        )
        .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("3 dead letters match, more than 2"),
        "{stderr}"
    );
    assert_eq!(commands_on_stream(&env).await, before);

    let api = AdminApi::start(&env.settings).await;
    let (status, preview) = api
        .post(
            "/api/dlq/bulk-replay",
            None,
            json!({"filter": {"class": "exhausted"}, "reason": "database back", "preview": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(preview["matched"], 3);
    assert_eq!(preview["sequences"], json!(exhausted));
    // A letter that begins to match after the preview is not taken by its confirmation.
    let late = valid_dead_letter(&env, "exhausted", "m-bulk-late").await;
    let (status, done) = api
        .post(
            "/api/dlq/bulk-replay",
            None,
            json!({"filter": {"class": "exhausted"}, "reason": "database back",
                   "sequences": preview["sequences"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let outcomes: Vec<(u64, String)> = done["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["dlq_sequence"].as_u64().unwrap(),
                i["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        exhausted
            .iter()
            .map(|s| (*s, "replayed".to_owned()))
            .collect::<Vec<_>>()
    );
    assert_eq!(commands_on_stream(&env).await, before + 3);
    assert_eq!(
        env.audit_count(|e| e.action == "dlq_replay"
            && e.via == "api"
            && e.reason.as_deref() == Some("database back"))
            .await,
        3
    );
    assert_eq!(
        env.audit_count(|e| e.action == "dlq_bulk_replay"
            && e.outcome == "published"
            && e.detail["items"].as_array().map(Vec::len) == Some(3))
            .await,
        1
    );
    let (status, body) = api
        .post(
            "/api/dlq/bulk-replay",
            None,
            json!({"filter": {"class": "exhausted"}, "reason": " "}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(late > invalid);
    api.stop().await;
}
