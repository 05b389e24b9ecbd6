//! The JSON Schemas (draft 2020-12) of every message onecharge reads or writes on the broker
//! (contract §2), for the teams on the other side of the streams: generated from the very
//! types that read and write them (`domain::command::Wire`, `domain::PaymentEvent`,
//! `intake::dead_letter::DeadLetterHeaders`) and committed under `docs/schemas/`.
//! `crate::documents` checks that the committed files are these, and
//! `UPDATE_DOCS=1 cargo test --lib documents` rewrites them.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};
use serde_json::{json, Value};

use crate::domain::command::Wire;
use crate::domain::event::EventHeaders;
use crate::domain::finding::FindingEvent;
use crate::domain::refund::Wire as RefundWire;
use crate::domain::refund_event::{RefundEvent, REFUND_COMMAND_SUBJECT};
use crate::domain::{AttemptStatus, PaymentEvent};
use crate::intake::DeadLetterHeaders;

/// Where the schemas are committed, from the repository's root.
pub const DIRECTORY: &str = "docs/schemas";

/// Every schema, as (file name, document): the command, the events' headers, one body per
/// event subject and one for any event, and the dead letter's headers.
pub fn all() -> Vec<(String, Value)> {
    let mut schemas = vec![
        (
            "charge-payment.v1.json".to_owned(),
            with_subject(
                generate::<Wire>(),
                "payments.commands.charge-payment.v1",
                "2.1",
            ),
        ),
        (
            "payment-event-headers.v1.json".to_owned(),
            with_subject(
                generate::<EventHeaders>(),
                "payments.events.payment-<state>.v1",
                "2.3",
            ),
        ),
        (
            "payment-event.v1.json".to_owned(),
            with_subject(
                event_schema(json!({ "enum": event_statuses() })),
                "payments.events.payment-<state>.v1",
                "2.3",
            ),
        ),
    ];
    for status in AttemptStatus::ALL {
        let Some(name) = status.event_name() else {
            continue;
        };
        let subject = format!("payments.events.payment-{name}.v1");
        let mut schema = event_schema(json!({ "const": status.as_str() }));
        schema["title"] = json!(format!("Payment event v1: payment-{name}"));
        schemas.push((
            format!("payment-{name}.v1.json"),
            with_subject(schema, &subject, "2.3"),
        ));
    }
    schemas.push((
        "reconciliation-finding.v1.json".to_owned(),
        with_subject(generate::<FindingEvent>(), FindingEvent::SUBJECT, "2.4"),
    ));
    schemas.push((
        "refund-payment.v1.json".to_owned(),
        with_subject(generate::<RefundWire>(), REFUND_COMMAND_SUBJECT, "2.5"),
    ));
    for (name, statuses) in [
        ("succeeded", json!({ "const": "succeeded" })),
        ("failed", json!({ "enum": ["failed", "refused"] })),
    ] {
        let mut schema = generate::<RefundEvent>();
        let description = schema["properties"]["status"]["description"].clone();
        schema["properties"]["status"] = statuses;
        schema["properties"]["status"]["description"] = description;
        schema["title"] = json!(format!("Refund event v1: refund-{name}"));
        schemas.push((
            format!("refund-{name}.v1.json"),
            with_subject(schema, &format!("payments.events.refund-{name}.v1"), "2.6"),
        ));
    }
    schemas.push((
        "dead-letter-headers.v1.json".to_owned(),
        with_subject(
            generate::<DeadLetterHeaders>(),
            "payments.dlq.charge-payment.v1",
            "2.2",
        ),
    ));
    schemas
}

/// The schema published as `name` (e.g. `charge-payment.v1.json`).
///
/// # Panics
/// When there is no such schema: a caller's typo.
pub fn named(name: &str) -> Value {
    all()
        .into_iter()
        .find_map(|(file, schema)| (file == name).then_some(schema))
        .unwrap_or_else(|| panic!("no schema {name}"))
}

/// `T`'s schema, draft 2020-12, as JSON.
fn generate<T: JsonSchema>() -> Value {
    let schema: Schema = SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    schema.to_value()
}

/// The event's schema with `status` narrowed to `status` (an `enum` or a `const`).
fn event_schema(status: Value) -> Value {
    let mut schema = generate::<PaymentEvent>();
    let description = schema["properties"]["status"]["description"].clone();
    schema["properties"]["status"] = status;
    schema["properties"]["status"]["description"] = description;
    schema
}

/// The statuses that have an event, as they appear in its `status` field.
fn event_statuses() -> Vec<&'static str> {
    AttemptStatus::ALL
        .into_iter()
        .filter(|s| s.event_name().is_some())
        .map(AttemptStatus::as_str)
        .collect()
}

/// Says where the message travels, for a reader who finds the file alone.
fn with_subject(mut schema: Value, subject: &str, section: &str) -> Value {
    schema["$comment"] = json!(format!(
        "Subject {subject} (docs/contract.md §{section}). Generated from onecharge's types: do not edit; regenerate with UPDATE_DOCS=1 cargo test --lib documents."
    ));
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validates(schema: &Value, instance: &Value) -> bool {
        jsonschema::draft202012::options()
            .should_validate_formats(true)
            .build(schema)
            .expect("a valid draft 2020-12 schema")
            .is_valid(instance)
    }

    fn command() -> Value {
        crate::domain::command::contract_example()
    }

    #[test]
    fn the_contracts_example_command_is_valid_and_each_bound_is_enforced() {
        let schema = named("charge-payment.v1.json");
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        assert!(validates(&schema, &command()));
        let mut extra = command();
        extra["unknown_field"] = json!("ignored by the tolerant reader");
        assert!(validates(&schema, &extra), "unknown fields are allowed");
        for (field, value) in [
            ("amount_minor", json!(0)),
            ("amount_minor", json!(1_000_000_000_001_i64)),
            ("amount_minor", json!("19.99")),
            ("currency", json!("eur")),
            ("order_id", json!("")),
            ("customer_id", json!("c".repeat(129))),
            ("payment_method", json!("p".repeat(256))),
            ("description", json!("d".repeat(501))),
        ] {
            let mut bad = command();
            bad[field] = value.clone();
            assert!(
                !validates(&schema, &bad),
                "{field} = {value} must be refused"
            );
        }
        let mut missing = command();
        missing.as_object_mut().unwrap().remove("payment_method");
        assert!(!validates(&schema, &missing));
    }

    #[test]
    fn each_event_subject_admits_only_its_own_status() {
        let event = |status: &str| {
            json!({
                "event_id": "0b6c3c55-34f4-4b0e-9a55-0c0c6a3f1c11",
                "payment_attempt_id": "6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11",
                "order_id": "ord_1001",
                "status": status,
                "amount_minor": 1999,
                "currency": "EUR",
                "gateway_charge_id": null,
                "decline_code": null,
                "reason": null,
                "occurred_at": "2026-11-29T10:15:01.234Z"
            })
        };
        let any = named("payment-event.v1.json");
        assert!(validates(&any, &event("needs_review")));
        assert!(!validates(&any, &event("pending")), "pending has no event");
        let succeeded = named("payment-succeeded.v1.json");
        assert!(validates(&succeeded, &event("succeeded")));
        assert!(!validates(&succeeded, &event("declined")));
        assert!(validates(
            &named("payment-needs-review.v1.json"),
            &event("needs_review")
        ));
    }

    #[test]
    fn dead_letter_headers_require_the_contracts_names_and_keep_the_originals() {
        let schema = named("dead-letter-headers.v1.json");
        let headers = json!({
            "Nats-Msg-Id": "dlq-onecharge-intake-17",
            "Dlq-Reason": "amount_minor must be between 1 and 1000000000000, got 0",
            "Dlq-Class": "invalid",
            "Dlq-Original-Subject": "payments.commands.charge-payment.v1",
            "Dlq-Stream-Sequence": "17",
            "Dlq-Delivery-Count": "1",
            "Dlq-Consumer": "onecharge-intake",
            "Dlq-Original-Msg-Id": "m-17",
            "Correlation-Id": "corr-1"
        });
        assert!(validates(&schema, &headers));
        let mut bad_class = headers.clone();
        bad_class["Dlq-Class"] = json!("lost");
        assert!(!validates(&schema, &bad_class));
        let mut no_reason = headers.clone();
        no_reason.as_object_mut().unwrap().remove("Dlq-Reason");
        assert!(!validates(&schema, &no_reason));
    }
}
