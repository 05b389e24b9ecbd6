//! The seeded mix of commands the soak publishes, and the producer that publishes it.
//!
//! Per valid attempt: one original, then with some chance one follow-up — the same message
//! again (a producer retry that outlived the stream's duplicate window), a business
//! duplicate (new message id, same attempt and parameters) or a conflict (new message id,
//! same attempt, another amount). Some attempts are stale (`requested_at` two days ago).
//! Invalid messages are sprinkled in. A conflict is published only after its original was
//! recorded, so which of the two is dead-lettered is not a race. About one charge in seven
//! also gets refunds (`crate::refunds`), on the refund subject, in the charge's round (before
//! it) or the next two.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use async_nats::HeaderMap;
use onecharge::gateway::GatewayKind;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::json;
use sqlx::PgPool;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::refunds::{self, PlannedRefund};
use crate::support::command;
use crate::support::Records as _;

/// What one valid attempt should end as.
#[derive(Debug, Clone)]
pub struct PlannedAttempt {
    pub amount_minor: i64,
    pub payment_method: &'static str,
    pub stale: bool,
    pub original_message_id: String,
}

/// One message to publish.
#[derive(Debug, Clone)]
pub struct Message {
    pub message_id: Option<String>,
    pub body: Vec<u8>,
    pub kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Original,
    ProducerRetry,
    BusinessDuplicate,
    /// Published once the original with this message id is recorded.
    Conflict,
    Invalid,
    /// A RefundPayment's first publish (`crate::refunds`).
    Refund,
    /// A refund published again under the same message id, past the duplicate window.
    RefundRetry,
    /// The same refund under a new message id.
    RefundDuplicate,
}

impl Kind {
    /// Whether it goes on the refund commands' subject.
    pub fn is_refund(self) -> bool {
        matches!(
            self,
            Self::Refund | Self::RefundRetry | Self::RefundDuplicate
        )
    }
}

/// The whole seeded mix, in publishing rounds.
#[derive(Debug, Default)]
pub struct Plan {
    pub seed: u64,
    pub attempts: HashMap<Uuid, PlannedAttempt>,
    /// Round 0 is published before any fault: it holds the messages without a
    /// `Nats-Msg-Id`, which a producer cannot retry safely.
    pub rounds: Vec<Vec<Message>>,
    /// Conflicting message id → the original message id it must wait for.
    pub conflict_waits_for: HashMap<String, String>,
    /// Message ids that must be dead-lettered, with their `Dlq-Class`.
    pub dead_letter_ids: HashMap<String, &'static str>,
    /// Invalid messages without a message id (dead-lettered too, identified by sequence).
    pub invalid_without_id: usize,
    /// Every charge message id that must be recorded as processed.
    pub valid_message_ids: HashSet<String>,
    /// The refunds asked for, by `refund_id`.
    pub refunds: HashMap<Uuid, PlannedRefund>,
    /// Every refund message id, each of which must be recorded as processed.
    pub refund_message_ids: HashSet<String>,
}

impl Plan {
    /// About `commands` messages in rounds of about `round_size` originals.
    pub fn new(seed: u64, commands: usize, round_size: usize, gateway: GatewayKind) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut refund_dice = refunds::dice(seed);
        let mut plan = Plan {
            seed,
            ..Plan::default()
        };
        // ~1.22 messages per attempt: 10 % retries, 8 % duplicates, 3 % conflicts, 1.5 % invalid.
        let originals = (commands * 100 / 122).max(1);
        let now = OffsetDateTime::now_utc();
        let mut round0 = Vec::new();
        for n in 0..3 {
            let body = command_body(
                Uuid::from_u128(rng.gen()),
                900_000 + n,
                700,
                "pm_card_visa",
                now,
            );
            round0.push(Message {
                message_id: None,
                body,
                kind: Kind::Invalid,
            });
            plan.invalid_without_id += 1;
        }
        plan.rounds.push(round0);

        let mut pending_followups: Vec<Message> = Vec::new();
        // Refunds a round after their charge's followups (their own duplicates, the rest
        // after a partial refund).
        let mut later_followups: Vec<Message> = Vec::new();
        let mut invalid_n = 0;
        for start in (0..originals).step_by(round_size) {
            let mut round = std::mem::take(&mut pending_followups);
            pending_followups = std::mem::take(&mut later_followups);
            for i in start..(start + round_size).min(originals) {
                let attempt = Uuid::from_u128(rng.gen());
                let payment_method = payment_method(&mut rng, gateway);
                let amount_minor = rng.gen_range(100..50_000);
                let stale = rng.gen_range(0..100) == 0;
                let requested_at = if stale {
                    now - time::Duration::days(2)
                } else {
                    now
                };
                let message_id = format!("soak-{seed}-{i}");
                let body = command_body(attempt, i, amount_minor, payment_method, requested_at);
                let planned = PlannedAttempt {
                    amount_minor,
                    payment_method,
                    stale,
                    original_message_id: message_id.clone(),
                };
                let mut placed = refunds::Placed::default();
                refunds::plan_for(
                    &mut refund_dice,
                    i,
                    attempt,
                    &planned,
                    &mut plan,
                    &mut placed,
                );
                round.append(&mut placed.before_charge);
                pending_followups.append(&mut placed.next);
                later_followups.append(&mut placed.after_next);
                plan.attempts.insert(attempt, planned);
                plan.valid_message_ids.insert(message_id.clone());
                round.push(Message {
                    message_id: Some(message_id.clone()),
                    body: body.clone(),
                    kind: Kind::Original,
                });
                let roll = rng.gen_range(0..100);
                if roll < 10 {
                    pending_followups.push(Message {
                        message_id: Some(message_id),
                        body,
                        kind: Kind::ProducerRetry,
                    });
                } else if roll < 18 {
                    let again = format!("{message_id}-again");
                    plan.valid_message_ids.insert(again.clone());
                    pending_followups.push(Message {
                        message_id: Some(again),
                        body,
                        kind: Kind::BusinessDuplicate,
                    });
                } else if roll < 21 && !stale {
                    let conflict = format!("{message_id}-conflict");
                    let body =
                        command_body(attempt, i, amount_minor + 1, payment_method, requested_at);
                    plan.dead_letter_ids.insert(conflict.clone(), "conflict");
                    plan.conflict_waits_for
                        .insert(conflict.clone(), message_id.clone());
                    pending_followups.push(Message {
                        message_id: Some(conflict),
                        body,
                        kind: Kind::Conflict,
                    });
                }
                if rng.gen_range(0..1000) < 15 {
                    let (name, body) = invalid_body(invalid_n, &mut rng);
                    let id = format!("soak-{seed}-bad-{invalid_n}-{name}");
                    invalid_n += 1;
                    plan.dead_letter_ids.insert(id.clone(), "invalid");
                    round.push(Message {
                        message_id: Some(id),
                        body,
                        kind: Kind::Invalid,
                    });
                }
            }
            plan.rounds.push(round);
        }
        plan.rounds.push(pending_followups);
        plan.rounds.push(later_followups);
        plan
    }
}

/// Mostly cards that succeed, some declines, each first-try fault the gateway can be told
/// to have, and a few `400`s (which end in `needs_review`). The Stripe dialect's declines
/// are Stripe's test payment methods, and it adds cards that need authentication (declined
/// off-session) and payments that stay `processing` for a while; the fault triggers are
/// the same in both dialects.
fn payment_method(rng: &mut StdRng, gateway: GatewayKind) -> &'static str {
    use mock_gateway::payment_methods as pm;
    use mock_gateway::stripe::payment_methods as stripe;
    let roll = rng.gen_range(0..1000);
    if gateway == GatewayKind::Stripe {
        match roll {
            0..=59 => return stripe::CARD_VISA_CHARGE_DECLINED,
            60..=79 => return stripe::CARD_CHARGE_DECLINED_INSUFFICIENT_FUNDS,
            175..=189 => return stripe::CARD_AUTHENTICATION_REQUIRED,
            190..=204 => return stripe::FAULT_PROCESSING,
            _ => {}
        }
    }
    match roll {
        0..=59 => pm::CARD_DECLINED,
        60..=79 => pm::INSUFFICIENT_FUNDS,
        80..=99 => pm::FAULT_ERROR_AFTER,
        100..=119 => pm::FAULT_ERROR_BEFORE,
        120..=129 => pm::FAULT_HANG_AFTER,
        130..=149 => pm::FAULT_DROP_AFTER,
        150..=169 => pm::FAULT_RATE_LIMIT,
        170..=174 => pm::FAULT_BAD_REQUEST,
        _ => pm::CARD_VISA,
    }
}

fn command_body(
    attempt: Uuid,
    i: usize,
    amount_minor: i64,
    payment_method: &str,
    requested_at: OffsetDateTime,
) -> Vec<u8> {
    let body = command(
        attempt,
        json!({
            "order_id": format!("ord_soak_{i}"),
            "customer_id": format!("cus_{}", i % 97),
            "amount_minor": amount_minor,
            "payment_method": payment_method,
            "description": format!("Soak order {i}"),
            "requested_at": requested_at.format(&Rfc3339).expect("formats"),
        }),
    );
    serde_json::to_vec(&body).expect("json")
}

/// One of the ways a command can be permanently invalid, named for its message id.
fn invalid_body(n: usize, rng: &mut StdRng) -> (&'static str, Vec<u8>) {
    let mut body = command(
        Uuid::from_u128(rng.gen()),
        json!({
            "order_id": "ord_invalid",
            "customer_id": "cus_invalid",
            "amount_minor": 500,
            "description": null,
            "requested_at": null,
        }),
    );
    let name = match n % 8 {
        0 => return ("bad-json", b"{\"payment_attempt_id\":".to_vec()),
        1 => {
            body["currency"] = "EUX".into();
            "unknown-currency"
        }
        2 => {
            body["amount_minor"] = 0.into();
            "zero-amount"
        }
        3 => {
            body["amount_minor"] = "19.99".into();
            "amount-as-text"
        }
        4 => {
            body["requested_at"] = "yesterday".into();
            "requested-at-not-rfc3339"
        }
        5 => {
            body.as_object_mut().expect("object").remove("customer_id");
            "missing-customer"
        }
        6 => {
            body["order_id"] = "o".repeat(129).into();
            "order-id-too-long"
        }
        _ => {
            body["payment_attempt_id"] = "not-a-uuid".into();
            "attempt-id-not-a-uuid"
        }
    };
    (name, serde_json::to_vec(&body).expect("json"))
}

/// What the producer did.
#[derive(Debug, Default, Clone)]
pub struct Published {
    /// Messages JetStream stored (a retry it dropped as a duplicate is not counted).
    pub messages: usize,
    pub by_kind: HashMap<Kind, usize>,
    /// Publishes that failed (broker down) and were retried with the same message id.
    pub retried_after_error: usize,
    /// Of those retries, the ones JetStream had already stored and dropped.
    pub dropped_as_duplicate: usize,
    /// Seconds from the first to the last publish.
    pub duration: Duration,
}

impl Published {
    /// Messages of `kind` JetStream stored.
    pub fn of_kind(&self, kind: Kind) -> usize {
        self.by_kind.get(&kind).copied().unwrap_or(0)
    }
}

/// The subjects a producer publishes commands on.
#[derive(Debug, Clone)]
pub struct Subjects {
    pub charge: String,
    pub refund: String,
}

impl Subjects {
    fn of(&self, kind: Kind) -> &str {
        if kind.is_refund() {
            &self.refund
        } else {
            &self.charge
        }
    }
}

/// Publishes the plan's rounds `interval` apart (round 0 at once), retrying a failed publish
/// with the same message id until JetStream acknowledges it, as a producer does.
pub async fn publish(
    plan: &Plan,
    jetstream: jetstream::Context,
    subjects: Subjects,
    pool: PgPool,
    interval: Duration,
) -> Published {
    let subject = &subjects.charge;
    let started = Instant::now();
    let mut published = Published::default();
    let mut waiting: Vec<&Message> = Vec::new();
    for (n, round) in plan.rounds.iter().enumerate() {
        if n > 0 {
            tokio::time::sleep(interval).await;
        }
        waiting.extend(round.iter().filter(|m| m.kind == Kind::Conflict));
        for message in round.iter().filter(|m| m.kind != Kind::Conflict) {
            publish_one(
                &jetstream,
                subjects.of(message.kind),
                message,
                &mut published,
            )
            .await;
        }
        waiting =
            publish_recorded_conflicts(plan, &jetstream, subject, &pool, waiting, &mut published)
                .await;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while !waiting.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} originals were not recorded within 120s of the last round",
            waiting.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        waiting =
            publish_recorded_conflicts(plan, &jetstream, subject, &pool, waiting, &mut published)
                .await;
    }
    published.duration = started.elapsed();
    published
}

/// Publishes the conflicts whose original is recorded; returns the others.
async fn publish_recorded_conflicts<'a>(
    plan: &Plan,
    jetstream: &jetstream::Context,
    subject: &str,
    pool: &PgPool,
    waiting: Vec<&'a Message>,
    published: &mut Published,
) -> Vec<&'a Message> {
    if waiting.is_empty() {
        return waiting;
    }
    let originals: Vec<String> = waiting
        .iter()
        .map(|m| {
            plan.conflict_waits_for[m.message_id.as_deref().expect("conflicts have ids")].clone()
        })
        .collect();
    let recorded: HashSet<String> = match pool.try_recorded_message_ids(&originals).await {
        Ok(ids) => ids.into_iter().collect(),
        Err(_) => return waiting,
    };
    let mut still = Vec::new();
    for (message, original) in waiting.into_iter().zip(originals) {
        if recorded.contains(&original) {
            publish_one(jetstream, subject, message, published).await;
        } else {
            still.push(message);
        }
    }
    still
}

async fn publish_one(
    jetstream: &jetstream::Context,
    subject: &str,
    message: &Message,
    published: &mut Published,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut retried = false;
    loop {
        let mut headers = HeaderMap::new();
        if let Some(id) = &message.message_id {
            headers.insert("Nats-Msg-Id", id.as_str());
        }
        headers.insert("Correlation-Id", "soak");
        let ack = async {
            jetstream
                .publish_with_headers(subject.to_owned(), headers, message.body.clone().into())
                .await?
                .await
                .map_err(anyhow::Error::from)
        };
        match tokio::time::timeout(Duration::from_secs(5), ack).await {
            Ok(Ok(ack)) => {
                if ack.duplicate {
                    published.dropped_as_duplicate += 1;
                } else {
                    published.messages += 1;
                    *published.by_kind.entry(message.kind).or_default() += 1;
                }
                return;
            }
            Ok(Err(_)) | Err(_) => {
                // A message without an id cannot be retried without risking a second copy;
                // the plan publishes those before any fault, so a failure here is the soak's.
                assert!(
                    message.message_id.is_some(),
                    "publishing a message without a Nats-Msg-Id failed with the broker up"
                );
                assert!(
                    Instant::now() < deadline,
                    "could not publish {:?} for 60s",
                    message.message_id
                );
                if !retried {
                    published.retried_after_error += 1;
                    retried = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
