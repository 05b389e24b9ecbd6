//! A restricted Stripe key (`rk_…`) that lacks one permission (decisions 245, 246): a `403`
//! stops the work that needs it and nothing else, while a key Stripe rejects (`401`)
//! still pauses every call; `setup --check --gateway` says which permissions are missing
//! and changes nothing. Against the mock gateway's Stripe dialect, whose key is made to
//! lack permissions with `set_missing_permissions`.

use std::time::Duration;

use crate::support::refund_roles::RefundRoles;
use mock_gateway::payment_methods as pm;
use onecharge::domain::outcome::{GatewayOutcome, LookupOutcome};
use onecharge::domain::{AttemptStatus, RefundId};
use onecharge::executor::Executor;
use onecharge::gateway::permission::{self, Grant, Permission};
use onecharge::gateway::{GatewayClient, GatewayHealth, GatewayKind};

use crate::refunds::{record, refund, settle};
use crate::support::harness::{run_leaving_one_in, Harness};
use crate::support::process::run_onecharge;
use crate::support::Records;

async fn stripe(adjust: impl FnOnce(&mut onecharge::config::Settings)) -> Harness {
    Harness::stripe(|s| {
        s.refunds.recheck_interval = Duration::from_millis(1);
        adjust(s);
    })
    .await
}

/// An executor and a refund worker sharing one health, as `serve` builds them.
fn roles(h: &Harness, client: GatewayClient) -> (Executor, RefundRoles, GatewayHealth) {
    let health = GatewayHealth::from_settings(&h.settings.executor);
    let executor = Executor::new(h.store.clone(), client.clone(), health.clone(), &h.settings);
    let worker = RefundRoles::new(h.store.clone(), client, health.clone(), &h.settings);
    (executor, worker, health)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_may_not_refund_stops_refunds_alone_and_charges_go_on() {
    let h = stripe(|s| s.executor.credentials_probe_interval = Duration::from_millis(200)).await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let (executor, worker, health) = roles(&h, client);
    let charged = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;
    h.gateway.set_missing_permissions(&["refunds:write"]);
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, charged, Some(400)), "rk").await;

    let pass = worker.pass().await.unwrap();

    assert_eq!(pass.sent, 1);
    let row = h.refund(refund_id).await;
    assert_eq!(
        row.status, "pending",
        "nothing was refunded: sent again later"
    );
    assert!(h.gateway.refunds().is_empty());
    // Charges go on: the next attempt is charged through the same health.
    let next = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;
    assert_eq!(h.attempt(next).await.status, "succeeded");
    assert_eq!(health.holding_calls(), None, "charges are not held");
    assert_eq!(
        health.pause_problem(),
        None,
        "readiness: the rest of the work goes on"
    );
    // Refunds are held until the probe interval passes: nothing is sent meanwhile.
    assert_eq!(worker.pass().await.unwrap().sent, 0);

    // The permission is granted: the next probe refunds.
    h.gateway.set_missing_permissions(&[]);
    tokio::time::sleep(Duration::from_millis(250)).await;
    h.set_refund(refund_id, "next_run_at = now()").await;
    assert_eq!(worker.pass().await.unwrap().sent, 1, "the probe");
    assert_eq!(h.refund(refund_id).await.status, "succeeded");
    assert_eq!(h.gateway.refunds().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_may_not_charge_stops_charges_alone_and_refunds_go_on() {
    let h = stripe(|_| {}).await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let (executor, worker, health) = roles(&h, client);
    let charged = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;
    h.gateway
        .set_missing_permissions(&["payment_intents:write"]);
    let held = h.seed(pm::CARD_VISA).await.payment_attempt_id;

    let report = executor.run_once().await.unwrap();

    assert_eq!(
        report.attempts[0].outcome,
        Some(GatewayOutcome::CredentialsFault { status: 403 })
    );
    let row = h.attempt(held).await;
    assert_eq!((row.status.as_str(), row.tries), ("pending", 0));
    assert_eq!(
        health.holding_calls(),
        Some("gateway key lacks the permission to charge")
    );
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, charged, Some(300)), "rk").await;
    settle(&worker).await;
    assert_eq!(h.refund(refund_id).await.status, "succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_may_not_read_payment_intents_keeps_readiness_and_charging() {
    let h = stripe(|_| {}).await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let (executor, _, health) = roles(&h, client.clone());
    let charged = h.seed(pm::CARD_VISA).await;
    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;
    let intent = h
        .attempt(charged.payment_attempt_id)
        .await
        .gateway_charge_id
        .expect("the PaymentIntent");
    h.gateway.set_missing_permissions(&["payment_intents:read"]);

    let key = onecharge::domain::IdempotencyKey::for_attempt(charged.payment_attempt_id);
    let lookup = client.lookup_attempt(&key, Some(&intent)).await;
    health.record_lookup(&lookup.outcome, h.now());

    assert_eq!(
        lookup.outcome,
        LookupOutcome::CredentialsFault { status: 403 }
    );
    assert_eq!(health.pause_problem(), None, "readiness stays green");
    h.seed(pm::CARD_VISA).await;
    run_leaving_one_in(&executor, AttemptStatus::Succeeded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_answered_401_on_a_refund_still_pauses_every_call() {
    let h = stripe(|_| {}).await;
    let good = GatewayClient::from_settings(&h.settings).unwrap();
    let charged = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    run_leaving_one_in(&h.executor_with(good), AttemptStatus::Succeeded).await;
    let revoked = h.client_of_kind_with_key(GatewayKind::Stripe, "rk_test_revoked");
    let (executor, worker, health) = roles(&h, revoked);
    // The key is unknown as well as short of a permission: Stripe says 401 first.
    h.gateway.set_missing_permissions(&["refunds:write"]);
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, charged, Some(400)), "revoked").await;

    worker.pass().await.unwrap();

    assert_eq!(h.refund(refund_id).await.status, "pending");
    assert_eq!(health.snapshot().credentials_rejected, Some(401));
    assert!(health.pause_problem().is_some(), "readiness says so");
    h.seed(pm::CARD_VISA).await;
    let report = executor.run_once().await.unwrap();
    assert!(
        report.attempts.is_empty(),
        "no charge is claimed: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_permission_check_names_what_the_key_lacks_and_changes_nothing() {
    let mut h = stripe(|_| {}).await;
    h.broker().await;
    h.gateway
        .set_missing_permissions(&["refunds:write", "disputes:read"]);
    let client = GatewayClient::from_settings(&h.settings).unwrap();

    let checks = permission::check(&client).await.expect("a Stripe client");

    let grants: Vec<(Permission, Grant)> = checks
        .into_iter()
        .map(|c| (c.permission, c.grant))
        .collect();
    assert_eq!(
        grants,
        vec![
            (Permission::PaymentIntentsWrite, Grant::Granted),
            (Permission::PaymentIntentsRead, Grant::Granted),
            (Permission::RefundsWrite, Grant::Missing),
            (Permission::RefundsRead, Grant::Granted),
            (Permission::DisputesRead, Grant::Missing),
        ]
    );
    assert!(h.gateway.ledger().is_empty(), "no PaymentIntent was made");
    assert!(h.gateway.refunds().is_empty(), "no refund was made");

    // The command line: exit 1, a line per permission, the missing ones named.
    onecharge::app::setup(&h.settings).await.unwrap();
    let url = h.settings.gateway_url.clone();
    let env = [
        ("ONECHARGE_GATEWAY_KIND", "stripe"),
        ("ONECHARGE_GATEWAY_URL", url.as_str()),
        (
            "ONECHARGE_GATEWAY_API_KEY",
            crate::support::harness::API_KEY,
        ),
    ];
    let (code, stdout, stderr) =
        run_onecharge(&h.settings, &["setup", "--check", "--gateway"], &env).await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("refunds:write: missing"), "{stdout}");
    assert!(stdout.contains("disputes:read: missing"), "{stdout}");
    assert!(
        stdout.contains("payment_intents:write: granted"),
        "{stdout}"
    );
    assert!(
        stderr.contains("refunds:write") && stderr.contains("disputes:read"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(crate::support::harness::API_KEY),
        "{stderr}"
    );

    h.gateway.set_missing_permissions(&[]);
    let (code, stdout, stderr) =
        run_onecharge(&h.settings, &["setup", "--check", "--gateway"], &env).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(h.gateway.ledger().is_empty() && h.gateway.refunds().is_empty());
}
