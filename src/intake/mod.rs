//! Intake: the JetStream pull consumer that turns ChargePayment messages into recorded
//! payment attempts.
//!
//! Invariants:
//! - Nothing is acknowledged before the transaction that recorded it committed.
//! - A duplicate is recognised by the database's unique keys, never by read-then-write.
//! - A permanently invalid or conflicting message is dead-lettered with a bounded reason and
//!   is not recorded as processed; it is terminated only after the dead letter is stored.
//! - A transient failure is Nak'd with an application-computed delay; on its last allowed
//!   delivery it is dead-lettered as `exhausted`. Nothing is dropped: the consumer has no
//!   `max_deliver` of its own, and a message whose dead letter cannot be stored is Nak'd
//!   until it is. Only an operator-set `max_deliver` can end a message unrecorded, and that
//!   is counted (`onecharge_intake_messages_lost_total`).
//!
//! About 670 lines: one consumer loop for both command families (fetch, validate, record,
//! then ack, nak or dead-letter), kept in one room because every acknowledgement must read
//! next to the commit it follows; validation is `domain::command` and `domain::refund`, the
//! SQL `store::intake` and `store::refunds`.

pub mod audit;
mod dead_letter;

use async_nats::header::NATS_MESSAGE_ID;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::PullConsumer, AckKind};
use futures::StreamExt as _;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

pub use dead_letter::{DeadLetterError, DeadLetterHeaders, DlqClass};

use crate::broker::{Broker, CommandKind};
use crate::config::{IntakeSettings, Settings};
use crate::domain::command::{self, CommandHeaders};
use crate::domain::refund;
use crate::domain::PaymentAttemptId;
use crate::metrics;
use crate::nudge::Nudges;
use crate::store::intake::{record_batch, IntakeRecord, Recorded};
use crate::store::refunds::{RecordedRefund, RefundRecord};
use crate::store::{self, Store};

/// How one delivery ended. Each variant maps to exactly one way of settling the message
/// with the broker; retryable versus fatal is decided here, by type, not by error text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryOutcome {
    #[error("processed")]
    Processed,
    #[error("duplicate")]
    Duplicate,
    #[error("business duplicate")]
    BusinessDuplicate,
    #[error("stale")]
    Stale,
    /// Invalid now and forever: dead-letter as `invalid`.
    #[error("permanent: {0}")]
    Permanent(String),
    /// Contradicts what was recorded before: dead-letter as `conflict`.
    #[error("conflict: {0}")]
    Conflict(String),
    /// May succeed later (database down, serialization failure): Nak with a delay.
    #[error("transient: {0}")]
    Transient(String),
}

impl DeliveryOutcome {
    /// The bounded metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Processed => "processed",
            Self::Duplicate => "duplicate",
            Self::BusinessDuplicate => "business_duplicate",
            Self::Stale => "stale",
            Self::Permanent(_) => "permanent",
            Self::Conflict(_) => "conflict",
            Self::Transient(_) => "transient",
        }
    }
}

impl From<Recorded> for DeliveryOutcome {
    fn from(recorded: Recorded) -> Self {
        match recorded {
            Recorded::Accepted => Self::Processed,
            Recorded::Stale => Self::Stale,
            Recorded::Duplicate => Self::Duplicate,
            Recorded::BusinessDuplicate => Self::BusinessDuplicate,
            Recorded::Conflict(reason) => Self::Conflict(reason),
        }
    }
}

/// What one batch came to, for tests, the demo and logs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BatchReport {
    pub outcomes: Vec<DeliveryOutcome>,
    /// Messages that went to the dead-letter stream, by class.
    pub dead_lettered: Vec<DlqClass>,
    /// Command-stream sequences of messages the dead-letter stream refused for good:
    /// terminated, kept in the command stream, named by the stream audit.
    pub dead_letter_refused: Vec<u64>,
}

/// What settling one delivery did with the broker, beyond acking or Nak'ing it.
enum Settled {
    Done,
    DeadLettered(DlqClass),
    /// Terminated at this command-stream sequence without a dead letter, which the
    /// dead-letter stream refuses for good.
    DeadLetterRefused(u64),
}

impl BatchReport {
    pub fn count(&self, label: &str) -> usize {
        self.outcomes.iter().filter(|o| o.label() == label).count()
    }
}

/// The intake role: one durable pull consumer, any number of instances.
#[derive(Clone)]
pub struct Intake {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    store: Store,
    broker: Broker,
    consumer: PullConsumer,
    /// Which command family this consumer reads; `settings.consumer` is its durable name.
    kind: CommandKind,
    settings: IntakeSettings,
    nudges: Nudges,
    /// The consumer's own `max_deliver` as the server reports it (≤ 0: unlimited). The
    /// server stops delivering after it whatever `intake.max_deliver` says, so the last
    /// delivery is the smaller of the two.
    server_max_deliver: Arc<AtomicI64>,
}

impl Intake {
    /// Binds to (creating or updating) the durable consumer of ChargePayment commands.
    pub async fn new(store: Store, broker: Broker, settings: &Settings) -> anyhow::Result<Self> {
        Self::for_kind(store, broker, settings, CommandKind::Charge).await
    }

    /// Binds to (creating or updating) the durable consumer of one command family.
    pub async fn for_kind(
        store: Store,
        broker: Broker,
        settings: &Settings,
        kind: CommandKind,
    ) -> anyhow::Result<Self> {
        let consumer = broker.ensure_consumer(settings, kind).await?;
        let server_max_deliver =
            Arc::new(AtomicI64::new(consumer.cached_info().config.max_deliver));
        let intake = IntakeSettings {
            consumer: kind.consumer_name(&settings.intake),
            ..settings.intake.clone()
        };
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                broker,
                consumer,
                kind,
                settings: intake,
                nudges: Nudges::default(),
                server_max_deliver,
            }),
        })
    }

    /// Reads the consumer's real `max_deliver` from the server again (an operator may have
    /// changed the consumer since intake bound to it).
    pub async fn refresh_consumer_limits(&self) -> anyhow::Result<()> {
        let info = self
            .inner
            .consumer
            .get_info()
            .await
            .context("reading the intake consumer's info")?;
        let previous = self
            .inner
            .server_max_deliver
            .swap(info.config.max_deliver, Ordering::Relaxed);
        if previous != info.config.max_deliver {
            tracing::warn!(
                max_deliver = info.config.max_deliver,
                "the intake consumer's max_deliver changed on the server"
            );
        }
        Ok(())
    }

    /// The server's `max_deliver` when it has one.
    fn server_limit(&self) -> Option<i64> {
        Some(self.inner.server_max_deliver.load(Ordering::Relaxed)).filter(|&limit| limit > 0)
    }

    /// The delivery on which a message that still fails transiently is dead-lettered.
    fn last_delivery(&self) -> i64 {
        let configured = self.inner.settings.max_deliver;
        self.server_limit()
            .map_or(configured, |server| server.min(configured))
    }

    /// The same intake, waking the executors of this process when it records new attempts
    /// (and the relay when it writes an event).
    pub fn with_nudges(self, nudges: Nudges) -> Self {
        Self {
            inner: Arc::new(Inner {
                nudges,
                ..(*self.inner).clone()
            }),
        }
    }

    /// Consumes until `shutdown` fires, with up to `intake.concurrency` batches in hand.
    /// On shutdown it stops taking messages and settles every batch already in hand.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let settings = &self.inner.settings;
        let permits = Arc::new(tokio::sync::Semaphore::new(settings.concurrency));
        let mut in_hand = JoinSet::new();
        tracing::info!(consumer = %settings.consumer, batch_size = settings.batch_size, "intake started");
        'reconnect: while !shutdown.is_cancelled() {
            if let Err(err) = self.refresh_consumer_limits().await {
                tracing::warn!(error = %format!("{err:#}"), "cannot read the consumer's limits; keeping the last known");
            }
            let messages = self
                .inner
                .consumer
                .stream()
                // Pull what every batch in hand can take; each transaction still holds one batch.
                .max_messages_per_batch(settings.batch_size * settings.concurrency)
                .heartbeat(Duration::from_secs(5))
                .expires(Duration::from_secs(30))
                .messages()
                .await;
            let messages = match messages {
                Ok(m) => m,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot start pulling; retrying in 1s");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            let mut chunks = messages.ready_chunks(settings.batch_size);
            loop {
                let permit = tokio::select! {
                    _ = shutdown.cancelled() => break 'reconnect,
                    permit = permits.clone().acquire_owned() => permit.expect("semaphore never closed"),
                };
                let chunk = tokio::select! {
                    _ = shutdown.cancelled() => break 'reconnect,
                    chunk = chunks.next() => chunk,
                };
                let Some(chunk) = chunk else {
                    continue 'reconnect;
                };
                let mut batch = Vec::with_capacity(chunk.len());
                for item in chunk {
                    match item {
                        Ok(message) => batch.push(message),
                        Err(err) => tracing::warn!(error = %err, "pull stream error"),
                    }
                }
                if batch.is_empty() {
                    continue;
                }
                let intake = self.clone();
                in_hand.spawn(async move {
                    intake.handle(batch).await;
                    drop(permit);
                });
                while in_hand.try_join_next().is_some() {}
            }
        }
        tracing::info!(
            in_hand = in_hand.len(),
            "intake stopping: settling batches in hand"
        );
        while in_hand.join_next().await.is_some() {}
        Ok(())
    }

    /// One deterministic step for tests and tools: fetches what is available (up to one
    /// batch, waiting at most `wait` for the first message), records and settles it.
    pub async fn process_batch(&self, wait: Duration) -> anyhow::Result<BatchReport> {
        let messages = self.fetch(wait).await?;
        Ok(self.handle(messages).await)
    }

    /// Pulls up to one batch: waits at most `wait` for a first message, then takes whatever
    /// else is already available without waiting (so nothing sits unacknowledged while the
    /// batch fills). The caller owns settling them; tests use this to stand between commit
    /// and ack.
    pub async fn fetch(&self, wait: Duration) -> anyhow::Result<Vec<jetstream::Message>> {
        let consumer = &self.inner.consumer;
        let mut messages: Vec<jetstream::Message> = consumer
            .batch()
            .max_messages(1)
            .expires(wait.max(Duration::from_millis(100)))
            .messages()
            .await?
            .filter_map(|m| async move { m.ok() })
            .collect()
            .await;
        if messages.is_empty() || self.inner.settings.batch_size == 1 {
            return Ok(messages);
        }
        let rest: Vec<jetstream::Message> = consumer
            .fetch()
            .max_messages(self.inner.settings.batch_size - 1)
            .messages()
            .await?
            .filter_map(|m| async move { m.ok() })
            .collect()
            .await;
        messages.extend(rest);
        Ok(messages)
    }

    /// Validates, records in one transaction and settles `messages`.
    pub async fn handle(&self, messages: Vec<jetstream::Message>) -> BatchReport {
        if messages.is_empty() {
            return BatchReport::default();
        }
        let started = std::time::Instant::now();
        let outcomes = self
            .with_progress_acks(&messages, self.record(&messages))
            .await;
        if outcomes.contains(&DeliveryOutcome::Processed) {
            match self.inner.kind {
                CommandKind::Charge => self.inner.nudges.attempts_recorded(),
                CommandKind::Refund => self.inner.nudges.refunds_recorded(),
            }
        }
        if outcomes.contains(&DeliveryOutcome::Stale) {
            self.inner.nudges.events_written();
        }
        // One line per batch, not per message: a database that fails every statement for a
        // while (a failover, commits waiting for a synchronous standby) fails every message
        // of every batch alike (decision 250). Each message's own line is at debug.
        let transient: Vec<&str> = outcomes
            .iter()
            .filter_map(|outcome| match outcome {
                DeliveryOutcome::Transient(reason) => Some(reason.as_str()),
                _ => None,
            })
            .collect();
        if let Some(reason) = transient.first() {
            step_failed!(
                store::availability::in_failover(),
                warn,
                consumer = %self.inner.settings.consumer,
                failed = transient.len(),
                batch = messages.len(),
                reason,
                "deliveries failed transiently; each is redelivered after its backoff"
            );
        }
        let mut report = BatchReport::default();
        let settled = futures::future::join_all(
            messages
                .iter()
                .zip(&outcomes)
                .map(|(message, outcome)| self.settle(message, outcome)),
        )
        .await;
        for (outcome, settled) in outcomes.into_iter().zip(settled) {
            metrics::delivery(&self.inner.settings.consumer, outcome.label());
            match settled {
                Settled::Done => {}
                Settled::DeadLettered(class) => report.dead_lettered.push(class),
                Settled::DeadLetterRefused(sequence) => report.dead_letter_refused.push(sequence),
            }
            report.outcomes.push(outcome);
        }
        metrics::batch_duration(started.elapsed());
        report
    }

    /// Records the valid messages of a batch and classifies every message. Never fails:
    /// a failure becomes each message's outcome.
    pub async fn record(&self, messages: &[jetstream::Message]) -> Vec<DeliveryOutcome> {
        if self.inner.kind == CommandKind::Refund {
            return self.record_refunds(messages).await;
        }
        let mut outcomes: Vec<Option<DeliveryOutcome>> = vec![None; messages.len()];
        let mut records = Vec::new();
        let mut positions = Vec::new();
        for (i, message) in messages.iter().enumerate() {
            let headers = command_headers(message);
            match command::validate(&headers, &message.payload) {
                Ok(valid) => {
                    records.push(IntakeRecord {
                        message_id: valid.message_id,
                        stream_sequence: message
                            .info()
                            .map(|info| info.stream_sequence)
                            .unwrap_or(0),
                        body_sha256: valid.body_sha256,
                        command: valid.command,
                        correlation_id: valid.correlation_id,
                        traceparent: valid.traceparent,
                    });
                    positions.push(i);
                }
                Err(invalid) => outcomes[i] = Some(DeliveryOutcome::Permanent(invalid.0)),
            }
        }
        for (i, outcome) in positions.iter().zip(self.record_valid(&records).await) {
            outcomes[*i] = Some(outcome);
        }
        outcomes
            .into_iter()
            .map(|o| o.expect("every message classified"))
            .collect()
    }

    /// Records refund commands, each in a transaction of its own (refunds are few beside
    /// charges): its dedupe row and its refund, or why it can never be recorded.
    async fn record_refunds(&self, messages: &[jetstream::Message]) -> Vec<DeliveryOutcome> {
        let consumer = &self.inner.settings.consumer;
        let mut outcomes = Vec::with_capacity(messages.len());
        for message in messages {
            let headers = command_headers(message);
            let valid = match refund::validate(&headers, &message.payload) {
                Ok(valid) => valid,
                Err(invalid) => {
                    outcomes.push(DeliveryOutcome::Permanent(invalid.0));
                    continue;
                }
            };
            let record = RefundRecord {
                message_id: valid.message_id,
                stream_sequence: message.info().map(|info| info.stream_sequence).unwrap_or(0),
                body_sha256: valid.body_sha256,
                command: valid.command,
                correlation_id: valid.correlation_id,
                traceparent: valid.traceparent,
            };
            outcomes.push(
                match store::refunds::record_refund(&self.inner.store, consumer, &record).await {
                    Ok(RecordedRefund::Accepted) => DeliveryOutcome::Processed,
                    Ok(RecordedRefund::Duplicate) => DeliveryOutcome::Duplicate,
                    Ok(RecordedRefund::BusinessDuplicate) => DeliveryOutcome::BusinessDuplicate,
                    Ok(RecordedRefund::Conflict(reason)) => DeliveryOutcome::Conflict(reason),
                    Err(err) => classify_db_error(&err),
                },
            );
        }
        outcomes
    }

    /// Records the batch in one transaction. When the database rejects the batch for a
    /// reason that will not go away (a row it refuses), each record is retried alone, so
    /// one bad message cannot poison the rest of its batch.
    async fn record_valid(&self, records: &[IntakeRecord]) -> Vec<DeliveryOutcome> {
        if records.is_empty() {
            return Vec::new();
        }
        let consumer = &self.inner.settings.consumer;
        let max_age = self.inner.settings.max_command_age;
        match record_batch(&self.inner.store, consumer, records, max_age).await {
            Ok(recorded) => recorded.into_iter().map(DeliveryOutcome::from).collect(),
            // Only a refusal of the data can be one message's fault; anything else (an
            // outage, a missing grant or table, a race lost more often than the store
            // records a batch again) fails the whole batch alike.
            Err(err)
                if !store::blames_the_data(&err)
                    || store::intake::lost_a_race(&err)
                    || records.len() == 1 =>
            {
                vec![classify_db_error(&err); records.len()]
            }
            Err(err) => {
                tracing::warn!(error = %err, batch = records.len(), "batch rejected by the database; recording its messages one by one");
                let mut outcomes = Vec::with_capacity(records.len());
                for record in records {
                    outcomes.push(
                        match record_batch(
                            &self.inner.store,
                            consumer,
                            std::slice::from_ref(record),
                            max_age,
                        )
                        .await
                        {
                            Ok(mut one) => DeliveryOutcome::from(one.remove(0)),
                            Err(err) => classify_db_error(&err),
                        },
                    );
                }
                outcomes
            }
        }
    }

    /// Keeps the messages of a long-running batch from being redelivered meanwhile by
    /// sending in-progress acks every third of the ack wait.
    async fn with_progress_acks<T>(
        &self,
        messages: &[jetstream::Message],
        work: impl std::future::Future<Output = T>,
    ) -> T {
        let period = self.inner.settings.ack_wait / 3;
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tokio::pin!(work);
        loop {
            tokio::select! {
                result = &mut work => return result,
                _ = ticker.tick() => {
                    for message in messages {
                        if let Err(err) = message.ack_with(AckKind::Progress).await {
                            tracing::debug!(error = %err, "in-progress ack failed");
                        }
                    }
                }
            }
        }
    }

    /// Settles one message with the broker according to its outcome.
    async fn settle(&self, message: &jetstream::Message, outcome: &DeliveryOutcome) -> Settled {
        let headers = command_headers(message);
        // One span per delivery, with the OpenTelemetry messaging attribute names. The
        // producer's `traceparent` is the span's parent, and is kept as a field for the logs.
        let span = tracing::info_span!(
            "settle",
            messaging.system = "nats",
            messaging.destination.name = message.subject.as_str(),
            messaging.operation = "process",
            messaging.message.id = headers.message_id.as_deref().unwrap_or(""),
            messaging.consumer.group.name = self.inner.settings.consumer.as_str(),
            correlation_id = headers.correlation_id.as_deref().unwrap_or(""),
            payment_attempt_id = tracing::field::Empty,
            traceparent = headers.traceparent.as_deref().unwrap_or(""),
            outcome = outcome.label(),
        );
        if !span.is_disabled() {
            if let Some(id) = attempt_id(&message.payload) {
                span.record("payment_attempt_id", tracing::field::display(id));
            }
        }
        if let Some(traceparent) = &headers.traceparent {
            // W3C trace context is the contract, so the propagator is fixed, not the global one.
            // A malformed header extracts an empty context and the span starts its own trace.
            let carrier = HashMap::from([("traceparent".to_owned(), traceparent.clone())]);
            let parent = TraceContextPropagator::new().extract(&carrier);
            // Fails only when no OpenTelemetry layer is installed: then there is no trace.
            let _ = span.set_parent(parent);
        }
        async {
            let delivered = message.info().map(|i| i.delivered).unwrap_or(1);
            tracing::debug!(delivered, "settling delivery");
            match outcome {
                DeliveryOutcome::Processed
                | DeliveryOutcome::Duplicate
                | DeliveryOutcome::BusinessDuplicate
                | DeliveryOutcome::Stale => {
                    // A plain ack, not a double ack: the commit already made this delivery
                    // safe to see again, so waiting for the broker to confirm the ack
                    // (a round trip per message) buys nothing. A lost ack costs one
                    // redelivery, recognised by its dedupe row as a duplicate.
                    if let Err(err) = message.ack().await {
                        tracing::warn!(error = %err, "ack after commit failed; the redelivery will be a duplicate");
                    }
                    Settled::Done
                }
                DeliveryOutcome::Permanent(reason) => self.dead_letter(message, DlqClass::Invalid, reason, delivered).await,
                DeliveryOutcome::Conflict(reason) => self.dead_letter(message, DlqClass::Conflict, reason, delivered).await,
                DeliveryOutcome::Transient(reason) if delivered >= self.last_delivery() => {
                    let reason = format!("still failing after {delivered} deliveries: {reason}");
                    self.dead_letter(message, DlqClass::Exhausted, &reason, delivered).await
                }
                DeliveryOutcome::Transient(reason) => {
                    let delay = self.retry_delay(delivered);
                    tracing::debug!(delivered, delay_ms = delay.as_millis() as u64, reason, "transient failure; will be redelivered");
                    if let Err(err) = message.ack_with(AckKind::Nak(Some(delay))).await {
                        tracing::warn!(error = %err, "nak failed; the message will be redelivered after ack_wait");
                    }
                    Settled::Done
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn dead_letter(
        &self,
        message: &jetstream::Message,
        class: DlqClass,
        reason: &str,
        delivered: i64,
    ) -> Settled {
        let consumer = &self.inner.settings.consumer;
        let subject = self.inner.broker.names.dlq_subject_for(self.inner.kind);
        match dead_letter::publish(
            &self.inner.broker,
            consumer,
            &subject,
            message,
            class,
            reason,
        )
        .await
        {
            Ok(()) => {
                tracing::info!(class = class.as_str(), reason, "dead-lettered");
                metrics::dead_letter(class.as_str());
                if let Err(err) = message.double_ack_with(AckKind::Term).await {
                    tracing::warn!(error = %err, "term after dead-letter failed; the redelivery will be dead-lettered again under the same id");
                }
                Settled::DeadLettered(class)
            }
            Err(DeadLetterError::Refused(err)) => {
                // No try will ever store it: kept, it would hold one of the consumer's
                // `max_ack_pending` slots for ever, and enough of them stop intake. It ends
                // here, still in the command stream, where the stream audit names it.
                let sequence = message.info().map(|i| i.stream_sequence).unwrap_or(0);
                metrics::dead_letter_refused(consumer);
                tracing::error!(error = %format!("{err:#}"), stream_sequence = sequence, class = class.as_str(), reason, "NOT DEAD-LETTERED: the dead-letter stream refuses this command for good; it is terminated and stays in the command stream at this sequence, where `onecharge intake audit` names it");
                if let Err(err) = message.double_ack_with(AckKind::Term).await {
                    tracing::warn!(error = %err, "term after a refused dead letter failed; the redelivery is refused again");
                }
                Settled::DeadLetterRefused(sequence)
            }
            Err(DeadLetterError::NotStored(err))
                if self.server_limit().is_some_and(|limit| delivered >= limit) =>
            {
                // The server will not deliver it again: nothing onecharge can do keeps it.
                let sequence = message.info().map(|i| i.stream_sequence).unwrap_or(0);
                metrics::message_lost(consumer, "dead_letter_failed_on_last_delivery");
                tracing::error!(error = %format!("{err:#}"), stream_sequence = sequence, class = class.as_str(), reason, "LOST: the dead-letter publish failed on the consumer's last delivery (its max_deliver on the server); the command stays in the command stream at this sequence — republish it by hand");
                Settled::Done
            }
            Err(DeadLetterError::NotStored(err)) => {
                // Kept, never given up: the redelivery tries the dead letter again.
                let delay = self.retry_delay(delivered);
                tracing::error!(error = %format!("{err:#}"), "dead-letter publish failed; nak so that it is retried");
                if let Err(err) = message.ack_with(AckKind::Nak(Some(delay))).await {
                    tracing::warn!(error = %err, "nak failed; the message will be redelivered after ack_wait");
                }
                Settled::Done
            }
        }
    }

    /// Exponential backoff with jitter for the `delivered`-th delivery.
    fn retry_delay(&self, delivered: i64) -> Duration {
        let s = &self.inner.settings;
        let retry = u32::try_from(delivered.max(1)).unwrap_or(u32::MAX);
        crate::domain::retry::backoff(s.retry_min_delay, s.retry_max_delay, retry)
    }
}

/// Reads a database error as the fate of the messages it failed. Only SQLSTATE classes 22
/// and 23 blame a message; every other error is retried, and one that will not go away by
/// itself (a missing grant or table, an internal error) is counted as a deployment fault
/// so that someone fixes the deployment (docs/operations.md).
fn classify_db_error(err: &sqlx::Error) -> DeliveryOutcome {
    let text = crate::domain::bounded(&err.to_string(), 400);
    if store::intake::lost_a_race(err) {
        // Another instance committed the same key each time this batch was recorded: no
        // message is at fault, and the redelivery finds the committed rows.
        DeliveryOutcome::Transient(format!("lost a race on a unique key: {text}"))
    } else if store::blames_the_data(err) {
        DeliveryOutcome::Permanent(format!("rejected by the database: {text}"))
    } else if store::is_transient(err) {
        DeliveryOutcome::Transient(format!("database unavailable: {text}"))
    } else {
        let class = store::sqlstate_class(err).unwrap_or_else(|| "none".into());
        metrics::deployment_fault(class);
        tracing::error!(error = %err, "the database refused intake's statement for a reason no message causes (a missing grant, table or migration?); retrying");
        DeliveryOutcome::Transient(format!(
            "database refused the statement (deployment fault): {text}"
        ))
    }
}

/// The `payment_attempt_id` of a command body, when it has a readable one (for spans and the
/// stream audit's findings only: validation decides what the body is worth).
fn attempt_id(payload: &[u8]) -> Option<PaymentAttemptId> {
    #[derive(serde::Deserialize)]
    struct AttemptRef {
        payment_attempt_id: PaymentAttemptId,
    }
    serde_json::from_slice::<AttemptRef>(payload)
        .ok()
        .map(|r| r.payment_attempt_id)
}

/// The value of the header `name` of a message, when it has one.
fn header(message: &async_nats::Message, name: &str) -> Option<String> {
    message
        .headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().to_owned())
}

/// Reads the headers intake cares about.
pub fn command_headers(message: &async_nats::Message) -> CommandHeaders {
    let get = |name: &str| header(message, name);
    CommandHeaders {
        message_id: get(NATS_MESSAGE_ID.as_ref()),
        correlation_id: get("Correlation-Id"),
        traceparent: get("traceparent"),
    }
}
