//! An amount of money as contract §2.1 states it: minor units and an ISO 4217 code. The two
//! travel together everywhere (the command, the attempt row, the event, the listings), so
//! they are one value.

use serde::{Deserialize, Serialize};

/// What a charge is for: `amount_minor` in the minor unit of `currency`. Flattened wherever
/// it is serialised or read from a row (`#[serde(flatten)]`, `#[sqlx(flatten)]`), so the
/// JSON and the columns keep the two fields `amount_minor` and `currency` of the contract.
#[derive(
    Debug,
    Clone,
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
    pub amount_minor: i64,
    /// ISO 4217 alphabetic code, as the command gave it.
    pub currency: String,
}

impl Money {
    pub fn new(amount_minor: i64, currency: impl Into<String>) -> Self {
        Self {
            amount_minor,
            currency: currency.into(),
        }
    }
}
