//! The Stripe dialect's refunds over HTTP: `POST /v1/refunds` with Stripe's idempotency,
//! errors and faults, the refunds' lists and retrieve, how refunds start and settle, and
//! what the PaymentIntent's charge and the Dashboard control show of them.

use std::time::Duration;

use mock_gateway::stripe::payment_methods as pm;
use mock_gateway::{FaultConfig, FaultRule, MockConfig, RefundFaults, RefundStatus};
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use crate::helpers::*;
use crate::stripe::{app_get, charge_form, spawn_stripe, spawn_stripe_with, stripe_error};

/// What onecharge's Stripe connector sends to refund `amount` (the rest when `None`) of
/// PaymentIntent `pi` for its refund `refund_id`.
fn refund_form(pi: &str, amount: Option<i64>, refund_id: &str) -> Vec<(&'static str, String)> {
    let mut form = vec![
        ("payment_intent", pi.to_owned()),
        ("reason", "requested_by_customer".to_owned()),
        ("metadata[refund_id]", refund_id.to_owned()),
        ("metadata[payment_attempt_id]", "attempt-1".to_owned()),
        ("metadata[reason]", "damaged in transit".to_owned()),
    ];
    if let Some(amount) = amount {
        form.push(("amount", amount.to_string()));
    }
    form
}

impl TestGateway {
    /// Charges 1999 EUR with `payment_method` (create with `confirm=true`) under `key`;
    /// the PaymentIntent's id.
    async fn succeeded_intent(&self, key: &str, payment_method: &str) -> String {
        let response = self.create(key, &charge_form(key, payment_method)).await;
        let intent = json(response).await;
        assert_eq!(intent["status"], "succeeded", "charging under {key}");
        intent["id"].as_str().unwrap().to_owned()
    }

    async fn stripe_refund(&self, key: &str, form: &[(&'static str, String)]) -> Response {
        self.stripe_post("/v1/refunds", Some(key), form).await
    }

    /// The PaymentIntent's charge, as a retrieve with `expand[]=latest_charge` shows it.
    async fn latest_charge(&self, pi: &str) -> Value {
        let path = format!("/v1/payment_intents/{pi}?expand[]=latest_charge");
        json(app_get(self, &path).await).await["latest_charge"].clone()
    }

    async fn refund_list(&self, query: &str) -> Value {
        let response = app_get(self, &format!("/v1/refunds?{query}")).await;
        assert_eq!(response.status(), StatusCode::OK, "GET /v1/refunds?{query}");
        json(response).await
    }
}

fn with_refund_faults(refunds: RefundFaults) -> FaultConfig {
    FaultConfig {
        refunds,
        ..FaultConfig::default()
    }
}

#[tokio::test]
async fn a_refund_answers_stripes_refund_object_and_shows_on_the_payment_intents_charge() {
    let app = spawn_stripe().await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_VISA).await;
    let charge = app.latest_charge(&pi).await["id"].clone();

    let response = app
        .stripe_refund(
            "onecharge-refund-rf-1",
            &refund_form(&pi, Some(500), "rf-1"),
        )
        .await;

    assert_eq!(response.status(), StatusCode::OK);
    let refund = json(response).await;
    assert!(refund["id"].as_str().unwrap().starts_with("re_"));
    assert_eq!(refund["object"], "refund");
    assert_eq!(refund["amount"], 500);
    assert_eq!(refund["currency"], "eur");
    assert_eq!(refund["payment_intent"], pi.as_str());
    assert_eq!(refund["charge"], charge);
    assert_eq!(refund["status"], "succeeded");
    assert_eq!(refund["reason"], "requested_by_customer");
    assert_eq!(refund["failure_reason"], Value::Null);
    assert_eq!(refund["metadata"]["refund_id"], "rf-1");
    assert_eq!(refund["metadata"]["reason"], "damaged in transit");
    assert!(refund["created"].is_i64());
    let latest = app.latest_charge(&pi).await;
    assert_eq!(
        (
            latest["amount_refunded"].clone(),
            latest["refunded"].clone()
        ),
        (json!(500), json!(false))
    );
    let listed = app.refund_list(&format!("payment_intent={pi}")).await;
    assert_eq!(listed["data"], json!([refund]));
    let recorded = app.gateway.refunds_for_refund_id("rf-1");
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].reference.as_deref(), Some("attempt-1"));
    assert_eq!(app.gateway.refunded(&pi), 500);
    assert_eq!(app.gateway.stats().refunded, 1);
}

#[tokio::test]
async fn without_an_amount_the_rest_is_refunded_then_it_is_charge_already_refunded() {
    let app = spawn_stripe().await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_VISA).await;
    app.stripe_refund("rk-1", &refund_form(&pi, Some(500), "rf-1"))
        .await;

    let rest = json(
        app.stripe_refund("rk-2", &refund_form(&pi, None, "rf-2"))
            .await,
    )
    .await;
    assert_eq!(rest["amount"], 1499);
    let latest = app.latest_charge(&pi).await;
    assert_eq!(latest["refunded"], true);

    for (key, amount) in [("rk-3", None), ("rk-4", Some(1))] {
        let again = app
            .stripe_refund(key, &refund_form(&pi, amount, "rf-3"))
            .await;
        let error = stripe_error(again, StatusCode::BAD_REQUEST).await;
        assert_eq!(error["type"], "invalid_request_error");
        assert_eq!(error["code"], "charge_already_refunded");
    }
    assert_eq!(app.gateway.refunded(&pi), 1999);
}

#[tokio::test]
async fn an_amount_over_what_is_left_is_400_naming_amount_and_is_not_saved_under_its_key() {
    let app = spawn_stripe().await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_VISA).await;

    let over = app
        .stripe_refund("rk-1", &refund_form(&pi, Some(2000), "rf-1"))
        .await;
    let error = stripe_error(over, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["type"], "invalid_request_error");
    assert_eq!(error["param"], "amount");
    assert_eq!(error["code"], "amount_too_large");
    assert!(app.gateway.refunds().is_empty());

    let corrected = app
        .stripe_refund("rk-1", &refund_form(&pi, Some(1999), "rf-1"))
        .await;
    assert_eq!(corrected.status(), StatusCode::OK, "the key was not bound");
}

#[tokio::test]
async fn an_unknown_payment_intent_is_404_and_one_that_did_not_succeed_is_400() {
    let app = spawn_stripe().await;
    let waiting = app
        .created_intent("create-1", "attempt-1", pm::CARD_VISA)
        .await;

    let unknown = app
        .stripe_refund("rk-1", &refund_form("pi_unknown", None, "rf-1"))
        .await;
    let error = stripe_error(unknown, StatusCode::NOT_FOUND).await;
    assert_eq!(
        (error["code"].clone(), error["param"].clone()),
        (json!("resource_missing"), json!("payment_intent"))
    );
    let not_charged = app
        .stripe_refund("rk-2", &refund_form(&waiting, None, "rf-1"))
        .await;
    let error = stripe_error(not_charged, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["type"], "invalid_request_error");
    assert_eq!(error["payment_intent"]["status"], "requires_confirmation");
    assert!(app.gateway.refunds().is_empty());
}

#[tokio::test]
async fn a_reason_stripe_does_not_know_or_a_missing_payment_intent_is_400_naming_it() {
    let app = spawn_stripe().await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_VISA).await;
    let mut damaged = refund_form(&pi, None, "rf-1");
    damaged[1].1 = "damaged".into();
    let without_pi: Vec<_> = refund_form(&pi, None, "rf-1").into_iter().skip(1).collect();

    for (form, param) in [(damaged, "reason"), (without_pi, "payment_intent")] {
        let refused = app.stripe_refund("rk-1", &form).await;
        let error = stripe_error(refused, StatusCode::BAD_REQUEST).await;
        assert_eq!(error["type"], "invalid_request_error");
        assert_eq!(error["param"], param);
    }
    assert!(app.gateway.refunds().is_empty());
}

#[tokio::test]
async fn the_same_key_replays_the_saved_refund_and_other_parameters_are_an_idempotency_error() {
    let app = spawn_stripe().await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_PENDING_REFUND).await;
    let form = refund_form(&pi, Some(500), "rf-1");
    let first = json(app.stripe_refund("rk-1", &form).await).await;
    assert_eq!(first["status"], "pending");
    app.gateway.settle_refunds();

    let replay = app.stripe_refund("rk-1", &form).await;
    assert!(is_replay(&replay));
    assert_eq!(json(replay).await, first, "Stripe replays the saved answer");
    let other = app
        .stripe_refund("rk-1", &refund_form(&pi, Some(600), "rf-1"))
        .await;
    assert_eq!(
        stripe_error(other, StatusCode::BAD_REQUEST).await["type"],
        "idempotency_error"
    );
    let other_endpoint = app.create("rk-1", &charge_form("a-2", pm::CARD_VISA)).await;
    assert_eq!(other_endpoint.status(), StatusCode::BAD_REQUEST);
    let id = first["id"].as_str().unwrap();
    let now = json(app_get(&app, &format!("/v1/refunds/{id}")).await).await;
    assert_eq!(now["status"], "succeeded", "the retrieve reads it as it is");
    assert_eq!(app.gateway.refunds_for_key("rk-1").len(), 1);
}

#[tokio::test]
async fn a_resend_while_the_refund_runs_is_409_idempotency_key_in_use() {
    let app = spawn_stripe().await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_VISA).await;
    app.gateway.set_faults(with_refund_faults(RefundFaults {
        slow_refund: FaultRule::times(1),
        ..RefundFaults::default()
    }));
    let form = refund_form(&pi, Some(500), "rf-1");

    let first = tokio::spawn(
        app.stripe_request("/v1/refunds", Some("rk-1"), &form)
            .send(),
    );
    app.gateway.wait_for_charges_in_progress(1).await;
    let again = app.stripe_refund("rk-1", &form).await;
    let error = stripe_error(again, StatusCode::CONFLICT).await;
    assert_eq!(error["code"], "idempotency_key_in_use");

    app.gateway.finish_slow_charges();
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::OK);
    let replay = app.stripe_refund("rk-1", &form).await;
    assert!(is_replay(&replay));
    assert_eq!(app.gateway.refunds().len(), 1);
}

#[tokio::test]
async fn a_saved_error_before_is_replayed_and_error_after_refunds_before_its_saved_500() {
    let app = spawn_stripe().await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_VISA).await;
    app.gateway.set_faults(with_refund_faults(RefundFaults {
        error_before: FaultRule::times(1),
        error_after: FaultRule::times(1),
        ..RefundFaults::default()
    }));
    let before = refund_form(&pi, Some(500), "rf-1");

    let first = app.stripe_refund("rk-1", &before).await;
    assert_eq!(first.headers()["stripe-should-retry"], "true");
    assert_eq!(
        stripe_error(first, StatusCode::INTERNAL_SERVER_ERROR).await["type"],
        "api_error"
    );
    assert!(app.gateway.refunds().is_empty(), "nothing refunded");
    let replayed = app.stripe_refund("rk-1", &before).await;
    assert_eq!(replayed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        is_replay(&replayed),
        "Stripe saves a 500 once the endpoint ran"
    );

    let after = app.stripe_refund("rk-2", &before).await;
    assert_eq!(after.headers()["stripe-should-retry"], "false");
    assert_eq!(after.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(app.gateway.refunds().len(), 1, "refunded before the 500");
    let listed = app.refund_list(&format!("payment_intent={pi}")).await;
    assert_eq!(listed["data"][0]["metadata"]["refund_id"], "rf-1");
    assert_eq!(
        app.stripe_refund("rk-2", &before).await.status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(app.gateway.refunded(&pi), 500);
}

#[tokio::test]
async fn hang_drop_and_rate_limit_fault_the_refund_as_they_fault_a_charge() {
    let app = spawn_stripe_with(MockConfig {
        hang_for: Duration::from_secs(20),
        ..MockConfig::default()
    })
    .await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_VISA).await;
    app.gateway.set_faults(with_refund_faults(RefundFaults {
        rate_limit: FaultRule::times(1),
        hang_after: FaultRule::times(1),
        drop_after: FaultRule::times(1),
        ..RefundFaults::default()
    }));
    let send = |key: &'static str, amount| {
        app.stripe_request(
            "/v1/refunds",
            Some(key),
            &refund_form(&pi, Some(amount), key),
        )
        .timeout(Duration::from_millis(500))
        .send()
    };

    let limited = send("rk-1", 100).await.unwrap();
    assert_eq!(
        stripe_error(limited, StatusCode::TOO_MANY_REQUESTS).await["code"],
        "rate_limit"
    );
    assert!(app.gateway.refunds().is_empty());
    assert!(
        send("rk-1", 100).await.unwrap_err().is_timeout(),
        "rk-1 held"
    );
    assert!(
        !send("rk-2", 200).await.unwrap_err().is_timeout(),
        "rk-2 dropped"
    );

    assert_eq!(app.gateway.refunded(&pi), 300, "both refunded");
    for (key, amount) in [("rk-1", 100), ("rk-2", 200)] {
        let replay = send(key, amount).await.unwrap();
        assert!(is_replay(&replay), "{key}");
        assert_eq!(json(replay).await["amount"], amount);
    }
    assert_eq!(app.gateway.refunds().len(), 2);
}

#[tokio::test]
async fn refunds_start_pending_requires_action_or_failed_and_only_pending_counts_as_refunded() {
    let app = spawn_stripe().await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_VISA).await;
    app.gateway.set_faults(with_refund_faults(RefundFaults {
        pending: FaultRule::times(1),
        requires_action: FaultRule::times(1),
        failed: FaultRule::times(1),
        ..RefundFaults::default()
    }));

    let mut refunds = Vec::new();
    for (n, amount) in [(1, 300), (2, 400), (3, 500)] {
        let form = refund_form(&pi, Some(amount), &format!("rf-{n}"));
        refunds.push(json(app.stripe_refund(&format!("rk-{n}"), &form).await).await);
    }

    let statuses: Vec<&Value> = refunds.iter().map(|r| &r["status"]).collect();
    assert_eq!(statuses, ["pending", "requires_action", "failed"]);
    assert_eq!(refunds[2]["failure_reason"], "declined");
    assert_eq!(app.latest_charge(&pi).await["amount_refunded"], 300);
    // 1999 less the pending 300 and the requires_action 400 held: 1299 left.
    let over = app
        .stripe_refund("rk-4", &refund_form(&pi, Some(1300), "rf-4"))
        .await;
    assert_eq!(
        stripe_error(over, StatusCode::BAD_REQUEST).await["param"],
        "amount"
    );

    let action = refunds[1]["id"].as_str().unwrap();
    let canceled = app
        .post_json(
            &format!("/__refunds/{action}"),
            &json!({"status": "canceled"}),
        )
        .await;
    assert_eq!(json(canceled).await["status"], "canceled");
    let rest = app
        .stripe_refund("rk-4", &refund_form(&pi, Some(1699), "rf-4"))
        .await;
    assert_eq!(rest.status(), StatusCode::OK);
    app.gateway.settle_refunds();
    assert_eq!(app.gateway.refunded(&pi), 1999);
    assert_eq!(app.latest_charge(&pi).await["refunded"], true);
}

#[tokio::test]
async fn the_refund_cards_start_pending_or_succeed_then_fail_as_stripes_test_cards_do() {
    let app = spawn_stripe_with(MockConfig {
        refund_settle_after: Duration::from_millis(200),
        ..MockConfig::default()
    })
    .await;
    let pending = app.succeeded_intent("pay-1", pm::CARD_PENDING_REFUND).await;
    let failing = app.succeeded_intent("pay-2", pm::CARD_REFUND_FAIL).await;

    let first = json(
        app.stripe_refund("rk-1", &refund_form(&pending, None, "rf-1"))
            .await,
    )
    .await;
    let second = json(
        app.stripe_refund("rk-2", &refund_form(&failing, None, "rf-2"))
            .await,
    )
    .await;
    assert_eq!(
        (&first["status"], &second["status"]),
        (&json!("pending"), &json!("succeeded"))
    );

    app.gateway
        .wait_until("both refunds settled", |g| {
            g.refunds()
                .iter()
                .all(|r| r.status != RefundStatus::Pending)
                && g.refunded(&failing) == 0
        })
        .await;
    let id = second["id"].as_str().unwrap();
    let failed = json(app_get(&app, &format!("/v1/refunds/{id}")).await).await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["failure_reason"], "expired_or_canceled_card");
    assert_eq!(app.latest_charge(&failing).await["amount_refunded"], 0);
    assert_eq!(app.latest_charge(&pending).await["amount_refunded"], 1999);
}

#[tokio::test]
async fn the_refund_list_runs_newest_first_by_payment_intent_and_pages_with_starting_after() {
    let app = spawn_stripe().await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_VISA).await;
    let other = app.succeeded_intent("pay-2", pm::CARD_VISA).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        let form = refund_form(&pi, Some(100), &format!("rf-{n}"));
        let refund = json(app.stripe_refund(&format!("rk-{n}"), &form).await).await;
        ids.push(refund["id"].as_str().unwrap().to_owned());
    }
    app.stripe_refund("rk-x", &refund_form(&other, Some(100), "rf-x"))
        .await;

    let first = app
        .refund_list(&format!("payment_intent={pi}&limit=2"))
        .await;
    assert_eq!(
        (&first["object"], &first["url"], &first["has_more"]),
        (&json!("list"), &json!("/v1/refunds"), &json!(true))
    );
    let page_ids = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(page_ids(&first), [ids[2].clone(), ids[1].clone()]);
    let next = app
        .refund_list(&format!(
            "payment_intent={pi}&limit=2&starting_after={}",
            ids[1]
        ))
        .await;
    assert_eq!(
        (page_ids(&next), &next["has_more"]),
        (vec![ids[0].clone()], &json!(false))
    );
    assert_eq!(
        app.refund_list("").await["data"].as_array().unwrap().len(),
        4
    );

    for (query, status) in [
        ("payment_intent=pi_unknown", StatusCode::NOT_FOUND),
        ("limit=0", StatusCode::BAD_REQUEST),
        ("starting_after=re_unknown", StatusCode::BAD_REQUEST),
        ("charge=ch_1", StatusCode::BAD_REQUEST),
    ] {
        let response = app_get(&app, &format!("/v1/refunds?{query}")).await;
        assert_eq!(response.status(), status, "{query}");
    }
    let missing = app_get(&app, "/v1/refunds/re_unknown").await;
    assert_eq!(
        stripe_error(missing, StatusCode::NOT_FOUND).await["code"],
        "resource_missing"
    );
    assert_eq!(
        app.get("/v1/refunds").await.status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_dashboard_refund_is_a_refund_object_without_refund_id_listed_beside_onecharges() {
    let app = spawn_stripe().await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_VISA).await;
    app.stripe_refund("rk-1", &refund_form(&pi, Some(500), "rf-1"))
        .await;

    let dashboard = app
        .post_json(
            &format!("/__stripe/payment_intents/{pi}/refund"),
            &json!({"amount": 700}),
        )
        .await;

    let dashboard = json(dashboard).await;
    assert_eq!(dashboard["refunded"], 700);
    assert_eq!(dashboard["amount_refunded"], 1200);
    assert_eq!(dashboard["refund"]["metadata"], json!({}));
    let listed = app.refund_list(&format!("payment_intent={pi}")).await;
    let refund_ids: Vec<&Value> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["metadata"]["refund_id"])
        .collect();
    assert_eq!(refund_ids, [&Value::Null, &json!("rf-1")]);
    let rest = app
        .post_json(
            &format!("/__stripe/payment_intents/{pi}/refund"),
            &json!({}),
        )
        .await;
    assert_eq!(json(rest).await["refunded"], 799);
    let over = app
        .stripe_refund("rk-2", &refund_form(&pi, Some(1), "rf-2"))
        .await;
    assert_eq!(
        stripe_error(over, StatusCode::BAD_REQUEST).await["code"],
        "charge_already_refunded"
    );
    assert_eq!(app.gateway.refunds().len(), 3);
    assert_eq!(app.gateway.refunds_for_refund_id("rf-1").len(), 1);
}

#[tokio::test]
async fn refund_lookups_fail_by_the_lookup_knobs_and_payment_intent_lookups_do_not() {
    let app = spawn_stripe().await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_VISA).await;
    let refund = json(
        app.stripe_refund("rk-1", &refund_form(&pi, None, "rf-1"))
            .await,
    )
    .await;
    app.gateway.set_faults(with_refund_faults(RefundFaults {
        lookup_error: FaultRule::times(1),
        lookup_rate_limit: FaultRule::times(1),
        ..RefundFaults::default()
    }));
    let id = refund["id"].as_str().unwrap();

    assert_eq!(app.retrieve(&pi).await.status(), StatusCode::OK);
    let limited = app_get(&app, &format!("/v1/refunds/{id}")).await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    let failed = app_get(&app, &format!("/v1/refunds?payment_intent={pi}")).await;
    assert_eq!(
        stripe_error(failed, StatusCode::INTERNAL_SERVER_ERROR).await["type"],
        "api_error"
    );
    let answered = json(app_get(&app, &format!("/v1/refunds/{id}")).await).await;
    assert_eq!(answered, refund);
}

#[tokio::test]
async fn a_charge_whose_amount_was_cut_below_its_refunds_refunds_nothing_more() {
    let app = spawn_stripe().await;
    let pi = app.succeeded_intent("pay-1", pm::CARD_VISA).await;
    app.stripe_refund("rk-1", &refund_form(&pi, Some(1500), "rf-1"))
        .await;
    let cut = app
        .post_json(
            &format!("/__stripe/payment_intents/{pi}/amount"),
            &json!({"amount": 1000}),
        )
        .await;
    assert_eq!(cut.status(), StatusCode::OK);

    let rest = app
        .stripe_refund("rk-2", &refund_form(&pi, None, "rf-2"))
        .await;
    let error = stripe_error(rest, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["code"], "charge_already_refunded");
    let dashboard = app
        .post_json(
            &format!("/__stripe/payment_intents/{pi}/refund"),
            &json!({}),
        )
        .await;
    assert_eq!(json(dashboard).await["refunded"], 0);
    assert_eq!(app.gateway.refunded(&pi), 1500);
}
