//! Stripe's refunds: `POST /v1/refunds` (form-encoded, through Stripe's idempotency layer
//! in `super::post`, the refund faults on the call that refunds), `GET /v1/refunds`
//! (`payment_intent`, `limit`, `starting_after`; newest first) and `GET /v1/refunds/{id}`,
//! the refund lookups faulted by the `lookup_*` knobs. A refund is recorded in the refund
//! ledger both dialects share (`crate::refund::settle`), against what is left to refund of its
//! PaymentIntent's charge.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::error::StripeError;
use super::intent::{PaymentIntent, Status};
use super::params::CreateRefund;
use super::post::{
    refused_before_charging, refused_by_fault, serve_post, server_error_after, Execute, Executed,
    Post, Request,
};
use super::respond::{refused, serve_get, Get};
use crate::answer::{Answer, Outcome};
use crate::config::FaultKind;
use crate::paging::Page;
use crate::record::ResponseClass;
use crate::refund::ledger::OverRefund;
use crate::refund::settle;
use crate::refund::Refund;
use crate::state::Shared;

/// `POST /v1/refunds`.
pub(crate) async fn create_refund(State(shared): State<Arc<Shared>>, post: Post) -> Response {
    serve_post(shared, post, CreateRefund::from_form).await
}

impl Execute for CreateRefund {
    async fn execute(self, request: &Request) -> Executed {
        let shared = &request.shared;
        // A refund Stripe refuses moves nothing: no fault is drawn, nothing is saved.
        let (intent, amount) = match refundable(shared, &self) {
            Ok(refundable) => refundable,
            Err(err) => return Executed::not_saved(refused(ResponseClass::InvalidRequest, err)),
        };
        let fault = shared.faults.draw_refund();
        if let Some(kind) = fault.filter(|kind| !kind.charges()) {
            return refused_before_charging(kind);
        }
        if fault == Some(FaultKind::SlowRefund) {
            // Still processing: a re-send meanwhile gets `409`.
            shared.hold_slow_charge().await;
        }
        let CreateRefund {
            reason, metadata, ..
        } = self;
        let refund = Refund {
            refund_id: metadata.get("refund_id").cloned(),
            reference: metadata.get("payment_attempt_id").cloned(),
            idempotency_key: request.key.clone(),
            reason,
            metadata,
            ..settle::draft(shared, &intent.id, amount, &intent.currency)
        };
        let payment_method = intent.payment_method.as_deref().unwrap_or_default();
        // Checked again as it is recorded: another refund may have taken the room while
        // this one was held.
        let refund = match settle::record(shared, refund, payment_method, intent.amount) {
            Ok(refund) => refund,
            Err(over) => {
                let err = over_refund(&intent, amount, over);
                return Executed::not_saved(refused(ResponseClass::InvalidRequest, err));
            }
        };
        let answer = Answer::json(StatusCode::OK, &shared.stripe.refund_object(&refund));
        // A 500 after the refund is saved under the key like any answer after execution
        // began: retrieving or listing the refunds settles it.
        Executed::saved(Outcome::charged(
            ResponseClass::Refunded,
            answer,
            fault,
            shared.hang_for,
            || server_error_after("the refund was created"),
        ))
    }
}

/// The succeeded PaymentIntent the refund names and the amount to refund (the rest of its
/// charge when none is given), or Stripe's refusal.
fn refundable(shared: &Shared, create: &CreateRefund) -> Result<(PaymentIntent, i64), StripeError> {
    let intent = shared
        .stripe
        .get(&create.payment_intent)
        .map_err(|err| StripeError {
            param: Some("payment_intent".to_owned()),
            ..err
        })?;
    if intent.status != Status::Succeeded {
        return Err(StripeError {
            payment_intent: Some(Box::new(intent.to_json())),
            ..StripeError::invalid(
                format!(
                    "This PaymentIntent ({}) does not have a successful charge to refund.",
                    intent.id
                ),
                "payment_intent",
            )
        });
    }
    let left = shared.refunds.left(&intent.id, intent.amount);
    let amount = create.amount.unwrap_or(left);
    if amount > left || left <= 0 {
        return Err(over_refund(&intent, amount, OverRefund { left }));
    }
    Ok((intent, amount))
}

/// Stripe's refusal of a refund of `amount` when only `left` is left: `charge_already_
/// refunded` when nothing is, else an amount error.
fn over_refund(
    intent: &PaymentIntent,
    amount: i64,
    OverRefund { left }: OverRefund,
) -> StripeError {
    let charge = intent.latest_charge.as_deref().unwrap_or_default();
    if left <= 0 {
        return StripeError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("Charge {charge} has already been refunded."),
        )
        .with_code("charge_already_refunded");
    }
    StripeError::invalid(
        format!("Refund amount ({amount}) is greater than unrefunded amount on charge ({left})."),
        "amount",
    )
    .with_code("amount_too_large")
}

/// The `GET /v1/refunds` query.
struct ListQuery {
    payment_intent: Option<String>,
    limit: usize,
    starting_after: Option<String>,
}

impl ListQuery {
    fn parse(query: &str) -> Result<ListQuery, StripeError> {
        let mut list = ListQuery {
            payment_intent: None,
            limit: 10,
            starting_after: None,
        };
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            match name.as_ref() {
                "payment_intent" => list.payment_intent = Some(value.into_owned()),
                "starting_after" => list.starting_after = Some(value.into_owned()),
                "limit" => {
                    list.limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|limit| (1..=100).contains(limit))
                        .ok_or_else(|| {
                            StripeError::invalid("limit must be between 1 and 100", "limit")
                        })?
                }
                other => {
                    return Err(StripeError::invalid(
                        format!("Received unknown parameter: {other}"),
                        other,
                    ))
                }
            }
        }
        Ok(list)
    }
}

/// `GET /v1/refunds`.
pub(crate) async fn list_refunds(State(shared): State<Arc<Shared>>, get: Get) -> Response {
    serve_get(&shared, &get, || async {
        match page(&shared, get.query()) {
            Ok(body) => looked_up(&shared, body),
            Err(err) => refused(ResponseClass::InvalidRequest, err),
        }
    })
    .await
}

/// One page of the list, newest first.
fn page(shared: &Shared, query: &str) -> Result<Value, StripeError> {
    let query = ListQuery::parse(query)?;
    if let Some(id) = &query.payment_intent {
        shared.stripe.get(id).map_err(|err| StripeError {
            param: Some("payment_intent".to_owned()),
            ..err
        })?;
    }
    let Page { data, has_more } = shared
        .refunds
        .page(
            query.payment_intent.as_deref(),
            query.starting_after.as_deref(),
            query.limit,
        )
        .map_err(|_| {
            let id = query.starting_after.as_deref().unwrap_or_default();
            StripeError::invalid(format!("No such refund: '{id}'"), "starting_after")
        })?;
    let data: Vec<Value> = data
        .iter()
        .map(|refund| shared.stripe.refund_object(refund))
        .collect();
    Ok(json!({"object": "list", "url": "/v1/refunds", "has_more": has_more, "data": data}))
}

/// `GET /v1/refunds/{id}`.
pub(crate) async fn retrieve_refund(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    get: Get,
) -> Response {
    serve_get(&shared, &get, || async {
        match shared.refunds.get(&id) {
            Some(refund) => looked_up(&shared, shared.stripe.refund_object(&refund)),
            None => refused(
                ResponseClass::InvalidRequest,
                StripeError {
                    param: Some("id".to_owned()),
                    ..StripeError::new(
                        StatusCode::NOT_FOUND,
                        "invalid_request_error",
                        format!("No such refund: '{id}'"),
                    )
                    .with_code("resource_missing")
                },
            ),
        }
    })
    .await
}

/// A refund lookup's `200`, spoiled by the lookup fault drawn for it.
fn looked_up(shared: &Shared, body: Value) -> Outcome {
    let answer = Answer::json(StatusCode::OK, &body);
    let fault = shared.faults.draw_refund_lookup();
    Outcome::looked_up(answer, fault, shared.hang_for, refused_by_fault)
}
