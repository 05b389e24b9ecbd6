//! Console sessions: a random id in an HttpOnly, SameSite=Strict cookie; the signed-in
//! actor and the session's CSRF token in PostgreSQL (`store::console`), under the SHA-256 of
//! the id, until they expire by the database's clock.
//!
//! The database, not one process's memory nor a signed cookie: every admin instance on the
//! database honours the same sessions (behind a load balancer, across a rolling restart), a
//! CSRF token from one instance's page is accepted by another, signing out ends the session
//! at once everywhere, and no signing key has to be configured, rotated and shared. Nothing
//! about the operator travels in the cookie.
//!
//! The cookie is `<id>.<tag>`: the tag is an HMAC-SHA256 of the id keyed by the session's
//! binding (a digest of the credential it was signed in with, which only the configuration
//! holds). A cookie whose tag verifies under no binding in force is no session, and is
//! found so without asking the database: a flood of made-up cookies costs hashing, never a
//! connection.
//!
//! Invariants:
//! - A session stores who signed in (the actor) and a labelled digest of the credential they
//!   signed in with (`Operators::session_principal`), never a token nor a token's hash; the
//!   principal, its role and the binding are looked up in the configuration in force on
//!   every request, so an operator removed from it, or whose token was replaced, is refused
//!   at once (and the session deleted), and a changed role applies to live sessions.
//! - An expired session is never honoured: the database's `now()` judges it.
//! - At most [`MAX_SESSIONS_PER_ACTOR`] sessions per actor: the set of actors is the
//!   configuration's, so the table is bounded however often anyone signs in.
//! - Only a sign-in writes a session, and a sign-in needs a valid token. The sign-in page and
//!   an open console (nobody to tell apart) keep nothing in the database: their forms carry
//!   a [`FormToken`], a random token in a cookie of the browser's own (HttpOnly,
//!   SameSite=Strict), posted back beside the cookie — so no request without a credential
//!   writes a row, takes the sign-ins' lock or ends anyone's session.

use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderValue};
use hmac::{Hmac, Mac};
use rand::RngCore as _;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::http::access::Principal;
use crate::store::console::{self as sql, StoredSession};
use crate::store::Store;

/// The cookie's name.
pub const COOKIE: &str = "onecharge_console";

/// The cookie of a [`FormToken`].
pub const FORM_COOKIE: &str = "onecharge_form";

/// Most sessions one actor keeps: past it, a sign-in ends that actor's oldest. Enough for a
/// person's browsers and a script's sign-ins; a sign-in flood (which needs a valid token)
/// ends that actor's old sessions instead of growing the table.
pub const MAX_SESSIONS_PER_ACTOR: usize = 100;

/// The CSRF token of a page that has no session in the database (the sign-in page; every
/// page of an open console): the value of the browser's [`FORM_COOKIE`]. A form is honoured
/// only when its `csrf` field equals the cookie it arrives with: another site's page can
/// neither read the cookie nor make the browser send it (SameSite=Strict), and a page served
/// to another name was refused before it reached the console (`crate::http::origin`).
#[derive(Debug, Clone)]
pub struct FormToken(pub String);

/// One signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    pub principal: Principal,
    /// The token every POST form of this session carries (hidden field `csrf`).
    pub csrf: String,
    /// The fleet's open pauses as the guard read them for this request: every page's banner.
    pub fleet_pauses: Vec<crate::store::fleet::FleetPause>,
}

impl Session {
    /// Whether `presented` is this session's CSRF token (constant time).
    pub fn csrf_matches(&self, presented: &str) -> bool {
        tokens_match(&self.csrf, presented)
    }
}

/// Whether `presented` is `expected` (constant time in their contents).
pub fn tokens_match(expected: &str, presented: &str) -> bool {
    presented.len() == expected.len() && bool::from(presented.as_bytes().ct_eq(expected.as_bytes()))
}

/// Starts a session for `principal`, bound to `binding` (what
/// `Operators::session_principal` gives for it now) and valid for `ttl`; returns its id (for
/// the cookie).
pub async fn start(
    store: &Store,
    principal: Principal,
    binding: [u8; 32],
    ttl: Duration,
) -> Result<(String, Session), sqlx::Error> {
    let id = random_hex();
    let session = Session {
        csrf: random_hex(),
        principal,
        fleet_pauses: Vec::new(),
    };
    let stored = StoredSession {
        actor: session.principal.actor.to_string(),
        csrf: session.csrf.clone(),
        binding,
    };
    sql::start_session(store, &key(&id), &stored, ttl, MAX_SESSIONS_PER_ACTOR).await?;
    let cookie = format!("{id}.{}", hex::encode(tag(&binding, &id)));
    Ok((cookie, session))
}

/// The session cookie's tag of `id` under `binding`.
fn tag(binding: &[u8; 32], id: &str) -> [u8; 32] {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(binding).expect("HMAC takes a key of any length");
    mac.update(b"onecharge console session cookie\0");
    mac.update(id.as_bytes());
    mac.finalize().into_bytes().into()
}

/// The id of a session cookie `<64 hex>.<64 hex>` whose tag verifies under one of
/// `bindings` (constant time, every binding compared); `None` for anything else.
fn verified_id<'a>(cookie: &'a str, bindings: &[[u8; 32]]) -> Option<&'a str> {
    let (id, presented) = cookie.split_once('.')?;
    let is_hex64 = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_hex64(id) || !is_hex64(presented) {
        return None;
    }
    let mut presented_tag = [0u8; 32];
    hex::decode_to_slice(presented, &mut presented_tag).ok()?;
    let mut matched = subtle::Choice::from(0);
    for binding in bindings {
        matched |= tag(binding, id).ct_eq(&presented_tag);
    }
    bool::from(matched).then_some(id)
}

/// The live session of this cookie, its principal as `session_principal` finds the stored
/// actor now. A cookie whose tag verifies under none of `bindings` (those in force now,
/// `Operators::session_bindings`) is no session, and the database is not asked. A session
/// whose principal no longer exists, or was signed in with a credential since replaced, is
/// deleted and is no session.
pub async fn resume(
    store: &Store,
    cookie: &str,
    bindings: &[[u8; 32]],
    session_principal: impl FnOnce(&str) -> Option<(Principal, [u8; 32])>,
) -> Result<Option<Session>, sqlx::Error> {
    let Some(id) = verified_id(cookie, bindings) else {
        return Ok(None);
    };
    let Some(stored) = sql::live_session(store, &key(id)).await? else {
        return Ok(None);
    };
    let ended = match session_principal(&stored.actor) {
        Some((principal, binding)) if bool::from(binding.ct_eq(&stored.binding)) => {
            return Ok(Some(Session {
                principal,
                csrf: stored.csrf,
                fleet_pauses: Vec::new(),
            }))
        }
        Some(_) => "the credential it was signed in with has been replaced",
        None => "its principal is no longer configured",
    };
    tracing::info!(actor = %stored.actor, "console session ended: {ended}");
    sql::end_session(store, &key(id)).await?;
    Ok(None)
}

/// Ends the session of this cookie (sign out), on every instance at once; a cookie that is
/// no session of ours ends nothing.
pub async fn end(store: &Store, cookie: &str, bindings: &[[u8; 32]]) -> Result<(), sqlx::Error> {
    match verified_id(cookie, bindings) {
        Some(id) => sql::end_session(store, &key(id)).await.map(|_| ()),
        None => Ok(()),
    }
}

fn key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// 32 random bytes from the operating system, as hex.
fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// The session id the request's `Cookie` header carries, if any.
pub fn cookie_id(headers: &HeaderMap) -> Option<String> {
    cookie(headers, COOKIE).filter(|id| !id.is_empty())
}

/// The value of the cookie `name` the request carries, if any.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(found, _)| *found == name)
        .map(|(_, value)| value.trim().to_owned())
}

/// The form token the request's [`FORM_COOKIE`] carries, when it is one we could have made
/// (64 hex digits).
pub fn form_token(headers: &HeaderMap) -> Option<String> {
    cookie(headers, FORM_COOKIE)
        .filter(|token| token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A new form token: 32 random bytes from the operating system, as hex.
pub fn new_form_token() -> String {
    random_hex()
}

/// The `Set-Cookie` value of form token `token`: HttpOnly, SameSite=Strict, Path=/console,
/// Secure when configured, and no Max-Age (it ends with the browser).
pub fn set_form_cookie(token: &str, secure: bool) -> HeaderValue {
    let value = format!(
        "{FORM_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/console{}",
        if secure { "; Secure" } else { "" }
    );
    HeaderValue::from_str(&value).expect("a hex token and fixed attributes are a valid header")
}

/// The `Set-Cookie` value for session cookie `id` (`<id>.<tag>`): HttpOnly (no script reads it), SameSite=Strict
/// (no other site's page sends it), Path=/console, and Secure when configured.
pub fn set_cookie(id: &str, ttl: Duration, secure: bool) -> HeaderValue {
    let value = format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/console; Max-Age={}{}",
        ttl.as_secs(),
        if secure { "; Secure" } else { "" }
    );
    HeaderValue::from_str(&value).expect("hex id and fixed attributes are a valid header")
}

/// The `Set-Cookie` value that removes the session cookie (sign out).
pub fn clear_cookie(secure: bool) -> HeaderValue {
    let value = format!(
        "{COOKIE}=; HttpOnly; SameSite=Strict; Path=/console; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    );
    HeaderValue::from_str(&value).expect("fixed attributes are a valid header")
}
