//! Hostile input at intake (issue 52, item 1): a command whose dead letter the dead-letter
//! stream would refuse never holds a delivery slot. One test body, run for every kind of
//! command (charges and refunds), since both consumers settle their deliveries the same way.

use std::time::Duration;

use async_nats::HeaderMap;
use onecharge::broker::CommandKind;
use onecharge::domain::Actor;
use onecharge::intake::audit::StreamAudit;
use onecharge::intake::{DlqClass, Intake};
use serde_json::json;
use uuid::Uuid;

use crate::support::{
    command, commands_stream, edit_stream, header, shrink_duplicate_window, TestEnv,
};

const WAIT: Duration = Duration::from_secs(5);

/// A valid command of `kind` (a refund of an attempt intake does not know yet is valid: it
/// waits for its charge).
fn valid_body(kind: CommandKind) -> Vec<u8> {
    let body = match kind {
        CommandKind::Charge => command(Uuid::new_v4(), json!({})),
        CommandKind::Refund => json!({
            "refund_id": Uuid::new_v4(),
            "payment_attempt_id": Uuid::new_v4(),
            "reason": "item returned",
        }),
    };
    serde_json::to_vec(&body).unwrap()
}

async fn intake_for(env: &TestEnv, kind: CommandKind) -> Intake {
    Intake::for_kind(env.store.clone(), env.broker.clone(), &env.settings, kind)
        .await
        .expect("intake binds its consumer")
}

/// (pending, ack pending) of `kind`'s intake consumer.
async fn backlog(env: &TestEnv, kind: CommandKind) -> (u64, usize) {
    let stream = commands_stream(&env.broker).await;
    let mut consumer: async_nats::jetstream::consumer::PullConsumer = stream
        .get_consumer(&kind.consumer_name(&env.settings.intake))
        .await
        .unwrap();
    let info = consumer.info().await.unwrap();
    (info.num_pending, info.num_ack_pending)
}

/// Runs intake until a batch brings nothing, or for 20 batches (a message that keeps coming
/// back would otherwise keep this going for ever); every batch's report, merged.
async fn drain(intake: &Intake) -> onecharge::intake::BatchReport {
    let mut all = onecharge::intake::BatchReport::default();
    for _ in 0..20 {
        let report = intake
            .process_batch(Duration::from_secs(1))
            .await
            .expect("a batch");
        if report.outcomes.is_empty() {
            break;
        }
        all.outcomes.extend(report.outcomes);
        all.dead_lettered.extend(report.dead_lettered);
        all.dead_letter_refused.extend(report.dead_letter_refused);
    }
    all
}

async fn a_command_the_dead_letter_stream_refuses_is_terminated_kept_and_named(kind: CommandKind) {
    let consumer_prefix = format!("intake-refused-{}", kind.family());
    let env = TestEnv::with_settings(|s| {
        s.intake.consumer = consumer_prefix;
        s.intake.audit_grace = Duration::ZERO;
    })
    .await;
    let consumer = kind.consumer_name(&env.settings.intake);
    let metrics = onecharge::metrics::install();
    let intake = intake_for(&env, kind).await;
    let subject = env.broker.names.command_subject(kind);
    edit_stream(&env.broker, &env.broker.names.dlq_stream(), |config| {
        config.max_message_size = 1024
    })
    .await;

    // What nats.py's `js.publish(..., stream=...)` sends: the producer's expectation of the
    // command stream, which the dead-letter stream would refuse if it were copied.
    let mut expecting = HeaderMap::new();
    expecting.insert("Nats-Msg-Id", "m-expects-stream");
    expecting.insert(
        "Nats-Expected-Stream",
        env.broker.names.commands_stream().as_str(),
    );
    expecting.insert("Correlation-Id", "corr-expecting");
    env.publish_to(subject.clone(), expecting, b"{not json")
        .await;
    // Headers alone larger than the dead-letter stream takes: no cut of the body fits.
    let mut too_many = HeaderMap::new();
    too_many.insert("Nats-Msg-Id", "m-huge-headers");
    too_many.insert("X-Producer-Trace", "t".repeat(2000).as_str());
    let refused_at = env
        .publish_to(subject.clone(), too_many, b"{not json")
        .await;
    // And a valid command behind them, which must not wait on either.
    let mut valid = HeaderMap::new();
    valid.insert("Nats-Msg-Id", "m-valid-after");
    env.publish_to(subject.clone(), valid, &valid_body(kind))
        .await;

    let report = drain(&intake).await;

    assert_eq!(report.count("processed"), 1, "{report:?}");
    assert_eq!(report.dead_lettered, vec![DlqClass::Invalid], "{report:?}");
    assert_eq!(report.dead_letter_refused, vec![refused_at], "{report:?}");
    assert_eq!(
        backlog(&env, kind).await,
        (0, 0),
        "nothing is held: no delivery slot is kept by a command that cannot be dead-lettered"
    );
    let letters = env.dead_letters().await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert_eq!(
        header(letter, "Dlq-Original-Msg-Id").as_deref(),
        Some("m-expects-stream")
    );
    assert_eq!(
        header(letter, "Correlation-Id").as_deref(),
        Some("corr-expecting"),
        "the producer's own headers are kept"
    );
    assert_eq!(
        header(letter, "Nats-Expected-Stream"),
        None,
        "a NATS control header is never copied"
    );
    let counted =
        format!(r#"onecharge_intake_dead_letters_refused_total{{consumer="{consumer}"}} 1"#);
    let rendered = metrics.render();
    assert!(rendered.lines().any(|line| line == counted), "{rendered}");

    // The refused command is still in the command stream, and the stream audit names it
    // under its kind's consumer.
    let audit = StreamAudit::new(env.store.clone(), env.broker.clone(), &env.settings, kind);
    let pass = audit.run_once().await.expect("a pass");
    assert_eq!(pass.found, vec![refused_at], "{pass:?}");
    let findings = audit.open_findings().await.unwrap();
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].consumer, consumer);
    assert_eq!(findings[0].message_id.as_deref(), Some("m-huge-headers"));
}

#[tokio::test]
async fn a_charge_command_the_dead_letter_stream_refuses_is_terminated_kept_and_named() {
    a_command_the_dead_letter_stream_refuses_is_terminated_kept_and_named(CommandKind::Charge)
        .await;
}

#[tokio::test]
async fn a_refund_command_the_dead_letter_stream_refuses_is_terminated_kept_and_named() {
    a_command_the_dead_letter_stream_refuses_is_terminated_kept_and_named(CommandKind::Refund)
        .await;
}

/// The refund consumer's records are audited like the charge consumer's (issue 51, item 6):
/// a RefundPayment JetStream stored but intake never recorded is found and replayed.
#[tokio::test]
async fn a_refund_command_the_stream_holds_but_intake_never_recorded_is_found_and_replayed() {
    let env = TestEnv::with_settings(|s| s.intake.audit_grace = Duration::ZERO).await;
    let intake = intake_for(&env, CommandKind::Refund).await;
    let subject = env.broker.names.command_subject(CommandKind::Refund);
    shrink_duplicate_window(&env.broker).await;
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", "m-refund-lost");
    let body = valid_body(CommandKind::Refund);
    let sequence = env.publish_to(subject, headers, &body).await;
    // Delivered and acknowledged, but never recorded: what a lost record looks like.
    let held = intake.fetch(WAIT).await.unwrap();
    assert_eq!(held.len(), 1);
    held[0].double_ack().await.unwrap();

    let audit = StreamAudit::new(
        env.store.clone(),
        env.broker.clone(),
        &env.settings,
        CommandKind::Refund,
    );
    let pass = audit.run_once().await.expect("a pass");
    assert_eq!(pass.found, vec![sequence], "{pass:?}");
    tokio::time::sleep(Duration::from_millis(150)).await; // past the 100 ms window
    audit
        .replay(sequence, &Actor::operator("test"))
        .await
        .expect("a replay");
    let report = drain(&intake).await;
    assert_eq!(report.count("processed"), 1, "{report:?}");
    let pass = audit.run_once().await.expect("a pass");
    assert_eq!(pass.resolved, 1, "{pass:?}");
    assert!(audit.open_findings().await.unwrap().is_empty());
}
