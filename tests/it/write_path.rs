//! The migrations of issue 38 (what a charge writes, decisions 170, 171 and 173) on a
//! database that holds attempts in every state and events published, waiting and refused:
//! taken back (their down migrations), written to in the old shape, then applied again while
//! intake writes, after which the roles carry on from where they were.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mock_gateway::payment_methods as pm;
use onecharge::store::intake::record_batch;
use onecharge::store::{Store, MIGRATOR};
use uuid::Uuid;

use crate::support::{record, Harness, Records};

/// This migrations: from the first of them on.
const FIRST: i64 = 20261203001500;
const LAST: i64 = 20261203001999;

/// Runs the down migrations of this issue, newest first, and forgets them, so that
/// `Store::migrate` applies them again.
async fn take_back(store: &Store) {
    let mut downs: Vec<_> = MIGRATOR
        .iter()
        .filter(|m| m.migration_type.is_down_migration() && (FIRST..=LAST).contains(&m.version))
        .collect();
    downs.sort_by_key(|m| std::cmp::Reverse(m.version));
    assert!(!downs.is_empty());
    for down in downs {
        sqlx::raw_sql(&down.sql)
            .execute(store.pool())
            .await
            .unwrap_or_else(|e| panic!("down {}: {e}", down.version));
        sqlx::query("DELETE FROM _sqlx_migrations WHERE version = $1")
            .bind(down.version)
            .execute(store.pool())
            .await
            .unwrap();
    }
}

/// Whether `index` exists.
async fn has_index(h: &Harness, index: &str) -> bool {
    h.scalar(&format!(
        "SELECT count(*) FROM pg_class WHERE relname = '{index}' AND relkind IN ('i', 'I')"
    ))
    .await
        == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_path_migrations_apply_online_to_a_database_holding_every_state() {
    let mut h = Harness::new().await;
    // Settled (two succeeded, one declined) and unknown, their events published.
    let first = h
        .seed_many(&[
            pm::CARD_VISA,
            pm::CARD_VISA,
            pm::CARD_DECLINED,
            pm::FAULT_ERROR_AFTER,
        ])
        .await;
    h.executor().run_once().await.unwrap();
    h.relay().await.run_once().await.unwrap();
    // Pending, in flight under a lease, and in review; an expired attempt whose event waits.
    let second = h
        .seed_many(&[pm::CARD_VISA, pm::CARD_VISA, pm::CARD_VISA])
        .await;
    let (pending, in_flight, review) = (
        second[0].payment_attempt_id,
        second[1].payment_attempt_id,
        second[2].payment_attempt_id,
    );
    h.set_attempt(
        in_flight,
        "status = 'in_flight', lease_owner = 'elsewhere', lease_token = lease_token + 1,
         lease_expires_at = now() + interval '1 hour', dispatched_at = now(),
         first_dispatched_at = now(), tries = 1",
    )
    .await;
    h.set_attempt(
        review,
        "status = 'needs_review', review_reason = 'a person looks'",
    )
    .await;
    h.seed_expired(1).await;
    let statuses: Vec<String> = {
        let mut s: Vec<String> = sqlx::query_scalar("SELECT DISTINCT status FROM payment_attempts")
            .fetch_all(h.store.pool())
            .await
            .unwrap();
        s.sort();
        s
    };
    assert_eq!(
        statuses,
        [
            "declined",
            "expired",
            "in_flight",
            "needs_review",
            "pending",
            "succeeded",
            "unknown"
        ]
    );

    take_back(&h.store).await;
    assert!(has_index(&h, "payment_attempts_status_created_idx").await);
    assert!(!has_index(&h, "payment_attempts_open_status_created_idx").await);
    assert!(has_index(&h, "outbox_unpublished_idx").await);
    assert!(has_index(&h, "attempt_transitions_pkey").await);
    assert!(has_index(&h, "gateway_calls_pkey").await);
    assert_eq!(
        h.scalar("SELECT count(*) FROM pg_class WHERE relname = 'outbox_unpublished'")
            .await,
        0
    );
    // Written in the old shape: two more events waiting, one of them refused by JetStream
    // and due in an hour.
    h.seed_expired(2).await;
    let refused: Uuid = sqlx::query_scalar(
        "UPDATE outbox SET publish_attempts = 1, last_error = 'no stream stores this subject',
                next_attempt_at = now() + interval '1 hour'
         WHERE event_id = (SELECT event_id FROM outbox WHERE published_at IS NULL
                           ORDER BY created_at DESC, event_id LIMIT 1)
         RETURNING event_id",
    )
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    let waiting = h.unpublished_event_ids().await;
    assert_eq!(waiting.len(), 3);
    let history_before = (
        h.scalar("SELECT count(*) FROM attempt_transitions").await,
        h.scalar("SELECT count(*) FROM gateway_calls").await,
        h.scalar("SELECT count(*) FROM outbox").await,
    );

    // Applied again while intake records a batch (with a stale command, so an event too)
    // after another.
    let writing = Arc::new(AtomicBool::new(true));
    let writer = tokio::spawn({
        let (store, writing) = (h.store.clone(), writing.clone());
        async move {
            let mut written = 0;
            while writing.load(Ordering::Relaxed) {
                let batch = [record(pm::CARD_VISA, false), record(pm::CARD_VISA, true)];
                record_batch(&store, "test-intake", &batch).await?;
                written += 1;
            }
            anyhow::Ok(written)
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    h.store.migrate().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    writing.store(false, Ordering::Relaxed);
    let batches = writer
        .await
        .unwrap()
        .expect("no writer fails during the migrations");
    assert!(batches > 1, "{batches} batches written");

    // The shape of decisions 170, 171 and 173.
    assert!(!has_index(&h, "payment_attempts_status_created_idx").await);
    assert!(has_index(&h, "payment_attempts_open_status_created_idx").await);
    assert_eq!(
        h.scalar(
            "SELECT count(*) FROM pg_index
             WHERE indexrelid = 'payment_attempts_open_status_created_idx'::regclass
               AND indisvalid"
        )
        .await,
        1,
        "built concurrently while intake wrote, and valid"
    );
    assert!(!has_index(&h, "outbox_unpublished_idx").await);
    assert_eq!(
        h.scalar(
            "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'outbox'::regclass
               AND NOT coalesce(c.reloptions @> ARRAY['fillfactor=50'], false)"
        )
        .await,
        0,
        "every month of the outbox leaves room for the mark"
    );
    assert!(!has_index(&h, "attempt_transitions_pkey").await);
    assert!(!has_index(&h, "gateway_calls_pkey").await);
    // Nothing of the history is lost, and the writers' rows are there too.
    assert!(
        h.scalar("SELECT count(*) FROM attempt_transitions").await
            >= history_before.0 + 2 * batches
    );
    assert!(h.scalar("SELECT count(*) FROM gateway_calls").await == history_before.1);
    assert!(h.scalar("SELECT count(*) FROM outbox").await == history_before.2 + batches);
    // Every unpublished event is queued once, the refused one on its own and not due.
    let (queued, _) = h.queued_events().await;
    assert_eq!(queued, h.unpublished_event_ids().await);
    for id in &waiting {
        assert!(queued.contains(id), "{id} was waiting before the migration");
    }
    assert_eq!(
        h.scalar(&format!(
            "SELECT count(*) FROM outbox_unpublished
             WHERE event_ids = ARRAY['{refused}'::uuid] AND next_attempt_at > now()"
        ))
        .await,
        1
    );

    // The roles carry on: the relay publishes everything due and leaves the refused event
    // for its time; the executor charges the pending attempts and their events follow.
    let mut relay = h.relay().await;
    while relay.run_once().await.unwrap().claimed > 0 {}
    assert_eq!(h.unpublished_event_ids().await, vec![refused]);
    assert_eq!(h.queued_events().await, (vec![refused], 1));
    for _ in 0..20 {
        if h.attempt(pending).await.status == "succeeded" {
            break;
        }
        h.executor().run_once().await.unwrap();
    }
    assert_eq!(h.attempt(pending).await.status, "succeeded");
    relay = h.relay().await;
    while relay.run_once().await.unwrap().claimed > 0 {}
    assert_eq!(h.unpublished_event_ids().await, vec![refused]);
    // Attempts settled before the migrations kept their state.
    assert_eq!(
        h.attempt(first[0].payment_attempt_id).await.status,
        "succeeded"
    );
    assert_eq!(
        h.attempt(first[2].payment_attempt_id).await.status,
        "declined"
    );
    assert_eq!(
        h.attempt(first[3].payment_attempt_id).await.status,
        "unknown"
    );
    assert_eq!(h.attempt(in_flight).await.status, "in_flight");
    assert_eq!(h.attempt(review).await.status, "needs_review");
}
