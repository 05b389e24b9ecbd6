//! The console's guard: who is asking and whether they may, on every console request,
//! before any page runs. Host and Origin were checked before, for the whole admin router
//! (`crate::http::origin`); this adds the session, the CSRF token and the role.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use tracing::Instrument as _;

use super::layout::{refused, sessions_unavailable};
use super::request_id::{self, RequestId};
use super::session::{self, FormToken, Session};
use crate::http::access::Principal;
use crate::http::{is_open, AdminState};

/// Largest form the console accepts: a corrected dead-letter body (64 KiB) and its fields.
const MAX_FORM_BYTES: usize = 256 * 1024;

/// Every console request passes here, under a [`RequestId`] of its own (its span, and the
/// `X-Request-Id` of its answer): security headers on every answer; the sign-in page
/// with its own form token (no session yet); elsewhere a live session (an open console's
/// needs no row, else a redirect to sign in); on every POST the CSRF token and, except to
/// sign out, the role `operator`. Host and Origin were checked before, for the whole admin
/// router (`crate::http::origin`).
pub(super) async fn guard(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Response {
    let id = RequestId::new();
    let span = tracing::info_span!(
        "console_request",
        request_id = %id,
        method = %request.method(),
        path = request.uri().path(),
    );
    let mut response = id
        .scope(check(&state, request, next))
        .instrument(span)
        .await;
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&id.to_string()) {
        headers.insert(request_id::HEADER, value);
    }
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        // `same-origin`, not `no-referrer`: no console URL leaves for another site either
        // way, but under `no-referrer` a browser sends `Origin: null` with the console's own
        // forms, which the admin router's origin guard must refuse.
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
/// Who is asking, and whether they may: the stylesheet is for everyone; the sign-in page
/// and an open console work without a session; every other page needs one.
async fn check(state: &AdminState, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    if path == "/console/style.css" {
        return next.run(request).await;
    }
    // The sign-in page, and every page of an open console, keep no session in the
    // database: their forms carry a token bound to a cookie of the browser's own.
    if path == "/console/login" || is_open(state) {
        return without_session(state, &path, request, next).await;
    }
    let live = live_session(state, session::cookie_id(request.headers())).await;
    match live {
        Ok(Some(mut session)) => {
            session.fleet_pauses = fleet_pauses(state).await;
            with_session(session, &path, request, next).await
        }
        Ok(None) => not_signed_in(&request),
        Err(err) => sessions_unavailable(err),
    }
}

/// The fleet's open pauses, for the banner of every page; a failed read shows none (the
/// page itself will say what fails).
async fn fleet_pauses(state: &AdminState) -> Vec<crate::store::fleet::FleetPause> {
    crate::store::fleet::open_pauses(&state.store)
        .await
        .unwrap_or_default()
}

/// The sign-in page and an open console: a POST must carry the form token of the
/// browser's cookie, which a first visit is given. An open console's pages act as
/// [`Principal::open_console`]; the sign-in page gets the token to put in its form.
async fn without_session(state: &AdminState, path: &str, request: Request, next: Next) -> Response {
    let (token, new_cookie) = browser_form_token(state, &request);
    let mut opened = (path != "/console/login").then(|| Session {
        principal: Principal::open_console(),
        csrf: token.clone(),
        fleet_pauses: Vec::new(),
    });
    if let Some(session) = opened.as_mut() {
        session.fleet_pauses = fleet_pauses(state).await;
    }
    let mut request = match checked_form(&token, opened.as_ref(), request).await {
        Ok(request) => request,
        Err(refusal) => return refusal,
    };
    match opened {
        Some(session) => {
            request.extensions_mut().insert(session);
        }
        None => {
            request.extensions_mut().insert(FormToken(token));
        }
    }
    let mut response = next.run(request).await;
    if let Some(cookie) = new_cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// The form token of the browser's cookie; for a page asked without one, a new token and the
/// cookie that sets it.
fn browser_form_token(state: &AdminState, request: &Request) -> (String, Option<HeaderValue>) {
    match session::form_token(request.headers()) {
        Some(token) => (token, None),
        // A form posted without the cookie came from no page of ours: refused by `checked_form`.
        None if request.method() == Method::POST => (String::new(), None),
        None => {
            let token = session::new_form_token();
            let cookie = session::set_form_cookie(&token, state.console.secure_cookie);
            (token, Some(cookie))
        }
    }
}

/// The live session of the cookie's id, if it names one.
async fn live_session(
    state: &AdminState,
    cookie_id: Option<String>,
) -> Result<Option<Session>, sqlx::Error> {
    let Some(id) = cookie_id else {
        return Ok(None);
    };
    let bindings = state
        .console
        .operators
        .session_bindings(state.admin_token.as_ref());
    session::resume(&state.store, &id, &bindings, |actor| {
        state
            .console
            .operators
            .session_principal(state.admin_token.as_ref(), actor)
    })
    .await
}

/// The answer to someone without a live session: a page is sent to sign in first, and
/// anything else is refused.
fn not_signed_in(request: &Request) -> Response {
    if request.method() == Method::GET || request.method() == Method::HEAD {
        return sign_in_first(request);
    }
    refused(
        StatusCode::FORBIDDEN,
        None,
        "Your session has ended (or you never signed in): sign in again, then repeat the action.",
    )
}

/// The redirect to the sign-in page, which comes back to the page asked for.
fn sign_in_first(request: &Request) -> Response {
    let target = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/console/".to_owned());
    let next_param = form_urlencode(&target);
    Redirect::to(&format!("/console/login?next={next_param}")).into_response()
}

/// A signed-in request: a POST must carry the session's CSRF token and, except to sign
/// out, come from someone whose role acts.
async fn with_session(session: Session, path: &str, request: Request, next: Next) -> Response {
    let posted = request.method() == Method::POST;
    let mut request = match checked_form(&session.csrf, Some(&session), request).await {
        Ok(request) => request,
        Err(refusal) => return refusal,
    };
    if posted && path != "/console/logout" && !session.principal.may_act() {
        return refused(
            StatusCode::FORBIDDEN,
            Some(&session),
            &format!("{}. Nothing was changed.", session.principal.refusal()),
        );
    }
    request.extensions_mut().insert(session);
    next.run(request).await
}

/// A POST, its form read once: refused unless its `csrf` field is `expected` (the session's
/// token, or the form token of the browser's cookie; never an empty one). `session` is the
/// page frame of a refusal. Any other method passes untouched.
async fn checked_form(
    expected: &str,
    session: Option<&Session>,
    request: Request,
) -> Result<Request, Response> {
    if request.method() != Method::POST {
        return Ok(request);
    }
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| {
            refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                session,
                "The form is larger than 256 KiB.",
            )
        })?;
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(&bytes).unwrap_or_default();
    let csrf = fields
        .iter()
        .find(|(name, _)| name == "csrf")
        .map(|(_, value)| value.as_str())
        .unwrap_or("");
    if expected.is_empty() || !session::tokens_match(expected, csrf) {
        return Err(refused(
            StatusCode::FORBIDDEN,
            session,
            "This form did not carry the CSRF token of a page of this console in this browser (it came from another page, or from before you signed in again or reopened the browser): nothing was changed. Reload the page and try again.",
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// `text` percent-encoded for a query parameter.
fn form_urlencode(text: &str) -> String {
    serde_urlencoded::to_string([("", text)])
        .map(|s| s.trim_start_matches('=').to_owned())
        .unwrap_or_default()
}
