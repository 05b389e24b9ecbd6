//! The canonical failure scenarios of the idempotent consumer, against real PostgreSQL and
//! real NATS. Each test asserts rows and broker state, not just "no error".

use std::time::Duration;

use crate::support::privileges::RestrictedRole;
use crate::support::record_batch;
use crate::support::{
    command, commands_stream, edit_stream, eventually, header, intake_record,
    shrink_duplicate_window, Records, TestEnv,
};
use onecharge::intake::{DeliveryOutcome, DlqClass, Intake};
use onecharge::store::intake::IntakeRecord;
use serde_json::json;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_valid_command_becomes_one_pending_attempt_and_is_acknowledged() {
    let env = TestEnv::new().await;
    let intake = env.intake().await;
    let attempt = env.publish_new("m-1").await;

    let report = intake.process_batch(WAIT).await.unwrap();

    assert_eq!(report.outcomes, vec![DeliveryOutcome::Processed]);
    let row = env.attempt(attempt).await;
    assert_eq!(row.status, "pending");
    assert_eq!(row.idempotency_key, format!("onecharge-{attempt}"));
    assert_eq!(row.correlation_id.as_deref(), Some("corr-test"));
    assert_eq!(env.dedupe_result("m-1").await.as_deref(), Some("accepted"));
    let accepted = env.all_transitions().await;
    let accepted = accepted
        .iter()
        .filter(|t| t.to_status == "pending" && t.cause == "command_accepted");
    assert_eq!(accepted.count(), 1);
    assert_eq!(env.consumer_backlog().await, (0, 0));
}

#[tokio::test]
async fn the_same_message_in_the_hands_of_two_instances_records_one_attempt_and_settles_both() {
    let env = TestEnv::new().await;
    let first = env.intake().await;
    let second = env.intake().await;
    env.publish_new("m-twice").await;

    // The first instance takes the message and stalls past the ack wait…
    let held = first.fetch(WAIT).await.unwrap();
    assert_eq!(held.len(), 1);
    // …so the broker redelivers it to the second one while the first still has it.
    let redelivered = second.fetch(Duration::from_secs(10)).await.unwrap();
    assert_eq!(redelivered.len(), 1);
    assert_eq!(redelivered[0].info().unwrap().delivered, 2);

    let (a, b) = tokio::join!(first.handle(held), second.handle(redelivered));

    let mut outcomes = vec![a.outcomes[0].clone(), b.outcomes[0].clone()];
    outcomes.sort_by_key(|o| o.label());
    assert_eq!(
        outcomes,
        vec![DeliveryOutcome::Duplicate, DeliveryOutcome::Processed]
    );
    assert_eq!(env.attempt_rows().await, 1);
    assert_eq!(env.dedupe_rows().await, 1);
    assert_eq!(env.consumer_backlog().await, (0, 0));
}

#[tokio::test]
async fn racing_transactions_for_one_message_are_decided_by_the_unique_key() {
    let env = TestEnv::new().await;
    let intake = env.intake().await;
    for i in 0..20 {
        env.publish_new(&format!("race-{i}")).await;
    }
    let messages = intake.fetch(WAIT).await.unwrap();
    assert_eq!(messages.len(), 20);

    // Two instances record the very same deliveries at the same time.
    let (a, b) = tokio::join!(intake.record(&messages), intake.record(&messages));

    for (x, y) in a.iter().zip(&b) {
        let mut pair = [x.label(), y.label()];
        pair.sort();
        assert_eq!(pair, ["duplicate", "processed"]);
    }
    assert_eq!(env.attempt_rows().await, 20);
    assert_eq!(env.dedupe_rows().await, 20);
}

#[tokio::test]
async fn redelivery_after_commit_without_ack_is_a_duplicate_and_records_nothing_new() {
    let env = TestEnv::new().await;
    let crashed = env.intake().await;
    env.publish_new("m-crash").await;

    // Commit, then "crash" before the ack: the messages are dropped unsettled.
    let messages = crashed.fetch(WAIT).await.unwrap();
    assert_eq!(
        crashed.record(&messages).await,
        vec![DeliveryOutcome::Processed]
    );
    drop(messages);
    drop(crashed);

    let restarted = env.intake().await;
    let report = restarted
        .process_batch(Duration::from_secs(10))
        .await
        .unwrap();

    assert_eq!(report.outcomes, vec![DeliveryOutcome::Duplicate]);
    assert_eq!(env.attempt_rows().await, 1);
    assert_eq!(env.dedupe_rows().await, 1);
    assert_eq!(env.all_transitions().await.len(), 1);
    assert_eq!(env.consumer_backlog().await, (0, 0));
}

#[tokio::test]
async fn a_rolled_back_transaction_leaves_no_dedupe_row_and_the_redelivery_is_processed() {
    let env = TestEnv::new().await;
    let intake = env.intake().await;
    // A failure injected after the dedupe insert, inside the same transaction.
    env.refuse_attempts("true", "serialization_failure").await;
    env.publish_new("m-rollback").await;

    let first = intake.process_batch(WAIT).await.unwrap();
    assert_eq!(first.outcomes.len(), 1);
    assert_eq!(first.outcomes[0].label(), "transient");
    assert_eq!(env.dedupe_rows().await, 0);
    assert_eq!(env.attempt_rows().await, 0);

    env.accept_attempts().await;
    let second = intake.process_batch(WAIT).await.unwrap();

    assert_eq!(second.outcomes, vec![DeliveryOutcome::Processed]);
    assert!(env.dedupe_row("m-rollback").await.is_some());
    assert_eq!(env.attempt_rows().await, 1);
    assert!(env.dead_letters().await.is_empty());
}

#[tokio::test]
async fn one_message_the_database_rejects_does_not_poison_its_batch() {
    let env = TestEnv::new().await;
    let intake = env.intake().await;
    env.refuse_attempts("NEW.order_id = 'ord_poison'", "check_violation")
        .await;
    env.publish_new("good-1").await;
    env.publish(
        "poison",
        &command(Uuid::new_v4(), json!({"order_id": "ord_poison"})),
    )
    .await;
    env.publish_new("good-2").await;

    let report = intake.process_batch(WAIT).await.unwrap();

    assert_eq!(report.count("processed"), 2);
    assert_eq!(report.count("permanent"), 1);
    assert_eq!(env.attempt_rows().await, 2);
    assert!(env.dedupe_row("poison").await.is_none());
    let dlq = env.dead_letters().await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(
        header(&dlq[0], "Dlq-Original-Msg-Id").as_deref(),
        Some("poison")
    );
    assert!(header(&dlq[0], "Dlq-Reason")
        .unwrap()
        .contains("rejected by the database"));
}

#[tokio::test]
async fn every_kind_of_invalid_input_is_dead_lettered_with_its_reason_and_writes_no_row() {
    let env = TestEnv::new().await;
    let intake = env.intake().await;
    let a = Uuid::new_v4();
    let cases: Vec<(Option<&str>, Vec<u8>, &str)> = vec![
        (
            Some("bad-json"),
            b"{not json".to_vec(),
            "not a valid ChargePayment JSON",
        ),
        (
            Some("missing-field"),
            serde_json::to_vec(&command(a, json!({"customer_id": null}))).unwrap(),
            "missing field `customer_id`",
        ),
        (
            Some("wrong-type"),
            serde_json::to_vec(&command(a, json!({"amount_minor": "19.99"}))).unwrap(),
            "invalid type",
        ),
        (
            Some("zero"),
            serde_json::to_vec(&command(a, json!({"amount_minor": 0}))).unwrap(),
            "amount_minor",
        ),
        (
            Some("negative"),
            serde_json::to_vec(&command(a, json!({"amount_minor": -1}))).unwrap(),
            "amount_minor",
        ),
        (
            Some("too-big"),
            serde_json::to_vec(&command(a, json!({"amount_minor": 1_000_000_000_001i64}))).unwrap(),
            "amount_minor",
        ),
        (
            Some("currency"),
            serde_json::to_vec(&command(a, json!({"currency": "ABC"}))).unwrap(),
            "currency",
        ),
        (
            Some("oversized"),
            serde_json::to_vec(&command(a, json!({"padding": "x".repeat(70_000)}))).unwrap(),
            "bytes",
        ),
        (
            None,
            serde_json::to_vec(&command(a, json!({}))).unwrap(),
            "missing Nats-Msg-Id",
        ),
    ];
    let mut sequences = Vec::new();
    for (id, body, _) in &cases {
        sequences.push(env.publish_raw(*id, body).await);
    }

    let report = intake.process_batch(WAIT).await.unwrap();

    assert_eq!(report.count("permanent"), cases.len());
    assert_eq!(report.dead_lettered, vec![DlqClass::Invalid; cases.len()]);
    let dlq = env.dead_letters().await;
    assert_eq!(dlq.len(), cases.len());
    for ((id, body, reason), seq) in cases.iter().zip(&sequences) {
        let letter = dlq
            .iter()
            .find(|m| header(m, "Dlq-Stream-Sequence") == Some(seq.to_string()))
            .unwrap_or_else(|| panic!("no dead letter for {id:?}"));
        assert_eq!(header(letter, "Dlq-Class").as_deref(), Some("invalid"));
        let got = header(letter, "Dlq-Reason").unwrap();
        assert!(got.contains(reason), "{id:?}: {got}");
        assert!(got.chars().count() <= 512);
        assert_eq!(
            letter.payload.as_ref(),
            body.as_slice(),
            "the original body, unchanged"
        );
        assert_eq!(
            header(letter, "Nats-Msg-Id"),
            Some(format!("dlq-onecharge-intake-{seq}"))
        );
        assert_eq!(header(letter, "Dlq-Original-Msg-Id").as_deref(), *id);
        assert_eq!(
            header(letter, "Dlq-Consumer").as_deref(),
            Some("onecharge-intake")
        );
        assert_eq!(header(letter, "Dlq-Delivery-Count").as_deref(), Some("1"));
        assert_eq!(
            header(letter, "Correlation-Id").as_deref(),
            Some("corr-test")
        );
        assert!(header(letter, "Dlq-Original-Subject")
            .unwrap()
            .ends_with("payments.commands.charge-payment.v1"));
    }
    assert_eq!(env.dedupe_rows().await, 0);
    assert_eq!(env.attempt_rows().await, 0);
    assert_eq!(env.consumer_backlog().await, (0, 0));
}

#[tokio::test]
async fn a_business_duplicate_is_one_attempt_and_conflicting_parameters_are_dead_lettered() {
    let env = TestEnv::new().await;
    let intake = env.intake().await;
    let attempt = env.publish_new("first").await;
    env.publish(
        "retry-new-id",
        &command(attempt, json!({"description": "same charge, new words"})),
    )
    .await;
    env.publish("conflict", &command(attempt, json!({"amount_minor": 5000})))
        .await;

    let report = intake.process_batch(WAIT).await.unwrap();

    assert_eq!(report.outcomes[0], DeliveryOutcome::Processed);
    assert_eq!(report.outcomes[1], DeliveryOutcome::BusinessDuplicate);
    assert_eq!(report.outcomes[2].label(), "conflict");
    assert_eq!(report.dead_lettered, vec![DlqClass::Conflict]);
    assert_eq!(env.attempt(attempt).await.amount_minor, 1999);
    assert_eq!(env.attempt_rows().await, 1);
    assert_eq!(
        env.dedupe_result("retry-new-id").await.as_deref(),
        Some("business_duplicate")
    );
    assert!(env.dedupe_row("conflict").await.is_none());
    let dlq = env.dead_letters().await;
    assert_eq!(header(&dlq[0], "Dlq-Class").as_deref(), Some("conflict"));
    assert!(header(&dlq[0], "Dlq-Reason")
        .unwrap()
        .contains("different parameters"));

    // The conflicting command arriving again later is still a conflict, not a charge.
    env.publish(
        "conflict-again",
        &command(attempt, json!({"currency": "USD"})),
    )
    .await;
    let later = intake.process_batch(WAIT).await.unwrap();
    assert_eq!(later.dead_lettered, vec![DlqClass::Conflict]);
    assert_eq!(env.attempt_rows().await, 1);
}

#[tokio::test]
async fn a_reused_message_id_with_a_different_body_is_dead_lettered_and_never_charged_twice() {
    let env = TestEnv::new().await;
    shrink_duplicate_window(&env.broker).await;
    let intake = env.intake().await;
    let first = Uuid::new_v4();
    env.publish("reused", &command(first, json!({}))).await;
    assert_eq!(
        intake.process_batch(WAIT).await.unwrap().outcomes,
        vec![DeliveryOutcome::Processed]
    );

    let mut reused = None;
    // Outside the duplicate window the broker stores the message again.
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", "reused");
        let body = serde_json::to_vec(&command(Uuid::new_v4(), json!({}))).unwrap();
        let ack = env
            .broker
            .jetstream
            .publish_with_headers(env.broker.names.charge_subject(), headers, body.into())
            .await
            .unwrap()
            .await
            .unwrap();
        if !ack.duplicate {
            reused = Some(ack.sequence);
            break;
        }
    }
    assert!(reused.is_some(), "the broker never accepted the reused id");
    let report = intake.process_batch(WAIT).await.unwrap();

    assert_eq!(report.dead_lettered, vec![DlqClass::Conflict]);
    let dlq = env.dead_letters().await;
    assert!(header(&dlq[0], "Dlq-Reason")
        .unwrap()
        .contains("different body"));
    assert_eq!(env.attempt_rows().await, 1);
    assert_eq!(env.dedupe_rows().await, 1);
}

#[tokio::test]
async fn while_the_database_is_down_messages_are_nakd_and_processed_once_it_is_back() {
    let env = TestEnv::with_settings(|s| s.intake.max_deliver = 5).await;
    let intake = env.intake().await;
    env.publish_new("m-outage").await;
    env.stop_database().await;

    let during = intake.process_batch(WAIT).await.unwrap();
    assert_eq!(during.count("transient"), 1, "{during:?}");
    let again = intake.process_batch(WAIT).await.unwrap();
    assert_eq!(
        again.count("transient"),
        1,
        "redelivered after the Nak delay: {again:?}"
    );
    assert!(again.dead_lettered.is_empty());

    env.start_database().await;
    let after = intake.process_batch(WAIT).await.unwrap();

    assert_eq!(after.outcomes, vec![DeliveryOutcome::Processed]);
    assert_eq!(env.attempt_rows().await, 1);
    assert!(env.dead_letters().await.is_empty());
    assert_eq!(env.consumer_backlog().await, (0, 0));
}

#[tokio::test]
async fn the_last_allowed_delivery_of_a_transient_failure_is_dead_lettered_as_exhausted() {
    let env = TestEnv::new().await; // max_deliver = 3
    let intake = env.intake().await;
    env.publish_new("m-exhaust").await;
    env.stop_database().await;

    let mut reports = Vec::new();
    for _ in 0..3 {
        reports.push(intake.process_batch(WAIT).await.unwrap());
    }
    env.start_database().await;

    assert!(reports[..2]
        .iter()
        .all(|r| r.count("transient") == 1 && r.dead_lettered.is_empty()));
    assert_eq!(reports[2].dead_lettered, vec![DlqClass::Exhausted]);
    let dlq = env.dead_letters().await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(header(&dlq[0], "Dlq-Delivery-Count").as_deref(), Some("3"));
    assert!(header(&dlq[0], "Dlq-Reason")
        .unwrap()
        .contains("database unavailable"));
    assert_eq!(env.dedupe_rows().await, 0);
    assert_eq!(env.consumer_backlog().await, (0, 0));
}

#[tokio::test]
async fn a_stale_command_is_recorded_expired_with_its_event_and_never_charged() {
    let env = TestEnv::new().await;
    let intake = env.intake().await;
    let attempt = Uuid::new_v4();
    env.publish(
        "m-old",
        &command(attempt, json!({"requested_at": "2020-01-01T00:00:00Z"})),
    )
    .await;

    let report = intake.process_batch(WAIT).await.unwrap();

    assert_eq!(report.outcomes, vec![DeliveryOutcome::Stale]);
    let row = env.attempt(attempt).await;
    assert_eq!((row.status.as_str(), row.tries), ("expired", 0));
    assert_eq!(row.dispatched_at, None, "never sent");
    let dedupe = env.processed_messages().await;
    assert_eq!(dedupe.iter().filter(|r| r.result == "stale").count(), 1);
    let transitions = env.all_transitions().await;
    let expired = transitions
        .iter()
        .filter(|t| t.to_status == "expired" && t.cause == "stale_command");
    assert_eq!(expired.count(), 1);
    let outbox = env.outbox().await;
    let announced = outbox.iter().filter(|e| {
        e.status == "expired"
            && e.subject == "payments.events.payment-expired.v1"
            && e.headers["Causation-Id"] == "m-old"
    });
    assert_eq!(announced.count(), 1);
    assert!(env.dead_letters().await.is_empty());
}

#[tokio::test]
async fn the_serve_loop_records_a_burst_and_drains_on_shutdown() {
    let env = TestEnv::with_settings(|s| s.intake.batch_size = 16).await;
    let intake = env.intake().await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(intake.run(shutdown.clone()));
    for i in 0..100 {
        env.publish_new(&format!("burst-{i}")).await;
    }
    eventually(
        "intake records the burst",
        Duration::from_secs(20),
        || async { env.dedupe_rows().await >= 100 },
    )
    .await;
    shutdown.cancel();
    running.await.unwrap().unwrap();

    assert_eq!(env.attempt_rows().await, 100);
    eventually(
        "the acks reach the broker",
        Duration::from_secs(5),
        || async { env.consumer_backlog().await == (0, 0) },
    )
    .await;
}

#[tokio::test]
async fn a_broken_deployment_is_retried_and_never_dead_letters_valid_commands_as_invalid() {
    let env = TestEnv::with_settings(|s| s.intake.max_deliver = 5).await;
    let intake = env.intake().await;
    env.publish_new("m-deploy-1").await;
    env.publish_new("m-deploy-2").await;
    // A migration gone wrong: the table intake writes to is not there (SQLSTATE 42P01).
    env.rename_table("payment_attempts", "payment_attempts_moved")
        .await;

    let during = intake.process_batch(WAIT).await.unwrap();

    assert_eq!(during.count("transient"), 2, "{during:?}");
    assert!(during.dead_lettered.is_empty(), "{during:?}");
    assert!(env.dead_letters().await.is_empty());

    env.rename_table("payment_attempts_moved", "payment_attempts")
        .await;
    let mut processed = 0;
    while processed < 2 {
        let after = intake.process_batch(WAIT).await.unwrap();
        assert!(!after.outcomes.is_empty(), "both messages come back");
        processed += after.count("processed");
    }
    assert_eq!(env.attempt_rows().await, 2);
    assert!(env.dead_letters().await.is_empty());
}

#[tokio::test]
async fn a_permission_the_deployment_lacks_is_retried_not_blamed_on_the_message() {
    let env = TestEnv::with_settings(|s| s.intake.max_deliver = 5).await;
    // intake runs as a role that lost INSERT on payment_attempts (SQLSTATE 42501)
    let role = RestrictedRole::create(&env, "INSERT ON payment_attempts").await;
    let restricted = onecharge::store::Store::connect(&role.url(&env.settings.database_url), 2)
        .await
        .unwrap();
    let intake =
        onecharge::intake::Intake::new(restricted.clone(), env.broker.clone(), &env.settings)
            .await
            .unwrap();
    env.publish_new("m-perm").await;

    let during = intake.process_batch(WAIT).await.unwrap();

    assert_eq!(during.count("transient"), 1, "{during:?}");
    assert!(env.dead_letters().await.is_empty());
    role.give_back(&env).await;
    let after = intake.process_batch(WAIT).await.unwrap();
    assert_eq!(after.outcomes, vec![DeliveryOutcome::Processed]);
    assert_eq!(env.attempt_rows().await, 1);
    restricted.pool().close().await;
    role.drop_role(&env).await;
}

#[tokio::test]
async fn a_dead_letter_that_cannot_be_stored_on_the_last_delivery_is_kept_until_it_is() {
    let env = TestEnv::new().await; // max_deliver = 3
    let intake = env.intake().await;
    env.publish_new("m-keep").await;
    env.stop_database().await;
    // The dead-letter stream is gone: every dead-letter publish fails.
    env.delete_dead_letter_stream().await;

    for delivery in 1..=3 {
        let report = intake.process_batch(WAIT).await.unwrap();
        assert_eq!(
            report.count("transient"),
            1,
            "delivery {delivery}: {report:?}"
        );
        assert!(report.dead_lettered.is_empty(), "{report:?}");
    }
    env.broker.ensure_streams().await.unwrap();

    // The message was not given up on: it comes back and is dead-lettered as exhausted.
    let report = intake.process_batch(WAIT).await.unwrap();
    env.start_database().await;
    assert_eq!(
        report.dead_lettered,
        vec![DlqClass::Exhausted],
        "{report:?}"
    );
    let dlq = env.dead_letters().await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(header(&dlq[0], "Dlq-Delivery-Count").as_deref(), Some("4"));
    assert_eq!(env.consumer_backlog().await, (0, 0));
    assert_eq!(env.attempt_rows().await, 0);
}

#[tokio::test]
async fn the_consumers_real_max_deliver_decides_the_last_delivery_not_the_setting() {
    let env = TestEnv::with_settings(|s| s.intake.max_deliver = 10).await;
    let intake = env.intake().await;
    // An operator lowered the consumer's own limit to 2 after intake bound to it.
    set_consumer_max_deliver(&env, &intake, 2).await;
    env.publish_new("m-real-limit").await;
    env.stop_database().await;

    let first = intake.process_batch(WAIT).await.unwrap();
    let second = intake.process_batch(WAIT).await.unwrap();
    env.start_database().await;

    assert!(first.dead_lettered.is_empty(), "{first:?}");
    assert_eq!(
        second.dead_lettered,
        vec![DlqClass::Exhausted],
        "{second:?}"
    );
    assert_eq!(env.dead_letters().await.len(), 1);
    assert_eq!(env.consumer_backlog().await, (0, 0));
}

#[tokio::test]
async fn a_dead_letter_too_large_for_the_dead_letter_stream_is_stored_truncated_never_dropped() {
    let env = TestEnv::new().await;
    let intake = env.intake().await;
    edit_stream(&env.broker, &env.broker.names.dlq_stream(), |config| {
        config.max_message_size = 1024
    })
    .await;
    // Invalid (description over 500 characters) and larger than the dead-letter stream takes.
    let body = serde_json::to_vec(&command(
        Uuid::new_v4(),
        json!({"description": "x".repeat(3000)}),
    ))
    .unwrap();
    env.publish_raw(Some("m-too-big"), &body).await;

    let report = intake.process_batch(WAIT).await.unwrap();

    assert_eq!(report.dead_lettered, vec![DlqClass::Invalid], "{report:?}");
    let letters = env.dead_letters().await;
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!(header(letter, "Dlq-Truncated").as_deref(), Some("true"));
    assert_eq!(
        header(letter, "Dlq-Original-Size"),
        Some(body.len().to_string())
    );
    assert_eq!(
        header(letter, "Dlq-Original-Msg-Id").as_deref(),
        Some("m-too-big")
    );
    assert!(header(letter, "Dlq-Reason")
        .unwrap()
        .contains("description"));
    assert!(!letter.payload.is_empty() && letter.payload.len() < 1024);
    assert!(
        body.starts_with(&letter.payload),
        "the kept part is the body's beginning"
    );
    assert_eq!(env.consumer_backlog().await, (0, 0));
}

#[tokio::test]
async fn a_command_an_operator_set_limit_ends_without_a_dead_letter_is_counted_as_lost() {
    let env = TestEnv::with_settings(|s| s.intake.consumer = "intake-lost-count".into()).await;
    let metrics = onecharge::metrics::install();
    let intake = env.intake().await;
    set_consumer_max_deliver(&env, &intake, 2).await;
    env.publish_new("m-lost").await;
    env.stop_database().await;
    env.delete_dead_letter_stream().await;

    let first = intake.process_batch(WAIT).await.unwrap();
    let last = intake.process_batch(WAIT).await.unwrap();
    env.start_database().await;

    assert_eq!(first.count("transient"), 1, "{first:?}");
    assert_eq!(last.count("transient"), 1, "{last:?}");
    assert!(last.dead_lettered.is_empty());
    let rendered = metrics.render();
    assert!(
        rendered.lines().any(|line| line
            == r#"onecharge_intake_messages_lost_total{consumer="intake-lost-count",reason="dead_letter_failed_on_last_delivery"} 1"#),
        "{rendered}"
    );
    assert_eq!(env.attempt_rows().await, 0);
}

#[tokio::test]
async fn a_process_that_dies_holding_the_last_allowed_delivery_loses_nothing() {
    let env = TestEnv::new().await; // max_deliver = 3, ack_wait = 2 s
    let intake = env.intake().await;
    let attempt = env.publish_new("m-last-crash").await;
    env.stop_database().await;
    for _ in 0..2 {
        let report = intake.process_batch(WAIT).await.unwrap();
        assert_eq!(report.count("transient"), 1, "{report:?}");
    }
    env.start_database().await;

    // The third (last allowed) delivery is taken by a process that dies before settling it.
    let held = intake.fetch(WAIT).await.unwrap();
    assert_eq!(held[0].info().unwrap().delivered, 3);
    drop(held);

    let report = intake.process_batch(Duration::from_secs(10)).await.unwrap();
    assert_eq!(report.outcomes, vec![DeliveryOutcome::Processed]);
    assert!(env.attempt_exists(attempt).await);
    assert_eq!(env.consumer_backlog().await, (0, 0));
}

/// What an operator does by hand: sets the durable consumer's own `max_deliver`, after
/// `intake` bound to it; then `intake` rereads its limits, as it does periodically.
async fn set_consumer_max_deliver(env: &TestEnv, intake: &Intake, max_deliver: i64) {
    let stream = commands_stream(&env.broker).await;
    let mut config = stream
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>(
            &env.settings.intake.consumer,
        )
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    config.max_deliver = max_deliver;
    stream.update_consumer(config).await.unwrap();
    intake.refresh_consumer_limits().await.unwrap();
}

/// A business duplicate published right behind its original, and the original redelivered
/// to another instance, race to insert the same attempt in three transactions at once. The
/// database must decide every race as one attempt and two duplicates: a unique violation
/// that escaped `record_batch` (a key other than the two it records again on, decision 201)
/// would fail the batch, and intake would dead-letter a valid duplicate. Thousands of races,
/// four lanes at a time, so that the transactions really meet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_inserts_racing_in_concurrent_batches_are_always_one_attempt_and_duplicates() {
    const RACES: usize = 3_000;
    const LANES: usize = 4;
    let env = TestEnv::new().await;
    let store = onecharge::store::Store::connect(&env.settings.database_url, 3 * LANES as u32)
        .await
        .unwrap();
    let mut lanes = tokio::task::JoinSet::new();
    for _ in 0..LANES {
        let store = store.clone();
        lanes.spawn(async move {
            let mut wrong = Vec::new();
            for _ in 0..RACES / LANES {
                let attempt = Uuid::new_v4();
                let body = command(attempt, json!({}));
                let original = intake_record(&body, &format!("m-{attempt}"), None);
                let business = intake_record(&body, &format!("m-{attempt}-again"), None);
                let record = |r: IntakeRecord| {
                    let store = store.clone();
                    async move { record_batch(&store, "onecharge-intake", &[r]).await }
                };
                let (a, b, c) =
                    tokio::join!(record(original.clone()), record(business), record(original));
                let mut outcomes: Vec<String> = [a, b, c]
                    .into_iter()
                    .map(|r| match r {
                        Ok(outcome) => format!("{:?}", outcome[0]),
                        Err(err) => format!("error: {err}"),
                    })
                    .collect();
                outcomes.sort();
                if outcomes != ["Accepted", "BusinessDuplicate", "Duplicate"] {
                    wrong.push((attempt, outcomes));
                }
            }
            wrong
        });
    }
    let mut wrong = Vec::new();
    while let Some(lane) = lanes.join_next().await {
        wrong.extend(lane.unwrap());
    }

    assert!(
        wrong.is_empty(),
        "{} of {RACES} races were not one attempt and two duplicates, e.g. {:?}",
        wrong.len(),
        wrong.first()
    );
    assert_eq!(env.attempt_rows().await, RACES as i64);
    assert_eq!(env.dedupe_rows().await, 2 * RACES as i64);
}
