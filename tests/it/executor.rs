//! The executor against real PostgreSQL and the in-process mock gateway: every row of the
//! contract's classification table end to end, retries with one key, leases and fencing,
//! credentials pause, circuit breaker, shutdown.

use std::time::Duration;

use crate::support::harness::GatewayCallRow;
use crate::support::records::Event;
use crate::support::{
    self, charge_request, charge_request_with_amount, first_outcome, run_leaving_one_in, Harness,
    Records, API_KEY,
};
use mock_gateway::{
    payment_methods as pm, FaultConfig, FaultRule, Latency, MockConfig, ResponseClass,
};
use onecharge::domain::outcome::{ChargeStatus, GatewayOutcome, LookupOutcome};
use onecharge::domain::AttemptStatus;
use onecharge::domain::{
    CallOperation, GatewayCallRecord, SettleWrite, Settlement, TransitionCause,
};
use onecharge::executor::{Disposition, SettlementWriter};
use onecharge::gateway::{Admission, BreakerState};
use onecharge::store::attempts::settle_all;
use tokio_util::sync::CancellationToken;

fn pair(from: Option<&str>, to: &str, cause: &str) -> (Option<String>, String, String) {
    (from.map(str::to_owned), to.to_owned(), cause.to_owned())
}

/// The gateway calls of an attempt charged on its first try, under lease token 1, as
/// `charge` (what [`Harness::gateway_calls`] reads).
fn one_call_charged(charge: &str) -> Vec<GatewayCallRow> {
    vec![(
        1,
        Some(1),
        Some(201),
        "succeeded".into(),
        Some(charge.into()),
    )]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_charge_succeeds_with_its_transition_event_and_gateway_call_in_one_commit() {
    let h = Harness::new().await;
    let command = h.seed(pm::CARD_VISA).await;
    let id = command.payment_attempt_id;

    run_leaving_one_in(&h.executor(), AttemptStatus::Succeeded).await;

    let ledger = h.gateway.ledger();
    assert_eq!(ledger.len(), 1);
    let row = h.attempt(id).await;
    assert_eq!(row.status, "succeeded");
    assert_eq!(row.tries, 1);
    assert_eq!(row.lease_token, 1);
    assert_eq!(row.lease_owner, None);
    assert_eq!(row.lease_expires_at, None);
    assert_eq!(
        row.gateway_charge_id.as_deref(),
        Some(ledger[0].id.as_str())
    );
    assert!(row.dispatched_at.is_some());
    assert_eq!(row.first_dispatched_at, row.dispatched_at);
    assert_eq!(ledger[0].idempotency_key, row.idempotency_key);
    assert_eq!(ledger[0].reference, id.to_string());
    assert_eq!(
        h.transitions(id).await,
        vec![
            pair(None, "pending", "command_accepted"),
            pair(Some("pending"), "in_flight", "dispatched"),
            pair(Some("in_flight"), "succeeded", "gateway_succeeded"),
        ]
    );
    assert_eq!(h.gateway_calls(id).await, one_call_charged(&ledger[0].id));
    let (status, payload, headers) = h.only_event(id).await;
    assert_eq!(status, "succeeded");
    assert_eq!(payload["gateway_charge_id"], ledger[0].id.as_str());
    assert_eq!(payload["amount_minor"], 1999);
    assert_eq!(headers["Nats-Msg-Id"], payload["event_id"]);
    assert!(headers["Causation-Id"]
        .as_str()
        .unwrap()
        .starts_with("msg-"));
    assert_eq!(headers["Correlation-Id"], "corr-test");

    // a settled attempt is never claimed again
    assert_eq!(h.executor().run_once().await.unwrap().claimed(), 0);
    assert_eq!(h.gateway.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_402_decline_is_final_with_its_decline_code_and_event() {
    let h = Harness::new().await;
    let id = h.seed(pm::CARD_DECLINED).await.payment_attempt_id;

    run_leaving_one_in(&h.executor(), AttemptStatus::Declined).await;

    let row = h.attempt(id).await;
    assert_eq!(row.status, "declined");
    assert_eq!(row.decline_code.as_deref(), Some("card_declined"));
    assert_eq!(
        row.gateway_charge_id.as_deref(),
        Some(h.gateway.ledger()[0].id.as_str())
    );
    let calls = h.gateway_calls(id).await;
    assert_eq!((calls[0].2, calls[0].3.as_str()), (Some(402), "declined"));
    let event = h.only_event(id).await;
    assert_eq!(event.0, "declined");
    assert_eq!(event.1["decline_code"], "card_declined");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_outcome_replayed_with_200_settles_as_its_body_says() {
    let h = Harness::with(
        MockConfig {
            replay_declined_with_200: true,
            ..MockConfig::default()
        },
        |_| {},
    )
    .await;
    let commands = h.seed_many(&[pm::CARD_VISA, pm::CARD_DECLINED]).await;
    // An earlier try reached the gateway but its answer was lost.
    let client = h.client_with_key(API_KEY);
    let first = client.charge(&charge_request(&commands[0])).await;
    let second = client.charge(&charge_request(&commands[1])).await;
    assert_eq!(first.http_status, Some(201));
    assert_eq!(second.http_status, Some(402));

    let report = run_leaving_one_in(&h.executor(), AttemptStatus::Succeeded).await;
    assert_eq!(report.count(AttemptStatus::Declined), 1);
    for a in &report.attempts {
        assert!(matches!(
            a.outcome,
            Some(
                GatewayOutcome::Succeeded { replayed: true, .. }
                    | GatewayOutcome::Declined { replayed: true, .. }
            )
        ));
    }
    assert_eq!(h.gateway.ledger().len(), 2, "a replay charges nothing");
    let succeeded = h.attempt(commands[0].payment_attempt_id).await;
    assert_eq!(
        succeeded.gateway_charge_id,
        first.outcome.charge_id().map(ToString::to_string)
    );
    let declined = h.attempt(commands[1].payment_attempt_id).await;
    assert_eq!(declined.status, "declined");
    for command in &commands {
        let calls = h.gateway_calls(command.payment_attempt_id).await;
        assert_eq!(calls[0].2, Some(200), "replayed with 200");
    }
    let replays = h
        .gateway
        .requests()
        .iter()
        .filter(|r| r.class == Some(ResponseClass::Replayed))
        .count();
    assert_eq!(replays, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_in_progress_is_retried_soon_with_the_same_key_and_charges_once() {
    // Long enough that the executor's claim and send land while the earlier request runs,
    // on a machine busy enough to take most of a second over them (400 ms did not), and
    // short of the 2 s request timeout, which the executor's own request also waits out.
    let h = Harness::with_faults(FaultConfig {
        latency: Latency::fixed(1500),
        ..FaultConfig::default()
    })
    .await;
    let command = h.seed(pm::CARD_VISA).await;
    let id = command.payment_attempt_id;
    // An earlier request under the same key is still running at the gateway.
    let client = h.client_with_key(API_KEY);
    let request = charge_request(&command);
    let earlier = tokio::spawn(async move { client.charge(&request).await });
    h.gateway.wait_for_charges_in_progress(1).await;

    let executor = h.executor();
    run_leaving_one_in(&executor, AttemptStatus::Pending).await;
    let row = h.attempt(id).await;
    assert_eq!(row.status, "pending");
    assert_eq!(
        row.next_run_at - row.updated_at,
        h.settings.executor.in_progress_delay
    );
    assert!(row.last_error.unwrap().contains("idempotency_in_progress"));
    assert_eq!(earlier.await.unwrap().http_status, Some(201));

    // not due yet
    assert_eq!(executor.run_once().await.unwrap().claimed(), 0);
    h.advance(h.settings.executor.in_progress_delay).await;
    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;

    assert_eq!(h.gateway.ledger().len(), 1);
    let row = h.attempt(id).await;
    assert_eq!(
        (row.status.as_str(), row.tries),
        ("succeeded", 1),
        "the 409 was not a try"
    );
    let calls = h.gateway_calls(id).await;
    assert_eq!(
        calls
            .iter()
            .map(|c| (c.2, c.3.as_str()))
            .collect::<Vec<_>>(),
        vec![(Some(409), "in_progress"), (Some(200), "succeeded")]
    );
    assert_eq!(
        h.gateway.request_keys(),
        vec![Some(row.idempotency_key.clone()); 3]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_422_key_reused_needs_review_with_the_gateways_words_and_charges_nothing_more() {
    let h = Harness::new().await;
    let command = h.seed(pm::CARD_VISA).await;
    let id = command.payment_attempt_id;
    let other = h
        .charge_directly(&charge_request_with_amount(&command, 5))
        .await;
    assert_eq!(other.http_status, Some(201));

    run_leaving_one_in(&h.executor(), AttemptStatus::NeedsReview).await;
    let reason = h.review_reason(id).await;
    assert!(
        reason.starts_with("HTTP 422 idempotency_key_reused"),
        "{reason}"
    );
    let event = h.only_event(id).await;
    assert_eq!(event.0, "needs_review");
    assert_eq!(event.1["reason"], reason.as_str());
    assert_eq!(
        h.gateway.ledger().len(),
        1,
        "only the other request's charge"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_invalid_request_needs_review_and_nothing_is_charged() {
    let h = Harness::new().await;
    let id = h.seed(pm::FAULT_BAD_REQUEST).await.payment_attempt_id;

    h.executor().run_once().await.unwrap();
    let reason = h.review_reason(id).await;
    assert!(reason.starts_with("HTTP 400 invalid_request"), "{reason}");
    assert_eq!(h.gateway_calls(id).await[0].3, "needs_review");
    assert!(h.gateway.ledger().is_empty());
    assert_eq!(h.events(id).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_retried_after_retry_after_and_then_charged_once() {
    let h = Harness::new().await;
    let id = h.seed(pm::FAULT_RATE_LIMIT).await.payment_attempt_id;
    let executor = h.executor();

    executor.run_once().await.unwrap();
    let row = h.attempt(id).await;
    assert_eq!((row.status.as_str(), row.tries), ("pending", 1));
    assert_eq!(
        row.next_run_at - row.updated_at,
        Duration::from_secs(1),
        "Retry-After: 1 honoured"
    );
    assert!(h.gateway.ledger().is_empty());
    assert_eq!(
        executor.run_once().await.unwrap().claimed(),
        0,
        "not due before Retry-After"
    );

    h.advance(Duration::from_secs(1)).await;
    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;
    assert_eq!(h.gateway.ledger().len(), 1);
    assert_eq!(
        h.causes(id).await,
        vec![
            "command_accepted",
            "dispatched",
            "retry_scheduled",
            "dispatched",
            "gateway_succeeded"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_is_ambiguous_and_hands_the_attempt_to_the_reconciler_without_a_resend() {
    let h = Harness::new().await;
    let commands = h
        .seed_many(&[pm::FAULT_ERROR_AFTER, pm::FAULT_ERROR_BEFORE])
        .await;
    let executor = h.executor();

    let report = executor.run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Unknown), 2);
    for command in &commands {
        let row = h.attempt(command.payment_attempt_id).await;
        assert_eq!(row.status, "unknown");
        assert!(row.last_error.unwrap().contains("HTTP 500"));
        assert_eq!(row.lease_expires_at, None);
        assert!(
            h.events(command.payment_attempt_id).await.is_empty(),
            "unknown announces nothing"
        );
        assert_eq!(
            h.gateway_calls(command.payment_attempt_id).await[0].3,
            "ambiguous"
        );
    }
    // error_after charged, error_before did not; neither is sent again by the executor
    assert_eq!(h.gateway.ledger().len(), 1);
    h.advance(Duration::from_secs(3600)).await;
    assert_eq!(executor.run_once().await.unwrap().claimed(), 0);
    assert_eq!(h.gateway.requests().len(), 2);

    // what the reconciler will ask: a lookup under each key tells the two apart
    let client = h.client_with_key(API_KEY);
    let charged = client.lookup(&commands[0].idempotency_key()).await;
    let LookupOutcome::Found(found) = charged.outcome else {
        panic!("{charged:?}")
    };
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].status, ChargeStatus::Succeeded);
    let not_charged = client.lookup(&commands[1].idempotency_key()).await;
    assert_eq!(not_charged.outcome, LookupOutcome::Found(vec![]));
    let denied = h
        .client_with_key("sk_wrong")
        .lookup(&commands[0].idempotency_key())
        .await;
    assert_eq!(
        denied.outcome,
        LookupOutcome::CredentialsFault { status: 401 }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_after_sending_is_ambiguous() {
    let mock = MockConfig {
        hang_for: Duration::from_secs(10),
        ..MockConfig::default()
    };
    let h = Harness::with(mock, |s| {
        s.gateway_request_timeout = Duration::from_millis(500)
    })
    .await;
    let id = h.seed(pm::FAULT_HANG_AFTER).await.payment_attempt_id;

    run_leaving_one_in(&h.executor(), AttemptStatus::Unknown).await;
    let row = h.attempt(id).await;
    assert!(row.last_error.unwrap().contains("may have charged"));
    let calls = h.gateway_calls(id).await;
    assert_eq!((calls[0].2, calls[0].3.as_str()), (None, "ambiguous"));
    assert_eq!(h.gateway.ledger().len(), 1, "the gateway did charge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_after_sending_is_ambiguous() {
    let h = Harness::new().await;
    let id = h.seed(pm::FAULT_DROP_AFTER).await.payment_attempt_id;

    let report = h.executor().run_once().await.unwrap();
    assert_eq!(first_outcome(&report), Some("ambiguous"), "{report:?}");
    assert_eq!(h.attempt(id).await.status, "unknown");
    assert_eq!(h.gateway.ledger().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_never_sent_is_retried_with_backoff_by_any_executor() {
    let h = Harness::new().await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    let down = h.executor_with(h.client_with_url(&support::refused_url()));

    let report = down.run_once().await.unwrap();
    assert_eq!(first_outcome(&report), Some("not_sent"), "{report:?}");
    let row = h.attempt(id).await;
    assert_eq!((row.status.as_str(), row.tries), ("pending", 1));
    let delay = row.next_run_at - row.updated_at;
    assert!(
        delay >= Duration::from_secs(1) && delay <= Duration::from_secs(2),
        "backoff {delay}"
    );
    assert_eq!(h.gateway_calls(id).await[0].2, None);

    // the retry is durable: another executor, later, sends it
    h.advance(Duration::from_secs(2)).await;
    run_leaving_one_in(&h.executor(), AttemptStatus::Succeeded).await;
    let row = h.attempt(id).await;
    assert_eq!((row.status.as_str(), row.tries), ("succeeded", 2));
    assert_eq!(h.gateway.ledger().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_retry_sends_the_same_key_and_the_same_body() {
    let h = Harness::with_faults(FaultConfig {
        rate_limit: FaultRule::times(3),
        ..FaultConfig::default()
    })
    .await;
    let command = h.seed(pm::CARD_VISA).await;
    let id = command.payment_attempt_id;
    let executor = h.executor();

    for _ in 0..3 {
        run_leaving_one_in(&executor, AttemptStatus::Pending).await;
        h.advance(Duration::from_secs(1)).await;
    }
    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;

    let requests = h.gateway.requests();
    assert_eq!(requests.len(), 4);
    let expected_body: serde_json::Value =
        serde_json::from_slice(charge_request(&command).body()).unwrap();
    for request in &requests {
        assert_eq!(request.method, "POST");
        assert_eq!(
            request.idempotency_key.as_deref(),
            Some(command.idempotency_key().as_str())
        );
        assert_eq!(request.body, expected_body);
    }
    assert_eq!(h.gateway.ledger().len(), 1);
    let calls = h.gateway_calls(id).await;
    assert_eq!(
        calls.iter().map(|c| (c.0, c.1)).collect::<Vec<_>>(),
        vec![(1, Some(1)), (2, Some(2)), (3, Some(3)), (4, Some(4))]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_executors_on_one_database_never_call_the_gateway_concurrently_for_one_attempt() {
    let faults = FaultConfig {
        latency: Latency {
            fixed_ms: 10,
            jitter_ms: 10,
        },
        ..FaultConfig::default()
    };
    let h = Harness::with(
        MockConfig {
            faults,
            ..MockConfig::default()
        },
        |s| {
            s.executor.batch_size = 5;
            s.executor.concurrency = 5;
        },
    )
    .await;
    let methods = vec![pm::CARD_VISA; 40];
    let commands = h.seed_many(&methods).await;

    let drain = |executor: onecharge::executor::Executor| async move {
        let mut claimed = 0;
        loop {
            let report = executor.run_once().await.unwrap();
            if report.claimed() == 0 {
                return claimed;
            }
            claimed += report.claimed();
        }
    };
    let (a, b) = tokio::join!(
        tokio::spawn(drain(h.executor())),
        tokio::spawn(drain(h.executor()))
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a + b, 40, "every attempt claimed exactly once");
    assert!(a > 0 && b > 0, "both executors worked ({a} and {b})");

    let stats = h.gateway.stats();
    assert_eq!(
        stats.in_progress, 0,
        "no request ever found its key in progress"
    );
    assert_eq!(stats.requests, 40, "one request per attempt");
    assert_eq!(h.gateway.ledger().len(), 40);
    for command in &commands {
        assert_eq!(
            h.gateway.charges_for_key(&command.idempotency_key()).len(),
            1
        );
        assert_eq!(
            h.attempt(command.payment_attempt_id).await.status,
            "succeeded"
        );
    }
    assert_eq!(h.all_gateway_calls().await.len(), 40);
    assert_eq!(h.outbox().await.len(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_workers_late_result_is_rejected_by_the_fencing_token() {
    let h = Harness::new().await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    let (stale, current) = (h.executor(), h.executor());

    let held_by_stale = stale.claim(1).await.unwrap().remove(0);
    assert_eq!(held_by_stale.attempt.lease_token, 1);
    // The stale worker stalls past its lease; the attempt is taken over and claimed again.
    h.advance(h.settings.executor.lease + Duration::from_secs(1))
        .await;
    h.reconciler_returns_to_pending(id).await;
    let held_by_current = current.claim(1).await.unwrap().remove(0);
    assert_eq!(held_by_current.attempt.lease_token, 2);

    // The stale worker's call completes now; its write is refused.
    let late = stale.execute(held_by_stale).await;
    assert!(matches!(
        late.outcome,
        Some(GatewayOutcome::Succeeded {
            replayed: false,
            ..
        })
    ));
    assert_eq!(late.disposition, Disposition::Fenced);
    let row = h.attempt(id).await;
    assert_eq!(row.status, "in_flight");
    assert_eq!(row.lease_token, 2);
    assert_eq!(row.lease_owner.as_deref(), Some(current.owner()));
    assert!(h.events(id).await.is_empty());

    let settled = current.execute(held_by_current).await;
    assert_eq!(
        settled.disposition,
        Disposition::Moved(AttemptStatus::Succeeded)
    );
    let ledger = h.gateway.ledger();
    assert_eq!(ledger.len(), 1);
    let row = h.attempt(id).await;
    assert_eq!(
        row.gateway_charge_id.as_deref(),
        Some(ledger[0].id.as_str())
    );
    assert_eq!(h.events(id).await.len(), 1);
    // both calls are evidence, each under its own token
    assert_eq!(
        h.gateway_calls(id).await,
        vec![
            (
                1,
                Some(1),
                Some(201),
                "succeeded".into(),
                Some(ledger[0].id.clone())
            ),
            (
                2,
                Some(2),
                Some(200),
                "succeeded".into(),
                Some(ledger[0].id.clone())
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_killed_mid_call_leaves_in_flight_and_a_restarted_one_charges_nothing_more() {
    let mock = MockConfig {
        hang_for: Duration::from_secs(30),
        ..MockConfig::default()
    };
    let h = Harness::with(mock, |s| {
        s.gateway_request_timeout = Duration::from_secs(20);
        s.executor.lease = Duration::from_secs(30);
    })
    .await;
    let id = h.seed(pm::FAULT_HANG_AFTER).await.payment_attempt_id;
    let doomed = h.executor();
    let owner = doomed.owner().to_owned();

    let step = tokio::spawn(async move { doomed.run_once().await });
    h.gateway
        .wait_until("the gateway charged and holds the answer", |g| {
            g.requests()
                .iter()
                .any(|r| r.class == Some(ResponseClass::Hung))
        })
        .await;
    step.abort();
    assert!(step.await.unwrap_err().is_cancelled());

    let row = h.attempt(id).await;
    assert_eq!(row.status, "in_flight");
    assert_eq!(row.lease_owner.as_deref(), Some(owner.as_str()));
    assert!(row.dispatched_at.is_some());
    assert!(
        h.gateway_calls(id).await.is_empty(),
        "the result never came back"
    );

    h.advance(Duration::from_secs(31)).await;
    let row = h.attempt(id).await;
    assert!(
        row.lease_expires_at.unwrap() < h.db_now().await,
        "the lease expired: the reconciler's to settle"
    );
    let restarted = h.executor();
    assert_eq!(restarted.run_once().await.unwrap().claimed(), 0);
    assert_eq!(h.attempt(id).await.status, "in_flight");
    assert_eq!(h.gateway.requests().len(), 1, "no second request");
    assert_eq!(h.gateway.ledger().len(), 1, "no second charge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_pauses_every_gateway_call_keeps_attempts_pending_and_consumes_no_try() {
    let mut h = Harness::with(MockConfig::default(), |s| s.executor.batch_size = 1).await;
    let commands = h
        .seed_many(&[pm::CARD_VISA, pm::CARD_VISA, pm::CARD_VISA])
        .await;
    let misconfigured = h.executor_with(h.client_with_key("sk_wrong_key"));

    let report = misconfigured.run_once().await.unwrap();
    assert!(matches!(
        report.attempts[0].outcome,
        Some(GatewayOutcome::CredentialsFault { status: 401 })
    ));
    assert!(misconfigured.health().credentials_rejected());
    let first = report.attempts[0].payment_attempt_id;
    assert_eq!(
        h.causes(first).await,
        vec!["command_accepted", "dispatched", "credentials_fault"]
    );

    // paused: nothing is claimed, nothing is sent
    let report = misconfigured.run_once().await.unwrap();
    assert!(matches!(report.admission, Admission::Wait { .. }));
    assert_eq!(report.claimed(), 0);
    assert_eq!(h.gateway.requests().len(), 1);
    for command in &commands {
        let row = h.attempt(command.payment_attempt_id).await;
        assert_eq!(
            (row.status.as_str(), row.tries),
            ("pending", 0),
            "no try consumed"
        );
        assert!(row.next_run_at <= row.updated_at, "still due");
    }

    // readiness says why
    let admin = h
        .serve_admin(Some(misconfigured.health().clone()), None)
        .await;
    let readyz = reqwest::get(format!("http://{}/readyz", admin.addr))
        .await
        .unwrap();
    assert_eq!(readyz.status(), 503);
    assert!(readyz
        .text()
        .await
        .unwrap()
        .contains("gateway rejected the API key"));
    admin.stop().await;

    // one probe per interval
    h.advance(h.settings.executor.credentials_probe_interval)
        .await;
    let report = misconfigured.run_once().await.unwrap();
    assert_eq!((report.admission, report.claimed()), (Admission::Probe, 1));
    assert_eq!(h.gateway.requests().len(), 2);

    // fixed configuration (a restart with the right key): each attempt charged on its first try
    let fixed = h.executor();
    while fixed.run_once().await.unwrap().claimed() > 0 {}
    for command in &commands {
        let row = h.attempt(command.payment_attempt_id).await;
        assert_eq!((row.status.as_str(), row.tries), ("succeeded", 1));
    }
    assert_eq!(h.gateway.ledger().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_circuit_breaker_stops_calls_after_consecutive_failures_and_probes_after_its_cooldown()
{
    let h = Harness::with(MockConfig::default(), |s| {
        s.executor.batch_size = 1;
        s.executor.breaker_failure_threshold = 2;
    })
    .await;
    let commands = h
        .seed_many(&[pm::CARD_VISA, pm::CARD_VISA, pm::CARD_VISA])
        .await;
    let down = h.executor_with(h.client_with_url(&support::refused_url()));

    run_leaving_one_in(&down, AttemptStatus::Pending).await;
    run_leaving_one_in(&down, AttemptStatus::Pending).await;
    assert_eq!(down.health().snapshot().breaker, BreakerState::Open);
    let report = down.run_once().await.unwrap();
    assert!(matches!(
        report.admission,
        Admission::Wait {
            reason: "circuit breaker open",
            ..
        }
    ));
    assert_eq!(report.claimed(), 0);
    let tries: i32 = {
        let mut total = 0;
        for command in &commands {
            total += h.attempt(command.payment_attempt_id).await.tries;
        }
        total
    };
    assert_eq!(tries, 2, "the third attempt was never tried");

    h.advance(h.settings.executor.breaker_cooldown).await;
    let probe = down.run_once().await.unwrap();
    assert_eq!((probe.admission, probe.claimed()), (Admission::Probe, 1));
    assert_eq!(
        down.health().snapshot().breaker,
        BreakerState::Open,
        "a failed probe re-opens"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_retry_is_sent_once_the_gateway_may_have_forgotten_the_key() {
    let h = Harness::with(MockConfig::default(), |s| {
        s.executor.max_age = Duration::from_secs(48 * 3600)
    })
    .await;
    let id = h.seed(pm::FAULT_RATE_LIMIT).await.payment_attempt_id;
    let executor = h.executor();
    executor.run_once().await.unwrap();
    assert_eq!(h.attempt(id).await.status, "pending");

    // the executor was stopped for most of a day
    h.advance(Duration::from_secs(23 * 3600)).await;
    let report = run_leaving_one_in(&executor, AttemptStatus::Unknown).await;
    assert!(report.attempts[0].outcome.is_none(), "no call made");
    let row = h.attempt(id).await;
    assert_eq!(row.tries, 1);
    assert!(row
        .last_error
        .unwrap()
        .contains("forget the idempotency key"));
    assert_eq!(
        h.transitions(id)
            .await
            .into_iter()
            .map(|t| t.2)
            .skip(3)
            .collect::<Vec<_>>(),
        vec!["claimed_for_hand_over", "retry_window_closed"]
    );
    assert_eq!(h.gateway.requests().len(), 1, "never re-sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_allowed_try_hands_the_attempt_to_the_reconciler() {
    let faults = FaultConfig {
        rate_limit: FaultRule::times(5),
        ..FaultConfig::default()
    };
    let h = Harness::with(
        MockConfig {
            faults,
            ..MockConfig::default()
        },
        |s| s.executor.max_tries = 2,
    )
    .await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    let executor = h.executor();

    run_leaving_one_in(&executor, AttemptStatus::Pending).await;
    h.advance(Duration::from_secs(1)).await;
    run_leaving_one_in(&executor, AttemptStatus::Unknown).await;
    let row = h.attempt(id).await;
    assert!(row
        .last_error
        .unwrap()
        .contains("retries exhausted after 2 tries"));
    assert_eq!(h.gateway.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_the_gateway_call_in_hand() {
    let h = Harness::with_faults(FaultConfig {
        latency: Latency::fixed(300),
        ..FaultConfig::default()
    })
    .await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    let running = stop_with_the_charge_in_hand(&h).await;
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let row = h.attempt(id).await;
    assert_eq!(
        row.status, "succeeded",
        "the call in hand was finished and written"
    );
    assert_eq!(h.gateway.ledger().len(), 1);
}

/// Runs the executor until its first charge is at the gateway, then asks it to stop;
/// answers the stopping run.
async fn stop_with_the_charge_in_hand(h: &Harness) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(h.executor().run(shutdown.clone()));
    h.gateway.wait_for_requests(1).await;
    shutdown.cancel();
    running
}

/// A settlement for `attempt` as the executor writes it, with the call's evidence.
fn settled_write(
    attempt: &onecharge::domain::ChargeClaim,
    settlement: Settlement,
    now: time::OffsetDateTime,
) -> SettleWrite {
    let call = GatewayCallRecord {
        payment_attempt_id: attempt.attempt.payment_attempt_id,
        operation: CallOperation::Charge,
        idempotency_key: attempt.attempt.idempotency_key.clone(),
        try_number: attempt.attempt.tries,
        lease_token: Some(attempt.attempt.lease_token),
        started_at: now,
        finished_at: now,
        http_status: Some(201),
        outcome: "succeeded".into(),
        gateway_charge_id: None,
        error: None,
    };
    SettleWrite {
        fence: attempt.fence(),
        settlement,
        cause: TransitionCause::GatewaySucceeded,
        call: Some(call),
        now,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlements_written_together_keep_each_fence_transition_event_and_call() {
    let h = Harness::new().await;
    h.seed_many(&[pm::CARD_VISA; 4]).await;
    let claimed = h.executor().claim(4).await.unwrap();
    assert_eq!(claimed.len(), 4);
    let now = h.now();
    let succeeded = |n: usize| Settlement::Succeeded {
        charge_id: onecharge::domain::GatewayChargeId::from_gateway(format!("ch_batch_{n}")),
    };
    let mut stale = claimed[2].clone();
    stale.attempt.lease_token = (stale.attempt.lease_token.get() - 1).into();
    let writes = vec![
        settled_write(&claimed[0], succeeded(0), now),
        settled_write(&claimed[1], succeeded(1), now),
        settled_write(&stale, succeeded(2), now),
        settled_write(
            &claimed[3],
            Settlement::Declined {
                charge_id: onecharge::domain::GatewayChargeId::from_gateway("ch_batch_3"),
                decline_code: Some("insufficient_funds".into()),
            },
            now,
        ),
    ];

    let settled = settle_all(&h.store, &writes).await.unwrap();

    assert_eq!(
        settled,
        vec![true, true, false, true],
        "each write keeps its own fence"
    );
    for (i, expected) in [
        (0, "succeeded"),
        (1, "succeeded"),
        (2, "in_flight"),
        (3, "declined"),
    ] {
        let id = claimed[i].attempt.payment_attempt_id;
        assert_eq!(h.attempt(id).await.status, expected, "attempt {i}");
        let events = h.events(id).await;
        if expected == "in_flight" {
            assert!(events.is_empty(), "a fenced write announces nothing");
            assert_eq!(
                h.transitions(id).await.len(),
                2,
                "recorded, claimed; nothing more"
            );
        } else {
            assert_eq!(events.len(), 1, "attempt {i}");
            assert_eq!(events[0].0, expected);
            assert_eq!(events[0].1["payment_attempt_id"], id.to_string());
            assert_eq!(
                h.transitions(id).await.last().unwrap(),
                &pair(Some("in_flight"), expected, "gateway_succeeded")
            );
        }
        assert_eq!(
            h.gateway_calls(id).await.len(),
            1,
            "the call is evidence even when fenced"
        );
    }
    assert_eq!(
        h.rows_in("gateway_calls").await,
        1,
        "the fenced write's call, a row of its own (decision 221)"
    );
    assert_eq!(
        h.moves_carrying_a_call().await,
        3,
        "each call let through, carried by the move it caused"
    );
    assert_eq!(
        h.attempt(claimed[1].attempt.payment_attempt_id)
            .await
            .gateway_charge_id
            .as_deref(),
        Some("ch_batch_1")
    );
    assert_eq!(
        h.attempt(claimed[3].attempt.payment_attempt_id)
            .await
            .decline_code
            .as_deref(),
        Some("insufficient_funds")
    );
}

/// A batch of settlements takes its attempts in one global order by advisory locks, the
/// lower lock key first, whatever the batch's own order (decision 218): with the higher
/// key's lock held elsewhere, a batch naming both attempts, in either order, holds the
/// lower one's lock and waits for the higher one's, and finishes once it is free. (Before,
/// the order came from row locks, which PostgreSQL writes to the WAL.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_batch_takes_its_attempts_by_advisory_locks_in_key_order() {
    let h = Harness::new().await;
    h.seed_many(&[pm::CARD_VISA; 4]).await;
    let claimed = h.executor().claim(4).await.unwrap();
    let key = |i: usize| {
        let id = claimed[i].attempt.payment_attempt_id;
        let pool = h.store.pool().clone();
        async move {
            sqlx::query_scalar::<_, i32>("SELECT hashtext($1::text)")
                .bind(id.to_string())
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let now = h.now();
    let succeeded = || Settlement::Succeeded {
        charge_id: onecharge::domain::GatewayChargeId::from_gateway("ch_ordered"),
    };
    for (a, b, batch_order) in [(0, 1, "low first"), (2, 3, "high first")] {
        let (a_key, b_key) = (key(a).await, key(b).await);
        let ((low, low_key), (high, high_key)) = if a_key <= b_key {
            ((a, a_key), (b, b_key))
        } else {
            ((b, b_key), (a, a_key))
        };
        let mut holder = h.store.pool().begin().await.unwrap();
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('onecharge.payment_attempts'), $1)")
            .bind(high_key)
            .execute(&mut *holder)
            .await
            .unwrap();
        let mut writes = vec![
            settled_write(&claimed[low], succeeded(), now),
            settled_write(&claimed[high], succeeded(), now),
        ];
        if batch_order == "high first" {
            writes.reverse();
        }
        let store = h.store.clone();
        let batch = tokio::spawn(async move { settle_all(&store, &writes).await });

        // The batch's backend: holding the low key's lock, waiting for the high key's.
        let mut seen = None;
        for _ in 0..200 {
            assert!(
                !batch.is_finished(),
                "{batch_order}: the batch did not wait for the held lock"
            );
            // `objid` is the key as an unsigned oid: back to the signed `hashtext`.
            let locks: Vec<(i64, bool)> = sqlx::query_as(
                "SELECT objid::int8 - CASE WHEN objid::int8 > 2147483647 THEN 4294967296 ELSE 0 END,
                        granted
                 FROM pg_locks
                 WHERE locktype = 'advisory' AND objsubid = 2
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND classid = hashtext('onecharge.payment_attempts')::oid
                   AND pid <> pg_backend_pid()
                   AND pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)
                 ORDER BY granted DESC",
            )
            .fetch_all(h.store.pool())
            .await
            .unwrap();
            if !locks.is_empty() {
                seen = Some(locks);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            seen,
            Some(vec![
                (i64::from(low_key), true),
                (i64::from(high_key), false)
            ]),
            "{batch_order}: the batch holds the lower key and waits for the higher"
        );
        holder.commit().await.unwrap();
        let settled = batch.await.unwrap().unwrap();
        assert_eq!(settled, vec![true, true], "{batch_order}");
        for i in [low, high] {
            let id = claimed[i].attempt.payment_attempt_id;
            assert_eq!(h.attempt(id).await.status, "succeeded", "{batch_order}");
        }
    }
}

/// The outbox row of `id`'s one event: its id, subject, headers, payload and `created_at`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_a_settlement_writes_is_the_event_the_domain_builds() {
    // The settlement statement builds its events in SQL (one round trip per batch); they
    // must be, field for field, what `PaymentEvent::for_settlement` and `headers` build.
    let h = Harness::new().await;
    h.seed_many(&[pm::CARD_VISA; 4]).await;
    let claimed = h.executor().claim(4).await.unwrap();
    // One attempt with the provenance headers a command may carry, one with a reason
    // holding what JSON must escape.
    h.set_attempt(
        claimed[0].attempt.payment_attempt_id,
        "correlation_id = 'corr-\"1\"',
         traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'",
    )
    .await;
    let now = h.now();
    let settlements = [
        Settlement::Succeeded {
            charge_id: onecharge::domain::GatewayChargeId::from_gateway("ch_equal_0"),
        },
        Settlement::Declined {
            charge_id: onecharge::domain::GatewayChargeId::from_gateway("ch_equal_1"),
            decline_code: Some("card_declined".into()),
        },
        Settlement::Declined {
            charge_id: onecharge::domain::GatewayChargeId::from_gateway("ch_equal_2"),
            decline_code: None,
        },
        Settlement::NeedsReview {
            reason: "the gateway said \"maybe\"\n\u{0}, then nothing — écrit".into(),
        },
    ];
    let writes: Vec<SettleWrite> = claimed
        .iter()
        .zip(settlements.iter().cloned())
        .map(|(attempt, settlement)| settled_write(attempt, settlement, now))
        .collect();
    assert_eq!(settle_all(&h.store, &writes).await.unwrap(), vec![true; 4]);

    for (attempt, settlement) in claimed.iter().zip(&settlements) {
        let id = attempt.attempt.payment_attempt_id;
        let Event {
            event_id,
            subject,
            headers,
            payload,
            created_at,
            ..
        } = h.last_event(id).await;
        // The row the settlement statement read, as the domain reads it.
        let row: onecharge::domain::EventAttempt = h
            .attempt_columns(
                id,
                "payment_attempt_id, order_id, amount_minor, currency, correlation_id,
                 first_message_id, traceparent",
            )
            .await;
        let storable = match settlement {
            Settlement::NeedsReview { reason } => Settlement::NeedsReview {
                reason: onecharge::store::attempts::gateway_text(reason, 1024),
            },
            other => other.clone(),
        };
        let announced = onecharge::domain::Announced::settlement(&storable).unwrap();
        let expected = onecharge::domain::event::PaymentEvent {
            event_id,
            ..onecharge::domain::event::PaymentEvent::for_settlement(&row, announced, created_at)
        };
        assert_eq!(
            payload,
            serde_json::to_value(&expected).unwrap(),
            "{settlement:?}"
        );
        assert_eq!(subject, expected.subject());
        let expected_headers: serde_json::Map<String, serde_json::Value> = expected
            .headers(&row.provenance)
            .into_iter()
            .map(|(name, value)| (name, serde_json::Value::String(value)))
            .collect();
        assert_eq!(headers, serde_json::Value::Object(expected_headers));
        assert_eq!(
            created_at,
            h.attempt(id).await.updated_at,
            "the event is dated like the move it announces"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_databases_rfc3339_is_the_one_events_are_written_with() {
    let h = Harness::new().await;
    let base = h.db_now().await;
    for micros in [0, 1, 10, 120, 100_000, 123_400, 123_456, 999_999] {
        let at = base.replace_nanosecond(micros * 1_000).unwrap();
        let stored: String = sqlx::query_scalar("SELECT onecharge_rfc3339($1)")
            .bind(at)
            .fetch_one(h.store.pool())
            .await
            .unwrap();
        let rust = serde_json::to_value(onecharge::domain::event::PaymentEvent {
            occurred_at: at.to_offset(time::UtcOffset::UTC),
            ..sample_event()
        })
        .unwrap();
        assert_eq!(
            serde_json::Value::String(stored),
            rust["occurred_at"],
            "{at}"
        );
    }
}

/// Any event; the tests change the field they are about.
fn sample_event() -> onecharge::domain::event::PaymentEvent {
    onecharge::domain::event::PaymentEvent {
        event_id: uuid::Uuid::nil(),
        payment_attempt_id: uuid::Uuid::nil().into(),
        order_id: "order".into(),
        status: AttemptStatus::Succeeded,
        money: onecharge::domain::Money::of(100, "EUR").unwrap(),
        gateway_charge_id: None,
        decline_code: None,
        reason: None,
        occurred_at: time::OffsetDateTime::UNIX_EPOCH,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_the_database_refuses_fails_alone_and_its_batch_mates_are_written() {
    let h = Harness::new().await;
    h.seed_many(&[pm::CARD_VISA; 3]).await;
    let claimed = h.executor().claim(3).await.unwrap();
    let poisoned = claimed[1].attempt.payment_attempt_id;
    // An event for the final state already exists: a second one breaks the outbox's unique
    // index, as a double settlement would.
    h.plant_event(poisoned, "succeeded").await;
    let now = h.now();
    let writes: Vec<SettleWrite> = claimed
        .iter()
        .enumerate()
        .map(|(n, attempt)| {
            settled_write(
                attempt,
                Settlement::Succeeded {
                    charge_id: onecharge::domain::GatewayChargeId::from_gateway(format!(
                        "ch_poison_{n}"
                    )),
                },
                now,
            )
        })
        .collect();
    assert!(
        settle_all(&h.store, &writes).await.is_err(),
        "one refused write fails the whole transaction"
    );
    assert_eq!(
        h.attempt(claimed[0].attempt.payment_attempt_id)
            .await
            .status,
        "in_flight"
    );

    let writer = SettlementWriter::start(h.store.clone(), 64);
    let answers =
        futures::future::join_all(writes.into_iter().map(|write| writer.write(write))).await;

    assert_eq!(answers[0], Ok(true));
    assert_eq!(answers[2], Ok(true));
    let refused = answers[1].clone().unwrap_err();
    assert!(
        !refused.transient,
        "a unique violation does not go away: {refused:?}"
    );
    assert_eq!(
        h.attempt(claimed[0].attempt.payment_attempt_id)
            .await
            .status,
        "succeeded"
    );
    assert_eq!(
        h.attempt(claimed[2].attempt.payment_attempt_id)
            .await
            .status,
        "succeeded"
    );
    assert_eq!(h.attempt(poisoned).await.status, "in_flight");
    assert!(
        h.gateway_calls(poisoned).await.is_empty(),
        "nothing of the refused write remains"
    );
}

// ---- issue 11: escalation, time and database faults ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_id_with_a_nul_is_stored_escaped_and_the_attempt_settles_with_its_evidence() {
    let h = Harness::new().await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    let url = support::gateway_answering(serde_json::json!({
        "id": "ch_\u{0}nul", "status": "succeeded", "decline_code": null
    }))
    .await;

    let report = h
        .executor_with(h.client_with_url(&url))
        .run_once()
        .await
        .unwrap();

    assert_eq!(report.count(AttemptStatus::Succeeded), 1, "{report:?}");
    let row = h.attempt(id).await;
    assert_eq!(row.status, "succeeded");
    let charge = row.gateway_charge_id.unwrap();
    assert!(
        !charge.contains('\0') && charge.starts_with("ch_") && charge.ends_with("nul"),
        "the charge id is kept, its NUL escaped: {charge:?}"
    );
    assert_eq!(h.gateway_calls(id).await, one_call_charged(&charge));
    let event = h.only_event(id).await;
    assert_eq!(event.1["gateway_charge_id"], charge.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_the_database_refuses_for_good_hands_the_attempt_to_the_reconciler_with_its_evidence(
) {
    let h = Harness::new().await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    // The database refuses every charge id: the gateway's answer can never be stored.
    h.refuse_charge_ids().await;

    let report = h.executor().run_once().await.unwrap();

    assert_eq!(report.count(AttemptStatus::Unknown), 1, "{report:?}");
    let ledger = h.gateway.ledger();
    assert_eq!(ledger.len(), 1);
    let row = h.attempt(id).await;
    assert_eq!(row.status, "unknown");
    assert_eq!(row.lease_expires_at, None);
    let last_error = row.last_error.unwrap();
    assert!(
        last_error.contains("the gateway's answer could not be stored"),
        "{last_error}"
    );
    assert_eq!(
        h.gateway_calls(id).await,
        one_call_charged(&ledger[0].id),
        "the call's evidence is kept"
    );
    assert_eq!(
        h.transitions(id).await.last().unwrap(),
        &pair(Some("in_flight"), "unknown", "settlement_refused")
    );
    assert!(h.events(id).await.is_empty());
}

/// The three session limits as `SHOW` prints them, on `connections` connections of
/// `store`'s pool held at once.
async fn session_limits(store: &onecharge::store::Store, connections: usize) -> Vec<Vec<String>> {
    let mut held = Vec::new();
    for _ in 0..connections {
        held.push(store.pool().acquire().await.unwrap());
    }
    let mut seen = Vec::new();
    for conn in &mut held {
        let mut limits = Vec::new();
        for setting in [
            "statement_timeout",
            "lock_timeout",
            "idle_in_transaction_session_timeout",
        ] {
            limits.push(
                sqlx::query_scalar::<_, String>(&format!("SHOW {setting}"))
                    .fetch_one(&mut **conn)
                    .await
                    .unwrap(),
            );
        }
        seen.push(limits);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pooled_connection_carries_the_statement_lock_and_idle_in_transaction_timeouts() {
    let h = Harness::new().await;
    assert_eq!(
        session_limits(&h.store, 3).await,
        vec![vec!["30s", "5s", "1min"]; 3],
        "the defaults"
    );

    let h = Harness::with(MockConfig::default(), |s| {
        s.database.statement_timeout = Duration::from_secs(7);
        s.database.lock_timeout = Duration::from_millis(1500);
        s.database.idle_in_transaction_session_timeout = Duration::from_secs(90);
    })
    .await;
    assert_eq!(
        session_limits(&h.store, 3).await,
        vec![vec!["7s", "1500ms", "90s"]; 3],
        "the configured values"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_behind_a_held_lock_fails_fast_as_a_transient_error_instead_of_hanging() {
    let h = Harness::with(MockConfig::default(), |s| {
        s.database.lock_timeout = Duration::from_millis(500);
    })
    .await;
    h.seed(pm::CARD_VISA).await;
    // A partitioned client that took a lock and never came back.
    let mut blocker = h.store.pool().begin().await.unwrap();
    sqlx::query("LOCK TABLE payment_attempts IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();

    let claim = tokio::time::timeout(Duration::from_secs(30), h.executor().claim(1))
        .await
        .expect("the claim gives up on the lock instead of waiting for it");

    let err = claim.expect_err("a claim behind a held lock fails");
    let db = err.downcast_ref::<sqlx::Error>().expect("a database error");
    assert!(onecharge::store::is_transient(db), "{db}");
    assert_eq!(
        db.as_database_error().and_then(|e| e.code()).as_deref(),
        Some("55P03"),
        "lock_not_available: {db}"
    );
    blocker.rollback().await.unwrap();
    assert_eq!(h.executor().claim(1).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_older_than_the_maximum_age_when_it_would_first_be_sent_is_expired_not_charged() {
    let h = Harness::new().await; // intake.max_command_age: 24 h
    let ids: Vec<_> = h
        .seed_many(&[pm::CARD_VISA; 3])
        .await
        .into_iter()
        .map(|c| c.payment_attempt_id)
        .collect();
    let (stale, young, resent) = (ids[0], ids[1], ids[2]);
    let harness = &h;
    let age = |id, hours: i32, sent: bool| {
        let first_sent = if sent { "now()" } else { "NULL" };
        let set = format!(
            "requested_at = now() - make_interval(hours => {hours}),
             first_dispatched_at = {first_sent}"
        );
        async move { harness.set_attempt(id, &set).await }
    };
    age(stale, 25, false).await;
    age(young, 23, false).await;
    // already sent once: the gateway may have it, so only the key window decides
    age(resent, 25, true).await;

    h.executor().run_once().await.unwrap();

    let row = h.attempt(stale).await;
    assert_eq!(row.status, "expired");
    assert_eq!(row.tries, 0);
    assert_eq!(row.first_dispatched_at, None);
    assert!(h.gateway_calls(stale).await.is_empty());
    assert_eq!(
        h.transitions(stale).await,
        vec![
            pair(None, "pending", "command_accepted"),
            pair(Some("pending"), "expired", "stale_at_dispatch"),
        ]
    );
    let event = h.only_event(stale).await;
    assert_eq!(event.0, "expired");
    let reason = event.1["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.contains("intake.max_command_age") && reason.contains("never sent"),
        "{reason}"
    );
    assert_eq!(h.attempt(young).await.status, "succeeded");
    assert_eq!(h.attempt(resent).await.status, "succeeded");
    assert_eq!(
        h.gateway.ledger().len(),
        2,
        "only the two others are charged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maximum_command_age_of_zero_lets_an_old_command_be_charged() {
    let h = Harness::with(MockConfig::default(), |s| {
        s.intake.max_command_age = Duration::ZERO;
    })
    .await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    h.set_attempt(id, "requested_at = now() - interval '30 days'")
        .await;

    h.executor().run_once().await.unwrap();

    assert_eq!(h.attempt(id).await.status, "succeeded");
    assert_eq!(h.gateway.ledger().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_while_the_gateway_is_still_processing_consumes_no_try_and_the_attempt_ends_succeeded(
) {
    let h = Harness::still_processing(|s| s.executor.max_tries = 2).await;
    let id = h.seed(pm::FAULT_SLOW_CHARGE).await.payment_attempt_id;
    let executor = h.executor();
    // The call times out.
    run_leaving_one_in(&executor, AttemptStatus::Unknown).await;
    let reconciled = h.reconciler().run_once().await.unwrap();
    assert_eq!(
        reconciled.count(AttemptStatus::Pending),
        1,
        "{reconciled:?}"
    );

    // Every re-send meets the request still running: 409, and no try is used up.
    for _ in 0..3 {
        let report = executor.run_once().await.unwrap();
        assert_eq!(first_outcome(&report), Some("in_progress"), "{report:?}");
        assert_eq!(report.count(AttemptStatus::Pending), 1, "{report:?}");
        let row = h.attempt(id).await;
        assert_eq!((row.status.as_str(), row.tries), ("pending", 1));
        h.advance(h.settings.executor.in_progress_delay).await;
    }

    h.finish_slow_charge().await;
    let report = executor.run_once().await.unwrap();

    assert_eq!(report.count(AttemptStatus::Succeeded), 1, "{report:?}");
    h.assert_charged_once(id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_from_a_wrong_gateway_url_pauses_calls_and_the_attempts_stay_retryable() {
    let h = Harness::with(MockConfig::default(), |s| s.executor.batch_size = 1).await;
    let commands = h.seed_many(&[pm::CARD_VISA, pm::CARD_VISA]).await;
    // A deploy points onecharge at a path the gateway does not serve.
    let wrong = format!("{}/wrong-prefix", h.gateway.base_url());
    let misconfigured = h.executor_with(h.client_with_url(&wrong));

    let report = misconfigured.run_once().await.unwrap();

    assert_eq!(report.count(AttemptStatus::NeedsReview), 0, "{report:?}");
    assert_eq!(report.count(AttemptStatus::Pending), 1, "{report:?}");
    let paused = misconfigured.run_once().await.unwrap();
    assert!(
        matches!(paused.admission, Admission::Wait { .. }),
        "{paused:?}"
    );
    assert_eq!(paused.claimed(), 0, "nothing claimed while paused");
    for command in &commands {
        let row = h.attempt(command.payment_attempt_id).await;
        assert_eq!(
            (row.status.as_str(), row.tries),
            ("pending", 0),
            "no try used"
        );
        assert!(h.events(command.payment_attempt_id).await.is_empty());
    }
    assert!(h.gateway.ledger().is_empty());

    // The URL fixed: each attempt is charged on its first real try.
    let fixed = h.executor();
    while fixed.run_once().await.unwrap().claimed() > 0 {}
    for command in &commands {
        let row = h.attempt(command.payment_attempt_id).await;
        assert_eq!((row.status.as_str(), row.tries), ("succeeded", 1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_still_in_hand_after_the_shutdown_timeout_is_abandoned_in_flight_and_the_reconciler_settles_it(
) {
    let h = Harness::still_processing(|s| {
        s.gateway_request_timeout = Duration::from_secs(5);
        s.shutdown_timeout = Duration::from_millis(100);
    })
    .await;
    let id = h.seed(pm::FAULT_SLOW_CHARGE).await.payment_attempt_id;
    let running = stop_with_the_charge_in_hand(&h).await;
    // The call would hold on until its 5 s request timeout; the drain gives up long before.
    tokio::time::timeout(Duration::from_secs(3), running)
        .await
        .expect("the executor stops once shutdown_timeout has passed")
        .unwrap()
        .unwrap();
    let row = h.attempt(id).await;
    assert_eq!(
        (row.status.as_str(), row.tries),
        ("in_flight", 1),
        "abandoned as it was: in flight under its lease"
    );

    // Its lease expires; the reconciler finds nothing yet and hands it back to the executor,
    // which re-sends under the same key and adopts the charge once the gateway made it.
    h.advance(h.settings.executor.lease).await;
    let reconciled = h.reconciler().run_once().await.unwrap();
    assert_eq!(reconciled.leases_expired, vec![id]);
    assert_eq!(
        reconciled.count(AttemptStatus::Pending),
        1,
        "{reconciled:?}"
    );
    h.finish_slow_charge().await;
    let report = h.executor().run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Succeeded), 1, "{report:?}");
    h.assert_charged_once(id).await;
}
