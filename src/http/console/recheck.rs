//! Rechecking an attempt (`POST /console/attempts/{id}/recheck`): the reconciler's lookup
//! now, through `operator::recheck`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Form};
use maud::{html, Markup};
use serde::Deserialize;

use super::fields::set;
use super::layout::{bad_request, csrf_field, failed, page, refused};
use super::session::Session;
use crate::domain::PaymentAttemptId;
use crate::http::AdminState;
use crate::operator::recheck::{self, RecheckError};
use crate::operator::Via;

/// The recheck form of an `unknown` or `needs_review` attempt's page, or, on an instance
/// without a gateway client, where to recheck instead.
pub(super) fn recheck_form(session: &Session, id: PaymentAttemptId, available: bool) -> Markup {
    html! {
        section #recheck-section {
            h2 { "Recheck now" }
            p .hint { "Asks the gateway now what it recorded under this attempt's key, exactly as the reconciler would, and settles the attempt when the answer does." }
            @if available {
                form #recheck-form method="post" action=(format!("/console/attempts/{id}/recheck")) {
                    (csrf_field(session))
                    label for="recheck-reason" { "Reason (optional)" }
                    input #recheck-reason type="text" name="reason" maxlength="1000";
                    button #recheck-submit type="submit" { "Recheck now" }
                }
            } @else {
                p #recheck-unavailable { "This instance has no gateway client (it runs neither the executor nor the reconciler): recheck from one that does, or run " code { "onecharge attempts recheck " (id) } "." }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct RecheckForm {
    #[serde(default)]
    reason: String,
}

pub(super) async fn recheck(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    Form(form): Form<RecheckForm>,
) -> Response {
    let Ok(id) = id.parse::<PaymentAttemptId>() else {
        return bad_request(&session, "not a payment_attempt_id");
    };
    let Some(reconciler) = state.reconciler.as_ref() else {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            Some(&session),
            "This instance has no gateway client (it runs neither the executor nor the reconciler): recheck from one that does, or with `onecharge attempts recheck`. Nothing was asked.",
        );
    };
    let reason = set(&form.reason);
    match recheck::recheck(
        reconciler,
        id,
        &session.principal.actor,
        Via::Console,
        reason.as_deref(),
    )
    .await
    {
        Ok(report) => page(
            StatusCode::OK,
            "Rechecked",
            Some(&session),
            html! {
                p #result .success data-status=(report.after.as_str()) {
                    "Attempt " code { (id) } ": " (report.before.as_str()) " → " (report.after.as_str())
                }
                pre #recheck-result { (recheck::render(&report)) }
                p { a #back-to-attempt href=(format!("/console/attempts/{id}")) { "Back to the attempt" } }
            },
        ),
        Err(RecheckError::Invalid(why)) => bad_request(&session, &why),
        Err(err @ RecheckError::NotFound(_)) => {
            refused(StatusCode::NOT_FOUND, Some(&session), &err.to_string())
        }
        Err(RecheckError::Refused(why)) => refused(StatusCode::CONFLICT, Some(&session), &why),
        Err(RecheckError::Unavailable(why)) => {
            refused(StatusCode::SERVICE_UNAVAILABLE, Some(&session), &why)
        }
        Err(err @ RecheckError::Failed(_)) => failed(&session, err),
    }
}
