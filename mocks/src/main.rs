//! `mock-gateway`: the library's gateway as a stand-alone process. See `--help`.

use std::process::ExitCode;

use clap::Parser;
use mock_gateway::cli::{self, Cli};

#[tokio::main]
async fn main() -> ExitCode {
    let args = Cli::parse();
    cli::init_tracing();
    match cli::run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("mock-gateway: {err:#}");
            ExitCode::FAILURE
        }
    }
}
