//! Operator actions (contract §5, §6): what a person on call uses to see where attempts
//! stand, to decide the ones nobody else can (`needs_review`) and to replay dead letters.
//!
//! - [`attempts`]: `attempts list | stuck | show` — the queries, what happens next to each
//!   attempt, and the facts and timeline of one.
//! - [`stats`]: `attempts stats` — counts per state, the oldest unsettled age, dead letters
//!   and the outbox backlog.
//! - [`resolve`]: `attempts resolve` — an operator's decision, guarded in SQL.
//! - [`recheck`]: `attempts recheck` — the reconciler's lookup for one attempt, now.
//! - [`bulk`]: `attempts bulk-retry | bulk-recheck` — one decision on a filtered set, with
//!   a preview and a hard cap.
//! - [`dlq`]: `dlq list | replay`.
//! - [`audit`]: `audit list` — every manual action, who, when, what, why.
//! - [`intake_audit`]: `intake audit` — commands on the stream intake never recorded.
//! - [`findings`]: `findings resolve` — closing what the sweep and the webhooks found.
//! - [`refunds`]: `refunds list | show | create` — where refunds stand, and a person's
//!   refund of a charge, published as a command like a producer's.
//!
//! Each is an action or a reading — data in, data out, audited — and prints nothing: the
//! command line (`crate::cli`) prints what they return. Every SQL statement is in
//! `crate::store::reads::attempts` and `crate::store::audit`; the CLI, the admin API and the
//! console call the same functions here, each passing who acts (`actor`: `operator:<name>`,
//! `admin-api`) and through what ([`Via`]), so a decision taken over HTTP is the decision
//! taken on the command line, and the audit trail records it the same way.

pub mod attempts;
pub mod audit;
pub mod bulk;
pub mod cancel;
pub mod dlq;
pub mod export;
pub mod findings;
pub mod fleet;
pub mod intake_audit;
pub mod page;
pub mod recheck;
pub mod refunds;
pub mod resolve;
pub mod stats;

use time::OffsetDateTime;

use crate::domain::AttemptStatus;

pub use crate::store::audit::Via;
pub use page::Page;
pub use resolve::{ResolveAs, ResolveError, ResolveRequest};

/// How far an operator's retry may reach: the same window the executor's claim applies, so
/// that a retry the operator is allowed is one the executor will really send.
pub use crate::domain::RetryWindow;

/// The largest `--limit` (and `limit=`): what PostgreSQL's `LIMIT` takes.
pub const MAX_LIMIT: usize = i64::MAX as usize;

/// A row limit: a whole number from 0 (all) to [`MAX_LIMIT`].
pub fn parse_limit(text: &str) -> Result<usize, String> {
    text.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n <= MAX_LIMIT)
        .ok_or_else(|| {
            format!("`{text}` is not a whole number from 0 (all) to at most {MAX_LIMIT}")
        })
}

/// Refuses a value holding NUL, which PostgreSQL text cannot store: an operator's words
/// with one are the caller's mistake to fix, not a failure in the database. `name` is how
/// the caller spelt the field (`--reason`, `reason`).
fn recordable(name: &str, value: &str) -> Result<(), String> {
    if value.contains('\0') {
        return Err(format!(
            "{name} contains a NUL character (\\0), which cannot be recorded: remove it"
        ));
    }
    Ok(())
}

/// An RFC 3339 time, e.g. `2026-12-01T13:00:00Z`.
pub fn parse_time(text: &str) -> Result<OffsetDateTime, String> {
    OffsetDateTime::parse(text.trim(), &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("`{text}` is not an RFC 3339 time such as 2026-12-01T13:00:00Z: {e}"))
}

fn parse_status(text: &str) -> Result<AttemptStatus, String> {
    text.parse::<AttemptStatus>().map_err(|e| e.to_string())
}
