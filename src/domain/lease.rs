//! The fencing token of a lease: what every write about a claimed attempt names, so that a
//! writer whose lease passed to another changes nothing.

use serde::{Deserialize, Serialize};

/// `payment_attempts.lease_token`: incremented by every claim (the executor's, the
/// reconciler's, a person's recheck) and by an expired lease, and named by every later
/// write (`WHERE lease_token = $n AND status = …`). A type of its own so that a token is
/// never confused with a count or a try. Stored as `int8`; serialised as the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type)]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct LeaseToken(i64);

impl LeaseToken {
    pub fn get(self) -> i64 {
        self.0
    }
}

impl From<i64> for LeaseToken {
    fn from(token: i64) -> Self {
        Self(token)
    }
}

/// A token compares equal to its number (a row read back, a test's expectation).
impl PartialEq<i64> for LeaseToken {
    fn eq(&self, other: &i64) -> bool {
        self.0 == *other
    }
}

impl std::fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}
