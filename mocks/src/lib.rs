//! A mock payment gateway that speaks onecharge's gateway contract (contract §3), or with
//! [`Dialect::Stripe`] Stripe's PaymentIntents API ([`stripe`]), and behaves like a real
//! idempotent gateway, including its failures.
//!
//! - `POST /v1/charges` charges at most once per `Idempotency-Key` (per retention window),
//!   atomically under concurrent requests; it replays stored outcomes, answers `409` while a
//!   key is in progress and `422` when a key is reused with other parameters.
//! - `GET /v1/charges?idempotency_key=K` looks outcomes up, as the reconciler does.
//! - `POST /v1/refunds` refunds at most once per key and never over the charge (its
//!   succeeded and pending refunds count), in both dialects; refunds may start `pending` and
//!   settle later, or fail ([`MockGateway::settle_refunds`], `POST /__refunds/{id}`).
//! - Faults (5xx before/after charging, hang, dropped connection, 429, latency) are injected
//!   by seeded dice, by counts, or deterministically by payment method
//!   ([`payment_methods`]), and can be changed at run time; refunds have their own
//!   ([`RefundFaults`]).
//! - Ledgers ([`MockGateway::ledger`], `GET /__ledger`; [`MockGateway::refunds`],
//!   `GET /__ledger/refunds`) let tests check "exactly one charge", "never refunded twice,
//!   never over the charge" against what the gateway really committed.
//!
//! Tests and `onecharge demo` start it in-process:
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use mock_gateway::{MockConfig, MockGateway};
//! let gateway = MockGateway::start(MockConfig::default()).await?;
//! let url = gateway.base_url(); // give this to the client under test
//! // … run the client …
//! assert_eq!(gateway.ledger().len(), 1);
//! gateway.shutdown().await;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

// Layered, and imports run only downward: the values (`charge`, `refund`, `config`,
// `clock`, `latency`, `record`, `faults`, `paging`, `keys`, `ledger`, the refund ledger
// `refund::ledger`, `answer`) and the Stripe dialect's own store under `stripe`; then
// `state`, the state every handler shares; then the plumbing both dialects share:
// `respond`, `refund::settle` (how a refund is made and settled) and `controls`; then each
// dialect's handlers (`onecharge` for contract §3 with its idempotency layer, `stripe`); on
// top `server`, which assembles the routes and listens, and `cli`.
mod answer;
mod charge;
pub mod cli;
mod clock;
mod config;
mod controls;
mod faults;
mod keys;
mod latency;
mod ledger;
mod onecharge;
mod paging;
mod record;
mod refund;
mod respond;
mod server;
mod state;
pub mod stripe;

pub use charge::{
    decline_code, fault_trigger, payment_methods, validate_idempotency_key, Charge, ChargeParams,
    ChargeStatus, InvalidRequest, MAX_AMOUNT_MINOR, MAX_IDEMPOTENCY_KEY_LEN,
};
pub use config::{
    Dialect, FaultConfig, FaultKind, FaultRule, Latency, MockConfig, RefundFaults, TlsFiles,
};
pub use latency::{LatencyDistribution, LatencyDrawn};
pub use record::{PageTimes, RecordedRequest, ResponseClass, Stats, PAGE_TIMES_KEPT};
pub use refund::{Refund, RefundStatus};
pub use server::MockGateway;
