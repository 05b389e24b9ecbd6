//! The demo is the README's first command: it must run the whole pipeline and find the
//! promise held. A short run of it, with every fault kind, is part of the default suite.

use std::time::Duration;

use crate::support::one_line_error;
use onecharge::config::Settings;
use onecharge::demo::{run, DemoArgs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_settles_every_attempt_without_a_double_charge() {
    run_demo(11, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_through_the_stripe_connector_settles_every_attempt_without_a_double_charge() {
    run_demo(12, Some(onecharge::gateway::GatewayKind::Stripe)).await;
}

/// A short demo run (120 attempts, every fault kind) that must find the promise held.
async fn run_demo(seed: u64, gateway: Option<onecharge::gateway::GatewayKind>) {
    let settings = Settings {
        database_url: format!(
            "{}/onecharge",
            std::env::var("TEST_DATABASE_URL")
                .unwrap_or_else(|_| "postgres://127.0.0.1:5432".into())
        ),
        ..Settings::default()
    };
    let args = DemoArgs {
        attempts: 120,
        seed,
        timeout: Duration::from_secs(90),
        keep: false,
        gateway,
        console: false,
    };
    run(&settings, args).await.expect("the promise held");
}

#[test]
fn the_demo_says_how_to_fix_an_unreachable_database_in_one_line() {
    let (code, err) = one_line_error(crate::support::onecharge().args([
        "demo",
        "--database-url",
        "postgres://127.0.0.1:1/onecharge",
    ]));
    assert_eq!(code, Some(1));
    assert!(
        err.contains("PostgreSQL is not reachable at postgres://127.0.0.1:1/onecharge: start it"),
        "{err}"
    );
}

/// `demo --console`: after the verified summary the demo's data stays and the console
/// serves it on `--admin-addr` until SIGTERM, its review queue holding the three cases the
/// demo left for a person, which its last line points to; then the process exits 0 and the
/// demo's database is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_console_serves_the_demos_attempts_until_sigterm_then_removes_them() {
    use tokio::io::AsyncBufReadExt as _;

    onecharge::tls::install_crypto_provider();
    let port = crate::support::nats_server::free_port();
    let server = crate::support::server_url();
    let mut child = tokio::process::Command::from(crate::support::onecharge())
        .args(["demo", "--console", "--attempts", "20", "--admin-addr"])
        .arg(format!("127.0.0.1:{port}"))
        .env("ONECHARGE_DATABASE_URL", format!("{server}/onecharge"))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the demo starts");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let url = tokio::time::timeout(Duration::from_secs(150), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            printed.push(line.clone());
            if let Some(rest) = line.strip_prefix("operator console: ") {
                return rest.split_whitespace().next().unwrap().to_owned();
            }
        }
        panic!(
            "the demo ended without serving the console:\n{}",
            printed.join("\n")
        );
    })
    .await
    .expect("the console is served within 150 s");
    assert_eq!(url, format!("http://127.0.0.1:{port}/console/"));
    // the last line says where to look: the review queue the demo left cases in
    let last = lines.next_line().await.unwrap().expect("a last line");
    assert!(
        last.starts_with(&format!(
            "look first at the review queue, http://127.0.0.1:{port}/console/review: 3 attempt(s) wait there"
        )),
        "{last}"
    );
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("  left for a person        3 in needs_review")),
        "the summary counts them: {printed:?}"
    );
    assert!(
        printed.iter().any(|l| l.starts_with("the promise held")),
        "served after the verified summary: {printed:?}"
    );
    let database = printed[0]
        .split("database ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|url| url.rsplit('/').next())
        .expect("the first line names the demo's database")
        .to_owned();

    // the demo's own attempts, through the console and the API
    let base = format!("http://127.0.0.1:{port}");
    let page = reqwest::get(format!("{base}/console/attempts?order_id=ord_demo_3"))
        .await
        .unwrap();
    assert_eq!(page.status(), reqwest::StatusCode::OK);
    let page = page.text().await.unwrap();
    assert!(
        page.contains(r#"id="result-count" data-count="1""#),
        "{page}"
    );
    let attempts: Vec<serde_json::Value> = reqwest::get(format!("{base}/api/attempts?limit=1000"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        attempts.len(),
        20 + 3,
        "the demo's attempts and the three left for review"
    );
    let review = reqwest::get(format!("{base}/console/review"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        review.matches(r#"data-testid="review-row""#).count(),
        3,
        "{review}"
    );
    for why in [
        "invalid_request",
        "idempotency_key_reused",
        "gateway_max_processing_time",
    ] {
        assert!(
            review.contains(why),
            "a case's reason names {why}: {review}"
        );
    }

    assert!(crate::support::sigterm(child.id().unwrap()));
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("exits within 30 s of SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let pool = sqlx::PgPool::connect(&format!("{server}/postgres"))
        .await
        .unwrap();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(&database)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "{database} is removed after the console stops");
}
