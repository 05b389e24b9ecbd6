//! `onecharge demo`: the whole pipeline, end to end, against the local PostgreSQL and NATS
//! and an in-process mock gateway that declines, rate-limits, fails before and after
//! charging, hangs and drops connections. It publishes a few hundred commands with producer
//! retries, business duplicates, conflicts and invalid messages, waits until everything
//! settled, and checks the promise against the gateway's own ledger. Exit 0 only when it held.
//!
//! Once the charges settled it refunds a few of them (whole, partial then the rest, one
//! published three times, one past what is left, one of a declined charge) and checks the
//! refunds against the gateway's refund ledger too.
//!
//! The demo runs in its own database and stream namespace and removes both afterwards
//! (unless `--keep`), so it never touches a real deployment on the same servers. Where no
//! PostgreSQL or no NATS listens at the configured address, it starts private ones in a
//! temporary directory and stops them at exit (`private`).

#[cfg(feature = "demo")]
mod private;
#[cfg(feature = "demo")]
mod published;
#[cfg(feature = "demo")]
mod refunds;
#[cfg(feature = "demo")]
mod run;
#[cfg(feature = "demo")]
mod verdict;

use std::time::Duration;

use clap::Args;

#[cfg(feature = "demo")]
pub use run::run;

/// Options of `onecharge demo`. Compiled in every build, the run only with the `demo`
/// feature, so that a build without it still parses every demo command line and answers it
/// in one line (`crate::cli::demo`).
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Distinct payment attempts to publish (duplicates, conflicts and invalid messages come on top)
    #[arg(long, default_value_t = 300)]
    pub attempts: usize,
    /// Seed for the command mix and the gateway's faults: the same seed, the same run
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Longest wait for everything to settle
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Keep the demo's database and streams for inspection instead of removing them
    #[arg(long)]
    pub keep: bool,
    /// The protocol onecharge and the mock gateway speak: `stripe` runs the `stripe`
    /// connector against the mock's Stripe dialect [default: the configured gateway_kind]
    #[arg(long, value_enum, value_name = "KIND")]
    pub gateway: Option<crate::gateway::GatewayKind>,
    /// After the summary, serve the operator console over the demo's data on --admin-addr
    /// until Ctrl-C (the data is removed afterwards unless --keep)
    #[arg(long)]
    pub console: bool,
}
