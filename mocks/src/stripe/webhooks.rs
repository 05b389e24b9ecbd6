//! Signed webhooks, as Stripe sends them (docs.stripe.com/webhooks): an event posted to the
//! configured endpoint with `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]`, one `v1` per
//! configured secret (two while a secret is being rolled), each the HMAC-SHA256 of
//! `<t>.<body>`. Controls:
//! - `POST /__stripe/webhooks` `{"url": "…", "secrets": ["whsec_…", …]}`: the endpoint.
//! - `POST /__stripe/webhooks/send` `{"type": "payment_intent.succeeded", "payment_intent":
//!   "pi_…"}`: builds the event (the PaymentIntent, or for `charge.*` a charge or dispute
//!   naming it), sends it, answers `{"event_id", "status"}` (the endpoint's HTTP status).
//! - `POST /__stripe/webhooks/{event_id}/redeliver`: the same body again, signed anew with
//!   the secrets configured now — Stripe's redelivery.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use hmac::{Hmac, Mac as _};
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::Sha256;

use crate::http::Answer;
use crate::server::Shared;

#[derive(Default)]
pub(crate) struct Webhooks {
    endpoint: Mutex<Option<Endpoint>>,
    /// Every event sent, by id, for redelivery.
    sent: Mutex<HashMap<String, Vec<u8>>>,
    next: AtomicU64,
}

#[derive(Clone, Deserialize)]
pub(crate) struct Endpoint {
    url: String,
    secrets: Vec<String>,
}

fn answer(status: StatusCode, body: Value) -> Response {
    Answer::json(status, &body).into_response_plain()
}

/// `t=<now>,v1=…` for `body` under every secret.
fn signature(secrets: &[String], timestamp: i64, body: &[u8]) -> String {
    let mut header = format!("t={timestamp}");
    for secret in secrets {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .expect("HMAC takes a key of any length");
        mac.update(format!("{timestamp}.").as_bytes());
        mac.update(body);
        header.push_str(",v1=");
        for byte in mac.finalize().into_bytes() {
            header.push_str(&format!("{byte:02x}"));
        }
    }
    header
}

/// Posts `body` to the endpoint, signed now; the endpoint's status.
async fn deliver(shared: &Shared, body: Vec<u8>) -> Result<u16, String> {
    let endpoint = shared
        .stripe
        .webhooks
        .endpoint
        .lock()
        .clone()
        .ok_or("no webhook endpoint configured (POST /__stripe/webhooks)")?;
    let header = signature(
        &endpoint.secrets,
        shared.clock.wall_now().unix_timestamp(),
        &body,
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
        .post(&endpoint.url)
        .header("content-type", "application/json")
        .header("Stripe-Signature", header)
        .body(body)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| e.to_string())
}

/// Delivers event `event_id` and answers the control with what the endpoint said.
async fn delivered(shared: &Shared, event_id: &str, body: Vec<u8>) -> Response {
    match deliver(shared, body).await {
        Ok(status) => answer(
            StatusCode::OK,
            json!({"event_id": event_id, "status": status}),
        ),
        Err(err) => answer(
            StatusCode::BAD_GATEWAY,
            json!({"event_id": event_id, "error": err}),
        ),
    }
}

/// `POST /__stripe/webhooks`.
pub(crate) async fn configure(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    match serde_json::from_slice::<Endpoint>(&body) {
        Ok(endpoint) => {
            *shared.stripe.webhooks.endpoint.lock() = Some(endpoint);
            answer(StatusCode::OK, json!({"configured": true}))
        }
        Err(err) => answer(StatusCode::BAD_REQUEST, json!({"error": err.to_string()})),
    }
}

#[derive(Deserialize)]
struct Send {
    #[serde(rename = "type")]
    kind: String,
    payment_intent: String,
}

/// `POST /__stripe/webhooks/send`.
pub(crate) async fn send(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Send>(&body) else {
        return answer(
            StatusCode::BAD_REQUEST,
            json!({"error": "send {\"type\": …, \"payment_intent\": …}"}),
        );
    };
    let intent = match shared.stripe.get(&request.payment_intent) {
        Ok(intent) => intent,
        Err(_) => {
            return answer(
                StatusCode::NOT_FOUND,
                json!({"error": "no such payment_intent"}),
            )
        }
    };
    let object = match request.kind.as_str() {
        "charge.refunded" => json!({"id": intent.latest_charge, "object": "charge",
                                     "payment_intent": intent.id, "refunded": true}),
        "charge.dispute.created" => json!({"id": format!("dp_{}", intent.id), "object": "dispute",
                                            "payment_intent": intent.id, "charge": intent.latest_charge}),
        _ => intent.to_json(),
    };
    let n = shared.stripe.webhooks.next.fetch_add(1, Ordering::Relaxed);
    let event_id = format!("evt_mock_{n}");
    let event = json!({
        "id": event_id, "object": "event", "type": request.kind,
        "created": shared.clock.wall_now().unix_timestamp(),
        "data": {"object": object}, "livemode": false,
    });
    let body = serde_json::to_vec(&event).expect("an event serializes");
    shared
        .stripe
        .webhooks
        .sent
        .lock()
        .insert(event_id.clone(), body.clone());
    delivered(&shared, &event_id, body).await
}

/// `POST /__stripe/webhooks/{event_id}/redeliver`.
pub(crate) async fn redeliver(
    State(shared): State<Arc<Shared>>,
    Path(event_id): Path<String>,
) -> Response {
    let Some(body) = shared.stripe.webhooks.sent.lock().get(&event_id).cloned() else {
        return answer(StatusCode::NOT_FOUND, json!({"error": "no such event"}));
    };
    delivered(&shared, &event_id, body).await
}
