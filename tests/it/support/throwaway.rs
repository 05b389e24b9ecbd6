//! What a test makes for itself and removes again: a PostgreSQL database of its own and a
//! JetStream namespace (streams) of its own. Both guards remove theirs when dropped, by the
//! one cleanup mechanism of the suite, [`on_own_thread`].
//!
//! The soak and the benchmarks (`examples/`) use the same database guard. This file needs
//! nothing else of `tests/it/support`, so they include it with `#[path]`.
#![allow(dead_code)]

use std::future::Future;

use onecharge::broker::Names;
use onecharge::config::Settings;
use uuid::Uuid;

/// PostgreSQL server without a database; override with TEST_DATABASE_URL.
pub fn server_url() -> String {
    std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://127.0.0.1:5432".into())
}

/// The shared NATS server; override with TEST_NATS_URL.
pub fn nats_url() -> String {
    std::env::var("TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// Settings that reach a database of this test's own (returned with its guard), the shared
/// NATS server and a namespace of the test's own (`prefix` and 12 hex digits); the rest are
/// the defaults.
pub fn own_settings(prefix: &str) -> (ThrowawayDatabase, Settings) {
    let database = ThrowawayDatabase::new();
    let id = Uuid::new_v4().simple().to_string();
    let settings = Settings {
        database_url: database.url(),
        nats_url: nats_url(),
        namespace: format!("{prefix}{}", &id[..12]),
        ..Settings::default()
    };
    (database, settings)
}

/// A database name of this test's own (`<prefix>_<uuid>`), dropped `WITH (FORCE)` when the
/// guard drops. Nothing is created here: `Store::setup` and `onecharge setup` create a
/// missing database.
pub struct ThrowawayDatabase {
    server: String,
    name: String,
    keep: bool,
    keep_if_failing: bool,
}

impl ThrowawayDatabase {
    /// `onecharge_test_<uuid>` on the test server.
    pub fn new() -> Self {
        Self::named(&server_url(), "onecharge_test")
    }

    /// `<prefix>_<uuid>` on `server` (a URL without a database).
    pub fn named(server: &str, prefix: &str) -> Self {
        Self {
            server: server.trim_end_matches('/').to_owned(),
            name: format!("{prefix}_{}", Uuid::new_v4().simple()),
            keep: false,
            keep_if_failing: false,
        }
    }

    /// Keeps the database when the guard drops during a panic, and says how to drop it, so
    /// that a failed run's rows can be read.
    pub fn kept_if_failing(mut self) -> Self {
        self.keep_if_failing = true;
        self
    }

    /// Keeps the database when `keep` (a benchmark's `--keep-database`), and says how to
    /// drop it.
    pub fn kept(mut self, keep: bool) -> Self {
        self.keep = keep;
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The database's URL.
    pub fn url(&self) -> String {
        format!("{}/{}", self.server, self.name)
    }

    /// Runs SQL as an administrator of the server (on its `postgres` database).
    pub async fn admin(&self, sql: &str) {
        admin(&self.server, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Creates the database, empty, owned by `owner` (`None`: the administrator): for a test
    /// of what `setup` does to a database someone else created.
    pub async fn create(&self, owner: Option<&str>) {
        let owned_by = owner.map_or(String::new(), |role| format!(" OWNER {role}"));
        self.admin(&format!("CREATE DATABASE {}{owned_by}", self.name))
            .await;
    }

    /// Refuses new connections and cuts the open ones: an outage of this database.
    pub async fn refuse_connections(&self) {
        self.admin(&format!(
            "ALTER DATABASE {} WITH ALLOW_CONNECTIONS false",
            self.name
        ))
        .await;
        self.admin(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'",
            self.name
        ))
        .await;
    }

    /// Ends the outage of [`ThrowawayDatabase::refuse_connections`].
    pub async fn allow_connections(&self) {
        self.admin(&format!(
            "ALTER DATABASE {} WITH ALLOW_CONNECTIONS true",
            self.name
        ))
        .await;
    }
}

impl Default for ThrowawayDatabase {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for ThrowawayDatabase {
    fn drop(&mut self) {
        if self.keep || (self.keep_if_failing && std::thread::panicking()) {
            eprintln!(
                "kept database {} (drop it with: psql -h 127.0.0.1 -U postgres -c 'DROP DATABASE {} WITH (FORCE)')",
                self.name, self.name
            );
            return;
        }
        let (server, sql) = (
            self.server.clone(),
            format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
        on_own_thread(async move {
            if let Err(err) = admin(&server, &sql).await {
                eprintln!("warning: {sql}: {err}");
            }
        });
    }
}

async fn admin(server: &str, sql: &str) -> Result<(), sqlx::Error> {
    let pool = sqlx::PgPool::connect(&format!("{server}/postgres")).await?;
    let result = sqlx::query(sql).execute(&pool).await;
    pool.close().await;
    result.map(drop)
}

/// The command, events and dead-letter streams of one namespace, deleted from the server at
/// `nats_url` when the guard drops (those never created are passed over).
pub struct ThrowawayNamespace {
    nats_url: String,
    streams: [String; 3],
}

impl ThrowawayNamespace {
    pub fn new(nats_url: &str, names: &Names) -> Self {
        Self {
            nats_url: nats_url.to_owned(),
            streams: [
                names.commands_stream(),
                names.events_stream(),
                names.dlq_stream(),
            ],
        }
    }
}

impl Drop for ThrowawayNamespace {
    fn drop(&mut self) {
        let (nats_url, streams) = (self.nats_url.clone(), self.streams.clone());
        on_own_thread(async move {
            if let Ok(client) = async_nats::connect(&nats_url).await {
                let jetstream = async_nats::jetstream::new(client);
                for name in streams {
                    let _ = jetstream.delete_stream(name).await;
                }
            }
        });
    }
}

/// Runs `cleanup` to its end from a `Drop`: on a thread with its own runtime and its own
/// connections, because the test's runtime is blocked while it drops (a current-thread
/// runtime could never run the cleanup, a multi-threaded one must not be blocked in place).
pub fn on_own_thread(cleanup: impl Future<Output = ()> + Send + 'static) {
    let _ = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a cleanup runtime")
            .block_on(cleanup);
    })
    .join();
}
