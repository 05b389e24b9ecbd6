//! Cursor paging over attempts (`attempts list --before`, `GET /api/attempts?before=`, and
//! oldest first `attempts stuck --after`, `GET /api/attempts?stuck=…&after=`): a stable
//! cursor over (created_at, payment_attempt_id), so attempts recorded at the same instant are
//! neither skipped nor repeated at a page boundary.

use std::collections::HashSet;

use crate::support::{orders, Records, TestEnv};
use onecharge::domain::PaymentAttemptId;
use onecharge::operator::attempts::{self, AttemptFilter, StuckFilter};
use onecharge::operator::RetryWindow;
use serde_json::Value;
use time::OffsetDateTime;

/// Records `n` attempts all at one instant; returns their ids.
async fn seed_at_one_instant(env: &TestEnv, n: usize) -> Vec<PaymentAttemptId> {
    let records = orders(n, "same");
    env.record(&records).await;
    env.set_attempts_in("pending", "created_at = '2026-12-01T12:00:00Z'")
        .await;
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
        seen.extend(page.items.iter().map(|v| v.attempt.payment_attempt_id));
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
    let key = env.attempt(ids[0]).await.idempotency_key;
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

/// Eight stuck attempts, recorded at three instants an hour or more ago (five share one, two
/// another), beside a young pending attempt and an old succeeded one, which are not stuck.
/// Returns the stuck ones' ids.
async fn seed_stuck_with_ties(env: &TestEnv) -> HashSet<PaymentAttemptId> {
    let records = orders(10, "stuck");
    env.record(&records).await;
    let ids: Vec<PaymentAttemptId> = records
        .iter()
        .map(|r| r.command.payment_attempt_id)
        .collect();
    let created = |at: &str| format!("created_at = '{at}'");
    for (i, at) in [
        (0, "2026-12-01T10:00:00Z"),
        (1, "2026-12-01T10:00:00Z"),
        (2, "2026-12-01T10:00:00Z"),
        (3, "2026-12-01T10:00:00Z"),
        (4, "2026-12-01T10:00:00Z"),
        (5, "2026-12-01T09:00:00Z"),
        (6, "2026-12-01T09:30:00Z"),
        (7, "2026-12-01T09:30:00Z"),
    ] {
        env.set_attempt(ids[i], &created(at)).await;
    }
    env.set_attempt(
        ids[9],
        "status = 'succeeded', gateway_charge_id = 'ch_old', created_at = '2026-12-01T08:00:00Z'",
    )
    .await; // ids[8] stays pending and young
    ids[..8].iter().copied().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_through_stuck_attempts_visits_each_once_oldest_first_as_the_unpaged_list_does() {
    let env = TestEnv::new().await;
    let stuck_ids = seed_stuck_with_ties(&env).await;
    let window = RetryWindow::from_settings(&env.settings);
    let now = OffsetDateTime::now_utc();
    let mut filter = StuckFilter {
        older_than: std::time::Duration::from_secs(15 * 60),
        status: None,
        after: None,
    };
    let key = |v: &attempts::AttemptView| (v.attempt.created_at, v.attempt.payment_attempt_id);

    let unpaged = attempts::stuck(&env.store, &filter, 0, now, &window)
        .await
        .unwrap();
    assert!(unpaged.next.is_none(), "an unlimited list is one page");
    let unpaged: Vec<_> = unpaged.items.iter().map(key).collect();
    assert_eq!(
        unpaged.iter().map(|k| k.1).collect::<HashSet<_>>(),
        stuck_ids,
        "the young pending and the succeeded attempt are not stuck"
    );

    // 1 and 3 end on a page with fewer than the limit; 4 and 8 on an empty page after a
    // full one, which carries a cursor because it cannot know it was the last.
    for (limit, pages) in [(1, 9), (3, 3), (4, 3), (8, 2)] {
        filter.after = None;
        let mut seen = Vec::new();
        let mut read = 0;
        loop {
            let page = attempts::stuck(&env.store, &filter, limit, now, &window)
                .await
                .unwrap();
            read += 1;
            assert!(read <= 9, "limit {limit}: a cursor that does not move on");
            assert!(page.items.len() <= limit, "limit {limit}");
            seen.extend(page.items.iter().map(key));
            match page.next {
                Some(next) => filter.after = Some(next.to_string().parse().unwrap()),
                None => break,
            }
        }
        assert_eq!(read, pages, "limit {limit}: pages read");
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "limit {limit}: oldest first, each once: {seen:?}"
        );
        assert_eq!(
            seen, unpaged,
            "limit {limit}: the pages are the unpaged list"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_pages_stuck_with_after_and_refuses_a_bad_limit_or_cursor() {
    let env = TestEnv::new().await;
    let stuck_ids = seed_stuck_with_ties(&env).await;
    let id_of = |v: &Value| v["payment_attempt_id"].as_str().unwrap().to_owned();

    let unpaged: Vec<Value> = env.cli_json(&["attempts", "stuck", "--json"]).await;
    let unpaged: Vec<String> = unpaged.iter().map(id_of).collect();
    assert_eq!(
        unpaged.iter().cloned().collect::<HashSet<_>>(),
        stuck_ids.iter().map(|i| i.to_string()).collect(),
        "without --limit every stuck attempt"
    );
    let (code, _, stderr) = env.cli(&["attempts", "stuck", "--json"], &[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("next page"), "one page: {stderr}");

    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..4 {
        let mut args = vec!["attempts", "stuck", "--json", "--limit", "3"];
        if let Some(cursor) = &after {
            args.extend(["--after", cursor.as_str()]);
        }
        let (code, stdout, stderr) = env.cli(&args, &[]).await;
        assert_eq!(code, 0, "{stderr}");
        let page: Vec<Value> = serde_json::from_str(&stdout).unwrap();
        assert!(page.len() <= 3);
        seen.extend(page.iter().map(id_of));
        after = stderr
            .lines()
            .find_map(|l| l.strip_prefix("next page: --after "))
            .map(|c| c.trim().to_owned());
        if after.is_none() {
            assert_eq!(page.len(), 2, "3 + 3 + 2: the last page is short");
            break;
        }
    }
    assert!(after.is_none(), "three pages, the last without a cursor");
    assert_eq!(seen, unpaged, "the pages, in order, are the unpaged list");

    let (code, table, stderr) = env.cli(&["attempts", "stuck", "--limit", "3"], &[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        table.starts_with("3 attempts on this page need attention: 0 in needs_review, 3 unsettled for more than 15m; oldest first; more on the next page"),
        "{table}"
    );
    assert!(stderr.contains("next page: --after "), "{stderr}");

    for (flag, value, reason) in [
        ("--limit", "three", "not a whole number"),
        ("--limit", "2.5", "not a whole number"),
        ("--after", "yesterday", "is not a cursor"),
        ("--after", "1764583200000000_not-a-uuid", "is not a cursor"),
    ] {
        let (code, stdout, stderr) = env.cli(&["attempts", "stuck", flag, value], &[]).await;
        assert_eq!(code, 2, "{flag} {value}: {stdout}{stderr}");
        assert!(
            stderr.contains(reason) && stderr.contains(flag),
            "{flag} {value}: {stderr}"
        );
        assert!(
            stdout.is_empty(),
            "{flag} {value}: nothing listed: {stdout}"
        );
    }
}
