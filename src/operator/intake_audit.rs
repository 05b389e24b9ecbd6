//! `intake audit`: the messages the command stream holds that intake never recorded nor
//! dead-lettered (the stream audit, `crate::intake::audit`), and replaying one.

use serde::Serialize;

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
