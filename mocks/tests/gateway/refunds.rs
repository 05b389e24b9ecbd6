//! The onecharge dialect's refunds over HTTP: `POST /v1/refunds` and its lookup, their
//! idempotency, the refusals, refunds that settle later, the refund controls, the listing
//! and the refund ledger.

use std::time::Duration;

use mock_gateway::{
    payment_methods as pm, FaultConfig, FaultRule, MockConfig, RefundFaults, RefundStatus,
};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

fn refund_faults(refunds: RefundFaults) -> FaultConfig {
    FaultConfig {
        refunds,
        ..FaultConfig::default()
    }
}

#[tokio::test]
async fn a_refund_of_a_succeeded_charge_is_201_succeeded_and_recorded_once() {
    let app = spawn_gateway().await;
    let charge = app.charged("charge-1", pm::CARD_VISA).await;

    let response = app
        .refund("onecharge-refund-rf-1", &refund_body(&charge, 500, "rf-1"))
        .await;

    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(!is_replay(&response));
    let refund = json(response).await;
    assert!(refund["id"].as_str().unwrap().starts_with("re_"));
    assert_eq!(refund["object"], "refund");
    assert_eq!(refund["status"], "succeeded");
    assert_eq!(refund["charge_id"], charge.as_str());
    assert_eq!(refund["amount_minor"], 500);
    assert_eq!(refund["currency"], "EUR");
    assert_eq!(refund["reference"], "attempt-1");
    assert_eq!(refund["refund_id"], "rf-1");
    assert_eq!(refund["idempotency_key"], "onecharge-refund-rf-1");
    assert_eq!(refund["failure_reason"], Value::Null);
    assert!(refund["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(app.gateway.refunds_for_refund_id("rf-1").len(), 1);
    assert_eq!(app.gateway.refunded(&charge), 500);
    assert_eq!(app.gateway.stats().refunded, 1);
    assert_eq!(app.gateway.stats().refunds, 1);
    assert_eq!(app.refund_lookup("onecharge-refund-rf-1").await, [refund]);
}

#[tokio::test]
async fn the_same_key_and_body_replays_the_refund_as_it_stands_now_and_refunds_nothing_more() {
    let app = spawn_gateway().await;
    let charge = app.charged("charge-1", pm::PENDING_REFUND).await;
    let body = refund_body(&charge, 500, "rf-1");

    let first = json(app.refund("rk-1", &body).await).await;
    assert_eq!(first["status"], "pending");
    let replay = app.refund("rk-1", &body).await;
    assert_eq!(replay.status(), StatusCode::OK);
    assert!(is_replay(&replay));
    assert_eq!(json(replay).await, first);

    let settled = app.gateway.settle_refunds();
    assert_eq!(settled.len(), 1);
    let replay = json(app.refund("rk-1", &body).await).await;
    assert_eq!(replay["id"], first["id"]);
    assert_eq!(replay["status"], "succeeded", "as it stands now");
    assert_eq!(app.refund_lookup("rk-1").await[0]["status"], "succeeded");
    assert_eq!(app.gateway.refunds_for_key("rk-1").len(), 1);
    assert_eq!(app.gateway.refunded(&charge), 500);
    assert_eq!(app.gateway.stats().replayed, 2);
}

#[tokio::test]
async fn a_resend_while_the_first_refund_runs_is_409_and_other_parameters_are_422() {
    let app = spawn_gateway().await;
    let charge = app.charged("charge-1", pm::CARD_VISA).await;
    app.gateway.set_faults(refund_faults(RefundFaults {
        slow_refund: FaultRule::times(1),
        ..RefundFaults::default()
    }));
    let body = refund_body(&charge, 500, "rf-1");

    let first = tokio::spawn(app.post_refund("rk-1", &body).send());
    app.gateway.wait_for_charges_in_progress(1).await;
    assert!(app.refund_lookup("rk-1").await.is_empty(), "not yet");
    let again = app.refund("rk-1", &body).await;
    assert_error(again, StatusCode::CONFLICT, "idempotency_in_progress").await;
    let other = app.refund("rk-1", &refund_body(&charge, 600, "rf-1")).await;
    assert_error(
        other,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency_key_reused",
    )
    .await;
    assert!(app.gateway.refunds().is_empty(), "nothing recorded yet");

    app.gateway.finish_slow_charges();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let reused = app.refund("rk-1", &refund_body(&charge, 600, "rf-1")).await;
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(app.gateway.refunds().len(), 1);
}

#[tokio::test]
async fn concurrent_duplicates_under_one_key_refund_once() {
    let app = spawn_gateway_with(MockConfig {
        faults: FaultConfig {
            latency: mock_gateway::Latency::fixed(50),
            ..FaultConfig::default()
        },
        ..MockConfig::default()
    })
    .await;
    let charge = app.charged("charge-1", pm::CARD_VISA).await;
    let body = refund_body(&charge, 500, "rf-1");

    let statuses = send_all((0..8).map(|_| app.post_refund("rk-1", &body))).await;

    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == StatusCode::CREATED)
            .count(),
        1
    );
    assert!(statuses
        .iter()
        .all(|s| [StatusCode::CREATED, StatusCode::OK, StatusCode::CONFLICT].contains(s)));
    assert_eq!(app.gateway.refunds_for_key("rk-1").len(), 1);
    assert_eq!(app.gateway.refunded(&charge), 500);
}

#[tokio::test]
async fn concurrent_refunds_under_different_keys_never_take_a_charge_over_its_amount() {
    let app = spawn_gateway().await;
    let charge = app.charged("charge-1", pm::CARD_VISA).await;

    let sends: Vec<_> = (0..10)
        .map(|n| {
            let body = refund_body(&charge, 300, &format!("rf-{n}"));
            tokio::spawn(app.post_refund(&format!("rk-{n}"), &body).send())
        })
        .collect();
    let mut created = 0;
    for send in sends {
        let response = send.await.unwrap().unwrap();
        match response.status() {
            StatusCode::CREATED => created += 1,
            status => {
                assert_eq!(status, StatusCode::BAD_REQUEST);
                assert_eq!(error_type(response).await, "amount_exceeds_charge");
            }
        }
    }

    assert_eq!(created, 6, "1999 holds six refunds of 300");
    assert_eq!(app.gateway.refunded(&charge), 1800);
    assert_eq!(app.gateway.refunds().len(), 6, "a refusal records nothing");
}

#[tokio::test]
async fn a_refund_of_no_succeeded_charge_is_404_charge_not_found_and_binds_no_key() {
    let app = spawn_gateway().await;
    let declined = app
        .charge("charge-d", &charge_body("attempt-d", pm::CARD_DECLINED))
        .await;
    let declined = json(declined).await["id"].as_str().unwrap().to_owned();

    for charge in ["ch_000000000000000000000000", declined.as_str()] {
        let response = app.refund("rk-1", &refund_body(charge, 500, "rf-1")).await;
        assert_error(response, StatusCode::NOT_FOUND, "charge_not_found").await;
    }
    assert!(app.refund_lookup("rk-1").await.is_empty());

    let charge = app.charged("charge-1", pm::CARD_VISA).await;
    let response = app.refund("rk-1", &refund_body(&charge, 500, "rf-1")).await;
    assert_eq!(
        response.status(),
        StatusCode::CREATED,
        "the key was not bound"
    );
}

#[tokio::test]
async fn a_refund_over_what_is_left_is_400_and_pending_refunds_count_against_the_charge() {
    let app = spawn_gateway().await;
    let charge = app.charged("charge-1", pm::PENDING_REFUND).await;

    let pending = app
        .refund("rk-1", &refund_body(&charge, 1500, "rf-1"))
        .await;
    assert_eq!(json(pending).await["status"], "pending");
    let over = app.refund("rk-2", &refund_body(&charge, 500, "rf-2")).await;
    assert_error(over, StatusCode::BAD_REQUEST, "amount_exceeds_charge").await;
    let rest = app.refund("rk-3", &refund_body(&charge, 499, "rf-3")).await;
    assert_eq!(rest.status(), StatusCode::CREATED);
    let nothing_left = app.refund("rk-4", &refund_body(&charge, 1, "rf-4")).await;
    assert_error(
        nothing_left,
        StatusCode::BAD_REQUEST,
        "amount_exceeds_charge",
    )
    .await;

    assert_eq!(app.gateway.refunds().len(), 2);
    assert_eq!(app.gateway.refunded(&charge), 0, "nothing settled yet");
    app.gateway.settle_refunds();
    assert_eq!(app.gateway.refunded(&charge), 1999);
}

#[tokio::test]
async fn a_bad_body_or_another_currency_is_400_invalid_request() {
    let app = spawn_gateway().await;
    let charge = app.charged("charge-1", pm::CARD_VISA).await;
    let mut usd = refund_body(&charge, 500, "rf-1");
    usd["currency"] = json!("USD");
    let mut no_refund_id = refund_body(&charge, 500, "rf-1");
    no_refund_id.as_object_mut().unwrap().remove("refund_id");

    for body in [usd, no_refund_id, json!({"amount_minor": 5})] {
        let response = app.refund("rk-1", &body).await;
        assert_error(response, StatusCode::BAD_REQUEST, "invalid_request").await;
    }
    let no_key = app
        .authorized_post("/v1/refunds")
        .json(&refund_body(&charge, 500, "rf-1"))
        .send()
        .await
        .unwrap();
    assert_error(no_key, StatusCode::BAD_REQUEST, "invalid_request").await;
    let unauthorized = app
        .client
        .post(format!("{}/v1/refunds", app.url))
        .header("Idempotency-Key", "rk-1")
        .json(&refund_body(&charge, 500, "rf-1"))
        .send()
        .await
        .unwrap();
    assert_error(
        unauthorized,
        StatusCode::UNAUTHORIZED,
        "authentication_failed",
    )
    .await;
    assert!(app.gateway.refunds().is_empty());
}

#[tokio::test]
async fn a_refund_the_dice_fail_is_recorded_failed_and_its_amount_stays_refundable() {
    let app = spawn_gateway().await;
    let charge = app.charged("charge-1", pm::CARD_VISA).await;
    app.gateway.set_faults(refund_faults(RefundFaults {
        failed: FaultRule::times(1),
        ..RefundFaults::default()
    }));

    let failed = json(
        app.refund("rk-1", &refund_body(&charge, 1999, "rf-1"))
            .await,
    )
    .await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["failure_reason"], "declined");
    let whole = app
        .refund("rk-2", &refund_body(&charge, 1999, "rf-1"))
        .await;

    assert_eq!(json(whole).await["status"], "succeeded");
    assert_eq!(app.gateway.refunded(&charge), 1999);
    assert_eq!(app.gateway.refunds_for_refund_id("rf-1").len(), 2);
}

#[tokio::test]
async fn pending_refunds_settle_by_themselves_after_refund_settle_after() {
    let app = spawn_gateway_with(MockConfig {
        refund_settle_after: Duration::from_millis(200),
        ..MockConfig::default()
    })
    .await;
    let charge = app.charged("charge-1", pm::CARD_VISA).await;
    app.gateway.set_faults(refund_faults(RefundFaults {
        pending: FaultRule::times(1),
        ..RefundFaults::default()
    }));

    let pending = json(app.refund("rk-1", &refund_body(&charge, 500, "rf-1")).await).await;
    assert_eq!(pending["status"], "pending");

    app.gateway
        .wait_until("the pending refund succeeded", |g| {
            g.refunded(&charge) == 500
        })
        .await;
    assert_eq!(app.refund_lookup("rk-1").await[0]["status"], "succeeded");
}

#[tokio::test]
async fn a_refund_of_pm_card_refund_fail_succeeds_then_fails_and_is_refundable_again() {
    let app = spawn_gateway().await;
    let charge = app.charged("charge-1", pm::REFUND_FAIL).await;

    let refund = json(
        app.refund("rk-1", &refund_body(&charge, 1999, "rf-1"))
            .await,
    )
    .await;
    assert_eq!(refund["status"], "succeeded");
    assert_eq!(app.gateway.refunded(&charge), 1999);

    let settled = app.gateway.settle_refunds();
    assert_eq!(settled[0].status, RefundStatus::Failed);
    assert_eq!(
        settled[0].failure_reason.as_deref(),
        Some("expired_or_canceled_card")
    );
    let lookup = app.refund_lookup("rk-1").await;
    assert_eq!(lookup[0]["status"], "failed");
    assert_eq!(app.gateway.refunded(&charge), 0);
    let again = app
        .refund("rk-2", &refund_body(&charge, 1999, "rf-1"))
        .await;
    assert_eq!(again.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn the_refund_control_moves_a_pending_refund_to_succeeded_or_failed_and_nothing_else() {
    let app = spawn_gateway().await;
    let charge = app.charged("charge-1", pm::PENDING_REFUND).await;
    let first = json(app.refund("rk-1", &refund_body(&charge, 500, "rf-1")).await).await;
    let second = json(app.refund("rk-2", &refund_body(&charge, 500, "rf-2")).await).await;
    let (first, second) = (
        first["id"].as_str().unwrap(),
        second["id"].as_str().unwrap(),
    );

    let failed = app
        .post_json(
            &format!("/__refunds/{first}"),
            &json!({"status": "failed", "failure_reason": "lost_or_stolen_card"}),
        )
        .await;
    assert_eq!(failed.status(), StatusCode::OK);
    let failed = json(failed).await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["failure_reason"], "lost_or_stolen_card");
    let succeeded = app
        .post_json(
            &format!("/__refunds/{second}"),
            &json!({"status": "succeeded"}),
        )
        .await;
    assert_eq!(json(succeeded).await["status"], "succeeded");
    assert_eq!(app.gateway.refunded(&charge), 500);
    assert!(app.gateway.settle_refunds().is_empty(), "moved by hand");

    for (id, body, status) in [
        (
            first,
            json!({"status": "succeeded"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            second,
            json!({"status": "canceled"}),
            StatusCode::BAD_REQUEST,
        ),
        (second, json!({"status": "done"}), StatusCode::BAD_REQUEST),
        (
            "re_none",
            json!({"status": "failed"}),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let refused = app.post_json(&format!("/__refunds/{id}"), &body).await;
        assert_eq!(refused.status(), status, "{id} {body}");
    }
    assert_eq!(app.refund_lookup("rk-1").await[0]["status"], "failed");
}

#[tokio::test]
async fn the_list_shows_what_succeeded_refunds_gave_back_and_refunded_once_it_is_all() {
    let app = spawn_gateway().await;
    let partly = app.charged("charge-1", pm::CARD_VISA).await;
    let wholly = app.charged("charge-2", pm::CARD_VISA).await;
    let pending = app.charged("charge-3", pm::PENDING_REFUND).await;
    let disputed = app.charged("charge-4", pm::CARD_VISA).await;
    for (n, (charge, amount)) in [
        (&partly, 500),
        (&wholly, 1500),
        (&wholly, 499),
        (&pending, 1999),
        (&disputed, 1999),
    ]
    .into_iter()
    .enumerate()
    {
        let response = app
            .refund(&format!("rk-{n}"), &refund_body(charge, amount, "rf"))
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    app.post_json(
        &format!("/__charges/{disputed}"),
        &json!({"dispute": "open"}),
    )
    .await;

    let listed = app.listed_charges().await;
    let record = |id: &str| listed.iter().find(|c| c["id"] == id).unwrap().clone();
    assert_eq!(
        (
            record(&partly)["status"].clone(),
            record(&partly)["amount_refunded"].clone()
        ),
        (json!("succeeded"), json!(500))
    );
    assert_eq!(record(&wholly)["status"], "refunded");
    assert_eq!(record(&wholly)["amount_refunded"], 1999);
    assert_eq!(
        record(&pending)["status"],
        "succeeded",
        "nothing settled yet"
    );
    assert_eq!(record(&pending)["amount_refunded"], 0);
    assert_eq!(record(&disputed)["status"], "disputed");
    assert_eq!(record(&disputed)["amount_refunded"], 1999);

    app.gateway.settle_refunds();
    let listed = app.listed_charges().await;
    let pending = listed.iter().find(|c| c["id"] == pending.as_str()).unwrap();
    assert_eq!(pending["status"], "refunded");
}

#[tokio::test]
async fn the_refund_ledger_counts_refunds_by_refund_id_key_and_charge() {
    let app = spawn_gateway().await;
    let charge = app.charged("charge-1", pm::CARD_VISA).await;
    app.refund("rk-1", &refund_body(&charge, 500, "rf-1")).await;
    app.refund("rk-1", &refund_body(&charge, 500, "rf-1")).await;
    app.gateway.set_faults(refund_faults(RefundFaults {
        pending: FaultRule::times(1),
        ..RefundFaults::default()
    }));
    app.refund("rk-2", &refund_body(&charge, 300, "rf-2")).await;

    let ledger = app.admin_get("/__ledger/refunds").await;

    assert_eq!(ledger["refunds"].as_array().unwrap().len(), 2);
    assert_eq!(ledger["refunds"][0]["refund_id"], "rf-1");
    assert_eq!(
        ledger["by_refund_id"]["rf-1"],
        json!({"refunds": 1, "succeeded": 500, "pending": 0})
    );
    assert_eq!(
        ledger["by_idempotency_key"]["rk-2"],
        json!({"refunds": 1, "succeeded": 0, "pending": 300})
    );
    assert_eq!(
        ledger["by_charge"][charge.as_str()],
        json!({"refunds": 2, "succeeded": 500, "pending": 300})
    );
    let settled = app.post_json("/__refunds/settle", &json!({})).await;
    assert_eq!(json(settled).await["settled"][0]["status"], "succeeded");
    assert_eq!(app.gateway.stats().refunds, 2);
}

#[tokio::test]
async fn after_the_retention_a_key_is_forgotten_and_the_same_refund_is_made_again() {
    let app = spawn_gateway().await;
    let charge = app.charged("charge-1", pm::CARD_VISA).await;
    let body = refund_body(&charge, 500, "rf-1");
    app.refund("rk-1", &body).await;

    app.gateway
        .advance_clock(Duration::from_secs(24 * 3600 + 1));

    assert!(app.refund_lookup("rk-1").await.is_empty());
    let again = app.refund("rk-1", &body).await;
    assert_eq!(again.status(), StatusCode::CREATED, "a new refund");
    assert_eq!(app.gateway.refunds_for_key("rk-1").len(), 2);
    assert_eq!(app.gateway.refunded(&charge), 1000);
}
