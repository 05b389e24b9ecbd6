//! Signed Stripe webhooks (docs/contract.md §3.3): a listener of its own, `webhook_addr`,
//! answering only `POST /webhooks/stripe` — the one thing of onecharge meant to face the
//! internet, so it shares nothing with the admin listener.
//!
//! A request is accepted only with a valid `Stripe-Signature` ([`signature::verify`]: any
//! `v1` under any configured secret, within `webhook_tolerance`), a body within
//! [`MAX_BODY`] and an event it can read; anything else is 400 (413 for a body too large),
//! counted in `onecharge_webhooks_total{result}`, with neither the body nor a secret logged.
//! A signed event whose `livemode` is not this deployment's mode (`production`) is refused
//! too (`wrong_mode`): a live event is never acted on by a test deployment, nor the reverse.
//! An accepted event is recorded by its id before the answer (a redelivery is a no-op) and
//! **never settles nor finds anything by itself**: events arrive out of order and a leaked
//! secret could forge them. Every reaction has the object read again by id. What it does
//! ([`react`], pure):
//! - `payment_intent.*` or `charge.*` for an `unknown` attempt → due for a retrieve by id
//!   now; the reconciler's usual decision settles it.
//! - `payment_intent.succeeded` for an attempt the ledger holds as `declined`, `expired` or
//!   `needs_review` (money taken that the ledger says was not), and every refund and
//!   dispute event (`charge.refunded`, `charge.refund.updated`, `charge.dispute.created`,
//!   `.updated`, `.closed`, `.funds_withdrawn`, `.funds_reinstated`) for an attempt that is
//!   final or in review → a check: the reconciler reads the PaymentIntent by id with its
//!   charge, compares it as the sweep would, and records what it shows — a finding per
//!   distinct aftermath (each with its `payments.events.reconciliation-finding.v1`
//!   event), or evidence that settles a `needs_review` attempt.
//! - anything else → recorded only. Missed webhooks are the sweep's to catch.

mod refusals;
pub mod signature;

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use secrecy::SecretString;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::listener::{self, InFlight};
use crate::config::{Settings, StripeMode};
use crate::domain::AttemptStatus;
use crate::store::findings::webhooks::{self, Effect, Event, EventRecorded, IntentAttempt};
use crate::store::Store;

/// The largest body accepted: Stripe's events are a few KiB; 256 KiB leaves room and
/// bounds what an anonymous sender can make onecharge read and hash.
pub const MAX_BODY: usize = 256 * 1024;

/// Requests handled at once, body reads included; one more is answered `503` with
/// `Retry-After` at once (Stripe retries it) instead of queueing: a redelivery burst after
/// an outage can neither pile up memory nor hold more database connections than the
/// listener's own pool.
pub const MAX_IN_FLIGHT: usize = 32;

/// How long a connection may take to send a request's headers (a slow-header sender is
/// cut off, and so is a connection idle that long), and how long a request's body may take
/// to arrive: Stripe sends a few KiB at once, so a body that trickles is a slow client
/// holding a permit.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(3);

/// Connections open at once; at the cap the listener accepts no more until one closes.
pub const MAX_CONNECTIONS: usize = 256;

/// The listener's own database connections: a burst of webhooks waits on these, never on
/// the pool intake, the relay and the executor share.
pub const DATABASE_CONNECTIONS: u32 = 2;

/// What the listener needs.
#[derive(Clone)]
pub struct WebhookState {
    store: Store,
    secrets: std::sync::Arc<Vec<SecretString>>,
    tolerance: Duration,
    in_flight: InFlight,
    /// The mode this deployment's key is for (`production`): an event of the other mode is
    /// not this account's, whatever its signature.
    mode: StripeMode,
    /// What was refused and why, written to the database every few seconds.
    refused: refusals::Tally,
}

impl WebhookState {
    /// From `stripe_webhook_secrets` and `webhook_tolerance`; `store` should be the
    /// listener's own pool ([`DATABASE_CONNECTIONS`]).
    pub fn from_settings(store: Store, settings: &Settings) -> Self {
        Self {
            in_flight: InFlight::new("webhook", MAX_IN_FLIGHT, || count("shed")),
            store,
            secrets: std::sync::Arc::new(
                settings
                    .stripe_webhook_secrets
                    .as_ref()
                    .map(signature::secrets)
                    .unwrap_or_default(),
            ),
            tolerance: settings.webhook_tolerance,
            mode: settings.stripe_mode(),
            refused: refusals::Tally::default(),
        }
    }
}

/// Only `POST /webhooks/stripe`; everything else 404 (405 for another method). A request
/// without a `Stripe-Signature` of the right shape is refused before anything else; at most
/// [`MAX_IN_FLIGHT`] others at once, each body read within [`BODY_READ_TIMEOUT`].
pub fn router(state: WebhookState) -> Router {
    Router::new()
        .route("/webhooks/stripe", post(receive))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(
            state.in_flight.clone(),
            listener::within,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.refused.clone(),
            signed_shape,
        ))
        .with_state(state)
}

/// Refuses, before a permit is taken or a byte of the body read, a request whose
/// `Stripe-Signature` is missing or not `t=<unix>,v1=<hex>`: an anonymous sender cannot
/// hold the listener's permits with slow bodies it never signed.
async fn signed_shape(
    State(refused): State<refusals::Tally>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let header = request
        .headers()
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok());
    match signature::parse(header) {
        Ok(_) => next.run(request).await,
        Err(err) => refuse(&refused, err.label(), &err.to_string()),
    }
}

/// Serves [`router`] on `listener` until `shutdown`, bounded as
/// [`listener::serve`] says (at most [`MAX_CONNECTIONS`], headers within
/// [`HEADER_READ_TIMEOUT`], bodies within [`BODY_READ_TIMEOUT`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: WebhookState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    tracing::info!(?addr, "webhook listener serving POST /webhooks/stripe");
    crate::metrics::webhook_listener_started(time::OffsetDateTime::now_utc());
    // Stops with the listener, whether it stops for the shutdown or for a failure.
    let stop_writing = shutdown.child_token();
    let writing = tokio::spawn(
        state
            .refused
            .clone()
            .keep_writing(state.store.clone(), stop_writing.clone()),
    );
    let served = listener::serve(
        listener,
        router(state),
        listener::Limits {
            name: "webhook",
            max_connections: MAX_CONNECTIONS,
            header_read: HEADER_READ_TIMEOUT,
            body_read: BODY_READ_TIMEOUT,
        },
        shutdown,
    )
    .await;
    stop_writing.cancel();
    let _ = writing.await;
    served
}

fn count(result: &'static str) {
    metrics::counter!("onecharge_webhooks_total", "result" => result).increment(1);
}

fn refuse(refused: &refusals::Tally, result: &'static str, why: &str) -> Response {
    count(result);
    refused.note(result, why);
    tracing::warn!(result, "webhook refused: {why}");
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({"error": {"type": result, "message": why}})),
    )
        .into_response()
}

#[derive(Deserialize)]
struct StripeEvent {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    data: EventData,
    /// Live or test mode; Stripe says it on every event.
    #[serde(default)]
    livemode: Option<bool>,
}

#[derive(Deserialize)]
struct EventData {
    object: EventObject,
}

#[derive(Deserialize)]
struct EventObject {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    object: Option<String>,
    /// On a charge or a dispute: the PaymentIntent it belongs to.
    #[serde(default)]
    payment_intent: Option<serde_json::Value>,
}

impl StripeEvent {
    /// The PaymentIntent the event is about.
    fn payment_intent(&self) -> Option<String> {
        let object = &self.data.object;
        match object.object.as_deref() {
            Some("payment_intent") => object.id.clone(),
            _ => match &object.payment_intent {
                Some(serde_json::Value::String(id)) => Some(id.clone()),
                Some(serde_json::Value::Object(pi)) => {
                    pi.get("id").and_then(|v| v.as_str()).map(str::to_owned)
                }
                _ => None,
            },
        }
        .filter(|id| crate::gateway::stripe::is_intent_id(id))
    }
}

async fn receive(State(state): State<WebhookState>, headers: HeaderMap, body: Bytes) -> Response {
    let header = headers
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok());
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    if let Err(err) = signature::verify(
        header,
        &body,
        &state.secrets,
        now,
        state.tolerance.as_secs() as i64,
    ) {
        return refuse(&state.refused, err.label(), &err.to_string());
    }
    let Ok(event) = serde_json::from_slice::<StripeEvent>(&body) else {
        return refuse(
            &state.refused,
            "unreadable",
            "a signed body that is not a Stripe event",
        );
    };
    if event.id.is_empty() || event.id.len() > 255 || event.kind.is_empty() {
        return refuse(
            &state.refused,
            "unreadable",
            "an event without an id or a type",
        );
    }
    if let Some(livemode) = event.livemode {
        if StripeMode::of_livemode(livemode) != state.mode {
            return refuse(
                &state.refused,
                "wrong_mode",
                &format!(
                    "a {} event, but this deployment's key is a {} key (production = {}): \
                     an endpoint of the other mode sends here, or the event was replayed \
                     from elsewhere; recorded nowhere",
                    if livemode { "live-mode" } else { "test-mode" },
                    if state.mode == StripeMode::Live {
                        "live"
                    } else {
                        "test"
                    },
                    state.mode == StripeMode::Live,
                ),
            );
        }
    }
    let intent = event.payment_intent();
    let recorded = webhooks::record_event(
        &state.store,
        &Event {
            id: &event.id,
            kind: &event.kind,
            payment_intent_id: intent.as_deref(),
        },
        |attempt| react(&event.kind, intent.as_deref(), attempt),
    )
    .await;
    match recorded {
        Ok(EventRecorded::Duplicate) => {
            count("duplicate");
            (
                StatusCode::OK,
                Json(serde_json::json!({"received": true, "duplicate": true})),
            )
                .into_response()
        }
        Ok(EventRecorded::New(did)) => {
            count("accepted");
            tracing::info!(
                event_id = event.id,
                kind = event.kind,
                did,
                "webhook accepted"
            );
            (
                StatusCode::OK,
                Json(serde_json::json!({"received": true, "did": did})),
            )
                .into_response()
        }
        // Not recorded: Stripe retries a 5xx, so the event is not lost.
        Err(err) => {
            count("failed");
            tracing::error!(error = %err, event_id = event.id, "cannot record a webhook");
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}

/// What an accepted event of `kind` about PaymentIntent `intent` does to its attempt.
pub fn react(kind: &str, intent: Option<&str>, attempt: Option<&IntentAttempt>) -> Effect {
    let (Some(_), Some(attempt)) = (intent, attempt) else {
        return Effect::Ignore;
    };
    let id = attempt.payment_attempt_id;
    let settled_or_in_review = matches!(
        attempt.status,
        AttemptStatus::Succeeded
            | AttemptStatus::Declined
            | AttemptStatus::Expired
            | AttemptStatus::NeedsReview
    );
    match kind {
        _ if attempt.status == AttemptStatus::Unknown
            && (kind.starts_with("payment_intent.") || kind.starts_with("charge.")) =>
        {
            Effect::Wake(id)
        }
        "payment_intent.succeeded"
            if matches!(
                attempt.status,
                AttemptStatus::Declined | AttemptStatus::Expired | AttemptStatus::NeedsReview
            ) =>
        {
            Effect::Check(id)
        }
        "charge.refunded"
        | "charge.refund.updated"
        | "charge.dispute.created"
        | "charge.dispute.updated"
        | "charge.dispute.closed"
        | "charge.dispute.funds_withdrawn"
        | "charge.dispute.funds_reinstated"
            if settled_or_in_review =>
        {
            Effect::Check(id)
        }
        _ => Effect::Ignore,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::PaymentAttemptId;

    fn attempt(status: AttemptStatus) -> IntentAttempt {
        IntentAttempt {
            payment_attempt_id: PaymentAttemptId::random(),
            status,
            money: crate::domain::Money::of(1999, "EUR").unwrap(),
        }
    }

    #[test]
    fn a_payment_intent_event_wakes_an_unknown_attempt_and_never_settles() {
        for kind in [
            "payment_intent.succeeded",
            "payment_intent.payment_failed",
            "payment_intent.processing",
            "payment_intent.canceled",
            "payment_intent.requires_action",
        ] {
            let unknown = attempt(AttemptStatus::Unknown);
            assert_eq!(
                react(kind, Some("pi_1"), Some(&unknown)),
                Effect::Wake(unknown.payment_attempt_id)
            );
            for status in [
                AttemptStatus::Pending,
                AttemptStatus::InFlight,
                AttemptStatus::Succeeded,
            ] {
                assert_eq!(
                    react(kind, Some("pi_1"), Some(&attempt(status))),
                    Effect::Ignore,
                    "{kind} {status}"
                );
            }
        }
    }

    #[test]
    fn money_taken_for_an_attempt_the_ledger_says_was_not_charged_is_checked_by_id() {
        for status in [
            AttemptStatus::Declined,
            AttemptStatus::Expired,
            AttemptStatus::NeedsReview,
        ] {
            let held = attempt(status);
            assert_eq!(
                react("payment_intent.succeeded", Some("pi_1"), Some(&held)),
                Effect::Check(held.payment_attempt_id),
                "{status}"
            );
            assert_eq!(
                react("payment_intent.payment_failed", Some("pi_1"), Some(&held)),
                Effect::Ignore,
                "{status}"
            );
        }
    }

    #[test]
    fn every_refund_and_dispute_event_of_a_final_attempt_is_checked_by_id_never_taken_on_its_word()
    {
        for kind in [
            "charge.refunded",
            "charge.refund.updated",
            "charge.dispute.created",
            "charge.dispute.updated",
            "charge.dispute.closed",
            "charge.dispute.funds_withdrawn",
            "charge.dispute.funds_reinstated",
        ] {
            for status in [
                AttemptStatus::Succeeded,
                AttemptStatus::Declined,
                AttemptStatus::Expired,
                AttemptStatus::NeedsReview,
            ] {
                let held = attempt(status);
                assert_eq!(
                    react(kind, Some("pi_1"), Some(&held)),
                    Effect::Check(held.payment_attempt_id),
                    "{kind} {status}"
                );
            }
            for status in [AttemptStatus::Pending, AttemptStatus::InFlight] {
                assert_eq!(
                    react(kind, Some("pi_1"), Some(&attempt(status))),
                    Effect::Ignore,
                    "{kind} {status}: the executor owns it"
                );
            }
        }
    }

    #[test]
    fn an_event_about_nothing_onecharge_holds_is_only_recorded() {
        assert_eq!(
            react("payment_intent.succeeded", Some("pi_1"), None),
            Effect::Ignore
        );
        assert_eq!(react("customer.created", None, None), Effect::Ignore);
        assert_eq!(
            react(
                "invoice.paid",
                Some("pi_1"),
                Some(&attempt(AttemptStatus::Unknown))
            ),
            Effect::Ignore
        );
    }

    #[test]
    fn the_payment_intent_is_read_from_the_intent_a_charge_or_a_dispute() {
        let event = |object: serde_json::Value| -> StripeEvent {
            serde_json::from_value(
                serde_json::json!({"id": "evt_1", "type": "x", "data": {"object": object}}),
            )
            .unwrap()
        };
        assert_eq!(
            event(serde_json::json!({"id": "pi_1", "object": "payment_intent"})).payment_intent(),
            Some("pi_1".into())
        );
        assert_eq!(
            event(serde_json::json!({"id": "ch_1", "object": "charge", "payment_intent": "pi_2"}))
                .payment_intent(),
            Some("pi_2".into())
        );
        assert_eq!(
            event(serde_json::json!({"id": "dp_1", "object": "dispute", "payment_intent": {"id": "pi_3"}}))
                .payment_intent(),
            Some("pi_3".into())
        );
        assert_eq!(
            event(serde_json::json!({"id": "ch_1", "object": "charge", "payment_intent": "../x"}))
                .payment_intent(),
            None
        );
    }
}
