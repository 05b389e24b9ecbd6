//! The database grants of `deploy/postgres/runtime-grants.sql`, tested with the role they
//! make (docs/decisions/160-setup-migrates-as-the-owner-serve-only-checks.md): the schema migrated by its owner with `onecharge setup`,
//! everything else — `serve` with all its roles, the operator commands, the console, the
//! sweep and the purge — run as a runtime role that cannot change the schema. And `serve`
//! and `setup --check` refuse before `setup`, naming it.

use std::process::Stdio;
use std::time::Duration;

use mock_gateway::{MockConfig, MockGateway};
use onecharge::app::{Application, Role};
use onecharge::config::Settings;
use reqwest::header::{COOKIE, SET_COOKIE};
use reqwest::StatusCode;
use secrecy::SecretString;
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use uuid::Uuid;

use crate::support::privileges::ThrowawayRoles;
use crate::support::process::{onecharge, run_onecharge};
use crate::support::throwaway::{nats_url, own_settings, ThrowawayDatabase, ThrowawayNamespace};
use crate::support::{eventually, server_url, Records, Served};

const API_KEY: &str = "sk_test_least_privilege";
const ADMIN_TOKEN: &str = "admin-token-least-privilege";

/// `deploy/postgres/runtime-grants.sql` with its psql variables set, as
/// `psql -v database=… -v owner_role=… -v runtime_role=… -f` would run it.
fn runtime_grants(database: &str, owner: &str, runtime: &str) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/postgres/runtime-grants.sql"
    );
    let mut sql = std::fs::read_to_string(path).expect("deploy/postgres/runtime-grants.sql");
    for (name, value) in [
        ("database", database),
        ("owner_role", owner),
        ("runtime_role", runtime),
    ] {
        sql = sql.replace(&format!(":\"{name}\""), &format!("\"{value}\""));
    }
    assert!(
        !sql.contains(":\""),
        "a psql variable the test does not set"
    );
    sql
}

/// The tables, sequences and functions of `public` that `role` lacks a right on that the
/// grants give, and the rights it has that they do not give: empty when every object is
/// granted exactly (whoever added it, and when).
async fn not_granted_exactly(pool: &PgPool, role: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT 'table ' || c.relname FROM pg_class c
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
           AND c.relname <> '_sqlx_migrations' AND NOT (c.relname = ANY($2))
           AND NOT (has_table_privilege($1, c.oid, 'SELECT') AND has_table_privilege($1, c.oid, 'INSERT')
                AND has_table_privilege($1, c.oid, 'UPDATE') AND has_table_privilege($1, c.oid, 'DELETE'))
         UNION ALL
         SELECT 'append-only table ' || c.relname FROM pg_class c
         WHERE c.relnamespace = 'public'::regnamespace AND c.relname = ANY($2)
           AND NOT (has_table_privilege($1, c.oid, 'SELECT') AND has_table_privilege($1, c.oid, 'INSERT')
                AND NOT has_table_privilege($1, c.oid, 'UPDATE') AND NOT has_table_privilege($1, c.oid, 'DELETE'))
         UNION ALL
         SELECT 'table ' || c.relname || ' beyond rows' FROM pg_class c
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
           AND (has_table_privilege($1, c.oid, 'TRUNCATE') OR has_table_privilege($1, c.oid, 'REFERENCES')
                OR has_table_privilege($1, c.oid, 'TRIGGER'))
         UNION ALL
         SELECT 'table _sqlx_migrations' WHERE NOT has_table_privilege($1, '_sqlx_migrations', 'SELECT')
            OR has_table_privilege($1, '_sqlx_migrations', 'INSERT')
            OR has_table_privilege($1, '_sqlx_migrations', 'UPDATE')
            OR has_table_privilege($1, '_sqlx_migrations', 'DELETE')
         UNION ALL
         SELECT 'sequence ' || c.relname FROM pg_class c
         WHERE c.relnamespace = 'public'::regnamespace
           AND CASE WHEN c.relkind = 'S' THEN NOT has_sequence_privilege($1, c.oid, 'USAGE') END
         UNION ALL
         SELECT 'function ' || p.oid::regprocedure FROM pg_proc p
         WHERE p.pronamespace = 'public'::regnamespace AND NOT has_function_privilege($1, p.oid, 'EXECUTE')
         UNION ALL
         SELECT 'schema public: CREATE' WHERE has_schema_privilege($1, 'public', 'CREATE')
         UNION ALL
         SELECT 'owns ' || c.relname FROM pg_class c WHERE c.relowner = $1::regrole",
    )
    .bind(role)
    .bind(APPEND_ONLY)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Tables the runtime role may add to and read, never change: the audit trail of every
/// person's action (issue 54: a compromised pod must not rewrite who did what).
const APPEND_ONLY: &[&str] = &["operator_audit"];

/// Each statement fails for want of a right (SQLSTATE 42501), as `role` on `pool`.
async fn refused(pool: &PgPool, statements: &[&str]) {
    for sql in statements {
        let err = sqlx::raw_sql(sql)
            .execute(pool)
            .await
            .expect_err(&format!("the runtime role ran `{sql}`"));
        let code = err.as_database_error().and_then(|e| e.code());
        assert_eq!(code.as_deref(), Some("42501"), "`{sql}`: {err}");
    }
}

/// Signs in to the console with `token` as a browser does (the sign-in page's cookie and
/// form token, then its form) and reads the overview: its status and page.
async fn console_overview(served: &Served, token: &str) -> (StatusCode, String) {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let cookie_of = |response: &reqwest::Response| -> String {
        let set = response.headers().get(SET_COOKIE).expect("a cookie");
        set.to_str().unwrap().split(';').next().unwrap().to_owned()
    };
    let form = http.get(served.url("/console/login")).send().await.unwrap();
    let cookie = cookie_of(&form);
    let page = form.text().await.unwrap();
    let start = page.find(r#"name="csrf" value=""#).expect("a CSRF token") + 19;
    let csrf = &page[start..start + page[start..].find('"').unwrap()];
    let signed_in = http
        .post(served.url("/console/login"))
        .header(COOKIE, cookie)
        .form(&[("token", token), ("next", "/console/"), ("csrf", csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let overview = http
        .get(served.url("/console/"))
        .header(COOKIE, cookie_of(&signed_in))
        .send()
        .await
        .unwrap();
    (overview.status(), overview.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_role_charges_serves_operators_sweeps_and_purges_but_cannot_change_the_schema()
{
    onecharge::config::tls::install_crypto_provider();
    let server = server_url();
    // Declared first, dropped last: after the database and its grants.
    let roles = ThrowawayRoles::create(&server).await;
    let database = ThrowawayDatabase::new();
    database.create(Some(&roles.owner)).await;
    let gateway = MockGateway::start(MockConfig {
        api_key: API_KEY.to_owned(),
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let id = Uuid::new_v4().simple().to_string();
    let mut runtime = Settings {
        database_url: roles.url(&roles.runtime, database.name()),
        nats_url: nats_url(),
        namespace: format!("lp{}", &id[..12]),
        gateway_url: gateway.base_url(),
        gateway_api_key: Some(SecretString::from(API_KEY)),
        admin_token: Some(SecretString::from(ADMIN_TOKEN)),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    runtime.executor.poll_interval = Duration::from_millis(20);
    runtime.validate().unwrap();
    let owner = Settings {
        database_url: roles.url(&roles.owner, database.name()),
        ..runtime.clone()
    };
    let broker = onecharge::broker::Broker::connect(&runtime).await.unwrap();
    let _streams = ThrowawayNamespace::new(&runtime.nats_url, &broker.names);
    let gateway_env = [
        ("ONECHARGE_GATEWAY_URL", runtime.gateway_url.as_str()),
        ("ONECHARGE_GATEWAY_API_KEY", API_KEY),
    ];

    // The owner migrates and creates the streams; the runtime role cannot.
    let (code, _, stderr) = run_onecharge(&runtime, &["setup"], &[]).await;
    assert_eq!(code, 1, "setup as the runtime role: {stderr}");
    assert!(stderr.contains("permission denied"), "{stderr}");
    let (code, stdout, stderr) = run_onecharge(&owner, &["setup"], &[]).await;
    assert_eq!(code, 0, "setup as the owner: {stderr}");
    assert!(stdout.starts_with("setup complete"), "{stdout}");

    let as_owner = PgPool::connect(&owner.database_url).await.unwrap();
    sqlx::raw_sql(&runtime_grants(
        database.name(),
        &roles.owner,
        &roles.runtime,
    ))
    .execute(&as_owner)
    .await
    .expect("the grants apply");
    assert_eq!(
        not_granted_exactly(&as_owner, &roles.runtime).await,
        Vec::<String>::new()
    );
    // A table a later migration adds (made by the owner) is granted by the default privileges.
    as_owner
        .exec("CREATE TABLE later_migration (id bigint GENERATED ALWAYS AS IDENTITY, note text)")
        .await;
    assert_eq!(
        not_granted_exactly(&as_owner, &roles.runtime).await,
        Vec::<String>::new()
    );
    as_owner.exec("DROP TABLE later_migration").await;

    let as_runtime = PgPool::connect(&runtime.database_url).await.unwrap();
    refused(
        &as_runtime,
        &[
            "CREATE TABLE runtime_probe (id int)",
            "DROP TABLE payment_attempts",
            "DROP TABLE attempt_transitions_default",
            "ALTER TABLE payment_attempts ADD COLUMN probe int",
            "CREATE INDEX runtime_probe ON payment_attempts (created_at)",
            "TRUNCATE outbox",
            "DELETE FROM _sqlx_migrations",
            "UPDATE operator_audit SET reason = 'rewritten'",
            "DELETE FROM operator_audit",
            "CREATE FUNCTION runtime_probe() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            // The owner's steps refuse anything but a month of a history table.
            "SELECT onecharge_history_drop_month('payment_attempts', 'payment_attempts')",
            "SELECT onecharge_history_drop_month('outbox', 'payment_attempts')",
        ],
    )
    .await;
    let (code, stdout, stderr) = run_onecharge(&runtime, &["setup", "--check"], &[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("setup is done"), "{stdout}");

    // serve, every role, as the runtime role: a charge published through NATS succeeds and
    // its event is published.
    let app = Application::build(runtime.clone(), &Role::ALL)
        .await
        .expect("serve builds as the runtime role");
    let served = Served::from_app(app);
    let attempt = Uuid::new_v4();
    let (code, _, stderr) = run_onecharge(
        &runtime,
        &[
            "publish",
            "charge",
            "--amount-minor",
            "1250",
            "--currency",
            "EUR",
            "--attempt-id",
            &attempt.to_string(),
            "--payment-method",
            mock_gateway::payment_methods::CARD_VISA,
        ],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    eventually(
        "the charge succeeded and its event is published",
        Duration::from_secs(30),
        || async {
            let row = as_owner.find_attempt(attempt).await;
            row.is_some_and(|row| row.status == "succeeded")
                && as_owner.unpublished_events().await == 0
        },
    )
    .await;
    assert_eq!(gateway.ledger().len(), 1);

    // The admin API and the console.
    let stats = reqwest::Client::new()
        .get(served.url("/api/stats"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(stats.status(), StatusCode::OK);
    let (status, page) = console_overview(&served, ADMIN_TOKEN).await;
    assert_eq!(status, StatusCode::OK, "{page}");

    // Operator commands: read, pause and resume the fleet (audited), read the audit.
    let (code, stdout, stderr) =
        run_onecharge(&runtime, &["attempts", "show", &attempt.to_string()], &[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("succeeded"), "{stdout}");
    for args in [
        &["fleet", "pause", "--reason", "least privilege drill"][..],
        &["fleet", "resume", "--reason", "drill over"][..],
    ] {
        let (code, _, stderr) = run_onecharge(&runtime, args, &[]).await;
        assert_eq!(code, 0, "{args:?}: {stderr}");
    }
    let (code, stdout, stderr) = run_onecharge(&runtime, &["audit", "list", "--json"], &[]).await;
    assert_eq!(code, 0, "{stderr}");
    let audit: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(audit.as_array().map(Vec::len), Some(2), "{audit}");

    // The sweep reads the gateway's list into its table and has it analysed, as the owner
    // (reltuples is -1 until a table is first analysed).
    let (code, _, stderr) = run_onecharge(
        &runtime,
        &["reconcile", "sweep", "--since", "1h"],
        &gateway_env,
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        as_owner
            .scalar("SELECT reltuples::bigint FROM pg_class WHERE relname = 'reconciliation_sweep_records'")
            .await
            >= 0,
        "the sweep's records were not analysed"
    );

    // The purge: a month to create (the furthest ahead, gone), a month to drop (January
    // 2020, holding a transition of the attempt, which is kept), a month an interrupted pass
    // left detached — each an owner's step, which the runtime role takes through the
    // schema's functions.
    let ahead = as_owner
        .months_of("outbox")
        .await
        .pop()
        .expect("a month of the outbox");
    as_owner
        .exec(&format!(
            "ALTER TABLE outbox DETACH PARTITION {ahead}; DROP TABLE {ahead};
             CREATE TABLE attempt_transitions_p202001 PARTITION OF attempt_transitions
                 FOR VALUES FROM ('2020-01-01Z') TO ('2020-02-01Z');
             INSERT INTO attempt_transitions (payment_attempt_id, from_status, to_status, cause, actor, at)
                 VALUES ('{attempt}', 'pending', 'pending', 'drill', 'test', '2020-01-15Z');
             CREATE TABLE gateway_calls_p201901 (LIKE gateway_calls);"
        ))
        .await;
    let (code, stdout, stderr) = run_onecharge(&runtime, &["purge"], &[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!(
            "; created {ahead} (0 rows moved in from outbox_default)"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("(attempt_transitions_p202001): 0 rows gone, 1 kept"),
        "{stdout}"
    );
    for gone in ["attempt_transitions_p202001", "gateway_calls_p201901"] {
        assert!(!as_owner.relation_exists(gone).await, "{gone} is dropped");
    }
    assert!(
        as_owner.months_of("outbox").await.contains(&ahead),
        "{ahead} is created and attached"
    );
    assert_eq!(
        as_owner
            .scalar(&format!(
                "SELECT count(*) FROM attempt_transitions_default WHERE payment_attempt_id = '{attempt}'"
            ))
            .await,
        1,
        "the kept transition moved to the default partition"
    );
    // …and every month it made is the runtime role's as its table is.
    assert_eq!(
        not_granted_exactly(&as_owner, &roles.runtime).await,
        Vec::<String>::new()
    );
    served.stop().await;

    // A release whose migration has not run: serve and setup --check refuse in one line that
    // names the command, and start nothing. Without the newest migration's record the schema
    // lacks that migration, or has none at all when it was the only one (the baseline).
    let (newest, description) = as_owner.newest_migration().await;
    let only_one = as_owner.rows_in("_sqlx_migrations").await == 1;
    as_owner.forget_migration(newest).await;
    let refusal = if only_one {
        "the database has no onecharge schema: run `onecharge setup` as the schema's owner"
            .to_owned()
    } else {
        format!("the database schema lacks migration {newest} ({description}): run `onecharge setup` as the schema's owner")
    };
    for args in [&["serve"][..], &["setup", "--check"]] {
        let (code, stdout, stderr) = run_onecharge(&runtime, args, &gateway_env).await;
        assert_eq!(code, 1, "{args:?}: {stdout}{stderr}");
        let line = stderr.trim();
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.starts_with("error: ") && line.ends_with(&refusal),
            "{line}"
        );
    }
    as_owner.close().await;
    as_runtime.close().await;
    drop(database);
    drop(roles);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_setup_serve_refuses_naming_it_and_a_waiting_check_passes_once_setup_ran() {
    let (database, settings) = own_settings("lp");
    let broker = onecharge::broker::Broker::connect(&settings).await.unwrap();
    let _streams = ThrowawayNamespace::new(&settings.nats_url, &broker.names);

    let (code, _, stderr) = run_onecharge(&settings, &["setup", "--check"], &[]).await;
    assert_eq!(
        (code, stderr.trim()),
        (
            1,
            &*format!(
                "error: the database at {} does not exist: run `onecharge setup` as the schema's owner",
                // Named without its password, if the URL has one (the README's set-up).
                onecharge::config::redact_url(&settings.database_url)
            )
        )
    );
    database.create(None).await;

    let (code, _, stderr) = run_onecharge(&settings, &["serve", "--roles", "intake"], &[]).await;
    assert_eq!((code, stderr.trim()), (1, "error: the database has no onecharge schema: run `onecharge setup` as the schema's owner"));

    // Migrated, but no stream yet.
    drop(
        onecharge::store::Store::setup(&settings.database_url)
            .await
            .unwrap(),
    );
    let (code, _, stderr) = run_onecharge(&settings, &["serve", "--roles", "intake"], &[]).await;
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!(
            "error: stream {} is missing: run `onecharge setup`",
            broker.names.commands_stream()
        )
    );

    // An init container's wait: it says what it waits for, holds on until setup has run,
    // then passes.
    let mut waiting = tokio::process::Command::from(onecharge())
        .args(["setup", "--check", "--wait", "60s"])
        .env("RUST_LOG", "warn")
        .env("ONECHARGE_DATABASE_URL", &settings.database_url)
        .env("ONECHARGE_NATS_URL", &settings.nats_url)
        .env("ONECHARGE_NAMESPACE", &settings.namespace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(waiting.stderr.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), stderr.next_line())
        .await
        .expect("the check says it waits")
        .unwrap()
        .unwrap_or_default();
    assert_eq!(
        first,
        format!(
            "waiting for `onecharge setup`: stream {} is missing: run `onecharge setup`",
            broker.names.commands_stream()
        )
    );
    let (code, _, stderr_of_setup) = run_onecharge(&settings, &["setup"], &[]).await;
    assert_eq!(code, 0, "{stderr_of_setup}");
    let passed = tokio::time::timeout(Duration::from_secs(30), waiting.wait_with_output())
        .await
        .expect("the check passes once setup ran")
        .unwrap();
    let stdout = String::from_utf8_lossy(&passed.stdout);
    assert!(passed.status.success(), "{stdout}");
    assert!(stdout.starts_with("setup is done"), "{stdout}");
}
