//! Refunds at Stripe (contract §3.4, [stripe.md](../../../docs/stripe.md)): `POST
//! /v1/refunds` for the stored PaymentIntent under the refund's own key, with
//! `metadata[refund_id]` so that the refund can be told apart from every other refund of
//! the charge; the lookup lists the PaymentIntent's refunds (`GET
//! /v1/refunds?payment_intent=…`), which is strongly consistent, unlike Stripe's search.

use std::collections::HashMap;

use secrecy::ExposeSecret as _;
use serde::Deserialize;

use super::answers::{error_of, words};
use super::{post, Endpoints};
use crate::domain::outcome::{RetryAfter, MAX_REASON_CHARS};
use crate::domain::refund_call::{GatewayRefund, GatewayRefundStatus, RefundLookup, RefundOutcome};
use crate::domain::{bounded, deployment, CallOperation, Currency, Deployment, Money, RefundId};
use crate::gateway::refund::RefundRequest;
use crate::gateway::wire::{snippet, Answer, GatewayReply, Hints};
use crate::gateway::{exchange, GatewayCall, Transport};

/// A Stripe refund; only what onecharge reads.
#[derive(Debug, Deserialize)]
struct StripeRefund {
    id: String,
    status: String,
    #[serde(default)]
    amount: Option<i64>,
    #[serde(default)]
    currency: Option<String>,
    #[serde(default)]
    metadata: HashMap<String, String>,
    #[serde(default)]
    failure_reason: Option<String>,
}

impl From<StripeRefund> for GatewayRefund {
    fn from(refund: StripeRefund) -> Self {
        let currency = refund.currency.as_deref().map(str::to_ascii_uppercase);
        let amount_minor = match (
            refund.amount,
            currency
                .as_deref()
                .and_then(|c| Currency::from_code(c).ok()),
        ) {
            (Some(amount), Some(currency)) => {
                Money::from_stripe(amount, currency).map(|m| m.amount_minor())
            }
            _ => None,
        };
        Self {
            id: refund.id,
            status: GatewayRefundStatus::parse(&refund.status),
            amount_minor,
            currency,
            refund_id: refund
                .metadata
                .get("refund_id")
                .and_then(|id| id.parse::<RefundId>().ok()),
            failure_reason: refund.failure_reason,
        }
    }
}

#[derive(Deserialize)]
struct RefundList {
    data: Vec<StripeRefund>,
    #[serde(default)]
    has_more: bool,
}

/// The refund's form: the PaymentIntent, the amount in Stripe's unit, onecharge's own
/// metadata and the producer's.
fn refund_form(
    request: &RefundRequest,
    deployment: Option<&Deployment>,
) -> Result<Vec<(String, String)>, String> {
    let amount = request.money.to_stripe()?;
    let mut form = vec![
        (
            "payment_intent".to_owned(),
            request.gateway_charge_id.to_string(),
        ),
        ("amount".to_owned(), amount.to_string()),
        (
            "metadata[refund_id]".to_owned(),
            request.refund_id.to_string(),
        ),
        (
            "metadata[payment_attempt_id]".to_owned(),
            request.payment_attempt_id.to_string(),
        ),
        ("metadata[reason]".to_owned(), request.reason.clone()),
    ];
    if let Some(deployment) = deployment {
        form.push((
            format!("metadata[{}]", deployment::METADATA_KEY),
            deployment.to_string(),
        ));
    }
    for (key, value) in &request.metadata {
        form.push((format!("metadata[{key}]"), value.clone()));
    }
    Ok(form)
}

impl Endpoints {
    pub(in crate::gateway) async fn refund(
        &self,
        transport: &Transport,
        request: &RefundRequest,
    ) -> GatewayCall<RefundOutcome> {
        let key = request.idempotency_key.clone();
        let (form, url) = match (
            refund_form(request, transport.deployment.as_ref()),
            self.base.join("v1/refunds"),
        ) {
            (Ok(form), Ok(url)) => (form, url),
            (Err(reason), _) => {
                return GatewayCall::refused_locally(
                    |reason| RefundOutcome::Refused { reason },
                    CallOperation::Refund,
                    None,
                    reason,
                )
            }
            (_, Err(err)) => {
                return GatewayCall::refused_locally(
                    |reason| RefundOutcome::NotSent { reason },
                    CallOperation::Refund,
                    None,
                    err.to_string(),
                )
            }
        };
        exchange(
            post(transport, url, &key, form),
            CallOperation::Refund,
            None,
            classify_refund,
            RefundOutcome::label,
        )
        .await
    }

    pub(in crate::gateway) async fn list_refunds(
        &self,
        transport: &Transport,
        request: &RefundRequest,
    ) -> GatewayCall<RefundLookup> {
        let url = match self.base.join("v1/refunds") {
            Ok(url) => url,
            Err(err) => {
                return GatewayCall::refused_locally(
                    |reason| RefundLookup::Failed { reason },
                    CallOperation::RefundLookup,
                    None,
                    err.to_string(),
                )
            }
        };
        exchange(
            transport
                .http
                .get(url)
                .query(&[
                    ("payment_intent", request.gateway_charge_id.as_str()),
                    ("limit", "100"),
                ])
                .bearer_auth(transport.api_key.expose_secret())
                .header("Stripe-Version", &*transport.stripe_version),
            CallOperation::RefundLookup,
            None,
            move |reply, _| classify_refund_list(reply, request.refund_id),
            RefundLookup::label,
        )
        .await
    }
}

/// Reads one answer to `POST /v1/refunds` (docs/stripe.md, "Refunds").
pub fn classify_refund(reply: GatewayReply<'_>, hints: Hints) -> RefundOutcome {
    let answer = match reply.refund_answer() {
        Ok(answer) => answer,
        Err(outcome) => return outcome,
    };
    let Answer { status, body, .. } = answer;
    let said = || words(status, body, hints);
    if let Some(outcome) = answer.common_refund_outcome::<StripeRefund>(said) {
        return outcome;
    }
    let error = error_of(body);
    match status {
        401 | 403 => RefundOutcome::ConfigurationFault { status },
        _ if error.as_ref().and_then(|e| e.kind.as_deref()) == Some("idempotency_error") => {
            RefundOutcome::NeedsReview { reason: said() }
        }
        // Stripe's own error body: no such PaymentIntent, a charge already refunded, an
        // amount over what is left. Nothing was refunded.
        400 | 402 | 404 if error.is_some() => {
            if hints.should_retry == Some(true) {
                RefundOutcome::RetryLater {
                    after: RetryAfter::Backoff,
                    reason: said(),
                }
            } else {
                RefundOutcome::Refused { reason: said() }
            }
        }
        300..=399 | 404 | 405 => RefundOutcome::ConfigurationFault { status },
        500..=599 => RefundOutcome::Ambiguous { reason: said() },
        _ => RefundOutcome::NeedsReview { reason: said() },
    }
}

/// Reads one page of `GET /v1/refunds?payment_intent=…`: every refund of the charge,
/// onecharge's and others'. A page that does not hold this refund and says there is more
/// proves nothing: a failed lookup, asked again along the schedule.
pub fn classify_refund_list(reply: GatewayReply<'_>, refund_id: RefundId) -> RefundLookup {
    let (status, body) = match reply {
        GatewayReply::NotSent { error } | GatewayReply::Lost { error } => {
            return RefundLookup::Failed {
                reason: bounded(error, MAX_REASON_CHARS),
            }
        }
        GatewayReply::Answered { status, body, .. } => (status, body),
    };
    match status {
        200 => match serde_json::from_slice::<RefundList>(body) {
            Ok(list) => {
                let has_more = list.has_more;
                let refunds: Vec<GatewayRefund> = list.data.into_iter().map(Into::into).collect();
                if has_more && !refunds.iter().any(|r| r.refund_id == Some(refund_id)) {
                    return RefundLookup::Failed {
                        reason: "the PaymentIntent has more than 100 refunds and this one is not among the newest 100".into(),
                    };
                }
                RefundLookup::Found(refunds)
            }
            Err(err) => RefundLookup::Failed {
                reason: bounded(
                    &format!(
                        "HTTP 200 with an unreadable refund list ({err}): {}",
                        snippet(body)
                    ),
                    MAX_REASON_CHARS,
                ),
            },
        },
        401 | 403 | 300..=399 | 405 => RefundLookup::ConfigurationFault { status },
        404 if error_of(body).is_none() => RefundLookup::ConfigurationFault { status },
        _ => RefundLookup::Failed {
            reason: words(status, body, Hints::default()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::GatewayChargeId;

    fn answered(status: u16, body: &str) -> RefundOutcome {
        classify_refund(
            GatewayReply::Answered {
                status,
                replayed: false,
                retry_after: None,
                body: body.as_bytes(),
            },
            Hints::default(),
        )
    }

    #[test]
    fn every_row_of_the_stripe_refund_table() {
        let refund = |status: &str| {
            format!(
                r#"{{"id":"re_1","object":"refund","status":"{status}","amount":1999,"currency":"eur","metadata":{{"refund_id":"0d9c3b7a-5e21-4c8f-a1b2-7e6f5d4c3b2a"}}}}"#
            )
        };
        let RefundOutcome::Answered(read) = answered(200, &refund("succeeded")) else {
            panic!()
        };
        assert_eq!(read.amount_minor, Some(1999));
        assert_eq!(read.currency.as_deref(), Some("EUR"));
        assert!(read.refund_id.is_some());
        assert_eq!(answered(200, &refund("pending")).label(), "processing");
        assert_eq!(
            answered(200, &refund("requires_action")).label(),
            "processing"
        );
        assert_eq!(answered(200, &refund("failed")).label(), "failed");
        assert_eq!(answered(200, &refund("canceled")).label(), "failed");
        let already = r#"{"error":{"type":"invalid_request_error","code":"charge_already_refunded","message":"Charge ch_1 has already been refunded."}}"#;
        assert_eq!(answered(400, already).label(), "refused");
        let missing = r#"{"error":{"type":"invalid_request_error","code":"resource_missing"}}"#;
        assert_eq!(answered(404, missing).label(), "refused");
        assert_eq!(answered(404, "").label(), "configuration_fault");
        let reused = r#"{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}"#;
        assert_eq!(answered(400, reused).label(), "needs_review");
        assert_eq!(answered(409, "").label(), "retry_later");
        assert_eq!(answered(500, "").label(), "ambiguous");
        assert_eq!(answered(401, "").label(), "configuration_fault");
    }

    #[test]
    fn a_list_that_may_hide_the_refund_proves_nothing() {
        let ours: RefundId = "0d9c3b7a-5e21-4c8f-a1b2-7e6f5d4c3b2a".parse().unwrap();
        let page = |has_more: bool| {
            format!(
                r#"{{"object":"list","data":[{{"id":"re_other","status":"succeeded","amount":100,"currency":"eur","metadata":{{}}}}],"has_more":{has_more}}}"#
            )
        };
        let read = |body: &str| {
            classify_refund_list(
                GatewayReply::Answered {
                    status: 200,
                    replayed: false,
                    retry_after: None,
                    body: body.as_bytes(),
                },
                ours,
            )
        };
        let RefundLookup::Found(found) = read(&page(false)) else {
            panic!()
        };
        assert_eq!(found[0].refund_id, None);
        assert_eq!(read(&page(true)).label(), "failed");
    }

    #[test]
    fn the_form_carries_the_refund_id_and_the_producers_metadata() {
        let refund_id = RefundId::random();
        let request = RefundRequest {
            idempotency_key: crate::domain::IdempotencyKey::for_refund(refund_id),
            refund_id,
            payment_attempt_id: crate::domain::PaymentAttemptId::random(),
            gateway_charge_id: GatewayChargeId::from_gateway("pi_1"),
            money: Money::of(1000, "JPY").unwrap(),
            reason: "returned".into(),
            metadata: [("return_id".to_owned(), "ret_1".to_owned())].into(),
        };
        let form = refund_form(&request, Deployment::parse("eu").ok().as_ref()).unwrap();
        let get = |k: &str| {
            form.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("payment_intent"), Some("pi_1"));
        assert_eq!(get("amount"), Some("1000"));
        assert_eq!(
            get("metadata[refund_id]"),
            Some(refund_id.to_string().as_str())
        );
        assert_eq!(get("metadata[return_id]"), Some("ret_1"));
        assert_eq!(get("metadata[onecharge_deployment]"), Some("eu"));
    }
}
