//! The one test harness of the suite, shared by the test binaries (`tests/it`, and with
//! `#[path]` `tests/metrics`, `tests/soak` and the demo's `demo/tests`):
//!
//! - [`throwaway`]: a database and a JetStream namespace of a test's own, removed on drop
//!   (also used by the soak and the benchmarks in `examples/`);
//! - [`env`]: [`TestEnv`], the intake-side world (database + namespace, connected at once);
//! - [`harness`]: [`Harness`], the executor-side world (database, mock gateway, manual
//!   clock, a namespace on demand);
//! - [`records`]: [`Records`], what the database holds (an attempt, its transitions, gateway
//!   calls and events, findings, audit, dedupe rows), read once for every test, and the few
//!   writes that arrange a past or break the schema on purpose, each named once;
//! - [`command`]: the one ChargePayment body, and the record intake makes of it;
//! - [`nats`]: reading a stream's messages and their headers;
//! - [`process`]: the `onecharge` and `onecharge-demo` binaries, run the same way by every test;
//! - [`served`]: [`Served`], the service running in the test's process with some roles;
//! - [`nats_server`], [`cluster`]: `nats-server` processes of a test's own;
//! - [`browser`]: a headless chromium driven over WebDriver (the console's browser tests).
//! - [`mock_control`]: [`MockControl`], the mock gateway's `/__*` test controls, by what they
//!   do (a refund or dispute made outside onecharge, a webhook sent or redelivered);
//! - [`api`]: [`api::AdminApi`], the admin API client of the API and console tests, and the
//!   set-up of an attempt in review they share;
//! - [`localstripe`], [`pg_cluster`]: a localstripe process and PostgreSQL clusters (a primary
//!   and a standby) of a test's own;
//! - [`patroni`]: a Patroni cluster of a test's own (etcd, three PostgreSQL nodes, HAProxy);
//! - [`privileges`]: login roles of a test's own, an owner and a runtime role (the grants'
//!   tests).
#![allow(dead_code, unused_imports)]

pub mod api;
pub mod browser;
pub mod cluster;
pub mod command;
pub mod env;
pub mod harness;
pub mod localstripe;
pub mod mock_control;
pub mod nats;
pub mod nats_server;
pub mod patroni;
pub mod pg_cluster;
pub mod privileges;
pub mod process;
pub mod records;
pub mod refund_roles;
pub mod served;
pub mod throwaway;

pub use command::{
    command, command_file, intake_record, orders, record, record_batch, refund_command,
};
pub use env::TestEnv;
pub use harness::{
    charge_request, charge_request_with_amount, eventually, first_outcome, gateway_answering,
    refused_url, run_leaving_one_in, take_in, AttemptRow, Harness, API_KEY,
};
pub use mock_control::MockControl;
pub use nats::{commands_stream, edit_stream, header, shrink_duplicate_window, stream};
pub use process::{assert_exited_ok, one_line_error, onecharge, onecharge_demo, sigterm};
pub use records::Records;
pub use served::{set_up, with_ada_and_vic, Served};
pub use throwaway::server_url;
