//! Group commit for settlements and for the writes before a confirm (a Stripe
//! PaymentIntent's id with the send's stamp): the writes that are ready when the database is
//! free share one transaction, so at high rates a commit (and its fsync) is paid per batch,
//! not per charge; at low rates a write goes alone, the moment it arrives — nothing waits
//! for a batch to fill.
//!
//! Invariants:
//! - A batch changes nothing unless every write in it commits ([`Batched::write_all`] is one
//!   statement); each write keeps its own fence, so batching never lets a stale worker
//!   through.
//! - One write the database rejects never costs the others theirs: a batch that fails for
//!   a permanent reason is written again one write at a time, and only the culprit fails.
//! - A transient failure (the database restarting) is reported to every write of the batch;
//!   each caller decides whether its lease leaves time to try again.

use futures::channel::{mpsc, oneshot};
use futures::future::BoxFuture;
use futures::StreamExt as _;

use crate::domain::SettleWrite;
use crate::store::attempts as sql;
use crate::store::attempts::gateway_objects::{self, ConfirmSend, ObjectWrite};
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

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

type Reply<A> = oneshot::Sender<Result<A, WriteError>>;

/// A write the executor group-commits: how a batch of them is written in one statement.
pub trait Batched: Send + Sync + 'static {
    type Write: Send + Sync + 'static;
    /// What each write answers (whether its fence let it through, and how).
    type Answer: Send + 'static;
    /// What the log and a stopped writer call these writes.
    const NAME: &'static str;

    /// Writes `writes` in one transaction: element `i` answers `writes[i]`; an error writes
    /// none of them.
    fn write_all<'a>(
        store: &'a Store,
        writes: &'a [Self::Write],
    ) -> BoxFuture<'a, Result<Vec<Self::Answer>, sqlx::Error>>;
}

/// Settlements ([`sql::settle_all`]): each answers whether its fence let it through.
pub struct Settlements;

impl Batched for Settlements {
    type Write = SettleWrite;
    type Answer = bool;
    const NAME: &'static str = "settlements";

    fn write_all<'a>(
        store: &'a Store,
        writes: &'a [SettleWrite],
    ) -> BoxFuture<'a, Result<Vec<bool>, sqlx::Error>> {
        Box::pin(sql::settle_all(store, writes))
    }
}

/// The writes before a confirm: a gateway object stored with the send's stamp
/// ([`gateway_objects::record_gateway_objects`], decision 123).
pub struct GatewayObjects;

impl Batched for GatewayObjects {
    type Write = ObjectWrite;
    type Answer = ConfirmSend;
    const NAME: &'static str = "gateway objects";

    fn write_all<'a>(
        store: &'a Store,
        writes: &'a [ObjectWrite],
    ) -> BoxFuture<'a, Result<Vec<ConfirmSend>, sqlx::Error>> {
        Box::pin(gateway_objects::record_gateway_objects(store, writes))
    }
}

/// The handle writers send settlements through.
pub type SettlementWriter = GroupWriter<Settlements>;

/// The handle the writes before a confirm go through.
pub type GatewayObjectWriter = GroupWriter<GatewayObjects>;

/// The handle writes of one kind are sent through. Cheap to clone; the batching task stops
/// once every handle is dropped and the writes in hand are done.
pub struct GroupWriter<B: Batched> {
    queue: mpsc::UnboundedSender<(B::Write, Reply<B::Answer>)>,
}

impl<B: Batched> Clone for GroupWriter<B> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
        }
    }
}

impl<B: Batched> GroupWriter<B> {
    /// Starts the batching task on the current Tokio runtime; a batch holds at most
    /// `max_batch` writes.
    pub fn start(store: Store, max_batch: usize) -> Self {
        let (queue, pending) = mpsc::unbounded::<(B::Write, Reply<B::Answer>)>();
        tokio::spawn(async move {
            pending
                .ready_chunks(max_batch.max(1))
                .for_each_concurrent(BATCHES_IN_FLIGHT, |batch| write_batch::<B>(&store, batch))
                .await;
        });
        Self { queue }
    }

    /// Writes one write (in whatever batch it lands) and answers what its fence let
    /// through.
    pub async fn write(&self, write: B::Write) -> Result<B::Answer, WriteError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || WriteError {
            transient: false,
            message: format!("the writer of {} stopped", B::NAME),
        };
        self.queue
            .unbounded_send((write, reply))
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn write_batch<B: Batched>(store: &Store, batch: Vec<(B::Write, Reply<B::Answer>)>) {
    let (writes, replies): (Vec<B::Write>, Vec<Reply<B::Answer>>) = batch.into_iter().unzip();
    match B::write_all(store, &writes).await {
        Ok(answers) => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        Err(err) if writes.len() == 1 || store::is_transient(&err) => {
            let error = WriteError::new(&err);
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, writes = writes.len(), "a batch of {} was refused; writing them one at a time", B::NAME);
            for (write, reply) in writes.iter().zip(replies) {
                let answer = B::write_all(store, std::slice::from_ref(write))
                    .await
                    .map(|mut answers| answers.remove(0))
                    .map_err(|err| WriteError::new(&err));
                let _ = reply.send(answer);
            }
        }
    }
}
