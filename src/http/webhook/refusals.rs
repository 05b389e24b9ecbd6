//! What the listener refused, tallied in memory by reason and written to
//! `webhook_refusals` at most every [`FLUSH_EVERY`]: the console shows who is being refused
//! and why, and no sender — anyone may send — can make the listener write to the database
//! once per request, nor take the connections accepted events need.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::findings::webhooks;
use crate::store::Store;

/// How often the tally is written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);

/// Refusals not yet written, by reason: how many and the last one's words.
#[derive(Clone, Debug, Default)]
pub struct Tally(Arc<Mutex<HashMap<&'static str, (u64, String)>>>);

impl Tally {
    /// One more refusal of `result`, for `why`.
    pub fn note(&self, result: &'static str, why: &str) {
        let mut pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let entry = pending.entry(result).or_default();
        entry.0 += 1;
        entry.1 = crate::domain::bounded(why, 500);
    }

    /// Writes what was tallied since the last write. A tally that cannot be written is put
    /// back, to be written with the next.
    pub async fn flush(&self, store: &Store) {
        let taken = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        for (result, (refused, why)) in taken {
            if let Err(err) = webhooks::add_refusals(store, result, refused, &why).await {
                tracing::warn!(error = %err, result, "cannot record webhook refusals; kept for the next write");
                let mut pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
                let entry = pending.entry(result).or_default();
                entry.0 += refused;
                if entry.1.is_empty() {
                    entry.1 = why;
                }
            }
        }
    }

    /// Writes the tally every [`FLUSH_EVERY`] until `shutdown`, then once more.
    pub async fn keep_writing(self, store: Store, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(FLUSH_EVERY) => self.flush(&store).await,
            }
        }
        self.flush(&store).await;
    }
}
