//! `onecharge setup` (and `serve`, which runs until stopped and prints nothing: its
//! runner is `crate::app::serve`).

use std::time::Duration;

use clap::Args;

use crate::app::SetupDone;
use crate::config::Settings;

/// How often `setup --check --wait` asks again.
const CHECK_EVERY: Duration = Duration::from_secs(2);

#[derive(Debug, Args)]
pub struct SetupArgs {
    /// Change nothing: check that every migration is applied and the streams exist, as
    /// `serve` does at start; exit 1 naming what is missing. Needs only the runtime role
    #[arg(long)]
    pub check: bool,
    /// With --check: ask again every 2 s until ready or this long has passed (an init
    /// container waiting for the setup Job), e.g. 10m
    #[arg(long, requires = "check", value_name = "DURATION", value_parser = crate::config::parse_duration)]
    pub wait: Option<Duration>,
}

/// `onecharge setup`: migrates, creates the streams and the consumer, says what it made
/// sure of. `--check` changes nothing and says whether `serve` would start.
pub async fn setup(settings: &Settings, args: SetupArgs) -> anyhow::Result<()> {
    if args.check {
        let streams = match args.wait {
            None => crate::app::check(settings).await?,
            Some(wait) => {
                // Printed as it happens, so without the configuration's secrets here.
                let redactor = crate::config::Redactor::from_settings(settings);
                crate::app::check_until_ready(settings, wait, CHECK_EVERY, |reason| {
                    let line = format!("waiting for `onecharge setup`: {reason:#}");
                    eprintln!("{}", redactor.scrub(&line));
                })
                .await?
            }
        };
        println!("{}", render_check(&streams));
        return Ok(());
    }
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

fn render_check(streams: &[String; 3]) -> String {
    let [commands, events, dlq] = streams;
    format!("setup is done: every migration applied; streams {commands}, {events}, {dlq}")
}
