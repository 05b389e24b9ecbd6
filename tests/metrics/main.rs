//! The tests that read the process-global Prometheus recorder exactly: counters as
//! differences, gauges by value. They run in a process of their own, because every role the
//! tests of `tests/it` run in-process would move the same series meanwhile.
//!
//! Every test here that records or reads metrics holds [`RECORDER`], so none sees another's
//! increments or gauges.

#[path = "../it/support/mod.rs"]
mod support;

mod deploy;
mod lag;
mod observability;
mod outcome_latency;
mod serve;

/// Held by every test of this binary that records or reads metrics.
static RECORDER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
