//! PostgreSQL failover, onecharge's side (issues 16 and 56): it refuses connections to a
//! read-only node, drops a pooled connection that became one, and waits at start for a
//! writable primary instead of exiting. The failover drills themselves run on a Patroni
//! cluster under the soak (`tests/soak/patroni.rs`, docs/soak.md).

use std::time::Duration;

use crate::support::pg_cluster::Forwarder;
use crate::support::record_batch;
use crate::support::{self, eventually, Harness, Records};
use onecharge::config::DatabaseSettings;
use onecharge::store::{is_transient, Store};
use sqlx::PgPool;

/// A pool of one connection (so a retry can only succeed if the pool replaces it) whose
/// node was then demoted: every write on that connection now fails with 25006.
async fn pool_on_a_demoted_connection(h: &Harness) -> Store {
    let store = Store::connect_with(&h.settings.database_url, 1, &DatabaseSettings::default())
        .await
        .unwrap();
    let mut conn = store.pool().acquire().await.unwrap();
    sqlx::query("SET default_transaction_read_only = on")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_that_turned_read_only_is_dropped_and_the_retried_write_lands_on_a_fresh_one(
) {
    let h = Harness::new().await;
    let store = pool_on_a_demoted_connection(&h).await;

    let record = support::record("pm_card_visa", false);
    let mut failures = Vec::new();
    for _ in 0..3 {
        match record_batch(&store, "onecharge-intake", std::slice::from_ref(&record)).await {
            Ok(_) => break,
            Err(err) => {
                assert!(is_transient(&err), "{err}");
                failures.push(err.to_string());
            }
        }
    }
    assert!(
        failures.len() < 3,
        "every retry ran on the read-only connection: {failures:?}"
    );
    assert_eq!(
        h.attempt(record.command.payment_attempt_id).await.status,
        "pending"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_that_turned_read_only_while_idle_is_dropped_before_its_first_write() {
    // A process that writes rarely (the admin API) sees no refusal of its own before a
    // person's action: a connection idle for a second is asked again when handed out.
    let h = Harness::new().await;
    let store = pool_on_a_demoted_connection(&h).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    let record = support::record("pm_card_visa", false);
    record_batch(&store, "onecharge-intake", std::slice::from_ref(&record))
        .await
        .expect("the first write lands on a fresh connection");
    assert_eq!(
        h.attempt(record.command.payment_attempt_id).await.status,
        "pending"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_server_is_refused_when_the_pool_connects() {
    let h = Harness::new().await;
    let db_name = h
        .settings
        .database_url
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    let admin = PgPool::connect(&format!("{}/postgres", support::server_url()))
        .await
        .unwrap();
    sqlx::query(&format!(
        "ALTER DATABASE {db_name} SET default_transaction_read_only = on"
    ))
    .execute(&admin)
    .await
    .unwrap();
    let connected =
        Store::connect_with(&h.settings.database_url, 1, &DatabaseSettings::default()).await;
    assert!(
        connected.is_err(),
        "a pool to a read-only database was handed out"
    );
    admin.close().await;
}

#[test]
fn the_drills_find_the_newest_postgresql_debian_installed_not_a_version_written_in_the_test() {
    let root = tempfile::tempdir().unwrap();
    for (version, with_initdb) in [("13", true), ("16", true), ("17", false), ("notes", true)] {
        let bin = root.path().join(version).join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        if with_initdb {
            std::fs::write(bin.join("initdb"), "").unwrap();
        }
    }
    // 17 is a leftover without its server binaries; "notes" is no version.
    assert_eq!(
        crate::support::pg_cluster::debian_bin_dir_in(root.path()),
        Ok(root.path().join("16").join("bin"))
    );
    let empty = tempfile::tempdir().unwrap();
    let missing = crate::support::pg_cluster::debian_bin_dir_in(empty.path()).unwrap_err();
    assert!(missing.contains("initdb"), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_started_while_no_writable_primary_answers_waits_for_one_instead_of_exiting() {
    let env = crate::support::TestEnv::new().await;
    crate::support::set_up(&env.settings).await;
    // The one address, leading nowhere: a failover's proxy with no leader behind it.
    let server: std::net::SocketAddr = "127.0.0.1:5432".parse().unwrap();
    let address = Forwarder::start(server).await;
    address.point_at(None);
    let database_url =
        env.settings
            .database_url
            .replacen(":5432/", &format!(":{}/", address.port()), 1);
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut serve = crate::support::onecharge()
        .args(["serve", "--roles", "intake", "--admin-addr", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env("ONECHARGE_DATABASE_URL", &database_url)
        .env("ONECHARGE_NATS_URL", &env.settings.nats_url)
        .env("ONECHARGE_NAMESPACE", &env.settings.namespace)
        .stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let read_log = || std::fs::read_to_string(log.path()).unwrap_or_default();

    // Longer than a start that gives up at the first refusal takes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        serve.try_wait().unwrap().is_none(),
        "serve exited while the failover lasted: {}",
        read_log()
    );
    assert!(read_log().contains("no writable PostgreSQL primary answers yet"));

    address.point_at(Some(server));
    eventually("serve serves", Duration::from_secs(30), || async {
        read_log().contains("onecharge serving")
    })
    .await;
    assert!(crate::support::sigterm(serve.id()));
    let status = serve.wait().unwrap();
    assert!(status.success(), "{status:?}: {}", read_log());
}
