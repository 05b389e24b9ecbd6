//! Reading what onecharge left on a JetStream stream.
#![allow(dead_code)]

use std::time::Duration;

use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::{self, Stream};
use async_nats::jetstream::Context;
use onecharge::broker::Broker;

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

/// The stream `name` of `broker`'s JetStream.
pub async fn stream(broker: &Broker, name: &str) -> Stream {
    broker.jetstream.get_stream(name).await.unwrap()
}

/// The commands stream of `broker`'s namespace.
pub async fn commands_stream(broker: &Broker) -> Stream {
    stream(broker, &broker.names.commands_stream()).await
}

/// Changes the configuration of the stream `name` as an operator would by hand.
pub async fn edit_stream(broker: &Broker, name: &str, edit: impl FnOnce(&mut stream::Config)) {
    let mut config = stream(broker, name)
        .await
        .info()
        .await
        .unwrap()
        .config
        .clone();
    edit(&mut config);
    broker.jetstream.update_stream(config).await.unwrap();
}

/// Shrinks JetStream's duplicate window on the commands stream to 100 ms, so that a
/// producer retry with the same message id reaches onecharge, as it does in production
/// once the window has passed.
pub async fn shrink_duplicate_window(broker: &Broker) {
    edit_stream(broker, &broker.names.commands_stream(), |config| {
        config.duplicate_window = Duration::from_millis(100)
    })
    .await;
}
