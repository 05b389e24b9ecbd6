//! Dead-lettering (contract §2.2): the original body and headers, plus why, republished to
//! the dead-letter stream under an id that makes a retried publish a no-op.

use anyhow::Context as _;
use async_nats::jetstream;
use async_nats::HeaderMap;

use crate::broker::Broker;
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
    let original_id = headers.get("Nats-Msg-Id").map(|v| v.as_str().to_owned());
    let mut set = |name: &str, value: String| {
        // A header value must be one line.
        headers.insert(name, value.replace(['\r', '\n'], " ").as_str());
    };
    set(
        "Nats-Msg-Id",
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
    publish_acked(
        broker,
        broker.names.dlq_subject(),
        headers,
        message.payload.clone(),
    )
    .await
}

/// Publishes and waits for the stream's acknowledgement.
pub(crate) async fn publish_acked(
    broker: &Broker,
    subject: String,
    headers: HeaderMap,
    payload: bytes::Bytes,
) -> anyhow::Result<()> {
    broker
        .jetstream
        .publish_with_headers(subject.clone(), headers, payload)
        .await
        .with_context(|| format!("publishing to {subject}"))?
        .await
        .with_context(|| format!("waiting for JetStream to store the message on {subject}"))?;
    Ok(())
}
