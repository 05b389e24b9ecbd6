//! The guarantees every kind of money-moving work keeps (decision 230), as one test body
//! run for each kind: a charge and a refund. A new kind (a capture, a void, a payout) adds a
//! row to [`KINDS`] and its few steps to [`Work`], never a copy of a test.
//!
//! - Processing for fifteen days through failed lookups: followed, never handed to a
//!   person by a failure on the way, settled without one when the gateway settles it.
//! - An answer the database would refuse goes to a person, told why, instead of looping.
//! - Resends after a `409` stop at the key window.
//! - A fenced write changes nothing.
//! - Times come from the database's clock, not the host's.
//!
//! Time moves by moving every stored time back (`Work::advance`), as `time.rs` does: the
//! database's clock is the only one the roles read.

use std::sync::Arc;
use std::time::Duration;

use crate::support::refund_roles::RefundRoles;
use mock_gateway::{
    payment_methods as pm, Dialect, FaultConfig, FaultRule, MockConfig, RefundFaults,
};
use onecharge::clock::ManualClock;
use onecharge::domain::refund::validate;
use onecharge::domain::{Actor, CommandHeaders, PaymentAttemptId, RefundId};
use onecharge::gateway::{GatewayClient, GatewayHealth, GatewayKind};
use onecharge::store::refunds::{record_refund, RefundRecord};
use serde_json::json;

use crate::support::harness::{refused_url, Harness};
use crate::support::Records;

const HOUR: Duration = Duration::from_secs(3600);

/// The kinds of work that move money.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Charge,
    Refund,
}

const KINDS: [Kind; 2] = [Kind::Charge, Kind::Refund];

/// One item of work of a kind, in its own harness: the charge, or the refund of a charge.
struct Work {
    kind: Kind,
    h: Harness,
    attempt: PaymentAttemptId,
    refund: RefundId,
}

impl Work {
    /// The charge's status, or the refund's.
    async fn status(&self) -> String {
        match self.kind {
            Kind::Charge => self.h.attempt(self.attempt).await.status,
            Kind::Refund => self.h.refund(self.refund).await.status,
        }
    }

    /// Why it is in review (empty when it is not).
    async fn review_reason(&self) -> String {
        match self.kind {
            Kind::Charge => self
                .h
                .attempt(self.attempt)
                .await
                .review_reason
                .unwrap_or_default(),
            Kind::Refund => self
                .h
                .refund(self.refund)
                .await
                .review_reason
                .unwrap_or_default(),
        }
    }

    /// How many times it was handed to a person.
    async fn reviews(&self) -> usize {
        let path = match self.kind {
            Kind::Charge => self.h.path(self.attempt).await,
            Kind::Refund => self.h.refund_path(self.refund).await,
        };
        path.iter().filter(|to| *to == "needs_review").count()
    }

    /// The status that says "still open at the gateway": a charge stays `unknown` while it
    /// is processing, a refund is `processing`.
    fn processing(&self) -> &'static str {
        match self.kind {
            Kind::Charge => "unknown",
            Kind::Refund => "processing",
        }
    }

    /// Lets `by` pass: every stored time of the charge and its refunds moves back, and the
    /// mock's clock forward.
    async fn advance(&self, by: Duration) {
        self.h.advance(by).await;
        self.h.advance_refunds(by).await;
        self.h.gateway.advance_clock(by);
    }

    /// One pass of the role that sends (the executor, the refund worker) with `client`.
    async fn send(&self, client: GatewayClient) {
        match self.kind {
            Kind::Charge => {
                self.h.executor_with(client).run_once().await.unwrap();
            }
            Kind::Refund => {
                worker(&self.h, client).pass().await.unwrap();
            }
        }
    }

    /// One pass of the role that looks up (the reconciler, the refund worker) with `client`.
    async fn look_up(&self, client: GatewayClient) {
        match self.kind {
            Kind::Charge => {
                self.h.reconciler_with(client).run_once().await.unwrap();
            }
            Kind::Refund => {
                worker(&self.h, client).pass().await.unwrap();
            }
        }
    }

    /// Sends made under the item's key: its gateway calls that asked to move money.
    async fn sends(&self) -> usize {
        let operation = match self.kind {
            Kind::Charge => "charge",
            Kind::Refund => "refund",
        };
        self.h
            .call_operations(self.attempt)
            .await
            .iter()
            .filter(|op| *op == operation)
            .count()
    }

    /// The gateway lets the item settle (the debit clears, the refund lands).
    async fn settle_at_gateway(&self) {
        match self.kind {
            Kind::Charge => self.h.finish_slow_charge().await,
            Kind::Refund => {
                self.h.gateway.settle_refunds();
            }
        }
    }

    /// The final status it reached when the gateway moved the money.
    fn succeeded(&self) -> &'static str {
        "succeeded"
    }
}

fn worker(h: &Harness, client: GatewayClient) -> RefundRoles {
    RefundRoles::new(
        h.store.clone(),
        client,
        GatewayHealth::from_settings(&h.settings.executor),
        &h.settings,
    )
}

fn client(h: &Harness) -> GatewayClient {
    GatewayClient::from_settings(&h.settings).expect("a client")
}

/// A client of a gateway that does not answer (connection refused): a failed lookup.
fn unreachable(h: &Harness) -> GatewayClient {
    h.client_with_url(&refused_url())
}

/// Records a refund of `attempt` (`amount` minor units), as intake does.
async fn record(h: &Harness, attempt: PaymentAttemptId, amount: i64) -> RefundId {
    let refund_id = RefundId::random();
    let body = json!({
        "refund_id": refund_id,
        "payment_attempt_id": attempt,
        "amount_minor": amount,
        "reason": "item returned",
    })
    .to_string();
    let command = validate(
        &CommandHeaders {
            message_id: Some(format!("kernel-{refund_id}")),
            ..Default::default()
        },
        body.as_bytes(),
    )
    .unwrap()
    .command;
    record_refund(
        &h.store,
        "test-refund-intake",
        &RefundRecord {
            message_id: onecharge::domain::MessageId::checked(format!("kernel-{refund_id}")),
            stream_sequence: 1,
            body_sha256: onecharge::domain::command::body_sha256(body.as_bytes()),
            command,
            correlation_id: None,
            traceparent: None,
        },
    )
    .await
    .unwrap();
    refund_id
}

/// A succeeded charge of `payment_method` in `h`, and a refund of 500 of it recorded.
async fn refund_of_a_charge(h: &Harness, payment_method: &str) -> (PaymentAttemptId, RefundId) {
    let attempt = h.seed(payment_method).await.payment_attempt_id;
    h.executor_with(client(h)).run_once().await.unwrap();
    assert_eq!(h.attempt(attempt).await.status, "succeeded");
    let refund = record(h, attempt, 500).await;
    (attempt, refund)
}

/// An item the gateway keeps processing for weeks (a bank debit): a Stripe PaymentIntent
/// `processing`, a refund `pending`; sent once, its answer read.
async fn processing_for_weeks(kind: Kind) -> Work {
    let h = Harness::with(
        MockConfig {
            dialect: Dialect::Stripe,
            slow_charge_for: Duration::from_secs(60 * 24 * 3600),
            refund_settle_after: Duration::from_secs(24 * 3600),
            ..MockConfig::default()
        },
        |s| s.gateway_kind = GatewayKind::Stripe,
    )
    .await;
    let work = match kind {
        Kind::Charge => {
            let attempt = h
                .seed(mock_gateway::stripe::payment_methods::FAULT_PROCESSING)
                .await
                .payment_attempt_id;
            Work {
                kind,
                h,
                attempt,
                refund: RefundId::random(),
            }
        }
        Kind::Refund => {
            let (attempt, refund) = refund_of_a_charge(&h, pm::PENDING_REFUND).await;
            Work {
                kind,
                h,
                attempt,
                refund,
            }
        }
    };
    work.send(client(&work.h)).await;
    work.look_up(client(&work.h)).await;
    assert_eq!(work.status().await, work.processing(), "{kind:?}");
    work
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_processing_for_fourteen_days_through_failed_lookups_settles_without_a_person() {
    for kind in KINDS {
        let work = processing_for_weeks(kind).await;
        // Every third lookup fails; six hours pass between lookups, for fourteen days.
        for n in 1..=14 * 4 {
            work.advance(6 * HOUR).await;
            if n % 3 == 0 {
                work.look_up(unreachable(&work.h)).await;
            } else {
                work.look_up(client(&work.h)).await;
            }
            assert_ne!(
                work.status().await,
                "needs_review",
                "{kind:?}, lookup {n} (day {}): {}",
                n / 4,
                work.review_reason().await
            );
        }
        assert_eq!(work.reviews().await, 0, "{kind:?}");

        work.settle_at_gateway().await;
        work.advance(6 * HOUR).await;
        work.look_up(client(&work.h)).await;
        assert_eq!(work.status().await, work.succeeded(), "{kind:?}");
        assert_eq!(work.reviews().await, 0, "{kind:?}: no person was asked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_still_processing_past_processing_max_goes_to_a_person_saying_so() {
    for kind in KINDS {
        let work = processing_for_weeks(kind).await;
        for _ in 0..16 * 4 {
            work.advance(6 * HOUR).await;
            work.look_up(client(&work.h)).await;
        }
        assert_eq!(work.status().await, "needs_review", "{kind:?}");
        let reason = work.review_reason().await;
        assert!(
            reason.contains("reconciler.processing_max"),
            "{kind:?}: {reason}"
        );
    }
}

/// A gateway that answers every charge and refund with `answer` and every lookup with
/// `{"data":[answer]}`: for the answers a real gateway may send but the mock never does.
async fn gateway_answering(answer: serde_json::Value) -> String {
    use axum::routing::get;
    let lookup = json!({ "data": [answer.clone()] });
    let route = move || {
        let (answer, lookup) = (answer.clone(), lookup.clone());
        get(move || {
            let lookup = lookup.clone();
            async move { axum::Json(lookup) }
        })
        .post(move || {
            let answer = answer.clone();
            async move { (axum::http::StatusCode::CREATED, axum::Json(answer)) }
        })
    };
    let app = axum::Router::new()
        .route("/v1/charges", route())
        .route("/v1/refunds", route());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A fresh item of `kind` (a charge due, a refund of a succeeded charge admitted and due)
/// on the mock in onecharge's dialect.
async fn due(kind: Kind) -> Work {
    let h = Harness::with(MockConfig::default(), |s| {
        s.reconciler.schedule = vec![Duration::from_secs(60); 3];
    })
    .await;
    match kind {
        Kind::Charge => {
            let attempt = h.seed(pm::CARD_VISA).await.payment_attempt_id;
            Work {
                kind,
                h,
                attempt,
                refund: RefundId::random(),
            }
        }
        Kind::Refund => {
            let (attempt, refund) = refund_of_a_charge(&h, pm::CARD_VISA).await;
            Work {
                kind,
                h,
                attempt,
                refund,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_database_would_refuse_goes_to_a_person_saying_why() {
    let mut seen = Vec::new();
    for kind in KINDS {
        let work = due(kind).await;
        let long_id = format!("x_{}", "9".repeat(298));
        let url = gateway_answering(json!({
            "id": long_id, "status": "succeeded", "decline_code": null,
            "amount_minor": 500, "currency": "EUR", "refund_id": work.refund,
        }))
        .await;
        let odd = work.h.client_with_url(&url);
        // However often it is asked, the answer never loops: a person gets it, told why.
        for _ in 0..6 {
            work.send(odd.clone()).await;
            work.advance(HOUR).await;
            work.look_up(odd.clone()).await;
            if work.status().await == "needs_review" {
                break;
            }
        }
        seen.push((kind, work.status().await, work.review_reason().await));
    }
    assert!(
        seen.iter().all(
            |(_, status, reason)| status == "needs_review" && reason.contains("300 characters")
        ),
        "each kind goes to a person saying why: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_reason_with_a_nul_is_stored_escaped_and_the_item_settles() {
    for kind in KINDS {
        let work = due(kind).await;
        let url = gateway_answering(json!({
            "id": "x_nul", "status": if kind == Kind::Charge { "declined" } else { "failed" },
            "decline_code": "card\u{0}closed", "failure_reason": "card\u{0}closed",
            "amount_minor": 500, "currency": "EUR", "refund_id": work.refund,
        }))
        .await;
        let odd = work.h.client_with_url(&url);
        work.send(odd.clone()).await;
        let expected = if kind == Kind::Charge {
            "declined"
        } else {
            "failed"
        };
        assert_eq!(work.status().await, expected, "{kind:?}");
        let stored: String = match kind {
            Kind::Charge => work.h.attempt(work.attempt).await.decline_code.unwrap(),
            Kind::Refund => work.h.refund(work.refund).await.failure_reason.unwrap(),
        };
        assert!(
            stored.contains("card\\u{0}closed"),
            "{kind:?}: the gateway's words are kept, their NUL escaped: {stored}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resends_after_a_409_stop_at_the_key_window() {
    for kind in KINDS {
        let h = Harness::with(
            MockConfig {
                slow_charge_for: Duration::from_secs(60 * 24 * 3600),
                faults: FaultConfig {
                    refunds: RefundFaults {
                        slow_refund: FaultRule::times(1),
                        ..RefundFaults::default()
                    },
                    ..FaultConfig::default()
                },
                ..MockConfig::default()
            },
            |s| {
                s.gateway_request_timeout = Duration::from_millis(300);
                s.executor.max_age = Duration::from_secs(72 * 3600);
                s.reconciler.schedule = vec![Duration::from_secs(60); 3];
            },
        )
        .await;
        let work = match kind {
            Kind::Charge => {
                let attempt = h.seed(pm::FAULT_SLOW_CHARGE).await.payment_attempt_id;
                Work {
                    kind,
                    h,
                    attempt,
                    refund: RefundId::random(),
                }
            }
            Kind::Refund => {
                let (attempt, refund) = refund_of_a_charge(&h, pm::CARD_VISA).await;
                Work {
                    kind,
                    h,
                    attempt,
                    refund,
                }
            }
        };
        // The first send hangs at the gateway, its key in progress for weeks: every resend
        // answers 409. A day and a half passes, an hour at a time.
        let key_window =
            work.h.settings.gateway_key_retention - work.h.settings.gateway_key_retention_margin;
        let steps = (key_window.as_secs() / 3600) as usize + 12;
        let mut sends_in_window = 0;
        for step in 0..steps {
            work.send(client(&work.h)).await;
            work.look_up(client(&work.h)).await;
            work.advance(HOUR).await;
            if step == (key_window.as_secs() / 3600) as usize {
                sends_in_window = work.sends().await;
            }
        }
        assert!(
            sends_in_window > 1,
            "{kind:?}: resent while the key is kept"
        );
        assert_eq!(
            work.sends().await,
            sends_in_window,
            "{kind:?}: nothing sent under the key once the key window closed"
        );
        assert_eq!(work.status().await, "needs_review", "{kind:?}");
        let reason = work.review_reason().await;
        assert!(reason.contains("key window"), "{kind:?}: {reason}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_changes_nothing() {
    for kind in KINDS {
        let work = due(kind).await;
        let h = &work.h;
        // A holder claims the item and stalls; its lease runs out and another takes over.
        let taken_over: String;
        let stale_write = match kind {
            Kind::Charge => {
                let claim = h.executor().claim(1).await.unwrap().remove(0);
                h.advance(h.settings.executor.lease + Duration::from_secs(1))
                    .await;
                h.reconciler().run_once().await.unwrap();
                taken_over = work.status().await;
                let write = onecharge::domain::SettleWrite {
                    fence: claim.fence(),
                    settlement: onecharge::domain::Settlement::Succeeded {
                        charge_id: onecharge::domain::GatewayChargeId::from_gateway("ch_late"),
                    },
                    cause: onecharge::domain::TransitionCause::GatewaySucceeded,
                    call: None,
                    now: h.db_now().await,
                };
                onecharge::store::attempts::settle(&h.store, &write)
                    .await
                    .unwrap()
            }
            Kind::Refund => {
                let actor = Actor::Executor("stalls".into());
                onecharge::store::refunds::admit_due(
                    &h.store,
                    &actor,
                    10,
                    HOUR,
                    Duration::from_millis(1),
                )
                .await
                .unwrap();
                let held = onecharge::store::refunds::claim_pending(
                    &h.store,
                    &actor,
                    Duration::from_secs(10),
                    1,
                )
                .await
                .unwrap()
                .remove(0);
                work.advance(Duration::from_secs(11)).await;
                onecharge::store::refunds::expire_leases(&h.store, &actor)
                    .await
                    .unwrap();
                taken_over = work.status().await;
                onecharge::store::refunds::settle(
                    &h.store,
                    &held,
                    &onecharge::domain::refund_call::RefundMove::Succeeded {
                        gateway_refund_id: "re_late".into(),
                    },
                    "refund_answer",
                    &actor,
                    None,
                )
                .await
                .unwrap()
            }
        };
        assert!(!stale_write, "{kind:?}: the fence refuses the stale write");
        assert_ne!(taken_over, "in_flight", "{kind:?}: taken over");
        assert_eq!(work.status().await, taken_over, "{kind:?}: nothing changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_stamped_by_the_database_clock_whatever_the_host_says() {
    let mut seen = Vec::new();
    for kind in KINDS {
        let work = due(kind).await;
        let h = &work.h;
        let ahead = Arc::new(ManualClock::new(
            time::OffsetDateTime::now_utc() + time::Duration::hours(1),
        ));
        match kind {
            Kind::Charge => {
                h.executor().with_clock(ahead).run_once().await.unwrap();
            }
            Kind::Refund => {
                worker(h, client(h)).with_clock(ahead).pass().await.unwrap();
            }
        }
        assert_eq!(work.status().await, "succeeded", "{kind:?}");
        let operation = if kind == Kind::Charge {
            "charge"
        } else {
            "refund"
        };
        let off: Option<bool> = sqlx::query_scalar(
            "SELECT bool_or(abs(extract(epoch FROM now() - started_at)) > 60
                            OR abs(extract(epoch FROM now() - finished_at)) > 60)
             FROM gateway_call_records WHERE payment_attempt_id = $1 AND operation = $2",
        )
        .bind(work.attempt)
        .bind(operation)
        .fetch_one(h.store.pool())
        .await
        .unwrap();
        seen.push((kind, off));
    }
    for (kind, off) in seen {
        assert_eq!(
            off,
            Some(false),
            "{kind:?}: the call is stamped by the database's clock, not the host's hour ahead"
        );
    }
}
