//! `onecharge attempts …`: list, stuck, stats, show, resolve, recheck and the bulk actions
//! — their flags, their runners, and the tables, timelines and lines they print.
//!
//! Over 600 lines only with its tests: one subcommand family, whose flags, runners and
//! printers are read together when a command's output changes.

use std::time::Duration;

use clap::{Args, Subcommand};
use time::OffsetDateTime;

use super::table::Table;
use super::{operator_actor, print_as, print_json};
use crate::config::{Settings, UsageError};
use crate::domain::{AttemptStatus, PaymentAttemptId};
use crate::format;
use crate::operator::attempts::{
    self, AttemptCursor, AttemptDetail, AttemptPage, AttemptView, StuckFilter,
};
use crate::operator::bulk::{self, BulkAction, BulkOutcome, PREVIEW_IDS};
use crate::operator::recheck::{self, RecheckError};
use crate::operator::resolve::{self, ResolveAs, ResolveError, ResolveRequest};
use crate::operator::stats::{self, Stats};
use crate::operator::{parse_limit, RetryWindow, Via};
use crate::store::reads::attempts::CallRecord;
use crate::store::Store;

/// `onecharge attempts …`
#[derive(Debug, Subcommand)]
pub enum AttemptsCommand {
    /// Attempts, newest first
    List {
        #[command(flatten)]
        filter: bulk::BulkFilter,
        /// The next page: the cursor the previous page printed (on stderr)
        #[arg(long, value_name = "CURSOR", value_parser = parse_cursor)]
        before: Option<AttemptCursor>,
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
        after: Option<AttemptCursor>,
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
    /// Cancel a pending attempt so that it is never charged: never sent, it becomes expired;
    /// holding a Stripe PaymentIntent, declined once the gateway has cancelled that. Refused,
    /// with why, once an executor has claimed it or when nothing proves it cannot charge
    Cancel {
        /// The payment_attempt_id
        id: PaymentAttemptId,
        /// Why it must not be charged: recorded on the transition, the event and the audit trail
        #[arg(long)]
        reason: String,
        /// One JSON document instead of a line
        #[arg(long)]
        json: bool,
    },
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

/// The next page's cursor, as `--before`/`--after` take it.
fn parse_cursor(text: &str) -> Result<AttemptCursor, String> {
    text.parse()
}

/// What every `attempts` subcommand starts from: the database, the retry window the
/// executor applies, and the time things are judged at.
struct Context<'a> {
    settings: &'a Settings,
    store: Store,
    window: RetryWindow,
    now: OffsetDateTime,
}

/// `onecharge attempts …`: runs one subcommand and prints its result.
pub async fn run(settings: &Settings, command: AttemptsCommand) -> anyhow::Result<()> {
    let cx = Context {
        settings,
        store: super::connect_store(settings).await?,
        window: RetryWindow::from_settings(settings),
        now: OffsetDateTime::now_utc(),
    };
    match command {
        AttemptsCommand::List {
            filter,
            before,
            limit,
            json,
        } => list(&cx, filter, before, limit, json).await,
        AttemptsCommand::Stuck {
            older_than,
            after,
            limit,
            json,
        } => stuck(&cx, older_than, after, limit, json).await,
        AttemptsCommand::Stats { json } => stats(&cx, json).await,
        AttemptsCommand::Show { id, json } => show(&cx, id, json).await,
        AttemptsCommand::Resolve(args) => resolve(&cx, args).await,
        AttemptsCommand::Cancel { id, reason, json } => cancel(&cx, id, &reason, json).await,
        AttemptsCommand::Recheck { id, reason, json } => recheck(cx, id, reason, json).await,
        AttemptsCommand::BulkRetry(args) => bulk(cx, BulkAction::Retry, args).await,
        AttemptsCommand::BulkRecheck(args) => bulk(cx, BulkAction::Recheck, args).await,
    }
}

async fn list(
    cx: &Context<'_>,
    filter: bulk::BulkFilter,
    before: Option<AttemptCursor>,
    limit: usize,
    json: bool,
) -> anyhow::Result<()> {
    let filter = filter.listing(before);
    let page = attempts::page(&cx.store, &filter, limit, cx.now, &cx.window).await?;
    print_as(json, &page.items, |views| render_list(views, cx.now))?;
    // The JSON document stays the array of contract §5; the cursor goes to stderr.
    if let Some(next) = page.next {
        eprintln!("next page: --before {next}");
    }
    Ok(())
}

async fn stuck(
    cx: &Context<'_>,
    older_than: Duration,
    after: Option<AttemptCursor>,
    limit: usize,
    json: bool,
) -> anyhow::Result<()> {
    let filter = StuckFilter {
        older_than,
        status: None,
        after,
    };
    let page = attempts::stuck(&cx.store, &filter, limit, cx.now, &cx.window).await?;
    if json {
        print_json(&page.items)?;
    } else {
        print!("{}", render_stuck(&page, &filter, cx.now));
    }
    // As `attempts list`: the JSON document stays the array of contract §5.
    if let Some(next) = page.next {
        eprintln!("next page: --after {next}");
    }
    Ok(())
}

async fn stats(cx: &Context<'_>, json: bool) -> anyhow::Result<()> {
    let broker = crate::broker::Broker::connect(cx.settings).await?;
    let stats = stats::stats(&cx.store, &broker, cx.now).await?;
    print_as(json, &stats, render_stats)
}

async fn show(cx: &Context<'_>, id: PaymentAttemptId, json: bool) -> anyhow::Result<()> {
    let detail = attempts::show(&cx.store, id, cx.now, &cx.window)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no payment attempt {id}"))?;
    print_as(json, &detail, |detail| render_show(detail, cx.now))
}

async fn resolve(cx: &Context<'_>, args: ResolveArgs) -> anyhow::Result<()> {
    let request = ResolveRequest {
        as_: args.as_,
        reason: args.reason,
        gateway_charge_id: args.gateway_charge_id,
        decline_code: args.decline_code,
    };
    // Declining may need to cancel a PaymentIntent first (a client needs the gateway
    // settings; without them a decline that needs one is refused).
    let gateway = crate::gateway::GatewayClient::from_settings(cx.settings).ok();
    let resolved = resolve::resolve(
        &cx.store,
        gateway.as_ref(),
        args.id,
        &request,
        &operator_actor(),
        Via::Cli,
        &cx.window,
    )
    .await;
    match resolved {
        Ok(resolved) => {
            println!("{}", resolved.summary());
            Ok(())
        }
        // A request that can never succeed is a usage error (exit 2); a refusal because of
        // the attempt's state is a runtime refusal (exit 1), one line.
        Err(ResolveError::Invalid(why)) => Err(UsageError(why).into()),
        Err(err @ ResolveError::Store(_)) => {
            Err(anyhow::Error::new(err).context("resolving the attempt"))
        }
        Err(err) => Err(anyhow::anyhow!("{err}")),
    }
}

async fn cancel(
    cx: &Context<'_>,
    id: PaymentAttemptId,
    reason: &str,
    json: bool,
) -> anyhow::Result<()> {
    // A pending attempt holding a Stripe PaymentIntent is cancelled at the gateway first (a
    // client needs the gateway settings; without them such a cancel is refused).
    let gateway = crate::gateway::GatewayClient::from_settings(cx.settings).ok();
    let cancelled = crate::operator::cancel::cancel(
        &cx.store,
        gateway.as_ref(),
        id,
        reason,
        &operator_actor(),
        Via::Cli,
    )
    .await;
    match cancelled {
        Ok(cancelled) => print_as(json, &cancelled, |c| format!("{}\n", c.summary())),
        Err(ResolveError::Invalid(why)) => Err(UsageError(why).into()),
        Err(err @ ResolveError::Store(_)) => {
            Err(anyhow::Error::new(err).context("cancelling the attempt"))
        }
        Err(err) => Err(anyhow::anyhow!("{err}")),
    }
}

async fn recheck(
    cx: Context<'_>,
    id: PaymentAttemptId,
    reason: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let reconciler = cli_reconciler(cx.settings, cx.store)?;
    let rechecked = recheck::recheck(
        &reconciler,
        id,
        &operator_actor(),
        Via::Cli,
        reason.as_deref(),
    )
    .await;
    match rechecked {
        Ok(report) => print_as(json, &report, recheck::render),
        // Asking about an attempt a lookup cannot settle is the caller's mistake.
        Err(RecheckError::Refused(why) | RecheckError::Invalid(why)) => Err(UsageError(why).into()),
        Err(err) => Err(anyhow::anyhow!("{err}")),
    }
}

/// The reconciler a recheck from the command line uses: built like `serve` builds it, so
/// it needs the gateway settings (`gateway_url`, `gateway_api_key`).
fn cli_reconciler(
    settings: &Settings,
    store: Store,
) -> anyhow::Result<crate::reconciler::Reconciler> {
    let (gateway, health) = super::gateway(settings)?;
    Ok(crate::reconciler::Reconciler::new(
        store, gateway, health, settings,
    ))
}

async fn bulk(cx: Context<'_>, action: BulkAction, args: BulkArgs) -> anyhow::Result<()> {
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
        BulkAction::Recheck if !args.dry_run => {
            Some(cli_reconciler(cx.settings, cx.store.clone())?)
        }
        _ => None,
    };
    let outcome = bulk::bulk(
        &cx.store,
        reconciler.as_ref(),
        &request,
        &operator_actor(),
        Via::Cli,
        &cx.window,
    )
    .await;
    match outcome {
        Ok(outcome) => print_as(args.json, &outcome, render_bulk),
        Err(err @ (bulk::BulkError::Invalid(_) | bulk::BulkError::TooMany { .. })) => {
            Err(UsageError(err.to_string()).into())
        }
        Err(err) => Err(anyhow::anyhow!("{err}")),
    }
}

/// `charge 503 ambiguous (4m ago)`, or `-` when the gateway was never called.
fn last_response(call: Option<&CallRecord>, now: OffsetDateTime) -> String {
    match call {
        None => "-".to_owned(),
        Some(call) => format!(
            "{} {} {} ({})",
            call.operation,
            call.http_status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "no-answer".to_owned()),
            call.outcome,
            format::relative(call.finished_at, now)
        ),
    }
}

/// The aligned table of `attempts list`.
pub fn render_list(views: &[AttemptView], now: OffsetDateTime) -> String {
    if views.is_empty() {
        return "no attempts\n".to_owned();
    }
    let mut t = Table::new(&[
        "PAYMENT ATTEMPT",
        "STATUS",
        "ORDER",
        "AMOUNT",
        "TRIES",
        "GATEWAY CHARGE",
        "CREATED",
        "UPDATED",
    ]);
    for v in views {
        let a = &v.attempt;
        t.push(vec![
            a.payment_attempt_id.to_string(),
            a.status.to_string(),
            format::cell(&a.order_id, 24),
            a.money.to_string(),
            a.tries.to_string(),
            format::or_dash(a.gateway_charge_id.as_deref()),
            format::at_relative(a.created_at, now),
            format::relative(a.updated_at, now),
        ]);
    }
    format!(
        "{}{} attempt{} (newest first)\n",
        t.render(),
        views.len(),
        if views.len() == 1 { "" } else { "s" }
    )
}

/// The table of `attempts stuck`, with a line saying what was looked for. A page of a paged
/// list (`filter.after` set, or more to follow) says that its counts are the page's, not
/// the whole list's.
pub fn render_stuck(page: &AttemptPage, filter: &StuckFilter, now: OffsetDateTime) -> String {
    let views = &page.items;
    let threshold = format::setting(filter.older_than);
    if views.is_empty() {
        return match filter.after {
            None => format!(
                "nothing stuck: no unsettled attempt older than {threshold}, none in needs_review\n"
            ),
            Some(_) => {
                "nothing stuck after this cursor: the previous page was the last\n".to_owned()
            }
        };
    }
    let mut t = Table::new(&[
        "PAYMENT ATTEMPT",
        "STATUS",
        "AGE",
        "TRIES",
        "LAST GATEWAY RESPONSE",
        "REVIEW REASON / LAST ERROR",
        "NEXT ACTION",
    ]);
    for v in views {
        let a = &v.attempt;
        let why = a.review_reason.as_deref().or(a.last_error.as_deref());
        t.push(vec![
            a.payment_attempt_id.to_string(),
            a.status.to_string(),
            format::short(now - a.created_at),
            a.tries.to_string(),
            last_response(a.last_gateway_call.as_ref(), now),
            format::cell(why.unwrap_or("-"), 60),
            if a.status == AttemptStatus::NeedsReview {
                "operator must resolve (attempts resolve)".to_owned()
            } else {
                attempts::next_action_text(&v.next_action, now)
            },
        ]);
    }
    let review = views
        .iter()
        .filter(|v| v.attempt.status == AttemptStatus::NeedsReview)
        .count();
    let paged = filter.after.is_some() || page.next.is_some();
    format!(
        "{} attempt{}{} need{} attention: {review} in needs_review, {} unsettled for more than {threshold}; oldest first{}\n{}",
        views.len(),
        if views.len() == 1 { "" } else { "s" },
        if paged { " on this page" } else { "" },
        if views.len() == 1 { "s" } else { "" },
        views.len() - review,
        if page.next.is_some() { "; more on the next page" } else { "" },
        t.render()
    )
}

/// The human form of `attempts show`: the attempt's facts, then its history as one timeline.
pub fn render_show(detail: &AttemptDetail, now: OffsetDateTime) -> String {
    format!(
        "{}\n{}",
        super::table::facts(attempts::fact_rows(detail, now)),
        super::table::timeline(attempts::timeline_rows(detail))
    )
}

/// The human form of `attempts stats`: one row per state in the order of contract §4, then
/// the three figures that say whether anything waits.
pub fn render_stats(stats: &Stats) -> String {
    let mut t = Table::new(&["STATUS", "ATTEMPTS"]);
    for status in AttemptStatus::ALL {
        let count = stats.by_status.get(status.as_str()).copied().unwrap_or(0);
        t.push(vec![status.to_string(), count.to_string()]);
    }
    let oldest = match stats.oldest_unsettled_seconds {
        0 if stats.by_status.iter().all(|(status, count)| {
            *count == 0
                || status
                    .parse::<AttemptStatus>()
                    .is_ok_and(AttemptStatus::is_final)
        }) =>
        {
            "none: every attempt is final".to_owned()
        }
        seconds => format::short(time::Duration::seconds(seconds)),
    };
    let mut out = format!(
        "{}oldest unsettled attempt: {oldest}\ndead letters: {}\noutbox backlog: {} event{}\n",
        t.render(),
        stats.dead_letters,
        stats.outbox_backlog,
        if stats.outbox_backlog == 1 { "" } else { "s" }
    );
    for (window, figures) in [
        ("last hour", &stats.outcomes_last_hour),
        ("last 24 h", &stats.outcomes_last_24h),
    ] {
        out.push_str(&format!(
            "success rate, {window}: {}\n",
            figures.success_rate_text()
        ));
        if !figures.top_decline_codes.is_empty() {
            let codes: Vec<String> = figures
                .top_decline_codes
                .iter()
                .map(|c| format!("{} {}", c.code_text(), c.count))
                .collect();
            out.push_str(&format!(
                "top decline codes, {window}: {}\n",
                codes.join(", ")
            ));
        }
    }
    out
}

/// What `attempts bulk-retry | bulk-recheck` prints.
pub fn render_bulk(outcome: &BulkOutcome) -> String {
    let action = match outcome.action {
        BulkAction::Retry => "retry",
        BulkAction::Recheck => "recheck",
    };
    if outcome.preview {
        let mut out = format!(
            "dry run: {} attempt{} match; nothing was done\n",
            outcome.matched,
            if outcome.matched == 1 { "" } else { "s" }
        );
        for id in outcome.ids.iter().take(PREVIEW_IDS) {
            out.push_str(&format!("  {id}\n"));
        }
        if outcome.matched > PREVIEW_IDS {
            out.push_str(&format!("  … and {} more\n", outcome.matched - PREVIEW_IDS));
        }
        out.push_str(&format!(
            "to act: the same command without --dry-run (add --max {} to refuse a larger set)\n",
            outcome.matched
        ));
        return out;
    }
    let mut out = String::new();
    for item in &outcome.results {
        out.push_str(&format!(
            "{} {}: {}\n",
            item.payment_attempt_id, item.outcome, item.detail
        ));
    }
    let count = |name: &str| outcome.results.iter().filter(|i| i.outcome == name).count();
    out.push_str(&format!(
        "bulk {action}: {} attempt{} matched; {} retried, {} settled, {} unchanged, {} refused, {} failed (audit row {})\n",
        outcome.matched,
        if outcome.matched == 1 { "" } else { "s" },
        count("retried"),
        count("settled"),
        count("unchanged"),
        count("refused") + count("fenced"),
        count("failed"),
        outcome.audit_id.map(|id| id.to_string()).unwrap_or_else(|| "-".into()),
    ));
    out
}

#[cfg(test)]
mod tests {
    use crate::domain::GatewayChargeId;
    use time::macros::datetime;

    use super::*;
    use crate::operator::attempts::tests::attempt;
    use crate::store::reads::attempts::{OutboxEvent, Transition};

    #[test]
    fn show_prints_the_facts_then_one_timeline_of_transitions_calls_and_events() {
        let t = datetime!(2026-11-29 10:00:00 UTC);
        let mut a = attempt(AttemptStatus::Unknown);
        a.gateway_charge_id = Some(GatewayChargeId::from_gateway("ch_1"));
        a.decline_code = Some("do_not_honor".into());
        a.last_error = Some("HTTP 503".into());
        a.lease_owner = Some("reconciler:host-1".into());
        a.lease_expires_at = Some(t + time::Duration::minutes(2));
        a.correlation_id = Some("corr-7".into());
        let window = RetryWindow::default();
        let now = t + time::Duration::minutes(1);
        let detail = AttemptDetail {
            view: attempts::view(a, now, &window),
            transitions: vec![Transition {
                id: 1,
                from_status: None,
                to_status: "pending".into(),
                cause: "command_accepted".into(),
                actor: "intake:c".into(),
                detail: Some("message m-1 (stream sequence 1)".into()),
                at: t,
            }],
            gateway_calls: vec![CallRecord {
                id: 1,
                operation: "charge".into(),
                idempotency_key: crate::domain::IdempotencyKey::for_attempt(
                    uuid::Uuid::nil().into(),
                ),
                try_number: 1,
                lease_token: Some(1.into()),
                started_at: t,
                finished_at: t + time::Duration::milliseconds(250),
                duration_ms: 250,
                http_status: Some(503),
                outcome: "ambiguous".into(),
                gateway_charge_id: None,
                error: Some("server\u{1b}[2J error".into()),
            }],
            events: vec![OutboxEvent {
                event_id: uuid::Uuid::nil(),
                status: "succeeded".into(),
                subject: "payments.events.payment-succeeded.v1".into(),
                created_at: t + time::Duration::seconds(1),
                published_at: None,
                publish_attempts: 2,
                last_error: Some("timeout".into()),
                payload: serde_json::json!({}),
            }],
            refunds: vec![],
        };
        let shown = render_show(&detail, now);
        assert_eq!(shown, EXPECTED_SHOW);
    }

    /// `attempts show` as it printed before `render_show` was split into named steps.
    const EXPECTED_SHOW: &str = concat!(
        "payment attempt   00000000-0000-0000-0000-000000000000\n",
        "status            unknown\n",
        "next              reconciler looks the charge up at the gateway (check 2) at 2026-11-29 10:05:00Z (in 4m00s)\n",
        "last error        HTTP 503\n",
        "amount            19.99 EUR (1999 minor units)\n",
        "order / customer  ord_1 / cus_1\n",
        "payment method    pm_card_visa\n",
        "idempotency key   onecharge-00000000-0000-0000-0000-000000000000\n",
        "gateway charge    ch_1 (decline code do_not_honor)\n",
        "tries             2 charge tries, 1 reconciler checks\n",
        "created           2026-11-29 10:00:00Z (1m00s ago)\n",
        "updated           2026-11-29 10:00:00Z (1m00s ago)\n",
        "first sent        2026-11-29 10:00:00Z (1m00s ago)\n",
        "retry window      open until 2026-11-29 11:00:00Z (in 59m00s)\n",
        "lease             reconciler:host-1 until 2026-11-29 10:02:00Z (in 1m00s)\n",
        "command           message m-1, correlation corr-7\n",
        "\n",
        "TIME (UTC)                KIND     WHAT                                  DETAIL\n",
        "2026-11-29 10:00:00.000Z  state    new -> pending (command_accepted)     by intake:c: message m-1 (stream sequence 1)\n",
        "2026-11-29 10:00:00.000Z  gateway  charge try 1 -> HTTP 503 ambiguous    250 ms, server\\u{1b}[2J error\n",
        "2026-11-29 10:00:01.000Z  event    payments.events.payment-succeeded.v1  00000000-0000-0000-0000-000000000000 NOT YET PUBLISHED (2 tries, last error: timeout)\n",
    );
}
