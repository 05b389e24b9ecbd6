//! The mock gateway's test controls (the `/__*` routes of `mocks/src/server.rs`), called by
//! what they do: money moving at the gateway after the charge (a refund or a dispute made
//! outside onecharge, a charge edited), and the Stripe dialect's signed webhooks (where they
//! go, an event sent, an event redelivered). A test body says `mock.open_dispute(&pi)`, not
//! which path the mock serves it on.
//!
//! Every change asserts that the mock made it; the webhook controls answer what the mock
//! said (the event's id and the endpoint's HTTP status), for the test to assert on.
#![allow(dead_code)]

use serde_json::{json, Value};

/// A client of one mock gateway's test controls.
pub struct MockControl {
    base_url: String,
    http: reqwest::Client,
}

impl MockControl {
    /// The controls of the mock gateway at `base_url` (`MockGateway::base_url`).
    pub fn new(base_url: impl Into<String>) -> Self {
        onecharge::config::tls::install_crypto_provider();
        Self {
            base_url: base_url.into(),
            http: reqwest::Client::new(),
        }
    }

    // The Stripe dialect: a PaymentIntent's money after the charge
    // (`POST /__stripe/payment_intents/{pi}/{refund|dispute|amount}`).

    /// Refunds PaymentIntent `pi` from the Dashboard, not through onecharge: `amount` more,
    /// or (`None`) what is left of the charge.
    pub async fn refund_outside(&self, pi: &str, amount: Option<i64>) {
        let body = amount.map_or_else(String::new, |a| json!({ "amount": a }).to_string());
        self.change_intent(pi, "refund", body).await;
    }

    /// Opens a dispute on PaymentIntent `pi`'s charge, as the customer's bank would
    /// (`needs_response`).
    pub async fn open_dispute(&self, pi: &str) {
        self.change_intent(pi, "dispute", String::new()).await;
    }

    /// Opens a dispute on PaymentIntent `pi`'s charge in `status` (one of Stripe's), or moves
    /// the one it has there.
    pub async fn set_dispute(&self, pi: &str, status: &str) {
        let body = json!({ "status": status }).to_string();
        self.change_intent(pi, "dispute", body).await;
    }

    /// Changes PaymentIntent `pi`'s amount to `amount`: it no longer matches what onecharge
    /// asked for.
    pub async fn change_intent_amount(&self, pi: &str, amount: i64) {
        let body = json!({ "amount": amount }).to_string();
        self.change_intent(pi, "amount", body).await;
    }

    async fn change_intent(&self, pi: &str, action: &str, body: String) {
        let path = format!("/__stripe/payment_intents/{pi}/{action}");
        self.change(&path, body).await;
    }

    // The onecharge dialect: a listed charge (`POST /__charges/{id}`).

    /// Changes charge `charge`'s amount at the gateway to `amount_minor`.
    pub async fn change_charge_amount(&self, charge: &str, amount_minor: i64) {
        let body = json!({ "amount_minor": amount_minor }).to_string();
        self.change(&format!("/__charges/{charge}"), body).await;
    }

    /// Disputes charge `charge` (`inquiry`, `open`, `won`, `lost`), or moves its dispute.
    pub async fn dispute_charge(&self, charge: &str, status: &str) {
        let body = json!({ "dispute": status }).to_string();
        self.change(&format!("/__charges/{charge}"), body).await;
    }

    // The Stripe dialect's signed webhooks (`POST /__stripe/webhooks…`).

    /// Sends the events [`MockControl::send_webhook`] makes to every one of `urls`, signed
    /// with each of `secrets`.
    pub async fn set_webhook_endpoints(&self, urls: &[String], secrets: &[&str]) {
        let body = json!({ "urls": urls, "secrets": secrets });
        self.change("/__stripe/webhooks", body.to_string()).await;
    }

    /// As [`MockControl::set_webhook_endpoints`], and every state change the mock makes
    /// sends its event by itself.
    pub async fn send_every_change_to(&self, urls: &[String], secrets: &[&str]) {
        let body = json!({ "urls": urls, "secrets": secrets, "auto": true });
        self.change("/__stripe/webhooks", body.to_string()).await;
    }

    /// Sends an event of `kind` about PaymentIntent `pi` as it stands: what the mock
    /// answered, `{"event_id", "status"}` (the endpoint's HTTP status).
    pub async fn send_webhook(&self, kind: &str, pi: &str) -> Value {
        let body = json!({ "type": kind, "payment_intent": pi });
        self.answer("/__stripe/webhooks/send", body).await
    }

    /// Sends event `event` again, signed anew with the secrets set now (Stripe's
    /// redelivery): what the mock answered, as [`MockControl::send_webhook`].
    pub async fn redeliver(&self, event: &str) -> Value {
        let path = format!("/__stripe/webhooks/{event}/redeliver");
        self.answer(&path, json!({})).await
    }

    /// `POST path` with `body`, which the mock must take.
    async fn change(&self, path: &str, body: String) {
        let answer = self
            .http
            .post(format!("{}{path}", self.base_url))
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = answer.status();
        assert!(
            status.is_success(),
            "POST {path}: {status} {}",
            answer.text().await.unwrap_or_default()
        );
    }

    /// `POST path` with the JSON `body`: the JSON the mock answered, whatever its status.
    async fn answer(&self, path: &str, body: Value) -> Value {
        let request = self
            .http
            .post(format!("{}{path}", self.base_url))
            .json(&body);
        super::api::json_answer(request).await
    }
}
