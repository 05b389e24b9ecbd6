//! Measures how many requests per second the mock gateway sustains, so that a benchmark of
//! onecharge knows whether the mock could be its bottleneck.
//!
//! N concurrent clients send requests over loopback until `--requests` have been sent or
//! `--max-seconds` have passed, whichever comes first. Without `--url` the gateway runs in
//! this process (sharing the CPU with the clients, so the figure is a lower bound).
//!
//! ```text
//! cargo run --release -p mock-gateway --example load -- --concurrency 256 --requests 100000
//! cargo run --release -p mock-gateway --example load -- --url http://127.0.0.1:8090 --api-key …
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use mock_gateway::{MockConfig, MockGateway};
use serde_json::json;

#[derive(Debug, Parser)]
#[command(about = "Drive the mock gateway with concurrent clients and print requests/s")]
struct Args {
    /// A running gateway (loopback only). Default: start one in this process.
    #[arg(long)]
    url: Option<String>,
    /// The API key of the gateway at --url.
    #[arg(long, env = "MOCK_GATEWAY_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Concurrent clients, each with requests in flight one at a time (one connection each).
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Total requests to send.
    #[arg(long, default_value_t = 100_000)]
    requests: u64,
    /// Stop after this long even if not all requests were sent.
    #[arg(long, default_value_t = 30)]
    max_seconds: u64,
    /// What each request does.
    #[arg(long, value_enum, default_value_t = Mode::Charge)]
    mode: Mode,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    /// A new idempotency key per request: claim, commit, ledger append (201).
    Charge,
    /// One key per client, charged once, then replayed (200 + Idempotent-Replayed).
    Replay,
    /// GET /v1/charges?idempotency_key=… for a charged key.
    Lookup,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (gateway, url, api_key) = match &args.url {
        Some(url) => {
            require_loopback(url)?;
            let key = args
                .api_key
                .clone()
                .context("--api-key (or MOCK_GATEWAY_API_KEY) is required with --url")?;
            (None, url.trim_end_matches('/').to_owned(), key)
        }
        None => {
            let config = MockConfig::default();
            let key = config.api_key.clone();
            let gateway = MockGateway::start(config).await?;
            let url = gateway.base_url();
            (Some(gateway), url, key)
        }
    };

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .timeout(Duration::from_secs(30))
        .build()?;
    let run_id = format!("{:x}", rand::random::<u32>());
    let sent = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(args.max_seconds);
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for client_no in 0..args.concurrency {
        let (client, url, api_key, sent, run_id) = (
            client.clone(),
            url.clone(),
            api_key.clone(),
            Arc::clone(&sent),
            run_id.clone(),
        );
        let (limit, mode) = (args.requests, args.mode);
        clients.spawn(async move {
            let own_key = format!("load-{run_id}-client-{client_no}");
            let mut report = Report::default();
            if !matches!(mode, Mode::Charge) {
                // Warm-up, not counted: the key the replays or lookups hit.
                charge(&client, &url, &api_key, &own_key).await.ok();
            }
            while Instant::now() < deadline && sent.fetch_add(1, Ordering::Relaxed) < limit {
                let began = Instant::now();
                let result = match mode {
                    Mode::Charge => {
                        let key = format!("load-{run_id}-{client_no}-{}", report.latencies.len());
                        charge(&client, &url, &api_key, &key).await
                    }
                    Mode::Replay => charge(&client, &url, &api_key, &own_key).await,
                    Mode::Lookup => client
                        .get(format!("{url}/v1/charges"))
                        .query(&[("idempotency_key", &own_key)])
                        .bearer_auth(&api_key)
                        .send()
                        .await
                        .map(|r| r.status().as_u16()),
                };
                report.latencies.push(began.elapsed());
                let outcome = result.map_or_else(|_| "error".to_owned(), |s| s.to_string());
                *report.outcomes.entry(outcome).or_default() += 1;
            }
            report
        });
    }
    let mut total = Report::default();
    while let Some(report) = clients.join_next().await {
        total.merge(report?);
    }
    let elapsed = started.elapsed();

    total.latencies.sort();
    let done = total.latencies.len();
    let percentile = |p: f64| total.latencies[((done as f64 * p) as usize).min(done - 1)];
    println!(
        "mode={:?} concurrency={} requests={done} elapsed={:.2}s",
        args.mode,
        args.concurrency,
        elapsed.as_secs_f64()
    );
    println!(
        "throughput={:.0} requests/s  latency p50={:?} p99={:?} max={:?}",
        done as f64 / elapsed.as_secs_f64(),
        percentile(0.50),
        percentile(0.99),
        total.latencies[done - 1]
    );
    println!("responses by status: {:?}", total.outcomes);
    if let Some(gateway) = gateway {
        let stats = gateway.stats();
        println!(
            "gateway: requests={} created={} replayed={} lookups={} ledger={}",
            stats.requests, stats.created, stats.replayed, stats.lookups, stats.charges
        );
        gateway.shutdown().await;
    }
    Ok(())
}

async fn charge(
    client: &reqwest::Client,
    url: &str,
    api_key: &str,
    key: &str,
) -> reqwest::Result<u16> {
    let response = client
        .post(format!("{url}/v1/charges"))
        .bearer_auth(api_key)
        .header("Idempotency-Key", key)
        .json(&json!({
            "amount_minor": 1999, "currency": "EUR", "customer_id": "cus_load",
            "payment_method": "pm_card_visa", "reference": key
        }))
        .send()
        .await?;
    Ok(response.status().as_u16())
}

#[derive(Default)]
struct Report {
    latencies: Vec<Duration>,
    outcomes: BTreeMap<String, u64>,
}

impl Report {
    fn merge(&mut self, other: Report) {
        self.latencies.extend(other.latencies);
        for (outcome, n) in other.outcomes {
            *self.outcomes.entry(outcome).or_default() += n;
        }
    }
}

/// The load generator is for this machine's loopback only, never for a remote host.
fn require_loopback(url: &str) -> anyhow::Result<()> {
    let host = url
        .strip_prefix("http://")
        .context("--url must start with http://")?
        .split(['/', ':'])
        .next()
        .unwrap_or_default();
    let host = if url.contains("://[::1]") {
        "::1"
    } else {
        host
    };
    match host {
        "127.0.0.1" | "localhost" | "::1" => Ok(()),
        other => bail!("--url must point at loopback (127.0.0.1, localhost, [::1]), not {other}"),
    }
}
