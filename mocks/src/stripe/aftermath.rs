//! What happens to a PaymentIntent's charge after it succeeded: refunds and a dispute, as
//! the Dashboard's controls (`POST /__stripe/payment_intents/{id}/refund|dispute`) make them.

use std::collections::HashMap;

use parking_lot::Mutex;

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

/// What happened to a PaymentIntent's charge after it succeeded.
#[derive(Debug, Clone, Default)]
pub(crate) struct Aftermath {
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

/// The aftermath of each PaymentIntent, by id.
#[derive(Default)]
pub(crate) struct Aftermaths(pub(super) Mutex<HashMap<String, Aftermath>>);

impl Aftermaths {
    pub(crate) fn get(&self, id: &str) -> Aftermath {
        self.0.lock().get(id).cloned().unwrap_or_default()
    }

    /// Every dispute with the id of its PaymentIntent, newest first.
    pub(crate) fn disputes(&self) -> Vec<(String, Dispute)> {
        let mut all: Vec<(String, Dispute)> = self
            .0
            .lock()
            .iter()
            .filter_map(|(pi, aftermath)| Some((pi.clone(), aftermath.dispute.clone()?)))
            .collect();
        all.sort_by(|a, b| (b.1.created, &b.1.id).cmp(&(a.1.created, &a.1.id)));
        all
    }
}
