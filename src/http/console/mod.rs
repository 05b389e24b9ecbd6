//! The operator console (contract §6, issue 15): HTML pages under `/console/`, served by the
//! admin role, for finding any payment, seeing why it is stuck and acting on it.
//!
//! - [`access`]: who a token belongs to (admin token, named operator) and their role; also
//!   used by `/api/*`.
//! - [`session`]: sign-in sessions (cookie, CSRF token), in the database, so every admin
//!   instance on it honours them.
//! - [`pages`]: the handlers and their HTML (maud, compiled into the binary; the one
//!   stylesheet is embedded; no script).
//! - [`charts`]: the overview's charts and the attempt's timeline picture, SVG drawn on
//!   the server from what `store::charts` and `operator::attempts` read.
//!
//! Every page reads through `crate::operator` and every action calls the same function the
//! CLI and `/api/*` call, with the signed-in operator as the actor: a decision taken in the
//! browser is the decision taken on the command line.

pub mod access;
mod charts;
mod pages;
pub mod session;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::admin::origin::PublicOrigins;
use crate::admin::AdminState;
use crate::config::{ConsoleSettings, Settings};
use access::{Operators, Principal};
use session::{FormToken, Session};

/// Largest form the console accepts: a corrected dead-letter body (64 KiB) and its fields.
const MAX_FORM_BYTES: usize = 256 * 1024;

/// What the console needs beyond the rest of the admin state.
#[derive(Debug, Clone, Default)]
pub struct Console {
    /// The named operators (`[[operators]]`); the shared admin token is `AdminState`'s.
    pub operators: Operators,
    pub settings: ConsoleSettings,
    /// Whether the console's cookies are `Secure` (`ConsoleSettings::secure_cookie_on` for
    /// the admin address).
    pub secure_cookie: bool,
    /// `admin_public_origins`, which the admin router's `origin::guard` reads for every
    /// route: carried here because every admin state is built with a `Console`.
    pub public_origins: PublicOrigins,
    /// The durable intake consumer, whose lag the overview shows.
    pub intake_consumer: Option<String>,
}

impl Console {
    /// The console of a configured service.
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            operators: Operators::new(&settings.operators),
            settings: settings.console.clone(),
            secure_cookie: settings.console.secure_cookie_on(settings.admin_addr),
            public_origins: PublicOrigins::new(&settings.admin_public_origins),
            intake_consumer: Some(settings.intake.consumer.clone()),
        }
    }
}

/// Whether nothing is configured to sign in with: then, like `/api/*`, the console is open
/// (`serve` refuses that on a non-loopback address unless `--insecure-admin`).
pub fn is_open(state: &AdminState) -> bool {
    state.admin_token.is_none() && state.console.operators.is_empty()
}

/// The console's routes, mounted by the admin router.
pub fn router(state: AdminState) -> Router<AdminState> {
    Router::new()
        .route("/console", get(|| async { Redirect::to("/console/") }))
        .route("/console/", get(pages::overview))
        .route("/console/style.css", get(pages::stylesheet))
        .route("/console/login", get(pages::login_form).post(pages::login))
        .route("/console/logout", post(pages::logout))
        .route("/console/attempts", get(pages::search))
        .route("/console/attempts/{id}", get(pages::attempt))
        .route("/console/attempts/{id}/resolve", post(pages::resolve))
        .route("/console/attempts/{id}/recheck", post(pages::recheck))
        .route("/console/review", get(pages::review))
        .route("/console/dead-letters", get(pages::dead_letters))
        .route("/console/dead-letters/{sequence}", get(pages::dead_letter))
        .route(
            "/console/dead-letters/{sequence}/replay",
            post(pages::replay),
        )
        .route(
            "/console/bulk",
            get(pages::bulk_page).post(pages::bulk_action),
        )
        .route("/console/audit", get(pages::audit))
        .route("/console/findings", get(pages::findings::list))
        .route(
            "/console/findings/{id}/resolve",
            post(pages::findings::resolve),
        )
        // Only console paths: the admin router's other paths keep their own 404.
        .route("/console/{*rest}", get(pages::not_found))
        // `route_layer`: the guard wraps the console's routes only, never the admin router's 404.
        .route_layer(middleware::from_fn_with_state(state, guard))
}

/// Every console request passes here: security headers on every answer; the sign-in page
/// with its own form token (no session yet); elsewhere a live session (an open console's
/// needs no row, else a redirect to sign in); on every POST the CSRF token and, except to
/// sign out, the role `operator`. Host and Origin were checked before, for the whole admin
/// router (`crate::admin::origin`).
async fn guard(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    let mut response = check(&state, request, next).await;
    let headers = response.headers_mut();
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

async fn check(state: &AdminState, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    if path == "/console/style.css" {
        return next.run(request).await;
    }
    let posted = request.method() == Method::POST;
    // The sign-in page, and every page of an open console, keep no session in the
    // database: their forms carry a token bound to a cookie of the browser's own.
    if path == "/console/login" || is_open(state) {
        let (token, new_cookie) = match session::form_token(request.headers()) {
            Some(token) => (token, None),
            // A form posted without the cookie came from no page of ours: refused below.
            None if posted => (String::new(), None),
            None => {
                let token = session::new_form_token();
                let cookie = session::set_form_cookie(&token, state.console.secure_cookie);
                (token, Some(cookie))
            }
        };
        let opened = (path != "/console/login").then(|| Session {
            principal: Principal::open_console(),
            csrf: token.clone(),
        });
        let mut request = if posted {
            match checked_form(&token, opened.as_ref(), request).await {
                Ok(request) => request,
                Err(refusal) => return refusal,
            }
        } else {
            request
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
        return response;
    }
    let live = match session::cookie_id(request.headers()) {
        Some(id) => {
            session::resume(&state.store, &id, |actor| {
                state
                    .console
                    .operators
                    .session_principal(state.admin_token.as_ref(), actor)
            })
            .await
        }
        None => Ok(None),
    };
    let session = match live {
        Ok(Some(session)) => session,
        Err(err) => return pages::sessions_unavailable(err),
        Ok(None) if request.method() == Method::GET || request.method() == Method::HEAD => {
            let target = request
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_else(|| "/console/".to_owned());
            let next_param = form_urlencode(&target);
            return Redirect::to(&format!("/console/login?next={next_param}")).into_response();
        }
        Ok(None) => {
            return pages::refused(
                StatusCode::FORBIDDEN,
                None,
                "Your session has ended (or you never signed in): sign in again, then repeat the action.",
            )
        }
    };
    let mut request = if posted {
        match checked_form(&session.csrf, Some(&session), request).await {
            Ok(request) => request,
            Err(refusal) => return refusal,
        }
    } else {
        request
    };
    if posted && path != "/console/logout" && !session.principal.may_act() {
        return pages::refused(
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
/// page frame of a refusal.
async fn checked_form(
    expected: &str,
    session: Option<&Session>,
    request: Request,
) -> Result<Request, Response> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| {
            pages::refused(
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
        return Err(pages::refused(
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
