//! Key retention on the mock clock: a forgotten key charges again, as real gateways do.

use std::time::Duration;

use mock_gateway::{payment_methods, MockConfig};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

#[tokio::test]
async fn a_key_older_than_the_retention_is_forgotten_and_the_same_key_charges_again() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", payment_methods::CARD_VISA);
    let first: Value = app.charge("key-1", &body).await.json().await.unwrap();

    app.gateway.advance_clock(DAY + Duration::from_secs(1));

    assert!(
        app.lookup("key-1").await.is_empty(),
        "the lookup forgets it"
    );
    let again = app.charge("key-1", &body).await;
    assert_eq!(again.status(), StatusCode::CREATED);
    assert!(!is_replay(&again));
    let second: Value = again.json().await.unwrap();
    assert_ne!(second["id"], first["id"]);
    assert_eq!(
        app.gateway.charges_for_key("key-1").len(),
        2,
        "charged twice"
    );
    assert_eq!(app.lookup("key-1").await, vec![second]);
}

#[tokio::test]
async fn a_key_inside_the_retention_still_replays() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", payment_methods::CARD_VISA);
    app.charge("key-1", &body).await;

    app.gateway.advance_clock(DAY - Duration::from_secs(60));

    app.expect_replay("key-1", &body, StatusCode::OK).await;
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn a_forgotten_key_accepts_new_parameters_instead_of_422() {
    let app = spawn_gateway().await;
    app.charge("key-1", &charge_body("attempt-1", "pm_card_visa"))
        .await;
    app.gateway.advance_clock(DAY);

    let mut other = charge_body("attempt-1", "pm_card_visa");
    other["amount_minor"] = json!(1);
    let response = app.charge("key-1", &other).await;

    assert_eq!(response.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn the_clock_endpoint_expires_keys_under_a_configured_retention() {
    let app = spawn_gateway_with(MockConfig {
        key_retention: Duration::from_secs(60),
        ..MockConfig::default()
    })
    .await;
    let body = charge_body("attempt-1", payment_methods::CARD_DECLINED);
    app.charge("key-1", &body).await;
    let before = app.gateway.now();

    let advanced = app
        .post_json("/__clock/advance", &json!({"seconds": 61}))
        .await;

    assert_eq!(advanced.status(), StatusCode::OK);
    let now: Value = advanced.json().await.unwrap();
    assert!(now["now"].is_string());
    assert!(app.gateway.now() - before >= time::Duration::seconds(61));
    assert!(app.lookup("key-1").await.is_empty());
    let again = app.charge("key-1", &body).await;
    assert_eq!(again.status(), StatusCode::PAYMENT_REQUIRED);
    assert!(!is_replay(&again));
    assert_eq!(app.gateway.ledger().len(), 2);
}

#[tokio::test]
async fn a_clock_advance_that_is_not_a_non_negative_number_of_seconds_is_400() {
    let app = spawn_gateway().await;

    for body in [json!({"seconds": -1}), json!({"minutes": 1}), json!("soon")] {
        let response = app.post_json("/__clock/advance", &body).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
    }
}
