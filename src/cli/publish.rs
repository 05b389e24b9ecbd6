//! `onecharge publish charge`: one command onto the command subject, for operators and
//! tests.

use clap::Subcommand;

use crate::config::Settings;
use crate::publish::{ChargeArgs, Published};

#[derive(Debug, Subcommand)]
pub enum PublishCommand {
    /// Publish one ChargePayment command and print its message id and stream sequence
    Charge(ChargeArgs),
}

/// Runs `onecharge publish …`.
pub async fn run(settings: &Settings, command: PublishCommand) -> anyhow::Result<()> {
    match command {
        PublishCommand::Charge(args) => {
            let published = crate::publish::charge(settings, args).await?;
            println!("{}", render(&published));
            Ok(())
        }
    }
}

/// `published message_id=… payment_attempt_id=… stream_sequence=…`
fn render(published: &Published) -> String {
    format!(
        "published message_id={} payment_attempt_id={} stream_sequence={}{}",
        published.message_id,
        published.payment_attempt_id,
        published.stream_sequence,
        if published.duplicate {
            " (duplicate: JetStream already had this message id)"
        } else {
            ""
        }
    )
}
