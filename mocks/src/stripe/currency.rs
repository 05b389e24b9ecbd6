//! Stripe's currency rules: lower-case ISO 4217 codes, amounts in the minor unit, with the
//! special cases of Stripe's "Supported currencies" page (https://docs.stripe.com/currencies).
//! Zero-decimal currencies (JPY, KRW, …) need nothing: their minor unit is the whole unit.

/// Three-decimal currencies: Stripe requires the amount's last digit to be 0.
const THREE_DECIMAL: [&str; 5] = ["bhd", "jod", "kwd", "omr", "tnd"];

/// Largest `amount` Stripe accepts: eight digits.
pub(crate) const MAX_AMOUNT: i64 = 99_999_999;

/// Checks `currency` (lower case, an active ISO 4217 code) and that `amount` suits it;
/// the error is Stripe's message and the parameter it names.
pub(crate) fn check(currency: &str, amount: i64) -> Result<(), (String, &'static str)> {
    let known = currency.len() == 3
        && currency.bytes().all(|b| b.is_ascii_lowercase())
        && iso_currency::Currency::from_code(&currency.to_ascii_uppercase()).is_some();
    if !known {
        return Err((format!("Invalid currency: {currency}. Stripe currencies are three-letter ISO codes in lower case."), "currency"));
    }
    if THREE_DECIMAL.contains(&currency) && amount % 10 != 0 {
        return Err((
            format!(
                "Amounts in {} must end in 0: three-decimal currencies are charged in multiples of ten minor units (round {amount} to the nearest ten).",
                currency.to_ascii_uppercase()
            ),
            "amount",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_decimal_amounts_must_end_in_zero_and_zero_decimal_ones_are_taken_as_they_are() {
        assert!(check("kwd", 5120).is_ok());
        assert_eq!(check("kwd", 5124).unwrap_err().1, "amount");
        for code in THREE_DECIMAL {
            assert!(check(code, 1001).is_err(), "{code}");
        }
        // Zero-decimal currencies take the amount as it is: 1 is ¥1.
        assert!(check("jpy", 1).is_ok());
        assert!(check("krw", 1001).is_ok());
        assert!(check("eur", 1999).is_ok());
    }

    #[test]
    fn upper_case_or_unknown_currencies_are_refused() {
        assert_eq!(check("EUR", 100).unwrap_err().1, "currency");
        assert_eq!(check("xyz", 100).unwrap_err().1, "currency");
        assert_eq!(check("euro", 100).unwrap_err().1, "currency");
    }
}
