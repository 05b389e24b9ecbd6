//! Which requests the admin listener answers at all (contract §6, issue 23): the defence
//! against DNS rebinding and cross-origin writes, over every route of the admin router.
//!
//! A browser judges what a page may read by the page's origin — the *name* in its URL —
//! never by the address the name resolves to. A page at `http://attacker.example:9464/`
//! whose name is then rebound to 127.0.0.1 (or to an `ssh -L` forward) is, to the browser,
//! the same origin as the admin listener it now reaches: it reads every answer, cookies and
//! CSRF tokens included, and posts whatever it likes. Only the `Host` it sends gives it
//! away, and loopback alone protects nothing. So, before any route:
//!
//! - **Host.** Every route answers only a `Host` (and an absolute request target) that is a
//!   loopback name — `localhost`, a name under `.localhost`, 127.0.0.0/8, `[::1]`, with any
//!   port — or the host of one of `admin_public_origins`. Anything else is
//!   `421 Misdirected Request`: the request reached a server that is not the one its name
//!   is for (RFC 9110 §15.5.20), which is exactly what a rebound name is; `403` would say
//!   that some credential was missing, and none would help.
//! - **Origin.** A request that may change something (any method but GET, HEAD and
//!   OPTIONS) is `403` when it carries an `Origin` that is neither this listener's own (the
//!   `Host`'s name and port) nor one of `admin_public_origins`, or `Sec-Fetch-Site:
//!   cross-site`. A request with neither header is not a browser page's (curl, a script)
//!   and is left to the bearer token or the console's CSRF token, as before.
//!
//! `*.localhost` counts as loopback (RFC 6761 §6.3): browsers answer those names
//! themselves, never through DNS, and no public DNS may delegate them, so nobody can rebind
//! one. `localhost.` (a trailing dot) and other spellings are not accepted.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;

pub use crate::config::WebOrigin;

/// The configured `admin_public_origins`: the names, besides loopback ones, under which the
/// admin listener is reached (a proxy, a tunnel's name), and the origins whose pages may
/// post to it.
#[derive(Debug, Clone, Default)]
pub struct PublicOrigins(Arc<[WebOrigin]>);

impl PublicOrigins {
    /// From the settings (validated by `Settings::validate`, so none fails to parse).
    pub fn new(origins: &[String]) -> Self {
        Self(
            origins
                .iter()
                .filter_map(|o| WebOrigin::parse(o).ok())
                .collect(),
        )
    }

    /// Whether `host` (a `Host` header's name, lower case) is one of the origins' hosts.
    fn names(&self, host: &str) -> bool {
        self.0.iter().any(|o| o.host == host)
    }

    fn contains(&self, origin: &WebOrigin) -> bool {
        self.0.contains(origin)
    }
}

/// A `Host` header (or an absolute request target's authority): its name, lower case, an
/// IPv6 address in brackets; its port when written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Host {
    name: String,
    port: Option<u16>,
}

impl Host {
    /// `None` for anything but `name[:port]` or `[v6][:port]` (a user part, a path, spaces).
    fn parse(value: &str) -> Option<Self> {
        let (name, port) = if value.starts_with('[') {
            let end = value.find(']')?;
            let port = match &value[end + 1..] {
                "" => None,
                rest => Some(rest.strip_prefix(':')?),
            };
            value[1..end].parse::<Ipv6Addr>().ok()?;
            (&value[..=end], port)
        } else {
            match value.split_once(':') {
                Some((name, port)) => (name, Some(port)),
                None => (value, None),
            }
        };
        let port = match port {
            Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                Some(digits.parse().ok()?)
            }
            Some(_) => return None,
            None => None,
        };
        let name_chars = name.starts_with('[')
            || name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
        (!name.is_empty() && name_chars).then(|| Self {
            name: name.to_ascii_lowercase(),
            port,
        })
    }

    /// `localhost`, a name under `.localhost`, 127.0.0.0/8 or `[::1]`.
    fn is_loopback(&self) -> bool {
        let name = self.name.as_str();
        if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
            return v6.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback());
        }
        let under_localhost = name
            .strip_suffix(".localhost")
            .is_some_and(|sub| !sub.is_empty() && sub.split('.').all(|label| !label.is_empty()));
        name == "localhost"
            || under_localhost
            || name.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// Whether a page of `origin` is this listener's own: the same name and port.
    fn is_origin_of(&self, origin: &WebOrigin) -> bool {
        let default_port = if origin.scheme == "https" { 443 } else { 80 };
        origin.host == self.name && origin.port == self.port.unwrap_or(default_port)
    }
}

/// The names a request is addressed to: the `Host` header and, when the request target is
/// absolute (`GET http://name/ HTTP/1.1`, or HTTP/2's `:authority`), its authority. Both
/// must pass; a request with neither is refused (RFC 9112 §3.2 requires `Host`).
fn addressed_to(request: &Request) -> Vec<Option<Host>> {
    let mut hosts: Vec<Option<Host>> = request
        .headers()
        .get_all(header::HOST)
        .iter()
        .map(|v| v.to_str().ok().and_then(Host::parse))
        .collect();
    if let Some(authority) = request.uri().authority() {
        hosts.push(Host::parse(authority.as_str()));
    }
    if hosts.is_empty() {
        hosts.push(None);
    }
    hosts
}

fn header_text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).map(|v| v.to_str().unwrap_or(""))
}

/// The layer over the whole admin router: see the module's documentation.
pub async fn guard(State(public): State<PublicOrigins>, request: Request, next: Next) -> Response {
    let hosts = addressed_to(&request);
    let accepted = |host: &Option<Host>| {
        host.as_ref()
            .is_some_and(|h| h.is_loopback() || public.names(&h.name))
    };
    if !hosts.iter().all(accepted) {
        tracing::warn!(
            host = ?request.headers().get(header::HOST),
            path = %request.uri().path(),
            "admin request refused: addressed to a name that is neither loopback nor one of admin_public_origins"
        );
        return ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected_request",
            "this admin listener answers only requests addressed to a loopback name (localhost, 127.0.0.1, [::1]) or to the host of one of admin_public_origins (ONECHARGE_ADMIN_PUBLIC_ORIGINS); this request's Host is neither: a page whose name was rebound to this address, or a proxy or tunnel whose name must be added there (docs/operations.md §11)",
        )
        .into_response();
    }
    let reads = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if !reads {
        let headers = request.headers();
        let cross_site = header_text(headers, "sec-fetch-site") == Some("cross-site");
        let foreign_origin = header_text(headers, "origin").is_some_and(|origin| {
            let host = hosts[0].as_ref().expect("every host was accepted");
            !WebOrigin::parse(origin)
                .is_ok_and(|origin| host.is_origin_of(&origin) || public.contains(&origin))
        });
        if cross_site || foreign_origin {
            tracing::warn!(
                origin = ?headers.get("origin"),
                sec_fetch_site = ?headers.get("sec-fetch-site"),
                path = %request.uri().path(),
                "admin request refused: a change sent by another origin's page"
            );
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "cross_origin",
                "a request that changes something is accepted only from this listener's own pages, from one of admin_public_origins (ONECHARGE_ADMIN_PUBLIC_ORIGINS), or from a client that sends no Origin (a script): this one came from another origin's page, so nothing was changed",
            )
            .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(text: &str) -> Host {
        Host::parse(text).unwrap_or_else(|| panic!("{text} parses"))
    }

    #[test]
    fn loopback_names_with_or_without_a_port_are_loopback_and_nothing_else_is() {
        for loopback in [
            "localhost",
            "LOCALHOST:9464",
            "127.0.0.1",
            "127.0.0.1:9464",
            "127.1.2.3:80",
            "[::1]",
            "[::1]:9464",
            "console.localhost:9464",
            "a.b.localhost",
        ] {
            assert!(host(loopback).is_loopback(), "{loopback}");
        }
        for other in [
            "attacker.example",
            "attacker.example:9464",
            "localhost.attacker.example",
            "localhost.",
            ".localhost",
            "a..localhost",
            "notlocalhost",
            "0.0.0.0",
            "10.0.0.5:9464",
            "[::ffff:127.0.0.1]",
            "[::]",
            "127.0.0.1.nip.io",
        ] {
            assert!(
                Host::parse(other).is_none_or(|h| !h.is_loopback()),
                "{other}"
            );
        }
    }

    #[test]
    fn a_host_is_a_name_and_an_optional_port_and_nothing_more() {
        assert_eq!(
            host("Ops.Example.com:8443"),
            Host {
                name: "ops.example.com".into(),
                port: Some(8443)
            }
        );
        for bad in [
            "",
            "user@localhost",
            "localhost:",
            "localhost:99999",
            "localhost:80:80",
            "[::1",
            "[::1]x",
            "local host",
            "localhost/x",
        ] {
            assert_eq!(Host::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_origin_is_scheme_host_and_port_and_a_page_is_this_listeners_own_by_name_and_port() {
        let ops = WebOrigin::parse("https://Ops.Example.com").unwrap();
        assert_eq!(
            ops,
            WebOrigin::parse("https://ops.example.com:443/").unwrap()
        );
        assert_ne!(ops, WebOrigin::parse("http://ops.example.com").unwrap());
        for bad in [
            "ops.example.com",
            "ftp://ops.example.com",
            "https://ops.example.com/console",
            "https://user:pw@ops.example.com",
            "https://ops.example.com?x=1",
            "null",
            "",
        ] {
            assert!(WebOrigin::parse(bad).is_err(), "{bad}");
        }
        assert!(host("ops.example.com").is_origin_of(&ops));
        assert!(host("ops.example.com:443").is_origin_of(&ops));
        assert!(!host("ops.example.com:8443").is_origin_of(&ops));
        let local = WebOrigin::parse("http://127.0.0.1:9464").unwrap();
        assert!(host("127.0.0.1:9464").is_origin_of(&local));
        assert!(!host("127.0.0.1:9465").is_origin_of(&local));
        assert!(!host("localhost:9464").is_origin_of(&local));
    }

    /// What the Kubernetes manifests rely on: the kubelet's probes and Prometheus address a
    /// pod by its IP, so the pod lists `http://$(POD_IP):9464` (deploy/kubernetes).
    #[test]
    fn a_listed_ip_origin_admits_that_ip_as_host_and_no_other() {
        let public = PublicOrigins::new(&[
            "http://10.1.2.3:9464".to_string(),
            "http://onecharge-admin.onecharge.svc:9464".to_string(),
        ]);
        assert!(public.names(&host("10.1.2.3:9464").name));
        assert!(public.names(&host("onecharge-admin.onecharge.svc").name));
        assert!(!public.names(&host("10.1.2.4:9464").name));
        assert!(!public.names(&host("attacker.example").name));
    }
}
