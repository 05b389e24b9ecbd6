//! The benchmarks' log-normal gateway latency flags (see docs/mock-gateway.md).

use std::time::Duration;

use mock_gateway::{LatencyDistribution, LatencyDrawn};

/// `--latency-median`, `--latency-p99`, `--latency-seed`.
#[derive(Debug, clap::Args)]
pub struct LatencyArgs {
    /// Median of a log-normal gateway latency (e.g. 300ms), added to the constant latency;
    /// needs --latency-p99
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration, requires = "latency_p99")]
    pub latency_median: Option<Duration>,
    /// 99th percentile of the log-normal gateway latency (e.g. 1.5s), not below the median
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration, requires = "latency_median")]
    pub latency_p99: Option<Duration>,
    /// Seed of the gateway's latency stream, so runs repeat
    #[arg(long, value_name = "N", default_value_t = 7)]
    pub latency_seed: u64,
}

impl LatencyArgs {
    /// The distribution asked for, if any; an error says what to change (a usage error).
    pub fn distribution(&self) -> Result<Option<LatencyDistribution>, String> {
        match (self.latency_median, self.latency_p99) {
            (Some(median), Some(p99)) => {
                LatencyDistribution::log_normal(median, p99, self.latency_seed).map(Some)
            }
            _ => Ok(None),
        }
    }
}

/// Milliseconds with one decimal, the way the tables print latencies.
pub fn millis(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

/// The constant latency plus the mean the mock really drew from its distribution, or "—"
/// when it drew nothing.
pub fn observed_mean(constant: Duration, drawn: LatencyDrawn) -> String {
    drawn
        .mean()
        .map_or_else(|| "—".to_owned(), |mean| millis(constant + mean))
}
