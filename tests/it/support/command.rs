//! The one ChargePayment v1 of the tests: a valid body as a producer publishes it, and the
//! record intake makes of such a body, for tests that seed attempts without a broker; and the
//! one RefundPayment v1 body.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use onecharge::domain::command::{contract_example, validate, CommandHeaders};
use onecharge::domain::RefundId;
use onecharge::store::intake::IntakeRecord;
use onecharge::store::refunds::RefundRecord;
use serde_json::{json, Value};
use uuid::Uuid;

/// A valid ChargePayment body for `attempt`, with fields overridden by `patch` (a `null`
/// removes the field).
pub fn command(attempt: Uuid, patch: Value) -> Value {
    let mut body = contract_example();
    body["payment_attempt_id"] = json!(attempt);
    body["requested_at"] = json!(time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap());
    for (k, v) in patch.as_object().unwrap() {
        if v.is_null() {
            body.as_object_mut().unwrap().remove(k);
        } else {
            body[k] = v.clone();
        }
    }
    body
}

/// What the refund intake records of a RefundPayment for `attempt` (`amount_minor`, or the
/// rest), reason "item returned", under the message id `m-<refund_id>`.
pub fn refund_record(
    refund_id: RefundId,
    attempt: Uuid,
    amount_minor: Option<i64>,
) -> RefundRecord {
    let mut body = json!({
        "refund_id": refund_id,
        "payment_attempt_id": attempt,
        "reason": "item returned",
        "metadata": {"return_id": "ret_1"},
    });
    if let Some(amount) = amount_minor {
        body["amount_minor"] = amount.into();
    }
    let bytes = body.to_string().into_bytes();
    let message_id = format!("m-{refund_id}");
    let valid = onecharge::domain::refund::validate(
        &CommandHeaders {
            message_id: Some(message_id.clone()),
            ..Default::default()
        },
        &bytes,
    )
    .expect("a valid refund command");
    RefundRecord {
        message_id: valid.message_id,
        stream_sequence: 1,
        body_sha256: valid.body_sha256,
        command: valid.command,
        correlation_id: Some("corr-refund".into()),
        traceparent: None,
    }
}

/// A valid RefundPayment body (contract §2.5) refunding `amount_minor` of `attempt`'s charge
/// (`None`: whatever is left), from the contract's example, with fields overridden by
/// `patch` (a `null` removes the field).
pub fn refund_command(
    refund_id: Uuid,
    attempt: Uuid,
    amount_minor: Option<i64>,
    patch: Value,
) -> Value {
    let mut body = onecharge::domain::refund::contract_example();
    body["refund_id"] = json!(refund_id);
    body["payment_attempt_id"] = json!(attempt);
    body["requested_at"] = json!(time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap());
    match amount_minor {
        Some(amount) => body["amount_minor"] = json!(amount),
        None => {
            body.as_object_mut().unwrap().remove("amount_minor");
        }
    }
    for (k, v) in patch.as_object().unwrap() {
        if v.is_null() {
            body.as_object_mut().unwrap().remove(k);
        } else {
            body[k] = v.clone();
        }
    }
    body
}

/// [`onecharge::store::intake::record_batch`] as intake records with the default
/// `intake.max_command_age` (24 h).
pub async fn record_batch(
    store: &onecharge::store::Store,
    consumer: &str,
    records: &[IntakeRecord],
) -> Result<Vec<onecharge::store::intake::Recorded>, sqlx::Error> {
    let max_command_age = onecharge::config::IntakeSettings::default().max_command_age;
    onecharge::store::intake::record_batch(store, consumer, records, max_command_age).await
}

/// What intake records of a fresh attempt's [`command`] with `payment_method` (an order of
/// its own) under a fresh message id: without a `requested_at`, or, when `stale`, requested
/// two days ago, which [`record_batch`] records as too old to charge.
pub fn record(payment_method: &str, stale: bool) -> IntakeRecord {
    let attempt = Uuid::new_v4();
    let requested_at = stale.then(|| {
        (time::OffsetDateTime::now_utc() - time::Duration::days(2))
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    });
    let body = command(
        attempt,
        json!({
            "order_id": format!("ord_{}", &attempt.simple().to_string()[..10]),
            "payment_method": payment_method,
            "description": "Order for a test",
            "requested_at": requested_at,
        }),
    );
    intake_record(&body, &format!("msg-{}", Uuid::new_v4()), Some("corr-test"))
}

/// What intake records of `body` delivered first (stream sequence 1) under `message_id` with
/// `Correlation-Id: correlation_id`, validated as intake validates it.
pub fn intake_record(body: &Value, message_id: &str, correlation_id: Option<&str>) -> IntakeRecord {
    let headers = CommandHeaders {
        message_id: Some(message_id.to_owned()),
        correlation_id: correlation_id.map(str::to_owned),
        traceparent: None,
    };
    let valid = validate(&headers, &serde_json::to_vec(body).unwrap()).expect("a valid command");
    IntakeRecord {
        message_id: valid.message_id,
        stream_sequence: 1,
        body_sha256: valid.body_sha256,
        command: valid.command,
        correlation_id: valid.correlation_id,
        traceparent: valid.traceparent,
    }
}

/// What intake records of `n` fresh attempts of [`command`], each its own order
/// (`ord_<tag>_<i>`) under its own message id (`m-<tag>-<id>`).
pub fn orders(n: usize, tag: &str) -> Vec<IntakeRecord> {
    (0..n)
        .map(|i| {
            let attempt = Uuid::new_v4();
            intake_record(
                &command(attempt, json!({"order_id": format!("ord_{tag}_{i}")})),
                &format!("m-{tag}-{attempt}"),
                None,
            )
        })
        .collect()
}

/// Writes [`command`]`(attempt, patch)` to `fixed.json` in `dir`, for `dlq replay
/// --body-file`; returns its path.
pub fn command_file(dir: &Path, attempt: Uuid, patch: Value) -> PathBuf {
    let path = dir.join("fixed.json");
    std::fs::write(&path, serde_json::to_vec(&command(attempt, patch)).unwrap()).unwrap();
    path
}
