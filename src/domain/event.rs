//! The downstream integration event of contract §2.3, one per final state (and one per
//! entry into `needs_review`). Built here, stored in the outbox in the same transaction as
//! the state it announces, and published later by the relay.

use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

use super::AttemptStatus;
use crate::domain::PaymentAttemptId;

/// The body of `payments.events.payment-<state>.v1`, and its published JSON Schema
/// (`docs/schemas/payment-*.v1.json`, `crate::schemas`, which narrows `status` per subject).
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
    /// In the currency's minor unit.
    pub amount_minor: i64,
    /// ISO 4217 alphabetic code, as the command gave it.
    pub currency: String,
    /// The gateway's charge id: set when succeeded.
    pub gateway_charge_id: Option<String>,
    /// The gateway's decline code, when declined and the gateway gave one.
    pub decline_code: Option<String>,
    /// Why, for expired and needs_review.
    pub reason: Option<String>,
    /// When the attempt reached the state (RFC 3339, UTC).
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub occurred_at: OffsetDateTime,
}

/// The provenance headers an event carries besides its `Nats-Msg-Id`.
#[derive(Debug, Clone, Default)]
pub struct EventProvenance {
    /// The command's `Correlation-Id`, when it had one.
    pub correlation_id: Option<String>,
    /// The `Nats-Msg-Id` of the command that created the attempt.
    pub causation_id: String,
    /// W3C trace context to continue, when the command carried one.
    pub traceparent: Option<String>,
}

/// The headers of an event (contract §2.3), one field each: `PaymentEvent::headers` writes
/// exactly these, and they are the published schema
/// `docs/schemas/payment-event-headers.v1.json` (`crate::schemas`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(
    title = "Payment event headers v1",
    description = "The headers of an event on payments.events.payment-<state>.v1 (contract §2.3), as name -> value.",
    extend("additionalProperties" = {"type": "string"}),
    transform = crate::domain::schema::headers_are_strings
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

impl PaymentEvent {
    /// The subject without any deployment namespace, e.g. `payments.events.payment-succeeded.v1`.
    ///
    /// # Panics
    /// When built for a status that has no event (pending, in_flight, unknown): a bug.
    pub fn subject(&self) -> String {
        let name = self
            .status
            .event_name()
            .unwrap_or_else(|| panic!("no event exists for status {}", self.status));
        format!("payments.events.payment-{name}.v1")
    }

    /// The message headers ([`EventHeaders`]), as (name, value) pairs.
    pub fn headers(&self, provenance: &EventProvenance) -> Vec<(String, String)> {
        let headers = EventHeaders {
            message_id: self.event_id.to_string(),
            causation_id: provenance.causation_id.clone(),
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
            amount_minor: 1999,
            currency: "EUR".into(),
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
            causation_id: "msg-1".into(),
            ..Default::default()
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
}
