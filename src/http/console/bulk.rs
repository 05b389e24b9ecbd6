//! Bulk actions (`/console/bulk`): a filter, a preview of what it matches, then retry or
//! recheck of exactly the previewed attempts.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Form};
use maud::{html, Markup};
use serde::Deserialize;

use super::fields::{console_time, parse_set, set};
use super::layout::{bad_request, csrf_field, failed, in_the_log, page, refused, text_input};
use super::session::Session;
use crate::domain::{AttemptStatus, PaymentAttemptId};
use crate::http::AdminState;
use crate::operator::bulk::{self, BulkAction, BulkError, BulkFilter, BulkOutcome, BulkRequest};
use crate::operator::Via;

/// The bulk form: posted without `confirm`, a preview (the count and every matching id,
/// nothing done); with `confirm=yes`, `max` (the previewed count) and `ids` (the previewed
/// ids, comma separated), the action on exactly those ids that still match.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct BulkForm {
    action: String,
    status: String,
    order_id: String,
    customer_id: String,
    created_after: String,
    created_before: String,
    reason: String,
    max: Option<usize>,
    ids: String,
    confirm: Option<String>,
}

/// The previewed ids a confirmation carries: at least one, each a payment_attempt_id.
fn previewed_ids(field: &str) -> Result<Vec<PaymentAttemptId>, String> {
    let ids = field
        .split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(|id| id.parse::<PaymentAttemptId>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            "The confirmation's attempt ids are not understood: preview again. Nothing was done."
                .to_owned()
        })?;
    if ids.is_empty() {
        return Err("A confirmation carries the attempts its preview showed, and this one carries none: preview again. Nothing was done.".into());
    }
    Ok(ids)
}

fn bulk_form(session: &Session, form: &BulkForm) -> Markup {
    html! {
        form #bulk-form method="post" action="/console/bulk" {
            (csrf_field(session))
            label for="bulk-action" { "Action" }
            select #bulk-action name="action" {
                option value="retry" selected[form.action == "retry"] { "retry — resolve each needs_review attempt as retry" }
                option value="recheck" selected[form.action == "recheck"] { "recheck — look each unknown / needs_review attempt up now" }
            }
            label for="bulk-status" { "State" }
            select #bulk-status name="status" {
                option value="" { "any the action applies to" }
                option value="needs_review" selected[form.status == "needs_review"] { "needs_review" }
                option value="unknown" selected[form.status == "unknown"] { "unknown" }
            }
            (text_input("bulk-order-id", "order_id", "Order id", &form.order_id))
            (text_input("bulk-customer-id", "customer_id", "Customer id", &form.customer_id))
            (text_input("bulk-created-after", "created_after", "Created at or after (UTC)", &form.created_after))
            (text_input("bulk-created-before", "created_before", "Created before (UTC)", &form.created_before))
            label for="bulk-reason" { "Reason (recorded for every attempt)" }
            input #bulk-reason type="text" name="reason" required maxlength="1000" value=(form.reason);
            button #bulk-preview-submit type="submit" { "Preview" }
        }
    }
}

pub(super) async fn bulk_page(Extension(session): Extension<Session>) -> Response {
    let body = html! {
        p #bulk-cap data-cap=(bulk::BULK_CAP) {
            "Retry or recheck every attempt a filter matches. A preview comes first and changes nothing; at most "
            (bulk::BULK_CAP) " attempts per action (narrow the filter for more)."
        }
        (bulk_form(&session, &BulkForm { action: "retry".into(), status: "needs_review".into(), ..Default::default() }))
    };
    page(StatusCode::OK, "Bulk actions", Some(&session), body)
}

pub(super) async fn bulk_action(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Form(form): Form<BulkForm>,
) -> Response {
    let request = match bulk_request(&form) {
        Ok(request) => request,
        Err(why) => return bad_request(&session, &why),
    };
    let outcome = bulk::bulk(
        &state.store,
        state.reconciler.as_ref(),
        &request,
        &session.principal.actor,
        Via::Console,
        &state.retry_window,
    )
    .await;
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(err) => return bulk_refusal(&session, err),
    };
    if outcome.preview {
        let body = preview(&session, &form, &outcome);
        page(StatusCode::OK, "Bulk action: preview", Some(&session), body)
    } else {
        for item in outcome
            .results
            .iter()
            .filter(|item| item.outcome == "failed")
        {
            tracing::error!(
                payment_attempt_id = %item.payment_attempt_id,
                error = %item.detail,
                "console bulk action failed for an attempt"
            );
        }
        let body = done(&form, &outcome);
        page(StatusCode::OK, "Bulk action: done", Some(&session), body)
    }
}

/// What the form asks: without `confirm`, a preview of the filter; with it, the action on
/// the previewed ids. Why not, when a field is not understood.
fn bulk_request(form: &BulkForm) -> Result<BulkRequest, String> {
    let action = match form.action.as_str() {
        "retry" => BulkAction::Retry,
        "recheck" => BulkAction::Recheck,
        _ => return Err("Choose retry or recheck.".to_owned()),
    };
    let status = parse_set::<AttemptStatus>(&form.status).map_err(|err| err.to_string())?;
    let created_after = console_time("created after", &form.created_after)?;
    let created_before = console_time("created before", &form.created_before)?;
    let confirmed = form.confirm.as_deref() == Some("yes");
    let ids = if confirmed {
        Some(previewed_ids(&form.ids)?)
    } else {
        None
    };
    Ok(BulkRequest {
        action,
        filter: BulkFilter {
            status,
            order_id: set(&form.order_id),
            customer_id: set(&form.customer_id),
            created_after,
            created_before,
            ..Default::default()
        },
        reason: form.reason.clone(),
        preview: !confirmed,
        max: if confirmed { form.max } else { None },
        ids,
    })
}

/// The page of a bulk action refused whole: nothing was done.
fn bulk_refusal(session: &Session, err: BulkError) -> Response {
    match err {
        BulkError::Invalid(why) => bad_request(session, &why),
        err @ BulkError::TooMany { .. } => refused(
            StatusCode::UNPROCESSABLE_ENTITY,
            Some(session),
            &err.to_string(),
        ),
        BulkError::Unavailable(why) => {
            refused(StatusCode::SERVICE_UNAVAILABLE, Some(session), &why)
        }
        err @ BulkError::Failed(_) => failed(session, err),
    }
}

/// The preview: how many match and which, the form that confirms exactly those, and the
/// filter to change.
fn preview(session: &Session, form: &BulkForm, outcome: &BulkOutcome) -> Markup {
    let previewed = outcome
        .ids
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    html! {
        p #bulk-matched data-count=(outcome.matched) {
            (outcome.matched) " attempt" @if outcome.matched != 1 { "s" } " match. Nothing was done yet. "
            "Confirming acts on exactly these, those of them that still match then; an attempt that matches only later is left alone."
        }
        @if !outcome.ids.is_empty() {
            ul #bulk-preview-ids {
                @for id in &outcome.ids {
                    li { a href=(format!("/console/attempts/{id}")) { code { (id) } } }
                }
            }
        }
        @if outcome.matched > 0 {
            form #confirm-form method="post" action="/console/bulk" {
                (csrf_field(session))
                input type="hidden" name="action" value=(form.action);
                input type="hidden" name="status" value=(form.status);
                input type="hidden" name="order_id" value=(form.order_id);
                input type="hidden" name="customer_id" value=(form.customer_id);
                input type="hidden" name="created_after" value=(form.created_after);
                input type="hidden" name="created_before" value=(form.created_before);
                input type="hidden" name="reason" value=(form.reason);
                input type="hidden" name="max" value=(outcome.matched);
                input type="hidden" name="ids" value=(previewed);
                input type="hidden" name="confirm" value="yes";
                button #confirm-submit type="submit" { "Confirm: " (form.action) " " (outcome.matched) " attempt" @if outcome.matched != 1 { "s" } }
                " "
                a #confirm-cancel href="/console/bulk" { "Cancel" }
            }
        }
        h2 { "Change the filter" }
        (bulk_form(session, form))
    }
}

/// What was done, per attempt.
fn done(form: &BulkForm, outcome: &BulkOutcome) -> Markup {
    html! {
        p #result .success data-count=(outcome.results.len()) {
            (form.action) ": " (outcome.results.len()) " attempt" @if outcome.results.len() != 1 { "s" } " handled"
            @if let Some(audit_id) = outcome.audit_id { " (audit entry " (audit_id) ")" } "."
        }
        table #bulk-result {
            thead { tr { th { "payment attempt" } th { "outcome" } th { "detail" } } }
            tbody {
                @for item in &outcome.results {
                    tr data-testid="bulk-item" data-attempt-id=(item.payment_attempt_id) data-outcome=(item.outcome) {
                        td { a href=(format!("/console/attempts/{}", item.payment_attempt_id)) { code { (item.payment_attempt_id) } } }
                        td { (item.outcome) }
                        // A failure's detail is an error's own words (the database's): the
                        // log has it, under the request id shown instead.
                        td { @if item.outcome == "failed" { (in_the_log()) } @else { (item.detail) } }
                    }
                }
            }
        }
    }
}
