//! `attempts stats` and `GET /api/stats`: the whole picture in one look — attempts per
//! state, how long the oldest unsettled attempt has waited, dead letters and the outbox
//! backlog. The database figures are the ones `/metrics` reports (`store::metrics`).

use std::collections::BTreeMap;

use anyhow::Context as _;
use serde::Serialize;
use time::OffsetDateTime;

use crate::broker::Broker;
use crate::domain::AttemptStatus;
use crate::store::Store;

/// Contract §6: `{"by_status":{"pending":N,…},"oldest_unsettled_seconds":S,
/// "dead_letters":N,"outbox_backlog":N}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
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
}

/// Reads the figures now: two round trips to the database, one to JetStream.
pub async fn stats(store: &Store, broker: &Broker, now: OffsetDateTime) -> anyhow::Result<Stats> {
    let gauges = crate::store::metrics::database_gauges(store)
        .await
        .context("reading attempt counts")?;
    let mut by_status: BTreeMap<&'static str, i64> = AttemptStatus::ALL
        .iter()
        .map(|status| (status.as_str(), 0))
        .collect();
    for (status, count) in gauges.attempts_by_status {
        by_status.insert(status.as_str(), count);
    }
    let oldest_unsettled = gauges.oldest_non_final.iter().map(|(_, at)| *at).min();
    Ok(Stats {
        by_status,
        oldest_unsettled_seconds: oldest_unsettled
            .map(|at| (now - at).whole_seconds().max(0))
            .unwrap_or(0),
        dead_letters: dead_letter_count(broker).await?,
        outbox_backlog: gauges.outbox_pending,
    })
}

async fn dead_letter_count(broker: &Broker) -> anyhow::Result<u64> {
    let info = super::stream_info(broker, &broker.names.dlq_stream()).await?;
    Ok(info.state.messages)
}
