//! The checks of the settings that say which gateway account onecharge charges and how:
//! this deployment's name among the siblings sharing the account (`deployment`, decision
//! 242), the Stripe API version it names (`stripe_api_version`), and whether it moves real
//! money (`production`, which a Stripe key's mode must agree with). Each refusal is one line
//! naming the setting, never echoing a secret.

use secrecy::ExposeSecret as _;

use super::{ConfigError, GatewayKind, Settings};
use crate::domain::Deployment;

/// A Stripe mode: live money, or test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StripeMode {
    Live,
    Test,
}

impl StripeMode {
    /// The mode a Stripe secret (`sk_`) or restricted (`rk_`) key is for, from its prefix;
    /// `None` for a key of another shape (a §3 gateway's, a mock's).
    pub fn of_key(key: &str) -> Option<Self> {
        match key.get(..8) {
            Some("sk_live_" | "rk_live_") => Some(Self::Live),
            Some("sk_test_" | "rk_test_") => Some(Self::Test),
            _ => None,
        }
    }

    /// What a Stripe object's or event's `livemode` says.
    pub fn of_livemode(livemode: bool) -> Self {
        if livemode {
            Self::Live
        } else {
            Self::Test
        }
    }
}

impl Settings {
    /// The gateway account's settings, each checked alone and against the others.
    pub(super) fn check_account(&self) -> Result<(), ConfigError> {
        self.deployment_name()?;
        check_stripe_api_version(&self.stripe_api_version)?;
        self.check_key_mode()
    }

    /// A live Stripe key only where the deployment says it is production, and only a live
    /// one there (with `gateway_kind = stripe`, a key whose mode cannot be read is refused
    /// too). The refusal names the key's prefix, never the key.
    fn check_key_mode(&self) -> Result<(), ConfigError> {
        let Some(key) = self.gateway_api_key.as_ref().map(|k| k.expose_secret()) else {
            return Ok(());
        };
        let prefix = || key.get(..8).unwrap_or_default();
        match (StripeMode::of_key(key), self.production) {
            (Some(StripeMode::Live), false) => Err(ConfigError(format!(
                "gateway_api_key (ONECHARGE_GATEWAY_API_KEY): a live Stripe key ({}…) moves real money, but production is false: set production = true (ONECHARGE_PRODUCTION) if this deployment is production, or give it a test key (sk_test_… or rk_test_…)",
                prefix()
            ))),
            (Some(StripeMode::Test), true) => Err(ConfigError(format!(
                "gateway_api_key (ONECHARGE_GATEWAY_API_KEY): a Stripe test key ({}…) in a deployment whose production is true, which charges nothing real: give it the live key (sk_live_… or rk_live_…), or set production = false",
                prefix()
            ))),
            (None, true) if self.gateway_kind == GatewayKind::Stripe => Err(ConfigError(
                "gateway_api_key (ONECHARGE_GATEWAY_API_KEY): not a Stripe secret or restricted key of either mode (sk_live_…, rk_live_…), but production is true and gateway_kind is stripe: give it the live key".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Which Stripe mode this deployment is in: live when it says it is production. A
    /// webhook event of the other mode is refused.
    pub fn stripe_mode(&self) -> StripeMode {
        if self.production {
            StripeMode::Live
        } else {
            StripeMode::Test
        }
    }

    /// This deployment's name, checked: `None` when `deployment` is unset.
    pub fn deployment_name(&self) -> Result<Option<Deployment>, ConfigError> {
        self.deployment
            .as_deref()
            .map(|name| {
                Deployment::parse(name)
                    .map_err(|why| ConfigError(format!("deployment (ONECHARGE_DEPLOYMENT): {why}")))
            })
            .transpose()
    }
}

/// The oldest version onecharge can read: 2022-11-15 replaced a PaymentIntent's `charges`
/// with `latest_charge`, which the sweep and the webhooks' checks read.
const OLDEST_STRIPE_API_VERSION: time::Date = time::macros::date!(2022 - 11 - 15);

/// `YYYY-MM-DD` (a real date, from [`OLDEST_STRIPE_API_VERSION`] on), then optionally a dot
/// and Stripe's lower-case release name (`2024-09-30.acacia`).
fn check_stripe_api_version(version: &str) -> Result<(), ConfigError> {
    let (date, release) = version.split_once('.').unwrap_or((version, "a"));
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = time::Date::parse(date, &format).ok();
    let named = !release.is_empty() && release.bytes().all(|b| b.is_ascii_lowercase());
    match date {
        Some(date) if named && date >= OLDEST_STRIPE_API_VERSION => Ok(()),
        Some(_) if named => Err(ConfigError(format!(
            "stripe_api_version (ONECHARGE_STRIPE_API_VERSION): `{version}` is older than 2022-11-15, the first version whose PaymentIntents have `latest_charge`, which onecharge reads; use {} (the tested one) or later",
            super::DEFAULT_STRIPE_API_VERSION
        ))),
        _ => Err(ConfigError(format!(
            "stripe_api_version (ONECHARGE_STRIPE_API_VERSION): `{}` is not a Stripe API version such as {} or 2024-09-30.acacia",
            version.chars().take(40).collect::<String>(),
            super::DEFAULT_STRIPE_API_VERSION
        ))),
    }
}

#[cfg(test)]
// figment::Jail's closures return figment::Error, which is large; that is its API.
#[allow(clippy::result_large_err)]
mod tests {
    use crate::config::testing::{load, load_error};

    #[test]
    fn the_stripe_api_version_is_a_dated_version_onecharge_can_read() {
        crate::config::testing::jail(|jail| {
            assert_eq!(
                load().stripe_api_version,
                "2024-06-20",
                "today's by default"
            );
            for ok in ["2024-09-30.acacia", "2022-11-15", "2025-03-31.basil"] {
                jail.set_env("ONECHARGE_STRIPE_API_VERSION", ok);
                assert_eq!(load().stripe_api_version, ok);
            }
            for (bad, why) in [
                ("2024-13-01", "is not a Stripe API version"),
                ("latest", "is not a Stripe API version"),
                ("2024-09-30.", "is not a Stripe API version"),
                ("2024-09-30.Acacia", "is not a Stripe API version"),
                ("2020-08-27", "older than 2022-11-15"),
            ] {
                jail.set_env("ONECHARGE_STRIPE_API_VERSION", bad);
                let err = load_error();
                assert!(
                    err.contains("stripe_api_version (ONECHARGE_STRIPE_API_VERSION)")
                        && err.contains(why)
                        && !err.contains('\n'),
                    "{bad}: {err}"
                );
            }
            Ok(())
        });
    }

    #[test]
    fn a_stripe_keys_mode_must_agree_with_production() {
        crate::config::testing::jail(|jail| {
            jail.set_env("ONECHARGE_GATEWAY_KIND", "stripe");
            for (key, production, ok) in [
                ("sk_test_1", "false", true),
                ("rk_test_1", "false", true),
                ("sk_live_1", "true", true),
                ("rk_live_1", "true", true),
                ("sk_live_1", "false", false),
                ("rk_live_1", "false", false),
                ("sk_test_1", "true", false),
                ("a_mock_key", "true", false),
                ("a_mock_key", "false", true),
            ] {
                jail.set_env("ONECHARGE_GATEWAY_API_KEY", key);
                jail.set_env("ONECHARGE_PRODUCTION", production);
                let result = crate::config::Settings::load(None, &Default::default());
                assert_eq!(
                    result.is_ok(),
                    ok,
                    "{key} production={production}: {result:?}"
                );
                if let Err(err) = result {
                    let err = err.to_string();
                    assert!(
                        err.contains("gateway_api_key") && !err.contains('\n'),
                        "{err}"
                    );
                    assert!(!err.contains(key), "never the key: {err}");
                }
            }
            // A §3 gateway's key of no Stripe shape is its own business.
            jail.set_env("ONECHARGE_GATEWAY_KIND", "onecharge");
            jail.set_env("ONECHARGE_GATEWAY_API_KEY", "a_mock_key");
            jail.set_env("ONECHARGE_PRODUCTION", "true");
            assert!(load().production);
            Ok(())
        });
    }

    #[test]
    fn a_malformed_deployment_name_is_refused_in_one_line_naming_the_setting() {
        crate::config::testing::jail(|jail| {
            assert_eq!(load().deployment, None);
            jail.set_env("ONECHARGE_DEPLOYMENT", "eu-west");
            assert_eq!(
                load().deployment_name().unwrap().unwrap().as_str(),
                "eu-west"
            );
            for bad in ["eu west", "eu/west", ""] {
                jail.set_env("ONECHARGE_DEPLOYMENT", bad);
                let err = load_error();
                assert!(
                    err.contains("deployment (ONECHARGE_DEPLOYMENT): must be 1 to 64")
                        && !err.contains('\n'),
                    "{bad:?}: {err}"
                );
            }
            Ok(())
        });
    }
}
