//! The demo is the README's first command: it must run the whole pipeline and find the
//! promise held. A short run of it, with every fault kind, is part of the default suite.

use std::time::Duration;

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
    let out = crate::support::onecharge()
        .args(["demo", "--database-url", "postgres://127.0.0.1:1/onecharge"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("PostgreSQL is not reachable at postgres://127.0.0.1:1/onecharge: start it"),
        "{err}"
    );
}
