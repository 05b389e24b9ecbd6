//! The Stripe dialect's automatic webhooks (`"auto": true`): every state change sends its
//! signed event by itself, to every configured endpoint.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, Mac as _};
use mock_gateway::stripe::payment_methods as pm;
use mock_gateway::{Dialect, MockConfig};
use parking_lot::Mutex;
use reqwest::{header, StatusCode};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::helpers::*;

const SECRET: &str = "whsec_auto";

/// An endpoint that answers `200` and keeps every event's `type`, whether its signature is
/// `SECRET`'s, and its object.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<(String, bool, Value)>>>);

impl Receiver {
    async fn start(&self) -> String {
        async fn receive(State(seen): State<Receiver>, headers: HeaderMap, body: Bytes) {
            let event: Value = serde_json::from_slice(&body).unwrap();
            let signed = headers
                .get("stripe-signature")
                .and_then(|h| h.to_str().ok())
                .is_some_and(|h| signed_by_secret(h, &body));
            let kind = event["type"].as_str().unwrap().to_owned();
            let object = event["data"]["object"].clone();
            seen.0.lock().push((kind, signed, object));
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/", post(receive))
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    fn kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = self.0.lock().iter().map(|(k, ..)| k.clone()).collect();
        kinds.sort();
        kinds
    }

    fn all_signed(&self) -> bool {
        self.0.lock().iter().all(|(_, signed, _)| *signed)
    }

    /// The objects of the events of `kind` received, in arrival order.
    fn objects(&self, kind: &str) -> Vec<Value> {
        let seen = self.0.lock();
        seen.iter()
            .filter(|(k, ..)| k == kind)
            .map(|(.., object)| object.clone())
            .collect()
    }
}

/// Whether `header` (`t=…,v1=…`) is the HMAC-SHA256 of `<t>.<body>` under `SECRET`.
fn signed_by_secret(header: &str, body: &[u8]) -> bool {
    let field = |name: &str| {
        header
            .split(',')
            .find_map(|part| part.strip_prefix(name))
            .unwrap_or_default()
            .to_owned()
    };
    let (timestamp, v1) = (field("t="), field("v1="));
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(body);
    let expected: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    v1 == expected
}

fn intent_form(attempt: &str, payment_method: &str, confirm: bool) -> String {
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.extend_pairs([
        ("amount", "1999"),
        ("currency", "eur"),
        ("payment_method", payment_method),
        ("metadata[payment_attempt_id]", attempt),
    ]);
    if confirm {
        form.extend_pairs([("confirm", "true"), ("off_session", "true")]);
    }
    form.finish()
}

async fn stripe_post(app: &TestGateway, path: &str, key: &str, form: String) -> Value {
    app.authorized_post(path)
        .header("Idempotency-Key", key)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn with_auto_every_state_change_sends_its_signed_event_to_every_endpoint() {
    let app = spawn_gateway_with(MockConfig {
        dialect: Dialect::Stripe,
        ..MockConfig::default()
    })
    .await;
    let (first, second) = (Receiver::default(), Receiver::default());
    let urls = [first.start().await, second.start().await];
    let configured = app
        .post_json(
            "/__stripe/webhooks",
            &json!({"urls": urls, "secrets": [SECRET], "auto": true}),
        )
        .await;
    assert_eq!(configured.status(), StatusCode::OK);

    // Charged, then partly refunded, disputed and the dispute won.
    let charged = stripe_post(
        &app,
        "/v1/payment_intents",
        "k1",
        intent_form("a1", pm::CARD_VISA, true),
    )
    .await;
    let pi = charged["id"].as_str().unwrap();
    for (action, body) in [
        ("refund", json!({"amount": 500})),
        ("dispute", json!({})),
        ("dispute", json!({"status": "under_review"})),
        ("dispute", json!({"status": "won"})),
    ] {
        let changed = app
            .post_json(&format!("/__stripe/payment_intents/{pi}/{action}"), &body)
            .await;
        assert_eq!(changed.status(), StatusCode::OK);
    }
    // Declined; and one cancelled before it was confirmed.
    stripe_post(
        &app,
        "/v1/payment_intents",
        "k2",
        intent_form("a2", pm::CARD_CHARGE_DECLINED, true),
    )
    .await;
    let waiting = stripe_post(
        &app,
        "/v1/payment_intents",
        "k3",
        intent_form("a3", pm::CARD_VISA, false),
    )
    .await;
    let waiting = waiting["id"].as_str().unwrap();
    stripe_post(
        &app,
        &format!("/v1/payment_intents/{waiting}/cancel"),
        "k4",
        String::new(),
    )
    .await;

    let expected = [
        "charge.dispute.closed",
        "charge.dispute.created",
        "charge.dispute.updated",
        "charge.refunded",
        "payment_intent.canceled",
        "payment_intent.payment_failed",
        "payment_intent.succeeded",
    ];
    within(
        Duration::from_secs(10),
        "every event reaches both endpoints",
        async {
            while first.kinds() != expected || second.kinds() != expected {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    assert!(first.all_signed() && second.all_signed());
}

#[tokio::test]
async fn without_auto_nothing_is_sent_and_an_endpoint_that_never_answers_holds_nothing_up() {
    let app = spawn_gateway_with(MockConfig {
        dialect: Dialect::Stripe,
        ..MockConfig::default()
    })
    .await;
    let quiet = Receiver::default();
    let url = quiet.start().await;
    app.post_json(
        "/__stripe/webhooks",
        &json!({"url": url, "secrets": [SECRET]}),
    )
    .await;
    stripe_post(
        &app,
        "/v1/payment_intents",
        "k1",
        intent_form("a1", pm::CARD_VISA, true),
    )
    .await;

    // An endpoint that accepts the connection and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}/", silent.local_addr().unwrap());
    app.post_json(
        "/__stripe/webhooks",
        &json!({"urls": [silent_url, url], "secrets": [SECRET], "auto": true}),
    )
    .await;
    within(
        Duration::from_secs(2),
        "a charge while an endpoint hangs",
        async {
            stripe_post(
                &app,
                "/v1/payment_intents",
                "k2",
                intent_form("a2", pm::CARD_VISA, true),
            )
            .await
        },
    )
    .await;
    within(
        Duration::from_secs(10),
        "the other endpoint still gets it",
        async {
            while quiet.kinds().is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    assert_eq!(
        quiet.kinds(),
        ["payment_intent.succeeded"],
        "only since auto"
    );
    let refused = app
        .post_json(
            "/__stripe/webhooks",
            &json!({"secrets": [SECRET], "auto": true}),
        )
        .await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "no endpoint");
    drop(silent);
}

#[tokio::test]
async fn with_auto_refunds_send_charge_refunded_when_they_succeed_and_refund_updated_when_they_move(
) {
    let app = spawn_gateway_with(MockConfig {
        dialect: Dialect::Stripe,
        ..MockConfig::default()
    })
    .await;
    let receiver = Receiver::default();
    let url = receiver.start().await;
    app.post_json(
        "/__stripe/webhooks",
        &json!({"url": url, "secrets": [SECRET], "auto": true}),
    )
    .await;
    let mut intents = Vec::new();
    for (n, payment_method) in [
        pm::CARD_VISA,
        pm::CARD_PENDING_REFUND,
        pm::CARD_PENDING_REFUND,
    ]
    .into_iter()
    .enumerate()
    {
        let form = intent_form(&format!("a{n}"), payment_method, true);
        let charged = stripe_post(&app, "/v1/payment_intents", &format!("k{n}"), form).await;
        intents.push(charged["id"].as_str().unwrap().to_owned());
    }
    let mut refunds = Vec::new();
    for (n, pi) in intents.iter().enumerate() {
        let form = format!("payment_intent={pi}&amount=500&metadata[refund_id]=rf-{n}");
        refunds.push(stripe_post(&app, "/v1/refunds", &format!("r{n}"), form).await);
    }
    let statuses: Vec<&Value> = refunds.iter().map(|r| &r["status"]).collect();
    assert_eq!(statuses, ["succeeded", "pending", "pending"]);

    // One pending refund fails by a control, the other settles (succeeds).
    let failing = refunds[2]["id"].as_str().unwrap();
    let failed = app
        .post_json(
            &format!("/__refunds/{failing}"),
            &json!({"status": "failed"}),
        )
        .await;
    assert_eq!(failed.status(), StatusCode::OK);
    assert_eq!(app.gateway.settle_refunds().len(), 1);

    let expected = [
        "charge.refund.updated",
        "charge.refund.updated",
        "charge.refunded",
        "charge.refunded",
        "payment_intent.succeeded",
        "payment_intent.succeeded",
        "payment_intent.succeeded",
    ];
    within(
        Duration::from_secs(10),
        "every refund event arrives",
        async {
            while receiver.kinds() != expected {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    assert!(receiver.all_signed());
    let mut updated: Vec<Value> = receiver
        .objects("charge.refund.updated")
        .iter()
        .map(|refund| json!([refund["id"], refund["status"]]))
        .collect();
    updated.sort_by_key(|pair| pair[1].as_str().unwrap().to_owned());
    assert_eq!(
        updated,
        [
            json!([refunds[2]["id"], "failed"]),
            json!([refunds[1]["id"], "succeeded"])
        ]
    );
    let refunded = receiver.objects("charge.refunded");
    assert!(refunded
        .iter()
        .all(|charge| charge["amount_refunded"] == 500));

    // Sent by hand, `charge.refund.updated` carries the PaymentIntent's newest refund.
    let sent = app
        .post_json(
            "/__stripe/webhooks/send",
            &json!({"type": "charge.refund.updated", "payment_intent": intents[2]}),
        )
        .await;
    assert_eq!(sent.status(), StatusCode::OK);
    let by_hand = receiver.objects("charge.refund.updated").pop().unwrap();
    assert_eq!(by_hand["id"], refunds[2]["id"]);
    assert_eq!(by_hand["status"], "failed");
}

#[tokio::test]
async fn every_delivery_is_counted_by_how_it_ended_accepted_refused_or_unanswered() {
    let app = spawn_gateway_with(MockConfig {
        dialect: Dialect::Stripe,
        ..MockConfig::default()
    })
    .await;
    let taking = Receiver::default();
    let taking_url = taking.start().await;
    // An endpoint that refuses everything, as onecharge refuses a bad signature.
    let refusing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refusing_url = format!("http://{}/", refusing.local_addr().unwrap());
    let refuse = Router::new().route("/", post(|| async { StatusCode::BAD_REQUEST }));
    tokio::spawn(async move { axum::serve(refusing, refuse).await });
    // An endpoint that is down: a port nothing listens on any more.
    let down = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let down_url = format!("http://{}/", down.local_addr().unwrap());
    drop(down);
    app.post_json(
        "/__stripe/webhooks",
        &json!({"urls": [taking_url, refusing_url, down_url], "secrets": [SECRET], "auto": true}),
    )
    .await;
    assert_eq!(
        app.gateway.webhook_deliveries(),
        mock_gateway::stripe::WebhookDeliveries::default()
    );

    // Two state changes (a success, a decline), each to three endpoints.
    for (n, payment_method) in [pm::CARD_VISA, pm::CARD_CHARGE_DECLINED]
        .into_iter()
        .enumerate()
    {
        let form = intent_form(&format!("a{n}"), payment_method, true);
        stripe_post(&app, "/v1/payment_intents", &format!("k{n}"), form).await;
    }
    let expected = mock_gateway::stripe::WebhookDeliveries {
        sent: 6,
        accepted: 2,
        refused: [(400, 2)].into(),
        failed: 2,
    };
    within(
        Duration::from_secs(10),
        "every delivery ends and is counted",
        async {
            while app.gateway.webhook_deliveries() != expected {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    assert_eq!(taking.kinds().len(), 2, "the live endpoint took both");
}
