//! Faults on the onecharge dialect's refunds: what the client sees, and what the refund
//! ledger shows was really refunded.

use std::time::Duration;

use mock_gateway::{
    payment_methods as pm, FaultConfig, FaultKind, FaultRule, MockConfig, RefundFaults,
    ResponseClass,
};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// A gateway holding one 1999 EUR charge, with `refunds` as its refund faults; the
/// charge's id.
async fn charged_with(config: MockConfig, refunds: RefundFaults) -> (TestGateway, String) {
    let app = spawn_gateway_with(config).await;
    let charge = app.charged("charge-1", pm::CARD_VISA).await;
    app.gateway.set_faults(FaultConfig {
        refunds,
        ..FaultConfig::default()
    });
    (app, charge)
}

async fn charged(refunds: RefundFaults) -> (TestGateway, String) {
    charged_with(MockConfig::default(), refunds).await
}

#[tokio::test]
async fn error_before_answers_500_records_nothing_and_the_retry_refunds() {
    let (app, charge) = charged(RefundFaults {
        error_before: FaultRule::times(1),
        ..RefundFaults::default()
    })
    .await;
    let body = refund_body(&charge, 500, "rf-1");

    let first = app.refund("rk-1", &body).await;
    assert_error(first, StatusCode::INTERNAL_SERVER_ERROR, "api_error").await;
    assert!(app.gateway.refunds().is_empty());
    assert!(app.refund_lookup("rk-1").await.is_empty());

    let retry = app.refund("rk-1", &body).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert!(!is_replay(&retry));
    assert_eq!(app.gateway.refunds_for_refund_id("rf-1").len(), 1);
}

#[tokio::test]
async fn error_after_records_the_refund_then_answers_500_and_the_retry_replays_it() {
    let (app, charge) = charged(RefundFaults {
        error_after: FaultRule::times(1),
        ..RefundFaults::default()
    })
    .await;
    let body = refund_body(&charge, 500, "rf-1");

    let first = app.refund("rk-1", &body).await;
    assert_error(first, StatusCode::INTERNAL_SERVER_ERROR, "api_error").await;
    let recorded = app.gateway.refunds();
    assert_eq!(recorded.len(), 1, "refunded before the 500");
    assert_eq!(
        app.refund_lookup("rk-1").await[0]["id"],
        recorded[0].id.as_str()
    );

    let retry = app.refund("rk-1", &body).await;
    assert_eq!(retry.status(), StatusCode::OK);
    assert!(is_replay(&retry));
    let replayed: Value = retry.json().await.unwrap();
    assert_eq!(replayed["id"], recorded[0].id.as_str());
    assert_eq!(app.gateway.refunded(&charge), 500, "refunded once");
}

#[tokio::test]
async fn hang_after_records_the_refund_and_outlasts_a_short_client_timeout() {
    let (app, charge) = charged_with(
        MockConfig {
            hang_for: Duration::from_secs(20),
            ..MockConfig::default()
        },
        RefundFaults {
            hang_after: FaultRule::times(1),
            ..RefundFaults::default()
        },
    )
    .await;
    let body = refund_body(&charge, 500, "rf-1");

    let first = app
        .post_refund("rk-1", &body)
        .timeout(Duration::from_millis(300))
        .send()
        .await;

    assert!(first.expect_err("held past the timeout").is_timeout());
    assert_eq!(app.gateway.refunds().len(), 1, "refunded before hanging");
    let held = app.gateway.requests().pop().unwrap();
    assert_eq!(
        (held.class, held.fault, held.status),
        (Some(ResponseClass::Hung), Some(FaultKind::HangAfter), None)
    );
    assert_eq!(app.refund("rk-1", &body).await.status(), StatusCode::OK);
    assert_eq!(app.gateway.refunds().len(), 1);
}

#[tokio::test]
async fn drop_after_records_the_refund_and_closes_the_connection_without_a_response() {
    let (app, charge) = charged(RefundFaults {
        drop_after: FaultRule::times(1),
        ..RefundFaults::default()
    })
    .await;
    let body = refund_body(&charge, 500, "rf-1");

    let first = app.post_refund("rk-1", &body).send().await;

    let err = first.expect_err("no response at all");
    assert!(!err.is_timeout(), "{err:?}");
    assert_eq!(app.gateway.refunds().len(), 1, "refunded before the drop");
    assert_eq!(app.refund_lookup("rk-1").await.len(), 1);
    assert_eq!(app.gateway.stats().dropped, 1);
}

#[tokio::test]
async fn rate_limit_is_429_with_retry_after_and_records_nothing() {
    let (app, charge) = charged(RefundFaults {
        rate_limit: FaultRule::times(1),
        ..RefundFaults::default()
    })
    .await;
    let body = refund_body(&charge, 500, "rf-1");

    let first = app.refund("rk-1", &body).await;
    assert_eq!(first.headers()["retry-after"], "1");
    assert_error(first, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    assert!(app.gateway.refunds().is_empty());

    assert_eq!(
        app.refund("rk-1", &body).await.status(),
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn the_charges_faults_leave_refunds_alone_and_the_refunds_faults_leave_charges_alone() {
    let app = spawn_gateway().await;
    let charge = app.charged("charge-1", pm::CARD_VISA).await;
    app.gateway.set_faults(FaultConfig {
        error_before: FaultRule::times(1),
        refunds: RefundFaults {
            error_before: FaultRule::times(1),
            ..RefundFaults::default()
        },
        ..FaultConfig::default()
    });

    let refunded = app.refund("rk-1", &refund_body(&charge, 500, "rf-1")).await;
    assert_eq!(refunded.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(app.gateway.faults().error_before.count, 1, "still there");
    let charged = app
        .charge("charge-2", &charge_body("attempt-2", pm::CARD_VISA))
        .await;
    assert_eq!(charged.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        app.refund("rk-1", &refund_body(&charge, 500, "rf-1"))
            .await
            .status(),
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn a_refused_refund_draws_no_fault() {
    let (app, charge) = charged(RefundFaults {
        error_after: FaultRule::times(1),
        ..RefundFaults::default()
    })
    .await;

    let over = app
        .refund("rk-1", &refund_body(&charge, 5000, "rf-1"))
        .await;

    assert_error(over, StatusCode::BAD_REQUEST, "amount_exceeds_charge").await;
    assert_eq!(app.gateway.faults().refunds.error_after.count, 1);
}

#[tokio::test]
async fn refund_lookups_fail_hang_or_drop_by_their_own_knobs_and_then_answer() {
    let (app, charge) = charged_with(
        MockConfig {
            hang_for: Duration::from_secs(20),
            ..MockConfig::default()
        },
        RefundFaults::default(),
    )
    .await;
    app.refund("rk-1", &refund_body(&charge, 500, "rf-1")).await;
    let lookup = || {
        app.authorized_get("/v1/refunds")
            .query(&[("idempotency_key", "rk-1")])
            .timeout(Duration::from_millis(500))
            .send()
    };

    let faults = json!({"refunds": {
        "lookup_error": {"count": 1}, "lookup_rate_limit": {"count": 1},
        "lookup_hang": {"count": 1}, "lookup_drop": {"count": 1},
    }});
    let put = app.put_json("/__faults", &faults).await;
    assert_eq!(put.status(), StatusCode::OK);
    let limited = lookup().await.unwrap();
    assert_error(limited, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    let failed = lookup().await.unwrap();
    assert_error(failed, StatusCode::INTERNAL_SERVER_ERROR, "api_error").await;
    assert!(lookup().await.unwrap_err().is_timeout(), "held");
    assert!(!lookup().await.unwrap_err().is_timeout(), "dropped");

    assert_eq!(app.refund_lookup("rk-1").await.len(), 1);
    let charge_lookups_unfaulted = app.lookup("charge-1").await;
    assert_eq!(charge_lookups_unfaulted.len(), 1);
}
