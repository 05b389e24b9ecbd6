//! Starts a real mock gateway on a free loopback port and talks to it over HTTP.

use std::future::Future;
use std::time::Duration;

use mock_gateway::{MockConfig, MockGateway};
use reqwest::{RequestBuilder, Response, StatusCode};
use serde_json::{json, Value};

pub const API_KEY: &str = "sk_test_gateway_suite";

pub struct TestGateway {
    pub gateway: MockGateway,
    pub client: reqwest::Client,
    pub url: String,
}

pub async fn spawn_gateway() -> TestGateway {
    spawn_gateway_with(MockConfig::default()).await
}

pub async fn spawn_gateway_with(config: MockConfig) -> TestGateway {
    let gateway = MockGateway::start(MockConfig {
        api_key: API_KEY.to_owned(),
        ..config
    })
    .await
    .expect("the mock gateway starts");
    let url = gateway.base_url();
    TestGateway {
        gateway,
        client: {
            // reqwest is built with rustls and no bundled provider (see the workspace
            // Cargo.toml): the process must name one before building a client.
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::new()
        },
        url,
    }
}

/// A valid charge body; the reference doubles as the payment attempt id.
pub fn charge_body(reference: &str, payment_method: &str) -> Value {
    json!({
        "amount_minor": 1999,
        "currency": "EUR",
        "customer_id": "cus_42",
        "payment_method": payment_method,
        "reference": reference,
        "description": "Order ord_1001",
    })
}

/// A valid §3 refund body: `amount_minor` EUR of `charge_id`, for onecharge refund
/// `refund_id` of attempt `attempt-1`.
pub fn refund_body(charge_id: &str, amount_minor: i64, refund_id: &str) -> Value {
    json!({
        "charge_id": charge_id,
        "amount_minor": amount_minor,
        "currency": "EUR",
        "reference": "attempt-1",
        "refund_id": refund_id,
        "reason": "requested by the customer",
    })
}

impl TestGateway {
    /// `POST {path}` with the right API key, for the requests the named helpers do not build.
    pub fn authorized_post(&self, path: &str) -> RequestBuilder {
        self.client
            .post(format!("{}{path}", self.url))
            .bearer_auth(API_KEY)
    }

    /// `GET {path}` with the right API key.
    pub fn authorized_get(&self, path: &str) -> RequestBuilder {
        self.client
            .get(format!("{}{path}", self.url))
            .bearer_auth(API_KEY)
    }

    pub fn post_charge(&self, key: &str, body: &Value) -> RequestBuilder {
        self.authorized_post("/v1/charges")
            .header("Idempotency-Key", key)
            .json(body)
    }

    pub async fn charge(&self, key: &str, body: &Value) -> Response {
        self.post_charge(key, body)
            .send()
            .await
            .expect("the charge request gets a response")
    }

    /// Charges each payment method in turn, the n-th (from 1) under `key-n` for `attempt-n`.
    pub async fn charge_each(&self, payment_methods: &[&str]) -> Vec<Response> {
        let mut responses = Vec::new();
        for (n, payment_method) in (1..).zip(payment_methods) {
            let body = charge_body(&format!("attempt-{n}"), payment_method);
            responses.push(self.charge(&format!("key-{n}"), &body).await);
        }
        responses
    }

    pub fn post_refund(&self, key: &str, body: &Value) -> RequestBuilder {
        self.authorized_post("/v1/refunds")
            .header("Idempotency-Key", key)
            .json(body)
    }

    pub async fn refund(&self, key: &str, body: &Value) -> Response {
        self.post_refund(key, body)
            .send()
            .await
            .expect("the refund request gets a response")
    }

    /// Charges 1999 EUR with `payment_method` under `key` and returns the charge's id.
    pub async fn charged(&self, key: &str, payment_method: &str) -> String {
        let response = self.charge(key, &charge_body(key, payment_method)).await;
        assert_eq!(
            response.status(),
            StatusCode::CREATED,
            "charging under {key}"
        );
        let charge: Value = response.json().await.unwrap();
        charge["id"].as_str().unwrap().to_owned()
    }

    /// The §3 list (contract §3.2) of everything charged this century, one page of 100.
    pub async fn listed_charges(&self) -> Vec<Value> {
        let page: Value = self
            .authorized_get("/v1/charges")
            .query(&[
                ("created_gte", "2000-01-01T00:00:00Z"),
                ("created_lt", "2100-01-01T00:00:00Z"),
                ("limit", "100"),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        page["data"].as_array().expect("data is a list").clone()
    }

    /// `GET /v1/refunds?idempotency_key=K` answered `200`: its `data`.
    pub async fn refund_lookup(&self, key: &str) -> Vec<Value> {
        let response = self
            .authorized_get("/v1/refunds")
            .query(&[("idempotency_key", key)])
            .send()
            .await
            .expect("the refund lookup gets a response");
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = response.json().await.unwrap();
        body["data"].as_array().expect("data is a list").clone()
    }

    pub async fn lookup(&self, key: &str) -> Vec<Value> {
        let response = self
            .authorized_get("/v1/charges")
            .query(&[("idempotency_key", key)])
            .send()
            .await
            .expect("the lookup gets a response");
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = response.json().await.unwrap();
        body["data"].as_array().expect("data is a list").clone()
    }

    /// Sends the charge again under `key` and checks that the saved answer came back, with
    /// `status` and `Idempotent-Replayed: true`, instead of a new charge.
    pub async fn expect_replay(&self, key: &str, body: &Value, status: StatusCode) -> Response {
        let response = self.charge(key, body).await;
        assert_eq!(response.status(), status, "the replay under {key}");
        assert!(
            is_replay(&response),
            "the answer under {key} is not a replay"
        );
        response
    }

    /// A charge from a client that gives up after `timeout`.
    pub async fn charge_giving_up_after(
        &self,
        timeout: Duration,
        key: &str,
        body: &Value,
    ) -> reqwest::Result<Response> {
        self.post_charge(key, body).timeout(timeout).send().await
    }

    /// `GET {path}` without credentials (the `/__*` controls need none).
    pub async fn get(&self, path: &str) -> Response {
        let url = format!("{}{path}", self.url);
        self.client.get(url).send().await.unwrap()
    }

    /// `POST {path}` with a JSON body and without credentials, like [`Self::get`].
    pub async fn post_json(&self, path: &str, body: &Value) -> Response {
        let url = format!("{}{path}", self.url);
        self.client.post(url).json(body).send().await.unwrap()
    }

    /// `PUT {path}` with a JSON body and without credentials, like [`Self::get`].
    pub async fn put_json(&self, path: &str, body: &Value) -> Response {
        let url = format!("{}{path}", self.url);
        self.client.put(url).json(body).send().await.unwrap()
    }

    pub async fn admin_get(&self, path: &str) -> Value {
        let response = self.get(path).await;
        assert_eq!(response.status(), StatusCode::OK, "GET {path}");
        response.json().await.unwrap()
    }
}

/// A response's JSON body.
pub async fn json(response: Response) -> Value {
    response.json().await.expect("a JSON body")
}

/// Sends the requests at once, each from a task of its own, and returns their statuses.
pub async fn send_all(requests: impl IntoIterator<Item = RequestBuilder>) -> Vec<StatusCode> {
    let sends: Vec<_> = requests
        .into_iter()
        .map(|request| tokio::spawn(request.send()))
        .collect();
    let mut statuses = Vec::new();
    for send in sends {
        statuses.push(send.await.unwrap().unwrap().status());
    }
    statuses
}

/// Reads a JSON body and its error type, for the `{"error":{"type":…}}` answers.
pub async fn error_type(response: Response) -> String {
    let body: Value = response.json().await.expect("a JSON error body");
    body["error"]["type"]
        .as_str()
        .unwrap_or_else(|| panic!("no error type in {body}"))
        .to_owned()
}

/// Checks an error answer of the onecharge dialect: its status and its error type.
pub async fn assert_error(response: Response, status: StatusCode, expected_type: &str) {
    assert_eq!(response.status(), status, "answering with {expected_type}");
    assert_eq!(error_type(response).await, expected_type);
}

pub fn is_replay(response: &Response) -> bool {
    response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// Fails a test that would otherwise hang.
pub async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {limit:?}"))
}
