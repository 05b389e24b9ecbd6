//! TLS as every onecharge client uses it: one rustls, with the ring crypto provider (never
//! aws-lc-rs, see docs/decisions/034-tls-with-rustls-and-ring-never-aws-lc-rs-the.md), the system's roots, and extra CA certificates read from
//! PEM files named in the settings (`gateway_ca_file`, `nats_ca_file`).
//!
//! PostgreSQL's TLS is sqlx's own: it reads `sslmode` and `sslrootcert` from the URL.

use std::path::Path;

use anyhow::Context as _;

use rustls::pki_types::pem::{self, PemObject as _};
use rustls::pki_types::CertificateDer;

use crate::config::ConfigError;

/// Makes ring the process's rustls provider. reqwest (built without a bundled provider)
/// asks for the process default when any client is built, ours or the OTLP exporter's, and
/// would panic without one; call this before building one. Idempotent: a second call finds
/// a provider installed (ring, the only one compiled in) and leaves it.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A rustls client configuration with the ring provider, trusting the system's roots plus
/// `extra_roots`. System certificates that cannot be parsed are skipped (as every TLS client
/// does); the extra roots must all be usable.
pub fn client_config(
    extra_roots: Vec<CertificateDer<'static>>,
) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    for certificate in extra_roots {
        roots
            .add(certificate)
            .context("a CA certificate is not a usable trust anchor")?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("choosing TLS versions")?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The certificates of a PEM file named by the setting `setting` (e.g.
/// `gateway_ca_file (ONECHARGE_GATEWAY_CA_FILE)`). A file that cannot be read, is not PEM or
/// holds no certificate is a [`ConfigError`] naming the setting and the path: the operator
/// fixes the file, nothing is retried.
pub fn read_ca_file(
    setting: &str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let fail = |what: String| ConfigError(format!("{setting}: {} {what}", path.display()));
    let bytes = std::fs::read(path).map_err(|err| fail(format!("cannot be read ({err})")))?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, pem::Error>>()
        .map_err(|err| fail(format!("is not PEM ({err})")))?;
    if certificates.is_empty() {
        return Err(fail(
            "holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    let mut anchors = rustls::RootCertStore::empty();
    for (index, certificate) in certificates.iter().enumerate() {
        anchors.add(certificate.clone()).map_err(|err| {
            fail(format!(
                "holds a certificate (number {}) that is not a usable CA ({err})",
                index + 1
            ))
        })?;
    }
    Ok(certificates)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    const SETTING: &str = "gateway_ca_file (ONECHARGE_GATEWAY_CA_FILE)";

    #[test]
    fn a_missing_ca_file_is_a_configuration_error_naming_the_setting_and_the_path() {
        let err = read_ca_file(SETTING, Path::new("/nonexistent/ca.pem")).unwrap_err();
        let line = err.to_string();
        assert!(line.starts_with("configuration error: gateway_ca_file (ONECHARGE_GATEWAY_CA_FILE): /nonexistent/ca.pem cannot be read"), "{line}");
        assert!(!line.contains('\n'));
    }

    #[test]
    fn a_ca_file_without_a_usable_pem_certificate_is_a_configuration_error_saying_why() {
        let cases: [(&[u8], &str); 3] = [
            (b"this is not a certificate\n", "holds no PEM certificate"),
            (
                // Valid PEM and base64 around bytes that are no DER certificate.
                b"-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
                "is not a usable CA",
            ),
            (
                b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
                "is not PEM",
            ),
        ];
        for (content, why) in cases {
            let mut file = tempfile::NamedTempFile::new().unwrap();
            file.write_all(content).unwrap();
            let line = read_ca_file(SETTING, file.path()).unwrap_err().to_string();
            assert!(line.contains(why), "{line}");
        }
    }
}
