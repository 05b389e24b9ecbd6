//! Who onecharge is to NATS. Two users (docs/operations.md §24, decision 226): the
//! **runtime** user that `serve` and the operator commands sign in as, which may not create
//! a stream or delete a consumer, and the **setup** user that `onecharge setup` signs in as
//! to create the streams. Each signs in one way: a user and password (or a token) in its
//! URL, a `.creds` file (a user JWT and its NKey seed), or an NKey seed file. Without any
//! setup setting, `setup` signs in as the runtime user (one user, as before).
//!
//! [`Settings::nats_sign_in`] is the choice; `check` refuses what cannot sign in (two ways
//! for one user, an unreadable or malformed file, a prefix that is no subject) in one line
//! that never holds a file's content.

use std::path::{Path, PathBuf};

use super::{ConfigError, Settings};

/// Which of onecharge's NATS users a connection signs in as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatsUser {
    /// `serve`, `setup --check` and every operator command.
    Runtime,
    /// `onecharge setup`: creates the streams and the intake consumers.
    Setup,
}

/// How a NATS user proves who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NatsAuth {
    /// What the URL carries: `user:password@`, `token@`, or nothing.
    Url,
    /// A `.creds` file: a user JWT and the NKey seed that signs the server's nonce.
    CredentialsFile(PathBuf),
    /// A file holding an NKey user seed (`SU…`).
    NKeyFile(PathBuf),
}

/// Where one NATS user connects and how it signs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsSignIn<'a> {
    /// The server URL(s), comma-separated; their credentials count only for [`NatsAuth::Url`].
    pub url: &'a str,
    /// The setting `url` came from, for the lines that name it.
    pub url_setting: &'static str,
    pub auth: NatsAuth,
}

impl Settings {
    /// Whether a setup user of its own is configured.
    fn has_setup_user(&self) -> bool {
        self.nats_setup_url.is_some()
            || self.nats_setup_credentials_file.is_some()
            || self.nats_setup_nkey_file.is_some()
    }

    /// How `user` connects: the setup user's settings when any is set, the runtime user's
    /// otherwise.
    pub fn nats_sign_in(&self, user: NatsUser) -> NatsSignIn<'_> {
        if user == NatsUser::Setup && self.has_setup_user() {
            let auth = match (
                &self.nats_setup_credentials_file,
                &self.nats_setup_nkey_file,
            ) {
                (Some(file), _) => NatsAuth::CredentialsFile(file.clone()),
                (None, Some(file)) => NatsAuth::NKeyFile(file.clone()),
                (None, None) => NatsAuth::Url,
            };
            return match &self.nats_setup_url {
                Some(url) => NatsSignIn {
                    url,
                    url_setting: "nats_setup_url (ONECHARGE_NATS_SETUP_URL)",
                    auth,
                },
                None => NatsSignIn {
                    url: &self.nats_url,
                    url_setting: "nats_url (ONECHARGE_NATS_URL)",
                    auth,
                },
            };
        }
        let auth = match (&self.nats_credentials_file, &self.nats_nkey_file) {
            (Some(file), _) => NatsAuth::CredentialsFile(file.clone()),
            (None, Some(file)) => NatsAuth::NKeyFile(file.clone()),
            (None, None) => NatsAuth::Url,
        };
        NatsSignIn {
            url: &self.nats_url,
            url_setting: "nats_url (ONECHARGE_NATS_URL)",
            auth,
        }
    }

    /// The NATS settings: an inbox prefix that is a subject, one way of signing in per user,
    /// and files that hold what they should.
    pub(super) fn check_nats(&self) -> Result<(), ConfigError> {
        check_inbox_prefix(&self.nats_inbox_prefix)?;
        if let Some(url) = &self.nats_setup_url {
            if url.trim().is_empty() || (!url.contains("://") && url.contains(' ')) {
                return Err(ConfigError(
                    "nats_setup_url (ONECHARGE_NATS_SETUP_URL): is not a NATS URL such as nats://onecharge-setup:<password>@nats:4222".into(),
                ));
            }
        }
        one_way(
            "the runtime user",
            [
                url_has_credentials(&self.nats_url)
                    .then_some("a user or token in nats_url (ONECHARGE_NATS_URL)"),
                self.nats_credentials_file
                    .as_ref()
                    .map(|_| "nats_credentials_file (ONECHARGE_NATS_CREDENTIALS_FILE)"),
                self.nats_nkey_file
                    .as_ref()
                    .map(|_| "nats_nkey_file (ONECHARGE_NATS_NKEY_FILE)"),
            ],
        )?;
        one_way(
            "the setup user",
            [
                self.nats_setup_url
                    .as_deref()
                    .is_some_and(url_has_credentials)
                    .then_some("a user or token in nats_setup_url (ONECHARGE_NATS_SETUP_URL)"),
                self.nats_setup_credentials_file
                    .as_ref()
                    .map(|_| "nats_setup_credentials_file (ONECHARGE_NATS_SETUP_CREDENTIALS_FILE)"),
                self.nats_setup_nkey_file
                    .as_ref()
                    .map(|_| "nats_setup_nkey_file (ONECHARGE_NATS_SETUP_NKEY_FILE)"),
            ],
        )?;
        for (setting, file) in [
            (
                "nats_credentials_file (ONECHARGE_NATS_CREDENTIALS_FILE)",
                &self.nats_credentials_file,
            ),
            (
                "nats_setup_credentials_file (ONECHARGE_NATS_SETUP_CREDENTIALS_FILE)",
                &self.nats_setup_credentials_file,
            ),
        ] {
            if let Some(path) = file {
                check_credentials_file(setting, path)?;
            }
        }
        for (setting, file) in [
            (
                "nats_nkey_file (ONECHARGE_NATS_NKEY_FILE)",
                &self.nats_nkey_file,
            ),
            (
                "nats_setup_nkey_file (ONECHARGE_NATS_SETUP_NKEY_FILE)",
                &self.nats_setup_nkey_file,
            ),
        ] {
            if let Some(path) = file {
                read_nkey_seed(setting, path)?;
            }
        }
        Ok(())
    }
}

/// Refuses two ways of signing in for one user: which one the server sees would be the
/// client library's choice, not the operator's.
fn one_way(user: &str, ways: [Option<&str>; 3]) -> Result<(), ConfigError> {
    let given: Vec<&str> = ways.into_iter().flatten().collect();
    if given.len() > 1 {
        return Err(ConfigError(format!(
            "{} are all set for {user}: it signs in one way, pick one",
            given.join(" and ")
        )));
    }
    Ok(())
}

/// Whether any server of a NATS URL list carries `user:password@` or `token@`.
fn url_has_credentials(urls: &str) -> bool {
    urls.split(',').any(|url| {
        let rest = url.trim().split_once("://").map_or(url, |(_, rest)| rest);
        rest.split(['/', '?'])
            .next()
            .is_some_and(|a| a.contains('@'))
    })
}

/// A prefix every reply subject starts with: subject tokens (no wildcard, no space, no empty
/// token), at most 100 characters.
fn check_inbox_prefix(prefix: &str) -> Result<(), ConfigError> {
    let is_token = |token: &str| {
        !token.is_empty()
            && token
                .chars()
                .all(|c| c.is_ascii_graphic() && !matches!(c, '*' | '>' | '.'))
    };
    if prefix.len() > 100 || !prefix.split('.').all(is_token) {
        return Err(ConfigError(format!(
            "nats_inbox_prefix (ONECHARGE_NATS_INBOX_PREFIX): `{}` is not a subject prefix such as _INBOX_onecharge (dot-separated tokens of printable characters without `*` or `>`, at most 100)",
            prefix.escape_debug()
        )));
    }
    Ok(())
}

/// A `.creds` file must hold a user JWT and its NKey seed.
fn check_credentials_file(setting: &str, path: &Path) -> Result<(), ConfigError> {
    let text = read(setting, path)?;
    if async_nats::ConnectOptions::new()
        .credentials(&text)
        .is_err()
    {
        return Err(ConfigError(format!(
            "{setting} {}: is not a NATS credentials file (a user JWT and its NKey seed, as `nsc generate creds` writes them; its content is not shown)",
            path.display()
        )));
    }
    Ok(())
}

/// The NKey user seed a file holds (one line, `SU…`). Also what the connection reads.
pub fn read_nkey_seed(setting: &str, path: &Path) -> Result<String, ConfigError> {
    let text = read(setting, path)?;
    let seed = text.trim();
    if !seed.starts_with("SU") || nkeys::KeyPair::from_seed(seed).is_err() {
        return Err(ConfigError(format!(
            "{setting} {}: is not an NKey user seed (one line starting SU, as `nk -gen user` writes it; its content is not shown)",
            path.display()
        )));
    }
    Ok(seed.to_owned())
}

fn read(setting: &str, path: &Path) -> Result<String, ConfigError> {
    let fail = |what: &str| ConfigError(format!("{setting} {}: {what}", path.display()));
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => fail("no such file"),
        _ => fail("cannot be read"),
    })?;
    String::from_utf8(bytes).map_err(|_| fail("is not UTF-8 text (its content is not shown)"))
}

#[cfg(test)]
// figment::Jail's closures return figment::Error, which is large; that is its API.
#[allow(clippy::result_large_err)]
mod tests {
    use super::super::testing::{load, load_error};
    use super::*;

    /// A user seed and its public key, made for these tests by `nkeys`.
    fn user_seed() -> String {
        nkeys::KeyPair::new_user().seed().unwrap()
    }

    #[test]
    fn setup_signs_in_as_its_own_user_when_one_is_set_and_as_the_runtime_user_otherwise() {
        let mut settings = Settings {
            nats_url: "nats://runtime:pw@n1:4222".into(),
            ..Settings::default()
        };
        let runtime = NatsSignIn {
            url: "nats://runtime:pw@n1:4222",
            url_setting: "nats_url (ONECHARGE_NATS_URL)",
            auth: NatsAuth::Url,
        };
        assert_eq!(settings.nats_sign_in(NatsUser::Setup), runtime);
        assert_eq!(settings.nats_sign_in(NatsUser::Runtime), runtime);

        settings.nats_setup_url = Some("nats://setup:pw2@n1:4222".into());
        assert_eq!(
            settings.nats_sign_in(NatsUser::Setup).url,
            "nats://setup:pw2@n1:4222"
        );
        assert_eq!(settings.nats_sign_in(NatsUser::Runtime), runtime);

        // A setup key file alone: nats_url's servers, the file's user.
        settings.nats_setup_url = None;
        settings.nats_setup_nkey_file = Some("setup.nk".into());
        assert_eq!(
            settings.nats_sign_in(NatsUser::Setup),
            NatsSignIn {
                url: "nats://runtime:pw@n1:4222",
                url_setting: "nats_url (ONECHARGE_NATS_URL)",
                auth: NatsAuth::NKeyFile("setup.nk".into()),
            }
        );
        settings.nats_url = "nats://n1:4222".into();
        settings.nats_credentials_file = Some("runtime.creds".into());
        assert_eq!(
            settings.nats_sign_in(NatsUser::Runtime).auth,
            NatsAuth::CredentialsFile("runtime.creds".into())
        );
    }

    #[test]
    fn a_seed_file_signs_in_and_a_wrong_one_is_refused_without_its_content() {
        figment::Jail::expect_with(|jail| {
            let seed = user_seed();
            jail.create_file("runtime.nk", &format!("{seed}\n"))?;
            jail.set_env("ONECHARGE_NATS_NKEY_FILE", "runtime.nk");
            assert_eq!(
                load().nats_sign_in(NatsUser::Runtime).auth,
                NatsAuth::NKeyFile("runtime.nk".into())
            );

            // An account seed, a public key, garbage: refused, never shown.
            let account = nkeys::KeyPair::new_account().seed().unwrap();
            let public = nkeys::KeyPair::new_user().public_key();
            for wrong in [account.as_str(), public.as_str(), "SUnot-a-seed-at-all"] {
                jail.create_file("runtime.nk", wrong)?;
                let error = load_error();
                assert_eq!(
                    error,
                    "configuration error: nats_nkey_file (ONECHARGE_NATS_NKEY_FILE) runtime.nk: is not an NKey user seed (one line starting SU, as `nk -gen user` writes it; its content is not shown)"
                );
                assert!(!error.contains(wrong));
            }
            jail.set_env("ONECHARGE_NATS_NKEY_FILE", "missing.nk");
            assert_eq!(
                load_error(),
                "configuration error: nats_nkey_file (ONECHARGE_NATS_NKEY_FILE) missing.nk: no such file"
            );
            Ok(())
        });
    }

    #[test]
    fn a_credentials_file_must_hold_a_jwt_and_a_seed() {
        figment::Jail::expect_with(|jail| {
            let seed = user_seed();
            let creds = format!(
                "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
            );
            jail.create_file("setup.creds", &creds)?;
            jail.set_env("ONECHARGE_NATS_SETUP_CREDENTIALS_FILE", "setup.creds");
            assert_eq!(
                load().nats_sign_in(NatsUser::Setup).auth,
                NatsAuth::CredentialsFile("setup.creds".into())
            );
            jail.create_file("setup.creds", &format!("just the seed {seed}"))?;
            let error = load_error();
            assert_eq!(
                error,
                "configuration error: nats_setup_credentials_file (ONECHARGE_NATS_SETUP_CREDENTIALS_FILE) setup.creds: is not a NATS credentials file (a user JWT and its NKey seed, as `nsc generate creds` writes them; its content is not shown)"
            );
            assert!(!error.contains(&seed));
            Ok(())
        });
    }

    #[test]
    fn one_user_signing_in_two_ways_is_refused_in_one_line_without_the_password() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("runtime.nk", &user_seed())?;
            jail.set_env("ONECHARGE_NATS_URL", "nats://onecharge:s3cret-pw@n1:4222");
            jail.set_env("ONECHARGE_NATS_NKEY_FILE", "runtime.nk");
            let error = load_error();
            assert_eq!(
                error,
                "configuration error: a user or token in nats_url (ONECHARGE_NATS_URL) and nats_nkey_file (ONECHARGE_NATS_NKEY_FILE) are all set for the runtime user: it signs in one way, pick one"
            );
            assert!(!error.contains("s3cret-pw"));

            jail.set_env("ONECHARGE_NATS_URL", "nats://n1:4222");
            jail.set_env(
                "ONECHARGE_NATS_SETUP_URL",
                "nats://setup:s3cret-pw2@n1:4222",
            );
            jail.create_file("setup.nk", &user_seed())?;
            jail.set_env("ONECHARGE_NATS_SETUP_NKEY_FILE", "setup.nk");
            let error = load_error();
            assert!(
                error.ends_with("are all set for the setup user: it signs in one way, pick one"),
                "{error}"
            );
            assert!(!error.contains("s3cret-pw2"));
            Ok(())
        });
    }

    #[test]
    fn the_inbox_prefix_must_be_a_subject_prefix() {
        for good in ["_INBOX", "_INBOX_onecharge", "_I.onecharge.staging"] {
            assert!(check_inbox_prefix(good).is_ok(), "{good}");
        }
        for bad in ["", "_INBOX.>", "a..b", "_INBOX.*", "has space", "trailing."] {
            let error = check_inbox_prefix(bad).unwrap_err().to_string();
            assert!(
                error.starts_with(
                    "configuration error: nats_inbox_prefix (ONECHARGE_NATS_INBOX_PREFIX): `"
                ),
                "{error}"
            );
        }
        figment::Jail::expect_with(|jail| {
            jail.set_env("ONECHARGE_NATS_INBOX_PREFIX", "_INBOX_onecharge");
            assert_eq!(load().nats_inbox_prefix, "_INBOX_onecharge");
            Ok(())
        });
    }

    #[test]
    fn a_setup_url_is_a_secret_read_from_a_file_and_never_printed() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("setup-url", "nats://onecharge-setup:setup-pw-42@n1:4222\n")?;
            jail.set_env("ONECHARGE_NATS_SETUP_URL_FILE", "setup-url");
            let settings = load();
            assert_eq!(
                settings.nats_sign_in(NatsUser::Setup).url,
                "nats://onecharge-setup:setup-pw-42@n1:4222"
            );
            let scrubbed = super::super::Redactor::from_settings(&settings)
                .scrub("cannot connect to nats://onecharge-setup:setup-pw-42@n1:4222")
                .into_owned();
            assert!(!scrubbed.contains("setup-pw-42"), "{scrubbed}");
            Ok(())
        });
    }
}
