//! Typed settings: defaults < `onecharge.toml` (or `--config`) < `ONECHARGE_*` environment <
//! command-line flags. A wrong value is a [`ConfigError`]: the process exits 2 with one line
//! naming the setting and what to fix. Each secret setting may instead be read from a file
//! (`<setting>_file`), and named operators from `operators_file` (`files`). Secrets are [`secrecy::SecretString`]s: they print as
//! `[REDACTED]` in every `Debug` and never appear in `--help`.
//!
//! The lowest layer above the domain: it imports nothing of onecharge but the domain, so
//! every other module may read it. `settings` is what can be set, `validate` the checks of
//! a loaded configuration, `redact` the handling of secrets, `duration` the one duration
//! parser, `origin` the web origins of `admin_public_origins`.

use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::Serialize;

mod account;
mod duration;
mod files;
mod nats;
mod origin;
mod redact;
mod settings;
pub mod tls;
mod tokens;
mod validate;

pub use account::StripeMode;
pub use duration::{parse_duration, MAX_DURATION};
pub use files::SECRET_SETTINGS;
pub use nats::{read_nkey_seed, NatsAuth, NatsSignIn, NatsUser};
pub use origin::WebOrigin;
pub use redact::{redact_url, url_secrets, Redactor, REDACTED};
pub use settings::{
    ConsoleSettings, DatabaseSettings, ExecutorSettings, GatewayKind, IntakeSettings, LogFormat,
    OperatorRole, OperatorSetting, PurgeSettings, ReconcilerSettings, RefundSettings,
    RelaySettings, RequiresAction, Settings, StreamsSettings, DEFAULT_STRIPE_API_VERSION,
};
pub use tokens::{mint_token, token_sha256};

/// One of `admin_trusted_proxies` read: a network (`10.0.0.0/8`), or an address as the
/// network of that address alone.
pub fn trusted_proxy(text: &str) -> Option<ipnet::IpNet> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>().ok().or_else(|| {
        text.parse::<std::net::IpAddr>()
            .ok()
            .map(ipnet::IpNet::from)
    })
}

/// The file read when `--config` is not given, if it exists.
pub const DEFAULT_CONFIG_FILE: &str = "onecharge.toml";

/// A configuration the operator must fix. Its `Display` is the one line printed before exit 2.
#[derive(Debug, thiserror::Error)]
#[error("configuration error: {0}")]
pub struct ConfigError(pub String);

/// A command line that asks for something impossible (an invalid command to publish, a
/// status that does not exist). Also exits 2, with its one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Values given as flags: they win over the file and the environment.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Overrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_kind: Option<GatewayKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_addr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
}

/// `ONECHARGE_` variables that are not settings, which the settings' `deny_unknown_fields`
/// would refuse: where `onecharge demo` finds the binaries of its private PostgreSQL and
/// NATS (`onecharge-demo`'s `private`, decision 197), read by the demo alone.
const NOT_SETTINGS: [&str; 2] = ["demo_pg_bin", "demo_nats_server"];

impl Settings {
    /// Loads settings from, in rising precedence: defaults, the config file, the
    /// environment, `overrides`. An explicitly named file that does not exist is an error;
    /// the default file is optional.
    pub fn load(config_file: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let file: PathBuf = match config_file {
            Some(path) if !path.exists() => {
                return Err(ConfigError(format!(
                    "--config {}: no such file",
                    path.display()
                )))
            }
            Some(path) => path.to_owned(),
            None => PathBuf::from(DEFAULT_CONFIG_FILE),
        };
        check_toml_syntax(&file)?;
        // Secrets from the environment are taken as the raw text: figment would read
        // `ONECHARGE_GATEWAY_API_KEY=0042` as the number 42.
        let secret_keys = ["gateway_api_key", "admin_token", "stripe_webhook_secrets"];
        let not_settings: Vec<&str> = secret_keys.iter().chain(&NOT_SETTINGS).copied().collect();
        let layered = |defaults: Settings| {
            let mut figment = Figment::from(Serialized::defaults(defaults))
                .merge(Toml::file(&file))
                .merge(
                    Env::prefixed("ONECHARGE_")
                        .ignore(&not_settings)
                        .split("__"),
                );
            for (key, value) in Env::prefixed("ONECHARGE_").only(&secret_keys).iter() {
                figment = figment.merge(Serialized::default(key.as_str(), value));
            }
            figment.merge(Serialized::defaults(overrides))
        };
        let figment = layered(Settings::default());
        // The default gateway_url is the chosen gateway kind's (contract §3.1).
        let figment = match figment.extract_inner::<GatewayKind>("gateway_kind") {
            Ok(kind) if kind != GatewayKind::default() => layered(Settings {
                gateway_url: kind.default_url().into(),
                ..Settings::default()
            }),
            _ => figment,
        };
        let mut settings: Settings = figment.extract().map_err(|e| {
            ConfigError(
                Redactor::from_figment(&figment)
                    .scrub(&one_line(&e))
                    .into_owned(),
            )
        })?;
        // What the file and the environment set, without defaults: where a secret given both
        // as a value and as a file is found.
        let given = Figment::from(Toml::file(&file)).merge(
            Env::prefixed("ONECHARGE_")
                .ignore(&NOT_SETTINGS)
                .split("__"),
        );
        files::read_secret_files(&mut settings, &given, overrides)?;
        files::read_operators_file(&mut settings)?;
        settings.validate().map_err(|e| {
            ConfigError(Redactor::from_settings(&settings).scrub(&e.0).into_owned())
        })?;
        Ok(settings)
    }
}

fn one_line(error: &figment::Error) -> String {
    let mut text = error.to_string().replace('\n', " ");
    if let Some(profile_key) = error.path.first() {
        if !text.contains(profile_key.as_str()) {
            text = format!("{}: {text}", error.path.join("."));
        }
    }
    text
}

/// Refuses a configuration file that is not valid TOML with the place and the parser's
/// complaint only: the usual message quotes the offending line, which may hold a secret.
fn check_toml_syntax(file: &Path) -> Result<(), ConfigError> {
    let Ok(text) = std::fs::read_to_string(file) else {
        // Missing (the optional default file) or unreadable: figment reports the latter.
        return Ok(());
    };
    let Err(error) = toml::from_str::<toml::Table>(&text) else {
        return Ok(());
    };
    let place = error
        .span()
        .map(|span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!(" at line {line}, column {column}")
        })
        .unwrap_or_default();
    Err(ConfigError(format!(
        "{}: not valid TOML{place}: {} (the line is not shown: it may hold a secret)",
        file.display(),
        error.message().trim().replace('\n', "; ")
    )))
}

/// What the tests of every part of the configuration load through.
#[cfg(test)]
mod testing {
    use super::{Overrides, Settings};

    /// The settings a jail's files and environment give, with no overrides.
    pub(super) fn load() -> Settings {
        Settings::load(None, &Overrides::default()).unwrap()
    }

    /// `figment::Jail::expect_with` without the `ONECHARGE_*` variables of the shell that runs
    /// the tests: the README's set-up exports `ONECHARGE_DATABASE_URL`, which would meet a
    /// test's own `ONECHARGE_DATABASE_URL_FILE` ("both set"). The jail restores them after.
    // figment::Jail's closures return figment::Error, which is large; that is its API.
    #[allow(clippy::result_large_err)]
    pub(crate) fn jail(f: impl FnOnce(&mut figment::Jail) -> figment::error::Result<()>) {
        figment::Jail::expect_with(|jail| {
            let kept: Vec<(String, String)> = std::env::vars()
                .filter(|(name, _)| !name.starts_with("ONECHARGE_"))
                .collect();
            jail.clear_env();
            for (name, value) in kept {
                jail.set_env(name, value);
            }
            f(jail)
        });
    }

    /// The one-line error a jail's files and environment give, with no overrides.
    pub(super) fn load_error() -> String {
        Settings::load(None, &Overrides::default())
            .unwrap_err()
            .to_string()
    }
}

#[cfg(test)]
// figment::Jail's closures return figment::Error, which is large; that is its API.
#[allow(clippy::result_large_err)]
mod tests {
    use std::time::Duration;

    use super::testing::{load, load_error};
    use super::*;

    #[test]
    fn defaults_match_the_contract() {
        let s = Settings::default();
        assert_eq!(s.database_url, "postgres://127.0.0.1:5432/onecharge");
        assert_eq!(s.nats_url, "nats://127.0.0.1:4222");
        assert_eq!(s.admin_addr.to_string(), "127.0.0.1:9464");
        assert_eq!(s.intake.max_command_age, Duration::from_secs(86_400));
        s.validate().unwrap();
    }

    #[test]
    fn the_gateway_kind_chooses_the_default_gateway_url_and_an_explicit_url_wins() {
        crate::config::testing::jail(|jail| {
            let s = load();
            assert_eq!(s.gateway_kind, GatewayKind::Onecharge);
            assert_eq!(s.gateway_url, "http://127.0.0.1:8080");
            jail.set_env("ONECHARGE_GATEWAY_KIND", "stripe");
            let s = load();
            assert_eq!(s.gateway_kind, GatewayKind::Stripe);
            assert_eq!(s.gateway_url, "https://api.stripe.com");
            jail.set_env("ONECHARGE_GATEWAY_URL", "http://127.0.0.1:12111");
            let s = load();
            assert_eq!(s.gateway_url, "http://127.0.0.1:12111");
            jail.set_env("ONECHARGE_GATEWAY_KIND", "paypal");
            let err = Settings::load(None, &Overrides::default()).unwrap_err();
            assert!(
                err.0.contains("paypal") && err.0.contains("stripe"),
                "{}",
                err.0
            );
            Ok(())
        });
    }

    #[test]
    fn file_then_environment_then_flags_take_precedence() {
        crate::config::testing::jail(|jail| {
            jail.create_file("c.toml", "nats_url = \"nats://file:1\"\ndatabase_url = \"postgres://file/db\"\n[intake]\nbatch_size = 7\n")?;
            jail.set_env("ONECHARGE_DATABASE_URL", "postgres://env/db");
            jail.set_env("ONECHARGE_INTAKE__MAX_COMMAND_AGE", "2h");
            let overrides = Overrides {
                nats_url: Some("nats://flag:2".into()),
                ..Default::default()
            };
            let s = Settings::load(Some(Path::new("c.toml")), &overrides).unwrap();
            assert_eq!(s.nats_url, "nats://flag:2");
            assert_eq!(s.database_url, "postgres://env/db");
            assert_eq!(s.intake.batch_size, 7);
            assert_eq!(s.intake.max_command_age, Duration::from_secs(7200));
            Ok(())
        });
    }

    #[test]
    fn a_bad_value_is_one_line_naming_the_setting() {
        crate::config::testing::jail(|jail| {
            jail.set_env("ONECHARGE_INTAKE__BATCH_SIZE", "lots");
            let err = load_error();
            assert!(err.contains("batch_size"), "{err}");
            assert!(!err.contains('\n'));
            jail.set_env("ONECHARGE_INTAKE__BATCH_SIZE", "0");
            let err = load_error();
            assert!(
                err.contains("intake.batch_size: must be between 1 and 1000, got 0"),
                "{err}"
            );
            Ok(())
        });
    }
}
