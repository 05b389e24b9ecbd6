//! The operator console (contract §6, issue 15): HTML pages under `/console/`, served by the
//! admin role, for finding any payment, seeing why it is stuck and acting on it.
//!
//! - [`guard`]: every request's session (or form token), CSRF check, role and security
//!   headers; who a token belongs to is `crate::http::access`, shared with `/api/*`.
//! - [`request_id`]: every request's id, which a failure's page shows and its log line
//!   carries (the error itself stays in the log).
//! - [`session`]: sign-in sessions (cookie, CSRF token), in the database, so every admin
//!   instance on it honours them.
//! - a file per page, each a handler and its HTML (maud, compiled into the binary; no
//!   script), framed by [`layout`] (the one stylesheet is embedded there); [`fields`] reads
//!   what a form carries.
//! - [`charts`]: the overview's charts and the attempt's timeline picture, SVG drawn on
//!   the server from what `store::reads::charts` and `operator::attempts` read.
//!
//! Every page reads through `crate::operator` and every action calls the same function the
//! CLI and `/api/*` call, with the signed-in operator as the actor: a decision taken in the
//! browser is the decision taken on the command line.

mod attempt;
mod audit;
mod bulk;
mod cancel;
mod charts;
mod dead_letters;
mod fields;
mod findings;
mod fleet;
mod guard;
mod layout;
mod login;
mod overview;
mod recheck;
mod reconciliation;
mod refunds;
mod request_id;
mod resolve;
mod review;
mod search;
pub mod session;

use axum::middleware;
use axum::response::Redirect;
use axum::routing::{get, post};
use axum::Router;

use crate::http::AdminState;

/// The console's routes, mounted by the admin router.
pub fn router(state: AdminState) -> Router<AdminState> {
    Router::new()
        .route("/console", get(|| async { Redirect::to("/console/") }))
        .route("/console/", get(overview::overview))
        .route("/console/style.css", get(layout::stylesheet))
        .route("/console/login", get(login::login_form).post(login::login))
        .route("/console/logout", post(login::logout))
        .route("/console/attempts", get(search::search))
        .route("/console/attempts.csv", get(search::export))
        .route("/console/attempts/{id}", get(attempt::attempt))
        .route("/console/attempts/{id}/resolve", post(resolve::resolve))
        .route("/console/attempts/{id}/recheck", post(recheck::recheck))
        .route("/console/attempts/{id}/cancel", post(cancel::cancel))
        .route("/console/attempts/{id}/refunds", post(refunds::refund))
        .route("/console/refunds", get(refunds::list))
        .route("/console/refunds/{id}", get(refunds::one))
        .route("/console/refunds/{id}/resolve", post(refunds::resolve))
        .route("/console/review", get(review::review))
        .route("/console/dead-letters", get(dead_letters::dead_letters))
        .route(
            "/console/dead-letters/{sequence}",
            get(dead_letters::dead_letter),
        )
        .route(
            "/console/dead-letters/{sequence}/replay",
            post(dead_letters::replay),
        )
        .route(
            "/console/dead-letters/{sequence}/discard",
            post(dead_letters::discard),
        )
        .route(
            "/console/dead-letters/bulk-replay",
            post(dead_letters::bulk_replay),
        )
        .route(
            "/console/bulk",
            get(bulk::bulk_page).post(bulk::bulk_action),
        )
        .route("/console/audit", get(audit::audit))
        .route("/console/findings", get(findings::list))
        .route("/console/sweeps", get(reconciliation::sweeps))
        .route("/console/webhooks", get(reconciliation::webhooks))
        .route(
            "/console/fleet",
            get(fleet::fleet_page).post(fleet::fleet_action),
        )
        .route("/console/findings/{id}", get(findings::one))
        .route("/console/findings/{id}/resolve", post(findings::resolve))
        // Only console paths: the admin router's other paths keep their own 404.
        .route("/console/{*rest}", get(layout::not_found))
        // `route_layer`: the guard wraps the console's routes only, never the admin router's 404.
        .route_layer(middleware::from_fn_with_state(state, guard::guard))
}
