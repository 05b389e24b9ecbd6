//! Claiming ahead: an attempt claimed before a call slot frees waits in the executor's queue
//! holding its lease; before it is sent the executor checks the gateway health and the lease
//! left, and hands back (to `pending`, no try used, no gateway call) what may not go — and
//! everything still queued when it stops.
//!
//! Each test runs the real `run` loop. Most have one call slot: the first attempt takes the
//! slot and the second is claimed ahead into the queue. The last drives eight slots hard, to
//! show that the loop never stops claiming while calls end under it.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::support::Harness;
use crate::support::Records;
use mock_gateway::{payment_methods as pm, MockConfig};
use onecharge::domain::Actor;
use onecharge::domain::PaymentAttemptId;
use tokio_util::sync::CancellationToken;

/// One call slot, a queue of up to four, gateway calls allowed 31 s within a 60 s lease.
async fn one_slot_harness() -> Harness {
    Harness::with(
        MockConfig {
            slow_charge_for: Duration::from_secs(600),
            ..MockConfig::default()
        },
        |s| {
            s.executor.concurrency = 1;
            s.executor.claim_ahead = 4;
            s.executor.batch_size = 4;
            s.gateway_request_timeout = Duration::from_secs(30);
            s.executor.lease = Duration::from_secs(60);
            s.executor.breaker_failure_threshold = 1;
        },
    )
    .await
}

/// Seeds `first` and then, a second later by every stored time, `second`, both due now, so
/// that one claim takes them both, in this order.
async fn seed_in_order(
    h: &Harness,
    first: &str,
    second: &str,
) -> (PaymentAttemptId, PaymentAttemptId) {
    let first = h.seed(first).await.payment_attempt_id;
    h.advance(Duration::from_secs(1)).await;
    let second = h.seed(second).await.payment_attempt_id;
    h.advance(Duration::from_secs(1)).await;
    (first, second)
}

/// Polls `condition` until it holds, for at most 10 s.
async fn until<F: Future<Output = bool>>(what: &str, mut condition: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `sent` is at the gateway (held there) and `queued` is claimed beside it.
async fn until_one_sent_and_one_queued(
    h: &Harness,
    sent: PaymentAttemptId,
    queued: PaymentAttemptId,
) {
    until(
        "the first attempt is at the gateway and the second is claimed ahead",
        || async {
            let at_gateway = h.gateway.requests().len() == 1;
            at_gateway
                && h.attempt(sent).await.status == "in_flight"
                && h.attempt(queued).await.status == "in_flight"
        },
    )
    .await;
}

fn causes(transitions: Vec<(Option<String>, String, String)>) -> Vec<String> {
    transitions.into_iter().map(|(_, _, cause)| cause).collect()
}

/// The attempt went back to `pending` unsent: no try counted, no dispatch stamp, no gateway
/// call under its key, and its history says so.
async fn assert_handed_back_unsent(h: &Harness, id: PaymentAttemptId) {
    let row = h.attempt(id).await;
    assert_eq!(row.status, "pending");
    assert_eq!(row.tries, 0, "no try used");
    assert_eq!(row.lease_owner, None);
    assert_eq!(row.first_dispatched_at, None, "no gateway has seen the key");
    assert!(h.gateway_calls(id).await.is_empty());
    assert!(h
        .gateway
        .requests()
        .iter()
        .all(|r| r.idempotency_key.as_deref() != Some(row.idempotency_key.as_str())));
    assert_eq!(
        causes(h.transitions(id).await),
        ["command_accepted", "dispatched", "handed_back"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_attempt_whose_lease_is_too_short_for_a_call_is_handed_back_unsent_and_charged_later_exactly_once(
) {
    let h = one_slot_harness().await;
    let (slow, queued) = seed_in_order(&h, pm::FAULT_SLOW_CHARGE, pm::CARD_VISA).await;
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(h.executor().run(shutdown.clone()));
    until_one_sent_and_one_queued(&h, slow, queued).await;

    // The slot stays busy until 40 s of the 60 s lease are gone: 20 s left cannot cover a
    // 31 s call.
    h.advance(Duration::from_secs(40)).await;
    h.gateway.finish_slow_charges();
    until("the queued attempt is charged", || async {
        h.attempt(queued).await.status == "succeeded"
    })
    .await;
    shutdown.cancel();
    run.await.unwrap().unwrap();

    assert_eq!(
        causes(h.transitions(queued).await),
        [
            "command_accepted",
            "dispatched",
            "handed_back",
            "dispatched",
            "gateway_succeeded"
        ]
    );
    let row = h.attempt(queued).await;
    assert_eq!(row.tries, 1, "the handed-back claim used no try");
    assert_eq!(h.gateway_calls(queued).await.len(), 1, "one call");
    let charges = h.gateway.charges_for_key(&row.idempotency_key);
    assert_eq!(charges.len(), 1, "charged exactly once");
    assert_eq!(
        row.gateway_charge_id.as_deref(),
        Some(charges[0].id.as_str())
    );
    assert_eq!(h.events(queued).await.len(), 1);
    assert_eq!(h.attempt(slow).await.status, "succeeded");
    assert_eq!(h.gateway.ledger().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_breaker_opens_the_queue_is_handed_back_without_a_gateway_call() {
    let h = one_slot_harness().await;
    let (failing, queued) = seed_in_order(&h, pm::FAULT_ERROR_BEFORE, pm::CARD_VISA).await;
    let executor = h.executor();
    let health = executor.health().clone();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(executor.run(shutdown.clone()));

    // The first call's 500 opens the breaker (threshold 1) before its slot frees.
    until("the queued attempt is handed back", || async {
        causes(h.transitions(queued).await).contains(&"handed_back".to_owned())
    })
    .await;
    shutdown.cancel();
    run.await.unwrap().unwrap();

    assert_eq!(
        health.snapshot().breaker,
        onecharge::gateway::BreakerState::Open
    );
    assert_handed_back_unsent(&h, queued).await;
    assert_eq!(h.gateway_calls(failing).await.len(), 1);
    assert!(h.gateway.ledger().is_empty(), "nothing charged");
}

/// A pause means no new charge leaves after it commits (issue 52, item 6): the attempt
/// claimed ahead before the pause is handed back unsent when its slot frees, and only the
/// call already out finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_pause_hands_the_queue_back_and_only_the_call_already_out_finishes() {
    use onecharge::executor::pause::Known;
    let h = one_slot_harness().await;
    let (slow, queued) = seed_in_order(&h, pm::FAULT_SLOW_CHARGE, pm::CARD_VISA).await;
    let executor = h.executor();
    let watch = executor.pause_watch().clone();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(executor.run(shutdown.clone()));
    until_one_sent_and_one_queued(&h, slow, queued).await;
    until("the executor listens for pauses", || async {
        watch.known() == Known::Open(Vec::new())
    })
    .await;

    onecharge::operator::fleet::pause(
        &h.store,
        "incident 42",
        onecharge::domain::PauseCover::EVERYTHING,
        &Actor::operator("ada"),
        onecharge::store::audit::Via::Cli,
    )
    .await
    .expect("the pause commits");
    // PostgreSQL tells the executor at the commit; only then may the slot free.
    until("the executor has heard of the pause", || async {
        watch.known() == Known::Open(vec![onecharge::domain::PauseCover::EVERYTHING])
    })
    .await;
    h.gateway.finish_slow_charges();
    until("the queued attempt is handed back", || async {
        causes(h.transitions(queued).await).contains(&"handed_back".to_owned())
    })
    .await;
    until("the call already out is settled", || async {
        h.attempt(slow).await.status == "succeeded"
    })
    .await;
    shutdown.cancel();
    run.await.unwrap().unwrap();

    assert_handed_back_unsent(&h, queued).await;
    assert_eq!(
        h.gateway.ledger().len(),
        1,
        "only the call already out charged"
    );
}

/// A pause holds back only what it covers (issue 54): pauses of refunds and of charges in
/// another currency, heard while an attempt (EUR) waits claimed ahead, leave it to be sent
/// when its slot frees; nothing is handed back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_that_does_not_cover_an_attempt_claimed_ahead_leaves_it_to_be_sent() {
    use onecharge::domain::{Currency, PauseCover, PauseScope};
    use onecharge::executor::pause::Known;
    let h = one_slot_harness().await;
    let (slow, queued) = seed_in_order(&h, pm::FAULT_SLOW_CHARGE, pm::CARD_VISA).await;
    let executor = h.executor();
    let watch = executor.pause_watch().clone();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(executor.run(shutdown.clone()));
    until_one_sent_and_one_queued(&h, slow, queued).await;
    until("the executor listens for pauses", || async {
        watch.known() == Known::Open(Vec::new())
    })
    .await;

    let others = [
        PauseCover {
            scope: PauseScope::Charges,
            currency: Some(Currency::from_code("ISK").unwrap()),
        },
        PauseCover {
            scope: PauseScope::Refunds,
            currency: None,
        },
    ];
    for cover in others {
        onecharge::operator::fleet::pause(
            &h.store,
            "not this one",
            cover,
            &Actor::operator("ada"),
            onecharge::store::audit::Via::Cli,
        )
        .await
        .expect("the pause commits");
    }
    until("the executor has heard of both pauses", || async {
        watch.known() == Known::Open(others.to_vec())
    })
    .await;
    h.gateway.finish_slow_charges();
    until("both attempts are charged", || async {
        h.attempt(slow).await.status == "succeeded" && h.attempt(queued).await.status == "succeeded"
    })
    .await;
    shutdown.cancel();
    run.await.unwrap().unwrap();

    assert!(
        !causes(h.transitions(queued).await).contains(&"handed_back".to_owned()),
        "{:?}",
        h.transitions(queued).await
    );
    assert_eq!(h.gateway.ledger().len(), 2, "both charged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_hands_the_queue_back_and_finishes_the_call_in_hand() {
    let h = one_slot_harness().await;
    let (slow, queued) = seed_in_order(&h, pm::FAULT_SLOW_CHARGE, pm::CARD_VISA).await;
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(h.executor().run(shutdown.clone()));
    until_one_sent_and_one_queued(&h, slow, queued).await;

    shutdown.cancel();
    until("the queued attempt is handed back", || async {
        causes(h.transitions(queued).await).contains(&"handed_back".to_owned())
    })
    .await;
    h.finish_slow_charge().await;
    run.await.unwrap().unwrap();

    assert_handed_back_unsent(&h, queued).await;
    h.assert_charged_once(slow).await;
}

/// Calls that end while the run loop decides what to wait on never leave it waiting on the
/// shutdown alone (decision 217): with eight slots and a gateway that answers at once, slots
/// free on the other worker thousands of times a second while the queue is full. On the old
/// rule the loop stopped claiming in each of four runs, after 662 to 11,430 of the 20,000,
/// with its queue claimed and unsent and nothing logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_loop_keeps_claiming_while_calls_free_slots_under_it() {
    const ATTEMPTS: i64 = 20_000;
    let h = Harness::with(MockConfig::default(), |s| {
        s.executor.concurrency = 8;
        s.executor.claim_ahead = 16;
        s.executor.batch_size = 16;
    })
    .await;
    let methods = vec![pm::CARD_VISA; 500];
    for _ in 0..ATTEMPTS / 500 {
        h.seed_many(&methods).await;
    }
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(h.executor().run(shutdown.clone()));

    let settled = || async { h.attempts_in("succeeded").await };
    let (mut last, mut moved_at) = (0, Instant::now());
    while last < ATTEMPTS {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = settled().await;
        if now > last {
            (last, moved_at) = (now, Instant::now());
        }
        assert!(
            moved_at.elapsed() < Duration::from_secs(10),
            "the executor stopped settling at {last} of {ATTEMPTS}, with attempts still pending"
        );
    }
    shutdown.cancel();
    run.await.unwrap().unwrap();
}
