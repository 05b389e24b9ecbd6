//! Signed Stripe webhooks (docs/contract.md §3.3) against the real service: the webhook
//! listener and the reconciler of `serve`, the Stripe mock, real PostgreSQL. A webhook wakes
//! a processing attempt far sooner than the reconciler's schedule, never settles anything
//! itself, and forged, stale, unsigned and replayed deliveries change nothing.

use std::time::Duration;

use crate::support::records::Finding;
use crate::support::{eventually, Harness, Records, Served};
use mock_gateway::payment_methods as pm;
use mock_gateway::stripe::payment_methods as spm;
use onecharge::app::Role;
use onecharge::domain::Actor;
use onecharge::gateway::GatewayClient;
use onecharge::http::webhook::signature;
use serde_json::json;

const OLD: &str = "whsec_old_secret";
const NEW: &str = "whsec_new_secret";

/// A Stripe harness whose `serve` listens for webhooks with two secrets (a rotation), and
/// whose reconciler would look a processing attempt up again only after a minute.
async fn harness() -> Harness {
    let mut h = Harness::stripe_processing(|s| {
        s.webhook_addr = Some("127.0.0.1:0".parse().unwrap());
        s.stripe_webhook_secrets = Some(format!("{NEW},{OLD}").into());
        s.reconciler.schedule = vec![Duration::from_secs(60), Duration::from_secs(300)];
        // The next look at a processing PaymentIntent is far beyond any test here, even on a
        // loaded machine: what settles an attempt sooner is a webhook (at 1 minute, the
        // default, a slow run saw the scheduled look settle it first).
        s.reconciler.processing_schedule = vec![Duration::from_secs(900)];
    })
    .await;
    h.broker().await;
    h
}

fn event(id: &str, kind: &str, object: serde_json::Value) -> Vec<u8> {
    json!({"id": id, "object": "event", "type": kind, "data": {"object": object}})
        .to_string()
        .into_bytes()
}

/// POSTs `body` to the listener with `header` as `Stripe-Signature` (none when `None`).
async fn deliver(addr: std::net::SocketAddr, body: &[u8], header: Option<String>) -> u16 {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/webhooks/stripe"))
        .header("content-type", "application/json")
        .body(body.to_vec());
    if let Some(header) = header {
        request = request.header("Stripe-Signature", header);
    }
    request.send().await.unwrap().status().as_u16()
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

async fn recorded_events(h: &Harness) -> usize {
    h.webhook_events().await.len()
}

/// A `processing` attempt (`unknown`, its PaymentIntent stored), the reconciler and the
/// webhook listener of `serve` running, and the reconciler's first look done (it found the
/// PaymentIntent still processing: next look in a minute); then the PaymentIntent succeeds
/// at the mock. The attempt, its PaymentIntent, the listener's address and the service.
async fn processing_then_succeeded(
    h: &Harness,
) -> (
    onecharge::domain::PaymentAttemptId,
    String,
    std::net::SocketAddr,
    Served,
) {
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let id = h.seed(spm::FAULT_PROCESSING).await.payment_attempt_id;
    h.executor_with(client).run_once().await.unwrap();
    assert_eq!(h.attempt(id).await.status, "unknown");
    let pi = h.attempt(id).await.gateway_object_id.unwrap();
    crate::support::set_up(&h.settings).await;
    let app =
        onecharge::app::Application::build(h.settings.clone(), &[Role::Reconciler, Role::Webhook])
            .await
            .unwrap();
    let addr = app.webhook_addr().expect("the webhook listener is bound");
    let served = Served::from_app(app);
    eventually(
        "the first lookup reschedules it",
        Duration::from_secs(10),
        || async {
            h.attempt(id).await.next_run_at - h.db_now().await > time::Duration::seconds(30)
        },
    )
    .await;
    h.finish_slow_charge().await;
    (id, pi, addr, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_webhook_wakes_a_processing_attempt_well_before_the_schedule_and_bad_ones_change_nothing(
) {
    let h = harness().await;
    let (id, pi, addr, served) = processing_then_succeeded(&h).await;
    let succeeded = event(
        "evt_succeeded",
        "payment_intent.succeeded",
        json!({"id": pi, "object": "payment_intent", "status": "succeeded"}),
    );

    // Forged, stale, unsigned and unreadable deliveries are refused and record nothing.
    assert_eq!(
        deliver(
            addr,
            &succeeded,
            Some(signature::header(&["whsec_forged"], now(), &succeeded))
        )
        .await,
        400
    );
    assert_eq!(
        deliver(
            addr,
            &succeeded,
            Some(signature::header(&[NEW], now() - 600, &succeeded))
        )
        .await,
        400
    );
    assert_eq!(deliver(addr, &succeeded, None).await, 400);
    let too_large = vec![b' '; onecharge::http::webhook::MAX_BODY + 1];
    assert_eq!(
        deliver(
            addr,
            &too_large,
            Some(signature::header(&[NEW], now(), &too_large))
        )
        .await,
        413
    );
    assert_eq!(recorded_events(&h).await, 0);
    assert_eq!(h.attempt(id).await.status, "unknown", "nothing woke it");

    // Signed with the old secret of the rotation: accepted, and the reconciler settles it.
    let started = std::time::Instant::now();
    assert_eq!(
        deliver(
            addr,
            &succeeded,
            Some(signature::header(&[OLD], now(), &succeeded))
        )
        .await,
        200
    );
    eventually(
        "the woken attempt is settled",
        Duration::from_secs(15),
        || async { h.attempt(id).await.status == "succeeded" },
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "well under the 60 s schedule"
    );
    assert_eq!(
        h.causes(id).await.last().map(String::as_str),
        Some("lookup_found_charge"),
        "settled by the usual lookup, not by the webhook"
    );
    // A redelivery, signed with the new secret, is a no-op.
    assert_eq!(
        deliver(
            addr,
            &succeeded,
            Some(signature::header(&[NEW], now(), &succeeded))
        )
        .await,
        200
    );
    assert_eq!(recorded_events(&h).await, 1);
    served.stop().await;
}

/// POSTs a signed `body` and returns what the listener said it did.
async fn deliver_signed(addr: std::net::SocketAddr, body: &[u8]) -> serde_json::Value {
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/webhooks/stripe"))
        .header("content-type", "application/json")
        .header("Stripe-Signature", signature::header(&[NEW], now(), body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.json().await.unwrap()
}

/// The findings about `id`, oldest first: (state, evidence, source).
async fn findings_about(
    h: &Harness,
    id: onecharge::domain::PaymentAttemptId,
) -> Vec<(String, String, String)> {
    let findings = h.findings_about(id).await;
    findings
        .into_iter()
        .map(|f| (f.state, f.evidence, f.source))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refund_and_dispute_webhooks_are_read_again_by_id_and_each_aftermath_is_its_own_finding() {
    let h = harness().await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    h.executor_with(client.clone()).run_once().await.unwrap();
    let pi = h.attempt(id).await.gateway_charge_id.unwrap();
    crate::support::set_up(&h.settings).await;
    let app = onecharge::app::Application::build(h.settings.clone(), &[Role::Webhook])
        .await
        .unwrap();
    let addr = app.webhook_addr().unwrap();
    let served = Served::from_app(app);
    let reconciler = h.reconciler_with(client);
    let refunded = event(
        "evt_refunded",
        "charge.refunded",
        json!({"id": "ch_1", "object": "charge", "payment_intent": pi, "refunded": true}),
    );
    let disputed = event(
        "evt_disputed",
        "charge.dispute.created",
        json!({"id": "dp_1", "object": "dispute", "payment_intent": pi, "charge": "ch_1"}),
    );

    // Nothing moved yet at the gateway: the event's word alone finds nothing.
    assert_eq!(deliver_signed(addr, &refunded).await["did"], "check");
    let checks = reconciler.run_checks().await.unwrap();
    assert_eq!(checks.checked, 1, "{checks:?}");
    assert!(
        findings_about(&h, id).await.is_empty(),
        "a claim no read backs"
    );

    h.mock_control().refund_outside(&pi, None).await;
    let redelivered = event(
        "evt_refunded_again",
        "charge.refunded",
        json!({"id": "ch_1", "object": "charge", "payment_intent": pi, "refunded": true}),
    );
    assert_eq!(deliver_signed(addr, &redelivered).await["did"], "check");
    assert_eq!(deliver_signed(addr, &redelivered).await["duplicate"], true);
    reconciler.run_checks().await.unwrap();
    assert_eq!(
        findings_about(&h, id).await,
        vec![("open".into(), "refunded:1999".into(), "webhook".into())]
    );
    let refund_finding = h.last_finding().await.id;
    onecharge::operator::findings::resolve(
        &h.store,
        refund_finding,
        &Actor::operator("alice"),
        onecharge::store::audit::Via::Cli,
        "refunded on the customer's request",
    )
    .await
    .unwrap();

    // After the resolution the bank disputes the charge: a new finding and a new event.
    h.mock_control().open_dispute(&pi).await;
    assert_eq!(deliver_signed(addr, &disputed).await["did"], "check");
    reconciler.run_checks().await.unwrap();
    assert_eq!(
        findings_about(&h, id).await,
        vec![
            ("resolved".into(), "refunded:1999".into(), "webhook".into()),
            (
                "open".into(),
                "dispute:open;refunded:1999".into(),
                "webhook".into()
            ),
        ]
    );
    let published: Vec<(serde_json::Value, serde_json::Value)> = h
        .events(id)
        .await
        .into_iter()
        .filter(|(status, ..)| status == "finding")
        .map(|(_, payload, headers)| (headers, payload))
        .collect();
    assert_eq!(published.len(), 2, "{published:?}");
    assert_eq!(published[1].0["Causation-Id"], "evt_disputed");
    assert_eq!(published[1].1["stripe_event_id"], "evt_disputed");
    assert_eq!(published[1].1["earlier"][0]["state"], "resolved");
    assert_eq!(h.attempt(id).await.status, "succeeded", "never changed");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispute_closed_webhook_for_a_won_dispute_reads_its_status_and_finds_the_money_reinstated(
) {
    let h = harness().await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    h.executor_with(client.clone()).run_once().await.unwrap();
    let pi = h.attempt(id).await.gateway_charge_id.unwrap();
    crate::support::set_up(&h.settings).await;
    let app = onecharge::app::Application::build(h.settings.clone(), &[Role::Webhook])
        .await
        .unwrap();
    let addr = app.webhook_addr().unwrap();
    let served = Served::from_app(app);
    let reconciler = h.reconciler_with(client);
    let dispute_event = |event_id: &str, kind: &str, status: &str| {
        event(
            event_id,
            kind,
            json!({"id": "dp_1", "object": "dispute", "payment_intent": pi, "charge": "ch_1",
                   "status": status}),
        )
    };

    h.mock_control().open_dispute(&pi).await;
    let opened = dispute_event("evt_opened", "charge.dispute.created", "needs_response");
    assert_eq!(deliver_signed(addr, &opened).await["did"], "check");
    reconciler.run_checks().await.unwrap();
    // The bank decides for the merchant; the event says "won", and so does the read.
    h.mock_control().set_dispute(&pi, "won").await;
    let closed = dispute_event("evt_closed", "charge.dispute.closed", "won");
    assert_eq!(deliver_signed(addr, &closed).await["did"], "check");
    reconciler.run_checks().await.unwrap();

    assert_eq!(
        findings_about(&h, id).await,
        vec![
            ("open".into(), "dispute:open".into(), "webhook".into()),
            ("open".into(), "dispute:won".into(), "webhook".into()),
        ]
    );
    let Finding { class, detail, .. } = h.findings_about(id).await.pop().expect("a finding");
    assert_eq!(class, "disputed");
    assert!(
        detail.contains("reinstated and nothing is owed"),
        "{detail}"
    );
    let published: Vec<serde_json::Value> = h
        .events(id)
        .await
        .into_iter()
        .filter(|(status, _, _)| status == "finding")
        .map(|(_, payload, _)| payload)
        .collect();
    assert_eq!(published.len(), 2, "{published:?}");
    assert_eq!(published[1]["evidence"], "dispute:won");
    assert_eq!(published[1]["stripe_event_id"], "evt_closed");
    assert_eq!(published[1]["earlier"][0]["evidence"], "dispute:open");

    // A forged "lost" for the won dispute: the read says won, nothing new.
    let forged = dispute_event("evt_forged_lost", "charge.dispute.closed", "lost");
    assert_eq!(deliver_signed(addr, &forged).await["did"], "check");
    reconciler.run_checks().await.unwrap();
    assert_eq!(findings_about(&h, id).await.len(), 2);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_webhook_for_a_declined_attempt_is_read_again_and_found_as_money_taken() {
    let h = harness().await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    h.executor_with(client.clone()).run_once().await.unwrap();
    let pi = h.attempt(id).await.gateway_charge_id.unwrap();
    // The ledger says declined (a person's mistaken decision, say); Stripe holds the money.
    h.set_attempt(id, "status = 'declined'").await;
    crate::support::set_up(&h.settings).await;
    let app = onecharge::app::Application::build(h.settings.clone(), &[Role::Webhook])
        .await
        .unwrap();
    let addr = app.webhook_addr().unwrap();
    let served = Served::from_app(app);
    let succeeded = event(
        "evt_succeeded",
        "payment_intent.succeeded",
        json!({"id": pi, "object": "payment_intent", "status": "succeeded"}),
    );

    assert_eq!(deliver_signed(addr, &succeeded).await["did"], "check");
    h.reconciler_with(client).run_checks().await.unwrap();

    let classes: Vec<String> = h
        .findings_about(id)
        .await
        .into_iter()
        .map(|f| f.class)
        .collect();
    assert_eq!(classes, vec!["charged_not_recorded"]);
    assert_eq!(
        h.attempt(id).await.status,
        "declined",
        "a final state never changes"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stripe_mocks_own_signed_webhooks_wake_the_attempt_and_its_redeliveries_and_rotations_are_handled(
) {
    let h = harness().await;
    let (id, pi, addr, served) = processing_then_succeeded(&h).await;
    let mock = h.mock_control();
    let endpoint = format!("http://{addr}/webhooks/stripe");
    // Stripe rolling the secret: every event carries the new one and the one onecharge has.
    mock.set_webhook_endpoints(std::slice::from_ref(&endpoint), &["whsec_rolled_in", NEW])
        .await;

    let sent = mock.send_webhook("payment_intent.succeeded", &pi).await;
    assert_eq!(sent["status"], 200, "{sent}");
    eventually(
        "the woken attempt is settled",
        Duration::from_secs(15),
        || async { h.attempt(id).await.status == "succeeded" },
    )
    .await;
    let event = sent["event_id"].as_str().unwrap().to_owned();
    let again = mock.redeliver(&event).await;
    assert_eq!(
        again["status"], 200,
        "a redelivery is answered 2xx: {again}"
    );
    assert_eq!(recorded_events(&h).await, 1, "and does nothing");
    // An endpoint secret onecharge was never given: refused, recorded nothing.
    mock.set_webhook_endpoints(&[endpoint], &["whsec_not_given_to_onecharge"])
        .await;
    let forged = mock.send_webhook("payment_intent.canceled", &pi).await;
    assert_eq!(forged["status"], 400, "{forged}");
    assert_eq!(recorded_events(&h).await, 1);
    served.stop().await;
}

/// The webhook listener of a `serve` that runs only it.
async fn listener_only(h: &Harness) -> (std::net::SocketAddr, Served) {
    crate::support::set_up(&h.settings).await;
    let app = onecharge::app::Application::build(h.settings.clone(), &[Role::Webhook])
        .await
        .unwrap();
    let addr = app.webhook_addr().unwrap();
    (addr, Served::from_app(app))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_of_the_other_mode_than_the_keys_is_refused_and_records_nothing() {
    // A test-mode deployment (a test key, `production` false) and a live event signed
    // with its secret: a live endpoint's deliveries sent here, or a replay from another
    // account. Refused, counted, recorded nowhere; the same event in test mode is taken.
    let h = harness().await;
    let (addr, served) = listener_only(&h).await;
    let about = json!({"id": "pi_1", "object": "payment_intent", "status": "succeeded"});
    let with_mode = |id: &str, livemode: bool| {
        json!({"id": id, "object": "event", "type": "payment_intent.succeeded",
               "livemode": livemode, "data": {"object": about.clone()}})
        .to_string()
        .into_bytes()
    };
    let live = with_mode("evt_live", true);

    let status = deliver(addr, &live, Some(signature::header(&[NEW], now(), &live))).await;

    assert_eq!(status, 400, "a live event to a test-mode deployment");
    assert_eq!(recorded_events(&h).await, 0);
    let test = with_mode("evt_test", false);
    assert_eq!(
        deliver(addr, &test, Some(signature::header(&[NEW], now(), &test))).await,
        200
    );
    assert_eq!(recorded_events(&h).await, 1);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_trickles_its_headers_is_closed() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let h = harness().await;
    let (addr, served) = listener_only(&h).await;
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();

    let mut rest = Vec::new();
    let closed = tokio::time::timeout(
        onecharge::http::webhook::HEADER_READ_TIMEOUT + Duration::from_secs(5),
        slow.read_to_end(&mut rest),
    )
    .await;

    assert!(
        closed.is_ok(),
        "still open after the header read timeout: a slow sender holds a connection for ever"
    );
    served.stop().await;
}

/// Anonymous slow bodies (issue 52, item 8): a request without a `Stripe-Signature` of the
/// right shape is refused before it takes a slot, so any number of them leave every slot to
/// Stripe's deliveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_slow_bodies_take_no_slot_and_a_signed_delivery_is_accepted_beside_them() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let h = harness().await;
    let (addr, served) = listener_only(&h).await;
    let mut unsigned = Vec::new();
    for i in 0..onecharge::http::webhook::MAX_IN_FLIGHT * 2 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let signature = if i % 2 == 0 {
            ""
        } else {
            "Stripe-Signature: v1=zz\r\n"
        };
        stream
            .write_all(format!("POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n{signature}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{").as_bytes())
            .await
            .unwrap();
        unsigned.push(stream);
    }
    let body = event(
        "evt_beside_slow",
        "payment_intent.succeeded",
        json!({"id": "pi_1", "object": "payment_intent"}),
    );
    let status = deliver(addr, &body, Some(signature::header(&[NEW], now(), &body))).await;
    assert_eq!(
        status, 200,
        "a signed delivery beside the slow unsigned ones"
    );
    for stream in &mut unsigned {
        let mut answer = [0u8; 12];
        let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut answer))
            .await
            .expect("refused at once, not held")
            .unwrap();
        assert_eq!(&answer[..read], b"HTTP/1.1 400");
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_in_flight_limit_a_delivery_is_shed_with_retry_after_at_once() {
    use tokio::io::AsyncWriteExt as _;
    let h = harness().await;
    let (addr, served) = listener_only(&h).await;
    // Every slot held by a request whose body has not arrived yet (signed in shape: an
    // unsigned one is refused before it takes a slot).
    let mut held = Vec::new();
    for _ in 0..onecharge::http::webhook::MAX_IN_FLIGHT {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(format!("POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nStripe-Signature: t={},v1={}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{", now(), "ab".repeat(32)).as_bytes())
            .await
            .unwrap();
        held.push(stream);
    }
    let body = event(
        "evt_burst",
        "payment_intent.succeeded",
        json!({"id": "pi_1", "object": "payment_intent"}),
    );

    let deliver_once = || async {
        let answer = reqwest::Client::new()
            .post(format!("http://{addr}/webhooks/stripe"))
            .header("Stripe-Signature", signature::header(&[NEW], now(), &body))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let retry_after = answer.headers().get("retry-after").cloned();
        (answer.status().as_u16(), retry_after)
    };
    // The held requests reach the limit as the server accepts them.
    eventually(
        "the next delivery is shed",
        Duration::from_secs(10),
        || async { deliver_once().await.0 == 503 },
    )
    .await;
    let (status, retry_after) = deliver_once().await;
    assert_eq!(status, 503);
    assert_eq!(retry_after.unwrap(), "1");
    assert_eq!(
        recorded_events(&h).await,
        0,
        "a shed delivery records nothing"
    );

    drop(held);
    eventually("slots free again", Duration::from_secs(15), || async {
        deliver(addr, &body, Some(signature::header(&[NEW], now(), &body))).await == 200
    })
    .await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processed_event_ids_are_purged_once_past_the_tolerance_and_a_margin() {
    let h = harness().await;
    sqlx::query(
        "INSERT INTO stripe_webhook_events (event_id, event_type, outcome, received_at)
         VALUES ('evt_old', 'charge.refunded', 'ignored', now() - interval '2 hours'),
                ('evt_new', 'charge.refunded', 'ignored', now() - interval '10 minutes')",
    )
    .execute(h.store.pool())
    .await
    .unwrap();
    let kept = h.settings.webhook_tolerance + onecharge::purge::WEBHOOK_ID_MARGIN;

    let deleted = onecharge::store::findings::webhooks::purge_events(&h.store, kept)
        .await
        .unwrap();

    assert_eq!(deleted, 1);
    let left: Vec<String> = h
        .webhook_events()
        .await
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    assert_eq!(left, vec!["evt_new"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_take_the_mocks_own_webhooks_during_real_charges_while_a_forger_posts_and_nothing_is_charged_twice_or_found_from_forged_words(
) {
    let h = harness().await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let serve = || async {
        crate::support::set_up(&h.settings).await;
        let app = onecharge::app::Application::build(
            h.settings.clone(),
            &[Role::Reconciler, Role::Webhook],
        )
        .await
        .unwrap();
        let addr = app.webhook_addr().unwrap();
        (addr, Served::from_app(app))
    };
    let ((first, first_served), (second, second_served)) = (serve().await, serve().await);
    let endpoints: Vec<String> = [first, second]
        .iter()
        .map(|addr| format!("http://{addr}/webhooks/stripe"))
        .collect();
    h.mock_control()
        .send_every_change_to(&endpoints, &[NEW])
        .await;

    // Real charges: some settle at once, some stay processing until the gateway decides.
    let methods = [
        pm::CARD_VISA,
        spm::FAULT_PROCESSING,
        pm::CARD_VISA,
        spm::FAULT_PROCESSING,
        pm::CARD_VISA,
        spm::FAULT_PROCESSING,
    ];
    let ids: Vec<_> = h
        .seed_many(&methods)
        .await
        .into_iter()
        .map(|c| c.payment_attempt_id)
        .collect();
    let executor = h.executor_with(client);
    while executor.run_once().await.unwrap().claimed() > 0 {}
    let pis: Vec<String> = {
        let mut pis = Vec::new();
        for id in &ids {
            let (pi,): (String,) = h.attempt_columns(*id, "gateway_object_id").await;
            pis.push(pi);
        }
        pis
    };

    // A forger, meanwhile, posts badly signed words about every PaymentIntent to both.
    let forger = {
        let pis = pis.clone();
        tokio::spawn(async move {
            let mut refused = 0;
            let mut sent = 0;
            for (n, pi) in pis.iter().enumerate() {
                for (kind, object) in [
                    (
                        "payment_intent.succeeded",
                        json!({"id": pi, "object": "payment_intent", "status": "succeeded"}),
                    ),
                    (
                        "charge.dispute.closed",
                        json!({"id": "dp_forged", "object": "dispute", "payment_intent": pi,
                               "status": "lost"}),
                    ),
                ] {
                    let body = event(&format!("evt_forged_{n}_{kind}"), kind, object);
                    for addr in [first, second] {
                        let header = signature::header(&["whsec_forged"], now(), &body);
                        sent += 1;
                        if deliver(addr, &body, Some(header)).await == 400 {
                            refused += 1;
                        }
                    }
                }
            }
            (sent, refused)
        })
    };
    // The gateway decides the processing ones, and a customer is refunded at the Dashboard:
    // each change sends its own signed webhook to both services.
    h.gateway.finish_slow_charges();
    h.mock_control().refund_outside(&pis[0], None).await;
    let (sent, refused) = forger.await.unwrap();

    eventually(
        "every processing attempt is settled, woken by the mock's own webhooks",
        Duration::from_secs(20),
        || async {
            let mut all = true;
            for id in &ids {
                all &= h.attempt(*id).await.status == "succeeded";
            }
            all
        },
    )
    .await;
    eventually("the refund is found", Duration::from_secs(20), || async {
        !findings_about(&h, ids[0]).await.is_empty()
    })
    .await;

    let forged_sent = ids.len() * 2 * 2; // two kinds, two services
    assert_eq!(
        (sent, refused),
        (forged_sent, forged_sent),
        "every forged delivery refused"
    );
    let taken = h.webhook_events().await;
    let forged = taken
        .iter()
        .filter(|e| e.event_id.starts_with("evt_forged"))
        .count();
    assert_eq!(forged, 0, "no forged event recorded");
    let genuine = taken
        .iter()
        .filter(|e| e.event_id.starts_with("evt_mock_"))
        .count();
    assert!(genuine > 0, "the mock's own webhooks were taken");
    let mut per_reference = std::collections::HashMap::<String, usize>::new();
    for charge in h.gateway.ledger() {
        *per_reference.entry(charge.reference).or_default() += 1;
    }
    assert_eq!(per_reference.len(), ids.len());
    assert!(per_reference.values().all(|n| *n == 1), "{per_reference:?}");
    let findings: Vec<(String, String)> = h
        .findings()
        .await
        .into_iter()
        .map(|f| (f.class, f.evidence))
        .collect();
    assert_eq!(
        findings,
        [(
            "recorded_not_charged".to_owned(),
            "refunded:1999".to_owned()
        )],
        "only what the gateway shows; no dispute from forged words"
    );
    first_served.stop().await;
    second_served.stop().await;
}

/// Issue 54: what the listener refused is tallied by reason, with the last one's words, for
/// the console's webhook page — written every few seconds and when the listener stops,
/// never once per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_tallied_by_reason_with_their_words() {
    let h = harness().await;
    let (addr, served) = listener_only(&h).await;
    let body = event(
        "evt_refused",
        "payment_intent.succeeded",
        json!({"id": "pi_1", "object": "payment_intent"}),
    );
    assert_eq!(deliver(addr, &body, None).await, 400);
    assert_eq!(deliver(addr, &body, None).await, 400);
    let forged = signature::header(&["whsec_not_ours"], now(), &body);
    assert_eq!(deliver(addr, &body, Some(forged)).await, 400);
    served.stop().await;

    // A pool of its own: stopping the listener closed the store's.
    let db = sqlx::PgPool::connect(&h.settings.database_url)
        .await
        .unwrap();
    let rows = db.webhook_refusals().await;
    let tallied: Vec<(&str, i64)> = rows.iter().map(|(r, n, _)| (r.as_str(), *n)).collect();
    assert_eq!(
        tallied,
        [("bad_signature", 1), ("missing_signature", 2)],
        "{rows:?}"
    );
    assert!(
        rows.iter()
            .all(|(_, _, why)| !why.is_empty() && !why.contains("whsec")),
        "{rows:?}"
    );
}
