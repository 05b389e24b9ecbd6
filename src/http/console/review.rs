//! The review queue (`/console/review`): every attempt in `needs_review`, oldest first.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::html;
use serde::Deserialize;
use time::OffsetDateTime;

use super::fields::parse_set;
use super::layout::{bad_request, failed, page, PAGE_SIZE};
use super::session::Session;
use crate::format;
use crate::http::AdminState;
use crate::operator::attempts::AttemptCursor;
use crate::store::console as sql;

/// The review queue's page: the cursor of the previous page's last attempt.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ReviewQuery {
    after: String,
}

/// Every attempt in `needs_review`, oldest first, [`PAGE_SIZE`] a page (`?after=<cursor>`,
/// **Later attempts →**), the queue's full length on every page.
pub(super) async fn review(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    query: Result<Query<ReviewQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return bad_request(
            &session,
            "The review queue's parameters are not understood.",
        );
    };
    let after = match parse_set::<AttemptCursor>(&query.after) {
        Ok(after) => after,
        Err(why) => return bad_request(&session, &why),
    };
    let read = tokio::try_join!(
        sql::count_in_review(&state.store),
        sql::review_page(&state.store, after, PAGE_SIZE),
    );
    let (total, entries) = match read {
        Ok(read) => read,
        Err(err) => return failed(&session, err),
    };
    let next_page = entries
        .last()
        .filter(|_| entries.len() == PAGE_SIZE)
        .map(|last| format!("/console/review?after={}", last.cursor()));
    let now = OffsetDateTime::now_utc();
    let body = html! {
        p #review-count data-count=(total) data-page-count=(entries.len()) {
            (total) " attempt" @if total != 1 { "s" } " in needs_review, oldest first"
            @if after.is_some() || next_page.is_some() { ", " (PAGE_SIZE) " per page" }
            ". Each needs a person: look the charge up at the gateway by its idempotency key, then resolve it."
        }
        @if !entries.is_empty() {
            table #review-table {
                thead { tr { th { "payment attempt" } th { "order" } th { "amount" } th { "waiting" } th { "reason" } th {} } }
                tbody {
                    @for a in &entries {
                        tr data-testid="review-row" data-attempt-id=(a.payment_attempt_id) {
                            td { a .attempt-link href=(format!("/console/attempts/{}", a.payment_attempt_id)) { code { (a.payment_attempt_id) } } }
                            td { (a.order_id) }
                            td { (a.money.to_string()) }
                            td { (format::short(now - a.updated_at)) }
                            td .review-reason { (a.review_reason.as_deref().unwrap_or("-")) }
                            td { a .resolve-link href=(format!("/console/attempts/{}#resolve-section", a.payment_attempt_id)) { "Resolve…" } }
                        }
                    }
                }
            }
        }
        p {
            @if after.is_some() { a #review-first-page href="/console/review" { "← Oldest attempts" } " " }
            @if let Some(next) = next_page { a #review-next-page href=(next) { "Later attempts →" } }
        }
    };
    page(StatusCode::OK, "Review queue", Some(&session), body)
}
