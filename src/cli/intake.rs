//! `onecharge intake audit`: the commands on the stream intake never recorded, and putting
//! one through intake again.

use clap::Subcommand;
use time::OffsetDateTime;

use super::table::Table;
use super::{operator_actor, print_json};
use crate::broker::CommandKind;
use crate::config::Settings;
use crate::format;
use crate::intake::audit::StreamAudit;
use crate::operator::intake_audit::{self, AuditReport};

/// `onecharge intake …`
#[derive(Debug, Subcommand)]
pub enum IntakeCommand {
    /// Commands stored on the command stream that intake never recorded nor dead-lettered
    /// (runs one audit pass first)
    Audit {
        /// One JSON document instead of a table
        #[arg(long)]
        json: bool,
        /// Put the unrecorded command at this command-stream sequence through intake again,
        /// under its own message id (deduplicated as any delivery)
        #[arg(long, value_name = "SEQUENCE")]
        replay: Option<u64>,
    },
}

/// `onecharge intake …`: runs one subcommand and prints its result.
pub async fn run(settings: &Settings, command: IntakeCommand) -> anyhow::Result<()> {
    let store = super::connect_store(settings).await?;
    let broker = crate::broker::Broker::connect(settings).await?;
    let audits = [CommandKind::Charge, CommandKind::Refund]
        .map(|kind| StreamAudit::new(store.clone(), broker.clone(), settings, kind));
    match command {
        IntakeCommand::Audit {
            replay: Some(sequence),
            ..
        } => {
            let audit = find_audit(&audits, sequence).await?;
            let replayed = audit.replay(sequence, &operator_actor()).await?;
            println!(
                "replayed sequence {sequence} ({}) as sequence {}: intake records it like any delivery",
                replayed.message_id.as_deref().unwrap_or("no message id"),
                replayed.sequence
            );
            Ok(())
        }
        IntakeCommand::Audit { json, .. } => {
            let report = intake_audit::audit(&audits).await?;
            if json {
                print_json(&report)
            } else {
                print!("{}", render(&report, OffsetDateTime::now_utc()));
                Ok(())
            }
        }
    }
}

/// The audit whose open finding is at `sequence` (the charge audit when none has one: its
/// replay then says there is no such finding).
async fn find_audit(audits: &[StreamAudit], sequence: u64) -> anyhow::Result<&StreamAudit> {
    for audit in audits {
        if audit
            .open_findings()
            .await?
            .iter()
            .any(|m| m.stream_sequence as u64 == sequence)
        {
            return Ok(audit);
        }
    }
    Ok(&audits[0])
}

/// The aligned table of `intake audit`.
pub fn render(report: &AuditReport, now: OffsetDateTime) -> String {
    let checked = report
        .passes
        .iter()
        .map(|pass| {
            if pass.pass_ran {
                format!(
                    "{} checked through sequence {}",
                    pass.consumer, pass.checked_through
                )
            } else {
                format!(
                    "{}: a serve process is auditing now; showing its last findings",
                    pass.consumer
                )
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    if report.unrecorded.is_empty() {
        return format!("no unrecorded commands on the stream ({checked})\n");
    }
    let mut t = Table::new(&[
        "SEQUENCE",
        "CONSUMER",
        "STORED",
        "MESSAGE ID",
        "ATTEMPT",
        "FOUND",
        "REPLAYED",
    ]);
    for m in &report.unrecorded {
        t.push(vec![
            m.stream_sequence.to_string(),
            m.consumer.clone(),
            format::at_relative(m.stored_at, now),
            format::cell(m.message_id.as_deref().unwrap_or("-"), 48),
            m.payment_attempt_id
                .map_or_else(|| "-".to_owned(), |id| id.to_string()),
            format::at_relative(m.found_at, now),
            m.replayed_at
                .map_or_else(|| "-".to_owned(), |at| format::at_relative(at, now)),
        ]);
    }
    format!(
        "{}{} unrecorded command{} ({checked}); put one through intake: intake audit --replay <SEQUENCE>\n",
        t.render(),
        report.unrecorded.len(),
        if report.unrecorded.len() == 1 { "" } else { "s" }
    )
}
