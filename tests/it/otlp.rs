//! OTLP span export: off by default, and when `otlp_endpoint` is set the real binary posts
//! its spans to `<endpoint>/v1/traces` before it exits.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::Records;
use crate::support::{self, assert_exited_ok, onecharge, sigterm, TestEnv};
use uuid::Uuid;

/// A stand-in OTLP/HTTP collector on 127.0.0.1:0 that answers every request with an empty
/// (valid) protobuf response and counts the `POST /v1/traces` it received.
struct Collector {
    endpoint: String,
    traces: Arc<AtomicUsize>,
}

impl Collector {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the collector");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let traces = Arc::new(AtomicUsize::new(0));
        let counted = traces.clone();
        std::thread::spawn(move || {
            for connection in listener.incoming().flatten() {
                let counted = counted.clone();
                std::thread::spawn(move || serve_connection(connection, &counted));
            }
        });
        Self { endpoint, traces }
    }

    fn trace_requests(&self) -> usize {
        self.traces.load(Ordering::SeqCst)
    }
}

/// Reads HTTP/1.1 requests off one kept-alive connection until the client closes it.
fn serve_connection(connection: TcpStream, traces: &AtomicUsize) {
    let mut writer = connection.try_clone().expect("clone the socket");
    let mut reader = BufReader::new(connection);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut content_length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    content_length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; content_length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        if request_line.starts_with("POST /v1/traces ") && !body.is_empty() {
            traces.fetch_add(1, Ordering::SeqCst);
        }
        let response =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// Runs `onecharge serve --roles intake` on `env` until it has recorded one published
/// command (a delivery span), then stops it with SIGTERM and waits for a clean exit.
async fn serve_intake_until_one_command_is_recorded(env: &TestEnv, otlp_endpoint: Option<&str>) {
    env.publish(
        &format!("m-{}", Uuid::new_v4()),
        &support::command(Uuid::new_v4(), serde_json::json!({})),
    )
    .await;
    let mut cmd = onecharge();
    cmd.args(["serve", "--roles", "intake"])
        .env_remove("RUST_LOG")
        .env_remove("ONECHARGE_OTLP_ENDPOINT")
        .env("ONECHARGE_DATABASE_URL", &env.settings.database_url)
        .env("ONECHARGE_NATS_URL", &env.settings.nats_url)
        .env("ONECHARGE_NAMESPACE", &env.settings.namespace)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(endpoint) = otlp_endpoint {
        cmd.env("ONECHARGE_OTLP_ENDPOINT", endpoint);
    }
    let child = cmd.spawn().expect("start onecharge serve");

    let deadline = Instant::now() + Duration::from_secs(30);
    while env.dedupe_rows().await < 1 {
        assert!(
            Instant::now() < deadline,
            "intake did not record the command in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(sigterm(child.id()), "send SIGTERM");
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .expect("onecharge exits");
    assert_exited_ok(&output, "serve");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_otlp_endpoint_the_delivery_spans_reach_the_collector_before_exit() {
    let env = TestEnv::new().await;
    let collector = Collector::start();

    serve_intake_until_one_command_is_recorded(&env, Some(&collector.endpoint)).await;

    assert!(
        collector.trace_requests() >= 1,
        "the collector received no POST /v1/traces"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_otlp_endpoint_no_span_leaves_the_process() {
    let env = TestEnv::new().await;
    let collector = Collector::start();

    serve_intake_until_one_command_is_recorded(&env, None).await;

    assert_eq!(collector.trace_requests(), 0);
}
