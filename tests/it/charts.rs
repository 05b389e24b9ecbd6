//! The overview's chart series (`store::charts`) read from the history a real executor
//! writes: each settlement in its bucket by outcome, the charge calls' latency, and the
//! review queue's size and longest wait at each instant, ending at the database's now.

use std::time::Duration;

use crate::support::Harness;
use mock_gateway::payment_methods as pm;
use onecharge::operator::resolve::{ResolveAs, ResolveRequest};
use onecharge::operator::Via;
use onecharge::store::charts::{overview_series, Window};

const HOUR: Window = Window {
    span: Duration::from_secs(3600),
    step: Duration::from_secs(60),
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_series_count_each_settlement_its_charge_latency_and_the_review_queue() {
    let h = Harness::new().await;
    let empty = overview_series(&h.store, HOUR).await.unwrap();
    assert!(empty.settlements.is_empty() && empty.latency.is_empty());
    assert_eq!(
        empty.review_queue.len(),
        61,
        "a sample a minute, both ends included"
    );
    assert!(empty.review_queue.iter().all(|s| s.size == 0));

    let commands = h
        .seed_many(&[
            pm::CARD_VISA,
            pm::CARD_VISA,
            pm::CARD_DECLINED,
            pm::FAULT_BAD_REQUEST,
        ])
        .await;
    h.executor().run_once().await.unwrap();
    let series = overview_series(&h.store, HOUR).await.unwrap();
    let count = |status: &str| -> i64 {
        series
            .settlements
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.count)
            .sum()
    };
    assert_eq!(
        (count("succeeded"), count("declined"), count("needs_review")),
        (2, 1, 1)
    );
    let calls: i64 = series.latency.iter().map(|l| l.calls).sum();
    assert_eq!(calls, 4, "one charge call per attempt");
    assert!(series
        .latency
        .iter()
        .all(|l| 0.0 <= l.p50_seconds && l.p50_seconds <= l.p99_seconds && l.p99_seconds < 5.0));
    let now = series.review_queue.last().unwrap();
    assert_eq!(now.at, series.now, "the last sample is now");
    assert_eq!(now.size, 1, "the gateway's 400 waits for a person");
    assert!(now.oldest_seconds >= 0.0 && now.oldest_seconds < 60.0);
    assert_eq!(series.review_queue[0].size, 0, "an hour ago nothing waited");

    // resolved: the queue is empty again now
    let in_review = commands[3].payment_attempt_id;
    onecharge::operator::resolve::resolve(
        &h.store,
        None, // the §3 gateway: no PaymentIntent to cancel
        in_review,
        &ResolveRequest {
            as_: ResolveAs::Declined,
            reason: "the gateway refused the request; the customer was not charged".into(),
            gateway_charge_id: None,
            decline_code: None,
        },
        "operator:test",
        Via::Cli,
        &onecharge::operator::RetryWindow::from_settings(&h.settings),
    )
    .await
    .unwrap();
    let after = overview_series(&h.store, HOUR).await.unwrap();
    assert_eq!(after.review_queue.last().unwrap().size, 0);
    let declined: i64 = after
        .settlements
        .iter()
        .filter(|c| c.status == "declined")
        .map(|c| c.count)
        .sum();
    assert_eq!(declined, 2, "the decision is a settlement too");
}
