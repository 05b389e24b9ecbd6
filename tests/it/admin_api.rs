//! The admin HTTP operator API (contract §6) of the real service: `Application` built with
//! the admin role, on a free port, against real PostgreSQL and NATS.

use crate::support::api::{attempt_in_review, AdminApi};
use crate::support::{Records, TestEnv};
use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::{json, Value};
use uuid::Uuid;

const TOKEN: &str = "s3cret-admin-token";

/// A test's world with one attempt in review, and the admin role serving it.
struct World {
    /// The test's database and streams, removed when dropped: a test that destructures a
    /// `World` keeps it (as `_env` where it reads nothing).
    env: TestEnv,
    /// The attempt in review (of `ord_api`).
    id: Uuid,
    api: AdminApi,
}

impl World {
    /// `admin_token`: the token the API requires, if any (none: the API is open on loopback).
    async fn serve(admin_token: Option<&str>) -> Self {
        let env =
            TestEnv::with_settings(|s| s.admin_token = admin_token.map(SecretString::from)).await;
        let id = attempt_in_review(&env, "ord_api").await;
        let api = AdminApi::start(&env.settings).await;
        Self { env, id, api }
    }
}

/// How many operator decisions the attempts' histories record.
async fn decisions(env: &TestEnv) -> usize {
    env.transitions_caused_by("operator_resolved").await
}

#[tokio::test]
async fn with_a_token_configured_the_api_needs_the_right_bearer_token() {
    let World { env, id, api } = World::serve(Some(TOKEN)).await;

    let (status, body) = api.get("/api/attempts", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["type"], "unauthorized");
    let (status, _) = api.get("/api/attempts", Some("wrong-token")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = api
        .post(
            &format!("/api/attempts/{id}/resolve"),
            Some("s3cret"),
            json!({"as": "declined", "reason": "x"}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "a prefix of the token is not the token"
    );

    let (status, body) = api.get("/api/attempts", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.as_array().unwrap().len(), 1);
    assert_eq!(body[0]["payment_attempt_id"], id.to_string());

    // health, readiness and metrics stay open for probes and scrapers
    let healthz = reqwest::get(api.url("/healthz")).await.unwrap();
    assert_eq!(healthz.status(), StatusCode::OK);
    let readyz = reqwest::get(api.url("/readyz")).await.unwrap();
    assert_eq!(readyz.status(), StatusCode::OK);
    let metrics = reqwest::get(api.url("/metrics")).await.unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    assert_eq!(decisions(&env).await, 0);
    api.stop().await;
}

#[tokio::test]
async fn without_a_token_the_api_is_open_and_answers_json_errors() {
    let World { env: _env, id, api } = World::serve(None).await;

    let (status, body) = api.get("/api/attempts?status=needs_review", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body[0]["payment_attempt_id"], id.to_string());
    assert_eq!(body[0]["review_reason"], "lookup inconclusive");

    let (status, body) = api
        .get(&format!("/api/attempts/{}", Uuid::new_v4()), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["type"], "not_found");
    let (status, body) = api.get("/api/attempts/not-a-uuid", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["type"], "invalid_request");
    let (status, body) = api.get("/api/attempts?status=done", None).await;
    assert_eq!(
        (status, body["error"]["type"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_request"))
    );
    let (status, _) = api.get("/api/attempts?stuck=soon", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    api.stop().await;
}

#[tokio::test]
async fn resolve_through_the_api_is_the_cli_decision_recorded_as_admin_api() {
    let World { env, id, api } = World::serve(Some(TOKEN)).await;
    let resolve = format!("/api/attempts/{id}/resolve");

    // stuck: every needs_review is listed, whatever the threshold
    let (status, stuck) = api.get("/api/attempts?stuck=1h", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(stuck[0]["payment_attempt_id"], id.to_string());
    assert_eq!(stuck[0]["next_action"]["by"], "operator");

    let (status, body) = api
        .post(
            &resolve,
            Some(TOKEN),
            json!({"as": "succeeded", "reason": "seen at the gateway"}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "succeeded needs a charge id: {body}"
    );
    let (status, _) = api
        .post(
            &resolve,
            Some(TOKEN),
            json!({"as": "refund", "reason": "x"}),
        )
        .await;
    assert!(status.is_client_error());

    let (status, body) = api
        .post(&resolve, Some(TOKEN), json!({"as": "succeeded", "reason": "seen at the gateway", "gateway_charge_id": "ch_api_1"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["resolution"]["status"], "succeeded");
    assert_eq!(body["attempt"]["status"], "succeeded");
    assert_eq!(body["attempt"]["gateway_charge_id"], "ch_api_1");
    assert_eq!(
        body["attempt"]["transitions"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["actor"],
        "admin-api"
    );
    assert_eq!(body["attempt"]["events"][0]["status"], "succeeded");
    let event = env.last_event(id).await.payload;
    assert_eq!(event["gateway_charge_id"], "ch_api_1");
    assert_eq!(event["event_id"], body["resolution"]["event_id"]);

    // a second decision is refused by state: 409 with the reason
    let (status, body) = api
        .post(
            &resolve,
            Some(TOKEN),
            json!({"as": "declined", "reason": "second thoughts"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"]["type"], "conflict");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("is succeeded, not needs_review"));
    let (status, _) = api
        .post(
            &format!("/api/attempts/{}/resolve", Uuid::new_v4()),
            Some(TOKEN),
            json!({"as": "declined", "reason": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // GET /api/attempts/{id} is the `attempts show --json` document
    let (status, shown) = api.get(&format!("/api/attempts/{id}"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    for field in ["transitions", "gateway_calls", "events"] {
        assert!(shown[field].is_array(), "{field} in {shown}");
    }
    assert_eq!(env.outbox().await.len(), 1);
    api.stop().await;
}

#[tokio::test]
async fn huge_values_and_nul_characters_are_400s_with_a_json_error_never_500s() {
    let World { env, id, api } = World::serve(None).await;

    for path in [
        "/api/attempts?stuck=500000y",
        "/api/attempts?limit=9223372036854775808",
    ] {
        let (status, body) = api.get(path, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request", "{path}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("at most"),
            "{path}: {body}"
        );
    }

    let resolve = format!("/api/attempts/{id}/resolve");
    for (body, field) in [
        (
            json!({"as": "declined", "reason": "seen\u{0}at the gateway"}),
            "reason",
        ),
        (
            json!({"as": "succeeded", "reason": "seen", "gateway_charge_id": "ch_\u{0}1"}),
            "gateway_charge_id",
        ),
        (
            json!({"as": "declined", "reason": "seen", "decline_code": "card_\u{0}declined"}),
            "decline_code",
        ),
    ] {
        let (status, answer) = api.post(&resolve, None, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}: {answer}");
        assert_eq!(answer["error"]["type"], "invalid_request");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("NUL") && message.contains(&field.replace('_', "-")),
            "{message}"
        );
    }
    let (status, shown) = api.get(&format!("/api/attempts/{id}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["status"], "needs_review", "nothing was decided");
    assert_eq!(decisions(&env).await, 0);
    api.stop().await;
}

#[tokio::test]
async fn the_bearer_scheme_is_matched_in_any_case_and_the_token_still_exactly() {
    let World { env: _env, api, .. } = World::serve(Some(TOKEN)).await;
    let with = |authorization: String| {
        api.http()
            .get(api.url("/api/attempts"))
            .header("Authorization", authorization)
            .send()
    };
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let response = with(format!("{scheme} {TOKEN}")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{scheme}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body.as_array().unwrap().len(), 1, "{scheme}");
    }
    for wrong in [
        format!("Basic {TOKEN}"),
        format!("Bearer {}", TOKEN.to_uppercase()),
        format!("Bearer{TOKEN}"),
        format!("bearer {TOKEN}x"),
        TOKEN.to_owned(),
    ] {
        let response = with(wrong.clone()).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{wrong}");
    }
    api.stop().await;
}

/// The attempts of a listing's answer, and its `X-Next-Cursor`.
async fn listed(api: &AdminApi, path: &str) -> (StatusCode, Value, Option<String>) {
    let response = api.http().get(api.url(path)).send().await.unwrap();
    let status = response.status();
    let next = response
        .headers()
        .get("x-next-cursor")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, response.json().await.unwrap(), next)
}

#[tokio::test]
async fn no_listing_answers_more_than_1000_rows_and_limit_0_or_past_1000_is_refused() {
    let World { env, id: _, api } = World::serve(None).await;

    for path in [
        "/api/attempts?limit=0",
        "/api/attempts?limit=1001",
        "/api/attempts?stuck=15m&limit=0",
        "/api/attempts?stuck=15m&limit=1001",
        "/api/audit?limit=0",
        "/api/audit?limit=1001",
    ] {
        let (status, body, _) = listed(&api, path).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{path}: a listing is a page, never the whole table, yet it answered {} rows",
            body.as_array().map_or(0, Vec::len)
        );
        assert_eq!(body["error"]["type"], "invalid_request", "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("1 to 1000"), "{path}: {message}");
    }

    // 1,001 stuck attempts (1,000 pending for an hour, and the one in review): the whole
    // list no longer fits one answer, and says so rather than cut it; pages do
    env.record(&crate::support::orders(1000, "bounded")).await;
    env.set_attempts_in("pending", "created_at = now() - interval '1 hour'")
        .await;
    let (status, refused, _) = listed(&api, "/api/attempts?stuck=15m").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["error"]["type"], "too_many", "{refused}");
    let (status, first, next) = listed(&api, "/api/attempts?stuck=15m&limit=1000").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first.as_array().unwrap().len(), 1000);
    let next = next.expect("a full page says where the rest is");
    let (status, rest, after) =
        listed(&api, &format!("/api/attempts?stuck=15m&after={next}")).await;
    assert_eq!(status, StatusCode::OK, "{rest}");
    assert_eq!((rest.as_array().unwrap().len(), after), (1, None));

    let (status, page, next) = listed(&api, "/api/attempts?limit=1000").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page.as_array().unwrap().len(), 1000);
    assert!(next.is_some(), "the listing's largest page has a next one");
    api.stop().await;
}

#[tokio::test]
async fn stuck_pages_oldest_first_with_after_and_x_next_cursor_and_refuses_bad_paging() {
    let World { env, id, api } = World::serve(None).await;
    // Seven old pending attempts, four recorded at the same instant, besides the attempt in
    // review (listed whatever its age, so last).
    let old = crate::support::orders(7, "stuck_api");
    env.record(&old).await;
    for (i, record) in old.iter().enumerate() {
        let at = if i < 4 { "10:00:00" } else { "09:00:00" };
        env.set_attempt(
            record.command.payment_attempt_id,
            &format!("created_at = '2026-12-01T{at}Z'"),
        )
        .await;
    }
    let ids = |body: &Value| -> Vec<String> {
        body.as_array()
            .unwrap()
            .iter()
            .map(|a| a["payment_attempt_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let get = |path: String| {
        let request = api.http().get(api.url(&path));
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            let next = response
                .headers()
                .get("x-next-cursor")
                .map(|v| v.to_str().unwrap().to_owned());
            (status, next, response.json::<Value>().await.unwrap())
        }
    };

    let (status, next, unpaged) = get("/api/attempts?stuck=15m".to_owned()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        next, None,
        "without a limit: every stuck attempt, one answer"
    );
    let unpaged = ids(&unpaged);
    assert_eq!(unpaged.len(), 8, "{unpaged:?}");
    assert_eq!(unpaged[7], id.to_string(), "the young review comes last");

    let mut seen = Vec::new();
    let mut path = "/api/attempts?stuck=15m&limit=3".to_owned();
    let mut pages = 0;
    loop {
        let (status, next, body) = get(path.clone()).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        pages += 1;
        assert!(pages <= 3, "a cursor that does not move on: {path}");
        seen.extend(ids(&body));
        match next {
            Some(cursor) => path = format!("/api/attempts?stuck=15m&limit=3&after={cursor}"),
            None => break,
        }
    }
    assert_eq!(pages, 3, "3 + 3 + 2");
    assert_eq!(seen, unpaged, "the pages, in order, are the unpaged answer");

    for (path, reason) in [
        ("/api/attempts?stuck=15m&limit=three", "limit"),
        (
            "/api/attempts?stuck=15m&limit=9223372036854775808",
            "at most",
        ),
        ("/api/attempts?stuck=15m&after=yesterday", "is not a cursor"),
        (
            "/api/attempts?stuck=15m&before=1764579600000000_00000000-0000-0000-0000-000000000000",
            "does not combine",
        ),
        (
            "/api/attempts?after=1764579600000000_00000000-0000-0000-0000-000000000000",
            "stuck",
        ),
    ] {
        let (status, body) = api.get(path, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request", "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(reason), "{path}: {message}");
    }
    api.stop().await;
}

/// Behind a proxy or a tunnel the admin listener is reached under other names: those of
/// `admin_public_origins` are answered like the loopback names, and a page of one of those
/// origins may post (a proxy that rewrites `Host` to the upstream keeps the browser's
/// `Origin`); any other name is `421 Misdirected Request` on every route.
#[tokio::test]
async fn admin_public_origins_name_the_hosts_and_pages_a_proxy_brings_and_no_other_is_answered() {
    use reqwest::header::HOST;
    let env = TestEnv::with_settings(|s| {
        s.admin_public_origins = vec!["https://ops.example.com".into()];
        // Open on purpose: without it, an open admin behind a public origin refuses to start.
        s.insecure_admin = true;
    })
    .await;
    let id = attempt_in_review(&env, "ord_proxy").await;
    let api = AdminApi::start(&env.settings).await;
    let port = api.url("").rsplit(':').next().unwrap().to_owned();
    let get = |host: String| {
        api.http()
            .get(api.url("/api/stats"))
            .header(HOST, host)
            .send()
    };
    for host in [
        format!("localhost:{port}"),
        "localhost".to_owned(),
        format!("[::1]:{port}"),
        format!("127.0.0.1:{port}"),
        format!("console.localhost:{port}"),
        "ops.example.com".to_owned(),
        "OPS.example.com:443".to_owned(),
    ] {
        let response = get(host.clone()).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "Host {host}");
    }
    for host in [
        "ops.example.com.attacker.example",
        "attacker.example",
        "localhost.attacker.example",
        "10.0.0.1",
        "user@localhost",
    ] {
        let response = get(host.to_owned()).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::MISDIRECTED_REQUEST,
            "Host {host}"
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "misdirected_request");
    }

    let resolve = |origin: &'static str| {
        api.http()
            .post(api.url(&format!("/api/attempts/{id}/resolve")))
            .header("origin", origin)
            .json(&json!({"as": "declined", "reason": "no charge at the gateway"}))
            .send()
    };
    let response = resolve("http://ops.example.com").await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN, "another scheme");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "cross_origin");
    assert_eq!(env.status(id).await, "needs_review");
    let response = resolve("https://ops.example.com").await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(env.status(id).await, "declined");
    api.stop().await;
}

#[tokio::test]
async fn cancel_through_the_api_expires_a_pending_attempt_and_refuses_one_in_review() {
    let World { env, id, api } = World::serve(Some(TOKEN)).await;
    let pending = crate::support::api::attempt(&env, "ord_api_cancel").await;

    let (status, body) = api
        .post(
            &format!("/api/attempts/{pending}/cancel"),
            Some(TOKEN),
            json!({"reason": "fraud suspected"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "expired");
    assert_eq!(body["actor"], "admin-api");
    assert_eq!(env.status(pending).await, "expired");

    let (status, body) = api
        .post(
            &format!("/api/attempts/{id}/cancel"),
            Some(TOKEN),
            json!({"reason": "fraud suspected"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("is needs_review"));
    let (status, _) = api
        .post(
            &format!("/api/attempts/{pending}/cancel"),
            Some(TOKEN),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(env.status(id).await, "needs_review");
    api.stop().await;
}
