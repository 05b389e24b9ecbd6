//! Operator tooling (contract §5, §6): what a person on call uses to see where attempts stand,
//! to decide the ones nobody else can (`needs_review`), to replay dead letters and to keep
//! the dedupe table bounded.
//!
//! - [`attempts`]: `attempts list | stuck | show` — queries and their presentation (aligned
//!   tables for people, one JSON document for scripts and the admin API).
//! - [`stats`]: `attempts stats` — counts per state, the oldest unsettled age, dead letters
//!   and the outbox backlog.
//! - [`resolve`]: `attempts resolve` — an operator's decision, guarded in SQL.
//! - [`dlq`]: `dlq list | replay`.
//! - [`purge`]: `purge`, and the `purge` role of `serve`.
//! - [`retention`]: the history part of `purge`: month partitions created ahead and
//!   dropped past `purge.history_retention`, never losing a non-final attempt's history.
//!
//! Every SQL statement is in `crate::store::operator`, `crate::store::purge` and
//! `crate::store::retention`; the CLI and
//! the admin API call the same functions here, so a decision taken over HTTP is the decision
//! taken on the command line.

pub mod attempts;
pub mod dlq;
pub mod purge;
pub mod resolve;
pub mod retention;
pub mod stats;
mod table;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use time::OffsetDateTime;

use crate::config::{Settings, UsageError};
use crate::domain::AttemptStatus;
use crate::domain::PaymentAttemptId;
use crate::store::Store;

pub use resolve::{ResolveAs, ResolveError, ResolveRequest};

/// `onecharge attempts …`
#[derive(Debug, Subcommand)]
pub enum AttemptsCommand {
    /// Attempts, newest first
    List {
        /// Only attempts in this state (pending, in_flight, succeeded, declined, unknown,
        /// needs_review, expired)
        #[arg(long, value_parser = parse_status)]
        status: Option<AttemptStatus>,
        /// Only the attempts of this order
        #[arg(long, value_name = "ORDER_ID")]
        order_id: Option<String>,
        /// Only the attempts of this customer
        #[arg(long, value_name = "CUSTOMER_ID")]
        customer_id: Option<String>,
        /// Only the attempt the gateway recorded under this charge id
        #[arg(long, value_name = "CHARGE_ID")]
        gateway_charge_id: Option<String>,
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
            status,
            order_id,
            customer_id,
            gateway_charge_id,
            limit,
            json,
        } => {
            let filter = attempts::AttemptFilter {
                status,
                order_id,
                customer_id,
                gateway_charge_id,
            };
            let views = attempts::list(&store, &filter, limit, now, &window).await?;
            if json {
                print_json(&views)
            } else {
                print!("{}", attempts::render_list(&views, now));
                Ok(())
            }
        }
        AttemptsCommand::Stuck { older_than, json } => {
            let views = attempts::stuck(&store, older_than, None, now, &window).await?;
            if json {
                print_json(&views)
            } else {
                print!("{}", attempts::render_stuck(&views, older_than, now));
                Ok(())
            }
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
            match resolve::resolve(&store, args.id, &request, &actor, &window, now).await {
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
        } => {
            let corrected = match &body_file {
                Some(path) => Some(dlq::read_body_file(path)?),
                None => None,
            };
            let replayed = dlq::replay(&broker, sequence, corrected, &operator_actor()).await?;
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

fn parse_status(text: &str) -> Result<AttemptStatus, String> {
    text.parse::<AttemptStatus>().map_err(|e| e.to_string())
}
