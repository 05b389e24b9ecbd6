//! `onecharge operators …`: the named operators of the console and the admin API.

use secrecy::ExposeSecret as _;

use crate::config::mint_token;
use crate::config::OperatorRole;

/// `onecharge operators …`
#[derive(Debug, clap::Subcommand)]
pub enum OperatorsCommand {
    /// Mint a token for a named operator: prints the token (give it to the operator; it is
    /// stored nowhere) and the `[[operators]]` entry, with its SHA-256, for the settings
    NewToken {
        /// The operator's name, recorded as `operator:<name>` on every action
        #[arg(long, default_value = "NAME")]
        name: String,
        /// viewer reads; operator also acts
        #[arg(long, value_enum, default_value = "viewer")]
        role: OperatorRole,
    },
}

/// Runs `onecharge operators …`.
pub fn run(command: OperatorsCommand) -> anyhow::Result<()> {
    match command {
        OperatorsCommand::NewToken { name, role } => {
            let (token, hash) = mint_token();
            println!("token: {}", token.expose_secret());
            println!("(give it to {name}; onecharge keeps only its hash, below)");
            println!();
            println!("[[operators]]");
            println!("name = {}", toml::Value::String(name));
            println!("role = \"{}\"", role.as_str());
            println!("token_sha256 = \"{hash}\"");
            Ok(())
        }
    }
}
