//! Injected faults: what the client sees, and what the ledger shows was really charged.

use std::time::{Duration, Instant};

use mock_gateway::{
    payment_methods, FaultConfig, FaultKind, FaultRule, Latency, LatencyDistribution, LatencyDrawn,
    MockConfig, ResponseClass,
};
use reqwest::{Response, StatusCode};
use serde_json::Value;

use crate::helpers::*;

#[tokio::test]
async fn pm_fault_error_before_answers_500_charges_nothing_and_the_retry_charges() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", payment_methods::FAULT_ERROR_BEFORE);

    let first = app.charge("key-1", &body).await;
    assert_error(first, StatusCode::INTERNAL_SERVER_ERROR, "api_error").await;
    assert!(app.gateway.ledger().is_empty());
    assert!(app.lookup("key-1").await.is_empty(), "nothing recorded");

    let retry = app.charge("key-1", &body).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert!(!is_replay(&retry));
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn pm_fault_error_after_charges_then_answers_500_and_the_retry_replays_the_charge() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", payment_methods::FAULT_ERROR_AFTER);

    let first = app.charge("key-1", &body).await;
    assert_eq!(first.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let ledger = app.gateway.ledger();
    assert_eq!(ledger.len(), 1, "charged before the 500");
    assert_eq!(app.lookup("key-1").await.len(), 1, "the lookup settles it");

    let retry = app.expect_replay("key-1", &body, StatusCode::OK).await;
    let replayed: Value = retry.json().await.unwrap();
    assert_eq!(replayed["id"], ledger[0].id.as_str());
    assert_eq!(replayed["status"], "succeeded");
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn pm_fault_hang_after_charges_and_outlasts_a_short_client_timeout() {
    let app = spawn_gateway_with(MockConfig {
        hang_for: Duration::from_secs(20),
        ..MockConfig::default()
    })
    .await;
    let body = charge_body("attempt-1", payment_methods::FAULT_HANG_AFTER);

    let started = Instant::now();
    let first = app
        .charge_giving_up_after(Duration::from_millis(300), "key-1", &body)
        .await;

    let err = first.expect_err("the response is held past the client's timeout");
    assert!(err.is_timeout(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(app.gateway.ledger().len(), 1, "charged before hanging");
    let recorded = &app.gateway.requests()[0];
    assert_eq!(recorded.class, Some(ResponseClass::Hung));
    assert_eq!(recorded.fault, Some(FaultKind::HangAfter));
    assert_eq!(recorded.status, None, "no response sent yet");

    app.expect_replay("key-1", &body, StatusCode::OK).await;
    assert_eq!(app.gateway.ledger().len(), 1);
    assert_eq!(app.gateway.stats().hung, 1);
}

#[tokio::test]
async fn pm_fault_drop_after_charges_and_closes_the_connection_without_any_response() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", payment_methods::FAULT_DROP_AFTER);

    let first = within(
        Duration::from_secs(10),
        "the dropped request",
        app.post_charge("key-1", &body).send(),
    )
    .await;

    let err = first.expect_err("no HTTP response at all");
    assert!(
        !err.is_timeout(),
        "a connection error, not a timeout: {err:?}"
    );
    assert!(err.status().is_none(), "{err:?}");
    assert_eq!(app.gateway.ledger().len(), 1, "charged before the drop");
    let recorded = &app.gateway.requests()[0];
    assert_eq!(recorded.class, Some(ResponseClass::Dropped));
    assert_eq!(recorded.status, None);

    app.expect_replay("key-1", &body, StatusCode::OK).await;
    assert_eq!(app.gateway.ledger().len(), 1);
    assert_eq!(app.gateway.stats().dropped, 1);
}

#[tokio::test]
async fn pm_fault_rate_limit_answers_429_with_retry_after_and_charges_nothing() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", payment_methods::FAULT_RATE_LIMIT);

    let first = app.charge("key-1", &body).await;
    assert_eq!(first.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(first.headers()["retry-after"], "1");
    assert!(app.gateway.ledger().is_empty());

    let retry = app.charge("key-1", &body).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn pm_fault_bad_request_answers_400_once_and_the_retry_charges() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", payment_methods::FAULT_BAD_REQUEST);

    let first = app.charge("key-1", &body).await;
    assert_error(first, StatusCode::BAD_REQUEST, "invalid_request").await;
    assert!(app.gateway.ledger().is_empty());

    let retry = app.charge("key-1", &body).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn a_fault_trigger_fires_again_under_a_new_key() {
    let app = spawn_gateway().await;

    for key in ["key-1", "key-2"] {
        let body = charge_body(key, payment_methods::FAULT_ERROR_BEFORE);
        assert_eq!(
            app.charge(key, &body).await.status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
    assert!(app.gateway.ledger().is_empty());
}

#[tokio::test]
async fn counted_faults_fire_on_exactly_the_next_charging_requests() {
    let app = spawn_gateway().await;
    app.gateway.set_faults(FaultConfig {
        error_before: FaultRule::times(2),
        ..FaultConfig::default()
    });

    let responses = app.charge_each(&[payment_methods::CARD_VISA; 3]).await;
    let statuses: Vec<_> = responses.iter().map(Response::status).collect();

    assert_eq!(
        statuses,
        [
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::CREATED
        ]
    );
    assert_eq!(app.gateway.faults().error_before.count, 0);
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn faults_never_touch_replays_so_a_retry_can_always_settle() {
    let app = spawn_gateway().await;
    let body = charge_body("attempt-1", "pm_card_visa");
    assert_eq!(
        app.charge("key-1", &body).await.status(),
        StatusCode::CREATED
    );
    app.gateway.set_faults(FaultConfig {
        error_before: FaultRule::probability(1.0),
        drop_after: FaultRule::probability(1.0),
        ..FaultConfig::default()
    });

    app.expect_replay("key-1", &body, StatusCode::OK).await;
}

#[tokio::test]
async fn random_faults_with_the_same_seed_repeat_the_same_run() {
    async fn run(seed: u64) -> (Vec<StatusCode>, Vec<String>) {
        let app = spawn_gateway_with(MockConfig {
            seed,
            faults: FaultConfig {
                error_before: FaultRule::probability(0.3),
                error_after: FaultRule::probability(0.3),
                rate_limit: FaultRule::probability(0.2),
                ..FaultConfig::default()
            },
            ..MockConfig::default()
        })
        .await;
        let responses = app.charge_each(&[payment_methods::CARD_VISA; 40]).await;
        let statuses = responses.iter().map(Response::status).collect();
        let ids = app.gateway.ledger().into_iter().map(|c| c.id).collect();
        (statuses, ids)
    }

    let (statuses, ids) = run(7).await;
    assert_eq!(run(7).await, (statuses.clone(), ids));
    for expected in [
        StatusCode::CREATED,
        StatusCode::INTERNAL_SERVER_ERROR,
        StatusCode::TOO_MANY_REQUESTS,
    ] {
        assert!(statuses.contains(&expected), "{statuses:?}");
    }
    assert_ne!(run(8).await.0, statuses, "another seed, another run");
}

#[tokio::test]
async fn fixed_latency_delays_every_answer() {
    let app = spawn_gateway_with(MockConfig {
        faults: FaultConfig {
            latency: Latency::fixed(150),
            ..FaultConfig::default()
        },
        ..MockConfig::default()
    })
    .await;
    let body = charge_body("attempt-1", "pm_card_visa");

    for expected in [StatusCode::CREATED, StatusCode::OK] {
        let started = Instant::now();
        assert_eq!(app.charge("key-1", &body).await.status(), expected);
        assert!(started.elapsed() >= Duration::from_millis(150));
    }
}

#[tokio::test]
async fn pm_fault_slow_charge_stays_in_progress_past_the_client_timeout_then_charges_once() {
    let app = spawn_gateway_with(MockConfig {
        slow_charge_for: Duration::from_secs(600),
        ..MockConfig::default()
    })
    .await;
    let body = charge_body("attempt-1", payment_methods::FAULT_SLOW_CHARGE);

    let first = app
        .charge_giving_up_after(Duration::from_millis(300), "key-1", &body)
        .await;
    let err = first.expect_err("the gateway is still processing when the client gives up");
    assert!(err.is_timeout(), "{err:?}");

    // Meanwhile: nothing charged, nothing found, and a re-send is refused as in progress.
    assert!(app.gateway.ledger().is_empty());
    assert!(app.lookup("key-1").await.is_empty(), "not found yet");
    let resend = app.charge("key-1", &body).await;
    assert_error(resend, StatusCode::CONFLICT, "idempotency_in_progress").await;
    assert_eq!(app.gateway.stats().charges_in_progress, 1);

    app.gateway.finish_slow_charges();
    app.gateway.wait_for_ledger(1).await;

    let ledger = app.gateway.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(
        app.lookup("key-1").await.len(),
        1,
        "now the lookup finds it"
    );
    let replay = app.expect_replay("key-1", &body, StatusCode::OK).await;
    let replayed: Value = replay.json().await.unwrap();
    assert_eq!(replayed["id"], ledger[0].id.as_str());
    assert_eq!(app.gateway.ledger().len(), 1, "charged exactly once");
}

#[tokio::test]
async fn a_counted_slow_charge_is_held_until_slow_charge_for_has_passed() {
    let app = spawn_gateway_with(MockConfig {
        slow_charge_for: Duration::from_millis(200),
        faults: FaultConfig {
            slow_charge: FaultRule::times(1),
            ..FaultConfig::default()
        },
        ..MockConfig::default()
    })
    .await;
    let body = charge_body("attempt-1", payment_methods::CARD_VISA);

    let started = Instant::now();
    let first = app.charge("key-1", &body).await;

    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(app.gateway.ledger().len(), 1);
    assert_eq!(app.gateway.faults().slow_charge.count, 0, "consumed");
    assert_eq!(app.gateway.requests()[0].fault, Some(FaultKind::SlowCharge));
    let second = app.charge("key-2", &body).await;
    assert_eq!(second.status(), StatusCode::CREATED, "only the counted one");
}

#[tokio::test]
async fn the_log_normal_latency_is_drawn_for_every_charge_replay_and_lookup() {
    let app = spawn_gateway_with(MockConfig {
        latency_distribution: Some(
            LatencyDistribution::log_normal(Duration::from_millis(5), Duration::from_millis(20), 7)
                .unwrap(),
        ),
        ..MockConfig::default()
    })
    .await;
    let body = charge_body("attempt-1", "pm_card_visa");
    assert_eq!(app.gateway.latency_drawn(), LatencyDrawn::default());

    assert_eq!(
        app.charge("key-1", &body).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(app.charge("key-1", &body).await.status(), StatusCode::OK);
    assert_eq!(app.lookup("key-1").await.len(), 1);

    let drawn = app.gateway.latency_drawn();
    assert_eq!(drawn.draws, 3, "one draw per request");
    assert!(!drawn.total.is_zero());
    assert_eq!(app.gateway.ledger().len(), 1, "latency never charges twice");
}
