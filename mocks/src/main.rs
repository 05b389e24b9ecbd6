//! `mock-gateway`: the library's gateway as a stand-alone process. See `--help`.

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use mock_gateway::cli::{self, Cli};

#[tokio::main]
async fn main() -> ExitCode {
    let args = Cli::parse();
    let config = match args.to_config() {
        Ok(config) => config,
        // Exits 2 with clap's usage error, like any other wrong flag.
        Err(message) => Cli::command()
            .error(clap::error::ErrorKind::ValueValidation, message)
            .exit(),
    };
    cli::init_tracing();
    match cli::run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("mock-gateway: {err:#}");
            ExitCode::FAILURE
        }
    }
}
