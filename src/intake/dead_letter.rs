//! Dead-lettering (contract §2.2): the original body and headers, plus why, republished to
//! the dead-letter stream under an id that makes a retried publish a no-op.

use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream;
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::HeaderMap;

use crate::broker::{producer_headers, publish_refused_for_good, Broker, PublishKind};
use crate::domain::bounded;

/// Why a message was dead-lettered; `Dlq-Class` on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
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
pub const MAX_REASON_CHARS: usize = MAX_REASON_CHARS_U32 as usize;
const MAX_REASON_CHARS_U32: u32 = 512;

/// The headers a dead letter carries on top of the original's (contract §2.2), one field
/// each. `publish` writes exactly these, and they are the published JSON Schema
/// `docs/schemas/dead-letter-headers.v1.json` (`crate::documents::schemas`), so the two cannot drift.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
#[schemars(
    title = "Dead-letter headers v1",
    description = "The headers of a dead letter on payments.dlq.charge-payment.v1 (contract §2.2), as name -> value. The body is the original command's, unchanged (or cut short, with Dlq-Truncated), and the original's headers (Correlation-Id, traceparent, ...) are kept beside these.",
    extend("additionalProperties" = {"type": "string"}),
    transform = crate::domain::json_schema::headers_are_strings
)]
pub struct DeadLetterHeaders {
    /// `dlq-<consumer>-<stream sequence>`: a retried dead-letter publish is deduplicated,
    /// and two dead letters never collapse into one.
    #[serde(rename = "Nats-Msg-Id")]
    #[schemars(regex(pattern = r"^dlq-.+-[0-9]+$"))]
    pub message_id: String,
    /// Why the message can never be processed, or why it was given up.
    #[serde(rename = "Dlq-Reason")]
    #[schemars(length(min = 1, max = MAX_REASON_CHARS_U32))]
    pub reason: String,
    #[serde(rename = "Dlq-Class")]
    pub class: DlqClass,
    /// The subject the command was published to.
    #[serde(rename = "Dlq-Original-Subject")]
    pub original_subject: String,
    /// The command's sequence in the command stream, where its whole body still is.
    #[serde(rename = "Dlq-Stream-Sequence", serialize_with = "as_text")]
    #[schemars(with = "String", regex(pattern = "^[0-9]+$"))]
    pub stream_sequence: u64,
    /// How many times the command was delivered to intake.
    #[serde(rename = "Dlq-Delivery-Count", serialize_with = "as_text")]
    #[schemars(with = "String", regex(pattern = "^[0-9]+$"))]
    pub delivery_count: u64,
    /// The durable consumer that gave it up.
    #[serde(rename = "Dlq-Consumer")]
    pub consumer: String,
    /// The command's own `Nats-Msg-Id`, when it had one.
    #[serde(
        rename = "Dlq-Original-Msg-Id",
        skip_serializing_if = "Option::is_none"
    )]
    pub original_message_id: Option<String>,
    /// `true` when the body was cut short to fit the dead-letter stream.
    #[serde(rename = "Dlq-Truncated", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>", extend("const" = "true"))]
    pub truncated: Option<&'static str>,
    /// The original body's size in bytes, when it was cut short.
    #[serde(
        rename = "Dlq-Original-Size",
        skip_serializing_if = "Option::is_none",
        serialize_with = "option_as_text"
    )]
    #[schemars(with = "Option<String>", regex(pattern = "^[0-9]+$"))]
    pub original_size: Option<usize>,
}

impl DeadLetterHeaders {
    /// Sets these headers on `headers` (replacing any of the same name), each one line.
    fn write_into(&self, headers: &mut HeaderMap) {
        let serde_json::Value::Object(fields) =
            serde_json::to_value(self).expect("headers serialise as an object")
        else {
            unreachable!("a struct serialises as an object")
        };
        for (name, value) in fields {
            let value = value.as_str().map(str::to_owned).unwrap_or_default();
            // A header value must be one line.
            headers.insert(name.as_str(), value.replace(['\r', '\n'], " ").as_str());
        }
    }
}

fn as_text<S: serde::Serializer>(value: &u64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

fn option_as_text<S: serde::Serializer>(
    value: &Option<usize>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serializer.collect_str(value),
        None => serializer.serialize_none(),
    }
}

/// Why a dead letter was not stored: what intake does next depends on it.
#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    /// The dead-letter stream refused this letter, and would refuse it on every try: its
    /// headers alone are larger than the stream takes, or JetStream refused it for something
    /// it carries. Intake terminates the command, which stays in the command stream where
    /// the stream audit names it; keeping it would hold a delivery slot for ever.
    #[error("the dead-letter stream refuses this message for good: {0:#}")]
    Refused(anyhow::Error),
    /// Not stored this time (no answer, no dead-letter stream, an election): the delivery is
    /// Nak'd and the next one tries again.
    #[error("{0:#}")]
    NotStored(anyhow::Error),
}

/// Publishes the dead letter and waits for JetStream's acknowledgement. Only after this
/// returns `Ok` may the original be terminated. The letter carries the producer's own
/// headers ([`crate::broker::producer_headers`]), never the command's NATS control headers.
pub async fn publish(
    broker: &Broker,
    consumer: &str,
    subject: &str,
    message: &jetstream::Message,
    class: DlqClass,
    reason: &str,
) -> Result<(), DeadLetterError> {
    let info = message.info().map_err(|e| {
        DeadLetterError::NotStored(anyhow::anyhow!("message has no JetStream metadata: {e}"))
    })?;
    let original = message.headers.clone().unwrap_or_default();
    let mut headers = producer_headers(&original);
    let mut dead = DeadLetterHeaders {
        message_id: format!("dlq-{consumer}-{}", info.stream_sequence),
        reason: bounded(reason, MAX_REASON_CHARS),
        class,
        original_subject: message.subject.to_string(),
        stream_sequence: info.stream_sequence,
        delivery_count: info.delivered.try_into().unwrap_or_default(),
        consumer: consumer.to_owned(),
        original_message_id: original.get(NATS_MESSAGE_ID).map(|v| v.as_str().to_owned()),
        truncated: None,
        original_size: None,
    };
    dead.write_into(&mut headers);
    let stored = match try_publish(broker, subject, headers.clone(), message.payload.clone()).await
    {
        Err(err) if too_large(&err) => {
            // Stored truncated rather than never: the reason, the ids and the sequence in
            // the command stream (where the whole body still is) are what an operator needs.
            let limit = size_limit(broker).await;
            let original_size = message.payload.len();
            dead.truncated = Some("true");
            dead.original_size = Some(original_size);
            dead.write_into(&mut headers);
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
            try_publish(broker, subject, headers, message.payload.slice(..keep))
                .await
                .map_err(|err| (err, "the truncated dead letter"))
        }
        other => other.map_err(|err| (err, "the dead letter")),
    };
    stored.map_err(|(err, what)| {
        let refused = publish_refused_for_good(&err);
        let err = anyhow::Error::new(err).context(format!("publishing {what} to {subject}"));
        if refused {
            DeadLetterError::Refused(err)
        } else {
            DeadLetterError::NotStored(err)
        }
    })
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
