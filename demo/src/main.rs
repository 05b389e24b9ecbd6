use clap::Parser;

/// Runs the whole onecharge pipeline, charges then refunds, against a mock gateway with
/// faults and duplicates, then verifies it against the gateway's own ledger; starts private
/// PostgreSQL and NATS where none listen.
#[derive(Debug, Parser)]
#[command(name = "onecharge-demo", version)]
struct DemoCli {
    #[command(flatten)]
    global: onecharge::cli::GlobalArgs,
    #[command(flatten)]
    args: onecharge_demo::DemoArgs,
}

fn main() -> std::process::ExitCode {
    let DemoCli { global, args } = DemoCli::parse();
    // The demo talks to a person through its progress lines; the service's logs stay quiet
    // unless RUST_LOG asks for them.
    onecharge::cli::run_with(&global, true, |settings| async move {
        onecharge_demo::run(&settings, args).await
    })
}
