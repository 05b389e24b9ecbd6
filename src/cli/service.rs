//! `onecharge setup` (and `serve`, which runs until stopped and prints nothing: its
//! runner is `crate::app::serve`).

use std::time::Duration;

use clap::Args;

use crate::app::SetupDone;
use crate::config::Settings;
use crate::gateway::permission::{self, Grant, PermissionCheck};

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
    /// With --check: also ask the gateway whether the key (a Stripe restricted key,
    /// `rk_…`) holds every permission onecharge needs, changing nothing there; exit 1
    /// naming each one missing (docs/stripe.md)
    #[arg(long, requires = "check")]
    pub gateway: bool,
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
        if args.gateway {
            check_gateway(settings).await?;
        }
        return Ok(());
    }
    let done = crate::app::setup(settings).await?;
    println!("{}", render_setup(&done));
    Ok(())
}

/// `setup --check --gateway`: a line per permission the connector needs, then exit 1 naming
/// those the key lacks (or could not be checked).
async fn check_gateway(settings: &Settings) -> anyhow::Result<()> {
    let client = crate::gateway::GatewayClient::from_settings(settings)?;
    let Some(checks) = permission::check(&client).await else {
        println!("gateway: a §3 gateway's key has no per-resource permissions; nothing to check");
        return Ok(());
    };
    println!("{}", render_permissions(&checks));
    let not_granted: Vec<&str> = checks
        .iter()
        .filter(|c| c.grant != Grant::Granted)
        .map(|c| c.permission.as_str())
        .collect();
    if not_granted.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "the gateway key is not shown to hold {}: grant them to the restricted key (docs/stripe.md, \"Permissions\")",
        not_granted.join(", ")
    )
}

fn render_permissions(checks: &[PermissionCheck]) -> String {
    let lines: Vec<String> = checks
        .iter()
        .map(|check| {
            let grant = match &check.grant {
                Grant::Granted => "granted".to_owned(),
                Grant::Missing => "missing".to_owned(),
                Grant::Unknown(why) => format!("not checked ({why})"),
            };
            format!(
                "gateway permission {}: {grant} — needed for {}",
                check.permission.as_str(),
                check.permission.needed_for()
            )
        })
        .collect();
    lines.join("\n")
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
