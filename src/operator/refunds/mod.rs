//! Refunds for operators (issue 37): `refunds list | show | create`, `/api/refunds…` and the
//! console's refund pages and form — where each refund stands, what happens to it next and
//! who does it, and its history. A person's refund of a charge is [`create`]'s.

mod create;
mod resolve;

use std::collections::BTreeMap;

use serde::Serialize;
use time::OffsetDateTime;

use super::attempts::{
    next_action_text, overdue, suffix, timeline, NextAction, NextActor, TimelineRow,
};
use super::page::{sql_limit, Page};
use crate::domain::{RefundId, RefundStatus};
use crate::format;
use crate::store::reads::attempts::{CallRecord, OutboxEvent, Transition};
pub use crate::store::reads::cursor::RefundCursor;
pub use crate::store::refunds::reads::RefundFilter;
use crate::store::refunds::reads::{self as sql, StoredRefund};
use crate::store::Store;
pub use create::{
    create, decide, message_id, preview, NewRefund, RefundError, RefundPreview, RefundPublished,
};
pub use resolve::{
    resolve, RefundResolveAs, RefundResolveError, RefundResolveRequest, RefundResolved,
};

/// One refund in `--json` output and the admin API: the stored refund, how old it is and
/// what happens to it next.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RefundView {
    #[serde(flatten)]
    pub refund: StoredRefund,
    /// Seconds since the refund was recorded.
    pub age_seconds: i64,
    pub next_action: NextAction,
}

/// `refunds show`: one refund with its whole history.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RefundDetail {
    #[serde(flatten)]
    pub view: RefundView,
    /// Its moves (`refund_transitions`), each with its cause and actor.
    pub transitions: Vec<Transition>,
    /// Its gateway calls (`refund`, `refund_lookup`), sent under its own key.
    pub gateway_calls: Vec<CallRecord>,
    /// Its event (`refund-succeeded`, `refund-failed`) and dead letter in the outbox.
    pub events: Vec<OutboxEvent>,
}

/// One page of the listing, newest first: the next is `before` its last refund.
pub type RefundPage = Page<RefundView, RefundCursor>;

/// Refunds matching `filter` (after `filter.before`), newest first, at most `limit` (0 =
/// all), with the cursor of the next page.
pub async fn page(
    store: &Store,
    filter: &RefundFilter,
    limit: usize,
    now: OffsetDateTime,
) -> Result<RefundPage, sqlx::Error> {
    let limit = sql_limit(limit);
    let rows = sql::list_refunds(store, filter, limit).await?;
    Ok(Page::of_rows(rows, limit, RefundCursor::after, |r| {
        view(r, now)
    }))
}

/// One refund with its moves, gateway calls and events; `None` for an unknown id.
pub async fn show(
    store: &Store,
    refund_id: RefundId,
    now: OffsetDateTime,
) -> Result<Option<RefundDetail>, sqlx::Error> {
    let Some(refund) = sql::get_refund(store, refund_id).await? else {
        return Ok(None);
    };
    let (transitions, gateway_calls, events) = tokio::try_join!(
        sql::refund_transitions(store, refund_id),
        sql::refund_gateway_calls(store, &refund),
        sql::refund_events(store, &refund),
    )?;
    Ok(Some(RefundDetail {
        view: view(refund, now),
        transitions,
        gateway_calls,
        events,
    }))
}

/// A refund status as a filter names it, or why it is none.
pub fn parse_status(text: &str) -> Result<RefundStatus, String> {
    RefundStatus::parse(text.trim()).ok_or_else(|| {
        format!(
            "unknown refund status `{text}` (expected one of {})",
            RefundStatus::ALL.map(RefundStatus::as_str).join(", ")
        )
    })
}

pub fn view(refund: StoredRefund, now: OffsetDateTime) -> RefundView {
    RefundView {
        age_seconds: (now - refund.created_at).whole_seconds().max(0),
        next_action: next_action(&refund, now),
        refund,
    }
}

/// Who moves `refund` next, what they do and when, judged from its row alone. The refund
/// sender runs in the executor role (it admits and sends), the refund lookups in the
/// reconciler role (they take back expired leases and look refunds up).
pub fn next_action(refund: &StoredRefund, now: OffsetDateTime) -> NextAction {
    let worker = |action: String, at: OffsetDateTime| NextAction {
        by: NextActor::Executor,
        action,
        at: Some(at),
        warning: overdue(
            now,
            at,
            NextActor::Executor,
            " (the refund sender runs with it)",
        ),
    };
    let lookups = |action: String, at: OffsetDateTime| NextAction {
        by: NextActor::Reconciler,
        action,
        at: Some(at),
        warning: overdue(
            now,
            at,
            NextActor::Reconciler,
            " (the refund lookups run with it)",
        ),
    };
    match refund.status {
        RefundStatus::Waiting => worker(
            "refund worker admits it once its charge has succeeded (refused if the charge ends declined or expired, or stays unsettled past refunds.max_wait)".to_owned(),
            refund.next_run_at,
        ),
        RefundStatus::Pending => worker(
            if refund.tries == 0 {
                "refund worker sends it to the gateway".to_owned()
            } else {
                format!(
                    "refund worker sends it again under the same key (try {})",
                    refund.tries + 1
                )
            },
            refund.next_run_at,
        ),
        RefundStatus::InFlight => match refund.lease_expires_at {
            Some(expires) if expires > now => NextAction {
                by: NextActor::Executor,
                action: format!(
                    "gateway call in progress ({}); lease expires",
                    refund.lease_owner.as_deref().unwrap_or("unknown executor")
                ),
                at: Some(expires),
                warning: None,
            },
            expires => NextAction {
                by: NextActor::Reconciler,
                action: "lease expired: the refund lookups move it to unknown and look it up"
                    .to_owned(),
                at: expires,
                warning: expires.and_then(|e| overdue(now, e, NextActor::Reconciler, "")),
            },
        },
        RefundStatus::Processing => lookups(
            format!(
                "the gateway is still processing {}; the refund lookups look it up (lookup {})",
                refund.gateway_refund_id.as_deref().unwrap_or("it"),
                refund.lookups + 1
            ),
            refund.next_run_at,
        ),
        RefundStatus::Unknown => lookups(
            format!(
                "the refund lookups look the refund up at the gateway (lookup {})",
                refund.lookups + 1
            ),
            refund.next_run_at,
        ),
        RefundStatus::NeedsReview => NextAction {
            by: NextActor::Operator,
            action: format!(
                "a person reads why above, finds the refund at the gateway (key {}{}) and settles it with `onecharge refunds resolve {} --as succeeded|failed --reason …` (the gateway is read first; failed gives the amount back for a new refund_id); its amount stays reserved meanwhile",
                refund.idempotency_key,
                suffix(", gateway refund ", refund.gateway_refund_id.as_deref()),
                refund.refund_id
            ),
            at: None,
            warning: None,
        },
        RefundStatus::Succeeded | RefundStatus::Failed | RefundStatus::Refused => NextAction {
            by: NextActor::None,
            action: "nothing: final".to_owned(),
            at: None,
            warning: None,
        },
    }
}

/// `5.00 EUR`, or what was asked while it waits: `5.00 EUR asked` / `the rest of the charge`.
pub fn amount_text(refund: &StoredRefund) -> String {
    match (refund.money(), refund.requested_minor) {
        (Some(money), _) => money.to_string(),
        (None, Some(minor)) => format!("{minor} minor units asked"),
        (None, None) => "the rest of the charge".to_owned(),
    }
}

/// Why a refund stands where it does: its review reason, failure reason or last error.
pub fn why(refund: &StoredRefund) -> Option<&str> {
    match refund.status {
        RefundStatus::NeedsReview => refund.review_reason.as_deref(),
        RefundStatus::Failed | RefundStatus::Refused => refund.failure_reason.as_deref(),
        RefundStatus::Succeeded => None,
        _ => refund.last_error.as_deref(),
    }
}

/// The facts of `refunds show`, one per row (name, value); the console's refund page shows
/// the same rows.
pub fn fact_rows(detail: &RefundDetail, now: OffsetDateTime) -> Vec<(&'static str, String)> {
    let r = &detail.view.refund;
    let mut facts = Vec::new();
    let mut fact = |name: &'static str, value: String| facts.push((name, value));
    fact("refund", r.refund_id.to_string());
    fact("status", r.status.to_string());
    fact("next", next_action_text(&detail.view.next_action, now));
    match r.status {
        RefundStatus::NeedsReview => {
            if let Some(reason) = &r.review_reason {
                fact("review reason", format::cell(reason, 300));
            }
        }
        RefundStatus::Failed | RefundStatus::Refused => {
            if let Some(reason) = &r.failure_reason {
                fact("failure reason", format::cell(reason, 300));
            }
        }
        _ => {}
    }
    if let Some(error) = &r.last_error {
        if !r.status.is_final() {
            fact("last error", format::cell(error, 300));
        }
    }
    fact("payment attempt", r.payment_attempt_id.to_string());
    if let (Some(order), Some(customer)) = (&r.order_id, &r.customer_id) {
        fact("order / customer", format!("{order} / {customer}"));
    }
    fact(
        "amount",
        match (r.money(), r.requested_minor) {
            (Some(money), _) => format!("{money} ({} minor units)", money.amount_minor()),
            (None, Some(minor)) => {
                format!("{minor} minor units asked; fixed when the refund is admitted")
            }
            (None, None) => {
                "the rest of the charge, asked; fixed when the refund is admitted".to_owned()
            }
        },
    );
    fact("reason", format::cell(&r.reason, 300));
    if !r.metadata.is_empty() {
        fact("metadata", metadata_text(&r.metadata));
    }
    fact("idempotency key", r.idempotency_key.to_string());
    fact(
        "gateway refund",
        match (&r.gateway_refund_id, &r.gateway_charge_id) {
            (Some(refund), Some(charge)) => format!("{refund} (of {charge})"),
            (Some(refund), None) => refund.clone(),
            (None, Some(charge)) => format!("- (of {charge})"),
            (None, None) => "-".to_owned(),
        },
    );
    fact("tries", format!("{} sends, {} lookups", r.tries, r.lookups));
    fact("created", format::at_relative(r.created_at, now));
    fact("updated", format::at_relative(r.updated_at, now));
    if let Some(first) = r.first_sent_at {
        fact("first sent", format::at_relative(first, now));
    }
    if let Some(settled) = r.settled_at {
        fact("settled", format::at_relative(settled, now));
    }
    if let Some(expires) = r.lease_expires_at {
        fact(
            "lease",
            format!(
                "{} until {}",
                r.lease_owner.as_deref().unwrap_or("?"),
                format::at_relative(expires, now)
            ),
        );
    }
    fact(
        "command",
        format!(
            "message {}{}",
            r.first_message_id,
            suffix(", correlation ", r.correlation_id.as_deref())
        ),
    );
    facts
}

/// `return_id=ret_77, source=support`
fn metadata_text(metadata: &BTreeMap<String, String>) -> String {
    metadata
        .iter()
        .map(|(k, v)| format!("{k}={}", format::cell(v, 80)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The refund's moves, gateway calls and events in the order they happened.
pub fn timeline_rows(detail: &RefundDetail) -> Vec<TimelineRow> {
    timeline(
        &detail.transitions,
        &detail.gateway_calls,
        &detail.events,
        std::iter::empty(),
    )
}

#[cfg(test)]
mod tests {
    use crate::domain::GatewayChargeId;
    use std::collections::BTreeMap;

    use super::*;
    use crate::domain::{Currency, PaymentAttemptId};

    #[test]
    fn each_state_names_who_moves_the_refund_next() {
        let now = time::macros::datetime!(2026-12-03 10:00:00 UTC);
        let mut refund = record(RefundStatus::Pending, now);
        let next = next_action(&refund, now);
        assert_eq!(
            (next.by, next.action.as_str()),
            (NextActor::Executor, "refund worker sends it to the gateway")
        );
        refund.next_run_at = now - time::Duration::minutes(5);
        let late = next_action(&refund, now);
        assert!(late.warning.unwrap().contains("overdue by 5m00s"));
        refund.status = RefundStatus::NeedsReview;
        let review = next_action(&refund, now);
        assert_eq!(review.by, NextActor::Operator);
        assert!(
            review.action.contains("onecharge-refund-"),
            "{}",
            review.action
        );
        refund.status = RefundStatus::Refused;
        assert_eq!(next_action(&refund, now).by, NextActor::None);
    }

    pub(crate) fn record(status: RefundStatus, now: OffsetDateTime) -> StoredRefund {
        let refund_id = RefundId::from(uuid::Uuid::nil());
        StoredRefund {
            refund_id,
            payment_attempt_id: PaymentAttemptId::from(uuid::Uuid::nil()),
            status,
            requested_minor: Some(500),
            amount_minor: Some(500),
            currency: Some(Currency::from_code("EUR").unwrap()),
            reason: "item returned".into(),
            metadata: BTreeMap::from([("return_id".to_owned(), "ret_77".to_owned())]),
            idempotency_key: crate::domain::IdempotencyKey::for_refund(refund_id),
            gateway_charge_id: Some(GatewayChargeId::from_gateway("ch_1")),
            gateway_refund_id: None,
            failure_reason: None,
            review_reason: None,
            last_error: None,
            tries: 0,
            lookups: 0,
            next_run_at: now,
            lease_owner: None,
            lease_expires_at: None,
            first_sent_at: None,
            last_sent_at: None,
            requested_at: None,
            first_message_id: "m-1".into(),
            correlation_id: None,
            order_id: Some("ord_1".into()),
            customer_id: Some("cus_1".into()),
            created_at: now,
            updated_at: now,
            settled_at: None,
        }
    }
}
