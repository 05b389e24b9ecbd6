//! The store layer owns every SQL statement of onecharge. Roles call typed functions here;
//! no other module writes SQL. Concurrency is resolved by the database — unique keys,
//! `ON CONFLICT DO NOTHING`, row locks that skip what another holds (`kernel`), fencing tokens — never by a read
//! followed by a write in the application.
//!
//! Queries are checked at run time (`sqlx::query`), not with the compile-time macros; every
//! query is exercised by the test suite. See docs/decisions/001-runtime-checked-sql-instead-of-sqlx-query-macros.md for why.
//!
//! Grouped by what it holds: `attempts` (in motion, and a folder for each other write of
//! an attempt: its counts, the gateway objects, lookups, cancels, resolutions), `refunds`
//! (and what a person reads of them), `findings` (the sweep's, the webhooks', the stream
//! audit's), `reads` (what people and dashboards read of attempts), and `kernel`, the one
//! claim of queued work. Beside them what the fleet shares: intake's batch, the outbox and
//! its relay, the audit trail, pauses, the rate limit, console sessions, dead-letter
//! discards, the purge and the history's retention, and `migrations`: whether the
//! database's schema is the one this build carries.

pub mod attempts;
pub mod audit;
pub mod availability;
pub mod console;
pub mod dead_letters;
pub mod findings;
pub mod fleet;
pub mod intake;
pub mod kernel;
pub mod migrations;
pub mod outbox;
pub mod purge;
pub mod rate_limit;
pub mod reads;
pub mod refunds;
pub mod relay;
pub mod retention;

use std::time::Duration;

use anyhow::Context as _;
use sqlx::migrate::MigrateDatabase as _;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres};

use crate::config::DatabaseSettings;

/// The embedded migrations in `migrations/`.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// A connection pool to onecharge's database.
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
}

impl Store {
    /// Connects without touching the schema, with the default session limits
    /// ([`DatabaseSettings::default`]). Fails fast (a few seconds) when the server is
    /// unreachable, so an operator sees the error instead of a hang.
    pub async fn connect(database_url: &str, max_connections: u32) -> anyhow::Result<Self> {
        Self::connect_with(database_url, max_connections, &DatabaseSettings::default()).await
    }

    /// [`Store::connect`] with the configured session limits: every connection the pool
    /// opens carries `statement_timeout`, `lock_timeout` and
    /// `idle_in_transaction_session_timeout`, so a stuck statement, a lock held by a
    /// partitioned client or a forgotten transaction fails (as a transient error) instead
    /// of holding rows for hours.
    pub async fn connect_with(
        database_url: &str,
        max_connections: u32,
        limits: &DatabaseSettings,
    ) -> anyhow::Result<Self> {
        let options: PgConnectOptions = database_url.parse().with_context(|| {
            format!(
                "database_url `{}` is not a PostgreSQL URL",
                redact_url(database_url)
            )
        })?;
        let options = options.options(session_limits(limits));
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(5))
            .max_lifetime(limits.max_lifetime)
            // A node that is a standby or was demoted answers every write with 25006. A
            // connection to it is refused when it opens; a pooled one is dropped when it is
            // handed out after this process saw a write refused with 25006, or after it sat
            // idle (decision 117), so a retry reconnects (to wherever the address now points)
            // instead of failing on the same connection until it is closed. A busy
            // connection is handed out without a round trip of its own.
            .test_before_acquire(false)
            .after_connect(|conn, _| Box::pin(refuse_read_only(conn)))
            .before_acquire(|conn, meta| Box::pin(still_writable(conn, meta)))
            .connect_with(options)
            .await
            .with_context(|| {
                format!(
                    "cannot connect to PostgreSQL at {}",
                    redact_url(database_url)
                )
            })?;
        Ok(Self { pool })
    }

    /// Wraps an existing pool (tests, benchmarks).
    pub fn from_pool(pool: PgPool) -> Self {
        Self { pool }
    }

    /// The pool, for the store's own modules.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Creates the database when missing (if the user may), then applies pending migrations:
    /// `onecharge setup`, as the schema's owner. `serve` never migrates; it checks
    /// ([`Store::check_schema`]). The pool has the default session limits; see
    /// [`Store::setup_with`].
    pub async fn setup(database_url: &str) -> anyhow::Result<Self> {
        Self::setup_with(database_url, &DatabaseSettings::default()).await
    }

    /// [`Store::setup`], the returned pool carrying the configured session limits.
    pub async fn setup_with(database_url: &str, limits: &DatabaseSettings) -> anyhow::Result<Self> {
        let exists = Postgres::database_exists(database_url)
            .await
            .with_context(|| format!("cannot reach PostgreSQL at {}", redact_url(database_url)))?;
        if !exists {
            Postgres::create_database(database_url)
                .await
                .with_context(|| {
                    format!(
                        "database at {} is missing and could not be created",
                        redact_url(database_url)
                    )
                })?;
            tracing::info!(database = %redact_url(database_url), "created database");
        }
        let store = Self::connect_with(database_url, 4, limits).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Applies pending migrations, on a connection of its own without the session limits:
    /// a migration may rewrite a large table, and one instance waits on the migration lock
    /// while another migrates. That connection is closed afterwards, never pooled. A
    /// database of the pre-release migrations is refused first
    /// ([`migrations::SchemaError::PreRelease`]).
    pub async fn migrate(&self) -> anyhow::Result<()> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .context("connecting to run database migrations")?
            .detach();
        sqlx::raw_sql(
            "SET statement_timeout = 0; SET lock_timeout = 0; \
             SET idle_in_transaction_session_timeout = 0",
        )
        .execute(&mut conn)
        .await
        .context("lifting the session limits for migrations")?;
        migrations::check_before_migrating(&mut conn).await?;
        MIGRATOR
            .run(&mut conn)
            .await
            .context("running database migrations")?;
        let _ = sqlx::Connection::close(conn).await;
        Ok(())
    }

    /// Warns when the server's autovacuum is off. Every claim and settlement leaves a dead
    /// row version behind; without vacuum the executor's claim index fills with them and
    /// each claim scans further (measured: 1,000 → ~170 charges/s within three minutes).
    pub async fn warn_without_autovacuum(&self) {
        match sqlx::query_scalar::<_, String>("SHOW autovacuum")
            .fetch_one(&self.pool)
            .await
        {
            Ok(setting) if setting == "off" => tracing::warn!(
                "PostgreSQL autovacuum is off: claims slow down as payment_attempts fills with dead rows; turn it on, or VACUUM payment_attempts and outbox regularly"
            ),
            Ok(_) => {}
            Err(err) => tracing::debug!(error = %err, "cannot read the autovacuum setting"),
        }
    }

    /// The database's `now()`: the clock every stored time is measured on. What compares a
    /// time with stored ones (retention's cut-offs) reads it, never the host's clock, which
    /// may run hours off the database's.
    pub async fn now(&self) -> Result<time::OffsetDateTime, sqlx::Error> {
        sqlx::query_scalar("SELECT now()")
            .fetch_one(&self.pool)
            .await
    }

    /// Whether the database answers a trivial query (readiness), and why not.
    pub async fn ping(&self) -> Result<(), Unreachable> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|err| Unreachable::of(&err))
    }
}

impl Unreachable {
    /// Why a statement of readiness's failed, as `/readyz` says it (and noted for the
    /// failover state).
    pub fn of(err: &sqlx::Error) -> Self {
        availability::failed(err);
        if availability::in_failover() {
            Unreachable::NoWritablePrimary
        } else if matches!(err, sqlx::Error::PoolTimedOut) {
            Unreachable::Busy
        } else {
            Unreachable::Other
        }
    }
}

/// Why the database did not answer readiness's query, as `/readyz` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unreachable {
    /// This process is in a database failover (no writable primary reached).
    #[error("database unreachable: no writable primary (a failover in progress?)")]
    NoWritablePrimary,
    /// No pooled connection came free in time: every one is busy, as when commits wait for
    /// a synchronous standby that is gone.
    #[error(
        "database busy: no connection free in time (commits waiting for a synchronous standby?)"
    )]
    Busy,
    #[error("database unreachable")]
    Other,
}

/// One column of a batch statement: `f` of each item, as the array that one `$n::type[]`
/// parameter of an `UNNEST(…)` binds. A batch of rows goes to PostgreSQL as one array per
/// column, all in the items' order, so every column of a statement is built the same way.
pub(crate) fn column<I, T>(items: I, f: impl FnMut(I::Item) -> T) -> Vec<T>
where
    I: IntoIterator,
{
    items.into_iter().map(f).collect()
}

/// The `-c name=value` startup options of a new session: the `limits`, and every
/// statement planned when it runs (`plan_cache_mode = force_custom_plan`, decision 121):
/// a prepared statement's generic plan, made once when a table was small, kept scanning
/// the whole table as it grew.
fn session_limits(limits: &DatabaseSettings) -> [(&'static str, String); 4] {
    let millis = |d: Duration| format!("{}ms", d.as_millis());
    [
        ("plan_cache_mode", "force_custom_plan".to_owned()),
        ("statement_timeout", millis(limits.statement_timeout)),
        ("lock_timeout", millis(limits.lock_timeout)),
        (
            "idle_in_transaction_session_timeout",
            millis(limits.idle_in_transaction_session_timeout),
        ),
    ]
}

/// Whether the server behind `conn` refuses writes: a hot standby (in recovery) or a node
/// made read-only (`default_transaction_read_only`), as after a demotion.
async fn is_read_only(conn: &mut sqlx::PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar::<_, bool>("SELECT current_setting('transaction_read_only')::bool")
        .fetch_one(conn)
        .await
}

/// How long a pooled connection may sit idle before it is asked again, when handed out,
/// whether its server still takes writes. A busy connection is not asked: its own writes
/// would fail with 25006, which [`is_transient`] records ([`read_only::seen`]).
const ASK_AGAIN_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Whether a pooled connection may be handed out (`false` closes it). One opened before
/// this process last saw a write refused as read-only is closed without asking: a failover
/// is rare, reconnecting is cheap, and the new connection is checked when it opens. One
/// idle for [`ASK_AGAIN_AFTER_IDLE`] is asked (a process that writes rarely, such as the
/// admin API, sees no refusal of its own in time). Any other is handed out as it is.
async fn still_writable(
    conn: &mut sqlx::PgConnection,
    meta: sqlx::pool::PoolConnectionMetadata,
) -> Result<bool, sqlx::Error> {
    if read_only::seen_since(meta.age) {
        return Ok(false);
    }
    if meta.idle_for >= ASK_AGAIN_AFTER_IDLE {
        let writable = !is_read_only(conn).await?;
        if writable {
            availability::reached();
        }
        return Ok(writable);
    }
    Ok(true)
}

/// The last time this process saw a write refused because the server was read-only
/// (SQLSTATE 25006): process-wide, since every pool of the process points at the same
/// primary, and recorded by the one classifier every retrying role asks ([`is_transient`]).
mod read_only {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// Nanoseconds after [`epoch`] of the latest refusal; 0 when none was seen.
    static LAST_REFUSAL: AtomicU64 = AtomicU64::new(0);

    fn epoch() -> Instant {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        *EPOCH.get_or_init(Instant::now)
    }

    fn since_epoch(at: Instant) -> u64 {
        // +1: a refusal in the epoch's first nanosecond still counts as seen.
        u64::try_from(at.saturating_duration_since(epoch()).as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(1)
    }

    /// Records a refusal now.
    pub(super) fn seen() {
        LAST_REFUSAL.fetch_max(since_epoch(Instant::now()), Ordering::Relaxed);
    }

    /// Whether a refusal was seen after a connection of this `age` was opened.
    pub(super) fn seen_since(age: Duration) -> bool {
        let last = LAST_REFUSAL.load(Ordering::Relaxed);
        let opened = Instant::now().checked_sub(age).unwrap_or_else(epoch);
        last != 0 && last >= since_epoch(opened)
    }
}

/// Refuses a new connection to a read-only node: the pool tries again, until the address
/// leads to a writable primary or the acquire times out (a transient error).
async fn refuse_read_only(conn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    if is_read_only(conn).await? {
        availability::refused_read_only();
        return Err(sqlx::Error::Configuration(
            "the PostgreSQL server is read-only (a standby, or a primary that was demoted): onecharge needs the primary; point database_url at it"
                .into(),
        ));
    }
    availability::reached();
    Ok(())
}

/// The URL with any password replaced, for messages and logs.
pub fn redact_url(url: &str) -> String {
    crate::config::redact_url(url)
}

/// Whether a database error may go away on its own (the server restarting, a dropped
/// connection, a serialization failure or deadlock), as opposed to a statement the
/// database will reject every time. Decided on SQLSTATE classes, never on message text.
///
/// A write refused because the server is read-only (25006: a failover in progress) is
/// transient, and is also recorded: every pooled connection opened before it is closed
/// instead of handed out again, so the retry runs on a new connection to wherever the
/// address now points.
pub fn is_transient(error: &sqlx::Error) -> bool {
    availability::failed(error);
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) if db.code().as_deref() == Some("25006") => {
            read_only::seen();
            true
        }
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // 08 connection exception, 40 transaction rollback (serialization, deadlock),
            // 53 insufficient resources, 55 object not in prerequisite state (a database
            // not accepting connections, a lock not available), 57 operator intervention
            // (shutdown), 58 system error
            ["08", "40", "53", "55", "57", "58"]
                .iter()
                .any(|class| code.starts_with(class))
        }),
        _ => false,
    }
}

/// For a role whose failed step arrives as an error chain: records a read-only refusal
/// (25006) anywhere in it, as [`is_transient`] does, so the pool drops its connections to
/// the demoted node before the next step, and a lost primary, which begins this process's
/// database failover. True when the failover explains the failure
/// ([`availability::explains`]): the role logs the step at debug.
pub fn notice_failure(error: &anyhow::Error) -> bool {
    for cause in error.chain() {
        if let Some(db) = cause.downcast_ref::<sqlx::Error>() {
            is_transient(db);
        }
    }
    availability::explains(error)
}

/// Whether the database refused the statement because of the data it carried: SQLSTATE class
/// 22 (data exception: a NUL in a text, a value out of range) or 23 (integrity constraint
/// violation: a check, a foreign key). Only these blame a message; everything else — a
/// permission the deployment lacks (42501), a table a migration forgot (42P01), an internal
/// error (XX000), an outage — is the deployment's fault and fails every message alike, so
/// it must be retried, never dead-lettered as `invalid`.
pub fn blames_the_data(error: &sqlx::Error) -> bool {
    sqlstate_class(error).is_some_and(|class| class == "22" || class == "23")
}

/// The two-character SQLSTATE class of a database error (a bounded metric label).
pub fn sqlstate_class(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(db) => db.code().map(|code| code.chars().take(2).collect()),
        _ => None,
    }
}
