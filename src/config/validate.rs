//! The checks serde cannot make: ranges, URL shapes and settings that must agree with each
//! other. [`Settings::validate`] is the list, one check per section or concern, each built
//! from [`require`] and [`within`]; a new setting adds its own check and one line there.
//!
//! Over 600 lines only with its tests: one test per refusal, each checking the one line an
//! operator reads.

use std::time::Duration;

use secrecy::ExposeSecret;

use super::{
    redact_url, ConfigError, ConsoleSettings, DatabaseSettings, GatewayKind, IntakeSettings,
    PurgeSettings, RefundSettings, RelaySettings, Settings, StreamsSettings, WebOrigin,
};

impl Settings {
    /// A Stripe secret key never travels in clear text: `gateway_kind = stripe` needs an
    /// `https://` gateway_url, or `http://` to a loopback address (a local mock).
    fn validate_gateway_kind(&self) -> Result<(), ConfigError> {
        if self.gateway_kind != GatewayKind::Stripe {
            return Ok(());
        }
        let Ok(url) = reqwest::Url::parse(&self.gateway_url) else {
            return Ok(()); // reported by `validate` as not a URL
        };
        let loopback = url.host_str().is_some_and(|host| {
            host == "localhost"
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        });
        if url.scheme() == "http" && !loopback {
            return Err(ConfigError(format!(
                "gateway_url (ONECHARGE_GATEWAY_URL): `{}` is plain http:// to a remote host; with gateway_kind = stripe use https:// (http:// only to a loopback mock)",
                redact_url(&self.gateway_url)
            )));
        }
        Ok(())
    }

    /// `serve` with the admin API refuses a non-loopback `admin_addr` without an
    /// `admin_token`, unless `insecure_admin` says the operator means it: anyone who could
    /// reach the address could read every attempt and resolve the ones in review. Off
    /// loopback it also refuses console cookies without `Secure` (`insecure_admin` does not
    /// lift that): a session cookie sent over plain HTTP is anyone's on the path.
    pub fn check_admin_exposure(&self) -> Result<(), ConfigError> {
        if !self.admin_addr.ip().is_loopback() && self.console.secure_cookie == Some(false) {
            return Err(ConfigError(format!(
                "console.secure_cookie (ONECHARGE_CONSOLE__SECURE_COOKIE) is false but admin_addr {} is not a loopback address, so the console's session cookie could travel over plain HTTP: serve the console through https and unset it (it defaults to true off loopback), or bind admin_addr to 127.0.0.1 and reach it through ssh -L",
                self.admin_addr
            )));
        }
        let credentials =
            self.admin_token.is_some() || !self.operators.is_empty() || self.insecure_admin;
        if credentials {
            return Ok(());
        }
        if let Some(origin) = self.admin_public_origins.first() {
            // A loopback bind is private only while nothing forwards to it: a public
            // origin says a proxy or a tunnel does, and it would give anyone operator rights.
            return Err(ConfigError(format!(
                "admin_public_origins (ONECHARGE_ADMIN_PUBLIC_ORIGINS) names {origin}, so the admin listener is reached through a proxy or tunnel, but no admin token and no operators are set, so anyone reaching {origin} could read and resolve attempts: set ONECHARGE_ADMIN_TOKEN (admin_token) or [[operators]], or pass --insecure-admin (ONECHARGE_INSECURE_ADMIN=true) if an open admin API is intended"
            )));
        }
        if self.admin_addr.ip().is_loopback() {
            return Ok(());
        }
        Err(ConfigError(format!(
            "admin_addr {} is not a loopback address and no admin token is set, so anyone who reaches it could read and resolve attempts: set ONECHARGE_ADMIN_TOKEN (admin_token), bind admin_addr to 127.0.0.1, or pass --insecure-admin (ONECHARGE_INSECURE_ADMIN=true) if an open admin API is intended",
            self.admin_addr
        )))
    }

    /// Checks what serde cannot: ranges, URL shapes and settings that must agree with each
    /// other. The first setting at fault is the error, one line naming it. Each check below
    /// covers one section (or the settings of one concern); a new setting adds its own.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_urls()?;
        self.check_nats()?;
        self.validate_gateway_kind()?;
        self.check_account()?;
        self.check_namespace()?;
        self.streams.check()?;
        self.intake.check()?;
        self.check_gateway_timing()?;
        self.check_gateway_rate()?;
        self.check_executor()?;
        self.relay.check()?;
        self.check_admin_token()?;
        self.check_admin_public_origins()?;
        self.check_admin_trusted_proxies()?;
        self.check_webhooks()?;
        self.check_operators()?;
        self.console.check()?;
        self.purge.check()?;
        self.refunds.check()?;
        self.check_reconciler()?;
        self.check_database()?;
        validate_max_lifetime(&self.database)?;
        self.check_shutdown_timeout()?;
        Ok(())
    }

    /// `shutdown_timeout` bounds the drain on SIGTERM: zero would abandon every call in
    /// hand at once, and longer than an hour is a process nobody can stop.
    fn check_shutdown_timeout(&self) -> Result<(), ConfigError> {
        require(
            !self.shutdown_timeout.is_zero() && self.shutdown_timeout <= Duration::from_secs(3600),
            "shutdown_timeout (ONECHARGE_SHUTDOWN_TIMEOUT)",
            format!(
                "must be above zero and at most 1h, got {}",
                humantime::format_duration(self.shutdown_timeout)
            ),
        )
    }

    fn check_urls(&self) -> Result<(), ConfigError> {
        require(
            self.database_url.starts_with("postgres://")
                || self.database_url.starts_with("postgresql://"),
            "database_url (ONECHARGE_DATABASE_URL)",
            "must start with postgres:// or postgresql://",
        )?;
        require(
            self.nats_url.contains("://") || !self.nats_url.contains(' '),
            "nats_url (ONECHARGE_NATS_URL)",
            "is not a NATS URL such as nats://127.0.0.1:4222",
        )?;
        require(
            reqwest::Url::parse(&self.gateway_url).is_ok_and(|u| u.scheme().starts_with("http")),
            "gateway_url (ONECHARGE_GATEWAY_URL)",
            format_args!("`{}` is not an http(s) URL", redact_url(&self.gateway_url)),
        )?;
        match &self.otlp_endpoint {
            Some(endpoint) => require(
                reqwest::Url::parse(endpoint).is_ok_and(|u| u.scheme() == "http"),
                "otlp_endpoint (ONECHARGE_OTLP_ENDPOINT)",
                format_args!(
                    "`{}` is not an http:// URL (the span exporter speaks plain HTTP: send it to a local collector)",
                    redact_url(endpoint)
                ),
            ),
            None => Ok(()),
        }
    }

    fn check_namespace(&self) -> Result<(), ConfigError> {
        require(
            self.namespace.is_empty() || is_name(&self.namespace),
            "namespace (ONECHARGE_NAMESPACE)",
            "may contain only letters, digits, `_` and `-`",
        )
    }

    /// The gateway's timeouts, and how long it keeps keys against how long it may take.
    fn check_gateway_timing(&self) -> Result<(), ConfigError> {
        require(
            !self.gateway_connect_timeout.is_zero() && !self.gateway_request_timeout.is_zero(),
            "gateway_connect_timeout / gateway_request_timeout",
            "must be above zero",
        )?;
        require(
            self.gateway_key_retention_margin < self.gateway_key_retention,
            "gateway_key_retention_margin",
            "must be less than gateway_key_retention",
        )?;
        let key_window = self.gateway_key_retention - self.gateway_key_retention_margin;
        require(
            !self.gateway_max_processing_time.is_zero()
                && self.gateway_max_processing_time < key_window,
            "gateway_max_processing_time (ONECHARGE_GATEWAY_MAX_PROCESSING_TIME)",
            format_args!(
                "must be above zero and less than gateway_key_retention - gateway_key_retention_margin ({}), got {}",
                humantime::format_duration(key_window),
                humantime::format_duration(self.gateway_max_processing_time)
            ),
        )?;
        // A send may leave until the lease ends and then run for the request timeout: the
        // window in which an empty lookup proves nothing must cover both.
        let longest_send = self.executor.lease + self.gateway_call_limit();
        require(
            self.gateway_max_processing_time >= longest_send,
            "gateway_max_processing_time (ONECHARGE_GATEWAY_MAX_PROCESSING_TIME)",
            format_args!(
                "must be at least executor.lease + gateway_connect_timeout + gateway_request_timeout ({}), got {}",
                humantime::format_duration(longest_send),
                humantime::format_duration(self.gateway_max_processing_time)
            ),
        )
    }

    /// The fleet-wide rate limit: a finite, non-negative rate (0: none); a burst only with a
    /// rate.
    fn check_gateway_rate(&self) -> Result<(), ConfigError> {
        require(
            self.gateway_max_rate.is_finite()
                && (0.0..=1_000_000.0).contains(&self.gateway_max_rate),
            "gateway_max_rate (ONECHARGE_GATEWAY_MAX_RATE)",
            format_args!(
                "must be requests per second between 0 (unlimited) and 1000000, got {}",
                self.gateway_max_rate
            ),
        )?;
        require(
            self.gateway_rate_burst == 0 || self.gateway_max_rate > 0.0,
            "gateway_rate_burst (ONECHARGE_GATEWAY_RATE_BURST)",
            "is set but gateway_max_rate is not: set the rate too, or unset the burst",
        )?;
        within(
            "gateway_rate_burst (ONECHARGE_GATEWAY_RATE_BURST)",
            self.gateway_rate_burst,
            0..=1_000_000,
        )
    }

    fn check_executor(&self) -> Result<(), ConfigError> {
        let executor = &self.executor;
        within("executor.concurrency", executor.concurrency, 1..=4096)?;
        within("executor.batch_size", executor.batch_size, 1..=1000)?;
        within("executor.claim_ahead", executor.claim_ahead, 0..=1000)?;
        require(
            executor.lease >= self.gateway_call_limit() + Duration::from_secs(1),
            "executor.lease",
            "must exceed gateway_connect_timeout + gateway_request_timeout by at least 1s, so that a live call never outlasts its lease",
        )?;
        require(
            executor.max_tries > 0,
            "executor.max_tries",
            "must be at least 1",
        )?;
        require(
            !executor.retry_min_delay.is_zero()
                && executor.retry_min_delay <= executor.retry_max_delay,
            "executor.retry_min_delay",
            "must be above zero and at most executor.retry_max_delay",
        )?;
        require(
            !executor.poll_interval.is_zero() && executor.breaker_failure_threshold > 0,
            "executor.poll_interval / executor.breaker_failure_threshold",
            "must be above zero",
        )
    }

    /// A webhook listener needs the Stripe connector and at least one secret; the tolerance
    /// is between 1s and 1h.
    fn check_webhooks(&self) -> Result<(), ConfigError> {
        require(
            (Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.webhook_tolerance),
            "webhook_tolerance (ONECHARGE_WEBHOOK_TOLERANCE)",
            "must be between 1s and 1h",
        )?;
        if self.webhook_addr.is_none() {
            return Ok(());
        }
        require(
            self.gateway_kind == GatewayKind::Stripe,
            "webhook_addr (ONECHARGE_WEBHOOK_ADDR)",
            "answers Stripe's webhooks only: set gateway_kind = stripe, or unset webhook_addr",
        )?;
        let secrets = self
            .stripe_webhook_secrets
            .as_ref()
            .map(|s| {
                s.expose_secret()
                    .split(',')
                    .map(str::trim)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        require(
            !secrets.is_empty() && secrets.iter().all(|s| !s.is_empty()),
            "stripe_webhook_secrets (ONECHARGE_STRIPE_WEBHOOK_SECRETS)",
            "webhook_addr is set, so give the endpoint's signing secret(s), comma-separated, none empty",
        )
    }

    fn check_admin_token(&self) -> Result<(), ConfigError> {
        require(
            !self
                .admin_token
                .as_ref()
                .is_some_and(|t| t.expose_secret().trim().is_empty()),
            "admin_token (ONECHARGE_ADMIN_TOKEN)",
            "is set but empty: set a token, or unset it to leave /api open on loopback",
        )
    }

    /// Each of `admin_trusted_proxies` is an IP address or network.
    fn check_admin_trusted_proxies(&self) -> Result<(), ConfigError> {
        for proxy in &self.admin_trusted_proxies {
            if crate::config::trusted_proxy(proxy).is_none() {
                return Err(ConfigError(format!(
                    "admin_trusted_proxies (ONECHARGE_ADMIN_TRUSTED_PROXIES): {proxy:?} is neither an IP address nor a network such as 10.0.0.0/8"
                )));
            }
        }
        Ok(())
    }

    /// Each of `admin_public_origins` is an origin a browser would send: `http(s)://host[:port]`.
    fn check_admin_public_origins(&self) -> Result<(), ConfigError> {
        for origin in &self.admin_public_origins {
            WebOrigin::parse(origin).map_err(|why| {
                ConfigError(format!(
                    "admin_public_origins (ONECHARGE_ADMIN_PUBLIC_ORIGINS): {why}"
                ))
            })?;
        }
        Ok(())
    }

    /// Each operator named once, with a role and the 64 hex digits of a SHA-256; no two
    /// sharing a token. The messages name the operator, never the hash.
    fn check_operators(&self) -> Result<(), ConfigError> {
        let mut names = std::collections::HashSet::new();
        let mut hashes = std::collections::HashSet::new();
        for (i, operator) in self.operators.iter().enumerate() {
            let name = &operator.name;
            require(
                (1..=64).contains(&name.chars().count())
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)),
                &format!("operators[{i}].name"),
                "must be 1 to 64 letters, digits, `_`, `-` or `.`",
            )?;
            require(
                names.insert(name.as_str()),
                &format!("operators[{i}].name"),
                format_args!("`{name}` is named twice: give each operator its own name"),
            )?;
            let hash = operator.token_sha256.trim().to_ascii_lowercase();
            require(
                hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
                &format!("operators[{i}].token_sha256 (operator `{name}`)"),
                "must be the 64 hex digits of the token's SHA-256 (onecharge operators new-token prints one)",
            )?;
            require(
                hashes.insert(hash),
                &format!("operators[{i}].token_sha256 (operator `{name}`)"),
                "is the same as another operator's: each operator needs a token of their own",
            )?;
        }
        Ok(())
    }

    fn check_reconciler(&self) -> Result<(), ConfigError> {
        let reconciler = &self.reconciler;
        require(
            !reconciler.schedule.is_empty() && !reconciler.schedule.iter().any(Duration::is_zero),
            "reconciler.schedule",
            "must list at least one delay, each above zero (e.g. [\"1m\", \"5m\"])",
        )?;
        require(
            !reconciler.processing_schedule.is_empty()
                && !reconciler.processing_schedule.iter().any(Duration::is_zero),
            "reconciler.processing_schedule",
            "must list at least one delay, each above zero (e.g. [\"1m\", \"5m\", \"30m\", \"2h\", \"6h\"])",
        )?;
        require(
            reconciler.processing_max >= self.gateway_max_processing_time,
            "reconciler.processing_max",
            "must be at least gateway_max_processing_time",
        )?;
        within("reconciler.batch_size", reconciler.batch_size, 1..=1000)?;
        require(
            reconciler.claim_hold > self.gateway_call_limit(),
            "reconciler.claim_hold",
            "must be longer than gateway_connect_timeout + gateway_request_timeout",
        )?;
        require(
            reconciler.sweep_window >= Duration::from_secs(60)
                && reconciler.sweep_window <= Duration::from_secs(90 * 86_400)
                && (reconciler.sweep_interval.is_zero()
                    || reconciler.sweep_window > reconciler.sweep_interval),
            "reconciler.sweep_window (ONECHARGE_RECONCILER__SWEEP_WINDOW)",
            "must be between 1m and 90days and longer than reconciler.sweep_interval, so that consecutive sweeps overlap",
        )
    }

    fn check_database(&self) -> Result<(), ConfigError> {
        let database = &self.database;
        let hour = Duration::from_secs(3600);
        require(
            (Duration::from_secs(1)..=hour).contains(&database.statement_timeout),
            "database.statement_timeout",
            "must be between 1s and 1h (every statement onecharge runs is short)",
        )?;
        require(
            database.lock_timeout >= Duration::from_millis(100)
                && database.lock_timeout <= database.statement_timeout,
            "database.lock_timeout",
            "must be at least 100ms and at most database.statement_timeout",
        )?;
        require(
            database.idle_in_transaction_session_timeout > self.relay.publish_timeout
                && database.idle_in_transaction_session_timeout <= hour,
            "database.idle_in_transaction_session_timeout",
            "must be longer than relay.publish_timeout (the relay waits for acks inside its transaction) and at most 1h",
        )?;
        require(
            database.startup_wait <= Duration::from_secs(600),
            "database.startup_wait",
            "must be at most 10m (0s: no wait)",
        )
    }
}

/// `database.max_lifetime`: long enough that connections are not reopened all the time,
/// short enough that a moved database address is followed soon after a failover.
fn validate_max_lifetime(database: &DatabaseSettings) -> Result<(), ConfigError> {
    if !(Duration::from_secs(10)..=Duration::from_secs(3600)).contains(&database.max_lifetime) {
        return Err(ConfigError(
            "database.max_lifetime: must be between 10s and 1h (connections to a node that lost its role are replaced within it)".into(),
        ));
    }
    Ok(())
}

impl ConsoleSettings {
    fn check(&self) -> Result<(), ConfigError> {
        require(
            self.session_ttl >= Duration::from_secs(60)
                && self.session_ttl <= Duration::from_secs(7 * 86_400),
            "console.session_ttl (ONECHARGE_CONSOLE__SESSION_TTL)",
            "must be between 1m and 7days",
        )
    }
}

impl StreamsSettings {
    fn check(&self) -> Result<(), ConfigError> {
        require(
            (1..=5).contains(&self.replicas),
            "streams.replicas (ONECHARGE_STREAMS__REPLICAS)",
            format_args!(
                "must be between 1 and 5 (3 on a NATS cluster), got {}",
                self.replicas
            ),
        )
    }
}

impl IntakeSettings {
    fn check(&self) -> Result<(), ConfigError> {
        within("intake.batch_size", self.batch_size, 1..=1000)?;
        within("intake.concurrency", self.concurrency, 1..=64)?;
        within("intake.max_deliver", self.max_deliver, 2..=1000)?;
        within(
            "intake.audit_batch_size",
            self.audit_batch_size,
            1..=100_000,
        )?;
        require(
            self.ack_wait >= Duration::from_secs(1),
            "intake.ack_wait",
            "must be at least 1s",
        )?;
        require(
            !self.consumer.is_empty() && is_name(&self.consumer),
            "intake.consumer",
            "must be non-empty letters, digits, `_` and `-`",
        )?;
        require(
            !self.retry_min_delay.is_zero() && self.retry_min_delay <= self.retry_max_delay,
            "intake.retry_min_delay",
            "must be above zero and at most intake.retry_max_delay",
        )
    }
}

impl RelaySettings {
    fn check(&self) -> Result<(), ConfigError> {
        within("relay.batch_size", self.batch_size, 1..=1000)?;
        require(
            !self.poll_interval.is_zero() && !self.publish_timeout.is_zero(),
            "relay.poll_interval / relay.publish_timeout",
            "must be above zero",
        )
    }
}

impl RefundSettings {
    fn check(&self) -> Result<(), ConfigError> {
        require(
            self.max_wait >= Duration::from_secs(60),
            "refunds.max_wait",
            "must be at least 1m (a refund waits that long for its charge to be final)",
        )?;
        require(
            !self.recheck_interval.is_zero(),
            "refunds.recheck_interval",
            "must be above zero",
        )?;
        within("refunds.batch_size", self.batch_size, 1..=1000)
    }
}

impl PurgeSettings {
    fn check(&self) -> Result<(), ConfigError> {
        require(
            self.dedupe_retention >= Duration::from_secs(60),
            "purge.dedupe_retention",
            "must be at least 1m",
        )?;
        require(
            self.history_retention >= Duration::from_secs(86_400),
            "purge.history_retention",
            "must be at least 1d (history is dropped a month at a time)",
        )?;
        require(
            self.interval >= Duration::from_secs(1),
            "purge.interval",
            "must be at least 1s",
        )?;
        within("purge.batch_size", self.batch_size, 1..=100_000)
    }
}

/// `Ok` when `ok`, else the error naming `key` and what it `must` be.
fn require(ok: bool, key: &str, must: impl std::fmt::Display) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError(format!("{key}: {must}")))
    }
}

/// `key`'s `value` must lie in `range`.
fn within<T>(key: &str, value: T, range: std::ops::RangeInclusive<T>) -> Result<(), ConfigError>
where
    T: PartialOrd + std::fmt::Display,
{
    require(
        range.contains(&value),
        key,
        format_args!(
            "must be between {} and {}, got {value}",
            range.start(),
            range.end()
        ),
    )
}

/// Letters, digits, `_` and `-` only: safe inside stream, subject and consumer names.
fn is_name(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
// figment::Jail's closures return figment::Error, which is large; that is its API.
#[allow(clippy::result_large_err)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::testing::{load, load_error};
    use crate::config::{OperatorRole, OperatorSetting, Overrides, RequiresAction};

    #[test]
    fn refund_settings_that_would_stop_refunds_are_refused_naming_the_key() {
        let with = |adjust: fn(&mut RefundSettings)| {
            let mut settings = Settings::default();
            adjust(&mut settings.refunds);
            settings.validate()
        };
        assert!(with(|_| {}).is_ok());
        let err = with(|r| r.batch_size = 0).unwrap_err();
        assert!(err.0.starts_with("refunds.batch_size"), "{}", err.0);
        let err = with(|r| r.max_wait = Duration::from_secs(1)).unwrap_err();
        assert!(err.0.starts_with("refunds.max_wait"), "{}", err.0);
    }

    #[test]
    fn a_stripe_key_never_goes_over_plain_http_to_a_remote_host() {
        let stripe = |url: &str| Settings {
            gateway_kind: GatewayKind::Stripe,
            gateway_url: url.into(),
            ..Settings::default()
        };
        let err = stripe("http://api.stripe.com").validate().unwrap_err();
        assert!(err.0.starts_with("gateway_url"), "{}", err.0);
        assert!(err.0.contains("https://"), "{}", err.0);
        for ok in [
            "https://api.stripe.com",
            "http://127.0.0.1:12111",
            "http://localhost:8420",
            "http://[::1]:9",
        ] {
            assert!(stripe(ok).validate().is_ok(), "{ok}");
        }
    }

    #[test]
    fn operators_are_read_from_the_file_and_each_mistake_is_one_line_without_the_hash() {
        const HASH: &str = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8";
        let entry = |name: &str, role: &str, hash: &str| {
            format!(
                "[[operators]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{hash}\"\n"
            )
        };
        crate::config::testing::jail(|jail| {
            let load = |jail: &mut figment::Jail, text: String| {
                jail.create_file("ops.toml", &text).unwrap();
                Settings::load(Some(Path::new("ops.toml")), &Overrides::default())
            };
            let s = load(
                jail,
                entry("ada", "operator", HASH) + &entry("vic", "viewer", &HASH.replace('5', "6")),
            )
            .unwrap();
            assert_eq!(s.operators.len(), 2);
            assert_eq!(
                (s.operators[1].name.as_str(), s.operators[1].role),
                ("vic", OperatorRole::Viewer)
            );

            let refused = [
                (
                    entry("ada", "operator", HASH)
                        + &entry("ada", "viewer", &HASH.replace('5', "6")),
                    "operators[1].name: `ada` is named twice",
                ),
                (
                    entry("ada", "admin", HASH),
                    "found `admin`, expected ``viewer` or `operator``",
                ),
                (
                    entry("ada", "viewer", "not-hex"),
                    "operators[0].token_sha256 (operator `ada`): must be the 64 hex digits",
                ),
                (
                    entry("ada", "viewer", &HASH[1..]),
                    "must be the 64 hex digits",
                ),
                (
                    entry("ada", "viewer", HASH) + &entry("bob", "viewer", HASH),
                    "operators[1].token_sha256 (operator `bob`): is the same as another operator's",
                ),
                (
                    entry("a b", "viewer", HASH),
                    "operators[0].name: must be 1 to 64 letters",
                ),
            ];
            for (text, expected) in refused {
                let err = load(jail, text).unwrap_err().to_string();
                assert!(err.contains(expected), "{err}");
                assert!(
                    !err.contains('\n') && !err.contains(&HASH[1..]),
                    "one line, no hash: {err}"
                );
            }
            Ok(())
        });
    }

    #[test]
    fn a_session_cookie_without_secure_is_refused_on_an_admin_address_off_loopback() {
        crate::config::testing::jail(|jail| {
            jail.set_env("ONECHARGE_ADMIN_ADDR", "0.0.0.0:9464");
            jail.set_env("ONECHARGE_ADMIN_TOKEN", "tok-admin-0123456789");
            jail.set_env("ONECHARGE_CONSOLE__SECURE_COOKIE", "false");
            let err = load().check_admin_exposure().unwrap_err().to_string();
            assert!(
                err.contains("console.secure_cookie") && !err.contains('\n'),
                "one line naming the setting: {err}"
            );
            assert!(!err.contains("tok-admin"), "{err}");
            jail.set_env("ONECHARGE_ADMIN_ADDR", "127.0.0.1:9464");
            load().check_admin_exposure().unwrap();
            Ok(())
        });
    }

    #[test]
    fn operators_count_as_credentials_for_an_admin_address_off_loopback() {
        let mut s = Settings {
            admin_addr: "0.0.0.0:9464".parse().unwrap(),
            ..Settings::default()
        };
        assert!(s.check_admin_exposure().is_err());
        s.operators.push(OperatorSetting {
            name: "ada".into(),
            role: OperatorRole::Viewer,
            token_sha256: "ab".repeat(32),
        });
        assert!(s.check_admin_exposure().is_ok());
    }

    #[test]
    fn an_open_admin_behind_a_public_origin_is_refused_on_a_loopback_bind() {
        let mut s = Settings {
            admin_addr: "127.0.0.1:9464".parse().unwrap(),
            admin_public_origins: vec!["https://ops.example.com".into()],
            ..Settings::default()
        };
        let err = s.check_admin_exposure().unwrap_err().to_string();
        assert!(
            err.contains("admin_public_origins") && err.contains("ONECHARGE_ADMIN_TOKEN"),
            "{err}"
        );
        assert!(!err.contains('\n'), "one line: {err}");
        s.admin_token = Some("tok-admin-0123456789".to_owned().into());
        assert!(s.check_admin_exposure().is_ok());
        s.admin_token = None;
        s.insecure_admin = true;
        assert!(s.check_admin_exposure().is_ok(), "an open admin on purpose");
    }

    #[test]
    fn stream_replicas_default_to_one_and_outside_one_to_five_are_refused_by_name() {
        crate::config::testing::jail(|jail| {
            let s = load();
            assert_eq!(s.streams.replicas, 1);
            jail.set_env("ONECHARGE_STREAMS__REPLICAS", "3");
            let s = load();
            assert_eq!(s.streams.replicas, 3);
            for bad in ["0", "6"] {
                jail.set_env("ONECHARGE_STREAMS__REPLICAS", bad);
                let err = load_error();
                assert_eq!(
                    err,
                    format!("configuration error: streams.replicas (ONECHARGE_STREAMS__REPLICAS): must be between 1 and 5 (3 on a NATS cluster), got {bad}")
                );
            }
            Ok(())
        });
    }

    #[test]
    fn the_otlp_endpoint_is_off_by_default_and_must_be_an_http_url() {
        crate::config::testing::jail(|jail| {
            let s = load();
            assert_eq!(s.otlp_endpoint, None);
            jail.set_env("ONECHARGE_OTLP_ENDPOINT", "http://127.0.0.1:4318");
            let s = load();
            assert_eq!(s.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318"));
            jail.set_env("ONECHARGE_OTLP_ENDPOINT", "collector:4318");
            let err = load_error();
            assert!(
                err.contains("otlp_endpoint (ONECHARGE_OTLP_ENDPOINT)"),
                "{err}"
            );
            assert!(!err.contains('\n'));
            Ok(())
        });
    }

    #[test]
    fn database_timeouts_have_defaults_and_a_bad_one_is_one_line_naming_it() {
        crate::config::testing::jail(|jail| {
            let s = load();
            assert_eq!(s.database.statement_timeout, Duration::from_secs(30));
            assert_eq!(s.database.lock_timeout, Duration::from_secs(5));
            assert_eq!(
                s.database.idle_in_transaction_session_timeout,
                Duration::from_secs(60)
            );
            jail.set_env("ONECHARGE_DATABASE__LOCK_TIMEOUT", "2m");
            let err = load_error();
            assert!(
                err.contains("database.lock_timeout: must be at least 100ms and at most database.statement_timeout"),
                "{err}"
            );
            jail.set_env("ONECHARGE_DATABASE__LOCK_TIMEOUT", "2s");
            jail.set_env(
                "ONECHARGE_DATABASE__IDLE_IN_TRANSACTION_SESSION_TIMEOUT",
                "1s",
            );
            let err = load_error();
            assert!(
                err.contains("database.idle_in_transaction_session_timeout: must be longer than relay.publish_timeout"),
                "{err}"
            );
            jail.set_env(
                "ONECHARGE_DATABASE__IDLE_IN_TRANSACTION_SESSION_TIMEOUT",
                "2m",
            );
            jail.set_env("ONECHARGE_DATABASE__STATEMENT_TIMEOUT", "soon");
            let err = load_error();
            assert!(err.contains("statement_timeout"), "{err}");
            assert!(!err.contains('\n'));
            jail.set_env("ONECHARGE_DATABASE__STATEMENT_TIMEOUT", "10s");
            let s = load();
            assert_eq!(s.database.statement_timeout, Duration::from_secs(10));
            assert_eq!(s.database.lock_timeout, Duration::from_secs(2));
            Ok(())
        });
    }

    #[test]
    fn the_gateways_maximum_processing_time_must_fit_inside_the_key_window() {
        crate::config::testing::jail(|jail| {
            let s = load();
            assert_eq!(s.gateway_max_processing_time, Duration::from_secs(600));
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "23h");
            let err = load_error();
            assert_eq!(
                err,
                "configuration error: gateway_max_processing_time (ONECHARGE_GATEWAY_MAX_PROCESSING_TIME): \
                 must be above zero and less than gateway_key_retention - gateway_key_retention_margin (23h), got 23h"
            );
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "0s");
            assert!(Settings::load(None, &Overrides::default()).is_err());
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "2m");
            let s = load();
            assert_eq!(s.gateway_max_processing_time, Duration::from_secs(120));
            Ok(())
        });
    }

    #[test]
    fn a_processing_time_shorter_than_the_lease_plus_a_whole_call_is_refused() {
        crate::config::testing::jail(|jail| {
            jail.set_env("ONECHARGE_EXECUTOR__LEASE", "5m");
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "5m");
            let err = load_error();
            assert!(
                err.starts_with("configuration error: gateway_max_processing_time (ONECHARGE_GATEWAY_MAX_PROCESSING_TIME): must be at least executor.lease"),
                "{err}"
            );
            assert!(!err.contains('\n'));
            jail.set_env("ONECHARGE_GATEWAY_MAX_PROCESSING_TIME", "10m");
            let s = load();
            assert_eq!(
                s.reconciler.processing_max,
                Duration::from_secs(15 * 24 * 3600)
            );
            assert_eq!(s.stripe_requires_action, RequiresAction::Cancel);
            Ok(())
        });
    }

    #[test]
    fn serve_waits_a_minute_at_start_for_a_writable_primary_and_at_most_ten() {
        crate::config::testing::jail(|jail| {
            assert_eq!(load().database.startup_wait, Duration::from_secs(60));
            jail.set_env("ONECHARGE_DATABASE__STARTUP_WAIT", "0s");
            assert_eq!(load().database.startup_wait, Duration::ZERO);
            jail.set_env("ONECHARGE_DATABASE__STARTUP_WAIT", "11m");
            let err = load_error();
            assert!(
                err.contains("database.startup_wait: must be at most 10m"),
                "{err}"
            );
            Ok(())
        });
    }

    #[test]
    fn database_max_lifetime_defaults_to_five_minutes_and_more_than_an_hour_is_refused() {
        crate::config::testing::jail(|jail| {
            let s = load();
            assert_eq!(s.database.max_lifetime, Duration::from_secs(300));
            jail.set_env("ONECHARGE_DATABASE__MAX_LIFETIME", "2h");
            let err = load_error();
            assert!(
                err.contains("database.max_lifetime: must be between 10s and 1h"),
                "{err}"
            );
            Ok(())
        });
    }
}
