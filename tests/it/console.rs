//! The operator console (contract §6, issue 15) over HTTP: sign-in and its cookie, the
//! CSRF token and roles on every action, search, the attempt page, and that no page shows
//! a secret. The real service (`Application` with the admin role) on a free port; cookies
//! are carried by hand so each test sees exactly what the browser is told.

use crate::support::api::{attempt, attempt_in_review, AdminApi};
use crate::support::with_ada_and_vic;
use crate::support::{command, Records, TestEnv};
use onecharge::config::token_sha256;
use onecharge::config::Settings;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{RequestBuilder, StatusCode};
use secrecy::SecretString;
use serde_json::json;
use uuid::Uuid;

const OPERATOR_TOKEN: &str = "oc_ada-operator-token-0123456789abcdef";
const VIEWER_TOKEN: &str = "oc_vic-viewer-token-0123456789abcdef";
const ADMIN_TOKEN: &str = "shared-admin-token-0123456789";
const GATEWAY_KEY: &str = "gw-secret-key-0123456789";

/// Two named operators (ada acts, vic views), the shared admin token and a gateway key
/// that no page may show.
fn with_operators(settings: &mut Settings) {
    with_ada_and_vic(settings, ADMIN_TOKEN, OPERATOR_TOKEN, VIEWER_TOKEN);
    settings.gateway_api_key = Some(SecretString::from(GATEWAY_KEY));
}

/// The running admin role, through a client that follows no redirect.
struct Console {
    api: AdminApi,
}

/// What a browser would keep of a signed-in session: its cookie and the page's CSRF token.
struct Browser {
    cookie: String,
}

impl Console {
    async fn start(env: &TestEnv) -> Self {
        Self::with_settings(&env.settings).await
    }

    /// An admin instance of its own on the same database (a second instance behind a load
    /// balancer, a restarted one, or one with a changed configuration).
    async fn with_settings(settings: &Settings) -> Self {
        Self {
            api: AdminApi::start(settings).await,
        }
    }

    fn url(&self, path: &str) -> String {
        self.api.url(path)
    }

    fn http(&self) -> &reqwest::Client {
        self.api.http()
    }

    /// Signs in with `token` as a browser does: the sign-in page first (its cookie and form
    /// token), then its form.
    async fn sign_in(&self, token: &str) -> reqwest::Response {
        self.sign_in_from(token, None).await
    }

    /// [`Console::sign_in`] through a proxy that says the browser is `forwarded_for`.
    async fn sign_in_from(&self, token: &str, forwarded_for: Option<&str>) -> reqwest::Response {
        let form_page = self
            .http()
            .get(self.url("/console/login"))
            .send()
            .await
            .unwrap();
        let cookie = cookies_set(&form_page).expect("the sign-in page sets its cookie");
        let csrf = csrf_of(&form_page.text().await.unwrap());
        let post = self.http().post(self.url("/console/login"));
        let post = match forwarded_for {
            Some(client) => post.header("x-forwarded-for", client),
            None => post,
        };
        post.header(COOKIE, cookie)
            .form(&[
                ("token", token),
                ("next", "/console/review"),
                ("csrf", &csrf),
            ])
            .send()
            .await
            .unwrap()
    }

    async fn browser(&self, token: &str) -> Browser {
        let response = self.sign_in(token).await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        Browser {
            cookie: session_cookie(&response).expect("a session cookie"),
        }
    }

    async fn get(&self, browser: Option<&Browser>, path: &str) -> (StatusCode, String) {
        page(self.http().get(self.url(path)), browser).await
    }

    async fn post(
        &self,
        browser: &Browser,
        path: &str,
        form: &[(&str, &str)],
    ) -> (StatusCode, String) {
        page(self.http().post(self.url(path)).form(form), Some(browser)).await
    }

    /// The CSRF token the browser's pages carry.
    async fn csrf(&self, browser: &Browser) -> String {
        let (status, page) = self.get(Some(browser), "/console/").await;
        assert_eq!(status, StatusCode::OK, "{page}");
        csrf_of(&page)
    }

    async fn stop(self) {
        self.api.stop().await;
    }
}

/// Sends `request` with `browser`'s session cookie, if there is one: the status and the page.
async fn page(request: RequestBuilder, browser: Option<&Browser>) -> (StatusCode, String) {
    let request = match browser {
        Some(browser) => request.header(COOKIE, &browser.cookie),
        None => request,
    };
    let response = request.send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

/// `onecharge_console=<id>` from a response's `Set-Cookie`, ready for a `Cookie` header.
fn session_cookie(response: &reqwest::Response) -> Option<String> {
    let set = response.headers().get(SET_COOKIE)?.to_str().ok()?;
    Some(set.split(';').next()?.trim().to_owned())
}

fn csrf_of(page: &str) -> String {
    let start = page
        .find(r#"name="csrf" value=""#)
        .expect("a form with a CSRF token")
        + 19;
    page[start..start + page[start..].find('"').unwrap()].to_owned()
}

/// The named operators' world with one attempt in review (of `ord_review`), and the console
/// serving it.
async fn one_in_review() -> (TestEnv, Uuid, Console) {
    let env = TestEnv::with_settings(with_operators).await;
    let id = attempt_in_review(&env, "ord_review").await;
    let console = Console::start(&env).await;
    (env, id, console)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_sets_a_strict_http_only_session_cookie_and_a_wrong_token_is_refused() {
    let env = TestEnv::with_settings(with_operators).await;
    let console = Console::start(&env).await;

    // not signed in: every page sends the browser to the sign-in form, remembering where
    let (status, _) = console.get(None, "/console/attempts?order_id=ord_1").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let response = console
        .http()
        .get(console.url("/console/review"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()[LOCATION],
        "/console/login?next=%2Fconsole%2Freview"
    );

    // paths outside /console keep the admin router's plain 404
    let (status, _) = console.get(None, "/no-such-path").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = console.get(None, "/console/no-such-page").await;
    assert_eq!(
        status,
        StatusCode::SEE_OTHER,
        "console paths need a session first"
    );

    let wrong = console.sign_in("oc_not-a-token").await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(
        wrong.headers().get(SET_COOKIE).is_none(),
        "no session for a wrong token"
    );
    assert!(wrong.text().await.unwrap().contains(r#"id="login-error""#));

    let right = console.sign_in(OPERATOR_TOKEN).await;
    assert_eq!(right.status(), StatusCode::SEE_OTHER);
    assert_eq!(right.headers()[LOCATION], "/console/review");
    let set_cookie = right.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(
            set_cookie.contains(flag),
            "{flag} missing from {set_cookie}"
        );
    }
    assert!(
        !set_cookie.contains("Secure"),
        "Secure only when configured"
    );
    let ada = Browser {
        cookie: session_cookie(&right).unwrap(),
    };
    let (status, page) = console.get(Some(&ada), "/console/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"data-actor="operator:ada""#), "{page}");
    assert!(page.contains(r#"data-testid="stat-needs_review""#));

    // signing out ends the session on the server, not only in the browser
    let csrf = csrf_of(&page);
    let (status, _) = console
        .post(&ada, "/console/logout", &[("csrf", &csrf)])
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, _) = console.get(Some(&ada), "/console/").await;
    assert_eq!(
        status,
        StatusCode::SEE_OTHER,
        "the old cookie is worth nothing"
    );
    console.stop().await;
}

#[tokio::test]
async fn failed_sign_ins_past_the_limit_are_refused_with_429_and_retry_after_whatever_the_token() {
    let logs = Logs::default();
    let _capture = logs.capture();
    let env = TestEnv::with_settings(with_operators).await;
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let sessions_before = sessions(&env).await;

    // one address: ten wrong tokens are each told so
    for i in 0..10 {
        let wrong = console.sign_in(&format!("oc_guess-{i}")).await;
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "guess {i}");
    }
    // the eleventh is refused before its token is looked at: a wrong one and the right one
    // get the same answer, and neither signs anybody in
    let mut answers = Vec::new();
    for token in ["oc_guess-10", OPERATOR_TOKEN] {
        let response = console.sign_in(token).await;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_owned());
        let session = session_cookie(&response).filter(|c| c.starts_with("onecharge_console="));
        let page = response.text().await.unwrap();
        assert_eq!(
            status,
            StatusCode::TOO_MANY_REQUESTS,
            "the 11th failed sign-in from one address is refused before its token is checked ({token}): {}",
            title_of(&page)
        );
        let retry_after: u64 = retry_after
            .expect("a 429 says when to try again")
            .parse()
            .expect("Retry-After in seconds");
        assert!((1..=30).contains(&retry_after), "{retry_after}");
        assert_eq!(session, None, "{token}: nobody signed in");
        assert!(!page.contains("matches no operator"), "{page}");
        // each sign-in page carries a form token of its own: the rest must be the same
        answers.push(page.replace(&csrf_of(&page), ""));
    }
    assert_eq!(
        answers[0], answers[1],
        "a throttled answer says nothing about the token"
    );
    assert_eq!(sessions(&env).await, sessions_before);

    // a browser already signed in is not affected
    let (status, _) = console.get(Some(&ada), "/console/").await;
    assert_eq!(status, StatusCode::OK);

    let logged = logs.text();
    assert!(
        logged
            .lines()
            .any(|line| line.contains("console sign-in throttled") && line.contains("127.0.0.1")),
        "the refusal is logged with the client's address: {logged}"
    );
    console.stop().await;
}

/// Behind a proxy every TCP peer is the proxy: the throttle counts the client a trusted
/// proxy names, so one guesser locks out only itself (issue 52, item 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_one_guesser_locks_out_only_itself() {
    let env = TestEnv::with_settings(|s| {
        with_operators(s);
        s.admin_trusted_proxies = vec!["127.0.0.1".into()];
    })
    .await;
    let console = Console::start(&env).await;
    for i in 0..11 {
        let wrong = console
            .sign_in_from(&format!("oc_guess-{i}"), Some("203.0.113.5"))
            .await;
        let expected = if i < 10 {
            StatusCode::UNAUTHORIZED
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        assert_eq!(wrong.status(), expected, "guess {i}");
    }
    // another browser behind the same proxy signs in
    let ada = console
        .sign_in_from(OPERATOR_TOKEN, Some("198.51.100.7"))
        .await;
    assert_eq!(ada.status(), StatusCode::SEE_OTHER);
    assert!(session_cookie(&ada).is_some());
    // the guesser cannot claim to be someone else through its own header: the proxy
    // appends the address it received from, and only the rightmost one counts
    let spoofed = console
        .sign_in_from("oc_guess-spoofed", Some("198.51.100.7, 203.0.113.5"))
        .await;
    assert_eq!(spoofed.status(), StatusCode::TOO_MANY_REQUESTS);
    console.stop().await;
}

/// A made-up session cookie is no session, and finding so asks nothing of the database:
/// with the database away the console still sends it to sign in (issue 52, item 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_made_up_session_cookie_is_no_session_and_asks_nothing_of_the_database() {
    let env = TestEnv::with_settings(with_operators).await;
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let id = session_id(&ada).to_owned();
    env.stop_database().await;
    for made_up in [
        format!("onecharge_console={}", "a".repeat(64)),
        format!("onecharge_console={}.{}", "a".repeat(64), "b".repeat(64)),
        // a real session's id under a tag of another key
        format!("onecharge_console={id}.{}", "0".repeat(64)),
        "onecharge_console=x".to_owned(),
    ] {
        let response = console
            .http()
            .get(console.url("/console/"))
            .header(COOKIE, &made_up)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "{made_up}");
        let to = response.headers()[LOCATION].to_str().unwrap().to_owned();
        assert!(to.starts_with("/console/login"), "{made_up}: {to}");
    }
    env.start_database().await;
    let mut status = StatusCode::SERVICE_UNAVAILABLE;
    for _ in 0..50 {
        status = console.get(Some(&ada), "/console/").await.0;
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(status, StatusCode::OK, "the real session works again");
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searching_an_order_lists_its_attempts_and_the_attempt_page_shows_the_timeline() {
    // nothing configured, loopback: the console is open, as /api/* is
    let env = TestEnv::new().await;
    let first = attempt(&env, "ord_1001").await;
    let second = attempt(&env, "ord_1001").await;
    let other = attempt(&env, "ord_2002").await;
    let console = Console::start(&env).await;

    let (status, page) = console
        .get(None, "/console/attempts?order_id=ord_1001")
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    for id in [first, second] {
        assert!(
            page.contains(&format!(r#"data-attempt-id="{id}""#)),
            "{id} listed"
        );
    }
    assert!(
        !page.contains(&other.to_string()),
        "another order's attempt is not listed"
    );
    assert!(page.contains(r#"data-count="2""#));

    // an idempotency key finds its one attempt; an attempt id opens its page
    let (_, page) = console
        .get(
            None,
            &format!("/console/attempts?idempotency_key=onecharge-{first}"),
        )
        .await;
    assert!(page.contains(&format!(r#"data-attempt-id="{first}""#)));
    assert!(page.contains(r#"data-count="1""#), "{page}");
    let response = console
        .http()
        .get(console.url(&format!("/console/attempts?attempt_id={first}")))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()[LOCATION],
        format!("/console/attempts/{first}")
    );

    let (status, page) = console
        .get(None, &format!("/console/attempts/{first}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains(r#"data-testid="timeline-entry" data-kind="state""#),
        "{page}"
    );
    assert!(
        page.contains("new -&gt; pending (command_accepted)"),
        "{page}"
    );
    assert!(page.contains(r#"id="fact-idempotency-key""#));
    assert!(
        page.contains(r#"data-by="executor""#),
        "the next action is the executor's"
    );
    assert!(
        page.contains(r#"data-actor="console""#),
        "an open console acts as `console`"
    );
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolve_needs_the_csrf_token_an_operator_and_a_confirmation() {
    let (env, id, console) = one_in_review().await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let vic = console.browser(VIEWER_TOKEN).await;
    let path = format!("/console/attempts/{id}/resolve");
    let decision = |csrf: &'static str| {
        vec![
            ("as", "declined"),
            ("reason", "no charge at the gateway for this key"),
            ("decline_code", "checked_by_hand"),
            ("confirm", "yes"),
            ("csrf", csrf),
        ]
    };

    // the review queue lists it with its reason
    let (_, page) = console.get(Some(&vic), "/console/review").await;
    assert!(page.contains(&format!(
        r#"data-testid="review-row" data-attempt-id="{id}""#
    )));
    assert!(page.contains("lookup inconclusive"));

    // without the session's CSRF token (a forged form), nothing happens
    let (status, page) = console.post(&ada, &path, &decision("forged")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("CSRF"));
    assert_eq!(env.status(id).await, "needs_review");

    // a viewer with a good token is refused, and told why
    let vic_csrf: &'static str = console.csrf(&vic).await.leak();
    let (status, page) = console.post(&vic, &path, &decision(vic_csrf)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(page.contains("vic signed in as a viewer"), "{page}");
    assert_eq!(env.status(id).await, "needs_review");

    // the operator: first a confirmation page, then the decision
    let ada_csrf: &'static str = console.csrf(&ada).await.leak();
    let mut unconfirmed = decision(ada_csrf);
    unconfirmed.retain(|(name, _)| *name != "confirm");
    let (status, page) = console.post(&ada, &path, &unconfirmed).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"id="confirm-submit""#), "{page}");
    assert_eq!(
        env.status(id).await,
        "needs_review",
        "not before confirming"
    );

    let (status, page) = console.post(&ada, &path, &decision(ada_csrf)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains(r#"data-status="declined""#), "{page}");
    assert_eq!(env.status(id).await, "declined");
    let history = env.history(id).await;
    let decisions = history
        .iter()
        .filter(|t| t.cause == "operator_resolved" && t.actor == "operator:ada");
    assert_eq!(decisions.count(), 1);
    let events = env.events(id).await;
    let declined = events.iter().filter(|(status, ..)| status == "declined");
    assert_eq!(declined.count(), 1, "one payment-declined event queued");
    let audit = env.audit_entries_about(id).await;
    let by_ada = audit.iter().filter(|e| {
        e.actor == "operator:ada"
            && e.via == "console"
            && e.reason.as_deref() == Some("no charge at the gateway for this key")
    });
    assert_eq!(by_ada.count(), 1, "one audit row: who, through what, why");
    let (_, page) = console.get(Some(&vic), "/console/audit").await;
    assert!(
        page.contains(r#"data-testid="audit-row""#)
            && page.contains(r#"data-actor="operator:ada""#),
        "{page}"
    );
    console.stop().await;
}

/// A page's `<title>`: what a failed assertion prints instead of the whole page.
fn title_of(page: &str) -> &str {
    page.split_once("<title>")
        .and_then(|(_, rest)| rest.split_once("</title>"))
        .map_or(page, |(title, _)| title)
}

/// Whether finding `finding` is still open (1) or not (0), and how many audit rows resolve
/// a finding.
async fn finding_and_audit(env: &TestEnv, finding: i64) -> (i64, i64) {
    let open = env.finding(finding).await.state == "open";
    let audit = env.audit_entries().await;
    let resolutions = audit.iter().filter(|e| e.action == "resolve_finding");
    (i64::from(open), resolutions.count() as i64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finding_reason_the_database_cannot_take_is_refused_with_the_form_and_changes_nothing() {
    let (env, id, console) = one_in_review().await;
    let finding = env.plant_finding(id).await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let csrf = console.csrf(&ada).await;
    let path = format!("/console/findings/{finding}/resolve");

    let too_long = "refunded by hand; ".repeat(56); // 1,008 characters
    for (reason, why) in [(too_long.as_str(), "1000"), ("refunded\0by hand", "NUL")] {
        for confirm in [None, Some("yes")] {
            let mut form = vec![("reason", reason), ("csrf", csrf.as_str())];
            form.extend(confirm.map(|c| ("confirm", c)));
            let (status, page) = console.post(&ada, &path, &form).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "a reason that cannot be recorded is the operator's to fix, not a server failure (confirm {confirm:?}): {}",
                title_of(&page)
            );
            assert!(
                page.contains(r#"id="refusal""#) && page.contains(why),
                "{page}"
            );
            assert!(
                page.contains(&format!(r#"action="{path}""#)),
                "the form comes back, to shorten the reason: {page}"
            );
            assert_eq!(
                finding_and_audit(&env, finding).await,
                (1, 0),
                "still open, nothing audited"
            );
        }
    }
    let (status, page) = console.get(Some(&ada), "/console/findings").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains(r#"maxlength="1000""#),
        "the browser is told the bound too: {page}"
    );
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolving_a_finding_asks_for_a_confirmation_first_and_acts_only_once_confirmed() {
    let (env, id, console) = one_in_review().await;
    let finding = env.plant_finding(id).await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let csrf = console.csrf(&ada).await;
    let path = format!("/console/findings/{finding}/resolve");

    // the list's form asks; nothing is resolved yet
    let reason = "refund confirmed with the customer";
    let (status, page) = console
        .post(&ada, &path, &[("reason", reason), ("csrf", &csrf)])
        .await;
    assert_eq!(
        finding_and_audit(&env, finding).await,
        (1, 0),
        "a resolve without its confirmation changes nothing (answered {status})"
    );
    assert_eq!(status, StatusCode::OK, "{}", title_of(&page));
    assert!(
        page.contains(r#"id="confirm-summary""#) && page.contains(reason),
        "the confirmation says what will be recorded: {page}"
    );
    assert!(
        page.contains(r#"id="confirm-cancel" href="/console/findings""#),
        "{page}"
    );

    // the confirmation's own form, as the browser posts it, resolves it once
    let confirm: Vec<(String, String)> = hidden_fields(&page, "confirm-form");
    assert!(
        confirm.contains(&("confirm".into(), "yes".into())),
        "{confirm:?}"
    );
    let confirm: Vec<(&str, &str)> = confirm
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let (status, page) = console.post(&ada, &path, &confirm).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains(r#"id="result""#), "{page}");
    assert_eq!(finding_and_audit(&env, finding).await, (0, 1));
    let resolved = env.finding(finding).await;
    assert_eq!(
        (
            resolved.resolved_by.as_deref(),
            resolved.resolution.as_deref()
        ),
        (Some("operator:ada"), Some(reason))
    );

    // confirming again (a second click) changes nothing and says who resolved it
    let (status, page) = console.post(&ada, &path, &confirm).await;
    assert_eq!(status, StatusCode::CONFLICT, "{page}");
    assert!(page.contains("operator:ada"), "{page}");
    assert_eq!(finding_and_audit(&env, finding).await, (0, 1));
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_retry_previews_the_count_then_retries_each_attempt_once_confirmed() {
    let env = TestEnv::with_settings(with_operators).await;
    let ids = [
        attempt_in_review(&env, "ord_review").await,
        attempt_in_review(&env, "ord_review").await,
    ];
    let untouched = attempt(&env, "ord_other").await;
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let csrf: &'static str = console.csrf(&ada).await.leak();
    let form = |confirm: bool| {
        let mut form = vec![
            ("csrf", csrf),
            ("action", "retry"),
            ("status", "needs_review"),
            ("order_id", "ord_review"),
            ("reason", "gateway incident INC-7 is over"),
        ];
        if confirm {
            form.extend([("confirm", "yes"), ("max", "2")]);
        }
        form
    };

    // a confirmation that does not carry the previewed attempts is refused
    let (status, page) = console.post(&ada, "/console/bulk", &form(true)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{page}");
    let (status, page) = console.post(&ada, "/console/bulk", &form(false)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains(r#"id="bulk-matched" data-count="2""#),
        "{page}"
    );
    for id in ids {
        assert_eq!(
            env.status(id).await,
            "needs_review",
            "a preview changes nothing"
        );
    }

    for id in ids {
        assert!(page.contains(&id.to_string()), "the preview lists {id}");
    }

    let confirmation = hidden_fields(&page, "confirm-form");
    let confirmation: Vec<(&str, &str)> = confirmation
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let (status, page) = console.post(&ada, "/console/bulk", &confirmation).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    for id in ids {
        assert_eq!(env.status(id).await, "pending");
    }
    assert_eq!(env.status(untouched).await, "pending");
    let transitions = env.all_transitions().await;
    let by_ada = transitions.iter().filter(|t| t.actor == "operator:ada");
    assert_eq!(by_ada.count(), 2, "each attempt retried once, as ada");
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_takes_a_named_operators_token_and_a_viewers_only_reads() {
    let (env, id, console) = one_in_review().await;
    let api = &console.api;
    let resolve_path = format!("/api/attempts/{id}/resolve");
    let resolve = |token| {
        api.post(
            &resolve_path,
            Some(token),
            json!({"as": "retry", "reason": "the gateway was down; send again"}),
        )
    };

    let (status, _) = api.get("/api/attempts", Some(VIEWER_TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = resolve(VIEWER_TOKEN).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["error"]["type"], "forbidden");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("viewer"));
    assert_eq!(env.status(id).await, "needs_review");
    let (status, _) = api.get("/api/attempts", Some("oc_nobody")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, _) = resolve(OPERATOR_TOKEN).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(env.status(id).await, "pending");
    let history = env.history(id).await;
    let by_ada = history.iter().filter(|t| t.actor == "operator:ada");
    assert_eq!(by_ada.count(), 1, "recorded as the named operator");
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_console_page_shows_a_configured_secret() {
    let (env, id, console) = one_in_review().await;
    env.publish_raw(Some("broken-1"), b"{not json").await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    // the dead letter arrives when intake runs; the page lists what there is either way
    let mut pages = vec![
        "/console/".to_owned(),
        "/console/attempts".to_owned(),
        format!("/console/attempts?customer_id=cus_42"),
        format!("/console/attempts/{id}"),
        "/console/review".to_owned(),
        "/console/dead-letters".to_owned(),
        "/console/sweeps".to_owned(),
        "/console/webhooks".to_owned(),
        "/console/bulk".to_owned(),
        "/console/audit".to_owned(),
        "/console/login".to_owned(),
        "/console/no-such-page".to_owned(),
    ];
    pages.push(format!("/console/attempts/{}", Uuid::new_v4()));
    let secrets = [
        OPERATOR_TOKEN.to_owned(),
        VIEWER_TOKEN.to_owned(),
        ADMIN_TOKEN.to_owned(),
        GATEWAY_KEY.to_owned(),
        token_sha256(OPERATOR_TOKEN),
        env.settings.database_url.clone(),
    ];
    for path in &pages {
        let (status, page) = console.get(Some(&ada), path).await;
        assert!(
            status.is_success() || status.is_client_error(),
            "{path}: {status}"
        );
        for secret in &secrets {
            assert!(!page.contains(secret.as_str()), "{path} shows a secret");
        }
    }
    // nor does the sign-in page after a wrong token (it is not echoed back)
    let wrong = console
        .sign_in("oc_typed-by-mistake-0123")
        .await
        .text()
        .await
        .unwrap();
    assert!(!wrong.contains("oc_typed-by-mistake-0123"));
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_corrected_in_the_console_is_replayed_and_audited() {
    let env = TestEnv::with_settings(with_operators).await;
    let attempt = Uuid::new_v4();
    let intake = env.intake().await;
    let sequence = env
        .dead_letter_invalid(&intake, "m-console-replay", attempt)
        .await;
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;

    let (status, page) = console
        .get(Some(&ada), &format!("/console/dead-letters/{sequence}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains(r#"id="dead-letter-body""#) && page.contains("EURO"));
    let csrf = csrf_of(&page);
    let corrected = serde_json::to_string(&command(attempt, json!({"currency": "EUR"}))).unwrap();
    let path = format!("/console/dead-letters/{sequence}/replay");
    let form = [
        ("csrf", csrf.as_str()),
        ("body", corrected.as_str()),
        ("reason", "currency typo fixed"),
        ("confirm", "yes"),
    ];
    let (status, page) = console.post(&ada, &path, &form).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains(r#"id="replay-result""#), "{page}");

    // intake records the corrected command: the attempt exists, in EUR
    intake
        .process_batch(std::time::Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(env.attempt(attempt).await.currency, "EUR");
    let audit = env.audit_entries().await;
    let replay = audit.iter().filter(|e| {
        e.dlq_sequence == Some(sequence as i64)
            && e.actor == "operator:ada"
            && e.via == "console"
            && e.reason.as_deref() == Some("currency typo fixed")
    });
    assert_eq!(replay.count(), 1);
    console.stop().await;
}

/// What the service logs while a test runs, as text: the error a console page leaves out
/// must be here.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

/// While it lives, the current thread's log lines go to a [`Logs`].
struct Capture {
    _default: tracing::subscriber::DefaultGuard,
    /// Registered beside the capturing subscriber and kept alive with it. With only one
    /// dispatcher registered, tracing-core decides whether a callsite is ever enabled by the
    /// default of whichever thread reaches it first; in a binary of parallel tests that is
    /// another test's thread, which logs nowhere, and the line would never reach this one.
    /// With two, every callsite asks each thread's own default.
    _second: tracing::Dispatch,
}

impl Logs {
    /// Makes these logs the current thread's subscriber's output until the [`Capture`]
    /// drops (a current-thread runtime keeps the service's tasks on this thread).
    fn capture(&self) -> Capture {
        let second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
        let subscriber = tracing_subscriber::fmt()
            .with_writer(self.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        Capture {
            _default: tracing::subscriber::set_default(subscriber),
            _second: second,
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

#[tokio::test]
async fn a_console_failure_shows_a_request_id_and_leaves_database_and_nats_errors_to_the_log() {
    let logs = Logs::default();
    let _capture = logs.capture();
    let env = TestEnv::with_settings(with_operators).await;
    let attempt = Uuid::new_v4();
    let intake = env.intake().await;
    let sequence = env
        .dead_letter_invalid(&intake, "m-console-failure", attempt)
        .await;
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let csrf = console.csrf(&ada).await;
    // What each failure below is caused by, none of which a browser may be shown.
    let leaks = [
        "does not exist",
        "gateway_calls",
        "operator_audit",
        "reconciliation_findings",
        "consumer",
        "error returned from",
        "SQLSTATE",
    ];
    let request = |request: RequestBuilder| {
        let request = request.header(COOKIE, &ada.cookie);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            let id = response
                .headers()
                .get("x-request-id")
                .map(|v| v.to_str().unwrap().to_owned());
            (status, id, response.text().await.unwrap())
        }
    };

    // the overview: a table the charts read is gone, and the intake consumer whose lag it shows
    env.rename_table("gateway_calls", "gateway_calls_moved")
        .await;
    crate::support::commands_stream(&env.broker)
        .await
        .delete_consumer(&env.settings.intake.consumer)
        .await
        .unwrap();
    // a dead letter replayed once the audit trail is gone; the findings without their table
    let corrected = serde_json::to_string(&command(attempt, json!({"currency": "EUR"}))).unwrap();
    let replay = console
        .http()
        .post(console.url(&format!("/console/dead-letters/{sequence}/replay")))
        .form(&[
            ("csrf", csrf.as_str()),
            ("body", corrected.as_str()),
            ("reason", "currency typo fixed"),
            ("confirm", "yes"),
        ]);
    let overview = console.http().get(console.url("/console/"));
    let findings = console.http().get(console.url("/console/findings"));

    let (status, overview_id, page) = request(overview).await;
    leaves_out(&leaks, "the overview", &page);
    assert_eq!(
        status,
        StatusCode::OK,
        "the sections that could be read are shown"
    );
    let overview_id = overview_id.expect("every console answer names its request");
    assert!(
        page.contains(&overview_id),
        "the page names its request id: {page}"
    );

    env.rename_table("operator_audit", "operator_audit_moved")
        .await;
    env.rename_table("reconciliation_findings", "reconciliation_findings_moved")
        .await;
    let (status, replay_id, page) = request(replay).await;
    leaves_out(&leaks, "the replay", &page);
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{page}");
    let replay_id = replay_id.expect("every console answer names its request");
    assert!(page.contains(&replay_id), "{page}");
    assert!(
        page.contains("was replayed"),
        "the page says the dead letter was published, so nobody replays it again: {page}"
    );

    let (status, findings_id, page) = request(findings).await;
    leaves_out(&leaks, "the findings", &page);
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{page}");
    let findings_id = findings_id.expect("every console answer names its request");
    assert!(page.contains(&findings_id), "{page}");

    // each request's error is in the log, under its id
    let logged = logs.text();
    for (id, cause) in [
        (&overview_id, "gateway_calls"),
        (&overview_id, "consumer"),
        (&replay_id, "operator_audit"),
        (&findings_id, "reconciliation_findings"),
    ] {
        assert!(
            logged
                .lines()
                .any(|line| line.contains(id.as_str()) && line.contains(cause)),
            "no log line names request {id} and {cause}: {logged}"
        );
    }
    console.stop().await;
}

/// Fails when `page` shows any of `leaks` (what caused the failure behind it).
fn leaves_out(leaks: &[&str], what: &str, page: &str) {
    for leak in leaks {
        assert!(
            !page.contains(leak),
            "{what}: the page shows the error text {leak:?} to the browser: {}",
            page.split("<main").nth(1).unwrap_or(page)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recheck_now_settles_an_unknown_attempt_the_gateway_charged_and_audits_it() {
    use mock_gateway::payment_methods as pm;
    let mut h = crate::support::Harness::new().await;
    let command = h.seed(pm::FAULT_ERROR_AFTER).await;
    h.executor().run_once().await.unwrap();
    let id = command.payment_attempt_id;
    assert_eq!(h.attempt(id).await.status, "unknown");
    let reconciler = h.reconciler();
    let admin = h.serve_admin(None, Some(reconciler)).await;
    let addr = admin.addr;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // an open console: the first page starts a session and carries its CSRF token
    let response = http
        .get(format!("http://{addr}/console/attempts/{id}"))
        .send()
        .await
        .unwrap();
    let cookie = session_cookie(&response).expect("an open console starts a session");
    let page = response.text().await.unwrap();
    assert!(page.contains(r#"id="recheck-form""#), "{page}");
    let response = http
        .post(format!("http://{addr}/console/attempts/{id}/recheck"))
        .header(COOKIE, &cookie)
        .form(&[
            ("csrf", csrf_of(&page).as_str()),
            ("reason", "customer says charged"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let page = response.text().await.unwrap();
    assert!(page.contains(r#"id="recheck-result""#), "{page}");

    let row = h.attempt(id).await;
    assert_eq!(
        row.status, "succeeded",
        "the charge the gateway made is adopted"
    );
    let audit = h.audit_entries_about(id).await;
    let rechecks = audit
        .iter()
        .filter(|e| e.actor == "console" && e.via == "console" && e.action == "recheck");
    assert_eq!(rechecks.count(), 1);
    admin.stop().await;
}

/// The rows of `console_sessions` (every instance's sessions).
async fn sessions(env: &TestEnv) -> usize {
    env.console_sessions().await.len()
}

/// The value of a `onecharge_console=<id>.<tag>` cookie.
fn cookie_id(browser: &Browser) -> &str {
    browser.cookie.split_once('=').unwrap().1
}

/// The session id of a `onecharge_console=<id>.<tag>` cookie: what the database keeps the
/// SHA-256 of.
fn session_id(browser: &Browser) -> &str {
    cookie_id(browser).split_once('.').unwrap().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_from_one_instance_acts_at_another_and_signing_out_there_ends_it_everywhere() {
    let (env, id, a) = one_in_review().await;
    let b = Console::start(&env).await;
    let ada = a.browser(OPERATOR_TOKEN).await;

    // the database keeps the id's SHA-256 and the actor, never the id or a token
    let stored = env.console_sessions().await;
    assert_eq!(
        (stored[0].id_sha256_hex.clone(), stored[0].actor.clone()),
        (token_sha256(session_id(&ada)), "operator:ada".to_owned())
    );
    let stored_text = env
        .sessions_holding_any(&[session_id(&ada), &token_sha256(OPERATOR_TOKEN)])
        .await;
    assert_eq!(
        stored_text, 0,
        "neither the cookie's id nor the token's hash is stored"
    );

    // the cookie A set works at B, and a form with the CSRF token of A's page is accepted at B
    let (status, page) = b.get(Some(&ada), "/console/review").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains(r#"data-actor="operator:ada""#), "{page}");
    let csrf_from_a = a.csrf(&ada).await;
    let (status, page) = b
        .post(
            &ada,
            &format!("/console/attempts/{id}/resolve"),
            &[
                ("as", "declined"),
                ("reason", "no charge at the gateway for this key"),
                ("confirm", "yes"),
                ("csrf", &csrf_from_a),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(env.status(id).await, "declined");

    // signing out at B ends the session at A too
    let (status, _) = b
        .post(&ada, "/console/logout", &[("csrf", &csrf_from_a)])
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(sessions(&env).await, 0);
    let (status, _) = a.get(Some(&ada), "/console/").await;
    assert_eq!(
        status,
        StatusCode::SEE_OTHER,
        "A sends the old cookie to sign in"
    );
    let (status, page) = a
        .post(&ada, "/console/logout", &[("csrf", &csrf_from_a)])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_survives_a_restart_of_the_admin_instance() {
    let (env, id, before) = one_in_review().await;
    let ada = before.browser(OPERATOR_TOKEN).await;
    let csrf = before.csrf(&ada).await;
    before.stop().await;

    let after = Console::start(&env).await;
    let (status, page) = after.get(Some(&ada), "/console/").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(
        csrf_of(&page),
        csrf,
        "the same session, CSRF token included"
    );
    let (status, page) = after
        .post(
            &ada,
            &format!("/console/attempts/{id}/resolve"),
            &[
                ("as", "retry"),
                ("reason", "the gateway was down; send again"),
                ("confirm", "yes"),
                ("csrf", &csrf),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(env.status(id).await, "pending");
    after.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_is_refused_and_deleted() {
    let env = TestEnv::with_settings(with_operators).await;
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let vic = console.browser(VIEWER_TOKEN).await;
    let csrf = console.csrf(&ada).await;
    let expire = |actor: &'static str| env.expire_sessions_of(actor);
    assert_eq!(expire("operator:ada").await, 1);
    assert_eq!(expire("operator:vic").await, 1);

    // presented, the expired session is refused, for pages and forms, and deleted
    let (status, _) = console.get(Some(&ada), "/console/").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, page) = console
        .post(&ada, "/console/logout", &[("csrf", &csrf)])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("sign in again"), "{page}");
    assert_eq!(env.sessions_of("operator:ada").await, 0);

    // never presented, vic's is deleted by the next sign-in (anyone's)
    assert_eq!(sessions(&env).await, 1);
    let ada = console.browser(OPERATOR_TOKEN).await;
    assert_eq!(env.sessions_of("operator:vic").await, 0);
    let (status, _) = console.get(Some(&vic), "/console/").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, _) = console.get(Some(&ada), "/console/").await;
    assert_eq!(status, StatusCode::OK);
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_removed_from_the_configuration_is_refused_through_an_old_session() {
    let (env, id, configured) = one_in_review().await;
    let ada = configured.browser(OPERATOR_TOKEN).await;
    let vic = configured.browser(VIEWER_TOKEN).await;
    let ada_csrf = configured.csrf(&ada).await;
    let vic_csrf = configured.csrf(&vic).await;

    // the next configuration: ada's entry deleted, vic made an operator
    let mut settings = env.settings.clone();
    settings.operators.retain(|o| o.name != "ada");
    for o in &mut settings.operators {
        o.role = onecharge::config::OperatorRole::Operator;
    }
    let changed = Console::with_settings(&settings).await;

    let (status, _) = changed.get(Some(&ada), "/console/").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "ada is sent to sign in");
    let (status, page) = changed
        .post(
            &ada,
            &format!("/console/attempts/{id}/resolve"),
            &[
                ("as", "declined"),
                ("reason", "no charge"),
                ("confirm", "yes"),
                ("csrf", &ada_csrf),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert_eq!(env.status(id).await, "needs_review");
    assert_eq!(
        env.sessions_of("operator:ada").await,
        0,
        "the session is deleted, so no instance honours it any more"
    );
    let (status, _) = configured.get(Some(&ada), "/console/").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let again = changed.sign_in(OPERATOR_TOKEN).await;
    assert_eq!(again.status(), StatusCode::UNAUTHORIZED);

    // vic's live session takes the new role at once
    let (status, page) = changed.get(Some(&vic), "/console/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"data-role="operator""#), "{page}");
    let (status, page) = changed
        .post(
            &vic,
            &format!("/console/attempts/{id}/resolve"),
            &[
                ("as", "retry"),
                ("reason", "the gateway was down; send again"),
                ("confirm", "yes"),
                ("csrf", &vic_csrf),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(env.status(id).await, "pending");
    configured.stop().await;
    changed.stop().await;
}

/// A token that leaked is replaced under the same name (the runbook's answer to a leak): a
/// session signed in with the old token must end with it, on an instance restarted with the
/// new configuration as on any other, while the new token signs in and the other
/// operators' sessions go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_an_operators_token_ends_the_sessions_signed_in_with_the_old_one() {
    let (env, _id, configured) = one_in_review().await;
    let ada = configured.browser(OPERATOR_TOKEN).await;
    let vic = configured.browser(VIEWER_TOKEN).await;

    // the next configuration: ada's token replaced, her name and role unchanged
    const NEW_ADA_TOKEN: &str = "oc_ada_rotated_token_0123456789";
    let mut settings = env.settings.clone();
    for o in &mut settings.operators {
        if o.name == "ada" {
            o.token_sha256 = onecharge::config::token_sha256(NEW_ADA_TOKEN);
        }
    }
    let rotated = Console::with_settings(&settings).await;

    let (status, _) = rotated.get(Some(&ada), "/console/").await;
    assert_eq!(
        status,
        StatusCode::SEE_OTHER,
        "the session signed in with ada's old token is sent to sign in"
    );
    assert_eq!(
        env.sessions_of("operator:ada").await,
        0,
        "and deleted, so no instance honours it any more"
    );
    let (status, _) = rotated.get(Some(&vic), "/console/").await;
    assert_eq!(status, StatusCode::OK, "vic's token did not change");
    let again = rotated.sign_in(OPERATOR_TOKEN).await;
    assert_eq!(
        again.status(),
        StatusCode::UNAUTHORIZED,
        "the old token signs nobody in"
    );
    let new_ada = rotated.browser(NEW_ADA_TOKEN).await;
    let (status, page) = rotated.get(Some(&new_ada), "/console/").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    configured.stop().await;
    rotated.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_ins_past_the_bound_end_that_operators_oldest_sessions_only() {
    use onecharge::http::console::session::MAX_SESSIONS_PER_ACTOR;
    let env = TestEnv::with_settings(with_operators).await;
    let console = Console::start(&env).await;
    let vic = console.browser(VIEWER_TOKEN).await;
    let first = console.browser(OPERATOR_TOKEN).await;
    let mut last = None;
    for _ in 0..MAX_SESSIONS_PER_ACTOR {
        last = Some(console.browser(OPERATOR_TOKEN).await);
    }
    assert_eq!(
        env.sessions_of("operator:ada").await,
        MAX_SESSIONS_PER_ACTOR
    );
    let (status, _) = console.get(Some(&first), "/console/").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "ada's oldest session ended");
    for browser in [last.as_ref().unwrap(), &vic] {
        let (status, _) = console.get(Some(browser), "/console/").await;
        assert_eq!(
            status,
            StatusCode::OK,
            "the newest, and other operators', live on"
        );
    }
    console.stop().await;
}

/// The `data-attempt-id`s of a review page's rows, in the page's order.
fn review_rows(page: &str) -> Vec<Uuid> {
    let marker = r#"data-testid="review-row" data-attempt-id=""#;
    page.match_indices(marker)
        .map(|(at, _)| {
            page[at + marker.len()..at + marker.len() + 36]
                .parse()
                .unwrap()
        })
        .collect()
}

/// The `href` of the element with this `id`, if the page has it.
fn link(page: &str, id: &str) -> Option<String> {
    let marker = format!(r#"id="{id}" href=""#);
    let start = page.find(&marker)? + marker.len();
    Some(page[start..start + page[start..].find('"')?].to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_the_review_queues_pages_shows_each_attempt_in_review_once_oldest_first() {
    let env = TestEnv::with_settings(with_operators).await;
    let mut ids = Vec::new();
    for _ in 0..120 {
        ids.push(attempt_in_review(&env, "ord_queue").await);
    }
    let not_in_review = attempt(&env, "ord_queue").await;
    // Recorded in groups of 7 within the same microsecond, the groups in the opposite order
    // of their ids: a page boundary falls among equal times, where only the id can order them.
    ids.sort_unstable_by(|a, b| b.cmp(a));
    for (n, id) in ids.iter().enumerate() {
        env.set_attempt(
            *id,
            &format!(
                "created_at = timestamptz '2026-11-30 12:00:00+00' + interval '1 second' * {}",
                n / 7
            ),
        )
        .await;
    }
    let mut oldest_first: Vec<(usize, Uuid)> =
        ids.iter().enumerate().map(|(n, id)| (n / 7, *id)).collect();
    oldest_first.sort_unstable();
    let oldest_first: Vec<Uuid> = oldest_first.into_iter().map(|(_, id)| id).collect();

    let console = Console::start(&env).await;
    let vic = console.browser(VIEWER_TOKEN).await;
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut next = Some("/console/review".to_owned());
    while let Some(path) = next {
        let (status, page) = console.get(Some(&vic), &path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {page}");
        assert!(
            page.contains(r#"id="review-count" data-count="120""#),
            "every page counts the whole queue: {page}"
        );
        let rows = review_rows(&page);
        assert!(rows.len() <= 50, "{path} holds {} rows", rows.len());
        seen.extend(rows);
        pages += 1;
        next = link(&page, "review-next-page");
    }
    assert!(pages >= 3, "120 attempts take three pages, not {pages}");
    assert!(!seen.contains(&not_in_review));
    assert_eq!(seen, oldest_first, "each attempt once, oldest first");

    let (status, page) = console
        .get(Some(&vic), "/console/review?after=not-a-cursor")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{page}");
    console.stop().await;
}

// ---------------------------------------------------------------------------------------
// Issue 23: DNS rebinding, login CSRF, the open console's sessions, the bulk confirmation

/// Every `name=value` the response's `Set-Cookie` headers set, as one `Cookie` header value
/// (what a browser sends back), or `None` when it sets none.
fn cookies_set(response: &reqwest::Response) -> Option<String> {
    let pairs: Vec<&str> = response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .map(str::trim)
        .collect();
    (!pairs.is_empty()).then(|| pairs.join("; "))
}

/// The hidden fields of the form with this `id`, as the page carries them (the form a
/// browser would post by pressing its button).
fn hidden_fields(page: &str, form_id: &str) -> Vec<(String, String)> {
    let start = page
        .find(&format!(r#"<form id="{form_id}""#))
        .unwrap_or_else(|| panic!("a form #{form_id} in {page}"));
    let form = &page[start..start + page[start..].find("</form>").unwrap()];
    let marker = r#"<input type="hidden" name=""#;
    form.match_indices(marker)
        .map(|(at, _)| {
            let rest = &form[at + marker.len()..];
            let name = &rest[..rest.find('"').unwrap()];
            let value_at = rest.find(r#"value=""#).unwrap() + 7;
            let value = &rest[value_at..value_at + rest[value_at..].find('"').unwrap()];
            let value = value
                .replace("&quot;", "\"")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&#39;", "'")
                .replace("&amp;", "&");
            (name.to_owned(), value)
        })
        .collect()
}

/// How many messages the test's command stream holds (a replay adds one).
async fn commands_published(env: &TestEnv) -> u64 {
    let mut stream = crate::support::commands_stream(&env.broker).await;
    stream.info().await.unwrap().state.messages
}

/// The probe of issue 23: a page the operator opens at `attacker.example`, whose name is
/// then rebound to the admin listener's address, sends every request with that `Host`. On
/// an open admin (no token, no operators, loopback) it got a 200, a session cookie and a
/// CSRF token, resolved attempts and could replay a dead letter. Every route must now
/// answer 4xx, hand out nothing, and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rebinding_probe_gets_a_4xx_on_every_route_and_changes_nothing() {
    use reqwest::header::HOST;
    let env = TestEnv::new().await;
    let id = attempt_in_review(&env, "ord_rebound").await;
    let intake = env.intake().await;
    let sequence = env
        .dead_letter_invalid(&intake, "m-rebound", Uuid::new_v4())
        .await;
    let commands_before = commands_published(&env).await;
    let console = Console::start(&env).await;
    let port = console.url("").rsplit(':').next().unwrap().to_owned();
    let corrected = serde_json::to_string(&command(Uuid::new_v4(), json!({}))).unwrap();

    for host in [
        "attacker.example".to_owned(),
        format!("attacker.example:{port}"),
    ] {
        // what the page reads first: a console page, for a cookie and a CSRF token
        let first = console
            .http()
            .get(console.url(&format!("/console/attempts/{id}")))
            .header(HOST, &host)
            .send()
            .await
            .unwrap();
        let cookie = cookies_set(&first);
        let csrf = {
            let page = first.text().await.unwrap();
            if page.contains(r#"name="csrf" value=""#) {
                csrf_of(&page)
            } else {
                String::new()
            }
        };
        let reads = [
            "/healthz",
            "/readyz",
            "/metrics",
            "/api/attempts?status=needs_review",
            "/api/stats",
            "/api/audit",
            "/no-such-path",
            "/console",
            "/console/",
            "/console/style.css",
            "/console/login",
            "/console/review",
            "/console/bulk",
            "/console/dead-letters",
        ];
        let mut requests: Vec<(String, RequestBuilder)> = reads
            .iter()
            .map(|path| (format!("GET {path}"), console.http().get(console.url(path))))
            .collect();
        requests.extend([
            (
                format!("GET /api/attempts/{id}"),
                console.http().get(console.url(&format!("/api/attempts/{id}"))),
            ),
            (
                format!("GET /console/dead-letters/{sequence}"),
                console
                    .http()
                    .get(console.url(&format!("/console/dead-letters/{sequence}"))),
            ),
            (
                "POST /api/attempts/{id}/resolve".to_owned(),
                console
                    .http()
                    .post(console.url(&format!("/api/attempts/{id}/resolve")))
                    .json(&json!({"as": "declined", "reason": "rebound"})),
            ),
            (
                "POST /api/attempts/{id}/recheck".to_owned(),
                console
                    .http()
                    .post(console.url(&format!("/api/attempts/{id}/recheck")))
                    .body("{}"),
            ),
            (
                "POST /api/attempts/bulk".to_owned(),
                console.http().post(console.url("/api/attempts/bulk")).json(
                    &json!({"action": "retry", "filter": {"order_id": "ord_rebound"}, "reason": "rebound"}),
                ),
            ),
            (
                "POST /console/login".to_owned(),
                console
                    .http()
                    .post(console.url("/console/login"))
                    .form(&[("token", "anything"), ("csrf", &csrf)]),
            ),
            (
                "POST /console/logout".to_owned(),
                console
                    .http()
                    .post(console.url("/console/logout"))
                    .form(&[("csrf", &csrf)]),
            ),
            (
                "POST /console/attempts/{id}/resolve".to_owned(),
                console
                    .http()
                    .post(console.url(&format!("/console/attempts/{id}/resolve")))
                    .form(&[
                        ("as", "declined"),
                        ("reason", "rebound"),
                        ("confirm", "yes"),
                        ("csrf", &csrf),
                    ]),
            ),
            (
                "POST /console/dead-letters/{sequence}/replay".to_owned(),
                console
                    .http()
                    .post(console.url(&format!("/console/dead-letters/{sequence}/replay")))
                    .form(&[
                        ("body", corrected.as_str()),
                        ("reason", "rebound"),
                        ("confirm", "yes"),
                        ("csrf", &csrf),
                    ]),
            ),
            (
                "POST /console/bulk".to_owned(),
                console.http().post(console.url("/console/bulk")).form(&[
                    ("action", "retry"),
                    ("order_id", "ord_rebound"),
                    ("reason", "rebound"),
                    ("confirm", "yes"),
                    ("max", "1"),
                    ("csrf", &csrf),
                ]),
            ),
        ]);
        for (what, request) in requests {
            let request = match &cookie {
                Some(cookie) => request.header(COOKIE, cookie),
                None => request,
            };
            let response = request.header(HOST, &host).send().await.unwrap();
            let status = response.status();
            let sets_cookie = response.headers().contains_key(SET_COOKIE);
            let page = response.text().await.unwrap();
            assert!(
                status.is_client_error(),
                "{what} with Host {host} answered {status}: {page}"
            );
            assert!(!sets_cookie, "{what} with Host {host} set a cookie");
            assert!(
                !page.contains(r#"name="csrf""#),
                "{what} with Host {host} handed out a CSRF token"
            );
        }
    }

    assert_eq!(env.status(id).await, "needs_review");
    assert_eq!(sessions(&env).await, 0, "no session was started");
    assert!(env.audit_entries().await.is_empty());
    assert_eq!(
        commands_published(&env).await,
        commands_before,
        "nothing was replayed"
    );
    console.stop().await;
}

/// A browser's page from another origin may read nothing it could use (the responses are
/// its browser's to withhold), but a form or a `fetch` it sends still arrives: any request
/// that changes something is refused when its `Origin` is another one, or when the browser
/// says it is `cross-site`. A script (curl, no `Origin`) is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_changing_request_from_another_origin_is_refused_and_a_script_without_one_is_not() {
    let env = TestEnv::new().await;
    let id = attempt_in_review(&env, "ord_cross").await;
    let console = Console::start(&env).await;
    let own_origin = console.url("");
    let resolve_path = format!("/api/attempts/{id}/resolve");
    let declined = json!({"as": "declined", "reason": "no charge at the gateway"});
    for (header, value) in [
        ("origin", "http://attacker.example"),
        ("origin", "null"),
        ("origin", "http://localhost:1"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let response = console
            .http()
            .post(console.url(&resolve_path))
            .header(header, value)
            .json(&declined)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::FORBIDDEN,
            "{header}: {value} is refused"
        );
        assert_eq!(env.status(id).await, "needs_review");
    }
    // a no-cors `fetch` needs no JSON content type to reach the recheck endpoint
    let response = console
        .http()
        .post(console.url(&format!("/api/attempts/{id}/recheck")))
        .header("origin", "http://attacker.example")
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);

    // the open console's own form, posted from another origin, is refused too
    let first = console
        .http()
        .get(console.url(&format!("/console/attempts/{id}")))
        .send()
        .await
        .unwrap();
    let cookie = cookies_set(&first).expect("the open console's cookie");
    let csrf = csrf_of(&first.text().await.unwrap());
    let form = [
        ("as", "declined"),
        ("reason", "no charge at the gateway"),
        ("confirm", "yes"),
        ("csrf", csrf.as_str()),
    ];
    let response = console
        .http()
        .post(console.url(&format!("/console/attempts/{id}/resolve")))
        .header(COOKIE, &cookie)
        .header("origin", "http://attacker.example")
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(env.status(id).await, "needs_review");

    // reads from another origin are answered (the browser keeps them from the page)
    let response = console
        .http()
        .get(console.url("/api/stats"))
        .header("origin", "http://attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // the console's own page posts with its own origin, and a script with none
    let response = console
        .http()
        .post(console.url(&format!("/console/attempts/{id}/resolve")))
        .header(COOKIE, &cookie)
        .header("origin", &own_origin)
        .header("sec-fetch-site", "same-origin")
        .form(&[
            ("as", "retry"),
            ("reason", "the gateway was down"),
            ("confirm", "yes"),
            ("csrf", csrf.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(env.status(id).await, "pending");
    let other = attempt_in_review(&env, "ord_cross").await;
    let (status, body) = console
        .api
        .post(&format!("/api/attempts/{other}/resolve"), None, declined)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(env.status(other).await, "declined");
    console.stop().await;
}

/// Login CSRF: another site's page could post the sign-in form with a token of the
/// attacker's own and sign the operator's browser in as someone else. The sign-in form now
/// carries a token bound to a cookie of the sign-in page, which another site can neither
/// read nor make the browser send (SameSite=Strict).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_needs_the_sign_in_pages_own_token_so_another_site_cannot_sign_a_browser_in() {
    let env = TestEnv::with_settings(with_operators).await;
    let console = Console::start(&env).await;
    let sign_in = |cookie: Option<String>, form: Vec<(&'static str, String)>| {
        let request = console
            .http()
            .post(console.url("/console/login"))
            .form(&form);
        let request = match cookie {
            Some(cookie) => request.header(COOKIE, cookie),
            None => request,
        };
        request.send()
    };
    let token = ("token", OPERATOR_TOKEN.to_owned());

    // a cross-site form: no cookie of ours, no token of the sign-in page
    let response = sign_in(None, vec![token.clone()]).await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(cookies_set(&response).is_none(), "no session cookie");
    assert_eq!(sessions(&env).await, 0);

    // the sign-in page's token with another page's cookie (or none) is refused too
    let page = |_: ()| async {
        let response = console
            .http()
            .get(console.url("/console/login"))
            .send()
            .await
            .unwrap();
        let cookie = cookies_set(&response).expect("the sign-in page sets its cookie");
        (cookie, csrf_of(&response.text().await.unwrap()))
    };
    let (cookie_a, csrf_a) = page(()).await;
    let (cookie_b, csrf_b) = page(()).await;
    assert_ne!(csrf_a, csrf_b);
    let response = sign_in(None, vec![token.clone(), ("csrf", csrf_a.clone())])
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let response = sign_in(
        Some(cookie_b),
        vec![token.clone(), ("csrf", csrf_a.clone())],
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(sessions(&env).await, 0);

    // the page's own pair signs in
    let response = sign_in(Some(cookie_a), vec![token, ("csrf", csrf_a)])
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(sessions(&env).await, 1);
    console.stop().await;
}

/// An open console (no token, no operators, loopback) has nobody to tell apart: it used to
/// write a session row for every request that came without a cookie, under one lock for the
/// whole database, and past 100 evicted the oldest. Now it keeps no session in the database
/// at all: 500 browsers arriving at once write nothing and wait on no lock, and each can
/// still post its own forms (and no other's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_console_writes_no_session_row_and_takes_no_lock_however_many_browsers_arrive() {
    let env = TestEnv::new().await;
    let console = Console::start(&env).await;
    // Whoever else holds the sessions' lock (a sign-in elsewhere, a stuck one) must not
    // stall the open console.
    let mut holder = env.store.pool().acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(hashtextextended('onecharge.console_sessions', 0))")
        .execute(&mut *holder)
        .await
        .unwrap();
    let mut browsers = Vec::new();
    for i in 0..500 {
        let response = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            console.http().get(console.url("/console/bulk")).send(),
        )
        .await
        .unwrap_or_else(|_| panic!("cookie-less GET {i} waited on the sessions' lock"))
        .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "GET {i}");
        let cookie = cookies_set(&response).expect("a cookie for the page's forms");
        let csrf = csrf_of(&response.text().await.unwrap());
        browsers.push((cookie, csrf));
    }
    assert_eq!(sessions(&env).await, 0, "no session row written");

    // each browser's form is its own: accepted with its own cookie, refused with another's
    let preview = |(cookie, csrf): &(String, String)| {
        console
            .http()
            .post(console.url("/console/bulk"))
            .header(COOKIE, cookie)
            .form(&[
                ("action", "retry"),
                ("status", "needs_review"),
                ("reason", "looking"),
                ("csrf", csrf.as_str()),
            ])
            .send()
    };
    let response = preview(&browsers[7]).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let crossed = (browsers[7].0.clone(), browsers[8].1.clone());
    let response = preview(&crossed).await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(sessions(&env).await, 0);
    drop(holder);
    console.stop().await;
}

/// A bulk confirmation used to re-run the filter and act on whatever matched by then (up
/// to the previewed count): an attempt that entered review after the preview, and that the
/// operator never saw, could be retried in place of one settled meanwhile. The
/// confirmation now carries exactly the previewed attempts and acts on those alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_confirm_acts_on_exactly_the_previewed_attempts_never_one_that_matched_later() {
    let env = TestEnv::with_settings(with_operators).await;
    let settled_meanwhile = attempt_in_review(&env, "ord_bulk_exact").await;
    let previewed = attempt_in_review(&env, "ord_bulk_exact").await;
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let csrf = console.csrf(&ada).await;
    let (status, page) = console
        .post(
            &ada,
            "/console/bulk",
            &[
                ("csrf", csrf.as_str()),
                ("action", "retry"),
                ("status", "needs_review"),
                ("order_id", "ord_bulk_exact"),
                ("reason", "incident INC-9 is over"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains(r#"id="bulk-matched" data-count="2""#),
        "{page}"
    );
    let confirmation = hidden_fields(&page, "confirm-form");

    // between preview and confirm: one previewed attempt is settled elsewhere, and a new
    // one of the same order enters review
    let (status, body) = console
        .api
        .post(
            &format!("/api/attempts/{settled_meanwhile}/resolve"),
            Some(OPERATOR_TOKEN),
            json!({"as": "declined", "reason": "the customer cancelled"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let never_previewed = attempt_in_review(&env, "ord_bulk_exact").await;

    let form: Vec<(&str, &str)> = confirmation
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let (status, page) = console.post(&ada, "/console/bulk", &form).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(
        env.status(previewed).await,
        "pending",
        "the previewed one is retried"
    );
    assert_eq!(env.status(settled_meanwhile).await, "declined");
    assert_eq!(
        env.status(never_previewed).await,
        "needs_review",
        "an attempt the preview never showed is not acted on"
    );
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_findings_page_shows_the_earlier_findings_about_its_charge_and_what_became_of_them() {
    let (env, id, console) = one_in_review().await;
    let (refund, dispute) = env.plant_earlier_findings(id).await;
    let ada = console.browser(OPERATOR_TOKEN).await;

    let (status, list) = console.get(Some(&ada), "/console/findings").await;
    assert_eq!(status, StatusCode::OK, "{}", title_of(&list));
    assert!(
        list.contains(&format!(r#"href="/console/findings/{dispute}""#)),
        "the list links each finding to its page"
    );
    let (status, page) = console
        .get(Some(&ada), &format!("/console/findings/{dispute}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", title_of(&page));
    assert!(
        page.contains("dispute:open;refunded:500"),
        "its evidence: {page}"
    );
    assert!(
        page.contains(r#"id="finding-history""#)
            && page.contains(&format!(r#"data-finding-id="{refund}""#))
            && page.contains("partial refund agreed with the customer"),
        "the refund before it, and what was done about it: {page}"
    );

    // The confirmation shows the same history before anything is resolved.
    let csrf = console.csrf(&ada).await;
    let (status, confirm) = console
        .post(
            &ada,
            &format!("/console/findings/{dispute}/resolve"),
            &[("reason", "dispute answered"), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{}", title_of(&confirm));
    assert!(
        confirm.contains("partial refund agreed with the customer"),
        "{confirm}"
    );
    let (status, _) = console.get(Some(&ada), "/console/findings/999999").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_pending_attempt_asks_for_a_confirmation_then_expires_it_as_the_operator() {
    let env = TestEnv::with_settings(with_operators).await;
    let id = crate::support::api::attempt(&env, "ord_cancel").await;
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let path = format!("/console/attempts/{id}/cancel");

    // the pending attempt's page offers the cancel
    let (_, page) = console
        .get(Some(&ada), &format!("/console/attempts/{id}"))
        .await;
    assert!(page.contains(r#"id="cancel-form""#), "{page}");

    let csrf: &'static str = console.csrf(&ada).await.leak();
    let (status, page) = console
        .post(
            &ada,
            &path,
            &[("reason", "duplicate order"), ("csrf", csrf)],
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"id="confirm-submit""#), "{page}");
    assert_eq!(env.status(id).await, "pending", "not before confirming");

    let confirmed = [
        ("reason", "duplicate order"),
        ("confirm", "yes"),
        ("csrf", csrf),
    ];
    let (status, page) = console.post(&ada, &path, &confirmed).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains(r#"data-status="expired""#), "{page}");
    assert_eq!(env.status(id).await, "expired");
    assert_eq!(
        env.audit_count(|e| e.names(id)
            && e.actor == "operator:ada"
            && e.via == "console"
            && e.action == "cancel"
            && e.reason.as_deref() == Some("duplicate order"))
            .await,
        1
    );

    // a second cancel is refused with why, and changes nothing
    let (status, page) = console.post(&ada, &path, &confirmed).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(page.contains("it is expired"), "{page}");
    assert_eq!(env.events(id).await.len(), 1);
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_the_fleet_in_the_console_is_confirmed_then_shown_on_every_page_until_resumed() {
    let env = TestEnv::with_settings(with_operators).await;
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let vic = console.browser(VIEWER_TOKEN).await;
    let csrf: &'static str = console.csrf(&ada).await.leak();
    let pause = |confirm: &'static str| {
        vec![
            ("action", "pause"),
            ("reason", "gateway incident INC-9"),
            ("confirm", confirm),
            ("csrf", csrf),
        ]
    };

    let (status, page) = console.post(&ada, "/console/fleet", &pause("no")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"id="confirm-submit""#), "{page}");
    assert_eq!(env.rows_in("fleet_pauses").await, 0);

    let (status, page) = console.post(&ada, "/console/fleet", &pause("yes")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    for path in [
        "/console/",
        "/console/attempts",
        "/console/review",
        "/console/audit",
    ] {
        let (_, page) = console.get(Some(&vic), path).await;
        assert!(
            page.contains(r#"data-testid="fleet-paused" data-paused-by="operator:ada""#)
                && page.contains("gateway incident INC-9"),
            "{path}: {page}"
        );
    }

    let vic_csrf: &'static str = console.csrf(&vic).await.leak();
    let resume =
        |csrf: &'static str| vec![("action", "resume"), ("confirm", "yes"), ("csrf", csrf)];
    let (status, _) = console
        .post(&vic, "/console/fleet", &resume(vic_csrf))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a viewer cannot resume");
    let (status, page) = console.post(&ada, "/console/fleet", &resume(csrf)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let (_, page) = console.get(Some(&vic), "/console/").await;
    assert!(!page.contains("fleet-paused"), "{page}");
    assert_eq!(
        env.audit_count(|e| e.actor == "operator:ada"
            && e.via == "console"
            && ["fleet_pause", "fleet_resume"].contains(&e.action.as_str()))
            .await,
        2
    );
    console.stop().await;
}

/// The console pauses one scope in one currency beside another pause; the banner shows each
/// with its scope, and the fleet page resumes the one whose form was posted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_pauses_a_scope_in_a_currency_and_resumes_each_pause_by_its_own_form() {
    let env = TestEnv::with_settings(with_operators).await;
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let csrf: &'static str = console.csrf(&ada).await.leak();
    let pause = |scope: &'static str, currency: &'static str, reason: &'static str| {
        vec![
            ("action", "pause"),
            ("scope", scope),
            ("currency", currency),
            ("reason", reason),
            ("confirm", "yes"),
            ("csrf", csrf),
        ]
    };

    let (status, page) = console
        .post(
            &ada,
            "/console/fleet",
            &pause("charges", "isk", "lower case"),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{page}");
    let (status, page) = console
        .post(
            &ada,
            "/console/fleet",
            &pause("charges", "ISK", "ISK acquirer down"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains("charging in ISK paused by operator:ada"),
        "{page}"
    );
    let (status, page) = console
        .post(
            &ada,
            "/console/fleet",
            &pause("refunds", "", "refund API degraded"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let (status, page) = console
        .post(&ada, "/console/fleet", &pause("charges", "ISK", "again"))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{page}");

    let (_, page) = console.get(Some(&ada), "/console/attempts").await;
    assert!(
        page.contains(r#"data-scope="charges" data-currency="ISK""#)
            && page.contains("Charging in ISK paused across the fleet")
            && page.contains(r#"data-scope="refunds">"#)
            && page.contains("Refunds paused across the fleet"),
        "{page}"
    );
    let (_, page) = console.get(Some(&ada), "/console/fleet").await;
    assert_eq!(page.matches("fleet-resume-form").count(), 2, "{page}");

    let open = env.open_pauses().await;
    let of = |wanted: &str| open.iter().find(|(_, scope, _)| scope == wanted).unwrap().0;
    let (refunds, charges) = (of("refunds"), of("charges"));
    let id: &'static str = refunds.to_string().leak();
    let (status, page) = console
        .post(
            &ada,
            "/console/fleet",
            &[
                ("action", "resume"),
                ("id", id),
                ("confirm", "yes"),
                ("csrf", csrf),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("refunds resumed by operator:ada"), "{page}");
    assert!(!page.contains("Refunds paused across the fleet"), "{page}");
    assert_eq!(
        env.open_pauses().await,
        [(charges, "charges".to_owned(), Some("ISK".to_owned()))],
        "the other pause stays"
    );
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_offers_its_results_as_csv_and_a_viewer_downloads_them() {
    let env = TestEnv::with_settings(with_operators).await;
    let id = attempt(&env, "ord_export").await;
    attempt(&env, "ord_elsewhere").await;
    let console = Console::start(&env).await;
    let vic = console.browser(VIEWER_TOKEN).await;

    let (_, page) = console
        .get(Some(&vic), "/console/attempts?order_id=ord_export")
        .await;
    let link = "/console/attempts.csv?order_id=ord_export";
    assert!(page.contains(&format!(r#"href="{link}""#)), "{page}");
    let (status, csv) = console.get(Some(&vic), link).await;
    assert_eq!(status, StatusCode::OK, "{csv}");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2, "{csv}");
    assert!(lines[0].starts_with("payment_attempt_id,status,order_id"));
    assert!(
        lines[1].starts_with(&format!("{id},pending,ord_export,")),
        "{csv}"
    );
    console.stop().await;
}

/// Issue 37: an operator refunds a succeeded charge from its page — a confirmation first,
/// showing what is charged, refunded and left; then one RefundPayment command, however often
/// the confirmation is sent, audited through the console; the refund then on the attempt's
/// page and timeline, the refunds list and its own page. A viewer sees no form and is
/// refused; a form without the session's CSRF token does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_from_the_console_is_confirmed_first_published_once_and_shows_on_the_attempt() {
    let env = TestEnv::with_settings(with_operators).await;
    let charged = env
        .succeeded_attempt("ord_console_refund", "cus_console_refund")
        .await;
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;
    let vic = console.browser(VIEWER_TOKEN).await;
    let attempt_page = format!("/console/attempts/{charged}");
    let path = format!("/console/attempts/{charged}/refunds");

    // the attempt's refunds: none yet; the form for an operator, a hint for a viewer
    let (status, page) = console.get(Some(&ada), &attempt_page).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains(r#"id="refund-form""#), "{page}");
    assert!(page.contains(r#"id="no-refunds""#), "{page}");
    let (_, page) = console.get(Some(&vic), &attempt_page).await;
    assert!(!page.contains(r#"id="refund-form""#), "{page}");
    assert!(page.contains(r#"id="refund-viewer""#), "{page}");

    // a forged form and a viewer's change nothing
    let asked = |csrf: String| {
        vec![
            ("csrf".to_owned(), csrf),
            ("amount_minor".to_owned(), "500".to_owned()),
            ("reason".to_owned(), "box arrived crushed".to_owned()),
        ]
    };
    let (status, page) = console
        .post(&ada, &path, &pairs(&asked("forged".into())))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("CSRF"), "{page}");
    let vic_form = asked(console.csrf(&vic).await);
    let (status, page) = console.post(&vic, &path, &pairs(&vic_form)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        page.contains("vic signed in as a viewer") && page.contains("refunding"),
        "{page}"
    );

    // more than is left: refused with why, at the preview
    let ada_csrf = console.csrf(&ada).await;
    let mut too_much = asked(ada_csrf.clone());
    too_much[1].1 = "2000".into();
    let (status, page) = console.post(&ada, &path, &pairs(&too_much)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{page}");
    assert!(page.contains("only 19.99 EUR is left"), "{page}");

    // the confirmation: what it would do, nothing published yet
    let (status, preview) = console.post(&ada, &path, &pairs(&asked(ada_csrf))).await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(title_of(&preview), "Confirm the refund · onecharge console");
    for shown in [
        r#"<dd id="preview-charged">19.99 EUR</dd>"#,
        r#"<dd id="preview-refunded">0.00 EUR</dd>"#,
        r#"<dd id="preview-left">19.99 EUR</dd>"#,
        r#"<dd id="preview-left-after">14.99 EUR</dd>"#,
        "box arrived crushed",
    ] {
        assert!(preview.contains(shown), "{shown} in {preview}");
    }
    assert_eq!(commands_published(&env).await, 0, "not before confirming");
    let confirm = hidden_fields(&preview, "confirm-form");
    let refund_id = confirm
        .iter()
        .find(|(name, _)| name == "refund_id")
        .map(|(_, id)| id.clone())
        .expect("the confirmation carries the refund id");

    // confirmed: one command, however often the confirmation is sent
    let (status, done) = console.post(&ada, &path, &pairs(&confirm)).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert!(
        done.contains(&format!(r#"data-refund-id="{refund_id}""#))
            && done.contains("published by operator:ada"),
        "{done}"
    );
    let (status, again) = console.post(&ada, &path, &pairs(&confirm)).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert!(again.contains("was already published"), "{again}");
    assert_eq!(commands_published(&env).await, 1);
    let audit = env.audit_entries_about(charged).await;
    let rows: Vec<(&str, &str, &str, &str)> = audit
        .iter()
        .map(|e| {
            (
                e.action.as_str(),
                e.actor.as_str(),
                e.via.as_str(),
                e.outcome.as_str(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("refund", "operator:ada", "console", "published"),
            ("refund", "operator:ada", "console", "duplicate"),
        ]
    );

    // recorded and admitted, it is on the attempt's page and timeline, in the list, and
    // on a page of its own
    assert_eq!(env.take_in_refunds().await, 1);
    env.admit_refunds().await;
    let (_, page) = console.get(Some(&vic), &attempt_page).await;
    assert!(
        page.contains(&format!(
            r#"data-testid="attempt-refund" data-refund-id="{refund_id}" data-status="pending""#
        )),
        "{page}"
    );
    assert_eq!(
        page.matches(r#"data-kind="refund""#).count(),
        2,
        "its moves on the timeline: waiting, pending"
    );
    assert!(
        page.contains("1 refund: 0.00 EUR refunded, 5.00 EUR being refunded; 14.99 EUR left"),
        "{page}"
    );
    let (status, page) = console
        .get(Some(&vic), "/console/refunds?status=pending")
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains(&format!(
            r#"data-testid="refund-row" data-refund-id="{refund_id}""#
        )),
        "{page}"
    );
    assert!(page.contains(r#"id="nav-refunds""#));
    let (_, page) = console
        .get(Some(&vic), "/console/refunds?status=succeeded")
        .await;
    assert!(page.contains(r#"data-count="0""#), "{page}");
    let (status, _) = console
        .get(Some(&vic), "/console/refunds?status=done")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, page) = console
        .get(Some(&vic), &format!("/console/refunds/{refund_id}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains(r#"<dd id="fact-status">pending</dd>"#),
        "{page}"
    );
    assert!(page.contains("requested_by=operator:ada"), "{page}");
    console.stop().await;
}

/// A form's fields as [`Console::post`] takes them.
fn pairs(fields: &[(String, String)]) -> Vec<(&str, &str)> {
    fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Stores a dead letter of `class` whose body is a valid charge command, as intake writes
/// one; its sequence.
async fn stored_dead_letter(env: &TestEnv, class: &str, message_id: &str) -> u64 {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Dlq-Class", class);
    headers.insert("Dlq-Reason", "the database did not answer");
    headers.insert("Dlq-Original-Msg-Id", message_id);
    headers.insert("Nats-Msg-Id", format!("dlq-console-{message_id}").as_str());
    let body = serde_json::to_vec(&command(Uuid::new_v4(), json!({}))).unwrap();
    env.publish_to(env.broker.names.dlq_subject(), headers, &body)
        .await
}

/// Issue 54: the dead-letter list a page at a time and by class, a discard after a
/// confirmation (audited, shown on the letter, out of the list), and a bulk replay that
/// previews and replays only what it previewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_paged_discarded_and_replayed_in_bulk_in_the_console() {
    let env = TestEnv::with_settings(with_operators).await;
    let discarded = stored_dead_letter(&env, "exhausted", "m-c-0").await;
    let mut exhausted = Vec::new();
    for i in 1..3 {
        exhausted.push(stored_dead_letter(&env, "exhausted", &format!("m-c-{i}")).await);
    }
    for i in 3..101 {
        stored_dead_letter(&env, "invalid", &format!("m-c-{i}")).await;
    }
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;

    let (status, first) = console.get(Some(&ada), "/console/dead-letters").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert!(first.contains(r#"data-count="100""#), "{first}");
    assert!(
        first.contains(r#"id="next-page" href="/console/dead-letters?after=100""#),
        "{first}"
    );
    let (_, second) = console
        .get(Some(&ada), "/console/dead-letters?after=100")
        .await;
    assert!(
        second.contains(r#"data-count="1""#) && !second.contains("next-page"),
        "{second}"
    );
    let (_, by_class) = console
        .get(Some(&ada), "/console/dead-letters?class=exhausted")
        .await;
    assert!(by_class.contains(r#"data-count="3""#), "{by_class}");
    let (status, _) = console
        .get(Some(&ada), "/console/dead-letters?class=lost")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // The discard: a reason, a confirmation, then the letter is set aside.
    let path = format!("/console/dead-letters/{discarded}/discard");
    let (_, letter) = console
        .get(Some(&ada), &format!("/console/dead-letters/{discarded}"))
        .await;
    assert!(letter.contains(r#"id="discard-form""#), "{letter}");
    let csrf = csrf_of(&letter);
    let (status, confirm) = console
        .post(
            &ada,
            &path,
            &[("csrf", &csrf), ("reason", "a test message")],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{confirm}");
    assert!(confirm.contains(r#"id="confirm-form""#), "{confirm}");
    assert_eq!(env.rows_in("dead_letter_discards").await, 0);
    let (status, done) = console
        .post(
            &ada,
            &path,
            &[
                ("csrf", &csrf),
                ("reason", "a test message"),
                ("confirm", "yes"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(
        env.audit_count(|e| e.action == "dlq_discard"
            && e.actor == "operator:ada"
            && e.via == "console"
            && e.reason.as_deref() == Some("a test message"))
            .await,
        1
    );
    let (_, letter) = console
        .get(Some(&ada), &format!("/console/dead-letters/{discarded}"))
        .await;
    assert!(
        letter.contains(r#"id="dl-discarded""#) && !letter.contains(r#"id="discard-form""#),
        "{letter}"
    );
    let (_, first) = console.get(Some(&ada), "/console/dead-letters").await;
    assert!(
        !first.contains(&format!(r#"data-sequence="{discarded}""#)),
        "a discarded letter is listed"
    );

    // The bulk replay of the exhausted letters: a preview of the two left, then those two.
    let (status, preview) = console
        .post(
            &ada,
            "/console/dead-letters/bulk-replay",
            &[
                ("csrf", &csrf),
                ("class", "exhausted"),
                ("kind", ""),
                ("reason", "database back"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert!(
        preview.contains(r#"id="bulk-summary" data-count="2""#),
        "{preview}"
    );
    let listed = format!("{},{}", exhausted[0], exhausted[1]);
    assert!(
        preview.contains(&format!(r#"name="sequences" value="{listed}""#)),
        "{preview}"
    );
    let (status, done) = console
        .post(
            &ada,
            "/console/dead-letters/bulk-replay",
            &[
                ("csrf", &csrf),
                ("class", "exhausted"),
                ("kind", ""),
                ("reason", "database back"),
                ("sequences", &listed),
                ("confirm", "yes"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert!(
        done.contains(r#"id="bulk-result" data-count="2""#),
        "{done}"
    );
    assert_eq!(
        done.matches(r#"<td class="outcome">replayed</td>"#).count(),
        2,
        "{done}"
    );
    assert_eq!(
        env.audit_count(|e| e.actor == "operator:ada"
            && e.via == "console"
            && ["dlq_replay", "dlq_bulk_replay"].contains(&e.action.as_str())
            && e.reason.as_deref() == Some("database back"))
            .await,
        3
    );
    console.stop().await;
}

/// Issue 54: the overview loads itself again (a meta refresh: the CSP forbids scripts) and
/// links the sweeps and the webhook events; each page shows what the database holds — a
/// sweep with its window, pages and findings, a failed one with why, a running one; an
/// accepted event with its attempt and outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_refreshes_itself_and_links_the_sweeps_and_the_webhook_events() {
    let env = TestEnv::with_settings(with_operators).await;
    let attempt = Uuid::new_v4();
    env.plant_finished_failed_and_running_sweeps().await;
    env.plant_webhook_event(
        "evt_console_1",
        "payment_intent.succeeded",
        "pi_console_1",
        attempt,
        "woke",
    )
    .await;
    env.plant_webhook_refusals(
        "bad_signature",
        12,
        "no v1 signature matches any configured secret",
    )
    .await;
    let console = Console::start(&env).await;
    let ada = console.browser(OPERATOR_TOKEN).await;

    let (status, overview) = console.get(Some(&ada), "/console/").await;
    assert_eq!(status, StatusCode::OK, "{overview}");
    assert!(
        overview.contains(r#"<meta id="refresh" http-equiv="refresh" content="30">"#),
        "{overview}"
    );
    assert!(
        overview.contains(r#"id="overview-sweeps" href="/console/sweeps""#),
        "{overview}"
    );
    assert!(
        overview.contains(r#"id="overview-webhooks" href="/console/webhooks""#),
        "{overview}"
    );
    let (_, other) = console.get(Some(&ada), "/console/audit").await;
    assert!(
        !other.contains("http-equiv"),
        "only the overview refreshes itself"
    );

    let (status, sweeps) = console.get(Some(&ada), "/console/sweeps").await;
    assert_eq!(status, StatusCode::OK, "{sweeps}");
    assert_eq!(
        sweeps.matches(r#"data-testid="sweep-row""#).count(),
        3,
        "{sweeps}"
    );
    assert!(sweeps.contains(r#"<td class="pages">7</td>"#), "{sweeps}");
    assert!(
        sweeps.contains(r#"<a href="/console/findings">2</a>"#),
        "{sweeps}"
    );
    assert!(sweeps.contains("the gateway answered 401"), "{sweeps}");
    assert!(sweeps.contains(">running"), "{sweeps}");
    // Newest first: the running one leads.
    assert!(sweeps.find(">running") < sweeps.find("the gateway answered 401"));

    let (status, webhooks) = console.get(Some(&ada), "/console/webhooks").await;
    assert_eq!(status, StatusCode::OK, "{webhooks}");
    assert!(
        webhooks.contains("evt_console_1") && webhooks.contains("pi_console_1"),
        "{webhooks}"
    );
    assert!(
        webhooks.contains(&format!(r#"href="/console/attempts/{attempt}""#)),
        "{webhooks}"
    );
    assert!(
        webhooks.contains(r#"<td class="outcome">woke</td>"#),
        "{webhooks}"
    );
    console.stop().await;
}
