//! The outbox relay: publishes the events that state changes wrote to the outbox
//! (contract §2.3) onto the events stream.
//!
//! Invariants:
//! - An event is published with `Nats-Msg-Id` = its `event_id`, from the headers stored with
//!   it, so every publish of one event is the same message and JetStream deduplicates a
//!   republish (consumers past the duplicate window still see the same id).
//! - A row is marked published only after JetStream acknowledged it.
//! - Events are claimed through their queue rows (`outbox_unpublished`, decision 171) with
//!   row locks that skip what another relay holds, inside a transaction held while they are published: several
//!   relays never publish one event at the same time, and a relay that dies releases its
//!   events unmarked for the next one.
//! - A step's publishing ends within [`step_budget`] of `database.
//!   idle_in_transaction_session_timeout`, however long the broker stays away: PostgreSQL
//!   never ends the claim's session under it, so no other relay claims and publishes the
//!   same events while this step still holds them (decision 224).

use async_nats::header::NATS_MESSAGE_ID;
use std::future::IntoFuture as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream::context::{PublishAckFuture, PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use async_nats::HeaderMap;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::broker::{Broker, PublishKind};
use crate::config::{RelaySettings, Settings};
use crate::domain::retry::backoff;
use crate::domain::{AttemptStatus, PaymentEvent, RefundStatus};
use crate::nudge::Nudges;
use crate::store::relay::{claim_unpublished, FailedPublish, OutboxRow};
use crate::store::Store;

/// What one [`Relay::run_once`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayReport {
    /// Rows claimed.
    pub claimed: usize,
    /// Acknowledged by JetStream and marked published (including duplicates).
    pub published: usize,
    /// Of those, acknowledged as duplicates: JetStream already had the event id (a relay
    /// died between publishing and marking).
    pub duplicates: usize,
    /// Not acknowledged (no answer in time, connection lost); left for the next step.
    pub failed: usize,
    /// Refused by JetStream (too large for the stream, a subject no stream stores): left
    /// unpublished and backed off per row, so the rows behind it are still published.
    pub refused: usize,
}

/// Why one publish was not acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PublishFailure {
    /// JetStream (or the client, before sending) refused this message, and will again:
    /// the row is backed off on its own instead of being retried every step.
    pub refused: bool,
    pub message: String,
}

/// The shortest and longest wait before a refused event is tried again; doubling between.
const REFUSED_RETRY_MIN: Duration = Duration::from_secs(5);
const REFUSED_RETRY_MAX: Duration = Duration::from_secs(600);
/// The longest wait after failed steps of the loop.
const FAILED_STEP_MAX_WAIT: Duration = Duration::from_secs(30);

/// The relay role. Any number may run against one database.
#[derive(Clone)]
pub struct Relay {
    store: Store,
    broker: Broker,
    settings: RelaySettings,
    /// How long one step may publish while its claim's transaction waits ([`step_budget`]).
    step_budget: Duration,
    nudges: Nudges,
}

/// How long a step may spend publishing inside its claim's transaction: three quarters of
/// `idle_in_transaction_session_timeout`, after which PostgreSQL would end the session (the
/// rest is for the marking statement and the round trips around it).
pub fn step_budget(idle_in_transaction_session_timeout: Duration) -> Duration {
    idle_in_transaction_session_timeout.mul_f64(0.75)
}

impl Relay {
    pub fn new(store: Store, broker: Broker, settings: &Settings) -> Self {
        Self {
            store,
            broker,
            settings: settings.relay.clone(),
            step_budget: step_budget(settings.database.idle_in_transaction_session_timeout),
            nudges: Nudges::default(),
        }
    }

    /// The same relay, woken by this process's executor when it writes an event (instead of
    /// waiting out `poll_interval`).
    pub fn with_nudges(self, nudges: Nudges) -> Self {
        Self { nudges, ..self }
    }

    /// One step: claims about `batch_size` unpublished events (whole queue rows: up to
    /// `batch_size + 63`), publishes them in order, waits for every ack, and marks the
    /// acknowledged ones published.
    pub async fn run_once(&self) -> anyhow::Result<RelayReport> {
        let started = Instant::now();
        let claim = claim_unpublished(&self.store, self.settings.batch_size)
            .await
            .context("claiming unpublished outbox rows")?;
        if claim.rows.is_empty() {
            // Queue rows whose events were all published already are deleted all the same.
            claim
                .finish(&[], &[])
                .await
                .context("releasing an empty claim")?;
            return Ok(RelayReport::default());
        }
        let results = self.publish_rows(&claim.rows).await;
        let acked_at = OffsetDateTime::now_utc();
        let mut report = RelayReport {
            claimed: claim.rows.len(),
            ..Default::default()
        };
        let mut published = Vec::new();
        let mut outcomes = Vec::new();
        let mut failed = Vec::new();
        for (row, result) in claim.rows.iter().zip(results) {
            match result {
                Ok(ack) => {
                    report.published += 1;
                    if ack.duplicate {
                        report.duplicates += 1;
                        tracing::info!(event_id = %row.event_id, "event was already on the stream (relay restarted after publishing); marking it published");
                    }
                    published.push(row.event_id);
                    outcomes.extend(Announced::of(row));
                }
                Err(err) if err.refused => {
                    report.refused += 1;
                    let delay = refused_retry_delay(row.publish_attempts);
                    tracing::error!(event_id = %row.event_id, subject = %row.subject, publish_attempts = row.publish_attempts + 1, retry_in_s = delay.as_secs(), error = %err, "JetStream refused the event; it waits for its own next try, the others go on");
                    failed.push(FailedPublish {
                        event_id: row.event_id,
                        error: err.message,
                        retry_in: Some(delay),
                    });
                }
                Err(err) => {
                    report.failed += 1;
                    tracing::warn!(event_id = %row.event_id, error = %err, "event publish not acknowledged; will retry");
                    failed.push(FailedPublish {
                        event_id: row.event_id,
                        error: err.message,
                        retry_in: None,
                    });
                }
            }
        }
        claim
            .finish(&published, &failed)
            .await
            .context("marking outbox rows published")?;
        // Observed once the rows are marked, so an event is observed once: a relay that died
        // before marking observed nothing, and its successor's duplicate is the one observation.
        for announced in outcomes {
            announced.observe(acked_at);
        }
        metrics::counter!("onecharge_relay_events_total", "result" => "published")
            .increment((report.published - report.duplicates) as u64);
        metrics::counter!("onecharge_relay_events_total", "result" => "duplicate")
            .increment(report.duplicates as u64);
        metrics::counter!("onecharge_relay_events_total", "result" => "failed")
            .increment(report.failed as u64);
        metrics::counter!("onecharge_relay_events_total", "result" => "refused")
            .increment(report.refused as u64);
        metrics::histogram!("onecharge_relay_batch_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        Ok(report)
    }

    /// Publishes `rows` in order (sent back to back, then every ack awaited) and returns each
    /// row's ack or error. A row whose publish failed in a way that may pass (a stream-leader
    /// election) is then retried on its own, in order, under its same `Nats-Msg-Id`
    /// ([`Broker::publish_retrying`]). Everything ends by the step's budget
    /// ([`step_budget`]): a row not acknowledged by then is not acknowledged (it waits for
    /// the next step). Does not mark anything: [`Relay::run_once`] does, after this.
    pub async fn publish_rows(
        &self,
        rows: &[OutboxRow],
    ) -> Vec<Result<PublishAck, PublishFailure>> {
        let deadline = tokio::time::Instant::now() + self.step_budget;
        let timed_out = || PublishError::new(PublishErrorKind::TimedOut);
        let mut pending: Vec<Result<PublishAckFuture, PublishError>> =
            Vec::with_capacity(rows.len());
        for row in rows {
            let subject = self.broker.names.subject(&row.subject);
            let sent = tokio::time::timeout_at(
                deadline,
                self.broker.jetstream.publish_with_headers(
                    subject,
                    headers(row),
                    event_body(row).into(),
                ),
            )
            .await
            .unwrap_or_else(|_| Err(timed_out()));
            pending.push(sent);
        }
        let timeout = self.settings.publish_timeout;
        let first = futures::future::join_all(pending.into_iter().map(|sent| async move {
            let by = deadline.min(tokio::time::Instant::now() + timeout);
            match tokio::time::timeout_at(by, sent?.into_future()).await {
                Ok(acked) => acked,
                Err(_) => Err(timed_out()),
            }
        }))
        .await;
        let mut results = Vec::with_capacity(rows.len());
        // Once a row's retries ran out, the broker is not coming back within this step: the
        // rows behind it keep their first error and wait for the next step.
        let mut gave_up = false;
        for (row, result) in rows.iter().zip(first) {
            let result = match result {
                Err(err) if !gave_up && crate::broker::publish_may_pass(&err) => {
                    let retried = tokio::time::timeout_at(
                        deadline,
                        self.broker.publish_retrying(
                            PublishKind::Event,
                            self.broker.names.subject(&row.subject),
                            headers(row),
                            event_body(row).into(),
                            Some(timeout),
                        ),
                    )
                    .await
                    .unwrap_or_else(|_| Err(timed_out()));
                    gave_up = retried.is_err();
                    retried
                }
                other => other,
            };
            results.push(result.map_err(|e| publish_failure(&e, timeout)));
        }
        results
    }

    /// Runs until `shutdown` fires; after a step that found nothing (or failed) it waits
    /// `poll_interval` (failures back off up to 30 s). A step in progress is finished.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        tracing::info!(batch_size = self.settings.batch_size, "relay started");
        let mut failures = 0u32;
        while !shutdown.is_cancelled() {
            let wait = match self.run_once().await {
                Ok(report) if report.claimed >= self.settings.batch_size && report.failed == 0 => {
                    failures = 0;
                    continue;
                }
                Ok(report) if report.failed == 0 => {
                    failures = 0;
                    self.settings.poll_interval
                }
                Ok(_) => {
                    failures = failures.saturating_add(1);
                    failed_step_wait(self.settings.poll_interval, failures)
                }
                Err(err) => {
                    let quiet = crate::store::notice_failure(&err);
                    failures = failures.saturating_add(1);
                    step_failed!(quiet, error, error = %format!("{err:#}"), "relay step failed");
                    failed_step_wait(self.settings.poll_interval, failures)
                }
            };
            // A nudge cuts an idle wait short, never a failure's backoff.
            let nudged = async {
                if failures == 0 {
                    self.nudges.events_waiting().await
                } else {
                    std::future::pending().await
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
                _ = nudged => {}
            }
        }
        tracing::info!("relay stopped");
        Ok(())
    }
}

/// The attempt state an outbox row's event announces (`succeeded`, `declined`, `expired`,
/// `needs_review`); `None` for anything else (a finding, a refund's event).
fn announced_state(status: &str) -> Option<AttemptStatus> {
    status
        .parse::<AttemptStatus>()
        .ok()
        .filter(|s| s.event_name().is_some())
}

/// What a published event announces, observed in the metrics once its row is marked
/// published: an attempt's state (with its decline code) or a refund's final state, each
/// with its command's `requested_at`.
#[derive(Debug, PartialEq)]
enum Announced {
    Attempt {
        state: AttemptStatus,
        decline_code: Option<String>,
        requested_at: Option<OffsetDateTime>,
    },
    Refund {
        state: RefundStatus,
        requested_at: Option<OffsetDateTime>,
    },
}

impl Announced {
    /// What `row`'s event announces; `None` for a finding or a refund's dead letter.
    fn of(row: &OutboxRow) -> Option<Self> {
        let requested_at = row.requested_at;
        if let Some(state) = announced_state(&row.status) {
            let decline_code = (state == AttemptStatus::Declined)
                .then(|| row.payload.get("decline_code")?.as_str().map(str::to_owned))
                .flatten();
            return Some(Self::Attempt {
                state,
                decline_code,
                requested_at,
            });
        }
        if !matches!(row.status.as_str(), "refund_succeeded" | "refund_failed") {
            return None;
        }
        let state = RefundStatus::parse(row.payload.get("status")?.as_str()?)?;
        Some(Self::Refund {
            state,
            requested_at,
        })
    }

    fn observe(self, published_at: OffsetDateTime) {
        match self {
            Self::Attempt {
                state,
                decline_code,
                requested_at,
            } => {
                crate::metrics::command_to_outcome(state, requested_at, published_at);
                if state == AttemptStatus::Declined {
                    crate::metrics::declined(decline_code.as_deref());
                }
            }
            Self::Refund {
                state,
                requested_at,
            } => crate::metrics::refund_command_to_outcome(state, requested_at, published_at),
        }
    }
}

/// Refused (will be again) versus not answered (may succeed at the next step), by the
/// error's kind, never its text.
fn publish_failure(err: &PublishError, timeout: Duration) -> PublishFailure {
    PublishFailure {
        refused: !matches!(
            err.kind(),
            PublishErrorKind::TimedOut
                | PublishErrorKind::BrokenPipe
                | PublishErrorKind::MaxAckPending
        ),
        message: match err.kind() {
            PublishErrorKind::StreamNotFound => {
                "no publish ack: no stream stores this subject".to_owned()
            }
            PublishErrorKind::TimedOut => format!(
                "no publish ack within {}",
                humantime::format_duration(timeout)
            ),
            _ => format!("no publish ack: {err}"),
        },
    }
}

/// How long a refused event waits after its `publish_attempts`-th try (counted before
/// this one): from [`REFUSED_RETRY_MIN`], doubling, with jitter.
fn refused_retry_delay(publish_attempts: i32) -> Duration {
    let retry = publish_attempts.max(0).unsigned_abs().saturating_add(1);
    backoff(REFUSED_RETRY_MIN, REFUSED_RETRY_MAX, retry)
}

/// How long the loop waits after its `failures`-th failed step in a row: from twice
/// `poll_interval`, doubling, up to [`FAILED_STEP_MAX_WAIT`], with jitter.
fn failed_step_wait(poll_interval: Duration, failures: u32) -> Duration {
    backoff(
        poll_interval,
        FAILED_STEP_MAX_WAIT,
        failures.saturating_add(1),
    )
}

/// The stored headers (`Nats-Msg-Id`, `Causation-Id`, …). The `Nats-Msg-Id` is forced to
/// the event id whatever the stored headers say, so one event can never carry two ids.
fn headers(row: &OutboxRow) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some(stored) = row.headers.as_object() {
        for (name, value) in stored {
            if name.eq_ignore_ascii_case(NATS_MESSAGE_ID.as_ref()) {
                continue;
            }
            if let Some(value) = value.as_str() {
                headers.insert(name.as_str(), value);
            }
        }
    }
    headers.insert(NATS_MESSAGE_ID, row.event_id.to_string().as_str());
    headers
}

/// The event body in the contract's field order (jsonb does not keep key order); the stored
/// JSON as it is if it no longer reads as an event.
fn event_body(row: &OutboxRow) -> Vec<u8> {
    match serde_json::from_value::<PaymentEvent>(row.payload.clone()) {
        Ok(event) => serde_json::to_vec(&event),
        Err(_) => serde_json::to_vec(&row.payload),
    }
    .expect("JSON values always serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_states_an_event_announces_are_outcomes_and_a_finding_is_not() {
        for (status, outcome) in [
            ("succeeded", Some(AttemptStatus::Succeeded)),
            ("declined", Some(AttemptStatus::Declined)),
            ("expired", Some(AttemptStatus::Expired)),
            ("needs_review", Some(AttemptStatus::NeedsReview)),
            ("pending", None),
            ("finding", None),
        ] {
            assert_eq!(announced_state(status), outcome, "{status}");
        }
    }

    fn row(status: &str, payload: serde_json::Value) -> OutboxRow {
        OutboxRow {
            event_id: uuid::Uuid::nil(),
            payment_attempt_id: None,
            subject: String::new(),
            headers: serde_json::json!({}),
            payload,
            publish_attempts: 0,
            status: status.to_owned(),
            created_at: OffsetDateTime::UNIX_EPOCH,
            requested_at: None,
        }
    }

    #[test]
    fn a_decline_carries_its_code_a_refund_its_final_state_and_a_dead_letter_nothing() {
        let declined = row("declined", serde_json::json!({"decline_code": "lost_card"}));
        assert_eq!(
            Announced::of(&declined),
            Some(Announced::Attempt {
                state: AttemptStatus::Declined,
                decline_code: Some("lost_card".into()),
                requested_at: None
            })
        );
        let succeeded = row("succeeded", serde_json::json!({"decline_code": null}));
        assert!(matches!(
            Announced::of(&succeeded),
            Some(Announced::Attempt {
                decline_code: None,
                ..
            })
        ));
        for (status, payload, state) in [
            ("refund_succeeded", "succeeded", RefundStatus::Succeeded),
            ("refund_failed", "failed", RefundStatus::Failed),
            ("refund_failed", "refused", RefundStatus::Refused),
        ] {
            let refund = row(status, serde_json::json!({"status": payload}));
            assert_eq!(
                Announced::of(&refund),
                Some(Announced::Refund {
                    state,
                    requested_at: None
                }),
                "{status} {payload}"
            );
        }
        assert_eq!(
            Announced::of(&row("refund_dead_letter", serde_json::json!({}))),
            None
        );
        assert_eq!(Announced::of(&row("finding", serde_json::json!({}))), None);
    }
}
