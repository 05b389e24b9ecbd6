//! Cursor paging over attempts (`attempts list --before`, `GET /api/attempts?before=`): a
//! stable cursor over (created_at, payment_attempt_id), so attempts recorded at the same
//! instant are neither skipped nor repeated at a page boundary.

use std::collections::HashSet;

use crate::support::{orders, TestEnv};
use onecharge::domain::PaymentAttemptId;
use onecharge::operator::attempts::{self, AttemptFilter};
use onecharge::operator::RetryWindow;
use serde_json::Value;
use time::OffsetDateTime;

/// Records `n` attempts all at one instant; returns their ids.
async fn seed_at_one_instant(env: &TestEnv, n: usize) -> Vec<PaymentAttemptId> {
    let records = orders(n, "same");
    env.record(&records).await;
    sqlx::query("UPDATE payment_attempts SET created_at = '2026-12-01T12:00:00Z'")
        .execute(env.store.pool())
        .await
        .unwrap();
    records
        .iter()
        .map(|r| r.command.payment_attempt_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_through_attempts_with_equal_timestamps_returns_every_attempt_exactly_once() {
    let env = TestEnv::new().await;
    let ids = seed_at_one_instant(&env, 7).await;
    let window = RetryWindow::from_settings(&env.settings);
    let now = OffsetDateTime::now_utc();

    let mut seen = Vec::new();
    let mut filter = AttemptFilter::default();
    let mut pages = 0;
    loop {
        let page = attempts::page(&env.store, &filter, 3, now, &window)
            .await
            .unwrap();
        pages += 1;
        seen.extend(page.attempts.iter().map(|v| v.attempt.payment_attempt_id));
        match page.next {
            Some(next) => filter.before = Some(next.to_string().parse().unwrap()),
            None => break,
        }
    }
    assert_eq!(pages, 3, "3 + 3 + 1");
    assert_eq!(seen.len(), 7, "no attempt repeated: {seen:?}");
    assert_eq!(
        seen.iter().copied().collect::<HashSet<_>>(),
        ids.iter().copied().collect::<HashSet<_>>(),
        "no attempt skipped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_pages_with_before_and_keeps_the_json_array() {
    let env = TestEnv::new().await;
    let ids = seed_at_one_instant(&env, 3).await;

    let (code, stdout, stderr) = env
        .cli(&["attempts", "list", "--json", "--limit", "2"], &[])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let first: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(first.len(), 2);
    let cursor = stderr
        .lines()
        .find_map(|l| l.strip_prefix("next page: --before "))
        .unwrap_or_else(|| panic!("a cursor on stderr: {stderr}"))
        .trim()
        .to_owned();

    let (code, stdout, stderr) = env
        .cli(
            &[
                "attempts", "list", "--json", "--limit", "2", "--before", &cursor,
            ],
            &[],
        )
        .await;
    assert_eq!(code, 0, "{stderr}");
    let second: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(second.len(), 1);
    assert!(!stderr.contains("next page"), "the last page: {stderr}");
    let all: HashSet<String> = first
        .iter()
        .chain(&second)
        .map(|v| v["payment_attempt_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(all, ids.iter().map(|i| i.to_string()).collect());

    // Search by idempotency key and by time.
    let key: String = sqlx::query_scalar(
        "SELECT idempotency_key FROM payment_attempts WHERE payment_attempt_id = $1",
    )
    .bind(ids[0])
    .fetch_one(env.store.pool())
    .await
    .unwrap();
    let (_, stdout, _) = env
        .cli(
            &["attempts", "list", "--json", "--idempotency-key", &key],
            &[],
        )
        .await;
    let found: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["payment_attempt_id"], ids[0].to_string());
    let (_, stdout, _) = env
        .cli(
            &[
                "attempts",
                "list",
                "--json",
                "--created-after",
                "2026-12-01T12:00:01Z",
            ],
            &[],
        )
        .await;
    assert_eq!(stdout.trim(), "[]");
}
