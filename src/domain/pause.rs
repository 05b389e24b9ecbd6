//! What a fleet pause holds back (issue 54, decision 265): every movement of money, charges
//! only or refunds only, and of those optionally one currency only. One rule decides whether
//! a pause covers a charge or a refund, so the executor's hand-back of what it claimed ahead
//! and the words every face prints agree with the claim statements' own test
//! (`store::fleet::HELD_CHARGE`, `store::fleet::HELD_REFUND`).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Currency;

/// Which kind of money movement a pause stops.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    sqlx::Type,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum PauseScope {
    /// Charges and refunds: the fleet-wide pause of decision 145, and the default.
    All,
    Charges,
    Refunds,
}

/// A scope that is not `all`, `charges` or `refunds`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("scope `{0}` is not one of all, charges, refunds")]
pub struct UnknownScope(pub String);

impl PauseScope {
    /// Every scope, in the order status lines list them (and the gauge labels them).
    pub const ALL: [Self; 3] = [Self::All, Self::Charges, Self::Refunds];

    /// As stored in `fleet_pauses.scope` and written on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Charges => "charges",
            Self::Refunds => "refunds",
        }
    }

    fn stops(self, movement: Movement) -> bool {
        matches!(
            (self, movement),
            (Self::All, _) | (Self::Charges, Movement::Charge) | (Self::Refunds, Movement::Refund)
        )
    }
}

impl std::str::FromStr for PauseScope {
    type Err = UnknownScope;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|scope| scope.as_str() == text)
            .ok_or_else(|| UnknownScope(text.to_owned()))
    }
}

/// A movement of money a pause may hold back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Movement {
    Charge,
    Refund,
}

/// What one pause holds back: a scope, and within it every currency or only one. At most one
/// pause is open per cover (the unique index `fleet_pauses_one_open_per_scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PauseCover {
    pub scope: PauseScope,
    /// `None`: every currency.
    pub currency: Option<Currency>,
}

impl PauseCover {
    /// The fleet-wide pause: everything, in every currency.
    pub const EVERYTHING: Self = Self {
        scope: PauseScope::All,
        currency: None,
    };

    /// Whether this pause holds back a `movement` of money in `currency`: its scope takes the
    /// movement's kind, and it names no currency or this one.
    pub fn holds(&self, movement: Movement, currency: Currency) -> bool {
        self.scope.stops(movement) && self.currency.is_none_or(|own| own == currency)
    }
}

/// What a person reads: `charging and refunds`, `charging`, `refunds`, each followed by
/// ` in ISK` when the pause names a currency.
impl fmt::Display for PauseCover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.scope {
            PauseScope::All => "charging and refunds",
            PauseScope::Charges => "charging",
            PauseScope::Refunds => "refunds",
        })?;
        match self.currency {
            Some(currency) => write!(f, " in {currency}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cover(scope: PauseScope, currency: Option<&str>) -> PauseCover {
        PauseCover {
            scope,
            currency: currency.map(|c| Currency::from_code(c).unwrap()),
        }
    }

    #[test]
    fn a_pause_holds_its_scopes_movements_in_its_currency_or_in_every_one() {
        use Movement::{Charge, Refund};
        use PauseScope::{All, Charges, Refunds};
        // (scope, currency of the pause, movement, currency of the movement, held)
        let table = [
            (All, None, Charge, "EUR", true),
            (All, None, Refund, "ISK", true),
            (All, Some("ISK"), Charge, "ISK", true),
            (All, Some("ISK"), Refund, "ISK", true),
            (All, Some("ISK"), Charge, "EUR", false),
            (Charges, None, Charge, "EUR", true),
            (Charges, None, Refund, "EUR", false),
            (Charges, Some("ISK"), Charge, "ISK", true),
            (Charges, Some("ISK"), Charge, "EUR", false),
            (Charges, Some("ISK"), Refund, "ISK", false),
            (Refunds, None, Refund, "EUR", true),
            (Refunds, None, Charge, "EUR", false),
            (Refunds, Some("JPY"), Refund, "JPY", true),
            (Refunds, Some("JPY"), Refund, "EUR", false),
        ];
        for (scope, own, movement, currency, held) in table {
            let pause = cover(scope, own);
            let currency = Currency::from_code(currency).unwrap();
            assert_eq!(
                pause.holds(movement, currency),
                held,
                "{pause} holds a {movement:?} in {currency}"
            );
        }
    }

    #[test]
    fn a_scope_is_read_as_it_is_written_and_nothing_else() {
        for scope in PauseScope::ALL {
            assert_eq!(scope.as_str().parse::<PauseScope>(), Ok(scope));
        }
        for wrong in ["", "Charges", "charge", "everything", " all"] {
            assert!(wrong.parse::<PauseScope>().is_err(), "{wrong:?}");
        }
    }

    #[test]
    fn a_cover_says_what_it_holds_back_in_words() {
        assert_eq!(PauseCover::EVERYTHING.to_string(), "charging and refunds");
        assert_eq!(
            cover(PauseScope::Charges, Some("ISK")).to_string(),
            "charging in ISK"
        );
        assert_eq!(cover(PauseScope::Refunds, None).to_string(), "refunds");
    }
}
