//! One test per row of the table in docs/stripe.md.

use std::time::Duration;

use super::*;

const PI: &str = "pi_3Nx1";

fn answer(status: u16, body: &str) -> GatewayReply<'_> {
    GatewayReply::Answered {
        status,
        replayed: false,
        retry_after: None,
        body: body.as_bytes(),
    }
}

fn confirm(status: u16, body: &str) -> GatewayOutcome {
    classify_confirm(answer(status, body), Hints::default(), PI)
}

fn intent(status: &str) -> serde_json::Value {
    serde_json::json!({
        "id": PI, "object": "payment_intent", "status": status, "amount": 1999,
        "currency": "eur", "customer": "cus_42", "payment_method": "pm_card_visa",
        "metadata": {"payment_attempt_id": "6f1c2a9e", "order_id": "ord_1001"},
        "last_payment_error": null, "latest_charge": null,
    })
}

fn declined_intent(code: &str, decline_code: Option<&str>) -> serde_json::Value {
    let mut pi = intent("requires_payment_method");
    pi["last_payment_error"] = serde_json::json!({
        "type": "card_error", "code": code, "decline_code": decline_code,
        "message": "Your card was declined."
    });
    pi
}

fn card_error(code: &str, decline_code: Option<&str>) -> String {
    serde_json::json!({"error": {
        "type": "card_error", "code": code, "decline_code": decline_code,
        "message": "Your card was declined.",
        "payment_intent": declined_intent(code, decline_code),
    }})
    .to_string()
}

fn error(kind: &str, code: Option<&str>) -> String {
    serde_json::json!({"error": {"type": kind, "code": code, "message": "words"}}).to_string()
}

#[test]
fn a_succeeded_payment_intent_is_succeeded_with_its_id() {
    assert_eq!(
        confirm(200, &intent("succeeded").to_string()),
        GatewayOutcome::Succeeded {
            charge_id: GatewayChargeId::from_gateway(PI),
            replayed: false
        }
    );
    let replayed = classify_confirm(
        GatewayReply::Answered {
            status: 200,
            replayed: true,
            retry_after: None,
            body: intent("succeeded").to_string().as_bytes(),
        },
        Hints::default(),
        PI,
    );
    assert_eq!(
        replayed,
        GatewayOutcome::Succeeded {
            charge_id: GatewayChargeId::from_gateway(PI),
            replayed: true
        }
    );
}

#[test]
fn a_card_error_with_a_decline_code_is_declined_with_that_code() {
    for (code, decline, expected) in [
        (
            "card_declined",
            Some("insufficient_funds"),
            "insufficient_funds",
        ),
        ("card_declined", Some("generic_decline"), "generic_decline"),
        ("expired_card", None, "expired_card"),
    ] {
        assert_eq!(
            confirm(402, &card_error(code, decline)),
            GatewayOutcome::Declined {
                charge_id: GatewayChargeId::from_gateway(PI),
                decline_code: Some(expected.into()),
                replayed: false
            },
            "{code}/{decline:?}"
        );
    }
}

#[test]
fn authentication_required_off_session_is_declined_with_that_code() {
    assert_eq!(
        confirm(
            402,
            &card_error("authentication_required", Some("authentication_required"))
        ),
        GatewayOutcome::Declined {
            charge_id: GatewayChargeId::from_gateway(PI),
            decline_code: Some("authentication_required".into()),
            replayed: false
        }
    );
    // Without Stripe's decline_code, its error code says it.
    assert!(matches!(
        confirm(402, &card_error("authentication_required", None)),
        GatewayOutcome::Declined { decline_code: Some(ref c), .. } if c == "authentication_required"
    ));
}

#[test]
fn a_payment_intent_left_in_requires_action_is_cancelled_or_left_for_a_person() {
    // The executor cancels it (stripe_requires_action = cancel) or hands it to a person.
    assert_eq!(
        confirm(200, &intent("requires_action").to_string()),
        GatewayOutcome::RequiresAction {
            charge_id: GatewayChargeId::from_gateway(PI)
        }
    );
}

#[test]
fn an_off_session_authentication_failure_read_back_is_declined_authentication_required() {
    // Off-session SCA failures come back as requires_payment_method with
    // last_payment_error.code = authentication_required (and no decline_code).
    let pi = declined_intent("authentication_required", None);
    assert!(matches!(
        confirm(200, &pi.to_string()),
        GatewayOutcome::Declined { decline_code: Some(ref c), .. } if c == "authentication_required"
    ));
    let LookupOutcome::Found(found) = classify_retrieve(answer(200, &pi.to_string()), "k") else {
        panic!()
    };
    assert_eq!(found[0].status, ChargeStatus::Declined);
    assert_eq!(
        found[0].decline_code.as_deref(),
        Some("authentication_required")
    );
}

#[test]
fn only_a_canceled_payment_intent_proves_a_cancel_and_a_charge_is_adopted() {
    let cancel = |status: u16, body: &str| classify_cancel(answer(status, body), PI);
    assert_eq!(
        cancel(200, &intent("canceled").to_string()),
        CancelOutcome::Canceled {
            charge_id: GatewayChargeId::from_gateway(PI)
        }
    );
    let unexpected = |pi: serde_json::Value| {
        serde_json::json!({"error": {
            "type": "invalid_request_error", "code": "payment_intent_unexpected_state",
            "message": "cannot cancel", "payment_intent": pi,
        }})
        .to_string()
    };
    assert_eq!(
        cancel(400, &unexpected(intent("succeeded"))),
        CancelOutcome::Succeeded {
            charge_id: GatewayChargeId::from_gateway(PI)
        }
    );
    assert_eq!(
        cancel(400, &unexpected(intent("processing"))),
        CancelOutcome::Processing {
            charge_id: GatewayChargeId::from_gateway(PI)
        }
    );
    // Already canceled under another key: still the proof.
    assert!(matches!(
        cancel(400, &unexpected(intent("canceled"))),
        CancelOutcome::Canceled { .. }
    ));
    for outcome in [
        cancel(500, &error("api_error", None)),
        cancel(
            409,
            &error("idempotency_error", Some("idempotency_key_in_use")),
        ),
        cancel(429, &error("invalid_request_error", Some("lock_timeout"))),
        cancel(200, &intent("requires_confirmation").to_string()),
        classify_cancel(GatewayReply::Lost { error: "timeout" }, PI),
    ] {
        assert!(
            matches!(outcome, CancelOutcome::Unproven { .. }),
            "{outcome:?}"
        );
    }
}

#[test]
fn a_decline_returned_as_a_payment_intent_is_declined() {
    assert_eq!(
        confirm(
            200,
            &declined_intent("card_declined", Some("do_not_honor")).to_string()
        ),
        GatewayOutcome::Declined {
            charge_id: GatewayChargeId::from_gateway(PI),
            decline_code: Some("do_not_honor".into()),
            replayed: false
        }
    );
}

#[test]
fn processing_is_not_final_and_not_a_failure() {
    let outcome = confirm(200, &intent("processing").to_string());
    assert_eq!(
        outcome,
        GatewayOutcome::Processing {
            charge_id: GatewayChargeId::from_gateway(PI)
        }
    );
    assert!(!outcome.is_gateway_failure());
    assert_eq!(outcome.label(), "processing");
}

#[test]
fn a_canceled_payment_intent_is_declined_as_canceled() {
    let mut pi = intent("canceled");
    assert_eq!(
        confirm(200, &pi.to_string()),
        GatewayOutcome::Declined {
            charge_id: GatewayChargeId::from_gateway(PI),
            decline_code: Some("canceled".into()),
            replayed: false
        }
    );
    pi["cancellation_reason"] = "abandoned".into();
    assert!(matches!(
        confirm(200, &pi.to_string()),
        GatewayOutcome::Declined { decline_code: Some(ref c), .. } if c == "canceled:abandoned"
    ));
}

#[test]
fn an_idempotency_error_needs_review() {
    let outcome = confirm(400, &error("idempotency_error", None));
    assert!(
        matches!(&outcome, GatewayOutcome::NeedsReview { reason } if reason.contains("idempotency_error")),
        "{outcome:?}"
    );
    let prepared = classify_create(
        answer(400, &error("idempotency_error", None)),
        Hints::default(),
    );
    assert!(matches!(
        prepared,
        Prepared::Refused(GatewayOutcome::NeedsReview { .. })
    ));
}

#[test]
fn a_409_is_retried_later_with_the_same_key_and_no_try_consumed() {
    let body = error("idempotency_error", Some("idempotency_key_in_use"));
    for outcome in [
        confirm(409, &body),
        match classify_create(answer(409, &body), Hints::default()) {
            Prepared::Refused(outcome) => outcome,
            other => panic!("{other:?}"),
        },
    ] {
        // The label of `RetryLater { after: InProgress, .. }` and of nothing else.
        assert_eq!(outcome.label(), "in_progress", "{outcome:?}");
    }
}

#[test]
fn a_429_is_retried_after_retry_after_or_with_backoff() {
    let with = |retry_after: Option<&'static str>, should_retry| {
        classify_confirm(
            GatewayReply::Answered {
                status: 429,
                replayed: false,
                retry_after,
                body: br#"{"error":{"type":"invalid_request_error","code":"rate_limit"}}"#,
            },
            Hints { should_retry },
            PI,
        )
    };
    assert!(matches!(
        with(Some("3"), Some(true)),
        GatewayOutcome::RetryLater { after: RetryAfter::Delay(d), .. } if d == Duration::from_secs(3)
    ));
    for should_retry in [Some(true), Some(false), None] {
        assert!(matches!(
            with(None, should_retry),
            GatewayOutcome::RetryLater {
                after: RetryAfter::Backoff,
                ..
            }
        ));
    }
}

#[test]
fn stripe_should_retry_decides_an_unlisted_4xx() {
    let body = error("invalid_request_error", Some("lock_timeout"));
    let with = |should_retry| classify_confirm(answer(400, &body), Hints { should_retry }, PI);
    assert!(matches!(
        with(Some(true)),
        GatewayOutcome::RetryLater {
            after: RetryAfter::Backoff,
            ..
        }
    ));
    assert!(
        matches!(with(Some(false)), GatewayOutcome::NeedsReview { ref reason } if reason.contains("Stripe-Should-Retry: false"))
    );
    assert!(matches!(with(None), GatewayOutcome::NeedsReview { .. }));
}

#[test]
fn a_5xx_timeout_or_dropped_connection_on_confirm_is_ambiguous() {
    for should_retry in [Some(true), Some(false), None] {
        let outcome = classify_confirm(
            answer(500, &error("api_error", None)),
            Hints { should_retry },
            PI,
        );
        assert!(
            matches!(outcome, GatewayOutcome::Ambiguous { .. }),
            "{outcome:?}"
        );
    }
    assert!(matches!(
        confirm(503, "<html>bad gateway</html>"),
        GatewayOutcome::Ambiguous { .. }
    ));
    assert!(matches!(
        classify_confirm(
            GatewayReply::Lost {
                error: "operation timed out"
            },
            Hints::default(),
            PI
        ),
        GatewayOutcome::Ambiguous { ref reason } if reason.contains(PI) && reason.contains("timed out")
    ));
    assert!(matches!(
        confirm(200, "{not json"),
        GatewayOutcome::Ambiguous { .. }
    ));
    assert!(matches!(
        confirm(402, "not stripe's error"),
        GatewayOutcome::Ambiguous { .. }
    ));
}

#[test]
fn a_request_never_sent_is_retried_with_backoff() {
    let outcome = classify_confirm(
        GatewayReply::NotSent {
            error: "connection refused",
        },
        Hints::default(),
        PI,
    );
    assert!(matches!(outcome, GatewayOutcome::NotSent { .. }));
}

#[test]
fn a_401_or_403_pauses_on_credentials() {
    for status in [401, 403] {
        let body = error("invalid_request_error", None);
        assert_eq!(
            confirm(status, &body),
            GatewayOutcome::CredentialsFault { status }
        );
        assert_eq!(
            classify_create(answer(status, &body), Hints::default()),
            Prepared::Refused(GatewayOutcome::CredentialsFault { status })
        );
        assert_eq!(
            classify_retrieve(answer(status, &body), "k"),
            LookupOutcome::CredentialsFault { status }
        );
    }
}

#[test]
fn a_404_from_stripe_is_this_requests_fault_and_a_bare_404_the_wrong_url() {
    let missing = error("invalid_request_error", Some("resource_missing"));
    assert!(matches!(
        confirm(404, &missing),
        GatewayOutcome::NeedsReview { .. }
    ));
    assert_eq!(
        confirm(404, "Not Found"),
        GatewayOutcome::EndpointFault { status: 404 }
    );
    assert!(
        matches!(classify_retrieve(answer(404, &missing), "k"), LookupOutcome::Failed { ref reason } if reason.contains("no PaymentIntent"))
    );
    assert_eq!(
        classify_retrieve(answer(404, ""), "k"),
        LookupOutcome::EndpointFault { status: 404 }
    );
}

#[test]
fn a_confirm_of_an_already_confirmed_payment_intent_reads_its_state() {
    let unexpected = |pi: serde_json::Value| {
        serde_json::json!({"error": {
            "type": "invalid_request_error", "code": "payment_intent_unexpected_state",
            "message": "already succeeded", "payment_intent": pi,
        }})
        .to_string()
    };
    assert!(matches!(
        confirm(400, &unexpected(intent("succeeded"))),
        GatewayOutcome::Succeeded { ref charge_id, .. } if charge_id == PI
    ));
    assert!(matches!(
        confirm(400, &unexpected(intent("canceled"))),
        GatewayOutcome::Declined { .. }
    ));
    assert!(matches!(
        confirm(400, &unexpected(intent("requires_capture"))),
        GatewayOutcome::NeedsReview { .. }
    ));
    assert!(matches!(
        confirm(400, &error("invalid_request_error", Some("parameter_invalid_integer"))),
        GatewayOutcome::NeedsReview { ref reason } if reason.contains("parameter_invalid_integer")
    ));
}

#[test]
fn the_create_call_yields_the_payment_intent_id_and_never_an_ambiguity() {
    assert_eq!(
        classify_create(
            answer(200, &intent("requires_confirmation").to_string()),
            Hints::default()
        ),
        Prepared::Object {
            id: GatewayObjectId::from_gateway(PI)
        }
    );
    // Nothing can have charged: an unconfirmed PaymentIntent. Retried under the same key.
    for reply in [
        answer(500, &error("api_error", None)),
        answer(200, "garbage"),
        GatewayReply::Lost { error: "timeout" },
        GatewayReply::NotSent { error: "refused" },
    ] {
        let prepared = classify_create(reply, Hints::default());
        assert!(
            matches!(prepared, Prepared::Refused(GatewayOutcome::NotSent { .. })),
            "{reply:?}: {prepared:?}"
        );
    }
    assert!(matches!(
        classify_create(
            answer(
                400,
                &error("invalid_request_error", Some("resource_missing"))
            ),
            Hints::default()
        ),
        Prepared::Refused(GatewayOutcome::NeedsReview { .. })
    ));
}

#[test]
fn a_retrieved_payment_intent_reads_as_the_charges_it_made() {
    let read =
        |pi: serde_json::Value| classify_retrieve(answer(200, &pi.to_string()), "onecharge-x");
    let LookupOutcome::Found(found) = read(intent("succeeded")) else {
        panic!()
    };
    assert_eq!(
        found,
        vec![GatewayCharge {
            id: GatewayChargeId::from_gateway(PI),
            status: ChargeStatus::Succeeded,
            decline_code: None,
            idempotency_key: Some("onecharge-x".into()),
            reference: Some("6f1c2a9e".into()),
            amount_minor: Some(1999),
            currency: Some("EUR".into()),
        }]
    );
    // Nothing was charged: never confirmed, or refused before charging.
    for pi in [
        intent("requires_confirmation"),
        intent("requires_payment_method"),
    ] {
        assert_eq!(read(pi), LookupOutcome::Found(Vec::new()));
    }
    let declined = read(declined_intent("card_declined", Some("insufficient_funds")));
    assert!(
        matches!(&declined, LookupOutcome::Found(c) if c[0].status == ChargeStatus::Declined && c[0].decline_code.as_deref() == Some("insufficient_funds"))
    );
    assert!(
        matches!(read(intent("canceled")), LookupOutcome::Found(c) if c[0].status == ChargeStatus::Declined)
    );
    // Not final: never adopted by the reconciler (it looks again).
    for status in ["processing", "requires_action", "requires_capture"] {
        assert!(
            matches!(read(intent(status)), LookupOutcome::Found(ref c) if c[0].status.to_string() == status)
        );
    }
    assert!(matches!(
        classify_retrieve(answer(503, ""), "k"),
        LookupOutcome::Failed { .. }
    ));
    assert!(matches!(
        classify_retrieve(GatewayReply::Lost { error: "reset" }, "k"),
        LookupOutcome::Failed { .. }
    ));
}
