//! Whether this process reaches a writable PostgreSQL primary (decision 250). A failover
//! (Patroni, CloudNativePG, a managed service moving its address) looks the same from every
//! role: connections cut or refused, a server shutting down or read-only. Without a name
//! for that, each role logs each failed step, a wall of warnings for one event. So the
//! first such failure starts "the failover" for the process: one warning, the gauge
//! `onecharge_database_failover` at 1 and a count of failovers; the roles log their failed
//! steps at debug meanwhile ([`explains`]); and the first connection that a writable primary
//! answers ends it: one line saying how long it lasted, the gauge at 0.
//!
//! Only the server's answers end it (a new connection checked writable, an idle one asked
//! again), never a pooled connection handed out unasked, which may lead to the node that
//! just died. A pool exhausted by slow commits (a synchronous standby missing under
//! `synchronous_mode_strict`) is no failover: the server answers, it is just slow.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Nanoseconds after [`epoch`] (+1) at which the failover began; 0 while none is on.
static LOST_SINCE: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_since_epoch() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos())
        .unwrap_or(u64::MAX)
        .saturating_add(1)
}

/// Whether `error` says that no writable primary is within reach: the connection broke or
/// could not be made (I/O, TLS, a protocol error such as a proxy with no server behind it),
/// or the server refused it as a failover does: SQLSTATE class 08 (connection exception),
/// 57P01–57P03 (shut down by an administrator or a crash, not accepting connections yet),
/// 25006 (read-only: a standby, or a primary that was demoted). Decided on kinds and codes,
/// never on message text.
pub fn means_no_primary(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") || ["57P01", "57P02", "57P03", "25006"].contains(&code.as_ref())
        }),
        _ => false,
    }
}

/// A database operation failed with `error`: when it [`means_no_primary`], the failover
/// begins for this process (if it had not already).
pub fn failed(error: &sqlx::Error) {
    if means_no_primary(error) {
        begin(&error.to_string());
    }
}

/// A new connection found the server read-only: the failover begins (if it had not).
pub(crate) fn refused_read_only() {
    begin("the server is read-only (a standby, or a primary that was demoted)");
}

fn begin(why: &str) {
    if LOST_SINCE
        .compare_exchange(0, now_since_epoch(), Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        crate::metrics::database_failover_began();
        tracing::warn!(
            error = why,
            "no writable PostgreSQL primary: a database failover in progress? Commands wait on the stream and every role retries; failed steps are logged at debug until a writable primary answers (onecharge_database_failover = 1)"
        );
    }
}

/// A connection reached a server that takes writes: the failover, if one was on, is over.
pub(crate) fn reached() {
    let since = LOST_SINCE.swap(0, Ordering::AcqRel);
    if since != 0 {
        let lasted = Duration::from_nanos(now_since_epoch().saturating_sub(since));
        tracing::warn!(
            lasted_ms = u64::try_from(lasted.as_millis()).unwrap_or(u64::MAX),
            "a writable PostgreSQL primary answers again after {:.1}s: the database failover is over for this process",
            lasted.as_secs_f64()
        );
    }
    crate::metrics::database_failover(false);
}

/// How long this process has been without a writable primary, when it is.
pub fn lost_for() -> Option<Duration> {
    match LOST_SINCE.load(Ordering::Acquire) {
        0 => None,
        since => Some(Duration::from_nanos(
            now_since_epoch().saturating_sub(since),
        )),
    }
}

/// Whether a role's failed step is explained by the failover this process announced: the
/// process is in one, and the step failed on the database. The role then logs the step at
/// debug: the announcement said it once, and `onecharge_database_failover` says it on
/// `/metrics`.
pub fn explains(error: &anyhow::Error) -> bool {
    lost_for().is_some()
        && error
            .chain()
            .any(|cause| cause.downcast_ref::<sqlx::Error>().is_some())
}

/// Whether the process is in a failover now (for a failure that arrives without its
/// error, such as intake's transient delivery outcome).
pub fn in_failover() -> bool {
    lost_for().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database_error(code: &str) -> sqlx::Error {
        #[derive(Debug)]
        struct Coded(String);
        impl std::fmt::Display for Coded {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "SQLSTATE {}", self.0)
            }
        }
        impl std::error::Error for Coded {}
        impl sqlx::error::DatabaseError for Coded {
            fn message(&self) -> &str {
                "test"
            }
            fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
                Some(std::borrow::Cow::Borrowed(&self.0))
            }
            fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
                self
            }
            fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
                self
            }
            fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
                self
            }
            fn kind(&self) -> sqlx::error::ErrorKind {
                sqlx::error::ErrorKind::Other
            }
        }
        sqlx::Error::Database(Box::new(Coded(code.to_owned())))
    }

    #[test]
    fn a_failover_is_a_cut_connection_a_server_going_away_or_a_read_only_one_and_nothing_else() {
        let cut = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        assert!(means_no_primary(&cut));
        assert!(means_no_primary(&sqlx::Error::Protocol(
            "unexpected response from SSLRequest: 0x00".into()
        )));
        for code in ["08006", "57P01", "57P02", "57P03", "25006"] {
            assert!(means_no_primary(&database_error(code)), "{code}");
        }
        // The server answering, slowly or with a refusal of the statement: no failover.
        for code in ["57014", "55P03", "40001", "23505", "42501", "53300"] {
            assert!(!means_no_primary(&database_error(code)), "{code}");
        }
        assert!(!means_no_primary(&sqlx::Error::PoolTimedOut));
        assert!(!means_no_primary(&sqlx::Error::RowNotFound));
    }

    #[test]
    fn the_first_lost_connection_begins_the_failover_and_the_first_writable_answer_ends_it() {
        reached();
        assert!(!in_failover());
        failed(&database_error("42501"));
        assert!(!in_failover(), "a refused grant is no failover");
        failed(&database_error("57P01"));
        assert!(in_failover());
        let began = lost_for().expect("on");
        failed(&database_error("08006"));
        assert!(lost_for().expect("still on") >= began, "it began once");
        let in_a_step = anyhow::Error::new(database_error("08006")).context("claiming");
        assert!(explains(&in_a_step));
        assert!(!explains(&anyhow::anyhow!("NATS: no responders")));
        reached();
        assert!(!in_failover());
        assert!(
            !explains(&in_a_step),
            "after the failover, a failed step is logged again"
        );
    }
}
