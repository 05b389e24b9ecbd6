//! What a gateway request needs the key to be allowed: the resource its path names and
//! `write` for a POST, `read` for anything else (Stripe's restricted keys, `rk_…`, grant
//! each resource None, Read or Write). A `403` names the permission the refused request
//! needed, by this table and never by the gateway's words, so the metric's label set stays
//! bounded (decision 245); [`check`] asks the gateway which of those onecharge needs the key
//! lacks, without side effects (`onecharge setup --check --gateway`, decision 246).

use reqwest::Method;
use secrecy::ExposeSecret as _;

use super::{Connector, GatewayClient};

/// A permission a gateway request needs, as `resource:access`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// Create, confirm and cancel PaymentIntents (Stripe: charges).
    PaymentIntentsWrite,
    /// Retrieve and list PaymentIntents (Stripe: the reconciler's lookup, the sweep, the
    /// webhooks' checks, `attempts resolve --gateway-charge-id`).
    PaymentIntentsRead,
    /// Create refunds.
    RefundsWrite,
    /// List refunds (the refund's lookup).
    RefundsRead,
    /// List disputes (the sweep and the webhooks read whether a dispute is open).
    DisputesRead,
    /// §3: `POST /v1/charges`.
    ChargesWrite,
    /// §3: the lookup by key and the sweep's list.
    ChargesRead,
    /// A path outside the table (never one onecharge sends).
    Other,
}

impl Permission {
    /// Every permission the Stripe connector needs, in the order `setup --check --gateway`
    /// prints them.
    pub const STRIPE: [Permission; 5] = [
        Self::PaymentIntentsWrite,
        Self::PaymentIntentsRead,
        Self::RefundsWrite,
        Self::RefundsRead,
        Self::DisputesRead,
    ];

    /// The bounded metric label and the name the docs and the mock gateway use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PaymentIntentsWrite => "payment_intents:write",
            Self::PaymentIntentsRead => "payment_intents:read",
            Self::RefundsWrite => "refunds:write",
            Self::RefundsRead => "refunds:read",
            Self::DisputesRead => "disputes:read",
            Self::ChargesWrite => "charges:write",
            Self::ChargesRead => "charges:read",
            Self::Other => "other",
        }
    }

    /// What the onecharge feature that needs it is, for people.
    pub fn needed_for(self) -> &'static str {
        match self {
            Self::PaymentIntentsWrite => "charging (create, confirm, cancel PaymentIntents)",
            Self::PaymentIntentsRead => {
                "the reconciler's lookups, the sweep, webhooks' checks, resolve --gateway-charge-id"
            }
            Self::RefundsWrite => "refunding",
            Self::RefundsRead => "looking up refunds",
            Self::DisputesRead => "the sweep's and webhooks' dispute findings",
            Self::ChargesWrite => "charging",
            Self::ChargesRead => "lookups and the sweep",
            Self::Other => "nothing onecharge sends",
        }
    }

    /// The permission a request with `method` to `path` needs: the segment after `/v1/`.
    pub fn of(method: &Method, path: &str) -> Self {
        let resource = path
            .split_once("/v1/")
            .and_then(|(_, rest)| rest.split('/').next())
            .unwrap_or("");
        let write = method == Method::POST;
        match (resource, write) {
            ("payment_intents", true) => Self::PaymentIntentsWrite,
            ("payment_intents", false) => Self::PaymentIntentsRead,
            ("refunds", true) => Self::RefundsWrite,
            ("refunds", false) => Self::RefundsRead,
            ("disputes", false) => Self::DisputesRead,
            ("charges", true) => Self::ChargesWrite,
            ("charges", false) => Self::ChargesRead,
            _ => Self::Other,
        }
    }
}

/// Counts and logs a `403`: the operation it stopped and the permission it needed.
pub(super) fn record_denied(operation: &'static str, permission: Permission) {
    crate::metrics::gateway_permission_denied(operation, permission.as_str());
    tracing::error!(
        operation,
        permission = permission.as_str(),
        "the gateway refused this request (HTTP 403): the key lacks the permission `{}`; grant it (docs/stripe.md)",
        permission.as_str()
    );
}

/// What the gateway said about one permission the key needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// The request was let through (a read answered `200`; a write's invalid parameters
    /// were refused `400`, which Stripe checks only after the permission).
    Granted,
    /// `403`: the key lacks it.
    Missing,
    /// No proof either way (not sent, `401`, `5xx`, any other answer), with what happened.
    Unknown(String),
}

/// One line of the check: a permission and what the gateway said about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionCheck {
    pub permission: Permission,
    pub grant: Grant,
}

/// Asks the gateway, for every permission the Stripe connector needs, whether the key has
/// it, changing nothing: a read is a list with `limit=1`; a write is a POST without its
/// required parameters, under no `Idempotency-Key`, which Stripe refuses `400` when the key
/// may make it and `403` when it may not, and which can create nothing either way.
/// `None` for a §3 gateway, whose keys have no per-resource permissions.
pub async fn check(client: &GatewayClient) -> Option<Vec<PermissionCheck>> {
    let Connector::Stripe(endpoints) = &client.connector else {
        return None;
    };
    let transport = &client.transport;
    let base = &endpoints.base;
    let mut checks = Vec::new();
    for permission in Permission::STRIPE {
        let (method, path) = match permission {
            Permission::PaymentIntentsWrite => (Method::POST, "v1/payment_intents"),
            Permission::PaymentIntentsRead => (Method::GET, "v1/payment_intents?limit=1"),
            Permission::RefundsWrite => (Method::POST, "v1/refunds"),
            Permission::RefundsRead => (Method::GET, "v1/refunds?limit=1"),
            Permission::DisputesRead => (Method::GET, "v1/disputes?limit=1"),
            _ => continue,
        };
        let grant = match base.join(path) {
            Err(err) => Grant::Unknown(format!("no URL: {err}")),
            Ok(url) => {
                let request = transport
                    .http
                    .request(method.clone(), url)
                    .bearer_auth(transport.api_key.expose_secret())
                    .header("Stripe-Version", &*transport.stripe_version);
                // A POST carries an empty form: the required parameters are missing.
                let request = if method == Method::POST {
                    request
                        .header("Content-Type", "application/x-www-form-urlencoded")
                        .body("")
                } else {
                    request
                };
                match request.send().await {
                    Err(err) => Grant::Unknown(format!("no answer: {}", super::error_chain(&err))),
                    Ok(answer) => read_grant(&method, answer.status().as_u16()),
                }
            }
        };
        checks.push(PermissionCheck { permission, grant });
    }
    Some(checks)
}

/// What one answer to the check says: pure, so the table is tested.
fn read_grant(method: &Method, status: u16) -> Grant {
    match (status, method == Method::POST) {
        (403, _) => Grant::Missing,
        (200, false) | (400, true) => Grant::Granted,
        (401, _) => Grant::Unknown("HTTP 401: the key itself is rejected".into()),
        (status, _) => Grant::Unknown(format!("HTTP {status}: no proof either way")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_needs_its_resources_read_or_write_permission() {
        let cases = [
            (Method::POST, "/v1/payment_intents", "payment_intents:write"),
            (
                Method::POST,
                "/stripe/v1/payment_intents/pi_1/confirm",
                "payment_intents:write",
            ),
            (
                Method::GET,
                "/v1/payment_intents/pi_1",
                "payment_intents:read",
            ),
            (Method::GET, "/v1/payment_intents", "payment_intents:read"),
            (Method::POST, "/v1/refunds", "refunds:write"),
            (Method::GET, "/v1/refunds", "refunds:read"),
            (Method::GET, "/v1/disputes", "disputes:read"),
            (Method::POST, "/v1/charges", "charges:write"),
            (Method::GET, "/v1/charges", "charges:read"),
            (Method::GET, "/v1/customers/cus_1", "other"),
            (Method::GET, "/healthz", "other"),
        ];
        for (method, path, permission) in cases {
            assert_eq!(
                Permission::of(&method, path).as_str(),
                permission,
                "{method} {path}"
            );
        }
    }

    #[test]
    fn every_denial_a_connector_can_meet_is_registered_at_zero() {
        // Each request either connector sends, by operation: what its 403 is counted as.
        let sent = [
            ("prepare", Method::POST, "/v1/payment_intents"),
            ("charge", Method::POST, "/v1/payment_intents/pi_1/confirm"),
            ("cancel", Method::POST, "/v1/payment_intents/pi_1/cancel"),
            ("lookup", Method::GET, "/v1/payment_intents/pi_1"),
            ("lookup", Method::GET, "/v1/disputes"),
            ("list", Method::GET, "/v1/payment_intents"),
            ("refund", Method::POST, "/v1/refunds"),
            ("refund_lookup", Method::GET, "/v1/refunds"),
            ("charge", Method::POST, "/v1/charges"),
            ("lookup", Method::GET, "/v1/charges"),
            ("list", Method::GET, "/v1/charges"),
        ];
        for (operation, method, path) in sent {
            let pair = (operation, Permission::of(&method, path).as_str());
            assert!(
                crate::metrics::PERMISSION_DENIALS.contains(&pair),
                "{pair:?} is not registered at 0"
            );
        }
    }

    #[test]
    fn only_a_403_says_missing_and_only_a_read_200_or_a_write_400_says_granted() {
        let (get, post) = (Method::GET, Method::POST);
        assert_eq!(read_grant(&get, 403), Grant::Missing);
        assert_eq!(read_grant(&post, 403), Grant::Missing);
        assert_eq!(read_grant(&get, 200), Grant::Granted);
        assert_eq!(read_grant(&post, 400), Grant::Granted);
        for (method, status) in [
            (&get, 400),
            (&post, 200),
            (&get, 401),
            (&post, 500),
            (&get, 404),
        ] {
            assert!(
                matches!(read_grant(method, status), Grant::Unknown(_)),
                "{method} {status}"
            );
        }
    }
}
