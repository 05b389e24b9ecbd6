//! onecharge turns at-least-once delivery of `ChargePayment` commands into exactly one charge
//! per payment attempt. See docs/ARCHITECTURE.md for the map of this crate.

/// Logs a role's failed step at `$level` (`warn` or `error`), or at debug when `$quiet`:
/// a step the process's announced database failover explains (`store::availability`,
/// decision 250), so that one failover is one warning, not one per step.
macro_rules! step_failed {
    ($quiet:expr, $level:ident, $($arg:tt)+) => {
        if $quiet {
            tracing::debug!($($arg)+)
        } else {
            tracing::$level!($($arg)+)
        }
    };
}

pub mod app;
pub mod broker;
pub mod cli;
pub mod clock;
pub mod config;
pub mod documents;
pub mod domain;
pub mod executor;
pub mod format;
pub mod gateway;
pub mod gateway_access;
pub mod gauges;
pub mod http;
pub mod identity;
pub mod intake;
pub mod metrics;
pub mod nudge;
pub mod operator;
pub mod purge;
pub mod reconciler;
pub mod relay;

pub mod shutdown;
pub mod store;
pub mod telemetry;
