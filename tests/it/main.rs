//! The integration tests: one binary, against real PostgreSQL and real NATS; each test makes
//! its own database and JetStream namespace (`support::throwaway`). One module per area;
//! `cargo test --test it <module>::` runs one area, e.g. `cargo test --test it executor::`.
//!
//! The two other test binaries run apart for a reason: `tests/metrics` reads the
//! process-global Prometheus recorder exactly, which the roles these tests run would move,
//! and `tests/soak` loads the whole machine with serve processes for a minute.

mod support;

mod admin_api;
mod admin_hostile;
mod attempt_counts;
mod audit;
mod browser;
mod bulk;
mod cancel;
mod charts;
mod claim_ahead;
mod cli;
mod cluster;
mod console;
mod dlq_operations;
mod dlq_replay;
mod executor;
mod export;
mod failover;
mod fleet;
mod intake;
mod intake_hostile;
mod intake_race;
mod kernel;
mod least_privilege;
mod migrations;
mod nats_permissions;
mod openapi;
mod operator;
mod operator_find;
mod otlp;
mod paging;
mod rate_limit;
mod recheck;
mod reconciler;
mod refund_ops;
mod refunds;
mod relay;
mod restricted_key;
mod retention;
mod schemas;
mod secrets;
mod stream_audit;
mod stripe;
mod stripe_localstripe;
mod sweep;
mod time;
mod tls;
mod tracing;
mod webhook;
mod webhook_localstripe;
