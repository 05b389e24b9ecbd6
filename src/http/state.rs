//! What every handler of the admin listener shares: [`AdminState`], and the console's part of
//! it, [`Console`] (which the API's authorisation reads too, so it sits here, below both).

use metrics_exporter_prometheus::PrometheusHandle;
use secrecy::SecretString;

use super::access::Operators;
use super::origin::PublicOrigins;
use super::throttle::SignInThrottle;
use crate::broker::Broker;
use crate::config::{ConsoleSettings, Settings};
use crate::gateway::GatewayHealth;
use crate::operator::RetryWindow;
use crate::reconciler::Reconciler;
use crate::store::Store;

/// What the handlers need.
#[derive(Clone)]
pub struct AdminState {
    pub store: Store,
    pub broker: Broker,
    pub metrics: PrometheusHandle,
    pub admin_token: Option<SecretString>,
    /// The executor's view of the gateway, when this process runs one: readiness fails
    /// while the gateway rejects onecharge's credentials (every call is paused).
    pub gateway_health: Option<GatewayHealth>,
    /// The configured limits of a retry (`RetryWindow::from_settings`): the resolve
    /// endpoint enforces them exactly as `onecharge attempts resolve` does, and the
    /// listings show when each attempt's window closes.
    pub retry_window: RetryWindow,
    /// The named operators, the console's sessions and settings
    /// (`Console::from_settings`; `Console::default()`: no operators, default settings).
    pub console: Console,
    /// The reconciler whose lookup `recheck` (and a bulk recheck) runs, when this process
    /// has a gateway client (it runs the executor or the reconciler); `None` answers 503.
    pub reconciler: Option<Reconciler>,
}

/// What the console needs beyond the rest of the admin state.
#[derive(Debug, Clone, Default)]
pub struct Console {
    /// The named operators (`[[operators]]`); the shared admin token is `AdminState`'s.
    pub operators: Operators,
    pub settings: ConsoleSettings,
    /// Whether the console's cookies are `Secure` (`ConsoleSettings::secure_cookie_on` for
    /// the admin address).
    pub secure_cookie: bool,
    /// `admin_public_origins`, which the admin router's `origin::guard` reads for every
    /// route: carried here because every admin state is built with a `Console`.
    pub public_origins: PublicOrigins,
    /// The durable intake consumer, whose lag the overview shows.
    pub intake_consumer: Option<String>,
    /// Failed sign-ins per client address and in all, shared by this instance's requests.
    pub sign_in_throttle: SignInThrottle,
    /// `admin_trusted_proxies`: whose `X-Forwarded-For` names the client
    /// (`crate::http::client`).
    pub trusted_proxies: std::sync::Arc<[ipnet::IpNet]>,
}

impl Console {
    /// The console of a configured service.
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            operators: Operators::new(&settings.operators),
            settings: settings.console.clone(),
            secure_cookie: settings
                .console
                .secure_cookie_on(settings.admin_addr, &settings.admin_public_origins),
            public_origins: PublicOrigins::new(&settings.admin_public_origins),
            intake_consumer: Some(settings.intake.consumer.clone()),
            sign_in_throttle: SignInThrottle::default(),
            trusted_proxies: settings
                .admin_trusted_proxies
                .iter()
                .filter_map(|proxy| crate::config::trusted_proxy(proxy))
                .collect(),
        }
    }
}

/// Whether nothing is configured to sign in with: then `/api/*` and the console are open
/// (`serve` refuses that on a non-loopback address unless `--insecure-admin`).
pub fn is_open(state: &AdminState) -> bool {
    state.admin_token.is_none() && state.console.operators.is_empty()
}
