//! The downstream integration event of contract §2.3, one per final state (and one per
//! entry into `needs_review`). Built here, stored in the outbox in the same transaction as
//! the state it announces, and published later by the relay.

use super::{GatewayChargeId, MessageId};
use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{bounded, AttemptStatus, Money, PaymentAttemptId, Settlement};

/// The body of `payments.events.payment-<state>.v1`, and its published JSON Schema
/// (`docs/schemas/payment-*.v1.json`, `crate::documents::schemas`, which narrows `status` per subject).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(
    title = "Payment event v1",
    description = "The body of an event on payments.events.payment-<state>.v1 (contract §2.3): one per final state of a payment attempt, and one per entry into needs_review. Headers: Nats-Msg-Id (equal to event_id, stable across relay retries), Causation-Id (the command's Nats-Msg-Id), Correlation-Id and traceparent (when the command had them)."
)]
pub struct PaymentEvent {
    /// Also the `Nats-Msg-Id`, so a relay retry is deduplicated by JetStream.
    pub event_id: Uuid,
    pub payment_attempt_id: PaymentAttemptId,
    pub order_id: String,
    /// The state the event announces: succeeded, declined, expired or needs_review.
    #[schemars(with = "String")]
    pub status: AttemptStatus,
    /// `amount_minor` and `currency`, as the command gave them.
    #[serde(flatten)]
    pub money: Money,
    /// The gateway's charge id: set when succeeded.
    pub gateway_charge_id: Option<GatewayChargeId>,
    /// The gateway's decline code, when declined and the gateway gave one.
    pub decline_code: Option<String>,
    /// Why, for expired and needs_review.
    pub reason: Option<String>,
    /// When the attempt reached the state (RFC 3339, UTC).
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub occurred_at: OffsetDateTime,
}

/// The provenance headers an event carries besides its `Nats-Msg-Id`. Read from the
/// attempt's row, where the causation is the `first_message_id` column.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventProvenance {
    /// The command's `Correlation-Id`, when it had one.
    pub correlation_id: Option<String>,
    /// The `Nats-Msg-Id` of the command that created the attempt.
    #[sqlx(rename = "first_message_id")]
    pub causation_id: MessageId,
    /// W3C trace context to continue, when the command carried one.
    pub traceparent: Option<String>,
}

/// The headers of an event (contract §2.3), one field each: `PaymentEvent::headers` writes
/// exactly these, and they are the published schema
/// `docs/schemas/payment-event-headers.v1.json` (`crate::documents::schemas`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(
    title = "Payment event headers v1",
    description = "The headers of an event on payments.events.payment-<state>.v1 (contract §2.3), as name -> value.",
    extend("additionalProperties" = {"type": "string"}),
    transform = crate::domain::json_schema::headers_are_strings
)]
pub struct EventHeaders {
    /// The event's `event_id`: a relay retry is deduplicated by JetStream.
    #[serde(rename = "Nats-Msg-Id")]
    #[schemars(extend("format" = "uuid"))]
    pub message_id: String,
    /// The `Nats-Msg-Id` of the command that created the attempt.
    #[serde(rename = "Causation-Id")]
    pub causation_id: String,
    /// The command's `Correlation-Id`, when it had one.
    #[serde(rename = "Correlation-Id", skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The W3C trace context to continue, when the command carried one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// What every event of one attempt repeats, as the attempt's row (or intake's record of its
/// command) says: whose it is, what it charges, and the provenance its headers carry.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventAttempt {
    pub payment_attempt_id: PaymentAttemptId,
    pub order_id: String,
    #[sqlx(flatten)]
    pub money: Money,
    #[sqlx(flatten)]
    pub provenance: EventProvenance,
}

/// What an event says of the state it announces: the state and, where that state has them,
/// the gateway's charge id, its decline code, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announced {
    pub status: AttemptStatus,
    pub gateway_charge_id: Option<GatewayChargeId>,
    pub decline_code: Option<String>,
    pub reason: Option<String>,
}

impl Announced {
    /// What the event of `settlement` says; `None` for the states without an event
    /// (`pending`, `unknown`).
    pub fn settlement(settlement: &Settlement) -> Option<Self> {
        let status = settlement.status();
        status.event_name()?;
        let (gateway_charge_id, decline_code, reason) = match settlement {
            Settlement::Succeeded { charge_id } => (Some(charge_id.clone()), None, None),
            Settlement::Declined {
                charge_id,
                decline_code,
            } => (Some(charge_id.clone()), decline_code.clone(), None),
            Settlement::NeedsReview { reason } => (None, None, Some(reason.clone())),
            Settlement::Retry { .. } | Settlement::Unknown { .. } => (None, None, None),
        };
        Some(Self {
            status,
            gateway_charge_id,
            decline_code,
            reason,
        })
    }

    /// An attempt that expired, never sent to the gateway, for `reason`.
    pub fn expired(reason: impl Into<String>) -> Self {
        Self {
            status: AttemptStatus::Expired,
            gateway_charge_id: None,
            decline_code: None,
            reason: Some(reason.into()),
        }
    }
}

impl PaymentEvent {
    /// The one way an event is built: a new event id, `attempt`'s ids and money, and what
    /// `announced` says (its reason bounded to 1024 characters), at `occurred_at`. Every
    /// writer of a state with an event (a settlement, an operator's resolution, an expiry)
    /// builds it here, so every event of one state has the same shape.
    pub fn for_settlement(
        attempt: &EventAttempt,
        announced: Announced,
        occurred_at: OffsetDateTime,
    ) -> Self {
        Self {
            event_id: Uuid::new_v4(),
            payment_attempt_id: attempt.payment_attempt_id,
            order_id: attempt.order_id.clone(),
            status: announced.status,
            money: attempt.money,
            gateway_charge_id: announced.gateway_charge_id,
            decline_code: announced.decline_code,
            reason: announced.reason.map(|reason| bounded(&reason, 1024)),
            occurred_at,
        }
    }

    /// The `payment-expired` event of a command never sent, for `reason`.
    pub fn expired(attempt: &EventAttempt, reason: &str, occurred_at: OffsetDateTime) -> Self {
        Self::for_settlement(attempt, Announced::expired(reason), occurred_at)
    }

    /// The subject without any deployment namespace, e.g. `payments.events.payment-succeeded.v1`.
    ///
    /// # Panics
    /// When built for a status that has no event (pending, in_flight, unknown): a bug.
    pub fn subject(&self) -> String {
        Self::subject_of(self.status)
            .unwrap_or_else(|| panic!("no event exists for status {}", self.status))
    }

    /// The subject of the events announcing `status`, without any deployment namespace;
    /// `None` for the states without an event.
    pub fn subject_of(status: AttemptStatus) -> Option<String> {
        let name = status.event_name()?;
        Some(format!("payments.events.payment-{name}.v1"))
    }

    /// The message headers ([`EventHeaders`]), as (name, value) pairs.
    pub fn headers(&self, provenance: &EventProvenance) -> Vec<(String, String)> {
        let headers = EventHeaders {
            message_id: self.event_id.to_string(),
            causation_id: provenance.causation_id.to_string(),
            correlation_id: provenance.correlation_id.clone(),
            traceparent: provenance.traceparent.clone(),
        };
        let serde_json::Value::Object(fields) =
            serde_json::to_value(&headers).expect("headers serialise as an object")
        else {
            unreachable!("a struct serialises as an object")
        };
        fields
            .into_iter()
            .map(|(name, value)| (name, value.as_str().unwrap_or_default().to_owned()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn an_event_serialises_to_the_contract_shape() {
        let event = PaymentEvent {
            event_id: Uuid::nil(),
            payment_attempt_id: PaymentAttemptId::from(uuid::Uuid::nil()),
            order_id: "ord_1001".into(),
            status: AttemptStatus::NeedsReview,
            money: Money::of(1999, "EUR").unwrap(),
            gateway_charge_id: None,
            decline_code: None,
            reason: Some("cannot prove whether the customer was charged".into()),
            occurred_at: datetime!(2026-11-29 10:15:01.234 UTC),
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["status"], "needs_review");
        assert_eq!(json["occurred_at"], "2026-11-29T10:15:01.234Z");
        assert_eq!(json["gateway_charge_id"], serde_json::Value::Null);
        assert_eq!(event.subject(), "payments.events.payment-needs-review.v1");
        let headers = event.headers(&EventProvenance {
            causation_id: MessageId::checked("msg-1"),
            correlation_id: None,
            traceparent: None,
        });
        assert_eq!(
            headers,
            [
                ("Causation-Id".to_owned(), "msg-1".to_owned()),
                ("Nats-Msg-Id".to_owned(), Uuid::nil().to_string()),
            ],
            "the contract's names, and no header for what the command did not carry"
        );
    }

    fn attempt() -> EventAttempt {
        EventAttempt {
            payment_attempt_id: PaymentAttemptId::from(Uuid::nil()),
            order_id: "ord_1001".into(),
            money: Money::of(1999, "EUR").unwrap(),
            provenance: EventProvenance {
                causation_id: MessageId::checked("msg-1"),
                correlation_id: None,
                traceparent: None,
            },
        }
    }

    #[test]
    fn the_money_of_an_event_is_two_top_level_fields_of_its_json() {
        let event = PaymentEvent::expired(&attempt(), "too old", datetime!(2026-11-29 10:15 UTC));
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["amount_minor"], 1999);
        assert_eq!(json["currency"], "EUR");
        assert!(json.get("money").is_none());
        let back: PaymentEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
    }

    #[test]
    fn an_event_for_a_settlement_says_what_the_settlement_says() {
        let at = datetime!(2026-11-29 10:15 UTC);
        let declined = Settlement::Declined {
            charge_id: GatewayChargeId::from_gateway("ch_1"),
            decline_code: Some("card_declined".into()),
        };
        let event =
            PaymentEvent::for_settlement(&attempt(), Announced::settlement(&declined).unwrap(), at);
        assert_eq!(event.status, AttemptStatus::Declined);
        assert_eq!(event.gateway_charge_id.as_deref(), Some("ch_1"));
        assert_eq!(event.decline_code.as_deref(), Some("card_declined"));
        assert_eq!(event.reason, None);
        let review = Settlement::NeedsReview {
            reason: "r".repeat(2000),
        };
        let event =
            PaymentEvent::for_settlement(&attempt(), Announced::settlement(&review).unwrap(), at);
        assert_eq!(event.reason.unwrap().chars().count(), 1024);
        let unknown = Settlement::Unknown { reason: "r".into() };
        assert_eq!(
            Announced::settlement(&unknown),
            None,
            "unknown has no event"
        );
    }
}
