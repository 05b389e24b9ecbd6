//! The console's pages: one handler each, the HTML written with maud (escaped by default,
//! checked at compile time, no template files to ship). Stable `id`s and `data-testid`s on
//! every element a person or a browser test looks for; the list is in docs/operations.md.

pub(super) mod findings;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use maud::{html, Markup, DOCTYPE};
use serde::Deserialize;
use time::OffsetDateTime;

use super::charts::{self, CallMark, TimelinePicture};
use super::session::{self, FormToken, Session};
use crate::admin::AdminState;
use crate::domain::{AttemptStatus, PaymentAttemptId};
use crate::operator::attempts::{self, AttemptCursor, AttemptFilter, AttemptView};
use crate::operator::bulk::{self, BulkAction, BulkError, BulkFilter, BulkRequest};
use crate::operator::recheck::{self, RecheckError};
use crate::operator::resolve::{self, ResolveAs, ResolveError, ResolveRequest};
use crate::operator::table;
use crate::operator::{audit, dlq, stats, Via};
use crate::store::charts::Window;
use crate::store::console as sql;

/// Attempts per search page.
const PAGE_SIZE: usize = 50;

/// The stylesheet, embedded in the binary.
const STYLE: &str = include_str!("style.css");

pub(super) async fn stylesheet() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

/// The frame of every page: navigation, who is signed in, sign out.
fn layout(title: &str, session: Option<&Session>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
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
                        a #nav-bulk href="/console/bulk" { "Bulk actions" }
                        a #nav-dead-letters href="/console/dead-letters" { "Dead letters" }
                        a #nav-audit href="/console/audit" { "Audit" }
                        a #nav-findings href="/console/findings" { "Findings" }
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
                main #main { h1 #page-title { (title) } (body) }
            }
        }
    }
}

fn csrf_field(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

fn page(status: StatusCode, title: &str, session: Option<&Session>, body: Markup) -> Response {
    (status, layout(title, session, body)).into_response()
}

/// A refusal page: why, and nothing changed.
/// A request the console refuses as malformed or incomplete (`400`); nothing was done.
fn bad_request(session: &Session, why: &str) -> Response {
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

/// A failure of the service itself: said without detail (it is in the log).
fn failed(session: &Session, err: impl std::fmt::Display) -> Response {
    tracing::error!(error = %err, "console request failed");
    page(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Something failed",
        Some(session),
        html! { p #failure .error { "The request failed on the server; its log says why." } },
    )
}

/// The sessions table could not be read or written: nobody can be signed in, out or
/// recognised until the database answers. Said as what to do; the error is in the log.
pub(super) fn sessions_unavailable(err: sqlx::Error) -> Response {
    tracing::error!(error = %err, "console sessions unavailable");
    refused(
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        "The console cannot reach its sessions in the database, so it can neither tell who you are nor sign you in or out (if you were signing out, you are still signed in): check that PostgreSQL answers (/readyz), then reload the page or sign in again.",
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

// ---------------------------------------------------------------------------------------
// Sign in, sign out

#[derive(Debug, Deserialize)]
pub(super) struct LoginQuery {
    next: Option<String>,
}

pub(super) async fn login_form(
    State(state): State<AdminState>,
    Extension(form_token): Extension<FormToken>,
    Query(query): Query<LoginQuery>,
) -> Response {
    login_page(
        &state,
        &form_token,
        StatusCode::OK,
        query.next.as_deref(),
        None,
    )
}

/// The sign-in form, which carries the browser's form token (the guard checks it when the
/// form comes back: no login CSRF).
fn login_page(
    state: &AdminState,
    form_token: &FormToken,
    status: StatusCode,
    next: Option<&str>,
    error: Option<&str>,
) -> Response {
    let body = html! {
        @if super::is_open(state) {
            p #open-console-note {
                "This console is open: no admin token and no operators are configured, and it listens on loopback. "
                a href="/console/" { "Go to the overview" }
            }
        }
        @if let Some(error) = error {
            p #login-error .error data-testid="login-error" { (error) }
        }
        form #login-form method="post" action="/console/login" {
            input type="hidden" name="csrf" value=(form_token.0);
            label for="login-token" { "Operator token" }
            input #login-token type="password" name="token" autocomplete="off" required autofocus;
            input type="hidden" name="next" value=(safe_next(next));
            button #login-submit type="submit" { "Sign in" }
        }
        p .hint { "A token is minted with " code { "onecharge operators new-token" } "; the shared admin token works too." }
    };
    page(status, "Sign in", None, body)
}

/// Only a console path may be the target after signing in (no open redirect).
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n) if n.starts_with("/console") && !n.starts_with("//") && !n.contains('\\') => n,
        _ => "/console/",
    }
}

/// The sign-in form; its `csrf` field was checked by the guard.
#[derive(Debug, Deserialize)]
pub(super) struct LoginForm {
    token: String,
    next: Option<String>,
}

pub(super) async fn login(
    State(state): State<AdminState>,
    Extension(form_token): Extension<FormToken>,
    Form(form): Form<LoginForm>,
) -> Response {
    let operators = &state.console.operators;
    let admin_token = state.admin_token.as_ref();
    // The credential just presented is the one in force, so its actor has a binding.
    let signed_in = operators
        .authenticate(admin_token, &form.token)
        .and_then(|principal| operators.session_principal(admin_token, &principal.actor));
    let Some((principal, binding)) = signed_in else {
        tracing::warn!("console sign-in refused: the token matches no operator");
        return login_page(
            &state,
            &form_token,
            StatusCode::UNAUTHORIZED,
            form.next.as_deref(),
            Some("That token matches no operator: nothing was signed in."),
        );
    };
    tracing::info!(actor = %principal.actor, role = principal.role.as_str(), "console sign-in");
    let console = &state.console;
    let ttl = console.settings.session_ttl;
    let id = match session::start(&state.store, principal, binding, ttl).await {
        Ok((id, _)) => id,
        Err(err) => return sessions_unavailable(err),
    };
    let mut response = Redirect::to(safe_next(form.next.as_deref())).into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        session::set_cookie(&id, ttl, console.secure_cookie),
    );
    response
}

pub(super) async fn logout(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if let Some(id) = session::cookie_id(&headers) {
        if let Err(err) = session::end(&state.store, &id).await {
            return sessions_unavailable(err);
        }
    }
    let mut response = Redirect::to("/console/login").into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        session::clear_cookie(state.console.secure_cookie),
    );
    response
}

// ---------------------------------------------------------------------------------------
// Overview

/// The span the overview's charts cover (`?window=`): 1 hour by the minute (the default),
/// 6 hours by 5 minutes, 24 hours by 20 minutes.
const CHART_WINDOWS: [(&str, Window); 3] = [
    (
        "1h",
        Window {
            span: std::time::Duration::from_secs(3600),
            step: std::time::Duration::from_secs(60),
        },
    ),
    (
        "6h",
        Window {
            span: std::time::Duration::from_secs(6 * 3600),
            step: std::time::Duration::from_secs(300),
        },
    ),
    (
        "24h",
        Window {
            span: std::time::Duration::from_secs(24 * 3600),
            step: std::time::Duration::from_secs(1200),
        },
    ),
];

#[derive(Debug, Default, Deserialize)]
pub(super) struct OverviewQuery {
    window: Option<String>,
}

pub(super) async fn overview(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    query: Result<Query<OverviewQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let now = OffsetDateTime::now_utc();
    let asked = query.ok().and_then(|Query(q)| q.window);
    let (window_name, window) = CHART_WINDOWS
        .iter()
        .find(|(name, _)| Some(*name) == asked.as_deref())
        .copied()
        .unwrap_or(CHART_WINDOWS[0]);
    let figures = stats::stats(&state.store, &state.broker, now).await;
    let series = crate::store::charts::overview_series(&state.store, window).await;
    let lag = match &state.console.intake_consumer {
        Some(consumer) => Some(state.broker.intake_consumer_lag(consumer).await),
        None => None,
    };
    let health = state
        .gateway_health
        .as_ref()
        .map(|h| (h.snapshot(), h.pause_problem()));
    let body = html! {
        section #charts data-window=(window_name) {
            h2 { "The last " (match window_name { "1h" => "hour", "6h" => "6 hours", _ => "24 hours" }) }
            p .window-choice {
                "Show: "
                @for (name, _) in CHART_WINDOWS {
                    @if name == window_name { strong { (name) } } @else { a href=(format!("/console/?window={name}")) { (name) } }
                    " "
                }
            }
            @match &series {
                Ok(series) => div .charts {
                    @for chart in charts::overview_charts(series, window) { (chart.render()) }
                }
                Err(err) => p #charts-error .error { "The charts could not be read: " (err) }
            }
        }
        @match &figures {
            Ok(s) => {
                section #attempts-by-state {
                    h2 { "Attempts per state" }
                    table #stats-by-status {
                        thead { tr { th { "state" } th { "attempts" } } }
                        tbody {
                            @for status in AttemptStatus::ALL {
                                @let count = s.by_status.get(status.as_str()).copied().unwrap_or(0);
                                tr data-testid=(format!("stat-{}", status.as_str())) {
                                    td { a href=(format!("/console/attempts?status={}", status.as_str())) { span class=(format!("status status-{}", status.as_str())) { (status.as_str()) } } }
                                    td .count { (count) }
                                }
                            }
                        }
                    }
                }
                section #waiting {
                    h2 { "Waiting" }
                    dl {
                        dt { "Oldest unsettled attempt" }
                        dd #oldest-unsettled data-seconds=(s.oldest_unsettled_seconds) {
                            @if s.oldest_unsettled_seconds == 0 { "none" } @else { (table::short(time::Duration::seconds(s.oldest_unsettled_seconds))) }
                        }
                        dt { "Needs review" }
                        dd #needs-review-count { a href="/console/review" { (s.by_status.get("needs_review").copied().unwrap_or(0)) } }
                        dt { "Dead letters" }
                        dd #dead-letters-count { a href="/console/dead-letters" { (s.dead_letters) } }
                        dt { "Outbox backlog (events not yet published)" }
                        dd #outbox-backlog { (s.outbox_backlog) }
                    }
                }
            }
            Err(err) => p #stats-error .error { "The figures could not be read: " (format!("{err:#}")) }
        }
        section #health {
            h2 { "Intake and gateway" }
            dl {
                dt { "Intake lag" }
                dd #intake-lag {
                    @match &lag {
                        Some(Ok(lag)) => { (lag.pending) " not yet delivered, " (lag.ack_pending) " being processed" }
                        Some(Err(err)) => span .error { "unreadable: " (format!("{err:#}")) }
                        None => "not known here"
                    }
                }
                dt { "Gateway" }
                dd #gateway-health {
                    @match &health {
                        Some((snapshot, problem)) => {
                            span #gateway-paused data-paused=(problem.is_some()) {
                                @match problem { Some(p) => { "PAUSED: " (p) } None => "calls flowing" }
                            }
                            " · breaker "
                            span #breaker-state { (snapshot.breaker.as_str()) }
                            " (" (snapshot.consecutive_failures) " consecutive failures)"
                        }
                        None => "this process runs no executor: see the executor's /readyz and /metrics"
                    }
                }
            }
        }
    };
    page(StatusCode::OK, "Overview", Some(&session), body)
}

// ---------------------------------------------------------------------------------------
// Search

/// The search form's fields; an empty field does not narrow.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct SearchQuery {
    attempt_id: String,
    order_id: String,
    customer_id: String,
    idempotency_key: String,
    gateway_charge_id: String,
    status: String,
    created_after: String,
    created_before: String,
    /// The cursor of this page (the previous page's last attempt).
    before: String,
}

fn set(field: &str) -> Option<String> {
    let field = field.trim();
    (!field.is_empty()).then(|| field.to_owned())
}

/// A filled-in field parsed as a `T`: `Ok(None)` when it is blank, the parse error when it
/// is not a `T`.
fn parse_set<T: std::str::FromStr>(field: &str) -> Result<Option<T>, T::Err> {
    set(field).map(|text| text.parse()).transpose()
}

pub(super) async fn search(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    query: Result<Query<SearchQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return bad_request(&session, "The search parameters are not understood.");
    };
    // An attempt id names one attempt: its page.
    if let Some(id) = set(&query.attempt_id) {
        return match id.parse::<PaymentAttemptId>() {
            Ok(id) => Redirect::to(&format!("/console/attempts/{id}")).into_response(),
            Err(_) => bad_request(
                &session,
                &format!("`{id}` is not a payment_attempt_id (a UUID)."),
            ),
        };
    }
    let status = match parse_set::<AttemptStatus>(&query.status) {
        Ok(status) => status,
        Err(err) => return bad_request(&session, &err.to_string()),
    };
    let times = (|| {
        Ok::<_, String>((
            console_time("created after", &query.created_after)?,
            console_time("created before", &query.created_before)?,
            parse_set::<AttemptCursor>(&query.before)?,
        ))
    })();
    let (created_after, created_before, before) = match times {
        Ok(times) => times,
        Err(why) => return bad_request(&session, &why),
    };
    let filter = AttemptFilter {
        status,
        order_id: set(&query.order_id),
        customer_id: set(&query.customer_id),
        gateway_charge_id: set(&query.gateway_charge_id),
        idempotency_key: set(&query.idempotency_key),
        created_after,
        created_before,
        before,
    };
    let now = OffsetDateTime::now_utc();
    let page_of =
        match attempts::page(&state.store, &filter, PAGE_SIZE, now, &state.retry_window).await {
            Ok(page) => page,
            Err(err) => return failed(&session, err),
        };
    let views = page_of.attempts;
    let next_page = page_of.next.map(|cursor| {
        let mut params: Vec<(&str, String)> = [
            ("order_id", &query.order_id),
            ("customer_id", &query.customer_id),
            ("idempotency_key", &query.idempotency_key),
            ("gateway_charge_id", &query.gateway_charge_id),
            ("status", &query.status),
            ("created_after", &query.created_after),
            ("created_before", &query.created_before),
        ]
        .into_iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| (k, v.trim().to_owned()))
        .collect();
        params.push(("before", cursor.to_string()));
        format!(
            "/console/attempts?{}",
            serde_urlencoded::to_string(&params).unwrap_or_default()
        )
    });
    let body = html! {
        form #search-form method="get" action="/console/attempts" {
            (text_input("q-attempt-id", "attempt_id", "Payment attempt id", &query.attempt_id))
            (text_input("q-order-id", "order_id", "Order id", &query.order_id))
            (text_input("q-customer-id", "customer_id", "Customer id", &query.customer_id))
            (text_input("q-idempotency-key", "idempotency_key", "Idempotency key", &query.idempotency_key))
            (text_input("q-gateway-charge-id", "gateway_charge_id", "Gateway charge id", &query.gateway_charge_id))
            label for="q-status" { "State" }
            select #q-status name="status" {
                option value="" { "any" }
                @for s in AttemptStatus::ALL {
                    option value=(s.as_str()) selected[status == Some(s)] { (s.as_str()) }
                }
            }
            (text_input("q-created-after", "created_after", "Created at or after (UTC)", &query.created_after))
            (text_input("q-created-before", "created_before", "Created before (UTC)", &query.created_before))
            button #search-submit type="submit" { "Search" }
        }
        (attempts_table(&views, now))
        @if let Some(next) = next_page {
            p { a #next-page href=(next) { "Older attempts →" } }
        }
    };
    page(StatusCode::OK, "Search attempts", Some(&session), body)
}

/// A time typed in a form: RFC 3339, or `YYYY-MM-DD[THH:MM[:SS]]` read as UTC (what a
/// person types, and what a `datetime-local` field sends).
fn console_time(what: &str, text: &str) -> Result<Option<OffsetDateTime>, String> {
    let Some(text) = set(text) else {
        return Ok(None);
    };
    let padded = match text.len() {
        10 => format!("{text}T00:00:00Z"),
        16 => format!("{text}:00Z"),
        19 => format!("{text}Z"),
        _ => text.clone(),
    };
    crate::operator::parse_time(&padded).map(Some).map_err(|_| {
        format!("{what}: `{text}` is not a time such as 2026-12-01T13:00:00Z or 2026-12-01")
    })
}

fn text_input(id: &str, name: &str, label: &str, value: &str) -> Markup {
    html! {
        label for=(id) { (label) }
        input id=(id) type="text" name=(name) value=(value);
    }
}

fn status_badge(status: AttemptStatus) -> Markup {
    html! { span class=(format!("status status-{}", status.as_str())) data-testid="status" { (status.as_str()) } }
}

fn attempts_table(views: &[AttemptView], now: OffsetDateTime) -> Markup {
    html! {
        p #result-count data-count=(views.len()) {
            (views.len()) " attempt" @if views.len() != 1 { "s" } " (newest first"
            @if views.len() == PAGE_SIZE { ", " (PAGE_SIZE) " per page" } ")"
        }
        @if !views.is_empty() {
            table #attempts-table {
                thead { tr { th { "payment attempt" } th { "state" } th { "order" } th { "customer" } th { "amount" } th { "tries" } th { "gateway charge" } th { "created" } th { "next" } } }
                tbody {
                    @for v in views {
                        @let a = &v.attempt;
                        tr data-testid="attempt-row" data-attempt-id=(a.payment_attempt_id) {
                            td { a .attempt-link href=(format!("/console/attempts/{}", a.payment_attempt_id)) { code { (a.payment_attempt_id) } } }
                            td { (status_badge(a.status)) }
                            td .order-id { (a.order_id) }
                            td { (a.customer_id) }
                            td .amount { (table::amount(a.amount_minor, &a.currency)) }
                            td { (a.tries) }
                            td { (a.gateway_charge_id.as_deref().unwrap_or("-")) }
                            td { (table::at_relative(a.created_at, now)) }
                            td .next-action { (v.next_action.action) }
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// One attempt

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
    let next = &detail.view.next_action;
    let can_recheck = matches!(
        a.status,
        AttemptStatus::Unknown | AttemptStatus::NeedsReview
    );
    let body = html! {
        p #attempt-id { code { (a.payment_attempt_id) } " " (status_badge(a.status)) }
        section #next-action data-by=(next.by.as_str()) {
            h2 { "Next" }
            p #next-action-text {
                (next.action)
                @if let Some(at) = next.at { " at " (table::at_relative(at, now)) }
            }
            @if let Some(warning) = &next.warning { p #next-action-warning .warning { (warning) } }
            @if !a.status.is_final() {
                p #retry-window { "Retry window: "
                    @match detail.view.retry_window_closes_at {
                        None => "open: the gateway has never seen the key",
                        Some(closes) if closes > now => { "open until " (table::at_relative(closes, now)) }
                        Some(closes) => { "closed since " (table::at_relative(closes, now)) ": never re-sent; settle it by looking the charge up" }
                    }
                }
            }
        }
        @if can_recheck {
            section #recheck-section {
                h2 { "Recheck now" }
                p .hint { "Asks the gateway now what it recorded under this attempt's key, exactly as the reconciler would, and settles the attempt when the answer does." }
                @if state.reconciler.is_some() {
                    form #recheck-form method="post" action=(format!("/console/attempts/{id}/recheck")) {
                        (csrf_field(&session))
                        label for="recheck-reason" { "Reason (optional)" }
                        input #recheck-reason type="text" name="reason" maxlength="1000";
                        button #recheck-submit type="submit" { "Recheck now" }
                    }
                } @else {
                    p #recheck-unavailable { "This instance has no gateway client (it runs neither the executor nor the reconciler): recheck from one that does, or run " code { "onecharge attempts recheck " (id) } "." }
                }
            }
        }
        @if a.status == AttemptStatus::NeedsReview {
            (resolve_form(&session, a.payment_attempt_id, a.review_reason.as_deref()))
        }
        section #facts {
            h2 { "Facts" }
            dl #attempt-facts {
                @for (name, value) in attempts::fact_rows(&detail, now) {
                    dt { (name) }
                    dd id=(format!("fact-{}", name.replace([' ', '/'], "-").replace("---", "-"))) { (value) }
                }
            }
        }
        section #history {
            h2 { "Timeline" }
            (timeline_picture(&detail, now).render())
            table #timeline {
                thead { tr { th { "time (UTC)" } th { "kind" } th { "what" } th { "detail" } } }
                tbody {
                    @for row in attempts::timeline_rows(&detail) {
                        tr data-testid="timeline-entry" data-kind=(row.kind) {
                            td { (table::at_ms(row.at)) } td { (row.kind) } td { (row.what) } td { (row.detail) }
                        }
                    }
                }
            }
        }
        section #attempt-audit {
            h2 { "Manual actions" }
            @match &trail {
                Ok(page) => (audit_table(&page.entries, now)),
                Err(_) => p .error { "The audit trail could not be read." }
            }
        }
    };
    page(StatusCode::OK, "Payment attempt", Some(&session), body)
}

/// The attempt's history as the timeline picture draws it: until now while it may still
/// move, until its last entry once final.
fn timeline_picture(detail: &attempts::AttemptDetail, now: OffsetDateTime) -> TimelinePicture {
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

fn resolve_form(session: &Session, id: PaymentAttemptId, reason: Option<&str>) -> Markup {
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
        let body = html! {
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
                (csrf_field(&session))
                input type="hidden" name="as" value=(form.as_str());
                input type="hidden" name="reason" value=(form.reason);
                input type="hidden" name="gateway_charge_id" value=(form.gateway_charge_id);
                input type="hidden" name="decline_code" value=(form.decline_code);
                input type="hidden" name="confirm" value="yes";
                button #confirm-submit type="submit" { "Confirm: resolve as " (form.as_str()) }
                " "
                a #confirm-cancel href=(format!("/console/attempts/{id}")) { "Cancel" }
            }
        };
        return page(StatusCode::OK, "Confirm the decision", Some(&session), body);
    }
    let actor = session.principal.actor.clone();
    match resolve::resolve(
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
    {
        Ok(resolved) => page(
            StatusCode::OK,
            "Resolved",
            Some(&session),
            html! {
                p #result .success data-status=(resolved.status.as_str()) { (resolved.summary()) }
                p { a #back-to-attempt href=(format!("/console/attempts/{id}")) { "Back to the attempt" } }
            },
        ),
        Err(ResolveError::Invalid(why)) => {
            bad_request(&session, &format!("{why}. Nothing was changed."))
        }
        Err(err @ ResolveError::NotFound(_)) => {
            refused(StatusCode::NOT_FOUND, Some(&session), &err.to_string())
        }
        Err(ResolveError::Refused(why)) => refused(StatusCode::CONFLICT, Some(&session), &why),
        Err(err @ ResolveError::Store(_)) => failed(&session, err),
    }
}

// ---------------------------------------------------------------------------------------
// Review queue

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
                            td { (table::amount(a.amount_minor, &a.currency)) }
                            td { (table::short(now - a.updated_at)) }
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

// ---------------------------------------------------------------------------------------
// Dead letters

pub(super) async fn dead_letters(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
) -> Response {
    let letters = match dlq::list_dead_letters(&state.broker).await {
        Ok(letters) => letters,
        Err(err) => return failed(&session, format!("{err:#}")),
    };
    let now = OffsetDateTime::now_utc();
    let body = html! {
        p #dead-letter-count data-count=(letters.len()) { (letters.len()) " dead letter" @if letters.len() != 1 { "s" } ", oldest first." }
        @if !letters.is_empty() {
            table #dead-letters-table {
                thead { tr { th { "sequence" } th { "dead-lettered" } th { "class" } th { "deliveries" } th { "payment attempt" } th { "reason" } } }
                tbody {
                    @for d in &letters {
                        tr data-testid="dead-letter-row" data-sequence=(d.sequence) {
                            td { a .dead-letter-link href=(format!("/console/dead-letters/{}", d.sequence)) { (d.sequence) } }
                            td { (table::at_relative(d.time, now)) }
                            td .class { (d.class.as_deref().unwrap_or("-")) }
                            td { (d.delivery_count.map(|c| c.to_string()).unwrap_or_else(|| "-".into())) }
                            td { (d.payment_attempt_id.as_deref().unwrap_or("-")) }
                            td .reason { (d.reason.as_deref().unwrap_or("-")) }
                        }
                    }
                }
            }
        }
    };
    page(StatusCode::OK, "Dead letters", Some(&session), body)
}

/// The dead letter a path names (its sequence), or the page that says why there is none:
/// `missing` for a sequence that is not in the dead-letter stream.
async fn named_dead_letter(
    state: &AdminState,
    session: &Session,
    sequence: &str,
    missing: impl FnOnce(u64) -> Response,
) -> Result<(u64, dlq::DeadLetter), Response> {
    let Ok(sequence) = sequence.parse::<u64>() else {
        return Err(bad_request(
            session,
            "A dead letter is named by its sequence number.",
        ));
    };
    match dlq::list_dead_letters(&state.broker).await {
        Ok(letters) => letters
            .into_iter()
            .find(|d| d.sequence == sequence)
            .map(|letter| (sequence, letter))
            .ok_or_else(|| missing(sequence)),
        Err(err) => Err(failed(session, format!("{err:#}"))),
    }
}

pub(super) async fn dead_letter(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(sequence): Path<String>,
) -> Response {
    let (sequence, letter) = match named_dead_letter(&state, &session, &sequence, |sequence| {
        page(
            StatusCode::NOT_FOUND,
            "No such dead letter",
            Some(&session),
            html! { p #not-found { "No dead letter " (sequence) " is in the dead-letter stream." } },
        )
    })
    .await
    {
        Ok(found) => found,
        Err(response) => return response,
    };
    let body = html! {
        dl #dead-letter-facts {
            dt { "sequence" } dd #dl-sequence { (letter.sequence) }
            dt { "dead-lettered" } dd { (table::at(letter.time)) }
            dt { "class" } dd #dl-class { (letter.class.as_deref().unwrap_or("-")) }
            dt { "reason" } dd #dl-reason { (letter.reason.as_deref().unwrap_or("-")) }
            dt { "original message id" } dd { (letter.original_msg_id.as_deref().unwrap_or("-")) }
            dt { "original subject" } dd { (letter.original_subject.as_deref().unwrap_or("-")) }
            dt { "deliveries" } dd { (letter.delivery_count.map(|c| c.to_string()).unwrap_or_else(|| "-".into())) }
            dt { "correlation id" } dd { (letter.correlation_id.as_deref().unwrap_or("-")) }
        }
        h2 { "Body" }
        pre #dead-letter-body { (letter.body) }
        h2 { "Replay" }
        p .hint { "Replays the body below to the command subject. Leave it unchanged to replay the original (same message id), or correct it (a new message id). A body that is still not a valid command is refused." }
        form #replay-form method="post" action=(format!("/console/dead-letters/{sequence}/replay")) {
            (csrf_field(&session))
            textarea #replay-body name="body" rows="12" cols="100" { (letter.body) }
            label for="replay-reason" { "Reason (recorded in the audit trail)" }
            input #replay-reason type="text" name="reason" maxlength="1000";
            button #replay-submit type="submit" { "Review the replay…" }
        }
    };
    page(
        StatusCode::OK,
        &format!("Dead letter {sequence}"),
        Some(&session),
        body,
    )
}

#[derive(Debug, Deserialize)]
pub(super) struct ReplayForm {
    body: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: Option<String>,
}

pub(super) async fn replay(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(sequence): Path<String>,
    Form(form): Form<ReplayForm>,
) -> Response {
    let (sequence, letter) = match named_dead_letter(&state, &session, &sequence, |sequence| {
        refused(
            StatusCode::NOT_FOUND,
            Some(&session),
            &format!(
                "No dead letter {sequence} is in the dead-letter stream; nothing was published."
            ),
        )
    })
    .await
    {
        Ok(found) => found,
        Err(response) => return response,
    };
    // Browsers send a textarea's line breaks as CRLF: an untouched body is the original.
    let body = form.body.replace("\r\n", "\n");
    let corrected = (body != letter.body).then(|| body.clone().into_bytes());
    if form.confirm.as_deref() != Some("yes") {
        let page_body = html! {
            p #confirm-summary {
                "Replay dead letter " (sequence) " "
                @if corrected.is_some() { strong { "with the corrected body below" } " (a new message id)" } @else { "unchanged (its original message id)" }
                " to the command subject?"
            }
            pre #confirm-body { (body) }
            form #confirm-form method="post" action=(format!("/console/dead-letters/{sequence}/replay")) {
                (csrf_field(&session))
                input type="hidden" name="body" value=(body);
                input type="hidden" name="reason" value=(form.reason);
                input type="hidden" name="confirm" value="yes";
                button #confirm-submit type="submit" { "Confirm: replay" }
                " "
                a #confirm-cancel href=(format!("/console/dead-letters/{sequence}")) { "Cancel" }
            }
        };
        return page(
            StatusCode::OK,
            "Confirm the replay",
            Some(&session),
            page_body,
        );
    }
    match dlq::replay(
        &state.broker,
        &state.store,
        sequence,
        corrected,
        &session.principal.actor,
        Via::Console,
        set(&form.reason).as_deref(),
    )
    .await
    {
        Ok(replayed) => page(
            StatusCode::OK,
            "Replayed",
            Some(&session),
            html! {
                p #result .success { "Replayed dead letter " (replayed.dlq_sequence) " to " (replayed.subject) " as stream sequence " (replayed.stream_sequence) " with message id " code { (replayed.message_id) } "." }
                pre #replay-result { (replayed.render()) }
            },
        ),
        Err(err) if err.is::<crate::config::UsageError>() => {
            bad_request(&session, &err.to_string())
        }
        Err(err) => refused(StatusCode::CONFLICT, Some(&session), &format!("{err:#}")),
    }
}

// ---------------------------------------------------------------------------------------
// Recheck

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

// ---------------------------------------------------------------------------------------
// Bulk actions

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
    let action = match form.action.as_str() {
        "retry" => BulkAction::Retry,
        "recheck" => BulkAction::Recheck,
        _ => return bad_request(&session, "Choose retry or recheck."),
    };
    let status = match parse_set::<AttemptStatus>(&form.status) {
        Ok(status) => status,
        Err(err) => return bad_request(&session, &err.to_string()),
    };
    let times = console_time("created after", &form.created_after)
        .and_then(|after| Ok((after, console_time("created before", &form.created_before)?)));
    let (created_after, created_before) = match times {
        Ok(times) => times,
        Err(why) => return bad_request(&session, &why),
    };
    let confirmed = form.confirm.as_deref() == Some("yes");
    let ids = if confirmed {
        match previewed_ids(&form.ids) {
            Ok(ids) => Some(ids),
            Err(why) => return bad_request(&session, &why),
        }
    } else {
        None
    };
    let request = BulkRequest {
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
        Err(BulkError::Invalid(why)) => return bad_request(&session, &why),
        Err(err @ BulkError::TooMany { .. }) => {
            return refused(
                StatusCode::UNPROCESSABLE_ENTITY,
                Some(&session),
                &err.to_string(),
            )
        }
        Err(BulkError::Unavailable(why)) => {
            return refused(StatusCode::SERVICE_UNAVAILABLE, Some(&session), &why)
        }
        Err(err @ BulkError::Failed(_)) => return failed(&session, err),
    };
    let previewed = outcome
        .ids
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let body = if outcome.preview {
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
                    (csrf_field(&session))
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
            (bulk_form(&session, &form))
        }
    } else {
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
                            td { (item.detail) }
                        }
                    }
                }
            }
        }
    };
    let title = if outcome.preview {
        "Bulk action: preview"
    } else {
        "Bulk action: done"
    };
    page(StatusCode::OK, title, Some(&session), body)
}

// ---------------------------------------------------------------------------------------
// Audit

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct AuditQuery {
    actor: String,
    attempt: String,
    before: String,
}

fn audit_table(entries: &[audit::AuditEntry], now: OffsetDateTime) -> Markup {
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
                            td { (table::at_relative(e.at, now)) }
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
    let next = trail.next.as_ref().map(|cursor| {
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
        (audit_table(&trail.entries, now))
        @if let Some(next) = next { p { a #audit-next-page href=(next) { "Older entries →" } } }
    };
    page(StatusCode::OK, "Audit", Some(&session), body)
}
