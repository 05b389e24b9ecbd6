//! `onecharge audit list`: the audit trail of manual actions, newest first.

use clap::Subcommand;
use time::OffsetDateTime;

use super::print_json;
use super::table::Table;
use crate::config::Settings;
use crate::domain::PaymentAttemptId;
use crate::format;
use crate::operator::audit::{self, AuditFilter, AuditPage};
use crate::operator::parse_limit;

/// `onecharge audit …`
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Manual actions (resolve, retry, recheck, replay, bulk), newest first
    List {
        /// Only the actions of this actor (e.g. operator:alice, admin-api)
        #[arg(long)]
        actor: Option<String>,
        /// Only the actions on this payment attempt
        #[arg(long, value_name = "ID")]
        attempt: Option<PaymentAttemptId>,
        /// The next page: the cursor the previous page printed
        #[arg(long, value_name = "CURSOR", value_parser = audit::parse_cursor)]
        before: Option<i64>,
        /// At most this many; 0 means all
        #[arg(long, default_value_t = 100, value_parser = parse_limit)]
        limit: usize,
        /// One JSON array instead of a table (the next page's cursor on stderr)
        #[arg(long)]
        json: bool,
    },
}

/// `onecharge audit …`: runs one subcommand and prints its result.
pub async fn run(settings: &Settings, command: AuditCommand) -> anyhow::Result<()> {
    let store = super::connect_store(settings).await?;
    match command {
        AuditCommand::List {
            actor,
            attempt,
            before,
            limit,
            json,
        } => {
            let filter = AuditFilter {
                actor,
                payment_attempt_id: attempt,
                before_id: before,
            };
            let page = audit::list(&store, &filter, limit).await?;
            if json {
                // One array, like `attempts list --json`; the cursor goes to stderr.
                print_json(&page.items)?;
                if let Some(next) = &page.next {
                    eprintln!("next page: --before {next}");
                }
            } else {
                print!("{}", render_list(&page, OffsetDateTime::now_utc()));
            }
            Ok(())
        }
    }
}

/// The aligned table of `audit list`.
pub fn render_list(page: &AuditPage, now: OffsetDateTime) -> String {
    if page.items.is_empty() {
        return "no manual actions recorded\n".to_owned();
    }
    let mut t = Table::new(&[
        "ID", "AT", "ACTOR", "VIA", "ACTION", "ATTEMPTS", "OUTCOME", "REASON",
    ]);
    for e in &page.items {
        let attempts = match (e.payment_attempt_ids.as_slice(), e.dlq_sequence) {
            ([], Some(seq)) => format!("dlq #{seq}"),
            ([one], Some(seq)) => format!("{one} (dlq #{seq})"),
            ([], None) => "-".to_owned(),
            ([one], None) => one.to_string(),
            (many, _) => format!("{} attempts", many.len()),
        };
        t.push(vec![
            e.id.to_string(),
            format::at_relative(e.at, now),
            format::cell(&e.actor, 32),
            e.via.to_string(),
            e.action.to_string(),
            attempts,
            e.outcome.clone(),
            format::cell(e.reason.as_deref().unwrap_or("-"), 60),
        ]);
    }
    let mut out = format!(
        "{}{} action{} (newest first; details: audit list --json)\n",
        t.render(),
        page.items.len(),
        if page.items.len() == 1 { "" } else { "s" }
    );
    if let Some(next) = &page.next {
        out.push_str(&format!("older: audit list --before {next}\n"));
    }
    out
}
