//! The fleet page (`/console/fleet`): whether charging is paused, and the pause or resume
//! form; each asks for a confirmation, then acts through `operator::fleet` (decision 145).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Form};
use maud::html;
use serde::Deserialize;

use super::layout::{bad_request, csrf_field, failed, page, refused};
use super::session::Session;
use crate::format;
use crate::http::AdminState;
use crate::operator::fleet::{self, FleetError};
use crate::operator::Via;

pub(super) async fn fleet_page(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
) -> Response {
    let current = match fleet::state(&state.store).await {
        Ok(current) => current,
        Err(err) => return failed(&session, err),
    };
    let body = html! {
        @match &current.pause {
            Some(pause) => {
                p #fleet-state data-paused="true" {
                    "Charging is " strong { "paused" } " by " (pause.paused_by) " since "
                    (format::at(pause.paused_at)) ": " q { (pause.reason) }
                }
                p .hint { "No executor claims a new attempt. Calls already out finished; intake keeps recording commands and the reconciler keeps looking up." }
                form #fleet-form method="post" action="/console/fleet" {
                    (csrf_field(&session))
                    input type="hidden" name="action" value="resume";
                    label for="fleet-reason" { "Reason (optional, recorded)" }
                    input #fleet-reason type="text" name="reason" maxlength="1000";
                    button #fleet-submit type="submit" { "Review the resume…" }
                }
            }
            None => {
                p #fleet-state data-paused="false" { "Charging is " strong { "running" } "." }
                p .hint { "Pausing stops every executor from claiming new attempts until resumed; calls already out finish. Intake and the reconciler keep running." }
                form #fleet-form method="post" action="/console/fleet" {
                    (csrf_field(&session))
                    input type="hidden" name="action" value="pause";
                    label for="fleet-reason" { "Reason (shown on every page, recorded)" }
                    input #fleet-reason type="text" name="reason" required maxlength="1000";
                    button #fleet-submit type="submit" { "Review the pause…" }
                }
            }
        }
    };
    page(StatusCode::OK, "Fleet", Some(&session), body)
}

/// First posted without `confirm`, it shows what would happen; with `confirm=yes`, it acts.
#[derive(Debug, Deserialize)]
pub(super) struct FleetForm {
    action: FleetAction,
    #[serde(default)]
    reason: String,
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

pub(super) async fn fleet_action(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    form: Result<Form<FleetForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(form)) = form else {
        return bad_request(&session, "Choose pause or resume.");
    };
    if form.confirm.as_deref() != Some("yes") {
        let what = match form.action {
            FleetAction::Pause => "No executor will claim a new attempt until charging is resumed; calls already out finish.",
            FleetAction::Resume => "The executors claim due attempts again at once.",
        };
        let body = html! {
            p #confirm-summary { (form.action.as_str()) " charging across the fleet, because: " q #confirm-reason { (form.reason.trim()) } "?" }
            p .hint { (what) }
            form #confirm-form method="post" action="/console/fleet" {
                (csrf_field(&session))
                input type="hidden" name="action" value=(form.action.as_str());
                input type="hidden" name="reason" value=(form.reason);
                input type="hidden" name="confirm" value="yes";
                button #confirm-submit type="submit" { "Confirm: " (form.action.as_str()) " charging" }
                " "
                a #confirm-cancel href="/console/fleet" { "Cancel" }
            }
        };
        return page(StatusCode::OK, "Confirm", Some(&session), body);
    }
    let actor = session.principal.actor.clone();
    let done = match form.action {
        FleetAction::Pause => fleet::pause(&state.store, &form.reason, &actor, Via::Console)
            .await
            .map(|pause| fleet::paused_line(&pause)),
        FleetAction::Resume => fleet::resume(&state.store, &form.reason, &actor, Via::Console)
            .await
            .map(|resumed| resumed.summary()),
    };
    match done {
        Ok(line) => {
            // The banner of this very page follows what was just done.
            let mut session = session;
            session.fleet_pause = fleet::state(&state.store).await.ok().and_then(|s| s.pause);
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
