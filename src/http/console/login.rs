//! Signing in (`/console/login`) and out (`/console/logout`); failed sign-ins are throttled
//! per client address and in all (`crate::http::throttle`).

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use maud::html;
use serde::Deserialize;

use super::layout::{page, sessions_unavailable};
use super::session::{self, FormToken};
use crate::http::client::client_address;
use crate::http::throttle::{Scope, Throttled};
use crate::http::{is_open, AdminState};

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
        @if is_open(state) {
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

/// `POST /console/login`: refused unchecked (`429`, `Retry-After`) while the sign-in
/// throttle says this client, or everybody, has failed too often; else the token is checked,
/// and a failure counted.
pub(super) async fn login(
    State(state): State<AdminState>,
    Extension(form_token): Extension<FormToken>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let client = peer.map(|Extension(ConnectInfo(addr))| {
        client_address(addr.ip(), &headers, &state.console.trusted_proxies)
    });
    let throttle = &state.console.sign_in_throttle;
    if let Err(throttled) = throttle.check(client) {
        return throttled_page(&state, &form_token, form.next.as_deref(), client, throttled);
    }
    let operators = &state.console.operators;
    let admin_token = state.admin_token.as_ref();
    // The credential just presented is the one in force, so its actor has a binding.
    let signed_in = operators
        .authenticate(admin_token, &form.token)
        .and_then(|principal| {
            operators.session_principal(admin_token, &principal.actor.to_string())
        });
    let Some((principal, binding)) = signed_in else {
        throttle.record_failure(client);
        tracing::warn!(
            client = %client_name(client),
            "console sign-in refused: the token matches no operator"
        );
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

/// The sign-in page of a throttled client (`429`): when to try again, in `Retry-After` and
/// in words, and nothing about the token, which was not looked at. The refusal is logged.
fn throttled_page(
    state: &AdminState,
    form_token: &FormToken,
    next: Option<&str>,
    client: Option<IpAddr>,
    throttled: Throttled,
) -> Response {
    let secs = throttled.retry_after_secs();
    tracing::warn!(
        client = %client_name(client),
        scope = throttled.scope.as_str(),
        retry_after_secs = secs,
        "console sign-in throttled: too many failed sign-ins, the token was not checked"
    );
    let whose = match throttled.scope {
        Scope::Address => "from your address",
        Scope::Global => "on this console",
    };
    let mut response = login_page(
        state,
        form_token,
        StatusCode::TOO_MANY_REQUESTS,
        next,
        Some(&format!(
            "Too many failed sign-ins {whose}: try again in {secs} s. Nothing was checked or signed in."
        )),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    response
}

/// A client address for the log (`unknown` without one).
fn client_name(client: Option<IpAddr>) -> String {
    client.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string())
}

pub(super) async fn logout(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if let Some(id) = session::cookie_id(&headers) {
        let bindings = state
            .console
            .operators
            .session_bindings(state.admin_token.as_ref());
        if let Err(err) = session::end(&state.store, &id, &bindings).await {
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
