//! The identifiers onecharge hands to others, as types of their own so that one cannot be
//! passed where another is meant.

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The producer's id of one payment attempt (contract §2): the unit of "exactly one
/// charge". Stored as `uuid`; serialised as its hyphenated text.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    sqlx::Type,
    schemars::JsonSchema,
)]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct PaymentAttemptId(Uuid);

impl PaymentAttemptId {
    /// A fresh random id (v4), as a producer would mint one.
    pub fn random() -> Self {
        Self(Uuid::new_v4())
    }

    pub fn into_uuid(self) -> Uuid {
        self.0
    }
}

impl From<Uuid> for PaymentAttemptId {
    fn from(id: Uuid) -> Self {
        Self(id)
    }
}

impl From<PaymentAttemptId> for Uuid {
    fn from(id: PaymentAttemptId) -> Self {
        id.0
    }
}

impl fmt::Display for PaymentAttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for PaymentAttemptId {
    type Err = uuid::Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(text).map(Self)
    }
}

/// The `Idempotency-Key` of one payment attempt (contract §3): the same for every try,
/// derived from the attempt id alone, stored with the attempt and read back from the row
/// on every try. Stored as text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, sqlx::Type)]
#[sqlx(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The key of the attempt `payment_attempt_id`: `onecharge-<id>`, 46 characters, inside
    /// the contract's 1–255.
    pub fn for_attempt(payment_attempt_id: PaymentAttemptId) -> Self {
        Self(format!("onecharge-{payment_attempt_id}"))
    }

    /// The attempt whose stored key is exactly `text`, if there is one: the inverse of
    /// [`Self::for_attempt`]. The database holds the key to the same rule
    /// (`payment_attempts_idempotency_key_derived`), so a search by key is a search by
    /// attempt id, and needs no index of its own (decision 122).
    pub fn attempt_of(text: &str) -> Option<PaymentAttemptId> {
        let id: PaymentAttemptId = text.strip_prefix("onecharge-")?.parse().ok()?;
        (Self::for_attempt(id).as_str() == text).then_some(id)
    }

    /// A key as a connector actually sent it, when that is not the attempt's stored key
    /// itself (Stripe's `-create` and `-confirm` keys, derived from it): recorded as the
    /// call's evidence.
    pub fn sent(text: String) -> Self {
        Self(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for IdempotencyKey {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<IdempotencyKey> for String {
    fn from(key: IdempotencyKey) -> Self {
        key.0
    }
}

/// A key compares equal to the same text (a gateway's answer, a header).
impl PartialEq<&str> for IdempotencyKey {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_its_attempt_only_in_the_exact_form_onecharge_stores() {
        let id = PaymentAttemptId::random();
        let key = IdempotencyKey::for_attempt(id);
        assert_eq!(IdempotencyKey::attempt_of(key.as_str()), Some(id));

        // Text the database could never hold as a key: other cases, other uuid forms,
        // Stripe's derived keys, other prefixes.
        let upper = format!("onecharge-{}", id.to_string().to_uppercase());
        let simple = format!("onecharge-{}", id.into_uuid().simple());
        let derived = format!("{key}-create");
        for text in [
            upper.as_str(),
            &simple,
            &derived,
            "onecharge-",
            "k1",
            &id.to_string(),
        ] {
            assert_eq!(IdempotencyKey::attempt_of(text), None, "{text}");
        }
    }
}
