//! TLS end to end, with real handshakes and no mock of TLS: a throwaway CA and a server
//! certificate for 127.0.0.1/localhost made with the `openssl` command line; the executor
//! charging an `https://` mock gateway; PostgreSQL with `sslmode`; a `nats-server` of this
//! test's own started with `--tls`.

use std::path::{Path, PathBuf};
use std::process::Command;

use mock_gateway::{payment_methods as pm, MockConfig, TlsFiles};
use onecharge::broker::Broker;
use onecharge::config::{ConfigError, Settings};
use onecharge::domain::outcome::GatewayOutcome;
use onecharge::gateway::GatewayClient;
use onecharge::store::Store;
use tempfile::TempDir;
use uuid::Uuid;

use crate::support::nats_server::{free_port, NatsServer};
use crate::support::Records;
use crate::support::{self, first_outcome, one_line_error, onecharge, Harness};

/// A CA, a server certificate it signed for `IP:127.0.0.1` and `DNS:localhost`, and a
/// second, unrelated CA (the "wrong root").
struct TestPki {
    dir: TempDir,
}

const OPENSSL_CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = onecharge test
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

impl TestPki {
    /// A PKI made with the `openssl` command line, or `None` (after one SKIPPED line naming
    /// `test`) where it is missing outside CI; in CI a missing `openssl` fails the test.
    fn generate_or_skip(test: &str) -> Option<Self> {
        let found = Command::new("openssl")
            .arg("version")
            .output()
            .is_ok_and(|out| out.status.success());
        if found {
            return Some(Self::generate());
        }
        let why = format!("{test} needs the `openssl` command line to make its certificates, and none runs here; install it (Debian: apt-get install openssl)");
        if crate::support::env::in_ci() {
            panic!("{why}");
        }
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIPPED (not in CI): {why}");
        None
    }

    fn generate() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("pki.cnf"), OPENSSL_CONFIG).unwrap();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("the openssl command line");
            support::assert_exited_ok(&out, &format!("openssl {}", args.join(" ")));
        };
        let new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        for (name, cn) in [("ca", "onecharge test CA"), ("other-ca", "some other CA")] {
            let key = format!("{name}.key");
            let cert = format!("{name}.pem");
            let subject = format!("/CN={cn}");
            let mut args = vec!["req", "-x509", "-new", "-nodes"];
            args.extend(new_key);
            args.extend([
                "-keyout",
                &key,
                "-out",
                &cert,
                "-days",
                "2",
                "-config",
                "pki.cnf",
                "-extensions",
                "v3_ca",
                "-subj",
                &subject,
            ]);
            openssl(&args);
        }
        let mut args = vec!["req", "-new", "-nodes"];
        args.extend(new_key);
        args.extend([
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-config",
            "pki.cnf",
            "-subj",
            "/CN=localhost",
        ]);
        openssl(&args);
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "pki.cnf",
            "-extensions",
            "v3_server",
        ]);
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }
    fn other_ca(&self) -> PathBuf {
        self.path("other-ca.pem")
    }
    fn server_files(&self) -> TlsFiles {
        TlsFiles {
            cert_file: self.path("server.pem"),
            key_file: self.path("server.key"),
        }
    }
}

fn error_chain(err: &anyhow::Error) -> String {
    format!("{err:#}")
}

// ---------------------------------------------------------------------------------------
// The gateway over HTTPS

async fn https_harness(pki: &TestPki, ca_file: Option<PathBuf>) -> Harness {
    Harness::with(
        MockConfig {
            tls: Some(pki.server_files()),
            ..MockConfig::default()
        },
        |settings| settings.gateway_ca_file = ca_file,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_charges_an_https_gateway_whose_ca_is_in_gateway_ca_file() {
    let Some(pki) = TestPki::generate_or_skip(
        "the_executor_charges_an_https_gateway_whose_ca_is_in_gateway_ca_file",
    ) else {
        return;
    };
    let h = https_harness(&pki, Some(pki.ca())).await;
    assert!(h.settings.gateway_url.starts_with("https://127.0.0.1:"));
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;

    let client = GatewayClient::from_settings(&h.settings).expect("a gateway client");
    let report = h.executor_with(client).run_once().await.unwrap();

    assert_eq!(first_outcome(&report), Some("succeeded"), "{report:?}");
    assert_eq!(h.attempt(id).await.status, "succeeded");
    let ledger = h.gateway.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].reference, id.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_gateway_signed_by_an_unknown_ca_is_never_sent_a_charge() {
    let Some(pki) = TestPki::generate_or_skip(
        "an_https_gateway_signed_by_an_unknown_ca_is_never_sent_a_charge",
    ) else {
        return;
    };
    for ca_file in [None, Some(pki.other_ca())] {
        let h = https_harness(&pki, ca_file.clone()).await;
        let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;

        let client = GatewayClient::from_settings(&h.settings).expect("a gateway client");
        let report = h.executor_with(client).run_once().await.unwrap();

        let Some(GatewayOutcome::NotSent { reason }) = &report.attempts[0].outcome else {
            panic!("with gateway_ca_file {ca_file:?}: {report:?}");
        };
        assert!(reason.contains("certificate"), "{reason}");
        let row = h.attempt(id).await;
        assert_eq!((row.status.as_str(), row.tries), ("pending", 1));
        assert!(h.gateway.ledger().is_empty());
        assert_eq!(h.gateway.stats().requests, 0);
    }
}

#[test]
fn an_unreadable_gateway_ca_file_exits_2_with_one_line_and_no_secret() {
    let (code, stderr) = one_line_error(
        onecharge()
            .args(["reconcile", "--once"])
            .env_remove("RUST_LOG")
            .env("ONECHARGE_GATEWAY_API_KEY", "sk_test_do_not_print_me")
            .env("ONECHARGE_GATEWAY_URL", "https://127.0.0.1:9")
            .env("ONECHARGE_GATEWAY_CA_FILE", "/nonexistent/gateway-ca.pem"),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("gateway_ca_file (ONECHARGE_GATEWAY_CA_FILE): /nonexistent/gateway-ca.pem cannot be read"),
        "{stderr}"
    );
    assert!(!stderr.contains("sk_test_do_not_print_me"), "{stderr}");
}

// ---------------------------------------------------------------------------------------
// PostgreSQL's sslmode

fn postgres_url(query: &str) -> String {
    format!("{}/postgres?{query}", support::server_url())
}

/// `SHOW ssl` on a plain connection; `None` (with the reason printed) when the local server
/// has TLS off, so the PostgreSQL tests are skipped loudly instead of passing silently.
async fn postgres_has_ssl() -> bool {
    let store = Store::connect(&postgres_url("sslmode=disable"), 1)
        .await
        .expect("PostgreSQL without TLS");
    let ssl: String = sqlx::query_scalar("SHOW ssl")
        .fetch_one(store.pool())
        .await
        .unwrap();
    if ssl != "on" {
        eprintln!(
            "SKIPPED: the PostgreSQL server at {} has ssl = {ssl}; turn ssl on to test sslmode",
            support::server_url()
        );
    }
    ssl == "on"
}

async fn connection_uses_tls(store: &Store) -> bool {
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn postgres_with_sslmode_require_connects_over_tls_and_disable_does_not() {
    if !postgres_has_ssl().await {
        return;
    }
    let store = Store::connect(&postgres_url("sslmode=require"), 1)
        .await
        .expect("sslmode=require connects");
    assert!(connection_uses_tls(&store).await);

    let store = Store::connect(&postgres_url("sslmode=disable"), 1)
        .await
        .unwrap();
    assert!(!connection_uses_tls(&store).await);
}

#[tokio::test]
async fn postgres_with_sslmode_verify_full_refuses_a_certificate_for_another_name() {
    if !postgres_has_ssl().await {
        return;
    }
    // The local server's certificate names `localhost`; this URL says 127.0.0.1.
    let url = postgres_url("sslmode=verify-full");
    assert!(url.contains("127.0.0.1"), "{url}");
    let err = Store::connect(&url, 1).await.unwrap_err();
    let text = error_chain(&err);
    assert!(
        text.starts_with("cannot connect to PostgreSQL at "),
        "{text}"
    );
    assert!(
        text.contains("invalid peer certificate: certificate not valid for name \"127.0.0.1\""),
        "{text}"
    );
}

/// In a child process whose system roots are empty (`SSL_CERT_FILE`/`SSL_CERT_DIR`), as on a
/// host that does not trust the server's certificate: `sslrootcert` naming a CA that did not
/// sign it is refused, and the operator reads why.
#[tokio::test]
async fn postgres_with_sslmode_verify_full_and_a_root_that_did_not_sign_the_server_is_refused() {
    if !postgres_has_ssl().await {
        return;
    }
    let Some(wrong_root) = TestPki::generate_or_skip(
        "postgres_with_sslmode_verify_full_and_a_root_that_did_not_sign_the_server_is_refused",
    ) else {
        return;
    };
    let no_roots = tempfile::tempdir().unwrap();
    std::fs::write(no_roots.path().join("empty.pem"), "").unwrap();
    let url = postgres_url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        wrong_root.ca().display()
    ))
    .replace("127.0.0.1", "localhost");
    let (code, stderr) = one_line_error(
        onecharge()
            .arg("setup")
            .env_remove("RUST_LOG")
            .env("ONECHARGE_DATABASE_URL", &url)
            .env("SSL_CERT_FILE", no_roots.path().join("empty.pem"))
            .env("SSL_CERT_DIR", no_roots.path()),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: cannot reach PostgreSQL at postgres://localhost:5432/postgres"),
        "{stderr}"
    );
    assert!(
        stderr.contains("invalid peer certificate: UnknownIssuer"),
        "{stderr}"
    );
}

// ---------------------------------------------------------------------------------------
// NATS over tls://

/// A `nats-server` of this test's own with TLS required and JetStream in a temporary
/// directory; killed on drop.
struct TlsNatsServer {
    server: NatsServer,
    _dir: TempDir,
}

impl TlsNatsServer {
    async fn start(pki: &TestPki) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let files = pki.server_files();
        let args = vec![
            "--tls".into(),
            "--tlscert".into(),
            files.cert_file.into_os_string(),
            "--tlskey".into(),
            files.key_file.into_os_string(),
        ];
        let mut server = NatsServer::configured(dir.path(), "nats-tls", free_port(), args);
        server.start_again().await;
        Self { server, _dir: dir }
    }

    fn tls_url(&self) -> String {
        format!("tls://127.0.0.1:{}", self.server.port())
    }
}

fn nats_settings(url: String, ca_file: Option<PathBuf>) -> Settings {
    Settings {
        nats_url: url,
        nats_ca_file: ca_file,
        namespace: format!("tls{}", &Uuid::new_v4().simple().to_string()[..8]),
        ..Settings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_nats_server_trusted_through_nats_ca_file_stores_and_returns_a_command() {
    let Some(pki) = TestPki::generate_or_skip(
        "a_tls_nats_server_trusted_through_nats_ca_file_stores_and_returns_a_command",
    ) else {
        return;
    };
    let server = TlsNatsServer::start(&pki).await;
    let settings = nats_settings(server.tls_url(), Some(pki.ca()));

    let broker = Broker::connect(&settings).await.expect("connects over TLS");
    broker.ensure_streams().await.unwrap();
    let subject = broker.names.charge_subject();
    broker
        .jetstream
        .publish(subject.clone(), "over tls".into())
        .await
        .unwrap()
        .await
        .expect("stored by JetStream");
    let stream = crate::support::commands_stream(&broker).await;
    let stored = stream
        .get_last_raw_message_by_subject(&subject)
        .await
        .unwrap();
    assert_eq!(&stored.payload[..], b"over tls");
    assert!(broker.client.server_info().tls_required);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_nats_server_signed_by_an_unknown_ca_is_refused_with_the_reason() {
    let Some(pki) = TestPki::generate_or_skip(
        "a_tls_nats_server_signed_by_an_unknown_ca_is_refused_with_the_reason",
    ) else {
        return;
    };
    let server = TlsNatsServer::start(&pki).await;
    for ca_file in [None, Some(pki.other_ca())] {
        let settings = nats_settings(server.tls_url(), ca_file.clone());
        let err = match Broker::connect(&settings).await {
            Ok(_) => panic!("connected with nats_ca_file {ca_file:?}"),
            Err(err) => error_chain(&err),
        };
        eprintln!("with nats_ca_file {ca_file:?}: {err}");
        assert!(
            err.starts_with(&format!("cannot connect to NATS at {}", server.tls_url())),
            "{err}"
        );
        assert!(
            err.ends_with(": invalid peer certificate: UnknownIssuer"),
            "{err}"
        );
        assert_eq!(err.matches("UnknownIssuer").count(), 1, "{err}");
    }
}

#[tokio::test]
async fn an_unreadable_nats_ca_file_is_a_configuration_error() {
    let settings = nats_settings(
        "tls://127.0.0.1:4222".into(),
        Some(Path::new("/nonexistent/nats-ca.pem").to_owned()),
    );
    let err = Broker::connect(&settings).await.err().expect("refused");
    assert!(err.is::<ConfigError>(), "{err:#}");
    assert_eq!(
        err.to_string(),
        "configuration error: nats_ca_file (ONECHARGE_NATS_CA_FILE): /nonexistent/nats-ca.pem cannot be read (No such file or directory (os error 2))"
    );
}

// ---------------------------------------------------------------------------------------
// Dependency hygiene

/// One reqwest, one rustls, ring and never aws-lc-rs (docs/decisions/034-tls-with-rustls-and-ring-never-aws-lc-rs-the.md, docs/decisions/035-one-reqwest-the-one-opentelemetry-otlp-links.md): a feature
/// default switched on anywhere (reqwest's `rustls`, tokio-rustls' defaults) would pull in
/// aws-lc-rs and its C build, or a second HTTP stack.
#[test]
fn the_lock_file_has_one_reqwest_one_rustls_and_no_aws_lc_rs() {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock"))
        .expect("Cargo.lock");
    let count = |name: &str| lock.matches(&format!("\nname = \"{name}\"\n")).count();
    assert_eq!(count("reqwest"), 1, "more than one reqwest in Cargo.lock");
    assert_eq!(count("rustls"), 1, "more than one rustls in Cargo.lock");
    assert_eq!(count("ring"), 1);
    assert_eq!(count("aws-lc-rs"), 0, "aws-lc-rs is in Cargo.lock");
    assert_eq!(count("aws-lc-sys"), 0, "aws-lc-sys is in Cargo.lock");
}
