//! Role instances (executors, intakes) running at once in the benchmark's process, each its
//! real `run` loop as a `serve` process would run it, until the benchmark stops them all.

use std::future::Future;

use anyhow::Context as _;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The running instances and the one token that stops them.
pub struct Running {
    shutdown: CancellationToken,
    tasks: JoinSet<anyhow::Result<()>>,
}

impl Running {
    /// Spawns `run(role, shutdown)` for every role, e.g. `Running::start(executors, Executor::run)`.
    pub fn start<R, F>(roles: Vec<R>, run: impl Fn(R, CancellationToken) -> F) -> Self
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let shutdown = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for role in roles {
            tasks.spawn(run(role, shutdown.clone()));
        }
        Self { shutdown, tasks }
    }

    /// Cancels every instance and waits until each has drained and returned; the first error
    /// or panic of any is the benchmark's.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        while let Some(stopped) = self.tasks.join_next().await {
            stopped.context("a role instance panicked")??;
        }
        Ok(())
    }
}
