//! Recording a batch of commands: the dedupe rows, the attempts (each the record of its
//! creation) and a stale one's first transition in one statement, and what a batch rarely
//! needs besides (classifying what was seen before, unrecording a conflict, announcing a
//! stale birth) in the same transaction.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use time::OffsetDateTime;

use crate::domain::event::{EventProvenance, PaymentEvent};
use crate::domain::{ChargePayment, EventAttempt, MessageId, PaymentAttemptId};
use crate::store::{column, outbox, Store};

/// One valid command to record, as intake read it from the broker.
#[derive(Debug, Clone)]
pub struct IntakeRecord {
    pub message_id: MessageId,
    pub stream_sequence: u64,
    pub body_sha256: [u8; 32],
    pub command: ChargePayment,
    pub correlation_id: Option<String>,
    pub traceparent: Option<String>,
}

impl IntakeRecord {
    /// What the events of the attempt this command creates repeat: its ids and money, and
    /// this message as their causation.
    fn event_attempt(&self) -> EventAttempt {
        EventAttempt {
            payment_attempt_id: self.command.payment_attempt_id,
            order_id: self.command.order_id.clone(),
            money: self.command.money,
            provenance: EventProvenance {
                correlation_id: self.correlation_id.clone(),
                causation_id: self.message_id.clone(),
                traceparent: self.traceparent.clone(),
            },
        }
    }
}

/// What the database said about one record. Each maps to one way of settling the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// New message, new attempt: the attempt is `pending`.
    Accepted,
    /// New message, new attempt, but too old: the attempt is `expired`.
    Stale,
    /// This message id was recorded before with the same body (a redelivery or a producer retry).
    Duplicate,
    /// New message id for an attempt that exists with the same parameters: one charge.
    BusinessDuplicate,
    /// Must be dead-lettered as `conflict`: the message id was used for a different body, or
    /// the attempt id for different parameters. Nothing of it stays recorded.
    Conflict(String),
}

/// How many times a batch may lose a race on a unique key and be recorded again. Each retry
/// follows a commit of the other instance's (the insert waited for it), so the retry sees
/// what it lost to; more than a few in a row means something else is wrong.
const RACE_RETRIES: u32 = 8;

/// Batches recorded again after losing a race on a unique key, since the process started
/// (for tests and the benchmark: the race path is rare and must be seen to run).
static RACES_LOST: AtomicU64 = AtomicU64::new(0);

/// How many batches have been recorded again after losing a race with another intake
/// transaction (see [`record_batch`]), in this process.
pub fn races_lost() -> u64 {
    RACES_LOST.load(Ordering::Relaxed)
}

/// Whether `error` is a batch losing a race on a key intake inserts: another transaction
/// committed the same message id or attempt id while this one waited on it (SQLSTATE 23505
/// on `processed_messages_pkey` or `payment_attempts_pkey`). Recording the batch again is
/// right: it then finds the committed row and classifies against it. No message is to blame.
pub fn lost_a_race(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => {
            db.is_unique_violation()
                && matches!(
                    db.constraint(),
                    Some("processed_messages_pkey" | "payment_attempts_pkey")
                )
        }
        _ => false,
    }
}

/// Records `records` (already validated) for `consumer` in one transaction and says what
/// each one turned out to be, in input order.
///
/// Duplicates are recognised by the unique keys, never by a read the insert trusts: the
/// insert skips keys that exist (`NOT EXISTS`, plain inserts and no speculative ones, which
/// cost a WAL record of their own per row, decision 201), and a key another transaction
/// inserts concurrently makes the insert wait for it and, once it commits, fail with a
/// unique violation; the whole transaction is then recorded again, and sees that row. Rows
/// are inserted in key order so that two instances recording overlapping batches lock in
/// the same order and cannot deadlock each other.
///
/// Times are the transaction's `now()`, the database's clock, never the intake host's: an
/// attempt's `created_at` starts its maximum age and its `next_run_at` places it in the
/// executor's queue, both compared with the database's clock later, and a command is
/// stale when its `requested_at` is more than `max_command_age` (zero: never) before that
/// `now()`.
pub async fn record_batch(
    store: &Store,
    consumer: &str,
    records: &[IntakeRecord],
    max_command_age: Duration,
) -> Result<Vec<Recorded>, sqlx::Error> {
    let mut retries = 0;
    loop {
        match record_batch_once(store, consumer, records, max_command_age).await {
            Err(err) if lost_a_race(&err) && retries < RACE_RETRIES => {
                retries += 1;
                RACES_LOST.fetch_add(1, Ordering::Relaxed);
                crate::metrics::intake_race_lost();
                tracing::debug!(error = %err, retries, batch = records.len(), "intake batch lost a race on a unique key; recording it again");
            }
            result => return result,
        }
    }
}

/// One try of [`record_batch`]: its transaction, committed, or an error that rolled it back.
async fn record_batch_once(
    store: &Store,
    consumer: &str,
    records: &[IntakeRecord],
    max_command_age: Duration,
) -> Result<Vec<Recorded>, sqlx::Error> {
    let mut outcomes: Vec<Option<Recorded>> = vec![None; records.len()];
    let leads = first_of_each_message_id(records, &mut outcomes);

    let mut tx = store.pool().begin().await?;
    let written =
        insert_messages_and_attempts(&mut tx, consumer, records, &leads, max_command_age).await?;
    let (mut fresh, seen): (Vec<usize>, Vec<usize>) = leads
        .iter()
        .copied()
        .partition(|&i| written.fresh.contains(records[i].message_id.as_str()));
    classify_seen_messages(&mut tx, consumer, records, &seen, &mut outcomes).await?;

    // New message ids created the attempts, one per attempt id, in delivery order: the
    // earliest command for an attempt is the one that created it (the statement chose it
    // the same way).
    fresh.sort_unstable();
    let attempt_leads = first_of_each_attempt(records, &fresh, &mut outcomes);
    let (born, existing): (Vec<usize>, Vec<usize>) =
        attempt_leads.iter().copied().partition(|&i| {
            written
                .created
                .contains(&records[i].command.payment_attempt_id)
        });
    classify_existing_attempts(&mut tx, records, &existing, &mut outcomes).await?;
    for &i in &born {
        outcomes[i] = Some(
            if written
                .expired
                .contains(&records[i].command.payment_attempt_id)
            {
                Recorded::Stale
            } else {
                Recorded::Accepted
            },
        );
    }

    settle_processed_messages(&mut tx, consumer, records, &fresh, &outcomes).await?;
    announce_stale_births(&mut tx, &born, records, &written).await?;
    tx.commit().await?;
    Ok(outcomes
        .into_iter()
        .map(|o| o.expect("every record is classified"))
        .collect())
}

/// The first record of each message id, in message id order (the order rows are locked
/// in). The same message id again in one batch is classified against its first one.
fn first_of_each_message_id(
    records: &[IntakeRecord],
    outcomes: &mut [Option<Recorded>],
) -> Vec<usize> {
    let mut lead_by_message: HashMap<&str, usize> = HashMap::new();
    for (i, record) in records.iter().enumerate() {
        match lead_by_message.get(record.message_id.as_str()) {
            Some(&lead) => outcomes[i] = Some(compare_bodies(&records[lead], record)),
            None => {
                lead_by_message.insert(&record.message_id, i);
            }
        }
    }
    let mut leads: Vec<usize> = lead_by_message.into_values().collect();
    leads.sort_by(|&a, &b| records[a].message_id.cmp(&records[b].message_id));
    leads
}

/// What the one statement of a batch wrote.
struct Written {
    /// Message ids that were new (their dedupe row is now written).
    fresh: HashSet<String>,
    /// Attempts that were created (a stale one with its first transition).
    created: HashSet<PaymentAttemptId>,
    /// Those of them created `expired`: their command was stale by the database's clock.
    expired: HashSet<PaymentAttemptId>,
    /// The transaction's `now()`: every row of the batch carries it.
    now: OffsetDateTime,
}

/// The one statement of a batch ([`insert_messages_and_attempts`]), public for its plan's
/// test. Each `NOT EXISTS` ends in `OFFSET 0`, which keeps PostgreSQL from turning it into
/// an anti-join: it stays one probe of the primary key per command. As an anti-join it was
/// planned as a scan of the whole table while the table had no statistics (a new
/// installation, or autovacuum off): 10.7 million rows read to record 100,000 commands, and
/// intake at two thirds of the rate it had before decision 201 (decision 213).
pub const RECORD_BATCH: &str = "WITH input AS (
                 SELECT m.*,
                        CASE WHEN stale THEN 'stale' ELSE 'accepted' END AS result,
                        CASE WHEN stale THEN 'expired' ELSE 'pending' END AS status
                 FROM UNNEST($3::int4[], $4::text[], $5::bytea[], $6::uuid[],
                             $7::int8[], $8::text[], $9::text[], $10::int8[],
                             $11::text[], $12::text[], $13::text[], $14::timestamptz[],
                             $15::bytea[], $16::text[], $17::text[], $18::text[])
                     AS m(delivered, message_id, body_sha256, payment_attempt_id,
                          stream_sequence, order_id, customer_id, amount_minor, currency,
                          payment_method, description, requested_at, fingerprint,
                          idempotency_key, correlation_id, traceparent)
                 -- Stale by the database's clock, never the intake host's (decision 263):
                 -- requested longer than the maximum command age ($19 seconds, 0: off) ago.
                 CROSS JOIN LATERAL (
                     SELECT $19::float8 > 0
                            AND (m.requested_at < now() - make_interval(secs => $19::float8))
                                IS TRUE AS stale
                 ) AS judged
             ),
             fresh AS (
                 INSERT INTO processed_messages
                     (consumer, message_id, body_sha256, payment_attempt_id, result,
                      stream_sequence)
                 SELECT $1, message_id, body_sha256, payment_attempt_id, result,
                        stream_sequence
                 FROM input
                 WHERE NOT EXISTS (SELECT FROM processed_messages p
                                   WHERE p.consumer = $1 AND p.message_id = input.message_id
                                   OFFSET 0)
                 ORDER BY message_id
                 RETURNING message_id
             ),
             leads AS (
                 SELECT DISTINCT ON (payment_attempt_id) input.*
                 FROM input JOIN fresh USING (message_id)
                 ORDER BY payment_attempt_id, delivered
             ),
             created AS (
                 INSERT INTO payment_attempts
                     (payment_attempt_id, order_id, customer_id, amount_minor, currency,
                      payment_method, description, requested_at, fingerprint, idempotency_key,
                      status, first_message_id, first_stream_sequence, accepted_by,
                      correlation_id, traceparent, next_run_at, created_at, updated_at)
                 SELECT payment_attempt_id, order_id, customer_id, amount_minor, currency,
                        payment_method, description, requested_at, fingerprint,
                        idempotency_key, status, message_id, stream_sequence,
                        CASE WHEN status = 'pending' THEN $2 END,
                        correlation_id, traceparent, now(), now(), now()
                 FROM leads
                 WHERE NOT EXISTS (SELECT FROM payment_attempts a
                                   WHERE a.payment_attempt_id = leads.payment_attempt_id
                                   OFFSET 0)
                 ORDER BY payment_attempt_id
                 RETURNING payment_attempt_id, status
             ),
             -- An accepted attempt's creation is read from its row (`accepted_by`, the view
             -- `attempt_history`); a stale one's is a transition, which the charts count.
             stale_births AS (
                 INSERT INTO attempt_transitions
                     (payment_attempt_id, from_status, to_status, cause, actor, detail, at)
                 SELECT payment_attempt_id, NULL, created.status, 'stale_command', $2,
                        'message ' || message_id || ' (stream sequence ' || stream_sequence
                            || ')',
                        now()
                 FROM created JOIN leads USING (payment_attempt_id)
                 WHERE created.status = 'expired'
             )
             SELECT ARRAY(SELECT message_id FROM fresh),
                    ARRAY(SELECT payment_attempt_id FROM created),
                    ARRAY(SELECT payment_attempt_id FROM created WHERE status = 'expired'),
                    now()";

/// The one statement of a batch (one round trip): the dedupe rows of `leads` (the first
/// record of each message id, in message id order), then, for the message ids that were
/// new, the attempts — one per attempt id, from its earliest command in delivery order,
/// inserted in attempt id order, each the record of its own creation (decision 219) — and
/// the first transition of each stale one. A message id seen before creates nothing; an
/// attempt id that exists is left as it is. Says which message ids were new and which
/// attempts were created.
///
/// Existing keys are skipped by `NOT EXISTS` against the statement's snapshot; a key that
/// another transaction has inserted and not yet committed is not in it, so the insert
/// waits on that row and fails with a unique violation if the other commits
/// ([`lost_a_race`]; [`record_batch`] records the batch again).
async fn insert_messages_and_attempts(
    tx: &mut sqlx::PgConnection,
    consumer: &str,
    records: &[IntakeRecord],
    leads: &[usize],
    max_command_age: Duration,
) -> Result<Written, sqlx::Error> {
    let command = |i: usize| &records[i].command;
    type Row = (
        Vec<String>,
        Vec<PaymentAttemptId>,
        Vec<PaymentAttemptId>,
        OffsetDateTime,
    );
    let (fresh, created, expired, now): Row = sqlx::query_as(RECORD_BATCH)
        .bind(consumer)
        .bind(crate::domain::Actor::Intake(consumer.to_owned()).to_string())
        .bind(column(leads, |&i| i32::try_from(i).unwrap_or(i32::MAX)))
        .bind(column(leads, |&i| records[i].message_id.to_string()))
        .bind(column(leads, |&i| records[i].body_sha256.to_vec()))
        .bind(column(leads, |&i| command(i).payment_attempt_id))
        .bind(column(leads, |&i| records[i].stream_sequence as i64))
        .bind(column(leads, |&i| command(i).order_id.clone()))
        .bind(column(leads, |&i| command(i).customer_id.clone()))
        .bind(column(leads, |&i| command(i).money.amount_minor()))
        .bind(column(leads, |&i| command(i).money.currency()))
        .bind(column(leads, |&i| command(i).payment_method.clone()))
        .bind(column(leads, |&i| command(i).description.clone()))
        .bind(column(leads, |&i| command(i).requested_at))
        .bind(column(leads, |&i| command(i).fingerprint().to_vec()))
        .bind(column(leads, |&i| {
            String::from(command(i).idempotency_key())
        }))
        .bind(column(leads, |&i| records[i].correlation_id.clone()))
        .bind(column(leads, |&i| records[i].traceparent.clone()))
        .bind(max_command_age.as_secs_f64())
        .fetch_one(tx)
        .await?;
    Ok(Written {
        fresh: fresh.into_iter().collect(),
        created: created.into_iter().collect(),
        expired: expired.into_iter().collect(),
        now,
    })
}

/// Message ids recorded before: a harmless redelivery when the body is the same, a producer
/// defect when it is not.
async fn classify_seen_messages(
    tx: &mut sqlx::PgConnection,
    consumer: &str,
    records: &[IntakeRecord],
    seen: &[usize],
    outcomes: &mut [Option<Recorded>],
) -> Result<(), sqlx::Error> {
    if seen.is_empty() {
        return Ok(());
    }
    let stored: HashMap<String, Vec<u8>> = sqlx::query_as::<_, (String, Vec<u8>)>(
        "SELECT message_id, body_sha256 FROM processed_messages
         WHERE consumer = $1 AND message_id = ANY($2)",
    )
    .bind(consumer)
    .bind(column(seen, |&i| records[i].message_id.to_string()))
    .fetch_all(tx)
    .await?
    .into_iter()
    .collect();
    for &i in seen {
        outcomes[i] = Some(match stored.get(records[i].message_id.as_str()) {
            Some(hash) if hash.as_slice() != records[i].body_sha256 => {
                reused_message_id(&records[i])
            }
            // Equal body, or the row was purged since the insert saw it: either way this
            // message id was processed before.
            _ => Recorded::Duplicate,
        });
    }
    Ok(())
}

/// The first of `fresh` (in delivery order) for each attempt id, in attempt id order (the
/// order rows are locked in). Later commands for the same attempt in this batch are
/// classified against it.
fn first_of_each_attempt(
    records: &[IntakeRecord],
    fresh: &[usize],
    outcomes: &mut [Option<Recorded>],
) -> Vec<usize> {
    let mut lead_by_attempt: HashMap<PaymentAttemptId, usize> = HashMap::new();
    for &i in fresh {
        let attempt = records[i].command.payment_attempt_id;
        match lead_by_attempt.get(&attempt) {
            Some(&lead) => {
                outcomes[i] = Some(compare_parameters(
                    &records[lead].command,
                    &records[i].command,
                ))
            }
            None => {
                lead_by_attempt.insert(attempt, i);
            }
        }
    }
    let mut attempt_leads: Vec<usize> = lead_by_attempt.into_values().collect();
    attempt_leads.sort_by_key(|&i| records[i].command.payment_attempt_id);
    attempt_leads
}

/// Attempt ids that existed before this command: one charge when the parameters are the
/// same, a conflict when they differ.
async fn classify_existing_attempts(
    tx: &mut sqlx::PgConnection,
    records: &[IntakeRecord],
    existing: &[usize],
    outcomes: &mut [Option<Recorded>],
) -> Result<(), sqlx::Error> {
    if existing.is_empty() {
        return Ok(());
    }
    let stored: HashMap<PaymentAttemptId, Vec<u8>> =
        sqlx::query_as::<_, (PaymentAttemptId, Vec<u8>)>(
            "SELECT payment_attempt_id, fingerprint FROM payment_attempts
         WHERE payment_attempt_id = ANY($1)",
        )
        .bind(column(existing, |&i| records[i].command.payment_attempt_id))
        .fetch_all(tx)
        .await?
        .into_iter()
        .collect();
    for &i in existing {
        let fingerprint = records[i].command.fingerprint();
        outcomes[i] = Some(match stored.get(&records[i].command.payment_attempt_id) {
            Some(stored) if stored.as_slice() == fingerprint => Recorded::BusinessDuplicate,
            _ => conflicting_parameters(&records[i].command),
        });
    }
    Ok(())
}

/// The dedupe rows of new message ids say what they became: a conflicting message is
/// dead-lettered, so it must not stay recorded as processed; a business duplicate is marked.
async fn settle_processed_messages(
    tx: &mut sqlx::PgConnection,
    consumer: &str,
    records: &[IntakeRecord],
    fresh: &[usize],
    outcomes: &[Option<Recorded>],
) -> Result<(), sqlx::Error> {
    let message_ids = |wanted: fn(&Recorded) -> bool| -> Vec<String> {
        fresh
            .iter()
            .filter(|&&i| outcomes[i].as_ref().is_some_and(wanted))
            .map(|&i| records[i].message_id.to_string())
            .collect()
    };
    let unrecord = message_ids(|o| matches!(o, Recorded::Conflict(_)));
    if !unrecord.is_empty() {
        sqlx::query("DELETE FROM processed_messages WHERE consumer = $1 AND message_id = ANY($2)")
            .bind(consumer)
            .bind(&unrecord)
            .execute(&mut *tx)
            .await?;
    }
    let business = message_ids(|o| *o == Recorded::BusinessDuplicate);
    if !business.is_empty() {
        sqlx::query(
            "UPDATE processed_messages SET result = 'business_duplicate'
             WHERE consumer = $1 AND message_id = ANY($2)",
        )
        .bind(consumer)
        .bind(&business)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// The `payment-expired` event of each attempt created stale (never charged).
async fn announce_stale_births(
    tx: &mut sqlx::PgConnection,
    born: &[usize],
    records: &[IntakeRecord],
    written: &Written,
) -> Result<(), sqlx::Error> {
    let stale = |i: usize| {
        written
            .expired
            .contains(&records[i].command.payment_attempt_id)
    };
    for &i in born.iter().filter(|&&i| stale(i)) {
        let attempt = records[i].event_attempt();
        let event = PaymentEvent::expired(
            &attempt,
            "command older than the maximum command age; never sent to the gateway",
            written.now,
        );
        outbox::insert_event(tx, &event, &attempt.provenance).await?;
    }
    Ok(())
}

fn compare_bodies(lead: &IntakeRecord, other: &IntakeRecord) -> Recorded {
    if lead.body_sha256 == other.body_sha256 {
        Recorded::Duplicate
    } else {
        reused_message_id(other)
    }
}

fn compare_parameters(lead: &ChargePayment, other: &ChargePayment) -> Recorded {
    if lead.fingerprint() == other.fingerprint() {
        Recorded::BusinessDuplicate
    } else {
        conflicting_parameters(other)
    }
}

fn reused_message_id(record: &IntakeRecord) -> Recorded {
    Recorded::Conflict(format!(
        "Nats-Msg-Id `{}` was already recorded with a different body (producer reused a message id)",
        record.message_id
    ))
}

fn conflicting_parameters(command: &ChargePayment) -> Recorded {
    Recorded::Conflict(format!(
        "payment_attempt_id {} already exists with different parameters (amount, currency, customer, payment method or order)",
        command.payment_attempt_id
    ))
}
