//! The schema's migrations: the baseline makes the schema the pre-release migrations made
//! (described in `migrations/baseline.catalog`, decision 260), and a database those
//! migrations made is refused in one line by `setup` and `serve` instead of sqlx's
//! "previously applied but has been modified".

use std::borrow::Cow;

use onecharge::store::{Store, MIGRATOR};
use sqlx::migrate::{MigrateDatabase as _, Migrator};

use crate::support::process::run_onecharge;
use crate::support::throwaway::{own_settings, ThrowawayDatabase, ThrowawayNamespace};
use crate::support::Records;

/// The catalogue query: one line per object of the schema, month partitions named relative
/// to the current month.
const CATALOG: &str = include_str!("migrations/catalog.sql");
/// What the 47 pre-release migrations made, by that query, but for the one constraint the
/// baseline validates (decision 260).
const BASELINE: &str = include_str!("migrations/baseline.catalog");

/// The baseline alone: the first migration, without the ones added after it.
fn baseline_only() -> Migrator {
    let baseline = MIGRATOR.iter().next().expect("a first migration").version;
    Migrator {
        migrations: Cow::Owned(
            MIGRATOR
                .iter()
                .filter(|m| m.version == baseline)
                .cloned()
                .collect(),
        ),
        ..Migrator::DEFAULT
    }
}

/// The catalogue of the database behind `store`, one line per object.
async fn catalog(store: &Store) -> Vec<String> {
    let mut conn = store.pool().acquire().await.unwrap();
    sqlx::query("SET TimeZone = 'UTC'")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query_scalar(CATALOG)
        .fetch_all(&mut *conn)
        .await
        .unwrap()
}

/// Every column, constraint, index, trigger, function, grant, storage option, view and
/// partition the baseline makes is the one the pre-release migrations made, and it writes
/// no row; its down migration leaves an empty schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_baseline_makes_the_schema_the_pre_release_migrations_made() {
    let database = ThrowawayDatabase::new();
    let url = database.url();
    sqlx::Postgres::create_database(&url).await.unwrap();
    let store = Store::connect(&url, 2).await.unwrap();
    let baseline = baseline_only();
    baseline.run(store.pool()).await.unwrap();

    let made = catalog(&store).await.join("\n");
    let expected = BASELINE.trim_end();
    let missing: Vec<&str> = expected
        .lines()
        .filter(|line| !made.lines().any(|m| m == *line))
        .collect();
    let extra: Vec<&str> = made
        .lines()
        .filter(|line| !expected.lines().any(|e| e == *line))
        .collect();
    assert!(
        made == expected,
        "the baseline's schema differs from baseline.catalog\nmissing:\n{missing:#?}\nextra:\n{extra:#?}"
    );

    baseline.undo(store.pool(), 0).await.unwrap();
    assert_eq!(
        catalog(&store).await,
        Vec::<String>::new(),
        "the down migration leaves nothing"
    );
}

/// A database of the pre-release migrations (its first migration recorded under the
/// baseline's version with another text, then the versions that followed): `setup`,
/// `setup --check` and `serve` say in one line that it must be made again, exit 2, and
/// change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_the_pre_release_migrations_is_refused_in_one_line() {
    let (database, settings) = own_settings("mg");
    let broker = onecharge::broker::Broker::connect(&settings).await.unwrap();
    let _streams = ThrowawayNamespace::new(&settings.nats_url, &broker.names);
    let store = Store::setup(&settings.database_url).await.unwrap();
    let baseline = MIGRATOR.iter().next().unwrap().version;
    // What a pre-release build recorded: its first migration under this version, with its
    // own text, and 46 more after it (the last of them here).
    sqlx::raw_sql(&format!(
        "UPDATE _sqlx_migrations SET description = 'initial schema',
                checksum = sha384('-- the pre-release initial schema'::bytea)
         WHERE version = {baseline};
         INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (20261204002500, 'call recorded with the move it caused', true,
                 sha384('-- a pre-release migration'::bytea), 1)"
    ))
    .execute(store.pool())
    .await
    .unwrap();
    let recorded = || store.rows_in("_sqlx_migrations");
    let before = recorded().await;

    let gateway = [
        ("ONECHARGE_GATEWAY_URL", "http://127.0.0.1:1"),
        ("ONECHARGE_GATEWAY_API_KEY", "sk_test_migrations"),
    ];
    for args in [&["setup"][..], &["setup", "--check"], &["serve"]] {
        let (code, stdout, stderr) = run_onecharge(&settings, args, &gateway).await;
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert_eq!(
            stderr.trim(),
            format!(
                "the database was made by a pre-release build of onecharge (before the baseline migration {baseline}) and cannot be upgraded: drop it and run `onecharge setup` to make it again"
            ),
            "{args:?}"
        );
    }
    assert_eq!(recorded().await, before, "nothing migrated");

    // Made again, as the line says, it is set up and served.
    store.pool().close().await;
    sqlx::Postgres::force_drop_database(&settings.database_url)
        .await
        .unwrap();
    let (code, stdout, stderr) = run_onecharge(&settings, &["setup"], &gateway).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (code, stdout, stderr) = run_onecharge(&settings, &["setup", "--check"], &gateway).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    drop(database);
}
