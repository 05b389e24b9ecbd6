//! The `purge` role of `serve` (and the work of `onecharge purge`): keeps
//! `processed_messages` bounded, and, through [`retention`], the history tables.
//!
//! A dedupe row may only go once the command stream can no longer hand its message to
//! onecharge again. The stream keeps a message for its `max_age`, counted from publication,
//! and a row is recorded after its message was published; so a retention at least as long
//! as the stream's `max_age` means every message the stream still holds still has its row.
//! A shorter retention is refused with the reason. A stream without `max_age` (0: kept until
//! size limits push it out) gives no such bound, so purging is refused there too: the
//! operator sets a `max_age` on the stream first. Purging is never required for safety —
//! the attempts table (the business key) stops a second charge even without the dedupe
//! row — it only keeps redeliveries cheap and their classification exact.

use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

pub mod retention;

use crate::broker::Broker;
use crate::config::{PurgeSettings, Settings};
use crate::format;
use crate::store::{self, Store};

/// Purging was refused because it could let a message be processed twice. Its text is the
/// one line an operator reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("purge refused: {0}")]
pub struct PurgeRefused(pub String);

/// What one purge did (or, dry, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PurgeReport {
    pub dry_run: bool,
    /// Rows recorded before this go.
    #[serde(with = "time::serde::rfc3339")]
    pub cutoff: OffsetDateTime,
    /// Rows older than the retention when the purge started.
    pub expired: u64,
    /// Rows deleted (0 for a dry run).
    pub deleted: u64,
    /// Delete statements run.
    pub batches: u32,
    /// Rows left.
    pub kept: u64,
    /// False when shutdown interrupted the purge between two batches.
    pub complete: bool,
}

/// Refuses a retention that is shorter than the stream keeps messages, or any retention when
/// the stream keeps messages without an age limit.
pub fn check_retention(
    retention: Duration,
    stream: &str,
    stream_max_age: Duration,
) -> Result<(), PurgeRefused> {
    if stream_max_age.is_zero() {
        return Err(PurgeRefused(format!(
            "stream {stream} keeps messages without an age limit (max_age 0), so a message could come back after any dedupe retention; set a max_age on the stream no longer than purge.dedupe_retention ({}), e.g. `nats stream edit {stream} --max-age {}`",
            format::setting(retention),
            format::setting(retention),
        )));
    }
    if retention < stream_max_age {
        return Err(PurgeRefused(format!(
            "purge.dedupe_retention ({}) is shorter than the max_age ({}) of stream {stream}: a message the stream still holds could be redelivered or replayed after its dedupe row is gone and be processed again as new; raise purge.dedupe_retention (ONECHARGE_PURGE__DEDUPE_RETENTION) to at least {} or lower the stream's max_age",
            format::setting(retention),
            format::setting(stream_max_age),
            format::setting(stream_max_age),
        )));
    }
    Ok(())
}

/// The command stream's `max_age`, read from JetStream.
pub async fn command_stream_max_age(broker: &Broker) -> anyhow::Result<Duration> {
    let info = broker.stream_info(&broker.names.commands_stream()).await?;
    Ok(info.config.max_age)
}

/// One purge: checks the retention against the command stream, then deletes dedupe rows
/// recorded before `now - retention` in batches of `settings.batch_size` until none is left
/// or `shutdown` fires. A refusal is an error that downcasts to [`PurgeRefused`].
pub async fn purge_once(
    store: &Store,
    broker: &Broker,
    settings: &PurgeSettings,
    dry_run: bool,
    now: OffsetDateTime,
    shutdown: &CancellationToken,
) -> anyhow::Result<PurgeReport> {
    let max_age = command_stream_max_age(broker).await?;
    check_retention(
        settings.dedupe_retention,
        &broker.names.commands_stream(),
        max_age,
    )?;
    let cutoff = now - settings.dedupe_retention;
    let expired = store::purge::count_expired_dedupe_rows(store, cutoff)
        .await
        .context("counting expired dedupe rows")? as u64;
    let mut report = PurgeReport {
        dry_run,
        cutoff,
        expired,
        deleted: 0,
        batches: 0,
        kept: 0,
        complete: true,
    };
    if !dry_run {
        loop {
            if shutdown.is_cancelled() {
                report.complete = false;
                break;
            }
            let deleted =
                store::purge::delete_expired_dedupe_rows(store, cutoff, settings.batch_size)
                    .await
                    .context("deleting expired dedupe rows")?;
            report.batches += 1;
            report.deleted += deleted;
            if deleted < settings.batch_size as u64 {
                break;
            }
        }
        metrics::counter!("onecharge_dedupe_rows_purged_total").increment(report.deleted);
    }
    let total = store::purge::count_dedupe_rows(store)
        .await
        .context("counting dedupe rows")? as u64;
    report.kept = if dry_run {
        total.saturating_sub(expired)
    } else {
        total
    };
    Ok(report)
}

impl PurgeReport {
    /// One line for the operator.
    pub fn summary(&self, retention: Duration, batch_size: usize) -> String {
        let cutoff = format::at(self.cutoff);
        let retention = format::setting(retention);
        if self.dry_run {
            format!(
                "dry run: {} dedupe rows recorded before {cutoff} (older than purge.dedupe_retention {retention}) would be deleted in batches of {batch_size}; {} would be kept; nothing was deleted",
                self.expired, self.kept
            )
        } else {
            format!(
                "purged {} dedupe rows recorded before {cutoff} (older than purge.dedupe_retention {retention}) in {} batch{} of at most {batch_size}; {} kept{}",
                self.deleted,
                self.batches,
                if self.batches == 1 { "" } else { "es" },
                self.kept,
                if self.complete { "" } else { " (interrupted by shutdown)" }
            )
        }
    }
}

/// The `purge` role of `serve`: one purge every `purge.interval`. A refusal or a failure is
/// logged and tried again next interval; it never stops the other roles.
pub struct Purger {
    store: Store,
    broker: Broker,
    settings: PurgeSettings,
    /// How long a webhook event's id is kept: `webhook_tolerance` plus
    /// [`WEBHOOK_ID_MARGIN`]. Past the tolerance a captured delivery is refused as stale
    /// anyway, so its id protects nothing.
    webhook_ids_kept: Duration,
}

/// Kept past `webhook_tolerance` for clocks and for deliveries that were in flight.
pub const WEBHOOK_ID_MARGIN: Duration = Duration::from_secs(3600);

impl Purger {
    pub fn new(store: Store, broker: Broker, settings: &Settings) -> Self {
        Self {
            store,
            broker,
            settings: settings.purge.clone(),
            webhook_ids_kept: settings.webhook_tolerance + WEBHOOK_ID_MARGIN,
        }
    }

    /// One purge now, by the database's clock (tests, tools).
    pub async fn run_once(&self, shutdown: &CancellationToken) -> anyhow::Result<PurgeReport> {
        let now = self
            .store
            .now()
            .await
            .context("reading the database's clock for the cut-off")?;
        purge_once(
            &self.store,
            &self.broker,
            &self.settings,
            false,
            now,
            shutdown,
        )
        .await
    }

    /// One history retention pass at `now` (tests, tools).
    pub async fn retain_history_once(
        &self,
        now: OffsetDateTime,
    ) -> anyhow::Result<retention::HistoryReport> {
        retention::retain_history(&self.store, self.settings.history_retention, false, now).await
    }

    /// Purges at start and then every interval until `shutdown` fires.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let mut ticker = tokio::time::interval(self.settings.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tracing::info!(
            interval = %format::setting(self.settings.interval),
            retention = %format::setting(self.settings.dedupe_retention),
            history_retention = %format::setting(self.settings.history_retention),
            "purge started"
        );
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticker.tick() => {}
            }
            match self.run_once(&shutdown).await {
                Ok(report) => tracing::info!(
                    deleted = report.deleted,
                    batches = report.batches,
                    kept = report.kept,
                    "dedupe rows purged"
                ),
                Err(err) if err.is::<PurgeRefused>() => {
                    tracing::warn!(reason = %err, "dedupe purge refused; nothing deleted")
                }
                Err(err) => {
                    crate::store::notice_failure(&err);
                    tracing::error!(error = %format!("{err:#}"), "dedupe purge failed; trying again next interval")
                }
            }
            if shutdown.is_cancelled() {
                break;
            }
            match crate::store::findings::webhooks::purge_events(&self.store, self.webhook_ids_kept)
                .await
            {
                Ok(0) => {}
                Ok(deleted) => tracing::info!(deleted, "processed webhook event ids purged"),
                Err(err) => {
                    crate::store::notice_failure(&anyhow::Error::new(err));
                    tracing::error!(
                        "purging processed webhook event ids failed; trying again next interval"
                    )
                }
            }
            let retained =
                match self.store.now().await {
                    Ok(now) => self.retain_history_once(now).await,
                    Err(err) => Err(anyhow::Error::new(err)
                        .context("reading the database's clock for the cut-off")),
                };
            match retained {
                Ok(report) => tracing::info!(
                    partitions_dropped =
                        report.tables.iter().map(|t| t.dropped.len()).sum::<usize>(),
                    partitions_created =
                        report.tables.iter().map(|t| t.created.len()).sum::<usize>(),
                    "history retained"
                ),
                Err(err) => {
                    crate::store::notice_failure(&err);
                    tracing::error!(error = %format!("{err:#}"), "history retention failed; trying again next interval")
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn a_retention_shorter_than_the_stream_max_age_is_refused_with_the_reason() {
        let err = check_retention(DAY, "PAYMENTS_COMMANDS", 7 * DAY).unwrap_err();
        assert!(
            err.to_string().contains("shorter than the max_age (7days)"),
            "{err}"
        );
        assert!(check_retention(7 * DAY, "PAYMENTS_COMMANDS", 7 * DAY).is_ok());
        assert!(check_retention(14 * DAY, "PAYMENTS_COMMANDS", 7 * DAY).is_ok());
    }

    #[test]
    fn a_stream_without_an_age_limit_refuses_every_retention() {
        let err = check_retention(365 * DAY, "PAYMENTS_COMMANDS", Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("without an age limit"), "{err}");
    }
}
