//! The reconciler: settles every ambiguous outcome by asking the gateway what happened
//! under the attempt's idempotency key, and hands what it cannot settle to a person.
//!
//! One pass ([`Reconciler::run_once`]):
//! 1. moves `in_flight` attempts whose lease expired to `unknown` (cause `lease_expired`);
//! 2. claims due `unknown` attempts (SKIP LOCKED, fencing token) and looks each up:
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
//! - Every lookup is written to `gateway_calls`; every state change records its cause.

pub mod sweep;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, SystemClock};
use crate::config::{ReconcilerSettings, Settings};
use crate::domain::outcome::{
    read_lookup, ChargeStatus, ExpectedCharge, GatewayCharge, LookupOutcome, LookupReading,
};
use crate::domain::Fence;
use crate::domain::PaymentAttemptId;
use crate::domain::{AttemptStatus, RetryWindow};
use crate::domain::{CallOperation, GatewayCallRecord, SettleWrite, Settlement, TransitionCause};
use crate::gateway::{CancelOutcome, GatewayClient, GatewayHealth};
use crate::gateway_limit::{GatewayRateLimit, Take};
use crate::store::attempts::{record_gateway_call_alone, settle, settle_audited};
use crate::store::audit::{AuditAction, NewAuditEntry, Via};
use crate::store::gateway_objects::{advance_key, KeyStep};
use crate::store::reconciler::{
    claim_for_recheck, claim_unknown, expire_leases, record_unchanged_recheck, reschedule_lookup,
    reschedule_lookup_audited, RecheckClaim, UnknownAttempt,
};
use crate::store::Store;

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
    gateway: GatewayClient,
    health: GatewayHealth,
    /// The fleet-wide `gateway_max_rate`: permits are taken before a claim, one per lookup.
    rate_limit: GatewayRateLimit,
    settings: ReconcilerSettings,
    /// The key window and the maximum age, as the executor's claim applies them.
    window: RetryWindow,
    /// The executor's limit on tries: with the maximum age, re-pending an attempt past it
    /// would only bounce it back here without a call.
    max_tries: u32,
    /// `gateway_max_processing_time`: until this has passed since the last send, an empty
    /// lookup proves nothing.
    max_processing_time: Duration,
    actor: String,
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
                rate_limit: GatewayRateLimit::from_settings(
                    store.clone(),
                    settings,
                    gateway.kind(),
                ),
                store,
                gateway,
                health,
                settings: settings.reconciler.clone(),
                window: RetryWindow::from_settings(settings),
                max_tries: settings.executor.max_tries,
                max_processing_time: settings.gateway_max_processing_time,
                actor: format!("reconciler:{}", crate::identity::default_owner()),
                clock: Arc::new(SystemClock),
            }),
        }
    }

    /// The gateway client this reconciler asks (a person's decline cancels through it).
    pub fn gateway(&self) -> &GatewayClient {
        &self.inner.gateway
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
                    tracing::error!(payment_attempt_id = %id, error = %format!("{err:#}"), "reconciling failed; the claim lapses and it is retried");
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
            let next_pass_in = match self.run_once().await {
                Ok(report) if report.resolutions.len() == self.inner.settings.batch_size => {
                    Duration::ZERO
                }
                Ok(report) => report
                    .rate_limited
                    .unwrap_or(self.inner.settings.poll_interval),
                Err(err) => {
                    tracing::error!(error = %format!("{err:#}"), "reconciliation pass failed");
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
    async fn reconcile(&self, attempt: UnknownAttempt) -> anyhow::Result<Resolution> {
        let inner = &self.inner;
        let Looked {
            evidence,
            decision,
            answer,
            now,
        } = self.look_up(&attempt).await;
        let fence = attempt.fence(&inner.actor);
        let written = match decision {
            Decision::Settle { settlement, cause } => {
                let status = settlement.status();
                let write = SettleWrite {
                    fence,
                    settlement,
                    cause,
                    call: Some(evidence.clone()),
                    now,
                };
                settle(&inner.store, &write).await.map(|settled| {
                    if settled {
                        tracing::info!(status = %status, %cause, "reconciled");
                        Resolution::Moved(status)
                    } else {
                        Resolution::Fenced
                    }
                })
            }
            Decision::CheckAgain {
                at,
                reason,
                count_check,
            } => reschedule_lookup(
                &inner.store,
                &attempt,
                at,
                &reason,
                count_check,
                Some(&evidence),
                now,
            )
            .await
            .map(|rescheduled| {
                if rescheduled {
                    tracing::warn!(next_check = %at, reason, "lookup settled nothing; checking again later");
                    Resolution::Rescheduled(at)
                } else {
                    Resolution::Fenced
                }
            }),
        };
        let resolution = match written {
            Ok(resolution) => resolution,
            Err(err) => {
                self.count_unstored(&attempt, &answer, &evidence, &err, now)
                    .await?
            }
        };
        crate::metrics::reconciliation(match &resolution {
            Resolution::Moved(status) => status.as_str(),
            Resolution::Rescheduled(_) => "rescheduled",
            Resolution::Fenced => "fenced",
        });
        Ok(resolution)
    }

    /// Asks the gateway what happened under the attempt's key and decides what that means:
    /// the one lookup both a reconciliation pass and a person's recheck make.
    async fn look_up(&self, attempt: &UnknownAttempt) -> Looked {
        let inner = &self.inner;
        // The database's time (the claim's now() plus the time since), never the host's:
        // the key window and the retry limits are measured on it.
        let since = std::time::Instant::now();
        let started_at = attempt.claimed_at;
        let call = inner
            .gateway
            .lookup_attempt(
                &attempt.idempotency_key,
                attempt.gateway_object_id.as_deref(),
            )
            .await;
        let now = attempt.claimed_at + since.elapsed();
        if !call.answered_locally {
            inner.health.record_lookup(&call.outcome, inner.clock.now());
        }
        let evidence = GatewayCallRecord {
            payment_attempt_id: attempt.payment_attempt_id,
            operation: CallOperation::Lookup,
            idempotency_key: attempt.idempotency_key.clone(),
            try_number: attempt.tries,
            lease_token: Some(attempt.lease_token),
            started_at,
            finished_at: now,
            http_status: call.http_status,
            outcome: call.outcome.label().to_owned(),
            gateway_charge_id: found_charge(&call.outcome).map(|c| c.id.clone()),
            error: call.error.clone().or_else(|| match &call.outcome {
                LookupOutcome::Failed { reason } => Some(reason.clone()),
                _ => None,
            }),
        };
        let decision = self.decide(attempt, &call.outcome, now);
        let decision = self.prove(attempt, decision, now).await;
        let answer = match &decision {
            Decision::Settle { settlement, .. } => settlement.describe(),
            Decision::CheckAgain { reason, .. } => reason.clone(),
        };
        Looked {
            evidence,
            decision,
            answer,
            now,
        }
    }

    /// A person's recheck (`attempts recheck`, `POST /api/attempts/{id}/recheck`): the
    /// reconciler's lookup for one `unknown` or `needs_review` attempt, now, due or not.
    ///
    /// - `unknown`: the lookup's decision is applied exactly as a pass would apply it
    ///   (settled, re-pended, handed to review, or checked again later) — except that a
    ///   failed lookup does not use up the reconciler's schedule: a person asking twice must
    ///   not push the attempt into review faster.
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
        actor: &str,
        via: Via,
        reason: Option<&str>,
    ) -> anyhow::Result<RecheckOutcome> {
        let inner = &self.inner;
        // The lookup counts against the fleet's gateway rate like any other (decision 62: the
        // permit comes before the claim, so a recheck waiting for it holds no lease).
        // A person waits on the answer: the wait is bounded, and giving up says why.
        let deadline = tokio::time::Instant::now() + RECHECK_PERMIT_WAIT;
        let permit = loop {
            match inner.rate_limit.for_lookups(1).await {
                Take::Granted(permits) => break permits,
                Take::Wait(wait) if tokio::time::Instant::now() + wait <= deadline => {
                    tokio::time::sleep(wait).await
                }
                Take::Wait(_) => {
                    let why = inner.rate_limit.why_refused(RECHECK_PERMIT_WAIT);
                    return Ok(RecheckOutcome::NoPermit(why));
                }
            }
        };
        let claim = claim_for_recheck(&inner.store, id, inner.settings.claim_hold)
            .await
            .context("claiming the attempt for a recheck")?;
        let (attempt, before) = match claim {
            RecheckClaim::Claimed(attempt, status) => (attempt, status),
            RecheckClaim::NotFound => return Ok(RecheckOutcome::NotFound),
            RecheckClaim::WrongState(status) => return Ok(RecheckOutcome::WrongState(status)),
        };
        let Looked {
            evidence,
            decision,
            answer,
            now,
        } = self.look_up(&attempt).await;
        permit.spend(1);
        let mut report = Recheck {
            payment_attempt_id: id,
            before,
            after: before,
            lookup: evidence.outcome.clone(),
            http_status: evidence.http_status,
            gateway_charge_id: evidence.gateway_charge_id.clone(),
            found: answer,
            did: String::new(),
        };
        let audit = |(report, outcome): (&Recheck, &'static str)| NewAuditEntry {
            actor: actor.to_owned(),
            via,
            action: AuditAction::Recheck,
            payment_attempt_ids: vec![id],
            dlq_sequence: None,
            reason: reason.map(str::to_owned),
            outcome,
            detail: serde_json::to_value(report).unwrap_or_default(),
        };
        let applies = |settlement: &Settlement| claim_may_write(before, settlement);
        match decision {
            Decision::Settle { settlement, cause } if applies(&settlement) => {
                let status = settlement.status();
                let write = SettleWrite {
                    fence: Fence {
                        payment_attempt_id: id,
                        lease_token: attempt.lease_token,
                        from: before,
                        actor: actor.to_owned(),
                    },
                    settlement,
                    cause,
                    call: Some(evidence),
                    now,
                };
                let mut moved = report.clone();
                moved.after = status;
                moved.did = format!("moved {before} -> {status} (cause {cause})");
                let reports = WriteReports::new(&report, moved, "settled");
                let settled =
                    settle_audited(&inner.store, &write, |settled| audit(reports.pick(settled)))
                        .await
                        .context("recording the recheck")?;
                report = reports.into_report(settled);
            }
            Decision::CheckAgain { at, reason, .. } if before == AttemptStatus::Unknown => {
                let mut later = report.clone();
                later.did = format!("stays unknown; the reconciler looks it up again at {at}");
                let reports = WriteReports::new(&report, later, "unchanged");
                let rescheduled = reschedule_lookup_audited(
                    &inner.store,
                    &attempt,
                    at,
                    &reason,
                    &evidence,
                    now,
                    |rescheduled| audit(reports.pick(rescheduled)),
                )
                .await
                .context("recording the recheck")?;
                report = reports.into_report(rescheduled);
            }
            // needs_review, and the lookup found no charge that settles it.
            _ => {
                report.did = "stays in needs_review: the lookup found no charge that settles it; resolve it (attempts resolve)".into();
                record_unchanged_recheck(&inner.store, &evidence, &audit((&report, "unchanged")))
                    .await
                    .context("recording the recheck")?;
            }
        }
        tracing::info!(before = %report.before, after = %report.after, found = report.found, "attempt rechecked by a person");
        Ok(RecheckOutcome::Done(report))
    }

    /// A lookup whose result the database refused to store (a value it will not take, a
    /// constraint, a fault): the call's evidence is stored alone, and the failure counts
    /// like a failed lookup — checked again after the schedule's next delay, and once the
    /// schedule is used up the attempt goes to `needs_review` saying why and what the
    /// gateway answered. So no answer, however malformed, keeps an attempt cycling.
    async fn count_unstored(
        &self,
        attempt: &UnknownAttempt,
        answer: &str,
        evidence: &GatewayCallRecord,
        err: &sqlx::Error,
        now: OffsetDateTime,
    ) -> anyhow::Result<Resolution> {
        let inner = &self.inner;
        tracing::error!(error = %err, answer, "the database refused the reconciliation; counting it against the schedule");
        if let Err(evidence_err) = record_gateway_call_alone(&inner.store, evidence).await {
            tracing::error!(error = %evidence_err, "cannot store the lookup's evidence either");
        }
        let checks = attempt.reconcile_checks.max(0) as usize;
        let why = crate::domain::bounded(&err.to_string(), 300);
        let resolution = match inner.settings.schedule.get(checks) {
            Some(delay) => {
                let at = now + *delay;
                let reason = format!(
                    "the gateway's answer could not be stored (failure {}): {why}; the gateway answered: {answer}",
                    checks + 1
                );
                if reschedule_lookup(&inner.store, attempt, at, &reason, true, None, now)
                    .await
                    .context("counting a reconciliation the database refused")?
                {
                    Resolution::Rescheduled(at)
                } else {
                    Resolution::Fenced
                }
            }
            None => {
                let write = SettleWrite {
                    fence: attempt.fence(&inner.actor),
                    settlement: Settlement::NeedsReview {
                        reason: format!(
                            "cannot settle: the gateway's answer could not be stored, {} times over the whole reconciliation schedule: {why}; \
                             the gateway answered: {answer}",
                            checks + 1
                        ),
                    },
                    cause: TransitionCause::ReconciliationScheduleExhausted,
                    call: None,
                    now,
                };
                if settle(&inner.store, &write)
                    .await
                    .context("handing an unstorable answer to review")?
                {
                    Resolution::Moved(AttemptStatus::NeedsReview)
                } else {
                    Resolution::Fenced
                }
            }
        };
        Ok(resolution)
    }

    /// The pure decision for one lookup answer.
    fn decide(
        &self,
        attempt: &UnknownAttempt,
        outcome: &LookupOutcome,
        now: OffsetDateTime,
    ) -> Decision {
        let settings = &self.inner.settings;
        match outcome {
            LookupOutcome::Found(charges) => {
                let reference = attempt.payment_attempt_id.to_string();
                let expected = ExpectedCharge {
                    idempotency_key: &attempt.idempotency_key,
                    reference: &reference,
                    amount_minor: attempt.amount_minor,
                    currency: &attempt.currency,
                };
                match read_lookup(charges, &expected) {
                    LookupReading::Nothing => self.nothing_found(attempt, now),
                    LookupReading::Succeeded(charge) => Decision::Settle {
                        settlement: Settlement::Succeeded { charge_id: charge.id },
                        cause: TransitionCause::LookupFoundCharge,
                    },
                    LookupReading::Declined(charge) => Decision::Settle {
                        settlement: Settlement::Declined {
                            charge_id: charge.id,
                            decline_code: charge.decline_code,
                        },
                        cause: TransitionCause::LookupFoundCharge,
                    },
                    LookupReading::SeveralSucceeded(ids) => Decision::Settle {
                        settlement: Settlement::NeedsReview {
                            reason: format!(
                                "the gateway holds {} successful charges under one key ({}): refund all but one",
                                ids.len(),
                                ids.join(", ")
                            ),
                        },
                        cause: TransitionCause::LookupFoundSeveralCharges,
                    },
                    LookupReading::Mismatch { reason } => Decision::Settle {
                        settlement: Settlement::NeedsReview {
                            reason: format!(
                                "cannot tell whether this attempt was charged: {reason}; check the charge at the gateway"
                            ),
                        },
                        cause: TransitionCause::LookupFoundAnotherCharge,
                    },
                    // Processing at the gateway (a bank debit can take days): along its
                    // own, longer schedule.
                    LookupReading::Unsettled { .. } if is_processing(charges) => {
                        self.still_processing(attempt, charges, now)
                    }
                    // Maybe not final yet: like a lookup that did not answer, along the schedule.
                    LookupReading::Unsettled { reason } => self.check_again(attempt, now, &reason),
                }
            }
            LookupOutcome::CredentialsFault { status } => Decision::CheckAgain {
                at: now
                    + settings
                        .schedule
                        .first()
                        .copied()
                        .unwrap_or(Duration::from_secs(60)),
                reason: format!(
                    "lookup refused: the gateway rejected onecharge's credentials (HTTP {status})"
                ),
                count_check: false,
            },
            LookupOutcome::EndpointFault { status } => Decision::CheckAgain {
                at: now + settings.schedule.first().copied().unwrap_or(Duration::from_secs(60)),
                reason: format!("lookup refused: the gateway answered HTTP {status}, gateway_url looks wrong; not counted as a check"),
                count_check: false,
            },
            LookupOutcome::Failed { reason } => self.check_again(attempt, now, reason),
        }
    }

    /// A lookup that settled nothing: look again after the schedule's next delay; when the
    /// schedule is used up, a person decides.
    fn check_again(&self, attempt: &UnknownAttempt, now: OffsetDateTime, reason: &str) -> Decision {
        let checks = attempt.reconcile_checks.max(0) as usize;
        match self.inner.settings.schedule.get(checks) {
            Some(delay) => Decision::CheckAgain {
                at: now + *delay,
                reason: format!("lookup {} failed: {reason}", checks + 1),
                count_check: true,
            },
            None => Decision::Settle {
                settlement: Settlement::NeedsReview {
                    reason: format!(
                        "cannot settle: {} gateway lookups failed over the whole reconciliation schedule; last: {reason}",
                        checks + 1
                    ),
                },
                cause: TransitionCause::ReconciliationScheduleExhausted,
            },
        }
    }
}

impl Reconciler {
    /// A payment still `processing` at the gateway: it stays `unknown` ("processing at the
    /// gateway"), looked at again along `reconciler.processing_schedule` (its last delay
    /// repeating), until `reconciler.processing_max` has passed since its last send; only
    /// then does a person decide.
    fn still_processing(
        &self,
        attempt: &UnknownAttempt,
        charges: &[GatewayCharge],
        now: OffsetDateTime,
    ) -> Decision {
        let settings = &self.inner.settings;
        let id = charges
            .iter()
            .find(|c| c.status == ChargeStatus::Other("processing".into()))
            .map_or("?", |c| c.id.as_str());
        let since = attempt.dispatched_at.unwrap_or(attempt.created_at);
        let max = time::Duration::try_from(settings.processing_max).unwrap_or(time::Duration::MAX);
        if now - since >= max {
            return Decision::Settle {
                settlement: Settlement::NeedsReview {
                    reason: format!(
                        "{id} is still processing at the gateway, {} after the last send at {since}                          (reconciler.processing_max): check it at the gateway and resolve",
                        humantime::format_duration(settings.processing_max)
                    ),
                },
                cause: TransitionCause::ReconciliationScheduleExhausted,
            };
        }
        let checks = attempt.reconcile_checks.max(0) as usize;
        let delay = settings
            .processing_schedule
            .get(checks)
            .or(settings.processing_schedule.last())
            .copied()
            .unwrap_or(Duration::from_secs(6 * 3600));
        let at = now + delay;
        Decision::CheckAgain {
            at,
            reason: format!(
                "processing at the gateway: {id} is not final yet; looking again at {at}"
            ),
            count_check: true,
        }
    }

    /// Makes a decision that says "not charged" true before it is written, for a connector
    /// whose object could still charge (Stripe: a stored PaymentIntent).
    ///
    /// - Re-sending after the PaymentIntent read `requires_confirmation`: the next confirm
    ///   goes under the next derived key (the last one's `5xx` may be saved and replayed).
    /// - Telling a person that nothing was charged (past the retry limits): the PaymentIntent
    ///   is cancelled first. `canceled` proves it; `succeeded` is adopted; `processing` is
    ///   followed; no proof keeps the attempt `unknown`, looked at again along the schedule,
    ///   and nothing is announced.
    async fn prove(
        &self,
        attempt: &UnknownAttempt,
        decision: Decision,
        now: OffsetDateTime,
    ) -> Decision {
        let inner = &self.inner;
        let Some(object) = attempt.gateway_object_id.as_deref() else {
            return decision;
        };
        match &decision {
            Decision::Settle {
                settlement: Settlement::Retry { .. },
                cause: TransitionCause::LookupFoundNothing,
            } => {
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
            Decision::Settle {
                settlement: Settlement::NeedsReview { reason },
                cause: TransitionCause::LookupFoundNothingRetriesExhausted,
            } => {
                let reason = reason.clone();
                let Some(cancel) = inner
                    .gateway
                    .cancel_object(&attempt.idempotency_key, Some(object))
                    .await
                else {
                    return decision;
                };
                self.record_cancel(attempt, &cancel, now).await;
                match cancel.outcome {
                    CancelOutcome::Canceled { charge_id } => Decision::Settle {
                        settlement: Settlement::NeedsReview {
                            reason: format!(
                                "{reason}; PaymentIntent {charge_id} was cancelled at the gateway, so it can never charge"
                            ),
                        },
                        cause: TransitionCause::LookupFoundNothingRetriesExhausted,
                    },
                    CancelOutcome::Succeeded { charge_id } => Decision::Settle {
                        settlement: Settlement::Succeeded { charge_id },
                        cause: TransitionCause::LookupFoundCharge,
                    },
                    CancelOutcome::Processing { charge_id } => {
                        let charge = GatewayCharge {
                            id: charge_id,
                            status: ChargeStatus::Other("processing".into()),
                            decline_code: None,
                            idempotency_key: None,
                            reference: None,
                            amount_minor: None,
                            currency: None,
                        };
                        self.still_processing(attempt, &[charge], now)
                    }
                    CancelOutcome::Unproven { reason } => self.check_again(
                        attempt,
                        now,
                        &format!("nothing found, but the PaymentIntent could not be cancelled yet: {reason}"),
                    ),
                }
            }
            _ => decision,
        }
    }

    /// The cancel call's evidence, stored on its own (the decision's write carries the
    /// lookup's).
    async fn record_cancel(
        &self,
        attempt: &UnknownAttempt,
        cancel: &crate::gateway::GatewayCall<CancelOutcome>,
        now: OffsetDateTime,
    ) {
        let evidence = cancel.evidence(
            attempt.payment_attempt_id,
            &attempt.idempotency_key,
            attempt.tries,
            Some(attempt.lease_token),
            now,
        );
        if let Err(err) = record_gateway_call_alone(&self.inner.store, &evidence).await {
            tracing::warn!(error = %err, "cannot store the cancel's evidence");
        }
    }

    /// The lookup found nothing under the key. That proves "not charged" only once the
    /// gateway's maximum processing time has passed since the last send (and only while the
    /// gateway still remembers the key); before that the send may still be running and
    /// charge, so nothing here says "not charged" and nothing goes to a person for it.
    fn nothing_found(&self, attempt: &UnknownAttempt, now: OffsetDateTime) -> Decision {
        let inner = &self.inner;
        let key = &attempt.idempotency_key;
        if let Some(first) = attempt.first_dispatched_at {
            if inner.window.key_may_be_forgotten(first, now) {
                return Decision::Settle {
                    settlement: Settlement::NeedsReview {
                        reason: format!(
                            "cannot prove whether the customer was charged: the gateway finds nothing under key {key} \
                             but it was first sent at {first}, past the key window ({}), so the gateway may have forgotten it; \
                             a re-send could charge twice",
                            humantime::format_duration(inner.window.key_window)
                        ),
                    },
                    cause: TransitionCause::LookupFoundNothingOutsideKeyWindow,
                };
            }
        }
        let past_limits = attempt.tries.max(0) as u32 >= inner.max_tries
            || inner.window.too_old(attempt.created_at, now);
        let processing = humantime::format_duration(inner.max_processing_time);
        let still_running = attempt.dispatched_at.and_then(|last| {
            let until = time::Duration::try_from(inner.max_processing_time)
                .ok()
                .and_then(|d| last.checked_add(d))?;
            (now < until).then_some((last, until))
        });
        match (still_running, past_limits) {
            (Some((last, until)), true) => Decision::CheckAgain {
                at: until,
                reason: format!(
                    "no charge found yet under key {key}; the last send at {last} may still be in progress at the gateway \
                     (gateway_max_processing_time {processing}): looking it up again at {until}"
                ),
                count_check: false,
            },
            (Some((last, _)), false) => Decision::Settle {
                settlement: Settlement::Retry {
                    next_run_at: now,
                    reason: format!(
                        "no charge found yet under this key; the last send at {last} may still be in progress: \
                         re-sending with the same key (the gateway answers 409 while it runs, or replays its outcome)"
                    ),
                    refund_try: false,
                },
                cause: TransitionCause::LookupFoundNothing,
            },
            (None, true) => Decision::Settle {
                settlement: Settlement::NeedsReview {
                    reason: match attempt.dispatched_at {
                        Some(last) => format!(
                            "the gateway has no charge under key {key}, and the last send at {last} is older than \
                             gateway_max_processing_time ({processing}), so nothing was charged under this key; the attempt is past \
                             its retry limits ({} tries, recorded {}): decline it, or publish a new attempt",
                            attempt.tries, attempt.created_at
                        ),
                        None => format!(
                            "nothing was ever sent under key {key} and the gateway has no charge under it; the attempt is past \
                             its retry limits ({} tries, recorded {}): decline it, or publish a new attempt",
                            attempt.tries, attempt.created_at
                        ),
                    },
                },
                cause: TransitionCause::LookupFoundNothingRetriesExhausted,
            },
            (None, false) => Decision::Settle {
                settlement: Settlement::Retry {
                    next_run_at: now,
                    reason: format!(
                        "the gateway has no charge under this key and the last send is past gateway_max_processing_time \
                         ({processing}): re-sending with the same key"
                    ),
                    refund_try: false,
                },
                cause: TransitionCause::LookupFoundNothing,
            },
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

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Recheck {
    pub payment_attempt_id: PaymentAttemptId,
    pub before: AttemptStatus,
    pub after: AttemptStatus,
    /// The lookup's outcome label (`found`, `not_found`, `failed`, …).
    pub lookup: String,
    pub http_status: Option<u16>,
    /// The charge the lookup found, if any.
    pub gateway_charge_id: Option<String>,
    /// What the answer means, in the reconciler's words.
    pub found: String,
    /// What the recheck did about it.
    pub did: String,
}

enum Decision {
    Settle {
        settlement: Settlement,
        cause: TransitionCause,
    },
    CheckAgain {
        at: OffsetDateTime,
        reason: String,
        count_check: bool,
    },
}

/// Whether a lookup found the charge still `processing` at the gateway.
fn is_processing(charges: &[GatewayCharge]) -> bool {
    charges
        .iter()
        .any(|c| c.status == ChargeStatus::Other("processing".into()))
}

/// Whether a claim made like a recheck's (`claim_for_recheck`) of an attempt that was
/// `before` may write `settlement`: an `unknown` attempt takes whatever the decision says; a
/// `needs_review` one only a found charge's outcome (re-sending it stays a person's call).
fn claim_may_write(before: AttemptStatus, settlement: &Settlement) -> bool {
    before == AttemptStatus::Unknown
        || matches!(
            settlement,
            Settlement::Succeeded { .. } | Settlement::Declined { .. }
        )
}

/// The charge a lookup found that decides the attempt: a success wins over declines (a
/// decline followed by a success under one key cannot happen at a conforming gateway, but
/// money taken is what matters).
fn found_charge(outcome: &LookupOutcome) -> Option<&GatewayCharge> {
    match outcome {
        LookupOutcome::Found(charges) => charges
            .iter()
            .find(|c| c.status == ChargeStatus::Succeeded)
            .or_else(|| charges.first()),
        _ => None,
    }
}
