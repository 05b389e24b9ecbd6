//! What this executor knows of the fleet's pause, kept current by PostgreSQL: a pause or a
//! resume notifies [`fleet::PAUSE_CHANNEL`] at its commit, and [`PauseWatch::follow`] reads
//! the pause again on each notification. An attempt claimed ahead (claimed while no pause
//! was open) is sent only while the watch says the fleet runs; while the watch does not know
//! (starting, or its connection lost, when a notification may have been missed) the executor
//! asks the database before each round of sends instead.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::fleet;
use crate::store::Store;

/// What the watch knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// Not listening yet, or the listening connection was lost: ask the database.
    Unknown,
    Running,
    Paused,
}

/// Shared by the executor's run loop (which reads it) and [`PauseWatch::follow`] (which
/// writes it).
#[derive(Debug, Clone, Default)]
pub struct PauseWatch(Arc<AtomicU8>);

/// How long after a lost listening connection the watch connects again.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

impl PauseWatch {
    pub fn known(&self) -> Known {
        match self.0.load(Ordering::SeqCst) {
            1 => Known::Running,
            2 => Known::Paused,
            _ => Known::Unknown,
        }
    }

    fn set(&self, known: Known) {
        let value = match known {
            Known::Unknown => 0,
            Known::Running => 1,
            Known::Paused => 2,
        };
        self.0.store(value, Ordering::SeqCst);
    }

    fn set_paused(&self, paused: bool) {
        self.set(if paused {
            Known::Paused
        } else {
            Known::Running
        });
    }

    /// Keeps the watch current until `shutdown`: listens first, then reads the pause (so
    /// no change falls between the two), then reads it again on every notification. A lost
    /// connection makes the watch unknown until it listens again.
    pub async fn follow(self, store: Store, shutdown: CancellationToken) {
        loop {
            let followed = async {
                let mut listener = fleet::listen_for_pauses(&store).await?;
                self.set_paused(fleet::is_paused(&store).await?);
                // `None`: the connection was lost, and notifications with it.
                while listener.try_recv().await?.is_some() {
                    self.set_paused(fleet::is_paused(&store).await?);
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
