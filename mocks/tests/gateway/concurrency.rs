//! Concurrent requests: one key charges once, however the requests overlap.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mock_gateway::{payment_methods, FaultConfig, Latency, MockConfig};
use reqwest::StatusCode;
use serde_json::Value;
use tokio::sync::{Barrier, Semaphore};

use crate::helpers::*;

fn with_latency(fixed_ms: u64, jitter_ms: u64) -> MockConfig {
    MockConfig {
        faults: FaultConfig {
            latency: Latency {
                fixed_ms,
                jitter_ms,
            },
            ..FaultConfig::default()
        },
        ..MockConfig::default()
    }
}

#[tokio::test]
async fn a_duplicate_sent_while_the_first_is_in_progress_gets_409_and_one_charge_is_made() {
    let app = Arc::new(spawn_gateway_with(with_latency(500, 0)).await);
    let body = charge_body("attempt-1", payment_methods::CARD_VISA);
    let first = tokio::spawn({
        let app = Arc::clone(&app);
        let body = body.clone();
        async move { app.charge("key-1", &body).await.status() }
    });
    app.gateway.wait_for_charges_in_progress(1).await;

    let duplicate = app.charge("key-1", &body).await;

    assert_error(duplicate, StatusCode::CONFLICT, "idempotency_in_progress").await;
    assert_eq!(first.await.unwrap(), StatusCode::CREATED);
    assert_eq!(app.gateway.ledger().len(), 1);
    app.expect_replay("key-1", &body, StatusCode::OK).await;
}

#[tokio::test]
async fn different_parameters_while_the_first_is_in_progress_get_422() {
    let app = Arc::new(spawn_gateway_with(with_latency(500, 0)).await);
    let first = tokio::spawn({
        let app = Arc::clone(&app);
        async move {
            app.charge(
                "key-1",
                &charge_body("attempt-1", payment_methods::CARD_VISA),
            )
            .await
            .status()
        }
    });
    app.gateway.wait_for_charges_in_progress(1).await;

    let mut other = charge_body("attempt-1", payment_methods::CARD_VISA);
    other["amount_minor"] = 5000.into();
    let reused = app.charge("key-1", &other).await;

    assert_error(
        reused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency_key_reused",
    )
    .await;
    assert_eq!(first.await.unwrap(), StatusCode::CREATED);
    let ledger = app.gateway.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].amount_minor, 1999);
}

#[tokio::test]
async fn fifty_simultaneous_duplicates_released_by_a_barrier_charge_exactly_once() {
    const DUPLICATES: usize = 50;
    let app = Arc::new(spawn_gateway_with(with_latency(200, 0)).await);
    let barrier = Arc::new(Barrier::new(DUPLICATES));
    let body = charge_body("attempt-1", payment_methods::CARD_VISA);

    let tasks: Vec<_> = (0..DUPLICATES)
        .map(|_| {
            let (app, barrier, body) = (Arc::clone(&app), Arc::clone(&barrier), body.clone());
            tokio::spawn(async move {
                let request = app.post_charge("key-1", &body);
                barrier.wait().await;
                let response = request.send().await.unwrap();
                (response.status(), is_replay(&response))
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }

    let created = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::CREATED)
        .count();
    assert_eq!(created, 1, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|(status, replayed)| *status == StatusCode::CREATED
                || *status == StatusCode::CONFLICT
                || (*status == StatusCode::OK && *replayed)),
        "{answers:?}"
    );
    assert!(answers.iter().any(|(s, _)| *s == StatusCode::CONFLICT));
    assert_eq!(app.gateway.ledger().len(), 1);
}

#[tokio::test]
async fn two_thousand_requests_over_a_thousand_keys_200_at_a_time_charge_each_key_once() {
    const KEYS: usize = 1000;
    const IN_FLIGHT: usize = 200;
    let app = Arc::new(spawn_gateway_with(with_latency(0, 5)).await);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // Each key twice, its two requests 7 positions apart so that they often overlap.
    let order: Vec<usize> = (0..KEYS * 2)
        .map(|i| (i / 2 + (i % 2) * 7) % KEYS)
        .collect();

    let tasks: Vec<_> = order
        .into_iter()
        .map(|k| {
            let (app, slots) = (Arc::clone(&app), Arc::clone(&slots));
            tokio::spawn(async move {
                let _slot = slots.acquire_owned().await.unwrap();
                let key = format!("key-{k}");
                let response = app
                    .charge(&key, &charge_body(&format!("attempt-{k}"), "pm_card_visa"))
                    .await;
                (key, response.status())
            })
        })
        .collect();
    let mut by_key: HashMap<String, Vec<StatusCode>> = HashMap::new();
    for task in tasks {
        let (key, status) = task.await.unwrap();
        by_key.entry(key).or_default().push(status);
    }

    assert_eq!(by_key.len(), KEYS);
    for (key, statuses) in &by_key {
        let created = statuses
            .iter()
            .filter(|s| **s == StatusCode::CREATED)
            .count();
        assert_eq!(created, 1, "{key}: {statuses:?}");
        assert!(
            statuses
                .iter()
                .all(|s| [StatusCode::CREATED, StatusCode::OK, StatusCode::CONFLICT].contains(s)),
            "{key}: {statuses:?}"
        );
    }
    let ledger = app.gateway.ledger();
    assert_eq!(ledger.len(), KEYS);
    let mut keys: Vec<_> = ledger.iter().map(|c| c.idempotency_key.clone()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), KEYS, "one ledger entry per key");
    let stats = app.gateway.stats();
    assert_eq!(stats.requests, (KEYS * 2) as u64);
    assert_eq!(stats.created, KEYS as u64);
    assert_eq!(stats.replayed + stats.in_progress, KEYS as u64);
    assert!(
        stats.in_progress > 0,
        "duplicates really overlapped: {stats:?}"
    );
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_charge_does_not_leave_the_key_in_progress() {
    let app = spawn_gateway_with(with_latency(300, 0)).await;
    let body = charge_body("attempt-1", payment_methods::CARD_VISA);

    let impatient = app
        .charge_giving_up_after(Duration::from_millis(50), "key-1", &body)
        .await;
    assert!(impatient.unwrap_err().is_timeout());
    app.gateway.wait_for_charges_in_progress(0).await;

    let retry = app.charge("key-1", &body).await;
    assert_eq!(
        retry.status(),
        StatusCode::OK,
        "the committed charge is replayed"
    );
    let replayed: Value = retry.json().await.unwrap();
    assert_eq!(app.gateway.ledger().len(), 1);
    assert_eq!(replayed["id"], app.gateway.ledger()[0].id.as_str());
}
