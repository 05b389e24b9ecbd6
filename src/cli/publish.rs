//! `onecharge publish charge | refund`: one command onto its command subject, for producers,
//! operators and tests.

use clap::Subcommand;

use crate::broker::publish::{ChargeArgs, Published, RefundArgs};
use crate::config::Settings;

#[derive(Debug, Subcommand)]
pub enum PublishCommand {
    /// Publish one ChargePayment command and print its message id and stream sequence
    Charge(ChargeArgs),
    /// Publish one RefundPayment command and print its message id, refund id and stream
    /// sequence (an operator's refund, checked first: `onecharge refunds create`)
    Refund(RefundArgs),
}

/// Runs `onecharge publish …`.
pub async fn run(settings: &Settings, command: PublishCommand) -> anyhow::Result<()> {
    let published = match command {
        PublishCommand::Charge(args) => crate::broker::publish::charge(settings, args).await?,
        PublishCommand::Refund(args) => crate::broker::publish::refund(settings, args).await?,
    };
    println!("{}", render(&published));
    Ok(())
}

/// `published message_id=… [refund_id=…] payment_attempt_id=… stream_sequence=…`
fn render(published: &Published) -> String {
    format!(
        "published message_id={}{} payment_attempt_id={} stream_sequence={}{}",
        published.message_id,
        published
            .refund_id
            .map(|id| format!(" refund_id={id}"))
            .unwrap_or_default(),
        published.payment_attempt_id,
        published.stream_sequence,
        if published.duplicate {
            " (duplicate: JetStream already had this message id)"
        } else {
            ""
        }
    )
}
