//! Every console request's id: in the `X-Request-Id` header of its answer, on the page of
//! anything that failed while answering it, and in every log line it causes (they are
//! written inside its `console_request` span). A person quotes the id from the browser;
//! whoever reads the log finds the error under it. The error itself never reaches the
//! browser: a database's or NATS's words name tables, streams and hosts, which are the
//! log's to keep.
//!
//! The guard opens the id's scope around each console request ([`RequestId::scope`]), so a
//! page reads it with [`RequestId::current`] without every handler passing it along.

use std::future::Future;

use uuid::Uuid;

tokio::task_local! {
    static CURRENT: RequestId;
}

/// The header that carries a console answer's request id.
pub(super) const HEADER: &str = "x-request-id";

/// One console request's id (a random UUID: it says nothing about the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RequestId(Uuid);

impl RequestId {
    pub(super) fn new() -> Self {
        Self(Uuid::new_v4())
    }

    /// The id of the request being answered; `None` only outside the guard's scope, which
    /// no console handler runs in.
    pub(super) fn current() -> Option<Self> {
        CURRENT.try_with(|id| *id).ok()
    }

    /// Answers with `answer` as request `self`.
    pub(super) async fn scope<F: Future>(self, answer: F) -> F::Output {
        CURRENT.scope(self, answer).await
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
