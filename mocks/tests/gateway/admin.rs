//! The `/__*` controls and the server's lifecycle.

use std::time::Duration;

use mock_gateway::{
    payment_methods as pm, Charge, FaultConfig, MockConfig, RecordedRequest, ResponseClass, Stats,
};
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn the_faults_endpoint_changes_behaviour_at_run_time() {
    let app = spawn_gateway().await;

    let put = app
        .put_json(
            "/__faults",
            &json!({"error_after": {"count": 1}, "latency": {"fixed_ms": 1}}),
        )
        .await;
    assert_eq!(put.status(), StatusCode::OK);

    let faulted = app
        .charge("key-1", &charge_body("attempt-1", "pm_card_visa"))
        .await;
    assert_eq!(faulted.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(app.gateway.ledger().len(), 1, "error_after charged");
    let now: FaultConfig = serde_json::from_value(app.admin_get("/__faults").await).unwrap();
    assert_eq!(now.error_after.count, 0, "the count is used up");
    assert_eq!(now.latency.fixed_ms, 1);
    let normal = app
        .charge("key-2", &charge_body("attempt-2", "pm_card_visa"))
        .await;
    assert_eq!(normal.status(), StatusCode::CREATED);

    let off = app.put_json("/__faults", &json!({})).await;
    assert_eq!(off.status(), StatusCode::OK);
    assert_eq!(app.gateway.faults(), FaultConfig::default());
}

#[tokio::test]
async fn an_invalid_fault_configuration_is_400_and_changes_nothing() {
    let app = spawn_gateway().await;

    for body in [
        json!({"error_before": {"probability": 1.5}}),
        json!({"eror_before": {"count": 1}}),
        json!({"rate_limit": {"count": -1}}),
    ] {
        let response = app.put_json("/__faults", &body).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(error_type(response).await, "invalid_request");
    }
    assert_eq!(app.gateway.faults(), FaultConfig::default());
}

#[tokio::test]
async fn the_ledger_endpoint_lists_every_committed_charge() {
    let app = spawn_gateway().await;
    app.charge_each(&[pm::CARD_VISA, pm::CARD_DECLINED, pm::FAULT_ERROR_BEFORE])
        .await;

    let ledger: Vec<Charge> = serde_json::from_value(app.admin_get("/__ledger").await).unwrap();

    assert_eq!(ledger, app.gateway.ledger());
    let keys: Vec<_> = ledger.iter().map(|c| c.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["key-1", "key-2"]);
}

#[tokio::test]
async fn the_stats_endpoint_counts_requests_by_response_class() {
    let app = spawn_gateway().await;
    app.charge_each(&[pm::CARD_VISA, pm::CARD_DECLINED, pm::FAULT_RATE_LIMIT])
        .await;
    // The first charge again: a replay.
    app.charge("key-1", &charge_body("attempt-1", "pm_card_visa"))
        .await;
    app.lookup("key-1").await;

    let stats: Stats = serde_json::from_value(app.admin_get("/__stats").await).unwrap();

    assert_eq!(
        stats,
        Stats {
            requests: 5,
            created: 1,
            declined: 1,
            replayed: 1,
            rate_limited: 1,
            lookups: 1,
            charges: 2,
            ..Stats::default()
        }
    );
}

#[tokio::test]
async fn the_requests_endpoint_records_method_key_body_and_answer_of_each_request() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", "pm_card_visa");
    app.charge("key-1", &body).await;
    app.lookup("key-1").await;

    let recorded: Vec<RecordedRequest> =
        serde_json::from_value(app.admin_get("/__requests").await).unwrap();

    assert_eq!(recorded.len(), 2);
    let (post, get) = (&recorded[0], &recorded[1]);
    assert_eq!((post.seq, post.method.as_str()), (0, "POST"));
    assert_eq!(post.idempotency_key.as_deref(), Some("key-1"));
    assert_eq!(post.body, body);
    assert_eq!(post.status, Some(201));
    assert_eq!(post.class, Some(ResponseClass::Created));
    assert!(post.finished_at.unwrap() >= post.received_at);
    assert_eq!(get.method, "GET");
    assert_eq!(get.path, "/v1/charges?idempotency_key=key-1");
    assert_eq!(get.status, Some(200));
    assert_eq!(recorded, app.gateway.requests());
}

#[tokio::test]
async fn the_request_log_keeps_only_the_most_recent_requests() {
    let app = spawn_gateway_with(MockConfig {
        request_log_capacity: 2,
        ..MockConfig::default()
    })
    .await;
    app.charge_each(&[pm::CARD_VISA; 3]).await;

    let seqs: Vec<u64> = app.gateway.requests().iter().map(|r| r.seq).collect();

    assert_eq!(seqs, [1, 2]);
    assert_eq!(app.gateway.stats().requests, 3);
}

#[tokio::test]
async fn unknown_paths_are_404_and_the_health_endpoint_answers() {
    let app = spawn_gateway().await;

    let missing = app.get("/v2/charges").await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(app.admin_get("/__health").await, json!({"status": "ok"}));
}

#[tokio::test]
async fn shutdown_cuts_a_held_response_instead_of_waiting_for_it() {
    let app = spawn_gateway_with(MockConfig {
        hang_for: Duration::from_secs(600),
        ..MockConfig::default()
    })
    .await;
    let held = tokio::spawn(
        app.post_charge("key-1", &charge_body("attempt-1", pm::FAULT_HANG_AFTER))
            .send(),
    );
    app.gateway
        .wait_until("the response is held", |g| g.stats().hung == 1)
        .await;

    within(Duration::from_secs(3), "shutdown", app.gateway.shutdown()).await;

    let answer = within(Duration::from_secs(3), "the held request", held)
        .await
        .unwrap();
    assert!(answer.is_err(), "the held request ends without a response");
}

#[tokio::test]
async fn a_stopped_gateway_refuses_connections() {
    let app = spawn_gateway().await;
    let url = app.url.clone();
    app.gateway.shutdown().await;

    let refused = app
        .client
        .post(format!("{url}/v1/charges"))
        .bearer_auth(API_KEY)
        .header("Idempotency-Key", "key-1")
        .json(&charge_body("attempt-1", "pm_card_visa"))
        .send()
        .await
        .expect_err("nothing listens any more");

    assert!(refused.is_connect(), "{refused:?}");
}
