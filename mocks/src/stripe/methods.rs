//! Stripe's test payment methods (`pm_card_…`) and the mock's own fault triggers
//! (`pm_fault_…`), and what confirming a PaymentIntent with each does.

use crate::charge::{fault_trigger, payment_methods as onecharge};

/// Payment method ids the Stripe dialect knows; any other id is `400 resource_missing`,
/// as at Stripe, where a payment method must exist.
///
/// The `pm_card_…` ids are Stripe's own test payment methods, with the outcomes Stripe's
/// testing page gives them. The `pm_fault_…` ids are the mock's fault triggers (the same
/// ids as the onecharge dialect's, see [`crate::payment_methods`]): each fires on the first
/// request under an idempotency key that charges with it; the card behind them succeeds.
pub mod payment_methods {
    /// Visa, succeeds.
    pub const CARD_VISA: &str = "pm_card_visa";
    /// Visa debit, succeeds.
    pub const CARD_VISA_DEBIT: &str = "pm_card_visa_debit";
    /// Mastercard, succeeds.
    pub const CARD_MASTERCARD: &str = "pm_card_mastercard";
    /// American Express, succeeds.
    pub const CARD_AMEX: &str = "pm_card_amex";
    /// Declined: `card_declined`, `decline_code` `generic_decline`.
    pub const CARD_VISA_CHARGE_DECLINED: &str = "pm_card_visa_chargeDeclined";
    /// Declined: `card_declined`, `decline_code` `generic_decline`.
    pub const CARD_CHARGE_DECLINED: &str = "pm_card_chargeDeclined";
    /// Declined: `card_declined`, `decline_code` `insufficient_funds`.
    pub const CARD_CHARGE_DECLINED_INSUFFICIENT_FUNDS: &str =
        "pm_card_chargeDeclinedInsufficientFunds";
    /// Declined: `card_declined`, `decline_code` `insufficient_funds`.
    pub const CARD_VISA_CHARGE_DECLINED_INSUFFICIENT_FUNDS: &str =
        "pm_card_visa_chargeDeclinedInsufficientFunds";
    /// Declined: `card_declined`, `decline_code` `lost_card`.
    pub const CARD_CHARGE_DECLINED_LOST_CARD: &str = "pm_card_chargeDeclinedLostCard";
    /// Declined: `card_declined`, `decline_code` `stolen_card`.
    pub const CARD_CHARGE_DECLINED_STOLEN_CARD: &str = "pm_card_chargeDeclinedStolenCard";
    /// Declined: code and `decline_code` `expired_card`.
    pub const CARD_CHARGE_DECLINED_EXPIRED_CARD: &str = "pm_card_chargeDeclinedExpiredCard";
    /// Declined: code and `decline_code` `incorrect_cvc`.
    pub const CARD_CHARGE_DECLINED_INCORRECT_CVC: &str = "pm_card_chargeDeclinedIncorrectCvc";
    /// Declined: code and `decline_code` `processing_error`.
    pub const CARD_CHARGE_DECLINED_PROCESSING_ERROR: &str = "pm_card_chargeDeclinedProcessingError";
    /// Succeeds; each refund of it starts `pending`, then succeeds after
    /// `refund_settle_after` (Stripe's test card of the same name).
    pub const CARD_PENDING_REFUND: &str = crate::payment_methods::PENDING_REFUND;
    /// Succeeds; each refund of it starts `succeeded`, then fails after
    /// `refund_settle_after` with `failure_reason: "expired_or_canceled_card"` (Stripe's
    /// test card of the same name).
    pub const CARD_REFUND_FAIL: &str = crate::payment_methods::REFUND_FAIL;
    /// Needs 3D Secure on every payment: off-session a `402 authentication_required`
    /// decline, on-session `requires_action`.
    pub const CARD_AUTHENTICATION_REQUIRED: &str = "pm_card_authenticationRequired";
    /// Mock-specific: the PaymentIntent answers `processing`, stays so for
    /// `slow_charge_for` (or until `finish_slow_charges`), then succeeds.
    pub const FAULT_PROCESSING: &str = "pm_fault_processing";
    /// Mock-specific: the confirm leaves the PaymentIntent `requires_action` even
    /// off-session (a bank that wants the absent customer to authenticate); it charges only
    /// if the customer acts, and a cancel ends it.
    pub const FAULT_REQUIRES_ACTION: &str = "pm_fault_requires_action";
}

/// What confirming with a payment method does, faults aside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CardOutcome {
    Succeeds,
    /// `402 card_error` with this `code` and `decline_code`.
    Declined {
        code: &'static str,
        decline_code: &'static str,
    },
    /// 3D Secure: declined off-session, `requires_action` on-session.
    AuthenticationRequired,
    /// `processing`, then succeeded.
    Processing,
    /// `requires_action`, on-session or off.
    RequiresAction,
}

/// The outcome of a known payment method, `None` for an unknown one.
pub(crate) fn card_outcome(payment_method: &str) -> Option<CardOutcome> {
    use payment_methods::*;
    let declined = |code, decline_code| Some(CardOutcome::Declined { code, decline_code });
    match payment_method {
        CARD_VISA | CARD_VISA_DEBIT | CARD_MASTERCARD | CARD_AMEX | CARD_PENDING_REFUND
        | CARD_REFUND_FAIL => Some(CardOutcome::Succeeds),
        CARD_VISA_CHARGE_DECLINED | CARD_CHARGE_DECLINED => {
            declined("card_declined", "generic_decline")
        }
        CARD_CHARGE_DECLINED_INSUFFICIENT_FUNDS | CARD_VISA_CHARGE_DECLINED_INSUFFICIENT_FUNDS => {
            declined("card_declined", "insufficient_funds")
        }
        CARD_CHARGE_DECLINED_LOST_CARD => declined("card_declined", "lost_card"),
        CARD_CHARGE_DECLINED_STOLEN_CARD => declined("card_declined", "stolen_card"),
        CARD_CHARGE_DECLINED_EXPIRED_CARD => declined("expired_card", "expired_card"),
        CARD_CHARGE_DECLINED_INCORRECT_CVC => declined("incorrect_cvc", "incorrect_cvc"),
        CARD_CHARGE_DECLINED_PROCESSING_ERROR => declined("processing_error", "processing_error"),
        CARD_AUTHENTICATION_REQUIRED => Some(CardOutcome::AuthenticationRequired),
        FAULT_PROCESSING => Some(CardOutcome::Processing),
        FAULT_REQUIRES_ACTION => Some(CardOutcome::RequiresAction),
        // The fault triggers, the one that exists only in the onecharge dialect's sense
        // (`pm_fault_bad_request` is one too) included: the card behind them succeeds.
        other if fault_trigger(other).is_some() => Some(CardOutcome::Succeeds),
        _ => None,
    }
}

/// Whether an id is one of the onecharge dialect's decline methods, which Stripe does not
/// have: the error then names the Stripe equivalent.
pub(crate) fn stripe_equivalent(payment_method: &str) -> Option<&'static str> {
    match payment_method {
        onecharge::CARD_DECLINED => Some(payment_methods::CARD_VISA_CHARGE_DECLINED),
        onecharge::INSUFFICIENT_FUNDS => {
            Some(payment_methods::CARD_CHARGE_DECLINED_INSUFFICIENT_FUNDS)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_trigger_is_a_known_method_whose_card_succeeds() {
        for trigger in [
            crate::payment_methods::FAULT_ERROR_BEFORE,
            crate::payment_methods::FAULT_ERROR_AFTER,
            crate::payment_methods::FAULT_HANG_AFTER,
            crate::payment_methods::FAULT_DROP_AFTER,
            crate::payment_methods::FAULT_RATE_LIMIT,
            crate::payment_methods::FAULT_BAD_REQUEST,
            crate::payment_methods::FAULT_SLOW_CHARGE,
        ] {
            assert_eq!(
                card_outcome(trigger),
                Some(CardOutcome::Succeeds),
                "{trigger}"
            );
        }
        assert_eq!(card_outcome("pm_card_unknown"), None);
        assert_eq!(
            stripe_equivalent("pm_card_declined"),
            Some("pm_card_visa_chargeDeclined")
        );
    }
}
