//! The audit trail (`/console/audit`): every manual action, newest first, filtered by actor
//! or attempt; its table also lists an attempt's own actions on the attempt's page.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use serde::Deserialize;
use time::OffsetDateTime;

use super::fields::{parse_set, set};
use super::layout::{bad_request, failed, page, text_input, PAGE_SIZE};
use super::session::Session;
use crate::domain::PaymentAttemptId;
use crate::format;
use crate::http::AdminState;
use crate::operator::audit;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct AuditQuery {
    actor: String,
    attempt: String,
    before: String,
}

pub(super) fn audit_table(entries: &[audit::AuditEntry], now: OffsetDateTime) -> Markup {
    html! {
        @if entries.is_empty() {
            p #audit-empty { "No manual action recorded." }
        } @else {
            table #audit-table {
                thead { tr { th { "id" } th { "at" } th { "actor" } th { "via" } th { "action" } th { "attempts" } th { "outcome" } th { "reason" } } }
                tbody {
                    @for e in entries {
                        tr data-testid="audit-row" data-audit-id=(e.id) data-actor=(e.actor) data-action=(e.action) {
                            td { (e.id) }
                            td { (format::at_relative(e.at, now)) }
                            td .actor { (e.actor) }
                            td .via { (e.via) }
                            td .action { (e.action) }
                            td .attempts {
                                @for id in &e.payment_attempt_ids {
                                    a href=(format!("/console/attempts/{id}")) { code { (id) } } " "
                                }
                                @if let Some(seq) = e.dlq_sequence { "dead letter " (seq) }
                            }
                            td .outcome { (e.outcome) }
                            td .reason { (e.reason.as_deref().unwrap_or("-")) }
                        }
                    }
                }
            }
        }
    }
}

pub(super) async fn audit(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return bad_request(&session, "The audit filters are not understood.");
    };
    let attempt = match parse_set::<PaymentAttemptId>(&query.attempt) {
        Ok(attempt) => attempt,
        Err(_) => return bad_request(&session, "attempt: not a payment_attempt_id (a UUID)."),
    };
    let before_id = match set(&query.before)
        .map(|c| audit::parse_cursor(&c))
        .transpose()
    {
        Ok(before) => before,
        Err(why) => return bad_request(&session, &why),
    };
    let filter = audit::AuditFilter {
        actor: set(&query.actor),
        payment_attempt_id: attempt,
        before_id,
    };
    let trail = match audit::list(&state.store, &filter, PAGE_SIZE).await {
        Ok(trail) => trail,
        Err(err) => return failed(&session, err),
    };
    let now = OffsetDateTime::now_utc();
    let next = trail.next.map(|cursor| {
        let cursor = cursor.to_string();
        let params = [
            ("actor", query.actor.trim()),
            ("attempt", query.attempt.trim()),
            ("before", cursor.as_str()),
        ];
        let params: Vec<_> = params.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        format!(
            "/console/audit?{}",
            serde_urlencoded::to_string(&params).unwrap_or_default()
        )
    });
    let body = html! {
        p .hint { "Every manual action — resolve, recheck, dead-letter replay, bulk — from the console, the API or the command line: who, when, what, on which attempts, why. Newest first." }
        form #audit-form method="get" action="/console/audit" {
            (text_input("audit-actor", "actor", "Actor (e.g. operator:ada)", &query.actor))
            (text_input("audit-attempt", "attempt", "Payment attempt id", &query.attempt))
            button #audit-submit type="submit" { "Filter" }
        }
        (audit_table(&trail.items, now))
        @if let Some(next) = next { p { a #audit-next-page href=(next) { "Older entries →" } } }
    };
    page(StatusCode::OK, "Audit", Some(&session), body)
}
