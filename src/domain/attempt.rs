//! The states of a payment attempt (contract §4) and which moves between them are allowed.

use std::fmt;
use std::str::FromStr;

/// Where a payment attempt stands. Stored as text in `payment_attempts.status`; the
/// database's CHECK constraint lists the same values, and rows decode straight into it
/// (`sqlx::Type`), so no status is parsed by hand.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    sqlx::Type,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum AttemptStatus {
    /// Recorded and due for a gateway call (first try or a retry).
    Pending,
    /// Claimed by an executor under a lease; the gateway may be being called right now.
    InFlight,
    /// The gateway charged the customer. Final.
    Succeeded,
    /// The gateway declined the charge. Final.
    Declined,
    /// The gateway may or may not have charged: only a lookup can tell. Owned by the reconciler.
    Unknown,
    /// Nobody can settle it automatically; a person decides.
    NeedsReview,
    /// The command was too old when it arrived; it was never sent to the gateway. Final.
    Expired,
}

impl AttemptStatus {
    /// Every status, for metrics and listings.
    pub const ALL: [AttemptStatus; 7] = [
        Self::Pending,
        Self::InFlight,
        Self::Succeeded,
        Self::Declined,
        Self::Unknown,
        Self::NeedsReview,
        Self::Expired,
    ];

    /// The database and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InFlight => "in_flight",
            Self::Succeeded => "succeeded",
            Self::Declined => "declined",
            Self::Unknown => "unknown",
            Self::NeedsReview => "needs_review",
            Self::Expired => "expired",
        }
    }

    /// Final states never change again and each has exactly one event.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Declined | Self::Expired)
    }

    /// The `<state>` part of the event subject `payments.events.payment-<state>.v1`, for the
    /// states that announce themselves.
    pub fn event_name(self) -> Option<&'static str> {
        match self {
            Self::Succeeded => Some("succeeded"),
            Self::Declined => Some("declined"),
            Self::Expired => Some("expired"),
            Self::NeedsReview => Some("needs-review"),
            _ => None,
        }
    }

    /// Whether contract §4 allows moving from `from` to `to`. `None` as a source is the
    /// creation of the attempt. Every settlement and every operator's resolution is checked
    /// against it before it is written (`IllegalMove::check`), and so is every attempt
    /// intake creates; the moves written by fixed statements are checked by a test.
    pub fn allows(from: Option<Self>, to: Self) -> bool {
        use AttemptStatus::*;
        match from {
            None => matches!(to, Pending | Expired),
            // expired: the command grew too old before it was ever sent, or a person
            // cancelled it unsent; declined: a person cancelled it after its Stripe
            // PaymentIntent was cancelled at the gateway (proof it can never charge)
            Some(Pending) => matches!(to, InFlight | Expired | Declined),
            Some(InFlight) => matches!(to, Succeeded | Declined | Pending | Unknown | NeedsReview),
            Some(Unknown) => matches!(to, Succeeded | Declined | Pending | NeedsReview),
            Some(NeedsReview) => matches!(to, Succeeded | Declined | Pending),
            Some(Succeeded | Declined | Expired) => false,
        }
    }
}

impl fmt::Display for AttemptStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown status string: the database and the code disagree, or an operator mistyped.
#[derive(Debug, thiserror::Error)]
#[error("unknown attempt status `{0}` (expected one of pending, in_flight, succeeded, declined, unknown, needs_review, expired)")]
pub struct UnknownStatus(pub String);

impl FromStr for AttemptStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::AttemptStatus::{self, *};

    #[test]
    fn final_states_admit_no_further_transition() {
        for from in [Succeeded, Declined, Expired] {
            for to in AttemptStatus::ALL {
                assert!(!AttemptStatus::allows(Some(from), to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn an_attempt_is_born_pending_or_expired_only() {
        let born: Vec<_> = AttemptStatus::ALL
            .into_iter()
            .filter(|s| AttemptStatus::allows(None, *s))
            .collect();
        assert_eq!(born, vec![Pending, Expired]);
    }

    #[test]
    fn only_the_reconciler_and_operators_leave_unknown_and_review() {
        assert!(AttemptStatus::allows(Some(Unknown), Pending));
        assert!(!AttemptStatus::allows(Some(Unknown), InFlight));
        assert!(AttemptStatus::allows(Some(NeedsReview), Succeeded));
        assert!(!AttemptStatus::allows(Some(Pending), Succeeded));
        assert!(AttemptStatus::allows(Some(Pending), Declined));
    }

    /// The moves the store writes with a fixed statement rather than a checked write: the
    /// claim, a hand-back, an expired lease, a stale command, intake, a resolution.
    #[test]
    fn every_move_a_fixed_statement_writes_is_allowed() {
        for (from, to) in [
            (Some(Pending), InFlight),
            (Some(InFlight), Pending),
            (Some(InFlight), Unknown),
            (Some(Pending), Expired),
            (None, Pending),
            (None, Expired),
            (Some(NeedsReview), Succeeded),
            (Some(NeedsReview), Declined),
            (Some(NeedsReview), Pending),
        ] {
            assert!(AttemptStatus::allows(from, to), "{from:?} -> {to}");
        }
    }

    #[test]
    fn every_status_round_trips_through_its_name() {
        for s in AttemptStatus::ALL {
            assert_eq!(s.as_str().parse::<AttemptStatus>().unwrap(), s);
        }
        assert!("done".parse::<AttemptStatus>().is_err());
    }
}
