//! History retention (`purge.history_retention`): month partitions of
//! `attempt_transitions`, `gateway_calls` and `outbox` dropped whole once past retention,
//! without ever losing the history of an attempt that is not final or an unpublished event.
//! The job takes its `now`, so a test looks at the same rows months later without waiting.

use std::collections::HashSet;
use std::time::Duration;

use crate::support::record_batch;
use mock_gateway::payment_methods as pm;
use onecharge::domain::PaymentAttemptId;
use onecharge::operator::RetryWindow;
use onecharge::purge::retention::retain_history;
use onecharge::purge::Purger;
use onecharge::store::retention::{self, HistoryTable};
use time::macros::datetime;
use time::OffsetDateTime;

use crate::support::{one_line_error, record, Harness, Records, TestEnv};

const DAY: Duration = Duration::from_secs(86_400);

/// The month partitions `table` has now, by name.
async fn months(store: &onecharge::store::Store, table: HistoryTable) -> Vec<String> {
    retention::partitions(store, table)
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.to.is_some())
        .map(|p| p.name)
        .collect()
}

/// Rows of the three history tables for one attempt: (transitions, gateway calls, events).
/// An accepted attempt's creation is its own row, which retention never touches (decision
/// 219), so it is not among them.
async fn history(h: &Harness, id: PaymentAttemptId) -> (usize, usize, usize) {
    (
        h.transition_rows(id).await as usize,
        h.gateway_calls(id).await.len(),
        h.events(id).await.len(),
    )
}

/// Three attempts through the real executor: `settled` succeeded with its event published,
/// `unpublished` succeeded with its event not yet published, `unknown` was charged
/// ambiguously (an error after the gateway received it) and is not final.
struct World {
    h: Harness,
    settled: PaymentAttemptId,
    unpublished: PaymentAttemptId,
    unknown: PaymentAttemptId,
}

async fn world() -> World {
    let h = Harness::new().await;
    let commands = h
        .seed_many(&[pm::CARD_VISA, pm::CARD_VISA, pm::FAULT_ERROR_AFTER])
        .await;
    h.executor().run_once().await.unwrap();
    let [settled, unpublished, unknown] = [0, 1, 2].map(|i| commands[i].payment_attempt_id);
    assert_eq!(h.attempt(settled).await.status, "succeeded");
    assert_eq!(h.attempt(unknown).await.status, "unknown");
    h.mark_published(settled).await;
    World {
        h,
        settled,
        unpublished,
        unknown,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn months_past_retention_are_dropped_but_a_non_final_attempts_history_and_an_unpublished_event_survive(
) {
    let w = world().await;
    let h = &w.h;
    let unknown_before = (
        h.transitions(w.unknown).await,
        h.gateway_calls(w.unknown).await,
    );
    assert!(!unknown_before.0.is_empty() && !unknown_before.1.is_empty());
    let unknown_rows = h.transition_rows(w.unknown).await;
    assert_eq!(
        unknown_rows as usize,
        unknown_before.0.len() - 2,
        "its history but its creation, which is its row's, and its claim, which the \
         outcome's row carries"
    );
    assert_eq!(history(h, w.settled).await, (1, 1, 1));
    let this_month = months(&h.store, HistoryTable::Transitions).await[0].clone();

    // 200 days later, with a 30-day retention, this month and the two made ahead are past it
    let later = h.db_now().await + 200 * DAY;
    let report = retain_history(&h.store, 30 * DAY, false, later)
        .await
        .unwrap();

    for table in &report.tables {
        assert_eq!(table.dropped.len(), 3, "{table:?}");
        assert_eq!(
            table.created.len(),
            3,
            "the months ahead of `later`: {table:?}"
        );
    }
    let transitions = &report.tables[0];
    assert_eq!(transitions.dropped[0].partition, this_month);
    assert_eq!(
        transitions.dropped[0].kept, unknown_rows as u64,
        "only the unknown attempt's transitions are kept"
    );
    for table in HistoryTable::ALL {
        let left = months(&h.store, table).await;
        assert!(
            !left
                .iter()
                .any(|m| m.ends_with(&this_month[this_month.len() - 6..])),
            "{left:?}"
        );
    }
    // the settled attempt's history is gone with its month ...
    assert_eq!(history(h, w.settled).await, (0, 0, 0));
    // ... the unpublished event of a settled attempt is not ...
    assert_eq!(history(h, w.unpublished).await, (0, 0, 1));
    // ... and the attempt that is not final keeps all of it, in the default partition
    assert_eq!(h.transitions(w.unknown).await, unknown_before.0);
    assert_eq!(h.gateway_calls(w.unknown).await, unknown_before.1);
    assert_eq!(h.rows_in("attempt_transitions_default").await, unknown_rows);
    // the attempts themselves are never touched
    assert_eq!(h.attempt_rows().await, 3);

    // `attempts show` still merges the kept history into one timeline
    let detail =
        onecharge::operator::attempts::show(&h.store, w.unknown, later, &RetryWindow::default())
            .await
            .unwrap()
            .expect("the attempt exists");
    assert_eq!(detail.transitions.len(), unknown_before.0.len());
    assert_eq!(detail.gateway_calls.len(), unknown_before.1.len());
    let shown = onecharge::cli::attempts::render_show(&detail, later);
    assert!(shown.contains("charge try 1 ->"), "{shown}");
    assert!(shown.contains("in_flight -> unknown"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_rows_go_once_their_attempt_is_final_and_an_unpublished_one_is_published_first() {
    let mut w = world().await;
    let later = w.h.db_now().await + 200 * DAY;
    retain_history(&w.h.store, 30 * DAY, false, later)
        .await
        .unwrap();
    assert_eq!(history(&w.h, w.unpublished).await, (0, 0, 1));
    // the copy of the kept event is the same event: still queued once, by the row that
    // queued it with its settlement (decision 171)
    let kept = w.h.last_event(w.unpublished).await.event_id;
    let (queued, _) = w.h.queued_events().await;
    assert_eq!(
        queued.iter().filter(|e| **e == kept).count(),
        1,
        "{queued:?}"
    );

    // the relay still finds the kept event and publishes it
    let report = w.h.relay().await.run_once().await.unwrap();
    assert_eq!(report.published, 1, "{report:?}");
    let events = w.h.event_messages().await;
    assert_eq!(events.len(), 1);
    assert_eq!(w.h.queued_events().await, (vec![], 0));

    // the unknown attempt is settled, and a year later its kept history goes too
    w.h.set_attempt(
        w.unknown,
        "status = 'declined', decline_code = 'do_not_honor', updated_at = now()",
    )
    .await;
    let dry = retain_history(&w.h.store, 30 * DAY, true, later + 365 * DAY)
        .await
        .unwrap();
    let kept_rows = |table: &str| format!("{table}_default");
    let before = (
        w.h.rows_in(&kept_rows("attempt_transitions")).await,
        w.h.rows_in(&kept_rows("outbox")).await,
    );
    assert!(before.0 > 0 && before.1 == 1);
    assert_eq!(dry.tables[0].deleted_from_default, before.0 as u64);
    assert_eq!(dry.tables[2].deleted_from_default, 1);
    assert_eq!(
        w.h.rows_in(&kept_rows("attempt_transitions")).await,
        before.0
    );

    let report = retain_history(&w.h.store, 30 * DAY, false, later + 365 * DAY)
        .await
        .unwrap();
    assert_eq!(report.tables[0].deleted_from_default, before.0 as u64);
    for table in ["attempt_transitions", "gateway_calls", "outbox"] {
        assert_eq!(w.h.rows_in(&kept_rows(table)).await, 0, "{table}");
    }
    assert_eq!(history(&w.h, w.unknown).await, (0, 0, 0));
    assert_eq!(w.h.attempt_rows().await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_reports_the_months_it_would_drop_and_drops_nothing() {
    let w = world().await;
    let h = &w.h;
    // Every history row, and every partition.
    let count = || async {
        let mut rows = 0;
        for table in [
            "attempt_transitions",
            "gateway_calls",
            "outbox",
            "pg_inherits",
        ] {
            rows += h.rows_in(table).await;
        }
        rows
    };
    let before = count().await;

    let later = h.db_now().await + 200 * DAY;
    let report = retain_history(&h.store, 30 * DAY, true, later)
        .await
        .unwrap();

    assert!(report.dry_run);
    let transitions = &report.tables[0];
    assert_eq!(transitions.dropped.len(), 3);
    let rows: u64 = transitions.dropped.iter().map(|d| d.rows).sum();
    assert_eq!(rows as i64, h.rows_in("attempt_transitions").await);
    assert!(transitions.created.is_empty(), "a dry run creates nothing");
    let summary = report.summary(30 * DAY);
    assert!(
        summary.starts_with("dry run: history attempt_transitions: would drop 3 month partitions"),
        "{summary}"
    );
    assert_eq!(count().await, before);
    assert_eq!(history(h, w.settled).await, (1, 1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_no_month_covers_lands_in_the_default_partition_and_moves_into_its_month_when_made() {
    let h = Harness::new().await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    // written a year ahead: no month covers it yet, and the insert does not fail
    let ahead = h.db_now().await + 365 * DAY;
    h.add_transitions(id, Some(ahead), 1).await;
    let partition_of_row = "attempt_transitions_default";
    assert_eq!(h.rows_in(partition_of_row).await, 1);

    let report = Purger::new(h.store.clone(), test_broker(&h).await, &h.settings)
        .retain_history_once(ahead)
        .await
        .unwrap();

    assert_eq!(report.tables[0].moved_from_default, 1);
    assert_eq!(h.rows_in(partition_of_row).await, 0);
    let month = HistoryTable::Transitions.month_partition(ahead);
    assert_eq!(
        h.rows_in(&month).await,
        1,
        "the row is in its own month now"
    );
    assert_eq!(h.transitions(id).await.len(), 2);
    // the outbox's months are made half filled, so that marking an event published is a
    // HOT update (decision 171); the other tables' months are filled whole
    let half_filled = |table: HistoryTable| {
        let month = table.month_partition(ahead);
        let h = &h;
        async move { h.relations_with_option(&month, "fillfactor=50").await }
    };
    assert_eq!(half_filled(HistoryTable::Outbox).await, 1);
    assert_eq!(half_filled(HistoryTable::Transitions).await, 0);
}

async fn test_broker(h: &Harness) -> onecharge::broker::Broker {
    onecharge::broker::Broker::connect(&h.settings)
        .await
        .expect("NATS at 127.0.0.1:4222")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_event_for_a_final_state_is_refused_even_in_another_month() {
    let h = Harness::new().await;
    let id = h.seed_expired(1).await[0].command.payment_attempt_id;
    assert_eq!(h.events(id).await.len(), 1);
    let next_month = h.db_now().await + 40 * DAY;
    let err = sqlx::query(
        "INSERT INTO outbox (event_id, payment_attempt_id, status, subject, headers, payload, created_at)
         VALUES (gen_random_uuid(), $1, 'expired', 'payments.events.expired', '{}', '{}', $2)",
    )
    .bind(id)
    .bind(next_month)
    .execute(h.store.pool())
    .await
    .unwrap_err();
    let err = err.as_database_error().expect("a database error");
    assert_eq!(err.code().as_deref(), Some("23505"));
    assert_eq!(err.constraint(), Some("outbox_one_event_per_final_state"));
    assert_eq!(h.events(id).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_on_the_command_line_reports_old_history_dry_then_drops_it() {
    let env = TestEnv::new().await;
    let records = vec![record(pm::CARD_VISA, false), record(pm::CARD_VISA, true)];
    record_batch(&env.store, "onecharge-intake", &records)
        .await
        .unwrap();
    let [pending, expired] = [0, 1].map(|i| records[i].command.payment_attempt_id);
    // The pending attempt's creation is its row (decision 219); a move of its own is history.
    env.add_transitions(pending, None, 1).await;
    // the history of both, and the expired one's published event, moved to January 2025
    let january = datetime!(2025-01-01 0:00 UTC);
    for table in HistoryTable::ALL {
        retention::create_partition(
            &env.store,
            table,
            &table.month_partition(january),
            january,
            datetime!(2025-02-01 0:00 UTC),
        )
        .await
        .unwrap();
    }
    env.move_history_to(datetime!(2025-01-15 0:00 UTC), expired)
        .await;
    let before = env.all_transitions().await.len();
    assert_eq!(
        before, 3,
        "the pending attempt's creation and move, the expired one's birth"
    );

    let (code, stdout, stderr) = env.cli(&["purge", "--dry-run"], &[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("dry run: history attempt_transitions: would drop 1 month partition")
            && stdout.contains("(attempt_transitions_p202501): 1 rows gone, 1 kept"),
        "{stdout}"
    );
    assert_eq!(env.all_transitions().await.len(), before);

    let (code, stdout, stderr) = env.cli(&["purge"], &[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(
            "history outbox: dropped 1 month partition (outbox_p202501): 1 rows gone, 0 kept"
        ) && stdout.contains("(purge.history_retention 400d)"),
        "{stdout}"
    );
    for table in HistoryTable::ALL {
        let months = env.months_of(table.name()).await;
        assert!(!months.iter().any(|m| m.ends_with("p202501")), "{months:?}");
    }
    let mut left: Vec<PaymentAttemptId> = env
        .all_transitions()
        .await
        .into_iter()
        .map(|t| t.payment_attempt_id.into())
        .collect();
    left.dedup();
    assert_eq!(
        left,
        vec![pending],
        "only the pending attempt keeps its history"
    );
    assert!(env.outbox().await.is_empty());
}

#[test]
fn a_history_retention_under_a_day_exits_2_with_one_line_naming_it() {
    let (code, err) = one_line_error(
        crate::support::onecharge()
            .args(["purge", "--dry-run"])
            .env("ONECHARGE_PURGE__HISTORY_RETENTION", "2h")
            .env("ONECHARGE_DATABASE_URL", "postgres://127.0.0.1:1/onecharge"),
    );
    assert_eq!(code, Some(2));
    assert!(
        err.contains("purge.history_retention") && err.contains("at least 1d"),
        "{err}"
    );
}

/// Dropping a month while intake writes (an attempt first, its transition second, the order
/// of every writer) must neither deadlock a writer nor make one wait on the retention job:
/// with the history's foreign keys to `payment_attempts`, the job locked the history table
/// and then waited for `payment_attempts` while the writers held `payment_attempts` and
/// waited for the history table (40P01). The writers' worst stall is measured by
/// `examples/bench_retention.rs`; here, every write and the drop succeed, and what must be
/// kept is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_month_while_writers_write_fails_no_writer_and_keeps_what_must_be_kept() {
    const WRITERS: usize = 4;
    let env = TestEnv::new().await;
    // A month a year ago: 500 transitions of an attempt declined long since, 3 of one still
    // pending.
    let (now, month, from) = month_a_year_ago(&env, HistoryTable::Transitions).await;
    let old = [record(pm::CARD_VISA, false), record(pm::CARD_VISA, false)];
    env.record(&old).await;
    let [declined, pending] = [0, 1].map(|i| old[i].command.payment_attempt_id);
    env.set_attempt(
        declined,
        "status = 'declined', updated_at = now() - interval '400 days'",
    )
    .await;
    for (id, rows) in [(declined, 500), (pending, 3)] {
        env.add_transitions(id, Some(from + DAY), rows).await;
    }

    let writers_store = onecharge::store::Store::connect(&env.settings.database_url, 8)
        .await
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let (store, stop, written) = (writers_store.clone(), stop.clone(), written.clone());
        writers.spawn(async move {
            let (mut batches, mut errors) = (0, Vec::new());
            while !stop.is_cancelled() {
                let batch = crate::support::orders(10, &format!("w{w}_{batches}"));
                if let Err(err) = record_batch(&store, "onecharge-intake", &batch).await {
                    errors.push(err.to_string());
                }
                batches += 1;
                written.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            errors
        });
    }
    // The drop starts once every writer is in full swing.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while written.load(std::sync::atomic::Ordering::Relaxed) < 10 * WRITERS {
        assert!(
            std::time::Instant::now() < deadline,
            "the writers never got going"
        );
        tokio::task::yield_now().await;
    }
    let report = retain_history(&env.store, 30 * DAY, false, now).await;
    stop.cancel();
    let mut errors = Vec::new();
    while let Some(writer) = writers.join_next().await {
        errors.extend(writer.unwrap());
    }

    let report = report.expect("the drop succeeds under load");
    assert!(errors.is_empty(), "writers failed: {errors:?}");
    assert_eq!(
        report.tables[0].dropped,
        vec![onecharge::purge::retention::DroppedPartition {
            partition: month,
            rows: 503,
            kept: 3
        }]
    );
    let kept = env.causes(pending).await;
    assert_eq!(
        kept.iter().filter(|cause| *cause == "test").count(),
        3,
        "the pending attempt's old history is kept"
    );
    let accepted: HashSet<uuid::Uuid> = env
        .all_transitions()
        .await
        .into_iter()
        .filter(|t| t.cause == "command_accepted")
        .map(|t| t.payment_attempt_id)
        .collect();
    let attempts = env.all_attempts().await;
    assert_eq!(
        attempts
            .iter()
            .filter(|a| !accepted.contains(&a.payment_attempt_id))
            .count(),
        0,
        "every attempt written during the drop has its first transition"
    );
}

/// A pass interrupted between detaching a month (its kept rows already copied, in the same
/// transaction) and dropping it leaves a month-named table that is no partition: the next
/// pass drops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_month_left_detached_by_an_interrupted_pass_is_dropped_by_the_next() {
    let env = TestEnv::new().await;
    let (now, month, _) = month_a_year_ago(&env, HistoryTable::Outbox).await;
    env.detach_partition("outbox", &month).await;

    retain_history(&env.store, 30 * DAY, false, now)
        .await
        .unwrap();

    assert!(!env.relation_exists(&month).await, "{month} is dropped");
}

/// Creates `table`'s month partition of a year before the database's now; (that now, the
/// month's name, its first instant).
async fn month_a_year_ago(
    env: &TestEnv,
    table: HistoryTable,
) -> (OffsetDateTime, String, OffsetDateTime) {
    let now = env.db_now().await;
    let (from, to) = onecharge::purge::retention::months_ahead(now - 365 * DAY, 0)[0];
    let month = table.month_partition(from);
    retention::create_partition(&env.store, table, &month, from, to)
        .await
        .unwrap();
    (now, month, from)
}
