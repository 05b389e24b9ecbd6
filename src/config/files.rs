//! Settings read from files that a platform mounts: each secret setting from
//! `<setting>_file` (`ONECHARGE_<SETTING>_FILE`), as a Kubernetes Secret volume or a secret
//! manager's agent writes it, and more named operators from `operators_file`. A secret kept
//! in a file stays out of the process's environment, which `/proc`, crash reports and child
//! processes can read. Every error is one line that names the setting and the file and
//! never holds what the file holds.

use std::path::Path;

use figment::Figment;
use serde::Deserialize;

use super::{ConfigError, OperatorSetting, Overrides, Settings};

/// The settings that hold a secret, or a URL that may carry one, in the order they are
/// documented. Each can be given as a value or, with `_file` appended, as a file.
pub const SECRET_SETTINGS: [&str; 6] = [
    "database_url",
    "nats_url",
    "nats_setup_url",
    "gateway_api_key",
    "admin_token",
    "stripe_webhook_secrets",
];

/// Reads each secret setting whose `_file` is set from that file. `given` holds what the
/// configuration file and the environment set, without the defaults: a setting given there
/// as a value and as a file is refused, since a reader could not tell which is live. A flag
/// (`--database-url`) wins over both, as it wins over every other layer.
pub(super) fn read_secret_files(
    settings: &mut Settings,
    given: &Figment,
    overrides: &Overrides,
) -> Result<(), ConfigError> {
    for setting in SECRET_SETTINGS {
        let file_setting = format!("{setting}_file");
        let path = match setting {
            "database_url" => settings.database_url_file.clone(),
            "nats_url" => settings.nats_url_file.clone(),
            "nats_setup_url" => settings.nats_setup_url_file.clone(),
            "gateway_api_key" => settings.gateway_api_key_file.clone(),
            "admin_token" => settings.admin_token_file.clone(),
            _ => settings.stripe_webhook_secrets_file.clone(),
        };
        let Some(path) = path else { continue };
        let flagged = match setting {
            "database_url" => overrides.database_url.is_some(),
            "nats_url" => overrides.nats_url.is_some(),
            _ => false,
        };
        if flagged {
            continue;
        }
        if given.contains(setting) {
            let variable = setting.to_ascii_uppercase();
            return Err(ConfigError(format!(
                "{setting} and {file_setting} are both set (ONECHARGE_{variable}, \
                 ONECHARGE_{variable}_FILE or onecharge.toml): pick one, the value or the file"
            )));
        }
        let value = read_secret_file(&file_setting, &path)?;
        match setting {
            "database_url" => settings.database_url = value,
            "nats_url" => settings.nats_url = value,
            "nats_setup_url" => settings.nats_setup_url = Some(value),
            "gateway_api_key" => settings.gateway_api_key = Some(value.into()),
            "admin_token" => settings.admin_token = Some(value.into()),
            _ => settings.stripe_webhook_secrets = Some(value.into()),
        }
    }
    Ok(())
}

/// The one line of a secret file: its whole content but a final newline (what `echo` and
/// most editors add; a Kubernetes Secret has none). Missing, unreadable, not text, empty or
/// of several lines is refused by name, never by content.
fn read_secret_file(file_setting: &str, path: &Path) -> Result<String, ConfigError> {
    let text = read_text(file_setting, path)?;
    let value = text
        .strip_suffix('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .unwrap_or(&text);
    let refuse = |what: &str| {
        Err(ConfigError(format!(
            "{file_setting} {}: {what} (its content is not shown)",
            path.display()
        )))
    };
    if value.trim().is_empty() {
        return refuse("is empty: write the secret into it");
    }
    if value.contains('\n') {
        return refuse("holds more than one line: a secret is one line");
    }
    Ok(value.to_owned())
}

/// A file's text, or one line naming the setting, the file and what is wrong with it.
fn read_text(file_setting: &str, path: &Path) -> Result<String, ConfigError> {
    let fail = |what: String| ConfigError(format!("{file_setting} {}: {what}", path.display()));
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => fail("no such file".into()),
        kind => fail(format!("cannot be read: {kind}")),
    })?;
    String::from_utf8(bytes).map_err(|_| fail("is not UTF-8 text".into()))
}

/// What `operators_file` may hold: `[[operators]]` entries, nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OperatorsFile {
    #[serde(default)]
    operators: Vec<OperatorSetting>,
}

/// Appends the operators of `operators_file` to those of the configuration. An operator
/// named twice, in either place, is refused here, naming the file: which entry would win
/// is not something to guess when it decides who may resolve a charge.
pub(super) fn read_operators_file(settings: &mut Settings) -> Result<(), ConfigError> {
    let Some(path) = settings.operators_file.clone() else {
        return Ok(());
    };
    let text = read_text("operators_file", &path)?;
    let file: OperatorsFile = toml::from_str(&text).map_err(|error| {
        let line = error
            .span()
            .map(|span| {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                format!(" at line {line}")
            })
            .unwrap_or_default();
        ConfigError(format!(
            "operators_file {}: not a file of [[operators]]{line}: {}",
            path.display(),
            error.message().trim().replace('\n', "; ")
        ))
    })?;
    for operator in file.operators {
        if settings.operators.iter().any(|o| o.name == operator.name) {
            return Err(ConfigError(format!(
                "operators_file {}: operator `{}` is defined twice (in this file or also in \
                 the configuration): give each operator one entry",
                path.display(),
                operator.name
            )));
        }
        settings.operators.push(operator);
    }
    Ok(())
}

#[cfg(test)]
// figment::Jail's closures return figment::Error, which is large; that is its API.
#[allow(clippy::result_large_err)]
mod tests {
    use secrecy::ExposeSecret;

    use crate::config::testing::{load, load_error};
    use crate::config::OperatorRole;

    const HASH_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const HASH_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn every_secret_setting_is_read_from_its_file_without_the_final_newline() {
        crate::config::testing::jail(|jail| {
            jail.create_file("db", "postgres://app:pw-from-file@db:5432/onecharge\n")?;
            jail.create_file("nats", "nats://app:nats-pw@nats:4222")?;
            jail.create_file("key", "0042\r\n")?;
            jail.create_file("token", "tok-from-file\n")?;
            jail.create_file("whsec", "whsec_one,whsec_two\n")?;
            jail.set_env("ONECHARGE_DATABASE_URL_FILE", "db");
            jail.set_env("ONECHARGE_NATS_URL_FILE", "nats");
            jail.set_env("ONECHARGE_GATEWAY_API_KEY_FILE", "key");
            jail.create_file(
                "onecharge.toml",
                "admin_token_file = \"token\"\nstripe_webhook_secrets_file = \"whsec\"\n",
            )?;
            let s = load();
            assert_eq!(
                s.database_url,
                "postgres://app:pw-from-file@db:5432/onecharge"
            );
            assert_eq!(s.nats_url, "nats://app:nats-pw@nats:4222");
            assert_eq!(s.require_gateway_api_key().unwrap(), "0042");
            assert_eq!(s.admin_token.unwrap().expose_secret(), "tok-from-file");
            assert_eq!(
                s.stripe_webhook_secrets.unwrap().expose_secret(),
                "whsec_one,whsec_two"
            );
            Ok(())
        });
    }

    #[test]
    fn a_secret_given_as_a_value_and_as_a_file_is_refused_without_either() {
        crate::config::testing::jail(|jail| {
            jail.create_file("key", "key-from-file\n")?;
            jail.set_env("ONECHARGE_GATEWAY_API_KEY_FILE", "key");
            jail.set_env("ONECHARGE_GATEWAY_API_KEY", "key-from-env");
            let err = load_error();
            assert!(
                err.contains("gateway_api_key and gateway_api_key_file are both set")
                    && err.contains("pick one"),
                "{err}"
            );
            assert!(!err.contains("key-from") && !err.contains('\n'), "{err}");
            // The value in the file, the file in the environment: refused as well.
            std::env::remove_var("ONECHARGE_GATEWAY_API_KEY");
            jail.create_file(
                "onecharge.toml",
                "database_url = \"postgres://a:pw@h/db\"\n",
            )?;
            jail.create_file("db", "postgres://b:pw@h/db\n")?;
            jail.set_env("ONECHARGE_DATABASE_URL_FILE", "db");
            let err = load_error();
            assert!(
                err.contains("database_url and database_url_file are both set"),
                "{err}"
            );
            assert!(!err.contains("pw@"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_flag_wins_over_a_secret_file_as_over_every_layer() {
        crate::config::testing::jail(|jail| {
            jail.create_file("db", "postgres://from-file/db\n")?;
            jail.set_env("ONECHARGE_DATABASE_URL_FILE", "db");
            let overrides = crate::config::Overrides {
                database_url: Some("postgres://from-flag/db".into()),
                ..Default::default()
            };
            let s = crate::config::Settings::load(None, &overrides).unwrap();
            assert_eq!(s.database_url, "postgres://from-flag/db");
            Ok(())
        });
    }

    #[test]
    fn a_missing_empty_or_unreadable_secret_file_is_one_line_naming_it_never_its_content() {
        crate::config::testing::jail(|jail| {
            jail.set_env("ONECHARGE_ADMIN_TOKEN_FILE", "absent");
            let err = load_error();
            assert!(
                err.contains("admin_token_file absent: no such file") && !err.contains('\n'),
                "{err}"
            );
            jail.create_file("empty", "\n")?;
            jail.set_env("ONECHARGE_ADMIN_TOKEN_FILE", "empty");
            let err = load_error();
            assert!(err.contains("admin_token_file empty: is empty"), "{err}");
            jail.create_file("two", "secret-one\nsecret-two\n")?;
            jail.set_env("ONECHARGE_ADMIN_TOKEN_FILE", "two");
            let err = load_error();
            assert!(err.contains("holds more than one line"), "{err}");
            assert!(!err.contains("secret-"), "{err}");
            jail.set_env("ONECHARGE_ADMIN_TOKEN_FILE", ".");
            let err = load_error();
            assert!(err.contains("admin_token_file .: cannot be read"), "{err}");
            std::fs::write(jail.directory().join("binary"), [0xff, 0xfe, 0x00]).unwrap();
            jail.set_env("ONECHARGE_ADMIN_TOKEN_FILE", "binary");
            let err = load_error();
            assert!(err.contains("is not UTF-8 text"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn operators_from_the_operators_file_join_those_of_the_configuration() {
        crate::config::testing::jail(|jail| {
            jail.create_file(
                "onecharge.toml",
                &format!(
                    "[[operators]]\nname = \"ada\"\nrole = \"operator\"\ntoken_sha256 = \"{HASH_A}\"\n"
                ),
            )?;
            jail.create_file(
                "operators.toml",
                &format!(
                    "[[operators]]\nname = \"bob\"\nrole = \"viewer\"\ntoken_sha256 = \"{HASH_B}\"\n"
                ),
            )?;
            jail.set_env("ONECHARGE_OPERATORS_FILE", "operators.toml");
            let s = load();
            let names: Vec<_> = s
                .operators
                .iter()
                .map(|o| (o.name.as_str(), o.role))
                .collect();
            assert_eq!(
                names,
                [
                    ("ada", OperatorRole::Operator),
                    ("bob", OperatorRole::Viewer)
                ]
            );
            // Alone, without any in the configuration.
            jail.create_file("onecharge.toml", "operators_file = \"operators.toml\"\n")?;
            std::env::remove_var("ONECHARGE_OPERATORS_FILE");
            assert_eq!(load().operators.len(), 1);
            Ok(())
        });
    }

    #[test]
    fn an_operator_named_in_the_configuration_and_the_operators_file_is_refused() {
        crate::config::testing::jail(|jail| {
            let entry = |name: &str, hash: &str| {
                format!("[[operators]]\nname = \"{name}\"\nrole = \"viewer\"\ntoken_sha256 = \"{hash}\"\n")
            };
            jail.create_file("onecharge.toml", &entry("ada", HASH_A))?;
            jail.create_file("operators.toml", &entry("ada", HASH_B))?;
            jail.set_env("ONECHARGE_OPERATORS_FILE", "operators.toml");
            let err = load_error();
            assert!(
                err.contains("operators_file operators.toml: operator `ada` is defined twice")
                    && !err.contains('\n')
                    && !err.contains(HASH_B),
                "{err}"
            );
            Ok(())
        });
    }

    #[test]
    fn a_missing_or_malformed_operators_file_is_one_line_naming_it() {
        crate::config::testing::jail(|jail| {
            jail.set_env("ONECHARGE_OPERATORS_FILE", "absent.toml");
            let err = load_error();
            assert!(
                err.contains("operators_file absent.toml: no such file"),
                "{err}"
            );
            jail.create_file(
                "operators.toml",
                "[[operators]]\nname = \"ada\"\ntoken_sha256 = \"x\"\n",
            )?;
            jail.set_env("ONECHARGE_OPERATORS_FILE", "operators.toml");
            let err = load_error();
            assert!(
                err.contains("operators_file operators.toml: not a file of [[operators]]")
                    && err.contains("role")
                    && !err.contains('\n'),
                "{err}"
            );
            jail.create_file("operators.toml", "admin_token = \"x\"\n")?;
            let err = load_error();
            assert!(err.contains("admin_token"), "{err}");
            Ok(())
        });
    }
}
