//! Pausing charging across the fleet (issue 39, decision 145): the one open row of
//! `fleet_pauses` is the pause every executor obeys.
//!
//! Invariants kept here:
//! - At most one pause is open: a second pause is refused by the unique index on open rows
//!   (`INSERT … ON CONFLICT DO NOTHING`), never by a read first; a resume closes the open
//!   row with one guarded `UPDATE`.
//! - A pause or resume and its audit row commit in one transaction.
//! - The executor's claim (`store::attempts::claim_due_attempts`) asks for the open row in
//!   its own statement, so nothing is claimed once a pause has committed.

use serde::Serialize;
use sqlx::postgres::PgListener;
use time::OffsetDateTime;

use super::audit::{self, AuditAction, NewAuditEntry, Via};
use super::Store;

/// An open pause: who paused charging, why and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct FleetPause {
    pub id: i64,
    /// `operator:<name>`, `admin-api`, `console`
    pub paused_by: String,
    pub reason: String,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub paused_at: OffsetDateTime,
}

/// What a pause came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PauseOutcome {
    Paused(FleetPause),
    /// Someone paused first; theirs stays (`None`: it was resumed again in between).
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
    NotPaused,
}

/// The open pause, if charging is paused.
pub async fn current_pause(store: &Store) -> Result<Option<FleetPause>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, paused_by, reason, paused_at FROM fleet_pauses WHERE resumed_at IS NULL",
    )
    .fetch_optional(store.pool())
    .await
}

/// The channel a pause and a resume notify at their commit: each executor listens on it
/// ([`listen_for_pauses`]), so an attempt it claimed ahead before a pause is not sent after
/// the pause committed.
pub const PAUSE_CHANNEL: &str = "onecharge_fleet_pause";

/// A connection of its own that listens on [`PAUSE_CHANNEL`].
pub async fn listen_for_pauses(store: &Store) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(store.pool()).await?;
    listener.listen(PAUSE_CHANNEL).await?;
    Ok(listener)
}

/// Tells every listener, when `tx` commits, that the pause changed.
async fn notify_pause_changed(tx: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(PAUSE_CHANNEL)
        .execute(tx)
        .await?;
    Ok(())
}

/// Whether a pause is open now.
pub async fn is_paused(store: &Store) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM fleet_pauses WHERE resumed_at IS NULL)")
        .fetch_one(store.pool())
        .await
}

/// Opens a pause by `actor` with `reason`, audited in the same transaction; refused (and
/// nothing written) while another is open.
pub async fn pause(
    store: &Store,
    actor: &str,
    reason: &str,
    via: Via,
) -> Result<PauseOutcome, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let opened: Option<FleetPause> = sqlx::query_as(
        "INSERT INTO fleet_pauses (paused_by, reason) VALUES ($1, $2)
         ON CONFLICT DO NOTHING
         RETURNING id, paused_by, reason, paused_at",
    )
    .bind(actor)
    .bind(reason)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(pause) = opened else {
        tx.rollback().await?;
        // Read only to say whose pause refused this one.
        return Ok(PauseOutcome::AlreadyPaused(current_pause(store).await?));
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
            detail: serde_json::json!({ "pause_id": pause.id }),
        },
    )
    .await?;
    notify_pause_changed(&mut tx).await?;
    tx.commit().await?;
    Ok(PauseOutcome::Paused(pause))
}

/// Closes the open pause by `actor`, audited in the same transaction.
pub async fn resume(
    store: &Store,
    actor: &str,
    reason: Option<&str>,
    via: Via,
) -> Result<ResumeOutcome, sqlx::Error> {
    let mut tx = store.pool().begin().await?;
    let closed: Option<(i64, String, String, OffsetDateTime, OffsetDateTime)> = sqlx::query_as(
        "UPDATE fleet_pauses SET resumed_by = $1, resume_reason = $2, resumed_at = now()
         WHERE resumed_at IS NULL
         RETURNING id, paused_by, reason, paused_at, resumed_at",
    )
    .bind(actor)
    .bind(reason)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((id, paused_by, paused_reason, paused_at, resumed_at)) = closed else {
        tx.rollback().await?;
        return Ok(ResumeOutcome::NotPaused);
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
            detail: serde_json::json!({ "pause_id": id, "paused_by": paused_by }),
        },
    )
    .await?;
    notify_pause_changed(&mut tx).await?;
    tx.commit().await?;
    Ok(ResumeOutcome::Resumed {
        pause: FleetPause {
            id,
            paused_by,
            reason: paused_reason,
            paused_at,
        },
        resumed_at,
    })
}
