//! What happens to a PaymentIntent's charge after it succeeded: its dispute, as the
//! Dashboard's control (`POST /__stripe/payment_intents/{id}/dispute`) makes it, and its
//! refunds as Stripe shows them (the refunds themselves are in the refund ledger,
//! `crate::refund::ledger`, whichever way they were made).

use std::collections::HashMap;

use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::refund::Refund;

/// Every `status` a Stripe dispute takes (docs.stripe.com/api/disputes/object): an inquiry
/// (`warning_*`) or a chargeback waiting for evidence or a decision, then `won` or `lost`.
pub(crate) const DISPUTE_STATUSES: [&str; 8] = [
    "warning_needs_response",
    "warning_under_review",
    "warning_closed",
    "needs_response",
    "under_review",
    "won",
    "lost",
    "prevented",
];

/// The statuses a dispute ends in: moving to one is `charge.dispute.closed`.
pub(crate) const CLOSED_DISPUTE_STATUSES: [&str; 4] =
    ["won", "lost", "warning_closed", "prevented"];

/// What happened to a PaymentIntent's charge after it succeeded, as its charge object
/// shows it (`Store::aftermath`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Aftermath {
    /// The refunds `pending` or `succeeded`, from the refund ledger.
    pub(crate) amount_refunded: i64,
    /// A charge has at most one dispute; its status moves, it is never replaced.
    pub(crate) dispute: Option<Dispute>,
}

/// A charge's dispute, as far as the mock keeps one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dispute {
    /// `dp_…`.
    pub(crate) id: String,
    /// One of [`DISPUTE_STATUSES`].
    pub(crate) status: String,
    /// Unix seconds.
    pub(crate) created: i64,
}

/// The dispute of each PaymentIntent's charge, by PaymentIntent id.
#[derive(Default)]
pub(crate) struct Disputes(pub(super) Mutex<HashMap<String, Dispute>>);

impl Disputes {
    pub(crate) fn get(&self, id: &str) -> Option<Dispute> {
        self.0.lock().get(id).cloned()
    }

    /// Every dispute with the id of its PaymentIntent, newest first.
    pub(crate) fn all(&self) -> Vec<(String, Dispute)> {
        let mut all: Vec<(String, Dispute)> = self
            .0
            .lock()
            .iter()
            .map(|(pi, dispute)| (pi.clone(), dispute.clone()))
            .collect();
        all.sort_by(|a, b| (b.1.created, &b.1.id).cmp(&(a.1.created, &a.1.id)));
        all
    }
}

/// A refund as Stripe answers it (docs.stripe.com/api/refunds/object): `charge` is the
/// PaymentIntent's charge `ch_…`, `payment_intent` the ledger's id it refunds.
pub(crate) fn refund_object(refund: &Refund, charge: Option<&str>) -> Value {
    json!({
        "id": refund.id,
        "object": "refund",
        "amount": refund.amount_minor,
        "currency": refund.currency,
        "payment_intent": refund.charge_id,
        "charge": charge,
        "status": refund.status,
        "metadata": refund.metadata,
        "failure_reason": refund.failure_reason,
        "reason": refund.reason,
        "created": refund.created_at.unix_timestamp(),
        "livemode": false,
    })
}
