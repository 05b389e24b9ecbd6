//! The service itself (`Application`) running in the test's process with some roles, as
//! `onecharge serve` runs them, until the test stops it.
#![allow(dead_code)]

use std::net::SocketAddr;

use onecharge::app::{Application, Role};
use onecharge::config::Settings;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The service running with some roles; stopped (and awaited) by [`Served::stop`].
pub struct Served {
    /// Where the admin role listens, when it runs.
    pub admin: Option<SocketAddr>,
    stop: CancellationToken,
    running: JoinHandle<anyhow::Result<()>>,
}

impl Served {
    /// Builds the service from `settings` with `roles` and runs it on a task of its own.
    pub async fn start(settings: &Settings, roles: &[Role]) -> Self {
        let app = Application::build(settings.clone(), roles)
            .await
            .expect("the service builds");
        let admin = app.admin_addr();
        let stop = CancellationToken::new();
        let running = tokio::spawn(app.run(stop.clone()));
        Self {
            admin,
            stop,
            running,
        }
    }

    /// Stops the service as a SIGTERM would and waits until every role stopped cleanly.
    pub async fn stop(self) {
        self.stop.cancel();
        self.running.await.unwrap().expect("the roles stop cleanly");
    }
}
