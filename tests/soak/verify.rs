//! What the soak reads back after quiescence — the gateway's ledger, the database, the
//! events and dead-letter streams — and the checks of contract §1 against the plan. The
//! refunds' part of what was read is checked by `crate::refunds`.

use std::collections::{BTreeMap, HashMap, HashSet};

use async_nats::jetstream;
use futures::StreamExt as _;
use mock_gateway::{Charge, ChargeStatus};
use sqlx::PgPool;
use uuid::Uuid;

use super::mix::Plan;
use crate::support::Records as _;

#[derive(Debug, sqlx::FromRow)]
pub struct AttemptRow {
    pub payment_attempt_id: Uuid,
    pub status: String,
    pub amount_minor: i64,
    pub gateway_charge_id: Option<String>,
    pub review_reason: Option<String>,
}

#[derive(Debug, sqlx::FromRow)]
pub struct OutboxRow {
    pub event_id: Uuid,
    pub payment_attempt_id: Uuid,
    pub status: String,
    pub published: bool,
}

#[derive(Debug, sqlx::FromRow)]
pub struct ProcessedRow {
    pub message_id: String,
    pub payment_attempt_id: Uuid,
    pub result: String,
}

/// A message read back from a stream: its headers and body.
#[derive(Debug)]
pub struct StreamMessage {
    /// The stream sequence it was read at.
    pub sequence: u64,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl StreamMessage {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// Everything the checks look at.
pub struct Observed {
    pub attempts: Vec<AttemptRow>,
    pub outbox: Vec<OutboxRow>,
    pub processed: Vec<ProcessedRow>,
    /// `processed_messages` rows whose attempt does not exist.
    pub orphan_processed: i64,
    /// Attempts whose executor died mid-call (lease expired): kills between dispatch and result.
    pub lease_expired: i64,
    pub ledger: Vec<Charge>,
    pub events: Vec<StreamMessage>,
    pub dead_letters: Vec<StreamMessage>,
}

impl Observed {
    pub async fn read(
        pool: &PgPool,
        jetstream: &jetstream::Context,
        names: &onecharge::broker::Names,
        ledger: Vec<Charge>,
    ) -> Observed {
        let attempts = pool
            .all_attempts()
            .await
            .into_iter()
            .map(|a| AttemptRow {
                payment_attempt_id: a.payment_attempt_id,
                status: a.status,
                amount_minor: a.amount_minor,
                gateway_charge_id: a.gateway_charge_id,
                review_reason: a.review_reason,
            })
            .collect();
        let outbox = pool
            .outbox()
            .await
            .into_iter()
            .map(|e| OutboxRow {
                event_id: e.event_id,
                payment_attempt_id: e.payment_attempt_id,
                status: e.status,
                published: e.published_at.is_some(),
            })
            .collect();
        let processed = pool
            .processed_messages()
            .await
            .into_iter()
            .map(|m| ProcessedRow {
                message_id: m.message_id,
                payment_attempt_id: m.payment_attempt_id,
                result: m.result,
            })
            .collect();
        let orphan_processed = pool.orphan_dedupe_rows().await;
        let lease_expired = pool.transitions_caused_by("lease_expired").await as i64;
        Observed {
            attempts,
            outbox,
            processed,
            orphan_processed,
            lease_expired,
            ledger,
            events: stream_messages(jetstream, &names.events_stream()).await,
            dead_letters: stream_messages(jetstream, &names.dlq_stream()).await,
        }
    }

    pub fn succeeded_charges(&self) -> usize {
        self.ledger
            .iter()
            .filter(|c| c.status == ChargeStatus::Succeeded)
            .count()
    }

    /// Why attempts need review, by reason (the text before its first colon), most first.
    pub fn review_reasons(&self) -> Vec<(String, usize)> {
        let mut counts: HashMap<String, usize> = HashMap::new();
        for reason in self
            .attempts
            .iter()
            .filter_map(|a| a.review_reason.as_deref())
        {
            let short: String = reason
                .split(':')
                .next()
                .unwrap_or(reason)
                .chars()
                .take(80)
                .collect();
            *counts.entry(short).or_default() += 1;
        }
        let mut out: Vec<_> = counts.into_iter().collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }

    pub fn by_status(&self) -> BTreeMap<&str, usize> {
        let mut out = BTreeMap::new();
        for attempt in &self.attempts {
            *out.entry(attempt.status.as_str()).or_default() += 1;
        }
        out
    }
}

/// Every message a stream holds, in order.
pub async fn stream_messages(jetstream: &jetstream::Context, name: &str) -> Vec<StreamMessage> {
    let mut stream = jetstream.get_stream(name).await.expect("stream");
    let last = stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence;
    let stream = &stream;
    futures::stream::iter(1..=last)
        .map(|seq| async move { stream.get_raw_message(seq).await.ok() })
        .buffered(32)
        .filter_map(|m| async move { m })
        .map(|m| StreamMessage {
            sequence: m.sequence,
            headers: m
                .headers
                .iter()
                .filter_map(|(k, v)| Some((k.to_string(), v.first()?.to_string())))
                .collect(),
            body: m.payload.to_vec(),
        })
        .collect()
        .await
}

/// One broken promise; `attempt` names the attempt to show, where there is one.
#[derive(Debug)]
pub struct Problem {
    pub attempt: Option<Uuid>,
    pub text: String,
}

fn problem(problems: &mut Vec<Problem>, attempt: Option<Uuid>, text: String) {
    problems.push(Problem { attempt, text });
}

const FINAL: [&str; 3] = ["succeeded", "declined", "expired"];

/// Checks contract §1 against what was published. Returns every violation found.
pub fn check(plan: &Plan, seen: &Observed) -> Vec<Problem> {
    let mut problems = Vec::new();
    let p = &mut problems;

    // 1. At most one charge per payment attempt, and only what was asked for.
    let mut succeeded_by_reference: HashMap<&str, Vec<&Charge>> = HashMap::new();
    let mut succeeded_by_key: HashMap<&str, usize> = HashMap::new();
    let mut any_by_reference: HashMap<&str, usize> = HashMap::new();
    for charge in &seen.ledger {
        *any_by_reference.entry(&charge.reference).or_default() += 1;
        let attempt = charge.reference.parse::<Uuid>().ok();
        match attempt.and_then(|a| plan.attempts.get(&a)) {
            None => problem(
                p,
                None,
                format!("the gateway charged reference {} that no valid command asked for", charge.reference),
            ),
            Some(planned) if planned.amount_minor != charge.amount_minor => problem(
                p,
                attempt,
                format!(
                    "the gateway charged {} for attempt {} whose command asked {} (a conflict's amount?)",
                    charge.amount_minor, charge.reference, planned.amount_minor
                ),
            ),
            Some(_) => {}
        }
        if charge.status == ChargeStatus::Succeeded {
            succeeded_by_reference
                .entry(&charge.reference)
                .or_default()
                .push(charge);
            *succeeded_by_key.entry(&charge.idempotency_key).or_default() += 1;
        }
    }
    for (reference, charges) in &succeeded_by_reference {
        if charges.len() > 1 {
            let ids: Vec<&str> = charges.iter().map(|c| c.id.as_str()).collect();
            problem(
                p,
                reference.parse().ok(),
                format!(
                    "DOUBLE CHARGE: attempt {reference} was charged {} times: {ids:?}",
                    charges.len()
                ),
            );
        }
    }
    for (key, n) in &succeeded_by_key {
        if *n > 1 {
            problem(
                p,
                None,
                format!("DOUBLE CHARGE: idempotency key {key} has {n} succeeded charges"),
            );
        }
    }

    // 2. Every valid attempt settled, consistently with the ledger.
    let attempts: HashMap<Uuid, &AttemptRow> = seen
        .attempts
        .iter()
        .map(|a| (a.payment_attempt_id, a))
        .collect();
    if seen.attempts.len() != plan.attempts.len() {
        problem(
            p,
            None,
            format!(
                "{} attempts recorded for {} distinct valid attempts published",
                seen.attempts.len(),
                plan.attempts.len()
            ),
        );
    }
    for row in &seen.attempts {
        if !plan.attempts.contains_key(&row.payment_attempt_id) {
            problem(
                p,
                Some(row.payment_attempt_id),
                format!(
                    "attempt {} was never published as valid",
                    row.payment_attempt_id
                ),
            );
        }
    }
    for (id, planned) in &plan.attempts {
        let Some(row) = attempts.get(id) else {
            problem(
                p,
                None,
                format!(
                    "attempt {id} (message {}) was never recorded",
                    planned.original_message_id
                ),
            );
            continue;
        };
        let key = id.to_string();
        let charges = succeeded_by_reference.get(key.as_str()).map_or(0, Vec::len);
        if row.amount_minor != planned.amount_minor {
            problem(
                p,
                Some(*id),
                format!(
                    "attempt {id} recorded amount {} instead of {}",
                    row.amount_minor, planned.amount_minor
                ),
            );
        }
        match row.status.as_str() {
            "succeeded" => {
                let charge = succeeded_by_reference
                    .get(key.as_str())
                    .and_then(|c| c.first());
                if charge.map(|c| c.id.as_str()) != row.gateway_charge_id.as_deref() {
                    problem(
                        p,
                        Some(*id),
                        format!("attempt {id} is succeeded with charge {:?} but the gateway's succeeded charge is {:?}", row.gateway_charge_id, charge.map(|c| &c.id)),
                    );
                }
            }
            "declined" if charges > 0 => {
                problem(
                    p,
                    Some(*id),
                    format!("attempt {id} is declined but the gateway charged it"),
                );
            }
            "expired" if any_by_reference.contains_key(key.as_str()) => {
                problem(
                    p,
                    Some(*id),
                    format!("attempt {id} is expired but reached the gateway"),
                );
            }
            "needs_review"
                if row
                    .review_reason
                    .as_deref()
                    .is_none_or(|r| r.trim().is_empty()) =>
            {
                problem(
                    p,
                    Some(*id),
                    format!("attempt {id} needs review without a reason"),
                );
            }
            "declined" | "expired" | "needs_review" => {}
            other => problem(
                p,
                Some(*id),
                format!("attempt {id} never settled: it is {other}"),
            ),
        }
        let declines = [
            mock_gateway::payment_methods::CARD_DECLINED,
            mock_gateway::payment_methods::INSUFFICIENT_FUNDS,
        ]
        .contains(&planned.payment_method);
        if declines && row.status == "succeeded" {
            problem(
                p,
                Some(*id),
                format!(
                    "attempt {id} paid with {} succeeded",
                    planned.payment_method
                ),
            );
        }
        if planned.stale != (row.status == "expired") {
            problem(
                p,
                Some(*id),
                format!(
                    "attempt {id} is {} but its command was {}stale",
                    row.status,
                    if planned.stale { "" } else { "not " }
                ),
            );
        }
    }

    // 3. Exactly one published event per final state, and one id for it on the stream.
    let mut outbox_by_state: HashMap<(Uuid, &str), Vec<&OutboxRow>> = HashMap::new();
    for row in &seen.outbox {
        outbox_by_state
            .entry((row.payment_attempt_id, row.status.as_str()))
            .or_default()
            .push(row);
        if !row.published {
            problem(
                p,
                Some(row.payment_attempt_id),
                format!(
                    "event {} ({}) was never published",
                    row.event_id, row.status
                ),
            );
        }
    }
    for row in &seen.attempts {
        let id = row.payment_attempt_id;
        let status = row.status.as_str();
        if FINAL.contains(&status) || status == "needs_review" {
            let n = outbox_by_state.get(&(id, status)).map_or(0, Vec::len);
            if n != 1 {
                problem(
                    p,
                    Some(id),
                    format!("attempt {id} is {status} with {n} outbox events for it"),
                );
            }
        }
        for other in FINAL.iter().filter(|s| **s != status) {
            if outbox_by_state.contains_key(&(id, *other)) {
                problem(
                    p,
                    Some(id),
                    format!("attempt {id} is {status} but has a {other} event"),
                );
            }
        }
    }
    let outbox_ids: HashSet<Uuid> = seen.outbox.iter().map(|r| r.event_id).collect();
    let mut stream_ids: HashMap<(Uuid, String), HashSet<String>> = HashMap::new();
    for message in &seen.events {
        let body: serde_json::Value = serde_json::from_slice(&message.body).unwrap_or_default();
        let msg_id = message.header("Nats-Msg-Id").unwrap_or_default().to_owned();
        let attempt = body["payment_attempt_id"]
            .as_str()
            .and_then(|s| s.parse::<Uuid>().ok());
        let status = body["status"].as_str().unwrap_or_default().to_owned();
        if body["event_id"].as_str() != Some(msg_id.as_str()) {
            problem(
                p,
                attempt,
                format!(
                    "event with Nats-Msg-Id {msg_id:?} has event_id {}",
                    body["event_id"]
                ),
            );
        }
        if !msg_id
            .parse::<Uuid>()
            .is_ok_and(|id| outbox_ids.contains(&id))
        {
            problem(
                p,
                attempt,
                format!("event {msg_id:?} on the stream is not in the outbox"),
            );
        }
        if body.get("refund_id").is_some() {
            // A refund's event: one per refund, checked by `refunds::check`.
            continue;
        }
        match attempt {
            Some(attempt) => {
                stream_ids
                    .entry((attempt, status))
                    .or_default()
                    .insert(msg_id);
            }
            None => problem(
                p,
                None,
                format!("event {msg_id:?} names no payment attempt"),
            ),
        }
    }
    for ((attempt, status), ids) in &stream_ids {
        if ids.len() > 1 {
            problem(p, Some(*attempt), format!("EVENT TWICE: attempt {attempt} has {} different event ids for {status} on the stream: {ids:?}", ids.len()));
        }
    }
    let on_stream: HashSet<&str> = stream_ids.values().flatten().map(String::as_str).collect();
    // A refund's events and dead letter are checked by `refunds::check` (its dead letter
    // goes to the dead-letter stream, not the events stream).
    for row in seen
        .outbox
        .iter()
        .filter(|r| r.published && !r.status.starts_with("refund_"))
    {
        if !on_stream.contains(row.event_id.to_string().as_str()) {
            problem(
                p,
                Some(row.payment_attempt_id),
                format!(
                    "event {} is marked published but is not on the stream",
                    row.event_id
                ),
            );
        }
    }

    // 4. Every invalid or conflicting message dead-lettered, once per message id.
    let mut dlq_ids: HashMap<String, usize> = HashMap::new();
    let mut dead_originals: HashMap<String, String> = HashMap::new();
    let mut dead_without_id = 0;
    for message in &seen.dead_letters {
        *dlq_ids
            .entry(message.header("Nats-Msg-Id").unwrap_or_default().to_owned())
            .or_default() += 1;
        let class = message.header("Dlq-Class").unwrap_or_default().to_owned();
        match message.header("Dlq-Original-Msg-Id") {
            // A refund command's dead letter: checked by `refunds::check`.
            Some(original) if plan.refund_message_ids.contains(original) => {}
            Some(original) => {
                dead_originals.insert(original.to_owned(), class);
            }
            None => {
                dead_without_id += 1;
                if class != "invalid" {
                    problem(
                        p,
                        None,
                        format!("a message without Nats-Msg-Id was dead-lettered as {class:?}"),
                    );
                }
            }
        }
        if message
            .header("Dlq-Reason")
            .is_none_or(|r| r.is_empty() || r.len() > 512)
        {
            problem(
                p,
                None,
                format!(
                    "dead letter {:?} has no bounded Dlq-Reason",
                    message.header("Nats-Msg-Id")
                ),
            );
        }
    }
    for (id, n) in &dlq_ids {
        if *n > 1 {
            problem(
                p,
                None,
                format!("dead letter {id:?} is on the DLQ stream {n} times"),
            );
        }
    }
    for (id, class) in &plan.dead_letter_ids {
        match dead_originals.get(id) {
            None => problem(
                p,
                None,
                format!("{class} message {id} was not dead-lettered"),
            ),
            Some(got) if got != class => problem(
                p,
                None,
                format!("message {id} was dead-lettered as {got}, expected {class}"),
            ),
            Some(_) => {}
        }
    }
    for (id, class) in &dead_originals {
        if !plan.dead_letter_ids.contains_key(id) {
            problem(
                p,
                None,
                format!("valid message {id} was dead-lettered ({class})"),
            );
        }
    }
    if dead_without_id != plan.invalid_without_id {
        problem(
            p,
            None,
            format!(
                "{dead_without_id} dead letters without a message id, expected {}",
                plan.invalid_without_id
            ),
        );
    }

    // 5. Dedupe and attempt tables consistent.
    if seen.orphan_processed != 0 {
        problem(
            p,
            None,
            format!(
                "{} processed messages point at no attempt",
                seen.orphan_processed
            ),
        );
    }
    let mut births: HashMap<Uuid, usize> = HashMap::new();
    let mut processed_ids = HashSet::new();
    for row in seen
        .processed
        .iter()
        .filter(|r| !r.result.starts_with("refund_"))
    {
        processed_ids.insert(row.message_id.as_str());
        if dead_originals.contains_key(&row.message_id) {
            problem(
                p,
                Some(row.payment_attempt_id),
                format!(
                    "dead-lettered message {} is recorded as processed",
                    row.message_id
                ),
            );
        }
        if !plan.valid_message_ids.contains(&row.message_id) {
            problem(
                p,
                Some(row.payment_attempt_id),
                format!(
                    "message {} is recorded as processed but was never published as valid",
                    row.message_id
                ),
            );
        }
        if row.result == "accepted" || row.result == "stale" {
            *births.entry(row.payment_attempt_id).or_default() += 1;
        }
    }
    for id in &plan.valid_message_ids {
        if !processed_ids.contains(id.as_str()) {
            problem(
                p,
                None,
                format!("valid message {id} was never recorded as processed"),
            );
        }
    }
    for id in plan.attempts.keys() {
        let n = births.get(id).copied().unwrap_or(0);
        if n != 1 {
            problem(p, Some(*id), format!("attempt {id} has {n} processed messages that created it (accepted or stale), expected 1"));
        }
    }
    problems
}

/// The stream audit (`onecharge intake audit`) must report exactly the valid commands the
/// dedupe table lacks: none it missed, none that is recorded, none that was dead-lettered.
pub fn check_audit(plan: &Plan, observed: &Observed, findings: &[String]) -> Vec<Problem> {
    let mut problems = Vec::new();
    let recorded: HashSet<&str> = observed
        .processed
        .iter()
        .map(|row| row.message_id.as_str())
        .collect();
    let found: HashSet<&str> = findings.iter().map(String::as_str).collect();
    for id in &found {
        if recorded.contains(id) {
            problem(
                &mut problems,
                None,
                format!("the stream audit reports {id} unrecorded, but it is recorded"),
            );
        } else if !plan.valid_message_ids.contains(*id) {
            problem(
                &mut problems,
                None,
                format!("the stream audit reports {id} unrecorded, but it is no valid command (its dead letter was missed)"),
            );
        }
    }
    for id in &plan.valid_message_ids {
        if !recorded.contains(id.as_str()) && !found.contains(id.as_str()) {
            problem(
                &mut problems,
                None,
                format!("the stream audit missed {id}, which was never recorded"),
            );
        }
    }
    println!("  stream audit              {} open findings", found.len());
    problems
}
