//! `onecharge-demo` (and `onecharge demo`, which runs it): the whole pipeline, end to end,
//! against the local PostgreSQL and NATS and an in-process mock gateway that declines,
//! rate-limits, fails before and after charging, hangs and drops connections. It publishes a few hundred commands with producer
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

mod private;
mod published;
mod refunds;
mod run;
mod verdict;

pub use onecharge::cli::DemoArgs;
pub use run::run;
