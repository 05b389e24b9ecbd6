//! The `stripe` connector end to end: real PostgreSQL, the executor and reconciler, and the
//! in-process mock gateway speaking Stripe (`Dialect::Stripe`). One test per row of the
//! table in docs/stripe.md that needs the wire; the pure rows are unit tests in
//! `src/gateway/stripe.rs`. Every test checks the mock's ledger: at most one charge.

use std::time::Duration;

use crate::support::record_batch;
use crate::support::{
    charge_request_with_amount, command, first_outcome, intake_record, run_leaving_one_in, Harness,
    Records,
};
use mock_gateway::stripe::payment_methods as spm;
use mock_gateway::{payment_methods as pm, Dialect, FaultConfig, FaultRule, MockConfig};
use onecharge::domain::outcome::GatewayOutcome;
use onecharge::domain::Actor;
use onecharge::domain::{AttemptStatus, LeaseToken};
use onecharge::gateway::stripe::{confirm_key, create_key};
use onecharge::gateway::{GatewayClient, GatewayKind, Prepared};
use onecharge::reconciler::Resolution;
use onecharge::store::attempts::gateway_objects::{
    gateway_object_id, record_gateway_object, record_gateway_objects, ConfirmSend, ObjectWrite,
};
use serde_json::json;
use uuid::Uuid;

/// A harness whose mock speaks Stripe and whose settings choose the stripe connector.
async fn stripe_harness() -> Harness {
    stripe_harness_with(|_| {}).await
}

/// [`stripe_harness`] with its settings adjusted.
async fn stripe_harness_with(adjust: impl FnOnce(&mut onecharge::config::Settings)) -> Harness {
    Harness::stripe(adjust).await
}

/// A claimed attempt whose PaymentIntent was created and stored, and whose executor then
/// paused (a VM suspended, a long GC) before confirming: the attempt is past its retry
/// limits (one try), so a reconciler that finds nothing charged would tell a person so.
/// The claim and the PaymentIntent's id.
async fn paused_between_storing_and_confirming(
    h: &Harness,
    client: &GatewayClient,
) -> (onecharge::domain::ChargeClaim, String) {
    h.seed(spm::CARD_VISA).await;
    let executor = h.executor_with(client.clone());
    let claimed = executor.claim(1).await.unwrap().remove(0);
    let (pi, _) = prepare_and_store(h, client, &claimed).await;
    (claimed, pi)
}

/// The paused executor's confirm, sent late.
async fn late_confirm(
    client: &GatewayClient,
    claimed: &onecharge::domain::ChargeClaim,
    pi: &str,
) -> GatewayOutcome {
    client
        .charge(
            &onecharge::executor::charge_request(claimed)
                .with_gateway_object(Some(onecharge::domain::GatewayObjectId::from_gateway(pi))),
        )
        .await
        .outcome
}

/// The connector `gateway_kind = stripe` builds from the settings.
fn stripe_client(h: &Harness) -> GatewayClient {
    let client = GatewayClient::from_settings(&h.settings).expect("a stripe client");
    assert_eq!(client.kind(), GatewayKind::Stripe);
    client
}

/// How many requests went to `/v1/payment_intents` itself: PaymentIntents created.
fn intents_created(h: &Harness) -> usize {
    h.gateway
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/payment_intents")
        .count()
}

/// One pass of a reconciler speaking Stripe, which must move exactly one attempt to `status`.
async fn reconcile_one_to(h: &Harness, status: AttemptStatus) {
    let pass = h
        .reconciler_with(stripe_client(h))
        .run_once()
        .await
        .unwrap();
    assert_eq!(pass.count(status), 1, "{pass:?}");
}

/// The attempt's calls as (operation, http status, outcome, charge id), in order.
async fn calls(
    h: &Harness,
    id: onecharge::domain::PaymentAttemptId,
) -> Vec<(String, Option<i32>, String, Option<String>)> {
    h.all_gateway_calls()
        .await
        .into_iter()
        .filter(|c| onecharge::domain::PaymentAttemptId::from(c.payment_attempt_id) == id)
        .map(|c| (c.operation, c.http_status, c.outcome, c.gateway_charge_id))
        .collect()
}

fn call(
    op: &str,
    status: Option<i32>,
    outcome: &str,
    id: Option<&str>,
) -> (String, Option<i32>, String, Option<String>) {
    (op.into(), status, outcome.into(), id.map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_succeeded_payment_intent_is_created_unconfirmed_stored_then_confirmed_off_session() {
    let h = stripe_harness().await;
    let command = h.seed(spm::CARD_VISA).await;
    let id = command.payment_attempt_id;

    let report = h.executor_with(stripe_client(&h)).run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Succeeded), 1);

    let ledger = h.gateway.ledger();
    assert_eq!(ledger.len(), 1, "exactly one charge");
    let pi = ledger[0].id.clone();
    assert!(pi.starts_with("pi_"), "{pi}");
    assert_eq!(ledger[0].reference, id.to_string());
    assert_eq!(ledger[0].amount_minor, 1999);
    assert_eq!(ledger[0].currency, "EUR");
    assert_eq!(
        ledger[0].idempotency_key,
        confirm_key(&command.idempotency_key())
    );
    h.assert_charged_once(id).await;
    assert_eq!(
        gateway_object_id(&h.store, id).await.unwrap(),
        Some(pi.clone())
    );
    assert_eq!(
        calls(&h, id).await,
        vec![
            call("prepare", Some(200), "prepared", Some(&pi)),
            call("charge", Some(200), "succeeded", Some(&pi)),
        ]
    );
    // The history reads as contract §4 says: the claim (carried by the outcome's row since
    // decision 220) is the dispatch it was, though the confirm stamped its own send time.
    let moves: Vec<(String, Option<String>)> = h
        .history(id)
        .await
        .into_iter()
        .map(|t| (t.cause, t.detail))
        .collect();
    assert_eq!(
        moves[1],
        ("dispatched".into(), Some("try 1, lease token 1".into()))
    );
    assert_eq!(
        moves.iter().map(|m| m.0.as_str()).collect::<Vec<_>>(),
        ["command_accepted", "dispatched", "gateway_succeeded"]
    );

    // What went on the wire: the contract's mapping, two derived keys.
    let requests = h.gateway.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let (create, confirm) = (&requests[0], &requests[1]);
    assert_eq!(create.path, "/v1/payment_intents");
    assert_eq!(
        create.idempotency_key.as_deref(),
        Some(create_key(&command.idempotency_key()).as_str())
    );
    assert_eq!(create.body["amount"], "1999");
    assert_eq!(create.body["currency"], "eur");
    assert_eq!(create.body["customer"], "cus_42");
    assert_eq!(create.body["payment_method"], spm::CARD_VISA);
    assert_eq!(create.body["confirm"], "false");
    assert_eq!(create.body["metadata[payment_attempt_id]"], id.to_string());
    assert_eq!(create.body["metadata[order_id]"], command.order_id);
    assert_eq!(confirm.path, format!("/v1/payment_intents/{pi}/confirm"));
    assert_eq!(
        confirm.idempotency_key.as_deref(),
        Some(confirm_key(&command.idempotency_key()).as_str())
    );
    assert_eq!(confirm.body["off_session"], "true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_decline_is_declined_with_stripes_decline_code_and_charges_nothing() {
    let h = stripe_harness().await;
    let declined = h
        .seed_many(&[
            spm::CARD_CHARGE_DECLINED_INSUFFICIENT_FUNDS,
            spm::CARD_AUTHENTICATION_REQUIRED,
        ])
        .await;

    let report = h.executor_with(stripe_client(&h)).run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Declined), 2);
    assert!(h.gateway.ledger().is_empty(), "nothing charged");
    for (command, code) in declined
        .iter()
        .zip(["insufficient_funds", "authentication_required"])
    {
        let row = h.attempt(command.payment_attempt_id).await;
        assert_eq!(row.status, "declined");
        assert_eq!(row.decline_code.as_deref(), Some(code));
        assert!(row.gateway_charge_id.unwrap().starts_with("pi_"));
        let events = h.events(command.payment_attempt_id).await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].1["decline_code"], code);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processing_goes_to_unknown_and_the_reconciler_reads_it_by_id_until_it_succeeds() {
    let h = stripe_harness().await;
    let id = h.seed(spm::FAULT_PROCESSING).await.payment_attempt_id;

    let executor = h.executor_with(stripe_client(&h));
    let report = executor.run_once().await.unwrap();
    assert_eq!(first_outcome(&report), Some("processing"), "{report:?}");
    assert_eq!(report.count(AttemptStatus::Unknown), 1);
    assert_eq!(h.attempt(id).await.status, "unknown");
    assert_eq!(
        executor.health().snapshot().consecutive_failures,
        0,
        "processing is not a gateway failure"
    );

    // Still processing: not adopted, looked at again later.
    let reconciler = h.reconciler_with(stripe_client(&h));
    let pass = reconciler.run_once().await.unwrap();
    assert_eq!(pass.rescheduled(), 1, "{pass:?}");
    assert!(h.gateway.ledger().is_empty());

    h.finish_slow_charge().await;
    h.advance(Duration::from_secs(3600)).await;
    let pass = reconciler.run_once().await.unwrap();
    assert_eq!(pass.count(AttemptStatus::Succeeded), 1, "{pass:?}");
    h.assert_charged_once(id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_after_charging_is_ambiguous_and_retrieval_by_id_finds_the_charge() {
    let h = stripe_harness().await;
    let id = h.seed(pm::FAULT_ERROR_AFTER).await.payment_attempt_id;

    let report = h.executor_with(stripe_client(&h)).run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Unknown), 1);
    assert_eq!(h.gateway.ledger().len(), 1, "Stripe charged before its 500");

    reconcile_one_to(&h, AttemptStatus::Succeeded).await;
    h.assert_charged_once(id).await;
    let recorded = calls(&h, id).await;
    assert_eq!(recorded[1].0, "charge");
    assert_eq!(recorded[1].1, Some(500));
    assert_eq!(recorded[2].0, "lookup");
    assert_eq!(recorded[2].2, "found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_after_the_confirm_is_settled_by_id_with_one_charge() {
    let h = stripe_harness().await;
    let id = h.seed(pm::FAULT_DROP_AFTER).await.payment_attempt_id;

    let report = h.executor_with(stripe_client(&h)).run_once().await.unwrap();
    assert_eq!(first_outcome(&report), Some("ambiguous"), "{report:?}");
    reconcile_one_to(&h, AttemptStatus::Succeeded).await;
    h.assert_charged_once(id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_5xx_to_the_confirm_is_reconfirmed_under_the_next_confirm_key_and_charges_once() {
    let h = stripe_harness().await;
    let command = h.seed(pm::FAULT_ERROR_BEFORE).await;
    let id = command.payment_attempt_id;
    let executor = h.executor_with(stripe_client(&h));

    run_leaving_one_in(&executor, AttemptStatus::Unknown).await;
    assert!(h.gateway.ledger().is_empty());
    // Retrieved by id: still requires_confirmation, so nothing charged. Stripe saved the
    // 500 under the first confirm key and replays it: the next confirm uses the next key.
    reconcile_one_to(&h, AttemptStatus::Pending).await;
    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;
    h.assert_charged_once(id).await;
    let confirms: Vec<_> = h
        .gateway
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/confirm"))
        .map(|r| r.idempotency_key.unwrap_or_default())
        .collect();
    let first = confirm_key(&command.idempotency_key());
    assert_eq!(confirms, vec![first.clone(), format!("{first}-2")]);
    let creates = intents_created(&h);
    assert_eq!(
        creates, 1,
        "the stored PaymentIntent is reused, never created again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_answered_a_saved_5xx_is_made_again_under_the_next_create_key_and_charges_once() {
    let h = Harness::with(
        MockConfig {
            dialect: Dialect::Stripe,
            faults: FaultConfig {
                // The first request that executes is the create: it makes a PaymentIntent,
                // then answers 500, which Stripe saves under the create key.
                error_after: FaultRule::times(1),
                ..FaultConfig::default()
            },
            ..MockConfig::default()
        },
        |s| s.gateway_kind = GatewayKind::Stripe,
    )
    .await;
    let command = h.seed(spm::CARD_VISA).await;
    let id = command.payment_attempt_id;
    let executor = h.executor_with(stripe_client(&h));

    let report = run_leaving_one_in(&executor, AttemptStatus::Pending).await;
    assert_eq!(first_outcome(&report), Some("not_sent"), "{report:?}");
    for _ in 0..3 {
        h.advance(Duration::from_secs(60)).await;
        if executor
            .run_once()
            .await
            .unwrap()
            .count(AttemptStatus::Succeeded)
            == 1
        {
            break;
        }
    }
    h.assert_charged_once(id).await;
    let creates: Vec<_> = h
        .gateway
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/payment_intents")
        .map(|r| r.idempotency_key.unwrap_or_default())
        .collect();
    let first = create_key(&command.idempotency_key());
    assert_eq!(creates, vec![first.clone(), format!("{first}-2")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_intent_processing_for_two_days_ends_succeeded_without_a_person() {
    let (h, id) = debit_processing_for(Duration::from_secs(3600)).await;

    // Two days of the mock clock, a look every 6 hours at most: still processing each time.
    let reconciler = h.reconciler_with(stripe_client(&h));
    for _ in 0..8 {
        h.advance(Duration::from_secs(6 * 3600)).await;
        let pass = reconciler.run_once().await.unwrap();
        assert_eq!(pass.rescheduled(), 1, "{pass:?}");
        let row = h.attempt(id).await;
        assert_eq!(row.status, "unknown");
        assert!(
            row.last_error
                .as_deref()
                .is_some_and(|e| e.contains("processing at the gateway")),
            "{:?}",
            row.last_error
        );
    }

    h.finish_slow_charge().await;
    h.advance(Duration::from_secs(6 * 3600)).await;
    let pass = reconciler.run_once().await.unwrap();
    assert_eq!(pass.count(AttemptStatus::Succeeded), 1, "{pass:?}");
    h.assert_charged_once(id).await;
    assert_eq!(reviews(&h, id).await, 0, "no person was asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_retried_later_with_the_same_keys() {
    let h = stripe_harness().await;
    let id = h.seed(pm::FAULT_RATE_LIMIT).await.payment_attempt_id;
    let executor = h.executor_with(stripe_client(&h));

    let report = run_leaving_one_in(&executor, AttemptStatus::Pending).await;
    assert_eq!(first_outcome(&report), Some("rate_limited"));
    assert!(h.gateway.ledger().is_empty());
    h.advance(Duration::from_secs(60)).await;
    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;
    h.assert_charged_once(id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_credentials_pause_before_anything_is_created_and_cost_no_try() {
    let h = stripe_harness().await;
    let id = h.seed(spm::CARD_VISA).await.payment_attempt_id;
    let wrong = h.client_of_kind_with_key(GatewayKind::Stripe, "sk_test_wrong");
    let executor = h.executor_with(wrong);

    let report = executor.run_once().await.unwrap();
    assert_eq!(
        report.attempts[0].outcome,
        Some(GatewayOutcome::CredentialsFault { status: 401 })
    );
    let row = h.attempt(id).await;
    assert_eq!(row.status, "pending");
    assert_eq!(row.tries, 0, "the try is refunded");
    assert_eq!(gateway_object_id(&h.store, id).await.unwrap(), None);
    assert_eq!(
        calls(&h, id).await,
        vec![call("prepare", Some(401), "credentials_fault", None)]
    );
    assert_eq!(executor.health().snapshot().credentials_rejected, Some(401));
    assert!(h.gateway.ledger().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_that_died_before_storing_a_payment_intent_charged_nothing_and_is_resent() {
    let h = stripe_harness().await;
    let id = h.seed(spm::CARD_VISA).await.payment_attempt_id;
    let executor = h.executor_with(stripe_client(&h));
    // Claimed, then the process died: no PaymentIntent id stored.
    assert_eq!(executor.claim(1).await.unwrap().len(), 1);
    h.advance(Duration::from_secs(60)).await;

    let pass = h
        .reconciler_with(stripe_client(&h))
        .run_once()
        .await
        .unwrap();
    assert_eq!(pass.leases_expired, vec![id]);
    assert!(
        matches!(
            pass.resolutions[..],
            [(_, Resolution::Moved(AttemptStatus::Pending))]
        ),
        "{pass:?}"
    );
    assert!(
        h.gateway.requests().is_empty(),
        "no PaymentIntent stored: proven without asking Stripe"
    );
    let lookup = &calls(&h, id).await[0];
    assert_eq!(lookup.0, "lookup");
    assert_eq!(lookup.1, None, "no HTTP call was made");

    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;
    h.assert_charged_once(id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_that_died_between_storing_and_confirming_is_settled_by_retrieving_the_intent()
{
    let h = stripe_harness().await;
    let command = h.seed(spm::CARD_VISA).await;
    let id = command.payment_attempt_id;
    let client = stripe_client(&h);
    let executor = h.executor_with(client.clone());
    let claimed = executor.claim(1).await.unwrap().remove(0);
    // The first step ran and its id was stored; then the process died before the confirm.
    let (pi, evidence) = prepare_and_store(&h, &client, &claimed).await;
    // A stale worker cannot replace it.
    let other = onecharge::domain::GatewayObjectId::from_gateway("pi_other");
    let stale = record_gateway_object(
        &h.store,
        id,
        (claimed.attempt.lease_token.get() - 1).into(),
        &other,
        &evidence,
        Duration::from_secs(1),
    );
    assert_eq!(stale.await.unwrap(), ConfirmSend::Fenced);
    h.advance(Duration::from_secs(60)).await;

    // requires_confirmation: never charged, confirm it (again) under the same key.
    let pass = h.reconciler_with(client.clone()).run_once().await.unwrap();
    assert_eq!(pass.count(AttemptStatus::Pending), 1, "{pass:?}");
    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;
    h.assert_charged_once(id).await;
    assert_eq!(h.gateway.ledger()[0].id, pi);
    let creates = intents_created(&h);
    assert_eq!(creates, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_create_key_with_other_parameters_needs_review() {
    let h = stripe_harness().await;
    let command = h.seed(spm::CARD_VISA).await;
    let id = command.payment_attempt_id;
    // Someone created a PaymentIntent under this attempt's key with another amount.
    let other = stripe_client(&h)
        .prepare(&charge_request_with_amount(&command, 5000).for_order(command.order_id.clone()))
        .await
        .unwrap();
    assert!(matches!(other.outcome, Prepared::Object { .. }));

    let report = h.executor_with(stripe_client(&h)).run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::NeedsReview), 1);
    let row = h.attempt(id).await;
    assert!(row.review_reason.unwrap().contains("idempotency_error"));
    assert!(h.gateway.ledger().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amounts_are_sent_in_stripes_unit_and_an_amount_stripe_cannot_take_is_never_sent() {
    let h = stripe_harness().await;
    // (payment method, currency, amount): the KWD amount's last digit is not 0, and the
    // last ISK one is charged, then answered with a 500, so the reconciler must compare
    // Stripe's 400000 with 4000 ISK.
    let records = [
        (spm::CARD_VISA, "ISK", 4000),
        (spm::CARD_VISA, "JPY", 500),
        (spm::CARD_VISA, "KWD", 1235),
        (pm::FAULT_ERROR_AFTER, "ISK", 4000),
    ]
    .map(|(method, currency, amount)| {
        let body = command(
            Uuid::new_v4(),
            json!({"payment_method": method, "currency": currency, "amount_minor": amount}),
        );
        intake_record(&body, &format!("msg-{}", Uuid::new_v4()), None)
    });
    let [isk, jpy, kwd, isk_lost] = records.clone().map(|r| r.command);
    record_batch(&h.store, "test-intake", &records)
        .await
        .unwrap();

    let report = h.executor_with(stripe_client(&h)).run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Succeeded), 2);
    assert_eq!(report.count(AttemptStatus::NeedsReview), 1);
    assert_eq!(report.count(AttemptStatus::Unknown), 1);
    let creates: Vec<_> = h
        .gateway
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/payment_intents")
        .map(|r| (r.body["currency"].clone(), r.body["amount"].clone()))
        .collect();
    assert_eq!(
        creates.len(),
        3,
        "the KWD amount never left onecharge: {creates:?}"
    );
    assert!(creates.contains(&("isk".into(), "400000".into())));
    assert!(creates.contains(&("jpy".into(), "500".into())));
    let reason = h.review_reason(kwd.payment_attempt_id).await;
    assert!(reason.contains("last digit is 0"), "{reason}");
    reconcile_one_to(&h, AttemptStatus::Succeeded).await;
    for c in [&isk, &jpy, &isk_lost] {
        assert_eq!(h.attempt(c.payment_attempt_id).await.status, "succeeded");
    }
    assert_eq!(h.gateway.ledger().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirm_still_running_answers_409_to_a_resend_and_the_intent_is_read_until_it_charges() {
    let h = Harness::stripe_processing(|s| {
        s.gateway_request_timeout = Duration::from_millis(300);
    })
    .await;
    let id = h.seed(pm::FAULT_SLOW_CHARGE).await.payment_attempt_id;
    let client = stripe_client(&h);
    let report = h.executor_with(client.clone()).run_once().await.unwrap();
    assert_eq!(
        report.count(AttemptStatus::Unknown),
        1,
        "the confirm timed out"
    );

    // A re-send under the same confirm key while Stripe still runs the first: 409.
    let pi = gateway_object_id(&h.store, id)
        .await
        .unwrap()
        .expect("stored");
    let request = onecharge::gateway::ChargeRequest::new(
        onecharge::domain::IdempotencyKey::for_attempt(id),
        &onecharge::gateway::ChargeBody {
            money: onecharge::domain::Money::of(1999, "EUR").unwrap(),
            customer_id: "cus_42".into(),
            payment_method: pm::FAULT_SLOW_CHARGE.into(),
            reference: id,
            description: None,
        },
    )
    .with_gateway_object(Some(onecharge::domain::GatewayObjectId::from_gateway(
        pi.clone(),
    )));
    let resend = client.charge(&request).await;
    assert_eq!(resend.http_status, Some(409));
    assert!(
        matches!(
            resend.outcome,
            GatewayOutcome::RetryLater {
                after: onecharge::domain::outcome::RetryAfter::InProgress,
                ..
            }
        ),
        "{resend:?}"
    );

    // Retrieved by id: processing, never adopted nor called "not charged".
    let reconciler = h.reconciler_with(client);
    let pass = reconciler.run_once().await.unwrap();
    assert_eq!(pass.rescheduled(), 1, "{pass:?}");
    h.finish_slow_charge().await;
    h.advance(Duration::from_secs(3600)).await;
    let pass = reconciler.run_once().await.unwrap();
    assert_eq!(pass.count(AttemptStatus::Succeeded), 1, "{pass:?}");
    h.assert_charged_once(id).await;
    assert_eq!(h.gateway.ledger()[0].id, pi);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_intent_canceled_before_its_confirm_is_declined_as_canceled() {
    // The create ran and its id was stored; then someone canceled it at Stripe.
    let BetweenCalls {
        h,
        id,
        client,
        claimed,
        pi,
        ..
    } = a_card_attempt_between_calls().await;
    let canceled = reqwest::Client::new()
        .post(format!(
            "{}/v1/payment_intents/{pi}/cancel",
            h.gateway.base_url()
        ))
        .bearer_auth(crate::support::API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(canceled.status().as_u16(), 200);
    // A confirm now meets payment_intent_unexpected_state carrying the canceled intent.
    let confirm = client
        .charge(
            &onecharge::executor::charge_request(&claimed).with_gateway_object(Some(
                onecharge::domain::GatewayObjectId::from_gateway(pi.clone()),
            )),
        )
        .await;
    assert_eq!(confirm.http_status, Some(400));
    assert_eq!(
        confirm.outcome,
        GatewayOutcome::Declined {
            charge_id: onecharge::domain::GatewayChargeId::from_gateway(pi.clone()),
            decline_code: Some("canceled".into()),
            replayed: false
        }
    );
    h.advance(Duration::from_secs(60)).await;

    // The reconciler reads it as final: a canceled PaymentIntent never charges.
    let pass = h.reconciler_with(client).run_once().await.unwrap();
    assert_eq!(pass.count(AttemptStatus::Declined), 1, "{pass:?}");
    let row = h.attempt(id).await;
    assert_eq!(row.decline_code.as_deref(), Some("canceled"));
    assert_eq!(row.gateway_charge_id.as_deref(), Some(pi.as_str()));
    assert!(h.gateway.ledger().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_stripes_24_hour_key_window_the_intent_is_still_read_by_id_and_nothing_is_resent() {
    let h = stripe_harness().await;
    let id = h.seed(pm::FAULT_DROP_AFTER).await.payment_attempt_id;
    let client = stripe_client(&h);
    let report = h.executor_with(client.clone()).run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Unknown), 1);
    let sent_before = h.gateway.requests().len();

    // A day and more later Stripe has forgotten both keys; the PaymentIntent id has not.
    let day = Duration::from_secs(25 * 3600);
    h.gateway.advance_clock(day);
    h.advance(day).await;
    let pass = h.reconciler_with(client).run_once().await.unwrap();
    assert_eq!(pass.count(AttemptStatus::Succeeded), 1, "{pass:?}");
    h.assert_charged_once(id).await;
    let after: Vec<_> = h.gateway.requests().into_iter().skip(sent_before).collect();
    assert_eq!(after.len(), 1, "one retrieval, no POST: {after:?}");
    assert_eq!(after[0].method, "GET");
}

/// A card attempt claimed by an executor, its PaymentIntent created and stored under the
/// claim's lease, its confirm not yet sent: what an executor holds between its two calls.
struct BetweenCalls {
    h: Harness,
    id: onecharge::domain::PaymentAttemptId,
    client: GatewayClient,
    executor: onecharge::executor::Executor,
    claimed: onecharge::domain::ChargeClaim,
    pi: String,
}

async fn a_card_attempt_between_calls() -> BetweenCalls {
    let h = stripe_harness().await;
    let id = h.seed(spm::CARD_VISA).await.payment_attempt_id;
    let client = stripe_client(&h);
    let executor = h.executor_with(client.clone());
    let claimed = executor.claim(1).await.unwrap().remove(0);
    let (pi, _) = prepare_and_store(&h, &client, &claimed).await;
    BetweenCalls {
        h,
        id,
        client,
        executor,
        claimed,
        pi,
    }
}

/// Runs the connector's first step for `claimed` and stores the PaymentIntent it made under
/// the claim's lease, as the executor does before it confirms: the state a process leaves
/// when it dies between storing and confirming. The id and the create call's evidence.
async fn prepare_and_store(
    h: &Harness,
    client: &GatewayClient,
    claimed: &onecharge::domain::ChargeClaim,
) -> (String, onecharge::domain::GatewayCallRecord) {
    let prepared = client
        .prepare(&onecharge::executor::charge_request(claimed))
        .await
        .expect("stripe prepares");
    let Prepared::Object { id: pi } = prepared.outcome.clone() else {
        panic!("{prepared:?}")
    };
    let evidence = onecharge::domain::GatewayCallRecord {
        payment_attempt_id: claimed.attempt.payment_attempt_id,
        operation: onecharge::domain::CallOperation::Prepare,
        idempotency_key: claimed.attempt.idempotency_key.create_key(1),
        try_number: claimed.attempt.tries,
        lease_token: Some(claimed.attempt.lease_token),
        started_at: h.db_now().await,
        finished_at: h.db_now().await,
        http_status: prepared.http_status,
        outcome: "prepared".into(),
        gateway_charge_id: Some(onecharge::domain::GatewayChargeId::from_gateway(
            pi.to_string(),
        )),
        error: None,
    };
    let stored = record_gateway_object(
        &h.store,
        claimed.attempt.payment_attempt_id,
        claimed.attempt.lease_token,
        &pi,
        &evidence,
        Duration::from_secs(1),
    );
    assert_eq!(stored.await.unwrap(), ConfirmSend::Go);
    (pi.to_string(), evidence)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_paused_between_storing_and_confirming_meets_a_canceled_intent_and_charges_nothing(
) {
    let h = stripe_harness_with(|s| s.executor.max_tries = 1).await;
    let client = stripe_client(&h);
    let (claimed, pi) = paused_between_storing_and_confirming(&h, &client).await;
    let id = claimed.attempt.payment_attempt_id;
    // Past its lease and past gateway_max_processing_time the reconciler finds nothing
    // charged and the attempt past its retry limits: before telling a person "not charged"
    // it cancels the PaymentIntent.
    h.advance(h.settings.gateway_max_processing_time + Duration::from_secs(60))
        .await;
    let pass = h.reconciler_with(client.clone()).run_once().await.unwrap();
    assert_eq!(pass.count(AttemptStatus::NeedsReview), 1, "{pass:?}");
    let row = h.attempt(id).await;
    let reason = row.review_reason.unwrap_or_default();
    assert!(reason.contains(&format!("{pi} was cancelled")), "{reason}");
    assert!(calls(&h, id)
        .await
        .contains(&call("cancel", Some(200), "canceled", Some(&pi))));
    // `attempts show` and the console's attempt page say so among the facts.
    let window = onecharge::domain::RetryWindow::from_settings(&h.settings);
    let now = h.db_now().await;
    let detail = onecharge::operator::attempts::show(&h.store, id, now, &window)
        .await
        .unwrap()
        .unwrap();
    assert!(
        onecharge::operator::attempts::fact_rows(&detail, now).contains(&(
            "payment intent",
            format!("{pi} cancelled at the gateway: it can never charge")
        )),
        "{}",
        onecharge::cli::attempts::render_show(&detail, now)
    );

    // The paused executor wakes and sends its confirm: the cancel won.
    let late = late_confirm(&client, &claimed, &pi).await;
    assert!(
        matches!(late, GatewayOutcome::Declined { ref decline_code, .. } if decline_code.as_deref().is_some_and(|c| c.starts_with("canceled"))),
        "{late:?}"
    );
    assert!(h.gateway.ledger().is_empty(), "nothing charged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_confirm_that_charged_before_the_cancel_is_adopted_not_called_not_charged() {
    let h = stripe_harness_with(|s| s.executor.max_tries = 1).await;
    let client = stripe_client(&h);
    let (claimed, pi) = paused_between_storing_and_confirming(&h, &client).await;
    // The paused executor's confirm reaches Stripe first and charges; its result is lost.
    let late = late_confirm(&client, &claimed, &pi).await;
    assert!(matches!(late, GatewayOutcome::Succeeded { .. }), "{late:?}");
    h.advance(h.settings.gateway_max_processing_time + Duration::from_secs(60))
        .await;

    // A cancel now meets a PaymentIntent that succeeded: that is adopted.
    let cancel = client
        .cancel_object(&claimed.attempt.idempotency_key, Some(&pi))
        .await
        .expect("stripe cancels");
    assert_eq!(
        cancel.outcome,
        onecharge::gateway::CancelOutcome::Succeeded {
            charge_id: onecharge::domain::GatewayChargeId::from_gateway(pi.clone())
        }
    );
    reconcile_one_to(&h, AttemptStatus::Succeeded).await;
    h.assert_charged_once(claimed.attempt.payment_attempt_id)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requires_action_off_session_is_cancelled_and_declined_authentication_required() {
    let h = stripe_harness().await;
    let id = h.seed(spm::FAULT_REQUIRES_ACTION).await.payment_attempt_id;

    let report = h.executor_with(stripe_client(&h)).run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Declined), 1, "{report:?}");
    let row = h.attempt(id).await;
    assert_eq!(row.decline_code.as_deref(), Some("authentication_required"));
    let pi = row.gateway_charge_id.unwrap();
    assert!(calls(&h, id)
        .await
        .contains(&call("cancel", Some(200), "canceled", Some(&pi))));
    assert_eq!(intent_status(&h, &pi).await, "canceled");
    assert!(h.gateway.ledger().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_names_the_configured_stripe_api_version() {
    let h = stripe_harness_with(|s| s.stripe_api_version = "2024-09-30.acacia".into()).await;
    // A charge (create, confirm), a cancel after requires_action, a lookup by id after an
    // ambiguous confirm, a refund and its lookup, a sweep's list and its dispute read.
    let charged = h.seed(spm::CARD_VISA).await.payment_attempt_id;
    h.seed(spm::FAULT_REQUIRES_ACTION).await;
    h.seed(pm::FAULT_ERROR_AFTER).await;
    let executor = h.executor_with(stripe_client(&h));
    while executor.run_once().await.unwrap().claimed() > 0 {}
    reconcile_one_to(&h, AttemptStatus::Succeeded).await;
    let pi = h.attempt(charged).await.gateway_charge_id.unwrap();
    let request = onecharge::gateway::RefundRequest {
        idempotency_key: onecharge::domain::IdempotencyKey::for_refund(
            onecharge::domain::RefundId::random(),
        ),
        refund_id: onecharge::domain::RefundId::random(),
        payment_attempt_id: charged,
        gateway_charge_id: onecharge::domain::GatewayChargeId::from_gateway(pi.clone()),
        money: onecharge::domain::Money::of(100, "EUR").unwrap(),
        reason: "returned".into(),
        metadata: Default::default(),
    };
    stripe_client(&h).refund(&request).await;
    stripe_client(&h).lookup_refund(&request).await;
    h.mock_control().open_dispute(&pi).await;
    let now = h.db_now().await;
    h.reconciler_with(stripe_client(&h))
        .sweep(onecharge::domain::listing::ListWindow {
            from: now - Duration::from_secs(3600),
            to: now + Duration::from_secs(3600),
        })
        .await
        .unwrap();

    let seen = h.gateway.stripe_versions();
    for path in [
        "/v1/payment_intents",
        "/confirm",
        "/cancel",
        "/v1/refunds",
        "/v1/disputes",
    ] {
        assert!(
            seen.iter().any(|(_, p, _)| p.contains(path)),
            "{path} was asked: {seen:?}"
        );
    }
    let other: Vec<_> = seen
        .iter()
        .filter(|(_, _, version)| version.as_deref() != Some("2024-09-30.acacia"))
        .collect();
    assert!(
        other.is_empty(),
        "every request names the setting: {other:?}"
    );
}

/// A pending attempt that holds a PaymentIntent (its confirm met a 429; a retry is due) is
/// cancelled only once its PaymentIntent is: held from the executor, cancelled at the
/// gateway and seen `canceled`, then declined under the hold. Without a client that can
/// cancel it, refused with nothing changed (issue 39, decision 163).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_pending_attempt_that_holds_a_payment_intent_cancels_the_intent_first() {
    use onecharge::operator::cancel::cancel;
    use onecharge::operator::resolve::ResolveError;
    use onecharge::store::audit::Via;

    let h = stripe_harness().await;
    let id = h.seed(pm::FAULT_RATE_LIMIT).await.payment_attempt_id;
    let client = stripe_client(&h);
    let executor = h.executor_with(client.clone());
    run_leaving_one_in(&executor, AttemptStatus::Pending).await;
    let pi = gateway_object_id(&h.store, id)
        .await
        .unwrap()
        .expect("the PaymentIntent was created before the confirm met the 429");

    let mut section3 = h.settings.clone();
    section3.gateway_kind = GatewayKind::Onecharge;
    let wrong_kind = GatewayClient::from_settings(&section3).expect("a §3 client");
    for unable in [None, Some(&wrong_kind)] {
        let refused = cancel(
            &h.store,
            unable,
            id,
            "fraud suspected",
            &Actor::operator("ana"),
            Via::Cli,
        )
        .await;
        assert!(
            matches!(refused, Err(ResolveError::Refused(ref why)) if why.contains("cancelled at the gateway first")),
            "{refused:?}"
        );
        assert_eq!(h.attempt(id).await.status, "pending");
    }
    // Each refusal gave the attempt back at once: its retry goes on.
    h.advance(Duration::from_secs(2)).await;
    let due = h.attempt(id).await.next_run_at <= h.db_now().await;
    assert!(due, "a refused cancel holds nothing back");

    let cancelled = cancel(
        &h.store,
        Some(&client),
        id,
        "fraud suspected",
        &Actor::operator("ana"),
        Via::Cli,
    )
    .await
    .unwrap();
    assert_eq!(cancelled.status, AttemptStatus::Declined);
    assert_eq!(
        cancelled.gateway_object_cancelled.as_deref(),
        Some(pi.as_str())
    );
    assert!(calls(&h, id)
        .await
        .contains(&call("cancel", Some(200), "canceled", Some(&pi))));
    let row = h.attempt(id).await;
    assert_eq!(row.status, "declined");
    assert_eq!(row.decline_code.as_deref(), Some("operator_cancelled"));
    assert_eq!(
        h.transitions(id).await.last().unwrap(),
        &(
            Some("pending".to_owned()),
            "declined".to_owned(),
            "operator_cancelled".to_owned()
        )
    );
    let (status, payload, _) = h.only_event(id).await;
    assert_eq!(status, "declined");
    let reason = payload["reason"].as_str().unwrap();
    assert!(
        reason.contains(&pi) && reason.contains("fraud suspected"),
        "{reason}"
    );

    // Never confirmed again, however long one waits.
    h.advance(Duration::from_secs(3600)).await;
    assert_eq!(executor.run_once().await.unwrap().claimed(), 0);
    assert!(h.gateway.ledger().is_empty());
}

/// The hold keeps the executor off the attempt while the gateway is asked, and a write
/// under a hold someone else overtook is refused with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancels_hold_keeps_the_executor_off_and_a_stale_hold_writes_nothing() {
    use onecharge::store::attempts::cancel::{
        decline_held_attempt, hold_for_gateway_cancel, release_hold, CancelHold, CancelRecorded,
        Cancellation,
    };

    let h = stripe_harness().await;
    let id = h.seed(pm::FAULT_RATE_LIMIT).await.payment_attempt_id;
    let client = stripe_client(&h);
    let executor = h.executor_with(client.clone());
    run_leaving_one_in(&executor, AttemptStatus::Pending).await;
    h.advance(Duration::from_secs(60)).await;

    let CancelHold::Held(held) = hold_for_gateway_cancel(&h.store, id, Duration::from_secs(120))
        .await
        .unwrap()
    else {
        panic!("a pending attempt with a PaymentIntent is held")
    };
    assert_eq!(
        executor.run_once().await.unwrap().claimed(),
        0,
        "held: not claimed"
    );
    release_hold(&h.store, id, held.lease_token).await.unwrap();
    h.advance(Duration::from_secs(1)).await;
    // Released: the executor takes it again and its retry charges.
    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;

    // A hold overtaken (here: the attempt moved on by the executor) writes nothing.
    let cancellation = Cancellation {
        payment_attempt_id: id,
        reason: "too late",
        actor: &Actor::operator("ana"),
        via: onecharge::store::audit::Via::Api,
    };
    let outcome = decline_held_attempt(&h.store, &cancellation, held.lease_token, "pi_x")
        .await
        .unwrap();
    assert_eq!(
        outcome,
        CancelRecorded::NotPending {
            status: AttemptStatus::Succeeded
        }
    );
    assert_eq!(h.attempt(id).await.status, "succeeded");
    h.assert_charged_once(id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolving_as_succeeded_takes_only_the_attempts_own_payment_intent_or_its_charge() {
    let h = stripe_harness().await;
    let client = stripe_client(&h);
    // Charged, but the answer was lost: `unknown`, its PaymentIntent stored.
    let ours = h.seed(pm::FAULT_ERROR_AFTER).await.payment_attempt_id;
    let other = h.seed(spm::CARD_VISA).await.payment_attempt_id;
    let executor = h.executor_with(client.clone());
    while executor.run_once().await.unwrap().claimed() > 0 {}
    assert_eq!(h.attempt(ours).await.status, "unknown");
    let pi = gateway_object_id(&h.store, ours)
        .await
        .unwrap()
        .unwrap()
        .to_string();
    let others_pi = h.attempt(other).await.gateway_charge_id.unwrap();
    let intent: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/v1/payment_intents/{pi}", h.gateway.base_url()))
        .bearer_auth(crate::support::API_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let its_charge = intent["latest_charge"].as_str().unwrap().to_owned();
    // A person is asked about it (the reconciler's lookups failed, say).
    h.set_attempt(
        ours,
        "status = 'needs_review', review_reason = 'lookups failed'",
    )
    .await;
    let window = onecharge::domain::RetryWindow::from_settings(&h.settings);
    let resolve = |charge: String| {
        let (store, client, window) = (h.store.clone(), client.clone(), window);
        async move {
            onecharge::operator::resolve::resolve(
                &store,
                Some(&client),
                ours,
                &onecharge::operator::resolve::ResolveRequest {
                    as_: onecharge::operator::resolve::ResolveAs::Succeeded,
                    reason: "found it in the Dashboard".into(),
                    gateway_charge_id: Some(charge),
                    decline_code: None,
                },
                &Actor::operator("ops@example.com"),
                onecharge::store::audit::Via::Cli,
                &window,
            )
            .await
        }
    };

    // Another customer's payment: a later refund would go to it.
    for wrong in [others_pi.clone(), "ch_someone_elses".to_owned()] {
        let refused = resolve(wrong.clone()).await;
        assert!(
            matches!(&refused, Err(onecharge::operator::resolve::ResolveError::Refused(why))
                if why.contains(&pi) && why.contains(&wrong)),
            "{wrong}: {refused:?}"
        );
        assert_eq!(h.attempt(ours).await.status, "needs_review");
    }
    // Its PaymentIntent's charge is its own: recorded as the PaymentIntent, as ever.
    let resolved = resolve(its_charge).await.unwrap();
    assert_eq!(resolved.status, AttemptStatus::Succeeded);
    assert_eq!(
        h.attempt(ours).await.gateway_charge_id.as_deref(),
        Some(pi.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolving_as_declined_cancels_the_payment_intent_first() {
    let h = stripe_harness_with(|s| {
        s.stripe_requires_action = onecharge::config::RequiresAction::Review;
    })
    .await;
    let id = h.seed(spm::FAULT_REQUIRES_ACTION).await.payment_attempt_id;
    let client = stripe_client(&h);
    let report = h.executor_with(client.clone()).run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::NeedsReview), 1, "{report:?}");
    let pi = gateway_object_id(&h.store, id).await.unwrap().unwrap();

    // Every face (CLI, API, console, bulk) calls this one function.
    let request = onecharge::operator::resolve::ResolveRequest {
        as_: onecharge::operator::resolve::ResolveAs::Declined,
        reason: "the customer cannot authenticate".into(),
        gateway_charge_id: None,
        decline_code: Some("authentication_required".into()),
    };
    let window = onecharge::domain::RetryWindow::from_settings(&h.settings);
    // No client, or a §3 one (an operator's shell without ONECHARGE_GATEWAY_KIND=stripe),
    // cannot cancel a PaymentIntent: refused, never declined unproven.
    let mut section3 = h.settings.clone();
    section3.gateway_kind = GatewayKind::Onecharge;
    let wrong_kind = GatewayClient::from_settings(&section3).expect("a §3 client");
    for unable in [None, Some(&wrong_kind)] {
        let refused = onecharge::operator::resolve::resolve(
            &h.store,
            unable,
            id,
            &request,
            &Actor::operator("ops@example.com"),
            onecharge::store::audit::Via::Cli,
            &window,
        )
        .await;
        assert!(
            matches!(refused, Err(onecharge::operator::resolve::ResolveError::Refused(ref why)) if why.contains("cancelled first")),
            "{refused:?}"
        );
        assert_eq!(h.attempt(id).await.status, "needs_review");
    }

    let resolved = onecharge::operator::resolve::resolve(
        &h.store,
        Some(&client),
        id,
        &request,
        &Actor::operator("ops@example.com"),
        onecharge::store::audit::Via::Cli,
        &window,
    )
    .await
    .unwrap();
    assert_eq!(resolved.status, AttemptStatus::Declined);
    assert!(calls(&h, id)
        .await
        .contains(&call("cancel", Some(200), "canceled", Some(&pi))));
    assert!(h.gateway.ledger().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirm_is_never_sent_when_the_lease_left_cannot_cover_it() {
    let BetweenCalls {
        h,
        id,
        executor,
        claimed,
        pi,
        ..
    } = a_card_attempt_between_calls().await;
    // The create was slow: less of the lease is left than a whole call could take.
    let left = h.settings.gateway_call_limit() - Duration::from_secs(1);
    h.advance(h.settings.executor.lease - left).await;

    let report = executor.execute(claimed).await;
    assert_eq!(
        report.disposition,
        onecharge::executor::Disposition::Moved(AttemptStatus::Pending),
        "{report:?}"
    );
    assert!(
        !h.gateway
            .requests()
            .iter()
            .any(|r| r.path.ends_with("/confirm")),
        "no confirm left after the lease could no longer cover it"
    );
    assert!(h.gateway.ledger().is_empty());
    assert_eq!(gateway_object_id(&h.store, id).await.unwrap(), Some(pi));
}

/// Storing the PaymentIntent and stamping the confirm's send are one write (issue 28): the
/// id is stored whatever the lease left, but the send is stamped — and the confirm may
/// leave — only when the lease still covers a whole call; a stale worker stores and stamps
/// nothing; every create's evidence is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storing_the_payment_intent_stamps_the_send_only_when_the_lease_covers_the_confirm() {
    let h = stripe_harness().await;
    let id = h.seed(spm::CARD_VISA).await.payment_attempt_id;
    let executor = h.executor_with(stripe_client(&h));
    let claimed = executor.claim(1).await.unwrap().remove(0);
    let evidence = |pi: &str| onecharge::domain::GatewayCallRecord {
        payment_attempt_id: id,
        operation: onecharge::domain::CallOperation::Prepare,
        idempotency_key: claimed.attempt.idempotency_key.create_key(1),
        try_number: claimed.attempt.tries,
        lease_token: Some(claimed.attempt.lease_token),
        started_at: claimed.attempt.created_at,
        finished_at: claimed.attempt.created_at,
        http_status: Some(200),
        outcome: "prepared".into(),
        gateway_charge_id: Some(onecharge::domain::GatewayChargeId::from_gateway(pi)),
        error: None,
    };
    let store = |token: LeaseToken, pi: &'static str, limit: Duration| {
        let (h, evidence) = (&h, evidence(pi));
        async move {
            record_gateway_object(
                &h.store,
                id,
                token,
                &onecharge::domain::GatewayObjectId::from_gateway(pi),
                &evidence,
                limit,
            )
            .await
            .unwrap()
        }
    };
    // The create took five seconds (rows moved back by as much).
    h.advance(Duration::from_secs(5)).await;
    let claimed_at = h.attempt(id).await.dispatched_at;

    // A call could outlast the lease: stored, not stamped.
    let longer_than_the_lease = h.settings.executor.lease * 2;
    let answer = store(claimed.attempt.lease_token, "pi_1", longer_than_the_lease).await;
    assert_eq!(answer, ConfirmSend::LeaseTooShort);
    assert_eq!(
        gateway_object_id(&h.store, id).await.unwrap().as_deref(),
        Some("pi_1")
    );
    assert_eq!(h.attempt(id).await.dispatched_at, claimed_at, "not stamped");

    // The same id again, with the lease covering the call: stamped by the database's clock.
    let answer = store(claimed.attempt.lease_token, "pi_1", Duration::from_secs(1)).await;
    assert_eq!(answer, ConfirmSend::Go);
    let stamped = h.attempt(id).await.dispatched_at.expect("stamped");
    assert!(
        stamped > claimed_at.expect("claimed"),
        "{stamped} after the claim"
    );

    // Another id, or a stale lease: nothing stored, nothing stamped.
    let stale: LeaseToken = (claimed.attempt.lease_token.get() - 1).into();
    assert_eq!(
        store(claimed.attempt.lease_token, "pi_2", Duration::from_secs(1)).await,
        ConfirmSend::Fenced
    );
    assert_eq!(
        store(stale, "pi_1", Duration::from_secs(1)).await,
        ConfirmSend::Fenced
    );
    assert_eq!(
        gateway_object_id(&h.store, id).await.unwrap().as_deref(),
        Some("pi_1")
    );
    assert_eq!(h.attempt(id).await.dispatched_at, Some(stamped));

    // Every create's evidence, fenced or not.
    let operations = h.call_operations(id).await;
    let recorded = operations.iter().filter(|op| *op == "prepare").count();
    assert_eq!(recorded, 4);
}

/// The writes before a confirm are group-committed (decision 123): in one statement each
/// keeps its own fence and its own lease check, answers in the order written, and every
/// create's evidence is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_payment_intents_stored_at_once_answers_each_by_its_own_lease() {
    let h = stripe_harness().await;
    h.seed_many(&[spm::CARD_VISA, spm::CARD_VISA, spm::CARD_VISA])
        .await;
    let executor = h.executor_with(stripe_client(&h));
    let claimed = executor.claim(3).await.unwrap();
    assert_eq!(claimed.len(), 3);
    let write = |c: &onecharge::domain::ChargeClaim, token: LeaseToken, limit| ObjectWrite {
        payment_attempt_id: c.attempt.payment_attempt_id,
        lease_token: token,
        object_id: onecharge::domain::GatewayObjectId::from_gateway(format!(
            "pi_{}",
            c.attempt.payment_attempt_id.into_uuid().simple()
        )),
        call: onecharge::domain::GatewayCallRecord {
            payment_attempt_id: c.attempt.payment_attempt_id,
            operation: onecharge::domain::CallOperation::Prepare,
            idempotency_key: c.attempt.idempotency_key.create_key(1),
            try_number: c.attempt.tries,
            lease_token: Some(token),
            started_at: c.attempt.created_at,
            finished_at: c.attempt.created_at,
            http_status: Some(200),
            outcome: "prepared".into(),
            gateway_charge_id: None,
            error: None,
        },
        call_limit: limit,
    };
    let short = Duration::from_secs(1);
    let past_the_lease = h.settings.executor.lease * 2;
    let stale: LeaseToken = (claimed[2].attempt.lease_token.get() - 1).into();
    let writes = [
        write(&claimed[0], claimed[0].attempt.lease_token, past_the_lease),
        write(&claimed[1], claimed[1].attempt.lease_token, short),
        write(&claimed[2], stale, short),
    ];
    let answers = record_gateway_objects(&h.store, &writes).await.unwrap();
    assert_eq!(
        answers,
        vec![
            ConfirmSend::LeaseTooShort,
            ConfirmSend::Go,
            ConfirmSend::Fenced
        ]
    );
    for (c, stored) in claimed.iter().zip([true, true, false]) {
        let id = gateway_object_id(&h.store, c.attempt.payment_attempt_id)
            .await
            .unwrap();
        assert_eq!(id.is_some(), stored, "{id:?}");
    }
    let ids: Vec<onecharge::domain::PaymentAttemptId> = claimed
        .iter()
        .map(|c| c.attempt.payment_attempt_id)
        .collect();
    let calls = h.all_gateway_calls().await;
    let recorded = calls
        .iter()
        .filter(|c| ids.contains(&c.payment_attempt_id.into()) && c.operation == "prepare")
        .count();
    assert_eq!(recorded, 3);
}

/// An attempt in review whose PaymentIntent (`requires_action`) could still be confirmed,
/// and the PaymentIntent's id.
async fn in_review_with_a_live_payment_intent(
    h: &Harness,
    client: &GatewayClient,
) -> (onecharge::domain::PaymentAttemptId, String) {
    let id = h.seed(spm::FAULT_REQUIRES_ACTION).await.payment_attempt_id;
    let report = h.executor_with(client.clone()).run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::NeedsReview), 1, "{report:?}");
    let pi = gateway_object_id(&h.store, id).await.unwrap().unwrap();
    (id, pi)
}

/// The PaymentIntent's status at the mock, read by id.
async fn intent_status(h: &Harness, pi: &str) -> String {
    reqwest::Client::new()
        .get(format!("{}/v1/payment_intents/{pi}", h.gateway.base_url()))
        .bearer_auth(crate::support::API_KEY)
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap()["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Cancel requests the mock received.
fn cancels_sent(h: &Harness) -> usize {
    h.gateway
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/cancel"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decline_refused_because_the_attempt_left_review_cancels_nothing_at_the_gateway() {
    let h = stripe_harness_with(|s| {
        s.stripe_requires_action = onecharge::config::RequiresAction::Review;
    })
    .await;
    let client = stripe_client(&h);
    let (id, pi) = in_review_with_a_live_payment_intent(&h, &client).await;
    // Someone else took it out of review meanwhile: the payment may still succeed.
    h.set_attempt(id, "status = 'unknown'").await;

    let refused = onecharge::operator::resolve::resolve(
        &h.store,
        Some(&client),
        id,
        &onecharge::operator::resolve::ResolveRequest {
            as_: onecharge::operator::resolve::ResolveAs::Declined,
            reason: "the customer cannot authenticate".into(),
            gateway_charge_id: None,
            decline_code: None,
        },
        &Actor::operator("ops@example.com"),
        onecharge::store::audit::Via::Cli,
        &onecharge::domain::RetryWindow::from_settings(&h.settings),
    )
    .await;

    assert!(
        matches!(refused, Err(onecharge::operator::resolve::ResolveError::Refused(ref why)) if why.contains("not needs_review")),
        "{refused:?}"
    );
    assert_eq!(cancels_sent(&h), 0, "a refused request acts nowhere");
    assert_eq!(intent_status(&h, &pi).await, "requires_action");
    assert!(!calls(&h, id).await.iter().any(|c| c.0 == "cancel"));
    assert_eq!(h.attempt(id).await.status, "unknown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_never_cancels_and_leaves_the_proof_to_the_reconciler() {
    let h = stripe_harness_with(|s| s.executor.max_tries = 1).await;
    let client = stripe_client(&h);
    let (claimed, pi) = paused_between_storing_and_confirming(&h, &client).await;
    let id = claimed.attempt.payment_attempt_id;
    h.advance(h.settings.gateway_max_processing_time + Duration::from_secs(60))
        .await;
    let expired = onecharge::store::attempts::lookups::expire_leases(
        &h.store,
        &Actor::Reconciler("test".into()),
        10,
    )
    .await
    .unwrap();
    assert_eq!(expired, vec![id]);

    // Nothing charged and past its retry limits: a pass would cancel before saying so; a
    // person's recheck only looks.
    let reconciler = h.reconciler_with(client.clone());
    let outcome = reconciler
        .recheck(
            id,
            &Actor::operator("ops@example.com"),
            onecharge::store::audit::Via::Cli,
            None,
        )
        .await
        .unwrap();
    let onecharge::reconciler::RecheckOutcome::Done(report) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(cancels_sent(&h), 0, "a recheck is read-only at the gateway");
    assert_eq!(intent_status(&h, &pi).await, "requires_confirmation");
    assert_eq!(report.after, AttemptStatus::Unknown, "{report:?}");
    assert!(report.found.contains("a recheck never does"), "{report:?}");

    // The reconciler's own pass proves it, as before.
    let pass = reconciler.run_once().await.unwrap();
    assert_eq!(pass.count(AttemptStatus::NeedsReview), 1, "{pass:?}");
    assert_eq!(cancels_sent(&h), 1);
    assert_eq!(intent_status(&h, &pi).await, "canceled");
}

/// A debit left `processing` at the mock for far longer than any test runs.
async fn debit_processing_for_weeks() -> (Harness, onecharge::domain::PaymentAttemptId) {
    debit_processing_for(Duration::from_secs(60 * 24 * 3600)).await
}

/// A debit the mock holds `processing` for `slow` (until the test finishes it), already
/// sent: its attempt `unknown`, read by id by the reconciler.
async fn debit_processing_for(slow: Duration) -> (Harness, onecharge::domain::PaymentAttemptId) {
    let h = Harness::with(
        MockConfig {
            dialect: Dialect::Stripe,
            slow_charge_for: slow,
            ..MockConfig::default()
        },
        |s| s.gateway_kind = GatewayKind::Stripe,
    )
    .await;
    let id = h.seed(spm::FAULT_PROCESSING).await.payment_attempt_id;
    let report = h.executor_with(stripe_client(&h)).run_once().await.unwrap();
    assert_eq!(report.count(AttemptStatus::Unknown), 1, "{report:?}");
    (h, id)
}

/// Moves the database's clock and the mock's together, `step` at a time, for `days`,
/// passing the reconciler after each step; every `fail_every`th pass asks a gateway that
/// does not answer (a 5xx or a reset would read the same: a failed lookup).
async fn follow_processing(h: &Harness, days: u64, fail_every: usize) {
    let step = Duration::from_secs(6 * 3600);
    let reconciler = h.reconciler_with(stripe_client(h));
    let mut unreachable = h.settings.clone();
    unreachable.gateway_url = crate::support::refused_url();
    let unreachable = h.reconciler_with(GatewayClient::from_settings(&unreachable).unwrap());
    for n in 1..=(days * 4) as usize {
        h.advance(step).await;
        h.gateway.advance_clock(step);
        let pass = if n % fail_every == 0 {
            unreachable.run_once().await.unwrap()
        } else {
            reconciler.run_once().await.unwrap()
        };
        assert_eq!(pass.resolutions.len(), 1, "pass {n}: {pass:?}");
    }
}

/// Transitions of `id` into review.
async fn reviews(h: &Harness, id: onecharge::domain::PaymentAttemptId) -> usize {
    let path = h.path(id).await;
    path.iter().filter(|to| *to == "needs_review").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debit_processing_for_fourteen_days_through_failed_lookups_settles_without_a_person() {
    let (h, id) = debit_processing_for_weeks().await;
    follow_processing(&h, 14, 7).await;
    assert_eq!(h.attempt(id).await.status, "unknown");
    assert_eq!(reviews(&h, id).await, 0);

    h.finish_slow_charge().await;
    h.advance(Duration::from_secs(6 * 3600)).await;
    let pass = h
        .reconciler_with(stripe_client(&h))
        .run_once()
        .await
        .unwrap();
    assert_eq!(pass.count(AttemptStatus::Succeeded), 1, "{pass:?}");
    h.assert_charged_once(id).await;
    assert_eq!(reviews(&h, id).await, 0, "no person was asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debit_still_processing_at_sixteen_days_goes_to_a_person_saying_so() {
    let (h, id) = debit_processing_for_weeks().await;
    follow_processing(&h, 14, 7).await;
    assert_eq!(h.attempt(id).await.status, "unknown");
    let reconciler = h.reconciler_with(stripe_client(&h));
    for _ in 0..8 {
        h.advance(Duration::from_secs(6 * 3600)).await;
        h.gateway.advance_clock(Duration::from_secs(6 * 3600));
        reconciler.run_once().await.unwrap();
    }
    let row = h.attempt(id).await;
    assert_eq!(row.status, "needs_review");
    let reason = row.review_reason.unwrap_or_default();
    assert!(
        reason.contains("still processing at the gateway, 15days after the last send")
            && reason.contains("reconciler.processing_max")
            && !reason.contains("  "),
        "{reason}"
    );
    assert!(h.gateway.ledger().is_empty(), "nothing charged yet");
}
