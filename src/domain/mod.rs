//! The pure core of onecharge: what a valid command is, which states an attempt may take,
//! how a gateway answer is read, where an attempt goes after it, and what an event says. Nothing in here does I/O, so every
//! rule can be tested without a database, a broker or a gateway.

pub mod actor;
pub mod attempt;
pub mod call;
pub mod command;
pub mod deployment;
pub mod event;
pub mod finding;
pub mod held;
pub mod ids;
pub mod json_schema;
pub mod lease;
pub mod listing;
pub mod lookup;
pub mod money;
pub mod outcome;
pub mod pause;
pub mod refund;
pub mod refund_call;
pub mod refund_event;
pub mod retry;
pub mod settlement;

pub use actor::Actor;
pub use attempt::AttemptStatus;
pub use command::{ChargePayment, CommandHeaders, InvalidCommand, ValidCommand};
pub use deployment::Deployment;
pub use event::{Announced, EventAttempt, PaymentEvent};
pub use held::{ChargeClaim, HeldAttempt};
pub use ids::{
    GatewayChargeId, GatewayObjectId, IdempotencyKey, KeySeq, MessageId, PaymentAttemptId, RefundId,
};
pub use lease::LeaseToken;
pub use money::{Currency, Money};
pub use pause::{Movement, PauseCover, PauseScope};
pub use refund::{HeldRefund, RefundPayment, RefundStatus, ValidRefund};
pub use retry::RetryWindow;
pub use settlement::{
    CallOperation, Fence, GatewayCallRecord, IllegalMove, SettleWrite, Settlement, TransitionCause,
};

/// Cuts `text` to at most `max` characters (on a character boundary), so that reasons and
/// errors stored or sent on the wire stay bounded whatever an upstream system said.
pub fn bounded(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::bounded;

    #[test]
    fn bounded_text_never_exceeds_its_limit_and_marks_the_cut() {
        assert_eq!(bounded("short", 10), "short");
        let cut = bounded(&"é".repeat(600), 512);
        assert_eq!(cut.chars().count(), 512);
        assert!(cut.ends_with('…'));
    }
}
