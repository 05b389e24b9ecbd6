//! Refunds as commands (contract §2.5, §4.1): recorded once per `refund_id`, admitted
//! against what the charge has left, sent once under their own key, settled by the
//! gateway's word or a lookup, and announced once — against the mock gateway in both
//! dialects and through the refund intake's own consumer.

use std::time::Duration;

use crate::support::refund_roles::RefundRoles;
use async_nats::HeaderMap;
use mock_gateway::{payment_methods as pm, FaultConfig, FaultRule, MockConfig, RefundFaults};
use onecharge::broker::CommandKind;
use onecharge::domain::refund::{validate, RefundPayment};
use onecharge::domain::Actor;
use onecharge::domain::{AttemptStatus, CommandHeaders, PaymentAttemptId, RefundId};
use onecharge::gateway::{GatewayClient, GatewayHealth, GatewayKind};
use onecharge::intake::Intake;
use onecharge::store::refunds::{record_refund, RecordedRefund, RefundRecord};
use serde_json::json;
use uuid::Uuid;

use crate::support::env::TestEnv;
use crate::support::harness::{run_leaving_one_in, Harness};
use crate::support::Records;

/// Short waits everywhere a refund waits, so a test walks its whole life in seconds.
fn quick(settings: &mut onecharge::config::Settings) {
    settings.refunds.recheck_interval = Duration::from_millis(1);
    settings.reconciler.schedule = vec![Duration::from_millis(1); 3];
    settings.reconciler.processing_schedule = vec![Duration::from_millis(1)];
}

async fn harness(faults: RefundFaults) -> Harness {
    Harness::with(
        MockConfig {
            faults: FaultConfig {
                refunds: faults,
                ..FaultConfig::default()
            },
            ..MockConfig::default()
        },
        quick,
    )
    .await
}

fn worker(h: &Harness) -> RefundRoles {
    RefundRoles::new(
        h.store.clone(),
        client(h),
        GatewayHealth::from_settings(&h.settings.executor),
        &h.settings,
    )
}

fn client(h: &Harness) -> GatewayClient {
    GatewayClient::from_settings(&h.settings).expect("client")
}

/// Seeds one attempt with `payment_method` and runs the executor (speaking the test's
/// dialect) until it is final.
async fn charged(h: &Harness, payment_method: &str, ends: AttemptStatus) -> PaymentAttemptId {
    let id = h.seed(payment_method).await.payment_attempt_id;
    run_leaving_one_in(&h.executor_with(client(h)), ends).await;
    id
}

/// A refund command for `attempt`, validated as intake validates it.
pub(crate) fn refund(
    refund_id: RefundId,
    attempt: PaymentAttemptId,
    amount: Option<i64>,
) -> RefundPayment {
    let mut body = json!({
        "refund_id": refund_id,
        "payment_attempt_id": attempt,
        "reason": "item returned",
        "metadata": {"return_id": "ret_1"},
    });
    if let Some(amount) = amount {
        body["amount_minor"] = amount.into();
    }
    validate(
        &CommandHeaders {
            message_id: Some("m".into()),
            ..Default::default()
        },
        body.to_string().as_bytes(),
    )
    .expect("a valid refund")
    .command
}

pub(crate) async fn record(
    h: &Harness,
    command: &RefundPayment,
    message_id: &str,
) -> RecordedRefund {
    let body = format!("{command:?}");
    record_refund(
        &h.store,
        "test-refund-intake",
        &RefundRecord {
            message_id: onecharge::domain::MessageId::checked(message_id),
            stream_sequence: 1,
            body_sha256: onecharge::domain::command::body_sha256(body.as_bytes()),
            command: command.clone(),
            correlation_id: Some("corr-refund".into()),
            traceparent: None,
        },
    )
    .await
    .expect("recorded")
}

/// Passes of the worker until nothing moves (at most 50).
pub(crate) async fn settle(w: &RefundRoles) {
    for _ in 0..50 {
        let report = w.pass().await.expect("a refund pass");
        if report == Default::default() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_refund_moves_money_once_whatever_its_command_is_delivered_as_with_one_event() {
    let h = harness(RefundFaults::default()).await;
    let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let refund_id = RefundId::random();
    let command = refund(refund_id, attempt, Some(500));

    assert_eq!(record(&h, &command, "r-1").await, RecordedRefund::Accepted);
    assert_eq!(record(&h, &command, "r-1").await, RecordedRefund::Duplicate);
    assert_eq!(
        record(&h, &command, "r-2").await,
        RecordedRefund::BusinessDuplicate
    );
    let RecordedRefund::Conflict(reason) =
        record(&h, &refund(refund_id, attempt, Some(501)), "r-3").await
    else {
        panic!("the same refund_id for another amount is a conflict")
    };
    assert!(reason.contains("another charge or amount"), "{reason}");

    let w = worker(&h);
    settle(&w).await;
    settle(&w).await;

    let row = h.refund(refund_id).await;
    assert_eq!(row.status, "succeeded");
    assert_eq!(row.tries, 1);
    let at_gateway = h.gateway.refunds_for_refund_id(&refund_id.to_string());
    assert_eq!(at_gateway.len(), 1, "one refund movement per refund_id");
    assert_eq!(
        row.gateway_refund_id.as_deref(),
        Some(at_gateway[0].id.as_str())
    );
    assert_eq!(at_gateway[0].amount_minor, 500);
    assert_eq!(
        at_gateway[0].idempotency_key.as_deref(),
        Some(format!("onecharge-refund-{refund_id}").as_str())
    );
    assert_eq!(h.reserved(attempt).await, 500);
    assert_eq!(
        h.refund_path(refund_id).await,
        ["waiting", "pending", "in_flight", "succeeded"]
    );
    let outbox = h.refund_outbox(attempt).await;
    assert_eq!(outbox.len(), 1, "{outbox:?}");
    assert_eq!(outbox[0].subject, "payments.events.refund-succeeded.v1");
    assert_eq!(outbox[0].payload["status"], "succeeded");
    assert_eq!(outbox[0].payload["refund_id"], json!(refund_id));
    assert_eq!(outbox[0].headers["Correlation-Id"], "corr-refund");
    // The charge's own story is unchanged, and the refund call is on its timeline.
    assert_eq!(h.status(attempt).await, "succeeded");
    assert!(h
        .call_operations(attempt)
        .await
        .contains(&"refund".to_owned()));
}

#[tokio::test]
async fn refunds_racing_on_two_workers_never_refund_more_than_was_charged() {
    let h = harness(RefundFaults::default()).await;
    let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let charged_minor = h.attempt(attempt).await.amount_minor;
    let each = charged_minor / 2 + 1;
    let ids: Vec<RefundId> = (0..3).map(|_| RefundId::random()).collect();
    for (i, id) in ids.iter().enumerate() {
        record(&h, &refund(*id, attempt, Some(each)), &format!("race-{i}")).await;
    }

    let (a, b) = (worker(&h), worker(&h));
    tokio::join!(settle(&a), settle(&b));

    let rows = h.refunds_of(attempt).await;
    let succeeded: Vec<_> = rows.iter().filter(|r| r.status == "succeeded").collect();
    let refused: Vec<_> = rows.iter().filter(|r| r.status == "refused").collect();
    assert_eq!((succeeded.len(), refused.len()), (1, 2), "{rows:?}");
    let charge = &h.gateway.ledger()[0];
    assert_eq!(h.gateway.refunded(&charge.id), each);
    assert_eq!(h.reserved(attempt).await, each);
    for row in refused {
        let reason = row.failure_reason.as_deref().unwrap_or_default();
        assert!(reason.contains("would pass what is left"), "{reason}");
    }
    // The database itself refuses a reservation past the charge.
    let over = sqlx::query("UPDATE refund_totals SET reserved_minor = charged_minor + 1")
        .execute(h.store.pool())
        .await
        .expect_err("the CHECK refuses an overdraw");
    assert!(
        over.to_string()
            .contains("refund_totals_never_above_the_charge"),
        "{over}"
    );
}

#[tokio::test]
async fn a_refund_waits_for_its_charge_and_is_refused_with_its_reason_when_the_charge_declines() {
    let h = harness(RefundFaults::default()).await;
    let command = h.seed(pm::CARD_DECLINED).await;
    let attempt = command.payment_attempt_id;
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, attempt, None), "early").await;
    let w = worker(&h);

    w.pass().await.unwrap();
    assert_eq!(
        h.refund(refund_id).await.status,
        "waiting",
        "the charge is not final yet"
    );

    run_leaving_one_in(&h.executor(), AttemptStatus::Declined).await;
    settle(&w).await;

    let row = h.refund(refund_id).await;
    assert_eq!(row.status, "refused");
    assert!(
        row.failure_reason
            .as_deref()
            .unwrap_or_default()
            .contains("ended declined"),
        "{row:?}"
    );
    assert!(h.gateway.refunds().is_empty(), "nothing was sent");
    assert_eq!(h.reserved(attempt).await, 0);
    let outbox = h.refund_outbox(attempt).await;
    let mut subjects: Vec<&str> = outbox.iter().map(|e| e.subject.as_str()).collect();
    subjects.sort_unstable();
    assert_eq!(
        subjects,
        [
            "payments.dlq.refund-payment.v1",
            "payments.events.refund-failed.v1"
        ]
    );
    let event = outbox.iter().find(|e| e.status == "refund_failed").unwrap();
    assert_eq!(event.payload["status"], "refused");
    let dead = outbox
        .iter()
        .find(|e| e.status == "refund_dead_letter")
        .unwrap();
    assert_eq!(dead.headers["Dlq-Class"], "refused");
    assert_eq!(
        dead.headers["Nats-Msg-Id"],
        format!("dlq-refund-{refund_id}")
    );
    assert!(dead.headers["Dlq-Reason"]
        .as_str()
        .unwrap()
        .contains("ended declined"));
    assert_eq!(dead.payload["refund_id"], json!(refund_id));
}

#[tokio::test]
async fn a_refund_whose_answer_was_lost_is_looked_up_and_never_sent_twice() {
    let h = harness(RefundFaults {
        error_after: FaultRule::times(1),
        ..RefundFaults::default()
    })
    .await;
    let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, attempt, Some(300)), "lost").await;
    let w = worker(&h);

    settle(&w).await;

    let row = h.refund(refund_id).await;
    assert_eq!(row.status, "succeeded");
    assert_eq!(
        h.refund_path(refund_id).await,
        ["waiting", "pending", "in_flight", "unknown", "succeeded"],
        "a 500 after refunding is ambiguous: looked up, not sent again"
    );
    assert_eq!(row.tries, 1, "found by the lookup, not sent again");
    assert_eq!(
        h.gateway
            .refunds_for_refund_id(&refund_id.to_string())
            .len(),
        1
    );
    assert!(h
        .call_operations(attempt)
        .await
        .contains(&"refund_lookup".to_owned()));
}

#[tokio::test]
async fn a_refund_the_gateway_keeps_pending_is_followed_until_it_settles() {
    let h = harness(RefundFaults::default()).await;
    let attempt = charged(&h, pm::PENDING_REFUND, AttemptStatus::Succeeded).await;
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, attempt, None), "slow").await;
    let w = worker(&h);

    w.pass().await.unwrap();
    w.pass().await.unwrap();
    assert_eq!(h.refund(refund_id).await.status, "processing");
    assert!(
        h.refund_outbox(attempt).await.is_empty(),
        "nothing final yet"
    );

    h.gateway.settle_refunds();
    settle(&w).await;
    assert_eq!(h.refund(refund_id).await.status, "succeeded");
    assert_eq!(h.refund_outbox(attempt).await.len(), 1);
}

#[tokio::test]
async fn a_refund_the_gateway_fails_gives_its_amount_back_for_the_next() {
    let h = harness(RefundFaults {
        failed: FaultRule::times(1),
        ..RefundFaults::default()
    })
    .await;
    let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let (first, second) = (RefundId::random(), RefundId::random());
    record(&h, &refund(first, attempt, None), "whole-1").await;
    let w = worker(&h);
    settle(&w).await;
    let row = h.refund(first).await;
    assert_eq!(row.status, "failed");
    assert!(row.failure_reason.unwrap().contains("declined"));
    assert_eq!(
        h.reserved(attempt).await,
        0,
        "a failed refund holds nothing"
    );

    record(&h, &refund(second, attempt, None), "whole-2").await;
    settle(&w).await;
    assert_eq!(h.refund(second).await.status, "succeeded");
    let charged_minor = h.attempt(attempt).await.amount_minor;
    assert_eq!(h.reserved(attempt).await, charged_minor);
    let statuses: Vec<String> = h
        .refund_outbox(attempt)
        .await
        .iter()
        .map(|e| e.payload["status"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(statuses, ["failed", "succeeded"]);
}

#[tokio::test]
async fn a_stripe_refund_carries_its_refund_id_and_is_found_by_listing_the_intents_refunds() {
    let h = Harness::with(
        MockConfig {
            dialect: mock_gateway::Dialect::Stripe,
            faults: FaultConfig {
                refunds: RefundFaults {
                    drop_after: FaultRule::times(1),
                    ..RefundFaults::default()
                },
                ..FaultConfig::default()
            },
            ..MockConfig::default()
        },
        |s| {
            s.gateway_kind = GatewayKind::Stripe;
            quick(s);
        },
    )
    .await;
    let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    // Someone refunds part of the charge from the Dashboard first: not onecharge's refund.
    let intent = h.attempt(attempt).await.gateway_charge_id.unwrap();
    h.mock_control().refund_outside(&intent, Some(100)).await;
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, attempt, Some(400)), "stripe").await;
    let w = worker(&h);

    settle(&w).await;

    let row = h.refund(refund_id).await;
    assert_eq!(row.status, "succeeded", "{row:?}");
    assert_eq!(
        h.refund_path(refund_id).await,
        ["waiting", "pending", "in_flight", "unknown", "succeeded"],
        "the connection dropped after the refund: looked up, not sent again"
    );
    let ours = h.gateway.refunds_for_refund_id(&refund_id.to_string());
    assert_eq!(ours.len(), 1);
    assert_eq!(row.gateway_refund_id.as_deref(), Some(ours[0].id.as_str()));
    assert_eq!(ours[0].amount_minor, 400);
    assert_eq!(
        h.gateway.refunds().len(),
        2,
        "the Dashboard's and onecharge's"
    );
}

#[tokio::test]
async fn refund_commands_come_in_through_their_own_consumer_and_bad_ones_are_dead_lettered() {
    let env = TestEnv::new().await;
    let intake = Intake::for_kind(
        env.store.clone(),
        env.broker.clone(),
        &env.settings,
        CommandKind::Refund,
    )
    .await
    .expect("the refund intake binds its consumer");
    let subject = env.broker.names.command_subject(CommandKind::Refund);
    let refund_id = Uuid::new_v4();
    let body = json!({
        "refund_id": refund_id,
        "payment_attempt_id": Uuid::new_v4(),
        "reason": "duplicate order",
    });
    for (message_id, body) in [
        ("refund-ok", body.to_string()),
        ("refund-ok", body.to_string()),
        (
            "refund-bad",
            json!({"refund_id": "nope", "reason": "x"}).to_string(),
        ),
    ] {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", message_id);
        env.publish_to(subject.clone(), headers, body.as_bytes())
            .await;
    }
    let mut outcomes = Vec::new();
    while outcomes.len() < 2 {
        let report = intake
            .process_batch(Duration::from_secs(2))
            .await
            .expect("a batch");
        outcomes.extend(report.outcomes.iter().map(|o| o.label()));
        if report.outcomes.is_empty() {
            break;
        }
    }
    outcomes.sort_unstable();
    assert_eq!(
        outcomes,
        ["permanent", "processed"],
        "JetStream drops the same Nats-Msg-Id itself"
    );
    assert_eq!(env.refund(refund_id).await.status, "waiting");
    let dead = crate::support::nats::stream_messages(
        &env.broker.jetstream,
        &env.broker.names.dlq_stream(),
    )
    .await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0].subject.as_str(),
        env.broker.names.dlq_subject_for(CommandKind::Refund)
    );
    let reason = dead[0]
        .headers
        .get("Dlq-Reason")
        .unwrap()
        .as_str()
        .to_owned();
    assert!(
        reason.contains("not a valid RefundPayment JSON"),
        "{reason}"
    );
}

async fn sweep(h: &Harness) -> onecharge::reconciler::sweep::SweepReport {
    let now = h.db_now().await;
    h.reconciler_with(client(h))
        .sweep(onecharge::domain::listing::ListWindow {
            from: now - Duration::from_secs(3600),
            to: now + Duration::from_secs(3600),
        })
        .await
        .expect("a sweep")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_expects_onecharges_own_refunds_and_finds_one_made_outside_it() {
    let h = Harness::with(
        MockConfig {
            dialect: mock_gateway::Dialect::Stripe,
            ..MockConfig::default()
        },
        |s| {
            s.gateway_kind = GatewayKind::Stripe;
            quick(s);
        },
    )
    .await;
    let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, attempt, Some(700)), "ours").await;
    settle(&worker(&h)).await;
    assert_eq!(h.refund(refund_id).await.status, "succeeded");

    let quiet = sweep(&h).await;
    assert!(
        quiet.new_findings.is_empty(),
        "onecharge's own refund is expected: {quiet:?}"
    );

    let intent = h.attempt(attempt).await.gateway_charge_id.unwrap();
    h.mock_control().refund_outside(&intent, Some(200)).await;
    let found = sweep(&h).await;
    assert_eq!(found.new_findings.len(), 1, "{found:?}");
    let finding = h.last_finding().await;
    assert_eq!(finding.class, "recorded_not_charged");
    assert_eq!(finding.evidence, "refunded:900");
    assert!(
        finding.detail.contains("outside onecharge"),
        "{}",
        finding.detail
    );
}

/// A harness whose mock and connector speak Stripe (`stripe`) or §3, with short waits and
/// then `adjust`.
async fn in_dialect(
    stripe: bool,
    adjust: impl FnOnce(&mut onecharge::config::Settings),
) -> Harness {
    Harness::with(
        MockConfig {
            dialect: if stripe {
                mock_gateway::Dialect::Stripe
            } else {
                mock_gateway::Dialect::Onecharge
            },
            ..MockConfig::default()
        },
        |s| {
            if stripe {
                s.gateway_kind = GatewayKind::Stripe;
            }
            quick(s);
            adjust(s);
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_refund_held_pending_is_onecharges_own_and_no_finding_in_either_dialect() {
    for stripe in [false, true] {
        let h = in_dialect(stripe, |_| {}).await;
        let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
        let refund_id = RefundId::random();
        record(&h, &refund(refund_id, attempt, Some(600)), "held").await;
        settle(&worker(&h)).await;
        assert_eq!(h.refund(refund_id).await.status, "succeeded");
        // What a `409` (an earlier send under its key still running at the gateway) leaves,
        // with the fleet paused so that nothing sends it again: the refund is back to
        // `pending`, sent, while the gateway has refunded it.
        h.set_refund(
            refund_id,
            "status = 'pending', settled_at = NULL, next_run_at = now()",
        )
        .await;
        h.pause_fleet("operator:alice", "held").await;

        let report = sweep(&h).await;

        assert!(
            report.new_findings.is_empty(),
            "{}: onecharge's own refund, held pending, is no finding: {:?}",
            if stripe { "stripe" } else { "§3" },
            report.new_findings
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_charge_and_refund_carries_the_deployments_name_in_both_dialects() {
    for stripe in [false, true] {
        let h = in_dialect(stripe, |s| s.deployment = Some("eu-1".into())).await;
        let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
        let refund_id = RefundId::random();
        record(&h, &refund(refund_id, attempt, Some(300)), "named").await;
        settle(&worker(&h)).await;

        let charges = h.gateway.ledger();
        let refunds = h.gateway.refunds();
        let named = |metadata: &std::collections::BTreeMap<String, String>| {
            metadata.get("onecharge_deployment").cloned()
        };
        assert_eq!(charges.len(), 1);
        assert_eq!(
            named(&charges[0].metadata).as_deref(),
            Some("eu-1"),
            "stripe {stripe}"
        );
        assert_eq!(refunds.len(), 1);
        assert_eq!(
            named(&refunds[0].metadata).as_deref(),
            Some("eu-1"),
            "stripe {stripe}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_finds_a_refund_onecharge_recorded_that_the_gateway_does_not_show() {
    let h = harness(RefundFaults::default()).await;
    let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, attempt, Some(400)), "ours").await;
    settle(&worker(&h)).await;
    assert!(
        sweep(&h).await.new_findings.is_empty(),
        "the §3 listing shows it refunded"
    );

    // The gateway loses it (a refund reversed on its side, say).
    let gateway_refund = h.refund(refund_id).await.gateway_refund_id.unwrap();
    h.gateway
        .move_refund(&gateway_refund, mock_gateway::RefundStatus::Failed)
        .expect("the mock moves it");
    let found = sweep(&h).await;
    assert_eq!(found.new_findings.len(), 1, "{found:?}");
    let finding = h.last_finding().await;
    assert_eq!(finding.class, "charged_not_recorded");
    assert_eq!(finding.evidence, "refunds_unlisted:400");
}

#[tokio::test]
async fn a_refund_whose_executor_died_goes_to_unknown_and_its_late_answer_is_refused() {
    let h = harness(RefundFaults::default()).await;
    let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, attempt, Some(250)), "dies").await;
    let w = worker(&h);
    onecharge::store::refunds::admit_due(
        &h.store,
        &Actor::Executor("test".into()),
        10,
        Duration::from_secs(3600),
        Duration::from_millis(1),
    )
    .await
    .unwrap();
    // An executor claims it and dies before writing anything.
    let held = onecharge::store::refunds::claim_pending(
        &h.store,
        &Actor::Executor("doomed".into()),
        Duration::from_secs(60),
        10,
    )
    .await
    .unwrap()
    .remove(0);
    h.set_refund(refund_id, "lease_expires_at = now() - interval '1 second'")
        .await;

    let report = w.pass().await.unwrap();
    assert_eq!(report.leases_expired, 1);
    let row = h.refund(refund_id).await;
    assert_eq!(
        row.status, "unknown",
        "it may have been sent: only a lookup can tell"
    );
    assert!(h.gateway.refunds().is_empty());

    // The dead executor's answer arrives late: its fence is gone, nothing is written.
    let late = onecharge::store::refunds::settle(
        &h.store,
        &held,
        &onecharge::domain::refund_call::RefundMove::Succeeded {
            gateway_refund_id: "re_late".into(),
        },
        "refund_answer",
        &Actor::Executor("doomed".into()),
        None,
    )
    .await
    .unwrap();
    assert!(!late, "the fence refuses a late answer");
    assert_eq!(h.refund(refund_id).await.status, "unknown");
    assert!(h.refund_outbox(attempt).await.is_empty());
}

/// The breaker opened on the charges' failures, and then the charges stopped: nothing but
/// refunds is left to send. A refund is held while the breaker is open, and once its
/// cooldown has passed one refund is the probe that closes it again; the rest follow. A
/// breaker only a charge could close would hold refunds until the next charge arrived
/// (seen in the Stripe demo: three refunds pending for its whole 90 s).
#[tokio::test]
async fn an_open_breaker_holds_refunds_until_a_refund_probes_the_gateway_and_closes_it() {
    let h = Harness::with(MockConfig::default(), |s| {
        quick(s);
        s.executor.breaker_failure_threshold = 1;
        s.executor.breaker_cooldown = Duration::from_millis(300);
    })
    .await;
    let first = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let second = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let health = GatewayHealth::from_settings(&h.settings.executor);
    let w = RefundRoles::new(h.store.clone(), client(&h), health.clone(), &h.settings);
    let refunds = [RefundId::random(), RefundId::random()];
    for (refund_id, attempt) in refunds.iter().zip([first, second]) {
        let command = refund(*refund_id, attempt, Some(500));
        assert_eq!(
            record(&h, &command, &format!("r-{refund_id}")).await,
            RecordedRefund::Accepted
        );
    }

    health.record(
        &onecharge::domain::outcome::GatewayOutcome::NotSent {
            reason: "connection refused".into(),
        },
        time::OffsetDateTime::now_utc(),
    );
    assert_eq!(health.holding_calls(), Some("circuit breaker open"));
    let held = w.pass().await.unwrap();
    assert_eq!(held.sent, 0, "nothing is sent while the breaker is open");
    assert!(h
        .gateway
        .refunds_for_refund_id(&refunds[0].to_string())
        .is_empty());

    tokio::time::sleep(Duration::from_millis(400)).await;
    let probe = w.pass().await.unwrap();
    assert_eq!(probe.sent, 1, "one refund is the probe");
    assert_eq!(
        health.holding_calls(),
        None,
        "its answer closed the breaker"
    );
    settle(&w).await;
    for refund_id in refunds {
        assert_eq!(h.refund(refund_id).await.status, "succeeded");
        assert_eq!(
            h.gateway
                .refunds_for_refund_id(&refund_id.to_string())
                .len(),
            1
        );
    }
}

/// A refund whose answer was lost is looked up while the breaker is open: a lookup sends no
/// money and is kept out of the breaker, as the reconciler's lookups of charges are
/// (decision 19). Held behind it, a refund left `unknown` when the last sends failed waited
/// for a send to close the breaker, and none came: the Stripe webhook soak ended with three
/// refunds `unknown` for its whole two minutes.
#[tokio::test]
async fn a_refund_left_unknown_is_looked_up_while_the_breaker_is_open() {
    let h = Harness::with(
        MockConfig {
            faults: FaultConfig {
                refunds: RefundFaults {
                    error_after: FaultRule::times(1),
                    ..RefundFaults::default()
                },
                ..FaultConfig::default()
            },
            ..MockConfig::default()
        },
        |s| {
            quick(s);
            s.executor.breaker_failure_threshold = 1;
            // No probe comes during the test: nothing else would close the breaker.
            s.executor.breaker_cooldown = Duration::from_secs(3600);
        },
    )
    .await;
    let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let health = GatewayHealth::from_settings(&h.settings.executor);
    let w = RefundRoles::new(h.store.clone(), client(&h), health.clone(), &h.settings);
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, attempt, Some(300)), "lost").await;

    settle(&w).await;

    assert_eq!(
        health.holding_calls(),
        Some("circuit breaker open"),
        "the lost answer opened the breaker, and no lookup closes it"
    );
    let row = h.refund(refund_id).await;
    assert_eq!(row.status, "succeeded", "{row:?}");
    assert_eq!(
        h.refund_path(refund_id).await,
        ["waiting", "pending", "in_flight", "unknown", "succeeded"]
    );
    assert_eq!(row.tries, 1, "found by a lookup, not sent again");
}

/// The tokens in the fleet's one rate bucket.
async fn bucket_tokens(h: &Harness) -> f64 {
    h.bucket_tokens().await
}

/// Fills the fleet's one rate bucket with `tokens`, as of now.
async fn set_bucket_tokens(h: &Harness, tokens: f64) {
    h.fill_bucket(tokens).await;
}

/// A refund is a request under `gateway_max_rate` as a charge is: with the fleet's bucket
/// empty, a refund pass claims and sends nothing; given a token, it sends one;
/// and a pass with nothing due takes no token from the bucket.
#[tokio::test]
async fn refunds_wait_for_the_fleets_rate_limit_and_an_idle_pass_takes_no_token() {
    let h = Harness::with(MockConfig::default(), |s| {
        quick(s);
        // One token every 100 s.
        s.gateway_max_rate = 0.01;
        s.gateway_rate_burst = 2;
    })
    .await;
    let first = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, first, Some(300)), "limited").await;
    let w = worker(&h);
    // Other instances' charges took what was left.
    set_bucket_tokens(&h, 0.0).await;
    let held = w.pass().await.unwrap();
    assert_eq!(held.sent, 0, "the bucket is empty: {held:?}");
    assert_eq!(h.refund(refund_id).await.status, "pending");
    assert!(h.gateway.refunds().is_empty());

    set_bucket_tokens(&h, 1.0).await;
    settle(&w).await;
    assert_eq!(h.refund(refund_id).await.status, "succeeded");
    assert_eq!(h.gateway.refunds().len(), 1);

    set_bucket_tokens(&h, 1.0).await;
    w.pass().await.unwrap();
    assert!(
        bucket_tokens(&h).await >= 1.0,
        "a pass with nothing due left the token"
    );
}

/// A Stripe harness with short waits, whose gateway calls may take 5 s and whose database
/// lets a statement wait a minute for a lock (the tests below hold a read at the gateway or
/// a lock on purpose).
async fn stripe_harness() -> Harness {
    Harness::with(
        MockConfig {
            dialect: mock_gateway::Dialect::Stripe,
            ..MockConfig::default()
        },
        |s| {
            s.gateway_kind = GatewayKind::Stripe;
            s.gateway_request_timeout = Duration::from_secs(5);
            s.database.lock_timeout = Duration::from_secs(60);
            s.database.statement_timeout =
                s.database.statement_timeout.max(Duration::from_secs(60));
            quick(s);
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_onecharge_sends_while_a_webhook_check_reads_the_intent_is_its_own_and_no_finding()
{
    let h = stripe_harness().await;
    let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let intent = h.attempt(attempt).await.gateway_charge_id.unwrap();
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, attempt, None), "whole").await;
    // A webhook about the intent (another refund's update, a dispute…) asks for a check.
    onecharge::store::findings::webhooks::record_event(
        &h.store,
        &onecharge::store::findings::webhooks::Event {
            id: "evt_race",
            kind: "charge.refund.updated",
            payment_intent_id: Some(&intent),
        },
        |held| {
            onecharge::store::findings::webhooks::Effect::Check(held.unwrap().payment_attempt_id)
        },
    )
    .await
    .unwrap();

    // The check's read of the intent takes two seconds at the gateway…
    h.gateway.set_faults(FaultConfig {
        latency: mock_gateway::Latency::fixed(2_000),
        ..FaultConfig::default()
    });
    let reconciler = h.reconciler_with(client(&h));
    let check = tokio::spawn(async move { reconciler.run_checks().await });
    let read_path = format!("/v1/payment_intents/{intent}");
    crate::support::eventually(
        "the check's read reaches the gateway",
        Duration::from_secs(30),
        || async {
            h.gateway
                .requests()
                .iter()
                .any(|r| r.method == "GET" && r.path.starts_with(&read_path))
        },
    )
    .await;
    // …and meanwhile onecharge refunds the whole charge, at once.
    h.gateway.set_faults(FaultConfig::default());
    settle(&worker(&h)).await;
    assert_eq!(h.refund(refund_id).await.status, "succeeded");

    let report = check.await.unwrap().expect("the check");
    assert_eq!(report.checked, 1, "{report:?}");
    assert_eq!(
        h.findings_about(attempt).await,
        vec![],
        "the gateway's refund is onecharge's own, sent before the check's answer came"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_that_succeeds_after_the_sweep_read_its_charge_is_no_finding() {
    let h = stripe_harness().await;
    let attempt = charged(&h, pm::CARD_VISA, AttemptStatus::Succeeded).await;
    let refund_id = RefundId::random();
    record(&h, &refund(refund_id, attempt, None), "whole").await;
    // The sweep reads its pages, then stops before its comparison (its ANALYZE waits for
    // this lock) while the refund is made and recorded: the page it read shows nothing
    // refunded, and the ledger, by then, a refund that succeeded.
    let blocker = h.hold_sweep_records().await;
    let sweeping = {
        let reconciler = h.reconciler_with(client(&h));
        let now = h.db_now().await;
        tokio::spawn(async move {
            reconciler
                .sweep(onecharge::domain::listing::ListWindow {
                    from: now - Duration::from_secs(3600),
                    to: now + Duration::from_secs(3600),
                })
                .await
        })
    };
    crate::support::eventually(
        "the sweep has read its pages and waits to compare",
        Duration::from_secs(30),
        || h.sweep_waits_to_compare(),
    )
    .await;
    settle(&worker(&h)).await;
    assert_eq!(h.refund(refund_id).await.status, "succeeded");
    blocker.commit().await.unwrap();

    let report = sweeping.await.unwrap().expect("the sweep");
    assert!(
        report.new_findings.is_empty(),
        "the refund succeeded after the page was read: {report:?}"
    );
    assert!(
        sweep(&h).await.new_findings.is_empty(),
        "and the next sweep sees it"
    );
}

/// Issue 51: a refund in review is not a dead end. A person resolves it after the gateway is
/// read: a choice the gateway contradicts is refused with why and changes nothing; `failed`
/// gives the amount back (a new refund_id can refund it), publishes the refund's event once
/// and is audited with the person's name.
#[tokio::test]
async fn a_refund_in_review_is_resolved_by_a_person_after_the_gateway_is_read() {
    use onecharge::operator::refunds::{
        resolve, RefundResolveAs, RefundResolveError, RefundResolveRequest,
    };
    use onecharge::operator::Via;
    let h = harness(RefundFaults::default()).await;
    let attempt = charged(&h, pm::PENDING_REFUND, AttemptStatus::Succeeded).await;
    let charged_minor = h.attempt(attempt).await.amount_minor;
    let stuck = RefundId::random();
    record(&h, &refund(stuck, attempt, None), "stuck").await;
    worker(&h).sender.pass().await.unwrap();
    assert_eq!(h.refund(stuck).await.status, "processing");
    // Sent, the gateway still processing it; its lookups then failed until a person was asked.
    h.set_refund(
        stuck,
        "status = 'needs_review', lease_expires_at = NULL,
         review_reason = 'the gateway did not answer 7 lookups in a row'",
    )
    .await;
    h.gateway.settle_refunds();
    let gateway = client(&h);
    let ask = |as_, reason: &str| RefundResolveRequest {
        as_,
        reason: reason.into(),
    };

    // The gateway holds its refund, succeeded: "failed" is refused, nothing changes.
    let Err(RefundResolveError::Refused(why)) = resolve(
        &h.store,
        Some(&gateway),
        stuck,
        &ask(RefundResolveAs::Failed, "customer says no money came"),
        &Actor::operator("ada"),
        Via::Cli,
    )
    .await
    else {
        panic!("the gateway refunded it: failed is refused")
    };
    assert!(why.contains("cannot be called failed"), "{why}");
    assert_eq!(h.refund(stuck).await.status, "needs_review");
    assert!(h.refund_outbox(attempt).await.is_empty());

    let resolved = resolve(
        &h.store,
        Some(&gateway),
        stuck,
        &ask(RefundResolveAs::Succeeded, "seen refunded at the gateway"),
        &Actor::operator("ada"),
        Via::Cli,
    )
    .await
    .unwrap();
    assert_eq!(resolved.status, "succeeded");
    let row = h.refund(stuck).await;
    assert_eq!(row.status, "succeeded");
    assert_eq!(
        row.gateway_refund_id.as_deref(),
        Some(
            h.gateway.refunds_for_refund_id(&stuck.to_string())[0]
                .id
                .as_str()
        )
    );
    assert_eq!(h.refund_outbox(attempt).await.len(), 1, "one event");
    let audit = h.audit_entries().await;
    assert_eq!(audit.len(), 1);
    assert_eq!(
        (audit[0].action.as_str(), audit[0].actor.as_str()),
        ("resolve_refund", "operator:ada")
    );
    assert_eq!(
        h.refund_path(stuck).await.last().map(String::as_str),
        Some("succeeded")
    );

    // Later the gateway fails it (a closed card): the amount must not stay trapped. A person
    // resolves it failed once the gateway shows it so; its amount is back for a new refund.
    let at_gateway = row.gateway_refund_id.unwrap();
    h.gateway
        .move_refund(&at_gateway, mock_gateway::RefundStatus::Failed)
        .expect("the mock moves it");
    let resolved = resolve(
        &h.store,
        Some(&gateway),
        stuck,
        &ask(RefundResolveAs::Failed, "the bank returned it"),
        &Actor::operator("ada"),
        Via::Api,
    )
    .await
    .unwrap();
    assert_eq!(
        (resolved.from.as_str(), resolved.status.as_str()),
        ("succeeded", "failed")
    );
    assert_eq!(
        h.reserved(attempt).await,
        0,
        "the amount is back on the charge"
    );
    let statuses: Vec<String> = h
        .refund_outbox(attempt)
        .await
        .iter()
        .map(|e| e.payload["status"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        statuses,
        ["succeeded", "failed"],
        "each state announced once"
    );

    let again = RefundId::random();
    record(&h, &refund(again, attempt, None), "again").await;
    settle(&worker(&h)).await;
    h.gateway.settle_refunds();
    settle(&worker(&h)).await;
    assert_eq!(h.refund(again).await.status, "succeeded");
    assert_eq!(h.reserved(attempt).await, charged_minor);

    // Nothing else is resolved by a person: a succeeded refund the gateway shows succeeded.
    let Err(RefundResolveError::Refused(why)) = resolve(
        &h.store,
        Some(&gateway),
        again,
        &ask(RefundResolveAs::Failed, "why not"),
        &Actor::operator("ada"),
        Via::Cli,
    )
    .await
    else {
        panic!("refused")
    };
    assert!(why.contains("cannot be called failed"), "{why}");
}
