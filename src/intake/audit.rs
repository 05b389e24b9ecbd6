//! The stream audit (docs/operations.md §16): a command the broker stored and acknowledged
//! to its producer but never delivered to intake — nats-server 2.9's R3 replicas diverging
//! (docs/soak.md) — or whose record an asynchronous PostgreSQL failover lost (decision 55),
//! is invisible to intake. The audit makes it visible: it walks the command stream behind
//! intake's ack floor, a bounded number of messages per pass from a watermark kept in
//! PostgreSQL, and checks each stored message against `processed_messages` (by message id)
//! and the dead letters (by `Dlq-Stream-Sequence`). A message that is neither, once older
//! than `intake.audit_grace`, is a finding: stored, logged with its sequence and message id,
//! counted (`onecharge_intake_unrecorded_messages`), listed by `onecharge intake audit`, and
//! replayable through intake under its own message id ([`StreamAudit::replay`]), where the
//! dedupe table and the attempts table decide as for any delivery.
//!
//! What it never judges:
//! - messages beyond intake's ack floor: intake has them in hand or has yet to see them;
//! - messages younger than the grace;
//! - messages stored longer ago than `purge.dedupe_retention` (less a tenth): their dedupe
//!   rows may be purged, so "no row" would say nothing. The watermark passes over them and
//!   the pass counts them. With the defaults (streams keep 7 days, rows 14) there are none.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::consumer::{self, DeliverPolicy};
use async_nats::jetstream::context::ConsumerInfoErrorKind;
use async_nats::jetstream::stream::Stream;
use futures::StreamExt as _;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::header;
use crate::broker::{Broker, CommandKind, PublishKind};
use crate::config::{Settings, UsageError};
use crate::domain::Actor;
use crate::store::findings::stream_audit::{self, AuditFinding};
use crate::store::Store;

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AuditPass {
    /// False when another process held the audit's lock, so this one did nothing.
    pub ran: bool,
    /// Messages judged.
    pub checked: usize,
    /// Messages passed over because their dedupe rows may have been purged.
    pub beyond_retention: usize,
    /// Sequences found unrecorded by this pass (reported for the first time).
    pub found: Vec<u64>,
    /// Findings closed because their message id is recorded now.
    pub resolved: u64,
    /// The watermark after the pass.
    pub checked_through: u64,
}

/// A replayed finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayedFinding {
    /// The replay's sequence in the command stream.
    pub sequence: u64,
    pub message_id: Option<String>,
}

/// The audit of one kind of command (charges or refunds) on a deployment's command stream,
/// against that kind's intake consumer's records.
#[derive(Clone)]
pub struct StreamAudit {
    store: Store,
    broker: Broker,
    kind: CommandKind,
    consumer: String,
    interval: Duration,
    grace: Duration,
    batch_size: usize,
    dedupe_retention: Duration,
}

impl StreamAudit {
    pub fn new(store: Store, broker: Broker, settings: &Settings, kind: CommandKind) -> Self {
        Self {
            store,
            broker,
            kind,
            consumer: kind.consumer_name(&settings.intake),
            interval: settings.intake.audit_interval,
            grace: settings.intake.audit_grace,
            batch_size: settings.intake.audit_batch_size,
            dedupe_retention: settings.purge.dedupe_retention,
        }
    }

    /// A pass every `intake.audit_interval` until `shutdown` (none when it is 0). A pass
    /// that fails (the broker electing a leader, the database away) is logged and tried
    /// again at the next interval: the audit never stops `serve`.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        if self.interval.is_zero() {
            return Ok(());
        }
        // What the database holds until the first pass: a dashboard shows the open
        // findings from the start, not "no data" for an interval.
        match stream_audit::count_open_findings(&self.store, &self.consumer).await {
            Ok(open) => crate::metrics::unrecorded_messages(&self.consumer, open),
            Err(err) => {
                tracing::warn!(error = %err, "cannot count the stream audit's open findings")
            }
        }
        // The first pass one interval after start: starting is busy enough.
        let mut every =
            tokio::time::interval_at(tokio::time::Instant::now() + self.interval, self.interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = every.tick() => {}
            }
            if let Err(err) = self.run_once().await {
                let quiet = crate::store::notice_failure(&err);
                step_failed!(quiet, warn, error = %format!("{err:#}"), "stream audit pass failed; trying again at the next interval");
            }
        }
    }

    /// One pass: judges up to `intake.audit_batch_size` messages after the watermark.
    pub async fn run_once(&self) -> anyhow::Result<AuditPass> {
        self.run_once_at(OffsetDateTime::now_utc()).await
    }

    /// [`StreamAudit::run_once`] as if it were `now` (which decides the grace and the
    /// retention): tests judge "two weeks later" without waiting two weeks.
    pub async fn run_once_at(&self, now: OffsetDateTime) -> anyhow::Result<AuditPass> {
        stream_audit::ensure_watermark(&self.store, &self.consumer).await?;
        let mut tx = self.store.pool().begin().await?;
        let Some(watermark) = stream_audit::lock_watermark(&mut tx, &self.consumer).await? else {
            return Ok(AuditPass::default());
        };
        let mut pass = AuditPass {
            ran: true,
            checked_through: watermark,
            ..AuditPass::default()
        };
        let mut stream = self.stream(&self.broker.names.commands_stream()).await?;
        let state = stream.info().await?.state.clone();
        let ack_floor = match stream.consumer_info(&self.consumer).await {
            Ok(info) => info.ack_floor.stream_sequence,
            // No intake consumer yet: nothing was delivered, nothing can be judged.
            Err(err) if err.kind() == ConsumerInfoErrorKind::NotFound => 0,
            Err(err) => return Err(err).context("reading the intake consumer's ack floor"),
        };
        let start = watermark.max(state.first_sequence.saturating_sub(1)) + 1;
        let upto = ack_floor.min(state.last_sequence);
        if start <= upto {
            let judged = self.read(&stream, start, upto, now, &mut pass).await?;
            pass.checked = judged.len();
            let findings = self.unrecorded(&mut tx, judged).await?;
            for seq in stream_audit::insert_findings(&mut tx, &self.consumer, &findings).await? {
                let finding = findings
                    .iter()
                    .find(|f| f.stream_sequence == seq)
                    .expect("an inserted finding");
                tracing::error!(
                    stream_sequence = seq,
                    message_id = finding.message_id.as_deref().unwrap_or(""),
                    payment_attempt_id = %finding.payment_attempt_id.map(|id| id.to_string()).unwrap_or_default(),
                    "UNRECORDED: the command stream holds a message intake never recorded nor dead-lettered; `onecharge intake audit` lists it, `--replay {seq}` puts it through intake"
                );
                pass.found.push(seq);
            }
        }
        pass.resolved = stream_audit::resolve_recorded_findings(&mut tx, &self.consumer).await?;
        stream_audit::advance_watermark(&mut tx, &self.consumer, pass.checked_through).await?;
        tx.commit().await?;
        let open = stream_audit::count_open_findings(&self.store, &self.consumer).await?;
        crate::metrics::unrecorded_messages(&self.consumer, open);
        Ok(pass)
    }

    /// Reads this kind's commands from `start` through `upto`, at most one batch, and returns
    /// those to judge; moves `pass.checked_through` over everything it read and decided.
    async fn read(
        &self,
        stream: &Stream,
        start: u64,
        upto: u64,
        now: OffsetDateTime,
        pass: &mut AuditPass,
    ) -> anyhow::Result<Vec<AuditFinding>> {
        let reader = stream
            .create_consumer(consumer::pull::Config {
                filter_subject: self.broker.names.command_subject(self.kind),
                ..reader(DeliverPolicy::ByStartSequence {
                    start_sequence: start,
                })
            })
            .await
            .context("creating the audit's reader")?;
        // Never deleted: it expires by itself (`reader`), so the runtime user needs no right
        // to delete consumers.
        self.read_with(&reader, upto, now, pass).await
    }

    async fn read_with(
        &self,
        reader: &consumer::PullConsumer,
        upto: u64,
        now: OffsetDateTime,
        pass: &mut AuditPass,
    ) -> anyhow::Result<Vec<AuditFinding>> {
        let judged_after = now - self.grace;
        let retention = self.dedupe_retention - self.dedupe_retention / 10;
        let mut messages = reader
            .fetch()
            .max_messages(self.batch_size)
            .expires(Duration::from_secs(2))
            .messages()
            .await
            .context("reading the command stream")?;
        let mut judged = Vec::new();
        while let Some(message) = messages.next().await {
            let message =
                message.map_err(|e| anyhow::anyhow!("reading the command stream: {e}"))?;
            let info = message
                .info()
                .map_err(|e| anyhow::anyhow!("a message without JetStream metadata: {e}"))?;
            if info.stream_sequence > upto || info.published > judged_after {
                break;
            }
            let (sequence, stored_at) = (info.stream_sequence, info.published);
            pass.checked_through = sequence;
            if now - stored_at > retention {
                pass.beyond_retention += 1;
                continue;
            }
            judged.push(AuditFinding {
                stream_sequence: sequence,
                message_id: header(&message, NATS_MESSAGE_ID.as_ref()),
                payment_attempt_id: super::attempt_id(&message.payload).map(Uuid::from),
                stored_at,
            });
        }
        Ok(judged)
    }

    /// The messages of `judged` that intake neither recorded nor dead-lettered.
    async fn unrecorded(
        &self,
        tx: &mut sqlx::PgConnection,
        judged: Vec<AuditFinding>,
    ) -> anyhow::Result<Vec<AuditFinding>> {
        let ids: Vec<String> = judged.iter().filter_map(|m| m.message_id.clone()).collect();
        let recorded = stream_audit::recorded_message_ids(tx, &self.consumer, &ids).await?;
        let candidates: Vec<AuditFinding> = judged
            .into_iter()
            .filter(|m| {
                !m.message_id
                    .as_ref()
                    .is_some_and(|id| recorded.contains(id))
            })
            .collect();
        let Some(oldest) = candidates.iter().map(|m| m.stored_at).min() else {
            return Ok(candidates);
        };
        let dead_lettered = self.dead_lettered_since(oldest).await?;
        Ok(candidates
            .into_iter()
            .filter(|m| !dead_lettered.contains(&m.stream_sequence))
            .collect())
    }

    /// The command-stream sequences this consumer dead-lettered since `since` (a dead letter
    /// is always stored after its command), read from the dead letters' headers.
    ///
    /// The read must reach the dead-letter stream's last sequence as its leader stated it
    /// before the read; otherwise this fails and the pass judges nothing. A partial read
    /// would turn every dead letter it missed into a false finding: on a 2.9.10 cluster soak,
    /// a pass that ran as the dead-letter stream's leader was killed reported some 180
    /// dead-lettered commands as unrecorded.
    async fn dead_lettered_since(&self, since: OffsetDateTime) -> anyhow::Result<HashSet<u64>> {
        let stream = self.stream(&self.broker.names.dlq_stream()).await?;
        let last = stream.cached_info().state.last_sequence;
        let mut reader = stream
            .create_consumer(consumer::pull::Config {
                headers_only: true,
                ..reader(DeliverPolicy::ByStartTime { start_time: since })
            })
            .await
            .context("creating the audit's dead-letter reader")?;
        let mut sequences = HashSet::new();
        let read = async {
            let mut read_through = 0;
            while read_through < last {
                let mut batch = reader
                    .fetch()
                    .max_messages(1000)
                    .expires(Duration::from_secs(1))
                    .messages()
                    .await?;
                let mut got = 0;
                while let Some(message) = batch.next().await {
                    let message = message?;
                    got += 1;
                    read_through = read_through.max(message.info()?.stream_sequence);
                    if header(&message, "Dlq-Consumer").is_some_and(|c| c != self.consumer) {
                        continue;
                    }
                    if let Some(seq) =
                        header(&message, "Dlq-Stream-Sequence").and_then(|s| s.parse().ok())
                    {
                        sequences.insert(seq);
                    }
                }
                if got == 0 {
                    break;
                }
            }
            // Nothing stored since `since` also ends here: the reader then starts past the
            // last sequence and has delivered "through" it.
            let delivered = reader.info().await?.delivered.stream_sequence;
            if read_through.max(delivered) < last {
                return Err(format!(
                    "the dead-letter stream delivered through sequence {} of {last}",
                    read_through.max(delivered)
                )
                .into());
            }
            Ok::<_, async_nats::Error>(())
        }
        .await;
        read.map_err(|e| anyhow::anyhow!("reading the dead letters: {e}"))?;
        Ok(sequences)
    }

    /// Puts the finding at `sequence` through intake again: the stored message, body and
    /// headers as they are (its own `Nats-Msg-Id`, so it dedupes as the same message), plus
    /// `Replayed-From-Stream-Sequence`. The finding closes when intake records the message
    /// id (the next pass sees it); a message without an id can only be dead-lettered again,
    /// so its finding closes now.
    pub async fn replay(&self, sequence: u64, actor: &Actor) -> anyhow::Result<ReplayedFinding> {
        let Some(finding) =
            stream_audit::open_finding(&self.store, &self.consumer, sequence).await?
        else {
            return Err(UsageError(format!(
                "no open finding at command-stream sequence {sequence}: `onecharge intake audit` lists them"
            ))
            .into());
        };
        let stream_name = self.broker.names.commands_stream();
        let stream = self.stream(&stream_name).await?;
        let stored = stream
            .get_raw_message(sequence)
            .await
            .with_context(|| format!("reading sequence {sequence} of {stream_name}"))?;
        let mut headers = stored.headers.clone();
        headers.insert(
            "ReplayedFinding-From-Stream-Sequence",
            sequence.to_string().as_str(),
        );
        headers.insert("ReplayedFinding-By", actor.to_string());
        let message_id = finding.message_id.clone();
        if message_id.is_none() {
            // Without a message id a retried publish could store it twice, so it is published
            // once. Intake dead-letters it as invalid, all an id-less message can become: the
            // finding closes now.
            let ack = self
                .broker
                .jetstream
                .publish_with_headers(
                    self.broker.names.command_subject(self.kind),
                    headers,
                    stored.payload,
                )
                .await?
                .await?;
            stream_audit::mark_replayed(&self.store, &self.consumer, sequence, actor, true).await?;
            return Ok(ReplayedFinding {
                sequence: ack.sequence,
                message_id,
            });
        }
        let ack = self
            .broker
            .publish_retrying(
                PublishKind::Replay,
                self.broker.names.command_subject(self.kind),
                headers,
                stored.payload,
                None,
            )
            .await
            .context("publishing the replay")?;
        if ack.duplicate {
            anyhow::bail!(
                "JetStream dropped the replay as a duplicate: message id {} is still inside the command stream's duplicate window; replay it once the window has passed",
                message_id.as_deref().unwrap_or_default()
            );
        }
        stream_audit::mark_replayed(&self.store, &self.consumer, sequence, actor, false).await?;
        Ok(ReplayedFinding {
            sequence: ack.sequence,
            message_id,
        })
    }

    async fn stream(&self, name: &str) -> anyhow::Result<Stream> {
        self.broker
            .jetstream
            .get_stream(name)
            .await
            .with_context(|| format!("reading stream {name}"))
    }

    /// The durable consumer whose records this audit checks.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The open findings, oldest sequence first.
    pub async fn open_findings(&self) -> anyhow::Result<Vec<stream_audit::UnrecordedMessage>> {
        Ok(stream_audit::open_findings(&self.store, &self.consumer).await?)
    }
}

/// How long an audit reader outlives its last pull: well past the longest a pull waits
/// (2 s), and short, so that at the default `intake.audit_interval` (60 s) a pass's readers
/// are gone before the next pass begins.
const READER_IDLE_EXPIRY: Duration = Duration::from_secs(15);

/// An ephemeral reader of a stream for one pass: delivers from `deliver_policy` on, wants no
/// acks, lives in memory on one server, and is gone by itself once nobody has pulled from
/// it for [`READER_IDLE_EXPIRY`]. Nothing deletes it: the runtime user may not delete
/// consumers (docs/operations.md §24), so that a leaked credential cannot delete the intake
/// consumers.
fn reader(deliver_policy: DeliverPolicy) -> consumer::pull::Config {
    consumer::pull::Config {
        deliver_policy,
        ack_policy: consumer::AckPolicy::None,
        inactive_threshold: READER_IDLE_EXPIRY,
        memory_storage: true,
        num_replicas: 1,
        description: Some("onecharge stream audit (ephemeral)".into()),
        ..Default::default()
    }
}
