//! Who did something to an attempt, as transitions, audit rows and gateway evidence record
//! it. One type, so that every role spells itself the same way (`executor:<owner>`,
//! `operator:<name>`…) and a reader of the audit trail can tell a process from a person.

use std::fmt;

/// The author of a transition or an audited action.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Actor {
    /// An executor instance, by its lease owner name.
    Executor(String),
    /// A reconciler instance, by its owner name.
    Reconciler(String),
    /// Intake, by its durable consumer's name.
    Intake(String),
    /// A named operator (`[[operators]]`, or the CLI's user).
    Operator(String),
    /// Whoever holds the shared admin token: the API cannot tell who.
    AdminApi,
    /// Whoever uses a console that needs no sign-in (no admin token and no operators
    /// configured, on loopback).
    OpenConsole,
}

/// The prefix of a named operator's actor.
const OPERATOR: &str = "operator:";

/// The shared admin token's actor.
pub const ADMIN_API: &str = "admin-api";

/// The open console's actor.
pub const OPEN_CONSOLE: &str = "console";

impl Actor {
    /// The operator named `name`, cut to 64 characters (it is recorded on every row).
    pub fn operator(name: &str) -> Self {
        Self::Operator(super::bounded(name.trim(), 64))
    }

    /// The person a face recorded as `text` (`operator:<name>`, `admin-api`, `console`), as
    /// the actor of what they do: spelled back exactly as the audit trail reads it.
    pub fn person(text: &str) -> Self {
        match text {
            ADMIN_API => Self::AdminApi,
            OPEN_CONSOLE => Self::OpenConsole,
            _ => Self::operator(Self::operator_name(text).unwrap_or(text)),
        }
    }

    /// The name of the operator this actor is, if it is one.
    pub fn operator_name(text: &str) -> Option<&str> {
        text.strip_prefix(OPERATOR)
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Executor(owner) => write!(f, "executor:{owner}"),
            Self::Reconciler(owner) => write!(f, "reconciler:{owner}"),
            Self::Intake(consumer) => write!(f, "intake:{consumer}"),
            Self::Operator(name) => write!(f, "{OPERATOR}{name}"),
            Self::AdminApi => f.write_str(ADMIN_API),
            Self::OpenConsole => f.write_str(OPEN_CONSOLE),
        }
    }
}

impl From<Actor> for String {
    fn from(actor: Actor) -> Self {
        actor.to_string()
    }
}

impl From<&Actor> for String {
    fn from(actor: &Actor) -> Self {
        actor.to_string()
    }
}

/// Stored as the text the audit trail reads (`executor:<owner>`, `operator:<name>`…).
impl sqlx::Type<sqlx::Postgres> for Actor {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <String as sqlx::Type<sqlx::Postgres>>::type_info()
    }

    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <String as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl sqlx::Encode<'_, sqlx::Postgres> for Actor {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <String as sqlx::Encode<sqlx::Postgres>>::encode(self.to_string(), buf)
    }
}

/// Serialised as the text the audit trail reads.
impl serde::Serialize for Actor {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_actor_is_spelled_as_the_audit_trail_reads_it() {
        assert_eq!(
            Actor::Executor("host-1".into()).to_string(),
            "executor:host-1"
        );
        assert_eq!(
            Actor::Reconciler("host-1".into()).to_string(),
            "reconciler:host-1"
        );
        assert_eq!(
            Actor::Intake("onecharge".into()).to_string(),
            "intake:onecharge"
        );
        assert_eq!(Actor::operator(" ada ").to_string(), "operator:ada");
        assert_eq!(Actor::AdminApi.to_string(), "admin-api");
        assert_eq!(Actor::OpenConsole.to_string(), "console");
        assert_eq!(Actor::operator_name("operator:ada"), Some("ada"));
        assert_eq!(Actor::operator_name("admin-api"), None);
        assert_eq!(
            Actor::operator(&"x".repeat(100))
                .to_string()
                .chars()
                .count(),
            9 + 64
        );
    }
}
