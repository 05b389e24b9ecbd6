//! In-process wake-ups between the roles of one `serve`: intake tells the executor that new
//! attempts are due, the executor tells the relay that events are waiting. Each role still
//! polls on its interval, so a nudge only shortens a wait — nothing depends on it, and roles
//! in different processes work exactly as before (by polling).

use std::sync::Arc;

use tokio::sync::Notify;

/// The wake-ups one process's roles share. A role built without them gets its own, which
/// nobody signals.
#[derive(Clone, Default)]
pub struct Nudges {
    attempts: Arc<Notify>,
    refunds: Arc<Notify>,
    events: Arc<Notify>,
}

impl Nudges {
    /// New attempts were committed: an idle executor should claim now.
    pub fn attempts_recorded(&self) {
        self.attempts.notify_one();
    }

    /// Completes after [`Nudges::attempts_recorded`] (at once if it was called while nobody
    /// waited).
    pub async fn attempts_due(&self) {
        self.attempts.notified().await;
    }

    /// New refunds were committed: the refund worker should admit them now.
    pub fn refunds_recorded(&self) {
        self.refunds.notify_one();
    }

    /// Completes after [`Nudges::refunds_recorded`].
    pub async fn refunds_due(&self) {
        self.refunds.notified().await;
    }

    /// Events were committed to the outbox: an idle relay should publish now.
    pub fn events_written(&self) {
        self.events.notify_one();
    }

    /// Completes after [`Nudges::events_written`] (at once if it was called while nobody
    /// waited).
    pub async fn events_waiting(&self) {
        self.events.notified().await;
    }
}
