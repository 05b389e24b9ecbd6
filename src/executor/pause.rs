//! What this executor knows of the fleet's open pauses, kept current by PostgreSQL: a pause
//! or a resume notifies [`fleet::PAUSE_CHANNEL`] at its commit, and [`PauseWatch::follow`]
//! reads the open pauses again on each notification. An attempt claimed ahead (claimed while
//! no pause covering it was open) is sent only while the watch knows of no open pause that
//! covers it (its scope takes charges, its currency is none or the attempt's; decision 265);
//! while the watch does not know (starting, or its connection lost, when a notification may
//! have been missed) the executor asks the database before each round of sends instead.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::domain::{Currency, Movement, PauseCover};
use crate::store::fleet;
use crate::store::Store;

/// What the watch knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// Not listening yet, or the listening connection was lost: ask the database.
    Unknown,
    /// What each open pause holds back (none: everything runs).
    Open(Vec<PauseCover>),
}

/// Whether one of `covers` holds back a charge in `currency`.
pub fn holds_charge(covers: &[PauseCover], currency: Currency) -> bool {
    covers
        .iter()
        .any(|cover| cover.holds(Movement::Charge, currency))
}

/// Shared by the executor's run loop (which reads it) and [`PauseWatch::follow`] (which
/// writes it).
#[derive(Debug, Clone)]
pub struct PauseWatch(Arc<RwLock<Known>>);

impl Default for PauseWatch {
    fn default() -> Self {
        Self(Arc::new(RwLock::new(Known::Unknown)))
    }
}

/// How long after a lost listening connection the watch connects again.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

impl PauseWatch {
    pub fn known(&self) -> Known {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, known: Known) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = known;
    }

    /// Keeps the watch current until `shutdown`: listens first, then reads the open pauses
    /// (so no change falls between the two), then reads them again on every notification. A
    /// lost connection makes the watch unknown until it listens again.
    pub async fn follow(self, store: Store, shutdown: CancellationToken) {
        loop {
            let followed = async {
                let mut listener = fleet::listen_for_pauses(&store).await?;
                self.set(Known::Open(fleet::open_covers(&store).await?));
                // `None`: the connection was lost, and notifications with it.
                while listener.try_recv().await?.is_some() {
                    self.set(Known::Open(fleet::open_covers(&store).await?));
                }
                Ok::<_, sqlx::Error>(())
            };
            let ended = tokio::select! {
                _ = shutdown.cancelled() => return,
                ended = followed => ended,
            };
            self.set(Known::Unknown);
            if let Err(err) = ended {
                tracing::warn!(error = %err, "not listening for fleet pauses; asking the database before each send until it listens again");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(RECONNECT_AFTER) => {}
            }
        }
    }
}
