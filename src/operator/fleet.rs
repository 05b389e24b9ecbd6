//! `fleet pause | resume | status`, `/api/fleet…` and the console's fleet page: a person
//! stops charging across every instance while the gateway or a deploy is investigated, and
//! starts it again (issue 39, decision 145).
//!
//! A pause stops new claims only: calls already out finish and are written, intake keeps
//! recording commands and the reconciler keeps looking up. Every pause and resume is one
//! audited row, with who, why and when.

use crate::format;
use crate::store::audit::Via;
use crate::store::fleet::{self as sql, FleetPause, PauseOutcome, ResumeOutcome};
use crate::store::Store;

/// Whether charging is paused, and by whom: what `fleet status`, `GET /api/fleet`,
/// `/readyz` and the console's banner show.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct FleetState {
    pub paused: bool,
    /// The open pause, when paused
    pub pause: Option<FleetPause>,
}

impl FleetState {
    /// One line for people.
    pub fn summary(&self) -> String {
        match &self.pause {
            Some(pause) => paused_line(pause),
            None => "charging: running (not paused)".to_owned(),
        }
    }
}

/// `charging paused by … since … (…): reason`.
pub fn paused_line(pause: &FleetPause) -> String {
    format!(
        "charging paused by {} since {}: {}",
        pause.paused_by,
        format::at(pause.paused_at),
        pause.reason
    )
}

/// Why a pause or resume was not applied. `Invalid` is the caller's mistake (exit 2 / 400),
/// `Refused` the fleet's state (exit 1 / 409), `Store` a failure.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Refused(String),
    #[error("database error: {0}")]
    Store(#[from] sqlx::Error),
}

/// Most characters kept of an operator's reason.
const MAX_REASON_CHARS: usize = 1000;

fn checked_reason(reason: &str, required: bool) -> Result<Option<&str>, FleetError> {
    super::recordable("--reason", reason).map_err(FleetError::Invalid)?;
    let reason = reason.trim();
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(FleetError::Invalid(
            "--reason is longer than 1000 characters".into(),
        ));
    }
    match (reason.is_empty(), required) {
        (true, true) => Err(FleetError::Invalid(
            "--reason must say why charging is paused (it is shown on every console page and recorded)".into(),
        )),
        (true, false) => Ok(None),
        (false, _) => Ok(Some(reason)),
    }
}

/// Whether charging is paused now.
pub async fn state(store: &Store) -> Result<FleetState, sqlx::Error> {
    let pause = sql::current_pause(store).await?;
    Ok(FleetState {
        paused: pause.is_some(),
        pause,
    })
}

/// Pauses charging across the fleet; refused while a pause is open.
pub async fn pause(
    store: &Store,
    reason: &str,
    actor: &str,
    via: Via,
) -> Result<FleetPause, FleetError> {
    let reason = checked_reason(reason, true)?.unwrap_or_default();
    match sql::pause(store, actor, reason, via).await? {
        PauseOutcome::Paused(pause) => {
            tracing::warn!(actor, reason, "charging paused across the fleet");
            Ok(pause)
        }
        PauseOutcome::AlreadyPaused(Some(open)) => Err(FleetError::Refused(format!(
            "refusing to pause: {}; resume it first to pause under another reason",
            paused_line(&open)
        ))),
        PauseOutcome::AlreadyPaused(None) => Err(FleetError::Refused(
            "refusing to pause: another pause was opened and resumed while this one was asked for; look (`fleet status`) and try again".into(),
        )),
    }
}

/// What a resume ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Resumed {
    pub pause: FleetPause,
    pub resumed_by: String,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub resumed_at: time::OffsetDateTime,
}

impl Resumed {
    pub fn summary(&self) -> String {
        format!(
            "charging resumed by {} (paused by {} for {}: {})",
            self.resumed_by,
            self.pause.paused_by,
            format::short(self.resumed_at - self.pause.paused_at),
            self.pause.reason
        )
    }
}

/// Resumes charging; refused when it is not paused.
pub async fn resume(
    store: &Store,
    reason: &str,
    actor: &str,
    via: Via,
) -> Result<Resumed, FleetError> {
    let reason = checked_reason(reason, false)?;
    match sql::resume(store, actor, reason, via).await? {
        ResumeOutcome::Resumed { pause, resumed_at } => {
            tracing::warn!(actor, paused_by = %pause.paused_by, "charging resumed across the fleet");
            Ok(Resumed {
                pause,
                resumed_by: actor.to_owned(),
                resumed_at,
            })
        }
        ResumeOutcome::NotPaused => Err(FleetError::Refused(
            "refusing to resume: charging is not paused".into(),
        )),
    }
}
