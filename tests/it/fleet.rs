//! Pausing charging across the fleet (issue 39, decision 145): a paused fleet claims and
//! charges nothing while commands are still recorded, and charges them once resumed; every
//! pause and resume is one audited row; `/readyz` stays ready and says so.

use mock_gateway::payment_methods as pm;
use onecharge::operator::fleet::{self, FleetError};
use onecharge::operator::Via;
use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::json;

use crate::support::api::AdminApi;
use crate::support::{Harness, Records, TestEnv};

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
    let pause = fleet::pause(&h.store, "gateway incident INC-7", "operator:ana", Via::Cli)
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

    let resumed = fleet::resume(&h.store, "INC-7 closed", "operator:bo", Via::Api)
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
    let err = fleet::resume(&h.store, "", "operator:ana", Via::Cli)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FleetError::Refused(why) if why.contains("not paused")),
        "{err}"
    );
    assert!(matches!(
        fleet::pause(&h.store, "  ", "operator:ana", Via::Cli).await,
        Err(FleetError::Invalid(_))
    ));

    fleet::pause(&h.store, "bad deploy", "operator:ana", Via::Cli)
        .await
        .unwrap();
    let err = fleet::pause(&h.store, "me too", "operator:bo", Via::Console)
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
            && text.contains("charging paused by admin-api")
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
        stdout.contains("charging paused by operator:") && stdout.contains("INC-70"),
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
    assert!(stdout.contains("charging resumed by operator:"), "{stdout}");
    assert_eq!(
        env.audit_count(|e| e.via == "cli"
            && e.actor.starts_with("operator:")
            && ["fleet_pause", "fleet_resume", "cancel"].contains(&e.action.as_str()))
            .await,
        3
    );
}
