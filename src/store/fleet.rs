//! Pausing money movement across the fleet (issue 39, decision 145), everything or narrower
//! (issue 54, decision 265): each open row of `fleet_pauses` is a pause every executor obeys,
//! for its scope (everything, charges, refunds) and, when it names one, its currency.
//!
//! Invariants kept here:
//! - At most one pause is open per scope and currency: a second is refused by the unique
//!   index on open rows (`INSERT … ON CONFLICT DO NOTHING`), never by a read first; a resume
//!   closes exactly one open row with one guarded `UPDATE`.
//! - A pause or resume and its audit row commit in one transaction.
//! - The claims (`store::attempts::claim_due_attempts`, `store::refunds::claim_pending`)
//!   ask for a covering open row in their own statement ([`HELD_CHARGE`], [`HELD_REFUND`]),
//!   so nothing a pause covers is claimed once it has committed.

use serde::Serialize;
use sqlx::postgres::PgListener;
use time::OffsetDateTime;

use crate::domain::{Actor, Currency, PauseCover, PauseScope};
use crate::store::audit::{self, AuditAction, NewAuditEntry, Via};
use crate::store::Store;

/// Whether an open pause holds back the charge of the row being claimed
/// (`payment_attempts`, unaliased): one of scope `all` or `charges`, in every currency or in
/// the attempt's. The same rule as [`PauseCover::holds`], in the claim's own statement.
pub const HELD_CHARGE: &str = "EXISTS (SELECT 1 FROM fleet_pauses p
    WHERE p.resumed_at IS NULL AND p.scope IN ('all', 'charges')
      AND (p.currency IS NULL OR p.currency = payment_attempts.currency))";

/// Whether an open pause holds back the refund of the row being claimed (`refunds`,
/// unaliased): one of scope `all` or `refunds`, in every currency or in the refund's.
pub const HELD_REFUND: &str = "EXISTS (SELECT 1 FROM fleet_pauses p
    WHERE p.resumed_at IS NULL AND p.scope IN ('all', 'refunds')
      AND (p.currency IS NULL OR p.currency = refunds.currency))";

/// An open (or just resumed) pause: what it holds back, who paused it, why and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct FleetPause {
    /// What `fleet resume --id` names.
    pub id: i64,
    /// `all` (charges and refunds), `charges` or `refunds`
    pub scope: PauseScope,
    /// The one currency held back (ISO 4217); `null`: every currency
    #[schema(value_type = Option<String>, example = "ISK")]
    pub currency: Option<Currency>,
    /// `operator:<name>`, `admin-api`, `console`
    pub paused_by: String,
    pub reason: String,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub paused_at: OffsetDateTime,
}

impl FleetPause {
    /// What it holds back.
    pub fn cover(&self) -> PauseCover {
        PauseCover {
            scope: self.scope,
            currency: self.currency,
        }
    }
}

/// The columns of a [`FleetPause`].
const PAUSE_COLUMNS: &str = "id, scope, currency, paused_by, reason, paused_at";

/// Which open pauses a resume means: each given part must match (`None`: any).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PauseSelector {
    pub id: Option<i64>,
    pub scope: Option<PauseScope>,
    pub currency: Option<Currency>,
}

/// What a pause came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PauseOutcome {
    Paused(FleetPause),
    /// Someone paused the same scope and currency first; theirs stays (`None`: it was
    /// resumed again in between).
    AlreadyPaused(Option<FleetPause>),
}

/// What a resume came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeOutcome {
    /// The pause that ended, and when.
    Resumed {
        pause: FleetPause,
        resumed_at: OffsetDateTime,
    },
    /// Not exactly one open pause matched: these did (none, or several), and these are open.
    NotOne {
        matching: Vec<FleetPause>,
        open: Vec<FleetPause>,
    },
}

/// Every open pause, oldest first.
pub async fn open_pauses(store: &Store) -> Result<Vec<FleetPause>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {PAUSE_COLUMNS} FROM fleet_pauses WHERE resumed_at IS NULL ORDER BY paused_at, id"
    ))
    .fetch_all(store.pool())
    .await
}

/// What the open pauses hold back: what the executor follows ([`listen_for_pauses`]).
pub async fn open_covers(store: &Store) -> Result<Vec<PauseCover>, sqlx::Error> {
    Ok(open_pauses(store)
        .await?
        .iter()
        .map(FleetPause::cover)
        .collect())
}

/// The channel a pause and a resume notify at their commit: each executor listens on it
/// ([`listen_for_pauses`]), so an attempt it claimed ahead before a pause that covers it is
/// not sent after the pause committed.
pub const PAUSE_CHANNEL: &str = "onecharge_fleet_pause";

/// A connection of its own that listens on [`PAUSE_CHANNEL`].
pub async fn listen_for_pauses(store: &Store) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(store.pool()).await?;
    listener.listen(PAUSE_CHANNEL).await?;
    Ok(listener)
}

/// Tells every listener, when `tx` commits, that the pauses changed.
async fn notify_pause_changed(tx: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(PAUSE_CHANNEL)
        .execute(tx)
        .await?;
    Ok(())
}

/// Opens a pause of `cover` by `actor` with `reason`, audited in the same transaction;
/// refused (and nothing written) while a pause of the same scope and currency is open.
pub async fn pause(
    store: &Store,
    actor: &Actor,
    reason: &str,
    cover: PauseCover,
    via: Via,
) -> Result<PauseOutcome, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let opened: Option<FleetPause> = sqlx::query_as(&format!(
        "INSERT INTO fleet_pauses (paused_by, reason, scope, currency) VALUES ($1, $2, $3, $4)
         ON CONFLICT DO NOTHING
         RETURNING {PAUSE_COLUMNS}"
    ))
    .bind(actor)
    .bind(reason)
    .bind(cover.scope)
    .bind(cover.currency)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(pause) = opened else {
        tx.rollback().await?;
        // Read only to say whose pause refused this one.
        let open = open_pauses(store).await?;
        return Ok(PauseOutcome::AlreadyPaused(
            open.into_iter().find(|p| p.cover() == cover),
        ));
    };
    audit::insert(
        &mut tx,
        &NewAuditEntry {
            actor: actor.to_owned(),
            via,
            action: AuditAction::FleetPause,
            payment_attempt_ids: Vec::new(),
            dlq_sequence: None,
            reason: Some(reason.to_owned()),
            outcome: "applied",
            detail: serde_json::json!({
                "pause_id": pause.id,
                "scope": pause.scope,
                "currency": pause.currency,
            }),
        },
    )
    .await?;
    notify_pause_changed(&mut tx).await?;
    tx.commit().await?;
    Ok(PauseOutcome::Paused(pause))
}

impl PauseSelector {
    /// Whether `pause` is one this selector names.
    pub fn matches(&self, pause: &FleetPause) -> bool {
        self.id.is_none_or(|id| id == pause.id)
            && self.scope.is_none_or(|scope| scope == pause.scope)
            && self.currency.is_none_or(|c| pause.currency == Some(c))
    }
}

/// A pause as its resume returns it.
#[derive(sqlx::FromRow)]
struct Closed {
    #[sqlx(flatten)]
    pause: FleetPause,
    resumed_at: OffsetDateTime,
}

/// Closes the one open pause `which` selects, by `actor`, audited in the same transaction;
/// closes none when no open pause, or more than one, matches.
pub async fn resume(
    store: &Store,
    actor: &Actor,
    reason: Option<&str>,
    which: PauseSelector,
    via: Via,
) -> Result<ResumeOutcome, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    // The matching open rows are locked, so that the count is of the rows this closes.
    let closed: Option<Closed> = sqlx::query_as(&format!(
        "WITH matching AS (
             SELECT id FROM fleet_pauses
             WHERE resumed_at IS NULL
               AND ($3::int8 IS NULL OR id = $3)
               AND ($4::text IS NULL OR scope = $4)
               AND ($5::text IS NULL OR currency = $5)
             FOR UPDATE
         )
         UPDATE fleet_pauses SET resumed_by = $1, resume_reason = $2, resumed_at = now()
         WHERE id IN (SELECT id FROM matching) AND (SELECT count(*) FROM matching) = 1
         RETURNING {PAUSE_COLUMNS}, resumed_at"
    ))
    .bind(actor)
    .bind(reason)
    .bind(which.id)
    .bind(which.scope)
    .bind(which.currency)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(Closed { pause, resumed_at }) = closed else {
        tx.rollback().await?;
        // Read only to say why nothing was resumed.
        let open = open_pauses(store).await?;
        let matching = open.iter().filter(|p| which.matches(p)).cloned().collect();
        return Ok(ResumeOutcome::NotOne { matching, open });
    };
    audit::insert(
        &mut tx,
        &NewAuditEntry {
            actor: actor.to_owned(),
            via,
            action: AuditAction::FleetResume,
            payment_attempt_ids: Vec::new(),
            dlq_sequence: None,
            reason: reason.map(str::to_owned),
            outcome: "applied",
            detail: serde_json::json!({
                "pause_id": pause.id,
                "paused_by": pause.paused_by,
                "scope": pause.scope,
                "currency": pause.currency,
            }),
        },
    )
    .await?;
    notify_pause_changed(&mut tx).await?;
    tx.commit().await?;
    Ok(ResumeOutcome::Resumed { pause, resumed_at })
}
