//! `intake audit`: the messages the command stream holds that intake never recorded nor
//! dead-lettered (the stream audit, `crate::intake::audit`), and replaying one.

use serde::Serialize;
use time::OffsetDateTime;

use super::table::{self, Table};
use crate::intake::audit::{AuditPass, StreamAudit};
use crate::store::stream_audit::UnrecordedMessage;

/// What `intake audit` found: the pass it ran now and every open finding.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    /// The last command-stream sequence the audit has judged.
    pub checked_through: u64,
    /// False when a `serve` was auditing at that moment: the list is as it left it.
    pub pass_ran: bool,
    pub unrecorded: Vec<UnrecordedMessage>,
}

/// Runs one pass (unless a `serve` holds the audit at that moment) and lists what is open.
pub async fn audit(audit: &StreamAudit) -> anyhow::Result<AuditReport> {
    let AuditPass {
        ran,
        checked_through,
        ..
    } = audit.run_once().await?;
    Ok(AuditReport {
        checked_through,
        pass_ran: ran,
        unrecorded: audit.open_findings().await?,
    })
}

/// The aligned table of `intake audit`.
pub fn render(report: &AuditReport, now: OffsetDateTime) -> String {
    let checked = if report.pass_ran {
        format!("checked through sequence {}", report.checked_through)
    } else {
        "a serve process is auditing now; showing its last findings".to_owned()
    };
    if report.unrecorded.is_empty() {
        return format!("no unrecorded commands on the stream ({checked})\n");
    }
    let mut t = Table::new(&[
        "SEQUENCE",
        "STORED",
        "MESSAGE ID",
        "ATTEMPT",
        "FOUND",
        "REPLAYED",
    ]);
    for m in &report.unrecorded {
        t.push(vec![
            m.stream_sequence.to_string(),
            table::at_relative(m.stored_at, now),
            table::cell(m.message_id.as_deref().unwrap_or("-"), 48),
            m.payment_attempt_id
                .map_or_else(|| "-".to_owned(), |id| id.to_string()),
            table::at_relative(m.found_at, now),
            m.replayed_at
                .map_or_else(|| "-".to_owned(), |at| table::at_relative(at, now)),
        ]);
    }
    format!(
        "{}{} unrecorded command{} ({checked}); put one through intake: intake audit --replay <SEQUENCE>\n",
        t.render(),
        report.unrecorded.len(),
        if report.unrecorded.len() == 1 { "" } else { "s" }
    )
}
