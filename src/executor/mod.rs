//! The executor: charges each due payment attempt through the gateway, at most once.
//!
//! One step ([`Executor::run_once`]) asks the shared [`GatewayHealth`] how many calls may
//! start, claims that many due `pending` attempts under a fenced lease (committed, with the
//! dispatch stamp and transition, before any call), calls the gateway with each attempt's
//! stored key and body, classifies the answer ([`crate::domain::outcome`]), decides where the
//! attempt goes ([`RetryPolicy`]) and writes that under the lease's fencing token together
//! with its transition, its event and the call's evidence. [`Executor::run`] repeats it with
//! a bounded number of calls in flight until shutdown, then finishes the calls in hand.
//!
//! Invariants:
//! - A gateway call happens only under a lease whose claim (`in_flight`, `dispatched_at`,
//!   transition) committed first. A process killed mid-call leaves `in_flight` with a lease
//!   that expires; the executor never claims `in_flight` rows, so the reconciler settles it
//!   by lookup and no second charge is sent as new.
//! - Every write after the call is fenced by the lease token: a worker whose lease was taken
//!   over changes nothing (its call is still recorded as evidence).
//! - Every try of an attempt sends the same key and the same bytes.
//! - No retry is sent once the gateway might have forgotten the key (key retention minus
//!   margin since the first call), nor past the maximum tries or age: those go to `unknown`.
//! - While the gateway rejects the credentials nothing is claimed (one probe per interval),
//!   attempts stay `pending` and no try is consumed; while the breaker is open, likewise.
//! - Nothing cuts a gateway call off unless `shutdown_timeout` passes: shutdown stops
//!   claiming and waits for calls in hand; an attempt abandoned after the timeout stays
//!   `in_flight`, and its expired lease hands it to the reconciler.
//!
//! About 800 lines: the executor's loop (claim ahead, send, settle, drain) is one story about
//! the lease; the Stripe two-step is in `two_step`, the batched writes in `writer`, the queue
//! in `ahead`, the rules in `policy`.

mod ahead;
mod in_hand;
mod metrics;
pub mod pause;
mod policy;
pub mod refunds;
mod two_step;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;

pub use policy::RetryPolicy;
pub use writer::{GatewayObjectWriter, SettlementWriter, WriteError};

use crate::clock::{Clock, SystemClock};
use crate::config::RequiresAction;
use crate::config::{ExecutorSettings, Settings};
use crate::domain::outcome::GatewayOutcome;
use crate::domain::{AttemptStatus, ChargeClaim};
use crate::domain::{LeaseToken, PaymentAttemptId};
use crate::domain::{SettleWrite, Settlement, TransitionCause};
use crate::gateway::{Admission, GatewayClient, GatewayHealth};
use crate::gateway::{ChargeBody, ChargeRequest};
use crate::gateway_access::limit::Take;
use crate::gateway_access::GatewayAccess;
use crate::nudge::Nudges;
use crate::store::attempts::{self as sql, ClaimLimits};
use crate::store::Store;
use ahead::{ClaimAhead, Queued};
use in_hand::InHand;
use pause::{Known, PauseWatch};

/// Database connections one executor needs: its one claim at a time, the settlement
/// batches being written, the batches of writes before a confirm (Stripe's; a §3 gateway
/// never opens those), and one spare (which a hand-back of queued attempts uses). It does
/// not grow with `executor.concurrency` or the claim-ahead queue: calls in flight and queued
/// attempts hold no connection.
pub const DATABASE_CONNECTIONS: u32 = 1 + 2 * writer::BATCHES_IN_FLIGHT as u32 + 1;

/// What became of one claimed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// The result was written: the attempt is now in this state.
    Moved(AttemptStatus),
    /// The fencing token refused the write: the lease had passed to another worker (or the
    /// attempt already left `in_flight`). Nothing changed but the call's evidence.
    Fenced,
    /// The result could not be written (the database failed). The attempt stays
    /// `in_flight` until its lease expires and the reconciler settles it by lookup.
    Unrecorded(String),
}

/// One attempt's step, for tests, benchmarks and logs.
#[derive(Debug, Clone)]
pub struct AttemptReport {
    pub payment_attempt_id: PaymentAttemptId,
    /// The try this step was (unchanged by a hand-over).
    pub try_number: i32,
    pub lease_token: LeaseToken,
    /// The gateway's classified answer; `None` when no call was made (a hand-over).
    pub outcome: Option<GatewayOutcome>,
    pub disposition: Disposition,
}

/// What one [`Executor::run_once`] did.
#[derive(Debug, Clone)]
pub struct ExecutorReport {
    /// What the gateway health allowed at the start of the step.
    pub admission: Admission,
    pub attempts: Vec<AttemptReport>,
}

impl ExecutorReport {
    /// Attempts claimed in this step.
    pub fn claimed(&self) -> usize {
        self.attempts.len()
    }

    /// Attempts this step moved to `status`.
    pub fn count(&self, status: AttemptStatus) -> usize {
        self.attempts
            .iter()
            .filter(|a| a.disposition == Disposition::Moved(status))
            .count()
    }

    /// Results refused by the fencing token.
    pub fn fenced(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| a.disposition == Disposition::Fenced)
            .count()
    }
}

/// The executor role. Cheap to clone; clones share the gateway client, health and clock.
#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    store: Store,
    /// The client, the shared health and the fleet's rate limit (permits before a claim,
    /// one per call).
    gateway: GatewayAccess,
    settings: ExecutorSettings,
    policy: RetryPolicy,
    writer: SettlementWriter,
    /// The writes before a confirm (the gateway object and the send's stamp), group-committed.
    objects: GatewayObjectWriter,
    nudges: Nudges,
    owner: String,
    clock: Arc<dyn Clock>,
    /// `intake.max_command_age`: a command older than this when it would first be sent is
    /// expired instead (0: never).
    max_command_age: Duration,
    /// How long shutdown waits for the attempts in hand.
    shutdown_timeout: Duration,
    /// The longest a whole gateway call may take (connect plus request timeout): a queued
    /// attempt whose lease has less left is handed back instead of sent.
    call_limit: Duration,
    /// `stripe_requires_action`: cancel a PaymentIntent left `requires_action`, or leave
    /// it for a person.
    requires_action: RequiresAction,
    /// When this executor last looked for stale commands to expire (`None`: not yet).
    last_expiry: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    /// What this executor knows of the fleet's pause, kept current while `run` runs.
    pause: PauseWatch,
}

/// How often the executor looks for due commands grown too old to send. The claim itself
/// never takes one (it skips them), so expiring them is the announcement, not the guard,
/// and need not run before every claim: the search walks every due attempt never sent, a
/// backlog's worth of rows, and before each claim it cost as much as the claim (issue 28).
const EXPIRE_STALE_EVERY: Duration = Duration::from_secs(1);

impl Executor {
    /// An executor with a fresh lease owner name (`<host>-<pid>-<random>`), the system clock, and
    /// `health` shared with whoever else calls this gateway (readiness, the reconciler).
    /// Starts its settlement writer on the current Tokio runtime: results ready at the same
    /// time commit together, up to `executor.batch_size` per transaction.
    pub fn new(
        store: Store,
        gateway: GatewayClient,
        health: GatewayHealth,
        settings: &Settings,
    ) -> Self {
        let owner = crate::identity::default_owner();
        Self {
            inner: Arc::new(Inner {
                writer: SettlementWriter::start(store.clone(), settings.executor.batch_size),
                objects: GatewayObjectWriter::start(store.clone(), settings.executor.batch_size),
                gateway: GatewayAccess::new(store.clone(), gateway, health, settings),
                store,
                settings: settings.executor.clone(),
                policy: RetryPolicy::from_settings(settings),
                nudges: Nudges::default(),
                owner,
                clock: Arc::new(SystemClock),
                max_command_age: settings.intake.max_command_age,
                shutdown_timeout: settings.shutdown_timeout,
                call_limit: settings.gateway_call_limit(),
                requires_action: settings.stripe_requires_action,
                last_expiry: Arc::default(),
                pause: PauseWatch::default(),
            }),
        }
    }

    /// The same executor reading time from `clock` (tests).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: Arc::new(Inner {
                clock,
                ..(*self.inner).clone()
            }),
        }
    }

    /// The same executor, woken by this process's intake when attempts are recorded (instead
    /// of waiting out `poll_interval`), and waking its relay when it writes an event.
    pub fn with_nudges(self, nudges: Nudges) -> Self {
        Self {
            inner: Arc::new(Inner {
                nudges,
                ..(*self.inner).clone()
            }),
        }
    }

    /// The lease owner name this executor writes.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// The shared gateway health this executor obeys and updates.
    pub fn health(&self) -> &GatewayHealth {
        &self.inner.gateway.health
    }

    /// What this executor knows of the fleet's pause (current while [`Executor::run`] runs).
    pub fn pause_watch(&self) -> &PauseWatch {
        &self.inner.pause
    }

    /// Claims up to `limit` due attempts (see [`sql::claim_due_attempts`]). The claim is
    /// committed when this returns: each attempt is `in_flight` under this executor's lease.
    /// First, at most every [`EXPIRE_STALE_EVERY`], due attempts never sent whose command has
    /// grown older than `intake.max_command_age` are expired
    /// ([`sql::expire_stale_commands`]); the claim skips them in between, so they are never
    /// charged late.
    pub async fn claim(&self, limit: usize) -> anyhow::Result<Vec<ChargeClaim>> {
        let inner = &self.inner;
        if self.expiry_due() {
            self.expire_stale_commands(limit).await?;
        }
        let claimed = sql::claim_due_attempts(
            &inner.store,
            &inner.owner,
            ClaimLimits {
                limit,
                lease: inner.settings.lease,
                key_window: inner.policy.window.key_window,
                max_age: inner.policy.window.max_age,
                max_command_age: inner.max_command_age,
            },
        )
        .await
        .context("claiming due payment attempts")?;
        metrics::claimed(&claimed);
        Ok(claimed)
    }

    /// Whether [`EXPIRE_STALE_EVERY`] has passed since the last look for stale commands;
    /// if so, the look starts now.
    fn expiry_due(&self) -> bool {
        let mut last = self
            .inner
            .last_expiry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        if last.is_some_and(|at| now.duration_since(at) < EXPIRE_STALE_EVERY) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Expires up to `limit` due commands too old to send, and announces them.
    async fn expire_stale_commands(&self, limit: usize) -> anyhow::Result<()> {
        let inner = &self.inner;
        let expired =
            sql::expire_stale_commands(&inner.store, &inner.owner, inner.max_command_age, limit)
                .await
                .context("expiring stale commands")?;
        if !expired.is_empty() {
            for id in &expired {
                metrics::settled(AttemptStatus::Expired);
                tracing::warn!(payment_attempt_id = %id, "command too old to charge when it was due: expired, never sent");
            }
            inner.nudges.events_written();
        }
        Ok(())
    }

    /// One step: claims what the gateway health allows (up to `batch_size`), charges each
    /// claimed attempt with up to `concurrency` calls at once, and writes every result.
    pub async fn run_once(&self) -> anyhow::Result<ExecutorReport> {
        let inner = &self.inner;
        let admission = inner.gateway.health.admit(inner.clock.now());
        let limit = admission.allowance(inner.settings.batch_size);
        if limit == 0 {
            return Ok(ExecutorReport {
                admission,
                attempts: Vec::new(),
            });
        }
        let permits = match inner.gateway.rate_limit.for_charges(limit).await {
            Take::Granted(permits) => permits,
            Take::Wait(_) => {
                return Ok(ExecutorReport {
                    admission,
                    attempts: Vec::new(),
                })
            }
        };
        let claimed = self.claim(permits.count()).await?;
        permits.spend(claimed.iter().filter(|a| a.dispatch).count());
        let attempts = futures::stream::iter(claimed)
            .map(|claim| self.execute(claim))
            .buffer_unordered(inner.settings.concurrency)
            .collect()
            .await;
        Ok(ExecutorReport {
            admission,
            attempts,
        })
    }

    /// Runs until `shutdown` fires: keeps every call slot busy while attempts are due, with
    /// a short queue of attempts claimed ahead ([`ahead`]) so that a freed slot starts its
    /// next call without waiting for a claim; waits `poll_interval` when nothing is due or
    /// the gateway health says wait. One claim runs at a time, beside the calls. On
    /// shutdown it stops claiming, hands back what it claimed and did not send, and finishes
    /// the calls in hand, for at most `shutdown_timeout` ([`Executor::drain`]).
    ///
    /// A call slot is freed when the gateway answers, not when the result is written: the
    /// next call overlaps the previous result's commit. Attempts in hand (queued, calling or
    /// writing) are bounded by twice the concurrency, so a slow database slows the claims.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let settings = &self.inner.settings;
        let mut in_hand = InHand::new(settings.concurrency);
        let mut ahead = ClaimAhead::new(settings.claim_ahead);
        let mut claiming: Option<Claiming> = None;
        let mut next = Next::Claim;
        let mut failures = 0u32;
        tracing::info!(owner = %self.inner.owner, concurrency = settings.concurrency, claim_ahead = settings.claim_ahead, "executor started");
        let following = shutdown.child_token();
        let _following = following.clone().drop_guard();
        tokio::spawn(
            self.inner
                .pause
                .clone()
                .follow(self.inner.store.clone(), following),
        );
        loop {
            in_hand.reap();
            if shutdown.is_cancelled() {
                break;
            }
            self.send_queued(&mut ahead, &mut in_hand).await;
            if claiming.is_none() && matches!(next, Next::Claim) {
                match self.start_claim(&ahead, &in_hand) {
                    Ok(started) => claiming = Some(started),
                    Err(wait) => next = wait,
                }
            }
            let wakes = Wakes::of(&next, claiming.is_some(), in_hand.free(usize::MAX));
            let woke = tokio::select! {
                _ = shutdown.cancelled() => Woke::Shutdown,
                claimed = async { (&mut claiming.as_mut().expect("claiming").handle).await }, if wakes.claim => Woke::Claimed(claimed),
                _ = in_hand.wait_for_room(), if wakes.room => Woke::Room,
                _ = self.wait(&next), if wakes.timer => Woke::Waited,
            };
            match woke {
                Woke::Shutdown => break,
                Woke::Claimed(claimed) => {
                    let claim = claiming.take().expect("claiming");
                    next = self.queue_claimed(&mut ahead, &claim, claimed, &mut failures);
                }
                Woke::Room if matches!(next, Next::WaitForRoom) => next = Next::Claim,
                Woke::Room => {}
                Woke::Waited => next = Next::Claim,
            }
        }
        let mut unsent: Vec<ChargeClaim> = ahead.take_all().into_iter().map(|q| q.claim).collect();
        if let Some(claim) = claiming {
            if let Ok(ClaimResult::Claimed {
                claimed: Ok(claimed),
                ..
            }) = claim.handle.await
            {
                unsent.extend(claimed);
            }
        }
        self.hand_back(unsent, "shutting down").await;
        self.drain(in_hand).await;
        Ok(())
    }

    /// Starts a claim, in a task of its own, for the free call slots plus what the
    /// claim-ahead queue lacks (as far as the gateway health admits); or says what to wait
    /// for when nothing should be claimed now.
    fn start_claim(&self, ahead: &ClaimAhead, in_hand: &InHand) -> Result<Claiming, Next> {
        let inner = &self.inner;
        let want = in_hand
            .wanted(ahead.target(), ahead.len())
            .min(inner.settings.batch_size);
        if want == 0 {
            return Err(Next::WaitForRoom);
        }
        let admission = inner.gateway.health.admit(inner.clock.now());
        let limit = admission.allowance(want);
        if limit == 0 {
            return Err(Next::Idle);
        }
        let executor = self.clone();
        let handle = tokio::spawn(async move {
            let started = std::time::Instant::now();
            // Permits before the claim (decision 62): an attempt waiting for its turn holds no
            // lease. One queued ahead holds its permit, so sending it needs no other.
            let permits = match executor.inner.gateway.rate_limit.for_charges(limit).await {
                Take::Granted(permits) => permits,
                Take::Wait(wait) => return ClaimResult::RateLimited(wait),
            };
            let asked = permits.count();
            let claimed = executor.claim(asked).await;
            if let Ok(attempts) = &claimed {
                permits.spend(attempts.iter().filter(|a| a.dispatch).count());
            }
            ClaimResult::Claimed {
                claimed,
                asked,
                started,
            }
        });
        Ok(Claiming {
            handle,
            probe: matches!(admission, Admission::Probe),
        })
    }

    /// Queues what a claim returned; says what the loop does next.
    fn queue_claimed(
        &self,
        ahead: &mut ClaimAhead,
        claim: &Claiming,
        claimed: Result<ClaimResult, tokio::task::JoinError>,
        failures: &mut u32,
    ) -> Next {
        let error = match claimed {
            Ok(ClaimResult::RateLimited(wait)) => return Next::RetryAfter(wait),
            Ok(ClaimResult::Claimed {
                claimed: Ok(attempts),
                asked,
                started,
            }) => {
                *failures = 0;
                let full = attempts.len() == asked;
                let took = started.elapsed();
                ahead.claimed(attempts, claim.probe, self.inner.clock.now(), took);
                return if full { Next::Claim } else { Next::Idle };
            }
            Ok(ClaimResult::Claimed {
                claimed: Err(err), ..
            }) => format!("{err:#}"),
            Err(panicked) => format!("the claim task failed: {panicked}"),
        };
        *failures = failures.saturating_add(1);
        let wait = self
            .inner
            .policy
            .backoff(*failures as i32)
            .min(Duration::from_secs(30));
        step_failed!(
            crate::store::availability::in_failover(),
            error,
            error = %error,
            retry_in_ms = wait.as_millis() as u64,
            "claiming failed"
        );
        Next::RetryAfter(wait)
    }

    /// Starts a call for each queued attempt a free slot can take, after checking that the
    /// call may still go ([`Executor::why_not_send`]); hands back what may not. While the
    /// gateway health holds calls back, the whole queue goes back at once (but for a probe,
    /// which is what tests the gateway again); so does every attempt an open fleet pause
    /// covers, as the [`pause::PauseWatch`] knows them (or, when it does not know, as the
    /// database says now).
    async fn send_queued(&self, ahead: &mut ClaimAhead, in_hand: &mut InHand) {
        let inner = &self.inner;
        if let Some(reason) = inner.gateway.health.holding_calls() {
            let (probes, held): (Vec<_>, Vec<_>) =
                ahead.take_all().into_iter().partition(|q| q.probe);
            ahead.put_back(probes);
            let held = held.into_iter().map(|q| q.claim).collect();
            self.hand_back(held, &format!("claimed ahead, not sent: {reason}"))
                .await;
        }
        if ahead.len() > 0 && in_hand.free(usize::MAX) > 0 {
            let covers = match inner.pause.known() {
                Known::Open(covers) => Ok(covers),
                Known::Unknown => crate::store::fleet::open_covers(&inner.store).await,
            };
            match covers {
                Ok(covers) if covers.is_empty() => {}
                Ok(covers) => {
                    // Only what a pause covers goes back; the rest keeps its place.
                    let (held, free): (Vec<_>, Vec<_>) =
                        ahead.take_all().into_iter().partition(|q| {
                            pause::holds_charge(&covers, q.claim.attempt.money.currency())
                        });
                    ahead.put_back(free);
                    let held = held.into_iter().map(|q| q.claim).collect();
                    self.hand_back(held, "claimed ahead, not sent: a fleet pause holds it back")
                        .await;
                }
                Err(err) => {
                    // Unknown is not "not paused": nothing queued goes until a look answers.
                    tracing::warn!(error = %err, "cannot read the fleet's pause; holding the attempts claimed ahead");
                    return;
                }
            }
        }
        let mut short = Vec::new();
        while in_hand.free(usize::MAX) > 0 {
            let Some(queued) = ahead.next() else { break };
            if let Some(why) = self.why_not_send(&queued) {
                tracing::info!(payment_attempt_id = %queued.claim.attempt.payment_attempt_id, why, "handing back an attempt claimed ahead");
                short.push(queued.claim);
                continue;
            }
            let slot = in_hand.slot();
            let executor = self.clone();
            let claim = queued.claim;
            ahead.sent();
            in_hand.spawn(claim.attempt.payment_attempt_id, async move {
                executor.execute_in_slot(claim, Some(slot)).await
            });
        }
        self.hand_back(
            short,
            "claimed ahead, not sent: the lease left could not cover a whole gateway call",
        )
        .await;
    }

    /// Why a queued attempt must not be sent now, if it must not: its lease no longer
    /// covers a whole gateway call (connect plus request timeout). A hand-over (no call) is
    /// always written.
    fn why_not_send(&self, queued: &Queued) -> Option<&'static str> {
        let inner = &self.inner;
        let left = queued.lease_left(inner.settings.lease, inner.clock.now());
        (queued.claim.dispatch && left < inner.call_limit)
            .then_some("the lease left could not cover a whole gateway call")
    }

    /// Hands attempts claimed and never sent back to `pending` at once
    /// ([`sql::hand_back`]): another instance (or this one) may claim them without waiting
    /// for their leases, no try is consumed, and no gateway saw them. If the database
    /// refuses, they stay `in_flight` until their leases expire, and the reconciler finds
    /// nothing charged and sends them again under the same key.
    async fn hand_back(&self, attempts: Vec<ChargeClaim>, why: &str) {
        if attempts.is_empty() {
            return;
        }
        let refs: Vec<&ChargeClaim> = attempts.iter().collect();
        match sql::hand_back(&self.inner.store, &refs, why).await {
            Ok(handed) => {
                metrics::handed_back(handed);
                tracing::info!(
                    handed_back = handed,
                    why,
                    "claimed attempts handed back unsent"
                );
                self.inner.nudges.attempts_recorded();
            }
            Err(err) => {
                tracing::warn!(error = %err, attempts = attempts.len(), why, "cannot hand back attempts claimed and not sent: they stay in_flight until their leases expire, and the reconciler sends them again");
            }
        }
    }

    /// Waits as `next` says (only `Idle` and `RetryAfter` wait).
    async fn wait(&self, next: &Next) {
        match next {
            Next::Idle => {
                tokio::select! {
                    _ = tokio::time::sleep(self.inner.settings.poll_interval) => {}
                    _ = self.inner.nudges.attempts_due() => {}
                }
            }
            Next::RetryAfter(wait) => tokio::time::sleep(*wait).await,
            Next::Claim | Next::WaitForRoom => std::future::pending().await,
        }
    }

    /// On shutdown: waits for the calls in hand and their writes, for at most
    /// `shutdown_timeout`, then abandons the rest and says which. An abandoned attempt is
    /// safe: it stays `in_flight` until its lease expires, and the reconciler looks it up.
    async fn drain(&self, in_hand: InHand) {
        tracing::info!(
            in_hand = in_hand.len(),
            "executor stopping: finishing the gateway calls in hand"
        );
        let timeout = self.inner.shutdown_timeout;
        for id in in_hand.drain(timeout).await {
            tracing::warn!(
                payment_attempt_id = %id,
                shutdown_timeout = %humantime::format_duration(timeout),
                "shutdown_timeout passed with this attempt still in hand: abandoned in_flight; the reconciler looks it up once its lease expires"
            );
        }
    }

    /// Charges one claimed attempt and writes the result under its fencing token. Never
    /// fails: a result that cannot be written is reported as [`Disposition::Unrecorded`].
    pub async fn execute(&self, claim: ChargeClaim) -> AttemptReport {
        self.execute_in_slot(claim, None).await
    }

    /// [`Executor::execute`], freeing `slot` as soon as the gateway has answered.
    #[tracing::instrument(name = "execute", skip_all, fields(
        payment_attempt_id = %claim.attempt.payment_attempt_id,
        try_number = claim.attempt.tries,
        lease_token = claim.attempt.lease_token.get(),
        causation_id = %claim.first_message_id,
        correlation_id = claim.correlation_id.as_deref().unwrap_or(""),
    ))]
    async fn execute_in_slot(
        &self,
        claim: ChargeClaim,
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> AttemptReport {
        let inner = &self.inner;
        let now = database_time(&claim);
        if !claim.dispatch {
            let now = now();
            let settlement = inner.policy.hand_over(&claim.attempt.history(), now);
            let write = SettleWrite {
                fence: claim.fence(),
                settlement,
                cause: TransitionCause::RetryWindowClosed,
                call: None,
                now,
            };
            let disposition = self.write(&claim, write).await;
            return report(&claim, None, disposition);
        }
        let mut request = charge_request(&claim);
        let mut started_at = now();
        let call = match self.prepare(&claim, &mut request, started_at).await {
            Err(disposition) => return report(&claim, None, disposition),
            Ok(Some(answered)) => answered,
            Ok(None) => {
                started_at = now();
                let call = inner.gateway.client.charge(&request).await;
                self.cancel_if_action_required(&claim, call, &now).await
            }
        };
        if !call.answered_locally {
            inner
                .gateway
                .health
                .record(&call.outcome, inner.clock.now());
        }
        // Freed after the health has learned from the answer: the next call (or a queued
        // attempt's check) sees a breaker this answer opened.
        drop(slot);
        let now = now();
        let (settlement, cause) = inner
            .policy
            .settle(&claim.attempt.history(), &call.outcome, now);
        let evidence = claim.attempt.evidence(
            &call,
            call.outcome.label(),
            started_at,
            call.outcome.charge_id().cloned(),
            call.error.clone().or_else(|| match &call.outcome {
                GatewayOutcome::Succeeded { .. } | GatewayOutcome::Declined { .. } => None,
                other => Some(other.to_string()),
            }),
        );
        let write = SettleWrite {
            fence: claim.fence(),
            settlement,
            cause,
            call: Some(evidence),
            now,
        };
        let disposition = self.write(&claim, write).await;
        report(&claim, Some(call.outcome), disposition)
    }

    /// Writes a settlement through the settlement writer, retrying a transient database
    /// failure a few times while the lease lasts.
    async fn write(&self, claim: &ChargeClaim, write: SettleWrite) -> Disposition {
        let inner = &self.inner;
        let status = write.settlement.status();
        let cause = write.cause;
        let mut delay = Duration::from_millis(50);
        let mut waited = Duration::ZERO;
        loop {
            match inner.writer.write(write.clone()).await {
                Ok(true) => {
                    if status.event_name().is_some() {
                        inner.nudges.events_written();
                    }
                    metrics::settled(status);
                    tracing::info!(status = %status, %cause, "attempt settled");
                    return Disposition::Moved(status);
                }
                Ok(false) => {
                    metrics::fenced();
                    tracing::warn!(
                        %cause,
                        "result rejected by the fencing token: the lease was taken over or the attempt already left in_flight"
                    );
                    return Disposition::Fenced;
                }
                Err(err)
                    if err.transient
                        && write.now + waited + delay < claim.lease_ends()
                        && delay < Duration::from_secs(2) =>
                {
                    step_failed!(crate::store::availability::in_failover(), warn, error = %err.message, retry_in_ms = delay.as_millis() as u64, "writing the result failed; retrying");
                    tokio::time::sleep(delay).await;
                    waited += delay;
                    delay *= 4;
                }
                Err(err) if !err.transient => return self.hand_over_unstorable(write, &err).await,
                Err(err) => {
                    metrics::unrecorded();
                    step_failed!(
                        crate::store::availability::in_failover(),
                        error,
                        error = %err.message,
                        "cannot write the result: the attempt stays in_flight until its lease expires and the reconciler settles it"
                    );
                    return Disposition::Unrecorded(crate::domain::bounded(&err.message, 500));
                }
            }
        }
    }
}

impl Executor {
    /// A result the database refused for good (it will refuse it every time): keeps the
    /// call's evidence in a transaction of its own, then hands the attempt to the reconciler
    /// at once (`unknown`, with why and what the gateway said), instead of leaving it
    /// `in_flight` until its lease expires. The reconciler counts each further refusal and
    /// ends in `needs_review`, so the attempt never cycles silently.
    async fn hand_over_unstorable(&self, write: SettleWrite, err: &WriteError) -> Disposition {
        let inner = &self.inner;
        metrics::unrecorded();
        tracing::error!(error = %err.message, cause = %write.cause, "the database refused the result; keeping the call's evidence and handing the attempt to the reconciler");
        if let Some(call) = &write.call {
            if let Err(evidence) = sql::record_gateway_call_alone(&inner.store, call).await {
                tracing::error!(error = %evidence, "cannot store the gateway call's evidence either");
            }
        }
        let hand_over = SettleWrite {
            settlement: Settlement::Unknown {
                reason: format!(
                    "the gateway's answer could not be stored: {}; the gateway answered: {}",
                    crate::domain::bounded(&err.message, 400),
                    write.settlement.describe()
                ),
            },
            cause: TransitionCause::SettlementRefused,
            call: None,
            now: write.now,
            fence: write.fence,
        };
        match sql::settle(&inner.store, &hand_over).await {
            Ok(true) => {
                metrics::settled(AttemptStatus::Unknown);
                Disposition::Moved(AttemptStatus::Unknown)
            }
            Ok(false) => {
                metrics::fenced();
                Disposition::Fenced
            }
            Err(second) => {
                tracing::error!(error = %second, "cannot hand the attempt over either: it stays in_flight until its lease expires and the reconciler settles it");
                Disposition::Unrecorded(crate::domain::bounded(&err.message, 500))
            }
        }
    }
}

/// What the run loop does when no claim is running.
#[derive(Debug)]
enum Next {
    /// Claim again at once: the last claim was full.
    Claim,
    /// Nothing to claim for: no free slot and the queue is long enough. Wait for a call or
    /// a write to finish.
    WaitForRoom,
    /// Nothing due, or the gateway health said wait: `poll_interval`, or a nudge.
    Idle,
    /// Claiming failed, or the gateway rate limit has no permit yet: wait this long.
    RetryAfter(Duration),
}

impl Next {
    /// Whether this waits on a timer ([`Executor::wait`]).
    fn waits(&self) -> bool {
        matches!(self, Self::Idle | Self::RetryAfter(_))
    }
}

/// What the run loop's `select!` waits on besides the shutdown.
struct Wakes {
    /// The claim running beside the calls.
    claim: bool,
    /// A call slot freeing, or a task finishing ([`InHand::wait_for_room`]).
    room: bool,
    /// `poll_interval`, a nudge, or the wait after a failure ([`Executor::wait`]).
    timer: bool,
}

impl Wakes {
    /// The wakes for `next`, with `claiming` running and `free_slots` free when read.
    ///
    /// `WaitForRoom` always waits for room: [`Executor::start_claim`] decided it on its own
    /// reading of the free slots, and a call finishing on another worker may free one before
    /// `free_slots` is read. Waiting for room then returns at once and the loop sends its
    /// queue; waiting for `free_slots == 0` alone would wait on nothing (decision 217).
    fn of(next: &Next, claiming: bool, free_slots: usize) -> Self {
        Self {
            claim: claiming,
            room: free_slots == 0 || matches!(next, Next::WaitForRoom),
            timer: !claiming && next.waits(),
        }
    }
}

/// What woke the run loop.
enum Woke {
    Shutdown,
    Claimed(Result<ClaimResult, tokio::task::JoinError>),
    Room,
    Waited,
}

/// What one claim task brought back.
enum ClaimResult {
    /// It had rate-limit permits for `asked` attempts and claimed these (or failed).
    Claimed {
        claimed: anyhow::Result<Vec<ChargeClaim>>,
        /// A claim that got all it asked for is followed by another at once.
        asked: usize,
        /// When the task began taking permits, before the claim: what the claimed leases are
        /// counted from, and, to when the claim is queued, what sizes the claim-ahead queue.
        started: std::time::Instant,
    },
    /// The gateway rate limit had no permit: claim again after this long.
    RateLimited(Duration),
}

/// The one claim running beside the calls.
struct Claiming {
    handle: tokio::task::JoinHandle<ClaimResult>,
    /// It was the gateway health's one probe.
    probe: bool,
}

/// The database's time while `claim` is in hand: its claim's `now()` plus the time
/// elapsed here since. Retry decisions, the key window and
/// the stamps of a result are measured on it, never on the host's clock, which may be off.
fn database_time(claim: &ChargeClaim) -> impl Fn() -> time::OffsetDateTime {
    let claimed_at = claim.attempt.claimed_at;
    let since = std::time::Instant::now();
    move || claimed_at + since.elapsed()
}

/// The charge request, built from the stored attempt only, so that every try is the same
/// request under the same key.
pub fn charge_request(claim: &ChargeClaim) -> ChargeRequest {
    ChargeRequest::new(
        claim.attempt.idempotency_key.clone(),
        &ChargeBody {
            money: claim.attempt.money,
            customer_id: claim.customer_id.clone(),
            payment_method: claim.payment_method.clone(),
            reference: claim.attempt.payment_attempt_id,
            description: claim.description.clone(),
        },
    )
    .for_order(claim.order_id.clone())
    .with_gateway_object(claim.attempt.gateway_object_id.clone())
    .with_key_seq(claim.attempt.key_seq)
}

fn report(
    claim: &ChargeClaim,
    outcome: Option<GatewayOutcome>,
    disposition: Disposition,
) -> AttemptReport {
    AttemptReport {
        payment_attempt_id: claim.attempt.payment_attempt_id,
        try_number: claim.attempt.tries,
        lease_token: claim.attempt.lease_token,
        outcome,
        disposition,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state the run loop can wait in has something besides the shutdown to wake it,
    /// whatever the free slots read: they are read again after `start_claim` decided, and
    /// calls on the other workers free slots in between. A loop that waits on the shutdown
    /// alone holds its claim-ahead queue and claims nothing more, for good (decision 217).
    #[test]
    fn the_run_loop_never_waits_on_the_shutdown_alone() {
        let states = [
            (Next::Claim, true),
            (Next::WaitForRoom, false),
            (Next::Idle, false),
            (Next::RetryAfter(Duration::from_millis(5)), false),
        ];
        for (next, claiming) in &states {
            for free_slots in [0, 1, 64] {
                let wakes = Wakes::of(next, *claiming, free_slots);
                assert!(
                    wakes.claim || wakes.room || wakes.timer,
                    "{next:?} with a claim running: {claiming}, free slots read: {free_slots}: waits on the shutdown alone"
                );
            }
        }
    }
}
