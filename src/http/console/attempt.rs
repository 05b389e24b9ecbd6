//! One attempt (`/console/attempts/{id}`): what happens next, the recheck and resolve forms
//! where they apply, its facts, its refunds (and the refund form of a succeeded charge), its
//! timeline (picture and table, each refund's moves and calls beside the attempt's) and its
//! manual actions.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use time::OffsetDateTime;

use super::audit::audit_table;
use super::cancel::cancel_form;
use super::charts::{CallMark, TimelinePicture};
use super::layout::{bad_request, failed, page, status_badge};
use super::recheck::recheck_form;
use super::refunds::attempt_refunds_section;
use super::resolve::resolve_form;
use super::session::Session;
use crate::domain::{AttemptStatus, PaymentAttemptId};
use crate::format;
use crate::http::AdminState;
use crate::operator::attempts::{self, AttemptDetail};
use crate::operator::audit;

pub(super) async fn attempt(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
) -> Response {
    let Ok(id) = id.parse::<PaymentAttemptId>() else {
        return bad_request(
            &session,
            &format!("`{id}` is not a payment_attempt_id (a UUID)."),
        );
    };
    let now = OffsetDateTime::now_utc();
    let detail = match attempts::show(&state.store, id, now, &state.retry_window).await {
        Ok(Some(detail)) => detail,
        Ok(None) => {
            return page(
                StatusCode::NOT_FOUND,
                "No such attempt",
                Some(&session),
                html! { p #not-found { "No payment attempt " code { (id) } " is recorded." } },
            )
        }
        Err(err) => return failed(&session, err),
    };
    let trail = audit::list(
        &state.store,
        &audit::AuditFilter {
            payment_attempt_id: Some(id),
            ..Default::default()
        },
        20,
    )
    .await;
    let a = &detail.view.attempt;
    let body = html! {
        p #attempt-id { code { (a.payment_attempt_id) } " " (status_badge(a.status)) }
        (next_section(&detail, now))
        @if matches!(a.status, AttemptStatus::Unknown | AttemptStatus::NeedsReview) {
            (recheck_form(&session, id, state.reconciler.is_some()))
        }
        // Never sent, or holding a PaymentIntent the cancel cancels first (decision 163); a
        // §3 attempt sent before is refused with why.
        @if a.status == AttemptStatus::Pending {
            (cancel_form(&session, id))
        }
        @if a.status == AttemptStatus::NeedsReview {
            (resolve_form(&session, a.payment_attempt_id, a.review_reason.as_deref()))
        }
        (facts_section(&detail, now))
        (attempt_refunds_section(&session, &detail))
        (timeline_section(&detail, now))
        section #attempt-audit {
            h2 { "Manual actions" }
            @match &trail {
                Ok(page) => (audit_table(&page.items, now)),
                Err(_) => p .error { "The audit trail could not be read." }
            }
        }
    };
    page(StatusCode::OK, "Payment attempt", Some(&session), body)
}

/// What happens to the attempt next, and, while it is open, its retry window.
fn next_section(detail: &AttemptDetail, now: OffsetDateTime) -> Markup {
    let a = &detail.view.attempt;
    let next = &detail.view.next_action;
    html! {
        section #next-action data-by=(next.by.as_str()) {
            h2 { "Next" }
            p #next-action-text {
                (next.action)
                @if let Some(at) = next.at { " at " (format::at_relative(at, now)) }
            }
            @if let Some(warning) = &next.warning { p #next-action-warning .warning { (warning) } }
            @if !a.status.is_final() {
                p #retry-window { "Retry window: "
                    @match detail.view.retry_window_closes_at {
                        None => "open: the gateway has never seen the key",
                        Some(closes) if closes > now => { "open until " (format::at_relative(closes, now)) }
                        Some(closes) => { "closed since " (format::at_relative(closes, now)) ": never re-sent; settle it by looking the charge up" }
                    }
                }
            }
        }
    }
}

/// The attempt's facts, one `dd` each with an id from its name.
fn facts_section(detail: &AttemptDetail, now: OffsetDateTime) -> Markup {
    html! {
        section #facts {
            h2 { "Facts" }
            dl #attempt-facts {
                @for (name, value) in attempts::fact_rows(detail, now) {
                    dt { (name) }
                    dd id=(format!("fact-{}", name.replace([' ', '/'], "-").replace("---", "-"))) { (value) }
                }
            }
        }
    }
}

/// The timeline: the picture, then every transition, gateway call and event in a table.
fn timeline_section(detail: &AttemptDetail, now: OffsetDateTime) -> Markup {
    html! {
        section #history {
            h2 { "Timeline" }
            (timeline_picture(detail, now).render())
            table #timeline {
                thead { tr { th { "time (UTC)" } th { "kind" } th { "what" } th { "detail" } } }
                tbody {
                    @for row in attempts::timeline_rows(detail) {
                        tr data-testid="timeline-entry" data-kind=(row.kind) {
                            td { (format::at_ms(row.at)) } td { (row.kind) } td { (row.what) } td { (row.detail) }
                        }
                    }
                }
            }
        }
    }
}

/// The attempt's history as the timeline picture draws it: until now while it may still
/// move, until its last entry once final.
fn timeline_picture(detail: &AttemptDetail, now: OffsetDateTime) -> TimelinePicture {
    let states: Vec<(OffsetDateTime, String)> = detail
        .transitions
        .iter()
        .map(|t| (t.at, t.to_status.clone()))
        .collect();
    let calls: Vec<CallMark> = detail
        .gateway_calls
        .iter()
        .map(|c| CallMark {
            started_at: c.started_at,
            duration_ms: c.duration_ms,
            operation: c.operation.clone(),
            outcome: c.outcome.clone(),
        })
        .collect();
    let events: Vec<(OffsetDateTime, String)> = detail
        .events
        .iter()
        .map(|e| (e.created_at, e.status.clone()))
        .collect();
    let last = states
        .iter()
        .map(|(t, _)| *t)
        .chain(
            calls
                .iter()
                .map(|c| c.started_at + time::Duration::milliseconds(c.duration_ms)),
        )
        .chain(events.iter().map(|(t, _)| *t))
        .max()
        .unwrap_or(now);
    TimelinePicture {
        states,
        calls,
        events,
        end: if detail.view.attempt.status.is_final() {
            last
        } else {
            now.max(last)
        },
    }
}
