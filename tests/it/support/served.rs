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
    /// Builds the service from `settings` with `roles` and runs it on a task of its own,
    /// after [`set_up`].
    pub async fn start(settings: &Settings, roles: &[Role]) -> Self {
        set_up(settings).await;
        let app = Application::build(settings.clone(), roles)
            .await
            .expect("the service builds");
        Self::from_app(app)
    }

    /// Runs an already built service (whose listeners the test has read) on a task of its own.
    pub fn from_app(app: Application) -> Self {
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

/// What `onecharge setup` makes before a service starts, and `serve` only checks (docs/
/// docs/decisions/160-setup-migrates-as-the-owner-serve-only-checks.md): the migrated database and the three streams of `settings`' namespace.
/// Passes over what exists already.
pub async fn set_up(settings: &Settings) {
    drop(
        onecharge::store::Store::setup(&settings.database_url)
            .await
            .expect("the database migrates"),
    );
    onecharge::broker::Broker::connect(settings)
        .await
        .expect("NATS")
        .ensure_streams()
        .await
        .expect("the streams");
}

/// Two named operators — `ada` acts (`operator`), `vic` reads (`viewer`) — with these
/// tokens, and the shared admin token, so nothing of the admin role is open.
pub fn with_ada_and_vic(
    settings: &mut Settings,
    admin_token: &str,
    ada_token: &str,
    vic_token: &str,
) {
    use onecharge::config::token_sha256;
    use onecharge::config::{OperatorRole, OperatorSetting};
    let operator = |name: &str, role, token| OperatorSetting {
        name: name.into(),
        role,
        token_sha256: token_sha256(token),
    };
    settings.admin_token = Some(secrecy::SecretString::from(admin_token));
    settings.operators = vec![
        operator("ada", OperatorRole::Operator, ada_token),
        operator("vic", OperatorRole::Viewer, vic_token),
    ];
}

impl Served {
    /// Only the admin role (API and console), on a free port.
    pub async fn admin(settings: &Settings) -> Self {
        Self::start(settings, &[Role::Admin]).await
    }

    /// `http://<admin address><path>`.
    pub fn url(&self, path: &str) -> String {
        format!(
            "http://{}{path}",
            self.admin.expect("the admin role listens")
        )
    }
}
