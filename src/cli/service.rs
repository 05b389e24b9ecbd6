//! `onecharge setup` (and `serve`, which runs until stopped and prints nothing: its
//! runner is `crate::app::serve`).

use crate::app::SetupDone;
use crate::config::Settings;

/// `onecharge setup`: migrates, creates the streams and the consumer, says what it made
/// sure of.
pub async fn setup(settings: &Settings) -> anyhow::Result<()> {
    let done = crate::app::setup(settings).await?;
    println!("{}", render_setup(&done));
    Ok(())
}

fn render_setup(done: &SetupDone) -> String {
    let [commands, events, dlq] = &done.streams;
    format!(
        "setup complete: database migrated; streams {commands}, {events}, {dlq}; consumer {}",
        done.consumer
    )
}
