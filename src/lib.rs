//! onecharge turns at-least-once delivery of `ChargePayment` commands into exactly one charge
//! per payment attempt. See docs/ARCHITECTURE.md for the map of this crate.

pub mod app;
pub mod broker;
pub mod cli;
pub mod clock;
pub mod config;
pub mod demo;
pub mod domain;
pub mod executor;
pub mod format;
pub mod gateway;
pub mod gateway_access;
pub mod gateway_limit;
pub mod gauges;
pub mod generated;
pub mod http;
pub mod identity;
pub mod intake;
pub mod metrics;
pub mod nudge;
pub mod operator;
pub mod publish;
pub mod purge;
pub mod reconciler;
pub mod refunds;
pub mod relay;
pub mod schemas;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod tls;
