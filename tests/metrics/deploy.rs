//! What a platform team imports from `deploy/` (issue 27) names only what `serve` exposes:
//! every metric, label and matched label value in the Grafana dashboard
//! (`deploy/grafana/onecharge.json`) and in the Prometheus alert rules
//! (`deploy/prometheus/onecharge-rules.yml`) is on the `/metrics` of a live `serve` after
//! some traffic. A renamed metric or label then fails here instead of silently blanking a
//! panel or an alert.
//!
//! The live `serve`s are the real binary, each a process of its own, so their `/metrics`
//! holds only what they did (this test binary's recorder is shared by its tests). Four runs
//! cover the series that only a fault or a rare job creates: the first charges, declines,
//! dead-letters, waits for the rate limit and meets a database that refuses intake; the
//! second meets a rejected API key; the third a wrong gateway URL, on which the reconciler's
//! lookup and sweep fail too; the fourth sweeps the Stripe connector's list and refuses
//! badly signed webhooks.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use mock_gateway::{payment_methods as pm, FaultConfig, Latency, MockConfig, MockGateway};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::serve::{Exposed, Serve};
use crate::support::nats_server::free_port;
use crate::support::{command, Records, TestEnv};

const DASHBOARD: &str = include_str!("../../deploy/grafana/onecharge.json");
const RULES: &str = include_str!("../../deploy/prometheus/onecharge-rules.yml");

/// Labels Prometheus attaches to every series of a target when it scrapes it (`namespace` and
/// `job` from the ServiceMonitor's Service, `instance` the pod's address): never on
/// `/metrics`, yet every alert keeps `namespace` and `job` (so that two deployments in one
/// Prometheus never merge) and every panel is narrowed to the dashboard's `$namespace` and
/// `$instance`. Matching or grouping on them names nothing `serve` must expose.
const TARGET_LABELS: [&str; 3] = ["namespace", "job", "instance"];

/// Metrics no short run of `serve` can produce, with their labels and the test that
/// asserts their exact series. `onecharge_intake_messages_lost_total` needs an operator to
/// lower the consumer's `max_deliver` on the server while intake runs and a dead-letter
/// publish to fail on the last delivery; tests/it/intake.rs
/// `a_command_an_operator_set_limit_ends_without_a_dead_letter_is_counted_as_lost` checks
/// the rendered line, and [`rare_fault_metrics_are_still_recorded_by_the_source`] that the
/// source still records it under these names.
const ONLY_ON_A_RARE_FAULT: &[(&str, &[&str])] = &[(
    "onecharge_intake_messages_lost_total",
    &["consumer", "reason"],
)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alert_rules_name_only_metrics_and_labels_a_live_serve_exposes() {
    let gateway = MockGateway::start(MockConfig::default()).await.unwrap();
    let key = MockConfig::default().api_key;
    let env = TestEnv::new().await;
    let url = gateway.base_url();

    // Run 1, every role: charges (one rate-limited by the gateway once), a decline and a
    // dead letter, under a fleet rate limit that makes the executor wait; then a database
    // that refuses intake's statement for a reason no message causes.
    let mut first = Serve::start(
        &env,
        &[],
        &[
            ("ONECHARGE_GATEWAY_URL", &url),
            ("ONECHARGE_GATEWAY_API_KEY", &key),
            ("ONECHARGE_GATEWAY_MAX_RATE", "4"),
            ("ONECHARGE_GATEWAY_RATE_BURST", "1"),
        ],
    );
    let mut charged = Vec::new();
    for i in 0..6 {
        charged.push(publish(&env, &format!("deploy-visa-{i}"), pm::CARD_VISA).await);
    }
    charged.push(publish(&env, "deploy-rate-limited", pm::FAULT_RATE_LIMIT).await);
    let declined = publish(&env, "deploy-declined", pm::CARD_DECLINED).await;
    env.publish_raw(Some("deploy-not-json"), b"{not json").await;
    first
        .wait_until("7 charged, 1 declined, the events relayed", |m| {
            m.value("onecharge_attempts", &[("status", "succeeded")]) == 7.0
                && m.value("onecharge_attempts", &[("status", "declined")]) == 1.0
                && m.value("onecharge_outbox_pending", &[]) == 0.0
                && m.value("onecharge_dead_letters_total", &[("class", "invalid")]) == 1.0
                // the stream audit has made a pass (its gauge exists from the first)
                && m.metrics.contains_key("onecharge_intake_unrecorded_messages")
        })
        .await;
    for id in &charged {
        assert_eq!(env.status(*id).await, "succeeded");
    }
    assert_eq!(env.status(declined).await, "declined");
    assert_eq!(env.dead_letters().await.len(), 1);

    env.rename_table("processed_messages", "processed_messages_away")
        .await;
    let late = publish(&env, "deploy-late", pm::CARD_VISA).await;
    first
        .wait_until("intake counts the refused statement", |m| {
            m.value(
                "onecharge_intake_database_faults_total",
                &[("sqlstate_class", "42")],
            ) >= 1.0
        })
        .await;
    env.rename_table("processed_messages_away", "processed_messages")
        .await;
    first
        .wait_until("the late command is charged once the table is back", |m| {
            m.value("onecharge_attempts", &[("status", "succeeded")]) == 8.0
        })
        .await;
    assert_eq!(env.status(late).await, "succeeded");

    // Then a result the database refuses: the gateway answers slowly, and while the call
    // is out the outbox (which a success writes its event to) goes away. The executor
    // hands the attempt to the reconciler as `unknown`.
    gateway.set_faults(FaultConfig {
        latency: Latency::fixed(1_500),
        ..FaultConfig::default()
    });
    let refused = publish(&env, "deploy-refused", pm::CARD_VISA).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while env
        .find_attempt(refused)
        .await
        .is_none_or(|row| row.status != "in_flight")
    {
        assert!(
            Instant::now() < deadline,
            "the refused attempt was never claimed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.rename_table("outbox", "outbox_away").await;
    first
        .wait_until("the executor counts the refused result", |m| {
            m.value("onecharge_executor_unrecorded_results_total", &[]) >= 1.0
        })
        .await;
    // The count comes before the hand-over's own write: wait for the write, by its cause,
    // still without the outbox (the hand-over writes no event).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env
        .history(refused)
        .await
        .iter()
        .any(|t| t.to_status == "unknown" && t.cause == "settlement_refused")
    {
        assert!(
            Instant::now() < deadline,
            "the refused attempt was never handed to the reconciler (status {})",
            env.status(refused).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Stopped before the outbox comes back: this serve's own reconciler would otherwise look
    // the attempt up at once and settle it (the gateway did charge it), and run 3 would find
    // no `unknown` attempt to look up. Without the outbox its settlement is refused and the
    // attempt stays `unknown` whatever the timing.
    let mut exposed = first.stop().await;
    env.rename_table("outbox_away", "outbox").await;
    assert_eq!(env.status(refused).await, "unknown");
    let charges = gateway.ledger().len();

    // Run 2: the gateway rejects the API key. One call at a time, still slow, so that the
    // next attempt is claimed ahead while the first call is out and handed back unsent.
    let mut second = Serve::start(
        &env,
        &["intake", "executor", "admin"],
        &[
            ("ONECHARGE_GATEWAY_URL", &url),
            ("ONECHARGE_GATEWAY_API_KEY", "sk_test_not_the_gateways_key"),
            ("ONECHARGE_EXECUTOR__CONCURRENCY", "1"),
        ],
    );
    let mut waiting = Vec::new();
    for i in 0..3 {
        waiting.push(publish(&env, &format!("deploy-waiting-{i}"), pm::CARD_VISA).await);
    }
    second
        .wait_until(
            "the executor pauses on the rejected key, handing back the queue",
            |m| {
                m.value("onecharge_gateway_credentials_faults_total", &[]) == 1.0
                    && m.value("onecharge_gateway_paused", &[]) == 1.0
                    && m.value("onecharge_executor_handed_back_total", &[]) >= 1.0
            },
        )
        .await;
    assert!(gateway.stats().unauthorized >= 1);
    exposed.add(second.stop().await);

    // Run 3: the key is right, the URL is not (the mock answers 404 under /nowhere/). The
    // reconciler runs too: the attempt run 1 left `unknown` is due now, and the scheduled
    // sweep (its turn taken from run 1's serve, which set it an hour ahead) falls due after
    // a second; the lookup and the sweep's list meet the 404 like the charges.
    env.set_attempts_in("unknown", "next_run_at = now()").await;
    env.clear_sweep_schedule().await;
    let wrong_url = format!("{url}/nowhere/");
    let mut third = Serve::start(
        &env,
        &["executor", "reconciler", "admin"],
        &[
            ("ONECHARGE_GATEWAY_URL", &wrong_url),
            ("ONECHARGE_GATEWAY_API_KEY", &key),
            ("ONECHARGE_RECONCILER__SWEEP_INTERVAL", "1s"),
            ("ONECHARGE_RECONCILER__SWEEP_WINDOW", "1m"),
        ],
    );
    third
        .wait_until(
            "the executor pauses on the wrong URL, a lookup and a sweep fail",
            |m| {
                m.value("onecharge_gateway_endpoint_faults_total", &[]) >= 1.0
                    && m.value("onecharge_reconciliations_total", &[]) >= 1.0
                    && m.value(
                        "onecharge_reconciliation_sweeps_total",
                        &[("result", "failed")],
                    ) >= 1.0
            },
        )
        .await;
    exposed.add(third.stop().await);
    // Nothing was charged while the key or the URL was wrong: the attempts still wait.
    for id in waiting {
        assert_eq!(env.status(id).await, "pending");
    }
    assert_eq!(gateway.ledger().len(), charges);

    // Run 4: the Stripe connector against the mock's Stripe dialect, sweeping its list, and
    // the webhook listener refusing an unsigned delivery and a forged one.
    let stripe = MockGateway::start(MockConfig {
        dialect: mock_gateway::Dialect::Stripe,
        ..MockConfig::default()
    })
    .await
    .unwrap();
    env.clear_sweep_schedule().await;
    let webhook_addr = format!("127.0.0.1:{}", free_port());
    let mut fourth = Serve::start(
        &env,
        &["reconciler", "webhook", "admin"],
        &[
            ("ONECHARGE_GATEWAY_KIND", "stripe"),
            ("ONECHARGE_GATEWAY_URL", &stripe.base_url()),
            ("ONECHARGE_GATEWAY_API_KEY", &key),
            ("ONECHARGE_RECONCILER__SWEEP_INTERVAL", "1s"),
            ("ONECHARGE_RECONCILER__SWEEP_WINDOW", "1m"),
            ("ONECHARGE_WEBHOOK_ADDR", &webhook_addr),
            ("ONECHARGE_STRIPE_WEBHOOK_SECRETS", "whsec_deploy_test"),
        ],
    );
    fourth
        .wait_until("a sweep reads the Stripe list", |m| {
            m.value("onecharge_reconciliation_sweeps_total", &[("result", "ok")]) >= 1.0
        })
        .await;
    fourth
        .wait_until("the gauges' refresher reads when it succeeded", |m| {
            m.metrics
                .contains_key("onecharge_reconciliation_last_sweep_succeeded_timestamp_seconds")
        })
        .await;
    let body = br#"{"id":"evt_deploy","object":"event","type":"payment_intent.succeeded","data":{"object":{}}}"#;
    let forged = format!(
        "t={},v1={}",
        time::OffsetDateTime::now_utc().unix_timestamp(),
        "0".repeat(64)
    );
    for signature in [None, Some(forged)] {
        let mut request = reqwest::Client::new()
            .post(format!("http://{webhook_addr}/webhooks/stripe"))
            .header("content-type", "application/json")
            .body(body.to_vec());
        if let Some(signature) = signature {
            request = request.header("Stripe-Signature", signature);
        }
        assert_eq!(request.send().await.unwrap().status(), 400);
    }
    fourth
        .wait_until("both webhooks are counted as refused", |m| {
            m.value(
                "onecharge_webhooks_total",
                &[("result", "missing_signature")],
            ) == 1.0
                && m.value("onecharge_webhooks_total", &[("result", "bad_signature")]) == 1.0
        })
        .await;
    exposed.add(fourth.stop().await);

    for (name, labels) in ONLY_ON_A_RARE_FAULT {
        exposed.declare(name, labels);
    }
    let mut problems = Vec::new();
    for (place, expr) in dashboard_expressions(DASHBOARD)
        .into_iter()
        .chain(rule_expressions(RULES))
    {
        for problem in exposed.unknown_names(&references(&expr)) {
            problems.push(format!("{place}: {problem}\n    in: {expr}"));
        }
    }
    assert!(
        problems.is_empty(),
        "names a live serve does not expose:\n{}",
        problems.join("\n")
    );
}

/// Metrics whose only label takes values no list holds (a SQLSTATE class): the series
/// appears with its first increment (the rule's `or` term sees that one), so a fresh
/// `serve` cannot show it at 0.
/// Series that stand for an event and are absent until it: a timestamp of 0 would be a
/// claim. The fleet's last successful sweep (none yet on a fresh database), and a webhook
/// listener's start (none runs without `webhook_addr`). The live run shows both.
const ONLY_AFTER_THEIR_EVENT: &[(&str, &[&str])] = &[
    (
        "onecharge_reconciliation_last_sweep_succeeded_timestamp_seconds",
        &[],
    ),
    ("onecharge_webhook_listener_started_timestamp_seconds", &[]),
];

const OPEN_LABELS: &[(&str, &str)] =
    &[("onecharge_intake_database_faults_total", "sqlstate_class")];

/// Issue 39: before anything is charged, dead-lettered, refused or swept, every metric,
/// label and matched label value that a rule or a panel names is on `/metrics` already
/// (counters at 0, decision 143), so a dashboard shows 0 where it showed "no data" and an
/// `increase()` sees the first fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_idle_serve_already_exposes_every_series_a_rule_or_a_panel_names() {
    let gateway = MockGateway::start(MockConfig::default()).await.unwrap();
    let key = MockConfig::default().api_key;
    let env = TestEnv::new().await;
    let url = gateway.base_url();
    let mut serve = Serve::start(
        &env,
        &[],
        &[
            ("ONECHARGE_GATEWAY_URL", &url),
            ("ONECHARGE_GATEWAY_API_KEY", &key),
        ],
    );
    let mut exposed = serve
        .wait_until(
            "the gauges' first refresh and the stream audit's first pass",
            |m| {
                m.metrics
                    .contains_key("onecharge_database_gauges_refreshed_timestamp_seconds")
                    && m.metrics.contains_key("onecharge_intake_consumer_pending")
                    && m.metrics
                        .contains_key("onecharge_intake_unrecorded_messages")
            },
        )
        .await;
    // Idle: the series are there because they were registered, not because anything ran.
    assert_eq!(exposed.value("onecharge_intake_deliveries_total", &[]), 0.0);
    assert_eq!(exposed.value("onecharge_dead_letters_total", &[]), 0.0);
    assert_eq!(
        exposed.value("onecharge_gateway_calls_total", &[("operation", "charge")]),
        0.0
    );
    assert!(gateway.ledger().is_empty());
    // Refunds (issue 37): every unsettled state's gauges, the settled counter's statuses
    // and the refund calls' outcomes, at 0 before any refund.
    for status in [
        "waiting",
        "pending",
        "in_flight",
        "processing",
        "unknown",
        "needs_review",
    ] {
        for name in ["onecharge_refunds", "onecharge_refunds_oldest_age_seconds"] {
            assert_eq!(
                exposed.labelled(name, &[("status", status)]),
                Some(0.0),
                "{name} {status}"
            );
        }
    }
    for status in ["succeeded", "failed", "refused", "needs_review"] {
        assert_eq!(
            exposed.labelled("onecharge_refunds_settled_total", &[("status", status)]),
            Some(0.0),
            "{status}"
        );
    }
    for (operation, outcome) in [("refund", "ambiguous"), ("refund_lookup", "found")] {
        assert_eq!(
            exposed.labelled(
                "onecharge_gateway_calls_total",
                &[("operation", operation), ("outcome", outcome)]
            ),
            Some(0.0),
            "{operation} {outcome}"
        );
    }

    for (name, label) in OPEN_LABELS {
        exposed.declare(name, &[label]);
    }
    for (name, labels) in ONLY_AFTER_THEIR_EVENT {
        exposed.declare(name, labels);
    }
    let mut problems = Vec::new();
    for (place, expr) in dashboard_expressions(DASHBOARD)
        .into_iter()
        .chain(rule_expressions(RULES))
    {
        for problem in exposed.unknown_names(&references(&expr)) {
            problems.push(format!("{place}: {problem}\n    in: {expr}"));
        }
    }
    assert!(
        problems.is_empty(),
        "a fresh serve does not expose:\n{}",
        problems.join("\n")
    );
    serve.stop().await;
}

#[test]
fn the_checker_reports_a_misspelled_metric_label_or_value_and_accepts_the_real_ones() {
    let exposed = Exposed::parse(
        "# TYPE onecharge_attempts gauge\n\
         onecharge_attempts{status=\"pending\"} 3\n\
         onecharge_attempts{status=\"needs_review\"} 1\n\
         onecharge_gateway_call_duration_seconds_bucket{operation=\"charge\",le=\"0.5\"} 2\n",
    );
    let check = |expr: &str| exposed.unknown_names(&references(expr));
    assert_eq!(
        check(r#"max by (status) (onecharge_attempts{status=~"pending|in_flight"}) > 900"#),
        Vec::<String>::new()
    );
    assert_eq!(
        check("histogram_quantile(0.99, sum by (le, operation) (rate(onecharge_gateway_call_duration_seconds_bucket[$__rate_interval])))"),
        Vec::<String>::new()
    );
    assert_eq!(
        check("max(onecharge_attempt) > 0"),
        vec!["metric onecharge_attempt"]
    );
    assert_eq!(
        check(r#"max(onecharge_attempts{state="pending"})"#),
        vec!["label state on onecharge_attempts"]
    );
    assert_eq!(
        check(r#"max(onecharge_attempts{status="needs-review"})"#),
        vec![r#"value status="needs-review" of onecharge_attempts"#]
    );
    assert_eq!(
        check("max by (consumer) (onecharge_attempts)"),
        vec!["grouping label consumer"]
    );
    // the target labels Prometheus adds, and the dashboard's variables
    assert_eq!(
        check(
            r#"max by (namespace, job, status) (onecharge_attempts{namespace=~"$namespace", instance=~"$instance", status="pending"}) > 900"#
        ),
        Vec::<String>::new()
    );
}

#[test]
fn every_dashboard_panel_and_every_alert_has_an_expression_the_checker_reads() {
    let panels = dashboard_expressions(DASHBOARD);
    let alerts = rule_expressions(RULES);
    assert!(panels.len() >= 20, "{panels:?}");
    assert_eq!(
        alerts.len(),
        RULES.matches("- alert:").count(),
        "{alerts:?}"
    );
    for (place, expr) in panels.iter().chain(&alerts) {
        let refs = references(expr);
        assert!(
            !refs.selectors.is_empty(),
            "{place}: no metric found in {expr}"
        );
    }
}

#[test]
fn every_dashboard_selector_is_narrowed_to_the_chosen_namespace_and_instance() {
    let wanted =
        |label: &str, variable: &str| (label.to_owned(), "=~".to_owned(), variable.to_owned());
    for (place, expr) in dashboard_expressions(DASHBOARD) {
        for selector in references(&expr).selectors {
            for narrowed in [
                wanted("namespace", "$namespace"),
                wanted("instance", "$instance"),
            ] {
                assert!(
                    selector.matchers.contains(&narrowed),
                    "{place}: {} is not narrowed by {}=~\"{}\"\n    in: {expr}",
                    selector.metric,
                    narrowed.0,
                    narrowed.2
                );
            }
        }
    }
    let dashboard: Value = serde_json::from_str(DASHBOARD).unwrap();
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(
        variables.contains(&"namespace") && variables.contains(&"instance"),
        "{variables:?}"
    );
}

#[test]
fn rare_fault_metrics_are_still_recorded_by_the_source() {
    let source = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/metrics.rs"))
        .expect("src/metrics.rs");
    for (name, labels) in ONLY_ON_A_RARE_FAULT {
        let call = source
            .lines()
            .find(|line| line.contains(&format!("\"{name}\"")))
            .unwrap_or_else(|| panic!("src/metrics.rs no longer records {name}"));
        for label in *labels {
            assert!(
                call.contains(&format!("\"{label}\" =>")),
                "{name} lost its label {label}: {call}"
            );
        }
    }
}

/// Publishes a valid command for a new attempt paying with `payment_method`.
async fn publish(env: &TestEnv, message_id: &str, payment_method: &str) -> Uuid {
    let attempt = Uuid::new_v4();
    env.publish(
        message_id,
        &command(attempt, json!({"payment_method": payment_method})),
    )
    .await;
    attempt
}

impl Exposed {
    /// Adds what another process exposed.
    fn add(&mut self, other: Exposed) {
        for (name, labels) in other.metrics {
            let known = self.metrics.entry(name).or_default();
            for (label, values) in labels {
                known.entry(label).or_default().extend(values);
            }
        }
    }

    /// Declares a metric no run produced, with its labels and any value.
    fn declare(&mut self, name: &str, labels: &[&str]) {
        let known = self.metrics.entry(name.to_owned()).or_default();
        for label in labels {
            known.entry((*label).to_owned()).or_default();
        }
    }

    /// What `refs` names that is not exposed: metrics, labels of a selector, values an
    /// equality matcher asks for, and grouping labels that no metric of the expression has.
    fn unknown_names(&self, refs: &References) -> Vec<String> {
        let mut unknown = Vec::new();
        let mut labels_in_expr = HashSet::new();
        for selector in &refs.selectors {
            let Some(labels) = self.metrics.get(&selector.metric) else {
                unknown.push(format!("metric {}", selector.metric));
                continue;
            };
            labels_in_expr.extend(labels.keys().cloned());
            for (label, op, value) in &selector.matchers {
                if TARGET_LABELS.contains(&label.as_str()) {
                    continue;
                }
                match labels.get(label) {
                    None => unknown.push(format!("label {label} on {}", selector.metric)),
                    Some(values) if op == "=" && !values.is_empty() && !values.contains(value) => {
                        unknown.push(format!("value {label}=\"{value}\" of {}", selector.metric))
                    }
                    Some(_) => {}
                }
            }
        }
        for label in &refs.grouping {
            if !labels_in_expr.contains(label) && !TARGET_LABELS.contains(&label.as_str()) {
                unknown.push(format!("grouping label {label}"));
            }
        }
        unknown
    }
}

/// A metric selector of an expression: its name and its label matchers
/// (label, operator, value).
#[derive(Debug, PartialEq)]
struct Selector {
    metric: String,
    matchers: Vec<(String, String, String)>,
}

/// The names a PromQL expression uses.
#[derive(Debug, Default)]
struct References {
    selectors: Vec<Selector>,
    /// Labels of `by`, `without`, `on`, `ignoring`, `group_left`, `group_right` lists.
    grouping: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Punct(String),
    /// A number, a duration, or a Grafana variable such as `$__rate_interval`.
    Literal,
}

/// Splits PromQL (with Grafana variables) into tokens; enough of the language to find its
/// names, not to evaluate it.
fn tokens(expr: &str) -> Vec<Token> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '"' || c == '\'' || c == '`' {
            let mut value = String::new();
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' && c != '`' {
                    i += 1;
                }
                value.extend(chars.get(i));
                i += 1;
            }
            i += 1;
            out.push(Token::Str(value));
        } else if c == '$' {
            i += 1;
            while i < chars.len() && (ident(chars[i]) || chars[i] == '{' || chars[i] == '}') {
                i += 1;
            }
            out.push(Token::Literal);
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            out.push(Token::Literal);
        } else if ident(c) {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            if ["=~", "!~", "!=", "==", ">=", "<="].contains(&two.as_str()) {
                out.push(Token::Punct(two));
                i += 2;
            } else {
                out.push(Token::Punct(c.to_string()));
                i += 1;
            }
        }
    }
    out
}

/// The metrics, matchers and grouping labels `expr` names.
fn references(expr: &str) -> References {
    const GROUPING: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    // Operators, and the aggregations (which may take `by (…)` before their parenthesis).
    const KEYWORDS: [&str; 20] = [
        "and",
        "or",
        "unless",
        "offset",
        "bool",
        "atan2",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    let tokens = tokens(expr);
    let punct = |i: usize, p: &str| tokens.get(i) == Some(&Token::Punct(p.to_owned()));
    let mut refs = References::default();
    let mut i = 0;
    while i < tokens.len() {
        let Token::Ident(name) = &tokens[i] else {
            i += 1;
            continue;
        };
        if GROUPING.contains(&name.as_str()) && punct(i + 1, "(") {
            i += 2;
            while i < tokens.len() && !punct(i, ")") {
                if let Token::Ident(label) = &tokens[i] {
                    refs.grouping.insert(label.clone());
                }
                i += 1;
            }
        } else if punct(i + 1, "(") || KEYWORDS.contains(&name.as_str()) {
            i += 1; // a function, an aggregation or an operator
        } else {
            let mut selector = Selector {
                metric: name.clone(),
                matchers: Vec::new(),
            };
            i += 1;
            if punct(i, "{") {
                i += 1;
                while i < tokens.len() && !punct(i, "}") {
                    if let (
                        Some(Token::Ident(label)),
                        Some(Token::Punct(op)),
                        Some(Token::Str(value)),
                    ) = (tokens.get(i), tokens.get(i + 1), tokens.get(i + 2))
                    {
                        selector
                            .matchers
                            .push((label.clone(), op.clone(), value.clone()));
                        i += 3;
                    } else {
                        i += 1;
                    }
                }
            }
            refs.selectors.push(selector);
        }
    }
    refs
}

/// Every `expr` of the dashboard's panels (rows' panels too), with where it is.
fn dashboard_expressions(json: &str) -> Vec<(String, String)> {
    fn walk(value: &Value, place: &str, out: &mut Vec<(String, String)>) {
        match value {
            Value::Object(map) => {
                let place = map
                    .get("title")
                    .and_then(Value::as_str)
                    .map_or_else(|| place.to_owned(), |t| format!("panel \"{t}\""));
                if let Some(expr) = map.get("expr").and_then(Value::as_str) {
                    out.push((place.clone(), expr.to_owned()));
                }
                for child in map.values() {
                    walk(child, &place, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, place, out)),
            _ => {}
        }
    }
    let dashboard: Value = serde_json::from_str(json).expect("the dashboard is JSON");
    let mut out = Vec::new();
    walk(&dashboard["panels"], "dashboard", &mut out);
    out
}

/// Every alert's `expr` in the rules file, with the alert's name. The file is read line by
/// line: an `expr:` is either on its line or a `|` block indented under it.
fn rule_expressions(yaml: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out = Vec::new();
    let mut alert = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            alert = format!("alert {}", name.trim());
        } else if let Some(rest) = trimmed.strip_prefix("expr:") {
            let indent = line.len() - trimmed.len();
            let rest = rest.trim();
            if rest == "|" || rest == ">" {
                let mut block = Vec::new();
                while let Some(next) = lines.get(i + 1) {
                    let deeper = next.len() - next.trim_start().len() > indent;
                    if !(deeper || next.trim().is_empty()) {
                        break;
                    }
                    block.push(next.trim());
                    i += 1;
                }
                out.push((alert.clone(), block.join("\n").trim().to_owned()));
            } else {
                out.push((alert.clone(), rest.trim_matches(['\'', '"']).to_owned()));
            }
        }
        i += 1;
    }
    out
}

/// A key of the Secret `onecharge`, mounted as the file of that name, and the setting it is.
type SecretFile = (&'static str, &'static str);

/// The kustomize base's workloads, with the keys of the Secret `onecharge` each mounts (each
/// as the file of that name) and the setting each is, and whether it serves the admin API
/// (and so reads named operators). The setup Job's database URL is the schema owner's
/// (docs/decisions/160-setup-migrates-as-the-owner-serve-only-checks.md), the Deployments' the runtime role's.
const WORKLOADS: [(&str, &str, &[SecretFile], bool); 4] = [
    (
        "deployment-executor.yaml",
        include_str!("../../deploy/kubernetes/base/deployment-executor.yaml"),
        &[
            ("database-url", "database_url"),
            ("nats-url", "nats_url"),
            ("gateway-api-key", "gateway_api_key"),
            ("admin-token", "admin_token"),
        ],
        true,
    ),
    (
        "deployment-intake.yaml",
        include_str!("../../deploy/kubernetes/base/deployment-intake.yaml"),
        &[
            ("database-url", "database_url"),
            ("nats-url", "nats_url"),
            ("admin-token", "admin_token"),
        ],
        true,
    ),
    (
        "deployment-maintenance.yaml",
        include_str!("../../deploy/kubernetes/base/deployment-maintenance.yaml"),
        &[
            ("database-url", "database_url"),
            ("nats-url", "nats_url"),
            ("admin-token", "admin_token"),
        ],
        true,
    ),
    (
        "setup-job.yaml",
        include_str!("../../deploy/kubernetes/base/setup-job.yaml"),
        &[
            ("database-owner-url", "database_url"),
            ("nats-setup-url", "nats_setup_url"),
        ],
        false,
    ),
];
const SECRET_EXAMPLE: &str = include_str!("../../deploy/kubernetes/base/secret.example.yaml");
const EXTERNAL_SECRETS: &str =
    include_str!("../../deploy/kubernetes/examples/external-secrets.yaml");
/// The settings the base's ConfigMap is generated from (`KEY=VALUE` lines).
const CONFIGMAP: &str = include_str!("../../deploy/kubernetes/base/onecharge.env");

/// A manifest without its comments and with every run of whitespace one space, so that a
/// test can look for a few lines of YAML whatever their indentation.
fn flattened(yaml: &str) -> String {
    yaml.lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Issue 39: secrets reach the pods as files, never as environment variables, and the named
/// operators as a mounted operators.toml. Each workload mounts the Secret `onecharge` (only
/// the keys it needs) and `onecharge-operators` read-only, points each
/// `ONECHARGE_<SETTING>_FILE` at a file the mount holds, each a secret setting onecharge
/// reads from a file, and sets none of them as a value; the example Secret and the External Secrets example
/// produce every key a workload mounts.
#[test]
fn the_kustomize_base_mounts_secrets_and_operators_as_files_and_sets_the_file_variables() {
    let mut mounted = BTreeSet::new();
    let mut settings = BTreeSet::new();
    for (name, yaml, keys, operators) in WORKLOADS {
        let flat = flattened(yaml);
        assert!(
            !flat.contains("secretKeyRef"),
            "{name}: a secret is read from a variable"
        );
        assert!(
            flat.contains("- name: secrets mountPath: /run/secrets/onecharge readOnly: true"),
            "{name}: the Secret onecharge is not mounted read-only at /run/secrets/onecharge"
        );
        let items: String = keys
            .iter()
            .map(|(key, _)| format!(" - key: {key} path: {key}"))
            .collect();
        assert!(
            flat.contains(&format!(
                "- name: secrets secret: secretName: onecharge defaultMode: 0440 items:{items}"
            )),
            "{name}: the secrets volume does not hold exactly {keys:?}"
        );
        for (key, setting) in keys.iter().copied() {
            assert!(
                onecharge::config::SECRET_SETTINGS.contains(&setting),
                "{name}: {key} is not a secret setting onecharge reads from a file"
            );
            let variable = format!("ONECHARGE_{}", setting.to_ascii_uppercase());
            assert!(
                flat.contains(&format!(
                    "- name: {variable}_FILE value: /run/secrets/onecharge/{key}"
                )),
                "{name}: {variable}_FILE does not name the mounted /run/secrets/onecharge/{key}"
            );
            assert!(
                !flat.contains(&format!("name: {variable} ")),
                "{name}: {variable} is set as well as its file (onecharge exits 2)"
            );
            mounted.insert(key);
            settings.insert(setting);
        }
        let operators_file = flat.contains(
            "- name: ONECHARGE_OPERATORS_FILE value: /run/secrets/onecharge-operators/operators.toml",
        ) && flat.contains(
            "- name: operators mountPath: /run/secrets/onecharge-operators readOnly: true",
        ) && flat.contains(
            "- name: operators secret: secretName: onecharge-operators defaultMode: 0440 items: - key: operators.toml path: operators.toml",
        );
        assert_eq!(
            operators_file, operators,
            "{name}: operators.toml is mounted and named by ONECHARGE_OPERATORS_FILE where the admin API runs, and only there"
        );
    }
    // The ConfigMap never holds a setting a workload reads from a file: both set exits 2.
    for setting in &settings {
        let variable = format!("ONECHARGE_{}", setting.to_ascii_uppercase());
        assert!(
            !CONFIGMAP
                .lines()
                .any(|line| line.trim_start().starts_with(&format!("{variable}="))),
            "the ConfigMap sets {variable}, which the workloads read from a file"
        );
    }
    let example = flattened(SECRET_EXAMPLE);
    let external = flattened(EXTERNAL_SECRETS);
    for key in mounted.iter().copied().chain(["operators.toml"]) {
        assert!(
            example.contains(&format!(" {key}: ")),
            "secret.example.yaml has no key {key}"
        );
        assert!(
            external.contains(&format!("- secretKey: {key} ")),
            "examples/external-secrets.yaml makes no key {key}"
        );
    }
    for target in ["onecharge", "onecharge-operators"] {
        assert!(
            external.contains(&format!("target: name: {target} ")),
            "examples/external-secrets.yaml makes no Secret {target}"
        );
    }
}
