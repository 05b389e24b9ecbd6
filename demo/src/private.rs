//! The demo's own PostgreSQL and NATS, for a machine that runs neither (issue 39).
//!
//! When nothing listens where the configuration points (`database_url`, `nats_url`), the
//! demo starts what is missing from binaries it finds, in one temporary directory, on free
//! loopback ports, and stops them at exit — on an error or a signal too, through the
//! guards below. A PostgreSQL that is there but refuses the demo's login (a password
//! wanted, as Debian's own cluster wants for TCP logins; an unknown role) is treated as
//! absent too, and the first line says why (issue 54; this replaces decision 195's rule).
//! Where the binaries are missing, the error says in one line how to get them.
//!
//! The binaries: `ONECHARGE_DEMO_PG_BIN` (a directory holding `initdb` and `postgres`) and
//! `ONECHARGE_DEMO_NATS_SERVER` (the `nats-server` file) when set, else the `PATH`, else
//! where Debian puts them (`/usr/lib/postgresql/<newest>/bin`, `/usr/sbin/nats-server`).

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use tempfile::TempDir;

use onecharge::config::{Settings, UsageError};
use onecharge::store::Store;

/// Where the PostgreSQL binaries are, when set: a directory holding `initdb` and `postgres`.
pub const PG_BIN_VAR: &str = "ONECHARGE_DEMO_PG_BIN";
/// Which `nats-server` to run, when set.
pub const NATS_SERVER_VAR: &str = "ONECHARGE_DEMO_NATS_SERVER";

/// How long a private server may take to answer after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a private server may take to stop before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The servers the demo runs against: the configured ones, or private ones where nothing
/// listened.
pub struct Servers {
    /// The caller's settings, their URLs pointing at the private servers where there are
    /// some.
    pub settings: Settings,
    /// The private servers, stopped and removed when this is dropped.
    pub private: Option<PrivateServices>,
}

/// PostgreSQL and/or NATS started for this run in a temporary directory. Dropping it stops
/// them (PostgreSQL with a fast shutdown, NATS with SIGTERM, either killed if it takes
/// longer than 10 s) and removes the directory, unless [`PrivateServices::keep`] was called.
pub struct PrivateServices {
    // Fields drop in order: the servers stop before their directory is removed.
    postgres: Option<ServerProcess>,
    nats: Option<ServerProcess>,
    dir: Option<TempDir>,
    path: PathBuf,
    /// What was missing, in words: `no PostgreSQL at 127.0.0.1:5432`.
    missing: Vec<String>,
}

impl PrivateServices {
    /// The one line that says what the demo did, for the person running it.
    pub fn describe(&self) -> String {
        let started = if self.missing.len() > 1 {
            "private ones"
        } else {
            "a private one"
        };
        let ports = [&self.postgres, &self.nats]
            .into_iter()
            .flatten()
            .map(|server| format!("{} on 127.0.0.1:{}", server.name, server.port))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "demo: {}; started {started} ({ports}) in {}, stopped at exit",
            self.missing.join(" and "),
            self.path.display()
        )
    }

    /// Keeps the temporary directory (the servers' data and logs) after the servers stop,
    /// for `--keep`; returns where it is.
    pub fn keep(&mut self) -> PathBuf {
        if let Some(dir) = self.dir.take() {
            let _ = dir.keep();
        }
        self.path.clone()
    }
}

/// One private server process, stopped when dropped.
struct ServerProcess {
    name: &'static str,
    port: u16,
    child: Child,
    /// What asks it to stop cleanly: SIGINT is PostgreSQL's fast shutdown, SIGTERM NATS's.
    stop_signal: libc::c_int,
}

impl ServerProcess {
    /// `Err` with the last lines of its log when it exited already.
    fn check_running(&mut self, log: &Path) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "the private {} exited ({status}) before it answered: {}",
                self.name,
                last_lines(log)
            );
        }
        Ok(())
    }
}

impl Drop for ServerProcess {
    /// Asks the server to stop, waits up to [`STOP_TIMEOUT`], then kills it. Blocking: it
    /// runs once, at the demo's exit.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) takes plain integers; the pid is our own child's, not reaped
            // yet (try_wait above found it running), so it names no other process.
            unsafe { libc::kill(pid, self.stop_signal) };
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The servers to run the demo against. Where nothing listens at the configured
/// PostgreSQL or NATS address, starts a private one and points the settings at it; a
/// `UsageError` (exit 2) saying how to get the binaries when they are missing.
pub async fn servers(settings: &Settings) -> anyhow::Result<Servers> {
    let mut missing = Vec::new();
    let postgres_absent = match postgres_address(&settings.database_url)? {
        Some(address) if !listens(&address).await => {
            missing.push(format!("no PostgreSQL at {address}"));
            true
        }
        // A fresh Debian's own cluster listens on :5432 and takes TCP logins with a
        // password only: to the demo, that is no PostgreSQL it can use either.
        Some(address) => match refuses_login(&settings.database_url).await {
            Some(why) => {
                missing.push(format!(
                    "PostgreSQL at {address} refuses the demo's login ({why})"
                ));
                true
            }
            None => false,
        },
        None => false,
    };
    let nats_addresses = nats_addresses(&settings.nats_url);
    let mut nats_absent = !nats_addresses.is_empty();
    for address in &nats_addresses {
        if listens(address).await {
            nats_absent = false;
            break;
        }
    }
    if nats_absent {
        missing.push(format!("no NATS at {}", nats_addresses.join(",")));
    }
    if missing.is_empty() {
        return Ok(Servers {
            settings: settings.clone(),
            private: None,
        });
    }

    // Every binary is found before anything starts: a missing one is said at once, whole.
    let postgres_bin = postgres_absent.then(find_postgres);
    let nats_bin = nats_absent.then(find_nats_server);
    let not_found: Vec<String> = [&postgres_bin, &nats_bin]
        .into_iter()
        .flatten()
        .filter_map(|found| found.as_ref().err().cloned())
        .collect();
    if !not_found.is_empty() {
        return Err(UsageError(how_to_get_them(&missing, &not_found)).into());
    }

    let dir = tempfile::Builder::new()
        .prefix("onecharge-demo-")
        .tempdir()
        .context("creating the private servers' directory")?;
    let path = dir.path().to_owned();
    let mut private = PrivateServices {
        postgres: None,
        nats: None,
        dir: Some(dir),
        path: path.clone(),
        missing,
    };
    let mut demo = settings.clone();
    if let Some(Ok(bin)) = postgres_bin {
        let (server, url) = start_postgres(&bin, &path).await?;
        // The guard holds it from here: an error below stops it.
        private.postgres = Some(server);
        wait_for_postgres(private.postgres.as_mut().expect("just set"), &url, &path).await?;
        demo.database_url = url;
    }
    if let Some(Ok(bin)) = nats_bin {
        let server = start_nats(&bin, &path)?;
        let port = server.port;
        private.nats = Some(server);
        wait_for_nats(private.nats.as_mut().expect("just set"), &path).await?;
        demo.nats_url = format!("nats://127.0.0.1:{port}");
        // The private server speaks plain NATS.
        demo.nats_ca_file = None;
    }
    Ok(Servers {
        settings: demo,
        private: Some(private),
    })
}

/// The one-line how-to when binaries are missing.
fn how_to_get_them(missing: &[String], not_found: &[String]) -> String {
    format!(
        "demo: {}, and cannot start its own: {}. Install them (Debian: `apt-get install postgresql nats-server`), or set {PG_BIN_VAR}=/usr/lib/postgresql/<version>/bin and {NATS_SERVER_VAR}=/path/to/nats-server, or point --database-url and --nats-url at running servers",
        missing.join(" and "),
        not_found.join("; ")
    )
}

/// The `host:port` PostgreSQL is reached at over TCP; `None` when the URL names a Unix
/// socket directory (`?host=/run/postgresql`): then only connecting tells.
fn postgres_address(database_url: &str) -> anyhow::Result<Option<String>> {
    let url = reqwest::Url::parse(database_url).with_context(|| {
        format!(
            "database_url {} is not a URL",
            onecharge::store::redact_url(database_url)
        )
    })?;
    let socket = url
        .query_pairs()
        .any(|(key, value)| key == "host" && value.starts_with('/'));
    if socket {
        return Ok(None);
    }
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .unwrap_or("localhost");
    Ok(Some(format!("{host}:{}", url.port().unwrap_or(5432))))
}

/// The `host:port` of each server of `nats_url` (comma-separated, decision 73), as the
/// client reads them: the scheme and credentials are optional, the port defaults to 4222.
fn nats_addresses(nats_url: &str) -> Vec<String> {
    nats_url
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .filter_map(|server| {
            let with_scheme = if server.contains("://") {
                server.to_owned()
            } else {
                format!("nats://{server}")
            };
            let url = reqwest::Url::parse(&with_scheme).ok()?;
            let host = url.host_str()?.to_owned();
            Some(format!("{host}:{}", url.port().unwrap_or(4222)))
        })
        .collect()
}

/// Why the PostgreSQL at `database_url` refuses the demo's login, when it does: an
/// authentication failure (SQLSTATE class 28: no such role, a password wanted or wrong).
/// Anything else (the database not made yet, a slow server) is for the demo to meet as
/// before.
async fn refuses_login(database_url: &str) -> Option<String> {
    use sqlx::Connection as _;
    let attempt = tokio::time::timeout(
        Duration::from_secs(5),
        sqlx::PgConnection::connect(database_url),
    )
    .await
    .ok()?;
    match attempt {
        Ok(connection) => {
            let _ = connection.close().await;
            None
        }
        Err(err) => err
            .as_database_error()
            .filter(|e| e.code().is_some_and(|code| code.starts_with("28")))
            .map(|e| e.message().to_owned()),
    }
}

/// Whether something accepts a TCP connection at `address` within two seconds.
async fn listens(address: &str) -> bool {
    matches!(
        tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(address)
        )
        .await,
        Ok(Ok(_))
    )
}

/// The directory holding `initdb` and `postgres`: the variable's, else the first on the
/// `PATH` that has both, else the newest `/usr/lib/postgresql/<version>/bin`. `Err` says
/// what was looked at.
fn find_postgres() -> Result<PathBuf, String> {
    let holds_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os(PG_BIN_VAR) {
        let dir = PathBuf::from(dir);
        return if holds_both(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "{PG_BIN_VAR}={} holds no initdb and postgres",
                dir.display()
            ))
        };
    }
    if let Some(dir) = on_path("initdb").and_then(|initdb| initdb.parent().map(Path::to_owned)) {
        if holds_both(&dir) {
            return Ok(dir);
        }
    }
    newest_debian_postgres()
        .filter(|dir| holds_both(dir))
        .ok_or_else(|| {
            "no initdb and postgres on the PATH nor in /usr/lib/postgresql/*/bin".to_owned()
        })
}

/// `/usr/lib/postgresql/<version>/bin` of the highest version installed.
fn newest_debian_postgres() -> Option<PathBuf> {
    let versions = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    versions
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .max_by_key(|(version, _)| *version)
        .map(|(_, bin)| bin)
}

/// The `nats-server` to run: the variable's, else the `PATH`'s, else Debian's
/// `/usr/sbin/nats-server` (not on a user's `PATH`).
fn find_nats_server() -> Result<PathBuf, String> {
    if let Some(file) = std::env::var_os(NATS_SERVER_VAR) {
        let file = PathBuf::from(file);
        return if file.is_file() {
            Ok(file)
        } else {
            Err(format!("{NATS_SERVER_VAR}={} is no file", file.display()))
        };
    }
    on_path("nats-server")
        .or_else(|| {
            let debian = PathBuf::from("/usr/sbin/nats-server");
            debian.is_file().then_some(debian)
        })
        .ok_or_else(|| "no nats-server on the PATH nor at /usr/sbin/nats-server".to_owned())
}

/// The first file named `name` in the `PATH`'s directories.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|file| file.is_file())
}

/// A loopback port nothing listens on now (the server binds it a moment later; a race
/// with another process is possible and ends in the server's own "address in use").
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .context("finding a free loopback port")?
        .port())
}

/// The user PostgreSQL runs as when the demo runs as root, which PostgreSQL refuses
/// (`initdb` and `postgres` exit with "cannot be run as root"): the `postgres` user the
/// Debian package creates. Its uid and gid, to hand it the directory; `None` when the demo
/// is not root.
fn postgres_user() -> anyhow::Result<Option<(u32, u32)>> {
    // SAFETY: geteuid(2) takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let output = Command::new("getent")
        .args(["passwd", "postgres"])
        .output()
        .context("looking up the postgres user (getent)")?;
    let entry = String::from_utf8_lossy(&output.stdout);
    let mut fields = entry.trim().split(':').skip(2);
    match (
        fields.next().and_then(|uid| uid.parse().ok()),
        fields.next().and_then(|gid| gid.parse().ok()),
    ) {
        (Some(uid), Some(gid)) if output.status.success() => Ok(Some((uid, gid))),
        _ => Err(UsageError(
            "demo: running as root, which PostgreSQL refuses, and there is no `postgres` user to run it as: create one (`useradd --system postgres`), or run the demo as another user".into(),
        )
        .into()),
    }
}

/// `program` as the user PostgreSQL runs as: itself when the demo is not root; through
/// `setpriv` as `postgres` when it is. `setpriv` (util-linux, in every Debian) changes
/// user and then executes the program in its own process, so the process the demo holds
/// and signals is PostgreSQL itself (`runuser` and `su` would stay in between as a
/// parent that forwards only some signals).
fn as_postgres_user(program: &Path, user: Option<(u32, u32)>) -> Command {
    match user {
        None => Command::new(program),
        Some((uid, gid)) => {
            let mut command = Command::new("setpriv");
            command
                .arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--clear-groups")
                .arg("--")
                .arg(program);
            command
        }
    }
}

/// Runs `initdb` (trust, superuser `postgres`) in `<dir>/pg` and starts `postgres` on a
/// free loopback port, its socket in `dir`; returns it and the URL of its `postgres`
/// database.
async fn start_postgres(bin: &Path, dir: &Path) -> anyhow::Result<(ServerProcess, String)> {
    let user = postgres_user()?;
    if let Some((uid, gid)) = user {
        // The temporary directory is root's and 0700: PostgreSQL must own it to create
        // its data directory, socket and lock files there.
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .with_context(|| format!("handing {} to the postgres user", dir.display()))?;
    }
    let data = dir.join("pg");
    let initdb_log = dir.join("initdb.log");
    let output = as_postgres_user(&bin.join("initdb"), user)
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .context("running initdb")?;
    std::fs::write(
        &initdb_log,
        [&output.stdout[..], &output.stderr[..]].concat(),
    )
    .context("writing initdb's log")?;
    if !output.status.success() {
        bail!(
            "initdb failed ({}): {}",
            output.status,
            last_lines(&initdb_log)
        );
    }
    let port = free_port()?;
    let log = dir.join("postgres.log");
    let log_file = File::create(&log).context("creating the postgres log")?;
    let child = as_postgres_user(&bin.join("postgres"), user)
        .arg("-D")
        .arg(&data)
        .arg("-p")
        .arg(port.to_string())
        .arg("-k")
        .arg(dir)
        // Throwaway data: nothing is worth a flush to disk.
        .args([
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        // Its own process group: a Ctrl-C at the terminal reaches the demo alone, which
        // cleans up and then stops it, rather than both racing.
        .process_group(0)
        .spawn()
        .context("starting postgres")?;
    let server = ServerProcess {
        name: "PostgreSQL",
        port,
        child,
        stop_signal: libc::SIGINT,
    };
    Ok((
        server,
        format!("postgres://postgres@127.0.0.1:{port}/postgres"),
    ))
}

/// Waits until the private PostgreSQL accepts a connection.
async fn wait_for_postgres(
    server: &mut ServerProcess,
    url: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    let log = dir.join("postgres.log");
    loop {
        server.check_running(&log)?;
        if Store::connect(url, 1).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the private PostgreSQL did not answer within {}: {}",
                humantime::format_duration(START_TIMEOUT),
                last_lines(&log)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts `nats-server` with JetStream on a free loopback port, its store in `<dir>/nats`.
fn start_nats(bin: &Path, dir: &Path) -> anyhow::Result<ServerProcess> {
    let port = free_port()?;
    let log = File::create(dir.join("nats.log")).context("creating the NATS log")?;
    let child = Command::new(bin)
        .args(["-js", "-a", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .arg("-sd")
        .arg(dir.join("nats"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("starting nats-server")?;
    Ok(ServerProcess {
        name: "NATS",
        port,
        child,
        stop_signal: libc::SIGTERM,
    })
}

/// Waits until the private NATS listens (it listens once JetStream is ready).
async fn wait_for_nats(server: &mut ServerProcess, dir: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    let log = dir.join("nats.log");
    let address = format!("127.0.0.1:{}", server.port);
    loop {
        server.check_running(&log)?;
        if listens(&address).await {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the private NATS did not listen within {}: {}",
                humantime::format_duration(START_TIMEOUT),
                last_lines(&log)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The last three lines of a log, joined into one, to end a one-line error.
fn last_lines(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    format!("{tail} (log: {})", log.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_url_is_probed_at_its_host_and_port_and_a_socket_url_is_not() {
        let address = |url| postgres_address(url).unwrap();
        assert_eq!(
            address("postgres://u:p@db.example:6543/x").as_deref(),
            Some("db.example:6543")
        );
        assert_eq!(
            address("postgres://127.0.0.1/onecharge").as_deref(),
            Some("127.0.0.1:5432")
        );
        assert_eq!(address("postgres:///x?host=/run/postgresql"), None);
    }

    #[test]
    fn every_server_of_a_nats_url_is_probed_with_the_default_port() {
        assert_eq!(
            nats_addresses("nats://u:p@a:4333, tls://b,c:5000"),
            ["a:4333", "b:4222", "c:5000"]
        );
    }

    #[test]
    fn the_how_to_names_the_packages_the_variables_and_what_was_looked_at() {
        let line = how_to_get_them(
            &["no PostgreSQL at 127.0.0.1:1".into()],
            &["ONECHARGE_DEMO_PG_BIN=/nowhere holds no initdb and postgres".into()],
        );
        assert!(!line.contains('\n'));
        for part in [
            "demo: no PostgreSQL at 127.0.0.1:1, and cannot start its own: ONECHARGE_DEMO_PG_BIN=/nowhere holds",
            "apt-get install postgresql nats-server",
            "ONECHARGE_DEMO_NATS_SERVER=/path/to/nats-server",
        ] {
            assert!(line.contains(part), "{line}");
        }
    }
}
