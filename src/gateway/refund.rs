//! A refund's gateway calls, whichever connector runs: the request built once from the
//! refund held under a lease, the refunding call and its lookup. Each connector's wire and
//! answer table sit in its own room (`onecharge::refunds`, `stripe::refunds`).

use crate::domain::GatewayChargeId;
use std::collections::BTreeMap;

use super::{Connector, GatewayCall, GatewayClient};
use crate::domain::refund_call::{RefundLookup, RefundOutcome};
use crate::domain::{HeldRefund, IdempotencyKey, Money, PaymentAttemptId, RefundId};

/// One refund request: every try sends the same one under the same key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRequest {
    pub idempotency_key: IdempotencyKey,
    pub refund_id: RefundId,
    pub payment_attempt_id: PaymentAttemptId,
    /// The charge to refund as the gateway names it (§3 `ch_…`, Stripe `pi_…`).
    pub gateway_charge_id: GatewayChargeId,
    pub money: Money,
    pub reason: String,
    pub metadata: BTreeMap<String, String>,
}

impl From<&HeldRefund> for RefundRequest {
    fn from(held: &HeldRefund) -> Self {
        Self {
            idempotency_key: held.idempotency_key.clone(),
            refund_id: held.refund_id,
            payment_attempt_id: held.payment_attempt_id,
            gateway_charge_id: held.gateway_charge_id.clone(),
            money: held.money,
            reason: held.reason.clone(),
            metadata: held.metadata.clone(),
        }
    }
}

impl GatewayClient {
    /// The refunding call, classified by the connector; never fails (every transport
    /// problem is an outcome). §3: `POST /v1/refunds`. Stripe: `POST /v1/refunds` with the
    /// PaymentIntent. Both under the refund's own key.
    pub async fn refund(&self, request: &RefundRequest) -> GatewayCall<RefundOutcome> {
        match &self.connector {
            Connector::Onecharge(onecharge) => onecharge.refund(&self.transport, request).await,
            Connector::Stripe(stripe) => stripe.refund(&self.transport, request).await,
        }
    }

    /// What the gateway holds for a refund, asked strongly consistently: §3 by its key;
    /// Stripe by listing its PaymentIntent's refunds (each carries `metadata[refund_id]`).
    /// Never refunds.
    pub async fn lookup_refund(&self, request: &RefundRequest) -> GatewayCall<RefundLookup> {
        match &self.connector {
            Connector::Onecharge(onecharge) => {
                onecharge.lookup_refund(&self.transport, request).await
            }
            Connector::Stripe(stripe) => stripe.list_refunds(&self.transport, request).await,
        }
    }
}
