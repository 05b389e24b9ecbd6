//! The identifiers onecharge hands to others, as types of their own so that one cannot be
//! passed where another is meant.

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

/// A UUID id of its own type: stored as `uuid`, serialised as its hyphenated text.
macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
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
        pub struct $name(Uuid);

        impl $name {
            /// A fresh random id (v4), as a producer would mint one.
            pub fn random() -> Self {
                Self(Uuid::new_v4())
            }

            pub fn into_uuid(self) -> Uuid {
                self.0
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> Self {
                Self(id)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(text).map(Self)
            }
        }
    };
}

uuid_id!(
    /// The producer's id of one payment attempt (contract §2): the unit of "exactly one
    /// charge". Stored as `uuid`; serialised as its hyphenated text.
    PaymentAttemptId
);

uuid_id!(
    /// The producer's id of one refund (contract §2.5): the unit of "at most one refund
    /// movement", and the refund command's dedupe key. Stored as `uuid`; serialised as its
    /// hyphenated text.
    RefundId
);

/// The `Idempotency-Key` of one payment attempt (contract §3): the same for every try,
/// derived from the attempt id alone, stored with the attempt and read back from the row
/// on every try. Stored as text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, sqlx::Type, schemars::JsonSchema)]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The key of the attempt `payment_attempt_id`: `onecharge-<id>`, 46 characters, inside
    /// the contract's 1–255.
    pub fn for_attempt(payment_attempt_id: PaymentAttemptId) -> Self {
        Self(format!("onecharge-{payment_attempt_id}"))
    }

    /// The key of the refund `refund_id`: `onecharge-refund-<id>`, 53 characters. Never an
    /// attempt's key ([`Self::attempt_of`] reads it as none).
    pub fn for_refund(refund_id: RefundId) -> Self {
        Self(format!("onecharge-refund-{refund_id}"))
    }

    /// The refund this key was derived for, if it is a refund's key: the inverse of
    /// [`Self::for_refund`], which tells a refund's gateway calls apart on its attempt's
    /// timeline.
    pub fn refund_of(&self) -> Option<RefundId> {
        let id: RefundId = self.0.strip_prefix("onecharge-refund-")?.parse().ok()?;
        (Self::for_refund(id) == *self).then_some(id)
    }

    /// The attempt whose stored key is exactly `text`, if there is one: the inverse of
    /// [`Self::for_attempt`]. The database holds the key to the same rule
    /// (`payment_attempts_idempotency_key_derived`), so a search by key is a search by
    /// attempt id, and needs no index of its own (decision 122).
    pub fn attempt_of(text: &str) -> Option<PaymentAttemptId> {
        let id: PaymentAttemptId = text.strip_prefix("onecharge-")?.parse().ok()?;
        (Self::for_attempt(id).as_str() == text).then_some(id)
    }

    /// The key of one step of a connector's calls, derived from this stored key:
    /// `<key>-<step>`, or, should that pass a gateway's 255 characters, the SHA-256 of the
    /// stored key in hex with the step: still deterministic and still unique per attempt.
    /// With [`Self::for_attempt`] and reading a stored key back, the only way a key is made:
    /// no key is ever typed in.
    pub fn derived(&self, step: &str) -> Self {
        let plain = format!("{}-{step}", self.0);
        if plain.chars().count() <= MAX_KEY_CHARS {
            return Self(plain);
        }
        Self(format!(
            "{}-{step}",
            hex::encode(Sha256::digest(self.0.as_bytes()))
        ))
    }

    /// A key of any text, for a unit test that needs one the derivation would never make
    /// (too long, another shape).
    #[cfg(test)]
    pub(crate) fn for_test(text: &str) -> Self {
        Self(text.to_owned())
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

/// A text id of its own type, as another system gave it: stored as `text`, serialised as
/// the text itself, read as `&str` wherever text is wanted. Made only by the constructor its
/// invocation names, so that where one comes from is said where it is made.
macro_rules! text_id {
    ($(#[$doc:meta])* $name:ident, $(#[$ctor_doc:meta])* $ctor:ident) => {
        $(#[$doc])*
        #[derive(
            Debug,
            Clone,
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
        #[schemars(inline)]
        pub struct $name(String);

        impl $name {
            $(#[$ctor_doc])*
            pub fn $ctor(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        /// An id compares equal to the same text (a gateway's answer, a header, a test's).
        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

text_id!(
    /// The id of the object a two-step gateway makes before anything can charge (Stripe's
    /// PaymentIntent, `pi_…`), as the gateway gave it: stored under the lease before the
    /// charging call, and what every later lookup, cancel and check asks about. A type of
    /// its own, end to end from the gateway's answer to the column, so that it is never
    /// taken for a charge id or a reference. Stored as text.
    GatewayObjectId,
    /// The id as the gateway's answer (or a webhook's event, or an operator) gave it.
    from_gateway
);

text_id!(
    /// The id by which the gateway names the charge it made or declined (§3's `ch_…`; for
    /// Stripe the PaymentIntent's own `pi_…`, decision 123), as the gateway gave it:
    /// recorded with the outcome, what a refund is made against and what the sweep and an
    /// operator find an attempt by. A type of its own so that it is never taken for a
    /// message id, a key or a reference. Stored as text.
    GatewayChargeId,
    /// The id as the gateway's answer, a listing, a webhook or an operator's resolution
    /// gave it.
    from_gateway
);

/// An operator's typed charge id (a CLI flag, a form): taken as the gateway's, which it
/// is meant to be; the resolution that records it says who gave it.
impl FromStr for GatewayChargeId {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self::from_gateway(text))
    }
}

text_id!(
    /// A command's message id (the `Nats-Msg-Id` header, contract §2.1): the broker's
    /// dedupe key and intake's, made only by validating a delivered header
    /// ([`super::command::validate_message_id`]), by a publisher minting one, or by reading a
    /// recorded one back. Stored as text.
    MessageId,
    /// A message id that has passed, or is known to pass, the contract's rules (1–200
    /// printable characters): a validated header, a minted one, a stored one.
    checked
);

/// The most characters a key may have at a gateway (Stripe's limit, and contract §3's).
const MAX_KEY_CHARS: usize = 255;

/// The sequence numbers of the derived keys an attempt sends next (Stripe's
/// `<key>-create[-N]`, `<key>-confirm[-N]`), stored with the attempt
/// (`payment_attempts.create_key_seq`, `confirm_key_seq`): 1 is the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySeq {
    pub create: i32,
    pub confirm: i32,
}

impl Default for KeySeq {
    fn default() -> Self {
        Self {
            create: 1,
            confirm: 1,
        }
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

    #[test]
    fn a_refunds_key_names_its_refund_and_an_attempts_key_none() {
        let refund = RefundId::random();
        assert_eq!(IdempotencyKey::for_refund(refund).refund_of(), Some(refund));
        let attempt = IdempotencyKey::for_attempt(PaymentAttemptId::random());
        assert_eq!(attempt.refund_of(), None);
        assert_eq!(attempt.derived("create").refund_of(), None);
        assert_eq!(
            IdempotencyKey::for_refund(refund).derived("x").refund_of(),
            None
        );
    }
}
