//! `dead_letter_discards`: which dead letters a person discarded, by the dead-letter stream's
//! name and the letter's sequence in it (the letters themselves live in JetStream).

use std::collections::HashMap;

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::domain::Actor;
use crate::store::Store;

/// Who discarded a dead letter, when and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Discard {
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub discarded_at: OffsetDateTime,
    pub actor: String,
    pub reason: String,
}

fn as_i64(sequence: u64) -> i64 {
    i64::try_from(sequence).unwrap_or(i64::MAX)
}

/// Records the discard of letter `sequence` of `stream` on `conn` (the transaction that
/// audits it); `false` when it was discarded before, and nothing was written.
pub async fn insert_discard(
    conn: &mut PgConnection,
    stream: &str,
    sequence: u64,
    actor: &Actor,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    let inserted = sqlx::query(
        "INSERT INTO dead_letter_discards (dlq_stream, dlq_sequence, actor, reason)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (dlq_stream, dlq_sequence) DO NOTHING",
    )
    .bind(stream)
    .bind(as_i64(sequence))
    .bind(crate::domain::bounded(&actor.to_string(), 255))
    .bind(crate::domain::bounded(reason, 2048))
    .execute(conn)
    .await?;
    Ok(inserted.rows_affected() == 1)
}

/// The discards among `sequences` of `stream`, by sequence.
pub async fn discards(
    store: &Store,
    stream: &str,
    sequences: &[u64],
) -> Result<HashMap<u64, Discard>, sqlx::Error> {
    if sequences.is_empty() {
        return Ok(HashMap::new());
    }
    let wanted: Vec<i64> = sequences.iter().copied().map(as_i64).collect();
    let rows: Vec<(i64, OffsetDateTime, String, String)> = sqlx::query_as(
        "SELECT dlq_sequence, discarded_at, actor, reason FROM dead_letter_discards
         WHERE dlq_stream = $1 AND dlq_sequence = ANY($2)",
    )
    .bind(stream)
    .bind(&wanted)
    .fetch_all(store.pool())
    .await?;
    Ok(rows
        .into_iter()
        .map(|(sequence, discarded_at, actor, reason)| {
            (
                sequence as u64,
                Discard {
                    discarded_at,
                    actor,
                    reason,
                },
            )
        })
        .collect())
}
