//! The outbox relay against real PostgreSQL and NATS JetStream, and the whole pipeline
//! (intake → executor → relay) against the mock gateway.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::support::nats::stream_messages;
use crate::support::{eventually, take_in, Harness, Records, Served};
use mock_gateway::payment_methods as pm;
use onecharge::broker::publish::{publish_charge, ChargeArgs};
use onecharge::domain::PaymentEvent;
use onecharge::intake::Intake;
use onecharge::store::relay::claim_unpublished;
use uuid::Uuid;

fn header(message: &async_nats::jetstream::message::StreamMessage, name: &str) -> Option<String> {
    message.headers.get(name).map(|v| v.as_str().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_publishes_each_event_under_its_event_id_and_marks_it_published() {
    let mut h = Harness::new().await;
    let records = h.seed_expired(3).await;
    let relay = h.relay().await;

    let report = relay.run_once().await.unwrap();
    assert_eq!(
        (
            report.claimed,
            report.published,
            report.duplicates,
            report.failed
        ),
        (3, 3, 0, 0)
    );
    assert_eq!(h.unpublished_events().await, 0);
    assert_eq!(
        h.outbox()
            .await
            .iter()
            .filter(|e| e.publish_attempts == 1)
            .count(),
        3
    );

    let messages = h.event_messages().await;
    assert_eq!(messages.len(), 3);
    let by_attempt: HashMap<onecharge::domain::PaymentAttemptId, _> = records
        .iter()
        .map(|r| (r.command.payment_attempt_id, r))
        .collect();
    for message in &messages {
        let event: PaymentEvent = serde_json::from_slice(&message.payload).unwrap();
        assert_eq!(
            message.subject.as_str(),
            format!(
                "{}.payments.events.payment-expired.v1",
                h.settings.namespace
            )
        );
        assert_eq!(
            header(message, "Nats-Msg-Id"),
            Some(event.event_id.to_string())
        );
        let record = by_attempt[&event.payment_attempt_id];
        assert_eq!(
            header(message, "Causation-Id").as_deref(),
            Some(record.message_id.as_str())
        );
        assert_eq!(
            header(message, "Correlation-Id").as_deref(),
            Some("corr-test")
        );
        assert_eq!(event.order_id, record.command.order_id);
        // the body is the contract's shape, in its field order
        let text = std::str::from_utf8(&message.payload).unwrap();
        assert!(text.starts_with(r#"{"event_id":"#), "{text}");
    }

    let again = relay.run_once().await.unwrap();
    assert_eq!(again.claimed, 0, "nothing left to publish");
    assert_eq!(h.event_messages().await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_crashes_after_publishing_is_followed_by_a_republish_that_jetstream_dedupes() {
    let mut h = Harness::new().await;
    h.seed_expired(2).await;
    let crashing = h.relay().await;

    // Publish, get the acks, then die before marking: the claim's transaction rolls back.
    let claim = claim_unpublished(&h.store, 10).await.unwrap();
    let acks = crashing.publish_rows(&claim.rows).await;
    assert!(acks
        .iter()
        .all(|ack| matches!(ack, Ok(ack) if !ack.duplicate)));
    let first_ids: HashSet<String> = h
        .event_messages()
        .await
        .iter()
        .filter_map(|m| header(m, "Nats-Msg-Id"))
        .collect();
    drop(claim);
    assert_eq!(h.unpublished_events().await, 2);

    let restarted = h.relay().await;
    let report = restarted.run_once().await.unwrap();
    assert_eq!(
        (report.published, report.duplicates),
        (2, 2),
        "the same ids again: JetStream dedupes"
    );
    assert_eq!(h.unpublished_events().await, 0);

    let messages = h.event_messages().await;
    assert_eq!(messages.len(), 2, "each event once on the stream");
    let ids: HashSet<String> = messages
        .iter()
        .filter_map(|m| header(m, "Nats-Msg-Id"))
        .collect();
    assert_eq!(ids, first_ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_relays_at_once_publish_each_event_exactly_once() {
    let mut h = Harness::with(Default::default(), |s| s.relay.batch_size = 7).await;
    h.seed_expired(60).await;
    let drain = |relay: onecharge::relay::Relay| async move {
        let mut published = 0;
        let mut duplicates = 0;
        loop {
            let report = relay.run_once().await.unwrap();
            if report.claimed == 0 {
                return (published, duplicates);
            }
            published += report.published;
            duplicates += report.duplicates;
        }
    };
    let (a, b, c) = tokio::join!(
        tokio::spawn(drain(h.relay().await)),
        tokio::spawn(drain(h.relay().await)),
        tokio::spawn(drain(h.relay().await)),
    );
    let reports = [a.unwrap(), b.unwrap(), c.unwrap()];
    assert_eq!(reports.iter().map(|r| r.0).sum::<usize>(), 60);
    assert_eq!(
        reports.iter().map(|r| r.1).sum::<usize>(),
        0,
        "no row was published by two relays"
    );

    let messages = h.event_messages().await;
    assert_eq!(messages.len(), 60);
    let ids: HashSet<String> = messages
        .iter()
        .filter_map(|m| header(m, "Nats-Msg-Id"))
        .collect();
    assert_eq!(ids.len(), 60);
    assert_eq!(h.unpublished_events().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_to_end_n_commands_with_duplicates_make_exactly_n_charges_and_n_events() {
    let mut h = Harness::with(Default::default(), |s| {
        s.intake.batch_size = 16;
        s.intake.ack_wait = Duration::from_secs(5);
        s.executor.batch_size = 8;
    })
    .await;
    let broker = h.broker().await;
    const N: usize = 12;
    let methods = [pm::CARD_VISA, pm::CARD_DECLINED, pm::FAULT_RATE_LIMIT];
    let mut published = 0;
    let mut attempts = Vec::new();
    for i in 0..N {
        let attempt = Uuid::new_v4();
        attempts.push(attempt);
        let args = |message_id: String| ChargeArgs {
            attempt_id: Some(attempt.into()),
            amount_minor: 1000 + i as i64,
            currency: "EUR".into(),
            order_id: Some(format!("ord_{i}")),
            customer_id: "cus_42".into(),
            payment_method: methods[i % methods.len()].into(),
            description: None,
            requested_at: None,
            message_id: Some(message_id),
            correlation_id: Some(format!("corr-{i}")),
            no_validate: false,
        };
        // the command, a producer retry (same message id, deduplicated by JetStream), and a
        // second message for the same attempt (same parameters: one charge)
        let message_id = format!("cmd-{attempt}");
        assert!(
            !publish_charge(&broker, args(message_id.clone()))
                .await
                .unwrap()
                .duplicate
        );
        assert!(
            publish_charge(&broker, args(message_id))
                .await
                .unwrap()
                .duplicate
        );
        assert!(
            !publish_charge(&broker, args(format!("cmd-again-{attempt}")))
                .await
                .unwrap()
                .duplicate
        );
        published += 2;
    }

    let intake = Intake::new(h.store.clone(), broker.clone(), &h.settings)
        .await
        .unwrap();
    take_in(&intake, published).await;
    assert_eq!(h.attempt_rows().await, N as i64);

    // Drive the executor (advancing past Retry-After) and the relay until nothing is left.
    let executor = h.executor();
    let relay = h.relay().await;
    for _ in 0..10 {
        executor.run_once().await.unwrap();
        h.advance(Duration::from_secs(1)).await;
    }
    while relay.run_once().await.unwrap().claimed > 0 {}

    let ledger = h.gateway.ledger();
    assert_eq!(ledger.len(), N, "exactly one charge per attempt");
    let charged: HashSet<String> = ledger.iter().map(|c| c.reference.clone()).collect();
    assert_eq!(charged, attempts.iter().map(Uuid::to_string).collect());

    let messages = h.event_messages().await;
    assert_eq!(messages.len(), N, "exactly one event per attempt");
    let mut by_status: HashMap<String, usize> = HashMap::new();
    let mut seen = HashSet::new();
    for message in &messages {
        let event: PaymentEvent = serde_json::from_slice(&message.payload).unwrap();
        assert!(seen.insert(event.payment_attempt_id));
        // caused by whichever of the attempt's two commands created it
        let causation = header(message, "Causation-Id").unwrap();
        let id = event.payment_attempt_id;
        assert!(
            causation == format!("cmd-{id}") || causation == format!("cmd-again-{id}"),
            "{causation}"
        );
        *by_status.entry(event.status.to_string()).or_default() += 1;
    }
    assert_eq!(by_status.get("succeeded"), Some(&(2 * N / 3)));
    assert_eq!(by_status.get("declined"), Some(&(N / 3)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_executor_and_relay_roles_charge_and_announce_recorded_attempts() {
    use onecharge::app::Role;
    let mut h = Harness::new().await;
    let commands = h
        .seed_many(&[pm::CARD_VISA, pm::CARD_DECLINED, pm::CARD_VISA])
        .await;
    let broker = h.broker().await;
    let served = Served::start(&h.settings, &[Role::Executor, Role::Relay]).await;

    let events = broker.names.events_stream();
    eventually(
        "the served roles settle and announce every attempt",
        Duration::from_secs(20),
        || async { stream_messages(&broker.jetstream, &events).await.len() >= commands.len() },
    )
    .await;
    served.stop().await;

    assert_eq!(h.gateway.ledger().len(), 3);
    assert_eq!(h.event_messages().await.len(), 3);
    assert_eq!(
        h.all_attempts()
            .await
            .iter()
            .filter(|a| a.status == "succeeded" || a.status == "declined")
            .count(),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_executor_and_relay_wake_on_a_nudge_long_before_their_poll_interval() {
    let mut h = Harness::with(mock_gateway::MockConfig::default(), |s| {
        s.executor.poll_interval = Duration::from_secs(60);
        s.relay.poll_interval = Duration::from_secs(60);
    })
    .await;
    let nudges = onecharge::nudge::Nudges::default();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let executor = h.executor().with_nudges(nudges.clone());
    let relay = h.relay().await.with_nudges(nudges.clone());
    let roles = [
        tokio::spawn(executor.run(shutdown.clone())),
        tokio::spawn(relay.run(shutdown.clone())),
    ];
    // Both found nothing and are now waiting out their 60 s poll interval.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    nudges.attempts_recorded();

    let store = h.store.clone();
    let mut published = false;
    for _ in 0..100 {
        published = store
            .outbox()
            .await
            .iter()
            .any(|e| e.payment_attempt_id == uuid::Uuid::from(id) && e.published_at.is_some());
        if published {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        published,
        "charged and its event published within 5 s, not after the 60 s poll interval"
    );
    assert_eq!(h.gateway.ledger().len(), 1);
    shutdown.cancel();
    for role in roles {
        role.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_jetstream_refuses_is_backed_off_and_does_not_starve_the_events_behind_it() {
    let mut h = Harness::with(Default::default(), |s| s.relay.batch_size = 1).await;
    h.seed_expired(3).await;
    // The first event the relay meets (the first queued) goes to a subject no stream
    // stores: JetStream refuses it every time.
    h.send_first_queued_event_to("payments.nowhere.v1").await;
    let relay = h.relay().await;

    let mut reports = Vec::new();
    for _ in 0..3 {
        reports.push(relay.run_once().await.unwrap());
    }

    assert_eq!(reports[0].refused, 1, "{reports:?}");
    assert_eq!(
        reports.iter().map(|r| r.published).sum::<usize>(),
        2,
        "the healthy events behind the poison one are published: {reports:?}"
    );
    assert_eq!(h.event_messages().await.len(), 2);
    let tries = h.event_tries().await;
    assert_eq!(
        tries
            .iter()
            .filter(|e| e.subject == "payments.nowhere.v1"
                && !e.published
                && e.publish_attempts == 1
                && e.next_try_in_secs.is_some_and(|s| s > 0.0)
                && e.last_error
                    .as_deref()
                    .is_some_and(|m| m.contains("no stream")))
            .count(),
        1,
        "the poison row waits for its own next try"
    );

    // It waits in the relay's queue on its own, due at its next try.
    let poison: Vec<Uuid> = h.unpublished_event_ids().await;
    assert_eq!(h.queued_events().await, (poison, 1));
    assert_eq!(h.queue_rows_not_due().await, 1);

    // When its time comes it is tried again (and refused again, waiting longer).
    h.make_unpublished_events_due().await;
    let again = relay.run_once().await.unwrap();
    assert_eq!((again.claimed, again.refused), (1, 1), "{again:?}");
    let tries = h.event_tries().await;
    assert_eq!(
        tries
            .iter()
            .filter(|e| e.publish_attempts == 2 && e.next_try_in_secs.is_some_and(|s| s > 1.0))
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_unpublished_event_waits_in_the_relays_queue_once_until_it_is_published() {
    let mut h = Harness::new().await;
    // Events of a settlement (one insert of three) and of intake's stale births.
    h.seed_many(&[pm::CARD_VISA; 3]).await;
    h.executor().run_once().await.unwrap();
    h.seed_expired(2).await;
    let (queued, _) = h.queued_events().await;
    assert_eq!(queued, h.unpublished_event_ids().await, "each event once");
    assert_eq!(queued.len(), 5);

    let report = h.relay().await.run_once().await.unwrap();

    assert_eq!((report.claimed, report.published), (5, 5));
    assert_eq!(h.unpublished_events().await, 0);
    assert_eq!(h.queued_events().await, (vec![], 0), "the queue is empty");
    assert_eq!(h.event_messages().await.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_step_takes_whole_queue_rows_as_far_as_its_batch_reaches() {
    let mut h = Harness::with(Default::default(), |s| s.relay.batch_size = 2).await;
    // Nine events queued as three inserts of three would queue them.
    h.seed_expired(9).await;
    h.queue_events_in_rows_of(3).await;
    assert_eq!(h.queued_events().await.1, 3);
    let relay = h.relay().await;

    let first = relay.run_once().await.unwrap();

    // The first row begins within the batch and is taken whole; the second would begin at
    // the fourth event, past the batch of two.
    assert_eq!((first.claimed, first.published), (3, 3), "{first:?}");
    assert_eq!(h.queued_events().await.1, 2);
    let (second, third) = (
        relay.run_once().await.unwrap(),
        relay.run_once().await.unwrap(),
    );
    assert_eq!((second.published, third.published), (3, 3));
    assert_eq!(h.queued_events().await, (vec![], 0));
    assert_eq!(h.event_messages().await.len(), 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_events_another_relay_already_marked_published_are_dropped_from_the_queue() {
    let mut h = Harness::new().await;
    h.seed_expired(2).await;
    // A relay of the build before the queue marks events without touching it (a rolling
    // upgrade).
    h.set_events("published_at = now(), publish_attempts = 1")
        .await;
    assert_eq!(h.queued_events().await.0.len(), 2);

    let report = h.relay().await.run_once().await.unwrap();

    assert_eq!(report, Default::default(), "nothing is published again");
    assert_eq!(h.queued_events().await, (vec![], 0));
    assert!(h.event_messages().await.is_empty());
}

/// The relay's mark finds each published event by its key, however large the month is and
/// whatever the planner knows of it. Its first form (`event_id = ANY($1) AND created_at =
/// ANY($2)`) was planned as a scan of the whole month while the partition had no
/// statistics: 55 ms a step at 100,000 events, so the relay fell behind the charges and its
/// lag grew with the table (decision 212).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relays_mark_probes_each_event_by_its_key_not_a_scan_of_the_month() {
    let h = Harness::new().await;
    // 50,000 published events of this month, 30 to a settlement's time, as settlements write
    // them (status `finding`: no attempt and no final state needed), and no statistics yet:
    // a month's partition before autovacuum analyzes it, or where autovacuum is off.
    h.add_published_events(50_000, 30).await;
    // A relay step's worth: 143 events, oldest first.
    let (ids, times): (Vec<Uuid>, Vec<time::OffsetDateTime>) =
        h.event_keys(143, 25_000).await.into_iter().unzip();

    let plan: Vec<String> = sqlx::query_scalar(&format!(
        "EXPLAIN {}",
        onecharge::store::relay::MARK_PUBLISHED
    ))
    .bind(&ids)
    .bind(&times)
    .bind(Vec::<i64>::new())
    .fetch_all(h.store.pool())
    .await
    .unwrap();
    // The plan's nodes, without the arrays of ids and times its filters spell out.
    let plan: String = plan
        .iter()
        .map(|line| line.chars().take(120).collect::<String>() + "\n")
        .collect();
    assert!(
        !plan.contains("Seq Scan on outbox"),
        "the mark scans the month:\n{plan}"
    );
    assert!(plan.contains("_pkey"), "each event by its key:\n{plan}");
}

/// A relay step holds its claim's transaction open while it publishes (issue 52, item 7):
/// however long the broker stays away, the step ends before PostgreSQL's
/// `idle_in_transaction_session_timeout` would end its session, so the claim is released
/// and the events are left for the next step, never published again by a successor while
/// their first step still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_step_ends_before_the_idle_transaction_timeout_however_long_the_broker_is_away() {
    let h = Harness::with(mock_gateway::MockConfig::default(), |s| {
        s.database.idle_in_transaction_session_timeout = Duration::from_secs(2);
        s.relay.publish_timeout = Duration::from_millis(500);
    })
    .await;
    h.seed_expired(3).await;
    let dir = tempfile::tempdir().unwrap();
    let mut server = crate::support::nats_server::NatsServer::start(dir.path()).await;
    let mut settings = h.settings.clone();
    settings.nats_url = server.url();
    let broker = onecharge::broker::Broker::connect(&settings).await.unwrap();
    broker.ensure_streams().await.unwrap();
    let relay = onecharge::relay::Relay::new(h.store.clone(), broker, &settings);
    server.kill();

    let started = std::time::Instant::now();
    let report = relay
        .run_once()
        .await
        .expect("the step ends by itself, its transaction still alive");
    let took = started.elapsed();

    assert_eq!((report.claimed, report.published, report.failed), (3, 0, 3));
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(h.unpublished_events().await, 3, "left for the next step");
}
