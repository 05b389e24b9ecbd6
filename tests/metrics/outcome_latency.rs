//! The command-to-outcome latency (decision 149): observed once per published event that
//! announces an attempt's state, from the command's `requested_at` to the publish.

use mock_gateway::payment_methods as pm;
use onecharge::domain::AttemptStatus;
use onecharge::store::intake::IntakeRecord;
use serde_json::json;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use crate::observability::Scrape;
use crate::support::command::refund_record;
use crate::support::refund_roles::RefundRoles;
use crate::support::{command, intake_record, record_batch, Harness};
use crate::RECORDER;
use onecharge::domain::RefundId;
use onecharge::gateway::{GatewayClient, GatewayHealth};
use onecharge::store::refunds::record_refund;

/// A command the gateway declines, which the producer sent at `requested_at`, or without
/// one.
fn declined_command(requested_at: Option<OffsetDateTime>) -> IntakeRecord {
    let attempt = Uuid::new_v4();
    let requested_at = requested_at.map(|at| {
        at.format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    });
    let body = command(
        attempt,
        json!({
            "order_id": format!("ord_{}", &attempt.simple().to_string()[..10]),
            "payment_method": pm::CARD_DECLINED,
            "requested_at": requested_at,
        }),
    );
    intake_record(&body, &format!("msg-{attempt}"), None)
}

#[tokio::test]
async fn published_outcomes_are_timed_from_requested_at_and_a_missing_or_future_one_is_counted() {
    let _recorder = RECORDER.lock().await;
    let mut h = Harness::new().await;
    let now = OffsetDateTime::now_utc();
    let records = vec![
        declined_command(Some(now - Duration::minutes(2))),
        declined_command(Some(now - Duration::minutes(3))),
        // the producer's clock an hour ahead of ours
        declined_command(Some(now + Duration::hours(1))),
        declined_command(None),
    ];
    record_batch(&h.store, "test-intake", &records)
        .await
        .expect("recorded");
    let charged = h.executor().run_once().await.expect("an executor pass");
    assert_eq!(charged.count(AttemptStatus::Declined), 4, "{charged:?}");
    let before = Scrape::now();

    let report = h.relay().await.run_once().await.expect("a relay step");

    assert_eq!((report.claimed, report.published), (4, 4));
    let after = Scrape::now();
    let delta = |name: &str| {
        after.value(name, &[("outcome", "declined")])
            - before.value(name, &[("outcome", "declined")])
    };
    assert_eq!(delta("onecharge_command_to_outcome_seconds_count"), 3.0);
    let sum = delta("onecharge_command_to_outcome_seconds_sum");
    assert!(
        (300.0..360.0).contains(&sum),
        "two commands of 2 and 3 minutes ago and one clamped to 0 sum to about 300 s, not {sum}"
    );
    assert_eq!(delta("onecharge_command_to_outcome_clamped_total"), 1.0);
    assert_eq!(delta("onecharge_command_to_outcome_unmeasured_total"), 1.0);
    let declines =
        |scrape: &Scrape, code: &str| scrape.value("onecharge_declines_total", &[("code", code)]);
    assert_eq!(
        declines(&after, "card_declined") - declines(&before, "card_declined"),
        4.0,
        "each decline counted once, by the gateway's code"
    );
    assert_eq!(declines(&after, "other"), declines(&before, "other"));
    // the events are on the stream, and a second step observes nothing again
    assert_eq!(h.event_messages().await.len(), 4);
    let report = h.relay().await.run_once().await.expect("a relay step");
    assert_eq!(report.claimed, 0);
    let again = Scrape::now();
    assert_eq!(
        again.value(
            "onecharge_command_to_outcome_seconds_count",
            &[("outcome", "declined")]
        ),
        after.value(
            "onecharge_command_to_outcome_seconds_count",
            &[("outcome", "declined")]
        )
    );
}

/// A refund's command-to-outcome latency, beside the charge's (decision 264): observed once
/// when the refund's final event is published, from the RefundPayment's `requested_at`, and
/// not on the charge's histogram.
#[tokio::test]
async fn a_refunds_outcome_is_timed_from_its_own_command_on_its_own_histogram() {
    let _recorder = RECORDER.lock().await;
    let mut h = Harness::new().await;
    let attempt = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    let charged = h.executor().run_once().await.expect("an executor pass");
    assert_eq!(charged.count(AttemptStatus::Succeeded), 1, "{charged:?}");
    h.relay()
        .await
        .run_once()
        .await
        .expect("the charge's event published");

    let mut record = refund_record(RefundId::random(), attempt.into(), Some(500));
    record.command.requested_at = Some(OffsetDateTime::now_utc() - Duration::minutes(2));
    record_refund(&h.store, "test-refund-intake", &record)
        .await
        .expect("recorded");
    let roles = RefundRoles::new(
        h.store.clone(),
        GatewayClient::from_settings(&h.settings).expect("client"),
        GatewayHealth::from_settings(&h.settings.executor),
        &h.settings,
    );
    for _ in 0..3 {
        roles.pass().await.expect("a refund pass");
    }
    let before = Scrape::now();
    let report = h.relay().await.run_once().await.expect("a relay step");
    assert_eq!(report.published, 1, "the refund's final event");
    let after = Scrape::now();

    let refund = |scrape: &Scrape, name: &str| scrape.value(name, &[("outcome", "succeeded")]);
    let delta = |name: &str| refund(&after, name) - refund(&before, name);
    assert_eq!(
        delta("onecharge_refund_command_to_outcome_seconds_count"),
        1.0
    );
    let sum = delta("onecharge_refund_command_to_outcome_seconds_sum");
    assert!((120.0..180.0).contains(&sum), "two minutes, not {sum}");
    assert_eq!(
        after.value(
            "onecharge_command_to_outcome_seconds_count",
            &[("outcome", "succeeded")]
        ),
        before.value(
            "onecharge_command_to_outcome_seconds_count",
            &[("outcome", "succeeded")]
        ),
        "a refund is not a charge's outcome"
    );
}
