//! Console sessions: a random id in an HttpOnly, SameSite=Strict cookie, the signed-in
//! principal and the session's CSRF token kept in this process's memory until they expire.
//!
//! Memory, not a signed cookie: signing out ends the session at once, and nothing about
//! the operator travels in the cookie. The price is that a session lives in one instance: an
//! operator whose requests reach another instance (or a restarted one) signs in again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue};
use rand::RngCore as _;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use super::access::Principal;

/// The cookie's name.
pub const COOKIE: &str = "onecharge_console";

/// Most sessions one instance keeps; past it the one closest to expiry is dropped, so
/// repeated sign-ins cannot grow the process without bound.
const MAX_SESSIONS: usize = 10_000;

/// One signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    pub principal: Principal,
    /// The token every POST form of this session carries (hidden field `csrf`).
    pub csrf: String,
    expires_at: Instant,
}

impl Session {
    /// Whether `presented` is this session's CSRF token (constant time).
    pub fn csrf_matches(&self, presented: &str) -> bool {
        presented.len() == self.csrf.len()
            && bool::from(presented.as_bytes().ct_eq(self.csrf.as_bytes()))
    }
}

/// The sessions of this instance, by the SHA-256 of their id (the id itself is only in the
/// browser's cookie).
#[derive(Debug, Clone, Default)]
pub struct Sessions {
    by_id: Arc<Mutex<HashMap<[u8; 32], Session>>>,
}

impl Sessions {
    /// Starts a session for `principal`, valid for `ttl`; returns its id (for the cookie).
    pub fn start(&self, principal: Principal, ttl: Duration) -> (String, Session) {
        let id = random_hex();
        let session = Session {
            principal,
            csrf: random_hex(),
            expires_at: Instant::now() + ttl,
        };
        let mut by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        by_id.retain(|_, s| s.expires_at > now);
        if by_id.len() >= MAX_SESSIONS {
            if let Some(oldest) = by_id
                .iter()
                .min_by_key(|(_, s)| s.expires_at)
                .map(|(k, _)| *k)
            {
                by_id.remove(&oldest);
            }
        }
        by_id.insert(key(&id), session.clone());
        (id, session)
    }

    /// The live session with this id.
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        let key = key(id);
        match by_id.get(&key) {
            Some(s) if s.expires_at > Instant::now() => Some(s.clone()),
            Some(_) => {
                by_id.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the session (sign out).
    pub fn end(&self, id: &str) {
        self.by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key(id));
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
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|id| !id.is_empty())
}

/// The `Set-Cookie` value for session `id`: HttpOnly (no script reads it), SameSite=Strict
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
