//! The sweeps (`/console/sweeps`: when each ran, the window it compared, the pages and
//! records it read, what it found and settled, how it ended) and the Stripe webhook events
//! received (`/console/webhooks`: what was refused and why, by reason, and each accepted
//! event and what it made happen), linked from the overview. Both read the newest rows only: the sweeps' table holds every run, the
//! events' table the ids kept for redeliveries.

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;
use time::OffsetDateTime;

use super::layout::{failed, page};
use super::session::Session;
use crate::format;
use crate::http::AdminState;
use crate::store::console::{recent_sweeps, recent_webhook_events};

/// Rows one page shows.
const SHOWN: i64 = 100;

/// `GET /console/sweeps`.
pub(super) async fn sweeps(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
) -> Response {
    let sweeps = match recent_sweeps(&state.store, SHOWN).await {
        Ok(sweeps) => sweeps,
        Err(err) => return failed(&session, err),
    };
    let now = OffsetDateTime::now_utc();
    let body = html! {
        p .hint { "The reconciliation sweep reads the gateway's own list of charges for a window and compares it with the attempts both ways (docs/operations.md §21). The newest " (SHOWN) ", newest first." }
        @if sweeps.is_empty() { p #sweeps-empty { "No sweep has run yet." } }
        @else {
            table #sweeps-table {
                thead { tr { th { "id" } th { "started" } th { "window" } th { "by" } th { "state" } th { "pages" } th { "records read" } th { "compared" } th { "skipped" } th { "findings" } th { "settled" } } }
                tbody {
                    @for s in &sweeps {
                        tr data-testid="sweep-row" data-sweep-id=(s.id) {
                            td { (s.id) }
                            td { (format::at_relative(s.started_at, now)) }
                            td .window { (format::at(s.window_from)) " – " (format::at(s.window_to)) }
                            td { (s.actor) }
                            td .state {
                                @match (&s.finished_at, &s.error) {
                                    (None, _) => { "running" @if let Some(beat) = s.heartbeat_at { " (heartbeat " (format::at_relative(beat, now)) ")" } }
                                    (Some(end), None) => { "finished " (format::at_relative(*end, now)) }
                                    (Some(end), Some(error)) => { span .error { "failed " (format::at_relative(*end, now)) ": " (error) } }
                                }
                            }
                            td .pages { (s.pages) }
                            td { (s.records_seen) }
                            td { (s.records) }
                            td { (s.records_skipped) }
                            td .findings { @if s.findings > 0 { a href="/console/findings" { (s.findings) } } @else { "0" } }
                            td { (s.settled) }
                        }
                    }
                }
            }
        }
    };
    page(StatusCode::OK, "Sweeps", Some(&session), body)
}

/// `GET /console/webhooks`.
pub(super) async fn webhooks(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
) -> Response {
    let events = match recent_webhook_events(&state.store, SHOWN).await {
        Ok(events) => events,
        Err(err) => return failed(&session, err),
    };
    let refused = match crate::store::findings::webhooks::refusals(&state.store).await {
        Ok(refused) => refused,
        Err(err) => return failed(&session, err),
    };
    let now = OffsetDateTime::now_utc();
    let body = html! {
        p .hint {
            "Stripe's webhook events the listener accepted (signed, of this account's mode), newest " (SHOWN) " first, with what each made happen: "
            code { "woke" } " (its attempt is looked up now), " code { "finding" } ", " code { "ignored" } ". A webhook is a reason to look, never evidence (docs/operations.md §22). "
            "Refused requests are tallied by reason below (written every few seconds; each is logged as "
            code { "webhook refused" } " and counted in " code { "onecharge_webhooks_total{result}" } ")."
        }
        h2 { "Refused" }
        @if refused.is_empty() { p #refusals-empty { "Nothing refused." } }
        @else {
            table #refusals-table {
                thead { tr { th { "why" } th { "refused" } th { "first" } th { "last" } th { "the last one's words" } } }
                tbody {
                    @for r in &refused {
                        tr data-testid="refusal-row" data-result=(r.result) {
                            td .result { code { (r.result) } }
                            td .refused { (r.refused) }
                            td { (format::at_relative(r.first_at, now)) }
                            td { (format::at_relative(r.last_at, now)) }
                            td .why { (r.last_why) }
                        }
                    }
                }
            }
        }
        h2 { "Accepted" }
        @if events.is_empty() { p #webhooks-empty { "No webhook event accepted yet." } }
        @else {
            table #webhooks-table {
                thead { tr { th { "received" } th { "event" } th { "type" } th { "PaymentIntent" } th { "attempt" } th { "outcome" } } }
                tbody {
                    @for e in &events {
                        tr data-testid="webhook-row" {
                            td { (format::at_relative(e.received_at, now)) }
                            td { code { (e.event_id) } }
                            td .event-type { (e.event_type) }
                            td { (e.payment_intent_id.as_deref().unwrap_or("-")) }
                            td { @if let Some(id) = e.payment_attempt_id { a href=(format!("/console/attempts/{id}")) { (id) } } @else { "-" } }
                            td .outcome { (e.outcome) }
                        }
                    }
                }
            }
        }
    };
    page(StatusCode::OK, "Webhook events", Some(&session), body)
}
