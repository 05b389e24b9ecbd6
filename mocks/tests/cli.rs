//! The `mock-gateway` binary: its help, and serving the contract on the port it prints.

use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

const BINARY: &str = env!("CARGO_BIN_EXE_mock-gateway");
const SECRET: &str = "sk_test_do_not_print_me";

/// Starts the binary with the API key in its environment and reads the base URL it prints
/// as its only line on stdout.
async fn start_serving(mut command: Command) -> (Child, String) {
    let mut child = command
        .env("MOCK_GATEWAY_API_KEY", SECRET)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(10), stdout.next_line())
        .await
        .expect("the base URL is printed")
        .unwrap()
        .expect("a line on stdout");
    (child, url)
}

/// Runs `command`, which the binary must refuse as a usage error (exit 2) before serving
/// anything and without printing the API key; returns its stderr.
async fn usage_error(command: &mut Command) -> String {
    let output = command.kill_on_drop(true).output().await.unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains(SECRET), "stderr: {stderr}");
    assert!(output.stdout.is_empty(), "it must not start serving");
    stderr
}

/// [`usage_error`] of the binary given `--api-key` first, then `args`.
async fn usage_error_after_the_key(args: &[&str]) -> String {
    usage_error(Command::new(BINARY).args(["--api-key", SECRET]).args(args)).await
}

/// reqwest is built with rustls and no bundled provider (see the workspace Cargo.toml): the
/// process must name one before building a client.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The running binary's `GET /__ledger`.
async fn ledger(client: &reqwest::Client, url: &str) -> Vec<Value> {
    let response = client.get(format!("{url}/__ledger")).send().await.unwrap();
    response.json().await.unwrap()
}

#[tokio::test]
async fn help_documents_every_flag_and_never_shows_the_api_key() {
    let output = Command::new(BINARY)
        .arg("--help")
        .env("MOCK_GATEWAY_API_KEY", SECRET)
        .output()
        .await
        .unwrap();

    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for flag in [
        "--host",
        "--port",
        "--api-key",
        "--key-retention",
        "--hang-for",
        "--seed",
        "--replay-declined-with-200",
        "--request-log-capacity",
        "--tls-cert",
        "--tls-key",
        "--error-before-probability",
        "--error-before-count",
        "--error-after-probability",
        "--error-after-count",
        "--hang-after-probability",
        "--hang-after-count",
        "--drop-after-probability",
        "--drop-after-count",
        "--rate-limit-probability",
        "--rate-limit-count",
        "--latency-ms",
        "--latency-jitter-ms",
        "--latency-median",
        "--latency-p99",
        "--latency-seed",
        "--dialect",
        "--refund-faults",
        "--refund-settle-after",
        "pm_card_pendingRefund",
        "pm_card_refundFail",
        "/__refunds/{id}",
        "/__ledger/refunds",
        "pm_card_visa_chargeDeclined",
        "pm_fault_processing",
        "MOCK_GATEWAY_API_KEY",
        "pm_fault_drop_after",
        "/__faults",
    ] {
        assert!(help.contains(flag), "--help does not mention {flag}");
    }
    assert!(!help.contains(SECRET), "--help shows the API key");
}

#[tokio::test]
async fn a_probability_outside_zero_to_one_is_a_usage_error() {
    usage_error_after_the_key(&["--error-before-probability", "1.5"]).await;
}

#[tokio::test]
async fn a_refund_fault_outside_zero_to_one_or_of_no_known_kind_is_a_usage_error() {
    let stderr =
        usage_error_after_the_key(&["--refund-faults", r#"{"failed":{"probability":2}}"#]).await;
    assert!(
        stderr.contains("refunds.failed.probability"),
        "stderr: {stderr}"
    );
    let stderr = usage_error_after_the_key(&["--refund-faults", r#"{"fail":{"count":1}}"#]).await;
    assert!(stderr.contains("unknown field `fail`"), "stderr: {stderr}");
}

#[tokio::test]
async fn the_refund_flags_reach_the_running_gateways_faults() {
    install_crypto_provider();
    let (_child, url) = start_serving({
        let mut command = Command::new(BINARY);
        command.args([
            "--port",
            "0",
            "--refund-settle-after",
            "5s",
            "--refund-faults",
            r#"{"error_after":{"count":1},"pending":{"probability":0.25}}"#,
        ]);
        command
    })
    .await;

    let faults: Value = reqwest::get(format!("{url}/__faults"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();

    assert_eq!(faults["refunds"]["error_after"]["count"], 1);
    assert_eq!(faults["refunds"]["pending"]["probability"], 0.25);
    assert_eq!(
        faults["error_after"]["count"], 0,
        "the charges' own are untouched"
    );
}

#[tokio::test]
async fn a_latency_p99_below_the_median_is_a_usage_error_saying_what_to_change() {
    let stderr = usage_error(
        Command::new(BINARY)
            .args([
                "--port",
                "0",
                "--latency-median",
                "300ms",
                "--latency-p99",
                "100ms",
            ])
            .env("MOCK_GATEWAY_API_KEY", SECRET),
    )
    .await;

    assert_eq!(
        stderr.lines().next(),
        Some("error: the latency p99 (100ms) must not be below the median (300ms)"),
        "stderr: {stderr}"
    );
}

#[tokio::test]
async fn a_latency_median_without_a_p99_is_a_usage_error() {
    let stderr = usage_error_after_the_key(&["--port", "0", "--latency-median", "300ms"]).await;

    assert!(stderr.contains("--latency-p99"), "stderr: {stderr}");
}

#[tokio::test]
async fn the_binary_serves_the_contract_on_the_port_it_prints_and_stops_on_sigterm() {
    let mut command = Command::new(BINARY);
    command
        .args(["--port", "0", "--seed", "1", "--error-before-count", "1"])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped());
    let (mut child, url) = start_serving(command).await;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    install_crypto_provider();
    let client = reqwest::Client::new();
    let charge = |key: &'static str| {
        client
            .post(format!("{url}/v1/charges"))
            .bearer_auth(SECRET)
            .header("Idempotency-Key", key)
            .json(
                &json!({"amount_minor": 500, "currency": "JPY", "customer_id": "cus_1",
                          "payment_method": "pm_card_visa", "reference": "attempt-1"}),
            )
            .send()
    };
    assert_eq!(
        charge("key-1").await.unwrap().status(),
        StatusCode::INTERNAL_SERVER_ERROR,
        "--error-before-count 1 applies to the first charge"
    );
    assert_eq!(charge("key-1").await.unwrap().status(), StatusCode::CREATED);
    let ledger = ledger(&client, &url).await;
    assert_eq!(ledger.len(), 1);

    let pid = child.id().expect("still running").to_string();
    let signalled = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(signalled.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("stops after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .await
        .unwrap();
    assert_eq!(
        logs.lines().filter(|l| l.contains("/v1/charges")).count(),
        2,
        "one log line per request:\n{logs}"
    );
    assert!(!logs.contains(SECRET), "the logs show the API key");
}

#[tokio::test]
async fn with_dialect_stripe_the_binary_prints_its_url_and_serves_payment_intents() {
    let mut command = Command::new(BINARY);
    command
        .args(["--port", "0", "--seed", "1", "--dialect", "stripe"])
        .stderr(Stdio::null());
    let (_child, url) = start_serving(command).await;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    install_crypto_provider();
    let client = reqwest::Client::new();
    let created = client
        .post(format!("{url}/v1/payment_intents"))
        .bearer_auth(SECRET)
        .header("Idempotency-Key", "key-1")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("amount=500&currency=jpy&payment_method=pm_card_visa&confirm=true&metadata[payment_attempt_id]=attempt-1")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::OK);
    let intent: Value = created.json().await.unwrap();
    assert_eq!(intent["status"], "succeeded");
    let ledger = ledger(&client, &url).await;
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0]["id"], intent["id"]);
    assert_eq!(ledger[0]["currency"], "JPY");
    let charges = client
        .post(format!("{url}/v1/charges"))
        .bearer_auth(SECRET)
        .header("Idempotency-Key", "key-2")
        .json(&json!({"amount_minor": 500}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        charges.status(),
        StatusCode::NOT_FOUND,
        "only Stripe's routes"
    );
}

#[tokio::test]
async fn an_unknown_dialect_is_a_usage_error_naming_the_choices() {
    let stderr = usage_error_after_the_key(&["--port", "0", "--dialect", "paypal"]).await;

    assert!(
        stderr.contains("onecharge") && stderr.contains("stripe"),
        "stderr: {stderr}"
    );
}

/// A self-signed certificate for 127.0.0.1, made with the `openssl` command line: its own
/// trust anchor, so a client trusting only it can check the mock's HTTPS.
fn self_signed_certificate(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("mock.pem"), dir.join("mock.key"));
    let config = dir.join("openssl.cnf");
    // A leaf (CA:FALSE), not OpenSSL's default CA certificate, which TLS clients refuse as
    // a server's certificate.
    std::fs::write(
        &config,
        "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = leaf\n\
         [dn]\nCN = 127.0.0.1\n\
         [leaf]\nbasicConstraints = critical, CA:FALSE\nsubjectAltName = IP:127.0.0.1\n",
    )
    .unwrap();
    let out = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args([
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-config",
        ])
        .arg(&config)
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("the openssl command line");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

#[tokio::test]
async fn with_tls_cert_and_tls_key_the_binary_serves_https_on_the_url_it_prints() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed_certificate(dir.path());
    let mut command = Command::new(BINARY);
    command
        .args(["--port", "0", "--tls-cert"])
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .stderr(Stdio::null());
    let (_child, url) = start_serving(command).await;
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");

    install_crypto_provider();
    let trusted = reqwest::Certificate::from_pem(&std::fs::read(&cert).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .tls_certs_only([trusted])
        .build()
        .unwrap();
    let health = client.get(format!("{url}/__health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);

    let plain = reqwest::Client::new()
        .get(format!("{}/__health", url.replacen("https", "http", 1)))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP is not served: {plain:?}");
}

#[tokio::test]
async fn tls_cert_without_tls_key_is_a_usage_error() {
    let stderr = usage_error_after_the_key(&["--tls-cert", "/tmp/cert.pem"]).await;
    assert!(stderr.contains("--tls-key"), "{stderr}");
}

#[tokio::test]
async fn an_unreadable_tls_cert_fails_at_start_naming_the_file() {
    let output = Command::new(BINARY)
        .args(["--api-key", SECRET, "--port", "0"])
        .args([
            "--tls-cert",
            "/nonexistent/cert.pem",
            "--tls-key",
            "/nonexistent/key.pem",
        ])
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/cert.pem"), "{stderr}");
}
