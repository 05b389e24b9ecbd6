//! The frame every console page is drawn in, the refusals every page may answer, and the
//! small pieces of markup several pages share. The HTML is written with maud (escaped by
//! default, checked at compile time, no template files to ship). Stable `id`s and
//! `data-testid`s on every element a person or a browser test looks for; the list is in
//! docs/operations.md.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use maud::{html, Markup, DOCTYPE};

use super::request_id::RequestId;
use super::session::Session;
use crate::domain::AttemptStatus;

/// Attempts (and audit entries) per page.
pub(super) const PAGE_SIZE: usize = 50;

/// The stylesheet, embedded in the binary.
const STYLE: &str = include_str!("style.css");

pub(super) async fn stylesheet() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

/// The frame of every page: navigation, who is signed in, sign out. With `refresh`, the
/// browser loads the page again every that many seconds (a meta refresh: the CSP allows no
/// script).
fn layout(title: &str, session: Option<&Session>, body: Markup, refresh: Option<u32>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                @if let Some(seconds) = refresh {
                    meta #refresh http-equiv="refresh" content=(seconds);
                }
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · onecharge console" }
                link rel="stylesheet" href="/console/style.css";
            }
            body {
                header {
                    nav #nav {
                        span .brand { "onecharge" }
                        a #nav-overview href="/console/" { "Overview" }
                        a #nav-search href="/console/attempts" { "Search" }
                        a #nav-review href="/console/review" { "Review queue" }
                        a #nav-refunds href="/console/refunds" { "Refunds" }
                        a #nav-bulk href="/console/bulk" { "Bulk actions" }
                        a #nav-dead-letters href="/console/dead-letters" { "Dead letters" }
                        a #nav-audit href="/console/audit" { "Audit" }
                        a #nav-findings href="/console/findings" { "Findings" }
                        a #nav-fleet href="/console/fleet" { "Fleet" }
                        @if let Some(session) = session {
                            span #whoami data-testid="whoami" data-actor=(session.principal.actor) data-role=(session.principal.role.as_str()) {
                                (session.principal.name) " (" (session.principal.role.as_str()) ")"
                            }
                            form #logout-form method="post" action="/console/logout" {
                                (csrf_field(session))
                                button #logout-button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                @for pause in session.map(|s| s.fleet_pauses.as_slice()).unwrap_or_default() {
                    p .banner data-testid="fleet-paused" data-paused-by=(pause.paused_by) data-scope=(pause.scope.as_str()) data-currency=[pause.currency.map(|c| c.code())] {
                        strong { (capitalised(&pause.cover().to_string())) " paused across the fleet" }
                        " by " (pause.paused_by) " since " (crate::format::at(pause.paused_at)) ": " (pause.reason)
                        ". No executor claims what it holds back until it is resumed ("
                        a href="/console/fleet" { "Fleet" } ")."
                    }
                }
                main #main { h1 #page-title { (title) } (body) }
            }
        }
    }
}

/// `Charging in ISK`: a phrase that starts a sentence.
fn capitalised(phrase: &str) -> String {
    let mut chars = phrase.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

pub(super) fn csrf_field(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

pub(super) fn page(
    status: StatusCode,
    title: &str,
    session: Option<&Session>,
    body: Markup,
) -> Response {
    (status, layout(title, session, body, None)).into_response()
}

/// [`page`] that the browser loads again every `seconds`: a page a person leaves open.
pub(super) fn refreshing_page(
    title: &str,
    session: &Session,
    body: Markup,
    seconds: u32,
) -> Response {
    (
        StatusCode::OK,
        layout(title, Some(session), body, Some(seconds)),
    )
        .into_response()
}

/// A refusal page: why, and nothing changed.
/// A request the console refuses as malformed or incomplete (`400`); nothing was done.
pub(super) fn bad_request(session: &Session, why: &str) -> Response {
    refused(StatusCode::BAD_REQUEST, Some(session), why)
}

pub(super) fn refused(status: StatusCode, session: Option<&Session>, why: &str) -> Response {
    let title = if status == StatusCode::FORBIDDEN {
        "Not allowed"
    } else {
        "Refused"
    };
    page(
        status,
        title,
        session,
        html! { p #refusal .error data-testid="refusal" { (why) } },
    )
}

/// A failure of the service itself (`500`): the page says only that, and the request id
/// under which `err` is logged — never the error, whose words (a database's, NATS's) are
/// the log's.
/// The page after a person's decision about attempt `id` (a resolution, a cancel): the
/// status it came to and its summary under `title`, or why it was refused, with nothing
/// changed. One place, so every decision answers the same way for the same refusal.
pub(super) fn decision_page(
    session: &Session,
    id: crate::domain::PaymentAttemptId,
    title: &str,
    outcome: Result<(AttemptStatus, String), crate::operator::resolve::ResolveError>,
) -> Response {
    use crate::operator::resolve::ResolveError;
    match outcome {
        Ok((status, summary)) => page(
            StatusCode::OK,
            title,
            Some(session),
            html! {
                p #result .success data-status=(status.as_str()) { (summary) }
                p { a #back-to-attempt href=(format!("/console/attempts/{id}")) { "Back to the attempt" } }
            },
        ),
        Err(ResolveError::Invalid(why)) => {
            bad_request(session, &format!("{why}. Nothing was changed."))
        }
        Err(err @ ResolveError::NotFound(_)) => {
            refused(StatusCode::NOT_FOUND, Some(session), &err.to_string())
        }
        Err(ResolveError::Refused(why)) => refused(StatusCode::CONFLICT, Some(session), &why),
        Err(err @ ResolveError::Store(_)) => failed(session, err),
    }
}

pub(super) fn failed(session: &Session, err: impl std::fmt::Display) -> Response {
    failed_saying(session, err, "The request failed on the server.")
}

/// [`failed`], saying first `what_happened`: what the person must know of a failure that
/// came after something was done (a replay that was published), in words of our own.
pub(super) fn failed_saying(
    session: &Session,
    err: impl std::fmt::Display,
    what_happened: &str,
) -> Response {
    tracing::error!(error = %err, "console request failed");
    page(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Something failed",
        Some(session),
        html! { p #failure .error { (what_happened) " " (in_the_log()) } },
    )
}

/// In place of what could not be read on a page that shows the rest (`what`: "The
/// charts"): that it failed, and where the error is. `err` is logged, never shown.
pub(super) fn unreadable(what: &str, err: &dyn std::fmt::Display) -> Markup {
    tracing::error!(error = %err, "console: {what} could not be read");
    html! { span .error { (what) " could not be read. " (in_the_log()) } }
}

/// Where the error is: the service's log, under this request's id.
pub(super) fn in_the_log() -> Markup {
    html! {
        @match RequestId::current() {
            Some(id) => {
                "The service's log has the error under request id "
                code #request-id data-request-id=(id) { (id) }
                " (quote it when you report this)."
            }
            None => "The service's log has the error.",
        }
    }
}

/// The sessions table could not be read or written: nobody can be signed in, out or
/// recognised until the database answers. Said as what to do; the error is in the log,
/// under the request's id.
pub(super) fn sessions_unavailable(err: sqlx::Error) -> Response {
    tracing::error!(error = %err, "console sessions unavailable");
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Refused",
        None,
        html! {
            p #refusal .error data-testid="refusal" {
                "The console cannot reach its sessions in the database, so it can neither tell who you are nor sign you in or out (if you were signing out, you are still signed in): check that PostgreSQL answers (/readyz), then reload the page or sign in again. "
                (in_the_log())
            }
        },
    )
}

pub(super) async fn not_found(session: Option<Extension<Session>>) -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Not found",
        session.as_ref().map(|Extension(s)| s),
        html! { p #not-found { "There is no console page here. " a href="/console/" { "Overview" } } },
    )
}

pub(super) fn text_input(id: &str, name: &str, label: &str, value: &str) -> Markup {
    html! {
        label for=(id) { (label) }
        input id=(id) type="text" name=(name) value=(value);
    }
}

/// A select of states, "any" first, `selected` chosen: the search forms' State field.
pub(super) fn state_select<S: Copy + PartialEq>(
    id: &str,
    states: &[S],
    selected: Option<S>,
    name: impl Fn(S) -> &'static str,
) -> Markup {
    html! {
        label for=(id) { "State" }
        select id=(id) name="status" {
            option value="" { "any" }
            @for &s in states {
                option value=(name(s)) selected[selected == Some(s)] { (name(s)) }
            }
        }
    }
}

pub(super) fn status_badge(status: AttemptStatus) -> Markup {
    html! { span class=(format!("status status-{}", status.as_str())) data-testid="status" { (status.as_str()) } }
}

/// A refund's state, drawn like an attempt's (the shared names share a colour).
pub(super) fn refund_badge(status: crate::domain::RefundStatus) -> Markup {
    html! { span class=(format!("status status-{}", status.as_str())) data-testid="refund-status" { (status.as_str()) } }
}
