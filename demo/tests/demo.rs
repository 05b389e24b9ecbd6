//! The demo is the README's first command: it must run the whole pipeline and find the
//! promise held. A short run of it, with every fault kind, is part of the default suite.

#[path = "../../tests/it/support/mod.rs"]
mod support;

use std::time::Duration;

use crate::support::nats_server::free_port;
use crate::support::{one_line_error, onecharge_demo, Records};
use onecharge::config::Settings;
use onecharge_demo::{run, DemoArgs};

/// Held by the tests that give the demo addresses where a server must not (or must) listen:
/// one's "free" port must not be another's running server (a port freed by `free_port` can
/// be handed out again at once).
static ADDRESSES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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

/// Nothing listens at either address and neither binary is to be found (the variables
/// name nothing, the PATH holds none): one line says how to get them, exit 2.
#[test]
fn the_demo_without_postgres_or_nats_binaries_says_how_to_get_them_in_one_line() {
    let (pg, nats) = (free_port(), free_port());
    let (code, err) = one_line_error(
        onecharge_demo()
            .arg("--database-url")
            .arg(format!("postgres://127.0.0.1:{pg}/onecharge"))
            .arg("--nats-url")
            .arg(format!("nats://127.0.0.1:{nats}"))
            .env("PATH", path_without(&["initdb", "postgres", "nats-server"]))
            .env("ONECHARGE_DEMO_PG_BIN", "/nonexistent/pg/bin")
            .env("ONECHARGE_DEMO_NATS_SERVER", "/nonexistent/nats-server"),
    );
    assert_eq!(code, Some(2), "{err}");
    for part in [
        &format!("demo: no PostgreSQL at 127.0.0.1:{pg} and no NATS at 127.0.0.1:{nats}, and cannot start its own: "),
        "ONECHARGE_DEMO_PG_BIN=/nonexistent/pg/bin holds no initdb and postgres",
        "ONECHARGE_DEMO_NATS_SERVER=/nonexistent/nats-server is no file",
        "Debian: `apt-get install postgresql nats-server`",
        "ONECHARGE_DEMO_PG_BIN=/usr/lib/postgresql/<version>/bin",
    ] {
        assert!(err.contains(part), "{part} in {err}");
    }
}

/// Nothing listens at the configured addresses: the demo starts its own PostgreSQL and NATS
/// in a temporary directory, says so in one line, runs (refunds included) and finds the
/// promise held, and leaves neither process nor directory behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_starts_private_postgres_and_nats_where_none_listen_and_stops_them_at_exit() {
    let _addresses = ADDRESSES.lock().await;
    let (pg, nats) = (free_port(), free_port());
    let stdout = small_demo(
        &format!("postgres://127.0.0.1:{pg}/onecharge"),
        nats,
        "demo on private servers",
    )
    .await;
    let prefix = format!(
        "demo: no PostgreSQL at 127.0.0.1:{pg} and no NATS at 127.0.0.1:{nats}; started private ones (PostgreSQL on 127.0.0.1:"
    );
    let line = stdout
        .lines()
        .next()
        .filter(|l| l.starts_with(&prefix) && l.ends_with(", stopped at exit"))
        .unwrap_or_else(|| panic!("the first line says what was started: {stdout}"));
    let dir = line
        .split(" in ")
        .last()
        .and_then(|rest| rest.strip_suffix(", stopped at exit"))
        .expect("the line names the directory");
    assert!(dir.contains("onecharge-demo-"), "{line}");
    assert_refund_lines(&stdout);
    assert!(stdout.contains("\nthe promise held"), "{stdout}");

    assert!(!std::path::Path::new(dir).exists(), "{dir} is removed");
    let running: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| std::fs::read(entry.ok()?.path().join("cmdline")).ok())
        .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(dir))
        .collect();
    assert!(running.is_empty(), "still running: {running:?}");
    for port in [pg, nats] {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "nothing listens on {port} any more"
        );
    }
}

/// A fresh Debian machine (issue 54): `apt-get install postgresql` leaves a server on the
/// configured address that takes TCP logins with a password only (`scram-sha-256`). The
/// demo, refused, starts its private PostgreSQL as where none runs, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_starts_its_own_postgres_where_the_configured_one_refuses_its_login() {
    let _addresses = ADDRESSES.lock().await;
    let server = crate::support::pg_cluster::PasswordServer::start("not-the-demos");
    let stdout = small_demo(
        &format!("postgres://postgres@127.0.0.1:{}/onecharge", server.port),
        free_port(),
        "demo beside a PostgreSQL that wants a password",
    )
    .await;
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!(
            "demo: PostgreSQL at 127.0.0.1:{} refuses the demo's login (",
            server.port
        )) && first.contains("started private ones (PostgreSQL on 127.0.0.1:"),
        "the first line says why a private PostgreSQL was started: {stdout}"
    );
    assert!(stdout.contains("\nthe promise held"), "{stdout}");
}

/// Runs `onecharge-demo` with 20 attempts against `database_url` and a NATS URL on
/// `nats_port`, for at most 2 minutes; its stdout, once it exited 0 (`what` names it if not).
async fn small_demo(database_url: &str, nats_port: u16, what: &str) -> String {
    let mut command = tokio::process::Command::from(onecharge_demo());
    command
        .args(["--attempts", "20", "--timeout", "60s"])
        .args(["--database-url", database_url])
        .arg("--nats-url")
        .arg(format!("nats://127.0.0.1:{nats_port}"))
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the demo ends within 2 minutes")
        .unwrap();
    crate::support::assert_exited_ok(&output, what);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The summary's refund lines: each case asked, what became of it, and the gateway's
/// refunds checked against onecharge's.
fn assert_refund_lines(stdout: &str) {
    let has = |start: &str, part: &str| {
        stdout
            .lines()
            .any(|l| l.starts_with(start) && l.contains(part))
    };
    assert!(has("  refunds asked ", "messages"), "{stdout}");
    for (case, outcome) in [
        ("    whole ", ": succeeded, "),
        ("    partial ", ": succeeded, "),
        ("    the rest of it ", "asked what is left: succeeded, "),
        (
            "    published 3 times ",
            "(3 messages, one refund): succeeded, ",
        ),
        ("    past what is left ", ": refused, "),
    ] {
        assert!(has(case, outcome), "{case}{outcome} in {stdout}");
    }
    assert!(
        has(
            "  refunds at the gateway ",
            "; 0 refund_id(s) refunded twice, 0 charge(s) refunded past their amount"
        ),
        "{stdout}"
    );
}

/// The `PATH` without the directories that hold any of `programs`.
fn path_without(programs: &[&str]) -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept = std::env::split_paths(&path)
        .filter(|dir| !programs.iter().any(|p| dir.join(p).exists()))
        .collect::<Vec<_>>();
    std::env::join_paths(kept).unwrap()
}

/// `demo --console`: after the verified summary the demo's data stays and the console
/// serves it on `--admin-addr` until SIGTERM, its review queue holding the three cases the
/// demo left for a person, which its last line points to; then the process exits 0 and the
/// demo's database is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_console_serves_the_demos_attempts_until_sigterm_then_removes_them() {
    use tokio::io::AsyncBufReadExt as _;

    onecharge::config::tls::install_crypto_provider();
    let port = crate::support::nats_server::free_port();
    let server = crate::support::server_url();
    let mut child = tokio::process::Command::from(onecharge_demo())
        .args(["--console", "--attempts", "20", "--admin-addr"])
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
    assert_refund_lines(&printed.join("\n"));
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
    let left = pool.databases_named(&database).await;
    assert_eq!(left, 0, "{database} is removed after the console stops");
}
