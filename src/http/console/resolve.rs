//! Resolving an attempt in review (`POST /console/attempts/{id}/resolve`): the form on the
//! attempt's page, a confirmation page, then the decision through `operator::resolve`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Form};
use maud::{html, Markup};
use serde::Deserialize;

use super::fields::set;
use super::layout::{bad_request, csrf_field, decision_page, page};
use super::session::Session;
use crate::domain::PaymentAttemptId;
use crate::http::AdminState;
use crate::operator::resolve::{self, ResolveAs, ResolveRequest};
use crate::operator::Via;

pub(super) fn resolve_form(
    session: &Session,
    id: PaymentAttemptId,
    reason: Option<&str>,
) -> Markup {
    html! {
        section #resolve-section {
            h2 { "Resolve" }
            @if let Some(reason) = reason { p #review-reason { "In review because: " (reason) } }
            form #resolve-form method="post" action=(format!("/console/attempts/{id}/resolve")) {
                (csrf_field(session))
                label for="resolve-as" { "Resolve as" }
                select #resolve-as name="as" required {
                    option value="succeeded" { "succeeded — the gateway charged (give its charge id)" }
                    option value="declined" { "declined — the customer was not charged" }
                    option value="retry" { "retry — send again with the same key (inside the key window only)" }
                }
                label for="resolve-reason" { "Reason (recorded with the decision)" }
                input #resolve-reason type="text" name="reason" required maxlength="1000";
                label for="resolve-gateway-charge-id" { "Gateway charge id (with succeeded)" }
                input #resolve-gateway-charge-id type="text" name="gateway_charge_id";
                label for="resolve-decline-code" { "Decline code (with declined, optional)" }
                input #resolve-decline-code type="text" name="decline_code";
                button #resolve-submit type="submit" { "Review the decision…" }
            }
        }
    }
}

/// The resolve form: first posted without `confirm`, it shows what would happen and asks
/// for confirmation; posted again with `confirm=yes`, it applies the decision.
#[derive(Debug, Deserialize)]
pub(super) struct ResolveForm {
    #[serde(rename = "as")]
    as_: ResolveAs,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    gateway_charge_id: String,
    #[serde(default)]
    decline_code: String,
    #[serde(default)]
    confirm: Option<String>,
}

impl ResolveForm {
    fn request(&self) -> ResolveRequest {
        ResolveRequest {
            as_: self.as_,
            reason: self.reason.clone(),
            gateway_charge_id: set(&self.gateway_charge_id),
            decline_code: set(&self.decline_code),
        }
    }

    fn as_str(&self) -> &'static str {
        match self.as_ {
            ResolveAs::Succeeded => "succeeded",
            ResolveAs::Declined => "declined",
            ResolveAs::Retry => "retry",
        }
    }
}

pub(super) async fn resolve(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    form: Result<Form<ResolveForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(id) = id.parse::<PaymentAttemptId>() else {
        return bad_request(&session, "not a payment_attempt_id");
    };
    let Ok(Form(form)) = form else {
        return bad_request(
            &session,
            "Choose succeeded, declined or retry, and give a reason.",
        );
    };
    if form.reason.trim().is_empty() {
        return bad_request(
            &session,
            "A reason is required: it is recorded with the decision. Nothing was changed.",
        );
    }
    if form.confirm.as_deref() != Some("yes") {
        let body = confirmation(&session, id, &form);
        return page(StatusCode::OK, "Confirm the decision", Some(&session), body);
    }
    let actor = session.principal.actor.clone();
    let outcome = resolve::resolve(
        &state.store,
        state
            .reconciler
            .as_ref()
            .map(crate::reconciler::Reconciler::gateway),
        id,
        &form.request(),
        &actor,
        Via::Console,
        &state.retry_window,
    )
    .await
    .map(|resolved| (resolved.status, resolved.summary()));
    decision_page(&session, id, "Resolved", outcome)
}

/// What the decision would do, and the form that confirms it.
fn confirmation(session: &Session, id: PaymentAttemptId, form: &ResolveForm) -> Markup {
    html! {
        p #confirm-summary {
            "Resolve attempt " code { (id) } " as " strong #confirm-as { (form.as_str()) }
            @if let Some(charge) = set(&form.gateway_charge_id) { " with gateway charge " code { (charge) } }
            @if let Some(code) = set(&form.decline_code) { " with decline code " code { (code) } }
            ", because: " q #confirm-reason { (form.reason.trim()) } "?"
        }
        p .hint { @match form.as_ {
            ResolveAs::Succeeded => "The attempt becomes succeeded and its payment-succeeded event is published.",
            ResolveAs::Declined => "The attempt becomes declined and its payment-declined event is published.",
            ResolveAs::Retry => "The executor sends the charge again with the same idempotency key.",
        } }
        form #confirm-form method="post" action=(format!("/console/attempts/{id}/resolve")) {
            (csrf_field(session))
            input type="hidden" name="as" value=(form.as_str());
            input type="hidden" name="reason" value=(form.reason);
            input type="hidden" name="gateway_charge_id" value=(form.gateway_charge_id);
            input type="hidden" name="decline_code" value=(form.decline_code);
            input type="hidden" name="confirm" value="yes";
            button #confirm-submit type="submit" { "Confirm: resolve as " (form.as_str()) }
            " "
            a #confirm-cancel href=(format!("/console/attempts/{id}")) { "Cancel" }
        }
    }
}
