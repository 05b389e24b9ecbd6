//! Who is asking: the shared admin token, a named operator's token, or nobody (an open
//! console on loopback). One answer for `/api/*` and the console, so that a token means the
//! same person and the same rights on both.

use std::sync::Arc;

use secrecy::{ExposeSecret as _, SecretString};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

#[cfg(test)]
use crate::config::{mint_token, token_sha256};
use crate::config::{OperatorRole, OperatorSetting};
use crate::domain::Actor;

/// The actor of an action taken with the shared admin token (as before named operators).
pub const ADMIN_TOKEN_ACTOR: &str = crate::domain::actor::ADMIN_API;

/// The actor of an action taken on a console that needs no sign-in (no admin token and no
/// operators configured, on loopback).
pub const OPEN_CONSOLE_ACTOR: &str = crate::domain::actor::OPEN_CONSOLE;

/// Someone the admin HTTP recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Shown on every page: the operator's name, `admin token` or `open console`.
    pub name: String,
    /// Recorded on every action: `operator:<name>`, `admin-api` or `console`.
    pub actor: Actor,
    pub role: OperatorRole,
}

impl Principal {
    /// The holder of the shared admin token: may do everything.
    pub fn admin_token() -> Self {
        Self {
            name: "admin token".to_owned(),
            actor: Actor::AdminApi,
            role: OperatorRole::Operator,
        }
    }

    /// Anyone who reaches an open console (loopback, nothing configured).
    pub fn open_console() -> Self {
        Self {
            name: "open console".to_owned(),
            actor: Actor::OpenConsole,
            role: OperatorRole::Operator,
        }
    }

    fn named(name: &str, role: OperatorRole) -> Self {
        Self {
            name: name.to_owned(),
            actor: Actor::Operator(name.to_owned()),
            role,
        }
    }

    /// Whether this principal may change anything (resolve, recheck, replay, bulk).
    pub fn may_act(&self) -> bool {
        self.role == OperatorRole::Operator
    }

    /// Why an action is refused to a viewer, in words the viewer can act on.
    pub fn refusal(&self) -> String {
        format!(
            "{} signed in as a viewer: viewers read every page, but resolving, rechecking, cancelling, refunding, replaying and bulk actions need the role `operator` (in onecharge's [[operators]] settings)",
            self.name
        )
    }
}

/// The named operators of the configuration, by the SHA-256 of their tokens.
#[derive(Debug, Clone, Default)]
pub struct Operators {
    named: Arc<[(String, OperatorRole, [u8; 32])]>,
}

impl Operators {
    /// From `[[operators]]`; the settings were validated (64 hex digits each).
    pub fn new(settings: &[OperatorSetting]) -> Self {
        let named = settings
            .iter()
            .filter_map(|o| {
                let mut hash = [0u8; 32];
                hex::decode_to_slice(o.token_sha256.trim(), &mut hash).ok()?;
                Some((o.name.clone(), o.role, hash))
            })
            .collect();
        Self { named }
    }

    pub fn is_empty(&self) -> bool {
        self.named.is_empty()
    }

    /// Who holds `token`: the admin token, a named operator, or nobody. Every candidate is
    /// compared, each in constant time over SHA-256 digests, so neither the time taken nor
    /// the token's length tells an attacker how close a guess came.
    pub fn authenticate(
        &self,
        admin_token: Option<&SecretString>,
        token: &str,
    ) -> Option<Principal> {
        let presented: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        let mut found = None;
        if let Some(admin) = admin_token {
            let expected: [u8; 32] = Sha256::digest(admin.expose_secret().trim().as_bytes()).into();
            if bool::from(presented.ct_eq(&expected)) {
                found = Some(Principal::admin_token());
            }
        }
        for (name, role, hash) in self.named.iter() {
            if bool::from(presented.ct_eq(hash)) && found.is_none() {
                found = Some(Principal::named(name, *role));
            }
        }
        found
    }

    /// Every binding a console session may hold under the configuration in force now, one
    /// per principal that can sign in ([`Operators::session_principal`]): what a session
    /// cookie's tag is checked against before the database is asked anything.
    pub fn session_bindings(&self, admin_token: Option<&SecretString>) -> Vec<[u8; 32]> {
        let actors = self
            .named
            .iter()
            .map(|(name, role, _)| Principal::named(name, *role).actor.to_string())
            .chain([ADMIN_TOKEN_ACTOR.to_owned(), OPEN_CONSOLE_ACTOR.to_owned()]);
        actors
            .filter_map(|actor| self.session_principal(admin_token, &actor))
            .map(|(_, binding)| binding)
            .collect()
    }

    /// Who `actor` (as a console session recorded it) is under the configuration in force
    /// now — the named operator with its current role, the admin token while one is
    /// configured, the open console while nothing is; `None` when that principal no longer
    /// exists, so a session outlives neither its operator's entry nor the configuration that
    /// let it in — and what a session of `actor` is bound to now: a digest of the credential
    /// that actor signs in with (the named operator's token hash, the admin token, or
    /// nothing for an open console). A session stores the binding it was signed in under and
    /// is honoured only while the two agree, so replacing a leaked token ends every session
    /// signed in with it, on every instance. The digest is taken again under a label, so the
    /// session table never holds a token's hash as `[[operators]]` does.
    pub fn session_principal(
        &self,
        admin_token: Option<&SecretString>,
        actor: &str,
    ) -> Option<(Principal, [u8; 32])> {
        let (principal, credential): (Principal, [u8; 32]) = if actor == ADMIN_TOKEN_ACTOR {
            let admin = admin_token?;
            (
                Principal::admin_token(),
                Sha256::digest(admin.expose_secret().trim().as_bytes()).into(),
            )
        } else if actor == OPEN_CONSOLE_ACTOR {
            if admin_token.is_some() || !self.is_empty() {
                return None;
            }
            (Principal::open_console(), [0u8; 32])
        } else {
            let name = crate::domain::Actor::operator_name(actor)?;
            let (named, role, hash) = self.named.iter().find(|(named, _, _)| named == name)?;
            (Principal::named(named, *role), *hash)
        };
        let mut binding = Sha256::new();
        binding.update(b"onecharge console session binding\0");
        binding.update(actor.as_bytes());
        binding.update(b"\0");
        binding.update(credential);
        Some((principal, binding.finalize().into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operator(name: &str, role: OperatorRole, token: &str) -> OperatorSetting {
        OperatorSetting {
            name: name.into(),
            role,
            token_sha256: token_sha256(token),
        }
    }

    #[test]
    fn each_token_names_its_operator_and_role_and_a_wrong_one_nobody() {
        let operators = Operators::new(&[
            operator("ada", OperatorRole::Operator, "tok-ada"),
            operator("vic", OperatorRole::Viewer, "tok-vic"),
        ]);
        let admin = SecretString::from("tok-admin");
        let who = |token| operators.authenticate(Some(&admin), token);
        assert_eq!(who("tok-ada").unwrap().actor.to_string(), "operator:ada");
        assert_eq!(who("tok-vic").unwrap().role, OperatorRole::Viewer);
        assert_eq!(
            who("tok-admin").unwrap().actor.to_string(),
            ADMIN_TOKEN_ACTOR
        );
        assert_eq!(who("tok-eve"), None);
        assert_eq!(who(""), None);
    }

    fn principal_of(
        operators: &Operators,
        admin_token: Option<&SecretString>,
        actor: &str,
    ) -> Option<Principal> {
        operators
            .session_principal(admin_token, actor)
            .map(|(principal, _)| principal)
    }

    #[test]
    fn a_sessions_binding_changes_with_its_actors_credential_and_with_nothing_else() {
        let binding = |operators: &Operators, admin_token: Option<&SecretString>, actor: &str| {
            operators
                .session_principal(admin_token, actor)
                .map(|(_, binding)| binding)
        };
        let admin = SecretString::from("tok-admin");
        let before = Operators::new(&[
            operator("ada", OperatorRole::Operator, "tok-ada"),
            operator("vic", OperatorRole::Viewer, "tok-vic"),
        ]);
        // ada's token replaced and vic promoted; a second admin token
        let after = Operators::new(&[
            operator("ada", OperatorRole::Operator, "tok-ada-2"),
            operator("vic", OperatorRole::Operator, "tok-vic"),
        ]);
        let admin_2 = SecretString::from("tok-admin-2");
        let ada = "operator:ada";
        let vic = "operator:vic";
        assert_ne!(
            binding(&before, Some(&admin), ada),
            binding(&after, Some(&admin), ada)
        );
        assert_eq!(
            binding(&before, Some(&admin), vic),
            binding(&after, Some(&admin), vic)
        );
        assert_ne!(
            binding(&before, Some(&admin), ADMIN_TOKEN_ACTOR),
            binding(&before, Some(&admin_2), ADMIN_TOKEN_ACTOR)
        );
        assert_ne!(
            binding(&before, Some(&admin), ada),
            binding(&before, Some(&admin), vic)
        );
        // the table holds neither the token's hash nor anything `[[operators]]` holds
        let ada_binding = binding(&before, Some(&admin), ada).unwrap();
        assert_ne!(hex::encode(ada_binding), token_sha256("tok-ada"));
        assert!(binding(&Operators::default(), None, OPEN_CONSOLE_ACTOR).is_some());
        assert_eq!(binding(&before, None, OPEN_CONSOLE_ACTOR), None);
    }

    #[test]
    fn an_actor_is_its_principal_only_while_the_configuration_still_has_it() {
        let admin = SecretString::from("tok-admin");
        let configured = Operators::new(&[
            operator("ada", OperatorRole::Operator, "tok-ada"),
            operator("vic", OperatorRole::Viewer, "tok-vic"),
        ]);
        let ada = configured.authenticate(Some(&admin), "tok-ada").unwrap();
        assert_eq!(
            principal_of(&configured, Some(&admin), &ada.actor.to_string()),
            Some(ada.clone())
        );
        assert_eq!(
            principal_of(&configured, Some(&admin), "operator:vic").map(|p| p.role),
            Some(OperatorRole::Viewer)
        );
        assert_eq!(
            principal_of(&configured, Some(&admin), ADMIN_TOKEN_ACTOR),
            Some(Principal::admin_token())
        );
        assert_eq!(
            principal_of(&configured, Some(&admin), OPEN_CONSOLE_ACTOR),
            None
        );
        assert_eq!(
            principal_of(&configured, Some(&admin), "operator:eve"),
            None
        );
        assert_eq!(principal_of(&configured, Some(&admin), "ada"), None);

        // ada removed, vic made an operator, the admin token gone
        let changed = Operators::new(&[operator("vic", OperatorRole::Operator, "tok-vic")]);
        assert_eq!(principal_of(&changed, None, &ada.actor.to_string()), None);
        assert_eq!(
            principal_of(&changed, None, "operator:vic").map(|p| p.role),
            Some(OperatorRole::Operator)
        );
        assert_eq!(principal_of(&changed, None, ADMIN_TOKEN_ACTOR), None);

        let open = Operators::default();
        assert_eq!(
            principal_of(&open, None, OPEN_CONSOLE_ACTOR),
            Some(Principal::open_console())
        );
        assert_eq!(principal_of(&open, Some(&admin), OPEN_CONSOLE_ACTOR), None);
    }

    #[test]
    fn a_minted_token_matches_the_hash_printed_with_it() {
        let (token, hash) = mint_token();
        assert!(token.expose_secret().starts_with("oc_"));
        assert_eq!(token.expose_secret().len(), 3 + 64);
        assert_eq!(token_sha256(token.expose_secret()), hash);
        let operators = Operators::new(&[OperatorSetting {
            name: "new".into(),
            role: OperatorRole::Viewer,
            token_sha256: hash,
        }]);
        assert!(operators
            .authenticate(None, token.expose_secret())
            .is_some());
    }
}
