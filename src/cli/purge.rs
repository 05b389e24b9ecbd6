//! `onecharge purge [--dry-run]`: one purge of the dedupe rows and the history, by the
//! role's own functions (`crate::purge`), with what it did in two lines.

use anyhow::Context as _;
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::config::Settings;
use crate::purge::{purge_once, retention};

/// `onecharge purge [--dry-run]`
#[derive(Debug, Clone, Args)]
pub struct PurgeArgs {
    /// Count what would be deleted; delete nothing
    #[arg(long)]
    pub dry_run: bool,
}

/// `onecharge purge [--dry-run]`: the dedupe rows, then the history. The history is
/// retained even when the dedupe purge is refused (the refusal is still the exit status).
pub async fn run(settings: &Settings, args: PurgeArgs) -> anyhow::Result<()> {
    let store = super::connect_store(settings).await?;
    let broker = Broker::connect(settings).await?;
    let now = store
        .now()
        .await
        .context("reading the database's clock for the cut-offs")?;
    let dedupe = purge_once(
        &store,
        &broker,
        &settings.purge,
        args.dry_run,
        now,
        &CancellationToken::new(),
    )
    .await;
    if let Ok(report) = &dedupe {
        println!(
            "{}",
            report.summary(settings.purge.dedupe_retention, settings.purge.batch_size)
        );
    }
    let history =
        retention::retain_history(&store, settings.purge.history_retention, args.dry_run, now)
            .await?;
    println!("{}", history.summary(settings.purge.history_retention));
    dedupe.map(|_| ())
}
