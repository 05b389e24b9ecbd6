//! The stream audit (issue 25, docs/operations.md §16): a command the command stream holds
//! that intake never recorded nor dead-lettered is found, listed and replayed through
//! intake; a clean stream and a purged dedupe row find nothing.

use std::time::Duration;

use async_nats::jetstream::AckKind;
use onecharge::intake::audit::StreamAudit;
use onecharge::store::findings::stream_audit::open_findings;
use onecharge::store::purge::delete_expired_dedupe_rows;
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::support::env::OPERATOR;
use crate::support::{command, shrink_duplicate_window, Records, TestEnv};

/// Intake settings for these tests: the audit judges a message as soon as intake's ack
/// floor has passed it.
async fn env() -> TestEnv {
    TestEnv::with_settings(|s| s.intake.audit_grace = Duration::ZERO).await
}

fn audit(env: &TestEnv) -> StreamAudit {
    StreamAudit::new(
        env.store.clone(),
        env.broker.clone(),
        &env.settings,
        onecharge::broker::CommandKind::Charge,
    )
}

/// Runs intake until the consumer has nothing pending or unacknowledged.
async fn drain(env: &TestEnv) {
    let intake = env.intake().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        intake
            .process_batch(Duration::from_millis(200))
            .await
            .expect("a batch");
        if env.consumer_backlog().await == (0, 0) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "intake did not drain within 30 s"
        );
    }
}

/// Publishes what a clean stream holds: originals, a producer retry that reaches intake, a
/// business duplicate, a conflict and invalid messages with and without a message id.
/// Returns how many messages it published.
async fn publish_every_kind(env: &TestEnv) -> usize {
    shrink_duplicate_window(&env.broker).await;
    let a = Uuid::new_v4();
    let b = Uuid::new_v4();
    env.publish("a-1", &command(a, json!({}))).await;
    env.publish("b-1", &command(b, json!({}))).await;
    tokio::time::sleep(Duration::from_millis(150)).await; // past the 100 ms window
    env.publish("a-1", &command(a, json!({}))).await; // producer retry
    env.publish("a-2", &command(a, json!({}))).await; // business duplicate
    env.publish("b-2", &command(b, json!({"amount_minor": 5})))
        .await; // conflict
    env.publish_raw(Some("bad-1"), b"{not json").await; // invalid
    env.publish_raw(None, b"{not json either").await; // invalid, no id
    7
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stream_of_every_kind_of_message_has_nothing_unrecorded() {
    let env = env().await;
    let published = publish_every_kind(&env).await;
    drain(&env).await;

    let pass = audit(&env).run_once().await.expect("a pass");
    assert!(pass.ran);
    assert_eq!(pass.checked, published, "{pass:?}");
    assert_eq!(pass.found, Vec::<u64>::new(), "{pass:?}");
    assert_eq!(pass.checked_through, published as u64);
    assert!(open_findings(&env.store, &env.settings.intake.consumer)
        .await
        .unwrap()
        .is_empty());
    // The next pass starts after the watermark: nothing to read again.
    let again = audit(&env).run_once().await.expect("a pass");
    assert_eq!((again.checked, again.found.len()), (0, 0), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_finds_exactly_the_commands_intake_never_recorded_and_a_replay_records_them_once()
{
    let env = env().await;
    publish_every_kind(&env).await;
    drain(&env).await;
    // A record lost after intake acknowledged it (an asynchronous failover): its dedupe row
    // is gone, its attempt stays.
    let lost_record = Uuid::new_v4();
    let lost_record_seq = env
        .publish("lost-record", &command(lost_record, json!({})))
        .await;
    drain(&env).await;
    env.forget_dedupe_row("lost-record").await;
    // A command the consumer acknowledged that intake never saw (what the diverged 2.9
    // replicas did): taken off the intake consumer and acknowledged without recording.
    let never_seen = Uuid::new_v4();
    let never_seen_seq = env
        .publish("never-seen", &command(never_seen, json!({})))
        .await;
    let intake = env.intake().await;
    for message in intake.fetch(Duration::from_secs(2)).await.unwrap() {
        message.ack_with(AckKind::Ack).await.unwrap();
    }
    assert_eq!(env.consumer_backlog().await, (0, 0));
    let attempts_before = env.attempt_rows().await;

    let pass = audit(&env).run_once().await.expect("a pass");
    assert_eq!(
        pass.found,
        vec![lost_record_seq, never_seen_seq],
        "{pass:?}"
    );
    let (code, out, err) = env.cli(&["intake", "audit", "--json"], &[]).await;
    assert_eq!(code, 0, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    let listed: Vec<(u64, String)> = listed["unrecorded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["stream_sequence"].as_u64().unwrap(),
                m["message_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (lost_record_seq, "lost-record".to_owned()),
            (never_seen_seq, "never-seen".to_owned())
        ]
    );
    // A second pass reports nothing new.
    assert!(audit(&env).run_once().await.unwrap().found.is_empty());

    // The replay keeps each message id, so it must come after the (shrunk) duplicate
    // window of the originals; a release build gets here within it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for seq in [lost_record_seq, never_seen_seq] {
        let (code, out, err) = env
            .cli(&["intake", "audit", "--replay", &seq.to_string()], &[])
            .await;
        assert_eq!(code, 0, "{out}{err}");
    }
    drain(&env).await;
    // The attempt that was recorded is not made again; the one never seen is made now.
    assert_eq!(env.attempt_rows().await, attempts_before + 1);
    assert_eq!(env.status(never_seen).await, "pending");
    assert_eq!(
        env.dedupe_result("lost-record").await.as_deref(),
        Some("business_duplicate")
    );
    let pass = audit(&env).run_once().await.expect("a pass");
    assert_eq!(pass.resolved, 2, "{pass:?}");
    assert!(pass.found.is_empty(), "{pass:?}");
    assert!(open_findings(&env.store, &env.settings.intake.consumer)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        env.unrecorded_replayed_by(&format!("operator:{OPERATOR}"))
            .await,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_whose_dedupe_rows_a_purge_may_have_deleted_are_passed_over_never_found() {
    let env = env().await;
    let published = publish_every_kind(&env).await;
    drain(&env).await;
    // Two weeks and a day later the purge has deleted every dedupe row.
    let later =
        OffsetDateTime::now_utc() + env.settings.purge.dedupe_retention + time::Duration::days(1);
    let cutoff = later - env.settings.purge.dedupe_retention;
    delete_expired_dedupe_rows(&env.store, cutoff, 1000)
        .await
        .unwrap();
    assert_eq!(env.dedupe_rows().await, 0);

    let pass = audit(&env).run_once_at(later).await.expect("a pass");
    assert_eq!(pass.found, Vec::<u64>::new(), "{pass:?}");
    assert_eq!(pass.beyond_retention, published, "{pass:?}");
    assert_eq!(pass.checked_through, published as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_passes_of_several_processes_at_once_all_end_without_error() {
    let env = env().await;
    publish_every_kind(&env).await;
    drain(&env).await;
    let passes = futures::future::join_all((0..3).map(|_| {
        let audit = audit(&env);
        async move { audit.run_once().await }
    }))
    .await;
    let ran = passes
        .into_iter()
        .map(|p| p.expect("no pass fails").ran)
        .filter(|&ran| ran)
        .count();
    assert!(ran >= 1);
    assert!(open_findings(&env.store, &env.settings.intake.consumer)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_while_another_holds_the_audit_skips_at_once_instead_of_waiting_for_its_lock() {
    let env = env().await;
    publish_every_kind(&env).await;
    drain(&env).await;
    let consumer = env.settings.intake.consumer.clone();
    // The first pass makes the watermark row; then another process's pass holds it.
    assert!(audit(&env).run_once().await.unwrap().ran);
    let mut other = env.store.pool().begin().await.unwrap();
    let held = onecharge::store::findings::stream_audit::lock_watermark(&mut other, &consumer)
        .await
        .unwrap();
    assert_eq!(held, Some(7));

    let started = std::time::Instant::now();
    let pass = audit(&env)
        .run_once()
        .await
        .expect("a skipped pass is no error");
    assert!(!pass.ran, "{pass:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the pass waited {:?} for the other's lock",
        started.elapsed()
    );
    other.rollback().await.unwrap();
}
