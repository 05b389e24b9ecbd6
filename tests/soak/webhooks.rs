//! The Stripe soak's webhooks (issue 35): every serve process also runs the webhook
//! listener on a port of its own, the mock gateway delivers its signed `payment_intent.*`
//! and `charge.*` events to all of them (deliveries to a killed process fail; the mock does
//! not retry), and a forger posts events naming real attempts' PaymentIntents that must all
//! be refused — signed with a secret onecharge does not have, signed with its secret but
//! outside the tolerance, unsigned, and a success for a declined attempt under a bad
//! signature. At the end: nothing forged recorded, no check or finding from a forged word,
//! every attempt's final state what the gateway's ledger says, genuine events taken.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use mock_gateway::stripe::WebhookDeliveries;
use onecharge::http::webhook::signature;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::fleet;
use crate::support::{MockControl, Records as _};
use crate::verify::{Observed, Problem};

/// The secret the mock signs with and every serve process verifies with.
pub const SECRET: &str = "whsec_soak_genuine";

/// The secret the forger signs with: one onecharge was never given.
const FORGED_SECRET: &str = "whsec_soak_forged";

/// How far outside `webhook_tolerance` (the default, 5 min) a stale event is signed.
const STALE_BY: Duration = Duration::from_secs(5 * 60 + 90);

/// Prefix of every event id the forger makes: none may be recorded.
const FORGED_PREFIX: &str = "evt_forged_";

/// What the forger sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Forgery {
    /// Signed now, with a secret onecharge does not have.
    WrongSecret,
    /// Signed with onecharge's own secret, but `STALE_BY` ago: a captured event replayed.
    Stale,
    /// No `Stripe-Signature` at all.
    Unsigned,
    /// `payment_intent.succeeded` for an attempt onecharge holds `declined`, signed with the
    /// forger's secret: the one word that, believed, would claim money was taken.
    SuccessForDeclined,
}

impl Forgery {
    const ALL: [Forgery; 4] = [
        Forgery::WrongSecret,
        Forgery::Stale,
        Forgery::Unsigned,
        Forgery::SuccessForDeclined,
    ];

    fn label(self) -> &'static str {
        match self {
            Forgery::WrongSecret => "wrong secret",
            Forgery::Stale => "stale",
            Forgery::Unsigned => "unsigned",
            Forgery::SuccessForDeclined => "success for a declined attempt",
        }
    }

    /// The `Stripe-Signature` header for `body`, signed at `now` (Unix seconds).
    fn header(self, now: i64, body: &[u8]) -> Option<String> {
        match self {
            Forgery::WrongSecret | Forgery::SuccessForDeclined => {
                Some(signature::header(&[FORGED_SECRET], now, body))
            }
            Forgery::Stale => Some(signature::header(
                &[SECRET],
                now - STALE_BY.as_secs() as i64,
                body,
            )),
            Forgery::Unsigned => None,
        }
    }
}

/// What the listeners answered to one kind of forgery.
#[derive(Debug, Default, Clone)]
pub struct Answers {
    pub sent: u64,
    /// `400`: refused, as contract §3.3 says.
    pub refused: u64,
    /// `2xx`: believed. Must stay 0.
    pub accepted: u64,
    /// Any other status (a `503` of a listener that sheds), by status.
    pub other: BTreeMap<u16, u64>,
    /// No answer: the process was down or killed mid-request.
    pub unanswered: u64,
}

/// Everything the forger sent and heard.
#[derive(Debug, Default)]
pub struct ForgerReport {
    pub by_kind: BTreeMap<Forgery, Answers>,
    /// The attempts its events named.
    pub named: HashSet<Uuid>,
}

/// The URL of a serve process's webhook listener.
pub fn endpoint(addr: SocketAddr) -> String {
    format!("http://{addr}/webhooks/stripe")
}

/// Loopback addresses nothing listens on now, one per serve process, kept for all its
/// generations so that the mock's endpoints stay right across restarts.
pub fn free_addrs(count: usize) -> Vec<SocketAddr> {
    let listeners: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("its address"))
        .collect()
}

/// Registers every listener with the mock gateway, with `SECRET`, and has it send each
/// state change's event by itself (`auto`).
pub async fn register(gateway_url: &str, addrs: &[SocketAddr]) {
    let urls: Vec<String> = addrs.iter().map(|a| endpoint(*a)).collect();
    MockControl::new(gateway_url)
        .send_every_change_to(&urls, &[SECRET])
        .await;
}

/// An event as Stripe writes it, about PaymentIntent `pi` of attempt `attempt`.
fn event(id: &str, kind: &str, pi: &str, attempt: Uuid, created: i64) -> Vec<u8> {
    let object = match kind {
        "charge.refunded" => json!({"id": format!("ch_{id}"), "object": "charge",
                                    "payment_intent": pi, "refunded": true}),
        "charge.dispute.created" => json!({"id": format!("dp_{id}"), "object": "dispute",
                                           "payment_intent": pi, "status": "lost"}),
        _ => json!({"id": pi, "object": "payment_intent",
                    "status": if kind == "payment_intent.succeeded" { "succeeded" } else { "requires_payment_method" },
                    "metadata": {"payment_attempt_id": attempt}}),
    };
    serde_json::to_vec(&json!({
        "id": id, "object": "event", "type": kind, "created": created,
        "data": {"object": object}, "livemode": false,
    }))
    .expect("an event serializes")
}

/// The event types the forger claims, in turn.
const KINDS: [&str; 4] = [
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "charge.refunded",
    "charge.dispute.created",
];

/// Posts forged, stale and unsigned events about real attempts to the listeners until
/// `stop`: every 100 ms, three attempts drawn from those that have a PaymentIntent and
/// one declined attempt (as they appear in the database), each event to one listener
/// drawn by `seed`.
pub async fn forge(
    pool: PgPool,
    addrs: Vec<SocketAddr>,
    seed: u64,
    stop: CancellationToken,
) -> ForgerReport {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5EBF_0A6E);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("a client");
    let mut report = ForgerReport::default();
    let mut n = 0u64;
    while !stop.is_cancelled() {
        let mut targets: Vec<(Uuid, String, Forgery)> = pool
            .try_random_intents(None, 3)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|(id, pi)| {
                let forgery = Forgery::ALL[rng.gen_range(0..3)];
                (id, pi, forgery)
            })
            .collect();
        targets.extend(
            pool.try_random_intents(Some("declined"), 1)
                .await
                .unwrap_or_default()
                .into_iter()
                .map(|(id, pi)| (id, pi, Forgery::SuccessForDeclined)),
        );
        for (attempt, pi, forgery) in targets {
            n += 1;
            let kind = match forgery {
                Forgery::SuccessForDeclined => "payment_intent.succeeded",
                _ => KINDS[rng.gen_range(0..KINDS.len())],
            };
            let now = time::OffsetDateTime::now_utc().unix_timestamp();
            let id = format!("{FORGED_PREFIX}{n}");
            let body = event(&id, kind, &pi, attempt, now);
            let addr = addrs[rng.gen_range(0..addrs.len())];
            let mut request = client
                .post(endpoint(addr))
                .header("content-type", "application/json")
                .body(body.clone());
            if let Some(header) = forgery.header(now, &body) {
                request = request.header("Stripe-Signature", header);
            }
            let answers = report.by_kind.entry(forgery).or_default();
            answers.sent += 1;
            report.named.insert(attempt);
            match request.send().await.map(|r| r.status().as_u16()) {
                Ok(400) => answers.refused += 1,
                Ok(status) if (200..300).contains(&status) => answers.accepted += 1,
                Ok(status) => *answers.other.entry(status).or_default() += 1,
                Err(_) => answers.unanswered += 1,
            }
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    report
}

/// What the database holds of the webhooks, read once everything has settled.
pub struct WebhooksSeen {
    /// `stripe_webhook_events`: event id → outcome.
    events: HashMap<String, String>,
    /// `gateway_object_checks` still there: the event id that asked for each.
    checks: Vec<String>,
    /// Every reconciliation finding: (class, evidence, source, attempt).
    findings: Vec<(String, String, String, Option<Uuid>)>,
    /// How the mock's own deliveries ended.
    deliveries: WebhookDeliveries,
    /// Serve log lines of an accepted webhook whose event id is the forger's.
    forged_accepted_lines: usize,
    /// Serve log lines of a delivery shed (too many in flight) and of one the listener
    /// could not record: the two `503`s.
    shed_lines: usize,
    unrecorded_lines: usize,
}

impl WebhooksSeen {
    pub async fn read(pool: &PgPool, deliveries: WebhookDeliveries, dir: &Path) -> Self {
        let events = pool
            .webhook_events()
            .await
            .into_iter()
            .map(|e| (e.event_id, e.outcome))
            .collect();
        let checks = pool.gateway_object_check_events().await;
        let findings = pool
            .findings()
            .await
            .into_iter()
            .map(|f| (f.class, f.evidence, f.source, f.payment_attempt_id))
            .collect();
        let forged_accepted_lines = fleet::lines_with(dir, "webhook accepted")
            .iter()
            .filter(|l| l.contains(FORGED_PREFIX))
            .count();
        Self {
            events,
            checks,
            findings,
            deliveries,
            forged_accepted_lines,
            shed_lines: fleet::count_lines(dir, "webhook shed"),
            unrecorded_lines: fleet::count_lines(dir, "cannot record a webhook"),
        }
    }
}

/// The figures the summary prints.
pub struct WebhookFigures {
    genuine_events: usize,
    by_outcome: BTreeMap<String, usize>,
    open_checks: usize,
    attempts_named: usize,
}

/// The webhook checks: the forger refused every time and changed nothing, the genuine
/// events taken.
pub fn check(
    observed: &Observed,
    forger: &ForgerReport,
    seen: &WebhooksSeen,
) -> (Vec<Problem>, WebhookFigures) {
    let mut problems = Vec::new();
    let mut problem =
        |attempt: Option<Uuid>, text: String| problems.push(Problem { attempt, text });

    // Every forgery refused with 400, and each kind reached a listener.
    for forgery in Forgery::ALL {
        let answers = forger.by_kind.get(&forgery).cloned().unwrap_or_default();
        if answers.accepted > 0 {
            problem(
                None,
                format!(
                    "{} forged events ({}) were answered 2xx",
                    answers.accepted,
                    forgery.label()
                ),
            );
        }
        if answers.refused == 0 {
            problem(
                None,
                format!(
                    "no forged event ({}) was refused: the forger never reached a listener",
                    forgery.label()
                ),
            );
        }
        if let Some((status, _)) = answers.other.iter().find(|(status, _)| **status != 503) {
            problem(
                None,
                format!(
                    "a forged event ({}) was answered {status}, neither refused nor shed",
                    forgery.label()
                ),
            );
        }
    }
    // Nothing forged recorded, nor any event the mock did not make.
    for (id, outcome) in &seen.events {
        if !id.starts_with("evt_mock_") {
            problem(
                None,
                format!("event {id} was recorded ({outcome}), and the mock never sent it"),
            );
        }
    }
    if seen.forged_accepted_lines > 0 {
        problem(
            None,
            format!(
                "{} serve log lines say a forged event was accepted",
                seen.forged_accepted_lines
            ),
        );
    }
    for id in seen.checks.iter().filter(|id| !id.starts_with("evt_mock_")) {
        problem(
            None,
            format!("a check of a PaymentIntent was asked by event {id}, not the mock's"),
        );
    }
    // No finding: every refund at the gateway is onecharge's own and nothing is disputed,
    // so a finding could only come from a forged word (or a genuine event misread).
    for (class, evidence, source, attempt) in &seen.findings {
        problem(
            *attempt,
            format!("a {class} finding ({evidence}) was opened by the {source}, and the gateway holds no aftermath onecharge did not make"),
        );
    }
    // Every attempt's final state is the gateway's: succeeded exactly when the ledger holds
    // its charge. A forged success for a declined attempt believed would break this.
    let charged: HashSet<&str> = observed
        .ledger
        .iter()
        .filter(|c| c.status == mock_gateway::ChargeStatus::Succeeded)
        .map(|c| c.reference.as_str())
        .collect();
    for attempt in &observed.attempts {
        let id = attempt.payment_attempt_id.to_string();
        let succeeded = attempt.status == "succeeded";
        if succeeded != charged.contains(id.as_str()) {
            let named = if forger.named.contains(&attempt.payment_attempt_id) {
                " (the forger named it)"
            } else {
                ""
            };
            problem(
                Some(attempt.payment_attempt_id),
                format!(
                    "attempt {id} is {} but the gateway's ledger {} a charge for it{named}",
                    attempt.status,
                    if charged.contains(id.as_str()) {
                        "holds"
                    } else {
                        "has no"
                    }
                ),
            );
        }
    }
    // The genuine events reached the listeners through the kills.
    let genuine_events = seen
        .events
        .keys()
        .filter(|id| id.starts_with("evt_mock_"))
        .count();
    if seen.deliveries.accepted == 0 || genuine_events == 0 {
        problem(
            None,
            format!(
                "no genuine webhook was taken ({} deliveries accepted, {genuine_events} events recorded)",
                seen.deliveries.accepted
            ),
        );
    }
    if let Some(n) = seen.deliveries.refused.get(&400) {
        problem(
            None,
            format!("{n} of the mock's own signed deliveries were refused with 400"),
        );
    }
    let mut by_outcome = BTreeMap::new();
    for outcome in seen.events.values() {
        *by_outcome.entry(outcome.clone()).or_default() += 1;
    }
    let figures = WebhookFigures {
        genuine_events,
        by_outcome,
        open_checks: seen.checks.len(),
        attempts_named: forger.named.len(),
    };
    (problems, figures)
}

/// The summary's webhook lines.
pub fn print(forger: &ForgerReport, seen: &WebhooksSeen, figures: &WebhookFigures) {
    let d = &seen.deliveries;
    let refused: Vec<String> = d
        .refused
        .iter()
        .map(|(status, n)| format!("{n} × {status}"))
        .collect();
    println!(
        "  genuine webhooks          {} deliveries sent, {} accepted, {} refused{}, {} unanswered (process down); {} events recorded ({})",
        d.sent,
        d.accepted,
        d.refused_in_all(),
        if refused.is_empty() {
            String::new()
        } else {
            format!(" ({})", refused.join(", "))
        },
        d.failed,
        figures.genuine_events,
        figures
            .by_outcome
            .iter()
            .map(|(outcome, n)| format!("{n} {outcome}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let sent: u64 = forger.by_kind.values().map(|a| a.sent).sum();
    let refused: u64 = forger.by_kind.values().map(|a| a.refused).sum();
    println!(
        "  forged webhooks           {sent} sent about {} attempts, {refused} refused with 400, {} accepted",
        figures.attempts_named,
        forger.by_kind.values().map(|a| a.accepted).sum::<u64>()
    );
    for (forgery, a) in &forger.by_kind {
        let other: u64 = a.other.values().sum();
        println!(
            "    {:<30} {:>5} sent, {:>5} refused, {} accepted, {} shed, {} unanswered",
            forgery.label(),
            a.sent,
            a.refused,
            a.accepted,
            other,
            a.unanswered
        );
    }
    println!(
        "  webhook 503s              {} shed (too many in flight), {} not recorded (database) in the serve logs",
        seen.shed_lines, seen.unrecorded_lines
    );
    println!(
        "  findings                  {} (checks of PaymentIntents left: {})",
        seen.findings.len(),
        figures.open_checks
    );
}
