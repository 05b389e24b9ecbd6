//! `onecharge findings list | show | resolve`: the discrepancies the reconciliation sweep
//! and the gateway's webhooks found.

use clap::Subcommand;

use super::table::Table;
use super::{operator_actor, print_json};
use crate::config::{Settings, UsageError};
use crate::format;
use crate::operator::findings::{self, FindingDetail};
use crate::operator::Via;
use crate::store::findings::{self as store_findings, Finding, FindingResolved, FindingState};

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

/// `onecharge findings …`: runs one subcommand and prints its result.
pub async fn run(settings: &Settings, command: FindingsCommand) -> anyhow::Result<()> {
    let store = super::connect_store(settings).await?;
    match command {
        FindingsCommand::List { open, limit, json } => {
            let state = if open {
                FindingState::Open
            } else {
                FindingState::All
            };
            let list = store_findings::list(&store, state, limit.max(0)).await?;
            if json {
                print_json(&list)
            } else {
                print!("{}", render_list(&list));
                Ok(())
            }
        }
        FindingsCommand::Show { id, json } => match findings::show(&store, id).await? {
            None => Err(UsageError(format!("no finding {id}")).into()),
            Some(detail) if json => print_json(&detail),
            Some(detail) => {
                print!("{}", render_one(&detail));
                Ok(())
            }
        },
        FindingsCommand::Resolve { id, reason } => {
            match findings::resolve(&store, id, &operator_actor(), Via::Cli, &reason).await? {
                FindingResolved::Done(finding) => {
                    println!(
                        "finding {} ({}) resolved: {reason}",
                        finding.id, finding.class
                    );
                    Ok(())
                }
                FindingResolved::NotFound => Err(UsageError(format!("no finding {id}")).into()),
                FindingResolved::AlreadyResolved(finding) => Err(UsageError(format!(
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

/// The columns of `findings list`.
const COLUMNS: [&str; 7] = [
    "id",
    "class",
    "state",
    "payment_attempt_id",
    "gateway_ids",
    "seen",
    "last_seen_at",
];

/// The findings as an aligned table.
pub fn render_list(list: &[Finding]) -> String {
    if list.is_empty() {
        return "no findings\n".into();
    }
    let mut table = Table::new(&COLUMNS);
    list.iter().map(row).for_each(|cells| table.push(cells));
    table.render()
}

/// One finding's cells in [`COLUMNS`] order.
fn row(f: &Finding) -> Vec<String> {
    vec![
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
    ]
}

/// One finding, field by field, then its history.
pub fn render_one(detail: &FindingDetail) -> String {
    let f = &detail.finding;
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
        ("evidence", f.evidence.clone()),
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
        out.push_str(&format!("{k:<20} {}\n", format::printable(&v)));
    }
    if !detail.history.is_empty() {
        out.push_str("history (the other findings about this charge, oldest first):\n");
        for h in &detail.history {
            let resolved = match (&h.resolved_by, &h.resolution) {
                (Some(by), Some(why)) => format!(": resolved by {by}: {why}"),
                _ => String::new(),
            };
            out.push_str(&format!(
                "  #{} {} {} seen {}{}\n",
                h.finding_id,
                format::printable(if h.evidence.is_empty() {
                    "-"
                } else {
                    &h.evidence
                }),
                h.state,
                h.first_seen_at,
                format::printable(&resolved)
            ));
        }
    }
    out
}
