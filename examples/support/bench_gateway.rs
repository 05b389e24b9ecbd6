//! The in-process mock gateway the benchmarks charge against.

use mock_gateway::{Dialect, FaultConfig, Latency, LatencyDistribution, MockConfig, MockGateway};

/// The key the mock accepts, which the benchmark's executors (or serve process) send.
pub const API_KEY: &str = "sk_bench";

/// A mock without faults that answers every charge after `latency_ms` (plus a draw from
/// `distribution`, when there is one) and keeps its last `request_log_capacity` requests
/// (0: none) for the benchmark to read back.
#[allow(dead_code)] // The end-to-end benchmark chooses the dialect.
pub async fn start(
    latency_ms: u64,
    distribution: Option<LatencyDistribution>,
    request_log_capacity: usize,
) -> anyhow::Result<MockGateway> {
    start_speaking(
        Dialect::Onecharge,
        latency_ms,
        distribution,
        request_log_capacity,
    )
    .await
}

/// [`start`], speaking `dialect` (the §3 API or Stripe's).
#[allow(dead_code)] // Only the end-to-end benchmark measures the Stripe connector.
pub async fn start_speaking(
    dialect: Dialect,
    latency_ms: u64,
    distribution: Option<LatencyDistribution>,
    request_log_capacity: usize,
) -> anyhow::Result<MockGateway> {
    MockGateway::start(MockConfig {
        dialect,
        api_key: API_KEY.into(),
        faults: FaultConfig {
            latency: Latency::fixed(latency_ms),
            ..FaultConfig::default()
        },
        request_log_capacity,
        latency_distribution: distribution,
        ..MockConfig::default()
    })
    .await
}
