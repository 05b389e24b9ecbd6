//! The intake consumer's lag on `/metrics`, read from JetStream consumer info by the
//! gauges refresher.

use std::time::Duration;

use crate::support::{self, TestEnv};
use async_nats::jetstream::consumer::PullConsumer;
use futures::StreamExt as _;
use onecharge::broker::ConsumerLag;
use onecharge::gauges::DatabaseGaugesRefresher;
use uuid::Uuid;

/// The value of `name{consumer="<consumer>"}` in a Prometheus text rendering.
fn gauge(rendered: &str, name: &str, consumer: &str) -> Option<f64> {
    let prefix = format!("{name}{{consumer=\"{consumer}\"}} ");
    rendered
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.trim().parse().unwrap())
}

/// The (pending, ack pending) lag gauges of `consumer` in a Prometheus text rendering.
fn lag_gauges(rendered: &str, consumer: &str) -> (Option<f64>, Option<f64>) {
    (
        gauge(rendered, "onecharge_intake_consumer_pending", consumer),
        gauge(rendered, "onecharge_intake_consumer_ack_pending", consumer),
    )
}

#[tokio::test]
async fn the_consumer_lag_gauges_count_published_but_unsettled_commands_at_refresh_time() {
    let _recorder = crate::RECORDER.lock().await;
    let env = TestEnv::new().await;
    let handle = onecharge::metrics::install();
    let consumer_name = env.settings.intake.consumer.clone();
    let consumer: PullConsumer = env
        .broker
        .ensure_intake_consumer(&env.settings)
        .await
        .unwrap();
    for _ in 0..3 {
        env.publish(
            &format!("m-{}", Uuid::new_v4()),
            &support::command(Uuid::new_v4(), serde_json::json!({})),
        )
        .await;
    }
    let refresher = DatabaseGaugesRefresher::new(env.store.clone())
        .with_intake_consumer(env.broker.clone(), consumer_name.clone());

    let lag = refresher.refresh_consumer_lag().await.unwrap();
    assert_eq!(
        lag,
        Some(ConsumerLag {
            pending: 3,
            ack_pending: 0
        })
    );
    let rendered = handle.render();
    assert_eq!(
        lag_gauges(&rendered, &consumer_name),
        (Some(3.0), Some(0.0)),
        "{rendered}"
    );

    // One delivered and not yet acknowledged: it moves from pending to ack pending.
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .unwrap();
    let _in_hand = batch.next().await.expect("one message").unwrap();
    refresher.refresh_consumer_lag().await.unwrap();
    let rendered = handle.render();
    assert_eq!(
        lag_gauges(&rendered, &consumer_name),
        (Some(2.0), Some(1.0)),
        "{rendered}"
    );

    // A consumer that cannot be read is an error to log, and leaves the gauges as they were.
    let missing = DatabaseGaugesRefresher::new(env.store.clone())
        .with_intake_consumer(env.broker.clone(), "nobody-reads-this");
    assert!(missing.refresh_consumer_lag().await.is_err());
    assert_eq!(lag_gauges(&handle.render(), &consumer_name).0, Some(2.0));
}

#[tokio::test]
async fn without_a_broker_the_refresher_reports_no_lag() {
    let env = TestEnv::new().await;
    let refresher = DatabaseGaugesRefresher::new(env.store.clone());
    assert_eq!(refresher.refresh_consumer_lag().await.unwrap(), None);
}
