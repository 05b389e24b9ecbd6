//! Stripe's webhook signature, checked exactly as Stripe specifies
//! (docs.stripe.com/webhooks#verify-manually): the `Stripe-Signature` header is
//! `t=<unix seconds>,v1=<hex>[,v1=<hex>…][,v0=…]`; the signed payload is `<t>.<raw body>`;
//! the signature is HMAC-SHA256 of it under the endpoint's secret; any `v1` entry matching
//! any configured secret (several during a rotation) accepts it, compared in constant time;
//! and `t` must lie within the tolerance of now. Pure: the clock is a parameter.

use hmac::{Hmac, Mac as _};
use secrecy::{ExposeSecret as _, SecretString};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

/// Why a request is refused (400). The variants are the metric's `result` label; none
/// carries the body or a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("no Stripe-Signature header")]
    Missing,
    #[error("the Stripe-Signature header is not t=<unix>,v1=<hex>")]
    Malformed,
    #[error("the signature's timestamp is outside the tolerance")]
    Stale,
    #[error("no v1 signature matches any configured secret")]
    NoMatch,
}

impl SignatureError {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Missing => "missing_signature",
            Self::Malformed => "malformed_signature",
            Self::Stale => "stale",
            Self::NoMatch => "bad_signature",
        }
    }
}

/// The HMAC-SHA256 of `<t>.<body>` under `secret`: what Stripe sends as a `v1` signature
/// (hex-encoded). Also what the mock and the tests sign with.
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

/// A `Stripe-Signature` header value for `body` signed at `timestamp` with each of `secrets`
/// (Stripe sends one `v1` per active secret while an endpoint's secret is being rolled).
pub fn header(secrets: &[&str], timestamp: i64, body: &[u8]) -> String {
    let mut header = format!("t={timestamp}");
    for secret in secrets {
        header.push_str(",v1=");
        header.push_str(&hex::encode(sign(secret, timestamp, body)));
    }
    header
}

/// Checks `header` (the `Stripe-Signature` value, if any) over the raw `body` against every
/// secret, `now` and `tolerance` in seconds. The timestamp is checked only after a signature
/// matched, so a forged request learns nothing from the answer's kind… except that both are
/// 400, which is all a sender sees.
pub fn verify(
    header: Option<&str>,
    body: &[u8],
    secrets: &[SecretString],
    now: i64,
    tolerance: i64,
) -> Result<(), SignatureError> {
    let Signed {
        timestamp,
        signatures,
    } = parse(header)?;
    let mut matched = subtle::Choice::from(0);
    for secret in secrets {
        let expected = sign(secret.expose_secret(), timestamp, body);
        for signature in &signatures {
            // Constant time in the content; lengths are public (32 bytes).
            matched |= expected.as_slice().ct_eq(signature.as_slice());
        }
    }
    if !bool::from(matched) {
        return Err(SignatureError::NoMatch);
    }
    if (now - timestamp).abs() > tolerance {
        return Err(SignatureError::Stale);
    }
    Ok(())
}

/// A `Stripe-Signature` header read: its timestamp and its `v1` signatures.
pub struct Signed {
    pub timestamp: i64,
    pub signatures: Vec<Vec<u8>>,
}

/// Reads `header` (the `Stripe-Signature` value, if any) without a body or a secret: what
/// the listener checks before it spends a permit on reading the body.
pub fn parse(header: Option<&str>) -> Result<Signed, SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in header.split(',') {
        let (key, value) = item
            .trim()
            .split_once('=')
            .ok_or(SignatureError::Malformed)?;
        match key {
            "t" => {
                timestamp = Some(
                    value
                        .parse::<i64>()
                        .map_err(|_| SignatureError::Malformed)?,
                )
            }
            // A v1 that is not hex cannot match; it is skipped, like any other scheme.
            "v1" => signatures.extend(hex::decode(value).ok()),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed);
    }
    Ok(Signed {
        timestamp,
        signatures,
    })
}

/// The secrets of `stripe_webhook_secrets` (comma-separated, for rotation).
pub fn secrets(configured: &SecretString) -> Vec<SecretString> {
    configured
        .expose_secret()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| SecretString::from(s.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_764_590_000;
    const BODY: &[u8] = br#"{"id":"evt_1","type":"payment_intent.succeeded"}"#;

    fn secrets_of(list: &str) -> Vec<SecretString> {
        secrets(&SecretString::from(list))
    }

    #[test]
    fn the_signature_is_the_hmac_sha256_of_timestamp_dot_body() {
        // Computed independently: Python's hmac.new(b"whsec_test",
        // b'1700000000.{"id":"evt_1"}', hashlib.sha256).hexdigest().
        assert_eq!(
            hex::encode(sign("whsec_test", 1_700_000_000, br#"{"id":"evt_1"}"#)),
            "c89214b5b5da833daed6f0b8c5bb6bd58cea9022bd80ccc78230f3942d632925"
        );
        let header = header(&["whsec_a"], NOW, BODY);
        assert_eq!(
            verify(Some(&header), BODY, &secrets_of("whsec_a"), NOW, 300),
            Ok(())
        );
    }

    #[test]
    fn any_secret_of_a_rotation_and_any_v1_entry_is_accepted() {
        let old_only = header(&["whsec_old"], NOW, BODY);
        let both = header(&["whsec_new", "whsec_old"], NOW, BODY);
        let rotating = secrets_of("whsec_new, whsec_old");
        assert_eq!(verify(Some(&old_only), BODY, &rotating, NOW, 300), Ok(()));
        assert_eq!(
            verify(Some(&both), BODY, &secrets_of("whsec_old"), NOW, 300),
            Ok(())
        );
        let with_v0 = format!("{old_only},v0=deadbeef");
        assert_eq!(verify(Some(&with_v0), BODY, &rotating, NOW, 300), Ok(()));
    }

    #[test]
    fn a_forged_or_altered_request_is_refused() {
        let header_a = header(&["whsec_a"], NOW, BODY);
        let secrets = secrets_of("whsec_b");
        assert_eq!(
            verify(Some(&header_a), BODY, &secrets, NOW, 300),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            verify(
                Some(&header_a),
                b"{\"id\":\"evt_2\"}",
                &secrets_of("whsec_a"),
                NOW,
                300
            ),
            Err(SignatureError::NoMatch)
        );
        let moved_time = header_a.replacen(&format!("t={NOW}"), &format!("t={}", NOW + 1), 1);
        assert_eq!(
            verify(Some(&moved_time), BODY, &secrets_of("whsec_a"), NOW, 300),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn a_stale_or_far_future_timestamp_is_refused_even_when_signed() {
        let secrets = secrets_of("whsec_a");
        let old = header(&["whsec_a"], NOW - 301, BODY);
        let future = header(&["whsec_a"], NOW + 301, BODY);
        let edge = header(&["whsec_a"], NOW - 300, BODY);
        assert_eq!(
            verify(Some(&old), BODY, &secrets, NOW, 300),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(Some(&future), BODY, &secrets, NOW, 300),
            Err(SignatureError::Stale)
        );
        assert_eq!(verify(Some(&edge), BODY, &secrets, NOW, 300), Ok(()));
    }

    #[test]
    fn a_missing_or_malformed_header_is_refused() {
        let secrets = secrets_of("whsec_a");
        assert_eq!(
            verify(None, BODY, &secrets, NOW, 300),
            Err(SignatureError::Missing)
        );
        for bad in ["", "t=abc,v1=00", "v1=00", "t=1", "garbage"] {
            assert_eq!(
                verify(Some(bad), BODY, &secrets, NOW, 300),
                Err(SignatureError::Malformed),
                "{bad}"
            );
        }
    }
}
