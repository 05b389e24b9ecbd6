//! The `mock-gateway` binary: its help, and serving the contract on the port it prints.

use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_mock-gateway");
const SECRET: &str = "sk_test_do_not_print_me";

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
    let output = Command::new(BINARY)
        .args(["--api-key", SECRET, "--error-before-probability", "1.5"])
        .output()
        .await
        .unwrap();

    assert_eq!(output.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&output.stderr).contains(SECRET));
}

#[tokio::test]
async fn the_binary_serves_the_contract_on_the_port_it_prints_and_stops_on_sigterm() {
    let mut child = Command::new(BINARY)
        .args(["--port", "0", "--seed", "1", "--error-before-count", "1"])
        .env("MOCK_GATEWAY_API_KEY", SECRET)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(10), stdout.next_line())
        .await
        .expect("the base URL is printed")
        .unwrap()
        .expect("a line on stdout");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

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
    let ledger: Vec<Value> = client
        .get(format!("{url}/__ledger"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
