//! The operator console in a real browser (headless chromium over WebDriver,
//! `support::browser`), against the real service (`Application` with the admin role) with
//! named operators configured: what an operator clicks changes the database, the outbox
//! and the audit trail (`operator_audit`) exactly as the CLI would; a viewer's click changes nothing and the
//! page says why. Slow (a browser each), so few: one scenario per role.
//!
//! `CONSOLE_SCREENSHOTS=1 cargo test --test it browser::` also saves the main pages into
//! `docs/console/` (the README's pictures).

use std::time::Duration;

use crate::support::browser::Browser;
use crate::support::{command, Records, TestEnv};
use crate::support::{with_ada_and_vic, Served};
use onecharge::config::Settings;
use serde_json::json;
use uuid::Uuid;

const OPERATOR_TOKEN: &str = "oc_ada-browser-operator-token-0123456789";
const VIEWER_TOKEN: &str = "oc_vic-browser-viewer-token-0123456789";
const ORDER: &str = "ord_browser_1001";

/// ada acts, vic reads; the shared admin token is set too, so nothing is open.
fn with_operators(settings: &mut Settings) {
    with_ada_and_vic(
        settings,
        "browser-admin-token-0123456789",
        OPERATOR_TOKEN,
        VIEWER_TOKEN,
    );
}

/// What the scenario finds in the console, recorded the way production records it: commands
/// published and taken in by intake (one invalid, so there is a dead letter), then moved to
/// the states an operator meets.
struct Seeded {
    /// The order's attempt the reconciler could not settle: `needs_review`.
    in_review: Uuid,
    /// The order's earlier attempt, declined.
    declined: Uuid,
}

async fn seed(env: &TestEnv) -> Seeded {
    let in_review = Uuid::new_v4();
    let declined = Uuid::new_v4();
    let others: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    let mut commands = vec![
        (declined, ORDER.to_owned(), "cus_browser"),
        (in_review, ORDER.to_owned(), "cus_browser"),
    ];
    for (i, id) in others.iter().enumerate() {
        commands.push((*id, format!("ord_browser_{}", 2001 + i), "cus_other"));
    }
    for (id, order, customer) in &commands {
        env.publish(
            &format!("m-{id}"),
            &command(
                *id,
                json!({"order_id": order, "customer_id": customer, "description": format!("Order {order}")}),
            ),
        )
        .await;
    }
    env.publish_raw(
        Some("m-not-a-uuid"),
        br#"{"payment_attempt_id":"not-a-uuid"}"#,
    )
    .await;
    let intake = env.intake().await;
    let mut recorded = 0;
    for _ in 0..20 {
        recorded += intake
            .process_batch(Duration::from_secs(2))
            .await
            .expect("intake takes the batch")
            .count("processed");
        if recorded == commands.len() && !env.dead_letters().await.is_empty() {
            break;
        }
    }
    assert_eq!(recorded, commands.len(), "intake recorded every command");
    let moves = [
        (declined, "status = 'declined', decline_code = 'card_declined', tries = 1,
             first_dispatched_at = now() - interval '2 hours', created_at = now() - interval '2 hours'"),
        (in_review, "status = 'needs_review', tries = 1,
             review_reason = 'the gateway timed out and its lookup found no charge under the key yet',
             first_dispatched_at = now() - interval '10 minutes', created_at = now() - interval '20 minutes'"),
        (others[0], "status = 'succeeded', gateway_charge_id = 'ch_browser_2001', tries = 1,
             first_dispatched_at = now() - interval '1 hour'"),
    ];
    for (id, set) in moves {
        env.set_attempt(id, set).await;
    }
    seed_history(env, in_review).await;
    Seeded {
        in_review,
        declined,
    }
}

/// The history the overview's charts and the attempt's timeline picture draw: the attempt
/// in review went pending → in_flight → unknown → needs_review over the last 20 minutes
/// (a charge that timed out, a lookup that found nothing), and 120 other attempts settled
/// over the last hour, each with its charge call, as the executor records them.
async fn seed_history(env: &TestEnv, in_review: Uuid) {
    for k in 0..120 {
        env.record_command(
            json!({"order_id": format!("ord_chart_{k}"), "customer_id": "cus_chart"}),
            None,
        )
        .await;
    }
    env.exec(&format!(
        "UPDATE attempt_transitions SET at = now() - interval '20 minutes'
           WHERE payment_attempt_id = '{in_review}';
         INSERT INTO attempt_transitions (payment_attempt_id, from_status, to_status, cause, actor, at) VALUES
           ('{in_review}', 'pending', 'in_flight', 'claimed', 'executor:browser', now() - interval '10 minutes'),
           ('{in_review}', 'in_flight', 'unknown', 'gateway_ambiguous', 'executor:browser', now() - interval '10 minutes' + interval '2 seconds'),
           ('{in_review}', 'unknown', 'needs_review', 'lookup_found_nothing_retries_exhausted', 'reconciler:browser', now() - interval '8 minutes');
         INSERT INTO gateway_calls (payment_attempt_id, operation, idempotency_key, try_number, started_at, finished_at, http_status, outcome) VALUES
           ('{in_review}', 'charge', 'onecharge-{in_review}', 1, now() - interval '10 minutes', now() - interval '10 minutes' + interval '2 seconds', NULL, 'ambiguous'),
           ('{in_review}', 'lookup', 'onecharge-{in_review}', 0, now() - interval '8 minutes', now() - interval '8 minutes' + interval '40 milliseconds', 200, 'not_found');
         WITH chart AS (
             SELECT payment_attempt_id AS id, row_number() OVER (ORDER BY payment_attempt_id) AS n
             FROM payment_attempts WHERE order_id LIKE 'ord_chart_%'
         ), settled AS (
             SELECT id, n, now() - make_interval(secs => 30 + (n * 613) % 3500) AS at,
                    CASE WHEN n % 7 = 0 THEN 'declined' WHEN n % 31 = 0 THEN 'expired' ELSE 'succeeded' END AS status
             FROM chart
         ), transitions AS (
             INSERT INTO attempt_transitions (payment_attempt_id, from_status, to_status, cause, actor, at)
             SELECT id, 'in_flight', status, 'gateway_answered', 'executor:browser', at FROM settled
         ), calls AS (
             INSERT INTO gateway_calls (payment_attempt_id, operation, idempotency_key, try_number, started_at, finished_at, http_status, outcome)
             SELECT id, 'charge', 'onecharge-' || id, 1, at - make_interval(secs => (40 + (n * 37) % 260 + CASE WHEN n % 17 = 0 THEN 900 ELSE 0 END) / 1000.0), at,
                    CASE status WHEN 'declined' THEN 402 ELSE 201 END, status
             FROM settled WHERE status <> 'expired'
         )
         UPDATE payment_attempts a SET status = settled.status, tries = 1,
                gateway_charge_id = CASE settled.status WHEN 'succeeded' THEN 'ch_chart_' || settled.n END
         FROM settled WHERE a.payment_attempt_id = settled.id"
    ))
    .await;
}

/// One scenario's world: the seeded service, its admin role serving the console, and a
/// browser of the test's own.
struct Scenario {
    env: TestEnv,
    seeded: Seeded,
    console: Served,
    browser: Browser,
}

impl Scenario {
    /// `None` where chromium is missing outside CI: the test `test` is skipped (see
    /// [`Browser::available`]).
    async fn start(test: &str) -> Option<Self> {
        if !Browser::available(test) {
            return None;
        }
        let env = TestEnv::with_settings(with_operators).await;
        let seeded = seed(&env).await;
        let console = Served::admin(&env.settings).await;
        let browser = Browser::start().await;
        Some(Self {
            env,
            seeded,
            console,
            browser,
        })
    }
}

/// Signs in through the form with `token`, from the page the console sent the browser to.
async fn sign_in(browser: &Browser, console: &Served, token: &str) {
    browser.goto(&console.url("/console/")).await;
    assert!(
        browser.path().await.starts_with("/console/login"),
        "not signed in: the sign-in page"
    );
    browser.fill("#login-token", token).await;
    browser.click_and_wait("#login-submit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_an_order_in_the_browser_and_resolves_its_attempt_in_review_after_confirming(
) {
    let Some(Scenario {
        env,
        seeded,
        console,
        browser,
    }) = Scenario::start("an_operator_finds_an_order_in_the_browser_and_resolves_its_attempt_in_review_after_confirming").await
    else {
        return;
    };

    sign_in(&browser, &console, OPERATOR_TOKEN).await;
    assert_eq!(browser.path().await, "/console/");
    let whoami = browser.find("#whoami").await;
    assert_eq!(
        whoami.attr("data-actor").await.unwrap().as_deref(),
        Some("operator:ada")
    );
    assert_eq!(browser.text("#needs-review-count").await, "1");
    assert_eq!(browser.text("#dead-letters-count").await, "1");
    // the charts: 120 settlements over the hour, a bar per minute; latency; the review queue
    let settlements = browser.find("#chart-settlements").await;
    assert_eq!(
        settlements.attr("data-points").await.unwrap().as_deref(),
        Some("61")
    );
    let bars = browser
        .client()
        .find_all(fantoccini::Locator::Css(
            "#chart-settlements rect[data-series]",
        ))
        .await
        .unwrap();
    assert!(bars.len() >= 40, "{} stacked parts", bars.len());
    for chart in [
        "#chart-latency",
        "#chart-review-size",
        "#chart-review-oldest",
    ] {
        let drawn = browser.find(chart).await;
        let max: f64 = drawn
            .attr("data-max")
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        assert!(max > 0.0, "{chart} draws something");
    }
    let size = browser.find("#chart-review-size").await;
    assert_eq!(size.attr("data-max").await.unwrap().as_deref(), Some("1"));
    browser.screenshot("overview").await;

    // the review queue lists the attempt with its reason
    browser.click_and_wait("#nav-review").await;
    let row = browser
        .find(&format!(
            r#"tr[data-testid="review-row"][data-attempt-id="{}"]"#,
            seeded.in_review
        ))
        .await;
    assert!(row
        .text()
        .await
        .unwrap()
        .contains("its lookup found no charge"));
    browser.screenshot("review-queue").await;

    // search by order: both of its attempts, newest first
    browser.click_and_wait("#nav-search").await;
    browser.fill("#q-order-id", ORDER).await;
    browser.click_and_wait("#search-submit").await;
    let path = browser.path().await;
    assert!(
        path.starts_with("/console/attempts?") && path.contains(&format!("order_id={ORDER}")),
        "{path}"
    );
    let count = browser.find("#result-count").await;
    assert_eq!(
        count.attr("data-count").await.unwrap().as_deref(),
        Some("2")
    );
    let rows = browser
        .client()
        .find_all(fantoccini::Locator::Css(r#"tr[data-testid="attempt-row"]"#))
        .await
        .unwrap();
    let mut listed = Vec::new();
    for row in rows {
        listed.push(row.attr("data-attempt-id").await.unwrap().unwrap());
    }
    assert_eq!(
        listed,
        [seeded.in_review.to_string(), seeded.declined.to_string()]
    );
    browser.screenshot("search").await;

    // the attempt page: facts, timeline, and the resolve form
    browser
        .click_and_wait(&format!(
            r#"tr[data-attempt-id="{}"] a.attempt-link"#,
            seeded.in_review
        ))
        .await;
    assert_eq!(
        browser.path().await,
        format!("/console/attempts/{}", seeded.in_review)
    );
    assert!(browser
        .text("#attempt-id")
        .await
        .contains(&seeded.in_review.to_string()));
    assert!(browser.has(r#"tr[data-testid="timeline-entry"]"#).await);
    // the timeline as a picture: its four states, two calls, no event yet
    let picture = browser.find("#timeline-picture").await;
    assert_eq!(
        picture.attr("data-states").await.unwrap().as_deref(),
        Some("4")
    );
    assert_eq!(
        picture.attr("data-calls").await.unwrap().as_deref(),
        Some("2")
    );
    browser.screenshot("attempt").await;
    browser
        .client()
        .execute(
            "document.getElementById('history').scrollIntoView()",
            vec![],
        )
        .await
        .unwrap();
    browser.screenshot("attempt-timeline").await;

    // resolve with a reason: first the confirmation, which changes nothing yet
    browser.select("#resolve-as", "succeeded").await;
    browser
        .fill(
            "#resolve-reason",
            "charge ch_browser_1 seen in the gateway dashboard",
        )
        .await;
    browser
        .fill("#resolve-gateway-charge-id", "ch_browser_1")
        .await;
    browser.click_and_wait("#resolve-submit").await;
    assert_eq!(browser.text("#confirm-as").await, "succeeded");
    assert_eq!(
        env.status(seeded.in_review).await,
        "needs_review",
        "nothing happens before the confirmation"
    );
    browser.screenshot("resolve-confirmation").await;
    browser.click_and_wait("#confirm-submit").await;
    let result = browser.find("#result").await;
    assert_eq!(
        result.attr("data-status").await.unwrap().as_deref(),
        Some("succeeded")
    );

    // the decision, as the database, the outbox and the audit trail record it
    let attempt = env.attempt(seeded.in_review).await;
    assert_eq!(
        (
            attempt.status.as_str(),
            attempt.gateway_charge_id.as_deref()
        ),
        ("succeeded", Some("ch_browser_1"))
    );
    let decision = env.last_transition(seeded.in_review).await;
    assert_eq!(
        (
            decision.to_status.as_str(),
            decision.cause.as_str(),
            decision.actor.as_str()
        ),
        ("succeeded", "operator_resolved", "operator:ada")
    );
    assert!(decision
        .detail
        .unwrap_or_default()
        .contains("seen in the gateway dashboard"));
    let (status, payload, _) = env.only_event(seeded.in_review).await;
    assert_eq!(status, "succeeded");
    assert_eq!(payload["gateway_charge_id"], "ch_browser_1");
    let audit = env.audit_entries_about(seeded.in_review).await;
    assert_eq!(audit.len(), 1, "one audit row for the decision: {audit:?}");
    let entry = &audit[0];
    assert_eq!(
        (
            entry.actor.as_str(),
            entry.via.as_str(),
            entry.action.as_str()
        ),
        ("operator:ada", "console", "resolve_succeeded")
    );
    assert_eq!(
        entry.reason.as_deref(),
        Some("charge ch_browser_1 seen in the gateway dashboard")
    );
    browser.click_and_wait("#nav-audit").await;
    assert!(browser.has(r#"[data-testid="audit-row"]"#).await);
    browser.screenshot("audit").await;

    // the dead letters page lists the invalid command
    browser.click_and_wait("#nav-dead-letters").await;
    let letters = browser.find("#dead-letter-count").await;
    assert_eq!(
        letters.attr("data-count").await.unwrap().as_deref(),
        Some("1")
    );
    browser.screenshot("dead-letters").await;

    // the findings page lists what the sweep found, each with its history one click away
    env.plant_finding(seeded.declined).await;
    browser.click_and_wait("#nav-findings").await;
    assert!(browser.has("tr[data-finding-id]").await, "a finding row");
    browser.screenshot("findings").await;

    browser.close().await;
    console.stop().await;
}

/// Issue 37: an operator refunds part of a succeeded charge from its page — the amount and
/// the reason, a confirmation saying what is left, then the refund — and, once the refund
/// intake recorded it and the refund worker admitted it, sees its moves on the attempt's
/// timeline and the refund on the refunds page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_refunds_a_charge_in_the_browser_after_confirming_and_sees_it_on_the_timeline()
{
    let Some(Scenario {
        env,
        console,
        browser,
        ..
    }) = Scenario::start(
        "an_operator_refunds_a_charge_in_the_browser_after_confirming_and_sees_it_on_the_timeline",
    )
    .await
    else {
        return;
    };
    let charged = env
        .succeeded_attempt("ord_browser_refund", "cus_browser")
        .await;

    sign_in(&browser, &console, OPERATOR_TOKEN).await;
    browser
        .goto(&console.url(&format!("/console/attempts/{charged}")))
        .await;
    assert!(browser.has("#no-refunds").await);
    browser.fill("#refund-amount", "750").await;
    browser
        .fill("#refund-reason", "customer returned one of two items")
        .await;
    browser.click_and_wait("#refund-submit").await;

    // the confirmation: what it refunds and what is left; nothing published yet
    assert_eq!(browser.text("#preview-charged").await, "19.99 EUR");
    assert_eq!(browser.text("#preview-left").await, "19.99 EUR");
    assert_eq!(browser.text("#preview-left-after").await, "12.49 EUR");
    assert_eq!(env.take_in_refunds().await, 0, "nothing before confirming");
    browser.screenshot("refund-confirmation").await;
    browser.click_and_wait("#confirm-submit").await;
    let result = browser.find("#result").await;
    let refund_id = result.attr("data-refund-id").await.unwrap().unwrap();
    assert!(browser
        .text("#result")
        .await
        .contains("published by operator:ada"));

    // the refund intake records it and the refund worker admits it, as in production
    assert_eq!(env.take_in_refunds().await, 1);
    env.admit_refunds().await;
    assert_eq!(
        env.refund(refund_id.parse::<Uuid>().unwrap()).await.status,
        "pending"
    );
    let audit = env.audit_entries_about(charged).await;
    assert_eq!(
        audit
            .iter()
            .map(|e| (e.action.as_str(), e.actor.as_str(), e.via.as_str()))
            .collect::<Vec<_>>(),
        [("refund", "operator:ada", "console")]
    );

    // back on the attempt: the refund, and its moves on the timeline
    browser.click_and_wait("#back-to-attempt").await;
    let row = browser
        .find(&format!(
            r#"tr[data-testid="attempt-refund"][data-refund-id="{refund_id}"]"#
        ))
        .await;
    assert_eq!(
        row.attr("data-status").await.unwrap().as_deref(),
        Some("pending")
    );
    let moves = browser
        .client()
        .find_all(fantoccini::Locator::Css(r#"tr[data-kind="refund"]"#))
        .await
        .unwrap();
    let mut shown = Vec::new();
    for entry in moves {
        shown.push(entry.text().await.unwrap());
    }
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(
        shown[0].contains("new -> waiting (command_accepted)"),
        "{shown:?}"
    );
    assert!(
        shown[1].contains("waiting -> pending (admitted)"),
        "{shown:?}"
    );
    assert!(browser
        .text("#fact-refunds")
        .await
        .contains("7.50 EUR being refunded; 12.49 EUR left"));
    browser.screenshot("attempt-refunds").await;

    // the refunds page lists it
    browser.click_and_wait("#nav-refunds").await;
    assert!(
        browser
            .has(&format!(
                r#"tr[data-testid="refund-row"][data-refund-id="{refund_id}"]"#
            ))
            .await
    );

    browser.close().await;
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_in_the_browser_reads_the_attempt_but_its_resolve_is_refused_with_why_and_changes_nothing(
) {
    let Some(Scenario {
        env,
        seeded,
        console,
        browser,
    }) = Scenario::start("a_viewer_in_the_browser_reads_the_attempt_but_its_resolve_is_refused_with_why_and_changes_nothing").await
    else {
        return;
    };

    sign_in(&browser, &console, VIEWER_TOKEN).await;
    let whoami = browser.find("#whoami").await;
    assert_eq!(
        whoami.attr("data-role").await.unwrap().as_deref(),
        Some("viewer")
    );
    browser
        .goto(&console.url(&format!("/console/attempts/{}", seeded.in_review)))
        .await;
    browser.select("#resolve-as", "declined").await;
    browser
        .fill("#resolve-reason", "the customer says it was not charged")
        .await;
    browser.click_and_wait("#resolve-submit").await;

    let refusal = browser.text("#refusal").await;
    assert!(
        refusal.contains("vic signed in as a viewer")
            && refusal.contains("need the role `operator`"),
        "{refusal}"
    );
    assert!(refusal.contains("Nothing was changed"), "{refusal}");
    assert_eq!(env.status(seeded.in_review).await, "needs_review");
    assert!(
        !env.causes(seeded.in_review)
            .await
            .contains(&"operator_resolved".to_owned()),
        "no decision recorded"
    );
    assert!(env.outbox().await.is_empty(), "no event");
    assert!(
        env.audit_entries().await.is_empty(),
        "nothing done, nothing audited"
    );

    browser.close().await;
    console.stop().await;
}

/// The rebinding of issue 23 in a real browser: chromium resolves `attacker.example` to the
/// admin listener's loopback address, as the attacker's DNS would after the page loaded. The
/// open console and the API answer that name nothing but 421, and set no cookie; the same
/// browser at `127.0.0.1` gets the console.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_rebound_to_the_admin_address_gets_421_in_the_browser_and_no_cookie() {
    let test = "a_name_rebound_to_the_admin_address_gets_421_in_the_browser_and_no_cookie";
    if !Browser::available(test) {
        return;
    }
    let env = TestEnv::new().await;
    let console = Served::admin(&env.settings).await;
    let port = console.admin.unwrap().port();
    let browser =
        Browser::start_with(&["--host-resolver-rules=MAP attacker.example 127.0.0.1"]).await;

    for path in ["/console/", "/api/stats", "/healthz"] {
        browser
            .goto(&format!("http://attacker.example:{port}{path}"))
            .await;
        let body = browser.text("body").await;
        assert!(body.contains("misdirected_request"), "{path}: {body}");
    }
    let cookies = browser.client().get_all_cookies().await.unwrap();
    assert!(cookies.is_empty(), "{cookies:?}");

    browser.goto(&console.url("/console/")).await;
    assert!(browser.has("#whoami").await, "the console at 127.0.0.1");
    assert!(env.console_sessions().await.is_empty());
    browser.close().await;
    console.stop().await;
}
