//! Where the Stripe dialect's webhooks go and how they are sent, as Stripe sends them
//! (docs.stripe.com/webhooks): an event posted to the configured endpoint with
//! `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]`, one `v1` per configured secret (two while
//! a secret is being rolled), each the HMAC-SHA256 of `<t>.<body>`; and every event sent,
//! kept for redelivery. The controls that use it are `super::webhooks`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac as _};
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::Sha256;

/// The endpoint and the events sent to it.
#[derive(Default)]
pub(crate) struct Webhooks {
    endpoint: Mutex<Option<Endpoint>>,
    /// Every event sent, by id, for redelivery.
    sent: Mutex<HashMap<String, Vec<u8>>>,
    next: AtomicU64,
}

impl Webhooks {
    /// Sets the endpoint events go to.
    pub(crate) fn configure(&self, endpoint: Endpoint) {
        *self.endpoint.lock() = Some(endpoint);
    }

    /// A new event of `kind` about `object`, created at `created` (Unix seconds), kept for
    /// redelivery: its id and body.
    pub(crate) fn event(&self, kind: &str, object: Value, created: i64) -> (String, Vec<u8>) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let event_id = format!("evt_mock_{n}");
        let event = json!({
            "id": event_id, "object": "event", "type": kind, "created": created,
            "data": {"object": object}, "livemode": false,
        });
        let body = serde_json::to_vec(&event).expect("an event serializes");
        self.sent.lock().insert(event_id.clone(), body.clone());
        (event_id, body)
    }

    /// The body of event `event_id`, as first sent.
    pub(crate) fn sent(&self, event_id: &str) -> Option<Vec<u8>> {
        self.sent.lock().get(event_id).cloned()
    }

    /// Posts `body` to the endpoint, signed at `timestamp` with the secrets configured
    /// now; the endpoint's HTTP status.
    pub(crate) async fn post(&self, body: Vec<u8>, timestamp: i64) -> Result<u16, String> {
        let endpoint = self
            .endpoint
            .lock()
            .clone()
            .ok_or("no webhook endpoint configured (POST /__stripe/webhooks)")?;
        let header = signature(&endpoint.secrets, timestamp, &body);
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
}

#[derive(Clone, Deserialize)]
/// A webhook endpoint: its URL and the secrets events are signed with.
pub(crate) struct Endpoint {
    url: String,
    secrets: Vec<String>,
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
