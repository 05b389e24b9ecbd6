use serde_json::json;

use super::*;

const ATTEMPT: &str = "6f1c0a52-8d0e-4a55-9b8e-6f0c2b3c6c1d";

fn ok(body: serde_json::Value) -> Vec<u8> {
    body.to_string().into_bytes()
}

fn answered(status: u16, body: &[u8]) -> GatewayReply<'_> {
    GatewayReply::Answered {
        status,
        replayed: false,
        retry_after: None,
        body,
    }
}

#[test]
fn a_onecharge_page_reads_each_charge_and_the_next_cursor() {
    let body = ok(json!({"data": [
        {"id": "ch_1", "status": "succeeded", "amount_minor": 1999, "currency": "EUR",
         "reference": ATTEMPT, "idempotency_key": "k1", "customer_id": "cus_1",
         "decline_code": null, "created_at": "2026-12-01T10:00:00Z"},
        {"id": "ch_2", "status": "declined", "amount_minor": 5, "currency": "eur",
         "reference": ATTEMPT, "idempotency_key": "k2", "decline_code": "card_declined",
         "created_at": "2026-12-01T10:00:01Z"}
    ], "has_more": true}));
    let ListOutcome::Page(page) = read_onecharge_page(answered(200, &body), None) else {
        panic!()
    };
    assert_eq!(page.next.as_deref(), Some("ch_2"));
    assert_eq!(page.records[0].status, ListedStatus::Succeeded);
    assert_eq!(page.records[0].customer.as_deref(), Some("cus_1"));
    assert_eq!(page.records[1].status, ListedStatus::Declined);
    assert_eq!(page.records[1].currency.as_deref(), Some("EUR"));
    assert_eq!((page.seen, page.not_ours), (2, 0));
}

#[test]
fn records_that_are_not_onecharges_are_counted_not_kept_and_still_lead_to_the_next_page() {
    let body = ok(json!({"data": [
        {"id": "ch_1", "status": "succeeded", "reference": "order-7"},
        {"id": "ch_2", "status": "succeeded", "reference": ""},
        {"id": "ch_3", "status": "succeeded"},
    ], "has_more": true}));
    let ListOutcome::Page(page) = read_onecharge_page(answered(200, &body), None) else {
        panic!()
    };
    assert!(page.records.is_empty());
    assert_eq!((page.seen, page.not_ours), (3, 3));
    assert_eq!(page.next.as_deref(), Some("ch_3"));

    let mut foreign = intent("requires_confirmation", json!(null));
    foreign["metadata"] = json!({});
    let mut shaped_otherwise = intent("succeeded", json!(null));
    shaped_otherwise["id"] = json!("pi_other");
    shaped_otherwise["metadata"] = json!({"payment_attempt_id": "6f1c"});
    let body = ok(json!({"object": "list", "has_more": true, "data": [foreign, shaped_otherwise]}));
    let ListOutcome::Page(page) = read_stripe_page(answered(200, &body), None) else {
        panic!()
    };
    assert!(page.records.is_empty());
    assert_eq!((page.seen, page.not_ours), (2, 2));
    assert_eq!(page.next.as_deref(), Some("pi_other"));
}

#[test]
fn a_record_naming_another_deployment_is_a_siblings_counted_not_kept_in_both_dialects() {
    let eu = Deployment::parse("eu").unwrap();
    let onecharge = ok(json!({"data": [
        {"id": "ch_eu", "status": "succeeded", "reference": ATTEMPT,
         "metadata": {"onecharge_deployment": "eu"}},
        {"id": "ch_us", "status": "succeeded", "reference": ATTEMPT,
         "metadata": {"onecharge_deployment": "us"}},
        {"id": "ch_before", "status": "succeeded", "reference": ATTEMPT},
    ], "has_more": false}));
    let mut ours = intent("succeeded", json!(null));
    ours["id"] = json!("pi_eu");
    ours["metadata"]["onecharge_deployment"] = json!("eu");
    let mut sibling = intent("succeeded", json!(null));
    sibling["id"] = json!("pi_us");
    sibling["metadata"]["onecharge_deployment"] = json!("us");
    let mut before = intent("succeeded", json!(null));
    before["id"] = json!("pi_before");
    let stripe = ok(json!({"object": "list", "has_more": false,
                           "data": [ours, sibling.clone(), before]}));
    for page in [
        read_onecharge_page(answered(200, &onecharge), Some(&eu)),
        read_stripe_page(answered(200, &stripe), Some(&eu)),
    ] {
        let ListOutcome::Page(page) = page else {
            panic!()
        };
        let kept: Vec<&str> = page.records.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(kept.iter().all(|id| !id.ends_with("_us")), "{kept:?}");
        assert_eq!((page.seen, page.not_ours), (3, 1));
    }
    // A deployment without a name keeps only what names none.
    let ListOutcome::Page(page) = read_onecharge_page(answered(200, &onecharge), None) else {
        panic!()
    };
    assert_eq!(page.records.len(), 1);
    // A webhook's read by id of a sibling's PaymentIntent holds nothing of ours.
    let ListOutcome::Page(page) = read_stripe_intent(answered(200, &ok(sibling)), Some(&eu)) else {
        panic!()
    };
    assert_eq!((page.records.len(), page.not_ours), (0, 1));
}

#[test]
fn a_page_that_says_more_but_holds_nothing_to_continue_after_is_a_failure() {
    let body = ok(json!({"data": [], "has_more": true}));
    assert!(matches!(
        read_onecharge_page(answered(200, &body), None),
        ListOutcome::Failed { .. }
    ));
    assert!(matches!(
        read_stripe_page(answered(200, &body), None),
        ListOutcome::Failed { .. }
    ));
    let body = ok(json!({"data": [], "has_more": false}));
    let ListOutcome::Page(page) = read_stripe_page(answered(200, &body), None) else {
        panic!()
    };
    assert_eq!((page.seen, page.next), (0, None));
}

#[test]
fn the_last_page_has_no_cursor() {
    let body = ok(json!({"data": [{"id": "ch_1", "status": "succeeded"}], "has_more": false}));
    let ListOutcome::Page(page) = read_onecharge_page(answered(200, &body), None) else {
        panic!()
    };
    assert_eq!(page.next, None);
}

#[test]
fn refusals_and_faults_are_not_pages() {
    assert_eq!(
        read_onecharge_page(answered(401, b""), None),
        ListOutcome::CredentialsFault { status: 401 }
    );
    assert_eq!(
        read_stripe_page(answered(404, b""), None),
        ListOutcome::EndpointFault { status: 404 }
    );
    assert!(matches!(
        read_onecharge_page(answered(500, b"oops"), None),
        ListOutcome::Failed { .. }
    ));
    assert!(matches!(
        read_stripe_page(answered(200, b"{not json"), None),
        ListOutcome::Failed { .. }
    ));
    assert!(matches!(
        read_stripe_page(GatewayReply::Lost { error: "reset" }, None),
        ListOutcome::Failed { .. }
    ));
}

fn intent(status: &str, latest_charge: serde_json::Value) -> serde_json::Value {
    json!({"id": format!("pi_{status}"), "object": "payment_intent", "status": status,
           "amount": 1999, "currency": "eur", "customer": "cus_42",
           "metadata": {"payment_attempt_id": ATTEMPT}, "latest_charge": latest_charge,
           "last_payment_error": null})
}

#[test]
fn a_stripe_page_reads_refunds_disputes_and_leaves_out_what_never_charged() {
    let charge = |refunded: bool, disputed: bool, amount_refunded: i64| {
        json!({"id": "ch_1", "object": "charge", "refunded": refunded,
               "disputed": disputed, "amount_refunded": amount_refunded})
    };
    let mut declined = intent("requires_payment_method", json!(null));
    declined["last_payment_error"] = json!({"type": "card_error", "code": "card_declined"});
    let mut refunded = intent("succeeded", charge(false, false, 500));
    refunded["id"] = json!("pi_refunded");
    let mut disputed = intent("succeeded", charge(false, true, 0));
    disputed["id"] = json!("pi_disputed");
    let body = ok(json!({"object": "list", "has_more": true, "data": [
        intent("succeeded", charge(false, false, 0)),
        refunded,
        disputed,
        intent("succeeded", json!("ch_unexpanded")),
        intent("canceled", json!(null)),
        declined,
        intent("requires_confirmation", json!(null)),
        intent("requires_payment_method", json!(null)),
        intent("processing", json!(null)),
    ]}));
    let ListOutcome::Page(page) = read_stripe_page(answered(200, &body), None) else {
        panic!()
    };
    let statuses: Vec<_> = page.records.iter().map(|r| r.status.clone()).collect();
    assert_eq!(
        statuses,
        vec![
            ListedStatus::Succeeded,
            ListedStatus::Refunded,
            ListedStatus::Disputed(DisputeStatus::Open),
            ListedStatus::Succeeded,
            ListedStatus::Canceled,
            ListedStatus::Declined,
            ListedStatus::Other("processing".into()),
        ]
    );
    assert_eq!(page.next.as_deref(), Some("pi_processing"));
    assert_eq!(
        page.unread_disputes,
        ["pi_disputed"],
        "its status is read next"
    );
    let first = &page.records[0];
    assert_eq!(first.amount_minor, Some(1999));
    assert_eq!(first.currency.as_deref(), Some("EUR"));
    assert_eq!(first.reference.as_deref(), Some(ATTEMPT));
    assert_eq!(first.customer.as_deref(), Some("cus_42"));
    assert_eq!(first.idempotency_key, None);
}

#[test]
fn stripe_amounts_and_refunded_amounts_are_read_in_iso_minor_units_whatever_the_currency() {
    // (currency, Stripe's amount, Stripe's amount_refunded, ISO amount, ISO refunded)
    for (currency, amount, refunded, minor, refunded_minor) in [
        // ISK: ISO has no decimals, Stripe counts hundredths (the last two digits 00).
        ("isk", 50_000, 20_000, 500, 200),
        // UGX: the same special case at Stripe.
        ("ugx", 1_000_000, 250_000, 10_000, 2_500),
        // MGA: ISO counts hundredths, Stripe whole ariary.
        ("mga", 1_500, 500, 150_000, 50_000),
        ("jpy", 500, 200, 500, 200),
        ("kwd", 1_230, 1_000, 1_230, 1_000),
        ("eur", 1_999, 500, 1_999, 500),
    ] {
        let charge = json!({"id": "ch_1", "object": "charge", "refunded": false,
                            "disputed": false, "amount_refunded": refunded});
        let mut pi = intent("succeeded", charge);
        pi["amount"] = json!(amount);
        pi["currency"] = json!(currency);
        let body = ok(json!({"object": "list", "has_more": false, "data": [pi.clone()]}));
        let ListOutcome::Page(page) = read_stripe_page(answered(200, &body), None) else {
            panic!()
        };
        let record = &page.records[0];
        assert_eq!(record.amount_minor, Some(minor), "{currency}");
        assert_eq!(record.amount_refunded, Some(refunded_minor), "{currency}");
        assert_eq!(record.evidence(), format!("refunded:{refunded_minor}"));
        // A webhook's check reads the PaymentIntent by id the same way.
        let ListOutcome::Page(page) = read_stripe_intent(answered(200, &ok(pi)), None) else {
            panic!()
        };
        assert_eq!(
            page.records[0].amount_refunded,
            Some(refunded_minor),
            "{currency}"
        );
    }
}

#[test]
fn a_listed_status_round_trips_through_its_stored_spelling() {
    for status in [
        ListedStatus::Succeeded,
        ListedStatus::Declined,
        ListedStatus::Canceled,
        ListedStatus::Refunded,
        ListedStatus::Disputed(DisputeStatus::Inquiry),
        ListedStatus::Disputed(DisputeStatus::Open),
        ListedStatus::Disputed(DisputeStatus::Won),
        ListedStatus::Disputed(DisputeStatus::Lost),
        ListedStatus::Other("processing".into()),
    ] {
        assert_eq!(ListedStatus::parse(status.as_str()), status);
    }
    assert_eq!(
        ListedStatus::parse("disputed"),
        ListedStatus::Disputed(DisputeStatus::Open),
        "stored before disputes had a status"
    );
}

#[test]
fn a_stripe_dispute_status_reads_as_open_won_or_lost() {
    for (status, expected) in [
        // An inquiry: the bank asks, no money has moved; a chargeback is another thing.
        ("warning_needs_response", DisputeStatus::Inquiry),
        ("warning_under_review", DisputeStatus::Inquiry),
        ("needs_response", DisputeStatus::Open),
        ("under_review", DisputeStatus::Open),
        ("won", DisputeStatus::Won),
        ("warning_closed", DisputeStatus::Won),
        ("lost", DisputeStatus::Lost),
        ("a_status_stripe_adds_later", DisputeStatus::Open),
    ] {
        assert_eq!(DisputeStatus::from_stripe(status), expected, "{status}");
    }
}

#[test]
fn the_newest_dispute_decides_and_a_failed_or_empty_read_is_never_a_status() {
    let body = ok(json!({"object": "list", "has_more": false, "data": [
        {"id": "dp_2", "object": "dispute", "status": "lost", "created": 200},
        {"id": "dp_1", "object": "dispute", "status": "warning_closed", "created": 100},
    ]}));
    assert_eq!(
        read_stripe_disputes(answered(200, &body)),
        Ok(DisputeStatus::Lost)
    );
    let none = ok(json!({"object": "list", "has_more": false, "data": []}));
    assert!(matches!(
        read_stripe_disputes(answered(200, &none)),
        Err(ListOutcome::Failed { .. })
    ));
    assert!(matches!(
        read_stripe_disputes(answered(500, b"oops")),
        Err(ListOutcome::Failed { .. })
    ));
    assert!(matches!(
        read_stripe_disputes(GatewayReply::Lost { error: "reset" }),
        Err(ListOutcome::Failed { .. })
    ));
    assert_eq!(
        read_stripe_disputes(answered(401, b"")),
        Err(ListOutcome::CredentialsFault { status: 401 })
    );
}

#[test]
fn a_onecharge_disputed_record_says_where_its_dispute_stands() {
    let body = ok(json!({"data": [
        {"id": "ch_1", "status": "disputed", "dispute_status": "won", "reference": ATTEMPT},
        {"id": "ch_2", "status": "disputed", "dispute_status": "lost", "reference": ATTEMPT},
        {"id": "ch_3", "status": "disputed", "dispute_status": "open", "reference": ATTEMPT},
        {"id": "ch_4", "status": "disputed", "reference": ATTEMPT},
    ], "has_more": false}));
    let ListOutcome::Page(page) = read_onecharge_page(answered(200, &body), None) else {
        panic!()
    };
    let statuses: Vec<_> = page.records.iter().map(|r| r.status.clone()).collect();
    assert_eq!(
        statuses,
        [
            ListedStatus::Disputed(DisputeStatus::Won),
            ListedStatus::Disputed(DisputeStatus::Lost),
            ListedStatus::Disputed(DisputeStatus::Open),
            ListedStatus::Disputed(DisputeStatus::Open),
        ]
    );
    assert!(page.unread_disputes.is_empty());
    assert_eq!(page.records[0].evidence(), "dispute:won");
}
