//! Reading what onecharge left on a JetStream stream.
#![allow(dead_code)]

use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::Context;

/// Every message on the stream `name`, in order (a deleted sequence is passed over).
pub async fn stream_messages(jetstream: &Context, name: &str) -> Vec<StreamMessage> {
    let mut stream = jetstream.get_stream(name).await.unwrap();
    let last = stream.info().await.unwrap().state.last_sequence;
    let mut out = Vec::new();
    for seq in 1..=last {
        if let Ok(message) = stream.get_raw_message(seq).await {
            out.push(message);
        }
    }
    out
}

/// The value of a header on a stream message.
pub fn header(message: &StreamMessage, name: &str) -> Option<String> {
    message.headers.get(name).map(|v| v.as_str().to_owned())
}
