//! Who sent a request: the TCP peer, or, when the peer is one of `admin_trusted_proxies`,
//! the client its `X-Forwarded-For` names. Only the console's sign-in throttle asks: it
//! counts failures per client, and behind a proxy every peer is the proxy.

use std::net::IpAddr;

use axum::http::HeaderMap;
use ipnet::IpNet;

/// The client of a request from `peer`: when `peer` is a trusted proxy, the rightmost
/// `X-Forwarded-For` address that is not itself a trusted proxy (each proxy appends the
/// address it received from, so that is the first hop no trusted proxy vouches beyond);
/// `peer` itself otherwise, or when the header names nothing readable. Entries left of it
/// are the client's own words and are never believed.
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |addr: &IpAddr| trusted.iter().any(|net| net.contains(addr));
    if !is_trusted(&peer) {
        return peer;
    }
    let forwarded: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .map_while(|hop| hop.parse::<IpAddr>().ok())
        .collect();
    forwarded
        .into_iter()
        .rev()
        .find(|hop| !is_trusted(hop))
        .unwrap_or(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(forwarded: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in forwarded {
            headers.append("x-forwarded-for", value.parse().unwrap());
        }
        headers
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_a_trusted_proxys_forwarded_for_is_believed_and_only_its_rightmost_untrusted_hop() {
        let trusted = [
            crate::config::trusted_proxy("127.0.0.1").unwrap(),
            crate::config::trusted_proxy("10.0.0.0/8").unwrap(),
        ];
        let cases = [
            // peer, X-Forwarded-For values, client
            ("203.0.113.9", vec!["198.51.100.7"], "203.0.113.9"),
            ("127.0.0.1", vec![], "127.0.0.1"),
            ("127.0.0.1", vec!["198.51.100.7"], "198.51.100.7"),
            ("127.0.0.1", vec!["1.2.3.4, 198.51.100.7"], "198.51.100.7"),
            ("127.0.0.1", vec!["198.51.100.7, 10.1.2.3"], "198.51.100.7"),
            ("127.0.0.1", vec!["1.2.3.4", "198.51.100.7"], "198.51.100.7"),
            ("127.0.0.1", vec!["not-an-address"], "127.0.0.1"),
            ("127.0.0.1", vec!["10.1.2.3"], "127.0.0.1"),
        ];
        for (peer, forwarded, client) in cases {
            assert_eq!(
                client_address(ip(peer), &headers(&forwarded), &trusted),
                ip(client),
                "{peer} {forwarded:?}"
            );
        }
        assert_eq!(
            client_address(ip("127.0.0.1"), &headers(&["198.51.100.7"]), &[]),
            ip("127.0.0.1"),
            "no trusted proxy: the peer"
        );
    }
}
