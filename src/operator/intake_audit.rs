//! `intake audit`: the messages the command stream holds that intake never recorded nor
//! dead-lettered (the stream audit, `crate::intake::audit`), and replaying one.

use serde::Serialize;

use crate::intake::audit::{AuditPass, StreamAudit};
use crate::store::findings::stream_audit::UnrecordedMessage;

/// What `intake audit` found: the pass it ran now for each intake consumer (charges,
/// refunds) and every open finding of both, oldest sequence first.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    pub passes: Vec<ConsumerPass>,
    pub unrecorded: Vec<UnrecordedMessage>,
}

/// One intake consumer's pass.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerPass {
    pub consumer: String,
    /// The last command-stream sequence the audit has judged for this consumer.
    pub checked_through: u64,
    /// False when a `serve` was auditing at that moment: the list is as it left it.
    pub pass_ran: bool,
}

/// Runs one pass of each audit (unless a `serve` holds it at that moment) and lists what is
/// open.
pub async fn audit(audits: &[StreamAudit]) -> anyhow::Result<AuditReport> {
    let mut report = AuditReport {
        passes: Vec::new(),
        unrecorded: Vec::new(),
    };
    for audit in audits {
        let AuditPass {
            ran,
            checked_through,
            ..
        } = audit.run_once().await?;
        report.passes.push(ConsumerPass {
            consumer: audit.consumer().to_owned(),
            checked_through,
            pass_ran: ran,
        });
        report.unrecorded.extend(audit.open_findings().await?);
    }
    report.unrecorded.sort_by_key(|m| m.stream_sequence);
    Ok(report)
}
