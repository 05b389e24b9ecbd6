//! Which onecharge deployment made a charge or a refund, when several share one gateway
//! account (decision 242): sibling deployments (say `eu` and `us`, each with its own
//! database and broker) charging through one Stripe account see each other's records in
//! the sweep's list. Each names itself in the metadata of everything it sends
//! ([`METADATA_KEY`]), and a listed record naming another deployment is that deployment's
//! to reconcile, counted and skipped like another integration's.

use std::fmt;

/// The metadata key every charge and refund carries the deployment's name under (Stripe's
/// `metadata[onecharge_deployment]`, the §3 dialect's `"metadata"` object).
pub const METADATA_KEY: &str = "onecharge_deployment";

/// The longest name: Stripe takes metadata values of 500 characters; a name is a label.
pub const MAX_CHARS: usize = 64;

/// A deployment's name (the `deployment` setting): 1 to [`MAX_CHARS`] ASCII letters,
/// digits, `_`, `-` or `.`. Checked once, at start; from then on it cannot be malformed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Deployment(String);

/// A name that is not a deployment's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be 1 to {MAX_CHARS} letters, digits, `_`, `-` or `.` (e.g. `eu`), got `{0}`")]
pub struct InvalidDeployment(pub String);

impl Deployment {
    pub fn parse(text: &str) -> Result<Self, InvalidDeployment> {
        let shaped = (1..=MAX_CHARS).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        if shaped {
            Ok(Self(text.to_owned()))
        } else {
            Err(InvalidDeployment(
                text.chars().take(MAX_CHARS + 1).collect(),
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether a gateway record whose metadata names the deployment `record` (absent or empty
/// when it names none) was made by `ours` (this deployment's name, if it has one). A
/// record naming none is this deployment's: it was made before the setting, or by a
/// deployment without one. A record naming another is never ours, whatever ours is.
pub fn made_by(ours: Option<&Deployment>, record: Option<&str>) -> bool {
    match record.filter(|name| !name.is_empty()) {
        None => true,
        Some(name) => ours.is_some_and(|ours| ours.as_str() == name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_name_is_a_short_label() {
        for ok in ["eu", "us-east-1", "prod.eu_2", &"a".repeat(64)] {
            assert_eq!(Deployment::parse(ok).unwrap().as_str(), ok);
        }
        for bad in ["", "eu west", "eu/1", "é", &"a".repeat(65), "eu\n"] {
            assert!(Deployment::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_record_is_ours_unless_it_names_another_deployment() {
        let eu = Deployment::parse("eu").unwrap();
        assert!(made_by(Some(&eu), Some("eu")));
        assert!(!made_by(Some(&eu), Some("us")));
        assert!(made_by(Some(&eu), None), "made before the setting");
        assert!(made_by(Some(&eu), Some("")));
        assert!(made_by(None, None));
        assert!(!made_by(None, Some("us")), "a named sibling's, never ours");
    }
}
