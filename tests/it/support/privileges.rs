//! Login roles of a test's own, for the tests of the database grants: an owner that migrates
//! and a runtime role that may only read and write rows, dropped when the guard drops; and a
//! role that lacks one right, for a deployment whose grants are wrong.

use sqlx::PgPool;
use uuid::Uuid;

use super::env::TestEnv;
use super::records::Records as _;
use super::throwaway::on_own_thread;

/// Two login roles of the test's own, an owner and a runtime role, dropped when the guard
/// drops (after the database, which must go first: the roles hold its objects and grants).
pub struct ThrowawayRoles {
    server: String,
    /// The role that owns the schema and migrates it.
    pub owner: String,
    /// The role `serve` and the operators' commands run as.
    pub runtime: String,
    password: String,
}

impl ThrowawayRoles {
    /// Creates both roles on `server` (a URL without a database), with one password.
    pub async fn create(server: &str) -> Self {
        let id = Uuid::new_v4().simple().to_string();
        let roles = Self {
            server: server.to_owned(),
            owner: format!("oc_owner_{}", &id[..12]),
            runtime: format!("oc_runtime_{}", &id[..12]),
            password: Uuid::new_v4().simple().to_string(),
        };
        for role in [&roles.owner, &roles.runtime] {
            admin(
                server,
                &format!(
                    "CREATE ROLE {role} LOGIN PASSWORD '{}' NOSUPERUSER NOCREATEDB NOCREATEROLE",
                    roles.password
                ),
            )
            .await;
        }
        roles
    }

    /// The URL of `database` as `role`.
    pub fn url(&self, role: &str, database: &str) -> String {
        let rest = self
            .server
            .split_once("://")
            .map_or(&*self.server, |(_, r)| r);
        let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        format!(
            "postgres://{role}:{}@{}/{database}",
            self.password,
            host.trim_end_matches('/')
        )
    }
}

impl Drop for ThrowawayRoles {
    fn drop(&mut self) {
        let server = self.server.clone();
        let roles = [self.owner.clone(), self.runtime.clone()];
        on_own_thread(async move {
            for role in roles {
                let sql = format!("DROP ROLE IF EXISTS {role}");
                if let Err(err) = try_admin(&server, &sql).await {
                    eprintln!("warning: {sql}: {err}");
                }
            }
        });
    }
}

/// Runs `sql` as an administrator of `server`, on its `postgres` database.
async fn try_admin(server: &str, sql: &str) -> Result<(), sqlx::Error> {
    let pool = PgPool::connect(&format!("{server}/postgres")).await?;
    let result = sqlx::query(sql).execute(&pool).await;
    pool.close().await;
    result.map(drop)
}

/// [`try_admin`], which must succeed.
pub async fn admin(server: &str, sql: &str) {
    try_admin(server, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A login role of the test's own with every right on the rows of a test's database but
/// one, `withheld` (as `GRANT` names it: `INSERT ON payment_attempts`): a deployment whose
/// grants lack something. [`RestrictedRole::give_back`] grants it; [`RestrictedRole::drop_role`]
/// revokes everything and drops the role.
pub struct RestrictedRole {
    pub name: String,
    password: String,
    withheld: String,
}

impl RestrictedRole {
    /// Creates the role on `env`'s server, with a password (a server that takes TCP logins
    /// only with one, Debian's scram-sha-256 in the README's set-up, asks it of every role).
    pub async fn create(env: &TestEnv, withheld: &str) -> Self {
        let role = Self {
            name: format!("r_{}", &env.db_name[15..27]),
            password: Uuid::new_v4().simple().to_string(),
            withheld: withheld.to_owned(),
        };
        let RestrictedRole { name, password, .. } = &role;
        env.admin(&format!("CREATE ROLE {name} LOGIN PASSWORD '{password}'"))
            .await;
        env.exec(&format!(
            "GRANT ALL ON ALL TABLES IN SCHEMA public TO {name};
             GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {name};
             REVOKE {} FROM {name};",
            role.withheld
        ))
        .await;
        role
    }

    /// `database_url` signed in as the role.
    pub fn url(&self, database_url: &str) -> String {
        let mut url = reqwest::Url::parse(database_url).unwrap();
        url.set_username(&self.name).unwrap();
        url.set_password(Some(&self.password)).unwrap();
        url.into()
    }

    /// Grants the withheld right.
    pub async fn give_back(&self, env: &TestEnv) {
        env.exec(&format!("GRANT {} TO {}", self.withheld, self.name))
            .await;
    }

    /// Revokes every right of the role and drops it.
    pub async fn drop_role(self, env: &TestEnv) {
        let name = &self.name;
        env.exec(&format!(
            "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {name};
             REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {name};"
        ))
        .await;
        env.admin(&format!("DROP ROLE {name}")).await;
    }
}
