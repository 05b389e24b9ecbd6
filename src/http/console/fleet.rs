//! The fleet page (`/console/fleet`): which pauses are open, a resume form for each, and
//! the form that opens one (everything, charges or refunds, optionally one currency); each
//! asks for a confirmation, then acts through `operator::fleet` (decisions 145 and 265).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Form};
use maud::{html, Markup};
use serde::Deserialize;

use super::layout::{bad_request, csrf_field, failed, page, refused};
use super::session::Session;
use crate::domain::{PauseCover, PauseScope};
use crate::format;
use crate::http::AdminState;
use crate::operator::fleet::{self, FleetError};
use crate::operator::Via;
use crate::store::fleet::{FleetPause, PauseSelector};

pub(super) async fn fleet_page(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
) -> Response {
    let current = match fleet::state(&state.store).await {
        Ok(current) => current,
        Err(err) => return failed(&session, err),
    };
    let body = html! {
        @if current.pauses.is_empty() {
            p #fleet-state data-paused="false" { "Charges and refunds are " strong { "running" } "." }
        } @else {
            p #fleet-state data-paused="true" { (current.pauses.len()) " open pause(s):" }
            ul #fleet-pauses {
                @for pause in &current.pauses {
                    li data-pause-id=(pause.id) { (open_pause(&session, pause)) }
                }
            }
            p .hint { "No executor claims a new charge or refund that a pause holds back; everything else keeps moving. Calls already out finished; intake keeps recording commands and the reconciler keeps looking up." }
        }
        h2 { "Pause" }
        p .hint { "A pause stops every executor from claiming what it holds back until resumed; calls already out finish. At most one pause is open per scope and currency." }
        form #fleet-form method="post" action="/console/fleet" {
            (csrf_field(&session))
            input type="hidden" name="action" value="pause";
            label for="fleet-scope" { "Hold back" }
            select #fleet-scope name="scope" {
                option value="all" selected { "charges and refunds" }
                option value="charges" { "charges only" }
                option value="refunds" { "refunds only" }
            }
            label for="fleet-currency" { "Currency (optional: ISO code, e.g. ISK)" }
            input #fleet-currency type="text" name="currency" maxlength="3" pattern="[A-Z]{3}";
            label for="fleet-reason" { "Reason (shown on every page, recorded)" }
            input #fleet-reason type="text" name="reason" required maxlength="1000";
            button #fleet-submit type="submit" { "Review the pause…" }
        }
    };
    page(StatusCode::OK, "Fleet", Some(&session), body)
}

/// One open pause and the form that resumes it.
fn open_pause(session: &Session, pause: &FleetPause) -> Markup {
    html! {
        strong { (pause.cover()) } " paused by " (pause.paused_by) " since "
        (format::at(pause.paused_at)) ": " q { (pause.reason) } " (pause " (pause.id) ")"
        form .fleet-resume-form method="post" action="/console/fleet" {
            (csrf_field(session))
            input type="hidden" name="action" value="resume";
            input type="hidden" name="id" value=(pause.id);
            label { "Reason (optional, recorded) " input type="text" name="reason" maxlength="1000"; }
            button type="submit" { "Review the resume…" }
        }
    }
}

/// First posted without `confirm`, it shows what would happen; with `confirm=yes`, it acts.
/// A pause reads `scope` and `currency`; a resume the `id`, `scope` and `currency` that
/// select one open pause (none: the only one open).
#[derive(Debug, Deserialize)]
pub(super) struct FleetForm {
    action: FleetAction,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    currency: String,
    #[serde(default)]
    confirm: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum FleetAction {
    Pause,
    Resume,
}

impl FleetAction {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
        }
    }
}

/// The form's selectors read: which pause to resume (for a pause, its scope and currency).
fn selector(form: &FleetForm) -> Result<PauseSelector, FleetError> {
    let id = match form.id.trim() {
        "" => None,
        text => Some(
            text.parse()
                .map_err(|_| FleetError::Invalid(format!("pause id `{text}` is not a number")))?,
        ),
    };
    let (scope, currency) = fleet::parse_selectors(&form.scope, &form.currency)?;
    Ok(PauseSelector {
        id,
        scope,
        currency,
    })
}

/// What the confirmation asks: `pause charging in ISK across the fleet` or `resume pause 3`.
fn confirm_question(action: FleetAction, which: &PauseSelector) -> String {
    match action {
        FleetAction::Pause => format!(
            "pause {} across the fleet",
            PauseCover {
                scope: which.scope.unwrap_or(PauseScope::All),
                currency: which.currency,
            }
        ),
        FleetAction::Resume => match which.id {
            Some(id) => format!("resume pause {id}"),
            None => "resume the open pause".to_owned(),
        },
    }
}

pub(super) async fn fleet_action(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    form: Result<Form<FleetForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(form)) = form else {
        return bad_request(&session, "Choose pause or resume.");
    };
    let which = match selector(&form) {
        Ok(which) => which,
        Err(err) => return bad_request(&session, &format!("{err}. Nothing was changed.")),
    };
    if form.confirm.as_deref() != Some("yes") {
        let what = match form.action {
            FleetAction::Pause => "No executor will claim a new charge or refund this pause holds back until it is resumed; calls already out finish.",
            FleetAction::Resume => "The executors claim what it held back again at once.",
        };
        let body = html! {
            p #confirm-summary { (confirm_question(form.action, &which)) ", because: " q #confirm-reason { (form.reason.trim()) } "?" }
            p .hint { (what) }
            form #confirm-form method="post" action="/console/fleet" {
                (csrf_field(&session))
                input type="hidden" name="action" value=(form.action.as_str());
                input type="hidden" name="reason" value=(form.reason);
                input type="hidden" name="id" value=(form.id);
                input type="hidden" name="scope" value=(form.scope);
                input type="hidden" name="currency" value=(form.currency);
                input type="hidden" name="confirm" value="yes";
                button #confirm-submit type="submit" { "Confirm: " (form.action.as_str()) }
                " "
                a #confirm-cancel href="/console/fleet" { "Cancel" }
            }
        };
        return page(StatusCode::OK, "Confirm", Some(&session), body);
    }
    let actor = session.principal.actor.clone();
    let done = match form.action {
        FleetAction::Pause => {
            let cover = PauseCover {
                scope: which.scope.unwrap_or(PauseScope::All),
                currency: which.currency,
            };
            fleet::pause(&state.store, &form.reason, cover, &actor, Via::Console)
                .await
                .map(|pause| fleet::paused_line(&pause))
        }
        FleetAction::Resume => {
            fleet::resume(&state.store, &form.reason, which, &actor, Via::Console)
                .await
                .map(|resumed| resumed.summary())
        }
    };
    match done {
        Ok(line) => {
            // The banner of this very page follows what was just done.
            let mut session = session;
            session.fleet_pauses = fleet::state(&state.store)
                .await
                .map(|s| s.pauses)
                .unwrap_or_default();
            page(
                StatusCode::OK,
                "Fleet",
                Some(&session),
                html! {
                    p #result .success data-action=(form.action.as_str()) { (line) }
                    p { a href="/console/fleet" { "Back to the fleet" } }
                },
            )
        }
        Err(FleetError::Invalid(why)) => {
            bad_request(&session, &format!("{why}. Nothing was changed."))
        }
        Err(FleetError::Refused(why)) => refused(StatusCode::CONFLICT, Some(&session), &why),
        Err(err @ FleetError::Store(_)) => failed(&session, err),
    }
}
