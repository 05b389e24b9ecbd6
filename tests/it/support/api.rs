//! The admin role's HTTP API as its clients call it: the service serving only the admin role
//! ([`Served::admin`]), JSON in and out, a bearer token when the test has one; and the
//! attempt in review that an operator decides through it or through the console.
//!
//! The client follows no redirect: what a test reads is what the service answered (the API
//! never redirects; the console's pages do, and their tests check where to).
#![allow(dead_code)]

use onecharge::config::Settings;
use reqwest::{RequestBuilder, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

use super::env::TestEnv;
use super::records::Records;
use super::served::Served;

/// The admin role serving a test's settings, and an HTTP client of it; stopped (and awaited)
/// by [`AdminApi::stop`].
pub struct AdminApi {
    served: Served,
    http: reqwest::Client,
}

impl AdminApi {
    /// Serves the admin role (API and console) of `settings` on a free port.
    pub async fn start(settings: &Settings) -> Self {
        let served = Served::admin(settings).await;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client");
        Self { served, http }
    }

    /// `http://<admin address><path>`.
    pub fn url(&self, path: &str) -> String {
        self.served.url(path)
    }

    /// The client the helpers use, for a request they do not make (a header or a cookie of
    /// the test's own).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// `GET path`, with `token` as the bearer token if there is one: the status and the JSON
    /// body (`null` when the body is not JSON).
    pub async fn get(&self, path: &str, token: Option<&str>) -> (StatusCode, Value) {
        answer(self.http.get(self.url(path)), token).await
    }

    /// `POST path` with the JSON `body`; otherwise as [`AdminApi::get`].
    pub async fn post(&self, path: &str, token: Option<&str>, body: Value) -> (StatusCode, Value) {
        answer(self.http.post(self.url(path)).json(&body), token).await
    }

    /// Stops the service and waits until it stopped cleanly.
    pub async fn stop(self) {
        self.served.stop().await;
    }
}

/// Sends `request` (with `token` as the bearer token, if any): the status and the JSON body.
async fn answer(request: RequestBuilder, token: Option<&str>) -> (StatusCode, Value) {
    let request = match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    };
    let response = request.send().await.expect("the admin role answers");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// One pending attempt of `order_id`, recorded the way intake records it.
pub async fn attempt(env: &TestEnv, order_id: &str) -> Uuid {
    env.record_command(
        json!({"order_id": order_id, "description": null, "requested_at": null}),
        None,
    )
    .await
}

/// An [`attempt`] of `order_id` moved to `needs_review` because its lookup was inconclusive,
/// first sent 10 minutes ago (inside the key window, so every decision is open to it).
pub async fn attempt_in_review(env: &TestEnv, order_id: &str) -> Uuid {
    let id = attempt(env, order_id).await;
    env.set_attempt(
        id,
        "status = 'needs_review', review_reason = 'lookup inconclusive',
             first_dispatched_at = now() - interval '10 minutes', created_at = now() - interval '20 minutes'",
    )
    .await;
    id
}

/// Sends `request` and reads its JSON answer, whatever the status (the test asserts on it).
pub async fn json_answer(request: RequestBuilder) -> Value {
    request
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .expect("a JSON body")
}
