//! The Stripe dialect (`Dialect::Stripe`) over real HTTP on loopback: PaymentIntents,
//! Stripe's idempotency semantics, test payment methods, faults and the ledger.

use std::time::Duration;

use mock_gateway::stripe::payment_methods as pm;
use mock_gateway::{
    payment_methods, Dialect, FaultConfig, FaultKind, FaultRule, MockConfig, ResponseClass,
};
use reqwest::{header, RequestBuilder, Response, StatusCode};
use serde_json::Value;

use crate::helpers::*;

/// A form-encoded body, as Stripe's clients send it.
pub(crate) trait FormBody {
    fn form_body(self, form: &[(&'static str, String)]) -> Self;
}

impl FormBody for RequestBuilder {
    fn form_body(self, form: &[(&'static str, String)]) -> Self {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        self.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
    }
}

pub(crate) async fn spawn_stripe() -> TestGateway {
    spawn_stripe_with(MockConfig::default()).await
}

pub(crate) async fn spawn_stripe_with(config: MockConfig) -> TestGateway {
    spawn_gateway_with(MockConfig {
        dialect: Dialect::Stripe,
        ..config
    })
    .await
}

/// What onecharge's connector sends to create and confirm at once, off-session.
pub(crate) fn charge_form(attempt: &str, payment_method: &str) -> Vec<(&'static str, String)> {
    vec![
        ("amount", "1999".into()),
        ("currency", "eur".into()),
        ("customer", "cus_42".into()),
        ("payment_method", payment_method.into()),
        ("confirm", "true".into()),
        ("off_session", "true".into()),
        ("description", "Order ord_1001".into()),
        ("metadata[payment_attempt_id]", attempt.into()),
        ("metadata[order_id]", "ord_1001".into()),
    ]
}

/// The same PaymentIntent without `confirm`: it waits for a confirmation.
fn create_form(attempt: &str, payment_method: &str) -> Vec<(&'static str, String)> {
    charge_form(attempt, payment_method)
        .into_iter()
        .filter(|(name, _)| !matches!(*name, "confirm" | "off_session"))
        .collect()
}

impl TestGateway {
    pub(crate) fn stripe_request(
        &self,
        path: &str,
        key: Option<&str>,
        form: &[(&'static str, String)],
    ) -> RequestBuilder {
        let request = self.authorized_post(path).form_body(form);
        match key {
            Some(key) => request.header("Idempotency-Key", key),
            None => request,
        }
    }

    pub(crate) async fn stripe_post(
        &self,
        path: &str,
        key: Option<&str>,
        form: &[(&'static str, String)],
    ) -> Response {
        let request = self.stripe_request(path, key, form);
        request.send().await.expect("the request gets a response")
    }

    pub(crate) async fn create(&self, key: &str, form: &[(&'static str, String)]) -> Response {
        self.stripe_post("/v1/payment_intents", Some(key), form)
            .await
    }

    async fn confirm(&self, id: &str, key: &str, form: &[(&'static str, String)]) -> Response {
        self.stripe_post(
            &format!("/v1/payment_intents/{id}/confirm"),
            Some(key),
            form,
        )
        .await
    }

    pub(crate) async fn retrieve(&self, id: &str) -> Response {
        self.authorized_get(&format!("/v1/payment_intents/{id}"))
            .send()
            .await
            .expect("the retrieve gets a response")
    }

    /// Creates a PaymentIntent waiting for confirmation and returns its id.
    pub(crate) async fn created_intent(
        &self,
        key: &str,
        attempt: &str,
        payment_method: &str,
    ) -> String {
        let response = self
            .create(key, &create_form(attempt, payment_method))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let intent: Value = response.json().await.unwrap();
        assert_eq!(intent["status"], "requires_confirmation");
        intent["id"].as_str().unwrap().to_owned()
    }
}

/// Checks the status of a Stripe error answer and returns its `error` object.
pub(crate) async fn stripe_error(response: Response, status: StatusCode) -> Value {
    assert_eq!(response.status(), status);
    json(response).await["error"].clone()
}

fn off_session() -> Vec<(&'static str, String)> {
    vec![("off_session", "true".into())]
}

#[tokio::test]
async fn create_with_confirm_charges_once_and_the_ledger_entry_compares_with_the_command() {
    let app = spawn_stripe().await;

    let response = app
        .create("key-1", &charge_form("attempt-1", pm::CARD_VISA))
        .await;

    assert_eq!(response.status(), StatusCode::OK);
    assert!(!is_replay(&response));
    let intent = json(response).await;
    assert_eq!(intent["object"], "payment_intent");
    assert_eq!(intent["status"], "succeeded");
    assert_eq!(intent["amount"], 1999);
    assert_eq!(intent["currency"], "eur");
    assert_eq!(intent["metadata"]["payment_attempt_id"], "attempt-1");
    assert!(intent["id"].as_str().unwrap().starts_with("pi_"));
    assert!(intent["latest_charge"].as_str().unwrap().starts_with("ch_"));
    let ledger = app.gateway.ledger();
    assert_eq!(ledger.len(), 1);
    let charge = &ledger[0];
    assert_eq!(charge.id, intent["id"].as_str().unwrap());
    assert_eq!(charge.reference, "attempt-1");
    assert_eq!(charge.idempotency_key, "key-1");
    assert_eq!(charge.amount_minor, 1999);
    assert_eq!(charge.currency, "EUR");
    assert_eq!(charge.customer_id, "cus_42");
    assert_eq!(app.gateway.charges_for_key("key-1").len(), 1);
    assert_eq!(app.gateway.stats().created, 1);
}

#[tokio::test]
async fn create_without_confirm_waits_and_confirm_charges_with_the_confirming_key() {
    let app = spawn_stripe().await;
    let id = app
        .created_intent("create-1", "attempt-1", pm::CARD_MASTERCARD)
        .await;
    assert!(app.gateway.ledger().is_empty(), "creating charges nothing");

    let confirmed = app.confirm(&id, "confirm-1", &off_session()).await;

    assert_eq!(confirmed.status(), StatusCode::OK);
    assert_eq!(json(confirmed).await["status"], "succeeded");
    let retrieved = json(app.retrieve(&id).await).await;
    assert_eq!(retrieved["status"], "succeeded");
    assert_eq!(retrieved["amount_received"], 1999);
    let ledger = app.gateway.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].idempotency_key, "confirm-1");
    assert_eq!(ledger[0].payment_method, pm::CARD_MASTERCARD);
}

#[tokio::test]
async fn a_succeeded_payment_intent_is_never_charged_again_by_a_confirm_under_another_key() {
    let app = spawn_stripe().await;
    let id = app
        .created_intent("create-1", "attempt-1", pm::CARD_VISA)
        .await;
    assert_eq!(
        app.confirm(&id, "confirm-1", &off_session()).await.status(),
        StatusCode::OK
    );

    let again = app.confirm(&id, "confirm-2", &off_session()).await;

    let error = stripe_error(again, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["type"], "invalid_request_error");
    assert_eq!(error["code"], "payment_intent_unexpected_state");
    assert_eq!(error["payment_intent"]["status"], "succeeded");
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn the_same_key_and_parameters_replay_the_saved_response_with_idempotent_replayed() {
    let app = spawn_stripe().await;
    let form = charge_form("attempt-1", pm::CARD_VISA);
    let first = json(app.create("key-1", &form).await).await;

    // The same parameters in another order are the same request.
    let mut reordered = form.clone();
    reordered.reverse();
    let replay = app.create("key-1", &reordered).await;

    assert_eq!(replay.status(), StatusCode::OK);
    assert!(is_replay(&replay));
    assert_eq!(json(replay).await, first);
    assert_eq!(app.gateway.ledger().len(), 1);
    assert_eq!(app.gateway.stats().replayed, 1);
}

#[tokio::test]
async fn the_same_key_with_other_parameters_or_on_another_endpoint_is_an_idempotency_error() {
    let app = spawn_stripe().await;
    let id = app
        .created_intent("key-1", "attempt-1", pm::CARD_VISA)
        .await;

    let mut other_amount = create_form("attempt-1", pm::CARD_VISA);
    other_amount[0].1 = "2000".into();
    let reused = app.create("key-1", &other_amount).await;
    let error = stripe_error(reused, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["type"], "idempotency_error");

    let other_endpoint = app.confirm(&id, "key-1", &[]).await;
    let error = stripe_error(other_endpoint, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["type"], "idempotency_error");
    assert!(app.gateway.ledger().is_empty());
    assert_eq!(app.gateway.stats().key_reused, 2);
}

#[tokio::test]
async fn a_request_that_fails_validation_is_not_saved_and_the_corrected_retry_executes() {
    let app = spawn_stripe().await;
    let mut upper_case = charge_form("attempt-1", pm::CARD_VISA);
    upper_case[1].1 = "EUR".into();

    let refused = app.create("key-1", &upper_case).await;
    let error = stripe_error(refused, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["type"], "invalid_request_error");
    assert_eq!(error["param"], "currency");

    let corrected = app
        .create("key-1", &charge_form("attempt-1", pm::CARD_VISA))
        .await;
    assert_eq!(corrected.status(), StatusCode::OK);
    assert!(!is_replay(&corrected));
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn a_resend_while_the_first_request_runs_gets_409_idempotency_key_in_use() {
    let app = spawn_stripe().await;
    let body = charge_form("attempt-1", payment_methods::FAULT_SLOW_CHARGE);
    let first = {
        let request = app.stripe_request("/v1/payment_intents", Some("key-1"), &body);
        tokio::spawn(request.send())
    };
    app.gateway.wait_for_charges_in_progress(1).await;

    let resend = app.create("key-1", &body).await;

    let error = stripe_error(resend, StatusCode::CONFLICT).await;
    assert_eq!(error["code"], "idempotency_key_in_use");
    assert!(app.gateway.ledger().is_empty(), "not charged yet");

    // The slow charge may not be waiting yet when told to finish: tell it until it has.
    within(
        Duration::from_secs(10),
        "the slow charge finishing",
        async {
            while app.gateway.ledger().is_empty() {
                app.gateway.finish_slow_charges();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        },
    )
    .await;
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let replay = app.create("key-1", &body).await;
    assert!(is_replay(&replay));
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn a_key_is_forgotten_after_the_retention_and_the_same_request_then_executes_again() {
    let app = spawn_stripe().await;
    let form = charge_form("attempt-1", pm::CARD_VISA);
    app.create("key-1", &form).await;

    app.gateway
        .advance_clock(Duration::from_secs(24 * 60 * 60 - 1));
    assert!(is_replay(&app.create("key-1", &form).await));
    app.gateway.advance_clock(Duration::from_secs(1));
    let after = app.create("key-1", &form).await;

    assert_eq!(after.status(), StatusCode::OK);
    assert!(!is_replay(&after));
    assert_eq!(app.gateway.charges_for_key("key-1").len(), 2);
}

#[tokio::test]
async fn a_declined_card_is_402_card_error_and_the_payment_intent_needs_a_new_method() {
    let app = spawn_stripe().await;
    for (method, decline_code) in [
        (pm::CARD_VISA_CHARGE_DECLINED, "generic_decline"),
        (
            pm::CARD_CHARGE_DECLINED_INSUFFICIENT_FUNDS,
            "insufficient_funds",
        ),
    ] {
        let response = app.create(method, &charge_form("attempt-1", method)).await;

        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED, "{method}");
        let body = json(response).await;
        let error = &body["error"];
        assert_eq!(error["type"], "card_error");
        assert_eq!(error["code"], "card_declined");
        assert_eq!(error["decline_code"], decline_code);
        let intent = &error["payment_intent"];
        assert_eq!(intent["status"], "requires_payment_method");
        assert_eq!(intent["last_payment_error"]["decline_code"], decline_code);
        let retrieved = json(app.retrieve(intent["id"].as_str().unwrap()).await).await;
        assert_eq!(retrieved["status"], "requires_payment_method");

        // The decline is saved under the key: the retry replays it.
        let replay = app.create(method, &charge_form("attempt-1", method)).await;
        assert_eq!(replay.status(), StatusCode::PAYMENT_REQUIRED);
        assert!(is_replay(&replay));
    }
    assert!(app.gateway.ledger().is_empty());
    assert_eq!(app.gateway.stats().declined, 2);
}

#[tokio::test]
async fn authentication_required_off_session_is_a_402_decline_and_on_session_requires_action() {
    let app = spawn_stripe().await;
    let off = app
        .create(
            "key-off",
            &charge_form("attempt-1", pm::CARD_AUTHENTICATION_REQUIRED),
        )
        .await;
    let error = stripe_error(off, StatusCode::PAYMENT_REQUIRED).await;
    assert_eq!(error["type"], "card_error");
    assert_eq!(error["code"], "authentication_required");
    assert_eq!(error["payment_intent"]["status"], "requires_payment_method");

    let id = app
        .created_intent("create-on", "attempt-2", pm::CARD_AUTHENTICATION_REQUIRED)
        .await;
    let on = app.confirm(&id, "confirm-on", &[]).await;
    assert_eq!(on.status(), StatusCode::OK);
    let intent = json(on).await;
    assert_eq!(intent["status"], "requires_action");
    assert_eq!(intent["next_action"]["type"], "use_stripe_sdk");
    assert!(app.gateway.ledger().is_empty());
}

#[tokio::test]
async fn pm_fault_processing_answers_processing_then_succeeds_and_is_charged_once() {
    let app = spawn_stripe_with(MockConfig {
        slow_charge_for: Duration::from_secs(600),
        ..MockConfig::default()
    })
    .await;
    let response = app
        .create("key-1", &charge_form("attempt-1", pm::FAULT_PROCESSING))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let intent = json(response).await;
    assert_eq!(intent["status"], "processing");
    let id = intent["id"].as_str().unwrap();
    assert!(
        app.gateway.ledger().is_empty(),
        "not charged while processing"
    );
    assert_eq!(json(app.retrieve(id).await).await["status"], "processing");

    app.gateway.finish_slow_charges();
    app.gateway.finish_slow_charges();

    let retrieved = json(app.retrieve(id).await).await;
    assert_eq!(retrieved["status"], "succeeded");
    let ledger = app.gateway.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].idempotency_key, "key-1");
}

#[tokio::test]
async fn cancel_moves_a_waiting_payment_intent_to_canceled_and_it_cannot_be_confirmed() {
    let app = spawn_stripe().await;
    let id = app
        .created_intent("create-1", "attempt-1", pm::CARD_VISA)
        .await;

    let canceled = app
        .stripe_post(
            &format!("/v1/payment_intents/{id}/cancel"),
            Some("cancel-1"),
            &[],
        )
        .await;
    assert_eq!(canceled.status(), StatusCode::OK);
    assert_eq!(json(canceled).await["status"], "canceled");

    let confirm = app.confirm(&id, "confirm-1", &off_session()).await;
    let error = stripe_error(confirm, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["code"], "payment_intent_unexpected_state");
    assert!(app.gateway.ledger().is_empty());
}

#[tokio::test]
async fn an_unknown_payment_intent_is_404_resource_missing() {
    let app = spawn_stripe().await;
    for response in [
        app.retrieve("pi_missing").await,
        app.confirm("pi_missing", "key-1", &[]).await,
    ] {
        let error = stripe_error(response, StatusCode::NOT_FOUND).await;
        assert_eq!(error["type"], "invalid_request_error");
        assert_eq!(error["code"], "resource_missing");
    }
}

#[tokio::test]
async fn a_wrong_api_key_is_401_authentication_error_and_charges_nothing() {
    let app = spawn_stripe().await;
    let response = app
        .client
        .post(format!("{}/v1/payment_intents", app.url))
        .bearer_auth("sk_test_wrong")
        .header("Idempotency-Key", "key-1")
        .form_body(&charge_form("attempt-1", pm::CARD_VISA))
        .send()
        .await
        .unwrap();

    let error = stripe_error(response, StatusCode::UNAUTHORIZED).await;
    assert_eq!(error["type"], "authentication_error");
    assert!(app.gateway.ledger().is_empty());
}

#[tokio::test]
async fn customers_can_be_created_and_are_saved_under_their_key() {
    let app = spawn_stripe().await;
    let form = vec![("email", "a@example.com".to_owned())];
    let created = app
        .stripe_post("/v1/customers", Some("cus-key"), &form)
        .await;
    assert_eq!(created.status(), StatusCode::OK);
    let customer = json(created).await;
    assert!(customer["id"].as_str().unwrap().starts_with("cus_"));
    assert_eq!(customer["object"], "customer");

    let replay = app
        .stripe_post("/v1/customers", Some("cus-key"), &form)
        .await;
    assert!(is_replay(&replay));
    assert_eq!(json(replay).await["id"], customer["id"]);
}

#[tokio::test]
async fn currencies_follow_stripe_three_decimal_and_zero_decimal_rules() {
    let app = spawn_stripe().await;
    let with = |currency: &str, amount: &str| {
        let mut form = charge_form("attempt-1", pm::CARD_VISA);
        form[0].1 = amount.into();
        form[1].1 = currency.into();
        form
    };

    let kwd_odd = app.create("k1", &with("kwd", "5124")).await;
    let error = stripe_error(kwd_odd, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["param"], "amount");
    assert_eq!(
        app.create("k2", &with("kwd", "5120")).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        app.create("k3", &with("jpy", "501")).await.status(),
        StatusCode::OK
    );
    let unknown = app.create("k4", &with("xyz", "100")).await;
    assert_eq!(json(unknown).await["error"]["param"], "currency");

    let currencies: Vec<_> = app
        .gateway
        .ledger()
        .into_iter()
        .map(|c| c.currency)
        .collect();
    assert_eq!(currencies, ["KWD", "JPY"]);
}

#[tokio::test]
async fn pm_fault_error_before_is_a_500_saved_under_its_key_and_replayed_to_every_retry() {
    let app = spawn_stripe().await;
    let form = charge_form("attempt-1", payment_methods::FAULT_ERROR_BEFORE);

    let first = app.create("key-1", &form).await;
    let error = stripe_error(first, StatusCode::INTERNAL_SERVER_ERROR).await;
    assert_eq!(error["type"], "api_error");
    assert!(app.gateway.ledger().is_empty());

    // Stripe saves the result of a request that began executing, 500s included.
    for _ in 0..3 {
        let retry = app.create("key-1", &form).await;
        assert_eq!(retry.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(is_replay(&retry));
    }
    assert!(app.gateway.ledger().is_empty(), "a replay charges nothing");

    // Only another key executes again (here the trigger fires on it too: a new
    // PaymentIntent); a card without a trigger then charges.
    let other = app.create("key-2", &form).await;
    assert_eq!(other.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(!is_replay(&other));
    let visa = app
        .create("key-3", &charge_form("attempt-1", pm::CARD_VISA))
        .await;
    assert_eq!(visa.status(), StatusCode::OK);
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn pm_fault_error_after_charges_then_its_500_is_saved_and_replayed_and_retrieve_settles_it() {
    let app = spawn_stripe().await;
    let id = app
        .created_intent("create-1", "attempt-1", payment_methods::FAULT_ERROR_AFTER)
        .await;

    let first = app.confirm(&id, "confirm-1", &off_session()).await;
    assert_eq!(first.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(first.headers()["stripe-should-retry"], "false");
    assert_eq!(app.gateway.ledger().len(), 1, "charged before the 500");

    let retry = app.confirm(&id, "confirm-1", &off_session()).await;
    assert_eq!(retry.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(is_replay(&retry));
    assert_eq!(json(app.retrieve(&id).await).await["status"], "succeeded");
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn pm_fault_rate_limit_is_429_rate_limit_with_should_retry_and_charges_nothing() {
    let app = spawn_stripe().await;
    let form = charge_form("attempt-1", payment_methods::FAULT_RATE_LIMIT);

    let first = app.create("key-1", &form).await;
    assert_eq!(first.headers()["stripe-should-retry"], "true");
    let error = stripe_error(first, StatusCode::TOO_MANY_REQUESTS).await;
    assert_eq!(error["code"], "rate_limit");
    assert!(app.gateway.ledger().is_empty());

    assert_eq!(app.create("key-1", &form).await.status(), StatusCode::OK);
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn pm_fault_bad_request_is_400_invalid_request_error_and_not_saved() {
    let app = spawn_stripe().await;
    let form = charge_form("attempt-1", payment_methods::FAULT_BAD_REQUEST);

    let first = app.create("key-1", &form).await;
    let error = stripe_error(first, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["type"], "invalid_request_error");
    assert!(app.gateway.ledger().is_empty());
    assert_eq!(app.gateway.stats().invalid_request, 1);
}

#[tokio::test]
async fn pm_fault_hang_after_charges_and_the_retry_replays_the_success() {
    let app = spawn_stripe_with(MockConfig {
        hang_for: Duration::from_secs(20),
        ..MockConfig::default()
    })
    .await;
    let form = charge_form("attempt-1", payment_methods::FAULT_HANG_AFTER);
    let first = app
        .stripe_request("/v1/payment_intents", Some("key-1"), &form)
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(first.expect_err("held past the timeout").is_timeout());
    assert_eq!(app.gateway.ledger().len(), 1);

    let retry = app.create("key-1", &form).await;
    assert!(is_replay(&retry));
    assert_eq!(json(retry).await["status"], "succeeded");
    assert_eq!(app.gateway.stats().hung, 1);
}

#[tokio::test]
async fn pm_fault_drop_after_charges_closes_the_connection_and_the_retry_replays_the_success() {
    let app = spawn_stripe().await;
    let form = charge_form("attempt-1", payment_methods::FAULT_DROP_AFTER);

    let first = app
        .stripe_request("/v1/payment_intents", Some("key-1"), &form)
        .send()
        .await;
    assert!(first.is_err(), "no response at all");
    assert_eq!(app.gateway.ledger().len(), 1);
    let recorded = &app.gateway.requests()[0];
    assert_eq!(recorded.class, Some(ResponseClass::Dropped));
    assert_eq!(recorded.path, "/v1/payment_intents");

    let retry = app.create("key-1", &form).await;
    assert!(is_replay(&retry));
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn a_saved_500_on_a_confirm_is_replayed_under_its_key_and_another_key_confirms() {
    let app = spawn_stripe().await;
    let id = app
        .created_intent("create-1", "attempt-1", payment_methods::FAULT_ERROR_BEFORE)
        .await;

    let confirm = app.confirm(&id, "confirm-1", &off_session()).await;
    assert_eq!(confirm.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        json(app.retrieve(&id).await).await["status"],
        "requires_confirmation"
    );
    assert_eq!(
        app.gateway.requests()[1].fault,
        Some(FaultKind::ErrorBefore)
    );

    let retry = app.confirm(&id, "confirm-1", &off_session()).await;
    assert_eq!(retry.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(is_replay(&retry));
    assert!(app.gateway.ledger().is_empty());

    let next = app.confirm(&id, "confirm-2", &off_session()).await;
    assert_eq!(next.status(), StatusCode::OK);
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn dice_driven_faults_apply_to_the_create_too_and_its_500_is_saved() {
    let app = spawn_stripe_with(MockConfig {
        faults: FaultConfig {
            error_after: FaultRule::times(1),
            ..FaultConfig::default()
        },
        ..MockConfig::default()
    })
    .await;
    let form = create_form("attempt-1", pm::CARD_VISA);

    let create = app.create("create-1", &form).await;
    assert_eq!(create.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(app.gateway.requests()[0].fault, Some(FaultKind::ErrorAfter));
    let replay = app.create("create-1", &form).await;
    assert_eq!(replay.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(is_replay(&replay));

    // The orphan it made is unconfirmed and cannot charge; the next key makes another.
    let id = app
        .created_intent("create-2", "attempt-1", pm::CARD_VISA)
        .await;
    let confirm = app.confirm(&id, "confirm-1", &off_session()).await;
    assert_eq!(confirm.status(), StatusCode::OK);
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn concurrent_confirms_of_one_payment_intent_under_different_keys_charge_once() {
    let app = spawn_stripe().await;
    let id = app
        .created_intent("create-1", "attempt-1", pm::CARD_VISA)
        .await;

    let statuses = send_all((0..16).map(|n| {
        app.stripe_request(
            &format!("/v1/payment_intents/{id}/confirm"),
            Some(&format!("confirm-{n}")),
            &off_session(),
        )
    }))
    .await;

    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::OK).count(), 1);
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn the_onecharge_routes_are_not_served_in_the_stripe_dialect() {
    let app = spawn_stripe().await;
    let response = app
        .charge("key-1", &charge_body("attempt-1", "pm_card_visa"))
        .await;
    let error = stripe_error(response, StatusCode::NOT_FOUND).await;
    assert_eq!(error["type"], "invalid_request_error");
    assert!(app.gateway.ledger().is_empty());
}

#[tokio::test]
async fn requests_without_an_idempotency_key_each_execute_and_nothing_is_saved() {
    let app = spawn_stripe().await;
    let form = charge_form("attempt-1", pm::CARD_VISA);

    let first = json(app.stripe_post("/v1/payment_intents", None, &form).await).await;
    let second = app.stripe_post("/v1/payment_intents", None, &form).await;

    assert!(!is_replay(&second));
    assert_ne!(json(second).await["id"], first["id"]);
    let ledger = app.gateway.ledger();
    assert_eq!(
        ledger.len(),
        2,
        "no key, no protection: Stripe charges twice too"
    );
    assert_eq!(ledger[0].idempotency_key, "");
}

#[tokio::test]
async fn concurrent_duplicates_under_one_key_charge_once_and_the_others_get_409_or_a_replay() {
    let app = spawn_stripe_with(MockConfig {
        faults: FaultConfig {
            // Long enough that the duplicates overlap the first even on a loaded machine.
            latency: mock_gateway::Latency::fixed(500),
            ..FaultConfig::default()
        },
        ..MockConfig::default()
    })
    .await;
    let form = charge_form("attempt-1", pm::CARD_VISA);

    let statuses =
        send_all((0..16).map(|_| app.stripe_request("/v1/payment_intents", Some("key-1"), &form)))
            .await;

    assert_eq!(app.gateway.ledger().len(), 1);
    assert!(statuses.contains(&StatusCode::CONFLICT), "{statuses:?}");
    assert!(statuses
        .iter()
        .all(|s| *s == StatusCode::OK || *s == StatusCode::CONFLICT));
    assert_eq!(app.gateway.stats().created, 1);
}

#[tokio::test]
async fn the_request_log_keeps_the_form_and_stats_count_what_charged_nothing_as_accepted() {
    let app = spawn_stripe_with(MockConfig {
        latency_distribution: Some(
            mock_gateway::LatencyDistribution::log_normal(
                Duration::from_millis(1),
                Duration::from_millis(2),
                3,
            )
            .unwrap(),
        ),
        ..MockConfig::default()
    })
    .await;
    let id = app
        .created_intent("create-1", "attempt-1", pm::CARD_VISA)
        .await;
    app.confirm(&id, "confirm-1", &off_session()).await;
    app.retrieve(&id).await;

    let recorded = app.gateway.requests();
    assert_eq!(recorded.len(), 3);
    assert_eq!(
        recorded[0].body["metadata[payment_attempt_id]"],
        "attempt-1"
    );
    assert_eq!(recorded[0].idempotency_key.as_deref(), Some("create-1"));
    assert_eq!(
        recorded[1].path,
        format!("/v1/payment_intents/{id}/confirm")
    );
    assert_eq!(recorded[2].class, Some(ResponseClass::Lookup));
    let stats = app.gateway.stats();
    assert_eq!((stats.accepted, stats.created, stats.lookups), (1, 1, 1));
    assert_eq!(
        app.gateway.latency_drawn().draws,
        3,
        "every request waits the latency"
    );
}

#[tokio::test]
async fn after_a_decline_a_confirm_with_another_method_under_a_new_key_charges() {
    let app = spawn_stripe().await;
    let declined = app
        .create(
            "key-1",
            &charge_form("attempt-1", pm::CARD_VISA_CHARGE_DECLINED),
        )
        .await;
    let body = json(declined).await;
    let id = body["error"]["payment_intent"]["id"].as_str().unwrap();
    assert_eq!(
        body["error"]["payment_intent"]["payment_method"],
        Value::Null
    );

    let without_method = app.confirm(id, "key-2", &off_session()).await;
    assert_eq!(without_method.status(), StatusCode::BAD_REQUEST);
    let mut with_method = off_session();
    with_method.push(("payment_method", pm::CARD_VISA.to_owned()));
    let confirmed = app.confirm(id, "key-3", &with_method).await;

    assert_eq!(confirmed.status(), StatusCode::OK);
    assert_eq!(json(confirmed).await["status"], "succeeded");
    let ledger = app.gateway.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].idempotency_key, "key-3");
    assert_eq!(ledger[0].payment_method, pm::CARD_VISA);
}

#[tokio::test]
async fn a_processing_payment_intent_succeeds_by_itself_after_slow_charge_for() {
    let app = spawn_stripe_with(MockConfig {
        slow_charge_for: Duration::from_millis(50),
        ..MockConfig::default()
    })
    .await;
    let response = app
        .create("key-1", &charge_form("attempt-1", pm::FAULT_PROCESSING))
        .await;
    let id = json(response).await["id"].as_str().unwrap().to_owned();

    app.gateway.wait_for_ledger(1).await;

    let intent = json(app.retrieve(&id).await).await;
    assert_eq!(intent["status"], "succeeded");
    assert!(intent["latest_charge"].as_str().unwrap().starts_with("ch_"));
    assert_eq!(app.gateway.ledger()[0].id, id);
}

#[tokio::test]
async fn a_dispute_opens_moves_to_won_or_lost_and_is_listed_by_payment_intent_charge_and_id() {
    let app = spawn_stripe().await;
    let intent = json(
        app.create("key-d", &charge_form("attempt-d", pm::CARD_VISA))
            .await,
    )
    .await;
    let (pi, charge) = (
        intent["id"].as_str().unwrap(),
        intent["latest_charge"].as_str().unwrap(),
    );

    let opened = app
        .post_json(
            &format!("/__stripe/payment_intents/{pi}/dispute"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(opened.status(), StatusCode::OK);
    let opened = json(opened).await;
    assert_eq!(opened["status"], "needs_response", "the default");
    assert!(opened["id"].as_str().unwrap().starts_with("dp_"));
    let lost = app
        .post_json(
            &format!("/__stripe/payment_intents/{pi}/dispute"),
            &serde_json::json!({"status": "lost"}),
        )
        .await;
    assert_eq!(json(lost).await["id"], opened["id"], "one dispute, moved");
    let refused = app
        .post_json(
            &format!("/__stripe/payment_intents/{pi}/dispute"),
            &serde_json::json!({"status": "settled"}),
        )
        .await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);

    let listed = disputes_of(&app, format!("payment_intent={pi}")).await;
    assert_eq!(listed["object"], "list");
    assert_eq!(listed["url"], "/v1/disputes");
    let data = listed["data"].as_array().unwrap();
    assert_eq!(data.len(), 1);
    let dispute = &data[0];
    assert_eq!(dispute["object"], "dispute");
    assert_eq!(dispute["status"], "lost");
    assert_eq!(dispute["payment_intent"], pi);
    assert_eq!(dispute["charge"], charge);
    assert_eq!(
        (dispute["amount"].as_i64(), &dispute["currency"]),
        (Some(1999), &serde_json::json!("eur"))
    );
    assert_eq!(
        disputes_of(&app, format!("charge={charge}")).await["data"],
        listed["data"]
    );
    assert_eq!(
        disputes_of(&app, "payment_intent=pi_other".into()).await["data"],
        serde_json::json!([])
    );
    let by_id = json(
        app_get(
            &app,
            &format!("/v1/disputes/{}", opened["id"].as_str().unwrap()),
        )
        .await,
    )
    .await;
    assert_eq!(&by_id, dispute);
    let retrieved = json(
        app.authorized_get(&format!("/v1/payment_intents/{pi}?expand[]=latest_charge"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(retrieved["latest_charge"]["disputed"], true);
    let missing = app_get(&app, "/v1/disputes/dp_unknown").await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let unauthorized = app.get("/v1/disputes").await;
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
}

pub(crate) async fn app_get(app: &TestGateway, path: &str) -> Response {
    app.authorized_get(path).send().await.unwrap()
}

async fn disputes_of(app: &TestGateway, query: String) -> Value {
    json(app_get(app, &format!("/v1/disputes?{query}")).await).await
}
