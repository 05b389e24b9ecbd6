//! The onecharge dialect's charges (contract §3): `POST /v1/charges`, charging at most once
//! per idempotency key through the dialect's idempotency layer (`crate::onecharge::keyed`), and the
//! lookup `GET /v1/charges?idempotency_key=`.

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
use crate::charge::{
    decline_code, fault_trigger, Charge, ChargeParams, ChargeStatus, InvalidRequest,
};
use crate::config::FaultKind;
use crate::keys::Keys;
use crate::onecharge::keyed::{self, refused, server_error_after, Claimed, KeyedPost};
use crate::record::ResponseClass;
use crate::state::{ConnectionControl, Shared};

/// `POST /v1/charges`.
pub(crate) async fn create_charge(
    State(shared): State<Arc<Shared>>,
    Extension(connection): Extension<ConnectionControl>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    keyed::serve::<ChargeParams>(shared, connection, uri, headers, body).await
}

impl KeyedPost for ChargeParams {
    type Saved = Charge;

    const PATH: &'static str = "/v1/charges";

    fn parse(body: &[u8]) -> Result<ChargeParams, InvalidRequest> {
        ChargeParams::from_json(body)
    }

    fn keys(shared: &Shared) -> &Keys<ChargeParams, Charge> {
        &shared.keys
    }

    fn replay(shared: &Shared, charge: Charge) -> Answer {
        Answer::json(shared.replay_status(&charge), &charge)
    }

    fn found(_shared: &Shared, charge: Charge) -> Option<Value> {
        Some(serde_json::to_value(charge).expect("a charge serializes"))
    }

    async fn execute(self, claimed: Claimed<ChargeParams>) -> Outcome {
        let params = self;
        let shared = &claimed.shared;
        // Spent while the key is in progress: concurrent duplicates see `409` meanwhile.
        pause(claimed.latency).await;
        let trigger = claimed
            .first_request
            .then(|| fault_trigger(&params.payment_method))
            .flatten();
        let fault = trigger.or_else(|| shared.faults.draw());
        if let Some(kind) = fault.filter(|kind| !kind.charges()) {
            return claimed.refuse(refused(kind));
        }

        if fault == Some(FaultKind::SlowCharge) {
            // Still processing: a re-send meanwhile gets `409`, a lookup finds nothing.
            shared.hold_slow_charge().await;
        }
        let decline = decline_code(&params.payment_method);
        let charge = Charge {
            id: shared.ids.next(),
            status: if decline.is_some() {
                ChargeStatus::Declined
            } else {
                ChargeStatus::Succeeded
            },
            amount_minor: params.amount_minor,
            currency: params.currency,
            customer_id: params.customer_id,
            payment_method: params.payment_method,
            reference: params.reference,
            idempotency_key: claimed.key.clone(),
            decline_code: decline.map(str::to_owned),
            created_at: shared.clock.wall_now(),
            metadata: params.metadata,
        };
        claimed.commit(charge.clone(), Some(charge.clone()));

        let (class, status) = match charge.status {
            ChargeStatus::Succeeded => (ResponseClass::Created, StatusCode::CREATED),
            ChargeStatus::Declined => (ResponseClass::Declined, StatusCode::PAYMENT_REQUIRED),
        };
        let answer = Answer::json(status, &charge);
        Outcome::charged(class, answer, fault, shared.hang_for, server_error_after)
    }
}

#[derive(Deserialize)]
pub(crate) struct LookupQuery {
    idempotency_key: Option<String>,
}

/// `GET /v1/charges?idempotency_key=K`.
pub(crate) async fn lookup_charges(
    State(shared): State<Arc<Shared>>,
    Extension(connection): Extension<ConnectionControl>,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<LookupQuery>, QueryRejection>,
) -> Response {
    let key = query.ok().and_then(|Query(query)| query.idempotency_key);
    keyed::lookup::<ChargeParams>(shared, connection, uri, headers, key).await
}

/// The onecharge dialect's answer to a path it does not serve.
pub(crate) async fn not_found() -> Response {
    Answer::error(StatusCode::NOT_FOUND, "not_found", "no such endpoint").into_response_plain()
}
