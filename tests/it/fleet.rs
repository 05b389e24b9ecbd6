//! Pausing money movement across the fleet (issue 39, decision 145), everything or narrower
//! (issue 54, decision 265): a paused fleet claims and charges nothing a pause covers while
//! commands are still recorded, and charges them once resumed; a pause of charges leaves
//! refunds moving and the other way round, one of a currency leaves the others moving;
//! every pause and resume is one audited row; `/readyz` stays ready and says so.

use std::time::Duration;

use mock_gateway::payment_methods as pm;
use mock_gateway::MockConfig;
use onecharge::domain::Actor;
use onecharge::domain::{
    AttemptStatus, Currency, PauseCover, PauseScope, PaymentAttemptId, RefundId,
};
use onecharge::gateway::{GatewayClient, GatewayHealth};
use onecharge::operator::fleet::{self, FleetError};
use onecharge::operator::Via;
use onecharge::store::fleet::PauseSelector;
use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::json;
use uuid::Uuid;

use crate::refunds::{record, refund, settle};
use crate::support::api::AdminApi;
use crate::support::command::{command, intake_record, record_batch};
use crate::support::harness::run_leaving_one_in;
use crate::support::refund_roles::RefundRoles;
use crate::support::{Harness, Records, TestEnv};

const EVERYTHING: PauseCover = PauseCover::EVERYTHING;

/// What a pause of `scope` (in `currency`, when given) holds back.
fn cover(scope: PauseScope, currency: Option<&str>) -> PauseCover {
    PauseCover {
        scope,
        currency: currency.map(|c| Currency::from_code(c).unwrap()),
    }
}

/// The one open pause, whichever it is.
const ONLY_OPEN: PauseSelector = PauseSelector {
    id: None,
    scope: None,
    currency: None,
};

/// Who took `action`, and why, in order.
async fn audited(h: &Harness, action: &str) -> Vec<(String, Option<String>)> {
    let entries = h.audit_entries().await;
    entries
        .into_iter()
        .filter(|e| e.action == action)
        .map(|e| (e.actor, e.reason))
        .collect()
}

#[tokio::test]
async fn a_paused_fleet_records_commands_but_charges_nothing_until_resumed() {
    let h = Harness::new().await;
    let before = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    let pause = fleet::pause(
        &h.store,
        "gateway incident INC-7",
        EVERYTHING,
        &Actor::operator("ana"),
        Via::Cli,
    )
    .await
    .unwrap();
    assert_eq!(pause.paused_by, "operator:ana");
    // Intake keeps recording while paused.
    let during = h.seed(pm::CARD_VISA).await.payment_attempt_id;

    let executor = h.executor();
    for _ in 0..3 {
        assert_eq!(executor.run_once().await.unwrap().claimed(), 0);
    }
    assert!(
        h.gateway.ledger().is_empty(),
        "a paused fleet charges nothing"
    );
    for id in [before, during] {
        let row = h.attempt(id).await;
        assert_eq!(row.status, "pending");
        assert_eq!(row.tries, 0);
    }
    assert!(fleet::state(&h.store).await.unwrap().paused);

    let resumed = fleet::resume(
        &h.store,
        "INC-7 closed",
        ONLY_OPEN,
        &Actor::operator("bo"),
        Via::Api,
    )
    .await
    .unwrap();
    assert_eq!(resumed.pause.paused_by, "operator:ana");
    assert_eq!(resumed.resumed_by, "operator:bo");
    assert_eq!(executor.run_once().await.unwrap().claimed(), 2);
    assert_eq!(h.gateway.ledger().len(), 2);
    for id in [before, during] {
        assert_eq!(h.attempt(id).await.status, "succeeded");
    }
    assert_eq!(
        audited(&h, "fleet_pause").await,
        vec![("operator:ana".into(), Some("gateway incident INC-7".into()))]
    );
    assert_eq!(
        audited(&h, "fleet_resume").await,
        vec![("operator:bo".into(), Some("INC-7 closed".into()))]
    );
}

#[tokio::test]
async fn a_second_pause_and_a_resume_of_a_running_fleet_are_refused_with_why() {
    let h = Harness::new().await;
    let err = fleet::resume(&h.store, "", ONLY_OPEN, &Actor::operator("ana"), Via::Cli)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FleetError::Refused(why) if why.contains("not paused")),
        "{err}"
    );
    assert!(matches!(
        fleet::pause(
            &h.store,
            "  ",
            EVERYTHING,
            &Actor::operator("ana"),
            Via::Cli
        )
        .await,
        Err(FleetError::Invalid(_))
    ));

    fleet::pause(
        &h.store,
        "bad deploy",
        EVERYTHING,
        &Actor::operator("ana"),
        Via::Cli,
    )
    .await
    .unwrap();
    let err = fleet::pause(
        &h.store,
        "me too",
        EVERYTHING,
        &Actor::operator("bo"),
        Via::Console,
    )
    .await
    .unwrap_err();
    let FleetError::Refused(why) = err else {
        panic!("{err:?}")
    };
    assert!(
        why.contains("operator:ana") && why.contains("bad deploy"),
        "{why}"
    );
    assert_eq!(
        audited(&h, "fleet_pause").await.len(),
        1,
        "a refusal is not audited"
    );
    assert_eq!(h.pauses_in_force().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_through_the_api_keeps_readyz_ready_saying_who_paused_and_why() {
    const TOKEN: &str = "fleet-admin-token";
    let env = TestEnv::with_settings(|s| s.admin_token = Some(SecretString::from(TOKEN))).await;
    let api = AdminApi::start(&env.settings).await;

    let (status, body) = api
        .post(
            "/api/fleet/pause",
            Some(TOKEN),
            json!({"reason": "gateway maintenance"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["paused_by"], "admin-api");
    let (status, body) = api.get("/api/fleet", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["paused"], true);
    assert_eq!(body["pause"]["reason"], "gateway maintenance");

    let readyz = reqwest::get(api.url("/readyz")).await.unwrap();
    assert_eq!(
        readyz.status(),
        StatusCode::OK,
        "a pause never makes a pod unready"
    );
    let text = readyz.text().await.unwrap();
    assert!(
        text.starts_with("ready\n")
            && text.contains("charging and refunds paused by admin-api")
            && text.contains("gateway maintenance"),
        "{text}"
    );

    let (status, _) = api
        .post("/api/fleet/pause", Some(TOKEN), json!({"reason": "again"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, body) = api.post("/api/fleet/resume", Some(TOKEN), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let readyz = reqwest::get(api.url("/readyz"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(readyz, "ready\n");
    let (status, _) = api.post("/api/fleet/resume", Some(TOKEN), json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    api.stop().await;
}

/// The command line an operator types at night: pause, status, a refused second pause and
/// a refused cancel each in one line with its exit code, resume; all under their own name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_pauses_cancels_and_resumes_saying_in_one_line_what_it_did_or_why_not() {
    let env = TestEnv::new().await;
    let pending = crate::support::api::attempt(&env, "ord_cli_cancel").await;

    let (code, stdout, stderr) = env
        .cli(
            &["fleet", "pause", "--reason", "INC-70 gateway incident"],
            &[],
        )
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("charging and refunds paused by operator:") && stdout.contains("INC-70"),
        "{stdout}"
    );
    let state: serde_json::Value = env.cli_json(&["fleet", "status", "--json"]).await;
    assert_eq!(state["paused"], true);
    let (code, _, stderr) = env.cli(&["fleet", "pause", "--reason", "again"], &[]).await;
    assert_eq!(code, 1);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("refusing to pause"), "{stderr}");

    let id = pending.to_string();
    let (code, _, stderr) = env
        .cli(&["attempts", "cancel", &id, "--reason", " "], &[])
        .await;
    assert_eq!(code, 2, "no reason is a usage error: {stderr}");
    let (code, stdout, stderr) = env
        .cli(
            &["attempts", "cancel", &id, "--reason", "duplicate order"],
            &[],
        )
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("pending -> expired"), "{stdout}");
    let (code, _, stderr) = env
        .cli(&["attempts", "cancel", &id, "--reason", "again"], &[])
        .await;
    assert_eq!(code, 1);
    assert!(stderr.contains("it is expired"), "{stderr}");

    let (code, stdout, stderr) = env.cli(&["fleet", "resume"], &[]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("charging and refunds resumed by operator:"),
        "{stdout}"
    );
    assert_eq!(
        env.audit_count(|e| e.via == "cli"
            && e.actor.starts_with("operator:")
            && ["fleet_pause", "fleet_resume", "cancel"].contains(&e.action.as_str()))
            .await,
        3
    );
}

/// A harness whose refunds wait a millisecond wherever they wait.
async fn quick_harness() -> Harness {
    Harness::with(MockConfig::default(), |s| {
        s.refunds.recheck_interval = Duration::from_millis(1);
        s.reconciler.schedule = vec![Duration::from_millis(1); 3];
        s.reconciler.processing_schedule = vec![Duration::from_millis(1)];
    })
    .await
}

fn refund_roles(h: &Harness) -> RefundRoles {
    RefundRoles::new(
        h.store.clone(),
        GatewayClient::from_settings(&h.settings).expect("client"),
        GatewayHealth::from_settings(&h.settings.executor),
        &h.settings,
    )
}

/// A charged attempt (EUR, the contract's example) with a refund of 600 recorded for it,
/// `pending` until a sender claims it.
async fn charged_with_a_refund(h: &Harness) -> (PaymentAttemptId, RefundId) {
    let attempt = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    run_leaving_one_in(&h.executor(), AttemptStatus::Succeeded).await;
    let refund_id = RefundId::random();
    record(h, &refund(refund_id, attempt, Some(600)), "m-refund").await;
    (attempt, refund_id)
}

/// Records one pending attempt of 100.00 in `currency`, as intake would.
async fn seed_in(h: &Harness, currency: &str) -> PaymentAttemptId {
    let attempt = Uuid::new_v4();
    let body = command(
        attempt,
        json!({
            "order_id": format!("ord_{}", &attempt.simple().to_string()[..10]),
            "payment_method": pm::CARD_VISA,
            "amount_minor": 10000,
            "currency": currency,
        }),
    );
    let record = intake_record(&body, &format!("msg-{attempt}"), None);
    record_batch(&h.store, "test-intake", &[record])
        .await
        .expect("recorded");
    attempt.into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_of_charges_leaves_refunds_moving_and_holds_new_charges_until_resumed() {
    let h = quick_harness().await;
    let (_, refund_id) = charged_with_a_refund(&h).await;
    let pause = fleet::pause(
        &h.store,
        "acquirer incident",
        cover(PauseScope::Charges, None),
        &Actor::operator("ana"),
        Via::Cli,
    )
    .await
    .unwrap();
    let held = h.seed(pm::CARD_VISA).await.payment_attempt_id;

    assert_eq!(h.executor().run_once().await.unwrap().claimed(), 0);
    settle(&refund_roles(&h)).await;
    assert_eq!(
        h.refund(refund_id).await.status,
        "succeeded",
        "a pause of charges leaves refunds moving"
    );
    assert_eq!(h.gateway.refunds().len(), 1);
    assert_eq!(h.attempt(held).await.status, "pending");
    assert_eq!(h.attempt(held).await.tries, 0);

    let by_id = PauseSelector {
        id: Some(pause.id),
        ..ONLY_OPEN
    };
    fleet::resume(&h.store, "", by_id, &Actor::operator("ana"), Via::Cli)
        .await
        .unwrap();
    assert_eq!(h.executor().run_once().await.unwrap().claimed(), 1);
    assert_eq!(h.attempt(held).await.status, "succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_of_refunds_leaves_charges_moving_and_holds_refunds_until_resumed() {
    let h = quick_harness().await;
    let (_, refund_id) = charged_with_a_refund(&h).await;
    fleet::pause(
        &h.store,
        "refund API degraded",
        cover(PauseScope::Refunds, None),
        &Actor::operator("ana"),
        Via::Cli,
    )
    .await
    .unwrap();
    let moving = h.seed(pm::CARD_VISA).await.payment_attempt_id;

    let roles = refund_roles(&h);
    settle(&roles).await;
    let row = h.refund(refund_id).await;
    assert_eq!(row.status, "pending", "a pause of refunds holds them");
    assert!(h.gateway.refunds().is_empty(), "no refund sent");
    assert_eq!(h.executor().run_once().await.unwrap().claimed(), 1);
    assert_eq!(
        h.attempt(moving).await.status,
        "succeeded",
        "a pause of refunds leaves charges moving"
    );

    let by_scope = PauseSelector {
        scope: Some(PauseScope::Refunds),
        ..ONLY_OPEN
    };
    fleet::resume(&h.store, "", by_scope, &Actor::operator("ana"), Via::Cli)
        .await
        .unwrap();
    settle(&roles).await;
    assert_eq!(h.refund(refund_id).await.status, "succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_of_one_currency_holds_its_charges_and_leaves_the_others_moving() {
    let h = Harness::new().await;
    fleet::pause(
        &h.store,
        "ISK acquirer down",
        cover(PauseScope::Charges, Some("ISK")),
        &Actor::operator("ana"),
        Via::Cli,
    )
    .await
    .unwrap();
    let isk = seed_in(&h, "ISK").await;
    let eur = seed_in(&h, "EUR").await;

    let executor = h.executor();
    assert_eq!(executor.run_once().await.unwrap().claimed(), 1);
    assert_eq!(executor.run_once().await.unwrap().claimed(), 0);
    assert_eq!(h.attempt(eur).await.status, "succeeded");
    assert_eq!(h.attempt(isk).await.status, "pending");
    assert_eq!(h.attempt(isk).await.tries, 0);
    assert_eq!(h.gateway.ledger().len(), 1, "only the EUR charge left");

    let by_currency = PauseSelector {
        currency: Some(Currency::from_code("ISK").unwrap()),
        ..ONLY_OPEN
    };
    fleet::resume(
        &h.store,
        "acquirer back",
        by_currency,
        &Actor::operator("ana"),
        Via::Cli,
    )
    .await
    .unwrap();
    assert_eq!(executor.run_once().await.unwrap().claimed(), 1);
    assert_eq!(h.attempt(isk).await.status, "succeeded");
}

#[tokio::test]
async fn pauses_of_different_scopes_open_together_one_each_and_a_resume_names_which() {
    let h = Harness::new().await;
    let isk = fleet::pause(
        &h.store,
        "ISK acquirer down",
        cover(PauseScope::Charges, Some("ISK")),
        &Actor::operator("ana"),
        Via::Cli,
    )
    .await
    .unwrap();
    let refunds = fleet::pause(
        &h.store,
        "refund API degraded",
        cover(PauseScope::Refunds, None),
        &Actor::operator("bo"),
        Via::Api,
    )
    .await
    .unwrap();
    // The same scope and currency again is refused, naming the open one.
    let err = fleet::pause(
        &h.store,
        "me too",
        cover(PauseScope::Charges, Some("ISK")),
        &Actor::operator("cy"),
        Via::Console,
    )
    .await
    .unwrap_err();
    let FleetError::Refused(why) = err else {
        panic!("{err:?}")
    };
    assert!(
        why.contains("charging in ISK paused by operator:ana")
            && why.contains(&format!("(pause {})", isk.id)),
        "{why}"
    );
    let state = fleet::state(&h.store).await.unwrap();
    assert_eq!(
        state.pauses.iter().map(|p| p.id).collect::<Vec<_>>(),
        [isk.id, refunds.id]
    );
    assert_eq!(state.summary().lines().count(), 2, "{}", state.summary());

    // Several match: the resume asks for an id, and closes nothing.
    let err = fleet::resume(&h.store, "", ONLY_OPEN, &Actor::operator("ana"), Via::Cli)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FleetError::Refused(why) if why.contains("2 open pauses match") && why.contains("--id")),
        "{err}"
    );
    // None matches: it says what is open.
    let charges_in_eur = PauseSelector {
        scope: Some(PauseScope::Charges),
        currency: Some(Currency::from_code("EUR").unwrap()),
        id: None,
    };
    let err = fleet::resume(
        &h.store,
        "",
        charges_in_eur,
        &Actor::operator("ana"),
        Via::Cli,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, FleetError::Refused(why) if why.contains("no open pause is of scope charges in EUR") && why.contains(&format!("pause {}", refunds.id))),
        "{err}"
    );
    assert_eq!(
        h.pauses_in_force().await,
        2,
        "a refused resume closes nothing"
    );

    let by_id = PauseSelector {
        id: Some(refunds.id),
        ..ONLY_OPEN
    };
    let resumed = fleet::resume(
        &h.store,
        "API back",
        by_id,
        &Actor::operator("ana"),
        Via::Cli,
    )
    .await
    .unwrap();
    assert_eq!(resumed.pause.id, refunds.id);
    assert_eq!(
        fleet::state(&h.store).await.unwrap().pauses,
        vec![isk.clone()]
    );
    // One open now: a resume that names nothing closes it.
    fleet::resume(&h.store, "", ONLY_OPEN, &Actor::operator("ana"), Via::Cli)
        .await
        .unwrap();
    assert!(!fleet::state(&h.store).await.unwrap().paused);

    let details: Vec<(String, serde_json::Value)> = h
        .audit_entries()
        .await
        .into_iter()
        .filter(|e| e.action == "fleet_pause" || e.action == "fleet_resume")
        .map(|e| (e.action, e.detail))
        .collect();
    let audited: Vec<(&str, &serde_json::Value, &serde_json::Value)> = details
        .iter()
        .map(|(action, d)| (action.as_str(), &d["scope"], &d["currency"]))
        .collect();
    assert_eq!(
        audited,
        [
            ("fleet_pause", &json!("charges"), &json!("ISK")),
            ("fleet_pause", &json!("refunds"), &json!(null)),
            ("fleet_resume", &json!("refunds"), &json!(null)),
            ("fleet_resume", &json!("charges"), &json!("ISK")),
        ],
        "each pause and resume is audited with its scope and currency; refusals are not"
    );
}

/// The API and `/readyz` show every open pause with its scope; a currency is read as a
/// command's (ISO, upper case) and a wrong one is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_pauses_a_scope_in_a_currency_and_readyz_shows_each_open_pause() {
    const TOKEN: &str = "fleet-scope-token";
    let env = TestEnv::with_settings(|s| s.admin_token = Some(SecretString::from(TOKEN))).await;
    let api = AdminApi::start(&env.settings).await;

    for wrong in [
        json!({"reason": "r", "scope": "charges", "currency": "isk"}),
        json!({"reason": "r", "scope": "payouts"}),
    ] {
        let (status, body) = api
            .post("/api/fleet/pause", Some(TOKEN), wrong.clone())
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{wrong}: {body}");
    }
    assert_eq!(env.rows_in("fleet_pauses").await, 0);

    let (status, isk) = api
        .post(
            "/api/fleet/pause",
            Some(TOKEN),
            json!({"reason": "ISK acquirer down", "scope": "charges", "currency": "ISK"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{isk}");
    assert_eq!(
        (&isk["scope"], &isk["currency"]),
        (&json!("charges"), &json!("ISK"))
    );
    let (status, body) = api
        .post(
            "/api/fleet/pause",
            Some(TOKEN),
            json!({"reason": "refund API degraded", "scope": "refunds"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = api
        .post(
            "/api/fleet/pause",
            Some(TOKEN),
            json!({"reason": "again", "scope": "charges", "currency": "ISK"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");

    let (_, state) = api.get("/api/fleet", Some(TOKEN)).await;
    assert_eq!(state["paused"], true);
    let scopes: Vec<(&serde_json::Value, &serde_json::Value)> = state["pauses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (&p["scope"], &p["currency"]))
        .collect();
    assert_eq!(
        scopes,
        [
            (&json!("charges"), &json!("ISK")),
            (&json!("refunds"), &json!(null))
        ]
    );
    let readyz = reqwest::get(api.url("/readyz")).await.unwrap();
    assert_eq!(readyz.status(), StatusCode::OK);
    let text = readyz.text().await.unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[1].starts_with("charging in ISK paused by admin-api")
            && lines[2].starts_with("refunds paused by admin-api"),
        "{text}"
    );

    let (status, body) = api.post("/api/fleet/resume", Some(TOKEN), json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "two are open: {body}");
    let (status, body) = api
        .post("/api/fleet/resume", Some(TOKEN), json!({"id": isk["id"]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["pause"]["currency"], "ISK");
    let (_, state) = api.get("/api/fleet", Some(TOKEN)).await;
    assert_eq!(state["pauses"].as_array().unwrap().len(), 1);
    api.stop().await;
}

/// The command line: a pause of one scope in one currency, beside another; `status` lists
/// both with their ids; a resume that matches several exits 1 asking for `--id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_pauses_a_scope_in_a_currency_and_resumes_the_one_it_names() {
    let env = TestEnv::new().await;
    let (code, stdout, stderr) = env
        .cli(
            &[
                "fleet",
                "pause",
                "--reason",
                "ISK acquirer down",
                "--only",
                "charges",
                "--currency",
                "ISK",
            ],
            &[],
        )
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("charging in ISK paused by operator:"),
        "{stdout}"
    );
    let (code, _, stderr) = env
        .cli(
            &[
                "fleet",
                "pause",
                "--reason",
                "x",
                "--only",
                "charges",
                "--currency",
                "isk",
            ],
            &[],
        )
        .await;
    assert_eq!(
        code, 2,
        "a currency in lower case is a usage error: {stderr}"
    );
    let (code, _, stderr) = env
        .cli(
            &[
                "fleet",
                "pause",
                "--reason",
                "again",
                "--only",
                "charges",
                "--currency",
                "ISK",
            ],
            &[],
        )
        .await;
    assert_eq!(code, 1);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("refusing to pause: charging in ISK paused by"),
        "{stderr}"
    );
    let (code, _, stderr) = env
        .cli(
            &[
                "fleet",
                "pause",
                "--reason",
                "refund API",
                "--only",
                "refunds",
            ],
            &[],
        )
        .await;
    assert_eq!(code, 0, "{stderr}");

    let (code, stdout, _) = env.cli(&["fleet", "status"], &[]).await;
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    let state: serde_json::Value = env.cli_json(&["fleet", "status", "--json"]).await;
    let refunds_id = state["pauses"][1]["id"].as_i64().unwrap();
    assert_eq!(state["pauses"][1]["scope"], "refunds");

    let (code, _, stderr) = env.cli(&["fleet", "resume"], &[]).await;
    assert_eq!(code, 1);
    assert!(
        stderr.contains("2 open pauses match") && stderr.contains("--id"),
        "{stderr}"
    );
    let (code, stdout, stderr) = env
        .cli(&["fleet", "resume", "--id", &refunds_id.to_string()], &[])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("refunds resumed by operator:"),
        "{stdout}"
    );
    let (code, stdout, stderr) = env
        .cli(&["fleet", "resume", "--currency", "ISK"], &[])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("charging in ISK resumed by"), "{stdout}");
    assert_eq!(env.pauses_in_force().await, 0);
}
