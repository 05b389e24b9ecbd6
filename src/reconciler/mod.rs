//! The reconciler: settles every ambiguous outcome by asking the gateway what happened
//! under the attempt's idempotency key, and hands what it cannot settle to a person.
//!
//! One pass ([`Reconciler::run_once`]):
//! 1. moves `in_flight` attempts whose lease expired to `unknown` (cause `lease_expired`);
//! 2. claims due `unknown` attempts (the kernel's claim, `store::kernel`: skipping held rows, fencing token) and looks each up:
//!    - a charge found → adopt its outcome (`succeeded` / `declined`) with its event;
//!    - nothing found, inside the key window → back to `pending`: the executor re-sends with
//!      the **same key**, so even a charge the gateway is still processing is not doubled;
//!    - nothing found, outside the key window → `needs_review`: the gateway may have
//!      forgotten the key, so a re-send could charge twice and only a person can decide;
//!    - nothing found while the last send may still be in progress at the gateway (less
//!      than `gateway_max_processing_time` ago) and the attempt is past its retry limits →
//!      stays `unknown`, looked up again when that time has passed: an empty lookup proves
//!      "not charged" only after it;
//!    - the lookup failed → check again after the next delay of the schedule; when the
//!      schedule is used up → `needs_review` with a `payment-needs-review` event.
//!
//! Invariants:
//! - The reconciler never charges; it only looks up. Re-sending is the executor's, with the
//!   stored key, and only inside the key window.
//! - Every write is fenced by the claim's token, so two reconcilers, or a reconciler and an
//!   operator, never both settle one attempt.
//! - Every lookup is recorded as a call (`gateway_call_records`: carried by the move it
//!   caused, else a row of `gateway_calls`); every state change records its cause.
//!
//! About 700 lines: one claim's life (look up, prove "not charged", write, count a refusal)
//! and a person's recheck, which is the same lookup under another claim. The pure rules are
//! in `policy`, the sweep and the webhook checks in their own files; what is left is the one
//! lookup and its two callers, kept in one room so they cannot drift apart.

pub mod checks;
pub mod policy;
pub mod refunds;
pub mod sweep;

use crate::domain::GatewayChargeId;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, SystemClock};
use crate::config::{ReconcilerSettings, Settings};
use crate::domain::outcome::{FailedLookups, LookupOutcome};
use crate::domain::{
    Actor, AttemptStatus, GatewayCallRecord, HeldAttempt, PaymentAttemptId, SettleWrite,
};
use crate::gateway::{CancelOutcome, GatewayClient, GatewayHealth};
use crate::gateway_access::limit::Take;
use crate::gateway_access::GatewayAccess;
use crate::store::attempts::gateway_objects::{advance_key, KeyStep};
use crate::store::attempts::lookups::{
    claim_for_recheck, claim_unknown, expire_leases, record_unchanged_recheck, reschedule_lookup,
    reschedule_lookup_audited, RecheckClaim,
};
use crate::store::attempts::{record_gateway_call_alone, settle, settle_audited};
use crate::store::audit::{AuditAction, NewAuditEntry, Via};
use crate::store::Store;
use policy::{claim_may_write, found_charge, Decision, LookupPolicy, Proof};

/// Longest a recheck (CLI, API, console) waits for a gateway rate permit before it gives up
/// and says why: a person waits on its answer inside one request, and a bucket that has had
/// nothing to spare for this long, or a database that has not answered, will not change
/// that within the request (decision 62 keeps the wait before the claim: nothing is held).
pub const RECHECK_PERMIT_WAIT: Duration = Duration::from_secs(10);

/// What happened to one looked-up attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Moved to this state.
    Moved(AttemptStatus),
    /// Stays `unknown`; looked up again at this time.
    Rescheduled(OffsetDateTime),
    /// Someone else moved the attempt meanwhile; nothing written but the evidence.
    Fenced,
}

/// What one pass did.
#[derive(Debug, Clone, Default)]
pub struct ReconcileReport {
    /// `in_flight` attempts whose lease had expired, now `unknown`.
    pub leases_expired: Vec<PaymentAttemptId>,
    pub resolutions: Vec<(PaymentAttemptId, Resolution)>,
    /// The fleet-wide gateway rate limit held lookups back: pass again after this long.
    pub rate_limited: Option<Duration>,
}

impl ReconcileReport {
    /// Attempts this pass moved to `status`.
    pub fn count(&self, status: AttemptStatus) -> usize {
        self.resolutions
            .iter()
            .filter(|(_, r)| *r == Resolution::Moved(status))
            .count()
    }

    /// Attempts left `unknown` for a later check.
    pub fn rescheduled(&self) -> usize {
        self.resolutions
            .iter()
            .filter(|(_, r)| matches!(r, Resolution::Rescheduled(_)))
            .count()
    }
}

/// The reconciler role. Cheap to clone.
#[derive(Clone)]
pub struct Reconciler {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    store: Store,
    /// The client, the shared health and the fleet's rate limit (permits before a claim,
    /// one per lookup).
    gateway: GatewayAccess,
    settings: ReconcilerSettings,
    /// What a lookup's answer means (the schedules, the key window, the retry limits).
    policy: LookupPolicy,
    actor: Actor,
    clock: Arc<dyn Clock>,
}

impl Reconciler {
    pub fn new(
        store: Store,
        gateway: GatewayClient,
        health: GatewayHealth,
        settings: &Settings,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                gateway: GatewayAccess::new(store.clone(), gateway, health, settings),
                store,
                settings: settings.reconciler.clone(),
                policy: LookupPolicy::from_settings(settings),
                actor: crate::domain::Actor::Reconciler(crate::identity::default_owner()),
                clock: Arc::new(SystemClock),
            }),
        }
    }

    /// The gateway client this reconciler asks (a person's decline cancels through it).
    pub fn gateway(&self) -> &GatewayClient {
        &self.inner.gateway.client
    }

    /// Replaces the clock (tests move time instead of sleeping).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: Arc::new(Inner {
                clock,
                ..(*self.inner).clone()
            }),
        }
    }

    /// One pass: expire leases, then look up every due `unknown` attempt (up to the batch size).
    pub async fn run_once(&self) -> anyhow::Result<ReconcileReport> {
        let inner = &self.inner;
        let leases_expired = expire_leases(&inner.store, &inner.actor, inner.settings.batch_size)
            .await
            .context("expiring leases")?;
        for id in &leases_expired {
            tracing::warn!(payment_attempt_id = %id, "lease expired while in flight; looking the charge up");
        }
        // Permits before the claim: an attempt waiting for its turn holds no claim.
        let permits = match inner
            .gateway
            .rate_limit
            .for_lookups(inner.settings.batch_size)
            .await
        {
            Take::Granted(permits) => permits,
            Take::Wait(wait) => {
                return Ok(ReconcileReport {
                    leases_expired,
                    resolutions: Vec::new(),
                    rate_limited: Some(wait),
                })
            }
        };
        let rate_limited = (permits.count() < inner.settings.batch_size).then_some(Duration::ZERO);
        let claimed = claim_unknown(&inner.store, inner.settings.claim_hold, permits.count())
            .await
            .context("claiming unknown attempts")?;
        let rate_limited = rate_limited.filter(|_| claimed.len() == permits.count());
        permits.spend(claimed.len());
        let resolutions = futures::future::join_all(claimed.into_iter().map(|attempt| async move {
            let id = attempt.payment_attempt_id;
            match self.reconcile(attempt).await {
                Ok(resolution) => Some((id, resolution)),
                Err(err) => {
                    step_failed!(crate::store::notice_failure(&err), error, payment_attempt_id = %id, error = %format!("{err:#}"), "reconciling failed; the claim lapses and it is retried");
                    None
                }
            }
        }))
        .await
        .into_iter()
        .flatten()
        .collect();
        Ok(ReconcileReport {
            leases_expired,
            resolutions,
            rate_limited,
        })
    }

    /// Runs passes until `shutdown`, every `poll_interval` when idle.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        tracing::info!(actor = %self.inner.actor, "reconciler started");
        while !shutdown.is_cancelled() {
            if let Err(err) = self.run_checks().await {
                let quiet = crate::store::notice_failure(&err);
                step_failed!(quiet, error, error = %format!("{err:#}"), "webhook checks failed; their claims lapse and they are checked again");
            }
            let next_pass_in = match self.run_once().await {
                Ok(report) if report.resolutions.len() == self.inner.settings.batch_size => {
                    Duration::ZERO
                }
                Ok(report) => report
                    .rate_limited
                    .unwrap_or(self.inner.settings.poll_interval),
                Err(err) => {
                    let quiet = crate::store::notice_failure(&err);
                    step_failed!(quiet, error, error = %format!("{err:#}"), "reconciliation pass failed");
                    self.inner.settings.poll_interval
                }
            };
            if !next_pass_in.is_zero() {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(next_pass_in) => {}
                }
            }
        }
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(payment_attempt_id = %attempt.payment_attempt_id))]
    async fn reconcile(&self, attempt: HeldAttempt) -> anyhow::Result<Resolution> {
        let looked = self.look_up(&attempt, Asker::Pass).await;
        let resolution = match self.write(&attempt, &looked).await {
            Ok(resolution) => resolution,
            Err(err) => self.count_unstored(&attempt, &looked, &err).await?,
        };
        crate::metrics::reconciliation(match &resolution {
            Resolution::Moved(status) => status.as_str(),
            Resolution::Rescheduled(_) => "rescheduled",
            Resolution::Fenced => "fenced",
        });
        Ok(resolution)
    }

    /// Writes a pass's decision about `attempt`, fenced by its claim, with the lookup's
    /// evidence.
    async fn write(
        &self,
        attempt: &HeldAttempt,
        looked: &Looked,
    ) -> Result<Resolution, sqlx::Error> {
        let inner = &self.inner;
        match &looked.decision {
            Decision::Settle { settlement, cause } => {
                let status = settlement.status();
                let write = SettleWrite {
                    fence: attempt.fence(&inner.actor),
                    settlement: settlement.clone(),
                    cause: *cause,
                    call: Some(looked.evidence.clone()),
                    now: looked.now,
                };
                let settled = settle(&inner.store, &write).await?;
                if settled {
                    tracing::info!(status = %status, %cause, "reconciled");
                }
                Ok(moved_or_fenced(settled, status))
            }
            Decision::CheckAgain { at, reason, checks } => {
                let rescheduled = reschedule_lookup(
                    &inner.store,
                    attempt,
                    *at,
                    reason,
                    *checks,
                    Some(&looked.evidence),
                    looked.now,
                )
                .await?;
                if rescheduled {
                    tracing::warn!(next_check = %at, reason, "lookup settled nothing; checking again later");
                }
                Ok(rescheduled_or_fenced(rescheduled, *at))
            }
        }
    }

    /// Asks the gateway what happened under the attempt's key and decides what that means:
    /// the one lookup both a reconciliation pass and a person's recheck make (`asker`).
    async fn look_up(&self, attempt: &HeldAttempt, asker: Asker) -> Looked {
        let inner = &self.inner;
        // The database's time (the claim's now() plus the time since), never the host's:
        // the key window and the retry limits are measured on it.
        let since = std::time::Instant::now();
        let started_at = attempt.claimed_at;
        let call = inner
            .gateway
            .client
            .lookup_attempt(
                &attempt.idempotency_key,
                attempt.gateway_object_id.as_deref(),
            )
            .await;
        let now = attempt.claimed_at + since.elapsed();
        if !call.answered_locally {
            inner
                .gateway
                .health
                .record_lookup(&call.outcome, inner.clock.now());
        }
        let evidence = attempt.evidence(
            &call,
            call.outcome.label(),
            started_at,
            found_charge(&call.outcome).map(|c| c.id.clone()),
            call.error.clone().or_else(|| match &call.outcome {
                LookupOutcome::Failed { reason } => Some(reason.clone()),
                _ => None,
            }),
        );
        let decision = inner.policy.decide(attempt, &call.outcome, now);
        let decision = self.prove(attempt, decision, asker, now).await;
        Looked {
            evidence,
            answer: decision.describe(),
            decision,
            now,
        }
    }

    /// A person's recheck (`attempts recheck`, `POST /api/attempts/{id}/recheck`): the
    /// reconciler's lookup for one `unknown` or `needs_review` attempt, now, due or not.
    ///
    /// - `unknown`: the lookup's decision is applied exactly as a pass would apply it
    ///   (settled, re-pended, handed to review, or checked again later) — except that a
    ///   failed lookup does not use up the reconciler's schedule (a person asking twice must
    ///   not push the attempt into review faster), and that a recheck never cancels: a
    ///   "not charged" that needs the PaymentIntent cancelled first is left to the
    ///   reconciler's next pass, due at once.
    /// - `needs_review`: only a charge found (succeeded or declined) settles it; anything
    ///   else leaves it in review, and re-sending stays a person's explicit decision
    ///   (`attempts resolve --as retry`).
    ///
    /// The write and its audit row (`actor`, `via`, `reason`, what was found and done)
    /// commit in one transaction; the transition is signed by `actor`.
    #[tracing::instrument(skip_all, fields(payment_attempt_id = %id, actor))]
    pub async fn recheck(
        &self,
        id: PaymentAttemptId,
        actor: &Actor,
        via: Via,
        reason: Option<&str>,
    ) -> anyhow::Result<RecheckOutcome> {
        let inner = &self.inner;
        // The lookup counts against the fleet's gateway rate like any other (decision 62: the
        // permit comes before the claim, so a recheck waiting for it holds no lease).
        // A person waits on the answer: the wait is bounded, and giving up says why.
        let permit = match inner
            .gateway
            .lookup_permit_within(RECHECK_PERMIT_WAIT)
            .await
        {
            Ok(permit) => permit,
            Err(why) => return Ok(RecheckOutcome::NoPermit(why)),
        };
        let claim = claim_for_recheck(&inner.store, id, inner.settings.claim_hold)
            .await
            .context("claiming the attempt for a recheck")?;
        let attempt = match claim {
            RecheckClaim::Claimed(attempt) => attempt,
            RecheckClaim::NotFound => return Ok(RecheckOutcome::NotFound),
            RecheckClaim::WrongState(status) => return Ok(RecheckOutcome::WrongState(status)),
        };
        let looked = self.look_up(&attempt, Asker::Person).await;
        permit.spend(1);
        let person = Person { actor, via, reason };
        let report = self
            .apply_recheck(&attempt, looked, &person)
            .await
            .context("recording the recheck")?;
        tracing::info!(before = %report.before, after = %report.after, found = report.found, "attempt rechecked by a person");
        Ok(RecheckOutcome::Done(report))
    }

    /// Writes what a person's recheck of `attempt` (claimed from `before`) decided, with its
    /// audit row, and says what it did.
    async fn apply_recheck(
        &self,
        attempt: &HeldAttempt,
        looked: Looked,
        person: &Person<'_>,
    ) -> Result<Recheck, sqlx::Error> {
        let inner = &self.inner;
        let before = attempt.held_as;
        let mut report = Recheck {
            payment_attempt_id: attempt.payment_attempt_id,
            before,
            after: before,
            lookup: looked.evidence.outcome.clone(),
            http_status: looked.evidence.http_status,
            gateway_charge_id: looked.evidence.gateway_charge_id.clone(),
            found: looked.answer,
            did: String::new(),
        };
        match looked.decision {
            Decision::Settle { settlement, cause } if claim_may_write(before, &settlement) => {
                let status = settlement.status();
                let write = SettleWrite {
                    fence: attempt.fence(person.actor),
                    settlement,
                    cause,
                    call: Some(looked.evidence),
                    now: looked.now,
                };
                let mut moved = report.clone();
                moved.after = status;
                moved.did = format!("moved {before} -> {status} (cause {cause})");
                let reports = WriteReports::new(&report, moved, "settled");
                let settled = settle_audited(&inner.store, &write, |settled| {
                    person.audit(attempt.payment_attempt_id, reports.pick(settled))
                })
                .await?;
                Ok(reports.into_report(settled))
            }
            Decision::CheckAgain { at, reason, .. } if before == AttemptStatus::Unknown => {
                let mut later = report.clone();
                later.did = format!("stays unknown; the reconciler looks it up again at {at}");
                let reports = WriteReports::new(&report, later, "unchanged");
                let rescheduled = reschedule_lookup_audited(
                    &inner.store,
                    attempt,
                    at,
                    &reason,
                    &looked.evidence,
                    looked.now,
                    |rescheduled| {
                        person.audit(attempt.payment_attempt_id, reports.pick(rescheduled))
                    },
                )
                .await?;
                Ok(reports.into_report(rescheduled))
            }
            // needs_review, and the lookup found no charge that settles it.
            _ => {
                report.did = "stays in needs_review: the lookup found no charge that settles it; resolve it (attempts resolve)".into();
                let entry = person.audit(attempt.payment_attempt_id, (&report, "unchanged"));
                record_unchanged_recheck(&inner.store, &looked.evidence, &entry).await?;
                Ok(report)
            }
        }
    }

    /// A lookup whose result the database refused to store (a value it will not take, a
    /// constraint, a fault): the call's evidence is stored alone, and the failure counts
    /// like a failed lookup — checked again after the schedule's next delay, and once the
    /// schedule is used up the attempt goes to `needs_review` saying why and what the
    /// gateway answered ([`LookupPolicy::unstored`]). So no answer, however malformed,
    /// keeps an attempt cycling.
    async fn count_unstored(
        &self,
        attempt: &HeldAttempt,
        looked: &Looked,
        err: &sqlx::Error,
    ) -> anyhow::Result<Resolution> {
        let inner = &self.inner;
        let answer = looked.answer.as_str();
        tracing::error!(error = %err, answer, "the database refused the reconciliation; counting it against the schedule");
        if let Err(evidence_err) = record_gateway_call_alone(&inner.store, &looked.evidence).await {
            tracing::error!(error = %evidence_err, "cannot store the lookup's evidence either");
        }
        let why = crate::domain::bounded(&err.to_string(), 300);
        let now = looked.now;
        let resolution = match inner.policy.unstored(attempt, &why, answer, now) {
            Decision::CheckAgain { at, reason, checks } => rescheduled_or_fenced(
                reschedule_lookup(&inner.store, attempt, at, &reason, checks, None, now)
                    .await
                    .context("counting a reconciliation the database refused")?,
                at,
            ),
            Decision::Settle { settlement, cause } => {
                let status = settlement.status();
                let write = SettleWrite {
                    fence: attempt.fence(&inner.actor),
                    settlement,
                    cause,
                    call: None,
                    now,
                };
                moved_or_fenced(
                    settle(&inner.store, &write)
                        .await
                        .context("handing an unstorable answer to review")?,
                    status,
                )
            }
        };
        Ok(resolution)
    }

    /// Makes a decision that says "not charged" true before it is written, for a connector
    /// whose object could still charge (Stripe: a stored PaymentIntent): what
    /// [`Decision::proof`] asks for, done at the gateway and in the database. A person's
    /// recheck only looks (contract §5): a decision that needs a cancel is left to the
    /// reconciler's next pass, due at once, and nothing is cancelled on the person's behalf.
    async fn prove(
        &self,
        attempt: &HeldAttempt,
        decision: Decision,
        asker: Asker,
        now: OffsetDateTime,
    ) -> Decision {
        let inner = &self.inner;
        let Some(object) = attempt.gateway_object_id.as_deref() else {
            return decision;
        };
        match decision.proof() {
            None => decision,
            Some(Proof::NextConfirmKey) => {
                if let Err(err) = advance_key(
                    &inner.store,
                    attempt.payment_attempt_id,
                    attempt.lease_token,
                    KeyStep::Confirm,
                )
                .await
                {
                    tracing::warn!(error = %err, "cannot move on to the next confirm key; the re-send uses this one");
                }
                decision
            }
            Some(Proof::Cancel { reason }) if asker == Asker::Person => Decision::CheckAgain {
                at: now,
                reason: format!(
                    "{reason}; saying so needs PaymentIntent {object} cancelled first, which a recheck never does: \
                     the reconciler's next pass cancels it and decides"
                ),
                checks: FailedLookups::Keep,
            },
            Some(Proof::Cancel { reason }) => {
                let client = &inner.gateway.client;
                match client
                    .cancel_object(&attempt.idempotency_key, Some(object))
                    .await
                {
                    None => decision,
                    Some(cancel) => {
                        self.record_cancel(attempt, &cancel, now).await;
                        inner
                            .policy
                            .after_cancel(attempt, &reason, cancel.outcome, now)
                    }
                }
            }
        }
    }

    /// The cancel call's evidence, stored on its own (the decision's write carries the
    /// lookup's).
    async fn record_cancel(
        &self,
        attempt: &HeldAttempt,
        cancel: &crate::gateway::GatewayCall<CancelOutcome>,
        now: OffsetDateTime,
    ) {
        let evidence = attempt.cancel_evidence(cancel, now);
        if let Err(err) = record_gateway_call_alone(&self.inner.store, &evidence).await {
            tracing::warn!(error = %err, "cannot store the cancel's evidence");
        }
    }
}

/// Who asked for a lookup: what it may do at the gateway besides looking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asker {
    /// The reconciler's own pass: proves "not charged" by a cancel before saying it.
    Pass,
    /// A person's recheck: read-only at the gateway.
    Person,
}

/// A settlement's write came to `status`, or was fenced.
fn moved_or_fenced(settled: bool, status: AttemptStatus) -> Resolution {
    if settled {
        Resolution::Moved(status)
    } else {
        Resolution::Fenced
    }
}

/// A rescheduled lookup's write came to the check at `at`, or was fenced.
fn rescheduled_or_fenced(rescheduled: bool, at: OffsetDateTime) -> Resolution {
    if rescheduled {
        Resolution::Rescheduled(at)
    } else {
        Resolution::Fenced
    }
}

/// Who asked for a recheck, how and why: what its audit row says.
struct Person<'a> {
    actor: &'a Actor,
    via: Via,
    reason: Option<&'a str>,
}

impl Person<'_> {
    /// The recheck's audit row for attempt `id`: the report, audited as `outcome`.
    fn audit(
        &self,
        id: PaymentAttemptId,
        (report, outcome): (&Recheck, &'static str),
    ) -> NewAuditEntry {
        NewAuditEntry {
            actor: self.actor.to_owned(),
            via: self.via,
            action: AuditAction::Recheck,
            payment_attempt_ids: vec![id],
            dlq_sequence: None,
            reason: self.reason.map(str::to_owned),
            outcome,
            detail: serde_json::to_value(report).unwrap_or_default(),
        }
    }
}

/// One lookup and what it means.
struct Looked {
    evidence: GatewayCallRecord,
    decision: Decision,
    /// The decision in words (what the gateway's answer means).
    answer: String,
    /// The database's time when the answer came.
    now: OffsetDateTime,
}

/// What [`Reconciler::recheck`] came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecheckOutcome {
    Done(Recheck),
    NotFound,
    /// No gateway rate permit within [`RECHECK_PERMIT_WAIT`]; why (the bucket empty, or the
    /// database not answering). Nothing was claimed or asked.
    NoPermit(String),
    /// Not `unknown` or `needs_review`: nothing was looked up.
    WrongState(AttemptStatus),
}

/// What a recheck found and did.
/// The two reports a recheck's fenced write chooses between once it knows whether it held
/// the claim: what it `did` (audited as `outcome`), or nothing, someone else having moved
/// the attempt meanwhile (audited as `fenced`).
struct WriteReports {
    did: Recheck,
    outcome: &'static str,
    fenced: Recheck,
}

impl WriteReports {
    fn new(report: &Recheck, did: Recheck, outcome: &'static str) -> Self {
        let mut fenced = report.clone();
        fenced.did = "nothing: someone else moved the attempt meanwhile".into();
        Self {
            did,
            outcome,
            fenced,
        }
    }

    /// The report and its audit outcome, for a write that `applied` or was fenced.
    fn pick(&self, applied: bool) -> (&Recheck, &'static str) {
        if applied {
            (&self.did, self.outcome)
        } else {
            (&self.fenced, "fenced")
        }
    }

    fn into_report(self, applied: bool) -> Recheck {
        if applied {
            self.did
        } else {
            self.fenced
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Recheck {
    #[schema(value_type = uuid::Uuid)]
    pub payment_attempt_id: PaymentAttemptId,
    pub before: AttemptStatus,
    pub after: AttemptStatus,
    /// The lookup's outcome label (`found`, `not_found`, `failed`, …).
    pub lookup: String,
    pub http_status: Option<u16>,
    /// The charge the lookup found, if any.
    #[schema(value_type = Option<String>)]
    pub gateway_charge_id: Option<GatewayChargeId>,
    /// What the answer means, in the reconciler's words.
    pub found: String,
    /// What the recheck did about it.
    pub did: String,
}
