//! Intake's plain inserts racing (decision 201): a batch skips the keys that exist with
//! `NOT EXISTS` and inserts the rest plainly, so two intakes inserting the same key at once
//! meet on the unique index — the second waits for the first and, once it commits, fails
//! with a unique violation; the whole batch is then recorded again and finds the committed
//! row. These tests make that happen, on purpose and by the thousand, and check that every
//! record is classified as it would have been without the race and nothing is lost.

use std::time::Duration;

use crate::support::record_batch;
use crate::support::{command, eventually, intake_record, Records, TestEnv};
use onecharge::store::intake::{races_lost, IntakeRecord, Recorded};
use onecharge::store::Store;
use serde_json::json;
use uuid::Uuid;

const CONSUMER: &str = "onecharge-intake";

/// Two intakes record overlapping batches at the same moment, round after round: eight
/// message ids in both batches (a redelivery in the other instance's hands), and four
/// attempts in each batch whose business duplicate (same body, new message id) is in the
/// other's. Every attempt must end as one `Accepted` and one `Duplicate` or
/// `BusinessDuplicate`, whichever intake won; no batch may fail; every message and attempt
/// is recorded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_batches_recorded_by_two_intakes_at_once_classify_every_record_and_lose_nothing(
) {
    const ROUNDS: usize = 150;
    const ATTEMPTS: usize = 16;
    let env = TestEnv::new().await;
    let store = Store::connect(&env.settings.database_url, 4).await.unwrap();
    let races_before = races_lost();
    let mut wrong = Vec::new();
    for round in 0..ROUNDS {
        let attempts: Vec<Uuid> = (0..ATTEMPTS).map(|_| Uuid::new_v4()).collect();
        let bodies: Vec<_> = attempts.iter().map(|&a| command(a, json!({}))).collect();
        let original = |i: usize| intake_record(&bodies[i], &format!("m-{}", attempts[i]), None);
        let again = |i: usize| intake_record(&bodies[i], &format!("m-{}-again", attempts[i]), None);
        // A: originals 0..12, business duplicates of 12..16; B: originals 4..16, business
        // duplicates of 0..4. Delivery order differs between the two and from round to round.
        let mut a: Vec<(usize, IntakeRecord)> = (0..12).map(|i| (i, original(i))).collect();
        a.extend((12..16).map(|i| (i, again(i))));
        let mut b: Vec<(usize, IntakeRecord)> = (4..16).map(|i| (i, original(i))).collect();
        b.extend((0..4).map(|i| (i, again(i))));
        a.rotate_left(round % 16);
        b.reverse();
        b.rotate_left((round * 7) % 16);

        let run = |batch: Vec<(usize, IntakeRecord)>| {
            let store = store.clone();
            tokio::spawn(async move {
                let records: Vec<IntakeRecord> = batch.iter().map(|(_, r)| r.clone()).collect();
                let outcomes = record_batch(&store, CONSUMER, &records).await;
                (
                    batch.into_iter().map(|(i, _)| i).collect::<Vec<_>>(),
                    outcomes,
                )
            })
        };
        let (ra, rb) = tokio::join!(run(a), run(b));
        let mut by_attempt: Vec<Vec<String>> = vec![Vec::new(); ATTEMPTS];
        for (indices, outcomes) in [ra.unwrap(), rb.unwrap()] {
            match outcomes {
                Ok(outcomes) => {
                    for (i, outcome) in indices.into_iter().zip(outcomes) {
                        by_attempt[i].push(format!("{outcome:?}"));
                    }
                }
                Err(err) => wrong.push(format!("round {round}: a batch failed: {err}")),
            }
        }
        for (i, mut outcomes) in by_attempt.into_iter().enumerate() {
            outcomes.sort();
            let other = if (4..12).contains(&i) {
                "Duplicate"
            } else {
                "BusinessDuplicate"
            };
            let mut expected = vec!["Accepted".to_owned(), other.to_owned()];
            expected.sort();
            if outcomes != expected {
                wrong.push(format!("round {round}, attempt {i}: {outcomes:?}"));
            }
        }
    }
    let races = races_lost() - races_before;
    eprintln!("{ROUNDS} rounds of two overlapping batches: {races} batches lost a race and were recorded again");

    assert!(
        wrong.is_empty(),
        "{} records misclassified, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    let rounds = ROUNDS as i64;
    assert_eq!(env.attempt_rows().await, 16 * rounds);
    // Every original and every business duplicate keeps its dedupe row.
    assert_eq!(env.dedupe_rows().await, 24 * rounds);
    let history = env.all_transitions().await;
    let births = history.iter().filter(|t| t.from_status.is_none()).count() as i64;
    assert_eq!(births, 16 * rounds, "one birth per attempt");
    let dedupe = env.processed_messages().await;
    let business = dedupe
        .iter()
        .filter(|m| m.result == "business_duplicate")
        .count() as i64;
    assert_eq!(business, 8 * rounds);
    assert!(
        races > 0,
        "no batch met the other on a key: the race path was not exercised"
    );
}

/// The race forced: another transaction holds an uncommitted dedupe row for the batch's
/// first message. The batch's insert waits on it; when the other commits, the insert fails
/// with a unique violation, and the batch is recorded again — the redelivered message is a
/// duplicate and the other message in the batch is accepted, nothing failed or lost.
#[tokio::test]
async fn a_batch_that_waited_on_a_dedupe_row_another_intake_committed_is_recorded_again_as_a_duplicate(
) {
    let env = TestEnv::new().await;
    let (first, second) = (Uuid::new_v4(), Uuid::new_v4());
    let held = intake_record(&command(first, json!({})), "m-held", None);
    let other = intake_record(&command(second, json!({})), "m-other", None);

    let mut holder = env.store.pool().begin().await.unwrap();
    sqlx::query(
        "INSERT INTO processed_messages
             (consumer, message_id, body_sha256, payment_attempt_id, result, stream_sequence)
         VALUES ($1, $2, $3, $4, 'accepted', 1)",
    )
    .bind(CONSUMER)
    .bind(&held.message_id)
    .bind(held.body_sha256.to_vec())
    .bind(first)
    .execute(&mut *holder)
    .await
    .unwrap();

    let races_before = races_lost();
    let outcomes = record_once_committed(&env, holder, vec![held.clone(), other.clone()]).await;
    assert_eq!(outcomes, vec![Recorded::Duplicate, Recorded::Accepted]);
    assert!(races_lost() > races_before, "the batch was recorded again");
    assert!(
        !env.attempt_exists(first).await,
        "the held message created nothing here"
    );
    assert!(env.attempt_exists(second).await);
    assert_eq!(env.dedupe_rows().await, 2);
    assert_eq!(
        env.dedupe_result("m-other").await.as_deref(),
        Some("accepted")
    );
}

/// The same for the attempt's key: another intake holds an uncommitted attempt (created by
/// another message id with the same parameters). The batch waits on it, fails when it
/// commits, and is recorded again: a business duplicate, its dedupe row marked so.
#[tokio::test]
async fn a_batch_that_waited_on_an_attempt_another_intake_committed_is_recorded_again_as_a_business_duplicate(
) {
    let env = TestEnv::new().await;
    let attempt = Uuid::new_v4();
    let record = intake_record(&command(attempt, json!({})), "m-second", None);
    let c = &record.command;

    let mut holder = env.store.pool().begin().await.unwrap();
    sqlx::query(
        "INSERT INTO payment_attempts
             (payment_attempt_id, order_id, customer_id, amount_minor, currency, payment_method,
              fingerprint, idempotency_key, status, first_message_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', 'm-first')",
    )
    .bind(attempt)
    .bind(&c.order_id)
    .bind(&c.customer_id)
    .bind(c.money.amount_minor())
    .bind(c.money.currency())
    .bind(&c.payment_method)
    .bind(c.fingerprint().to_vec())
    .bind(format!("onecharge-{attempt}"))
    .execute(&mut *holder)
    .await
    .unwrap();

    let races_before = races_lost();
    let outcomes = record_once_committed(&env, holder, vec![record.clone()]).await;
    assert_eq!(outcomes, vec![Recorded::BusinessDuplicate]);
    assert!(races_lost() > races_before, "the batch was recorded again");
    assert_eq!(env.attempt_rows().await, 1);
    assert_eq!(
        env.dedupe_result("m-second").await.as_deref(),
        Some("business_duplicate")
    );
    let births = env.all_transitions().await.len();
    assert_eq!(births, 0, "the batch created no attempt, so no birth");
}

/// Records `batch` while `holder` holds a key of it uncommitted: the batch's insert waits
/// on the lock, `holder` commits, and the batch is recorded (again, after losing the race).
async fn record_once_committed(
    env: &TestEnv,
    holder: sqlx::Transaction<'static, sqlx::Postgres>,
    batch: Vec<IntakeRecord>,
) -> Vec<Recorded> {
    let store = env.store.clone();
    let recording =
        tokio::spawn(async move { record_batch(&store, CONSUMER, &batch).await.unwrap() });
    wait_until_an_insert_waits_on_a_lock(env).await;
    holder.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), recording)
        .await
        .expect("the batch is recorded once the other transaction commits")
        .unwrap()
}

/// Until a statement of this database waits for a lock another transaction holds.
async fn wait_until_an_insert_waits_on_a_lock(env: &TestEnv) {
    let pool = env.store.pool().clone();
    let database = env.db_name.clone();
    eventually(
        "the batch's insert waits on the held row",
        Duration::from_secs(10),
        || {
            let pool = pool.clone();
            let database = database.clone();
            async move {
                // Compared by its start: pg_stat_activity keeps the first
                // track_activity_query_size (1 kB) of a statement.
                sqlx::query_scalar::<_, bool>(
                    "SELECT EXISTS (SELECT FROM pg_stat_activity
                                    WHERE datname = $1 AND wait_event_type = 'Lock'
                                      AND left(query, 200) = left($2, 200))",
                )
                .bind(database)
                .bind(onecharge::store::intake::RECORD_BATCH)
                .fetch_one(&pool)
                .await
                .unwrap()
            }
        },
    )
    .await;
}

/// Intake's statement probes each command's key, however large the dedupe table is and
/// whatever the planner knows of it. With its `NOT EXISTS` turned into an anti-join, it was
/// planned as a scan of the whole table while the table had no statistics: recording 100,000
/// commands read 10.7 million rows, and intake ran at two thirds of its earlier rate
/// (decision 213).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intakes_statement_probes_each_key_not_a_scan_of_the_dedupe_table() {
    let h = crate::support::Harness::new().await;
    // 50,000 recorded messages and no statistics yet: a new installation's first hour, or a
    // cluster without autovacuum.
    h.add_dedupe_rows(50_000).await;

    // A full batch (intake.batch_size, 256) of new commands.
    const BATCH: usize = 256;
    let each = |s: &str| vec![s.to_owned(); BATCH];
    let none = || vec![None::<String>; BATCH];
    // The plan a pooled connection settles on after five executions: the generic one.
    let mut conn = h.store.pool().acquire().await.unwrap().detach();
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut conn)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(&format!(
        "EXPLAIN {}",
        onecharge::store::intake::RECORD_BATCH
    ))
    .bind("onecharge-intake")
    .bind("intake:onecharge-intake")
    .bind((0..BATCH as i32).collect::<Vec<_>>())
    .bind((0..BATCH).map(|i| format!("new-{i}")).collect::<Vec<_>>())
    .bind(vec![vec![0_u8; 32]; BATCH])
    .bind((0..BATCH).map(|_| Uuid::new_v4()).collect::<Vec<_>>())
    .bind(vec![1_i64; BATCH])
    .bind(each("ord_1"))
    .bind(each("cus_1"))
    .bind(vec![1999_i64; BATCH])
    .bind(each("EUR"))
    .bind(each("pm_card_visa"))
    .bind(each("plan"))
    .bind(vec![time::OffsetDateTime::now_utc(); BATCH])
    .bind(vec![vec![0_u8; 32]; BATCH])
    .bind((0..BATCH).map(|i| format!("key-{i}")).collect::<Vec<_>>())
    .bind(none())
    .bind(none())
    .bind(86_400.0_f64)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let plan = plan.join("\n");
    assert!(
        !plan.contains("Seq Scan on processed_messages"),
        "intake scans the dedupe table:\n{plan}"
    );
    assert!(
        plan.contains("processed_messages_pkey"),
        "each key probed:\n{plan}"
    );
    sqlx::Connection::close(conn).await.unwrap();
}
