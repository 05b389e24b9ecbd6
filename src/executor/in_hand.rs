//! The attempts an executor holds between their call and their written result: one task
//! each, the call slots they draw from, and which attempt each task is — so that a drain
//! cut short by `shutdown_timeout` can say which attempts it left `in_flight`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::AttemptReport;
use crate::domain::PaymentAttemptId;

pub(super) struct InHand {
    tasks: JoinSet<AttemptReport>,
    attempts: HashMap<tokio::task::Id, PaymentAttemptId>,
    /// One permit per gateway call in flight (`executor.concurrency`).
    slots: Arc<Semaphore>,
    /// Attempts calling or being written: twice the concurrency, so a slow database slows
    /// the claims instead of piling results up.
    max: usize,
}

impl InHand {
    pub(super) fn new(concurrency: usize) -> Self {
        Self {
            tasks: JoinSet::new(),
            attempts: HashMap::new(),
            slots: Arc::new(Semaphore::new(concurrency)),
            max: 2 * concurrency,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Forgets the tasks that have finished.
    pub(super) fn reap(&mut self) {
        while let Some(joined) = self.tasks.try_join_next_with_id() {
            self.forget(joined);
        }
    }

    /// How many attempts may be claimed now: free call slots, at most `batch_size`, and no
    /// more than the room left in hand.
    pub(super) fn free(&self, batch_size: usize) -> usize {
        self.slots
            .available_permits()
            .min(batch_size)
            .min(self.max.saturating_sub(self.tasks.len()))
    }

    /// How many attempts to claim now: the free call slots plus `ahead` more for the
    /// claim-ahead queue, less the `queued` ones already claimed, and no more than the room
    /// left in hand (queued attempts count).
    pub(super) fn wanted(&self, ahead: usize, queued: usize) -> usize {
        let room = self.max.saturating_sub(self.tasks.len() + queued);
        (self.slots.available_permits() + ahead)
            .saturating_sub(queued)
            .min(room)
    }

    /// Waits until a task finishes or, while there is room in hand, a call slot frees.
    pub(super) async fn wait_for_room(&mut self) {
        let full = self.tasks.len() >= self.max;
        tokio::select! {
            joined = self.tasks.join_next_with_id() => {
                if let Some(joined) = joined {
                    self.forget(joined);
                }
            }
            slot = self.slots.clone().acquire_owned(), if !full => drop(slot),
        }
    }

    /// A call slot, for an attempt claimed within [`InHand::free`].
    pub(super) fn slot(&self) -> OwnedSemaphorePermit {
        self.slots
            .clone()
            .try_acquire_owned()
            .expect("claimed no more than the free slots")
    }

    pub(super) fn spawn(
        &mut self,
        payment_attempt_id: PaymentAttemptId,
        task: impl std::future::Future<Output = AttemptReport> + Send + 'static,
    ) {
        let handle = self.tasks.spawn(task);
        self.attempts.insert(handle.id(), payment_attempt_id);
    }

    /// Waits for every task in hand, for at most `timeout`; then stops the rest and returns
    /// their attempts, which stay `in_flight` until their leases expire and the reconciler
    /// looks them up.
    pub(super) async fn drain(mut self, timeout: Duration) -> Vec<PaymentAttemptId> {
        let all_done = tokio::time::timeout(timeout, async {
            while let Some(joined) = self.tasks.join_next_with_id().await {
                self.forget(joined);
            }
        })
        .await;
        if all_done.is_ok() {
            return Vec::new();
        }
        self.tasks.abort_all();
        let mut abandoned: Vec<PaymentAttemptId> = self.attempts.into_values().collect();
        abandoned.sort();
        abandoned
    }

    fn forget(&mut self, joined: Result<(tokio::task::Id, AttemptReport), tokio::task::JoinError>) {
        let id = match joined {
            Ok((id, _)) => id,
            Err(err) => err.id(),
        };
        self.attempts.remove(&id);
    }
}
