//! Refunds in the §3 dialect (contract §3.4): `POST /v1/refunds` under the refund's key
//! with a JSON body every try repeats, the lookup `GET /v1/refunds?idempotency_key=…`, and
//! the table that reads their answers. Pure where it decides: one unit test per row.

use secrecy::ExposeSecret as _;
use serde::{Deserialize, Serialize};

use super::{gateway_words, Endpoints, ErrorBody};
use crate::domain::outcome::MAX_REASON_CHARS;
use crate::domain::refund_call::{GatewayRefund, GatewayRefundStatus, RefundLookup, RefundOutcome};
use crate::domain::{bounded, CallOperation, RefundId};
use crate::gateway::refund::RefundRequest;
use crate::gateway::wire::{snippet, Answer, GatewayReply};
use crate::gateway::{exchange, GatewayCall, Transport};

/// The body of `POST /v1/refunds`.
#[derive(Debug, Serialize)]
struct RefundBody<'a> {
    charge_id: &'a str,
    amount_minor: i64,
    currency: &'static str,
    reference: String,
    refund_id: String,
    reason: &'a str,
    /// `{"onecharge_deployment": …}` when the client has a deployment name (decision 242).
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<std::collections::BTreeMap<&'static str, &'a str>>,
}

/// A refund as a §3 gateway returns it.
#[derive(Debug, Deserialize)]
struct WireRefund {
    id: String,
    status: String,
    #[serde(default)]
    amount_minor: Option<i64>,
    #[serde(default)]
    currency: Option<String>,
    #[serde(default)]
    refund_id: Option<String>,
    #[serde(default)]
    failure_reason: Option<String>,
}

impl From<WireRefund> for GatewayRefund {
    fn from(wire: WireRefund) -> Self {
        Self {
            id: wire.id,
            status: GatewayRefundStatus::parse(&wire.status),
            amount_minor: wire.amount_minor,
            currency: wire.currency,
            refund_id: wire.refund_id.and_then(|id| id.parse::<RefundId>().ok()),
            failure_reason: wire.failure_reason,
        }
    }
}

impl Endpoints {
    pub(in crate::gateway) async fn refund(
        &self,
        transport: &Transport,
        request: &RefundRequest,
    ) -> GatewayCall<RefundOutcome> {
        let body = RefundBody {
            charge_id: &request.gateway_charge_id,
            amount_minor: request.money.amount_minor(),
            currency: request.money.currency().code(),
            reference: request.payment_attempt_id.to_string(),
            refund_id: request.refund_id.to_string(),
            reason: &request.reason,
            metadata: transport
                .deployment
                .as_ref()
                .map(|d| [(crate::domain::deployment::METADATA_KEY, d.as_str())].into()),
        };
        exchange(
            transport
                .http
                .post(self.refunds_url.clone())
                .bearer_auth(transport.api_key.expose_secret())
                .header("Idempotency-Key", request.idempotency_key.as_str())
                .json(&body),
            CallOperation::Refund,
            None,
            |reply, _| classify_refund(reply),
            RefundOutcome::label,
        )
        .await
    }

    pub(in crate::gateway) async fn lookup_refund(
        &self,
        transport: &Transport,
        request: &RefundRequest,
    ) -> GatewayCall<RefundLookup> {
        exchange(
            transport
                .http
                .get(self.refunds_url.clone())
                .query(&[("idempotency_key", request.idempotency_key.as_str())])
                .bearer_auth(transport.api_key.expose_secret()),
            CallOperation::RefundLookup,
            None,
            |reply, _| classify_refund_lookup(reply),
            RefundLookup::label,
        )
        .await
    }
}

fn error_type(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .and_then(|b| b.error.kind)
}

/// Reads one answer to `POST /v1/refunds` as contract §3.4's table says.
pub fn classify_refund(reply: GatewayReply<'_>) -> RefundOutcome {
    let answer = match reply.refund_answer() {
        Ok(answer) => answer,
        Err(outcome) => return outcome,
    };
    let Answer { status, body, .. } = answer;
    let words = || gateway_words(status, body);
    if let Some(outcome) = answer.common_refund_outcome::<WireRefund>(words) {
        return outcome;
    }
    match status {
        404 if error_type(body).as_deref() == Some("charge_not_found") => {
            RefundOutcome::Refused { reason: words() }
        }
        400 if error_type(body).as_deref() == Some("amount_exceeds_charge") => {
            RefundOutcome::Refused { reason: words() }
        }
        401 | 403 | 300..=399 | 404 | 405 => RefundOutcome::ConfigurationFault { status },
        500..=599 => RefundOutcome::Ambiguous { reason: words() },
        // 422 (the key reused for other parameters), 400 invalid_request, anything the
        // contract does not list: nothing was refunded, and a person must see why.
        _ => RefundOutcome::NeedsReview { reason: words() },
    }
}

#[derive(Deserialize)]
struct LookupBody {
    data: Vec<WireRefund>,
}

/// Reads one answer to `GET /v1/refunds?idempotency_key=…`.
pub fn classify_refund_lookup(reply: GatewayReply<'_>) -> RefundLookup {
    match reply {
        GatewayReply::NotSent { error } | GatewayReply::Lost { error } => RefundLookup::Failed {
            reason: bounded(error, MAX_REASON_CHARS),
        },
        GatewayReply::Answered {
            status: 200, body, ..
        } => match serde_json::from_slice::<LookupBody>(body) {
            Ok(found) => RefundLookup::Found(found.data.into_iter().map(Into::into).collect()),
            Err(err) => RefundLookup::Failed {
                reason: bounded(
                    &format!(
                        "HTTP 200 with an unreadable body ({err}): {}",
                        snippet(body)
                    ),
                    MAX_REASON_CHARS,
                ),
            },
        },
        GatewayReply::Answered {
            status: status @ (401 | 403 | 300..=399 | 404 | 405),
            ..
        } => RefundLookup::ConfigurationFault { status },
        GatewayReply::Answered { status, body, .. } => RefundLookup::Failed {
            reason: gateway_words(status, body),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16, body: &str) -> RefundOutcome {
        classify_refund(GatewayReply::Answered {
            status,
            replayed: false,
            retry_after: None,
            body: body.as_bytes(),
        })
    }

    #[test]
    fn every_row_of_the_refund_table() {
        let refund = r#"{"id":"re_1","status":"succeeded","amount_minor":500,"currency":"EUR","refund_id":"0d9c3b7a-5e21-4c8f-a1b2-7e6f5d4c3b2a"}"#;
        let RefundOutcome::Answered(read) = answered(201, refund) else {
            panic!()
        };
        assert_eq!(read.status, GatewayRefundStatus::Succeeded);
        assert_eq!(
            read.refund_id.unwrap().to_string(),
            "0d9c3b7a-5e21-4c8f-a1b2-7e6f5d4c3b2a"
        );
        let pending = r#"{"id":"re_1","status":"pending"}"#;
        assert_eq!(answered(200, pending).label(), "processing");
        assert_eq!(answered(201, "{}").label(), "ambiguous");
        assert_eq!(answered(503, "").label(), "ambiguous");
        assert_eq!(
            answered(409, r#"{"error":{"type":"idempotency_in_progress"}}"#).label(),
            "retry_later"
        );
        assert_eq!(answered(429, "").label(), "retry_later");
        assert_eq!(
            answered(
                400,
                r#"{"error":{"type":"amount_exceeds_charge","message":"only 200 left"}}"#
            ),
            RefundOutcome::Refused {
                reason: "HTTP 400 amount_exceeds_charge: only 200 left".into()
            }
        );
        assert_eq!(
            answered(404, r#"{"error":{"type":"charge_not_found"}}"#).label(),
            "refused"
        );
        assert_eq!(answered(404, "").label(), "configuration_fault");
        assert_eq!(answered(401, "").label(), "configuration_fault");
        assert_eq!(
            answered(422, r#"{"error":{"type":"idempotency_key_reused"}}"#).label(),
            "needs_review"
        );
        assert_eq!(
            classify_refund(GatewayReply::Lost { error: "timed out" }).label(),
            "ambiguous"
        );
        assert_eq!(
            classify_refund(GatewayReply::NotSent { error: "refused" }).label(),
            "not_sent"
        );
    }

    #[test]
    fn a_lookup_lists_the_refunds_under_the_key() {
        let found = classify_refund_lookup(GatewayReply::Answered {
            status: 200,
            replayed: false,
            retry_after: None,
            body: br#"{"data":[{"id":"re_1","status":"failed","failure_reason":"expired_card"}]}"#,
        });
        let RefundLookup::Found(list) = found else {
            panic!()
        };
        assert_eq!(list[0].status, GatewayRefundStatus::Failed);
        assert_eq!(list[0].failure_reason.as_deref(), Some("expired_card"));
        assert_eq!(
            classify_refund_lookup(GatewayReply::Lost { error: "reset" }).label(),
            "failed"
        );
    }
}
