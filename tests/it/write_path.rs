//! The migrations of issue 38 (what a charge writes, decisions 170, 171, 173, 214, 219, 220
//! and 221) on a database that holds attempts in every state and events published, waiting and
//! refused: taken back (their down migrations), written to in the old shape, then applied
//! again while intake writes, after which the roles carry on from where they were.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mock_gateway::payment_methods as pm;
use onecharge::domain::ChargePayment;
use onecharge::store::intake::record_batch;
use onecharge::store::operator::{list_attempts, stuck_attempts, AttemptFilter};
use onecharge::store::{Store, MIGRATOR};
use uuid::Uuid;

use crate::support::{record, Harness, Records};

/// The migrations of decisions 170, 171 and 173.
const WRITE_PATH: std::ops::RangeInclusive<i64> = 20261203001500..=20261203001999;
/// The migrations of decisions 214–216 (the search columns in `attempt_search`, the index
/// of `needs_review` and `expired`, an attempt's events found without an index of the
/// outbox).
const SEARCH: std::ops::RangeInclusive<i64> = 20261204002000..=20261204002299;

/// The migration of decision 219 (an accepted attempt's creation recorded by its row).
const ACCEPTED: std::ops::RangeInclusive<i64> = 20261204002300..=20261204002300;

/// The migration of decision 220 (a flight's claim recorded with the move that ends it).
const CLAIMS: std::ops::RangeInclusive<i64> = 20261204002400..=20261204002400;

/// The migration of decision 221 (a call's evidence recorded with the move it caused).
const CALLS: std::ops::RangeInclusive<i64> = 20261204002500..=20261204002500;

/// The indexes of `payment_attempts` that decisions 214 and 215 replace.
const REPLACED_BY_SEARCH: [&str; 4] = [
    "payment_attempts_created_idx",
    "payment_attempts_order_created_idx",
    "payment_attempts_customer_created_idx",
    "payment_attempts_open_status_created_idx",
];

/// Runs the down migrations in `versions`, newest first, and forgets them, so that
/// `Store::migrate` applies them again.
async fn take_back(store: &Store, versions: std::ops::RangeInclusive<i64>) {
    let mut downs: Vec<_> = MIGRATOR
        .iter()
        .filter(|m| m.migration_type.is_down_migration() && versions.contains(&m.version))
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

/// Applies the migrations not yet applied while intake records one batch after another (a
/// command and a stale one, so an event too), and says how many batches it recorded meanwhile.
async fn migrate_while_intake_writes(store: &Store) -> i64 {
    let writing = Arc::new(AtomicBool::new(true));
    let writer = tokio::spawn({
        let (store, writing) = (store.clone(), writing.clone());
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
    store.migrate().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    writing.store(false, Ordering::Relaxed);
    let batches = writer
        .await
        .unwrap()
        .expect("no writer fails during the migrations");
    assert!(batches > 1, "{batches} batches written");
    batches
}

/// The attempts' states of this file's databases, sorted.
async fn states(h: &Harness) -> Vec<String> {
    let mut s: Vec<String> = sqlx::query_scalar("SELECT DISTINCT status FROM payment_attempts")
        .fetch_all(h.store.pool())
        .await
        .unwrap();
    s.sort();
    s
}

const EVERY_STATE: [&str; 7] = [
    "declined",
    "expired",
    "in_flight",
    "needs_review",
    "pending",
    "succeeded",
    "unknown",
];

/// Whether `index` exists and is valid (a CREATE INDEX CONCURRENTLY that was interrupted
/// leaves an invalid one).
async fn is_valid(h: &Harness, index: &str) -> bool {
    h.scalar(&format!(
        "SELECT count(*) FROM pg_index WHERE indexrelid = '{index}'::regclass AND indisvalid"
    ))
    .await
        == 1
}

/// Attempts in every state: two succeeded, one declined and one unknown, settled and their
/// events published; then one pending, one in flight under another owner's lease and one in
/// review; and one expired whose event waits. Returns the four settled first and the three
/// after them, in that order.
async fn seed_every_state(h: &mut Harness) -> (Vec<ChargePayment>, Vec<ChargePayment>) {
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
    let second = h
        .seed_many(&[pm::CARD_VISA, pm::CARD_VISA, pm::CARD_VISA])
        .await;
    h.set_attempt(
        second[1].payment_attempt_id,
        "status = 'in_flight', lease_owner = 'elsewhere', lease_token = lease_token + 1,
         lease_expires_at = now() + interval '1 hour', dispatched_at = now(),
         first_dispatched_at = now(), tries = 1",
    )
    .await;
    h.set_attempt(
        second[2].payment_attempt_id,
        "status = 'needs_review', review_reason = 'a person looks'",
    )
    .await;
    h.seed_expired(1).await;
    assert_eq!(states(h).await, EVERY_STATE);
    (first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_path_migrations_apply_online_to_a_database_holding_every_state() {
    let mut h = Harness::new().await;
    let (first, second) = seed_every_state(&mut h).await;
    let (pending, in_flight, review) = (
        second[0].payment_attempt_id,
        second[1].payment_attempt_id,
        second[2].payment_attempt_id,
    );

    take_back(&h.store, WRITE_PATH).await;
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
        h.scalar("SELECT count(*) FROM attempt_history").await,
        h.scalar("SELECT count(*) FROM gateway_calls").await,
        h.scalar("SELECT count(*) FROM outbox").await,
    );

    // Applied again while intake records a batch (with a stale command, so an event too)
    // after another.
    let batches = migrate_while_intake_writes(&h.store).await;

    // The shape of decisions 170, 171 and 173.
    assert!(!has_index(&h, "payment_attempts_status_created_idx").await);
    assert!(has_index(&h, "payment_attempts_open_status_created_idx").await);
    assert!(
        is_valid(&h, "payment_attempts_open_status_created_idx").await,
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
        h.scalar("SELECT count(*) FROM attempt_history").await >= history_before.0 + 2 * batches
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

/// Decisions 214–216's migrations on a database holding every state, its attempts written
/// without `attempt_search` and its events with `outbox_attempt_idx`: applied while intake
/// writes, every attempt (old, new and written meanwhile) has exactly one search row equal
/// to its own columns, the searches by order, customer, time and state and the stuck list
/// find the old attempts, an attempt's events (final and not) are listed as before, the
/// indexes they replace are gone, and the row follows an attempt whose columns a person
/// changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migrations_of_what_searches_read_apply_online_to_a_database_holding_every_state() {
    let mut h = Harness::new().await;
    let (first, second) = seed_every_state(&mut h).await;

    take_back(&h.store, SEARCH).await;
    assert_eq!(
        h.scalar("SELECT count(*) FROM pg_class WHERE relname = 'attempt_search'")
            .await,
        0
    );
    for index in REPLACED_BY_SEARCH {
        assert!(has_index(&h, index).await, "{index} is back");
    }
    assert!(!has_index(&h, "payment_attempts_review_expired_created_idx").await);
    assert!(has_index(&h, "outbox_attempt_idx").await);
    // Written in the old shape, and an event that is not a final state's (a move into review).
    let old_shape = h.seed_many(&[pm::CARD_VISA, pm::CARD_VISA]).await;
    let review = second[2].payment_attempt_id;
    let review_event = |event: Uuid| {
        format!(
            "INSERT INTO outbox (event_id, payment_attempt_id, status, subject, headers, payload)
             VALUES ('{event}', '{review}', 'needs_review', 'payments.events.review', '{{}}',
                     '{{}}')"
        )
    };
    let (before, after) = (Uuid::new_v4(), Uuid::new_v4());
    h.exec(&review_event(before)).await;
    let succeeded = first[0].payment_attempt_id;
    let events_of = |id| {
        let store = h.store.clone();
        async move {
            onecharge::store::operator::events(&store, id)
                .await
                .unwrap()
                .into_iter()
                .map(|e| (e.event_id, e.status))
                .collect::<Vec<_>>()
        }
    };
    // What the old shape lists, by outbox_attempt_idx.
    let succeeded_events: Vec<(Uuid, String)> = sqlx::query_as(
        "SELECT event_id, status FROM outbox WHERE payment_attempt_id = $1
         ORDER BY created_at, event_id",
    )
    .bind(succeeded)
    .fetch_all(h.store.pool())
    .await
    .unwrap();
    assert_eq!(succeeded_events.len(), 1, "{succeeded_events:?}");

    let batches = migrate_while_intake_writes(&h.store).await;

    for index in REPLACED_BY_SEARCH {
        assert!(!has_index(&h, index).await, "{index} is dropped");
    }
    assert!(
        is_valid(&h, "payment_attempts_review_expired_created_idx").await,
        "built concurrently while intake wrote, and valid"
    );
    let attempts = h.attempt_rows().await;
    assert!(attempts >= 10 + 2 * batches, "{attempts} attempts");
    assert_eq!(
        h.scalar("SELECT count(*) FROM attempt_search").await,
        attempts,
        "one search row per attempt"
    );
    assert_eq!(
        h.scalar(
            "SELECT count(*) FROM payment_attempts a JOIN attempt_search s
             ON s.payment_attempt_id = a.payment_attempt_id AND s.created_at = a.created_at
                AND s.order_id = a.order_id AND s.customer_id = a.customer_id"
        )
        .await,
        attempts,
        "each equal to its attempt's columns"
    );

    // An attempt's events are listed as before: the final state's, and the others, written
    // before the migrations and after.
    assert!(!has_index(&h, "outbox_attempt_idx").await);
    assert_eq!(events_of(succeeded).await, succeeded_events);
    h.exec(&review_event(after)).await;
    let review_events: Vec<Uuid> = events_of(review).await.into_iter().map(|e| e.0).collect();
    assert_eq!(review_events, [before, after]);

    // The searches find attempts of every age and state.
    for attempt in first.iter().chain(&second).chain(&old_shape) {
        let id = attempt.payment_attempt_id;
        let by_order = AttemptFilter {
            order_id: Some(attempt.order_id.clone()),
            ..Default::default()
        };
        let by_customer = AttemptFilter {
            customer_id: Some(attempt.customer_id.clone()),
            ..Default::default()
        };
        for filter in [by_order, by_customer] {
            let found = list_attempts(&h.store, &filter, None).await.unwrap();
            assert!(
                found.iter().any(|a| a.payment_attempt_id == id),
                "{id} by {filter:?}"
            );
        }
    }
    let everything = list_attempts(&h.store, &AttemptFilter::default(), None)
        .await
        .unwrap();
    assert_eq!(everything.len() as i64, attempts);
    assert!(everything
        .windows(2)
        .all(|w| (w[0].created_at, w[0].payment_attempt_id)
            >= (w[1].created_at, w[1].payment_attempt_id)));

    // A search by each state finds exactly the attempts in it, and the stuck list every
    // attempt that is not settled.
    for status in EVERY_STATE {
        let filter = AttemptFilter {
            status: Some(status.parse().unwrap()),
            ..Default::default()
        };
        let mut found: Vec<Uuid> = list_attempts(&h.store, &filter, None)
            .await
            .unwrap()
            .iter()
            .map(|a| a.payment_attempt_id.into())
            .collect();
        let mut stored: Vec<Uuid> =
            sqlx::query_scalar("SELECT payment_attempt_id FROM payment_attempts WHERE status = $1")
                .bind(status)
                .fetch_all(h.store.pool())
                .await
                .unwrap();
        found.sort();
        stored.sort();
        assert!(!stored.is_empty(), "{status}");
        assert_eq!(found, stored, "{status}");
    }
    let stuck = stuck_attempts(&h.store, time::OffsetDateTime::now_utc(), None, None, None)
        .await
        .unwrap();
    assert_eq!(
        stuck.len() as i64,
        h.scalar(
            "SELECT count(*) FROM payment_attempts
             WHERE status IN ('pending', 'unknown', 'in_flight', 'needs_review')"
        )
        .await
    );

    // A person moves an attempt's order: its search row follows, in the same transaction.
    let moved = old_shape[0].payment_attempt_id;
    h.set_attempt(
        moved,
        "order_id = 'ord_moved', created_at = created_at - interval '1 day'",
    )
    .await;
    let found = list_attempts(
        &h.store,
        &AttemptFilter {
            order_id: Some("ord_moved".into()),
            ..Default::default()
        },
        Some(10),
    )
    .await
    .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].payment_attempt_id, moved);
    assert_eq!(
        h.scalar("SELECT count(*) FROM attempt_search").await,
        attempts,
        "moved, not copied"
    );

    // The executor goes on with the pending attempts, which need nothing of the search.
    h.executor().run_once().await.unwrap();
    assert_eq!(
        h.attempt(old_shape[1].payment_attempt_id).await.status,
        "succeeded"
    );
}

/// One move as a reader sees it: from, to, cause, actor, detail, time.
type Move = (
    Option<String>,
    String,
    String,
    String,
    Option<String>,
    String,
);

/// Every attempt's history as `sql` lists it (`$1`: the attempt), without ids: what a reader
/// sees of it.
async fn histories(h: &Harness, sql: &str) -> Vec<Vec<Move>> {
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "SELECT payment_attempt_id FROM payment_attempts ORDER BY payment_attempt_id",
    )
    .fetch_all(h.store.pool())
    .await
    .unwrap();
    let mut all = Vec::new();
    for id in ids {
        let rows: Vec<Move> = sqlx::query_as(sql)
            .bind(id)
            .fetch_all(h.store.pool())
            .await
            .unwrap();
        assert!(!rows.is_empty(), "{id} has a history");
        all.push(rows);
    }
    all
}

const FROM_THE_VIEW: &str = "SELECT from_status, to_status, cause, actor, detail, at::text
     FROM attempt_history WHERE payment_attempt_id = $1 ORDER BY id";
const FROM_THE_TABLE: &str = "SELECT from_status, to_status, cause, actor, detail, at::text
     FROM attempt_transitions WHERE payment_attempt_id = $1 ORDER BY id";

/// Decision 219's migration on a database holding every state: taken back, each creation
/// its attempt's row recorded becomes a transition row again, first in its attempt's
/// order, and every history reads as it did; an attempt then written in the old shape (its
/// creation a transition row) and the ones written after the migration applies again show
/// their creation once each, and the roles carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_creation_on_the_attempts_row_migrates_both_ways_keeping_every_history() {
    let mut h = Harness::new().await;
    let (_, second) = seed_every_state(&mut h).await;
    let pending = second[0].payment_attempt_id;
    let before = histories(&h, FROM_THE_VIEW).await;
    let accepted = h
        .scalar("SELECT count(*) FROM payment_attempts WHERE accepted_by IS NOT NULL")
        .await;
    assert_eq!(accepted, 7, "every attempt but the stale one");
    assert_eq!(
        h.scalar("SELECT count(*) FROM attempt_transitions WHERE cause = 'command_accepted'")
            .await,
        0,
        "no creation of an accepted attempt is a transition row"
    );
    assert_eq!(
        h.scalar("SELECT count(*) FROM attempt_transitions WHERE cause = 'stale_command'")
            .await,
        1,
        "a stale command's creation still is"
    );

    // Decision 220's migration reads what 219's adds: it goes back first.
    take_back(&h.store, *ACCEPTED.start()..=*CLAIMS.end()).await;
    assert_eq!(
        h.scalar("SELECT count(*) FROM pg_class WHERE relname = 'attempt_history'")
            .await,
        0
    );
    assert_eq!(
        histories(&h, FROM_THE_TABLE).await,
        before,
        "every history, from the table alone"
    );
    // Written in the old shape: the creation a transition row, no `accepted_by`.
    let old_shape = Uuid::new_v4();
    h.exec(&format!(
        "INSERT INTO payment_attempts
             (payment_attempt_id, order_id, customer_id, amount_minor, currency, payment_method,
              fingerprint, idempotency_key, status, first_message_id)
         VALUES ('{old_shape}', 'order-old', 'customer-old', 100, 'EUR', 'pm_card_visa',
                 decode(repeat('00', 32), 'hex'), 'onecharge-{old_shape}', 'pending', 'm-old');
         INSERT INTO attempt_transitions (payment_attempt_id, from_status, to_status, cause, actor, detail, at)
         VALUES ('{old_shape}', NULL, 'pending', 'command_accepted', 'intake:old',
                 'message m-old (stream sequence 9)', now())"
    ))
    .await;

    h.store.migrate().await.unwrap();

    // `histories` lists attempts in id order, so the old shape's attempt is one among them
    // and the others are in the order they were before.
    let (old_history, after): (Vec<_>, Vec<_>) = histories(&h, FROM_THE_VIEW)
        .await
        .into_iter()
        .partition(|history| history[0].4.as_deref() == Some("message m-old (stream sequence 9)"));
    assert_eq!(old_history.len(), 1, "the old shape's creation, once");
    assert_eq!(old_history[0].len(), 1);
    assert_eq!(after, before, "every history as before the round trip");

    // The roles carry on: intake writes the new shape, the executor charges.
    let written = h.seed_many(&[pm::CARD_VISA]).await[0].payment_attempt_id;
    for _ in 0..20 {
        if h.attempt(pending).await.status == "succeeded"
            && h.attempt(written).await.status == "succeeded"
        {
            break;
        }
        h.executor().run_once().await.unwrap();
    }
    for id in [pending, written] {
        let causes: Vec<String> = h.history(id).await.into_iter().map(|t| t.cause).collect();
        assert_eq!(
            causes,
            ["command_accepted", "dispatched", "gateway_succeeded"],
            "{id}"
        );
    }
    assert_eq!(
        h.scalar(&format!(
            "SELECT count(*) FROM attempt_transitions WHERE payment_attempt_id = '{written}'"
        ))
        .await,
        1,
        "the outcome, which carries the claim (decision 220); the creation is the row's"
    );
}

/// Decision 220's migration on a database holding every state, one attempt in flight under
/// a claim its row records: taken back, every claim (carried by the row of the move that
/// ended its flight, or open) becomes a row of its own under the id it took, and every
/// history reads as it did; applied again, an attempt claimed in the old shape (its claim a
/// row) shows its claim once when its lease expires. Then the roles carry on: a charge writes
/// one history row for its flight, and a flight this build claimed and the previous build
/// ends (which does not carry the claim) gets its claim written by the trigger, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_carried_by_its_flights_end_migrates_both_ways_keeping_every_history() {
    let mut h = Harness::new().await;
    seed_every_state(&mut h).await;
    let claimed = h.executor().claim(1).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let open = claimed[0].attempt.payment_attempt_id;
    let before = histories(&h, FROM_THE_VIEW).await;
    assert_eq!(
        h.scalar("SELECT count(*) FROM attempt_transitions WHERE to_status = 'in_flight'")
            .await,
        0,
        "no claim is a row of its own"
    );
    let carried = h
        .scalar("SELECT count(*) FROM attempt_transitions WHERE claim_id IS NOT NULL")
        .await;
    assert_eq!(
        carried, 4,
        "the first run's four flights, each with its end"
    );
    assert_eq!(
        h.scalar("SELECT count(*) FROM attempt_open_claims").await,
        1
    );
    let claims_listed = h
        .scalar("SELECT count(*) FROM attempt_history WHERE cause = 'dispatched'")
        .await;
    assert_eq!(claims_listed, carried + 1);

    take_back(&h.store, CLAIMS).await;
    assert_eq!(
        histories(&h, FROM_THE_VIEW).await,
        before,
        "every history, each claim a row of its own"
    );
    assert_eq!(
        h.scalar("SELECT count(*) FROM attempt_transitions WHERE cause = 'dispatched'")
            .await,
        claims_listed
    );

    h.store.migrate().await.unwrap();
    assert_eq!(histories(&h, FROM_THE_VIEW).await, before, "and again");
    // The open claim is a row now (the old shape): its lease expires, and the claim is listed
    // once, before the expiry.
    h.set_attempt(open, "lease_expires_at = now() - interval '1 second'")
        .await;
    let expired = onecharge::store::reconciler::expire_leases(&h.store, "reconciler:test", 10)
        .await
        .unwrap();
    assert_eq!(expired, vec![open]);
    let causes = |history: Vec<crate::support::records::Transition>| -> Vec<String> {
        history.into_iter().map(|t| t.cause).collect()
    };
    assert_eq!(
        causes(h.history(open).await),
        ["command_accepted", "dispatched", "lease_expired"]
    );

    // This build claims and charges: one history row for the flight.
    let written = h.seed_many(&[pm::CARD_VISA]).await[0].payment_attempt_id;
    for _ in 0..20 {
        if h.attempt(written).await.status == "succeeded" {
            break;
        }
        h.executor().run_once().await.unwrap();
    }
    assert_eq!(
        causes(h.history(written).await),
        ["command_accepted", "dispatched", "gateway_succeeded"]
    );
    assert_eq!(
        h.scalar(&format!(
            "SELECT count(*) FROM attempt_transitions WHERE payment_attempt_id = '{written}'"
        ))
        .await,
        1,
        "the claim and the outcome, one row"
    );

    // This build claims, the previous one ends the flight (its settlement carries no claim,
    // and writes its own row): the trigger writes the claim, under the id it took.
    let ended_by_old = h.seed_many(&[pm::CARD_VISA]).await[0].payment_attempt_id;
    let claimed = h.executor().claim(10).await.unwrap();
    assert!(claimed
        .iter()
        .any(|c| c.attempt.payment_attempt_id == ended_by_old));
    h.exec(&format!(
        "WITH settled AS (
             UPDATE payment_attempts SET status = 'succeeded', lease_owner = NULL,
                 lease_expires_at = NULL, gateway_charge_id = 'ch_old', updated_at = now()
             WHERE payment_attempt_id = '{ended_by_old}' AND status = 'in_flight'
             RETURNING payment_attempt_id
         )
         INSERT INTO attempt_transitions (payment_attempt_id, from_status, to_status, cause, actor, detail)
         SELECT payment_attempt_id, 'in_flight', 'succeeded', 'gateway_succeeded',
                'executor:old', 'charge ch_old'
         FROM settled"
    ))
    .await;
    let history = h.history(ended_by_old).await;
    assert_eq!(
        causes(history.clone()),
        ["command_accepted", "dispatched", "gateway_succeeded"]
    );
    assert!(history[1].actor.starts_with("executor:"), "{history:?}");
    assert_eq!(
        h.scalar(&format!(
            "SELECT count(*) FROM payment_attempts
             WHERE payment_attempt_id = '{ended_by_old}' AND claim_id IS NULL"
        ))
        .await,
        1,
        "the claim left the row when it was written"
    );
}

/// One call as a reader sees it, with its id: `(id, attempt, operation, key, try, lease
/// token, started, finished, HTTP status, outcome, charge id, error)`.
type Call = (
    i64,
    String,
    String,
    String,
    i32,
    Option<i64>,
    String,
    String,
    Option<i32>,
    String,
    Option<String>,
    Option<String>,
);

/// Every call `relation` lists (`gateway_call_records`, or `gateway_calls` alone), in the
/// order of their ids.
async fn calls(h: &Harness, relation: &str) -> Vec<Call> {
    sqlx::query_as(&format!(
        "SELECT id, payment_attempt_id::text, operation, idempotency_key, try_number,
                lease_token, started_at::text, finished_at::text, http_status, outcome,
                gateway_charge_id, error
         FROM {relation} ORDER BY id"
    ))
    .fetch_all(h.store.pool())
    .await
    .unwrap()
}

/// Decision 221's migration on a database holding every state: every call a settlement
/// caused is carried by its move's row; taken back, each becomes a `gateway_calls` row of
/// its own under the id it took, and the calls read as they did; a call then written in the
/// old shape (a row) and the carried ones are all listed once when it applies again. Then
/// the roles carry on: a charge writes no `gateway_calls` row (a fenced write's call is one:
/// `executor::settlements_written_together_keep_each_fence_transition_event_and_call`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_carried_by_the_move_it_caused_migrates_both_ways_keeping_every_call() {
    let mut h = Harness::new().await;
    let (first, _) = seed_every_state(&mut h).await;
    let before = calls(&h, "gateway_call_records").await;
    assert_eq!(before.len(), 4, "the first run's four charge calls");
    assert!(
        calls(&h, "gateway_calls").await.is_empty(),
        "each carried by the move it caused"
    );
    assert_eq!(
        h.scalar("SELECT count(*) FROM attempt_transitions WHERE call_id IS NOT NULL")
            .await,
        4
    );

    take_back(&h.store, CALLS).await;
    assert_eq!(
        h.scalar("SELECT count(*) FROM pg_class WHERE relname = 'gateway_call_records'")
            .await,
        0
    );
    assert_eq!(
        calls(&h, "gateway_calls").await,
        before,
        "every call a row of its own, under its id"
    );
    // Written in the old shape: a lookup's call as a row.
    let looked_up = first[3].payment_attempt_id;
    h.exec(&format!(
        "INSERT INTO gateway_calls (payment_attempt_id, operation, idempotency_key, try_number,
                                    started_at, finished_at, http_status, outcome)
         VALUES ('{looked_up}', 'lookup', 'onecharge-{looked_up}', 1, now(), now(), 200,
                 'not_found')"
    ))
    .await;
    let with_old = calls(&h, "gateway_calls").await;
    assert_eq!(with_old.len(), 5);

    h.store.migrate().await.unwrap();
    assert_eq!(
        calls(&h, "gateway_call_records").await,
        with_old,
        "every call once, in the order of its id"
    );

    // The roles carry on: this build's charge carries its call on its move.
    let written = h.seed_many(&[pm::CARD_VISA]).await[0].payment_attempt_id;
    for _ in 0..20 {
        if h.attempt(written).await.status == "succeeded" {
            break;
        }
        h.executor().run_once().await.unwrap();
    }
    let charged = h.gateway_calls(written).await;
    assert_eq!(charged.len(), 1, "{charged:?}");
    assert_eq!(
        h.scalar(&format!(
            "SELECT count(*) FROM attempt_transitions
             WHERE payment_attempt_id = '{written}' AND call_operation = 'charge'"
        ))
        .await,
        1,
        "the claim, the outcome and the call: one row"
    );
    assert_eq!(
        calls(&h, "gateway_calls").await,
        with_old,
        "no row of its own"
    );
}
