//! The schema's migrations: the baseline makes the schema the pre-release migrations made
//! (described in `migrations/baseline.catalog`, decision 260).

use std::borrow::Cow;

use onecharge::store::{Store, MIGRATOR};
use sqlx::migrate::{MigrateDatabase as _, Migrator};

use crate::support::throwaway::ThrowawayDatabase;

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
