//! The admin HTTP operator API (contract §6) of the real service: `Application` built with
//! the admin role, on a free port, against real PostgreSQL and NATS.

use std::net::SocketAddr;

use crate::support::{Served, TestEnv};
use onecharge::app::Role;
use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::{json, Value};
use uuid::Uuid;

const TOKEN: &str = "s3cret-admin-token";

/// The running admin role; stopped (and awaited) on [`Admin::stop`].
struct Admin {
    addr: SocketAddr,
    served: Served,
    http: reqwest::Client,
}

impl Admin {
    async fn start(env: &TestEnv) -> Self {
        let served = Served::start(&env.settings, &[Role::Admin]).await;
        Self {
            addr: served.admin.expect("the admin role listens"),
            served,
            http: reqwest::Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn get(&self, path: &str, token: Option<&str>) -> (StatusCode, Value) {
        let mut request = self.http.get(self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, token: Option<&str>, body: Value) -> (StatusCode, Value) {
        let mut request = self.http.post(self.url(path)).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn stop(self) {
        self.served.stop().await;
    }
}

/// One pending attempt recorded the way intake records it, moved to `needs_review` (first
/// sent 10 minutes ago, inside the key window).
async fn attempt_in_review(env: &TestEnv) -> Uuid {
    let id = env
        .record_command(
            json!({"order_id": "ord_api", "description": null, "requested_at": null}),
            None,
        )
        .await;
    env.set_attempt(
        id,
        "status = 'needs_review', review_reason = 'lookup inconclusive',
             first_dispatched_at = now() - interval '10 minutes', created_at = now() - interval '20 minutes'",
    )
    .await;
    id
}

#[tokio::test]
async fn with_a_token_configured_the_api_needs_the_right_bearer_token() {
    let env = TestEnv::with_settings(|s| s.admin_token = Some(SecretString::from(TOKEN))).await;
    let id = attempt_in_review(&env).await;
    let admin = Admin::start(&env).await;

    let (status, body) = admin.get("/api/attempts", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["type"], "unauthorized");
    let (status, _) = admin.get("/api/attempts", Some("wrong-token")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = admin
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

    let (status, body) = admin.get("/api/attempts", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.as_array().unwrap().len(), 1);
    assert_eq!(body[0]["payment_attempt_id"], id.to_string());

    // health, readiness and metrics stay open for probes and scrapers
    let healthz = reqwest::get(admin.url("/healthz")).await.unwrap();
    assert_eq!(healthz.status(), StatusCode::OK);
    let readyz = reqwest::get(admin.url("/readyz")).await.unwrap();
    assert_eq!(readyz.status(), StatusCode::OK);
    let metrics = reqwest::get(admin.url("/metrics")).await.unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    assert_eq!(
        env.scalar("SELECT count(*) FROM attempt_transitions WHERE cause = 'operator_resolved'")
            .await,
        0
    );
    admin.stop().await;
}

#[tokio::test]
async fn without_a_token_the_api_is_open_and_answers_json_errors() {
    let env = TestEnv::new().await;
    let id = attempt_in_review(&env).await;
    let admin = Admin::start(&env).await;

    let (status, body) = admin.get("/api/attempts?status=needs_review", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body[0]["payment_attempt_id"], id.to_string());
    assert_eq!(body[0]["review_reason"], "lookup inconclusive");

    let (status, body) = admin
        .get(&format!("/api/attempts/{}", Uuid::new_v4()), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["type"], "not_found");
    let (status, body) = admin.get("/api/attempts/not-a-uuid", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["type"], "invalid_request");
    let (status, body) = admin.get("/api/attempts?status=done", None).await;
    assert_eq!(
        (status, body["error"]["type"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_request"))
    );
    let (status, _) = admin.get("/api/attempts?stuck=soon", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    admin.stop().await;
}

#[tokio::test]
async fn resolve_through_the_api_is_the_cli_decision_recorded_as_admin_api() {
    let env = TestEnv::with_settings(|s| s.admin_token = Some(SecretString::from(TOKEN))).await;
    let id = attempt_in_review(&env).await;
    let admin = Admin::start(&env).await;
    let resolve = format!("/api/attempts/{id}/resolve");

    // stuck: every needs_review is listed, whatever the threshold
    let (status, stuck) = admin.get("/api/attempts?stuck=1h", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(stuck[0]["payment_attempt_id"], id.to_string());
    assert_eq!(stuck[0]["next_action"]["by"], "operator");

    let (status, body) = admin
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
    let (status, _) = admin
        .post(
            &resolve,
            Some(TOKEN),
            json!({"as": "refund", "reason": "x"}),
        )
        .await;
    assert!(status.is_client_error());

    let (status, body) = admin
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
    let event: Value =
        sqlx::query_scalar("SELECT payload FROM outbox WHERE payment_attempt_id = $1")
            .bind(id)
            .fetch_one(env.store.pool())
            .await
            .unwrap();
    assert_eq!(event["gateway_charge_id"], "ch_api_1");
    assert_eq!(event["event_id"], body["resolution"]["event_id"]);

    // a second decision is refused by state: 409 with the reason
    let (status, body) = admin
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
    let (status, _) = admin
        .post(
            &format!("/api/attempts/{}/resolve", Uuid::new_v4()),
            Some(TOKEN),
            json!({"as": "declined", "reason": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // GET /api/attempts/{id} is the `attempts show --json` document
    let (status, shown) = admin.get(&format!("/api/attempts/{id}"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    for field in ["transitions", "gateway_calls", "events"] {
        assert!(shown[field].is_array(), "{field} in {shown}");
    }
    assert_eq!(env.scalar("SELECT count(*) FROM outbox").await, 1);
    admin.stop().await;
}

#[tokio::test]
async fn huge_values_and_nul_characters_are_400s_with_a_json_error_never_500s() {
    let env = TestEnv::new().await;
    let id = attempt_in_review(&env).await;
    let admin = Admin::start(&env).await;

    for path in [
        "/api/attempts?stuck=500000y",
        "/api/attempts?limit=9223372036854775808",
    ] {
        let (status, body) = admin.get(path, None).await;
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
        let (status, answer) = admin.post(&resolve, None, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}: {answer}");
        assert_eq!(answer["error"]["type"], "invalid_request");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("NUL") && message.contains(&field.replace('_', "-")),
            "{message}"
        );
    }
    let (status, shown) = admin.get(&format!("/api/attempts/{id}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["status"], "needs_review", "nothing was decided");
    assert_eq!(
        env.scalar("SELECT count(*) FROM attempt_transitions WHERE cause = 'operator_resolved'")
            .await,
        0
    );
    admin.stop().await;
}

#[tokio::test]
async fn the_bearer_scheme_is_matched_in_any_case_and_the_token_still_exactly() {
    let env = TestEnv::with_settings(|s| s.admin_token = Some(SecretString::from(TOKEN))).await;
    attempt_in_review(&env).await;
    let admin = Admin::start(&env).await;
    let with = |authorization: String| {
        admin
            .http
            .get(admin.url("/api/attempts"))
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
    admin.stop().await;
}
