//! Operator tooling (contract §5, §6): what a person on call uses to see where attempts stand,
//! to decide the ones nobody else can (`needs_review`), to replay dead letters and to keep
//! the dedupe table bounded.
//!
//! - [`attempts`]: `attempts list | stuck | show` — queries and their presentation (aligned
//!   tables for people, one JSON document for scripts and the admin API).
//! - [`stats`]: `attempts stats` — counts per state, the oldest unsettled age, dead letters
//!   and the outbox backlog.
//! - [`resolve`]: `attempts resolve` — an operator's decision, guarded in SQL.
//! - [`recheck`]: `attempts recheck` — the reconciler's lookup for one attempt, now.
//! - [`bulk`]: `attempts bulk-retry | bulk-recheck` — one decision on a filtered set, with
//!   a preview and a hard cap.
//! - [`dlq`]: `dlq list | replay`.
//! - [`audit`]: `audit list` — every manual action, who, when, what, why.
//! - [`intake_audit`]: `intake audit` — commands on the stream intake never recorded.
//! - [`purge`]: `purge`, and the `purge` role of `serve`.
//! - [`retention`]: the history part of `purge`: month partitions created ahead and
//!   dropped past `purge.history_retention`, never losing a non-final attempt's history.
//!
//! Every SQL statement is in `crate::store::operator`, `crate::store::audit`,
//! `crate::store::purge` and `crate::store::retention`; the CLI, the admin API and the console
//! call the same functions here, each passing who acts (`actor`: `operator:<name>`,
//! `admin-api`) and through what ([`Via`]), so a decision taken over HTTP is the decision
//! taken on the command line, and the audit trail records it the same way.

pub mod attempts;
pub mod audit;
pub mod bulk;
pub mod dlq;
pub mod findings;
pub mod intake_audit;
pub mod purge;
pub mod recheck;
pub mod resolve;
pub mod retention;
pub mod stats;
pub(crate) mod table;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use time::OffsetDateTime;

use crate::config::{Settings, UsageError};
use crate::domain::AttemptStatus;
use crate::domain::PaymentAttemptId;
use crate::store::Store;

pub use crate::store::audit::Via;
pub use resolve::{ResolveAs, ResolveError, ResolveRequest};

/// `onecharge attempts …`
#[derive(Debug, Subcommand)]
pub enum AttemptsCommand {
    /// Attempts, newest first
    List {
        #[command(flatten)]
        filter: bulk::BulkFilter,
        /// The next page: the cursor the previous page printed (on stderr)
        #[arg(long, value_name = "CURSOR", value_parser = parse_cursor)]
        before: Option<attempts::AttemptCursor>,
        /// At most this many; 0 means all
        #[arg(long, default_value_t = 100, value_parser = parse_limit)]
        limit: usize,
        /// One JSON document instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Attempts per state, the oldest unsettled age, dead letters and the outbox backlog
    Stats {
        /// One JSON document instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Non-final attempts older than a threshold, and every needs_review, oldest first, with
    /// what happens next
    Stuck {
        /// Age (since recorded) past which a non-final attempt counts as stuck, e.g. 15m, 2h
        #[arg(long, default_value = "15m", value_parser = crate::config::parse_duration)]
        older_than: Duration,
        /// The next page: the cursor the previous page printed (on stderr)
        #[arg(long, value_name = "CURSOR", value_parser = parse_cursor)]
        after: Option<attempts::AttemptCursor>,
        /// At most this many; 0 (the default) means all
        #[arg(long, default_value_t = 0, value_parser = parse_limit)]
        limit: usize,
        /// One JSON document instead of a table
        #[arg(long)]
        json: bool,
    },
    /// One attempt with its transitions, gateway calls and events, as a timeline
    Show {
        /// The payment_attempt_id
        id: PaymentAttemptId,
        /// One JSON document instead of a timeline
        #[arg(long)]
        json: bool,
    },
    /// Decide a needs_review attempt: succeeded, declined, or retry with the same key
    Resolve(ResolveArgs),
    /// Ask the gateway now about one unknown or needs_review attempt, as the reconciler
    /// would, settle it if the answer does, and print what was found and done
    Recheck {
        /// The payment_attempt_id
        id: PaymentAttemptId,
        /// Why: recorded in the audit trail
        #[arg(long)]
        reason: Option<String>,
        /// One JSON document instead of text
        #[arg(long)]
        json: bool,
    },
    /// Retry (resolve --as retry) every needs_review attempt the filter matches
    BulkRetry(BulkArgs),
    /// Recheck every unknown or needs_review attempt the filter matches (--status required)
    BulkRecheck(BulkArgs),
}

/// `onecharge attempts bulk-retry | bulk-recheck …`
#[derive(Debug, Args)]
pub struct BulkArgs {
    // Which attempts; the action narrows the state (retry: needs_review; recheck: unknown
    // or needs_review).
    #[command(flatten)]
    pub filter: bulk::BulkFilter,
    /// Why: recorded with every attempt acted on
    #[arg(long)]
    pub reason: String,
    /// Refuse when more than this many match (at most 500, the bulk cap)
    #[arg(long)]
    pub max: Option<usize>,
    /// Count and list the matching attempts; act on nothing
    #[arg(long)]
    pub dry_run: bool,
    /// One JSON document instead of text
    #[arg(long)]
    pub json: bool,
}

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

/// `onecharge attempts resolve …`
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The payment_attempt_id
    pub id: PaymentAttemptId,
    /// What the operator established: succeeded (the gateway charged), declined (it did not),
    /// retry (send again with the same idempotency key; only inside the gateway's key window)
    #[arg(long = "as", value_enum)]
    pub as_: ResolveAs,
    /// Why: recorded on the transition and the event
    #[arg(long)]
    pub reason: String,
    /// The gateway's charge id (required with --as succeeded)
    #[arg(long)]
    pub gateway_charge_id: Option<String>,
    /// The gateway's decline code (with --as declined)
    #[arg(long)]
    pub decline_code: Option<String>,
}

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

/// How far an operator's retry may reach: the same window the executor's claim applies, so
/// that a retry the operator is allowed is one the executor will really send.
pub use crate::domain::RetryWindow;

/// The actor recorded for a decision taken on this machine's command line:
/// `operator:<user>`. Under `sudo` the person who ran sudo, not `root`.
pub fn operator_actor() -> String {
    let from_env = ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|user| !user.trim().is_empty());
    let user = from_env.unwrap_or_else(whoami::username);
    format!("operator:{}", crate::domain::bounded(user.trim(), 64))
}

/// `onecharge attempts …`: runs one subcommand and prints its result.
pub async fn run_attempts(settings: &Settings, command: AttemptsCommand) -> anyhow::Result<()> {
    let store = Store::connect_with(&settings.database_url, 2, &settings.database).await?;
    let window = RetryWindow::from_settings(settings);
    let now = OffsetDateTime::now_utc();
    match command {
        AttemptsCommand::List {
            filter,
            before,
            limit,
            json,
        } => {
            let filter = filter.listing(before);
            let page = attempts::page(&store, &filter, limit, now, &window).await?;
            if json {
                print_json(&page.attempts)?;
            } else {
                print!("{}", attempts::render_list(&page.attempts, now));
            }
            // The JSON document stays the array of contract §5; the cursor goes to stderr.
            if let Some(next) = page.next {
                eprintln!("next page: --before {next}");
            }
            Ok(())
        }
        AttemptsCommand::Stuck {
            older_than,
            after,
            limit,
            json,
        } => {
            let filter = attempts::StuckFilter {
                older_than,
                status: None,
                after,
            };
            let page = attempts::stuck(&store, &filter, limit, now, &window).await?;
            if json {
                print_json(&page.attempts)?;
            } else {
                print!("{}", attempts::render_stuck(&page, &filter, now));
            }
            // As `attempts list`: the JSON document stays the array of contract §5.
            if let Some(next) = page.next {
                eprintln!("next page: --after {next}");
            }
            Ok(())
        }
        AttemptsCommand::Stats { json } => {
            let broker = crate::broker::Broker::connect(settings).await?;
            let stats = stats::stats(&store, &broker, now).await?;
            if json {
                print_json(&stats)
            } else {
                print!("{}", stats::render_stats(&stats));
                Ok(())
            }
        }
        AttemptsCommand::Show { id, json } => {
            let detail = attempts::show(&store, id, now, &window)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no payment attempt {id}"))?;
            if json {
                print_json(&detail)
            } else {
                print!("{}", attempts::render_show(&detail, now));
                Ok(())
            }
        }
        AttemptsCommand::Resolve(args) => {
            let request = ResolveRequest {
                as_: args.as_,
                reason: args.reason,
                gateway_charge_id: args.gateway_charge_id,
                decline_code: args.decline_code,
            };
            let actor = operator_actor();
            // Declining may need to cancel a PaymentIntent first (a client needs the
            // gateway settings; without them a decline that needs one is refused).
            let gateway = crate::gateway::GatewayClient::from_settings(settings).ok();
            match resolve::resolve(
                &store,
                gateway.as_ref(),
                args.id,
                &request,
                &actor,
                Via::Cli,
                &window,
            )
            .await
            {
                Ok(resolved) => {
                    println!("{}", resolved.summary());
                    Ok(())
                }
                // A request that can never succeed is a usage error (exit 2); a refusal
                // because of the attempt's state is a runtime refusal (exit 1), one line.
                Err(ResolveError::Invalid(why)) => Err(UsageError(why).into()),
                Err(err @ ResolveError::Store(_)) => {
                    Err(anyhow::Error::new(err).context("resolving the attempt"))
                }
                Err(err) => Err(anyhow::anyhow!("{err}")),
            }
        }
        AttemptsCommand::Recheck { id, reason, json } => {
            let reconciler = cli_reconciler(settings, store)?;
            match recheck::recheck(
                &reconciler,
                id,
                &operator_actor(),
                Via::Cli,
                reason.as_deref(),
            )
            .await
            {
                Ok(report) if json => print_json(&report),
                Ok(report) => {
                    print!("{}", recheck::render(&report));
                    Ok(())
                }
                // Asking about an attempt a lookup cannot settle is the caller's mistake.
                Err(recheck::RecheckError::Refused(why) | recheck::RecheckError::Invalid(why)) => {
                    Err(UsageError(why).into())
                }
                Err(err) => Err(anyhow::anyhow!("{err}")),
            }
        }
        AttemptsCommand::BulkRetry(args) => {
            run_bulk(settings, store, bulk::BulkAction::Retry, args, &window).await
        }
        AttemptsCommand::BulkRecheck(args) => {
            run_bulk(settings, store, bulk::BulkAction::Recheck, args, &window).await
        }
    }
}

/// The reconciler a recheck from the command line uses: built like `serve` builds it, so
/// it needs the gateway settings (`gateway_url`, `gateway_api_key`).
fn cli_reconciler(
    settings: &Settings,
    store: Store,
) -> anyhow::Result<crate::reconciler::Reconciler> {
    let gateway = crate::gateway::GatewayClient::from_settings(settings)?;
    let health = crate::gateway::GatewayHealth::from_settings(&settings.executor);
    Ok(crate::reconciler::Reconciler::new(
        store, gateway, health, settings,
    ))
}

async fn run_bulk(
    settings: &Settings,
    store: Store,
    action: bulk::BulkAction,
    args: BulkArgs,
    window: &RetryWindow,
) -> anyhow::Result<()> {
    let request = bulk::BulkRequest {
        action,
        filter: args.filter,
        reason: args.reason,
        preview: args.dry_run,
        max: args.max,
        // the command line acts in one step on what matches then, bounded by --max
        ids: None,
    };
    let reconciler = match action {
        bulk::BulkAction::Recheck if !args.dry_run => {
            Some(cli_reconciler(settings, store.clone())?)
        }
        _ => None,
    };
    match bulk::bulk(
        &store,
        reconciler.as_ref(),
        &request,
        &operator_actor(),
        Via::Cli,
        window,
    )
    .await
    {
        Ok(outcome) if args.json => print_json(&outcome),
        Ok(outcome) => {
            print!("{}", bulk::render(&outcome));
            Ok(())
        }
        Err(err @ (bulk::BulkError::Invalid(_) | bulk::BulkError::TooMany { .. })) => {
            Err(UsageError(err.to_string()).into())
        }
        Err(err) => Err(anyhow::anyhow!("{err}")),
    }
}

/// `onecharge audit …`: runs one subcommand and prints its result.
pub async fn run_intake(settings: &Settings, command: IntakeCommand) -> anyhow::Result<()> {
    let store = Store::connect_with(&settings.database_url, 2, &settings.database).await?;
    let broker = crate::broker::Broker::connect(settings).await?;
    let audit = crate::intake::audit::StreamAudit::new(store, broker, settings);
    match command {
        IntakeCommand::Audit {
            replay: Some(sequence),
            ..
        } => {
            let replayed = audit.replay(sequence, &operator_actor()).await?;
            println!(
                "replayed sequence {sequence} ({}) as sequence {}: intake records it like any delivery",
                replayed.message_id.as_deref().unwrap_or("no message id"),
                replayed.sequence
            );
            Ok(())
        }
        IntakeCommand::Audit { json, .. } => {
            let report = intake_audit::audit(&audit).await?;
            if json {
                print_json(&report)
            } else {
                print!(
                    "{}",
                    intake_audit::render(&report, OffsetDateTime::now_utc())
                );
                Ok(())
            }
        }
    }
}

pub async fn run_audit(settings: &Settings, command: AuditCommand) -> anyhow::Result<()> {
    let store = Store::connect_with(&settings.database_url, 2, &settings.database).await?;
    match command {
        AuditCommand::List {
            actor,
            attempt,
            before,
            limit,
            json,
        } => {
            let filter = audit::AuditFilter {
                actor,
                payment_attempt_id: attempt,
                before_id: before,
            };
            let page = audit::list(&store, &filter, limit).await?;
            if json {
                // One array, like `attempts list --json`; the cursor goes to stderr.
                print_json(&page.entries)?;
                if let Some(next) = &page.next {
                    eprintln!("next page: --before {next}");
                }
                Ok(())
            } else {
                print!("{}", audit::render_list(&page, OffsetDateTime::now_utc()));
                Ok(())
            }
        }
    }
}

/// `onecharge dlq …`: runs one subcommand and prints its result.
pub async fn run_dlq(settings: &Settings, command: DlqCommand) -> anyhow::Result<()> {
    let broker = crate::broker::Broker::connect(settings).await?;
    match command {
        DlqCommand::List { json } => {
            let letters = dlq::list_dead_letters(&broker).await?;
            if json {
                print_json(&letters)
            } else {
                print!("{}", dlq::render_list(&letters, &broker.names.dlq_stream()));
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
            let store = Store::connect_with(&settings.database_url, 2, &settings.database).await?;
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

/// What JetStream says about stream `name` now, or the error an operator can act on.
pub(crate) async fn stream_info(
    broker: &crate::broker::Broker,
    name: &str,
) -> anyhow::Result<async_nats::jetstream::stream::Info> {
    let stream = broker
        .jetstream
        .get_stream(name)
        .await
        .with_context(|| format!("reading stream {name}: is `onecharge setup` done?"))?;
    Ok(stream.cached_info().clone())
}

fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value).context("serialising the output")?;
    println!("{text}");
    Ok(())
}

/// The largest `--limit` (and `limit=`): what PostgreSQL's `LIMIT` takes.
pub const MAX_LIMIT: usize = i64::MAX as usize;

/// A row limit: a whole number from 0 (all) to [`MAX_LIMIT`].
pub fn parse_limit(text: &str) -> Result<usize, String> {
    text.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n <= MAX_LIMIT)
        .ok_or_else(|| {
            format!("`{text}` is not a whole number from 0 (all) to at most {MAX_LIMIT}")
        })
}

/// Refuses a value holding NUL, which PostgreSQL text cannot store: an operator's words
/// with one are the caller's mistake to fix, not a failure in the database. `name` is how
/// the caller spelt the field (`--reason`, `reason`).
fn recordable(name: &str, value: &str) -> Result<(), String> {
    if value.contains('\0') {
        return Err(format!(
            "{name} contains a NUL character (\\0), which cannot be recorded: remove it"
        ));
    }
    Ok(())
}

/// A listing's `limit` as SQL's `LIMIT` takes it: 0 means all (`None`), and past `i64::MAX`
/// a limit leaves nothing out.
fn sql_limit(limit: usize) -> Option<i64> {
    (limit > 0).then(|| i64::try_from(limit).unwrap_or(i64::MAX))
}

/// The cursor of the page after `rows`, which were read with `limit` ([`sql_limit`]): only a
/// full page can have one after it, so a shorter page (or an unlimited one) is the last.
fn next_cursor<T, C>(rows: &[T], limit: Option<i64>, cursor: impl FnOnce(&T) -> C) -> Option<C> {
    match (limit, rows.last()) {
        (Some(limit), Some(last)) if rows.len() as i64 == limit => Some(cursor(last)),
        _ => None,
    }
}

/// An RFC 3339 time, e.g. `2026-12-01T13:00:00Z`.
pub fn parse_time(text: &str) -> Result<OffsetDateTime, String> {
    OffsetDateTime::parse(text.trim(), &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("`{text}` is not an RFC 3339 time such as 2026-12-01T13:00:00Z: {e}"))
}

fn parse_cursor(text: &str) -> Result<attempts::AttemptCursor, String> {
    text.parse()
}

fn parse_status(text: &str) -> Result<AttemptStatus, String> {
    text.parse::<AttemptStatus>().map_err(|e| e.to_string())
}
