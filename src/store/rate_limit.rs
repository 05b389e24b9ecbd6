//! The fleet-wide gateway token bucket (`gateway_rate_buckets`): one row per gateway, shared
//! by every instance. See `crate::gateway_access::limit` for who takes tokens and why.
//!
//! Invariants kept here:
//! - A take is one `UPDATE … RETURNING`: the refill, the grant and the new balance are
//!   computed on the row as locked, so two instances never both spend the same token (no
//!   read followed by a write).
//! - The refill is timed by the database's clock (`clock_timestamp()`, read once per take),
//!   never by a host's. A take whose clock reading predates the last take by at most
//!   [`MAX_CLOCK_STEP_BACK`] (it waited for the row lock) refills nothing and leaves the time
//!   to the next take, so no token is made twice or lost. A reading further back is the
//!   clock stepping back (a failover to a host running behind): the bucket takes the new
//!   time as its own, so the refill stops for at most [`MAX_CLOCK_STEP_BACK`], not for the
//!   size of the step.
//! - Over any interval of length `T` on one clock, the bucket hands out at most
//!   `burst + rate × T`. Across a step back the database's clock counts up to the step
//!   twice; the cap keeps that to the one step, once.

use std::time::Duration;

use time::OffsetDateTime;

use crate::store::Store;

/// How far behind the last take a clock reading may be and still be taken for a take that
/// waited for the row lock; further behind, the clock stepped back. Lock waits on the
/// bucket row last milliseconds; a step of a failover lasts as long as the hosts disagree.
pub const MAX_CLOCK_STEP_BACK: Duration = Duration::from_secs(1);

/// What one take handed out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Taken {
    /// Whole tokens granted (0 when the bucket held less than one).
    pub granted: u32,
    /// Tokens left in the bucket after the grant (fractional).
    pub tokens: f64,
    /// The database time the bucket was refilled to by this take.
    pub at: OffsetDateTime,
}

/// Takes up to `want` whole tokens from the bucket of `gateway`, refilled at `rate` tokens a
/// second up to `burst`, creating the bucket full when it is missing. `at` replaces the
/// database clock (tests step it); production passes `None`.
pub async fn take_tokens(
    store: &Store,
    gateway: &str,
    rate: f64,
    burst: f64,
    want: u32,
    at: Option<OffsetDateTime>,
) -> Result<Taken, sqlx::Error> {
    // The one atomic take. `avail` — the bucket refilled to now, capped at the burst — is
    // written out twice (for the grant and for the new balance) because an `UPDATE` cannot
    // name an expression over the row it locks; both are evaluated on the locked row.
    let update_bucket = || async move {
        let row: Option<(i32, f64, OffsetDateTime)> = sqlx::query_as(
            "WITH clock AS (SELECT COALESCE($5::timestamptz, clock_timestamp()) AS now)
             UPDATE gateway_rate_buckets b
                SET granted = LEAST($4::float8, floor(LEAST($3::float8, b.tokens + $2::float8
                        * GREATEST(0, EXTRACT(EPOCH FROM (clock.now - b.refilled_at))::float8))))::int,
                    tokens = LEAST($3::float8, b.tokens + $2::float8
                        * GREATEST(0, EXTRACT(EPOCH FROM (clock.now - b.refilled_at))::float8))
                      - LEAST($4::float8, floor(LEAST($3::float8, b.tokens + $2::float8
                        * GREATEST(0, EXTRACT(EPOCH FROM (clock.now - b.refilled_at))::float8)))),
                    refilled_at = CASE
                        WHEN clock.now < b.refilled_at - make_interval(secs => $6) THEN clock.now
                        ELSE GREATEST(b.refilled_at, clock.now)
                    END
               FROM clock
              WHERE b.gateway = $1
             RETURNING b.granted, b.tokens, b.refilled_at",
        )
        .bind(gateway)
        .bind(rate)
        .bind(burst)
        .bind(f64::from(want))
        .bind(at)
        .bind(MAX_CLOCK_STEP_BACK.as_secs_f64())
        .fetch_optional(store.pool())
        .await?;
        Ok::<_, sqlx::Error>(row.map(|(granted, tokens, at)| Taken {
            granted: granted.max(0) as u32,
            tokens,
            at,
        }))
    };
    if let Some(taken) = update_bucket().await? {
        return Ok(taken);
    }
    sqlx::query(
        "INSERT INTO gateway_rate_buckets (gateway, tokens, refilled_at)
         VALUES ($1, $2, COALESCE($3::timestamptz, clock_timestamp()))
         ON CONFLICT (gateway) DO NOTHING",
    )
    .bind(gateway)
    .bind(burst)
    .bind(at)
    .execute(store.pool())
    .await?;
    update_bucket().await?.ok_or(sqlx::Error::RowNotFound)
}
