//! `onecharge fleet pause | resume | status`: money movement across every instance, stopped
//! and started by a person (decision 145), everything or narrower (decision 265).

use clap::Subcommand;

use super::{operator_actor, print_json};
use crate::config::{Settings, UsageError};
use crate::domain::{Currency, PauseCover, PauseScope};
use crate::operator::fleet::{self, FleetError};
use crate::operator::Via;
use crate::store::fleet::PauseSelector;

/// `onecharge fleet …`.
#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Stop every executor from claiming new charges and refunds (or, with --only and
    /// --currency, only some of them; calls already out finish; intake and the reconciler
    /// keep running) until `fleet resume`; audited
    Pause {
        /// Why: shown on every console page, on /readyz and in the audit trail
        #[arg(long)]
        reason: String,
        /// Hold back only charges or only refunds (default: both)
        #[arg(long, value_name = "charges|refunds|all")]
        only: Option<PauseScope>,
        /// Hold back only money in this currency (ISO 4217, upper case, as in a command)
        #[arg(long, value_name = "CODE")]
        currency: Option<Currency>,
        /// One JSON document instead of a line
        #[arg(long)]
        json: bool,
    },
    /// Let the executors claim again what one open pause held back (the only one, or the one
    /// --id, --only and --currency select); audited
    Resume {
        /// Why (optional): recorded in the audit trail
        #[arg(long, default_value = "")]
        reason: String,
        /// The pause's id (`fleet status` shows it)
        #[arg(long)]
        id: Option<i64>,
        /// The open pause of this scope
        #[arg(long, value_name = "charges|refunds|all")]
        only: Option<PauseScope>,
        /// The open pause of this currency
        #[arg(long, value_name = "CODE")]
        currency: Option<Currency>,
        /// One JSON document instead of a line
        #[arg(long)]
        json: bool,
    },
    /// Which pauses are open: what each holds back, by whom, since when and why
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
        FleetCommand::Pause {
            reason,
            only,
            currency,
            json,
        } => {
            let cover = PauseCover {
                scope: only.unwrap_or(PauseScope::All),
                currency,
            };
            let pause = fleet::pause(&store, &reason, cover, &actor, Via::Cli)
                .await
                .map_err(failure)?;
            if json {
                print_json(&pause)
            } else {
                println!("{}", fleet::paused_line(&pause));
                Ok(())
            }
        }
        FleetCommand::Resume {
            reason,
            id,
            only,
            currency,
            json,
        } => {
            let which = PauseSelector {
                id,
                scope: only,
                currency,
            };
            let resumed = fleet::resume(&store, &reason, which, &actor, Via::Cli)
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
