//! The attempt counts the database keeps (`store::attempts::counts`, decision 91) against a
//! count of the table itself: after the real roles' writes, under concurrent writers and
//! folds.

use crate::support::record_batch;
use mock_gateway::payment_methods as pm;
use onecharge::domain::Actor;
use onecharge::domain::PaymentAttemptId;
use onecharge::operator::resolve::{resolve, ResolveAs, ResolveRequest};
use onecharge::operator::{RetryWindow, Via};
use onecharge::store::attempts::counts as attempt_counts;
use onecharge::store::reads::attempts as operator;
use onecharge::store::Store;
use sqlx::PgPool;

use crate::support::{record, Harness, Records};

/// Attempts per status counted from the table, as `count_by_status` did before.
async fn scanned(pool: &PgPool) -> Vec<(String, i64)> {
    pool.attempts_by_status().await
}

/// The kept counts (folded and not) equal the table's, before a fold and after it; after
/// the fold no delta is left and the folded counts alone are the figures.
async fn assert_exact(store: &Store, after: &str) {
    let expected = scanned(store.pool()).await;
    assert_eq!(
        attempt_counts::read(store).await.unwrap(),
        expected,
        "before folding, after {after}"
    );
    attempt_counts::fold(store).await.unwrap();
    let deltas = store.rows_in("attempt_status_count_deltas").await;
    assert_eq!(deltas, 0, "a fold leaves no delta, after {after}");
    let folded = store.folded_attempt_counts().await;
    assert_eq!(folded, expected, "folded, after {after}");
    assert_eq!(
        operator::count_by_status(store).await.unwrap(),
        expected,
        "count_by_status, after {after}"
    );
}

/// Statuses whose kept count differs from the table's, compared in one statement (one
/// snapshot) while other sessions write and fold.
const DIFFERENCES: &str = "
SELECT status, scanned.n, kept.n
FROM (SELECT status, count(*) AS n FROM payment_attempts GROUP BY status) scanned
FULL JOIN (
    SELECT status, sum(n)::bigint AS n FROM (
        SELECT status, n FROM attempt_status_counts
        UNION ALL
        SELECT status, n FROM attempt_status_count_deltas
    ) parts
    GROUP BY status HAVING sum(n) <> 0
) kept USING (status)
WHERE scanned.n IS DISTINCT FROM kept.n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_stay_exact_through_intake_settlement_reconciliation_resolve_and_a_delete() {
    let h = Harness::new().await;
    assert_exact(&h.store, "migrating an empty database").await;

    h.seed_many(&[
        pm::CARD_VISA,
        pm::CARD_VISA,
        pm::CARD_DECLINED,
        pm::FAULT_ERROR_AFTER,
        pm::CARD_VISA,
    ])
    .await;
    h.seed_expired(2).await;
    assert_eq!(
        attempt_counts::read(&h.store).await.unwrap(),
        vec![("expired".to_owned(), 2), ("pending".to_owned(), 5)],
        "one intake batch"
    );
    assert_exact(&h.store, "one intake batch").await;

    h.executor().run_once().await.unwrap();
    assert_exact(&h.store, "the executor settled the batch").await;
    assert_eq!(
        h.attempts_in("unknown").await,
        1,
        "the fault left one attempt ambiguous"
    );

    h.reconciler().run_once().await.unwrap();
    assert_exact(&h.store, "the reconciler adopted the charge").await;

    let in_review = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    h.set_attempt(
        in_review,
        "status = 'needs_review', review_reason = 'counted by a test'",
    )
    .await;
    assert_exact(&h.store, "an attempt went to review").await;
    resolve(
        &h.store,
        None,
        in_review,
        &ResolveRequest {
            as_: ResolveAs::Declined,
            reason: "the customer's bank confirmed the decline".into(),
            gateway_charge_id: None,
            decline_code: Some("card_declined".into()),
        },
        &Actor::operator("counts"),
        Via::Cli,
        &RetryWindow::from_settings(&h.settings),
    )
    .await
    .unwrap();
    assert_exact(&h.store, "an operator resolved it").await;

    let removed: PaymentAttemptId = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    h.seed(pm::CARD_VISA).await;
    h.delete_attempt(removed).await;
    assert_exact(&h.store, "a manual DELETE").await;
    let expected: Vec<(String, i64)> = [("declined", 2), ("expired", 2), ("pending", 1)]
        .into_iter()
        .chain([("succeeded", 4)])
        .map(|(s, n)| (s.to_owned(), n))
        .collect();
    assert_eq!(operator::count_by_status(&h.store).await.unwrap(), expected);
}

/// Writers that move their own attempts between states in transactions (every third rolled
/// back), intake recording new batches, and sessions folding and comparing, all at once:
/// every comparison is exact, nothing deadlocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_and_folds_keep_the_counts_exact_without_deadlock() {
    const WRITERS: usize = 6;
    const PER_WRITER: usize = 40;
    const ROUNDS: usize = 30;
    let h = Harness::new().await;
    let methods = vec![pm::CARD_VISA; WRITERS * PER_WRITER];
    let ids: Vec<PaymentAttemptId> = h
        .seed_many(&methods)
        .await
        .into_iter()
        .map(|c| c.payment_attempt_id)
        .collect();
    let done = tokio_util::sync::CancellationToken::new();

    let mut writers = tokio::task::JoinSet::new();
    for (w, own) in ids.chunks(PER_WRITER).enumerate() {
        let (pool, own) = (h.store.pool().clone(), own.to_vec());
        writers.spawn(async move {
            let states = ["unknown", "declined", "expired", "pending"];
            for round in 0..ROUNDS {
                let mut tx = pool.begin().await.unwrap();
                for (k, status) in states.iter().enumerate().take(1 + (w + round) % 3) {
                    let some: Vec<PaymentAttemptId> = own
                        .iter()
                        .copied()
                        .skip((round + k) % 7)
                        .step_by(1 + (w + k) % 4)
                        .collect();
                    sqlx::query(
                        "UPDATE payment_attempts SET status = $1
                         WHERE payment_attempt_id = ANY($2)",
                    )
                    .bind(status)
                    .bind(&some)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                }
                if round % 3 == 0 {
                    tx.rollback().await.unwrap();
                } else {
                    tx.commit().await.unwrap();
                }
            }
        });
    }
    let intake = {
        let store = h.store.clone();
        tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let batch: Vec<_> = (0..20).map(|i| record(pm::CARD_VISA, i % 5 == 0)).collect();
                record_batch(&store, "counts-intake", &batch).await.unwrap();
            }
        })
    };
    let mut folders = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let (store, done) = (h.store.clone(), done.clone());
        folders.spawn(async move {
            let mut compared = 0;
            while !done.is_cancelled() || compared == 0 {
                attempt_counts::fold(&store).await.unwrap();
                let differences: Vec<(String, Option<i64>, Option<i64>)> =
                    sqlx::query_as(DIFFERENCES)
                        .fetch_all(store.pool())
                        .await
                        .unwrap();
                assert_eq!(differences, vec![], "(status, scanned, kept)");
                compared += 1;
            }
            compared
        });
    }

    while let Some(written) = writers.join_next().await {
        written.unwrap();
    }
    intake.await.unwrap();
    done.cancel();
    let mut comparisons = 0;
    while let Some(folded) = folders.join_next().await {
        comparisons += folded.unwrap();
    }
    assert!(comparisons >= 3);
    assert_exact(&h.store, "the concurrent writers and folds").await;
    let total: i64 = operator::count_by_status(&h.store)
        .await
        .unwrap()
        .iter()
        .map(|(_, n)| n)
        .sum();
    assert_eq!(total as usize, WRITERS * PER_WRITER + ROUNDS * 20);
}

/// `TRUNCATE` fires no DELETE trigger: its own trigger empties the counts and the deltas
/// with the table, and counting starts again from nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncating_the_attempts_empties_the_counts() {
    let h = Harness::new().await;
    h.seed_many(&[pm::CARD_VISA; 3]).await;
    attempt_counts::fold(&h.store).await.unwrap();
    h.seed_expired(2).await;

    sqlx::query("TRUNCATE payment_attempts CASCADE")
        .execute(h.store.pool())
        .await
        .unwrap();
    assert_eq!(attempt_counts::read(&h.store).await.unwrap(), vec![]);
    assert_exact(&h.store, "TRUNCATE").await;

    h.seed(pm::CARD_VISA).await;
    assert_eq!(
        operator::count_by_status(&h.store).await.unwrap(),
        vec![("pending".to_owned(), 1)]
    );
}
