//! The `onecharge` command line (contract §5). Parsing only: each subcommand calls one
//! library function. Exit codes: 0 success, 1 runtime failure, 2 usage or configuration.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory as _, Parser, Subcommand};

use crate::app::Role;
use crate::config::{ConfigError, LogFormat, Overrides, Redactor, Settings, UsageError};

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
    /// Run migrations (creating the database if missing), create streams and the durable consumer
    Setup,
    /// Run the whole pipeline against a built-in mock gateway with faults and duplicates, then verify
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
    Publish(PublishCommand),
    /// Inspect payment attempts, and resolve those in needs_review
    #[command(subcommand)]
    Attempts(crate::operator::AttemptsCommand),
    /// Inspect and replay dead-lettered commands
    #[command(subcommand)]
    Dlq(crate::operator::DlqCommand),
    /// The audit trail of manual actions
    #[command(subcommand)]
    Audit(crate::operator::AuditCommand),
    /// The stream audit: commands on the command stream that intake never recorded
    #[command(subcommand)]
    Intake(crate::operator::IntakeCommand),
    /// Delete dedupe rows older than purge.dedupe_retention and history months older than purge.history_retention (also runs inside `serve`)
    Purge(crate::operator::purge::PurgeArgs),
    /// Named operators of the console and the admin API
    #[command(subcommand)]
    Operators(crate::http::access::OperatorsCommand),
    /// Settle ambiguous attempts by looking them up at the gateway (continuously, or one pass)
    #[command(args_conflicts_with_subcommands = true)]
    Reconcile {
        /// One pass over everything due now, print what it did, and exit
        #[arg(long)]
        once: bool,
        #[command(subcommand)]
        job: Option<ReconcileJob>,
    },
    /// Print the shell completion script, e.g. `onecharge completions bash > /etc/bash_completion.d/onecharge`
    Completions {
        /// The shell to complete in
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Discrepancies the reconciliation sweep and the gateway's webhooks found
    #[command(subcommand)]
    Findings(crate::operator::findings::FindingsCommand),
}

/// Reconciliation jobs besides the passes.
#[derive(Debug, Subcommand)]
pub enum ReconcileJob {
    /// Compare every charge the gateway created in a window with the attempts, both ways
    Sweep(crate::operator::findings::SweepArgs),
}

/// Options of `onecharge demo`. Defined here, not in `demo`, so that a build without the
/// `demo` feature still parses every demo command line and answers it in one line.
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

#[derive(Debug, Subcommand)]
pub enum PublishCommand {
    /// Publish one ChargePayment command and print its message id and stream sequence
    Charge(crate::publish::ChargeArgs),
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
    // Needs no configuration: a completion script is installed before there is any.
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(
            shell,
            &mut Cli::command(),
            "onecharge",
            &mut std::io::stdout(),
        );
        return ExitCode::SUCCESS;
    }
    let mut settings = match Settings::load(cli.global.config.as_deref(), &cli.global.overrides()) {
        Ok(settings) => settings,
        Err(err) => return config_failure(&err),
    };
    if let Command::Serve {
        insecure_admin: true,
        ..
    } = cli.command
    {
        settings.insecure_admin = true;
    }
    // Whatever fails below, its message is printed without the configuration's secrets
    // (a library may quote a URL with its password, or its connection options).
    let redactor = Redactor::from_settings(&settings);
    // The demo talks to a person through its progress lines; its service logs stay quiet
    // unless RUST_LOG asks for them.
    let quiet = matches!(cli.command, Command::Demo(_));
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
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Setup => crate::app::setup(&settings).await,
            Command::Demo(args) => demo(&settings, args).await,
            Command::Serve { roles, .. } => crate::app::serve(settings, &roles).await,
            Command::Publish(PublishCommand::Charge(args)) => {
                crate::publish::charge(&settings, args).await
            }
            Command::Attempts(command) => crate::operator::run_attempts(&settings, command).await,
            Command::Dlq(command) => crate::operator::run_dlq(&settings, command).await,
            Command::Audit(command) => crate::operator::run_audit(&settings, command).await,
            Command::Intake(command) => crate::operator::run_intake(&settings, command).await,
            Command::Purge(args) => crate::operator::purge::run_purge(&settings, args).await,
            Command::Operators(command) => crate::http::access::run_operators(command),
            Command::Completions { .. } => unreachable!("answered before the configuration"),
            Command::Reconcile {
                job: Some(ReconcileJob::Sweep(args)),
                ..
            } => crate::operator::findings::run_sweep(settings, args).await,
            Command::Reconcile { once, job: None } => {
                crate::reconciler::run_command(settings, once).await
            }
            Command::Findings(command) => {
                crate::operator::findings::run_findings(&settings, command).await
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if err.is::<ConfigError>() || err.is::<UsageError>() => {
            eprintln!("{}", redactor.scrub(&err.to_string()));
            ExitCode::from(2)
        }
        Err(err) => {
            eprintln!("{}", redactor.scrub(&format!("error: {err:#}")));
            ExitCode::from(1)
        }
    }
}

/// The man page `onecharge.1` (roff), generated from these definitions; committed as
/// `docs/onecharge.1` (see `crate::generated`).
pub fn man_page() -> Vec<u8> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .expect("rendering into memory cannot fail");
    page
}

#[cfg(feature = "demo")]
async fn demo(settings: &Settings, args: DemoArgs) -> anyhow::Result<()> {
    crate::demo::run(settings, args).await
}

/// A build without the `demo` feature has no mock gateway to run the demo against.
#[cfg(not(feature = "demo"))]
async fn demo(_: &Settings, _: DemoArgs) -> anyhow::Result<()> {
    Err(UsageError(
        "onecharge demo: this binary was built without the demo (--no-default-features); build it with the default features to run it".into(),
    )
    .into())
}

fn config_failure(err: &ConfigError) -> ExitCode {
    eprintln!("{err}");
    ExitCode::from(2)
}
