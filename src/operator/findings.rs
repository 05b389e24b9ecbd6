//! Reconciliation findings for a person (docs/contract.md §5, §6): `findings list|show|
//! resolve`, `GET /api/findings`, `POST /api/findings/{id}/resolve` and the console's page
//! all call [`resolve`] and the store's readers; and `reconcile sweep`, which runs one sweep
//! on the command line and prints what it found.

use std::time::Duration;

use clap::{Args, Subcommand};
use time::OffsetDateTime;

use super::table::Table;
use crate::config::{Settings, UsageError};
use crate::gateway::list::ListWindow;
use crate::gateway::{GatewayClient, GatewayHealth};
use crate::reconciler::sweep::SweepReport;
use crate::reconciler::Reconciler;
use crate::store::audit::{AuditAction, NewAuditEntry, Via};
use crate::store::findings::{self, Finding, FindingState, Resolved};
use crate::store::Store;

/// `onecharge findings …`.
#[derive(Debug, Subcommand)]
pub enum FindingsCommand {
    /// Discrepancies between the ledger and the gateway, newest first
    List {
        /// Only the open ones
        #[arg(long)]
        open: bool,
        /// At most this many
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// One JSON array instead of a table
        #[arg(long)]
        json: bool,
    },
    /// One finding with everything recorded about it
    Show {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    /// Close a finding, saying what was done about it (audited)
    Resolve {
        id: i64,
        /// What was done (refunded, corrected, accepted, …)
        #[arg(long)]
        reason: String,
    },
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

fn parse_time(text: &str) -> Result<OffsetDateTime, String> {
    OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("`{text}` is not an RFC 3339 time such as 2026-12-01T00:00:00Z ({e})"))
}

/// Resolves finding `id` as `actor` through `via` with `reason`; audited in the same
/// transaction. An empty reason is refused.
pub async fn resolve(
    store: &Store,
    id: i64,
    actor: &str,
    via: Via,
    reason: &str,
) -> anyhow::Result<Resolved> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > 1000 {
        return Err(
            UsageError("--reason: say what was done, in 1 to 1000 characters".into()).into(),
        );
    }
    let resolved = findings::resolve(store, id, actor, reason, |finding| NewAuditEntry {
        actor: actor.to_owned(),
        via,
        action: AuditAction::ResolveFinding,
        payment_attempt_ids: finding.payment_attempt_id.into_iter().collect(),
        dlq_sequence: None,
        reason: Some(reason.to_owned()),
        outcome: "resolved",
        detail: serde_json::json!({
            "finding_id": finding.id,
            "class": finding.class,
            "gateway_ids": finding.gateway_ids,
            "reference": finding.reference,
        }),
    })
    .await?;
    crate::reconciler::sweep::refresh_findings_gauge(store).await;
    Ok(resolved)
}

/// `onecharge findings …`: runs one subcommand and prints its result.
pub async fn run_findings(settings: &Settings, command: FindingsCommand) -> anyhow::Result<()> {
    let store = Store::connect_with(&settings.database_url, 2, &settings.database).await?;
    match command {
        FindingsCommand::List { open, limit, json } => {
            let state = if open {
                FindingState::Open
            } else {
                FindingState::All
            };
            let list = findings::list(&store, state, limit.max(0)).await?;
            if json {
                super::print_json(&list)
            } else {
                print!("{}", render_list(&list));
                Ok(())
            }
        }
        FindingsCommand::Show { id, json } => match findings::get(&store, id).await? {
            None => Err(UsageError(format!("no finding {id}")).into()),
            Some(finding) if json => super::print_json(&finding),
            Some(finding) => {
                print!("{}", render_one(&finding));
                Ok(())
            }
        },
        FindingsCommand::Resolve { id, reason } => {
            match resolve(&store, id, &super::operator_actor(), Via::Cli, &reason).await? {
                Resolved::Done(finding) => {
                    println!(
                        "finding {} ({}) resolved: {reason}",
                        finding.id, finding.class
                    );
                    Ok(())
                }
                Resolved::NotFound => Err(UsageError(format!("no finding {id}")).into()),
                Resolved::AlreadyResolved(finding) => Err(UsageError(format!(
                    "finding {id} was already resolved by {} at {}: {}",
                    finding.resolved_by.unwrap_or_default(),
                    finding
                        .resolved_at
                        .map(|t| t.to_string())
                        .unwrap_or_default(),
                    finding.resolution.unwrap_or_default()
                ))
                .into()),
            }
        }
    }
}

/// The findings as an aligned table.
pub fn render_list(list: &[Finding]) -> String {
    if list.is_empty() {
        return "no findings\n".into();
    }
    let mut table = Table::new(&[
        "id",
        "class",
        "state",
        "payment_attempt_id",
        "gateway_ids",
        "seen",
        "last_seen_at",
    ]);
    for f in list {
        table.push(vec![
            f.id.to_string(),
            f.class.to_string(),
            f.state.clone(),
            f.payment_attempt_id
                .map(|id| id.to_string())
                .or_else(|| f.reference.clone())
                .unwrap_or_else(|| "-".into()),
            f.gateway_ids.join(","),
            f.seen_count.to_string(),
            f.last_seen_at.to_string(),
        ]);
    }
    table.render()
}

/// One finding, field by field.
pub fn render_one(f: &Finding) -> String {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let mut out = String::new();
    for (k, v) in [
        ("id", f.id.to_string()),
        ("class", f.class.to_string()),
        ("state", f.state.clone()),
        (
            "payment_attempt_id",
            f.payment_attempt_id.map_or("-".into(), |id| id.to_string()),
        ),
        ("reference", opt(&f.reference)),
        ("gateway_ids", f.gateway_ids.join(", ")),
        ("attempt_status", opt(&f.attempt_status)),
        (
            "attempt_amount",
            format!(
                "{} {}",
                f.attempt_amount_minor.map_or("-".into(), |a| a.to_string()),
                opt(&f.attempt_currency)
            ),
        ),
        (
            "gateway_amount",
            format!(
                "{} {}",
                f.gateway_amount_minor.map_or("-".into(), |a| a.to_string()),
                opt(&f.gateway_currency)
            ),
        ),
        ("detail", f.detail.clone()),
        ("source", format!("{:?}", f.source).to_lowercase()),
        ("first_seen_at", f.first_seen_at.to_string()),
        ("last_seen_at", f.last_seen_at.to_string()),
        ("seen_count", f.seen_count.to_string()),
        (
            "resolved_at",
            f.resolved_at.map_or("-".into(), |t| t.to_string()),
        ),
        ("resolved_by", opt(&f.resolved_by)),
        ("resolution", opt(&f.resolution)),
    ] {
        out.push_str(&format!("{k:<20} {}\n", super::table::printable(&v)));
    }
    out
}

/// `onecharge reconcile sweep`: one sweep of the window, its findings printed.
pub async fn run_sweep(settings: Settings, args: SweepArgs) -> anyhow::Result<()> {
    let gateway = GatewayClient::from_settings(&settings)?;
    let health = GatewayHealth::from_settings(&settings.executor);
    let store = Store::connect_with(&settings.database_url, 4, &settings.database).await?;
    let window = match (args.from, args.to) {
        (Some(from), Some(to)) if from < to => ListWindow { from, to },
        (Some(_), Some(_)) => {
            return Err(UsageError("--from must be before --to".into()).into());
        }
        _ => {
            let now = crate::store::sweep::now(&store).await?;
            ListWindow {
                from: now - args.since.unwrap_or(Duration::from_secs(24 * 3600)),
                to: now,
            }
        }
    };
    let reconciler = Reconciler::new(store, gateway, health, &settings);
    let report = reconciler.sweep(window).await?;
    if args.json {
        super::print_json(&report)
    } else {
        print!("{}", render_sweep(&report));
        Ok(())
    }
}

/// A sweep's report in lines.
pub fn render_sweep(report: &SweepReport) -> String {
    let mut out = format!(
        "swept {} .. {}: {} page(s), {} record(s) in {:.1}s; {} new finding(s), {} seen again; {} attempt(s) settled by the evidence, {} made due\n",
        report.window_from,
        report.window_to,
        report.pages,
        report.records,
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
            super::table::printable(&f.detail)
        ));
    }
    out
}
