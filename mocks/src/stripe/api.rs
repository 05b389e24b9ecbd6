//! The Stripe dialect's API calls: PaymentIntents create / confirm / retrieve / cancel and
//! customers, form-encoded, through Stripe's idempotency layer (`super::post`), with every
//! fault of the onecharge dialect applied to the call that charges.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use serde_json::{json, Value};

use super::error::StripeError;
use super::intent::{self, PaymentIntent, Settlement};
use super::methods::{card_outcome, CardOutcome};
use super::params::{ConfirmIntent, CreateCustomer, CreateIntent};
use super::post::{
    refused_before_charging, refused_by_fault, serve_post, server_error_after, Execute, Executed,
    Post, Request,
};
use super::respond::{refused, serve_get, Get};
use crate::answer::{Answer, Outcome};
use crate::charge::fault_trigger;
use crate::config::FaultKind;
use crate::record::ResponseClass;
use crate::state::Shared;

/// Stripe's answer to a path it does not serve.
pub(crate) async fn unrecognized_url(uri: Uri) -> Response {
    let err = StripeError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!(
            "Unrecognized request URL ({}). The mock's Stripe dialect serves /v1/payment_intents, \
             /v1/refunds, /v1/disputes and /v1/customers.",
            uri.path()
        ),
    );
    err.answer().into_response_plain()
}

/// What a POST asks for, once its parameters passed validation.
enum Action {
    CreateIntent(CreateIntent),
    Confirm(String, ConfirmIntent),
    Cancel(String),
    CreateCustomer(CreateCustomer),
}

pub(crate) async fn create_intent(State(shared): State<Arc<Shared>>, post: Post) -> Response {
    serve_post(shared, post, |form| {
        CreateIntent::from_form(form).map(Action::CreateIntent)
    })
    .await
}

pub(crate) async fn confirm_intent(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    post: Post,
) -> Response {
    serve_post(shared, post, |form| {
        ConfirmIntent::from_form(form).map(|confirm| Action::Confirm(id, confirm))
    })
    .await
}

pub(crate) async fn cancel_intent(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    post: Post,
) -> Response {
    serve_post(shared, post, |_| Ok(Action::Cancel(id))).await
}

pub(crate) async fn create_customer(State(shared): State<Arc<Shared>>, post: Post) -> Response {
    serve_post(shared, post, |form| {
        CreateCustomer::from_form(form).map(Action::CreateCustomer)
    })
    .await
}

/// `GET /v1/payment_intents/{id}`.
pub(crate) async fn retrieve_intent(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    get: Get,
) -> Response {
    serve_get(&shared, &get, || async {
        let expand_charge = form_urlencoded::parse(get.query().as_bytes())
            .any(|(name, value)| name == "expand[]" && value == "latest_charge");
        match shared.stripe.get(&id) {
            Ok(intent) => {
                let mut body = intent.to_json();
                if expand_charge {
                    body["latest_charge"] = intent
                        .charge_object(shared.stripe.aftermath(&intent.id))
                        .unwrap_or(Value::Null);
                }
                Outcome::now(ResponseClass::Lookup, Answer::json(StatusCode::OK, &body))
            }
            Err(err) => refused(ResponseClass::InvalidRequest, err),
        }
    })
    .await
}

impl Execute for Action {
    async fn execute(self, request: &Request) -> Executed {
        let shared = &request.shared;
        let now = shared.clock.wall_now();
        let key = request.key.as_deref();
        match &self {
            Action::CreateCustomer(customer) => {
                let body = json!({
                    "id": shared.ids.next_with_prefix("cus"),
                    "object": "customer",
                    "created": now.unix_timestamp(),
                    "email": customer.email,
                    "name": customer.name,
                    "description": customer.description,
                    "metadata": customer.metadata,
                    "livemode": false,
                });
                Executed::saved(accepted(&body))
            }
            Action::Cancel(id) => match shared.stripe.cancel(id, now) {
                Ok(intent) => Executed::saved(accepted(&intent.to_json())),
                Err(err) => Executed::not_saved(refused(ResponseClass::InvalidRequest, err)),
            },
            // Stripe's dice apply to the create too (triggers stay with the confirm, the
            // call that charges): a `500` before anything was made, a PaymentIntent made and
            // then a `500`, a held or dropped answer. Each is saved under the key like any
            // answer after execution began, so a re-sent create under the same key gets the
            // same `500` back for as long as Stripe keeps the key.
            Action::CreateIntent(create) if !create.confirm => {
                let fault = shared.faults.draw();
                match fault {
                    Some(kind @ (FaultKind::RateLimit | FaultKind::BadRequest)) => {
                        return Executed::not_saved(refused_by_fault(kind))
                    }
                    Some(kind @ FaultKind::ErrorBefore) => {
                        return Executed::saved(refused_by_fault(kind))
                    }
                    _ => {}
                }
                let id = shared.ids.next_with_prefix("pi");
                let intent = shared.stripe.create(id, create.clone(), key, now);
                let fault = fault.filter(|kind| *kind != FaultKind::SlowCharge);
                Executed::saved(Outcome::charged(
                    ResponseClass::Accepted,
                    Answer::json(StatusCode::OK, &intent.to_json()),
                    fault,
                    shared.hang_for,
                    || server_error_after("the PaymentIntent was created"),
                ))
            }
            Action::CreateIntent(create) => {
                let payment_method = create.payment_method.clone().unwrap_or_default();
                let fault = draw_fault(request, &payment_method);
                if let Some(kind) = fault.filter(|kind| !kind.charges()) {
                    return refused_before_charging(kind);
                }
                let id = shared.ids.next_with_prefix("pi");
                let intent = shared.stripe.create(id, create.clone(), key, now);
                charge(request, intent, create.off_session, fault).await
            }
            Action::Confirm(id, confirm) => {
                let intent = match shared.stripe.begin_confirm(id, confirm, key) {
                    Ok(intent) => intent,
                    Err(err) => {
                        return Executed::not_saved(refused(ResponseClass::InvalidRequest, err))
                    }
                };
                let payment_method = intent.payment_method.clone().unwrap_or_default();
                let fault = draw_fault_on(request, &payment_method, intent.confirmations == 1);
                if let Some(kind) = fault.filter(|kind| !kind.charges()) {
                    shared.stripe.abort_confirm(id);
                    return refused_before_charging(kind);
                }
                charge(request, intent, confirm.off_session, fault).await
            }
        }
    }
}

/// A trigger method fires on the first request under its key; otherwise the dice.
fn draw_fault(request: &Request, payment_method: &str) -> Option<FaultKind> {
    draw_fault_on(request, payment_method, true)
}

/// [`draw_fault`], the trigger firing only when `first_of_object` too (the
/// PaymentIntent's first confirmation, whatever its key).
fn draw_fault_on(
    request: &Request,
    payment_method: &str,
    first_of_object: bool,
) -> Option<FaultKind> {
    let trigger = (request.first_request && first_of_object)
        .then(|| fault_trigger(payment_method))
        .flatten();
    trigger.or_else(|| request.shared.faults.draw())
}

/// Charges a `processing` PaymentIntent with its payment method, then lets a charging
/// fault (500 after charging, hang, drop) spoil the answer.
async fn charge(
    request: &Request,
    intent: PaymentIntent,
    off_session: bool,
    fault: Option<FaultKind>,
) -> Executed {
    let shared = &request.shared;
    if fault == Some(FaultKind::SlowCharge) {
        // Still processing: a re-send meanwhile gets `409`.
        shared.hold_slow_charge().await;
    }
    let payment_method = intent.payment_method.as_deref().unwrap_or_default();
    let card = card_outcome(payment_method).unwrap_or(CardOutcome::Succeeds);
    let settlement = match card {
        CardOutcome::Succeeds => Settlement::Succeeded {
            charge_id: shared.ids.next_with_prefix("ch"),
        },
        CardOutcome::Declined { code, decline_code } => Settlement::Declined {
            code,
            decline_code,
            message: "Your card was declined.",
        },
        CardOutcome::AuthenticationRequired if off_session => Settlement::Declined {
            code: "authentication_required",
            decline_code: "authentication_required",
            message: "Your card was declined. This transaction requires authentication.",
        },
        CardOutcome::AuthenticationRequired | CardOutcome::RequiresAction => {
            Settlement::RequiresAction
        }
        CardOutcome::Processing => Settlement::Processing,
    };
    let declined = match &settlement {
        Settlement::Declined {
            code,
            decline_code,
            message,
        } => Some((*code, *decline_code, *message)),
        _ => None,
    };
    let settled = shared
        .stripe
        .settle(&intent.id, settlement, shared.clock.wall_now());
    if card == CardOutcome::Processing {
        finish_processing_later(shared, &settled.id);
    }
    let (class, answer) = match declined {
        Some((code, decline_code, message)) => (
            ResponseClass::Declined,
            StripeError {
                code: Some(code),
                decline_code: Some(decline_code),
                payment_intent: Some(Box::new(settled.to_json())),
                ..StripeError::new(StatusCode::PAYMENT_REQUIRED, "card_error", message)
            }
            .answer(),
        ),
        None if settled.status == intent::Status::Succeeded => (
            ResponseClass::Created,
            Answer::json(StatusCode::OK, &settled.to_json()),
        ),
        None => (
            ResponseClass::Accepted,
            Answer::json(StatusCode::OK, &settled.to_json()),
        ),
    };
    // A 500 after charging is saved under the key like any answer after execution
    // began, so a retry with the key gets it again: retrieving the PaymentIntent settles it.
    Executed::saved(Outcome::charged(
        class,
        answer,
        fault,
        shared.hang_for,
        || server_error_after("the request was processed"),
    ))
}

/// A `processing` PaymentIntent succeeds after `slow_charge_for`, or at once on
/// `finish_slow_charges`.
fn finish_processing_later(shared: &Arc<Shared>, id: &str) {
    let shared = Arc::clone(shared);
    let id = id.to_owned();
    tokio::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(shared.slow_charge_for) => {
                finish_processing(&shared, Some(&id));
            }
            () = shared.shutdown.cancelled() => {}
        }
    });
}

/// Ends `processing` PaymentIntents (one, or all): each succeeds and is charged.
pub(crate) fn finish_processing(shared: &Shared, id: Option<&str>) {
    shared.stripe.settle_processing(
        id,
        || shared.ids.next_with_prefix("ch"),
        shared.clock.wall_now(),
    );
}

fn accepted(body: &Value) -> Outcome {
    Outcome::now(ResponseClass::Accepted, Answer::json(StatusCode::OK, body))
}
