//! The `onecharge` command line (contract §5): every clap definition, the runner of each
//! subcommand and what it prints, one file per command group (cargo's
//! `src/bin/cargo/commands/` is the model). The library below returns data and never
//! prints; a runner calls it and prints the answer, a table for people or `--json`.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 usage or configuration (`ConfigError`,
//! `UsageError`, a database that must be made again: `SchemaError::PreRelease`); every
//! error line is printed without the configuration's secrets.

pub mod attempts;
pub mod audit;
pub mod completions;
pub mod console;
pub mod demo;
pub mod dlq;
pub mod findings;
pub mod fleet;
pub mod intake;
pub mod publish;
pub mod purge;
pub mod reconcile;
pub mod refunds;
pub mod service;
pub mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};

use crate::app::Role;
use crate::config::{ConfigError, LogFormat, Overrides, Redactor, Settings, UsageError};
use crate::store::migrations::SchemaError;

pub use completions::{man_page, subcommand_pages, MAN_DIRECTORY};
pub use demo::DemoArgs;

/// Turns at-least-once delivery of ChargePayment commands into exactly one charge.
#[derive(Debug, Parser)]
#[command(name = "onecharge", version, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Settings that every subcommand takes. Secrets (gateway API key, admin token) are read
/// from the file or the environment only, never from flags, so they stay out of `ps`.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Configuration file [default: onecharge.toml when present]
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// PostgreSQL URL [env: ONECHARGE_DATABASE_URL] [default: postgres://127.0.0.1:5432/onecharge]
    #[arg(long, global = true, value_name = "URL")]
    pub database_url: Option<String>,
    /// NATS URL [env: ONECHARGE_NATS_URL] [default: nats://127.0.0.1:4222]
    #[arg(long, global = true, value_name = "URL")]
    pub nats_url: Option<String>,
    /// Payment gateway base URL [env: ONECHARGE_GATEWAY_URL]
    #[arg(long, global = true, value_name = "URL")]
    pub gateway_url: Option<String>,
    /// Gateway protocol [env: ONECHARGE_GATEWAY_KIND] [default: onecharge]
    #[arg(long, global = true, value_enum)]
    pub gateway_kind: Option<crate::gateway::GatewayKind>,
    /// Admin HTTP address of `serve` [env: ONECHARGE_ADMIN_ADDR] [default: 127.0.0.1:9464]
    #[arg(long, global = true, value_name = "ADDR")]
    pub admin_addr: Option<String>,
    /// Prefix for stream names and subjects (demo, tests) [env: ONECHARGE_NAMESPACE]
    #[arg(long, global = true, value_name = "NAME")]
    pub namespace: Option<String>,
    /// Log line format [env: ONECHARGE_LOG_FORMAT] [default: human]
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run migrations (creating the database if missing), create streams and the durable consumer, as the schema's owner; or --check that it is done
    Setup(service::SetupArgs),
    /// Run the whole pipeline, charges then refunds, against a mock gateway with faults and duplicates, then verify; starts private PostgreSQL and NATS where none listen (runs onecharge-demo, beside this binary)
    Demo(DemoArgs),
    /// Run the service roles until SIGTERM or Ctrl-C
    Serve {
        /// Roles to run, comma-separated [default: all]
        #[arg(long, value_delimiter = ',', value_enum)]
        roles: Vec<Role>,
        /// Run the admin API on a non-loopback --admin-addr without an admin token (anyone
        /// who reaches it can read and resolve attempts) [env: ONECHARGE_INSECURE_ADMIN]
        #[arg(long)]
        insecure_admin: bool,
    },
    /// Publish a command (for operators and tests)
    #[command(subcommand)]
    Publish(publish::PublishCommand),
    /// Inspect payment attempts, and resolve those in needs_review
    #[command(subcommand)]
    Attempts(attempts::AttemptsCommand),
    /// Inspect and replay dead-lettered commands
    #[command(subcommand)]
    Dlq(dlq::DlqCommand),
    /// The audit trail of manual actions
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// The stream audit: commands on the command stream that intake never recorded
    #[command(subcommand)]
    Intake(intake::IntakeCommand),
    /// Delete dedupe rows older than purge.dedupe_retention and history months older than purge.history_retention (also runs inside `serve`)
    Purge(purge::PurgeArgs),
    /// Named operators of the console and the admin API
    #[command(subcommand)]
    Operators(console::OperatorsCommand),
    /// Settle ambiguous attempts by looking them up at the gateway (continuously, or one pass)
    #[command(args_conflicts_with_subcommands = true)]
    Reconcile {
        /// One pass over everything due now, print what it did, and exit
        #[arg(long)]
        once: bool,
        #[command(subcommand)]
        job: Option<reconcile::ReconcileJob>,
    },
    /// Print the shell completion script, e.g. `onecharge completions bash > /etc/bash_completion.d/onecharge`
    Completions {
        /// The shell to complete in
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Discrepancies the reconciliation sweep and the gateway's webhooks found
    #[command(subcommand)]
    Findings(findings::FindingsCommand),
    /// Pause or resume charging across every instance
    #[command(subcommand)]
    Fleet(fleet::FleetCommand),
    /// Inspect refunds, and refund a succeeded charge
    #[command(subcommand)]
    Refunds(refunds::RefundsCommand),
}

impl GlobalArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            database_url: self.database_url.clone(),
            nats_url: self.nats_url.clone(),
            gateway_url: self.gateway_url.clone(),
            gateway_kind: self.gateway_kind,
            admin_addr: self.admin_addr.clone(),
            namespace: self.namespace.clone(),
            log_format: self.log_format,
        }
    }
}

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        // Needs no configuration: a completion script is installed before there is any.
        Command::Completions { shell } => {
            completions::print(shell);
            ExitCode::SUCCESS
        }
        // The demo's own binary reads the configuration itself.
        Command::Demo(args) => demo::run(&cli.global, args),
        command => run_with(&cli.global, false, |settings| dispatch(settings, command)),
    }
}

/// Runs `job` as every onecharge command runs: on the settings `global` names (file,
/// environment, flags), with logging started (`quiet`: the service's logs only when
/// `RUST_LOG` asks, for a program that talks to a person through its own lines), on a
/// runtime of its own. Returns the exit code; a failure is printed in one line without the
/// configuration's secrets. `onecharge-demo` runs by it too.
pub fn run_with<F, Fut>(global: &GlobalArgs, quiet: bool, job: F) -> ExitCode
where
    F: FnOnce(Settings) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let settings = match Settings::load(global.config.as_deref(), &global.overrides()) {
        Ok(settings) => settings,
        Err(err) => return config_failure(&err),
    };
    // Whatever fails below, its message is printed without the configuration's secrets
    // (a library may quote a URL with its password, or its connection options).
    let redactor = Redactor::from_settings(&settings);
    // Dropped last, after the runtime: flushes the spans of the whole run.
    let _telemetry = match crate::telemetry::init_logging(&settings, quiet) {
        Ok(telemetry) => telemetry,
        Err(err) => return config_failure(&ConfigError(redactor.scrub(&err.0).into_owned())),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(job(settings));
    exit_code(result, &redactor)
}

/// Hands the command to its runner.
async fn dispatch(mut settings: Settings, command: Command) -> anyhow::Result<()> {
    match command {
        Command::Setup(args) => service::setup(&settings, args).await,
        Command::Serve {
            roles,
            insecure_admin,
        } => {
            settings.insecure_admin |= insecure_admin;
            crate::app::serve(settings, &roles).await
        }
        Command::Publish(command) => publish::run(&settings, command).await,
        Command::Attempts(command) => attempts::run(&settings, command).await,
        Command::Dlq(command) => dlq::run(&settings, command).await,
        Command::Audit(command) => audit::run(&settings, command).await,
        Command::Intake(command) => intake::run(&settings, command).await,
        Command::Purge(args) => purge::run(&settings, args).await,
        Command::Operators(command) => console::run(command),
        Command::Completions { .. } | Command::Demo(_) => {
            unreachable!("answered before the configuration")
        }
        Command::Reconcile { once, job } => reconcile::run(settings, once, job).await,
        Command::Findings(command) => findings::run(&settings, command).await,
        Command::Fleet(command) => fleet::run(&settings, command).await,
        Command::Refunds(command) => refunds::run(&settings, command).await,
    }
}

/// 0 on success; a usage or configuration error is 2, anything else 1, each printed in one
/// scrubbed line on stderr.
fn exit_code(result: anyhow::Result<()>, redactor: &Redactor) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if err.is::<ConfigError>() || err.is::<UsageError>() => {
            eprintln!("{}", redactor.scrub(&err.to_string()));
            ExitCode::from(2)
        }
        // A database this onecharge cannot migrate (made by a pre-release build) is a wrong
        // database to point it at: said in its own line, whatever context wraps it.
        Err(err)
            if err
                .downcast_ref::<SchemaError>()
                .is_some_and(SchemaError::needs_a_new_database) =>
        {
            let schema = err.downcast_ref::<SchemaError>().expect("matched above");
            eprintln!("{}", redactor.scrub(&schema.to_string()));
            ExitCode::from(2)
        }
        Err(err) => {
            eprintln!("{}", redactor.scrub(&format!("error: {err:#}")));
            ExitCode::from(1)
        }
    }
}

fn config_failure(err: &ConfigError) -> ExitCode {
    eprintln!("{err}");
    ExitCode::from(2)
}

/// Prints `value` as JSON, or as `human` renders it.
fn print_as<T: serde::Serialize + ?Sized>(
    json: bool,
    value: &T,
    human: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    if json {
        print_json(value)
    } else {
        print!("{}", human(value));
        Ok(())
    }
}

/// Prints `value` as one pretty JSON document: what every `--json` prints.
fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value).context("serialising the output")?;
    println!("{text}");
    Ok(())
}

/// The actor recorded for a decision taken on this machine's command line:
/// `operator:<user>`. Under `sudo` the person who ran sudo, not `root`.
pub fn operator_actor() -> crate::domain::Actor {
    let from_env = ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|user| !user.trim().is_empty());
    let user = from_env.unwrap_or_else(whoami::username);
    crate::domain::Actor::operator(&user)
}

/// The database for one command (a pool of two connections).
async fn connect_store(settings: &Settings) -> anyhow::Result<crate::store::Store> {
    crate::store::Store::connect_with(&settings.database_url, 2, &settings.database).await
}

/// The gateway client and its health, for a command that asks the gateway (a recheck, a
/// pass, a sweep): it needs the gateway settings (`gateway_url`, `gateway_api_key`).
fn gateway(
    settings: &Settings,
) -> anyhow::Result<(crate::gateway::GatewayClient, crate::gateway::GatewayHealth)> {
    let client = crate::gateway::GatewayClient::from_settings(settings)?;
    Ok((
        client,
        crate::gateway::GatewayHealth::from_settings(&settings.executor),
    ))
}
