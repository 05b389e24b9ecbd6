//! The demo's verdict: the promise checked against the gateway's ledger, the database and
//! the streams, and the summary it prints. The run (`super::run`) publishes and waits; this
//! file judges what it left.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use anyhow::bail;
use mock_gateway::MockGateway;
use uuid::Uuid;

use onecharge::broker::Broker;
use onecharge::store::reads::attempts::AttemptRecord;
use onecharge::store::Store;

use super::published::Published;
use super::refunds::{self, RefundFindings};

/// Checks the promise against the gateway's ledger, the database and the streams, and
/// prints the summary; `Err` when it did not hold.
pub(super) async fn verify(
    store: &Store,
    broker: &Broker,
    gateway: &MockGateway,
    published: &Published,
    elapsed: Duration,
) -> anyhow::Result<()> {
    let ledger = gateway.ledger();
    let charges_per_attempt = succeeded_charges_per_attempt(&ledger);
    let attempts =
        onecharge::store::reads::attempts::list_attempts(store, &Default::default(), None).await?;
    let events = onecharge::store::reads::attempts::published_event_ids(store).await?;
    let on_stream = broker
        .stream_messages(&broker.names.events_stream())
        .await?;
    let dead = broker.stream_messages(&broker.names.dlq_stream()).await?;
    let refunds = refunds::verify(store, gateway, &published.refunds).await?;
    let mut problems = attempt_problems(&attempts, published, &charges_per_attempt);
    problems.extend(event_problems(&attempts, &refunds, &events, on_stream));
    let expected_dead = published.expected_dead_letters();
    if dead != expected_dead {
        problems.push(format!("{dead} dead letters, expected {expected_dead}"));
    }
    problems.extend(review_problems(&attempts, published));
    problems.extend(refunds.problems.iter().cloned());
    let succeeded_charges: usize = charges_per_attempt.values().sum();
    let stats = gateway.stats();
    let summary = Summary {
        published,
        attempts: &attempts,
        succeeded_charges,
        declined_charges: ledger.len() - succeeded_charges,
        requests: stats.requests,
        lookups: stats.lookups,
        double_charges: charges_per_attempt.values().filter(|n| **n > 1).count(),
        events_published: on_stream,
        dead_letters: dead,
        refunds: &refunds,
        elapsed,
        problems: &problems,
    };
    print!("{}", summary.render());
    if summary.double_charges > 0 || !problems.is_empty() {
        bail!(
            "the promise did not hold: {} double charge(s), {} problem(s)",
            summary.double_charges,
            problems.len()
        );
    }
    Ok(())
}

/// How many succeeded charges the gateway's ledger holds per attempt (its `reference`).
fn succeeded_charges_per_attempt(ledger: &[mock_gateway::Charge]) -> HashMap<String, usize> {
    let mut charges_per_attempt: HashMap<String, usize> = HashMap::new();
    for charge in ledger
        .iter()
        .filter(|c| matches!(c.status, mock_gateway::ChargeStatus::Succeeded))
    {
        *charges_per_attempt
            .entry(charge.reference.clone())
            .or_default() += 1;
    }
    charges_per_attempt
}

/// Attempts never published, and attempts whose state the gateway's ledger contradicts
/// or that never settled.
fn attempt_problems(
    attempts: &[AttemptRecord],
    published: &Published,
    charges_per_attempt: &HashMap<String, usize>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let unknown_attempts = attempts
        .iter()
        .filter(|a| !published.attempts.contains_key(&a.payment_attempt_id))
        .count();
    if unknown_attempts > 0 {
        problems.push(format!(
            "{unknown_attempts} attempts that were never published as valid"
        ));
    }
    for attempt in attempts {
        let id = attempt.payment_attempt_id;
        let charged = charges_per_attempt
            .get(&id.to_string())
            .copied()
            .unwrap_or(0);
        match attempt.status.as_str() {
            "succeeded" if charged != 1 => problems.push(format!(
                "{id} is succeeded but the gateway charged it {charged} times"
            )),
            "declined" if charged != 0 => {
                problems.push(format!("{id} is declined but the gateway charged it"))
            }
            "needs_review" if attempt.review_reason.is_none() => {
                problems.push(format!("{id} needs review without a reason"))
            }
            "pending" | "in_flight" | "unknown" => {
                problems.push(format!("{id} never settled ({})", attempt.status))
            }
            _ => {}
        }
    }
    problems
}

/// One event per final state of an attempt and of a refund, published under one id each;
/// a refused refund's dead letter goes out through the outbox too, to the dead-letter
/// stream.
fn event_problems(
    attempts: &[AttemptRecord],
    refunds: &RefundFindings,
    events: &[(Uuid, String)],
    on_stream: u64,
) -> Vec<String> {
    let mut problems = Vec::new();
    let final_attempts = attempts.iter().filter(|a| a.status.is_final()).count();
    let is_refunds = |status: &str| status.starts_with("refund_");
    let final_events = events
        .iter()
        .filter(|(_, status)| status != "needs_review" && !is_refunds(status))
        .count();
    if final_events != final_attempts {
        problems.push(format!(
            "{final_events} final-state events for {final_attempts} final attempts"
        ));
    }
    let final_refunds = refunds
        .refunds
        .iter()
        .filter(|(_, r)| r.as_ref().is_some_and(|r| r.status.is_final()))
        .count();
    let refund_events = events
        .iter()
        .filter(|(_, s)| s == "refund_succeeded" || s == "refund_failed")
        .count();
    if refund_events != final_refunds {
        problems.push(format!(
            "{refund_events} refund events for {final_refunds} final refunds"
        ));
    }
    let refund_dead_letters = events
        .iter()
        .filter(|(_, s)| s == "refund_dead_letter")
        .count();
    if refund_dead_letters != refunds.refused() {
        problems.push(format!(
            "{refund_dead_letters} refund dead letters for {} refused refunds",
            refunds.refused()
        ));
    }
    let ids: HashSet<&Uuid> = events
        .iter()
        .filter(|(_, s)| s != "refund_dead_letter")
        .map(|(id, _)| id)
        .collect();
    if on_stream as usize != ids.len() {
        problems.push(format!(
            "{on_stream} events on the stream for {} event ids",
            ids.len()
        ));
    }
    problems
}

/// Each attempt left for a person must be in `needs_review`.
fn review_problems(attempts: &[AttemptRecord], published: &Published) -> Vec<String> {
    let mut problems = Vec::new();
    for (attempt, case) in &published.for_review {
        let status = attempts
            .iter()
            .find(|a| a.payment_attempt_id == *attempt)
            .map(|a| a.status.as_str());
        if status != Some("needs_review") {
            problems.push(format!(
                "{attempt}, left for a person ({}), is {}",
                case.describe(),
                status.unwrap_or("missing")
            ));
        }
    }
    problems
}

/// What the demo found, as its summary says it.
struct Summary<'a> {
    published: &'a Published,
    attempts: &'a [AttemptRecord],
    succeeded_charges: usize,
    declined_charges: usize,
    requests: u64,
    lookups: u64,
    double_charges: usize,
    events_published: u64,
    dead_letters: u64,
    refunds: &'a RefundFindings,
    elapsed: Duration,
    problems: &'a [String],
}

impl Summary<'_> {
    /// The summary's lines, ending with the verdict when the promise held.
    fn render(&self) -> String {
        let published = self.published;
        let mut by_status: BTreeMap<&'static str, usize> = BTreeMap::new();
        for attempt in self.attempts {
            *by_status.entry(attempt.status.as_str()).or_default() += 1;
        }
        let mut out = String::from("\nsummary\n");
        let mut line = |text: String| {
            out.push_str(&text);
            out.push('\n');
        };
        line(format!("  messages published       {}", published.messages));
        line(format!(
            "  payment attempts         {} (of {} published)",
            self.attempts.len(),
            published.attempts.len()
        ));
        for (status, n) in &by_status {
            line(format!("    {status:<22} {n}"));
        }
        line(format!(
            "  charges at the gateway   {} succeeded, {} declined ({} requests, {} of them lookups)",
            self.succeeded_charges, self.declined_charges, self.requests, self.lookups
        ));
        line(format!(
            "  double charges           {}",
            self.double_charges
        ));
        line(format!(
            "  events published         {}",
            self.events_published
        ));
        line(format!(
            "  dead letters             {} ({} conflicts, {} invalid, {} refused refunds)",
            self.dead_letters,
            published.conflicts,
            published.invalid,
            self.refunds.refused()
        ));
        for refund_line in self.refunds.lines() {
            line(refund_line);
        }
        if !published.for_review.is_empty() {
            line(format!(
                "  left for a person        {} in needs_review, each with its reason ({})",
                published.for_review.len(),
                published.describe_review_cases()
            ));
        }
        line(format!("  time taken               {:.1?}", self.elapsed));
        if self.double_charges > 0 || !self.problems.is_empty() {
            for problem in self.problems {
                line(format!("  PROBLEM: {problem}"));
            }
        } else {
            line("the promise held: every attempt charged at most once, every refund made at most once and never past its charge, every outcome settled and announced once".to_owned());
        }
        out
    }
}
