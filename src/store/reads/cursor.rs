//! The one cursor every keyset listing of attempts and refunds pages by: the last row of a
//! page, by (`created_at`, id). The newest-first listings continue before it, the
//! oldest-first stuck list and review queue after it. The id breaks ties between equal
//! `created_at`, so a page boundary that falls among rows recorded in the same microsecond
//! neither skips nor repeats one.

use std::fmt;
use std::str::FromStr;

use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::{PaymentAttemptId, RefundId};

/// A position in a paged listing of rows identified by `Id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor<Id> {
    pub created_at: OffsetDateTime,
    pub id: Id,
}

/// A position in a listing of attempts.
pub type AttemptCursor = Cursor<PaymentAttemptId>;

/// A position in a listing of refunds.
pub type RefundCursor = Cursor<RefundId>;

/// `<microseconds since the epoch>_<id>`: exact (PostgreSQL keeps microseconds), URL-safe
/// and opaque enough.
impl<Id: Copy + Into<Uuid>> fmt::Display for Cursor<Id> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros = self.created_at.unix_timestamp_nanos() / 1000;
        write!(f, "{micros}_{}", self.id.into())
    }
}

impl<Id: From<Uuid>> FromStr for Cursor<Id> {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || format!("`{text}` is not a cursor (the `next` of the previous page)");
        let (micros, id) = text.trim().split_once('_').ok_or_else(bad)?;
        let micros: i128 = micros.parse().map_err(|_| bad())?;
        let created_at =
            OffsetDateTime::from_unix_timestamp_nanos(micros * 1000).map_err(|_| bad())?;
        let id = id.parse::<Uuid>().map_err(|_| bad())?;
        Ok(Self {
            created_at,
            id: id.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_as_it_was_written_to_the_microsecond() {
        let cursor = RefundCursor {
            created_at: OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_000)
                .unwrap(),
            id: RefundId::from(Uuid::nil()),
        };
        let text = cursor.to_string();
        assert_eq!(text, format!("1700000000123456_{}", Uuid::nil()));
        assert_eq!(text.parse::<RefundCursor>(), Ok(cursor));
        assert!("17_not-a-uuid".parse::<AttemptCursor>().is_err());
        assert!("no-underscore".parse::<AttemptCursor>().is_err());
    }
}
