//! An amount of money as contract §2.1 states it: minor units and an ISO 4217 code. The two
//! travel together everywhere (the command, the attempt row, the event, the listings), so
//! they are one value, and the value knows what its currency means: how many decimals its
//! minor unit has (to print it), and how Stripe counts it (to send it and read it back).

use std::fmt;

use serde::{Deserialize, Serialize};

/// An ISO 4217 currency, known to the code list and spelled in upper case. Parsed once, at
/// the edge (a command, a stored row); from then on it cannot be misspelled, and it knows
/// its exponent. Serialised and stored as its three-letter code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency(iso_currency::Currency);

/// A code that is not an ISO 4217 alphabetic code in upper case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("currency `{0}` is not an ISO 4217 alphabetic code")]
pub struct UnknownCurrency(pub String);

/// Stripe's zero-decimal currencies (docs.stripe.com/currencies#zero-decimal): the amount
/// is in whole units. UGX is on Stripe's list too, but its special case governs a charge:
/// like ISK (docs.stripe.com/currencies#special-cases) it "transitioned to a zero-decimal
/// currency, but backwards compatibility requires you to represent it as a two-decimal
/// value, where the decimal amount is always 00", so both are left out here and count as
/// two-decimal. HUF and TWD, the other special cases, are zero-decimal for payouts only:
/// a charge is two-decimal, as ISO counts them.
const STRIPE_ZERO_DECIMAL: [&str; 15] = [
    "BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "VND", "VUV", "XAF",
    "XOF", "XPF",
];

/// Stripe's three-decimal currencies: the amount is in thousandths and its last digit must
/// be 0 (docs.stripe.com/currencies#three-decimal).
const STRIPE_THREE_DECIMAL: [&str; 5] = ["BHD", "JOD", "KWD", "OMR", "TND"];

impl Currency {
    /// The currency `code` names: upper case and on the ISO 4217 list.
    pub fn from_code(code: &str) -> Result<Self, UnknownCurrency> {
        iso_currency::Currency::from_code(code)
            .filter(|_| code.bytes().all(|b| b.is_ascii_uppercase()))
            .map(Self)
            .ok_or_else(|| UnknownCurrency(code.to_owned()))
    }

    /// The code as Stripe writes it (lower case) read back: any case.
    pub fn from_any_case(code: &str) -> Result<Self, UnknownCurrency> {
        Self::from_code(&code.to_ascii_uppercase())
    }

    /// The three-letter code.
    pub fn code(self) -> &'static str {
        self.0.code()
    }

    /// The ISO 4217 entry, for the rules that need its flags (active, special).
    pub fn iso(self) -> iso_currency::Currency {
        self.0
    }

    /// How many decimals the minor unit has (ISO 4217): `amount_minor` counts in
    /// `10^-exponent` of a unit. A currency without a minor unit counts whole units.
    pub fn exponent(self) -> u32 {
        self.0.exponent().map_or(0, u32::from)
    }

    /// How many decimals Stripe's `amount` has in this currency (its exponent at Stripe),
    /// which is not always ISO's: ISK and UGX are two-decimal at Stripe (for backwards
    /// compatibility, last two digits 00), MGA zero-decimal. Every amount onecharge sends
    /// to Stripe or reads from it (a charge, a refund, a listed or retrieved
    /// PaymentIntent's `amount` and its charge's `amount_refunded`) goes through
    /// [`Money::to_stripe`] and [`Money::from_stripe`], which read it here.
    pub fn stripe_decimals(self) -> u32 {
        let code = self.code();
        if STRIPE_ZERO_DECIMAL.contains(&code) {
            0
        } else if STRIPE_THREE_DECIMAL.contains(&code) {
            3
        } else {
            2
        }
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl std::str::FromStr for Currency {
    type Err = UnknownCurrency;

    fn from_str(code: &str) -> Result<Self, Self::Err> {
        Self::from_code(code)
    }
}

impl PartialEq<str> for Currency {
    fn eq(&self, other: &str) -> bool {
        self.code() == other
    }
}

impl PartialEq<&str> for Currency {
    fn eq(&self, other: &&str) -> bool {
        self.code() == *other
    }
}

impl Serialize for Currency {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.code())
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::from_code(&code).map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Currency {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Currency".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(generator)
    }
}

impl sqlx::Type<sqlx::Postgres> for Currency {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <&str as sqlx::Type<sqlx::Postgres>>::type_info()
    }

    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <&str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, sqlx::Postgres> for Currency {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let code = <&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
        Ok(Self::from_code(code)?)
    }
}

impl sqlx::Encode<'_, sqlx::Postgres> for Currency {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <&str as sqlx::Encode<sqlx::Postgres>>::encode(self.code(), buf)
    }
}

impl sqlx::postgres::PgHasArrayType for Currency {
    fn array_type_info() -> sqlx::postgres::PgTypeInfo {
        <&str as sqlx::postgres::PgHasArrayType>::array_type_info()
    }
}

/// What a charge is for: `amount_minor` in the minor unit of `currency`. Flattened wherever
/// it is serialised or read from a row (`#[serde(flatten)]`, `#[sqlx(flatten)]`), so the
/// JSON and the columns keep the two fields `amount_minor` and `currency` of the contract.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    sqlx::FromRow,
    schemars::JsonSchema,
    utoipa::ToSchema,
)]
pub struct Money {
    /// In the currency's minor unit.
    amount_minor: i64,
    /// ISO 4217 alphabetic code, as the command gave it.
    #[schema(value_type = String)]
    currency: Currency,
}

impl Money {
    pub fn new(amount_minor: i64, currency: Currency) -> Self {
        Self {
            amount_minor,
            currency,
        }
    }

    /// `amount_minor` of the currency `code`, for a caller holding the two as text (a test,
    /// a fixture): the code must be a currency.
    pub fn of(amount_minor: i64, code: &str) -> Result<Self, UnknownCurrency> {
        Ok(Self::new(amount_minor, Currency::from_code(code)?))
    }

    pub fn amount_minor(&self) -> i64 {
        self.amount_minor
    }

    pub fn currency(&self) -> Currency {
        self.currency
    }

    /// Stripe's `amount` for this money. Where ISO 4217 and Stripe count differently
    /// (ISK: ISO 0 decimals, Stripe 2 → ×100; MGA: ISO 2, Stripe 0 → ÷100 when whole) it
    /// converts exactly; an amount Stripe cannot take as it stands (a fraction of a unit
    /// Stripe does not count, a three-decimal amount whose last digit is not 0) is refused
    /// with the reason, never rounded: rounding would charge another amount than asked.
    pub fn to_stripe(&self) -> Result<i64, String> {
        let (amount_minor, currency) = (self.amount_minor, self.currency);
        let iso = currency.exponent();
        let stripe = currency.stripe_decimals();
        let amount = if stripe >= iso {
            10_i64
                .checked_pow(stripe - iso)
                .and_then(|factor| amount_minor.checked_mul(factor))
                .ok_or_else(|| format!("{amount_minor} {currency} is too large for Stripe"))?
        } else {
            let factor = 10_i64.pow(iso - stripe);
            if amount_minor % factor != 0 {
                return Err(format!(
                    "{amount_minor} {currency} (ISO 4217 minor units) is not a whole amount in Stripe's \
                     unit for {currency} ({stripe} decimals): Stripe cannot charge it; publish a whole amount"
                ));
            }
            amount_minor / factor
        };
        if stripe == 3 && amount % 10 != 0 {
            return Err(format!(
                "{amount_minor} {currency}: Stripe charges three-decimal currencies only in amounts \
                 whose last digit is 0; publish an amount rounded to the nearest ten"
            ));
        }
        Ok(amount)
    }

    /// The money Stripe's `amount` of `currency` is: the inverse of [`Self::to_stripe`],
    /// `None` when it has no exact inverse.
    pub fn from_stripe(amount: i64, currency: Currency) -> Option<Self> {
        let iso = currency.exponent();
        let stripe = currency.stripe_decimals();
        let amount_minor = if stripe >= iso {
            let factor = 10_i64.checked_pow(stripe - iso)?;
            (amount % factor == 0).then(|| amount / factor)?
        } else {
            amount.checked_mul(10_i64.checked_pow(iso - stripe)?)?
        };
        Some(Self::new(amount_minor, currency))
    }
}

impl Money {
    /// [`Money::from_stripe`] for an amount Stripe reports (a charge's `amount_refunded`),
    /// rounded up to ISO's minor unit when it has no exact inverse: Stripe never reports a
    /// fraction of a unit it refuses to charge, and were it to, an amount given back is
    /// never understated, so a refund the ledger cannot explain is never hidden.
    pub fn from_stripe_reported(amount: i64, currency: Currency) -> Option<Self> {
        let iso = currency.exponent();
        let stripe = currency.stripe_decimals();
        if stripe > iso {
            let factor = 10_i64.checked_pow(stripe - iso)?;
            return Some(Self::new(
                amount.div_euclid(factor) + i64::from(amount.rem_euclid(factor) != 0),
                currency,
            ));
        }
        Self::from_stripe(amount, currency)
    }
}

/// `19.99 EUR`: major units with the currency's decimals, then the code (`500 JPY`).
impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let exponent = self.currency.exponent();
        if exponent == 0 {
            return write!(f, "{} {}", self.amount_minor, self.currency);
        }
        let unit = 10_u64.pow(exponent);
        let sign = if self.amount_minor < 0 { "-" } else { "" };
        let minor = self.amount_minor.unsigned_abs();
        write!(
            f,
            "{sign}{}.{:0width$} {}",
            minor / unit,
            minor % unit,
            self.currency,
            width = exponent as usize
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripe(amount_minor: i64, code: &str) -> Result<i64, String> {
        Money::of(amount_minor, code).unwrap().to_stripe()
    }

    fn back(amount: i64, code: &str) -> Option<i64> {
        Money::from_stripe(amount, Currency::from_code(code).unwrap()).map(|m| m.amount_minor())
    }

    #[test]
    fn a_currency_is_an_upper_case_iso_code_and_knows_its_exponent() {
        assert_eq!(Currency::from_code("EUR").unwrap().exponent(), 2);
        assert_eq!(Currency::from_code("JPY").unwrap().exponent(), 0);
        assert_eq!(Currency::from_code("KWD").unwrap().exponent(), 3);
        assert!(Currency::from_code("eur").is_err());
        assert!(Currency::from_code("EURO").is_err());
        assert_eq!(Currency::from_any_case("eur").unwrap(), "EUR");
    }

    #[test]
    fn money_prints_in_major_units_of_its_currency() {
        assert_eq!(Money::of(1999, "EUR").unwrap().to_string(), "19.99 EUR");
        assert_eq!(Money::of(5, "EUR").unwrap().to_string(), "0.05 EUR");
        assert_eq!(Money::of(-250, "USD").unwrap().to_string(), "-2.50 USD");
        assert_eq!(Money::of(500, "JPY").unwrap().to_string(), "500 JPY");
        assert_eq!(Money::of(1234, "KWD").unwrap().to_string(), "1.234 KWD");
    }

    #[test]
    fn money_serialises_as_the_contracts_two_fields() {
        let money = Money::of(1999, "EUR").unwrap();
        let json = serde_json::to_value(money).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"amount_minor": 1999, "currency": "EUR"})
        );
        assert_eq!(serde_json::from_value::<Money>(json).unwrap(), money);
        assert!(serde_json::from_value::<Money>(
            serde_json::json!({"amount_minor": 1, "currency": "XYZ"})
        )
        .is_err());
    }

    #[test]
    fn amounts_follow_stripes_decimals_not_only_iso_4217() {
        // two-decimal, zero-decimal (same in both), three-decimal with a last digit of 0
        assert_eq!(stripe(1999, "EUR"), Ok(1999));
        assert_eq!(stripe(500, "JPY"), Ok(500));
        // UGX: zero-decimal in ISO and on Stripe's list, but one of its special cases: like
        // ISK, two-decimal on the wire with the last two digits 00.
        assert_eq!(stripe(5000, "UGX"), Ok(500_000));
        assert_eq!(back(500_000, "UGX"), Some(5000));
        assert_eq!(back(500_050, "UGX"), None);
        assert_eq!(stripe(1230, "KWD"), Ok(1230));
        assert!(stripe(1235, "KWD").unwrap_err().contains("last digit is 0"));
        // ISK: ISO has no decimals, Stripe counts it in hundredths
        assert_eq!(stripe(4000, "ISK"), Ok(400_000));
        // HUF and TWD are two-decimal in both
        assert_eq!(stripe(150_000, "HUF"), Ok(150_000));
        assert_eq!(stripe(9_900, "TWD"), Ok(9_900));
        // back again, for the reconciler's comparison
        for (amount, code) in [(1999, "EUR"), (500, "JPY"), (4000, "ISK"), (1230, "KWD")] {
            let sent = stripe(amount, code).unwrap();
            assert_eq!(back(sent, code), Some(amount), "{code}");
        }
        assert_eq!(back(400_050, "ISK"), None);
        let reported = |amount, code| {
            Money::from_stripe_reported(amount, Currency::from_code(code).unwrap())
                .map(|m| m.amount_minor())
        };
        assert_eq!(reported(20_000, "ISK"), Some(200));
        assert_eq!(reported(20_050, "ISK"), Some(201), "never understated");
        assert_eq!(reported(500, "MGA"), Some(50_000));
        assert_eq!(reported(1_000, "KWD"), Some(1_000));
    }

    #[test]
    fn a_currency_whose_iso_unit_stripe_does_not_count_is_refused_unless_whole() {
        // MGA: ISO 4217 counts 1/100 ariary (exponent 2); Stripe is zero-decimal.
        assert_eq!(stripe(150_000, "MGA"), Ok(1_500));
        assert!(stripe(150_050, "MGA")
            .unwrap_err()
            .contains("not a whole amount"));
        assert_eq!(back(1_500, "MGA"), Some(150_000));
    }
}
