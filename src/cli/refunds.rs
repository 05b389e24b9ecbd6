//! `onecharge refunds …`: list, show and create — their flags, their runners, and the
//! tables, timelines and lines they print. The readings and the refund itself are
//! `crate::operator::refunds`, shared with `/api/refunds…` and the console.

use std::io::{BufRead as _, Write as _};

use clap::{Args, Subcommand};
use time::OffsetDateTime;

use super::table::Table;
use super::{operator_actor, print_as, print_json};
use crate::config::{Settings, UsageError};
use crate::domain::{PaymentAttemptId, RefundId, RefundStatus};
use crate::format;
use crate::operator::refunds::{
    self, NewRefund, RefundCursor, RefundDetail, RefundError, RefundFilter, RefundPreview,
    RefundResolveAs, RefundResolveError, RefundResolveRequest, RefundView,
};
use crate::operator::{parse_limit, parse_time, Via};
use crate::store::Store;

/// `onecharge refunds …`
#[derive(Debug, Subcommand)]
pub enum RefundsCommand {
    /// Refunds, newest first
    List {
        #[command(flatten)]
        filter: RefundFilterArgs,
        /// The next page: the cursor the previous page printed (on stderr)
        #[arg(long, value_name = "CURSOR", value_parser = parse_cursor)]
        before: Option<RefundCursor>,
        /// At most this many; 0 means all
        #[arg(long, default_value_t = 100, value_parser = parse_limit)]
        limit: usize,
        /// One JSON document instead of a table
        #[arg(long)]
        json: bool,
    },
    /// One refund: its amount, reason, status and why, what happens next, and its moves,
    /// gateway calls and events as a timeline
    Show {
        /// The refund_id
        refund_id: RefundId,
        /// One JSON document instead of a timeline
        #[arg(long)]
        json: bool,
    },
    /// Refund a succeeded charge, in whole or in part: shows what it would do and asks
    /// for confirmation, then publishes a RefundPayment command as a producer would (the
    /// refund worker sends it). Audited with your name
    Create(CreateArgs),
    /// Settle a refund in review (or a succeeded one the gateway has since failed): the
    /// gateway is read first and a choice it contradicts is refused with why; failed gives
    /// the reserved amount back for a refund under a new refund_id. Audited with your name
    Resolve(ResolveRefundArgs),
}

/// `onecharge refunds resolve …`
#[derive(Debug, Args)]
pub struct ResolveRefundArgs {
    /// The refund_id
    pub refund_id: RefundId,
    /// What you established at the gateway: succeeded (it refunded) or failed (it did not,
    /// or its refund failed)
    #[arg(long = "as", value_enum)]
    pub as_: RefundResolveAs,
    /// Why (1 to 1000 characters): stored with the refund and in the audit trail
    #[arg(long)]
    pub reason: String,
    /// The result as one JSON document
    #[arg(long)]
    pub json: bool,
}

/// Which refunds: the filters of `refunds list`.
#[derive(Debug, Clone, Default, Args)]
pub struct RefundFilterArgs {
    /// Only the refunds of this payment attempt
    #[arg(long = "attempt", value_name = "PAYMENT_ATTEMPT_ID")]
    pub attempt: Option<PaymentAttemptId>,
    /// Only refunds in this state (waiting, pending, in_flight, processing, unknown,
    /// succeeded, failed, refused, needs_review)
    #[arg(long, value_parser = refunds::parse_status)]
    pub status: Option<RefundStatus>,
    /// Only the refunds of this order's attempts
    #[arg(long, visible_alias = "order", value_name = "ORDER_ID")]
    pub order_id: Option<String>,
    /// Only the refunds of this customer's attempts
    #[arg(long, visible_alias = "customer", value_name = "CUSTOMER_ID")]
    pub customer_id: Option<String>,
    /// Only refunds recorded at or after this time (RFC 3339)
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub created_after: Option<OffsetDateTime>,
    /// Only refunds recorded before this time (RFC 3339)
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub created_before: Option<OffsetDateTime>,
}

impl RefundFilterArgs {
    fn filter(self, before: Option<RefundCursor>) -> RefundFilter {
        RefundFilter {
            payment_attempt_id: self.attempt,
            status: self.status,
            order_id: self.order_id,
            customer_id: self.customer_id,
            created_after: self.created_after,
            created_before: self.created_before,
            before,
        }
    }
}

/// `onecharge refunds create …`
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The charge to refund: its payment_attempt_id
    #[arg(long = "attempt", value_name = "PAYMENT_ATTEMPT_ID")]
    pub attempt: PaymentAttemptId,
    /// In the charge's minor unit (cents for EUR) [default: all that is left]
    #[arg(long = "amount", value_name = "MINOR")]
    pub amount: Option<i64>,
    /// Why (1 to 500 characters): stored with the refund, sent to the gateway, audited
    #[arg(long)]
    pub reason: String,
    /// Publish without asking (what it does is still printed)
    #[arg(long)]
    pub yes: bool,
    /// The published refund as one JSON document (the preview and the question go to
    /// stderr)
    #[arg(long)]
    pub json: bool,
}

fn parse_cursor(text: &str) -> Result<RefundCursor, String> {
    text.parse()
}

/// `onecharge refunds …`: runs one subcommand and prints its result.
pub async fn run(settings: &Settings, command: RefundsCommand) -> anyhow::Result<()> {
    let store = super::connect_store(settings).await?;
    let now = OffsetDateTime::now_utc();
    match command {
        RefundsCommand::List {
            filter,
            before,
            limit,
            json,
        } => {
            let page = refunds::page(&store, &filter.filter(before), limit, now).await?;
            print_as(json, &page.items, |views| render_list(views, now))?;
            if let Some(next) = page.next {
                eprintln!("next page: --before {next}");
            }
            Ok(())
        }
        RefundsCommand::Show { refund_id, json } => {
            let detail = refunds::show(&store, refund_id, now)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no refund {refund_id}"))?;
            print_as(json, &detail, |detail| render_show(detail, now))
        }
        RefundsCommand::Create(args) => create(settings, &store, args).await,
        RefundsCommand::Resolve(args) => resolve(settings, &store, args).await,
    }
}

/// Resolves one refund after reading the gateway, and prints what changed.
async fn resolve(
    settings: &Settings,
    store: &Store,
    args: ResolveRefundArgs,
) -> anyhow::Result<()> {
    let request = RefundResolveRequest {
        as_: args.as_,
        reason: args.reason,
    };
    let gateway = crate::gateway::GatewayClient::from_settings(settings).ok();
    match refunds::resolve(
        store,
        gateway.as_ref(),
        args.refund_id,
        &request,
        &operator_actor(),
        Via::Cli,
    )
    .await
    {
        Ok(resolved) if args.json => print_json(&resolved),
        Ok(resolved) => {
            println!("{}", resolved.summary());
            Ok(())
        }
        // A request that can never pass is a usage error (exit 2); a refusal for the
        // refund's state or the gateway's word is a runtime refusal (exit 1), one line.
        Err(RefundResolveError::Invalid(why)) => Err(UsageError(why).into()),
        Err(err @ RefundResolveError::Store(_)) => {
            Err(anyhow::Error::new(err).context("resolving the refund"))
        }
        Err(err) => Err(anyhow::anyhow!("{err}")),
    }
}

/// Previews the refund, asks unless `--yes`, publishes it and prints what was done.
async fn create(settings: &Settings, store: &Store, args: CreateArgs) -> anyhow::Result<()> {
    let request = NewRefund {
        amount_minor: args.amount,
        reason: args.reason,
        refund_id: None,
    };
    let preview = refunds::preview(store, args.attempt, &request)
        .await
        .map_err(refusal)?;
    let shown = render_preview(&preview);
    if args.json {
        eprint!("{shown}");
    } else {
        print!("{shown}");
    }
    if !args.yes && !confirmed()? {
        anyhow::bail!("not confirmed: nothing was published");
    }
    let broker = crate::broker::Broker::connect(settings).await?;
    // What was shown is what is published: the amount checked, under the id shown.
    let confirmed = NewRefund {
        amount_minor: Some(preview.amount_minor),
        reason: preview.reason.clone(),
        refund_id: Some(preview.refund_id),
    };
    let published = refunds::create(
        store,
        &broker,
        args.attempt,
        &confirmed,
        &operator_actor(),
        Via::Cli,
    )
    .await
    .map_err(refusal)?;
    if args.json {
        print_json(&published)
    } else {
        println!("{}", published.summary());
        Ok(())
    }
}

/// Asks on the terminal (stderr, so `--json` stays one document); only `y` or `yes`
/// confirms, and no answer (a closed stdin) is no.
fn confirmed() -> anyhow::Result<bool> {
    eprint!("publish this refund? [y/N] ");
    std::io::stderr().flush().ok();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// A refusal as the command line answers it: a request that cannot pass as asked is a
/// usage error (exit 2); one the attempt refuses, one line (exit 1).
fn refusal(err: RefundError) -> anyhow::Error {
    match err {
        RefundError::Invalid(why) => UsageError(why).into(),
        err @ (RefundError::NotFound(_)
        | RefundError::NotRefundable(_)
        | RefundError::TooMuch(_)) => anyhow::anyhow!("{err}"),
        err => anyhow::Error::new(err),
    }
}

/// What `refunds create` shows before it asks.
pub fn render_preview(preview: &RefundPreview) -> String {
    preview.lines().iter().fold(String::new(), |mut out, line| {
        out.push_str(&format::printable(line));
        out.push('\n');
        out
    })
}

/// The aligned table of `refunds list`.
pub fn render_list(views: &[RefundView], now: OffsetDateTime) -> String {
    if views.is_empty() {
        return "no refunds\n".to_owned();
    }
    let mut t = Table::new(&[
        "REFUND",
        "STATUS",
        "PAYMENT ATTEMPT",
        "AMOUNT",
        "SENT/LOOKED UP",
        "GATEWAY REFUND",
        "CREATED",
        "WHY / NEXT",
    ]);
    for v in views {
        let r = &v.refund;
        let why = refunds::why(r)
            .map(|why| format::cell(why, 60))
            .unwrap_or_else(|| format::cell(&v.next_action.action, 60));
        t.push(vec![
            r.refund_id.to_string(),
            r.status.to_string(),
            r.payment_attempt_id.to_string(),
            refunds::amount_text(r),
            format!("{}/{}", r.tries, r.lookups),
            format::or_dash(r.gateway_refund_id.as_deref()),
            format::at_relative(r.created_at, now),
            why,
        ]);
    }
    format!(
        "{}{} refund{} (newest first)\n",
        t.render(),
        views.len(),
        if views.len() == 1 { "" } else { "s" }
    )
}

/// The human form of `refunds show`: the refund's facts, then its history as one timeline.
pub fn render_show(detail: &RefundDetail, now: OffsetDateTime) -> String {
    format!(
        "{}\n{}",
        super::table::facts(refunds::fact_rows(detail, now)),
        super::table::timeline(refunds::timeline_rows(detail))
    )
}
