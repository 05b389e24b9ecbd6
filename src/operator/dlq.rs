//! `dlq list`, `dlq replay`, `dlq discard` and `dlq bulk-replay`: the dead letters
//! (contract §2.2), a page at a time and by filter, putting one or many back, and setting
//! one aside.
//!
//! ## Discarding
//!
//! A discarded letter stays in the dead-letter stream until its `max_age` takes it — the
//! stream audit reads the dead letters to know which commands were dead-lettered, and the
//! runtime NATS user may not delete messages — but it is recorded in `dead_letter_discards`
//! with who, when and why (and audited in the same transaction), listings leave it out unless
//! asked, and a replay of it is refused.
//!
//! ## Which `Nats-Msg-Id` a replay carries
//!
//! A dead-lettered message was never recorded as processed (contract §1.4), so its original
//! message id is free in the dedupe table — *for that body*:
//! - **Unchanged body**: the replay reuses the original `Nats-Msg-Id`. It is the same message,
//!   so it must dedupe like one: if a producer retry of it was recorded meanwhile, the replay
//!   is a harmless `duplicate`; if the id was recorded with another body (a `conflict`
//!   dead letter), the replay is that conflict again, never a charge.
//! - **Corrected body**: the replay gets a new id, `<original>-replay-<dlq sequence>`. The
//!   original id may be recorded with another body (then the corrected command would be
//!   dead-lettered as a reused id), and the new id is still deterministic, so replaying the
//!   same dead letter twice is recognised as a duplicate.
//! - A dead letter that had no message id at all gets `dlq-replay-<dlq sequence>`.
//!
//! In both cases the attempts table still decides: a replayed command for an attempt that
//! exists is a business duplicate (same parameters) or a conflict, never a second charge.
//!
//! The replay keeps the original headers (`Correlation-Id`, `traceparent`, …) minus the
//! `Dlq-*` ones and the dead letter's own `Nats-*` ones, and adds
//! `Replayed-From-Dlq-Sequence` and `Replayed-By`, so the command's origin is visible on the
//! stream.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::header::{HeaderName, NATS_MESSAGE_ID};
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::HeaderMap;
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::page::Page;
use crate::broker::{producer_headers, Broker, CommandKind};
use crate::config::UsageError;
use crate::domain::command::{self, CommandHeaders, MAX_MESSAGE_ID_CHARS};
use crate::domain::{refund, Actor, PaymentAttemptId};
use crate::format;
use crate::store::audit::{self, AuditAction, NewAuditEntry, Via};
use crate::store::dead_letters::{self, Discard};
use crate::store::Store;

/// A replay JetStream dropped as a duplicate of a message it holds (within its duplicate
/// window): nothing new was published. A refusal the operator can read, not a failure: a
/// face answers it as a conflict, with this message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DuplicateReplay(String);

/// The replay was published (JetStream acknowledged it) but its audit row could not be
/// written: the dead letter must not be replayed again. A face says that much; the cause
/// (`source`, a database error) belongs in the log.
#[derive(Debug, thiserror::Error)]
#[error(
    "dead letter {dlq_sequence} WAS replayed (stream sequence {stream_sequence}, Nats-Msg-Id {message_id}) but its audit row could not be written"
)]
pub struct ReplayNotAudited {
    pub dlq_sequence: u64,
    pub stream_sequence: u64,
    pub message_id: String,
    #[source]
    source: sqlx::Error,
}

/// One dead letter as `dlq list` shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DeadLetter {
    /// Its sequence in the dead-letter stream: what `dlq replay` takes.
    pub sequence: u64,
    /// When it was dead-lettered.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub time: OffsetDateTime,
    /// The command family, from the dead-letter subject.
    pub kind: Option<LetterKind>,
    /// `invalid`, `conflict` or `exhausted`.
    pub class: Option<String>,
    pub reason: Option<String>,
    /// The command's `Nats-Msg-Id`, when it had one.
    pub original_msg_id: Option<String>,
    pub original_subject: Option<String>,
    /// The command's sequence in the command stream.
    pub original_stream_sequence: Option<u64>,
    /// How often the command had been delivered when it was dead-lettered.
    pub delivery_count: Option<u64>,
    pub consumer: Option<String>,
    pub correlation_id: Option<String>,
    /// Read from the body when it is JSON with that field (absent for unreadable bodies).
    pub payment_attempt_id: Option<String>,
    /// The original body (lossy UTF-8).
    pub body: String,
    /// Who set it aside, when and why; absent while it awaits a decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discarded: Option<Discard>,
}

/// A dead letter's class, as its `Dlq-Class` header names it (contract §2.2).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LetterClass {
    Invalid,
    Conflict,
    Exhausted,
}

impl LetterClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::Conflict => "conflict",
            Self::Exhausted => "exhausted",
        }
    }
}

/// The command family a dead letter came from: its dead-letter subject says which.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LetterKind {
    Charge,
    Refund,
}

impl From<CommandKind> for LetterKind {
    fn from(kind: CommandKind) -> Self {
        match kind {
            CommandKind::Charge => Self::Charge,
            CommandKind::Refund => Self::Refund,
        }
    }
}

/// Which dead letters: the filter `dlq list`, `GET /api/dlq` and the bulk replay share (one
/// type, so a filter added to one is a filter of each). Times are RFC 3339.
#[derive(
    Debug, Clone, Default, PartialEq, Deserialize, Serialize, clap::Args, utoipa::ToSchema,
)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterFilter {
    /// Only letters of this class
    #[serde(default)]
    #[arg(long)]
    pub class: Option<LetterClass>,
    /// Only letters of this kind of command
    #[serde(default)]
    #[arg(long)]
    pub kind: Option<LetterKind>,
    /// Only letters dead-lettered at or after this time (RFC 3339)
    #[serde(default, with = "time::serde::rfc3339::option")]
    #[arg(long, value_name = "TIME", value_parser = super::parse_time)]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub since: Option<OffsetDateTime>,
    /// Only letters dead-lettered before this time (RFC 3339)
    #[serde(default, with = "time::serde::rfc3339::option")]
    #[arg(long, value_name = "TIME", value_parser = super::parse_time)]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub until: Option<OffsetDateTime>,
}

impl DeadLetterFilter {
    /// Whether `letter` is one of these.
    pub fn matches(&self, letter: &DeadLetter) -> bool {
        self.class
            .is_none_or(|class| letter.class.as_deref() == Some(class.as_str()))
            && self.kind.is_none_or(|kind| letter.kind == Some(kind))
            && self.since.is_none_or(|since| letter.time >= since)
            && self.until.is_none_or(|until| letter.time < until)
    }
}

/// One page of dead letters, oldest first: the next is `after` (`--after`) the sequence of
/// its last letter, when the stream holds letters past it.
pub type DeadLetterPage = Page<DeadLetter, u64>;

/// How many sequences one read of the stream asks for at once.
const READ_CHUNK: u64 = 64;

/// The dead letters after sequence `after` (from the first when `None`), oldest first, that
/// `filter` matches — the discarded ones only with `include_discarded` — at most `limit`
/// (`None`: every one). A page reads only as far into the stream as it must.
pub async fn page_dead_letters(
    broker: &Broker,
    store: &Store,
    filter: &DeadLetterFilter,
    include_discarded: bool,
    after: Option<u64>,
    limit: Option<usize>,
) -> anyhow::Result<DeadLetterPage> {
    let name = broker.names.dlq_stream();
    let mut stream = broker
        .jetstream
        .get_stream(&name)
        .await
        .with_context(|| format!("reading stream {name}: is `onecharge setup` done?"))?;
    let state = stream
        .info()
        .await
        .with_context(|| format!("reading stream {name}"))?
        .state
        .clone();
    let mut letters = Vec::new();
    if state.messages == 0 {
        return Ok(Page {
            items: letters,
            next: None,
        });
    }
    let last = state.last_sequence;
    let mut from = state
        .first_sequence
        .max(after.map_or(0, |a| a.saturating_add(1)));
    while from <= last {
        let through = last.min(from + READ_CHUNK - 1);
        let read = read_range(broker, &stream, &name, from, through).await?;
        let sequences: Vec<u64> = read.iter().map(|l| l.sequence).collect();
        let mut discards = dead_letters::discards(store, &name, &sequences)
            .await
            .context("reading the discarded dead letters")?;
        for mut letter in read {
            letter.discarded = discards.remove(&letter.sequence);
            if (letter.discarded.is_some() && !include_discarded) || !filter.matches(&letter) {
                continue;
            }
            let sequence = letter.sequence;
            letters.push(letter);
            if limit.is_some_and(|limit| letters.len() >= limit) {
                return Ok(Page {
                    items: letters,
                    next: (sequence < last).then_some(sequence),
                });
            }
        }
        from = through + 1;
    }
    Ok(Page {
        items: letters,
        next: None,
    })
}

/// Every dead letter the dead-letter stream still holds and no one discarded, oldest first.
pub async fn list_dead_letters(broker: &Broker, store: &Store) -> anyhow::Result<Vec<DeadLetter>> {
    Ok(page_dead_letters(
        broker,
        store,
        &DeadLetterFilter::default(),
        false,
        None,
        None,
    )
    .await?
    .items)
}

/// Dead letter `sequence` as listings show it (discarded or not), or `None` when the stream
/// does not hold it.
pub async fn find_dead_letter(
    broker: &Broker,
    store: &Store,
    sequence: u64,
) -> anyhow::Result<Option<DeadLetter>> {
    let name = broker.names.dlq_stream();
    let stream = broker
        .jetstream
        .get_stream(&name)
        .await
        .with_context(|| format!("reading stream {name}: is `onecharge setup` done?"))?;
    let Some(mut letter) = read_range(broker, &stream, &name, sequence, sequence)
        .await?
        .pop()
    else {
        return Ok(None);
    };
    letter.discarded = dead_letters::discards(store, &name, &[sequence])
        .await
        .context("reading the discarded dead letters")?
        .remove(&sequence);
    Ok(Some(letter))
}

/// The letters at `from..=through`, skipping sequences the stream no longer holds.
async fn read_range(
    broker: &Broker,
    stream: &async_nats::jetstream::stream::Stream,
    name: &str,
    from: u64,
    through: u64,
) -> anyhow::Result<Vec<DeadLetter>> {
    let letters: Vec<Option<DeadLetter>> = futures::stream::iter(from..=through)
        .map(|sequence| async move {
            match stream.get_raw_message(sequence).await {
                Ok(message) => Ok(Some(dead_letter(broker, &message))),
                // Deleted or aged out between the info and the read: nothing to show.
                Err(err) if err.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
                Err(err) => Err(anyhow::Error::new(err)
                    .context(format!("reading dead letter {sequence} of {name}"))),
            }
        })
        .buffered(32)
        .collect::<Vec<anyhow::Result<Option<DeadLetter>>>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    Ok(letters.into_iter().flatten().collect())
}

fn dead_letter(
    broker: &Broker,
    message: &async_nats::jetstream::message::StreamMessage,
) -> DeadLetter {
    let header = |name: &str| message.headers.get(name).map(|v| v.as_str().to_owned());
    let number = |name: &str| header(name).and_then(|v| v.parse().ok());
    DeadLetter {
        sequence: message.sequence,
        time: message.time,
        kind: broker
            .names
            .kind_of_dead_letter(message.subject.as_str())
            .map(LetterKind::from),
        class: header("Dlq-Class"),
        reason: header("Dlq-Reason"),
        original_msg_id: header("Dlq-Original-Msg-Id"),
        original_subject: header("Dlq-Original-Subject"),
        original_stream_sequence: number("Dlq-Stream-Sequence"),
        delivery_count: number("Dlq-Delivery-Count"),
        consumer: header("Dlq-Consumer"),
        correlation_id: header("Correlation-Id"),
        payment_attempt_id: serde_json::from_slice::<serde_json::Value>(&message.payload)
            .ok()
            .and_then(|body| body.get("payment_attempt_id")?.as_str().map(str::to_owned)),
        body: String::from_utf8_lossy(&message.payload).into_owned(),
        discarded: None,
    }
}

/// A discard refused because the letter is discarded already: nothing was written. A face
/// answers it as a conflict.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AlreadyDiscarded(String);

/// No dead letter at that sequence: a face answers 404.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoSuchDeadLetter(String);

/// What a discard recorded.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Discarded {
    pub dlq_sequence: u64,
    #[serde(flatten)]
    pub discard: Discard,
}

/// Sets dead letter `sequence` aside for `reason` (required: the trail must say why a
/// command was given up), recorded and audited in one transaction. Refused, with nothing
/// written, when the stream does not hold it or it was discarded before.
pub async fn discard(
    broker: &Broker,
    store: &Store,
    sequence: u64,
    actor: &Actor,
    via: Via,
    reason: &str,
) -> anyhow::Result<Discarded> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(UsageError(
            "a discard needs a reason (--reason): the audit trail says why a command was given up; nothing was discarded".into(),
        )
        .into());
    }
    let Some(letter) = find_dead_letter(broker, store, sequence).await? else {
        return Err(NoSuchDeadLetter(format!(
            "no dead letter with sequence {sequence} in {} (`onecharge dlq list` shows what there is); nothing was discarded",
            broker.names.dlq_stream()
        ))
        .into());
    };
    if let Some(before) = &letter.discarded {
        return Err(already_discarded(sequence, before, "nothing was done").into());
    }
    let stream = broker.names.dlq_stream();
    let mut tx = store.pool().begin().await?;
    if !dead_letters::insert_discard(&mut tx, &stream, sequence, actor, reason).await? {
        return Err(AlreadyDiscarded(format!(
            "dead letter {sequence} was discarded meanwhile; nothing was discarded"
        ))
        .into());
    }
    let payment_attempt_ids: Vec<PaymentAttemptId> = letter
        .payment_attempt_id
        .as_deref()
        .and_then(|id| id.parse().ok())
        .into_iter()
        .collect();
    audit::insert(
        &mut tx,
        &NewAuditEntry {
            actor: actor.to_owned(),
            via,
            action: AuditAction::DlqDiscard,
            payment_attempt_ids,
            dlq_sequence: Some(sequence),
            reason: Some(reason.to_owned()),
            outcome: "discarded",
            detail: serde_json::json!({
                "stream": stream,
                "class": letter.class,
                "dlq_reason": letter.reason,
                "original_msg_id": letter.original_msg_id,
                "original_subject": letter.original_subject,
                "original_stream_sequence": letter.original_stream_sequence,
            }),
        },
    )
    .await?;
    tx.commit().await?;
    let discard = dead_letters::discards(store, &stream, &[sequence])
        .await?
        .remove(&sequence)
        .context("the discard just committed is not there")?;
    tracing::info!(dlq_sequence = sequence, actor = %actor, "dead letter discarded");
    Ok(Discarded {
        dlq_sequence: sequence,
        discard,
    })
}

fn already_discarded(sequence: u64, before: &Discard, so: &str) -> AlreadyDiscarded {
    AlreadyDiscarded(format!(
        "dead letter {sequence} was discarded by {} at {} ({}): {so}",
        before.actor,
        format::at(before.discarded_at),
        before.reason
    ))
}

/// The most dead letters one bulk replay publishes; a larger set is refused whole (narrow
/// the filter), as the attempts' bulk actions are.
pub const BULK_REPLAY_CAP: usize = super::bulk::BULK_CAP;

/// A bulk replay as the CLI or the API received it (`POST /api/dlq/bulk-replay`).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkReplayRequest {
    /// Which letters (never discarded ones)
    #[serde(default)]
    pub filter: DeadLetterFilter,
    /// Why: recorded in the audit trail, on each replay and on the bulk action
    pub reason: String,
    /// Count and list, publish nothing
    #[serde(default)]
    pub preview: bool,
    /// Refuse when more than this many match (at most 500): the caller's expectation from a
    /// preview
    #[serde(default)]
    pub max: Option<usize>,
    /// Replay only these (a preview's `sequences`), those of them the filter still matches
    #[serde(default)]
    pub sequences: Option<Vec<u64>>,
}

/// What happened to one letter of a bulk replay.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BulkReplayItem {
    pub dlq_sequence: u64,
    /// `replayed`, `refused` (not a valid command, or JetStream's duplicate), `failed`.
    pub outcome: String,
    pub detail: String,
}

/// What a bulk replay came to.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BulkReplayOutcome {
    pub preview: bool,
    /// How many letters the filter matched (among the request's `sequences`, when given).
    pub matched: usize,
    /// Their sequences, oldest first: what a confirmation passes back.
    pub sequences: Vec<u64>,
    /// Each letter's outcome (empty for a preview).
    pub items: Vec<BulkReplayItem>,
}

/// Replays every dead letter `request.filter` matches, each through [`replay`] (its own
/// checks and audit row), then audits the bulk action itself with its filter and every
/// letter's outcome. A preview publishes nothing. More than `max` (or
/// [`BULK_REPLAY_CAP`]) matching letters is refused whole, never cut.
pub async fn bulk_replay(
    broker: &Broker,
    store: &Store,
    request: &BulkReplayRequest,
    actor: &Actor,
    via: Via,
) -> anyhow::Result<BulkReplayOutcome> {
    let reason = request.reason.trim();
    if reason.is_empty() {
        return Err(UsageError(
            "a bulk replay needs a reason: the audit trail says why; nothing was published".into(),
        )
        .into());
    }
    let cap = request.max.unwrap_or(BULK_REPLAY_CAP).min(BULK_REPLAY_CAP);
    let mut letters = page_dead_letters(broker, store, &request.filter, false, None, None)
        .await?
        .items;
    if let Some(wanted) = &request.sequences {
        letters.retain(|l| wanted.contains(&l.sequence));
    }
    if letters.len() > cap {
        return Err(UsageError(format!(
            "{} dead letters match, more than {cap} (--max, at most {BULK_REPLAY_CAP}): narrow the filter (--class, --kind, --since, --until); nothing was published",
            letters.len()
        ))
        .into());
    }
    let sequences: Vec<u64> = letters.iter().map(|l| l.sequence).collect();
    let mut outcome = BulkReplayOutcome {
        preview: request.preview,
        matched: letters.len(),
        sequences: sequences.clone(),
        items: Vec::new(),
    };
    if request.preview {
        return Ok(outcome);
    }
    for sequence in sequences {
        let item = match replay(broker, store, sequence, None, actor, via, Some(reason)).await {
            Ok(replayed) => BulkReplayItem {
                dlq_sequence: sequence,
                outcome: "replayed".into(),
                detail: format!(
                    "stream sequence {} with Nats-Msg-Id {}",
                    replayed.stream_sequence, replayed.message_id
                ),
            },
            Err(err)
                if err.is::<UsageError>()
                    || err.is::<DuplicateReplay>()
                    || err.is::<AlreadyDiscarded>() =>
            {
                BulkReplayItem {
                    dlq_sequence: sequence,
                    outcome: "refused".into(),
                    detail: err.to_string(),
                }
            }
            Err(err) => BulkReplayItem {
                dlq_sequence: sequence,
                outcome: "failed".into(),
                detail: format!("{err:#}"),
            },
        };
        outcome.items.push(item);
    }
    let payment_attempt_ids: Vec<PaymentAttemptId> = letters
        .iter()
        .filter_map(|l| l.payment_attempt_id.as_deref()?.parse().ok())
        .collect();
    audit::insert_alone(
        store,
        &NewAuditEntry {
            actor: actor.to_owned(),
            via,
            action: AuditAction::DlqBulkReplay,
            payment_attempt_ids,
            dlq_sequence: None,
            reason: Some(reason.to_owned()),
            outcome: if outcome.items.iter().all(|i| i.outcome == "replayed") {
                "published"
            } else {
                "partly_published"
            },
            detail: serde_json::json!({
                "filter": request.filter,
                "matched": outcome.matched,
                "items": outcome.items,
            }),
        },
    )
    .await
    .context("the letters were replayed (each audited) but the bulk action's own audit row could not be written")?;
    Ok(outcome)
}

/// What a replay published.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Replayed {
    pub dlq_sequence: u64,
    pub subject: String,
    pub message_id: String,
    /// Its sequence in the command stream.
    pub stream_sequence: u64,
    /// Whether the body was replaced by the operator's correction.
    pub body_corrected: bool,
    /// The published headers as `[name, value]` pairs
    #[schema(value_type = Vec<Vec<String>>)]
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Replayed {
    /// What was published, for the operator's terminal and the console's answer.
    pub fn render(&self) -> String {
        let mut out = format!(
            "replayed dead letter {} to {} as stream sequence {} with Nats-Msg-Id {} ({})\nheaders:\n",
            self.dlq_sequence,
            self.subject,
            self.stream_sequence,
            self.message_id,
            if self.body_corrected {
                "corrected body: new message id"
            } else {
                "unchanged body: original message id"
            }
        );
        for (name, value) in &self.headers {
            out.push_str(&format!("  {name}: {value}\n"));
        }
        out.push_str("body:\n");
        out.push_str(self.body.trim_end());
        out.push('\n');
        out
    }
}

/// Republishes dead letter `sequence` to the command subject, with `corrected` as its body
/// when given, after checking that the body is a valid command (a replay that would only be
/// dead-lettered again is refused). See the module documentation for the message id.
///
/// Once the broker acknowledged the publish, the replay is audited (`actor`, `via`,
/// `reason`, the dead letter's sequence and the new message id): the publish is not a
/// database write, so the audit row follows it rather than sharing its transaction.
pub async fn replay(
    broker: &Broker,
    store: &Store,
    sequence: u64,
    corrected: Option<Vec<u8>>,
    actor: &Actor,
    via: Via,
    reason: Option<&str>,
) -> anyhow::Result<Replayed> {
    let letter = read_dead_letter(broker, sequence).await?;
    if let Some(before) = dead_letters::discards(store, &broker.names.dlq_stream(), &[sequence])
        .await
        .context("reading the discarded dead letters")?
        .remove(&sequence)
    {
        return Err(already_discarded(
            sequence,
            &before,
            "a discarded letter is not replayed; nothing was published",
        )
        .into());
    }
    let original_id = letter
        .headers
        .get("Dlq-Original-Msg-Id")
        .map(|v| v.as_str().to_owned())
        .filter(|id| !id.is_empty());
    let body_corrected = corrected
        .as_deref()
        .is_some_and(|body| body != letter.payload.as_ref());
    let payload: bytes::Bytes = match corrected {
        Some(body) if body_corrected => body.into(),
        _ => letter.payload.clone(),
    };
    let message_id = replay_message_id(original_id.as_deref(), body_corrected, sequence);
    let (headers, shown) = replay_headers(&letter.headers, &message_id, sequence, actor);
    // A letter goes back to the kind of command it was: its dead-letter subject says which.
    let kind = broker
        .names
        .kind_of_dead_letter(letter.subject.as_str())
        .unwrap_or(CommandKind::Charge);
    check_replayable(
        kind,
        &headers,
        &payload,
        &message_id,
        body_corrected,
        sequence,
    )?;

    let subject = broker.names.command_subject(kind);
    let ack = publish_replay(broker, &subject, headers, payload.clone(), &message_id).await?;
    let replayed = Replayed {
        dlq_sequence: sequence,
        subject,
        message_id,
        stream_sequence: ack.sequence,
        body_corrected,
        headers: shown,
        body: String::from_utf8_lossy(&payload).into_owned(),
    };
    audit_replay(store, &replayed, &payload, actor, via, reason).await?;
    tracing::info!(
        dlq_sequence = sequence,
        message_id = replayed.message_id,
        stream_sequence = ack.sequence,
        actor = %actor,
        body_corrected,
        "dead letter replayed"
    );
    Ok(replayed)
}

/// Dead letter `sequence`, or the one line saying why it cannot be read (nothing was
/// published).
async fn read_dead_letter(
    broker: &Broker,
    sequence: u64,
) -> anyhow::Result<async_nats::jetstream::message::StreamMessage> {
    let dlq = broker.names.dlq_stream();
    let stream = match broker.jetstream.get_stream(&dlq).await {
        Ok(stream) => stream,
        Err(err) if stream_not_found(&err) => anyhow::bail!(
            "stream {dlq} does not exist: run `onecharge setup` (or check ONECHARGE_NAMESPACE); nothing was published"
        ),
        Err(err) => anyhow::bail!("cannot read stream {dlq}: {err}; nothing was published"),
    };
    match stream.get_raw_message(sequence).await {
        Ok(message) => Ok(message),
        Err(err) if err.kind() == LastRawMessageErrorKind::NoMessageFound => anyhow::bail!(
            "no dead letter with sequence {sequence} in {dlq} (`onecharge dlq list` shows what there is)"
        ),
        Err(err) => anyhow::bail!("cannot read dead letter {sequence} of {dlq}: {err}; nothing was published"),
    }
}

/// The replay's headers (see the module documentation), and the same as (name, value)
/// pairs to show: ours first, then the kept ones sorted.
fn replay_headers(
    original: &HeaderMap,
    message_id: &str,
    sequence: u64,
    actor: &Actor,
) -> (HeaderMap, Vec<(String, String)>) {
    let mut headers = producer_headers(original);
    let mut shown: Vec<(String, String)> = headers
        .iter()
        .flat_map(|(name, values)| {
            values
                .iter()
                .map(move |value| (name.to_string(), value.as_str().to_owned()))
        })
        .collect();
    let ours = [
        (NATS_MESSAGE_ID, message_id.to_owned()),
        (
            HeaderName::from_static("Replayed-From-Dlq-Sequence"),
            sequence.to_string(),
        ),
        (HeaderName::from_static("Replayed-By"), actor.to_string()),
    ];
    for (name, value) in &ours {
        headers.insert(name.clone(), value.as_str());
    }
    shown.sort();
    shown.splice(0..0, ours.iter().map(|(n, v)| (n.to_string(), v.clone())));
    (headers, shown)
}

/// Refuses a replay that would only be dead-lettered again: a body with a NUL, or one that
/// is not a valid command of `kind` under these headers.
fn check_replayable(
    kind: CommandKind,
    headers: &HeaderMap,
    payload: &[u8],
    message_id: &str,
    body_corrected: bool,
    sequence: u64,
) -> Result<(), UsageError> {
    let command_headers = CommandHeaders {
        message_id: Some(message_id.to_owned()),
        correlation_id: headers.get("Correlation-Id").map(|v| v.as_str().to_owned()),
        traceparent: headers.get("traceparent").map(|v| v.as_str().to_owned()),
    };
    if holds_nul(payload) {
        return Err(UsageError(format!(
            "the {} body holds a NUL character, which PostgreSQL cannot store: remove it; nothing was published",
            if body_corrected { "corrected" } else { "dead letter's" }
        )));
    }
    let validated = match kind {
        CommandKind::Charge => command::validate(&command_headers, payload).map(|_| ()),
        CommandKind::Refund => refund::validate(&command_headers, payload).map(|_| ()),
    };
    if let Err(invalid) = validated {
        return Err(UsageError(if body_corrected {
            format!("the corrected body is not a valid command: {invalid}; nothing was published")
        } else {
            format!(
                "dead letter {sequence} is still not a valid command ({invalid}): write a corrected body to a file and pass --body-file; nothing was published"
            )
        }));
    }
    Ok(())
}

/// Publishes the replay to `subject`; a publish JetStream dropped as a duplicate is an
/// error saying why (nothing new was published).
async fn publish_replay(
    broker: &Broker,
    subject: &str,
    headers: HeaderMap,
    payload: bytes::Bytes,
    message_id: &str,
) -> anyhow::Result<async_nats::jetstream::publish::PublishAck> {
    let published = broker
        .publish_retrying(
            crate::broker::PublishKind::Replay,
            subject.to_owned(),
            headers,
            payload,
            None,
        )
        .await;
    let ack = published.map_err(|err| publish_failure(&err, subject, message_id))?;
    if ack.duplicate {
        let window = duplicate_window(broker).await;
        return Err(DuplicateReplay(format!(
            "JetStream dropped the replay as a duplicate: a message with Nats-Msg-Id {message_id} reached {} less than its duplicate window ({}) ago — this dead letter was just replayed, or its original was published moments ago; nothing new was published",
            ack.stream,
            window.map(format::setting).unwrap_or_else(|| "unknown".into())
        ))
        .into());
    }
    Ok(ack)
}

/// The replay's audit row, written once JetStream acknowledged the publish.
async fn audit_replay(
    store: &Store,
    replayed: &Replayed,
    payload: &[u8],
    actor: &Actor,
    via: Via,
    reason: Option<&str>,
) -> anyhow::Result<()> {
    let payment_attempt_ids: Vec<PaymentAttemptId> =
        serde_json::from_slice::<serde_json::Value>(payload)
            .ok()
            .and_then(|body| body.get("payment_attempt_id")?.as_str()?.parse().ok())
            .into_iter()
            .collect();
    let (sequence, message_id) = (replayed.dlq_sequence, &replayed.message_id);
    audit::insert_alone(
        store,
        &NewAuditEntry {
            actor: actor.to_owned(),
            via,
            action: AuditAction::DlqReplay,
            payment_attempt_ids,
            dlq_sequence: Some(sequence),
            reason: reason.map(str::to_owned),
            outcome: "published",
            detail: serde_json::json!({
                "subject": replayed.subject,
                "message_id": message_id,
                "stream_sequence": replayed.stream_sequence,
                "body_corrected": replayed.body_corrected,
            }),
        },
    )
    .await
    .map_err(|source| ReplayNotAudited {
        dlq_sequence: sequence,
        stream_sequence: replayed.stream_sequence,
        message_id: message_id.clone(),
        source,
    })?;
    Ok(())
}

/// Reads a `--body-file`, refusing one larger than a command may be (contract §2.1) without
/// reading more than that: an operator pointing at the wrong, huge file gets one line, not
/// an exhausted memory.
pub fn read_body_file(path: &std::path::Path) -> Result<Vec<u8>, UsageError> {
    use std::io::Read as _;
    let fail = |e: std::io::Error| UsageError(format!("--body-file {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(fail)?;
    let mut body = Vec::new();
    file.take(command::MAX_BODY_BYTES as u64 + 1)
        .read_to_end(&mut body)
        .map_err(fail)?;
    if body.len() > command::MAX_BODY_BYTES {
        return Err(UsageError(format!(
            "--body-file {} is larger than the {} bytes a command body may have; nothing was published",
            path.display(),
            command::MAX_BODY_BYTES
        )));
    }
    Ok(body)
}

/// Whether a body holds a NUL, raw or as a JSON `\u0000` escape in any string: valid JSON
/// that PostgreSQL refuses to store (it would only be dead-lettered again).
fn holds_nul(body: &[u8]) -> bool {
    fn any_nul(value: &serde_json::Value) -> bool {
        match value {
            serde_json::Value::String(s) => s.contains('\0'),
            serde_json::Value::Array(items) => items.iter().any(any_nul),
            serde_json::Value::Object(fields) => fields
                .iter()
                .any(|(name, value)| name.contains('\0') || any_nul(value)),
            _ => false,
        }
    }
    body.contains(&0)
        || serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|value| any_nul(&value))
}

fn stream_not_found(err: &async_nats::jetstream::context::GetStreamError) -> bool {
    use async_nats::jetstream::context::GetStreamErrorKind;
    matches!(err.kind(), GetStreamErrorKind::JetStream(e)
        if e.error_code() == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND)
}

/// One line saying what a failed replay publish means for the operator.
fn publish_failure(
    err: &async_nats::jetstream::context::PublishError,
    subject: &str,
    message_id: &str,
) -> anyhow::Error {
    use async_nats::jetstream::context::PublishErrorKind;
    match err.kind() {
        PublishErrorKind::StreamNotFound => anyhow::anyhow!(
            "no stream stores {subject}: run `onecharge setup` (or check ONECHARGE_NAMESPACE); nothing was published"
        ),
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe => anyhow::anyhow!(
            "JetStream did not confirm the replay on {subject} ({err}): it may or may not be stored; run the same `dlq replay` again — its Nats-Msg-Id {message_id} makes a second copy a duplicate"
        ),
        _ => anyhow::anyhow!("JetStream refused the replay on {subject}: {err}; nothing was published"),
    }
}

/// The `Nats-Msg-Id` of a replay (see the module documentation).
pub fn replay_message_id(
    original: Option<&str>,
    body_corrected: bool,
    dlq_sequence: u64,
) -> String {
    match (original, body_corrected) {
        (Some(original), false) => original.to_owned(),
        (Some(original), true) => {
            let suffix = format!("-replay-{dlq_sequence}");
            let keep = MAX_MESSAGE_ID_CHARS - suffix.len();
            let head: String = original.chars().take(keep).collect();
            format!("{head}{suffix}")
        }
        (None, _) => format!("dlq-replay-{dlq_sequence}"),
    }
}

async fn duplicate_window(broker: &Broker) -> Option<Duration> {
    let stream = broker
        .jetstream
        .get_stream(broker.names.commands_stream())
        .await
        .ok()?;
    Some(stream.cached_info().config.duplicate_window)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_body_keeps_its_message_id_and_a_corrected_one_gets_a_new_stable_id() {
        assert_eq!(replay_message_id(Some("m-1"), false, 7), "m-1");
        assert_eq!(replay_message_id(Some("m-1"), true, 7), "m-1-replay-7");
        assert_eq!(replay_message_id(None, true, 7), "dlq-replay-7");
        assert_eq!(replay_message_id(None, false, 7), "dlq-replay-7");
        let long = "x".repeat(200);
        let id = replay_message_id(Some(&long), true, 12);
        assert_eq!(id.chars().count(), 200);
        assert!(id.ends_with("-replay-12"));
    }
}
