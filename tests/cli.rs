//! The command line as an operator meets it: exit codes, one-line errors, no secrets.

use std::process::{Command, Output};

fn onecharge(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_onecharge"));
    cmd.args(args).env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run onecharge")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_wrong_setting_exits_2_with_one_line_naming_it() {
    let out = onecharge(&["setup"], &[("ONECHARGE_INTAKE__MAX_DELIVER", "1")]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("intake.max_deliver"), "{err}");

    let out = onecharge(&["setup", "--database-url", "mysql://nope"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("database_url"));

    let out = onecharge(&["setup", "--config", "/nonexistent/onecharge.toml"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no such file"));
}

#[test]
fn an_unknown_flag_is_a_usage_error() {
    let out = onecharge(&["serve", "--roles", "juggler"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn secrets_never_appear_in_help_or_errors() {
    let secret = "sk_live_do_not_print_me";
    let env = [
        ("ONECHARGE_GATEWAY_API_KEY", secret),
        ("ONECHARGE_ADMIN_TOKEN", secret),
        (
            "ONECHARGE_DATABASE_URL",
            "postgres://u:sk_live_do_not_print_me@127.0.0.1:1/x",
        ),
    ];
    for args in [&["--help"][..], &["serve", "--help"], &["setup"]] {
        let out = onecharge(args, &env);
        let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
        assert!(!all.contains(secret), "{args:?} printed the secret: {all}");
    }
}

#[test]
fn an_unreachable_database_is_a_runtime_failure_with_a_clear_line() {
    let out = onecharge(
        &[
            "setup",
            "--database-url",
            "postgres://127.0.0.1:1/onecharge",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot reach PostgreSQL at postgres://127.0.0.1:1/onecharge"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn publishing_an_invalid_command_is_refused_before_it_reaches_the_broker() {
    let out = onecharge(
        &[
            "publish",
            "charge",
            "--amount-minor",
            "0",
            "--currency",
            "EUR",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("amount_minor"));
}
