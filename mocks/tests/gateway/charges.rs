//! `POST /v1/charges` and `GET /v1/charges`: the response table of contract §3.

use mock_gateway::{payment_methods, Charge, ChargeStatus, MockConfig};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

#[tokio::test]
async fn a_new_charge_is_created_with_201_and_the_contract_body() {
    let app = spawn_gateway().await;

    let response = app
        .charge(
            "key-1",
            &charge_body("attempt-1", payment_methods::CARD_VISA),
        )
        .await;

    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(!is_replay(&response));
    let body: Value = response.json().await.unwrap();
    let id = body["id"].as_str().unwrap();
    assert!(id.starts_with("ch_") && id.len() == 27, "{id}");
    assert_eq!(body["status"], "succeeded");
    assert_eq!(body["amount_minor"], 1999);
    assert_eq!(body["currency"], "EUR");
    assert_eq!(body["customer_id"], "cus_42");
    assert_eq!(body["payment_method"], "pm_card_visa");
    assert_eq!(body["reference"], "attempt-1");
    assert_eq!(body["idempotency_key"], "key-1");
    assert_eq!(body["decline_code"], Value::Null);
    let created_at = body["created_at"].as_str().unwrap();
    time::OffsetDateTime::parse(created_at, &time::format_description::well_known::Rfc3339)
        .expect("created_at is RFC 3339");

    let charge: Charge = serde_json::from_value(body).unwrap();
    assert_eq!(app.gateway.ledger(), vec![charge]);
}

#[tokio::test]
async fn declining_payment_methods_answer_402_with_their_decline_code() {
    let app = spawn_gateway().await;

    for (key, method, code) in [
        ("key-d1", payment_methods::CARD_DECLINED, "card_declined"),
        (
            "key-d2",
            payment_methods::INSUFFICIENT_FUNDS,
            "insufficient_funds",
        ),
    ] {
        let response = app.charge(key, &charge_body(key, method)).await;
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["status"], "declined");
        assert_eq!(body["decline_code"], code);
    }

    let ledger = app.gateway.ledger();
    assert_eq!(ledger.len(), 2, "a decline is an outcome and is recorded");
    assert!(ledger.iter().all(|c| c.status == ChargeStatus::Declined));
}

#[tokio::test]
async fn a_retry_with_the_same_key_and_parameters_replays_200_with_idempotent_replayed() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", payment_methods::CARD_VISA);
    let first: Value = app.charge("key-1", &body).await.json().await.unwrap();

    for _ in 0..3 {
        let retry = app.expect_replay("key-1", &body, StatusCode::OK).await;
        let replayed: Value = retry.json().await.unwrap();
        assert_eq!(replayed, first, "the stored charge, byte for byte");
    }

    assert_eq!(app.gateway.ledger().len(), 1);
    assert_eq!(app.gateway.stats().replayed, 3);
}

#[tokio::test]
async fn a_stored_decline_is_replayed_with_its_402_and_the_replay_header() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", payment_methods::CARD_DECLINED);
    let first: Value = app.charge("key-1", &body).await.json().await.unwrap();

    let retry = app
        .expect_replay("key-1", &body, StatusCode::PAYMENT_REQUIRED)
        .await;

    assert_eq!(retry.json::<Value>().await.unwrap(), first);
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn a_stored_decline_is_replayed_as_200_when_so_configured() {
    let app = spawn_gateway_with(MockConfig {
        replay_declined_with_200: true,
        ..MockConfig::default()
    })
    .await;
    let body = charge_body("attempt-1", payment_methods::INSUFFICIENT_FUNDS);
    assert_eq!(
        app.charge("key-1", &body).await.status(),
        StatusCode::PAYMENT_REQUIRED
    );

    let retry = app.expect_replay("key-1", &body, StatusCode::OK).await;

    let replayed: Value = retry.json().await.unwrap();
    assert_eq!(replayed["status"], "declined");
    assert_eq!(replayed["decline_code"], "insufficient_funds");
}

#[tokio::test]
async fn reusing_a_key_with_any_different_parameter_is_422_and_charges_nothing_more() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", payment_methods::CARD_VISA);
    assert_eq!(
        app.charge("key-1", &body).await.status(),
        StatusCode::CREATED
    );

    for (field, value) in [
        ("amount_minor", json!(2000)),
        ("currency", json!("USD")),
        ("customer_id", json!("cus_43")),
        ("payment_method", json!("pm_card_mastercard")),
        ("reference", json!("attempt-2")),
        ("description", json!("Order ord_1002")),
    ] {
        let mut changed = body.clone();
        changed[field] = value;
        let response = app.charge("key-1", &changed).await;
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}"
        );
        assert_eq!(error_type(response).await, "idempotency_key_reused");
    }

    assert_eq!(app.gateway.ledger().len(), 1);
    assert_eq!(app.gateway.stats().key_reused, 6);
}

#[tokio::test]
async fn a_missing_empty_or_overlong_idempotency_key_is_400_and_255_characters_are_fine() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", payment_methods::CARD_VISA);

    let missing = app
        .authorized_post("/v1/charges")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_error(missing, StatusCode::BAD_REQUEST, "invalid_request").await;

    for key in [String::new(), "k".repeat(256)] {
        let response = app.charge(&key, &body).await;
        assert_eq!(
            response.status(),
            StatusCode::BAD_REQUEST,
            "{} chars",
            key.len()
        );
        assert_eq!(error_type(response).await, "invalid_request");
    }
    assert!(app.gateway.ledger().is_empty());

    let longest = app.charge(&"k".repeat(255), &body).await;
    assert_eq!(longest.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn a_malformed_body_is_400_invalid_request_with_a_message_and_charges_nothing() {
    let app = spawn_gateway().await;
    let valid = charge_body("attempt-1", payment_methods::CARD_VISA);
    let mut missing_amount = valid.clone();
    missing_amount
        .as_object_mut()
        .unwrap()
        .remove("amount_minor");
    let mut negative = valid.clone();
    negative["amount_minor"] = json!(-5);
    let mut lower_currency = valid.clone();
    lower_currency["currency"] = json!("eur");

    for (i, body) in [missing_amount, negative, lower_currency, json!([1, 2])]
        .iter()
        .enumerate()
    {
        let response = app.charge(&format!("key-{i}"), body).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "invalid_request");
        assert!(!error["error"]["message"].as_str().unwrap().is_empty());
    }
    let not_json = app
        .authorized_post("/v1/charges")
        .header("Idempotency-Key", "key-raw")
        .body("amount=1999")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), StatusCode::BAD_REQUEST);

    assert!(app.gateway.ledger().is_empty());
    assert_eq!(app.gateway.stats().invalid_request, 5);
}

#[tokio::test]
async fn a_rejected_body_does_not_bind_the_key_so_the_corrected_request_charges() {
    let app = spawn_gateway().await;
    let mut wrong = charge_body("attempt-1", payment_methods::CARD_VISA);
    wrong["currency"] = json!("euro");
    assert_eq!(
        app.charge("key-1", &wrong).await.status(),
        StatusCode::BAD_REQUEST
    );

    let corrected = app
        .charge(
            "key-1",
            &charge_body("attempt-1", payment_methods::CARD_VISA),
        )
        .await;

    assert_eq!(corrected.status(), StatusCode::CREATED);
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn a_wrong_or_missing_api_key_is_401_for_charges_and_lookups_and_charges_nothing() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", payment_methods::CARD_VISA);
    let url = format!("{}/v1/charges", app.url);

    let attempts = [
        app.client.post(&url).bearer_auth("sk_wrong"),
        app.client.post(&url).bearer_auth(format!("{API_KEY}x")),
        app.client.post(&url).basic_auth(API_KEY, None::<&str>),
        app.client.post(&url),
    ];
    for request in attempts {
        let response = request
            .header("Idempotency-Key", "key-1")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
    }
    let lookup = app
        .client
        .get(&url)
        .query(&[("idempotency_key", "key-1")])
        .bearer_auth("sk_wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(lookup.status(), StatusCode::UNAUTHORIZED);

    assert!(app.gateway.ledger().is_empty());
    assert_eq!(app.gateway.stats().unauthorized, 5);
    // The key was never bound: the right credentials charge under it.
    assert_eq!(
        app.charge("key-1", &body).await.status(),
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn lookup_returns_the_outcome_recorded_under_a_key_and_nothing_for_an_unknown_key() {
    let app = spawn_gateway().await;
    let mut answers = Vec::new();
    for response in app
        .charge_each(&[payment_methods::CARD_VISA, payment_methods::CARD_DECLINED])
        .await
    {
        answers.push(response.json::<Value>().await.unwrap());
    }
    let [charged, declined] = <[Value; 2]>::try_from(answers).unwrap();

    assert_eq!(app.lookup("key-1").await, vec![charged]);
    assert_eq!(app.lookup("key-2").await, vec![declined]);
    assert!(app.lookup("key-never-used").await.is_empty());
    assert_eq!(app.gateway.stats().lookups, 3);
}

#[tokio::test]
async fn lookup_without_an_idempotency_key_is_400() {
    let app = spawn_gateway().await;

    let response = app.authorized_get("/v1/charges").send().await.unwrap();

    assert_error(response, StatusCode::BAD_REQUEST, "invalid_request").await;
}

#[tokio::test]
async fn a_disputed_charge_is_listed_disputed_with_where_its_dispute_stands() {
    let app = spawn_gateway().await;
    let charged: Value = app
        .charge(
            "key-d",
            &charge_body("attempt-d", payment_methods::CARD_VISA),
        )
        .await
        .json()
        .await
        .unwrap();
    let id = charged["id"].as_str().unwrap();
    let listed = || async {
        let page: Value = app
            .authorized_get(
                "/v1/charges?created_gte=2000-01-01T00:00:00Z&created_lt=2100-01-01T00:00:00Z",
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        page["data"][0].clone()
    };
    assert_eq!(listed().await["status"], "succeeded");
    assert!(listed().await.get("dispute_status").is_none());

    for status in ["open", "won", "lost"] {
        let answer = app
            .post_json(&format!("/__charges/{id}"), &json!({"dispute": status}))
            .await;
        assert_eq!(answer.status(), StatusCode::OK);
        let record = listed().await;
        assert_eq!(record["status"], "disputed");
        assert_eq!(record["dispute_status"], status);
    }
    let refused = app
        .post_json(&format!("/__charges/{id}"), &json!({"dispute": "settled"}))
        .await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(app.gateway.ledger()[0].status, ChargeStatus::Succeeded);
}
