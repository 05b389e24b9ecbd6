//! The executor's metrics (the gateway client counts its own calls). Labels are bounded: operation, outcome,
//! state, kind — never attempt, message or customer ids.

use crate::domain::AttemptStatus;
use crate::domain::ChargeClaim;

/// Attempts claimed, by kind (`dispatch`: will be sent; `hand_over`: past its retry window).
pub(super) fn claimed(claimed: &[ChargeClaim]) {
    let hand_overs = claimed.iter().filter(|a| !a.dispatch).count() as u64;
    let dispatches = claimed.len() as u64 - hand_overs;
    metrics::counter!("onecharge_executor_claims_total", "kind" => "dispatch")
        .increment(dispatches);
    metrics::counter!("onecharge_executor_claims_total", "kind" => "hand_over")
        .increment(hand_overs);
}

/// An attempt's result written, by the state it moved to.
pub(super) fn settled(state: AttemptStatus) {
    metrics::counter!("onecharge_executor_settlements_total", "state" => state.as_str())
        .increment(1);
}

/// A late result refused by the fencing token.
pub(super) fn fenced() {
    metrics::counter!("onecharge_executor_fenced_writes_total").increment(1);
}

/// A result the database would not take; the reconciler will settle the attempt.
pub(super) fn unrecorded() {
    metrics::counter!("onecharge_executor_unrecorded_results_total").increment(1);
}

/// Attempts claimed and handed back unsent (claimed ahead, then the gateway health held
/// calls, the lease ran short, or the executor stopped).
pub(super) fn handed_back(attempts: usize) {
    metrics::counter!("onecharge_executor_handed_back_total").increment(attempts as u64);
}
