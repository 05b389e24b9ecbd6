//! In-process wake-ups between the roles of one `serve`: intake tells the executor that new
//! attempts are due, the executor tells the relay that events are waiting. Each role still
//! polls on its interval, so a nudge only shortens a wait — nothing depends on it, and roles
//! in different processes work exactly as before (by polling). [`work_until`] is the loop
//! of a worker that polls and may be nudged.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

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

/// A worker's loop, one for every kind of queued work that polls (a refund's sender and its
/// lookups): `pass` until `shutdown`, at once again after a pass that did something (it
/// says `true`), else after `poll` or `woken`, whichever comes first. A failed pass is logged
/// as `what` (at debug while the database is known to be failing over, so a failover is one
/// line, not one a pass) and tried again after the wait. A pass in hand is finished first.
pub async fn work_until<Pass, Wake>(
    shutdown: &CancellationToken,
    what: &str,
    poll: Duration,
    mut pass: impl FnMut() -> Pass,
    mut woken: impl FnMut() -> Wake,
) where
    Pass: Future<Output = anyhow::Result<bool>>,
    Wake: Future<Output = ()>,
{
    while !shutdown.is_cancelled() {
        let busy = match pass().await {
            Ok(busy) => busy,
            Err(err) => {
                let quiet = crate::store::notice_failure(&err);
                step_failed!(quiet, warn, error = %format!("{err:#}"), "{what} failed; trying again");
                false
            }
        };
        if busy {
            continue;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = woken() => {}
            _ = tokio::time::sleep(poll) => {}
        }
    }
}
