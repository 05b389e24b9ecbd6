//! The NATS permissions of `deploy/nats/onecharge-permissions.conf`, tested with users that
//! have exactly them (docs/decisions/161-onecharges-nats-user-each-message-family-by.md,
//! docs/decisions/226-a-runtime-nats-user-that-cannot-create-streams-or.md): on a nats-server
//! of the test's own, `setup` as the setup user (signed in with an NKey seed file), then
//! `setup --check`, `serve` with every role (a charge, a dead letter, the stream audit) and
//! the operator commands that reach NATS as the runtime user, with replies under
//! onecharge's own inbox prefix, run without the server refusing anything; the runtime user
//! is refused creating a stream and deleting a consumer; another user of the account that
//! may read `_INBOX.>` sees none of onecharge's replies; and a user without the permissions
//! is refused in one line that says what the server said.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use mock_gateway::{MockConfig, MockGateway};
use onecharge::app::{Application, Role};
use secrecy::SecretString;
use uuid::Uuid;

use crate::support::nats_server::{free_port, nats_server_bin, NatsServer};
use crate::support::process::run_onecharge;
use crate::support::throwaway::own_settings;
use crate::support::{eventually, Records, Served};

const API_KEY: &str = "sk_test_nats_permissions";

/// The example server configuration, as a platform team would start from it, is one
/// nats-server accepts.
#[test]
fn the_example_server_configuration_is_valid() {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/nats");
    let checked = Command::new(nats_server_bin())
        .args(["-t", "-c"])
        .arg(deploy.join("nats-server.example.conf"))
        .env(
            "ONECHARGE_NATS_PASSWORD_BCRYPT",
            "$2a$11$abcdefghijklmnopqrstuuYTYt0Ou5Tj3nRzkC8l8UVhqB3oVl5JW",
        )
        .env(
            "ONECHARGE_SETUP_NATS_PASSWORD_BCRYPT",
            "$2a$11$bcdefghijklmnopqrstuvuYTYt0Ou5Tj3nRzkC8l8UVhqB3oVl5JW",
        )
        .output()
        .expect("nats-server runs");
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// The inbox prefix the permissions grant.
const INBOX_PREFIX: &str = "_INBOX_onecharge";

/// A server whose account holds `onecharge` (the runtime permissions, by password), the
/// setup user (the setup permissions, by the NKey `setup_public_key`) and `stranger`
/// (allowed only subjects of its own, and every `_INBOX.>`), in `dir`.
async fn server_with_users(dir: &Path, setup_public_key: &str) -> NatsServer {
    let permissions =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/nats/onecharge-permissions.conf");
    std::fs::copy(&permissions, dir.join("onecharge-permissions.conf")).unwrap();
    let config = dir.join("server.conf");
    std::fs::write(
        &config,
        format!(
            r#"include "onecharge-permissions.conf"
accounts: {{
  PAYMENTS: {{
    jetstream: enabled
    users: [
      {{ user: onecharge, password: "onecharge-pw", permissions: $ONECHARGE_PERMISSIONS }}
      {{ nkey: {setup_public_key}, permissions: $ONECHARGE_SETUP_PERMISSIONS }}
      {{ user: stranger, password: "stranger-pw",
        permissions: {{ publish: ["orders.>"], subscribe: ["_INBOX.>", "orders.>"] }} }}
    ]
  }}
}}
"#
        ),
    )
    .unwrap();
    let mut server = NatsServer::configured(
        dir,
        "nats",
        free_port(),
        vec!["-c".into(), config.into_os_string()],
    );
    server.start_again().await;
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_and_runtime_users_each_run_on_their_own_permissions_and_the_runtime_one_cannot_create_streams_or_delete_consumers(
) {
    // The permissions are written for the server clusters run on (2.15), and 2.9 logs a
    // violation in other words.
    if !crate::support::nats_server::current_server_or_skip("the NATS permissions test") {
        return;
    }
    onecharge::config::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let setup_key = nkeys::KeyPair::new_user();
    let seed_file = dir.path().join("setup.nk");
    std::fs::write(&seed_file, format!("{}\n", setup_key.seed().unwrap())).unwrap();
    let server = server_with_users(dir.path(), &setup_key.public_key()).await;
    let gateway = MockGateway::start(MockConfig {
        api_key: API_KEY.to_owned(),
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let (_database, mut settings) = own_settings("np");
    // The contract's own names, as in production: the server is the test's alone.
    settings.namespace = String::new();
    settings.nats_url = format!("nats://onecharge:onecharge-pw@127.0.0.1:{}", server.port());
    settings.nats_inbox_prefix = INBOX_PREFIX.into();
    settings.gateway_url = gateway.base_url();
    settings.gateway_api_key = Some(SecretString::from(API_KEY));
    settings.admin_addr = "127.0.0.1:0".parse().unwrap();
    settings.executor.poll_interval = Duration::from_millis(20);
    settings.intake.audit_interval = Duration::from_millis(200);
    settings.intake.audit_grace = Duration::ZERO;
    settings.validate().unwrap();
    let inbox = [("ONECHARGE_NATS_INBOX_PREFIX", INBOX_PREFIX)];
    let seed_path = seed_file.to_str().unwrap();
    let as_setup = [
        ("ONECHARGE_NATS_INBOX_PREFIX", INBOX_PREFIX),
        ("ONECHARGE_NATS_SETUP_NKEY_FILE", seed_path),
    ];
    let stranger = onecharge::config::Settings {
        nats_url: format!("nats://stranger:stranger-pw@127.0.0.1:{}", server.port()),
        ..settings.clone()
    };

    // A user without the permissions: refused at once, in a line that says why.
    let started = Instant::now();
    let (code, _, stderr) = run_onecharge(&stranger, &["setup"], &[]).await;
    assert_eq!(code, 1, "{stderr}");
    let last = stderr.trim().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: the NATS server refused onecharge's user: Permissions Violation for Publish to \"$JS.API.STREAM.INFO.PAYMENTS_COMMANDS\"")
            && last.contains("docs/operations.md §24"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the refusal took {:?}: asked again while refused",
        started.elapsed()
    );
    assert!(!stderr.contains("stranger-pw"), "{stderr}");

    // Another user of the account that may read every `_INBOX.>`: onecharge's replies are
    // under a prefix of its own, so it hears none of them.
    let snoop =
        async_nats::ConnectOptions::with_user_and_password("stranger".into(), "stranger-pw".into())
            .connect(server.url())
            .await
            .unwrap();
    let mut overheard = snoop.subscribe("_INBOX.>").await.unwrap();
    snoop.flush().await.unwrap();

    // `setup` as the runtime user (no setup user configured): it may look the streams up
    // but not create them.
    let (code, _, stderr) = run_onecharge(&settings, &["setup"], &inbox).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(
            "Permissions Violation for Publish to \"$JS.API.STREAM.CREATE.PAYMENTS_COMMANDS\""
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("onecharge-pw"), "{stderr}");

    // As the setup user: the streams and consumers; then the runtime user's check and
    // serve with every role.
    let (code, stdout, stderr) = run_onecharge(&settings, &["setup"], &as_setup).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("setup complete"), "{stdout}");
    let (code, _, stderr) = run_onecharge(&settings, &["setup", "--check"], &inbox).await;
    assert_eq!(code, 0, "{stderr}");
    let served = Served::from_app(
        Application::build(settings.clone(), &Role::ALL)
            .await
            .expect("serve builds"),
    );

    // A charge and a command intake must dead-letter, published by the command line.
    let attempt = Uuid::new_v4();
    for (currency, validate) in [("EUR", true), ("EURO", false)] {
        let attempt_id = if validate {
            attempt.to_string()
        } else {
            Uuid::new_v4().to_string()
        };
        let mut args = vec![
            "publish",
            "charge",
            "--amount-minor",
            "1250",
            "--currency",
            currency,
            "--attempt-id",
            &attempt_id,
            "--payment-method",
            mock_gateway::payment_methods::CARD_VISA,
        ];
        if !validate {
            args.push("--no-validate");
        }
        let (code, _, stderr) = run_onecharge(&settings, &args, &inbox).await;
        assert_eq!(code, 0, "{stderr}");
    }
    let db = sqlx::PgPool::connect(&settings.database_url).await.unwrap();
    let broker = onecharge::broker::Broker::connect(&settings).await.unwrap();
    let dead_letters = || async {
        let mut stream = broker.jetstream.get_stream("PAYMENTS_DLQ").await.unwrap();
        stream.info().await.unwrap().state.messages
    };
    eventually(
        "the charge succeeded, its event is published, the dead letter is stored and the stream audit read both",
        Duration::from_secs(30),
        || async {
            db.find_attempt(attempt)
                .await
                .is_some_and(|row| row.status == "succeeded")
                && db.unpublished_events().await == 0
                && dead_letters().await == 1
                && db.audited_through().await == 2
        },
    )
    .await;

    // The operator commands that read the streams.
    let (code, stdout, stderr) = run_onecharge(&settings, &["dlq", "list", "--json"], &inbox).await;
    assert_eq!(code, 0, "{stderr}");
    let letters: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(letters.as_array().map(Vec::len), Some(1), "{letters}");
    for args in [&["intake", "audit"][..], &["purge", "--dry-run"]] {
        let (code, _, stderr) = run_onecharge(&settings, args, &inbox).await;
        assert_eq!(code, 0, "{args:?}: {stderr}");
    }
    served.stop().await;

    // What a leaked runtime credential cannot do: delete the intake consumer, create a
    // stream. The server drops both (no answer) and says why.
    let commands = broker
        .jetstream
        .get_stream("PAYMENTS_COMMANDS")
        .await
        .unwrap();
    let deleted = tokio::time::timeout(
        Duration::from_secs(5),
        commands.delete_consumer("onecharge-intake"),
    )
    .await;
    assert!(
        !matches!(deleted, Ok(Ok(_))),
        "the runtime user deleted the intake consumer"
    );
    let created = tokio::time::timeout(
        Duration::from_secs(5),
        broker
            .jetstream
            .create_stream(async_nats::jetstream::stream::Config {
                name: "PAYMENTS_COMMANDS_COPY".into(),
                subjects: vec!["copy.>".into()],
                ..Default::default()
            }),
    )
    .await;
    assert!(!matches!(created, Ok(Ok(_))), "{created:?}");
    eventually(
        "the server's refusals reached the runtime user",
        Duration::from_secs(5),
        || async { broker.refusals.count() >= 2 },
    )
    .await;
    let intake = commands.consumer_info("onecharge-intake").await;
    assert!(intake.is_ok(), "the intake consumer is gone: {intake:?}");

    // The server refused the stranger, and of onecharge's only what it was asked to refuse.
    let log = server.log();
    let refused: Vec<&str> = log.lines().filter(|l| l.contains("Violation")).collect();
    assert!(
        refused.iter().any(|l| l.contains("/user:stranger\"")),
        "{log}"
    );
    let deliberate = [
        "$JS.API.STREAM.CREATE.PAYMENTS_COMMANDS",
        "$JS.API.CONSUMER.DELETE.PAYMENTS_COMMANDS.onecharge-intake",
        "$JS.API.STREAM.CREATE.PAYMENTS_COMMANDS_COPY",
    ];
    let unexpected: Vec<&&str> = refused
        .iter()
        .filter(|l| !l.contains("/user:stranger\""))
        .filter(|l| {
            !deliberate
                .iter()
                .any(|subject| l.contains(&format!("\"{subject}\"")))
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "the server refused onecharge: {unexpected:#?}"
    );
    for subject in deliberate {
        assert!(
            refused
                .iter()
                .any(|l| l.contains("/user:onecharge\"") && l.contains(&format!("\"{subject}\""))),
            "the runtime user was not refused {subject}: {refused:#?}"
        );
    }

    // Nothing of onecharge's went to `_INBOX.>`.
    snoop.flush().await.unwrap();
    let heard = tokio::time::timeout(Duration::from_millis(200), overheard.next()).await;
    assert!(
        heard.is_err(),
        "another user of the account overheard a reply of onecharge's: {:?}",
        heard.map(|m| m.map(|m| m.subject))
    );
}
