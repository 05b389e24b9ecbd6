//! How either dialect makes and settles a refund, between its handlers and the refund
//! ledger (`crate::refund::ledger`):
//! - [`record`]: a new refund starts as its charge's card says (`pm_card_pendingRefund`,
//!   `pm_card_refundFail`) or else as the dice draw (`faults.refunds.pending`,
//!   `requires_action`, `failed`), is recorded against what is left to refund of its
//!   charge, and, if it settles later, does so after `refund_settle_after`;
//! - [`settle_waiting`] (`MockGateway::settle_refunds`, `POST /__refunds/settle`) settles
//!   them sooner, and [`move_refund`] (`POST /__refunds/{id}`) moves one as the gateway
//!   would;
//! - every change is announced to the Stripe dialect's webhooks (nothing is sent in the
//!   onecharge dialect, which has none);
//! - `GET /__ledger/refunds` shows the ledger with its tallies.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::answer::Answer;
use crate::config::Dialect;
use crate::refund::ledger::{Moved, OverRefund};
use crate::refund::{Refund, RefundStatus, Start};
use crate::state::Shared;

/// A new refund of `amount_minor` of ledger entry `charge_id`, `succeeded`, made now, with
/// a fresh `re_…` id; the caller fills in what its request said.
pub(crate) fn draft(shared: &Shared, charge_id: &str, amount_minor: i64, currency: &str) -> Refund {
    Refund {
        id: shared.ids.next_with_prefix("re"),
        charge_id: charge_id.to_owned(),
        amount_minor,
        currency: currency.to_owned(),
        status: RefundStatus::Succeeded,
        refund_id: None,
        reference: None,
        idempotency_key: None,
        reason: None,
        failure_reason: None,
        metadata: BTreeMap::new(),
        created_at: shared.clock.wall_now(),
    }
}

/// Records `refund` (a [`draft`] filled in) of a charge of `charge_amount` paid with
/// `payment_method`: it starts as the card says, or else as the dice draw; it is refused
/// when it would take the charge's refunds over its amount. Call it with no lock held.
pub(crate) fn record(
    shared: &Arc<Shared>,
    refund: Refund,
    payment_method: &str,
    charge_amount: i64,
) -> Result<Refund, OverRefund> {
    let start = Start::by_card(payment_method).unwrap_or_else(|| {
        let requires_action = shared.dialect == Dialect::Stripe;
        Start::drawn(shared.faults.draw_refund_start(requires_action))
    });
    let refund = Refund {
        status: start.status,
        failure_reason: start.failure_reason.map(str::to_owned),
        ..refund
    };
    let refund = shared
        .refunds
        .record(refund, start.settles_to, charge_amount)?;
    if start.settles_to.is_some() {
        settle_later(shared, refund.id.clone());
    }
    shared
        .stripe
        .announce_refund(&refund, None, refund.created_at);
    Ok(refund)
}

/// Settles refund `id` after `refund_settle_after`, unless it was settled or moved sooner.
fn settle_later(shared: &Arc<Shared>, id: String) {
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(shared.refund_settle_after) => {
                settle_waiting(&shared, Some(&id));
            }
            () = shared.shutdown.cancelled() => {}
        }
    });
}

/// Settles the refunds waiting to (refund `id`, or all): each moves where it was bound to
/// (`pending` to `succeeded`, a `pm_card_refundFail` refund to `failed`). What moved.
pub(crate) fn settle_waiting(shared: &Shared, id: Option<&str>) -> Vec<Refund> {
    let moved = shared.refunds.settle_waiting(id);
    moved.into_iter().map(|m| announced(shared, m)).collect()
}

/// Moves refund `id` to `status` as the gateway would (`failure_reason` for a `failed`
/// one, `declined` when none is given). The onecharge dialect's refunds are only ever
/// `pending`, `succeeded` or `failed`.
pub(crate) fn move_refund(
    shared: &Shared,
    id: &str,
    status: RefundStatus,
    failure_reason: Option<String>,
) -> Result<Refund, String> {
    if shared.dialect == Dialect::Onecharge
        && matches!(
            status,
            RefundStatus::RequiresAction | RefundStatus::Canceled
        )
    {
        return Err(format!(
            "the onecharge dialect's refunds are pending, succeeded or failed, never {}",
            status.as_str()
        ));
    }
    let moved = shared
        .refunds
        .move_to(id, status, failure_reason)
        .map_err(|err| err.to_string())?;
    Ok(announced(shared, moved))
}

fn announced(shared: &Shared, moved: Moved) -> Refund {
    let Moved { from, refund } = moved;
    shared
        .stripe
        .announce_refund(&refund, Some(from), shared.clock.wall_now());
    refund
}

/// A refund in the words of the gateway's dialect: onecharge's refund body, or Stripe's
/// refund object.
pub(crate) fn dialect_object(shared: &Shared, refund: &Refund) -> Value {
    match shared.dialect {
        Dialect::Onecharge => {
            serde_json::to_value(refund.onecharge_body()).expect("a refund serializes")
        }
        Dialect::Stripe => shared.stripe.refund_object(refund),
    }
}

fn control_error(status: StatusCode, message: impl Into<String>) -> Response {
    Answer::error(status, "invalid_request", message).into_response_plain()
}

/// The body of `POST /__refunds/{id}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RefundChange {
    status: String,
    #[serde(default)]
    failure_reason: Option<String>,
}

/// `POST /__refunds/{id}` `{"status": "succeeded"|"failed"|"pending"|"requires_action"|
/// "canceled", "failure_reason": "…"}`: moves the refund as the gateway settling it would,
/// and answers it in the dialect's words; `404` for no such refund, `400` for a move its
/// status does not allow.
pub(crate) async fn change_refund(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let change: RefundChange = match serde_json::from_slice(&body) {
        Ok(change) => change,
        Err(err) => return control_error(StatusCode::BAD_REQUEST, err.to_string()),
    };
    let Some(status) = RefundStatus::parse(&change.status) else {
        return control_error(
            StatusCode::BAD_REQUEST,
            "status: pending, requires_action, succeeded, failed or canceled",
        );
    };
    if shared.refunds.get(&id).is_none() {
        return control_error(StatusCode::NOT_FOUND, format!("no refund {id}"));
    }
    match move_refund(&shared, &id, status, change.failure_reason) {
        Ok(refund) => {
            Answer::json(StatusCode::OK, &dialect_object(&shared, &refund)).into_response_plain()
        }
        Err(message) => control_error(StatusCode::BAD_REQUEST, message),
    }
}

/// `POST /__refunds/settle`: every refund waiting to settle does so now; answers
/// `{"settled": [refund…]}` in the dialect's words.
pub(crate) async fn settle_refunds(State(shared): State<Arc<Shared>>) -> Response {
    let settled: Vec<Value> = settle_waiting(&shared, None)
        .iter()
        .map(|refund| dialect_object(&shared, refund))
        .collect();
    Json(json!({ "settled": settled })).into_response()
}

/// `GET /__ledger/refunds`: every refund in creation order (`refunds`), and per onecharge
/// refund id, idempotency key and charge how many there are and how much of them
/// succeeded or is still held (`by_refund_id`, `by_idempotency_key`, `by_charge`).
pub(crate) async fn refund_ledger(State(shared): State<Arc<Shared>>) -> Response {
    let tallies = shared.refunds.tallies();
    Json(json!({
        "refunds": shared.refunds.all(),
        "by_refund_id": tallies.by_refund_id,
        "by_idempotency_key": tallies.by_idempotency_key,
        "by_charge": tallies.by_charge,
    }))
    .into_response()
}
