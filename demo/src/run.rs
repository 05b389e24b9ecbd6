//! The demo's run: the servers (`super::private`), the mock gateway, the service, the
//! published mix, the wait and the refunds (`super::refunds`), read top to bottom (start,
//! publish, wait); what it left is judged by `super::verdict`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use async_nats::HeaderMap;
use mock_gateway::{Dialect, FaultConfig, FaultRule, Latency, MockConfig, MockGateway};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use secrecy::SecretString;
use sqlx::migrate::MigrateDatabase as _;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use onecharge::app::Application;
use onecharge::broker::Broker;
use onecharge::config::{ExecutorSettings, Settings};
use onecharge::domain::PaymentAttemptId;
use onecharge::gateway::GatewayKind;
use onecharge::store::Store;

use super::private;
use super::published::{describe_all, Published, ReviewCase};
use super::refunds;
use super::DemoArgs;

/// Runs the demo; `Err` when the servers are unreachable and cannot be started, the run
/// did not settle in time, or the promise did not hold.
pub async fn run(settings: &Settings, args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    if args.console {
        check_console_address(settings)?;
    }
    // A signal before the summary ends the run as an error does: the demo's data is
    // removed and its private servers are stopped by their guards, instead of the process
    // dying with them running.
    let interrupted = CancellationToken::new();
    let listener = tokio::spawn(onecharge::shutdown::cancel_on_signal(interrupted.clone()));
    let mut servers = until_interrupted(&interrupted, private::servers(settings)).await?;
    if let Some(private) = &servers.private {
        println!("{}", private.describe());
    }
    let outcome = run_on(&servers.settings, &args, started, &interrupted, listener).await;
    if let (true, Some(private)) = (args.keep, servers.private.as_mut()) {
        println!(
            "kept: the private servers' data and logs in {} (they are stopped)",
            private.keep().display()
        );
    }
    // `servers` drops here: the private servers stop.
    outcome
}

/// `work`, unless a signal comes first.
async fn until_interrupted<T>(
    interrupted: &CancellationToken,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::select! {
        outcome = work => outcome,
        () = interrupted.cancelled() => bail!("demo: interrupted; its data is removed and any private server stopped"),
    }
}

/// The demo on `settings`' servers: its database and namespace, the mock gateway, the run,
/// the console if asked, and the clean-up.
async fn run_on(
    settings: &Settings,
    args: &DemoArgs,
    started: Instant,
    interrupted: &CancellationToken,
    listener: tokio::task::JoinHandle<()>,
) -> anyhow::Result<()> {
    let tag = &Uuid::new_v4().simple().to_string()[..8];
    let database_url = sibling_database(&settings.database_url, &format!("onecharge_demo_{tag}"))?;
    check_servers(settings).await?;

    let api_key = format!("sk_demo_{}", Uuid::new_v4().simple());
    let kind = args.gateway.unwrap_or(settings.gateway_kind);
    let gateway = MockGateway::start(MockConfig {
        api_key: api_key.clone(),
        seed: args.seed,
        hang_for: Duration::from_secs(3),
        faults: demo_faults(),
        dialect: match kind {
            GatewayKind::Onecharge => Dialect::Onecharge,
            GatewayKind::Stripe => Dialect::Stripe,
        },
        ..MockConfig::default()
    })
    .await
    .context("starting the mock gateway")?;

    let demo = demo_settings(settings, &database_url, tag, &gateway, kind, api_key)?;

    println!(
        "onecharge demo: database {}, namespace {}, mock gateway {} speaking {}",
        redact(&database_url),
        demo.namespace,
        gateway.base_url(),
        kind.as_str()
    );
    let outcome =
        until_interrupted(interrupted, run_in(&demo, &gateway, args, kind, started)).await;
    // From here a signal is the console's to answer (it stops serving, then the data is
    // removed as after any run).
    listener.abort();
    let outcome = match outcome {
        Ok(()) if args.console => serve_console(&demo, settings.admin_addr).await,
        outcome => outcome,
    };
    gateway.shutdown().await;
    if args.keep {
        println!(
            "kept: database {} and streams {}_*",
            redact(&database_url),
            demo.namespace.to_uppercase().replace('-', "_")
        );
    } else {
        clean_up(&demo).await;
    }
    outcome
}

/// The demo's settings: the caller's, on the demo's own database and namespace, against
/// the mock gateway, with every wait short enough for a run of a minute or two.
fn demo_settings(
    settings: &Settings,
    database_url: &str,
    tag: &str,
    gateway: &MockGateway,
    kind: GatewayKind,
    api_key: String,
) -> anyhow::Result<Settings> {
    let mut demo = Settings {
        database_url: database_url.to_owned(),
        namespace: format!("demo-{tag}"),
        admin_addr: "127.0.0.1:0".parse().expect("literal address"),
        gateway_url: gateway.base_url(),
        gateway_kind: kind,
        gateway_api_key: Some(SecretString::from(api_key)),
        gateway_connect_timeout: Duration::from_secs(1),
        gateway_request_timeout: Duration::from_secs(2),
        ..settings.clone()
    };
    demo.intake.ack_wait = Duration::from_secs(5);
    demo.executor = ExecutorSettings {
        lease: Duration::from_secs(5),
        poll_interval: Duration::from_millis(50),
        retry_min_delay: Duration::from_millis(100),
        retry_max_delay: Duration::from_secs(1),
        in_progress_delay: Duration::from_millis(300),
        breaker_cooldown: Duration::from_secs(1),
        ..settings.executor.clone()
    };
    demo.reconciler.poll_interval = Duration::from_millis(200);
    demo.reconciler.schedule = vec![
        Duration::from_secs(1),
        Duration::from_secs(2),
        Duration::from_secs(4),
        Duration::from_secs(8),
    ];
    demo.relay.poll_interval = Duration::from_millis(50);
    // A refund waiting for its charge asks again this often.
    demo.refunds.recheck_interval = Duration::from_millis(300);
    // The mock answers in milliseconds (it holds a hung response 3 s, after charging): an
    // empty lookup past the shortest processing time the configuration accepts (a send
    // can outlive neither its lease nor its timeouts: lease + connect + request) proves
    // "not charged" here, which lets the review case "nothing found past the processing
    // time" end within the run; the schedule's last step reaches past it.
    demo.gateway_max_processing_time =
        demo.executor.lease + demo.gateway_connect_timeout + demo.gateway_request_timeout;
    demo.validate()?;
    Ok(demo)
}

async fn run_in(
    settings: &Settings,
    gateway: &MockGateway,
    args: &DemoArgs,
    kind: GatewayKind,
    started: Instant,
) -> anyhow::Result<()> {
    // A short duplicate window on the demo's own command stream lets producer retries reach
    // intake, as they do in production once JetStream's window has passed.
    let broker = Broker::connect(settings).await?;
    broker
        .jetstream
        .create_stream(async_nats::jetstream::stream::Config {
            name: broker.names.commands_stream(),
            subjects: vec![format!("{}.payments.commands.>", settings.namespace)],
            duplicate_window: Duration::from_millis(100),
            max_age: Duration::from_secs(24 * 3600),
            ..Default::default()
        })
        .await
        .context("creating the demo's command stream")?;
    // What a deployment's `onecharge setup` does: the database and its schema, the other
    // streams (the command stream above is used as it is), the intake consumer.
    onecharge::app::setup(settings).await?;

    let app = Application::build(settings.clone(), &[]).await?;
    let store = app.store().clone();
    let admin = app.admin_addr();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run(shutdown.clone()));
    if let Some(addr) = admin {
        println!("all roles running; metrics at http://{addr}/metrics");
    }

    let mut published = publish_mix(&broker, args, kind).await?;
    println!(
        "published {} messages: {} attempts, {} producer retries (same Nats-Msg-Id), {} business duplicates, {} conflicts, {} invalid",
        published.messages,
        published.attempts.len(),
        published.producer_retries,
        published.business_duplicates,
        published.conflicts,
        published.invalid
    );

    let mut settled = wait_until_settled(&store, &broker, &published, args.timeout).await;
    if settled.is_ok() {
        settled = refund_some(&store, &broker, &mut published, args.timeout).await;
    }
    if settled.is_ok() {
        settled = leave_for_review(settings, &store, &broker, gateway, kind, &mut published).await;
        if settled.is_ok() {
            settled = wait_until_settled(&store, &broker, &published, args.timeout).await;
        }
    }
    shutdown.cancel();
    match running.await {
        Ok(result) => result?,
        Err(join) => bail!("the service panicked: {join}"),
    }
    settled?;
    super::verdict::verify(&store, &broker, gateway, &published, started.elapsed()).await
}

/// Refunds a few of the settled charges and waits until each refund is final.
async fn refund_some(
    store: &Store,
    broker: &Broker,
    published: &mut Published,
    timeout: Duration,
) -> anyhow::Result<()> {
    published.refunds =
        refunds::publish_and_settle(store, broker, &published.attempts, timeout).await?;
    println!(
        "asked for {} refunds of settled charges: {}",
        published.refunds.len(),
        published
            .refunds
            .iter()
            .map(|r| r.case.describe())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

fn demo_faults() -> FaultConfig {
    FaultConfig {
        error_before: FaultRule::probability(0.02),
        error_after: FaultRule::probability(0.02),
        hang_after: FaultRule::probability(0.01),
        drop_after: FaultRule::probability(0.01),
        rate_limit: FaultRule::probability(0.03),
        latency: Latency {
            fixed_ms: 2,
            jitter_ms: 10,
        },
        // no slow_charge: a key held in progress for a minute would only stall the run
        ..FaultConfig::default()
    }
}

/// The payment method of the `i`-th attempt: mostly cards that succeed, some declines,
/// and each fault the gateway can have on the first try.
fn payment_method(rng: &mut StdRng) -> &'static str {
    match rng.gen_range(0..100) {
        0..=7 => "pm_card_declined",
        8..=9 => "pm_card_insufficient_funds",
        10..=12 => "pm_fault_error_after",
        13..=15 => "pm_fault_error_before",
        16..=17 => "pm_fault_hang_after",
        18..=19 => "pm_fault_drop_after",
        20..=22 => "pm_fault_rate_limit",
        _ => "pm_card_visa",
    }
}

/// The same card under the name the gateway's dialect gives it: Stripe's test payment
/// methods for the declines; the fault triggers are the same in both dialects.
fn in_dialect(method: &'static str, kind: GatewayKind) -> &'static str {
    use mock_gateway::stripe::payment_methods as stripe;
    match (kind, method) {
        (GatewayKind::Stripe, "pm_card_declined") => stripe::CARD_VISA_CHARGE_DECLINED,
        (GatewayKind::Stripe, "pm_card_insufficient_funds") => {
            stripe::CARD_CHARGE_DECLINED_INSUFFICIENT_FUNDS
        }
        _ => method,
    }
}

fn command_body(attempt: PaymentAttemptId, i: usize, amount: i64, payment_method: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "payment_attempt_id": attempt,
        "order_id": format!("ord_demo_{i}"),
        "customer_id": format!("cus_{}", i % 37),
        "amount_minor": amount,
        "currency": "EUR",
        "payment_method": payment_method,
        "description": format!("Demo order {i}"),
        "requested_at": time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).expect("now formats"),
    }))
    .expect("json")
}

async fn publish_one(
    broker: &Broker,
    message_id: Option<&str>,
    body: Vec<u8>,
) -> anyhow::Result<bool> {
    let mut headers = HeaderMap::new();
    if let Some(id) = message_id {
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id);
    }
    headers.insert("Correlation-Id", "demo");
    let ack = broker
        .jetstream
        .publish_with_headers(broker.names.charge_subject(), headers, body.into())
        .await?
        .await?;
    Ok(!ack.duplicate)
}

async fn publish_mix(
    broker: &Broker,
    args: &DemoArgs,
    kind: GatewayKind,
) -> anyhow::Result<Published> {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut published = Published::default();
    let mut originals = Vec::new();
    for i in 0..args.attempts {
        let attempt = PaymentAttemptId::from(Uuid::from_u128(rng.gen()));
        let method = in_dialect(payment_method(&mut rng), kind);
        let amount = rng.gen_range(100..50_000);
        let body = command_body(attempt, i, amount, method);
        let message_id = format!("demo-{i}");
        publish_one(broker, Some(&message_id), body.clone()).await?;
        published.messages += 1;
        published.attempts.insert(attempt, method.to_owned());
        originals.push((attempt, i, amount, method, message_id, body));
    }
    // Past the stream's duplicate window: retries, duplicates, conflicts and garbage.
    tokio::time::sleep(Duration::from_millis(150)).await;
    for (attempt, i, amount, method, message_id, body) in &originals {
        let roll = rng.gen_range(0..100);
        if roll < 10 {
            // The same message again: JetStream keeps it (its window has passed), intake
            // must recognise it by the dedupe key.
            if publish_one(broker, Some(message_id), body.clone()).await? {
                published.producer_retries += 1;
                published.messages += 1;
            }
        } else if roll < 22 {
            // The same attempt under a new message id: with the same amount a business
            // duplicate, with another amount a conflict.
            let (suffix, amount, count) = if roll < 20 {
                ("again", *amount, &mut published.business_duplicates)
            } else {
                ("conflict", amount + 1, &mut published.conflicts)
            };
            publish_one(
                broker,
                Some(&format!("{message_id}-{suffix}")),
                command_body(*attempt, *i, amount, method),
            )
            .await?;
            *count += 1;
            published.messages += 1;
        }
    }
    let mut ids = (1..).map(|n: u128| Uuid::from_u128(0xdead_0000 + n));
    let mut valid = |amount: serde_json::Value, currency: &str| {
        serde_json::to_vec(&serde_json::json!({
            "payment_attempt_id": ids.next().expect("endless"),
            "order_id": "ord_invalid",
            "customer_id": "cus_invalid",
            "amount_minor": amount,
            "currency": currency,
            "payment_method": "pm_card_visa",
        }))
        .expect("json")
    };
    let invalid: [(Option<&str>, Vec<u8>); 5] = [
        (Some("demo-bad-json"), b"{\"payment_attempt_id\":".to_vec()),
        (Some("demo-bad-currency"), valid(500.into(), "EUX")),
        (Some("demo-zero-amount"), valid(0.into(), "EUR")),
        (Some("demo-amount-as-text"), valid("19.99".into(), "EUR")),
        (None, valid(700.into(), "EUR")),
    ];
    for (id, body) in invalid {
        publish_one(broker, id, body).await?;
        published.invalid += 1;
        published.messages += 1;
    }
    Ok(published)
}

/// Publishes the [`ReviewCase`]s and waits until each is in `needs_review` (the one that
/// needs every send to fail alone, with the gateway told to fail them).
async fn leave_for_review(
    settings: &Settings,
    store: &Store,
    broker: &Broker,
    gateway: &MockGateway,
    kind: GatewayKind,
    published: &mut Published,
) -> anyhow::Result<()> {
    let cases: &[ReviewCase] = match kind {
        GatewayKind::Onecharge => &[
            ReviewCase::GatewayRejected,
            ReviewCase::ParameterMismatch,
            ReviewCase::NothingFoundPastProcessingTime,
        ],
        // Stripe keys its calls per step (`-create`, `-confirm`) and reads an ambiguous
        // answer by retrieving the PaymentIntent: the cases that need the §3 protocol are
        // left out.
        GatewayKind::Stripe => &[ReviewCase::GatewayRejected],
    };
    println!(
        "leaving {} case(s) for a person: {}",
        cases.len(),
        describe_all(cases.iter().copied())
    );
    // The main run is over: no random fault from here on, so each case is exactly itself
    // (and a person's "recheck now" in the console meets a calm gateway).
    gateway.set_faults(demo_faults_quiet());
    for (n, case) in cases.iter().enumerate() {
        let attempt = PaymentAttemptId::from(Uuid::from_u128(0x5eed_0000 + n as u128));
        let i = 900_000 + n;
        let method = match case {
            ReviewCase::GatewayRejected => mock_gateway::payment_methods::FAULT_BAD_REQUEST,
            _ => mock_gateway::payment_methods::CARD_VISA,
        };
        let amount = 4_200 + n as i64;
        if *case == ReviewCase::ParameterMismatch {
            charge_key_elsewhere(settings, gateway, attempt, amount * 2).await?;
        }
        let failing = *case == ReviewCase::NothingFoundPastProcessingTime;
        if failing {
            gateway.set_faults(FaultConfig {
                error_before: FaultRule::probability(1.0),
                ..demo_faults_quiet()
            });
        }
        publish_one(
            broker,
            Some(&format!("demo-review-{n}")),
            command_body(attempt, i, amount, method),
        )
        .await?;
        published.messages += 1;
        published.attempts.insert(attempt, method.to_owned());
        published.for_review.push((attempt, *case));
        let waited = wait_for_review(store, attempt, Duration::from_secs(60)).await;
        if failing {
            gateway.set_faults(demo_faults_quiet());
        }
        waited.with_context(|| format!("leaving {} for a person", case.describe()))?;
    }
    Ok(())
}

/// No fault at all, the demo's latency.
fn demo_faults_quiet() -> FaultConfig {
    FaultConfig {
        latency: demo_faults().latency,
        ..FaultConfig::default()
    }
}

/// Charges at the gateway under `attempt`'s idempotency key with other parameters, as
/// another system sharing the key space might have: the attempt's own send then meets a
/// 422 `idempotency_key_reused`.
async fn charge_key_elsewhere(
    settings: &Settings,
    gateway: &MockGateway,
    attempt: PaymentAttemptId,
    amount: i64,
) -> anyhow::Result<()> {
    use secrecy::ExposeSecret as _;
    let api_key = settings
        .gateway_api_key
        .as_ref()
        .map(|k| k.expose_secret().to_owned())
        .unwrap_or_default();
    let key = onecharge::domain::IdempotencyKey::for_attempt(attempt);
    let response = reqwest::Client::new()
        .post(format!("{}/v1/charges", gateway.base_url()))
        .bearer_auth(api_key)
        .header("Idempotency-Key", key.as_str())
        .json(&serde_json::json!({
            "amount_minor": amount,
            "currency": "EUR",
            "customer_id": "cus_elsewhere",
            "payment_method": "pm_card_visa",
            "reference": "another-system",
            "description": "a charge another system made under the same key",
        }))
        .send()
        .await
        .context("charging under the key at the mock gateway")?;
    if !response.status().is_success() {
        bail!(
            "the mock gateway refused the charge under the key: {}",
            response.status()
        );
    }
    Ok(())
}

/// Waits until `attempt` is in `needs_review`; `Err` when it settles otherwise or not in
/// `timeout`.
async fn wait_for_review(
    store: &Store,
    attempt: PaymentAttemptId,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let status = onecharge::store::reads::attempts::get_attempt(store, attempt)
            .await?
            .map(|a| a.status.as_str());
        match status {
            Some("needs_review") => return Ok(()),
            Some(other) if other != "pending" && other != "in_flight" && other != "unknown" => {
                bail!("attempt {attempt} ended {other}, not needs_review")
            }
            _ if Instant::now() > deadline => bail!(
                "attempt {attempt} is not in needs_review after {}",
                humantime::format_duration(timeout)
            ),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Counts by status, for progress and the summary.
async fn status_counts(store: &Store) -> anyhow::Result<BTreeMap<String, i64>> {
    Ok(onecharge::store::reads::attempts::count_by_status(store)
        .await?
        .into_iter()
        .collect())
}

async fn wait_until_settled(
    store: &Store,
    broker: &Broker,
    published: &Published,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let expected_dead = published.expected_dead_letters();
    let mut last_line = String::new();
    loop {
        let counts = status_counts(store).await?;
        let total: i64 = counts.values().sum();
        let get = |s: &str| counts.get(s).copied().unwrap_or(0);
        let open = get("pending") + get("in_flight") + get("unknown");
        let unpublished = onecharge::store::reads::attempts::unpublished_events(store).await?;
        let dead = broker.stream_messages(&broker.names.dlq_stream()).await?;
        let line = format!(
            "  attempts {total:>4}/{} | succeeded {:>4} declined {:>3} needs_review {:>2} | in progress {:>3} (unknown {:>2}) | events unpublished {:>3} | dead letters {dead}/{expected_dead}",
            published.attempts.len(),
            get("succeeded"),
            get("declined"),
            get("needs_review"),
            open,
            get("unknown"),
            unpublished,
        );
        if line != last_line {
            println!("{line}");
            last_line = line;
        }
        if total as usize == published.attempts.len()
            && open == 0
            && unpublished == 0
            && dead >= expected_dead
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "not settled within {}: {}",
                humantime::format_duration(timeout),
                last_line.trim()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `--console`, before anything runs: an exposed, open admin address is a configuration
/// error, and a taken one is found now rather than after the whole run.
fn check_console_address(settings: &Settings) -> anyhow::Result<()> {
    settings.check_admin_exposure()?;
    std::net::TcpListener::bind(settings.admin_addr).map_err(|err| {
        anyhow::Error::from(onecharge::config::UsageError(format!(
            "cannot serve the console on {}: {err}; choose another address with --admin-addr",
            settings.admin_addr
        )))
    })?;
    Ok(())
}

/// `--console`: the admin HTTP, console included, over the demo's database (and, for
/// "recheck now", its mock gateway, still running) on `admin_addr` until SIGTERM or Ctrl-C.
async fn serve_console(demo: &Settings, admin_addr: std::net::SocketAddr) -> anyhow::Result<()> {
    let mut console = demo.clone();
    console.admin_addr = admin_addr;
    let shutdown = CancellationToken::new();
    tokio::spawn(onecharge::shutdown::cancel_on_signal(shutdown.clone()));
    let sign_in = match (console.operators.is_empty(), console.admin_token.is_some()) {
        (true, false) => {
            "no sign-in: with no admin token or operators configured it is open on this loopback address"
        }
        (true, true) => "sign in with the admin token of your configuration",
        (false, _) => "sign in with a token of your [[operators]] or the admin token",
    };
    let app = Application::build(console, &[onecharge::app::Role::Admin]).await?;
    let addr = app.admin_addr().context("the admin role listens")?;
    let in_review = onecharge::store::console::count_in_review(app.store()).await?;
    println!();
    println!("operator console: http://{addr}/console/ ({sign_in})");
    println!(
        "look first at the review queue, http://{addr}/console/review: {in_review} attempt(s) wait there for a person, each with why; the demo's data stays until Ctrl-C"
    );
    app.run(shutdown).await
}

/// The servers listen (or are the demo's private ones): whether they let the demo in. One
/// that refuses is a configuration to fix, which a private server would only hide.
async fn check_servers(settings: &Settings) -> anyhow::Result<()> {
    let server = sibling_database(&settings.database_url, "postgres")?;
    if let Err(err) = Store::connect(&server, 1).await {
        bail!(
            "PostgreSQL at {} refuses the demo ({}): check ONECHARGE_DATABASE_URL or --database-url",
            redact(&settings.database_url),
            one_line(&err)
        );
    }
    if let Err(err) = Broker::connect(settings).await {
        bail!(
            "NATS at {} refuses the demo ({}): check ONECHARGE_NATS_URL or --nats-url",
            settings.nats_url,
            one_line(&err)
        );
    }
    Ok(())
}

/// An error and its causes on one line.
fn one_line(err: &anyhow::Error) -> String {
    format!("{err:#}").replace('\n', " ")
}

/// The URL of another database on the same server.
fn sibling_database(database_url: &str, name: &str) -> anyhow::Result<String> {
    let mut url = reqwest::Url::parse(database_url)
        .with_context(|| format!("database_url {} is not a URL", redact(database_url)))?;
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}

fn redact(url: &str) -> String {
    onecharge::store::redact_url(url)
}

async fn clean_up(settings: &Settings) {
    if let Ok(broker) = Broker::connect(settings).await {
        for name in [
            broker.names.commands_stream(),
            broker.names.events_stream(),
            broker.names.dlq_stream(),
        ] {
            let _ = broker.jetstream.delete_stream(name).await;
        }
    }
    if let Err(err) = sqlx::Postgres::force_drop_database(&settings.database_url).await {
        tracing::warn!(error = %err, "could not drop the demo database");
    }
}
