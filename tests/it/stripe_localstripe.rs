//! The `stripe` connector end to end against localstripe, a Stripe fake no one here wrote
//! (issue 13): a ChargePayment published on NATS goes through the real service (intake,
//! executor, reconciler, relay) to localstripe, and what localstripe then holds is read back
//! by id, as an operator would in Stripe's dashboard.
//!
//! localstripe is narrower than Stripe (see `tests/support/localstripe.rs` for all of it).
//! Where it differs from Stripe's documentation, these tests follow the documentation: the
//! [`Shim`] between onecharge and localstripe drops the documented parameters localstripe
//! refuses and gives a decline Stripe's documented error type, and the tests assert that
//! onecharge sent those parameters. What localstripe cannot check, and so these tests do
//! not (the Stripe-dialect mock gateway, `tests/stripe.rs`, does):
//! - idempotency: it ignores `Idempotency-Key` (no replay, no 409 in progress, no
//!   `idempotency_error`), so only the keys onecharge *sends* are checked here;
//! - `Stripe-Version`: ignored; checked only as sent;
//! - `description`, `automatic_payment_methods` on create and `off_session` on confirm:
//!   refused by localstripe, so checked only as sent;
//! - issuer `decline_code`s (`insufficient_funds`, …): localstripe has none, only
//!   `code = card_declined`; and `pm_card_visa_chargeDeclined` succeeds there;
//! - off-session `authentication_required` (402): localstripe leaves the PaymentIntent in
//!   `requires_action` instead, which is the other documented answer, tested here;
//! - `canceled`, 409, 429, 5xx and `Stripe-Should-Retry`: localstripe never answers them
//!   (`processing` it does, for a SEPA Direct Debit that then fails, tested here).

use std::time::{Duration, Instant};

use onecharge::app::{Application, Role};
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::support::localstripe::{
    Localstripe, Shim, API_KEY, CONFIRM_PARAMS_LOCALSTRIPE_REFUSES,
    CREATE_PARAMS_LOCALSTRIPE_REFUSES,
};
use crate::support::{command, Records, TestEnv};

/// How long an attempt may take to settle through localstripe (a Python process on a
/// loaded two-core machine) before a test fails.
const SETTLE_DEADLINE: Duration = Duration::from_secs(60);

/// The real service with every role, its own database and namespace, speaking Stripe to
/// localstripe through the shim.
struct World {
    env: TestEnv,
    localstripe: Localstripe,
    shim: Shim,
    /// The customer every charge is for: localstripe refuses a PaymentIntent whose customer
    /// it does not hold, so one is created at the start.
    customer: String,
    stop: CancellationToken,
    running: Option<JoinHandle<anyhow::Result<()>>>,
}

impl World {
    /// `None` when localstripe is not installed outside CI (the reason is printed).
    async fn start() -> Option<Self> {
        let localstripe = Localstripe::start().await?;
        let shim = Shim::start(&localstripe).await;
        let env = TestEnv::with_settings(|s| {
            shim.configure(s);
            s.reconciler.schedule = vec![Duration::from_millis(500); 6];
            // A debit `processing` at localstripe is read along its own schedule (issue 22).
            s.reconciler.processing_schedule = vec![Duration::from_millis(500)];
        })
        .await;
        let app = Application::build(env.settings.clone(), &Role::ALL)
            .await
            .expect("the service builds");
        let customer = localstripe.create_customer("Ada Lovelace").await;
        let stop = CancellationToken::new();
        let running = Some(tokio::spawn(app.run(stop.clone())));
        Some(Self {
            env,
            localstripe,
            shim,
            customer,
            stop,
            running,
        })
    }

    /// Publishes a ChargePayment of `attempt` for the world's customer with the fields of
    /// `patch` changed.
    async fn publish(&self, message_id: &str, attempt: Uuid, mut patch: Value) {
        patch["customer_id"] = Value::from(self.customer.as_str());
        self.env.publish(message_id, &command(attempt, patch)).await;
    }

    /// Publishes the command of a new attempt with `patch` under `message_id`, waits until
    /// it is settled, and checks that it settled as `status`; its row.
    async fn settles_as(&self, message_id: &str, patch: Value, status: &str) -> Attempt {
        let attempt = Uuid::new_v4();
        self.publish(message_id, attempt, patch).await;
        let row = settled(&self.env, &self.shim, attempt).await;
        assert_eq!(row.status, status, "{row:?}");
        row
    }

    /// Whether the attempt went through `unknown`: the executor could not read the outcome
    /// and the reconciler settled it.
    async fn was_unknown(&self, attempt: Uuid) -> bool {
        self.path(attempt)
            .await
            .iter()
            .any(|status| status == "unknown")
    }

    /// The statuses the attempt went through, in order.
    async fn path(&self, attempt: Uuid) -> Vec<String> {
        self.env.path(attempt).await
    }

    /// The bodies of the events published for this attempt, polled until `n` are there.
    async fn events(&self, attempt: Uuid, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + SETTLE_DEADLINE;
        loop {
            let events: Vec<Value> = self
                .env
                .event_messages()
                .await
                .iter()
                .map(|m| serde_json::from_slice::<Value>(&m.payload).expect("an event body"))
                .filter(|e| e["payment_attempt_id"] == attempt.to_string())
                .collect();
            if events.len() >= n || Instant::now() > deadline {
                return events;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The PaymentIntents localstripe holds for this attempt (by its metadata).
    async fn intents_for(&self, attempt: Uuid) -> Vec<Value> {
        self.localstripe
            .payment_intents()
            .await
            .into_iter()
            .filter(|pi| pi["metadata"]["payment_attempt_id"] == attempt.to_string())
            .collect()
    }

    async fn stop(mut self) {
        self.stop.cancel();
        if let Some(running) = self.running.take() {
            running
                .await
                .expect("the service did not panic")
                .expect("the roles stop cleanly");
        }
    }
}

/// Polls the attempt until it is final or in `needs_review`; its row. On a timeout the
/// failure shows the requests onecharge sent through `shim`.
async fn settled(env: &TestEnv, shim: &Shim, attempt: Uuid) -> Attempt {
    let deadline = Instant::now() + SETTLE_DEADLINE;
    loop {
        if let Some(row) = read_attempt(env, attempt).await {
            if matches!(
                row.status.as_str(),
                "succeeded" | "declined" | "expired" | "needs_review"
            ) {
                return row;
            }
        }
        assert!(
            Instant::now() < deadline,
            "attempt {attempt} did not settle within {SETTLE_DEADLINE:?}: {:?}; requests: {:#?}",
            read_attempt(env, attempt).await,
            shim.seen()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The attempt's row, once intake has recorded it.
async fn read_attempt(env: &TestEnv, attempt: Uuid) -> Option<Attempt> {
    let row = env.find_attempt(attempt).await?;
    Some(Attempt {
        id: row.payment_attempt_id,
        status: row.status,
        gateway_charge_id: row.gateway_charge_id,
        decline_code: row.decline_code,
        review_reason: row.review_reason,
    })
}

#[derive(Debug)]
struct Attempt {
    id: Uuid,
    status: String,
    gateway_charge_id: Option<String>,
    decline_code: Option<String>,
    review_reason: Option<String>,
}

impl Attempt {
    /// The PaymentIntent id onecharge stored as the attempt's charge id.
    fn intent(&self) -> String {
        self.gateway_charge_id.clone().expect("a PaymentIntent id")
    }
}

/// Asserts the Stripe parts of the requests onecharge sent for one attempt that localstripe
/// cannot check: a key and the pinned version on every POST, the same keys on every try,
/// one key per endpoint, and the documented parameters localstripe refuses.
fn assert_sent_as_documented(shim: &Shim, intent: &str) {
    let seen = shim.seen();
    let creates: Vec<_> = seen.iter().filter(|s| s.is_create()).collect();
    let confirms: Vec<_> = seen
        .iter()
        .filter(|s| s.is_confirm() && s.path.contains(intent))
        .collect();
    assert!(!creates.is_empty() && !confirms.is_empty(), "{seen:#?}");
    for post in seen.iter().filter(|s| s.method == "POST") {
        assert!(
            post.idempotency_key
                .as_deref()
                .is_some_and(|k| !k.is_empty() && k.len() <= 255),
            "a POST without an Idempotency-Key: {post:?}"
        );
        assert_eq!(
            post.stripe_version.as_deref(),
            Some(onecharge::gateway::stripe::STRIPE_VERSION),
            "{post:?}"
        );
    }
    assert_ne!(
        creates[0].idempotency_key, confirms[0].idempotency_key,
        "Stripe refuses one key for two endpoints"
    );
    for create in &creates {
        assert_eq!(create.idempotency_key, creates[0].idempotency_key);
        for name in CREATE_PARAMS_LOCALSTRIPE_REFUSES {
            assert!(
                create
                    .form
                    .iter()
                    .any(|(k, _)| k.split('[').next() == Some(name)),
                "the create did not send `{name}`: {create:?}"
            );
        }
        assert_eq!(create.param("confirm"), Some("false"), "{create:?}");
    }
    for confirm in &confirms {
        assert_eq!(confirm.idempotency_key, confirms[0].idempotency_key);
        for name in CONFIRM_PARAMS_LOCALSTRIPE_REFUSES {
            assert_eq!(confirm.param(name), Some("true"), "{confirm:?}");
        }
    }
}

/// localstripe's only decline: `card_declined`, without an issuer's `decline_code`.
fn assert_declined_as_card_declined(row: &Attempt) {
    assert_eq!(
        row.decline_code.as_deref(),
        Some("card_declined"),
        "{row:?}"
    );
}

#[tokio::test]
async fn a_charge_through_the_stripe_connector_succeeds_at_localstripe_under_its_payment_intent_id()
{
    let Some(world) = World::start().await else {
        return;
    };
    let row = world
        .settles_as(
            "ls-visa-1",
            json!({"order_id": "ord_ls_1", "amount_minor": 1999, "currency": "EUR",
                   "payment_method": "pm_card_visa"}),
            "succeeded",
        )
        .await;
    let intent = row.intent();
    assert!(intent.starts_with("pi_"), "{intent}");

    // What Stripe's dashboard would show for the id onecharge stored.
    let pi = world.localstripe.payment_intent(&intent).await;
    assert_eq!(pi["status"], "succeeded", "{pi}");
    assert_eq!(pi["amount"], 1999);
    assert_eq!(pi["currency"], "eur");
    assert_eq!(pi["customer"], world.customer);
    assert_eq!(pi["metadata"]["payment_attempt_id"], row.id.to_string());
    assert_eq!(pi["metadata"]["order_id"], "ord_ls_1");
    assert_eq!(world.intents_for(row.id).await.len(), 1);

    let events = world.events(row.id, 1).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["status"], "succeeded");
    assert_eq!(events[0]["gateway_charge_id"], intent);
    assert_sent_as_documented(&world.shim, &intent);
    world.stop().await;
}

#[tokio::test]
async fn a_card_localstripe_declines_ends_declined_with_its_code_and_uncharged() {
    let Some(world) = World::start().await else {
        return;
    };
    // localstripe's charge-time decline (card 4000000000000341); it lets
    // `pm_card_visa_chargeDeclined` succeed on a PaymentIntent.
    let row = world
        .settles_as(
            "ls-decline-1",
            json!({"payment_method": "pm_card_chargeCustomerFail"}),
            "declined",
        )
        .await;
    assert_declined_as_card_declined(&row);
    let intent = row.intent();
    // Read at the confirm, not guessed by the reconciler.
    assert!(!world.was_unknown(row.id).await);

    let pi = world.localstripe.payment_intent(&intent).await;
    assert_eq!(pi["status"], "requires_payment_method", "{pi}");
    assert_eq!(pi["last_payment_error"]["code"], "card_declined", "{pi}");
    let events = world.events(row.id, 1).await;
    assert_eq!(events[0]["status"], "declined");
    assert_eq!(events[0]["decline_code"], "card_declined");
    assert_sent_as_documented(&world.shim, &intent);
    world.stop().await;
}

#[tokio::test]
async fn a_confirm_whose_answer_is_lost_is_settled_by_retrieving_the_payment_intent_by_id() {
    let Some(world) = World::start().await else {
        return;
    };
    // localstripe charges; onecharge never hears back and must not charge again.
    world.shim.lose_confirm_answers(1);
    let row = world
        .settles_as(
            "ls-lost-1",
            json!({"amount_minor": 4200, "payment_method": "pm_card_visa"}),
            "succeeded",
        )
        .await;
    assert!(
        world.was_unknown(row.id).await,
        "the lost answer made the attempt ambiguous first"
    );
    let intent = row.intent();
    let intents = world.intents_for(row.id).await;
    assert_eq!(
        intents.len(),
        1,
        "one PaymentIntent for one attempt: {intents:#?}"
    );
    assert_eq!(intents[0]["id"], intent);
    assert_eq!(intents[0]["status"], "succeeded");
    let seen = world.shim.seen();
    assert_eq!(
        world.shim.confirms(),
        1,
        "confirmed once, then only retrieved: {seen:#?}"
    );
    assert!(
        world.shim.retrieved(&intent),
        "the reconciler retrieved the PaymentIntent by its id: {seen:#?}"
    );
    assert_sent_as_documented(&world.shim, &intent);
    world.stop().await;
}

#[tokio::test]
async fn a_command_delivered_twice_makes_one_payment_intent_at_localstripe() {
    let Some(world) = World::start().await else {
        return;
    };
    let attempt = Uuid::new_v4();
    let patch = json!({"payment_method": "pm_card_visa"});
    // A business duplicate: another message id, the same attempt and parameters.
    world.publish("ls-twice-1", attempt, patch.clone()).await;
    world.publish("ls-twice-2", attempt, patch).await;

    let row = settled(&world.env, &world.shim, attempt).await;
    assert_eq!(row.status, "succeeded", "{row:?}");
    let intents = world.intents_for(attempt).await;
    assert_eq!(intents.len(), 1, "{intents:#?}");
    assert_eq!(
        Some(intents[0]["id"].as_str().unwrap()),
        row.gateway_charge_id.as_deref()
    );
    assert_eq!(world.events(attempt, 1).await.len(), 1);
    world.stop().await;
}

#[tokio::test]
async fn a_card_that_needs_authentication_off_session_is_handed_to_a_person_and_never_charged() {
    let Some(world) = World::start().await else {
        return;
    };
    // Stripe's test card that always asks for authentication (3D Secure 2).
    let card = world.localstripe.create_card("4000002760003184").await;
    let row = world
        .settles_as("ls-3ds-1", json!({"payment_method": card}), "needs_review")
        .await;
    let intents = world.intents_for(row.id).await;
    assert_eq!(intents.len(), 1, "{intents:#?}");
    // The operator finds it at Stripe by the id the reason names.
    let reason = row.review_reason.clone().expect("a reason");
    let intent = intents[0]["id"].as_str().expect("an id");
    assert!(reason.contains(intent), "{reason}");
    assert_eq!(intents[0]["status"], "requires_action", "{intents:#?}");
    assert!(
        intents[0]["latest_charge"].is_null(),
        "never charged: {intents:#?}"
    );
    world.stop().await;
}

#[tokio::test]
async fn a_debit_left_processing_is_read_by_id_until_it_fails_and_ends_declined_uncharged() {
    let Some(world) = World::start().await else {
        return;
    };
    // localstripe's failing IBAN: `processing` at the confirm's answer, failed 0.5 s later.
    let debit = world
        .localstripe
        .create_sepa_debit("DE62370400440532013001")
        .await;
    let row = world
        .settles_as(
            "ls-sepa-fail-1",
            json!({"payment_method": debit}),
            "declined",
        )
        .await;
    assert_declined_as_card_declined(&row);
    assert!(
        world.was_unknown(row.id).await,
        "processing is not final; the reconciler read the outcome: {:?}",
        world.path(row.id).await
    );
    let intent = row.intent();
    assert!(world.shim.retrieved(&intent), "retrieved by id");
    let pi = world.localstripe.payment_intent(&intent).await;
    assert_eq!(pi["status"], "requires_payment_method", "{pi}");
    assert_eq!(world.shim.confirms(), 1);
    world.stop().await;
}

/// The configuration an operator writes: `onecharge serve`, the binary, with
/// `ONECHARGE_GATEWAY_KIND=stripe` and the rest of its settings in its environment only.
#[tokio::test]
async fn serve_configured_by_onecharge_gateway_kind_stripe_in_its_environment_charges_at_localstripe(
) {
    let Some(localstripe) = Localstripe::start().await else {
        return;
    };
    let shim = Shim::start(&localstripe).await;
    // The database and namespace only; the service is the binary below.
    let env = TestEnv::new().await;
    let customer = localstripe.create_customer("Grace Hopper").await;
    let serve = tokio::process::Command::from(crate::support::onecharge())
        .args(["serve", "--roles", "intake,executor,relay"])
        .env("ONECHARGE_GATEWAY_KIND", "stripe")
        .env("ONECHARGE_GATEWAY_URL", &shim.url)
        .env("ONECHARGE_GATEWAY_API_KEY", API_KEY)
        .env("ONECHARGE_DATABASE_URL", &env.settings.database_url)
        .env("ONECHARGE_NATS_URL", &env.settings.nats_url)
        .env("ONECHARGE_NAMESPACE", &env.settings.namespace)
        .env("ONECHARGE_ADMIN_ADDR", "127.0.0.1:0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("onecharge serve starts");
    let attempt = Uuid::new_v4();
    env.publish(
        "ls-env-1",
        &command(
            attempt,
            json!({"customer_id": customer, "order_id": "ord_ls_env", "payment_method": "pm_card_visa"}),
        ),
    )
    .await;

    let row = settled(&env, &shim, attempt).await;
    assert_eq!(row.status, "succeeded", "{row:?}");
    let intent = row.intent();
    let pi = localstripe.payment_intent(&intent).await;
    assert_eq!(pi["status"], "succeeded", "{pi}");
    assert_eq!(pi["metadata"]["payment_attempt_id"], attempt.to_string());
    assert_sent_as_documented(&shim, &intent);

    assert!(crate::support::sigterm(serve.id().expect("a pid")));
    let stopped = tokio::time::timeout(Duration::from_secs(60), serve.wait_with_output())
        .await
        .expect("serve stops after SIGTERM")
        .expect("serve's exit status");
    crate::support::assert_exited_ok(&stopped, "serve");
}

/// Polls a refund until it is final or in `needs_review`; its status.
async fn refund_settled(env: &TestEnv, refund_id: Uuid) -> String {
    let deadline = Instant::now() + SETTLE_DEADLINE;
    loop {
        let status = env.find_refund(refund_id).await.map(|row| row.status);
        if let Some(status) = status.filter(|s| {
            ["succeeded", "failed", "refused", "needs_review"].contains(&s.as_str())
                || Instant::now() > deadline
        }) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "refund {refund_id} never recorded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn refunds_published_as_commands_are_made_once_at_localstripe_with_their_refund_id() {
    let Some(world) = World::start().await else {
        return;
    };
    let row = world
        .settles_as(
            "ls-refund-charge",
            json!({"order_id": "ord_ls_r", "amount_minor": 2500, "currency": "EUR",
                   "payment_method": "pm_card_visa"}),
            "succeeded",
        )
        .await;
    let intent = row.intent();
    let subject = world
        .env
        .broker
        .names
        .command_subject(onecharge::broker::CommandKind::Refund);
    let publish = |message_id: &'static str, body: Value| {
        let env = &world.env;
        let subject = subject.clone();
        async move {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", message_id);
            env.publish_to(subject, headers, body.to_string().as_bytes())
                .await;
        }
    };
    let (partial, rest) = (Uuid::new_v4(), Uuid::new_v4());
    let partial_body = json!({"refund_id": partial, "payment_attempt_id": row.id,
                              "amount_minor": 1000, "reason": "one item returned"});
    publish("ls-refund-1", partial_body.clone()).await;
    // The same refund again under another message id: a business duplicate.
    publish("ls-refund-1-again", partial_body).await;
    assert_eq!(refund_settled(&world.env, partial).await, "succeeded");
    publish(
        "ls-refund-2",
        json!({"refund_id": rest, "payment_attempt_id": row.id, "reason": "order cancelled"}),
    )
    .await;
    assert_eq!(refund_settled(&world.env, rest).await, "succeeded");

    // What Stripe's dashboard would show: two refunds of the PaymentIntent, each once,
    // each carrying onecharge's refund_id, together the whole charge.
    let (status, list) = world
        .localstripe
        .get(&format!("/v1/refunds?payment_intent={intent}&limit=100"))
        .await;
    assert_eq!(status, 200, "{list}");
    let refunds = list["data"].as_array().unwrap();
    assert_eq!(refunds.len(), 2, "{list}");
    for (id, amount) in [(partial, 1000), (rest, 1500)] {
        let made: Vec<&Value> = refunds
            .iter()
            .filter(|r| r["metadata"]["refund_id"] == id.to_string())
            .collect();
        assert_eq!(made.len(), 1, "{list}");
        assert_eq!(made[0]["amount"], amount);
        assert_eq!(
            world.env.refund(id).await.gateway_refund_id.as_deref(),
            made[0]["id"].as_str()
        );
    }
    let sent: Vec<_> = world
        .shim
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST" && s.path == "/v1/refunds")
        .collect();
    assert_eq!(sent.len(), 2, "one refund request per refund_id");
    assert_eq!(
        sent[0].idempotency_key.as_deref(),
        Some(format!("onecharge-refund-{partial}").as_str())
    );
    assert_eq!(sent[0].param("payment_intent"), Some(intent.as_str()));
    world.stop().await;
}
