//! `onecharge reconcile [--once]` and `onecharge reconcile sweep`: the reconciler's passes
//! and the reconciliation sweep, run from the command line.

use std::time::Duration;

use clap::{Args, Subcommand};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::print_json;
use crate::config::{Settings, UsageError};
use crate::domain::listing::ListWindow;
use crate::domain::AttemptStatus;
use crate::format;
use crate::reconciler::sweep::SweepReport;
use crate::reconciler::{ReconcileReport, Reconciler};
use crate::store::Store;

/// Reconciliation jobs besides the passes.
#[derive(Debug, Subcommand)]
pub enum ReconcileJob {
    /// Compare every charge the gateway created in a window with the attempts, both ways
    Sweep(SweepArgs),
}

/// `onecharge reconcile sweep`.
#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    /// Sweep the charges created this long ago until now [default: 24h]
    #[arg(long, value_parser = crate::config::parse_duration, conflicts_with_all = ["from", "to"])]
    pub since: Option<Duration>,
    /// Start of the window (RFC 3339), with --to
    #[arg(long, value_parser = parse_time, requires = "to")]
    pub from: Option<OffsetDateTime>,
    /// End of the window (RFC 3339, exclusive), with --from
    #[arg(long, value_parser = parse_time, requires = "from")]
    pub to: Option<OffsetDateTime>,
    /// One JSON document instead of lines
    #[arg(long)]
    pub json: bool,
}

/// An RFC 3339 time for `--from`/`--to`.
fn parse_time(text: &str) -> Result<OffsetDateTime, String> {
    OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("`{text}` is not an RFC 3339 time such as 2026-12-01T00:00:00Z ({e})"))
}

/// `onecharge reconcile [--once] [sweep …]`.
pub async fn run(settings: Settings, once: bool, job: Option<ReconcileJob>) -> anyhow::Result<()> {
    match job {
        Some(ReconcileJob::Sweep(args)) => sweep(settings, args).await,
        None if once => {
            let total = drain(settings).await?;
            println!("{}", render_passes(&total));
            Ok(())
        }
        None => continuously(settings).await,
    }
}

/// The reconciler `reconcile` runs, built like `serve` builds it.
async fn reconciler(settings: &Settings) -> anyhow::Result<Reconciler> {
    let (gateway, health) = super::gateway(settings)?;
    let store = Store::connect_with(&settings.database_url, 8, &settings.database).await?;
    Ok(Reconciler::new(store, gateway, health, settings))
}

/// `onecharge reconcile`: passes until SIGTERM/Ctrl-C.
async fn continuously(settings: Settings) -> anyhow::Result<()> {
    let reconciler = reconciler(&settings).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(crate::shutdown::cancel_on_signal(shutdown.clone()));
    reconciler.run(shutdown).await
}

/// `onecharge reconcile --once`: one pass over everything due now, repeated while passes
/// come back full; what they did, together.
async fn drain(settings: Settings) -> anyhow::Result<ReconcileReport> {
    let reconciler = reconciler(&settings).await?;
    let mut total = ReconcileReport::default();
    loop {
        let pass = reconciler.run_once().await?;
        let full = pass.resolutions.len() == settings.reconciler.batch_size;
        total.leases_expired.extend(pass.leases_expired);
        total.resolutions.extend(pass.resolutions);
        if !full {
            return Ok(total);
        }
    }
}

/// The one line `reconcile --once` prints.
fn render_passes(total: &ReconcileReport) -> String {
    format!(
        "reconciled {} attempt(s): {} succeeded, {} declined, {} back to pending (re-sent with the same key), \
         {} needs_review, {} to check again later; {} expired lease(s) found",
        total.resolutions.len(),
        total.count(AttemptStatus::Succeeded),
        total.count(AttemptStatus::Declined),
        total.count(AttemptStatus::Pending),
        total.count(AttemptStatus::NeedsReview),
        total.rescheduled(),
        total.leases_expired.len()
    )
}

/// `onecharge reconcile sweep`: one sweep of the window, its findings printed.
async fn sweep(settings: Settings, args: SweepArgs) -> anyhow::Result<()> {
    let (gateway, health) = super::gateway(&settings)?;
    let store = Store::connect_with(&settings.database_url, 4, &settings.database).await?;
    let window = match (args.from, args.to) {
        (Some(from), Some(to)) if from < to => ListWindow { from, to },
        (Some(_), Some(_)) => {
            return Err(UsageError("--from must be before --to".into()).into());
        }
        _ => {
            let now = crate::store::findings::sweep::now(&store).await?;
            ListWindow {
                from: now - args.since.unwrap_or(Duration::from_secs(24 * 3600)),
                to: now,
            }
        }
    };
    let reconciler = Reconciler::new(store, gateway, health, &settings);
    let report = reconciler.sweep(window).await?;
    if args.json {
        print_json(&report)
    } else {
        print!("{}", render_sweep(&report));
        Ok(())
    }
}

/// A sweep's report in lines.
pub fn render_sweep(report: &SweepReport) -> String {
    let mut out = format!(
        "swept {} .. {}: {} page(s), {} record(s) seen, {} kept, {} skipped as not onecharge's, in {:.1}s; {} new finding(s), {} seen again; {} attempt(s) settled by the evidence, {} made due\n",
        report.window_from,
        report.window_to,
        report.pages,
        report.records_seen,
        report.records_kept,
        report.records_skipped,
        report.duration_seconds,
        report.new_findings.len(),
        report.findings_seen_again,
        report.settled.len(),
        report.made_due.len()
    );
    for (id, status) in &report.settled {
        out.push_str(&format!("settled  {id} -> {status}\n"));
    }
    for f in &report.new_findings {
        out.push_str(&format!(
            "finding  {:<22} {} [{}]: {}\n",
            f.class.as_str(),
            f.payment_attempt_id
                .map(|id| id.to_string())
                .or_else(|| f.reference.clone())
                .unwrap_or_default(),
            f.gateway_ids.join(","),
            format::printable(&f.detail)
        ));
    }
    out
}
