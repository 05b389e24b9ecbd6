//! What Stripe checks of every `/v1` request before its handler runs, as far as a test
//! needs it: the API version the request names (`Stripe-Version`, recorded for the test to
//! read), and a restricted key's permissions: a request whose resource and access the key
//! lacks is answered `403` with Stripe's words, naming the permission, before anything else
//! is read but the key (a key Stripe does not know is `401`, as ever), set with
//! `MockGateway::set_missing_permissions`.

use axum::http::{Method, StatusCode};
use parking_lot::Mutex;

use super::error::StripeError;

/// What the Stripe dialect knows of the requests' headers and of its key's permissions.
#[derive(Default)]
pub(crate) struct Access {
    /// Every `/v1` request's method, path and `Stripe-Version` header, in arrival order.
    versions: Mutex<Vec<(String, String, Option<String>)>>,
    /// The permissions the key lacks, as onecharge names them (`refunds:write`).
    missing: Mutex<Vec<String>>,
}

impl Access {
    pub(crate) fn versions(&self) -> Vec<(String, String, Option<String>)> {
        self.versions.lock().clone()
    }

    pub(crate) fn set_missing(&self, permissions: &[&str]) {
        *self.missing.lock() = permissions.iter().map(|p| (*p).to_owned()).collect();
    }
}

/// The permission a request needs: the resource its path names, `write` for a POST and
/// `read` for a GET (`payment_intents:write`, `refunds:read`, `disputes:read`).
pub(crate) fn permission(method: &Method, path: &str) -> Option<String> {
    let resource = path.strip_prefix("/v1/")?.split(['/', '?']).next()?;
    let access = if method == Method::POST {
        "write"
    } else {
        "read"
    };
    Some(format!("{resource}:{access}"))
}

/// Records a `/v1` request's method, path and version, and refuses it with Stripe's `403`
/// when the key is known (`known_key`: a key Stripe does not know is `401` before any
/// permission is weighed, and its handler answers that) but lacks the request's permission.
impl Access {
    pub(crate) fn admit(
        &self,
        method: &Method,
        path: &str,
        version: Option<String>,
        known_key: bool,
    ) -> Result<(), StripeError> {
        self.versions
            .lock()
            .push((method.to_string(), path.to_owned(), version));
        let Some(needed) = permission(method, path).filter(|_| known_key) else {
            return Ok(());
        };
        if !self.missing.lock().contains(&needed) {
            return Ok(());
        }
        let (resource, access) = needed.split_once(':').unwrap_or((&needed, ""));
        Err(StripeError::new(
            StatusCode::FORBIDDEN,
            "invalid_request_error",
            format!(
                "The provided key 'rk_test_***' does not have the required permissions for this endpoint on account 'acct_mock'. Having the 'rak_{}_{access}' permission would allow this request to continue.",
                resource.trim_end_matches('s')
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_needs_its_resources_read_or_write_permission() {
        assert_eq!(
            permission(&Method::POST, "/v1/payment_intents/pi_1/confirm").as_deref(),
            Some("payment_intents:write")
        );
        assert_eq!(
            permission(&Method::GET, "/v1/refunds").as_deref(),
            Some("refunds:read")
        );
        assert_eq!(
            permission(&Method::GET, "/v1/disputes").as_deref(),
            Some("disputes:read")
        );
        assert_eq!(permission(&Method::GET, "/__ledger"), None);
    }
}
