//! The `mock-gateway` command line: flags for every [`MockConfig`] field, then serve until
//! SIGINT/SIGTERM.

use std::io::IsTerminal;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser};
use tracing_subscriber::EnvFilter;

use crate::config::{Dialect, FaultConfig, FaultRule, Latency, MockConfig, RefundFaults, TlsFiles};
use crate::latency::LatencyDistribution;
use crate::MockGateway;

const TRIGGERS_HELP: &str = "\
Deterministic outcomes by payment_method:
  pm_card_declined            402, decline_code card_declined
  pm_card_insufficient_funds  402, decline_code insufficient_funds
  anything else               201 succeeded
Fault triggers by payment_method, only on the first request under an idempotency key (later
requests with that key behave normally and succeed):
  pm_fault_error_before  500, nothing charged
  pm_fault_error_after   charged, then 500
  pm_fault_hang_after    charged, response held for --hang-for
  pm_fault_drop_after    charged, connection closed with no response
  pm_fault_rate_limit    429 + Retry-After: 1, nothing charged
  pm_fault_bad_request   400 invalid_request, nothing charged
  pm_fault_slow_charge   key in progress for --slow-charge-for (409, empty lookup), then charged

Refunds (POST /v1/refunds, GET /v1/refunds?idempotency_key=): every refund of a charge paid
with pm_card_pendingRefund starts pending and succeeds after --refund-settle-after; with
pm_card_refundFail it succeeds, then fails after --refund-settle-after. POST /__refunds/{id}
{\"status\": …} moves one, POST /__refunds/settle settles all that wait, GET /__ledger/refunds
counts them by refund id, key and charge. Refund faults: --refund-faults.

With --dialect stripe the gateway serves Stripe's PaymentIntents API instead
(POST /v1/payment_intents, POST /v1/payment_intents/{id}/confirm|cancel,
GET /v1/payment_intents/{id}, POST|GET /v1/refunds, GET /v1/refunds/{id},
POST /v1/customers; form-encoded) with Stripe's test payment methods: pm_card_visa,
pm_card_mastercard (succeed), pm_card_visa_chargeDeclined (generic_decline),
pm_card_chargeDeclinedInsufficientFunds (insufficient_funds), pm_card_authenticationRequired
(off-session: 402 authentication_required), the refund cards above, the pm_fault_* triggers
above on the call that charges, and pm_fault_processing (processing for --slow-charge-for,
then succeeded). See docs/mock-gateway.md.";

/// A payment gateway that speaks onecharge's gateway contract (POST/GET /v1/charges,
/// POST/GET /v1/refunds), with idempotency keys, ledgers of charges and refunds, and
/// injectable faults.
///
/// On start it prints its base URL as the only line on stdout; logs (one line per request)
/// go to stderr, filtered by RUST_LOG (default "info"). Test controls, without auth:
/// GET /__ledger, GET /__ledger/refunds, GET /__stats, GET /__requests, GET|PUT /__faults,
/// POST /__clock/advance {"seconds":N}, POST /__refunds/{id}, POST /__refunds/settle,
/// GET /__health.
///
/// Each fault kind fires on the next COUNT charging requests, and otherwise with
/// PROBABILITY; faults touch only requests that would charge (never replays, 409 or 422).
#[derive(Debug, Parser)]
#[command(name = "mock-gateway", version, after_long_help = TRIGGERS_HELP)]
pub struct Cli {
    /// IP address to listen on.
    #[arg(long, env = "MOCK_GATEWAY_HOST", default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub host: IpAddr,

    /// TCP port to listen on; 0 picks a free port (read it from stdout).
    #[arg(short, long, env = "MOCK_GATEWAY_PORT", default_value_t = 8090)]
    pub port: u16,

    /// The bearer token clients must send (`Authorization: Bearer <key>`). Never printed.
    #[arg(long, env = "MOCK_GATEWAY_API_KEY", hide_env_values = true)]
    pub api_key: String,

    /// How long an idempotency key is remembered after its first request (e.g. 24h, 90m,
    /// 10s). An older key is forgotten: reusing it charges again.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "24h")]
    pub key_retention: Duration,

    /// How long a hang_after fault holds the response (real time); make it longer than the
    /// client's timeout.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub hang_for: Duration,

    /// How long a slow_charge fault keeps its key in progress (409 to re-sends, nothing
    /// found by lookups) before it charges (real time).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub slow_charge_for: Duration,

    /// How long a refund that settles later (pending, or a pm_card_refundFail refund that
    /// succeeded) waits before it settles (real time); POST /__refunds/settle ends them all
    /// at once.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub refund_settle_after: Duration,

    /// Seed for fault dice, latency jitter and charge ids; the same seed and the same
    /// sequence of requests give the same run. Default: random, and logged at start.
    #[arg(long, env = "MOCK_GATEWAY_SEED")]
    pub seed: Option<u64>,

    /// Replay a stored decline as 200 instead of its stored 402 (both are allowed by the
    /// contract; successes are always replayed as 200).
    #[arg(long)]
    pub replay_declined_with_200: bool,

    /// How many recent /v1 requests GET /__requests keeps.
    #[arg(long, default_value_t = 100_000)]
    pub request_log_capacity: usize,

    /// Serve HTTPS (only) with this PEM certificate chain, leaf first; needs --tls-key.
    /// The printed base URL then starts with https://.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Median of a log-normal latency added to every charge and lookup (e.g. 300ms), on
    /// top of --latency-ms/--latency-jitter-ms and the fault delays; needs --latency-p99.
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration, requires = "latency_p99")]
    pub latency_median: Option<Duration>,

    /// 99th percentile of the log-normal latency (e.g. 1.5s); not below --latency-median.
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration, requires = "latency_median")]
    pub latency_p99: Option<Duration>,

    /// Seed of the log-normal latency stream [default: --seed].
    #[arg(long, value_name = "N", requires = "latency_median")]
    pub latency_seed: Option<u64>,

    /// Which API to speak: onecharge (contract §3, POST/GET /v1/charges) or stripe
    /// (PaymentIntents, form-encoded, Stripe's errors and test payment methods).
    #[arg(long, value_enum, env = "MOCK_GATEWAY_DIALECT", default_value_t = DialectArg::Onecharge)]
    pub dialect: DialectArg,

    /// The fault flags, in a help section of their own.
    #[command(flatten)]
    pub faults: FaultArgs,
}

/// The `--dialect` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DialectArg {
    /// onecharge's gateway contract (§3).
    Onecharge,
    /// Stripe's PaymentIntents API.
    Stripe,
}

impl From<DialectArg> for Dialect {
    fn from(arg: DialectArg) -> Dialect {
        match arg {
            DialectArg::Onecharge => Dialect::Onecharge,
            DialectArg::Stripe => Dialect::Stripe,
        }
    }
}

/// Fault flags: each kind fires on the next COUNT charging requests, and otherwise with
/// PROBABILITY. Faults touch only requests that would charge (never replays, 409 or 422).
#[derive(Debug, Args)]
#[command(next_help_heading = "Fault injection (change at run time with PUT /__faults)")]
pub struct FaultArgs {
    /// Chance of a 500 before charging (nothing charged).
    #[arg(long, value_name = "P", value_parser = probability, default_value_t = 0.0)]
    pub error_before_probability: f64,
    /// Number of next charging requests answered 500 before charging.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub error_before_count: u64,

    /// Chance of charging, then answering 500.
    #[arg(long, value_name = "P", value_parser = probability, default_value_t = 0.0)]
    pub error_after_probability: f64,
    /// Number of next charging requests that charge, then answer 500.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub error_after_count: u64,

    /// Chance of charging, then holding the response for --hang-for.
    #[arg(long, value_name = "P", value_parser = probability, default_value_t = 0.0)]
    pub hang_after_probability: f64,
    /// Number of next charging requests that charge, then hold the response.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub hang_after_count: u64,

    /// Chance of charging, then closing the connection with no response.
    #[arg(long, value_name = "P", value_parser = probability, default_value_t = 0.0)]
    pub drop_after_probability: f64,
    /// Number of next charging requests that charge, then lose their connection.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub drop_after_count: u64,

    /// Chance of a 429 with Retry-After: 1 (nothing charged).
    #[arg(long, value_name = "P", value_parser = probability, default_value_t = 0.0)]
    pub rate_limit_probability: f64,
    /// Number of next charging requests answered 429.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub rate_limit_count: u64,

    /// Chance of keeping the key in progress for --slow-charge-for, then charging.
    #[arg(long, value_name = "P", value_parser = probability, default_value_t = 0.0)]
    pub slow_charge_probability: f64,
    /// Number of next charging requests kept in progress, then charged.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub slow_charge_count: u64,

    /// Fixed latency added to every /v1 request, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub latency_ms: u64,
    /// Extra random latency, uniform in 0..=MS milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub latency_jitter_ms: u64,

    /// The refunds' faults and starts, as the "refunds" object of PUT /__faults, e.g.
    /// '{"error_after":{"count":1},"pending":{"probability":0.2}}'. Kinds: error_before,
    /// error_after, hang_after, drop_after, rate_limit, slow_refund (POST /v1/refunds);
    /// pending, requires_action, failed (how a new refund starts); lookup_error,
    /// lookup_rate_limit, lookup_hang, lookup_drop (refund lookups).
    #[arg(long, value_name = "JSON", value_parser = refund_faults)]
    pub refund_faults: Option<RefundFaults>,
}

impl FaultArgs {
    /// The [`FaultConfig`] these flags describe, the same as `PUT /__faults` would take.
    pub fn to_config(&self) -> FaultConfig {
        let rule = |probability, count| FaultRule { probability, count };
        FaultConfig {
            error_before: rule(self.error_before_probability, self.error_before_count),
            error_after: rule(self.error_after_probability, self.error_after_count),
            hang_after: rule(self.hang_after_probability, self.hang_after_count),
            drop_after: rule(self.drop_after_probability, self.drop_after_count),
            rate_limit: rule(self.rate_limit_probability, self.rate_limit_count),
            slow_charge: rule(self.slow_charge_probability, self.slow_charge_count),
            latency: Latency {
                fixed_ms: self.latency_ms,
                jitter_ms: self.latency_jitter_ms,
            },
            refunds: self.refund_faults.clone().unwrap_or_default(),
        }
    }
}

fn refund_faults(text: &str) -> Result<RefundFaults, String> {
    let faults = FaultConfig {
        refunds: serde_json::from_str(text).map_err(|e| e.to_string())?,
        ..FaultConfig::default()
    };
    faults.validate()?;
    Ok(faults.refunds)
}

fn probability(text: &str) -> Result<f64, String> {
    let p: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err("must be between 0 and 1".to_owned())
    }
}

impl Cli {
    /// The library configuration these flags describe; a missing seed becomes a random one.
    ///
    /// An error is a usage error (a p99 below the median), in words saying what to change.
    pub fn to_config(&self) -> Result<MockConfig, String> {
        let seed = self.seed.unwrap_or_else(rand::random);
        let latency_distribution = match (self.latency_median, self.latency_p99) {
            (Some(median), Some(p99)) => Some(LatencyDistribution::log_normal(
                median,
                p99,
                self.latency_seed.unwrap_or(seed),
            )?),
            _ => None,
        };
        Ok(MockConfig {
            api_key: self.api_key.clone(),
            key_retention: self.key_retention,
            faults: self.faults.to_config(),
            seed,
            hang_for: self.hang_for,
            slow_charge_for: self.slow_charge_for,
            bind: SocketAddr::new(self.host, self.port),
            replay_declined_with_200: self.replay_declined_with_200,
            request_log_capacity: self.request_log_capacity,
            tls: self
                .tls_cert
                .clone()
                .zip(self.tls_key.clone())
                .map(|(cert_file, key_file)| TlsFiles {
                    cert_file,
                    key_file,
                }),
            latency_distribution,
            dialect: self.dialect.into(),
            refund_settle_after: self.refund_settle_after,
        })
    }
}

/// Logs to stderr so that stdout carries only the base URL.
pub fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// Starts the gateway, prints its base URL, serves until SIGINT or SIGTERM.
///
/// Takes the configuration from [`Cli::to_config`], whose error the binary reports as a
/// usage error (exit 2) before this runs.
pub async fn run(config: MockConfig) -> anyhow::Result<()> {
    let seed = config.seed;
    let dialect = config.dialect;
    let latency = config.latency_distribution.map_or_else(
        || "none".to_owned(),
        |distribution| distribution.to_string(),
    );
    let gateway = MockGateway::start(config).await?;
    tracing::info!(base_url = %gateway.base_url(), seed, %latency, %dialect, "mock gateway listening");
    println!("{}", gateway.base_url());
    wait_for_stop_signal().await?;
    tracing::info!("stopping");
    gateway.shutdown().await;
    Ok(())
}

async fn wait_for_stop_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result.context("listening for SIGINT")?,
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c()
        .await
        .context("listening for Ctrl-C")?;
    Ok(())
}
