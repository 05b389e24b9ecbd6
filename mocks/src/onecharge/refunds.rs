//! The onecharge dialect's refunds: `POST /v1/refunds`, refunding at most once per
//! idempotency key through the dialect's idempotency layer (`crate::onecharge::keyed`, the charges'
//! own) and never over the charge (`crate::refund::settle`, `crate::refund::ledger`), and the
//! lookup `GET /v1/refunds?idempotency_key=`. A replay and a lookup show the refund as it
//! stands now (a `pending` one may have settled since).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::Extension;
use serde::Deserialize;
use serde_json::Value;

use crate::answer::{pause, Answer, Outcome};
use crate::charge::{ChargeStatus, InvalidRequest};
use crate::config::FaultKind;
use crate::keys::Keys;
use crate::onecharge::keyed::{self, refused, server_error_after, Claimed, KeyedPost};
use crate::record::ResponseClass;
use crate::refund::ledger::OverRefund;
use crate::refund::settle;
use crate::refund::{Refund, RefundParams};
use crate::state::{ConnectionControl, Shared};

/// `POST /v1/refunds`.
pub(crate) async fn create_refund(
    State(shared): State<Arc<Shared>>,
    Extension(connection): Extension<ConnectionControl>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    keyed::serve::<RefundParams>(shared, connection, uri, headers, body).await
}

#[derive(Deserialize)]
pub(crate) struct LookupQuery {
    idempotency_key: Option<String>,
}

/// `GET /v1/refunds?idempotency_key=K`.
pub(crate) async fn lookup_refunds(
    State(shared): State<Arc<Shared>>,
    Extension(connection): Extension<ConnectionControl>,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<LookupQuery>, QueryRejection>,
) -> Response {
    let key = query.ok().and_then(|Query(query)| query.idempotency_key);
    keyed::lookup::<RefundParams>(shared, connection, uri, headers, key).await
}

impl KeyedPost for RefundParams {
    /// The refund's id: replays and lookups read the refund as it stands now.
    type Saved = String;

    const PATH: &'static str = "/v1/refunds";

    fn parse(body: &[u8]) -> Result<RefundParams, InvalidRequest> {
        RefundParams::from_json(body)
    }

    fn keys(shared: &Shared) -> &Keys<RefundParams, String> {
        &shared.refund_keys
    }

    fn replay(shared: &Shared, id: String) -> Answer {
        match shared.refunds.get(&id) {
            Some(refund) => Answer::json(StatusCode::OK, &refund.onecharge_body()),
            None => Answer::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "the refund saved under this key is missing",
            ),
        }
    }

    fn found(shared: &Shared, id: String) -> Option<Value> {
        let refund = shared.refunds.get(&id)?;
        Some(serde_json::to_value(refund.onecharge_body()).expect("a refund serializes"))
    }

    fn lookup_fault(shared: &Shared) -> Option<FaultKind> {
        shared.faults.draw_refund_lookup()
    }

    async fn execute(self, claimed: Claimed<RefundParams>) -> Outcome {
        let params = self;
        let shared = &claimed.shared;
        // Spent while the key is in progress: concurrent duplicates see `409` meanwhile.
        pause(claimed.latency).await;
        // A refund the gateway refuses moves nothing, so it draws no fault either.
        let charge = match refundable(shared, &params) {
            Ok(charge) => charge,
            Err(refusal) => return claimed.refuse(refusal),
        };
        let fault = shared.faults.draw_refund();
        if let Some(kind) = fault.filter(|kind| !kind.charges()) {
            return claimed.refuse(refused(kind));
        }
        if fault == Some(FaultKind::SlowRefund) {
            // Still processing: a re-send meanwhile gets `409`, a lookup finds nothing.
            shared.hold_slow_charge().await;
        }
        let refund = Refund {
            refund_id: Some(params.refund_id.clone()),
            reference: Some(params.reference.clone()),
            idempotency_key: Some(claimed.key.clone()),
            reason: params.reason.clone(),
            metadata: params.metadata.clone(),
            ..settle::draft(
                shared,
                &params.charge_id,
                params.amount_minor,
                &params.currency,
            )
        };
        // Checked again as it is recorded: another refund may have taken the room while
        // this one was held.
        let refund = match settle::record(shared, refund, &charge.payment_method, charge.amount) {
            Ok(refund) => refund,
            Err(over) => return claimed.refuse(exceeds(&params, over)),
        };
        claimed.commit(refund.id.clone(), None);
        let answer = Answer::json(StatusCode::CREATED, &refund.onecharge_body());
        Outcome::charged(
            ResponseClass::Refunded,
            answer,
            fault,
            shared.hang_for,
            server_error_after,
        )
    }
}

/// What a refund needs of its charge.
struct RefundedCharge {
    amount: i64,
    payment_method: String,
}

/// The succeeded charge `params` names, in its currency, with room for the refund; or the
/// refusal.
fn refundable(shared: &Shared, params: &RefundParams) -> Result<RefundedCharge, Outcome> {
    let charge = {
        let ledger = shared.ledger.lock();
        ledger
            .first_with_id(&params.charge_id)
            .filter(|charge| charge.status == ChargeStatus::Succeeded)
            .map(|charge| {
                (
                    charge.amount_minor,
                    charge.currency.clone(),
                    charge.payment_method.clone(),
                )
            })
    };
    let Some((amount, currency, payment_method)) = charge else {
        return Err(refusal(
            StatusCode::NOT_FOUND,
            "charge_not_found",
            format!("no succeeded charge {}", params.charge_id),
        ));
    };
    if currency != params.currency {
        return Err(Outcome::invalid(InvalidRequest(format!(
            "currency {} is not the charge's: {} is in {currency}",
            params.currency, params.charge_id
        ))));
    }
    let left = shared.refunds.left(&params.charge_id, amount);
    if params.amount_minor > left {
        return Err(exceeds(params, OverRefund { left }));
    }
    Ok(RefundedCharge {
        amount,
        payment_method,
    })
}

/// `400 amount_exceeds_charge`: nothing recorded.
fn exceeds(params: &RefundParams, over: OverRefund) -> Outcome {
    refusal(
        StatusCode::BAD_REQUEST,
        "amount_exceeds_charge",
        format!(
            "a refund of {} exceeds what is left to refund of charge {}: {} (its succeeded \
             and pending refunds count against it)",
            params.amount_minor, params.charge_id, over.left
        ),
    )
}

fn refusal(status: StatusCode, kind: &str, message: String) -> Outcome {
    Outcome::now(
        ResponseClass::InvalidRequest,
        Answer::error(status, kind, message),
    )
}
