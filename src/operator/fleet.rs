//! `fleet pause | resume | status`, `/api/fleet…` and the console's fleet page: a person
//! stops money moving across every instance while the gateway, an acquirer or a deploy is
//! investigated, and starts it again (issue 39, decision 145). A pause holds back
//! everything, charges only or refunds only, and of those optionally one currency; several
//! open at once, one per scope and currency (issue 54, decision 265).
//!
//! A pause stops new claims of what it covers only: calls already out finish and are
//! written, intake keeps recording commands and the reconciler keeps looking up. Every
//! pause and resume is one audited row, with who, why, when and what it held back.

use crate::domain::{Actor, Currency, PauseCover, PauseScope};
use crate::format;
use crate::store::audit::Via;
use crate::store::fleet::{self as sql, FleetPause, PauseOutcome, PauseSelector, ResumeOutcome};
use crate::store::Store;

/// Which pauses are open: what `fleet status`, `GET /api/fleet`, `/readyz` and the
/// console's banner show.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct FleetState {
    /// Whether any pause is open
    pub paused: bool,
    /// The oldest open pause (what this field said before pauses had scopes); read `pauses`
    pub pause: Option<FleetPause>,
    /// Every open pause, oldest first
    pub pauses: Vec<FleetPause>,
}

impl FleetState {
    /// One line per open pause for people, or one line saying everything runs.
    pub fn summary(&self) -> String {
        if self.pauses.is_empty() {
            return "charging and refunds: running (no pause open)".to_owned();
        }
        let lines: Vec<String> = self.pauses.iter().map(paused_line).collect();
        lines.join("\n")
    }
}

/// `charging in ISK paused by … since …: reason (pause 3)`.
pub fn paused_line(pause: &FleetPause) -> String {
    format!(
        "{} paused by {} since {}: {} (pause {})",
        pause.cover(),
        pause.paused_by,
        format::at(pause.paused_at),
        pause.reason,
        pause.id
    )
}

/// `pause 3 (charging in ISK, by operator:ana)`: a pause named among others.
fn named(pause: &FleetPause) -> String {
    format!(
        "pause {} ({}, by {})",
        pause.id,
        pause.cover(),
        pause.paused_by
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

/// A scope and a currency as a form gives them, each empty when not given: the scope one of
/// `all`, `charges`, `refunds`, the currency an ISO 4217 code in upper case (as a command's).
pub fn parse_selectors(
    scope: &str,
    currency: &str,
) -> Result<(Option<PauseScope>, Option<Currency>), FleetError> {
    let scope = match scope.trim() {
        "" => None,
        text => Some(
            text.parse()
                .map_err(|e| FleetError::Invalid(format!("{e}")))?,
        ),
    };
    let currency = match currency.trim() {
        "" => None,
        text => Some(Currency::from_code(text).map_err(|e| FleetError::Invalid(e.to_string()))?),
    };
    Ok((scope, currency))
}

/// Which pauses are open now.
pub async fn state(store: &Store) -> Result<FleetState, sqlx::Error> {
    let pauses = sql::open_pauses(store).await?;
    Ok(FleetState {
        paused: !pauses.is_empty(),
        pause: pauses.first().cloned(),
        pauses,
    })
}

/// Pauses what `cover` names across the fleet; refused while a pause of the same scope and
/// currency is open.
pub async fn pause(
    store: &Store,
    reason: &str,
    cover: PauseCover,
    actor: &Actor,
    via: Via,
) -> Result<FleetPause, FleetError> {
    let reason = checked_reason(reason, true)?.unwrap_or_default();
    match sql::pause(store, actor, reason, cover, via).await? {
        PauseOutcome::Paused(pause) => {
            tracing::warn!(actor = %actor, reason, scope = cover.scope.as_str(), currency = ?cover.currency.map(Currency::code), "{cover} paused across the fleet");
            Ok(pause)
        }
        PauseOutcome::AlreadyPaused(Some(open)) => Err(FleetError::Refused(format!(
            "refusing to pause: {}; resume it first to pause {cover} under another reason",
            paused_line(&open)
        ))),
        PauseOutcome::AlreadyPaused(None) => Err(FleetError::Refused(
            "refusing to pause: another pause of the same scope was opened and resumed while this one was asked for; look (`fleet status`) and try again".into(),
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
            "{} resumed by {} (pause {} by {} for {}: {})",
            self.pause.cover(),
            self.resumed_by,
            self.pause.id,
            self.pause.paused_by,
            format::short(self.resumed_at - self.pause.paused_at),
            self.pause.reason
        )
    }
}

/// Resumes the one open pause `which` selects; refused when none matches (saying which are
/// open) or several do (naming them, to choose one by its id).
pub async fn resume(
    store: &Store,
    reason: &str,
    which: PauseSelector,
    actor: &Actor,
    via: Via,
) -> Result<Resumed, FleetError> {
    let reason = checked_reason(reason, false)?;
    match sql::resume(store, actor, reason, which, via).await? {
        ResumeOutcome::Resumed { pause, resumed_at } => {
            tracing::warn!(actor = %actor, paused_by = %pause.paused_by, pause_id = pause.id, "{} resumed across the fleet", pause.cover());
            Ok(Resumed {
                pause,
                resumed_by: actor.to_string(),
                resumed_at,
            })
        }
        ResumeOutcome::NotOne { matching, open } => {
            Err(FleetError::Refused(not_one(&which, &matching, &open)))
        }
    }
}

/// Why a resume closed nothing: no pause is open, none matches, or several do.
fn not_one(which: &PauseSelector, matching: &[FleetPause], open: &[FleetPause]) -> String {
    let list = |pauses: &[FleetPause]| pauses.iter().map(named).collect::<Vec<_>>().join(", ");
    match (matching.len(), open.is_empty()) {
        (_, true) => "refusing to resume: not paused (no pause is open)".to_owned(),
        (0, false) => format!(
            "refusing to resume: no open pause is {}; open: {}",
            selected(which),
            list(open)
        ),
        (_, false) => format!(
            "refusing to resume: {} open pauses match: {}; name one by its id (--id)",
            matching.len(),
            list(matching)
        ),
    }
}

/// `pause 4`, `of scope charges in ISK`: what a selector asked for, in words.
fn selected(which: &PauseSelector) -> String {
    let mut words = Vec::new();
    if let Some(id) = which.id {
        words.push(format!("pause {id}"));
    }
    if let Some(scope) = which.scope {
        words.push(format!("of scope {}", scope.as_str()));
    }
    if let Some(currency) = which.currency {
        words.push(format!("in {currency}"));
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(id: i64, scope: PauseScope, currency: Option<&str>) -> FleetPause {
        FleetPause {
            id,
            scope,
            currency: currency.map(|c| Currency::from_code(c).unwrap()),
            paused_by: "operator:ana".into(),
            reason: "acquirer down".into(),
            paused_at: time::OffsetDateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_resume_that_closes_nothing_says_what_is_open_or_which_to_name() {
        let isk = open(3, PauseScope::Charges, Some("ISK"));
        let refunds = open(4, PauseScope::Refunds, None);
        let by_id = PauseSelector {
            id: Some(9),
            ..PauseSelector::default()
        };
        assert_eq!(
            not_one(&by_id, &[], &[]),
            "refusing to resume: not paused (no pause is open)"
        );
        assert_eq!(
            not_one(&by_id, &[], std::slice::from_ref(&isk)),
            "refusing to resume: no open pause is pause 9; open: pause 3 (charging in ISK, by operator:ana)"
        );
        let any = PauseSelector::default();
        let both = [isk, refunds];
        assert_eq!(
            not_one(&any, &both, &both),
            "refusing to resume: 2 open pauses match: pause 3 (charging in ISK, by operator:ana), pause 4 (refunds, by operator:ana); name one by its id (--id)"
        );
    }

    #[test]
    fn selectors_from_a_form_are_empty_or_a_scope_and_an_iso_code_in_upper_case() {
        assert!(matches!(parse_selectors("", ""), Ok((None, None))));
        let (scope, currency) = parse_selectors("charges", "ISK").unwrap();
        assert_eq!(scope, Some(PauseScope::Charges));
        assert_eq!(currency.map(Currency::code), Some("ISK"));
        for (scope, currency) in [("charge", ""), ("", "isk"), ("", "XXY"), ("", "EURO")] {
            assert!(
                matches!(
                    parse_selectors(scope, currency),
                    Err(FleetError::Invalid(_))
                ),
                "{scope:?} {currency:?}"
            );
        }
    }
}
