//! `attempts stats` and `GET /api/stats`: the whole picture in one look — attempts per
//! state, how long the oldest unsettled attempt has waited, dead letters and the outbox
//! backlog, and how the attempts of the last hour and the last 24 hours ended (success rate,
//! top decline codes: decision 149). The database figures are the ones `/metrics` reports (`store::reads::gauges`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;
use time::OffsetDateTime;

use crate::broker::Broker;
use crate::domain::AttemptStatus;
use crate::store::reads::charts::{outcome_figures, OutcomeFigures};
use crate::store::Store;

/// Contract §6: `{"by_status":{"pending":N,…},"oldest_unsettled_seconds":S,
/// "dead_letters":N,"outbox_backlog":N}`.
/// `outcomes_last_hour` and `outcomes_last_24h` were added after the contract's first four.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Stats {
    /// Attempts per state; every state is present, 0 when it has none.
    pub by_status: BTreeMap<&'static str, i64>,
    /// Seconds since the oldest attempt that is not final (`pending`, `in_flight`,
    /// `unknown`, `needs_review`) was recorded; 0 when every attempt is final.
    pub oldest_unsettled_seconds: i64,
    /// Messages in the dead-letter stream.
    pub dead_letters: u64,
    /// Events written but not yet acknowledged by JetStream.
    pub outbox_backlog: i64,
    /// How the attempts that reached a final state in the last hour ended.
    pub outcomes_last_hour: OutcomeFigures,
    /// The same over the last 24 hours.
    pub outcomes_last_24h: OutcomeFigures,
}

/// The windows of [`Stats`]'s outcome figures: the last hour, the last 24 hours.
const OUTCOME_WINDOWS: [Duration; 2] = [Duration::from_secs(3600), Duration::from_secs(86400)];

/// Reads the figures now: seven round trips to the database, one to JetStream.
pub async fn stats(store: &Store, broker: &Broker, now: OffsetDateTime) -> anyhow::Result<Stats> {
    let gauges = crate::store::reads::gauges::database_gauges(store)
        .await
        .context("reading attempt counts")?;
    let mut by_status: BTreeMap<&'static str, i64> = AttemptStatus::ALL
        .iter()
        .map(|status| (status.as_str(), 0))
        .collect();
    for (status, count) in gauges.attempts_by_status {
        by_status.insert(status.as_str(), count);
    }
    let [outcomes_last_hour, outcomes_last_24h]: [OutcomeFigures; 2] =
        outcome_figures(store, &OUTCOME_WINDOWS)
            .await
            .context("reading the outcomes of the last hours")?
            .try_into()
            .expect("one figure per window");
    let oldest_unsettled = gauges.oldest_non_final.iter().map(|(_, at)| *at).min();
    Ok(Stats {
        by_status,
        oldest_unsettled_seconds: oldest_unsettled
            .map(|at| (now - at).whole_seconds().max(0))
            .unwrap_or(0),
        dead_letters: broker.stream_messages(&broker.names.dlq_stream()).await?,
        outbox_backlog: gauges.outbox_pending,
        outcomes_last_hour,
        outcomes_last_24h,
    })
}
