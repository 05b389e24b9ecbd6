//! `onecharge demo`: runs `onecharge-demo`, the demo's own binary (the `demo/` crate, which
//! links the mock gateway this service never does), from beside this binary, with the
//! settings and the options given here. It replaces this process, so a signal sent to
//! `onecharge demo` reaches the demo.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::GlobalArgs;

/// The demo's binary, beside `onecharge`.
pub const DEMO_BINARY: &str = "onecharge-demo";

/// The demo's options: `onecharge demo` parses them (so that its help, man page and
/// completions list them) and hands them on, and `onecharge-demo` takes the same.
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

impl DemoArgs {
    /// These options as the flags that give them.
    fn as_flags(&self) -> Vec<OsString> {
        let mut flags: Vec<OsString> = vec![
            "--attempts".into(),
            self.attempts.to_string().into(),
            "--seed".into(),
            self.seed.to_string().into(),
            "--timeout".into(),
            humantime::format_duration(self.timeout).to_string().into(),
        ];
        if let Some(kind) = &self.gateway {
            flags.extend(["--gateway".into(), named(kind).into()]);
        }
        for (set, flag) in [(self.keep, "--keep"), (self.console, "--console")] {
            if set {
                flags.push(flag.into());
            }
        }
        flags
    }
}

/// Runs `onecharge-demo` in this process's place. Returns only when it cannot: exit 2 with
/// the line that says how to build it when it is not beside this binary, 1 when it is and
/// would not start.
pub fn run(global: &GlobalArgs, args: DemoArgs) -> ExitCode {
    let Some(program) = beside_this_binary() else {
        eprintln!(
            "onecharge demo: {DEMO_BINARY} is not beside this binary (a service build leaves the demo and its mock gateway out): run `cargo run --release -p {DEMO_BINARY}` in the source tree, or build it with `cargo build --release -p {DEMO_BINARY}` and put it beside onecharge"
        );
        return ExitCode::from(2);
    };
    let err = std::process::Command::new(&program)
        .args(global.as_flags())
        .args(args.as_flags())
        .exec();
    eprintln!("error: cannot run {}: {err}", program.display());
    ExitCode::from(1)
}

/// `onecharge-demo` in the directory of the running `onecharge`, when it is there.
fn beside_this_binary() -> Option<PathBuf> {
    let this = std::env::current_exe().ok()?;
    let program = this.parent()?.join(DEMO_BINARY);
    program.is_file().then_some(program)
}

impl GlobalArgs {
    /// These settings as the flags that gave them, for a program that takes the same.
    fn as_flags(&self) -> Vec<OsString> {
        let flags: [(&str, Option<OsString>); 8] = [
            ("--config", self.config.clone().map(OsString::from)),
            (
                "--database-url",
                self.database_url.clone().map(OsString::from),
            ),
            ("--nats-url", self.nats_url.clone().map(OsString::from)),
            (
                "--gateway-url",
                self.gateway_url.clone().map(OsString::from),
            ),
            (
                "--gateway-kind",
                self.gateway_kind.as_ref().map(|k| named(k).into()),
            ),
            ("--admin-addr", self.admin_addr.clone().map(OsString::from)),
            ("--namespace", self.namespace.clone().map(OsString::from)),
            (
                "--log-format",
                self.log_format.as_ref().map(|f| named(f).into()),
            ),
        ];
        flags
            .into_iter()
            .filter_map(|(flag, value)| Some([OsString::from(flag), value?]))
            .flatten()
            .collect()
    }
}

/// The name a value of `--gateway-kind`, `--log-format` or `--gateway` is given by.
fn named<T: ValueEnum>(value: &T) -> String {
    value
        .to_possible_value()
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default()
}
