//! `onecharge fleet pause | resume | status`: charging across every instance, stopped and
//! started by a person (decision 145).

use clap::Subcommand;

use super::{operator_actor, print_json};
use crate::config::{Settings, UsageError};
use crate::operator::fleet::{self, FleetError};
use crate::operator::Via;

/// `onecharge fleet …`.
#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Stop every executor from claiming new attempts (calls already out finish; intake and
    /// the reconciler keep running) until `fleet resume`; audited
    Pause {
        /// Why: shown on every console page, on /readyz and in the audit trail
        #[arg(long)]
        reason: String,
        /// One JSON document instead of a line
        #[arg(long)]
        json: bool,
    },
    /// Let the executors claim again; audited
    Resume {
        /// Why (optional): recorded in the audit trail
        #[arg(long, default_value = "")]
        reason: String,
        /// One JSON document instead of a line
        #[arg(long)]
        json: bool,
    },
    /// Whether charging is paused, by whom, since when and why
    Status {
        /// One JSON document instead of a line
        #[arg(long)]
        json: bool,
    },
}

/// `onecharge fleet …`: runs one subcommand and prints its result.
pub async fn run(settings: &Settings, command: FleetCommand) -> anyhow::Result<()> {
    let store = super::connect_store(settings).await?;
    let actor = operator_actor();
    match command {
        FleetCommand::Pause { reason, json } => {
            let pause = fleet::pause(&store, &reason, &actor, Via::Cli)
                .await
                .map_err(failure)?;
            if json {
                print_json(&pause)
            } else {
                println!("{}", fleet::paused_line(&pause));
                Ok(())
            }
        }
        FleetCommand::Resume { reason, json } => {
            let resumed = fleet::resume(&store, &reason, &actor, Via::Cli)
                .await
                .map_err(failure)?;
            if json {
                print_json(&resumed)
            } else {
                println!("{}", resumed.summary());
                Ok(())
            }
        }
        FleetCommand::Status { json } => {
            let state = fleet::state(&store).await?;
            if json {
                print_json(&state)
            } else {
                println!("{}", state.summary());
                Ok(())
            }
        }
    }
}

/// A usage mistake is exit 2; a refusal by the fleet's state, one line, exit 1.
fn failure(err: FleetError) -> anyhow::Error {
    match err {
        FleetError::Invalid(why) => UsageError(why).into(),
        FleetError::Refused(why) => anyhow::anyhow!(why),
        err @ FleetError::Store(_) => {
            anyhow::Error::new(err).context("pausing or resuming the fleet")
        }
    }
}
