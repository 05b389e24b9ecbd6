//! Cancelling a pending attempt that must not be charged (`POST
//! /console/attempts/{id}/cancel`): the form on the attempt's page, a confirmation page,
//! then the cancel through `operator::cancel`, which the database lets through only while no
//! executor has claimed the attempt.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Form};
use maud::{html, Markup};
use serde::Deserialize;

use super::layout::{bad_request, csrf_field, decision_page, page};
use super::session::Session;
use crate::domain::PaymentAttemptId;
use crate::http::AdminState;
use crate::operator::cancel;
use crate::operator::Via;

/// The form on a pending attempt's page.
pub(super) fn cancel_form(session: &Session, id: PaymentAttemptId) -> Markup {
    html! {
        section #cancel-section {
            h2 { "Cancel" }
            p .hint { "An attempt never sent to the gateway can be cancelled so that it is never charged. One that holds a Stripe PaymentIntent is cancelled only once the gateway has cancelled the PaymentIntent (proof it can never charge). Once an executor has claimed it, its outcome decides." }
            form #cancel-form method="post" action=(format!("/console/attempts/{id}/cancel")) {
                (csrf_field(session))
                label for="cancel-reason" { "Reason (recorded with the cancel and in its event)" }
                input #cancel-reason type="text" name="reason" required maxlength="1000";
                button #cancel-submit type="submit" { "Review the cancel…" }
            }
        }
    }
}

/// First posted without `confirm`, it shows what would happen and asks for confirmation;
/// posted again with `confirm=yes`, it cancels.
#[derive(Debug, Deserialize)]
pub(super) struct CancelForm {
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: Option<String>,
}

pub(super) async fn cancel(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    form: Result<Form<CancelForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(id) = id.parse::<PaymentAttemptId>() else {
        return bad_request(&session, "not a payment_attempt_id");
    };
    let Ok(Form(form)) = form else {
        return bad_request(&session, "Give a reason for the cancel.");
    };
    if form.reason.trim().is_empty() {
        return bad_request(
            &session,
            "A reason is required: it is recorded with the cancel. Nothing was changed.",
        );
    }
    if form.confirm.as_deref() != Some("yes") {
        let body = confirmation(&session, id, &form);
        return page(StatusCode::OK, "Confirm the cancel", Some(&session), body);
    }
    let actor = session.principal.actor.clone();
    let gateway = state.reconciler.as_ref().map(|r| r.gateway());
    let outcome = cancel::cancel(
        &state.store,
        gateway,
        id,
        &form.reason,
        &actor,
        Via::Console,
    )
    .await
    .map(|cancelled| (cancelled.status, cancelled.summary()));
    decision_page(&session, id, "Cancelled", outcome)
}

/// What the cancel would do, and the form that confirms it.
fn confirmation(session: &Session, id: PaymentAttemptId, form: &CancelForm) -> Markup {
    html! {
        p #confirm-summary {
            "Cancel attempt " code { (id) } ", because: " q #confirm-reason { (form.reason.trim()) } "?"
        }
        p .hint { "If no executor has claimed it yet, it becomes expired, is never sent to the gateway, and its payment-expired event is published. If one has, nothing changes and you are told why." }
        form #confirm-form method="post" action=(format!("/console/attempts/{id}/cancel")) {
            (csrf_field(session))
            input type="hidden" name="reason" value=(form.reason);
            input type="hidden" name="confirm" value="yes";
            button #confirm-submit type="submit" { "Confirm: cancel the attempt" }
            " "
            a #confirm-cancel href=(format!("/console/attempts/{id}")) { "Keep it" }
        }
    }
}
