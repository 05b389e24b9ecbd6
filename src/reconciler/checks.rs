//! A webhook's check (contract §3.3): the PaymentIntent an event named, read again by id
//! with its charge, and compared with its attempt exactly as the sweep compares a listed
//! record ([`super::sweep::compare`]). So a refund, a dispute or a success after a decline is
//! a finding (or evidence that settles a `needs_review` attempt) only when the gateway
//! itself shows it, and with the same evidence the sweep would record: the two never
//! disagree about one charge, and a forged event finds nothing.
//!
//! Invariants: a check never charges, never cancels, never changes a final attempt; a check
//! the gateway did not answer is asked again along `reconciler.schedule`, and one that can
//! never be answered (the attempt gone, a connector without such objects) is dropped.

use std::time::Duration;

use anyhow::Context as _;

use super::sweep::{compare, Acted};
use super::Reconciler;
use crate::domain::finding::FindingSource;
use crate::gateway::list::ListOutcome;
use crate::store::findings::sweep as sweep_store;
use crate::store::findings::webhooks::{self, ObjectCheck};

/// Checks claimed per pass.
const CHECKS_PER_PASS: usize = 32;

/// What one round of checks did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// PaymentIntents read again and compared.
    pub checked: usize,
    /// Checks the gateway did not answer, due again later.
    pub retried: usize,
    pub acted: Acted,
}

impl Reconciler {
    /// Reads again every due PaymentIntent a webhook asked about (up to a batch), one rate
    /// permit each, and records what each shows.
    pub async fn run_checks(&self) -> anyhow::Result<CheckReport> {
        let inner = &self.inner;
        // Held as long as an `unknown` attempt's claim (`reconciler.claim_hold`, decision
        // 200): a reconciler killed mid-batch leaves its checks to another after that.
        let due = webhooks::claim_checks(&inner.store, CHECKS_PER_PASS, inner.settings.claim_hold)
            .await
            .context("claiming webhook checks")?;
        let mut report = CheckReport::default();
        for check in due {
            self.check(&check, &mut report)
                .await
                .with_context(|| format!("checking PaymentIntent {}", check.gateway_object_id))?;
        }
        Ok(report)
    }

    #[tracing::instrument(skip_all, fields(payment_attempt_id = %check.payment_attempt_id, object = check.gateway_object_id))]
    async fn check(&self, check: &ObjectCheck, report: &mut CheckReport) -> anyhow::Result<()> {
        let inner = &self.inner;
        // The attempt and its own refunds are read after the gateway's answer, and weighed
        // against when the read began (`OwnRefunds`): read before it, a refund onecharge
        // sent meanwhile would look like one made outside it.
        let read_began = sweep_store::now(&inner.store).await?;
        inner.gateway.lookup_permit().await.spend(1);
        let Some(call) = inner
            .gateway
            .client
            .retrieve_listed(&check.gateway_object_id)
            .await
        else {
            tracing::warn!("a webhook check for a connector without gateway objects; dropped");
            webhooks::finish_check(&inner.store, check).await?;
            return Ok(());
        };
        let page = match call.outcome {
            ListOutcome::Page(page) => page,
            other => {
                let tries = check.tries.max(1) as usize;
                let delay = inner
                    .policy
                    .lookups
                    .schedule
                    .get(tries - 1)
                    .or(inner.policy.lookups.schedule.last())
                    .copied()
                    .unwrap_or(Duration::from_secs(60));
                tracing::warn!(outcome = ?other, tries, "a webhook's PaymentIntent could not be read; asking again later");
                let at = sweep_store::now(&inner.store).await? + delay;
                webhooks::retry_check(&inner.store, check, at).await?;
                report.retried += 1;
                return Ok(());
            }
        };
        let Some(attempt) =
            sweep_store::attempt_view(&inner.store, check.payment_attempt_id, read_began).await?
        else {
            webhooks::finish_check(&inner.store, check).await?;
            return Ok(());
        };
        let reference = attempt.payment_attempt_id.to_string();
        let verdict = compare(&reference, Some(&attempt), &page.records);
        self.act(
            Some(&attempt),
            verdict,
            (FindingSource::Webhook, Some(&check.webhook_event_id)),
            &mut report.acted,
        )
        .await?;
        webhooks::finish_check(&inner.store, check).await?;
        report.checked += 1;
        tracing::info!(reasons = ?check.reasons, webhook_event_id = check.webhook_event_id, "a webhook's PaymentIntent read again and compared");
        Ok(())
    }
}
