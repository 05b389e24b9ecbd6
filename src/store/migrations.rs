//! Whether the database's schema is the one this onecharge was built with: what `serve` and
//! `setup --check` ask before anything else. Only `onecharge setup`, as the schema's owner,
//! migrates; `serve` runs as a role that may not change the schema (docs/decisions/160-setup-migrates-as-the-owner-serve-only-checks.md),
//! so it reads `_sqlx_migrations` and refuses, naming the command to run, when a migration
//! it needs is missing.
//!
//! The first migration is the baseline of the first release (docs/decisions/260-the-schema-starts-from-one-baseline-migration.md).
//! A database migrated before it, by the pre-release chain of migrations it replaced, records
//! the baseline's version with another text: `setup` and `serve` refuse it in one line
//! ([`SchemaError::PreRelease`]) instead of sqlx's "previously applied but has been
//! modified", since no migration leads from that chain to the baseline.

use crate::store::{Store, MIGRATOR};

/// A schema `serve` cannot run on, in one line that names what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("the database has no onecharge schema: run `onecharge setup` as the schema's owner")]
    NoSchema,
    #[error("the database schema lacks migration {version} ({description}){more}: run `onecharge setup` as the schema's owner", more = more_text(*.more))]
    Behind {
        version: i64,
        description: String,
        /// Further missing migrations after the first.
        more: usize,
    },
    #[error("migration {version} ({description}) failed part-way (its _sqlx_migrations row says success = false): repair it by hand, then run `onecharge setup` as the schema's owner")]
    Failed { version: i64, description: String },
    #[error("migration {version} ({description}) was applied from another text than this onecharge's: the database was migrated by a different build of onecharge")]
    Changed { version: i64, description: String },
    #[error("the database was made by a pre-release build of onecharge (before the baseline migration {baseline}) and cannot be upgraded: drop it and run `onecharge setup` to make it again")]
    PreRelease { baseline: i64 },
}

impl SchemaError {
    /// Whether the database must be recreated rather than migrated: a wrong database for
    /// this onecharge, which the command line reports like a wrong setting (exit 2).
    pub fn needs_a_new_database(&self) -> bool {
        matches!(self, Self::PreRelease { .. })
    }
}

fn more_text(more: usize) -> String {
    match more {
        0 => String::new(),
        n => format!(" and {n} more"),
    }
}

/// A migration as `_sqlx_migrations` records it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AppliedMigration {
    pub version: i64,
    pub checksum: Vec<u8>,
    pub success: bool,
}

/// A migration this onecharge was built with: version, description, checksum.
pub type KnownMigration<'a> = (i64, &'a str, &'a [u8]);

/// Compares the migrations this onecharge knows (`known`, oldest first) with those the
/// database records. The schema serves when every known one was applied, succeeded and has
/// the same text; the versions applied that this onecharge does not know (a newer release
/// migrated: its migrations keep the previous release working, so a rollback still starts)
/// are returned for a warning.
pub fn compare(
    known: &[KnownMigration<'_>],
    applied: &[AppliedMigration],
) -> Result<Vec<i64>, SchemaError> {
    if applied.is_empty() {
        return Err(SchemaError::NoSchema);
    }
    refuse_pre_release(known, applied)?;
    let mut missing = Vec::new();
    for &(version, description, checksum) in known {
        match applied.iter().find(|a| a.version == version) {
            None => missing.push((version, description)),
            Some(a) if !a.success => {
                return Err(SchemaError::Failed {
                    version,
                    description: description.to_owned(),
                })
            }
            Some(a) if a.checksum != checksum => {
                return Err(SchemaError::Changed {
                    version,
                    description: description.to_owned(),
                })
            }
            Some(_) => {}
        }
    }
    if let Some(&(version, description)) = missing.first() {
        return Err(SchemaError::Behind {
            version,
            description: description.to_owned(),
            more: missing.len() - 1,
        });
    }
    Ok(applied
        .iter()
        .map(|a| a.version)
        .filter(|v| !known.iter().any(|k| k.0 == *v))
        .collect())
}

/// Refuses a database whose first migration, the baseline, was applied from another text:
/// the pre-release chain recorded its first migration under the baseline's version. Every
/// other difference is left to [`compare`] (and to sqlx when `setup` migrates).
pub fn refuse_pre_release(
    known: &[KnownMigration<'_>],
    applied: &[AppliedMigration],
) -> Result<(), SchemaError> {
    let Some(&(baseline, _, checksum)) = known.first() else {
        return Ok(());
    };
    match applied.iter().find(|a| a.version == baseline) {
        Some(a) if a.checksum != checksum => Err(SchemaError::PreRelease { baseline }),
        _ => Ok(()),
    }
}

/// The migrations this onecharge was built with, oldest first.
fn known_migrations() -> Vec<KnownMigration<'static>> {
    MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .map(|m| (m.version, m.description.as_ref(), m.checksum.as_ref()))
        .collect()
}

/// The migrations `_sqlx_migrations` records on `conn`, oldest first; none when the table is
/// not there (nothing was ever migrated).
async fn applied_migrations(
    conn: impl sqlx::PgExecutor<'_>,
) -> Result<Vec<AppliedMigration>, sqlx::Error> {
    match sqlx::query_as::<_, AppliedMigration>(
        "SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version",
    )
    .fetch_all(conn)
    .await
    {
        Ok(applied) => Ok(applied),
        // undefined_table: nothing was ever migrated here.
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42P01") => Ok(Vec::new()),
        Err(err) => Err(err),
    }
}

/// Before `setup` migrates: a database of the pre-release chain is refused
/// ([`SchemaError::PreRelease`]); anything else is for the migrator.
pub(super) async fn check_before_migrating(conn: &mut sqlx::PgConnection) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let applied = applied_migrations(conn)
        .await
        .context("reading the applied migrations (_sqlx_migrations)")?;
    refuse_pre_release(&known_migrations(), &applied)?;
    Ok(())
}

impl Store {
    /// Connects to a database that `setup` made, as `serve` and `setup --check` do: one
    /// that does not exist (SQLSTATE 3D000) is refused in a line naming `onecharge setup`,
    /// like a schema that is not there.
    pub async fn connect_to_schema(
        database_url: &str,
        max_connections: u32,
        limits: &crate::config::DatabaseSettings,
    ) -> anyhow::Result<Self> {
        Self::connect_with(database_url, max_connections, limits)
            .await
            .map_err(|err| {
                let missing = err.chain().any(|cause| {
                    cause
                        .downcast_ref::<sqlx::Error>()
                        .and_then(|e| e.as_database_error())
                        .and_then(|e| e.code())
                        .is_some_and(|code| code == "3D000")
                });
                if missing {
                    anyhow::anyhow!(
                        "the database at {} does not exist: run `onecharge setup` as the schema's owner",
                        crate::store::redact_url(database_url)
                    )
                } else {
                    err
                }
            })
    }

    /// Checks that every migration this onecharge was built with is applied (see
    /// [`compare`]), reading `_sqlx_migrations` only; logs a warning naming the migrations
    /// of a newer release. A schema it cannot serve is a [`SchemaError`].
    pub async fn check_schema(&self) -> anyhow::Result<()> {
        let applied = applied_migrations(self.pool()).await.map_err(|err| {
            anyhow::Error::new(err).context(
                "cannot read the applied migrations (_sqlx_migrations; the runtime role needs SELECT on it: deploy/postgres/runtime-grants.sql)",
            )
        })?;
        let newer = compare(&known_migrations(), &applied)?;
        if !newer.is_empty() {
            tracing::warn!(
                ?newer,
                "the database schema has migrations this onecharge does not know (a newer release migrated it); serving on it"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(version: i64, checksum: &[u8], success: bool) -> AppliedMigration {
        AppliedMigration {
            version,
            checksum: checksum.to_vec(),
            success,
        }
    }

    const KNOWN: [KnownMigration<'static>; 3] = [
        (1, "baseline", b"a"),
        (2, "outbox backoff", b"b"),
        (3, "fleet pause", b"c"),
    ];

    #[test]
    fn a_schema_serves_when_every_known_migration_is_applied_and_names_newer_ones() {
        let all = [
            applied(1, b"a", true),
            applied(2, b"b", true),
            applied(3, b"c", true),
        ];
        assert_eq!(compare(&KNOWN, &all), Ok(vec![]));
        let newer = [
            applied(1, b"a", true),
            applied(2, b"b", true),
            applied(3, b"c", true),
            applied(4, b"d", true),
        ];
        assert_eq!(compare(&KNOWN, &newer), Ok(vec![4]));
    }

    #[test]
    fn a_schema_it_cannot_serve_names_the_first_problem_and_the_command() {
        let table = [
            (vec![], SchemaError::NoSchema),
            (
                vec![applied(1, b"a", true)],
                SchemaError::Behind {
                    version: 2,
                    description: "outbox backoff".into(),
                    more: 1,
                },
            ),
            (
                vec![applied(1, b"a", true), applied(2, b"b", true)],
                SchemaError::Behind {
                    version: 3,
                    description: "fleet pause".into(),
                    more: 0,
                },
            ),
            (
                vec![applied(1, b"a", true), applied(2, b"b", false)],
                SchemaError::Failed {
                    version: 2,
                    description: "outbox backoff".into(),
                },
            ),
            (
                vec![
                    applied(1, b"a", true),
                    applied(2, b"x", true),
                    applied(3, b"c", true),
                ],
                SchemaError::Changed {
                    version: 2,
                    description: "outbox backoff".into(),
                },
            ),
            // The first migration (the baseline) from another text: the pre-release chain,
            // whatever else it recorded, newer versions or none of the known ones.
            (
                vec![applied(1, b"x", true), applied(5, b"e", true)],
                SchemaError::PreRelease { baseline: 1 },
            ),
            (
                vec![
                    applied(1, b"x", true),
                    applied(2, b"b", true),
                    applied(3, b"c", true),
                ],
                SchemaError::PreRelease { baseline: 1 },
            ),
        ];
        for (rows, expected) in table {
            assert_eq!(compare(&KNOWN, &rows), Err(expected.clone()), "{rows:?}");
        }
        assert_eq!(
            SchemaError::Behind {
                version: 2,
                description: "outbox backoff".into(),
                more: 1
            }
            .to_string(),
            "the database schema lacks migration 2 (outbox backoff) and 1 more: run `onecharge setup` as the schema's owner"
        );
        assert!(SchemaError::PreRelease { baseline: 1 }.needs_a_new_database());
        assert!(!SchemaError::NoSchema.needs_a_new_database());
    }
}
