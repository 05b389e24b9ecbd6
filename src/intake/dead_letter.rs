//! Dead-lettering (contract §2.2): the original body and headers, plus why, republished to
//! the dead-letter stream under an id that makes a retried publish a no-op.

use anyhow::Context as _;
use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream;
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::HeaderMap;

use crate::broker::{Broker, PublishKind};
use crate::domain::bounded;

/// Why a message was dead-lettered; `Dlq-Class` on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DlqClass {
    /// The message can never be a valid command.
    Invalid,
    /// It contradicts what was recorded before (reused message id, or attempt id with
    /// other parameters).
    Conflict,
    /// It failed transiently on its last allowed delivery.
    Exhausted,
}

impl DlqClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::Conflict => "conflict",
            Self::Exhausted => "exhausted",
        }
    }
}

/// The most a `Dlq-Reason` may hold.
pub const MAX_REASON_CHARS: usize = 512;

/// Publishes the dead letter and waits for JetStream's acknowledgement. Only after this
/// returns `Ok` may the original be terminated.
pub async fn publish(
    broker: &Broker,
    consumer: &str,
    message: &jetstream::Message,
    class: DlqClass,
    reason: &str,
) -> anyhow::Result<()> {
    let info = message
        .info()
        .map_err(|e| anyhow::anyhow!("message has no JetStream metadata: {e}"))?;
    let mut headers = message.headers.clone().unwrap_or_default();
    let original_id = headers.get(NATS_MESSAGE_ID).map(|v| v.as_str().to_owned());
    let mut set = |name: &str, value: String| {
        // A header value must be one line.
        headers.insert(name, value.replace(['\r', '\n'], " ").as_str());
    };
    set(
        NATS_MESSAGE_ID.as_ref(),
        format!("dlq-{consumer}-{}", info.stream_sequence),
    );
    set("Dlq-Reason", bounded(reason, MAX_REASON_CHARS));
    set("Dlq-Class", class.as_str().to_owned());
    set("Dlq-Original-Subject", message.subject.to_string());
    set("Dlq-Stream-Sequence", info.stream_sequence.to_string());
    set("Dlq-Delivery-Count", info.delivered.to_string());
    set("Dlq-Consumer", consumer.to_owned());
    if let Some(id) = original_id {
        set("Dlq-Original-Msg-Id", id);
    }
    let subject = broker.names.dlq_subject();
    match try_publish(broker, &subject, headers.clone(), message.payload.clone()).await {
        Err(err) if too_large(&err) => {
            // Stored truncated rather than never: the reason, the ids and the sequence in
            // the command stream (where the whole body still is) are what an operator needs.
            let limit = size_limit(broker).await;
            let original_size = message.payload.len();
            headers.insert("Dlq-Truncated", "true");
            headers.insert("Dlq-Original-Size", original_size.to_string().as_str());
            let keep = limit
                .saturating_sub(header_bytes(&headers))
                .saturating_sub(TRUNCATION_MARGIN)
                .min(original_size);
            tracing::warn!(
                original_size,
                kept = keep,
                limit,
                "dead letter larger than the dead-letter stream takes; storing it truncated"
            );
            try_publish(broker, &subject, headers, message.payload.slice(..keep))
                .await
                .with_context(|| format!("publishing the truncated dead letter to {subject}"))
        }
        other => other.with_context(|| format!("publishing the dead letter to {subject}")),
    }
}

/// Room left for what the size arithmetic below does not see (the server's own accounting).
const TRUNCATION_MARGIN: usize = 64;

/// Whether JetStream (or the client, against the server's `max_payload`) refused the message
/// for its size.
fn too_large(err: &PublishError) -> bool {
    match err.kind() {
        PublishErrorKind::MaxPayloadExceeded => true,
        PublishErrorKind::Other => std::error::Error::source(err)
            .and_then(|source| source.downcast_ref::<jetstream::Error>())
            .is_some_and(|e| {
                e.error_code() == jetstream::ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM
            }),
        _ => false,
    }
}

/// The most one message may hold: the dead-letter stream's `max_msg_size` when it has one,
/// and never more than the server's `max_payload`.
async fn size_limit(broker: &Broker) -> usize {
    let max_payload = broker.client.server_info().max_payload;
    let stream_limit = match broker.jetstream.get_stream(broker.names.dlq_stream()).await {
        Ok(stream) => usize::try_from(stream.cached_info().config.max_message_size).ok(),
        Err(_) => None,
    };
    stream_limit
        .filter(|&limit| limit > 0)
        .map_or(max_payload, |limit| limit.min(max_payload))
}

/// The size of the header block on the wire (`NATS/1.0\r\n`, `Name: value\r\n` each, `\r\n`),
/// which counts against the same limit as the body.
fn header_bytes(headers: &HeaderMap) -> usize {
    let lines: usize = headers
        .iter()
        .map(|(name, values)| {
            values
                .iter()
                .map(|value| name.to_string().len() + 2 + value.as_str().len() + 2)
                .sum::<usize>()
        })
        .sum();
    "NATS/1.0\r\n".len() + lines + 2
}

async fn try_publish(
    broker: &Broker,
    subject: &str,
    headers: HeaderMap,
    payload: bytes::Bytes,
) -> Result<(), PublishError> {
    broker
        .publish_retrying(
            PublishKind::DeadLetter,
            subject.to_owned(),
            headers,
            payload,
            None,
        )
        .await?;
    Ok(())
}
