//! The command line as an operator meets it: exit codes, one-line errors, no secrets.

use std::process::Output;

use crate::support;

fn onecharge(args: &[&str], env: &[(&str, &str)]) -> Output {
    support::onecharge()
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run onecharge")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs the binary, which must fail saying so in one line; its exit code and that line.
fn one_line(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    support::one_line_error(support::onecharge().args(args).envs(env.iter().copied()))
}

/// `onecharge demo` runs `onecharge-demo` from beside the binary, in its place (the same
/// process, its exit code), with the settings given before or after `demo` and the demo's
/// options; where there is none, one line says how to get it, exit 2.
#[test]
fn demo_runs_the_demo_binary_beside_it_in_its_place_with_the_rest_of_the_line() {
    use std::os::unix::fs::PermissionsExt as _;

    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("onecharge");
    std::fs::copy(env!("CARGO_BIN_EXE_onecharge"), &binary).unwrap();
    let line = [
        "--namespace",
        "demo",
        "demo",
        "--database-url",
        "postgres://127.0.0.1:1/x",
        "--seed",
        "3",
        "--timeout",
        "90s",
        "--gateway",
        "stripe",
        "--keep",
    ];
    let run = || {
        std::process::Command::new(&binary)
            .args(line)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };

    let out = run().wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("onecharge demo: onecharge-demo is not beside this binary")
            && err.contains("`cargo run --release -p onecharge-demo`"),
        "{err}"
    );

    let stand_in = dir.path().join("onecharge-demo");
    std::fs::write(&stand_in, "#!/bin/sh\necho \"$$ $*\"\nexit 7\n").unwrap();
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let child = run();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{pid} --database-url postgres://127.0.0.1:1/x --namespace demo --attempts 300 --seed 3 --timeout 1m 30s --gateway stripe --keep\n"),
        "the settings as flags, then the demo's own"
    );
}

#[test]
fn a_wrong_setting_exits_2_with_one_line_naming_it() {
    let (code, err) = one_line(&["setup"], &[("ONECHARGE_INTAKE__MAX_DELIVER", "1")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("intake.max_deliver"), "{err}");

    let out = onecharge(&["setup", "--database-url", "mysql://nope"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("database_url"));

    let out = onecharge(&["setup", "--config", "/nonexistent/onecharge.toml"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no such file"));
}

#[test]
fn a_live_stripe_key_in_a_deployment_that_is_not_production_refuses_to_start_in_one_line() {
    for key in ["sk_live_do_not_print_me", "rk_live_do_not_print_me"] {
        let (code, err) = one_line(
            &[
                "serve",
                "--database-url",
                "postgres://127.0.0.1:1/onecharge",
            ],
            &[
                ("ONECHARGE_GATEWAY_KIND", "stripe"),
                ("ONECHARGE_GATEWAY_API_KEY", key),
            ],
        );
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains("gateway_api_key") && err.contains("production"),
            "{err}"
        );
        assert!(!err.contains("do_not_print_me"), "{err}");
    }
}

#[test]
fn a_stripe_test_key_in_a_production_deployment_refuses_to_start_in_one_line() {
    let (code, err) = one_line(
        &[
            "serve",
            "--database-url",
            "postgres://127.0.0.1:1/onecharge",
        ],
        &[
            ("ONECHARGE_GATEWAY_KIND", "stripe"),
            ("ONECHARGE_GATEWAY_API_KEY", "sk_test_do_not_print_me"),
            ("ONECHARGE_PRODUCTION", "true"),
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("gateway_api_key") && err.contains("test key"),
        "{err}"
    );
    assert!(!err.contains("do_not_print_me"), "{err}");
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
    let err = stderr(&out);
    assert!(
        err.contains("cannot reach PostgreSQL at postgres://127.0.0.1:1/onecharge"),
        "{err}"
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

/// The lines a usage error prints, without clap's `For more information, try '--help'.` hint.
fn error_lines(out: &Output) -> Vec<String> {
    stderr(out)
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information"))
        .map(str::to_owned)
        .collect()
}

/// No command below may reach a database: this one refuses connections at once.
const NO_DATABASE: (&str, &str) = ("ONECHARGE_DATABASE_URL", "postgres://127.0.0.1:1/onecharge");

/// `serve` exits at once when no database answers, instead of waiting for a failover to end.
const NO_WAIT: (&str, &str) = ("ONECHARGE_DATABASE__STARTUP_WAIT", "0s");

#[test]
fn a_huge_threshold_or_limit_is_a_one_line_usage_error_never_a_panic() {
    for (args, what) in [
        (
            &["attempts", "stuck", "--older-than", "500000y"][..],
            "--older-than",
        ),
        (
            &["attempts", "list", "--limit", "9223372036854775808"][..],
            "--limit",
        ),
    ] {
        let out = onecharge(args, &[NO_DATABASE]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let lines = error_lines(&out);
        assert_eq!(lines.len(), 1, "{args:?}: {lines:?}");
        assert!(lines[0].contains(what), "{args:?}: {lines:?}");
        assert!(lines[0].contains("at most"), "{args:?}: {lines:?}");
    }
}

#[test]
fn every_duration_setting_refuses_a_huge_value_with_one_line_naming_it() {
    for (variable, key) in [
        ("ONECHARGE_EXECUTOR__MAX_AGE", "executor.max_age"),
        ("ONECHARGE_GATEWAY_KEY_RETENTION", "gateway_key_retention"),
        (
            "ONECHARGE_INTAKE__MAX_COMMAND_AGE",
            "intake.max_command_age",
        ),
        (
            "ONECHARGE_PURGE__DEDUPE_RETENTION",
            "purge.dedupe_retention",
        ),
        (
            "ONECHARGE_PURGE__HISTORY_RETENTION",
            "purge.history_retention",
        ),
        ("ONECHARGE_RECONCILER__CLAIM_HOLD", "reconciler.claim_hold"),
        ("ONECHARGE_RECONCILER__SCHEDULE", "reconciler.schedule"),
    ] {
        let value = if key == "reconciler.schedule" {
            "[\"1m\", \"600000000y\"]"
        } else {
            "600000000y"
        };
        let (code, err) = one_line(&["setup"], &[NO_DATABASE, (variable, value)]);
        assert_eq!(code, Some(2), "{variable}: {err}");
        assert!(err.contains(key), "{variable}: {err}");
        assert!(err.contains("at most"), "{variable}: {err}");
    }
}

#[test]
fn serve_refuses_console_cookies_without_secure_on_a_non_loopback_address_before_connecting() {
    let exposed = [
        NO_DATABASE,
        ("ONECHARGE_ADMIN_ADDR", "0.0.0.0:0"),
        ("ONECHARGE_ADMIN_TOKEN", "a-long-admin-token"),
    ];
    let (code, err) = one_line(
        &["serve", "--insecure-admin"],
        &[
            &exposed[..],
            &[("ONECHARGE_CONSOLE__SECURE_COOKIE", "false")],
        ]
        .concat(),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("console.secure_cookie"), "{err}");
    assert!(err.contains("0.0.0.0:0"), "{err}");
    assert!(!err.contains("a-long-admin-token"), "{err}");

    // unset (Secure by default off loopback) or true, serve goes on to the database
    for secure in [None, Some("true")] {
        let mut env = exposed.to_vec();
        env.push(NO_WAIT);
        env.extend(secure.map(|v| ("ONECHARGE_CONSOLE__SECURE_COOKIE", v)));
        let out = onecharge(&["serve"], &env);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{secure:?}: {err}");
        assert!(err.contains("cannot connect to PostgreSQL"), "{err}");
    }
}

#[test]
fn serve_refuses_an_open_admin_api_on_a_non_loopback_address_before_connecting() {
    let exposed = ("ONECHARGE_ADMIN_ADDR", "0.0.0.0:0");
    let (code, err) = one_line(&["serve"], &[NO_DATABASE, exposed]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("0.0.0.0:0"), "{err}");
    assert!(err.contains("ONECHARGE_ADMIN_TOKEN"), "{err}");
    assert!(err.contains("--insecure-admin"), "{err}");
    assert!(
        !err.contains("PostgreSQL"),
        "refused before connecting: {err}"
    );

    // With a token, the explicit flag or setting, or without the admin role, serve goes on
    // (and fails later, on the unreachable database: exit 1).
    for (args, env) in [
        (
            &["serve"][..],
            ("ONECHARGE_ADMIN_TOKEN", "a-long-admin-token"),
        ),
        (
            &["serve", "--insecure-admin"][..],
            ("ONECHARGE_NAMESPACE", ""),
        ),
        (&["serve"][..], ("ONECHARGE_INSECURE_ADMIN", "true")),
        (
            &["serve", "--roles", "intake"][..],
            ("ONECHARGE_NAMESPACE", ""),
        ),
    ] {
        let out = onecharge(args, &[NO_DATABASE, NO_WAIT, exposed, env]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?} {env:?}: {err}");
        assert!(err.contains("cannot connect to PostgreSQL"), "{err}");
    }
}

#[test]
fn a_shutdown_timeout_of_zero_exits_2_naming_the_setting() {
    let (code, err) = one_line(
        &["setup"],
        &[NO_DATABASE, ("ONECHARGE_SHUTDOWN_TIMEOUT", "0s")],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("shutdown_timeout"), "{err}");
}

#[test]
fn completions_are_printed_for_each_shell_without_any_configuration() {
    // a configuration that would stop every other command: completions need none
    let broken = [("ONECHARGE_INTAKE__MAX_DELIVER", "1")];
    for (shell, marker) in [
        ("bash", "_onecharge()"),
        ("zsh", "#compdef onecharge"),
        ("fish", "complete -c onecharge"),
    ] {
        let out = onecharge(&["completions", shell], &broken);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: {script}");
        for subcommand in ["attempts", "dlq", "demo", "serve"] {
            assert!(
                script.contains(subcommand),
                "{shell} completes {subcommand}"
            );
        }
    }
    let out = onecharge(&["completions", "tcsh"], &[]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}
