//! The console's findings pages: the list (`/console/findings`), open first, and a finding
//! with its history (`/console/findings/{id}`: the other findings about the same charge and
//! what became of them), each open one resolvable with a reason through the same function
//! as `findings resolve`, after a confirmation page that shows the history too, as every
//! other console action (the guard has checked the CSRF token and the operator's role
//! before a POST gets here).

use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Form;
use maud::{html, Markup};

use super::layout::{bad_request, csrf_field, failed, page, refused};
use super::session::Session;
use crate::config::UsageError;
use crate::http::AdminState;
use crate::operator::findings::{
    checked_reason, resolve as resolve_finding, show, FindingDetail, MAX_REASON_CHARS,
};
use crate::operator::Via;
use crate::store::findings::{self, EarlierFinding, Finding, FindingResolved, FindingState};

/// `?state=open|resolved|all` (open by default).
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct FindingsQuery {
    state: Option<FindingState>,
}

/// `GET /console/findings`.
pub(super) async fn list(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    query: Result<Query<FindingsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return bad_request(&session, "state: open, resolved or all.");
    };
    let shown = query.state.unwrap_or(FindingState::Open);
    let list = match findings::list(&state.store, shown, 200).await {
        Ok(list) => list,
        Err(err) => return failed(&session, err),
    };
    let body = html! {
        p .hint { "Discrepancies between onecharge's ledger and the gateway's own records, found by the reconciliation sweep and the gateway's webhooks. docs/operations.md says what each class means and what to do." }
        p {
            a #findings-open href="/console/findings?state=open" { "Open" } " · "
            a #findings-resolved href="/console/findings?state=resolved" { "FindingResolved" } " · "
            a #findings-all href="/console/findings?state=all" { "All" }
        }
        @if list.is_empty() { p #findings-empty { "No findings." } }
        @else {
            table #findings-table {
                thead { tr { th { "id" } th { "class" } th { "evidence" } th { "attempt / reference" } th { "gateway ids" } th { "detail" } th { "seen" } th { "state" } } }
                tbody {
                    @for f in &list {
                        tr data-finding-id=(f.id) {
                            td { a .finding-link href=(format!("/console/findings/{}", f.id)) { (f.id) } }
                            td .finding-class { (f.class.as_str()) }
                            td .finding-evidence { code { (f.evidence) } }
                            td {
                                @if let Some(id) = f.payment_attempt_id {
                                    a href=(format!("/console/attempts/{id}")) { code { (id) } }
                                } @else { code { (f.reference.clone().unwrap_or_default()) } }
                            }
                            td { code { (f.gateway_ids.join(", ")) } }
                            td { (f.detail) }
                            td { (f.seen_count) "× (last " (crate::format::at(f.last_seen_at)) ")" }
                            td {
                                @if f.state == "open" {
                                    (resolve_form(&session, f.id, ""))
                                } @else {
                                    "resolved by " (f.resolved_by.clone().unwrap_or_default()) ": " (f.resolution.clone().unwrap_or_default())
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    page(StatusCode::OK, "Findings", Some(&session), body)
}

/// `GET /console/findings/{id}`: the finding, and its history.
pub(super) async fn one(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(id): Path<i64>,
) -> Response {
    let detail = match show(&state.store, id).await {
        Ok(Some(detail)) => detail,
        Ok(None) => return refused(StatusCode::NOT_FOUND, Some(&session), "No such finding."),
        Err(err) => return failed(&session, err),
    };
    let FindingDetail {
        finding: f,
        history,
    } = &detail;
    let body = html! {
        table #finding {
            tr { th { "class" } td #finding-class { (f.class.as_str()) } }
            tr { th { "evidence" } td #finding-evidence { code { (f.evidence) } } }
            tr { th { "attempt / reference" } td {
                @if let Some(attempt) = f.payment_attempt_id {
                    a href=(format!("/console/attempts/{attempt}")) { code { (attempt) } }
                } @else { code { (f.reference.clone().unwrap_or_default()) } }
            } }
            tr { th { "gateway ids" } td { code { (f.gateway_ids.join(", ")) } } }
            tr { th { "detail" } td { (f.detail) } }
            tr { th { "source" } td { (format!("{:?}", f.source).to_lowercase()) } }
            tr { th { "seen" } td { (f.seen_count) "× (first " (crate::format::at(f.first_seen_at)) ", last " (crate::format::at(f.last_seen_at)) ")" } }
            tr { th { "state" } td #finding-state {
                @if f.state == "open" { (resolve_form(&session, f.id, "")) }
                @else { "resolved by " (f.resolved_by.clone().unwrap_or_default()) " at " (f.resolved_at.map(|t| t.to_string()).unwrap_or_default()) ": " (f.resolution.clone().unwrap_or_default()) }
            } }
        }
        h2 { "History of this charge" }
        (history_table(history))
        p { a href="/console/findings" { "Back to the findings" } }
    };
    page(
        StatusCode::OK,
        &format!("Finding {id}"),
        Some(&session),
        body,
    )
}

/// The other findings about the same charge, oldest first: what was seen before (a refund
/// someone already answered) and what became of it.
fn history_table(history: &[EarlierFinding]) -> Markup {
    html! {
        @if history.is_empty() {
            p #finding-history-empty .hint { "No other finding about this charge." }
        } @else {
            table #finding-history {
                thead { tr { th { "finding" } th { "evidence" } th { "first seen" } th { "state" } } }
                tbody {
                    @for h in history {
                        tr data-finding-id=(h.finding_id) {
                            td { a href=(format!("/console/findings/{}", h.finding_id)) { (h.finding_id) } }
                            td { code { (h.evidence) } }
                            td { (crate::format::at(h.first_seen_at)) }
                            td {
                                (h.state)
                                @if let (Some(by), Some(why)) = (&h.resolved_by, &h.resolution) {
                                    ": by " (by) ": " q { (why) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The form that resolves finding `id`, holding `reason` (empty on the list; what was
/// typed when it comes back refused).
fn resolve_form(session: &Session, id: i64, reason: &str) -> Markup {
    html! {
        form .finding-resolve-form method="post" action=(format!("/console/findings/{id}/resolve")) {
            (csrf_field(session))
            input type="text" name="reason" placeholder="What was done" required maxlength=(MAX_REASON_CHARS) value=(reason);
            button type="submit" { "Review the resolution…" }
        }
    }
}

/// A resolution refused before anything was written (`400`): why, and the form again with
/// what was typed, to correct it.
fn refused_with_form(session: &Session, id: i64, why: &str, reason: &str) -> Response {
    page(
        StatusCode::BAD_REQUEST,
        "Refused",
        Some(session),
        html! {
            p #refusal .error data-testid="refusal" { (why) }
            p { "Finding " (id) ":" }
            (resolve_form(session, id, reason))
            p { a href="/console/findings" { "Back to the findings" } }
        },
    )
}

/// The resolve form: first posted without `confirm`, it shows the finding and the reason
/// and asks for confirmation; posted again with `confirm=yes`, it resolves the finding.
#[derive(Debug, serde::Deserialize)]
pub(super) struct ResolveForm {
    reason: String,
    #[serde(default)]
    confirm: Option<String>,
}

/// `POST /console/findings/{id}/resolve`.
pub(super) async fn resolve(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(id): Path<i64>,
    form: Result<Form<ResolveForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(form)) = form else {
        return bad_request(
            &session,
            "Give a reason: it is recorded with the resolution.",
        );
    };
    if form.reason.trim().is_empty() {
        return refused_with_form(
            &session,
            id,
            "A reason is required. Nothing was changed.",
            &form.reason,
        );
    }
    if let Err(why) = checked_reason(&form.reason) {
        return refused_with_form(
            &session,
            id,
            &format!("{why}. Nothing was changed."),
            &form.reason,
        );
    }
    if form.confirm.as_deref() != Some("yes") {
        return match show(&state.store, id).await {
            Ok(Some(detail)) if detail.finding.state == "open" => page(
                StatusCode::OK,
                "Confirm the resolution",
                Some(&session),
                confirmation(&session, &detail, &form.reason),
            ),
            Ok(Some(detail)) => already_resolved(&session, &detail.finding),
            Ok(None) => refused(StatusCode::NOT_FOUND, Some(&session), "No such finding."),
            Err(err) => failed(&session, err),
        };
    }
    match resolve_finding(
        &state.store,
        id,
        &session.principal.actor,
        Via::Console,
        &form.reason,
    )
    .await
    {
        Ok(FindingResolved::Done(finding)) => page(
            StatusCode::OK,
            "FindingResolved",
            Some(&session),
            html! {
                p #result .success data-state=(finding.state) {
                    "Finding " (finding.id) " resolved by " (finding.resolved_by.clone().unwrap_or_default())
                    ": " q { (finding.resolution.clone().unwrap_or_default()) }
                }
                p { a #back-to-findings href="/console/findings" { "Back to the findings" } }
            },
        ),
        Ok(FindingResolved::NotFound) => {
            refused(StatusCode::NOT_FOUND, Some(&session), "No such finding.")
        }
        Ok(FindingResolved::AlreadyResolved(finding)) => already_resolved(&session, &finding),
        Err(err) if err.is::<UsageError>() => refused_with_form(
            &session,
            id,
            &format!("{err}. Nothing was changed."),
            &form.reason,
        ),
        Err(err) => failed(&session, format!("{err:#}")),
    }
}

/// The refusal of a finding resolved before (`409`): by whom; nothing changed.
fn already_resolved(session: &Session, finding: &Finding) -> Response {
    refused(
        StatusCode::CONFLICT,
        Some(session),
        &format!(
            "Finding {} was already resolved by {}. Nothing was changed.",
            finding.id,
            finding.resolved_by.as_deref().unwrap_or_default()
        ),
    )
}

/// What the resolution would record, the finding's history (a person resolving a dispute
/// should see the refund answered before), and the form that confirms it.
fn confirmation(session: &Session, detail: &FindingDetail, reason: &str) -> Markup {
    let finding = &detail.finding;
    let id = finding.id;
    html! {
        p #confirm-summary {
            "Resolve finding " (id) " (" strong { (finding.class.as_str()) } ", "
            @if let Some(attempt) = finding.payment_attempt_id { "attempt " code { (attempt) } }
            @else { "reference " code { (finding.reference.clone().unwrap_or_default()) } }
            @if !finding.gateway_ids.is_empty() { ", " code { (finding.gateway_ids.join(", ")) } }
            "), because: " q #confirm-reason { (reason.trim()) } "?"
        }
        p .hint { (finding.detail) " (evidence " code { (finding.evidence) } ")" }
        h2 { "History of this charge" }
        (history_table(&detail.history))
        p .hint { "The finding is closed with your name and this reason, and the audit trail records it. Nothing at the gateway or in the attempt changes." }
        form #confirm-form method="post" action=(format!("/console/findings/{id}/resolve")) {
            (csrf_field(session))
            input type="hidden" name="reason" value=(reason);
            input type="hidden" name="confirm" value="yes";
            button #confirm-submit type="submit" { "Confirm: resolve finding " (id) }
            " "
            a #confirm-cancel href="/console/findings" { "Cancel" }
        }
    }
}
