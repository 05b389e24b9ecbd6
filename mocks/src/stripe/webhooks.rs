//! The controls of the Stripe dialect's signed webhooks (`super::events` signs and sends
//! them):
//! - `POST /__stripe/webhooks` `{"url": "…", "urls": ["…", …], "secrets": ["whsec_…", …],
//!   "auto": true}`: the endpoints (every one gets every event); with `auto`, every state
//!   change the mock makes sends its event by itself (`super::events`).
//! - `POST /__stripe/webhooks/send` `{"type": "payment_intent.succeeded", "payment_intent":
//!   "pi_…"}`: builds the event (the PaymentIntent, or for `charge.*` a charge, refund or
//!   dispute naming it), sends it, answers `{"event_id", "status"}` (the endpoint's HTTP
//!   status).
//! - `POST /__stripe/webhooks/{event_id}/redeliver`: the same body again, signed anew with
//!   the secrets configured now — Stripe's redelivery.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};

use super::events::Endpoint;
use crate::answer::Answer;
use crate::state::Shared;

fn answer(status: StatusCode, body: Value) -> Response {
    Answer::json(status, &body).into_response_plain()
}

/// Delivers event `event_id` and answers the control with what the endpoint said.
async fn delivered(shared: &Shared, event_id: &str, body: Vec<u8>) -> Response {
    let now = shared.clock.wall_now().unix_timestamp();
    let deliveries = match shared.stripe.webhooks.post(body, now).await {
        Ok(deliveries) => deliveries,
        Err(err) => {
            return answer(
                StatusCode::BAD_GATEWAY,
                json!({"event_id": event_id, "error": err}),
            )
        }
    };
    let each: Vec<Value> = deliveries
        .iter()
        .map(|(url, answer)| match answer {
            Ok(status) => json!({"url": url, "status": status}),
            Err(err) => json!({"url": url, "error": err}),
        })
        .collect();
    // The first endpoint's answer, as when there was only one.
    match &deliveries[0].1 {
        Ok(status) => answer(
            StatusCode::OK,
            json!({"event_id": event_id, "status": status, "deliveries": each}),
        ),
        Err(err) => answer(
            StatusCode::BAD_GATEWAY,
            json!({"event_id": event_id, "error": err, "deliveries": each}),
        ),
    }
}

/// `POST /__stripe/webhooks`.
pub(crate) async fn configure(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    match serde_json::from_slice::<Endpoint>(&body) {
        Ok(endpoint) => match shared.stripe.webhooks.configure(endpoint) {
            Ok(()) => answer(StatusCode::OK, json!({"configured": true})),
            Err(err) => answer(StatusCode::BAD_REQUEST, json!({"error": err})),
        },
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
        // The PaymentIntent's newest refund as it stands (a stub naming the PaymentIntent
        // when it has none, as a forger's would).
        "charge.refund.updated" => match shared.refunds.page(Some(&intent.id), None, 1) {
            Ok(page) if !page.data.is_empty() => shared.stripe.refund_object(&page.data[0]),
            _ => json!({"id": format!("re_{}", intent.id), "object": "refund",
                        "payment_intent": intent.id, "charge": intent.latest_charge}),
        },
        // The charge's dispute as it stands (a dispute event names it even before the
        // control opened one, as a forger's would).
        kind if kind.starts_with("charge.dispute.") => {
            match shared.stripe.disputes.get(&intent.id) {
                Some(dispute) => intent.dispute_object(&dispute),
                None => json!({"id": format!("dp_{}", intent.id), "object": "dispute",
                               "payment_intent": intent.id, "charge": intent.latest_charge}),
            }
        }
        _ => intent.to_json(),
    };
    let created = shared.clock.wall_now().unix_timestamp();
    let (event_id, body) = shared.stripe.webhooks.event(&request.kind, object, created);
    delivered(&shared, &event_id, body).await
}

/// `POST /__stripe/webhooks/{event_id}/redeliver`.
pub(crate) async fn redeliver(
    State(shared): State<Arc<Shared>>,
    Path(event_id): Path<String>,
) -> Response {
    let Some(body) = shared.stripe.webhooks.sent(&event_id) else {
        return answer(StatusCode::NOT_FOUND, json!({"error": "no such event"}));
    };
    delivered(&shared, &event_id, body).await
}
