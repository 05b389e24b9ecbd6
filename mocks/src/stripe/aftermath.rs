//! What happens to a PaymentIntent's charge after it succeeded: refunds and disputes, as
//! the Dashboard's controls (`POST /__stripe/payment_intents/{id}/refund|dispute`) make them.

use std::collections::HashMap;

use parking_lot::Mutex;

/// What happened to a PaymentIntent's charge after it succeeded.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Aftermath {
    pub(crate) amount_refunded: i64,
    pub(crate) disputed: bool,
}

/// The aftermath of each PaymentIntent, by id.
#[derive(Default)]
pub(crate) struct Aftermaths(pub(super) Mutex<HashMap<String, Aftermath>>);

impl Aftermaths {
    pub(crate) fn get(&self, id: &str) -> Aftermath {
        self.0.lock().get(id).copied().unwrap_or_default()
    }
}
