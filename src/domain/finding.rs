//! Reconciliation findings: what the sweep, or a webhook's re-read of one object, found
//! wrong between the ledger and the gateway, for a person. Pure: the store records them, the
//! sweep's comparison builds them, and the event published for each is built here.
//!
//! A finding is keyed by its **evidence**, not only by what it is about: each distinct
//! aftermath of a charge (each refund, a dispute opened, won or lost, the charge missing
//! from the listing) is a finding of its own, so evidence that changes after a person
//! resolved the last one opens a new one, with the earlier ones as its history
//! ([`NewFinding::subject_key`] groups them). A dispute is its own class, `disputed`
//! (decision 131), but the same charge's history as its refunds.

use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

use super::PaymentAttemptId;

/// The kinds of discrepancy (docs/contract.md §5, `findings list`). Stored and serialised
/// as its snake_case name.
#[derive(Serialize, serde::Deserialize, sqlx::Type, schemars::JsonSchema, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FindingClass {
    /// Money taken at the gateway for an attempt onecharge holds as declined or expired
    /// (or one never sent under this key): a person refunds or corrects.
    ChargedNotRecorded,
    /// More than one charge holding money names one attempt.
    ChargedTwice,
    /// A succeeded attempt whose charge is missing, failed, cancelled or refunded at the
    /// gateway.
    RecordedNotCharged,
    /// A succeeded attempt's charge the customer's bank disputes: evidence `dispute:open`
    /// (the money is held back until the bank decides), `dispute:won` (decided for the
    /// merchant: the money was reinstated and nothing is owed) or `dispute:lost` (the money
    /// went back to the customer), with `;refunded:N` when part was refunded too.
    Disputed,
    /// A charge for the attempt whose amount, currency or customer differ from it.
    Mismatch,
    /// A charge carrying onecharge's metadata for an attempt id onecharge does not know.
    UnknownReference,
}

impl FindingClass {
    pub const ALL: [FindingClass; 6] = [
        Self::ChargedNotRecorded,
        Self::ChargedTwice,
        Self::RecordedNotCharged,
        Self::Disputed,
        Self::Mismatch,
        Self::UnknownReference,
    ];

    /// The stored spelling (and the metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ChargedNotRecorded => "charged_not_recorded",
            Self::ChargedTwice => "charged_twice",
            Self::RecordedNotCharged => "recorded_not_charged",
            Self::Disputed => "disputed",
            Self::Mismatch => "mismatch",
            Self::UnknownReference => "unknown_reference",
        }
    }
}

impl FindingClass {
    /// The word a finding's subject starts with: its class, except that a dispute shares
    /// `recorded_not_charged`'s, so that a charge's refunds and its dispute (opened, then
    /// won or lost) are one history whatever their class.
    pub fn subject(self) -> &'static str {
        match self {
            Self::Disputed => Self::RecordedNotCharged.as_str(),
            other => other.as_str(),
        }
    }
}

impl std::fmt::Display for FindingClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What saw a finding first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, sqlx::Type, schemars::JsonSchema, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum FindingSource {
    /// The reconciliation sweep's reading of the gateway's list.
    Sweep,
    /// A signed webhook, after the object it names was read again by id.
    Webhook,
}

/// A finding to record (or, when its key is known, to see again): also what a stored
/// finding says, besides its bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct NewFinding {
    pub class: FindingClass,
    #[schema(value_type = Option<uuid::Uuid>)]
    pub payment_attempt_id: Option<PaymentAttemptId>,
    /// The attempt id the gateway's record names, as written there.
    pub reference: Option<String>,
    /// Sorted, so that one discrepancy always has one key.
    pub gateway_ids: Vec<String>,
    /// What the gateway showed that makes this a finding, as a short stable token
    /// (`refunded:500`, `disputed`, `missing`, `amount:2999`…): a different token about the
    /// same charge is a different finding. Empty for a finding recorded before findings
    /// had evidence.
    pub evidence: String,
    pub attempt_status: Option<String>,
    pub attempt_amount_minor: Option<i64>,
    pub attempt_currency: Option<String>,
    pub gateway_amount_minor: Option<i64>,
    pub gateway_currency: Option<String>,
    pub detail: String,
}

impl NewFinding {
    /// What the finding is about, whatever the evidence: the class (a dispute's is the
    /// refund's, [`FindingClass::subject`]), the attempt (or the reference) and the
    /// gateway's ids. Findings sharing it are one charge's history.
    pub fn subject_key(&self) -> String {
        let subject = match (&self.payment_attempt_id, &self.reference) {
            (Some(id), _) => id.to_string(),
            (None, Some(reference)) => reference.clone(),
            (None, None) => String::new(),
        };
        format!(
            "{}:{subject}:{}",
            self.class.subject(),
            self.gateway_ids.join(",")
        )
    }

    /// The deduplication key: the subject and the evidence. A sweep or a webhook that sees
    /// the same evidence again sees the same finding; new evidence is a new finding.
    pub fn dedupe_key(&self) -> String {
        format!("{}|{}", self.subject_key(), self.evidence)
    }
}

/// An earlier finding about the same charge (the same [`NewFinding::subject_key`]), as a
/// new finding's event and page show it: what it said and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct EarlierFinding {
    pub finding_id: i64,
    pub evidence: String,
    /// `open` or `resolved`.
    pub state: String,
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub first_seen_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub resolved_at: Option<OffsetDateTime>,
    pub resolved_by: Option<String>,
    pub resolution: Option<String>,
}

/// The body of `payments.events.reconciliation-finding.v1`: one per finding first seen
/// (a new aftermath of a charge is a new finding). Published through the outbox in the
/// transaction that records the finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(
    title = "Reconciliation finding v1",
    description = "The body of an event on payments.events.reconciliation-finding.v1 (contract §2.4): one per reconciliation finding first seen, from the sweep or from a webhook whose object was read again by id. A later aftermath of the same charge (another refund, a dispute) is a new finding and a new event; `earlier` lists the findings before it about the same charge and what became of them. Headers: Nats-Msg-Id (equal to event_id)."
)]
pub struct FindingEvent {
    /// Also the `Nats-Msg-Id`.
    pub event_id: Uuid,
    pub finding_id: i64,
    pub class: FindingClass,
    /// The attempt it is about, when onecharge knows one (not for `unknown_reference`).
    pub payment_attempt_id: Option<PaymentAttemptId>,
    pub reference: Option<String>,
    pub gateway_ids: Vec<String>,
    pub evidence: String,
    pub detail: String,
    pub source: FindingSource,
    /// The Stripe event that asked for the object to be read again, when a webhook did.
    pub stripe_event_id: Option<String>,
    /// When onecharge first saw it, by the database's clock (RFC 3339, UTC).
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub occurred_at: OffsetDateTime,
    /// Earlier findings about the same charge, oldest first.
    pub earlier: Vec<EarlierFinding>,
}

impl FindingEvent {
    /// The subject it is published on (the relay puts a deployment's namespace in front).
    pub const SUBJECT: &'static str = "payments.events.reconciliation-finding.v1";
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund(evidence: &str) -> NewFinding {
        NewFinding {
            class: if evidence.starts_with("dispute:") {
                FindingClass::Disputed
            } else {
                FindingClass::RecordedNotCharged
            },
            payment_attempt_id: Some("6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11".parse().unwrap()),
            reference: None,
            gateway_ids: vec!["pi_1".into()],
            evidence: evidence.into(),
            attempt_status: None,
            attempt_amount_minor: None,
            attempt_currency: None,
            gateway_amount_minor: None,
            gateway_currency: None,
            detail: "x".into(),
        }
    }

    #[test]
    fn new_evidence_about_one_charge_is_a_new_finding_with_the_same_subject() {
        let first = refund("refunded:500");
        let second = refund("refunded:800");
        let dispute = refund("dispute:open");
        let lost = refund("dispute:lost");
        assert_eq!(dispute.class, FindingClass::Disputed);
        assert_eq!(first.subject_key(), dispute.subject_key());
        assert_eq!(dispute.subject_key(), lost.subject_key());
        assert_ne!(first.dedupe_key(), second.dedupe_key());
        assert_ne!(first.dedupe_key(), dispute.dedupe_key());
        assert_ne!(dispute.dedupe_key(), lost.dedupe_key());
        assert_eq!(first.dedupe_key(), refund("refunded:500").dedupe_key());
    }
}
