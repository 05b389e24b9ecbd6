//! `onecharge dlq list | replay`: the dead letters (contract §2.2) in a table, and what a
//! replay published.

use std::path::PathBuf;

use clap::Subcommand;
use time::OffsetDateTime;

use super::table::Table;
use super::{operator_actor, print_json};
use crate::broker::Broker;
use crate::config::Settings;
use crate::format;
use crate::operator::dlq::{self, DeadLetter};
use crate::operator::Via;

/// `onecharge dlq …`
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// Dead letters with their class and reason, oldest first
    List {
        /// One JSON document instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Republish one dead letter (optionally with a corrected body) to the command subject
    Replay {
        /// The dead letter's sequence in the dead-letter stream (first column of `dlq list`)
        sequence: u64,
        /// A corrected body to publish instead of the original
        #[arg(long, value_name = "FILE")]
        body_file: Option<PathBuf>,
        /// Why: recorded in the audit trail
        #[arg(long)]
        reason: Option<String>,
    },
}

/// `onecharge dlq …`: runs one subcommand and prints its result.
pub async fn run(settings: &Settings, command: DlqCommand) -> anyhow::Result<()> {
    let broker = Broker::connect(settings).await?;
    match command {
        DlqCommand::List { json } => {
            let letters = dlq::list_dead_letters(&broker).await?;
            if json {
                print_json(&letters)
            } else {
                print!("{}", render_list(&letters, &broker.names.dlq_stream()));
                Ok(())
            }
        }
        DlqCommand::Replay {
            sequence,
            body_file,
            reason,
        } => {
            let corrected = match &body_file {
                Some(path) => Some(dlq::read_body_file(path)?),
                None => None,
            };
            let store = super::connect_store(settings).await?;
            let replayed = dlq::replay(
                &broker,
                &store,
                sequence,
                corrected,
                &operator_actor(),
                Via::Cli,
                reason.as_deref(),
            )
            .await?;
            print!("{}", replayed.render());
            Ok(())
        }
    }
}

/// The aligned table of `dlq list`.
pub fn render_list(letters: &[DeadLetter], stream: &str) -> String {
    if letters.is_empty() {
        return format!("no dead letters in {stream}\n");
    }
    let now = OffsetDateTime::now_utc();
    let mut t = Table::new(&[
        "SEQ",
        "DEAD-LETTERED",
        "CLASS",
        "DELIVERIES",
        "ORIGINAL MSG ID",
        "ORIGINAL SUBJECT",
        "REASON",
    ]);
    for d in letters {
        t.push(vec![
            d.sequence.to_string(),
            format::at_relative(d.time, now),
            format::or_dash(d.class.as_deref()),
            d.delivery_count
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
            format::cell(d.original_msg_id.as_deref().unwrap_or("-"), 48),
            format::or_dash(d.original_subject.as_deref()),
            format::cell(d.reason.as_deref().unwrap_or("-"), 100),
        ]);
    }
    format!(
        "{}{} dead letter{} in {stream} (bodies: dlq list --json; republish: dlq replay <SEQ> [--body-file F])\n",
        t.render(),
        letters.len(),
        if letters.len() == 1 { "" } else { "s" }
    )
}
