//! The one lookup policy for every kind of work that can stay ambiguous or processing at the
//! gateway (a charge, a refund, whatever comes next): how long a lookup waits, when the
//! gateway's silence goes to a person, what a resend may still do, and which of the
//! gateway's words the database can keep. Pure: times are the database's, passed in.
//! Charges (`reconciler::policy`, `executor::policy`) and refunds (`refund_call`) call it;
//! neither keeps a copy (decision 230).
//!
//! - **Processing is measured in time, not in lookups.** An item the gateway says is still
//!   processing is looked at along `reconciler.processing_schedule`, the step chosen by how
//!   long it has been processing since its last send, until `reconciler.processing_max`.
//! - **Failed lookups never use that time up.** They count on `reconciler.schedule` (the
//!   item's `failed_lookups`), and an answer that the item is still processing restarts the
//!   count: a bank debit pending for days is not handed over by a flaky network on the way.
//! - **An answer the database would refuse goes to a person**, told the truth: every gateway
//!   text is cleaned ([`gateway_text`]) and an id that cannot be stored
//!   ([`unstorable_gateway_id`]) is never adopted.
//! - **Resends have limits** ([`ResendLimits`]): tries (counted sends), the maximum age and
//!   the key window, for every resend, a `409` and a configuration fault included.

use std::time::Duration;

use time::OffsetDateTime;

pub use super::outcome::FailedLookups;
use super::retry::{later, RetryWindow};

/// Longest gateway id (a charge's, a refund's) the database keeps; no real gateway comes
/// near it.
pub const GATEWAY_ID_MAX_CHARS: usize = 255;

/// The lookup schedules, from `reconciler.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupSchedule {
    /// `reconciler.schedule`: the delays after failed (or unsettled) lookups; used up, a
    /// person decides.
    pub schedule: Vec<Duration>,
    /// `reconciler.processing_schedule`: the delays between lookups of an item still
    /// processing at the gateway, its last delay repeating.
    pub processing_schedule: Vec<Duration>,
    /// `reconciler.processing_max`: past this since the last send, an item still processing
    /// goes to a person.
    pub processing_max: Duration,
}

/// Where an item the gateway says is still processing goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StillProcessing {
    /// Looked at again after this delay; the count of failed lookups restarts.
    LookAgain(Duration),
    /// Processing for `reconciler.processing_max` since its last send: a person follows it.
    TooLong,
}

impl LookupSchedule {
    /// The schedule's first delay (a minute when it is empty): when a lookup refused for
    /// onecharge's own configuration is asked again, not counted.
    pub fn first_delay(&self) -> Duration {
        self.schedule
            .first()
            .copied()
            .unwrap_or(Duration::from_secs(60))
    }

    /// The delay after a failed lookup when `failed_lookups` failures came before it, or
    /// `None` once the schedule is used up (a person decides).
    pub fn after_failure(&self, failed_lookups: i32) -> Option<Duration> {
        self.schedule
            .get(usize::try_from(failed_lookups.max(0)).unwrap_or(usize::MAX))
            .copied()
    }

    /// An item processing at the gateway since `since` (its last send), at `now`.
    pub fn still_processing(&self, since: OffsetDateTime, now: OffsetDateTime) -> StillProcessing {
        if now >= later(since, self.processing_max) {
            return StillProcessing::TooLong;
        }
        let processing_for = (now - since).unsigned_abs();
        StillProcessing::LookAgain(self.processing_delay(processing_for))
    }

    /// The delay before the next look at an item processing for `processing_for`: the step
    /// of `processing_schedule` that much time has reached (the delays added up), its last
    /// delay repeating. Derived from the time, not from a count, so that failed lookups on
    /// the way neither use it up nor push it back.
    pub fn processing_delay(&self, processing_for: Duration) -> Duration {
        let mut reached = Duration::ZERO;
        for delay in &self.processing_schedule {
            reached += *delay;
            if processing_for < reached {
                return *delay;
            }
        }
        self.processing_schedule
            .last()
            .copied()
            .unwrap_or(Duration::from_secs(6 * 3600))
    }
}

/// Why a resend was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResendClosed {
    /// The tries are used up.
    Tries(String),
    /// Past the maximum age or the key window: a resend could move money twice.
    Window(String),
}

impl ResendClosed {
    pub fn reason(&self) -> &str {
        match self {
            Self::Tries(reason) | Self::Window(reason) => reason,
        }
    }
}

/// How far a resend under the same key may reach, for every kind of work: `max_tries`
/// counted sends, and the retry window (maximum age, key window). A resend that does not
/// count as a try (a `409`, a configuration fault) is still held to the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResendLimits {
    pub max_tries: u32,
    pub window: RetryWindow,
}

impl ResendLimits {
    /// Why an item with `tries` sends, recorded at `created_at` and first sent at
    /// `first_sent`, may not be sent again at `at` (`counted`: the resend is a try).
    pub fn closed(
        &self,
        tries: i32,
        counted: bool,
        created_at: OffsetDateTime,
        first_sent: OffsetDateTime,
        at: OffsetDateTime,
    ) -> Option<ResendClosed> {
        if counted && tries.max(0).unsigned_abs() >= self.max_tries {
            return Some(ResendClosed::Tries(format!("{tries} tries used up")));
        }
        self.window
            .closed_at(created_at, first_sent, at)
            .map(ResendClosed::Window)
    }
}

/// Text a gateway sent (an id, a code, an error, a reason quoting it), made storable: every
/// control character — NUL above all, which PostgreSQL refuses in `text` and `jsonb` — is
/// written as its escape (`\u{0}`), and the length is bounded (an over-long value ends with
/// `…`). The one function every gateway-provided string goes through before it reaches the
/// database, so that an answer can always be stored and an item can always settle or
/// escalate.
pub fn gateway_text(text: &str, max_chars: usize) -> String {
    let mut clean = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            clean.extend(c.escape_unicode());
        } else {
            clean.push(c);
        }
    }
    super::bounded(&clean, max_chars)
}

/// Why a gateway's id for the money it moved cannot be kept (empty, or longer than
/// [`GATEWAY_ID_MAX_CHARS`]), if it cannot. Such an id is never adopted nor cut to fit (a
/// cut id names nothing at the gateway): the item goes to a person with this reason. (A
/// control character in an id is kept escaped by [`gateway_text`].)
pub fn unstorable_gateway_id(id: &str) -> Option<String> {
    let chars = id.chars().count();
    if chars == 0 {
        return Some("the gateway answered an empty id".into());
    }
    (chars > GATEWAY_ID_MAX_CHARS).then(|| {
        format!(
            "the gateway answered an id of {chars} characters, more than the {GATEWAY_ID_MAX_CHARS} onecharge stores (it begins {})",
            gateway_text(id, 40)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const HOUR: Duration = Duration::from_secs(3600);
    const SENT: OffsetDateTime = datetime!(2026-12-01 10:00 UTC);

    fn schedule() -> LookupSchedule {
        LookupSchedule {
            schedule: vec![Duration::from_secs(60), Duration::from_secs(300)],
            processing_schedule: vec![HOUR, 6 * HOUR],
            processing_max: 30 * 24 * HOUR,
        }
    }

    #[test]
    fn processing_is_measured_in_time_and_failures_count_apart() {
        let s = schedule();
        let at = |hours: i64| SENT + time::Duration::hours(hours);
        assert_eq!(
            s.still_processing(SENT, at(0)),
            StillProcessing::LookAgain(HOUR)
        );
        assert_eq!(
            s.still_processing(SENT, at(2)),
            StillProcessing::LookAgain(6 * HOUR)
        );
        // 15 days processing: still followed, every last delay.
        assert_eq!(
            s.still_processing(SENT, at(15 * 24)),
            StillProcessing::LookAgain(6 * HOUR)
        );
        assert_eq!(
            s.still_processing(SENT, at(30 * 24)),
            StillProcessing::TooLong
        );
        assert_eq!(s.after_failure(0), Some(Duration::from_secs(60)));
        assert_eq!(s.after_failure(1), Some(Duration::from_secs(300)));
        assert_eq!(s.after_failure(2), None);
    }

    #[test]
    fn every_resend_is_held_to_the_window_and_counted_ones_to_the_tries() {
        let limits = ResendLimits {
            max_tries: 3,
            window: RetryWindow::new(24 * HOUR, HOUR, 48 * HOUR),
        };
        let soon = SENT + time::Duration::hours(1);
        assert_eq!(limits.closed(1, true, SENT, SENT, soon), None);
        assert!(matches!(
            limits.closed(3, true, SENT, SENT, soon),
            Some(ResendClosed::Tries(_))
        ));
        assert_eq!(limits.closed(3, false, SENT, SENT, soon), None);
        let past_window = SENT + time::Duration::hours(23);
        let Some(ResendClosed::Window(why)) = limits.closed(0, false, SENT, SENT, past_window)
        else {
            panic!("a 409 past the key window is not sent again")
        };
        assert!(why.contains("idempotency key"), "{why}");
    }

    #[test]
    fn an_id_the_database_would_refuse_is_never_adopted_and_texts_are_cleaned() {
        assert_eq!(unstorable_gateway_id("re_123"), None);
        assert!(unstorable_gateway_id("").unwrap().contains("empty"));
        assert!(unstorable_gateway_id(&"r".repeat(256))
            .unwrap()
            .contains("256 characters"));
        assert_eq!(unstorable_gateway_id("re_\0"), None, "kept escaped");
        assert_eq!(gateway_text("card\0closed", 100), "card\\u{0}closed");
        assert_eq!(gateway_text(&"x".repeat(300), 10).chars().count(), 10);
    }
}
