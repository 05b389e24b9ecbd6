//! No secret is ever printed (issue 11). Known secret values are seeded into every place a
//! secret can go — the config file, the environment, the userinfo and the query of every URL,
//! the admin token — then onecharge is made to fail in each way an operator can make it fail,
//! and to serve briefly with `RUST_LOG=trace`. Every byte of stdout and stderr is searched
//! for every secret.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{command, onecharge, sigterm, Records, TestEnv};
use tokio::io::AsyncReadExt as _;
use uuid::Uuid;

/// In the file: a gateway key written as a bare TOML integer (a secret all the same).
const FILE_KEY: &str = "5550123987";
/// In the environment: a gateway key that looks like a number.
const ENV_KEY: &str = "8675309123";
/// The admin token, also all digits.
const ADMIN_TOKEN: &str = "4242424242";
/// An admin token of the wrong type (a TOML float) in the file.
const FLOAT_TOKEN: &str = "31337.25";
/// An unquoted key: a TOML syntax error on the line that holds the secret.
const UNQUOTED_KEY: &str = "sk_live_unquoted-Qw93";
const DB_PASSWORD: &str = "dbpass-Xk29q";
const DB_QUERY_PASSWORD: &str = "dbquery-Jd61q";
const NATS_PASSWORD: &str = "natspass-Vb47q";
const GATEWAY_PASSWORD: &str = "gwpass-Lm63q";
const GATEWAY_QUERY_KEY: &str = "gwquery-Rt58q";
const OTLP_PASSWORD: &str = "otlppass-Hn72q";
const OTLP_QUERY_KEY: &str = "otlpquery-Pw14q";

const SECRETS: [&str; 12] = [
    FILE_KEY,
    ENV_KEY,
    ADMIN_TOKEN,
    FLOAT_TOKEN,
    UNQUOTED_KEY,
    DB_PASSWORD,
    DB_QUERY_PASSWORD,
    NATS_PASSWORD,
    GATEWAY_PASSWORD,
    GATEWAY_QUERY_KEY,
    OTLP_PASSWORD,
    OTLP_QUERY_KEY,
];

/// One run of the binary: what it printed, and how it ended.
struct Run {
    label: String,
    code: Option<i32>,
    output: String,
}

/// The environment every run starts from: every secret-bearing setting holds a secret, every
/// server is unreachable (port 1 refuses at once).
fn secret_env() -> Vec<(String, String)> {
    [
        ("ONECHARGE_GATEWAY_API_KEY", ENV_KEY.to_owned()),
        ("ONECHARGE_ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
        (
            "ONECHARGE_DATABASE_URL",
            format!(
                "postgres://root:{DB_PASSWORD}@127.0.0.1:1/onecharge?password={DB_QUERY_PASSWORD}"
            ),
        ),
        (
            "ONECHARGE_NATS_URL",
            format!("nats://natsuser:{NATS_PASSWORD}@127.0.0.1:1"),
        ),
        (
            "ONECHARGE_GATEWAY_URL",
            format!("http://gw:{GATEWAY_PASSWORD}@127.0.0.1:1/?api_key={GATEWAY_QUERY_KEY}"),
        ),
        (
            "ONECHARGE_OTLP_ENDPOINT",
            format!("http://otlp:{OTLP_PASSWORD}@127.0.0.1:1/?api_key={OTLP_QUERY_KEY}"),
        ),
        ("RUST_LOG", "trace".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Written as a value in `run`'s `env`: the variable is removed instead.
const UNSET: &str = "<unset>";

/// Runs `onecharge args` in an empty directory holding `config` as onecharge.toml (when
/// given), with [`secret_env`] changed by `env`.
async fn run(label: &str, args: &[&str], config: Option<&str>, env: &[(&str, String)]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    if let Some(text) = config {
        std::fs::write(dir.path().join("onecharge.toml"), text).unwrap();
    }
    let mut cmd = tokio::process::Command::from(onecharge());
    cmd.args(args).current_dir(dir.path());
    for (name, value) in secret_env() {
        cmd.env(name, value);
    }
    for (name, value) in env {
        match value.as_str() {
            UNSET => cmd.env_remove(name),
            value => cmd.env(name, value),
        };
    }
    let out = cmd.output().await.expect("the onecharge binary runs");
    Run {
        label: label.to_owned(),
        code: out.status.code(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// `serve` with every role and `RUST_LOG=trace` against this test's database and NATS
/// (credentials in both URLs: the local servers accept any), until the executor has called
/// the (unreachable) gateway once for a published command and the admin API has answered
/// an authenticated request; then SIGTERM.
async fn serve_briefly(env: &TestEnv) -> Run {
    // A role of its own whose password is the query's, the one PostgreSQL is given (sqlx
    // reads `?password=` after the URL's userinfo): the run signs in on a server that asks
    // for passwords (the README's Debian set-up) as on one that trusts loopback.
    let role = format!(
        "oc_secrets_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    env.admin(&format!(
        "CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{DB_QUERY_PASSWORD}'"
    ))
    .await;
    let mut url = reqwest::Url::parse(&env.settings.database_url).unwrap();
    url.set_username(&role).unwrap();
    url.set_password(Some(DB_PASSWORD)).unwrap();
    url.set_query(Some(&format!("password={DB_QUERY_PASSWORD}")));
    let database_url = url.to_string();
    let nats_url =
        env.settings
            .nats_url
            .replacen("nats://", &format!("nats://natsuser:{NATS_PASSWORD}@"), 1);
    let mut cmd = tokio::process::Command::from(onecharge());
    cmd.args(["serve", "--admin-addr", "127.0.0.1:0"]);
    for (name, value) in secret_env() {
        cmd.env(name, value);
    }
    cmd.env("ONECHARGE_DATABASE_URL", database_url)
        .env("ONECHARGE_NATS_URL", nats_url)
        .env("ONECHARGE_NAMESPACE", &env.settings.namespace)
        .env_remove("ONECHARGE_OTLP_ENDPOINT")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("serve starts");
    let printed = Arc::new(Mutex::new(Vec::<u8>::new()));
    let mut readers = Vec::new();
    for mut pipe in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let printed = printed.clone();
        readers.push(tokio::spawn(async move {
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                printed.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        }));
    }
    let text = || String::from_utf8_lossy(&printed.lock().unwrap()).into_owned();

    // The admin address is in the log line `admin HTTP listening addr=…`.
    let deadline = Instant::now() + Duration::from_secs(60);
    let addr = loop {
        let seen = text();
        if let Some(rest) = seen.split("admin HTTP listening").nth(1) {
            if let Some(addr) = rest
                .split_whitespace()
                .find_map(|field| field.strip_prefix("addr="))
            {
                break addr.to_owned();
            }
        }
        assert!(
            Instant::now() < deadline,
            "serve did not start listening: {seen}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let response = reqwest::Client::new()
        .get(format!("http://{addr}/api/attempts"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK, "{}", text());
    while env.all_gateway_calls().await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the executor never called the gateway: {}",
            text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(sigterm(child.id().expect("serve is running")));
    let status = child.wait().await.unwrap();
    for reader in readers {
        reader.await.unwrap();
    }
    env.admin(&format!("DROP ROLE {role}")).await;
    Run {
        label: "serve with RUST_LOG=trace".into(),
        code: status.code(),
        output: text(),
    }
}

#[tokio::test]
async fn no_secret_reaches_stdout_or_stderr_whatever_fails() {
    let file_key = format!("gateway_api_key = {FILE_KEY}\n");
    let bad_type = format!("{file_key}admin_token = {FLOAT_TOKEN}\n");
    let syntax_error = format!("gateway_api_key = {UNQUOTED_KEY}\n");
    let unreachable_nats = (
        "ONECHARGE_NATS_URL",
        format!("nats://natsuser:{NATS_PASSWORD}@127.0.0.1:1"),
    );
    let mut runs = vec![
        run("--help", &["--help"], Some(&file_key), &[]).await,
        run("serve --help", &["serve", "--help"], Some(&file_key), &[]).await,
        run("resolve --help", &["attempts", "resolve", "--help"], None, &[]).await,
        run(
            "a secret of the wrong type",
            &["setup"],
            Some(&bad_type),
            &[("ONECHARGE_ADMIN_TOKEN", UNSET.into())],
        )
        .await,
        run(
            "another setting of the wrong type",
            &["setup"],
            Some(&file_key),
            &[("ONECHARGE_INTAKE__BATCH_SIZE", "lots".into())],
        )
        .await,
        run("a TOML syntax error", &["setup"], Some(&syntax_error), &[]).await,
        run(
            "an unparsable database URL",
            &["setup"],
            None,
            &[(
                "ONECHARGE_DATABASE_URL",
                format!("postgres://root:{DB_PASSWORD}@127.0.0.1:notaport/x?password={DB_QUERY_PASSWORD}"),
            )],
        )
        .await,
        run(
            "an unparsable NATS URL",
            &["dlq", "list"],
            None,
            &[(
                "ONECHARGE_NATS_URL",
                format!("nats://natsuser:{NATS_PASSWORD}@127.0.0.1:notaport"),
            )],
        )
        .await,
        run(
            "an unparsable gateway URL",
            &["setup"],
            None,
            &[(
                "ONECHARGE_GATEWAY_URL",
                format!("http://gw:{GATEWAY_PASSWORD}@gateway:notaport/?api_key={GATEWAY_QUERY_KEY}"),
            )],
        )
        .await,
        run(
            "an OTLP endpoint that is not http",
            &["setup"],
            None,
            &[(
                "ONECHARGE_OTLP_ENDPOINT",
                format!("grpc://otlp:{OTLP_PASSWORD}@127.0.0.1:1/?api_key={OTLP_QUERY_KEY}"),
            )],
        )
        .await,
        run("an unreachable database", &["setup"], Some(&file_key), &[]).await,
        run(
            "an unreachable NATS",
            &["dlq", "list"],
            None,
            &[unreachable_nats],
        )
        .await,
    ];
    let env = TestEnv::new().await;
    let id = Uuid::new_v4();
    env.publish(&format!("m-{id}"), &command(id, serde_json::json!({})))
        .await;
    runs.push(serve_briefly(&env).await);

    // Each run failed (or ran) the way it was meant to: the search below covers real paths.
    let code = |label: &str| runs.iter().find(|r| r.label == label).unwrap().code;
    assert_eq!(code("--help"), Some(0));
    assert_eq!(code("a secret of the wrong type"), Some(2));
    assert_eq!(code("a TOML syntax error"), Some(2));
    assert_eq!(code("an unparsable gateway URL"), Some(2));
    assert_eq!(code("an unreachable database"), Some(1));
    assert_eq!(code("an unreachable NATS"), Some(1));
    assert_eq!(code("serve with RUST_LOG=trace"), Some(0));
    let serve = runs.last().unwrap();
    assert!(serve.output.contains("TRACE"), "trace logging was on");
    assert!(
        serve.output.contains("[REDACTED]"),
        "the NATS client logs its server URL with the password at debug: it was blotted out"
    );

    for run in &runs {
        for secret in SECRETS {
            assert!(
                !run.output.contains(secret),
                "{} printed the secret {secret}:\n{}",
                run.label,
                run.output
            );
        }
    }
}

/// Secrets are strings, whatever they look like: a key of digits in the file or the
/// environment is accepted as that string (here it reaches the point of connecting).
#[tokio::test]
async fn a_gateway_key_or_admin_token_of_digits_is_accepted_as_a_string() {
    let file_key = format!("gateway_api_key = {FILE_KEY}\nadmin_token = {ADMIN_TOKEN}\n");
    let from_file = run(
        "digits in the file",
        &["setup"],
        Some(&file_key),
        &[("RUST_LOG", "warn".into())],
    )
    .await;
    assert_eq!(from_file.code, Some(1), "{}", from_file.output);
    assert!(
        from_file.output.contains("cannot reach PostgreSQL"),
        "{}",
        from_file.output
    );
    let from_env = run(
        "digits in the environment",
        &["setup"],
        None,
        &[("RUST_LOG", "warn".into())],
    )
    .await;
    assert_eq!(from_env.code, Some(1), "{}", from_env.output);
}

/// Secrets read from files (`ONECHARGE_<SETTING>_FILE`, what the kustomize base mounts) are
/// used like values and never printed, at trace level or in a refusal; a secret given both
/// ways, or from a file that is not there, exits 2 with one line.
#[tokio::test]
async fn secrets_read_from_files_are_used_and_never_printed() {
    let secrets = tempfile::tempdir().unwrap();
    let write = |name: &str, text: String| {
        let path = secrets.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let database_url = write(
        "database-url",
        format!(
            "postgres://root:{DB_PASSWORD}@127.0.0.1:1/onecharge?password={DB_QUERY_PASSWORD}\n"
        ),
    );
    let admin_token = write("admin-token", format!("{ADMIN_TOKEN}\n"));
    let gateway_api_key = write("gateway-api-key", format!("{ENV_KEY}\n"));
    let from_files = [
        ("ONECHARGE_DATABASE_URL", UNSET.to_owned()),
        ("ONECHARGE_DATABASE_URL_FILE", database_url.clone()),
        ("ONECHARGE_ADMIN_TOKEN", UNSET.to_owned()),
        ("ONECHARGE_ADMIN_TOKEN_FILE", admin_token),
        ("ONECHARGE_GATEWAY_API_KEY", UNSET.to_owned()),
        ("ONECHARGE_GATEWAY_API_KEY_FILE", gateway_api_key),
    ];
    let used = run("secrets from files", &["setup"], None, &from_files).await;
    assert_eq!(used.code, Some(1), "{}", used.output);
    assert!(
        used.output.contains("cannot reach PostgreSQL") && used.output.contains("127.0.0.1:1"),
        "the database URL came from its file: {}",
        used.output
    );
    let both = run(
        "a secret given as a value and as a file",
        &["setup"],
        None,
        &[("ONECHARGE_DATABASE_URL_FILE", database_url)],
    )
    .await;
    assert_eq!(both.code, Some(2), "{}", both.output);
    assert!(
        both.output
            .contains("database_url and database_url_file are both set")
            && both.output.trim().lines().count() == 1,
        "{}",
        both.output
    );
    let missing = run(
        "a secret file that is not there",
        &["setup"],
        None,
        &[
            ("ONECHARGE_ADMIN_TOKEN", UNSET.to_owned()),
            (
                "ONECHARGE_ADMIN_TOKEN_FILE",
                "/nonexistent/admin-token".into(),
            ),
        ],
    )
    .await;
    assert_eq!(missing.code, Some(2), "{}", missing.output);
    assert!(
        missing
            .output
            .contains("admin_token_file /nonexistent/admin-token: no such file"),
        "{}",
        missing.output
    );
    for run in [&used, &both, &missing] {
        for secret in SECRETS {
            assert!(
                !run.output.contains(secret),
                "{} printed the secret {secret}:\n{}",
                run.label,
                run.output
            );
        }
    }
}
