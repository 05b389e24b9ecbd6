//! Where the Stripe dialect's webhooks go and how they are sent, as Stripe sends them
//! (docs.stripe.com/webhooks): an event posted to every configured endpoint with
//! `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]`, one `v1` per configured secret (two while
//! a secret is being rolled), each the HMAC-SHA256 of `<t>.<body>`; and every event sent,
//! kept for redelivery. The controls that use it are `super::webhooks`.
//!
//! With `auto`, every state change the mock makes sends its event by itself ([`Webhooks::
//! emit`]): in a task of its own, after the change's locks are released, each post bounded
//! by [`AUTO_SEND_TIMEOUT`], so an endpoint that hangs delays nothing of the mock's.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hmac::{Hmac, Mac as _};
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::Sha256;

/// How long one automatic delivery may take before it is given up (Stripe's own is longer;
/// a test's endpoint answers at once or is meant to fail).
pub(crate) const AUTO_SEND_TIMEOUT: Duration = Duration::from_secs(2);

/// The endpoints and the events sent to them.
#[derive(Default)]
pub(crate) struct Webhooks {
    endpoint: Mutex<Option<Endpoint>>,
    /// Every event sent, by id, for redelivery.
    sent: Mutex<HashMap<String, Vec<u8>>>,
    next: AtomicU64,
    /// One client for every delivery, made at the first.
    client: OnceLock<reqwest::Client>,
    /// What every delivery came to, counted as it ends.
    tally: Arc<Tally>,
}

/// Deliveries by how they ended: a soak checks that the endpoints took the genuine events
/// while they were being killed. The mock does not deliver a failed event again (Stripe
/// retries for days; onecharge's sweep is what catches an event never taken).
#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    accepted: AtomicU64,
    refused: Mutex<BTreeMap<u16, u64>>,
    failed: AtomicU64,
}

/// How the webhook deliveries the Stripe dialect made so far ended, one per event and
/// endpoint ([`crate::MockGateway::webhook_deliveries`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookDeliveries {
    /// Posts begun.
    pub sent: u64,
    /// Answered `2xx`.
    pub accepted: u64,
    /// Answered with another status, by status: a refusal (`400`) is not a listener that
    /// sheds (`503`).
    pub refused: BTreeMap<u16, u64>,
    /// No answer: refused connection, reset, timed out (an endpoint that is down).
    pub failed: u64,
}

impl WebhookDeliveries {
    /// Answered with a status other than `2xx`, whatever it was.
    pub fn refused_in_all(&self) -> u64 {
        self.refused.values().sum()
    }
}

impl Tally {
    fn count(&self, answer: &Result<u16, String>) {
        match answer {
            Ok(status) if (200..300).contains(status) => {
                self.accepted.fetch_add(1, Ordering::Relaxed);
            }
            Ok(status) => *self.refused.lock().entry(*status).or_default() += 1,
            Err(_) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Where webhooks go: `url` and every one of `urls` (each gets every event, as Stripe sends
/// to every endpoint), signed with `secrets`; `auto` sends each state change's event.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Endpoint {
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    urls: Vec<String>,
    secrets: Vec<String>,
    #[serde(default)]
    auto: bool,
}

impl Endpoint {
    fn targets(&self) -> impl Iterator<Item = &String> {
        self.url.iter().chain(&self.urls)
    }
}

/// What one endpoint answered to one delivery: its HTTP status, or why none came.
pub(crate) type Delivered = (String, Result<u16, String>);

impl Webhooks {
    /// Sets the endpoints events go to.
    pub(crate) fn configure(&self, endpoint: Endpoint) -> Result<(), &'static str> {
        if endpoint.targets().next().is_none() {
            return Err("give `url` or `urls`");
        }
        *self.endpoint.lock() = Some(endpoint);
        Ok(())
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

    /// How the deliveries made so far ended.
    pub(crate) fn deliveries(&self) -> WebhookDeliveries {
        let tally = &self.tally;
        WebhookDeliveries {
            sent: tally.sent.load(Ordering::Relaxed),
            accepted: tally.accepted.load(Ordering::Relaxed),
            refused: tally.refused.lock().clone(),
            failed: tally.failed.load(Ordering::Relaxed),
        }
    }

    /// The body of event `event_id`, as first sent.
    pub(crate) fn sent(&self, event_id: &str) -> Option<Vec<u8>> {
        self.sent.lock().get(event_id).cloned()
    }

    fn client(&self) -> reqwest::Client {
        self.client
            .get_or_init(|| {
                let _ = rustls::crypto::ring::default_provider().install_default();
                reqwest::Client::new()
            })
            .clone()
    }

    /// Posts `body` to every endpoint, signed at `timestamp` with the secrets configured
    /// now: what each answered, in the order configured.
    pub(crate) async fn post(
        &self,
        body: Vec<u8>,
        timestamp: i64,
    ) -> Result<Vec<Delivered>, String> {
        let endpoint = self
            .endpoint
            .lock()
            .clone()
            .ok_or("no webhook endpoint configured (POST /__stripe/webhooks)")?;
        let tally = Arc::clone(&self.tally);
        Ok(post_all(self.client(), &tally, endpoint, body, timestamp, None).await)
    }

    /// With `auto` configured, sends a new event of `kind` about `object` to every endpoint
    /// in a task of its own and returns at once; otherwise does nothing. Call it after the
    /// change's locks are released. Needs a tokio runtime (every state change runs on one).
    pub(crate) fn emit(&self, kind: &str, object: Value, now: i64) {
        let Some(endpoint) = self.endpoint.lock().clone().filter(|e| e.auto) else {
            return;
        };
        let (event_id, body) = self.event(kind, object, now);
        let client = self.client();
        let tally = Arc::clone(&self.tally);
        tokio::spawn(async move {
            for (url, answer) in
                post_all(client, &tally, endpoint, body, now, Some(AUTO_SEND_TIMEOUT)).await
            {
                if let Err(err) = answer {
                    tracing::debug!(event_id, url, err, "an automatic webhook was not delivered");
                }
            }
        });
    }
}

/// Posts `body`, signed at `timestamp`, to every endpoint at once: what each answered, in
/// the order configured, each counted in `tally`.
async fn post_all(
    client: reqwest::Client,
    tally: &Arc<Tally>,
    endpoint: Endpoint,
    body: Vec<u8>,
    timestamp: i64,
    timeout: Option<Duration>,
) -> Vec<Delivered> {
    let header = signature(&endpoint.secrets, timestamp, &body);
    let mut posts = tokio::task::JoinSet::new();
    for (place, url) in endpoint.targets().enumerate() {
        let mut request = client
            .post(url)
            .header("content-type", "application/json")
            .header("Stripe-Signature", header.clone())
            .body(body.clone());
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        let url = url.clone();
        let tally = Arc::clone(tally);
        tally.sent.fetch_add(1, Ordering::Relaxed);
        posts.spawn(async move {
            let answer = request
                .send()
                .await
                .map(|r| r.status().as_u16())
                .map_err(|e| e.to_string());
            tally.count(&answer);
            (place, (url, answer))
        });
    }
    let mut delivered: Vec<(usize, Delivered)> = posts.join_all().await;
    delivered.sort_by_key(|(place, _)| *place);
    delivered.into_iter().map(|(_, d)| d).collect()
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
