//! The reconciliation sweep (docs/contract.md §3.2) against real PostgreSQL and the mock
//! gateway in both dialects: each finding class planted at the gateway is reported exactly
//! once across repeated sweeps, and money found for `unknown`/`needs_review` attempts
//! settles them through the reconciler's own decision.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::{charge_request, Harness, Records};
use mock_gateway::{payment_methods as pm, Dialect, MockConfig};
use onecharge::domain::listing::ListWindow;
use onecharge::domain::Actor;
use onecharge::domain::{AttemptStatus, PaymentAttemptId};
use onecharge::gateway::{ChargeBody, ChargeRequest, GatewayClient, GatewayKind, Prepared};
use onecharge::reconciler::sweep::SweepReport;
use onecharge::reconciler::Reconciler;

/// The window every test sweeps: the last hour and the next.
async fn window(h: &Harness) -> ListWindow {
    let now = h.db_now().await;
    ListWindow {
        from: now - Duration::from_secs(3600),
        to: now + Duration::from_secs(3600),
    }
}

/// Open findings per class, and each finding's (class, attempt or reference, seen count).
async fn findings(h: &Harness) -> (BTreeMap<String, i64>, Vec<(String, String, i32)>) {
    let mut open = h.open_findings().await;
    open.sort_by(|a, b| (&a.class, a.id).cmp(&(&b.class, b.id)));
    let rows: Vec<_> = open
        .into_iter()
        .map(|f| (f.class, f.payment_attempt_id, f.reference, f.seen_count))
        .collect();
    let mut per_class = BTreeMap::new();
    for row in &rows {
        *per_class.entry(row.0.clone()).or_insert(0) += 1;
    }
    let rows = rows
        .into_iter()
        .map(|(class, id, reference, seen)| {
            (
                class,
                id.map(|id| id.to_string())
                    .or(reference)
                    .unwrap_or_default(),
                seen,
            )
        })
        .collect();
    (per_class, rows)
}

/// Seeds an attempt and runs the executor once on it; returns its id.
async fn executed(h: &Harness, client: &GatewayClient, method: &str) -> PaymentAttemptId {
    let command = h.seed(method).await;
    h.executor_with(client.clone()).run_once().await.unwrap();
    command.payment_attempt_id
}

/// A charge made by someone else under onecharge's metadata naming `reference`, with its
/// own key: what a replay after the key window, or a hand in the Dashboard, leaves.
async fn charge_outside(
    client: &GatewayClient,
    reference: &str,
    amount_minor: i64,
    key: &str,
) -> String {
    let request = ChargeRequest::new(
        // Another integration's key: one onecharge never sends for any of its attempts.
        onecharge::domain::IdempotencyKey::for_attempt(
            onecharge::domain::PaymentAttemptId::random(),
        )
        .derived(key),
        &ChargeBody {
            money: onecharge::domain::Money::of(amount_minor, "EUR").unwrap(),
            customer_id: "cus_42".into(),
            payment_method: "pm_card_visa".into(),
            reference: reference.parse().expect("an attempt id as the reference"),
            description: None,
        },
    )
    .for_order("ord_outside");
    let request = match client.prepare(&request).await {
        None => request,
        Some(prepared) => match prepared.outcome {
            Prepared::Object { id } => request.with_gateway_object(Some(id)),
            refused => panic!("{refused:?}"),
        },
    };
    match client.charge(&request).await.outcome {
        onecharge::domain::outcome::GatewayOutcome::Succeeded { charge_id, .. } => {
            charge_id.to_string()
        }
        other => panic!("{other:?}"),
    }
}

/// A harness whose mock speaks Stripe and whose settings choose the stripe connector.
async fn stripe_harness() -> Harness {
    Harness::with(
        MockConfig {
            dialect: Dialect::Stripe,
            ..MockConfig::default()
        },
        |s| s.gateway_kind = GatewayKind::Stripe,
    )
    .await
}

/// Two sweeps of the same window: the first reports, the second only sees again.
async fn sweep_twice(reconciler: &Reconciler, window: ListWindow) -> (SweepReport, SweepReport) {
    let first = reconciler.sweep(window).await.unwrap();
    let second = reconciler.sweep(window).await.unwrap();
    (first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_planted_discrepancy_is_one_finding_across_sweeps_and_found_money_settles_unknown_and_review_attempts(
) {
    let h = Harness::new().await;
    let client = h.client_with_key(crate::support::API_KEY);
    // Agrees with the gateway: no finding.
    let fine = executed(&h, &client, pm::CARD_VISA).await;
    // A second charge under one attempt's metadata.
    let twice = executed(&h, &client, pm::CARD_VISA).await;
    charge_outside(
        &client,
        &twice.to_string(),
        1999,
        "replayed-after-the-key-window",
    )
    .await;
    // A charge whose amount was changed at the gateway.
    let changed = executed(&h, &client, pm::CARD_VISA).await;
    let changed_charge = h.attempt(changed).await.gateway_charge_id.unwrap();
    h.mock_control()
        .change_charge_amount(&changed_charge, 2999)
        .await;
    // A charge made outside onecharge for an attempt id onecharge never saw.
    let stranger = uuid::Uuid::new_v4().to_string();
    charge_outside(&client, &stranger, 500, "someone-else").await;
    // A succeeded attempt whose charge the gateway does not have.
    let missing = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    h.set_attempt(
        missing,
        "status = 'succeeded', gateway_charge_id = 'ch_not_at_the_gateway', tries = 1, \
         first_dispatched_at = now(), dispatched_at = now()",
    )
    .await;
    // An expired attempt the gateway charged anyway.
    let expired = h.seed_expired(1).await.remove(0).command;
    h.charge_directly(&charge_request(&expired)).await;
    // Money taken for attempts the reconciler owns: unknown, and one a person was given.
    let unknown = executed(&h, &client, pm::FAULT_ERROR_AFTER).await;
    let review = executed(&h, &client, pm::FAULT_ERROR_AFTER).await;
    h.set_attempt(
        review,
        "status = 'needs_review', review_reason = 'looked at by nobody yet'",
    )
    .await;
    assert_eq!(h.attempt(unknown).await.status, "unknown");

    let (first, second) = sweep_twice(&h.reconciler(), window(&h).await).await;

    let mut settled = first.settled.clone();
    settled.sort_by_key(|(id, _)| *id);
    let mut expected = vec![
        (unknown, AttemptStatus::Succeeded),
        (review, AttemptStatus::Succeeded),
    ];
    expected.sort_by_key(|(id, _)| *id);
    assert_eq!(settled, expected, "{first:?}");
    assert_eq!(h.attempt(unknown).await.status, "succeeded");
    assert_eq!(h.attempt(review).await.status, "succeeded");
    assert_eq!(
        h.causes(review).await.last().map(String::as_str),
        Some("lookup_found_charge")
    );
    let evidence = h.call_operations(unknown).await;
    assert_eq!(
        evidence.last().map(String::as_str),
        Some("list"),
        "{evidence:?}"
    );
    assert!(second.new_findings.is_empty(), "{second:?}");
    assert!(second.settled.is_empty());
    assert_eq!(
        second.findings_seen_again as usize,
        first.new_findings.len()
    );

    let (per_class, rows) = findings(&h).await;
    assert_eq!(
        per_class,
        BTreeMap::from([
            ("charged_not_recorded".to_owned(), 1),
            ("charged_twice".to_owned(), 1),
            ("mismatch".to_owned(), 1),
            ("recorded_not_charged".to_owned(), 1),
            ("unknown_reference".to_owned(), 1),
        ]),
        "{rows:?}"
    );
    let about = |class: &str| rows.iter().find(|r| r.0 == class).unwrap().clone();
    assert_eq!(about("charged_twice").1, twice.to_string());
    assert_eq!(about("mismatch").1, changed.to_string());
    assert_eq!(about("unknown_reference").1, stranger);
    assert_eq!(about("recorded_not_charged").1, missing.to_string());
    assert_eq!(
        about("charged_not_recorded").1,
        expired.payment_attempt_id.to_string()
    );
    assert!(
        rows.iter().all(|r| r.2 == 2),
        "seen by both sweeps: {rows:?}"
    );
    assert!(rows.iter().all(|r| r.1 != fine.to_string()));
    // A sweep never changes a final attempt by itself.
    assert_eq!(
        h.attempt(expired.payment_attempt_id).await.status,
        "expired"
    );
    assert_eq!(h.attempt(missing).await.status, "succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_refunds_disputes_second_intents_and_changed_amounts_are_each_one_finding() {
    let h = stripe_harness().await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let refunded = executed(&h, &client, pm::CARD_VISA).await;
    let disputed = executed(&h, &client, pm::CARD_VISA).await;
    let changed = executed(&h, &client, pm::CARD_VISA).await;
    let twice = executed(&h, &client, pm::CARD_VISA).await;
    let unknown = executed(&h, &client, pm::FAULT_ERROR_AFTER).await;
    assert_eq!(h.attempt(unknown).await.status, "unknown");
    let mock = h.mock_control();
    let pi = h.attempt(refunded).await.gateway_charge_id.unwrap();
    mock.refund_outside(&pi, None).await;
    let pi = h.attempt(disputed).await.gateway_charge_id.unwrap();
    mock.open_dispute(&pi).await;
    let pi = h.attempt(changed).await.gateway_charge_id.unwrap();
    mock.change_intent_amount(&pi, 2999).await;
    charge_outside(&client, &twice.to_string(), 1999, "second-intent").await;
    let stranger = uuid::Uuid::new_v4().to_string();
    charge_outside(&client, &stranger, 700, "outside-intent").await;

    let (first, second) = sweep_twice(&h.reconciler_with(client.clone()), window(&h).await).await;

    assert_eq!(first.settled, vec![(unknown, AttemptStatus::Succeeded)]);
    assert!(second.new_findings.is_empty(), "{second:?}");
    let (per_class, rows) = findings(&h).await;
    assert_eq!(
        per_class,
        BTreeMap::from([
            ("charged_twice".to_owned(), 1),
            ("disputed".to_owned(), 1),
            ("mismatch".to_owned(), 1),
            ("recorded_not_charged".to_owned(), 1),
            ("unknown_reference".to_owned(), 1),
        ]),
        "{rows:?}"
    );
    let about = |class: &str| rows.iter().find(|r| r.0 == class).unwrap().1.clone();
    assert_eq!(about("recorded_not_charged"), refunded.to_string());
    assert_eq!(about("disputed"), disputed.to_string());
    assert!(rows.iter().all(|r| r.2 == 2), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_pages_through_more_charges_than_one_page_and_reports_nothing_when_all_agree() {
    let h = Harness::with(MockConfig::default(), |_| {}).await;
    let client = h.client_with_key(crate::support::API_KEY);
    let commands = h.seed_many(&[pm::CARD_VISA; 130]).await;
    let executor = h.executor_with(client);
    while executor.run_once().await.unwrap().claimed() > 0 {}
    assert_eq!(h.gateway.ledger().len(), commands.len());

    let report = h.reconciler().sweep(window(&h).await).await.unwrap();

    assert_eq!(report.pages, 2, "{report:?}");
    assert_eq!(
        (
            report.records_seen,
            report.records_kept,
            report.records_skipped
        ),
        (130, 130, 0)
    );
    assert!(report.new_findings.is_empty(), "{:?}", report.new_findings);
    let (per_class, _) = findings(&h).await;
    assert!(per_class.is_empty());
    assert_eq!(
        h.sweep_records().await,
        0,
        "a finished sweep leaves none of its records"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolving_a_finding_records_who_and_why_and_audits_it() {
    let h = Harness::new().await;
    let client = h.client_with_key(crate::support::API_KEY);
    charge_outside(&client, &uuid::Uuid::new_v4().to_string(), 500, "someone").await;
    h.reconciler().sweep(window(&h).await).await.unwrap();
    let id = h.last_finding().await.id;

    let resolved = onecharge::operator::findings::resolve(
        &h.store,
        id,
        &Actor::operator("alice"),
        onecharge::store::audit::Via::Cli,
        "refunded at the gateway",
    )
    .await
    .unwrap();
    let again = onecharge::operator::findings::resolve(
        &h.store,
        id,
        &Actor::operator("bob"),
        onecharge::store::audit::Via::Cli,
        "twice",
    )
    .await
    .unwrap();

    let onecharge::store::findings::FindingResolved::Done(finding) = resolved else {
        panic!("{resolved:?}")
    };
    assert_eq!(finding.state, "resolved");
    assert_eq!(finding.resolved_by.as_deref(), Some("operator:alice"));
    assert!(matches!(
        again,
        onecharge::store::findings::FindingResolved::AlreadyResolved(_)
    ));
    let audit = h.audit_entries().await;
    let audited = audit.iter().filter(|e| {
        e.action == "resolve_finding" && e.reason.as_deref() == Some("refunded at the gateway")
    });
    assert_eq!(audited.count(), 1);
    // Seen again by the next sweep, it stays resolved.
    h.reconciler().sweep(window(&h).await).await.unwrap();
    let finding = h.finding(id).await;
    assert_eq!(
        (finding.state.as_str(), finding.seen_count),
        ("resolved", 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_sweeps_on_its_interval_and_the_admin_api_lists_and_resolves_what_it_found() {
    let mut h = Harness::with(MockConfig::default(), |s| {
        s.reconciler.sweep_interval = Duration::from_secs(1);
        s.reconciler.sweep_window = Duration::from_secs(3600);
    })
    .await;
    h.broker().await;
    let client = h.client_with_key(crate::support::API_KEY);
    let stranger = uuid::Uuid::new_v4().to_string();
    charge_outside(&client, &stranger, 500, "someone-else").await;
    let served = crate::support::Served::start(
        &h.settings,
        &[
            onecharge::app::Role::Reconciler,
            onecharge::app::Role::Admin,
        ],
    )
    .await;
    let http = reqwest::Client::new();
    let open = || async {
        http.get(served.url("/api/findings?state=open"))
            .send()
            .await
            .unwrap()
            .json::<serde_json::Value>()
            .await
            .unwrap()
    };
    crate::support::eventually(
        "the scheduled sweep finds the charge",
        Duration::from_secs(20),
        || async { open().await.as_array().is_some_and(|a| !a.is_empty()) },
    )
    .await;
    let found = open().await;
    assert_eq!(found[0]["class"], "unknown_reference");
    assert_eq!(found[0]["reference"], stranger.as_str());
    let id = found[0]["id"].as_i64().unwrap();

    let resolved = http
        .post(served.url(&format!("/api/findings/{id}/resolve")))
        .json(&serde_json::json!({"reason": "refunded in the Dashboard"}))
        .send()
        .await
        .unwrap();
    let again = http
        .post(served.url(&format!("/api/findings/{id}/resolve")))
        .json(&serde_json::json!({"reason": "twice"}))
        .send()
        .await
        .unwrap();

    assert_eq!(resolved.status(), 200);
    assert_eq!(again.status(), 409);
    let closed =
        crate::support::api::json_answer(http.get(served.url("/api/findings?state=resolved")))
            .await;
    assert_eq!(closed[0]["resolved_by"], "admin-api");
    assert_eq!(closed[0]["resolution"], "refunded in the Dashboard");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_sweeps_lists_shows_and_resolves_findings() {
    let h = Harness::new().await;
    let client = h.client_with_key(crate::support::API_KEY);
    let stranger = uuid::Uuid::new_v4().to_string();
    charge_outside(&client, &stranger, 500, "someone-else").await;
    let env = [
        ("ONECHARGE_GATEWAY_URL", h.settings.gateway_url.as_str()),
        ("ONECHARGE_GATEWAY_API_KEY", crate::support::API_KEY),
    ];
    let run = |args: &[&str]| {
        let settings = h.settings.clone();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            crate::support::process::run_onecharge(&settings, &args, &env).await
        }
    };

    let (code, out, err) = run(&["reconcile", "sweep", "--since", "1h", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        report["new_findings"][0]["class"], "unknown_reference",
        "{out}"
    );
    let (code, out, _) = run(&["findings", "list", "--open", "--json"]).await;
    assert_eq!(code, 0);
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    let id = listed[0]["id"].as_i64().unwrap().to_string();
    let id = id.as_str();
    let (code, out, _) = run(&["findings", "show", id]).await;
    assert_eq!(code, 0);
    assert!(out.contains(&stranger), "{out}");
    let (code, _, err) = run(&["findings", "resolve", id, "--reason", "refunded"]).await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&["findings", "resolve", id, "--reason", "again"]).await;
    assert_eq!(code, 2, "already resolved is a usage error: {err}");
    let (code, out, _) = run(&["findings", "list", "--open", "--json"]).await;
    assert_eq!(code, 0);
    assert_eq!(out.trim(), "[]");
    let (code, _, err) = run(&[
        "reconcile",
        "sweep",
        "--from",
        "2026-12-02T00:00:00Z",
        "--to",
        "2026-12-01T00:00:00Z",
    ])
    .await;
    assert_eq!(code, 2, "{err}");
}

/// PaymentIntents another integration of the same Stripe account created and never
/// confirmed (abandoned checkouts, orphans of a 5xx on create): `count` of them, newer than
/// anything onecharge made, none naming an attempt.
async fn someone_elses_unconfirmed_intents(h: &Harness, count: usize) {
    h.gateway.advance_clock(Duration::from_secs(60));
    let http = reqwest::Client::new();
    for n in 0..count {
        let answer = http
            .post(format!("{}/v1/payment_intents", h.gateway.base_url()))
            .bearer_auth(crate::support::API_KEY)
            .form(&[
                ("amount", "1500"),
                ("currency", "eur"),
                ("description", &format!("abandoned checkout {n}")),
            ])
            .send()
            .await
            .unwrap();
        assert!(
            answer.status().is_success(),
            "{}",
            answer.text().await.unwrap()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_holding_only_someone_elses_unconfirmed_intents_do_not_end_the_sweep() {
    let h = stripe_harness().await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let refunded = executed(&h, &client, pm::CARD_VISA).await;
    let changed = executed(&h, &client, pm::CARD_VISA).await;
    let fine = executed(&h, &client, pm::CARD_VISA).await;
    let mock = h.mock_control();
    let pi = h.attempt(refunded).await.gateway_charge_id.unwrap();
    mock.refund_outside(&pi, None).await;
    let pi = h.attempt(changed).await.gateway_charge_id.unwrap();
    mock.change_intent_amount(&pi, 2999).await;
    let stranger = uuid::Uuid::new_v4().to_string();
    charge_outside(&client, &stranger, 700, "outside-intent").await;
    // Newest first, Stripe lists these before any of the above: the first two pages hold
    // nothing onecharge reads.
    someone_elses_unconfirmed_intents(&h, 230).await;

    let report = h
        .reconciler_with(client)
        .sweep(window(&h).await)
        .await
        .unwrap();

    assert_eq!(report.pages, 3, "{report:?}");
    let (per_class, rows) = findings(&h).await;
    assert_eq!(
        per_class,
        BTreeMap::from([
            ("mismatch".to_owned(), 1),
            ("recorded_not_charged".to_owned(), 1),
            ("unknown_reference".to_owned(), 1),
        ]),
        "{rows:?}"
    );
    assert!(rows.iter().all(|r| r.1 != fine.to_string()), "{rows:?}");
}

/// The findings about `id`, oldest first, as (state, detail).
async fn findings_about(h: &Harness, id: PaymentAttemptId) -> Vec<(String, String)> {
    let findings = h.findings_about(id).await;
    findings.into_iter().map(|f| (f.state, f.detail)).collect()
}

/// Finding events queued for publishing about `id`.
async fn finding_events(h: &Harness, id: PaymentAttemptId) -> Vec<serde_json::Value> {
    let events = h.events(id).await;
    events
        .into_iter()
        .filter(|(status, ..)| status == "finding")
        .map(|(_, payload, _)| payload)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispute_after_a_resolved_refund_opens_a_new_finding_with_its_event_and_the_refund_as_history(
) {
    let h = stripe_harness().await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let id = executed(&h, &client, pm::CARD_VISA).await;
    let pi = h.attempt(id).await.gateway_charge_id.unwrap();
    let reconciler = h.reconciler_with(client);

    h.mock_control().refund_outside(&pi, Some(500)).await;
    let refund = reconciler.sweep(window(&h).await).await.unwrap();
    assert_eq!(refund.new_findings.len(), 1, "{refund:?}");
    let refund_id = h.last_finding().await.id;
    onecharge::operator::findings::resolve(
        &h.store,
        refund_id,
        &Actor::operator("alice"),
        onecharge::store::audit::Via::Cli,
        "partial refund agreed with the customer",
    )
    .await
    .unwrap();
    // Weeks later the customer's bank disputes the rest.
    h.mock_control().open_dispute(&pi).await;
    let dispute = reconciler.sweep(window(&h).await).await.unwrap();

    assert_eq!(dispute.new_findings.len(), 1, "{dispute:?}");
    let states: Vec<String> = findings_about(&h, id)
        .await
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(states, vec!["resolved", "open"]);
    let events = finding_events(&h, id).await;
    assert_eq!(events.len(), 2, "one event per finding: {events:?}");
    let last = &events[1];
    assert_eq!(last["class"], "disputed");
    assert_eq!(last["evidence"], "dispute:open;refunded:500");
    assert_eq!(last["earlier"][0]["finding_id"], refund_id);
    assert_eq!(last["earlier"][0]["state"], "resolved");
    assert_eq!(
        last["earlier"][0]["resolution"],
        "partial refund agreed with the customer"
    );
    onecharge::documents::schemas::named("reconciliation-finding.v1.json");

    // Seen again, nothing new.
    let again = reconciler.sweep(window(&h).await).await.unwrap();
    assert!(again.new_findings.is_empty(), "{again:?}");
    assert_eq!(finding_events(&h, id).await.len(), 2);
}

/// The findings about `id`, oldest first, as (class, evidence, state, detail).
async fn findings_in_full(
    h: &Harness,
    id: PaymentAttemptId,
) -> Vec<(String, String, String, String)> {
    h.findings_about(id)
        .await
        .into_iter()
        .map(|f| (f.class, f.evidence, f.state, f.detail))
        .collect()
}

/// Resolves the newest finding as alice would from the command line, saying `why`; its id.
async fn resolve_the_last_finding(h: &Harness, why: &str) -> i64 {
    let id = h.last_finding().await.id;
    onecharge::operator::findings::resolve(
        &h.store,
        id,
        &Actor::operator("alice"),
        onecharge::store::audit::Via::Cli,
        why,
    )
    .await
    .unwrap();
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispute_opened_then_lost_is_two_findings_of_one_history_and_each_publishes_its_event() {
    let h = stripe_harness().await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let id = executed(&h, &client, pm::CARD_VISA).await;
    let pi = h.attempt(id).await.gateway_charge_id.unwrap();
    let reconciler = h.reconciler_with(client);

    h.mock_control().open_dispute(&pi).await;
    let opened = reconciler.sweep(window(&h).await).await.unwrap();
    assert_eq!(opened.new_findings.len(), 1, "{opened:?}");
    let open_id = resolve_the_last_finding(&h, "evidence sent to the bank").await;
    h.mock_control().set_dispute(&pi, "under_review").await;
    let reviewed = reconciler.sweep(window(&h).await).await.unwrap();
    assert!(reviewed.new_findings.is_empty(), "still open: {reviewed:?}");
    h.mock_control().set_dispute(&pi, "lost").await;
    let lost = reconciler.sweep(window(&h).await).await.unwrap();

    assert_eq!(lost.new_findings.len(), 1, "{lost:?}");
    let found = findings_in_full(&h, id).await;
    let said: Vec<(&str, &str, &str)> = found
        .iter()
        .map(|f| (f.0.as_str(), f.1.as_str(), f.2.as_str()))
        .collect();
    assert_eq!(
        said,
        [
            ("disputed", "dispute:open", "resolved"),
            ("disputed", "dispute:lost", "open"),
        ]
    );
    assert!(
        found[1].3.contains("went back to the customer"),
        "{found:?}"
    );
    let events = finding_events(&h, id).await;
    assert_eq!(events.len(), 2, "one event per finding: {events:?}");
    assert_eq!(events[0]["class"], "disputed");
    assert_eq!(events[0]["evidence"], "dispute:open");
    assert_eq!(events[1]["evidence"], "dispute:lost");
    assert_eq!(events[1]["earlier"][0]["finding_id"], open_id);
    assert_eq!(events[1]["earlier"][0]["state"], "resolved");
    assert_eq!(
        h.attempt(id).await.status,
        "succeeded",
        "a final attempt stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inquiry_that_escalates_to_a_chargeback_opens_a_new_finding_after_the_inquiry_was_resolved(
) {
    let h = stripe_harness().await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let id = executed(&h, &client, pm::CARD_VISA).await;
    let pi = h.attempt(id).await.gateway_charge_id.unwrap();
    let reconciler = h.reconciler_with(client);

    h.mock_control()
        .set_dispute(&pi, "warning_needs_response")
        .await;
    let inquiry = reconciler.sweep(window(&h).await).await.unwrap();
    assert_eq!(inquiry.new_findings.len(), 1, "{inquiry:?}");
    let inquiry_id = resolve_the_last_finding(&h, "inquiry answered").await;
    // The bank escalates it: a chargeback, the funds withdrawn.
    h.mock_control().set_dispute(&pi, "needs_response").await;
    let chargeback = reconciler.sweep(window(&h).await).await.unwrap();

    assert_eq!(chargeback.new_findings.len(), 1, "{chargeback:?}");
    let found = findings_in_full(&h, id).await;
    let said: Vec<(&str, &str, &str)> = found
        .iter()
        .map(|f| (f.0.as_str(), f.1.as_str(), f.2.as_str()))
        .collect();
    assert_eq!(
        said,
        [
            ("disputed", "dispute:inquiry", "resolved"),
            ("disputed", "dispute:open", "open"),
        ]
    );
    let events = finding_events(&h, id).await;
    assert_eq!(events.len(), 2, "one event per finding: {events:?}");
    assert_eq!(events[1]["earlier"][0]["finding_id"], inquiry_id);

    // §3: the record says `inquiry` itself, and the escalation is new evidence there too.
    let h = Harness::new().await;
    let client = h.client_with_key(crate::support::API_KEY);
    let id = executed(&h, &client, pm::CARD_VISA).await;
    let charge = h.attempt(id).await.gateway_charge_id.unwrap();
    let reconciler = h.reconciler();
    for status in ["inquiry", "open"] {
        h.mock_control().dispute_charge(&charge, status).await;
        let report = reconciler.sweep(window(&h).await).await.unwrap();
        assert_eq!(report.new_findings.len(), 1, "{status}: {report:?}");
    }
    let evidence: Vec<String> = findings_in_full(&h, id)
        .await
        .into_iter()
        .map(|f| f.1)
        .collect();
    assert_eq!(evidence, ["dispute:inquiry", "dispute:open"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_won_dispute_is_a_finding_saying_the_money_was_reinstated_in_both_dialects() {
    // Stripe: the dispute's status is read from GET /v1/disputes.
    let h = stripe_harness().await;
    let client = GatewayClient::from_settings(&h.settings).unwrap();
    let id = executed(&h, &client, pm::CARD_VISA).await;
    let pi = h.attempt(id).await.gateway_charge_id.unwrap();
    h.mock_control().set_dispute(&pi, "won").await;
    let report = h
        .reconciler_with(client)
        .sweep(window(&h).await)
        .await
        .unwrap();
    assert_eq!(report.new_findings.len(), 1, "{report:?}");
    let found = findings_in_full(&h, id).await;
    assert_eq!(
        (found[0].0.as_str(), found[0].1.as_str()),
        ("disputed", "dispute:won")
    );
    assert!(
        found[0].3.contains("reinstated and nothing is owed"),
        "{found:?}"
    );
    let disputes_read = h
        .gateway
        .requests()
        .iter()
        .filter(|r| r.path.starts_with("/v1/disputes"))
        .count();
    assert_eq!(disputes_read, 1, "one read, for the one disputed record");

    // §3: the record says where its dispute stands.
    let h = Harness::new().await;
    let client = h.client_with_key(crate::support::API_KEY);
    let id = executed(&h, &client, pm::CARD_VISA).await;
    let charge = h.attempt(id).await.gateway_charge_id.unwrap();
    h.mock_control().dispute_charge(&charge, "won").await;
    h.reconciler().sweep(window(&h).await).await.unwrap();
    let found = findings_in_full(&h, id).await;
    assert_eq!(
        (found[0].0.as_str(), found[0].1.as_str()),
        ("disputed", "dispute:won")
    );
}

/// A harness speaking `dialect` as the deployment named `name`, charging through `account`
/// (another harness's mock) when given: siblings sharing one gateway account.
async fn deployment(
    dialect: mock_gateway::Dialect,
    name: &str,
    account: Option<&Harness>,
) -> Harness {
    let mut h = Harness::with(
        MockConfig {
            dialect,
            ..MockConfig::default()
        },
        |s| {
            if dialect == mock_gateway::Dialect::Stripe {
                s.gateway_kind = GatewayKind::Stripe;
            }
            s.deployment = Some(name.to_owned());
        },
    )
    .await;
    if let Some(account) = account {
        h.settings.gateway_url = account.gateway.base_url();
    }
    h
}

/// Charges `n` attempts of `h`'s through its own settings' client, until none is due.
async fn charge_all(h: &Harness, n: usize) {
    let executor = h.executor_with(GatewayClient::from_settings(&h.settings).unwrap());
    h.seed_many(&vec![pm::CARD_VISA; n]).await;
    while executor.run_once().await.unwrap().claimed() > 0 {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sibling_deployments_charges_in_a_shared_account_are_skipped_never_unknown_references() {
    for dialect in [
        mock_gateway::Dialect::Onecharge,
        mock_gateway::Dialect::Stripe,
    ] {
        let eu = deployment(dialect, "eu", None).await;
        let us = deployment(dialect, "us", Some(&eu)).await;
        charge_all(&eu, 6).await;
        charge_all(&us, 6).await;
        assert_eq!(eu.gateway.ledger().len(), 12, "{dialect:?}: one account");

        for h in [&eu, &us] {
            let report = h
                .reconciler_with(GatewayClient::from_settings(&h.settings).unwrap())
                .sweep(window(h).await)
                .await
                .unwrap();
            assert!(
                report.new_findings.is_empty(),
                "{dialect:?} {:?}: a sibling's charges are not unknown references: {:?}",
                h.settings.deployment,
                report.new_findings
            );
            assert_eq!(
                (
                    report.records_seen,
                    report.records_kept,
                    report.records_skipped
                ),
                (12, 6, 6),
                "{dialect:?} {:?}: the sibling's six counted and skipped",
                h.settings.deployment
            );
        }
    }
}

/// A §3 harness holding `charges` succeeded attempts, every one agreeing with the gateway,
/// whose mock then answers every request after `latency_ms`: a sweep of them takes a page
/// per `latency_ms`.
async fn slow_listing(charges: usize, latency_ms: u64) -> Harness {
    let h = Harness::with(MockConfig::default(), |_| {}).await;
    let executor = h.executor_with(h.client_with_key(crate::support::API_KEY));
    h.seed_many(&vec![pm::CARD_VISA; charges]).await;
    while executor.run_once().await.unwrap().claimed() > 0 {}
    assert_eq!(h.gateway.ledger().len(), charges);
    h.gateway.set_faults(mock_gateway::FaultConfig {
        latency: mock_gateway::Latency::fixed(latency_ms),
        ..Default::default()
    });
    h
}

/// A sweep of `window` in the background, once its row exists.
async fn sweeping(
    h: &Harness,
    reconciler: &Reconciler,
    window: ListWindow,
) -> tokio::task::JoinHandle<anyhow::Result<SweepReport>> {
    let sweep = tokio::spawn({
        let reconciler = reconciler.clone();
        async move { reconciler.sweep(window).await }
    });
    crate::support::eventually("the sweep started", Duration::from_secs(10), || async {
        h.sweeps().await.iter().any(|sweep| !sweep.finished)
    })
    .await;
    sweep
}

/// Waits until a running sweep has stored its first page.
async fn first_page_stored(h: &Harness) {
    crate::support::eventually(
        "a sweep stores its first page",
        Duration::from_secs(15),
        || async { h.sweep_records().await > 0 },
    )
    .await;
}

/// The sweeps' rows: (id, finished, error).
async fn sweep_rows(h: &Harness) -> Vec<(i64, bool, Option<String>)> {
    let sweeps = h.sweeps().await;
    sweeps
        .into_iter()
        .map(|s| (s.id, s.finished, s.error))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_sweep_keeps_its_records_when_another_sweep_starts_a_day_later() {
    let h = slow_listing(130, 1500).await;
    let reconciler = h.reconciler();
    let whole = window(&h).await;
    let long = sweeping(&h, &reconciler, whole).await;
    first_page_stored(&h).await;
    // It has been running for two days (a huge window, a slow gateway).
    h.set_sweeps("started_at = now() - interval '2 days'").await;
    let elsewhere = ListWindow {
        from: whole.from - Duration::from_secs(30 * 86_400),
        to: whole.from - Duration::from_secs(29 * 86_400),
    };
    reconciler.sweep(elsewhere).await.unwrap();

    let report = long.await.unwrap().unwrap();
    assert!(
        report.new_findings.is_empty(),
        "a page deleted under it makes its charges look missing: {:?}",
        report.new_findings.first()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_stopped_at_shutdown_ends_its_row_saying_so() {
    let mut h = slow_listing(130, 1500).await;
    h.settings.reconciler.sweep_interval = Duration::from_secs(1);
    h.settings.reconciler.sweep_window = Duration::from_secs(3600);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(h.reconciler().run_sweeps(shutdown.clone()));
    first_page_stored(&h).await;

    shutdown.cancel();
    task.await.unwrap().unwrap();

    let rows = sweep_rows(&h).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].1, "finished: {rows:?}");
    assert!(
        rows[0].2.as_deref().is_some_and(|e| e.contains("shutdown")),
        "{rows:?}"
    );
    assert_eq!(h.sweep_records().await, 0, "its records are gone with it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_whose_instance_died_is_finished_by_the_next_one() {
    let h = Harness::new().await;
    // An instance died twenty minutes into a sweep: its row never ended.
    h.plant_sweep_left_running("reconciler:gone", Duration::from_secs(20 * 60))
        .await;

    h.reconciler().sweep(window(&h).await).await.unwrap();

    let rows = sweep_rows(&h).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|r| r.1), "no row left running: {rows:?}");
    assert!(
        rows[0]
            .2
            .as_deref()
            .is_some_and(|e| e.contains("abandoned")),
        "{rows:?}"
    );
}

/// A sweep of `window` in the background that has read its pages and stalls before its
/// comparison (its ANALYZE waits on the lock `blocker` holds), and what it came to.
async fn stalled_before_comparing(
    h: &Harness,
    reconciler: &Reconciler,
    window: ListWindow,
) -> (
    sqlx::Transaction<'static, sqlx::Postgres>,
    tokio::task::JoinHandle<anyhow::Result<SweepReport>>,
) {
    let blocker = h.hold_sweep_records().await;
    let sweep = tokio::spawn({
        let reconciler = reconciler.clone();
        async move { reconciler.sweep(window).await }
    });
    crate::support::eventually(
        "the sweep has read its pages and waits to compare",
        Duration::from_secs(30),
        || h.sweep_waits_to_compare(),
    )
    .await;
    (blocker, sweep)
}

/// The sweep that `blocker` stalls past ABANDONED_AFTER (a lock wait, a paused VM) is ended
/// as abandoned by the next sweep's start (of a window a month before `whole`), which
/// removes its records; then the stall ends.
async fn abandoned_by_the_next_start(
    h: &Harness,
    whole: ListWindow,
    blocker: sqlx::Transaction<'static, sqlx::Postgres>,
) {
    h.set_sweeps("heartbeat_at = now() - interval '11 minutes'")
        .await;
    let elsewhere = ListWindow {
        from: whole.from - Duration::from_secs(30 * 86_400),
        to: whole.from - Duration::from_secs(29 * 86_400),
    };
    let next = onecharge::store::findings::sweep::start(
        &h.store,
        elsewhere,
        &Actor::Reconciler("next".into()),
    )
    .await
    .unwrap();
    onecharge::store::findings::sweep::finish(&h.store, next, Default::default(), None)
        .await
        .unwrap();
    blocker.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_ended_as_abandoned_while_it_stalled_writes_no_finding_and_keeps_its_end() {
    let h = Harness::new().await;
    let executor = h.executor_with(h.client_with_key(crate::support::API_KEY));
    h.seed_many(&[pm::CARD_VISA; 5]).await;
    while executor.run_once().await.unwrap().claimed() > 0 {}
    let reconciler = h.reconciler();
    let whole = window(&h).await;
    let (blocker, stalled) = stalled_before_comparing(&h, &reconciler, whole).await;
    abandoned_by_the_next_start(&h, whole, blocker).await;

    let result = stalled.await.unwrap();

    let err = result.expect_err("an abandoned sweep ends in an error");
    assert!(format!("{err:#}").contains("abandoned"), "{err:#}");
    let (per_class, rows) = findings(&h).await;
    assert!(per_class.is_empty(), "no false `missing`: {rows:?}");
    let rows = sweep_rows(&h).await;
    assert!(
        rows[0]
            .2
            .as_deref()
            .is_some_and(|e| e.contains("abandoned")),
        "its end is not overwritten: {rows:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_never_sweep_overlapping_windows_at_once() {
    let h = slow_listing(30, 1500).await;
    let reconciler = h.reconciler();
    let whole = window(&h).await;
    let first = sweeping(&h, &reconciler, whole).await;
    let overlapping = ListWindow {
        from: whole.from + Duration::from_secs(600),
        to: whole.to + Duration::from_secs(600),
    };

    let second = reconciler.sweep(overlapping).await;

    let err = second.expect_err("an overlapping sweep is refused");
    assert!(format!("{err:#}").contains("overlapping"), "{err:#}");
    first.await.unwrap().unwrap();
    let rows = sweep_rows(&h).await;
    assert_eq!(rows.len(), 1, "the refused sweep left no row: {rows:?}");
}

/// The sweep's last step, the succeeded attempts of the window that no record names, reads
/// the window's part of `payment_attempts_succeeded_dispatched_idx` and never the whole ledger
/// (decision 244): 30,000 succeeded attempts over a month, analyzed, and an hour's window a
/// week ago; the plan of the very statement the step runs, on its first page and on a later
/// one, is that index's and scans nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_for_unlisted_succeeded_attempts_reads_its_window_by_an_index_not_the_ledger() {
    use onecharge::store::findings::sweep::{
        unlisted_succeeded, unlisted_succeeded_plan, ComparePage,
    };
    let h = Harness::new().await;
    let client = h.client_with_key(crate::support::API_KEY);
    let first = executed(&h, &client, pm::CARD_VISA).await;
    // Copies of it, one every 90 seconds back over a month.
    h.copy_attempt_back_in_time(first, 30_000, Duration::from_secs(90))
        .await;
    h.exec("ANALYZE payment_attempts").await;
    let week_ago = h.db_now().await - Duration::from_secs(7 * 86400);
    let page = ComparePage {
        sweep: 1,
        window: ListWindow {
            from: week_ago,
            to: week_ago + Duration::from_secs(3600),
        },
        read_began: week_ago,
        margin: Duration::from_secs(60),
        after: None,
        limit: 20,
    };

    let first_page = unlisted_succeeded(&h.store, page).await.unwrap();
    let later = ComparePage {
        after: Some(first_page.last().unwrap().payment_attempt_id.into()),
        ..page
    };

    assert_eq!(first_page.len(), 20);
    let second_page = unlisted_succeeded(&h.store, later).await.unwrap();
    // About 39 were first sent inside the window less its margins: 20, then the rest.
    let inside = h
        .succeeded_first_sent_between(page.window.from + page.margin, page.window.to - page.margin)
        .await;
    assert!(inside > 20 && inside <= 40, "{inside}");
    assert_eq!(second_page.len() as i64, inside - 20);
    assert!(second_page
        .iter()
        .all(|a| !first_page.contains(a) && a.in_window));
    for page in [page, later] {
        let plan = unlisted_succeeded_plan(&h.store, page).await.unwrap();
        assert!(
            plan.contains("payment_attempts_succeeded_dispatched_idx"),
            "{plan}"
        );
        assert!(!plan.contains("Seq Scan on payment_attempts"), "{plan}");
    }
}

/// Issue 55's whole account, in the mock's Stripe dialect: one account shared by two
/// sibling deployments (eu, us); eu's charges in ISK, JPY, KWD and MGA (whose Stripe units
/// differ from ISO 4217's both ways), each partly refunded by a RefundPayment onecharge sent;
/// an inquiry on another charge that the bank escalates to a chargeback; and a sweep whose
/// comparison stalled until a later sweep ended it as abandoned. The whole list of findings,
/// after each sweep, is exactly the true one: the inquiry, then the chargeback — nothing
/// about the currencies' refunds, the sibling's charges, or the stalled sweep's half-read
/// table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_account_with_siblings_odd_currencies_an_escalated_inquiry_and_a_stalled_sweep_gives_exactly_the_true_findings(
) {
    use crate::refunds::{record, refund, settle};
    use crate::support::refund_roles::RefundRoles;
    use crate::support::{command, intake_record};
    use onecharge::domain::RefundId;

    let sibling = |name: &'static str| {
        move |s: &mut onecharge::config::Settings| {
            s.gateway_kind = GatewayKind::Stripe;
            s.deployment = Some(name.to_owned());
            s.refunds.recheck_interval = Duration::from_millis(1);
        }
    };
    let stripe = || MockConfig {
        dialect: Dialect::Stripe,
        ..MockConfig::default()
    };
    let eu = Harness::with(stripe(), sibling("eu")).await;
    let mut us = Harness::with(stripe(), sibling("us")).await;
    us.settings.gateway_url = eu.gateway.base_url();
    let eu_client = GatewayClient::from_settings(&eu.settings).unwrap();

    // eu: four currencies whose Stripe unit is not ISO's (ISK ×100, MGA ÷100, KWD's last
    // digit 0, JPY none), each refunded in part by onecharge; and one EUR charge.
    let charges = [
        ("ISK", 4000, 1500),
        ("JPY", 500, 200),
        ("KWD", 1230, 500),
        ("MGA", 5000, 2000),
    ];
    let records: Vec<_> = charges
        .iter()
        .map(|(currency, amount, _)| {
            let body = command(
                uuid::Uuid::new_v4(),
                serde_json::json!({"payment_method": pm::CARD_VISA, "currency": currency, "amount_minor": amount}),
            );
            intake_record(&body, &format!("msg-{}", uuid::Uuid::new_v4()), None)
        })
        .collect();
    crate::support::record_batch(&eu.store, "test-intake", &records)
        .await
        .unwrap();
    let disputed = eu.seed(pm::CARD_VISA).await.payment_attempt_id;
    let executor = eu.executor_with(eu_client.clone());
    while executor.run_once().await.unwrap().claimed() > 0 {}
    let worker = RefundRoles::new(
        eu.store.clone(),
        eu_client.clone(),
        onecharge::gateway::GatewayHealth::from_settings(&eu.settings.executor),
        &eu.settings,
    );
    for (record_, (currency, _, refunded)) in records.iter().zip(charges) {
        let attempt = record_.command.payment_attempt_id;
        assert_eq!(eu.attempt(attempt).await.status, "succeeded", "{currency}");
        let refund_id = RefundId::random();
        record(&eu, &refund(refund_id, attempt, Some(refunded)), currency).await;
        settle(&worker).await;
        assert_eq!(eu.refund(refund_id).await.status, "succeeded", "{currency}");
    }
    // us: three charges of its own in the same account.
    let us_executor = us.executor_with(GatewayClient::from_settings(&us.settings).unwrap());
    us.seed_many(&[pm::CARD_VISA; 3]).await;
    while us_executor.run_once().await.unwrap().claimed() > 0 {}
    assert_eq!(
        eu.gateway.ledger().len(),
        8,
        "one account: 5 of eu's, 3 of us's"
    );
    // The bank opens an inquiry on eu's EUR charge.
    let pi = eu.attempt(disputed).await.gateway_charge_id.unwrap();
    eu.mock_control()
        .set_dispute(&pi, "warning_needs_response")
        .await;

    // A sweep of eu's whose comparison stalls, ended as abandoned by a later sweep's start.
    let reconciler = eu.reconciler_with(eu_client.clone());
    let whole = window(&eu).await;
    let (blocker, stalled) = stalled_before_comparing(&eu, &reconciler, whole).await;
    abandoned_by_the_next_start(&eu, whole, blocker).await;
    let abandoned = stalled.await.unwrap();
    assert!(format!("{:#}", abandoned.unwrap_err()).contains("abandoned"));
    assert!(
        eu.findings().await.is_empty(),
        "the stalled sweep wrote nothing"
    );

    // The next sweeps, each deployment of its own window of the shared account.
    let all = |h: &Harness| {
        let store = h.store.clone();
        async move {
            let mut found: Vec<(String, Option<uuid::Uuid>, String, String)> = Vec::new();
            for f in crate::support::Records::findings(&store).await {
                found.push((f.class, f.payment_attempt_id, f.evidence, f.state));
            }
            found
        }
    };
    let report = reconciler.sweep(window(&eu).await).await.unwrap();
    assert_eq!(
        (
            report.records_seen,
            report.records_kept,
            report.records_skipped
        ),
        (8, 5, 3),
        "us's three counted and skipped"
    );
    let inquiry = (
        "disputed".to_owned(),
        Some(disputed.into()),
        "dispute:inquiry".to_owned(),
    );
    assert_eq!(
        all(&eu).await,
        [(
            inquiry.0.clone(),
            inquiry.1,
            inquiry.2.clone(),
            "open".to_owned()
        )],
        "only the inquiry"
    );
    let us_report = us
        .reconciler_with(GatewayClient::from_settings(&us.settings).unwrap())
        .sweep(window(&us).await)
        .await
        .unwrap();
    assert_eq!(
        (
            us_report.records_seen,
            us_report.records_kept,
            us_report.records_skipped
        ),
        (8, 3, 5)
    );
    assert!(
        all(&us).await.is_empty(),
        "us: nothing of eu's is a finding"
    );

    // The inquiry answered; the bank escalates it to a chargeback.
    resolve_the_last_finding(&eu, "inquiry answered").await;
    eu.mock_control().set_dispute(&pi, "needs_response").await;
    reconciler.sweep(window(&eu).await).await.unwrap();
    let again = reconciler.sweep(window(&eu).await).await.unwrap();

    assert!(again.new_findings.is_empty(), "{again:?}");
    assert_eq!(
        all(&eu).await,
        [
            (
                inquiry.0.clone(),
                inquiry.1,
                inquiry.2,
                "resolved".to_owned()
            ),
            (
                "disputed".to_owned(),
                Some(disputed.into()),
                "dispute:open".to_owned(),
                "open".to_owned()
            ),
        ],
        "the inquiry, resolved, and the chargeback it became: nothing else"
    );
}
