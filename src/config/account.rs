//! The checks of the settings that say which gateway account onecharge charges and how:
//! this deployment's name among the siblings sharing the account (`deployment`, decision
//! 242) and the Stripe API version it names (`stripe_api_version`). Each refusal is one line
//! naming the setting, never echoing a secret.

use super::{ConfigError, Settings};
use crate::domain::Deployment;

impl Settings {
    /// The gateway account's settings, each checked alone and against the others.
    pub(super) fn check_account(&self) -> Result<(), ConfigError> {
        self.deployment_name()?;
        check_stripe_api_version(&self.stripe_api_version)?;
        Ok(())
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
        figment::Jail::expect_with(|jail| {
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
    fn a_malformed_deployment_name_is_refused_in_one_line_naming_the_setting() {
        figment::Jail::expect_with(|jail| {
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
