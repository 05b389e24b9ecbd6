//! What a charge request is before any connector sends it: built once from the stored
//! attempt, under the attempt's [`IdempotencyKey`], so every try sends the same bytes
//! under the same key (or the same keys derived from it).

use serde::Serialize;

use crate::domain::{
    deployment, Deployment, GatewayObjectId, IdempotencyKey, KeySeq, Money, PaymentAttemptId,
};

/// The body of `POST /v1/charges`, in the contract's field order. Built from the stored
/// attempt only, so every try serialises to the same bytes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ChargeBody {
    /// `amount_minor` and `currency`, in the contract's place.
    #[serde(flatten)]
    pub money: Money,
    pub customer_id: String,
    pub payment_method: String,
    /// The `payment_attempt_id`, which an operator searches the gateway for.
    pub reference: PaymentAttemptId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A charge ready to send: the stored idempotency key, the serialised §3 body, and what
/// other connectors need besides (the order id, the gateway object stored for the attempt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeRequest {
    pub idempotency_key: IdempotencyKey,
    body: Vec<u8>,
    pub(super) charge: ChargeBody,
    pub(super) order_id: Option<String>,
    pub(super) gateway_object_id: Option<GatewayObjectId>,
    /// Which derived key each step sends (`payment_attempts.create_key_seq`,
    /// `confirm_key_seq`; Stripe): 1 is the first.
    pub(super) key_seq: KeySeq,
}

impl ChargeRequest {
    /// Serialises `body` once; the bytes are what every try sends.
    pub fn new(idempotency_key: IdempotencyKey, body: &ChargeBody) -> Self {
        Self {
            idempotency_key,
            body: serde_json::to_vec(body).expect("a charge body always serialises"),
            charge: body.clone(),
            order_id: None,
            gateway_object_id: None,
            key_seq: KeySeq::default(),
        }
    }

    /// The derived keys' sequence numbers stored with the attempt.
    pub fn with_key_seq(mut self, key_seq: KeySeq) -> Self {
        self.key_seq = key_seq;
        self
    }

    /// The attempt's order id (Stripe carries it in the PaymentIntent's metadata; the §3
    /// body has no place for it, so its bytes do not change).
    pub fn for_order(mut self, order_id: impl Into<String>) -> Self {
        self.order_id = Some(order_id.into());
        self
    }

    /// The gateway object stored for the attempt (`payment_attempts.gateway_object_id`,
    /// Stripe's PaymentIntent id), if one was: then nothing is prepared again.
    pub fn with_gateway_object(mut self, id: Option<GatewayObjectId>) -> Self {
        self.gateway_object_id = id;
        self
    }

    /// The exact bytes sent to a §3 gateway by a client with no deployment name.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The exact bytes sent to a §3 gateway by a client making its calls for `deployment`:
    /// the body, then `"metadata": {"onecharge_deployment": …}` (decision 242). The same
    /// bytes on every try, as long as the setting is the same.
    pub fn body_for(&self, deployment: Option<&Deployment>) -> std::borrow::Cow<'_, [u8]> {
        let Some(deployment) = deployment else {
            return std::borrow::Cow::Borrowed(&self.body);
        };
        #[derive(Serialize)]
        struct WithMetadata<'a> {
            #[serde(flatten)]
            charge: &'a ChargeBody,
            metadata: std::collections::BTreeMap<&'static str, &'a str>,
        }
        let body = WithMetadata {
            charge: &self.charge,
            metadata: [(deployment::METADATA_KEY, deployment.as_str())].into(),
        };
        std::borrow::Cow::Owned(serde_json::to_vec(&body).expect("a charge body always serialises"))
    }

    /// The charge's fields.
    pub fn charge(&self) -> &ChargeBody {
        &self.charge
    }

    /// The stored gateway object, if any.
    pub fn gateway_object_id(&self) -> Option<&str> {
        self.gateway_object_id.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charge_body_is_the_contracts_shape_and_stable() {
        let body = ChargeBody {
            money: Money::of(1999, "EUR").unwrap(),
            customer_id: "cus_42".into(),
            payment_method: "pm_card_visa".into(),
            reference: "6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11".parse().unwrap(),
            description: Some("Order ord_1001".into()),
        };
        let request = ChargeRequest::new(IdempotencyKey::for_test("onecharge-x"), &body);
        assert_eq!(
            std::str::from_utf8(request.body()).unwrap(),
            r#"{"amount_minor":1999,"currency":"EUR","customer_id":"cus_42","payment_method":"pm_card_visa","reference":"6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11","description":"Order ord_1001"}"#
        );
        assert_eq!(
            ChargeRequest::new(IdempotencyKey::for_test("onecharge-x"), &body),
            request
        );
        assert_eq!(&*request.body_for(None), request.body());
        let eu = Deployment::parse("eu").unwrap();
        assert_eq!(
            std::str::from_utf8(&request.body_for(Some(&eu))).unwrap(),
            r#"{"amount_minor":1999,"currency":"EUR","customer_id":"cus_42","payment_method":"pm_card_visa","reference":"6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11","description":"Order ord_1001","metadata":{"onecharge_deployment":"eu"}}"#
        );
    }
}
