use clap::Parser as _;

fn main() -> std::process::ExitCode {
    onecharge::cli::run(onecharge::cli::Cli::parse())
}
