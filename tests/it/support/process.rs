//! The `onecharge` (and `onecharge-demo`) binary cargo built, run by every test the same way.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use onecharge::config::Settings;

/// A `onecharge` command as it would run in a fresh shell: from an empty directory (no
/// `onecharge.toml` is read), with nothing of this process's environment but `PATH` (neither
/// the suite's own `ONECHARGE_*` and `TEST_*` variables, which onecharge would read as
/// settings, nor `RUST_LOG`), and stdin closed. Tests add the arguments, the variables and,
/// where they write a configuration file, their own directory.
///
/// For a `tokio::process::Command`, use `tokio::process::Command::from(onecharge())`.
pub fn onecharge() -> Command {
    // Built for the tests of the onecharge package only: the demo's tests include this
    // harness too, and run `onecharge-demo` instead.
    let Some(path) = option_env!("CARGO_BIN_EXE_onecharge") else {
        panic!("no onecharge binary: this is a test of another package")
    };
    program(path)
}

/// The `onecharge-demo` binary, run as [`onecharge`] is.
pub fn onecharge_demo() -> Command {
    let Some(path) = option_env!("CARGO_BIN_EXE_onecharge-demo") else {
        panic!("no onecharge-demo binary: this is a test of another package")
    };
    program(path)
}

fn program(path: &str) -> Command {
    let mut command = Command::new(path);
    command
        .current_dir(empty_dir())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null());
    command
}

/// Runs the `onecharge` binary against `settings`' database and namespace, with
/// `RUST_LOG=warn` and `extra_env`; returns its exit code, stdout and stderr.
pub async fn run_onecharge(
    settings: &Settings,
    args: &[&str],
    extra_env: &[(&str, &str)],
) -> (i32, String, String) {
    let output = tokio::process::Command::from(onecharge())
        .args(args)
        .env("RUST_LOG", "warn")
        .env("ONECHARGE_DATABASE_URL", &settings.database_url)
        .env("ONECHARGE_NATS_URL", &settings.nats_url)
        .env("ONECHARGE_NAMESPACE", &settings.namespace)
        .envs(extra_env.iter().copied())
        .output()
        .await
        .expect("the onecharge binary runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs `command` to its end; its exit code and its stderr, which must be one line: every
/// error onecharge reports says in one line what went wrong.
pub fn one_line_error(command: &mut Command) -> (Option<i32>, String) {
    let output = command.output().expect("run onecharge");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    (output.status.code(), stderr)
}

/// Fails the test, saying `what` ran and what it wrote, unless the process exited 0.
pub fn assert_exited_ok(output: &std::process::Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} exited with {:?}: {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Sends SIGTERM to process `pid`, as a supervisor stopping it would (with the `kill`
/// command); true when the signal was delivered.
pub fn sigterm(pid: u32) -> bool {
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .is_ok_and(|status| status.success())
}

/// A directory under cargo's scratch space for integration tests that nothing writes to.
fn empty_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("onecharge-empty-cwd");
    std::fs::create_dir_all(&dir).expect("an empty working directory");
    dir
}
