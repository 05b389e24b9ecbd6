//! `onecharge dlq list | replay | discard | bulk-replay`: the dead letters (contract §2.2)
//! in a table, what a replay published, a discard, and a replay of every letter a filter
//! matches.

use std::path::PathBuf;

use clap::Subcommand;
use time::OffsetDateTime;

use super::table::Table;
use super::{operator_actor, print_json};
use crate::broker::Broker;
use crate::config::Settings;
use crate::format;
use crate::operator::dlq::{self, DeadLetter, DeadLetterFilter};
use crate::operator::Via;

/// `onecharge dlq …`
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// Dead letters with their class and reason, oldest first (discarded ones left out)
    List {
        #[command(flatten)]
        filter: DeadLetterFilter,
        /// The discarded letters too, each with who discarded it and why
        #[arg(long)]
        discarded: bool,
        /// Only letters after this sequence (the NEXT the previous page printed)
        #[arg(long, value_name = "SEQ")]
        after: Option<u64>,
        /// At most this many (0: all)
        #[arg(long, default_value_t = 0)]
        limit: usize,
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
    /// Set one dead letter aside for good: never replayed, left out of `dlq list`
    Discard {
        /// The dead letter's sequence in the dead-letter stream
        sequence: u64,
        /// Why it is given up: recorded in the audit trail
        #[arg(long)]
        reason: String,
    },
    /// Republish every dead letter a filter matches (at most 500; never discarded ones)
    BulkReplay {
        #[command(flatten)]
        filter: DeadLetterFilter,
        /// Why: recorded with every replay and the bulk action
        #[arg(long)]
        reason: String,
        /// Refuse when more than this many match (at most 500)
        #[arg(long)]
        max: Option<usize>,
        /// Count and list the matching letters; publish nothing
        #[arg(long)]
        dry_run: bool,
        /// One JSON document instead of text
        #[arg(long)]
        json: bool,
    },
}

/// `onecharge dlq …`: runs one subcommand and prints its result.
pub async fn run(settings: &Settings, command: DlqCommand) -> anyhow::Result<()> {
    let broker = Broker::connect(settings).await?;
    let store = super::connect_store(settings).await?;
    match command {
        DlqCommand::List {
            filter,
            discarded,
            after,
            limit,
            json,
        } => {
            let page = dlq::page_dead_letters(
                &broker,
                &store,
                &filter,
                discarded,
                after,
                (limit > 0).then_some(limit),
            )
            .await?;
            if json {
                print_json(&page.items)
            } else {
                print!(
                    "{}",
                    render_list(&page.items, &broker.names.dlq_stream(), page.next)
                );
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
        DlqCommand::Discard { sequence, reason } => {
            let discarded = dlq::discard(
                &broker,
                &store,
                sequence,
                &operator_actor(),
                Via::Cli,
                &reason,
            )
            .await?;
            println!(
                "discarded dead letter {} ({}): it is never replayed and left out of `dlq list`",
                discarded.dlq_sequence,
                format::cell(&discarded.discard.reason, 200)
            );
            Ok(())
        }
        DlqCommand::BulkReplay {
            filter,
            reason,
            max,
            dry_run,
            json,
        } => {
            let request = dlq::BulkReplayRequest {
                filter,
                reason,
                preview: dry_run,
                max,
                sequences: None,
            };
            let outcome =
                dlq::bulk_replay(&broker, &store, &request, &operator_actor(), Via::Cli).await?;
            if json {
                return print_json(&outcome);
            }
            print!("{}", render_bulk(&outcome));
            Ok(())
        }
    }
}

/// What `dlq bulk-replay` prints.
fn render_bulk(outcome: &dlq::BulkReplayOutcome) -> String {
    let listed: Vec<String> = outcome.sequences.iter().map(u64::to_string).collect();
    if outcome.preview {
        return format!(
            "dry run: {} dead letter{} match{}{}; nothing was published (run again without --dry-run, with --max {} to refuse a larger set)\n",
            outcome.matched,
            if outcome.matched == 1 { "" } else { "s" },
            if outcome.matched == 1 { "es" } else { "" },
            if listed.is_empty() { String::new() } else { format!(": {}", listed.join(", ")) },
            outcome.matched
        );
    }
    let mut out = String::new();
    for item in &outcome.items {
        out.push_str(&format!(
            "{} {}: {}\n",
            item.dlq_sequence,
            item.outcome,
            format::cell(&item.detail, 200)
        ));
    }
    let replayed = outcome
        .items
        .iter()
        .filter(|i| i.outcome == "replayed")
        .count();
    out.push_str(&format!(
        "{replayed} of {} dead letter{} replayed\n",
        outcome.matched,
        if outcome.matched == 1 { "" } else { "s" }
    ));
    out
}

/// The aligned table of `dlq list`, and where the next page starts when there is one.
pub fn render_list(letters: &[DeadLetter], stream: &str, next: Option<u64>) -> String {
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
        "{}{} dead letter{} in {stream} (bodies: dlq list --json; republish: dlq replay <SEQ> [--body-file F]; set aside: dlq discard <SEQ> --reason R){}\n",
        t.render(),
        letters.len(),
        if letters.len() == 1 { "" } else { "s" },
        next.map(|n| format!("\nNEXT: more after sequence {n} (dlq list --after {n})"))
            .unwrap_or_default()
    )
}
