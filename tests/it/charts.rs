//! The overview's chart series (`store::reads::charts`) read from the history a real executor
//! writes: each settlement in its bucket by outcome, the charge calls' latency, and the
//! review queue's size and longest wait at each instant, ending at the database's now.

use std::time::Duration;

use crate::support::{Harness, Records};
use mock_gateway::payment_methods as pm;
use onecharge::domain::Actor;
use onecharge::operator::resolve::{ResolveAs, ResolveRequest};
use onecharge::operator::Via;
use onecharge::store::reads::charts::{overview_series, Window};

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
        &Actor::operator("test"),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_success_rate_and_top_decline_codes_count_the_windows_outcomes_on_the_api_and_the_overview(
) {
    use onecharge::store::reads::charts::{outcome_figures, DeclineCodeCount};
    let mut h = Harness::new().await;
    let none = outcome_figures(&h.store, &[Duration::from_secs(3600)])
        .await
        .unwrap();
    assert_eq!(none[0].success_rate, None, "no outcome is no rate, not 0");
    assert_eq!(none[0].success_rate_text(), "none final");

    h.seed_many(&[
        pm::CARD_VISA,
        pm::CARD_VISA,
        pm::INSUFFICIENT_FUNDS,
        pm::INSUFFICIENT_FUNDS,
        pm::CARD_DECLINED,
        pm::FAULT_BAD_REQUEST,
    ])
    .await;
    h.seed_expired(1).await;
    h.executor().run_once().await.unwrap();

    let figures = outcome_figures(
        &h.store,
        &[Duration::from_secs(3600), Duration::from_secs(86400)],
    )
    .await
    .unwrap();
    for window in &figures {
        assert_eq!(
            (window.succeeded, window.declined, window.expired),
            (2, 3, 1),
            "the one in review is no outcome yet"
        );
        assert_eq!(window.success_rate, Some(2.0 / 6.0));
        assert_eq!(
            window.top_decline_codes,
            vec![
                DeclineCodeCount {
                    decline_code: Some("insufficient_funds".into()),
                    count: 2
                },
                DeclineCodeCount {
                    decline_code: Some("card_declined".into()),
                    count: 1
                },
            ]
        );
    }
    assert_eq!(figures[0].success_rate_text(), "33.3% (2 of 6)");
    assert_eq!(
        (figures[0].window_seconds, figures[1].window_seconds),
        (3600, 86400)
    );

    let admin = h.serve_admin(None, None).await;
    let addr = admin.addr;
    let stats: serde_json::Value = reqwest::get(format!("http://{addr}/api/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for window in ["outcomes_last_hour", "outcomes_last_24h"] {
        let o = &stats[window];
        assert_eq!(o["succeeded"], 2, "{stats}");
        assert_eq!(o["declined"], 3);
        assert_eq!(o["expired"], 1);
        assert!((o["success_rate"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(
            o["top_decline_codes"][0]["decline_code"],
            "insufficient_funds"
        );
        assert_eq!(o["top_decline_codes"][0]["count"], 2);
    }
    let page = reqwest::get(format!("http://{addr}/console/"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains(r#"id="success-rate""#), "{page}");
    assert!(page.contains("33.3% (2 of 6)"), "{page}");
    assert!(page.contains("succeeded ÷ (succeeded + declined + expired)"));
    assert!(page.contains(r#"id="top-declines-1h""#));
    assert!(page.contains("<code>insufficient_funds</code>"), "{page}");
    admin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outcome_figures_read_the_window_by_the_time_index_not_a_scan() {
    let h = Harness::new().await;
    let plan = h
        .plan_without_seq_scans(
            "SELECT a.decline_code, count(*) FROM attempt_transitions t
         JOIN payment_attempts a ON a.payment_attempt_id = t.payment_attempt_id
         WHERE t.at > now() - interval '1 hour' AND t.at <= now() AND t.to_status = 'declined'
         GROUP BY a.decline_code",
        )
        .await;
    // the BRIN index on `at` (declared on the parent, one per month partition)
    assert!(
        plan.contains("Bitmap Index Scan on attempt_transitions"),
        "{plan}"
    );
    assert!(!plan.contains("Seq Scan"), "{plan}");
}
