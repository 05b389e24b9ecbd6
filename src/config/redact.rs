//! Secrets: how a secret setting is read (always as text) and serialised (never), and the
//! [`Redactor`] that blots the configuration's secrets, and the credentials inside its URLs,
//! out of every line onecharge prints.

use figment::Figment;
use secrecy::{ExposeSecret, SecretString};

use super::Settings;

/// Reads a secret setting as a string, whatever it looks like: `424242` in TOML is the key
/// "424242". A value that cannot be read as text exactly (a float, a table, a list) is
/// refused with a message that never repeats it.
pub(super) fn secret<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<SecretString>, D::Error> {
    struct Text;
    impl<'de> serde::de::Visitor<'de> for Text {
        type Value = Option<SecretString>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(SecretString::from(v.to_owned())))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_char<E: serde::de::Error>(self, v: char) -> Result<Self::Value, E> {
            self.visit_str(&v.to_string())
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Err(not_text())
        }
        fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<Self::Value, E> {
            Err(not_text())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(not_text())
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(not_text())
        }
    }
    fn not_text<E: serde::de::Error>() -> E {
        E::custom("a secret must be a string: put it in quotes (its value is not shown)")
    }
    d.deserialize_any(Text)
}

/// Serialises a secret setting as `[REDACTED]`: a printed or dumped configuration never holds one.
pub(super) fn redact<S: serde::Serializer>(
    value: &Option<SecretString>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(_) => s.serialize_some(REDACTED),
        None => s.serialize_none(),
    }
}

/// The secret values of one configuration (keys, tokens, the credentials inside URLs), to be
/// blotted out of every line onecharge prints: errors, and log lines at any level, including
/// those of libraries that print a URL or their connection options.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Longest first, so that a secret containing another is blotted out whole.
    secrets: Vec<String>,
}

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Secrets shorter than this are not searched for in printed text (every `1` of a line
/// would go); they are still never printed by onecharge itself.
const MIN_SCRUBBED_CHARS: usize = 4;

impl Redactor {
    /// The secrets of loaded settings.
    pub fn from_settings(settings: &Settings) -> Self {
        let mut redactor = Self::default();
        for secret in [&settings.gateway_api_key, &settings.admin_token]
            .into_iter()
            .flatten()
        {
            redactor.add(secret.expose_secret());
        }
        if let Some(secrets) = &settings.stripe_webhook_secrets {
            redactor.add(secrets.expose_secret());
            for secret in secrets.expose_secret().split(',') {
                redactor.add(secret.trim());
            }
        }
        for url in [
            Some(&settings.database_url),
            Some(&settings.nats_url),
            settings.nats_setup_url.as_ref(),
            Some(&settings.gateway_url),
            settings.otlp_endpoint.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            redactor.add_url(url);
        }
        redactor.finish()
    }

    /// The secrets of a configuration that did not load, read from its sources as they are.
    pub(super) fn from_figment(figment: &Figment) -> Self {
        let mut redactor = Self::default();
        let text = |key: &str| {
            let value = figment.find_value(key).ok()?;
            match value.deserialize::<serde_json::Value>().ok()? {
                serde_json::Value::String(text) => Some(text),
                serde_json::Value::Null => None,
                other => Some(other.to_string()),
            }
        };
        for key in ["gateway_api_key", "admin_token", "stripe_webhook_secrets"] {
            if let Some(secret) = text(key) {
                redactor.add(&secret);
            }
        }
        for key in [
            "database_url",
            "nats_url",
            "nats_setup_url",
            "gateway_url",
            "otlp_endpoint",
        ] {
            if let Some(url) = text(key) {
                redactor.add_url(&url);
            }
        }
        redactor.finish()
    }

    fn add(&mut self, secret: &str) {
        for form in [
            secret.to_owned(),
            percent_encoding::percent_decode_str(secret)
                .decode_utf8_lossy()
                .into_owned(),
        ] {
            if form.chars().count() >= MIN_SCRUBBED_CHARS && !self.secrets.contains(&form) {
                self.secrets.push(form);
            }
        }
    }

    fn add_url(&mut self, url: &str) {
        for range in url_secrets(url) {
            self.add(&url[range]);
        }
    }

    fn finish(mut self) -> Self {
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        self
    }

    /// `text` with every secret replaced by `[REDACTED]`.
    pub fn scrub<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        let mut out = std::borrow::Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = std::borrow::Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        out
    }
}

/// `url` with its credentials replaced by `[REDACTED]` (see [`url_secrets`]), for messages
/// that name a server. Works on URLs that do not parse, too.
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_owned();
    let mut ranges = url_secrets(url);
    ranges.sort_by_key(|r| std::cmp::Reverse(r.start));
    for range in ranges {
        out.replace_range(range, REDACTED);
    }
    out
}

/// Where the credentials of a URL are, found by its shape alone so that a URL that does not
/// parse is covered too: the password of `user:password@`, a lone `token@` userinfo (NATS
/// token authentication; a lone PostgreSQL user name is not a secret), and the value of
/// every query parameter whose name says it holds a credential (`password`, `api_key`,
/// `token`, …). A NATS URL may list several servers, comma-separated.
pub fn url_secrets(url: &str) -> Vec<std::ops::Range<usize>> {
    let is_postgres = url.starts_with("postgres");
    let mut ranges = Vec::new();
    let mut start = 0;
    for part in url.split(',') {
        url_part_secrets(part, is_postgres, start, &mut ranges);
        start += part.len() + 1;
    }
    ranges
}

fn url_part_secrets(
    url: &str,
    is_postgres: bool,
    offset: usize,
    ranges: &mut Vec<std::ops::Range<usize>>,
) {
    let authority_start = url.find("://").map_or(0, |i| i + 3);
    let authority_end = url[authority_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| authority_start + i);
    if let Some(at) = url[authority_start..authority_end].rfind('@') {
        let userinfo = authority_start..authority_start + at;
        match url[userinfo.clone()].find(':') {
            Some(colon) => ranges.push(offset + userinfo.start + colon + 1..offset + userinfo.end),
            None if !is_postgres && !userinfo.is_empty() => {
                ranges.push(offset + userinfo.start..offset + userinfo.end)
            }
            None => {}
        }
    }
    let Some(question) = url[authority_start..].find('?') else {
        return;
    };
    let query_start = authority_start + question + 1;
    let query_end = url[query_start..]
        .find('#')
        .map_or(url.len(), |i| query_start + i);
    let mut at = query_start;
    for pair in url[query_start..query_end].split('&') {
        if let Some(eq) = pair.find('=') {
            let name = pair[..eq].to_ascii_lowercase();
            let credential = [
                "pass",
                "pwd",
                "secret",
                "token",
                "key",
                "auth",
                "credential",
                "sig",
            ]
            .iter()
            .any(|word| name.contains(word));
            if credential && eq + 1 < pair.len() {
                ranges.push(offset + at + eq + 1..offset + at + pair.len());
            }
        }
        at += pair.len() + 1;
    }
}

#[cfg(test)]
// figment::Jail's closures return figment::Error, which is large; that is its API.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use crate::config::testing::{load, load_error};

    #[test]
    fn credentials_inside_urls_are_redacted_even_when_the_url_does_not_parse() {
        for (url, shown) in [
            (
                "postgres://app:pa%40ss@db:5432/x?sslmode=require&password=q1q1",
                "postgres://app:[REDACTED]@db:5432/x?sslmode=require&password=[REDACTED]",
            ),
            (
                "postgres://app:secret@db:notaport/x",
                "postgres://app:[REDACTED]@db:notaport/x",
            ),
            ("postgres://app@db/x", "postgres://app@db/x"),
            (
                "nats://tok3n@n1:4222,nats://u:pw12@n2:4222",
                "nats://[REDACTED]@n1:4222,nats://u:[REDACTED]@n2:4222",
            ),
            (
                "https://gw.example/v1?api_key=k123&region=eu",
                "https://gw.example/v1?api_key=[REDACTED]&region=eu",
            ),
        ] {
            assert_eq!(redact_url(url), shown);
        }
        let redactor = Redactor::from_settings(&Settings {
            database_url: "postgres://app:pa%40ss1@db/x".into(),
            ..Settings::default()
        });
        assert_eq!(
            redactor.scrub("password: Some(\"pa@ss1\") pa%40ss1"),
            "password: Some(\"[REDACTED]\") [REDACTED]"
        );
    }

    #[test]
    fn a_secret_written_as_a_number_is_that_string_and_a_float_is_refused_unshown() {
        crate::config::testing::jail(|jail| {
            jail.create_file("onecharge.toml", "gateway_api_key = 424242\n")?;
            jail.set_env("ONECHARGE_ADMIN_TOKEN", "0042");
            let s = load();
            assert_eq!(s.require_gateway_api_key().unwrap(), "424242");
            assert_eq!(s.admin_token.unwrap().expose_secret(), "0042");
            jail.create_file("onecharge.toml", "gateway_api_key = 4242.5\n")?;
            let err = load_error();
            assert!(err.contains("gateway_api_key"), "{err}");
            assert!(!err.contains("4242"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn secrets_never_show_in_debug_or_serialised_settings() {
        crate::config::testing::jail(|jail| {
            jail.set_env("ONECHARGE_GATEWAY_API_KEY", "sk_live_very_secret");
            jail.set_env("ONECHARGE_PRODUCTION", "true");
            let s = load();
            assert_eq!(s.require_gateway_api_key().unwrap(), "sk_live_very_secret");
            assert!(!format!("{s:?}").contains("very_secret"));
            assert!(!serde_json::to_string(&s).unwrap().contains("very_secret"));
            Ok(())
        });
    }
}
