//! Group commit for settlements: the results that are ready when the database is free share
//! one transaction, so at high rates a commit (and its fsync) is paid per batch, not per
//! charge; at low rates a result is written alone, the moment it arrives — nothing waits
//! for a batch to fill.
//!
//! Invariants:
//! - A batch changes nothing unless every write in it commits ([`sql::settle_all`]); each
//!   write keeps its own fence, so batching never lets a stale worker through.
//! - One write the database rejects never costs the others theirs: a batch that fails for
//!   a permanent reason is written again one write at a time, and only the culprit fails.
//! - A transient failure (the database restarting) is reported to every write of the batch;
//!   each caller decides whether its lease leaves time to try again.

use futures::channel::{mpsc, oneshot};
use futures::StreamExt as _;

use crate::domain::SettleWrite;
use crate::store::attempts as sql;
use crate::store::{self, Store};

/// Batches written at once. Two lets one batch be built and sent while the previous one
/// commits.
pub(super) const BATCHES_IN_FLIGHT: usize = 2;

/// Why a settlement was not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteError {
    /// May succeed if tried again (see [`store::is_transient`]).
    pub transient: bool,
    pub message: String,
}

impl WriteError {
    fn new(error: &sqlx::Error) -> Self {
        Self {
            transient: store::is_transient(error),
            message: error.to_string(),
        }
    }
}

type Reply = oneshot::Sender<Result<bool, WriteError>>;

/// The handle writers send settlements through. Cheap to clone; the batching task stops
/// once every handle is dropped and the writes in hand are done.
#[derive(Clone)]
pub struct SettlementWriter {
    queue: mpsc::UnboundedSender<(SettleWrite, Reply)>,
}

impl SettlementWriter {
    /// Starts the batching task on the current Tokio runtime; a batch holds at most
    /// `max_batch` writes.
    pub fn start(store: Store, max_batch: usize) -> Self {
        let (queue, pending) = mpsc::unbounded::<(SettleWrite, Reply)>();
        tokio::spawn(async move {
            pending
                .ready_chunks(max_batch.max(1))
                .for_each_concurrent(BATCHES_IN_FLIGHT, |batch| write_batch(&store, batch))
                .await;
        });
        Self { queue }
    }

    /// Writes one settlement (in whatever batch it lands) and answers whether its fence let
    /// it through.
    pub async fn write(&self, write: SettleWrite) -> Result<bool, WriteError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || WriteError {
            transient: false,
            message: "the settlement writer stopped".into(),
        };
        self.queue
            .unbounded_send((write, reply))
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn write_batch(store: &Store, batch: Vec<(SettleWrite, Reply)>) {
    let (writes, replies): (Vec<SettleWrite>, Vec<Reply>) = batch.into_iter().unzip();
    match sql::settle_all(store, &writes).await {
        Ok(settled) => {
            for (reply, settled) in replies.into_iter().zip(settled) {
                let _ = reply.send(Ok(settled));
            }
        }
        Err(err) if writes.len() == 1 || store::is_transient(&err) => {
            let error = WriteError::new(&err);
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, writes = writes.len(), "a batch of settlements was refused; writing them one at a time");
            for (write, reply) in writes.iter().zip(replies) {
                let answer = sql::settle(store, write)
                    .await
                    .map_err(|err| WriteError::new(&err));
                let _ = reply.send(answer);
            }
        }
    }
}
