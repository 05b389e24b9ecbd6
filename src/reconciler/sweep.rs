//! The reconciliation sweep (docs/contract.md §3.2, §5 `reconcile sweep`): every charge the
//! gateway created in a window, compared both ways with the attempts.
//!
//! 1. **Read**: the gateway's list, a page at a time (each page request takes a permit of
//!    the fleet-wide `gateway_max_rate`), each page stored in
//!    `reconciliation_sweep_records` before the next is asked for: memory is one page,
//!    whatever the window.
//! 2. **Compare**, a batch of attempt ids at a time, with the pure
//!    [`compare::compare`]: the records naming each attempt id against the attempt; then
//!    the succeeded attempts of the window that no record names.
//! 3. **Act**: findings are recorded (deduplicated across runs); money found for an
//!    `unknown`/`needs_review` attempt is handed to the reconciler's own decision as a
//!    lookup's answer ([`Reconciler::settle_by_evidence`]), fenced by a claim like a
//!    recheck; a `pending` attempt whose charge is held under its key is made due.
//!
//! Invariants: a sweep never changes a final attempt; it never charges; it never settles
//! anything the reconciler's decision would not settle from the same answer; a sweep ended
//! as abandoned (stalled past `ABANDONED_AFTER`) writes nothing more, its row keeps that
//! end: each batch of the comparison is fenced by a heartbeat between its read and its
//! writes (decision 241).

pub mod compare;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

pub use compare::{compare, Action, SweptAttempt, Verdict};

use super::policy::{claim_may_write, found_charge, Decision};
use super::Reconciler;
use crate::domain::listing::ListWindow;
use crate::domain::outcome::{GatewayCharge, LookupOutcome};
use crate::domain::PaymentAttemptId;
use crate::domain::{AttemptStatus, SettleWrite};
use crate::gateway::list::{ListOutcome, ListPage, MAX_PAGE};
use crate::store::attempts::lookups::{claim_for_recheck, RecheckClaim};
use crate::store::attempts::settle;
use crate::store::findings::sweep::{self as sweep_store, ComparePage, Named, SweepCounts};
use crate::store::findings::{self, FindingSource, NewFinding};

/// Attempts compared per database round trip.
const COMPARE_BATCH: usize = 500;

/// Tries of one page request before the sweep gives up (a page that fails transiently is
/// asked for again after 1 s, 2 s, 4 s…).
const PAGE_TRIES: u32 = 5;

/// Allowance for the clocks of onecharge's database and the gateway: a succeeded attempt
/// first sent less than this after the window opens, or settled less than this before it
/// closes, is not required to be in the listing.
pub const CLOCK_MARGIN: Duration = Duration::from_secs(60);

/// What one sweep did.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    pub sweep_id: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub window_from: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub window_to: OffsetDateTime,
    /// Pages read: every page the gateway had for the window.
    pub pages: u32,
    /// Records the pages held, onecharge's or not.
    pub records_seen: u64,
    /// Records compared: onecharge's, with an outcome (a PaymentIntent of onecharge's that
    /// was never confirmed charged nothing and is neither kept nor skipped).
    pub records_kept: u64,
    /// Records skipped as not onecharge's (no attempt id, or one not of its shape): another
    /// integration's in a shared account. Never a finding.
    pub records_skipped: u64,
    /// Findings first seen by this sweep.
    pub new_findings: Vec<NewFindingSummary>,
    /// Findings seen before, seen again (deduplicated).
    pub findings_seen_again: u32,
    /// Attempts the evidence settled, and where they went.
    pub settled: Vec<(PaymentAttemptId, AttemptStatus)>,
    /// `pending` attempts made due for the executor's replaying re-send.
    pub made_due: Vec<PaymentAttemptId>,
    pub duration_seconds: f64,
    /// Of which reading the gateway's pages.
    pub read_seconds: f64,
}

impl SweepReport {
    /// What its row records.
    fn counts(&self) -> SweepCounts {
        SweepCounts {
            pages: self.pages,
            records_seen: self.records_seen,
            records_kept: self.records_kept,
            records_skipped: self.records_skipped,
            findings: self.new_findings.len() as u32,
            settled: self.settled.len() as u32,
        }
    }
}

/// What acting on verdicts did, added to a sweep's report (or a check's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acted {
    pub new_findings: Vec<NewFindingSummary>,
    pub findings_seen_again: u32,
    pub settled: Vec<(PaymentAttemptId, AttemptStatus)>,
    pub made_due: Vec<PaymentAttemptId>,
}

impl Acted {
    fn add_to(self, report: &mut SweepReport) {
        report.new_findings.extend(self.new_findings);
        report.findings_seen_again += self.findings_seen_again;
        report.settled.extend(self.settled);
        report.made_due.extend(self.made_due);
    }
}

/// One new finding, as the sweep prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewFindingSummary {
    pub class: findings::FindingClass,
    pub payment_attempt_id: Option<PaymentAttemptId>,
    pub reference: Option<String>,
    pub gateway_ids: Vec<String>,
    /// What the gateway showed (`refunded:500`, `disputed`, `missing`…).
    pub evidence: String,
    pub detail: String,
}

impl Reconciler {
    /// One sweep of `window`: read every page, compare, act (see the module's doc).
    pub async fn sweep(&self, window: ListWindow) -> anyhow::Result<SweepReport> {
        self.sweep_until(window, &CancellationToken::new()).await
    }

    /// [`Reconciler::sweep`], stopped when `stop` is cancelled (shutdown): the sweep's row
    /// then ends saying so, its records are removed, and the next sweep reads the window
    /// again. Refused, with no row written, while a sweep of an overlapping window runs.
    #[tracing::instrument(skip_all, fields(from = %window.from, to = %window.to))]
    pub async fn sweep_until(
        &self,
        window: ListWindow,
        stop: &CancellationToken,
    ) -> anyhow::Result<SweepReport> {
        let inner = &self.inner;
        let started = Instant::now();
        let sweep_id = sweep_store::start(&inner.store, window, &inner.actor)
            .await
            .context("starting the sweep")?;
        let mut report = SweepReport {
            sweep_id,
            window_from: window.from,
            window_to: window.to,
            pages: 0,
            records_seen: 0,
            records_kept: 0,
            records_skipped: 0,
            new_findings: Vec::new(),
            findings_seen_again: 0,
            settled: Vec::new(),
            made_due: Vec::new(),
            duration_seconds: 0.0,
            read_seconds: 0.0,
        };
        let finished = tokio::select! {
            result = async {
                // The attempts' own refunds are weighed against pages read from now on.
                let read_began = sweep_store::now(&inner.store)
                    .await
                    .context("reading the database's clock")?;
                self.read_pages(sweep_id, window, &mut report).await?;
                report.read_seconds = started.elapsed().as_secs_f64();
                sweep_store::analyze_records(&inner.store)
                    .await
                    .context("analyzing the sweep's records")?;
                self.compare_all(sweep_id, window, read_began, &mut report).await
            } => Some(result),
            _ = stop.cancelled() => None,
        };
        let stopped = finished.is_none();
        let result = finished.unwrap_or_else(|| {
            Err(anyhow::anyhow!(
                "stopped at shutdown after {} page(s); the next sweep reads the window again",
                report.pages
            ))
        });
        report.duration_seconds = started.elapsed().as_secs_f64();
        let error = result.as_ref().err().map(|e| format!("{e:#}"));
        let ended = sweep_store::finish(&inner.store, sweep_id, report.counts(), error.as_deref())
            .await
            .context("ending the sweep")?;
        // Ended by another (as abandoned) while it ran: its row keeps that end, and it did
        // not finish whatever it thinks it did.
        let result = match result {
            Ok(()) if !ended => Err(abandoned(sweep_id)),
            other => other,
        };
        if !stopped {
            crate::metrics::sweep(report.duration_seconds, result.is_ok());
        }
        self.refresh_findings_gauge().await;
        result?;
        tracing::info!(
            pages = report.pages,
            records_seen = report.records_seen,
            records_kept = report.records_kept,
            records_skipped = report.records_skipped,
            new_findings = report.new_findings.len(),
            settled = report.settled.len(),
            "sweep finished"
        );
        Ok(report)
    }

    /// Step 1: every page of the window into the sweep's records, until the gateway says
    /// there is no more, whatever a page kept. A cursor the gateway leads back to is an
    /// error: following it would loop, and stopping would skip the rest silently.
    async fn read_pages(
        &self,
        sweep_id: i64,
        window: ListWindow,
        report: &mut SweepReport,
    ) -> anyhow::Result<()> {
        let inner = &self.inner;
        let mut cursor: Option<String> = None;
        let mut followed = std::collections::HashSet::new();
        loop {
            let page = self
                .read_page(window, cursor.as_deref(), report.pages)
                .await?;
            report.pages += 1;
            report.records_seen += u64::from(page.seen);
            report.records_kept += page.records.len() as u64;
            report.records_skipped += u64::from(page.not_ours);
            crate::metrics::sweep_page(page.records.len());
            sweep_store::add_records(&inner.store, sweep_id, &page.records)
                .await
                .context("storing a page of the gateway's records")?;
            self.beat(sweep_id, report).await?;
            let Some(next) = page.next else {
                return Ok(());
            };
            if !followed.insert(next.clone()) {
                anyhow::bail!(
                    "the gateway's list led back to cursor {next} after {} page(s): it does not advance, so the rest of the window cannot be read",
                    report.pages
                );
            }
            cursor = Some(next);
        }
    }

    /// The sweep's heartbeat and fence ([`sweep_store::heartbeat`]): an error once another
    /// sweep ended this one as abandoned.
    async fn beat(&self, sweep_id: i64, report: &SweepReport) -> anyhow::Result<()> {
        let running = sweep_store::heartbeat(&self.inner.store, sweep_id, report.counts())
            .await
            .context("recording the sweep's progress")?;
        if running {
            Ok(())
        } else {
            Err(abandoned(sweep_id))
        }
    }

    /// One page after `cursor`, asked again after 1 s, 2 s, 4 s… while it fails
    /// transiently, up to [`PAGE_TRIES`]; `read` pages were read before it.
    async fn read_page(
        &self,
        window: ListWindow,
        cursor: Option<&str>,
        read: u32,
    ) -> anyhow::Result<ListPage> {
        let gateway = &self.inner.gateway;
        let mut tries = 0;
        loop {
            gateway.lookup_permit().await.spend(1);
            let call = gateway.client.list_page(window, cursor, MAX_PAGE).await;
            tries += 1;
            match call.outcome {
                ListOutcome::Page(page) => return Ok(page),
                ListOutcome::Failed { reason } if tries < PAGE_TRIES => {
                    tracing::warn!(reason, tries, "a sweep page failed; asking again");
                    tokio::time::sleep(Duration::from_secs(1 << (tries - 1))).await;
                }
                other => anyhow::bail!(
                    "the gateway's list answered {} after {read} page(s): {other:?}",
                    other.label(),
                ),
            }
        }
    }

    /// Steps 2 and 3: each attempt id the records name, then the succeeded attempts
    /// nothing names; a batch at a time, each after the last reference
    /// of the one before.
    async fn compare_all(
        &self,
        sweep_id: i64,
        window: ListWindow,
        read_began: OffsetDateTime,
        report: &mut SweepReport,
    ) -> anyhow::Result<()> {
        for part in [Part::Named, Part::Unlisted] {
            let mut after: Option<String> = None;
            loop {
                let batch = self
                    .batch(part, sweep_id, window, read_began, after.as_deref())
                    .await?;
                // The fence, after the read and before anything is written: a sweep ended
                // as abandoned while it stalled lost its records, and what it read may be
                // missing them (every charge would look missing). Still running here, it
                // read them whole; and the heartbeat keeps a long comparison alive.
                self.beat(sweep_id, report).await?;
                let Some(last) = batch.last() else { break };
                after = Some(last.reference.clone());
                let mut acted = Acted::default();
                for named in batch {
                    let verdict = compare(&named.reference, named.attempt.as_ref(), &named.records);
                    self.act(
                        named.attempt.as_ref(),
                        verdict,
                        (FindingSource::Sweep, None),
                        &mut acted,
                    )
                    .await?;
                }
                acted.add_to(report);
            }
        }
        Ok(())
    }

    /// The batch of `part` after the reference `after`, each as a reference, the attempt it
    /// names (none when onecharge knows no such attempt) and the records naming it.
    async fn batch(
        &self,
        part: Part,
        sweep_id: i64,
        window: ListWindow,
        read_began: OffsetDateTime,
        after: Option<&str>,
    ) -> anyhow::Result<Vec<Named>> {
        let store = &self.inner.store;
        let page = |after: Option<&str>| -> anyhow::Result<ComparePage> {
            Ok(ComparePage {
                sweep: sweep_id,
                window,
                read_began,
                margin: CLOCK_MARGIN,
                after: after
                    .map(|id| id.parse().context("a named attempt id"))
                    .transpose()?,
                limit: COMPARE_BATCH,
            })
        };
        Ok(match part {
            Part::Named => sweep_store::named_attempts(store, page(after)?)
                .await
                .context("reading the attempts the gateway's records name")?,
            Part::Unlisted => sweep_store::unlisted_succeeded(store, page(after)?)
                .await
                .context("reading succeeded attempts the gateway does not list")?
                .into_iter()
                .map(|attempt| Named {
                    reference: attempt.payment_attempt_id.to_string(),
                    attempt: Some(attempt),
                    records: Vec::new(),
                })
                .collect(),
        })
    }

    /// Records a verdict's findings (seen by `source`, asked for by the Stripe event
    /// `stripe_event` when a webhook did) and does its action, adding what it did to
    /// `acted`: the sweep's step 3, and a webhook's check of one object.
    pub(super) async fn act(
        &self,
        attempt: Option<&SweptAttempt>,
        verdict: Verdict,
        (source, stripe_event): (FindingSource, Option<&str>),
        acted: &mut Acted,
    ) -> anyhow::Result<()> {
        let store = &self.inner.store;
        if !verdict.findings.is_empty() {
            let mut conn = store.pool().acquire().await?;
            for finding in &verdict.findings {
                if findings::record(&mut conn, finding, source, stripe_event)
                    .await
                    .context("recording a finding")?
                    .is_some()
                {
                    tracing::warn!(class = %finding.class, evidence = finding.evidence, detail = finding.detail, "reconciliation finding");
                    acted.new_findings.push(summary(finding));
                } else {
                    acted.findings_seen_again += 1;
                }
            }
        }
        let Some(attempt) = attempt else {
            return Ok(());
        };
        let id = attempt.payment_attempt_id;
        match verdict.action {
            Action::Nothing => {}
            Action::Settle(charges) => {
                if let Some(status) = self.settle_by_evidence(id, charges).await? {
                    acted.settled.push((id, status));
                }
            }
            Action::MakeDue => {
                if sweep_store::make_pending_due(store, id).await? {
                    acted.made_due.push(id);
                }
            }
        }
        Ok(())
    }

    /// Money the gateway's list shows for an `unknown` or `needs_review` attempt, read by the
    /// reconciler's own decision as the answer of a lookup: claimed like a recheck (the
    /// fencing token moves, so a pass or a person looking at the same moment is fenced
    /// out), decided by the reconciler's own [`LookupPolicy::decide`](super::policy::LookupPolicy::decide), written by the one `settle`, with the listed
    /// record as the evidence (a call with operation `list`, carried by the move it caused,
    /// decision 221). A `needs_review` attempt
    /// moves only to a found charge's outcome, as a recheck's does. Returns where the attempt
    /// went, if anywhere.
    #[tracing::instrument(skip_all, fields(payment_attempt_id = %id))]
    pub async fn settle_by_evidence(
        &self,
        id: PaymentAttemptId,
        charges: Vec<GatewayCharge>,
    ) -> anyhow::Result<Option<AttemptStatus>> {
        let inner = &self.inner;
        let attempt = match claim_for_recheck(&inner.store, id, inner.settings.claim_hold).await? {
            RecheckClaim::Claimed(attempt) => attempt,
            RecheckClaim::NotFound | RecheckClaim::WrongState(_) => return Ok(None),
        };
        let before = attempt.held_as;
        let now = attempt.claimed_at;
        let outcome = LookupOutcome::Found(charges);
        let found = found_charge(&outcome).map(|c| c.id.clone());
        let Decision::Settle { settlement, cause } = inner.policy.decide(&attempt, &outcome, now)
        else {
            return Ok(None);
        };
        if !claim_may_write(before, &settlement) {
            return Ok(None);
        }
        let status = settlement.status();
        let write = SettleWrite {
            fence: attempt.fence(&inner.actor),
            settlement,
            cause,
            call: Some(attempt.listed_evidence(
                now,
                found,
                "no lookup sent: the reconciliation sweep found this charge in the gateway's list",
            )),
            now,
        };
        let settled = settle(&inner.store, &write)
            .await
            .context("settling by the sweep's evidence")?;
        if settled {
            tracing::info!(before = %before, after = %status, %cause, "settled by the sweep's evidence");
            crate::metrics::reconciliation(status.as_str());
        }
        Ok(settled.then_some(status))
    }

    /// Sets `onecharge_reconciliation_findings_open{class}` from the database.
    pub async fn refresh_findings_gauge(&self) {
        refresh_findings_gauge(&self.inner.store).await;
    }

    /// The sweep job of `serve`: every `reconciler.sweep_interval` (claimed fleet-wide, so
    /// one instance sweeps per interval), a sweep of the last `reconciler.sweep_window`.
    /// A failed sweep is logged and waits for the next interval; it never stops the role.
    pub async fn run_sweeps(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let settings = self.inner.settings.clone();
        crate::metrics::sweep_interval(settings.sweep_interval);
        if settings.sweep_interval.is_zero() {
            return Ok(());
        }
        // Checks often enough to claim the fleet's turn soon after it falls due.
        let check_every = settings.sweep_interval.min(Duration::from_secs(30));
        while !shutdown.is_cancelled() {
            match sweep_store::claim_scheduled(&self.inner.store, settings.sweep_interval).await {
                Ok(true) => {
                    // Not raced with the shutdown: the sweep stops itself and ends its row.
                    let result = async {
                        let now = sweep_store::now(&self.inner.store).await?;
                        let window = ListWindow {
                            from: now - settings.sweep_window,
                            to: now,
                        };
                        self.sweep_until(window, &shutdown).await
                    }
                    .await;
                    if let Err(err) = result {
                        if shutdown.is_cancelled() {
                            tracing::info!(error = %format!("{err:#}"), "the scheduled sweep stopped at shutdown");
                            break;
                        }
                        tracing::error!(error = %format!("{err:#}"), "the scheduled sweep failed; the next interval sweeps again");
                    }
                }
                Ok(false) => {}
                Err(err) => tracing::error!(error = %err, "cannot claim the scheduled sweep"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(check_every) => {}
            }
        }
        Ok(())
    }
}

/// The two parts of step 2, in order.
#[derive(Debug, Clone, Copy)]
enum Part {
    /// Each attempt id the gateway's records name.
    Named,
    /// The succeeded attempts of the window that no record names.
    Unlisted,
}

/// Sets `onecharge_reconciliation_findings_open{class}` from the database (every class, so
/// a class whose last finding was resolved goes to 0).
pub async fn refresh_findings_gauge(store: &crate::store::Store) {
    match findings::count_open(store).await {
        Ok(counts) => crate::metrics::findings_open(
            findings::FindingClass::ALL,
            findings::FindingClass::as_str,
            &counts,
        ),
        Err(err) => tracing::warn!(error = %err, "cannot count open findings"),
    }
}

/// Why a sweep another ended as abandoned stops: nothing more is read, compared or written.
fn abandoned(sweep_id: i64) -> anyhow::Error {
    anyhow::anyhow!(
        "sweep {sweep_id} was ended as abandoned by the next sweep's start while it stalled \
         (no heartbeat for {} s) and its records were removed: it stops without writing a \
         finding; the next sweep reads the window again",
        sweep_store::ABANDONED_AFTER.as_secs()
    )
}

fn summary(finding: &NewFinding) -> NewFindingSummary {
    NewFindingSummary {
        class: finding.class,
        payment_attempt_id: finding.payment_attempt_id,
        reference: finding.reference.clone(),
        gateway_ids: finding.gateway_ids.clone(),
        evidence: finding.evidence.clone(),
        detail: finding.detail.clone(),
    }
}
