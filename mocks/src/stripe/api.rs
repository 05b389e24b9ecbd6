//! The Stripe dialect's API calls: PaymentIntents create / confirm / retrieve / cancel and
//! customers, form-encoded, with Stripe's idempotency semantics, and every fault of the
//! onecharge dialect applied to the call that charges.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::error::StripeError;
use super::intent::{self, KeyedRequest, PaymentIntent, Settlement};
use super::methods::{card_outcome, CardOutcome};
use super::params::{ConfirmIntent, CreateCustomer, CreateIntent, Form};
use super::respond::{internal_error, refused, serve_get, unauthorized, Get};
use crate::answer::{pause, Answer, Outcome};
use crate::charge::{fault_trigger, validate_idempotency_key};
use crate::config::FaultKind;
use crate::keys::Claim;
use crate::record::ResponseClass;
use crate::respond::{deliver, raw_idempotency_key, IDEMPOTENCY_KEY};
use crate::state::{ConnectionControl, Shared};

/// Stripe's answer to a path it does not serve.
pub(crate) async fn unrecognized_url(uri: Uri) -> Response {
    let err = StripeError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!(
            "Unrecognized request URL ({}). The mock's Stripe dialect serves /v1/payment_intents \
             and /v1/customers.",
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

/// What every Stripe POST reads of its request.
pub(crate) struct Post {
    connection: ConnectionControl,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

impl<S: Send + Sync> FromRequest<S> for Post {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Post, Response> {
        let connection = request
            .extensions()
            .get::<ConnectionControl>()
            .cloned()
            .unwrap_or_default();
        let uri = request.uri().clone();
        let headers = request.headers().clone();
        let body = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Post {
            connection,
            uri,
            headers,
            body,
        })
    }
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
                        .charge_object(shared.stripe.aftermath.get(&intent.id))
                        .unwrap_or(Value::Null);
                }
                Outcome::now(ResponseClass::Lookup, Answer::json(StatusCode::OK, &body))
            }
            Err(err) => refused(ResponseClass::InvalidRequest, err),
        }
    })
    .await
}

async fn serve_post(
    shared: Arc<Shared>,
    post: Post,
    parse: impl FnOnce(&Form) -> Result<Action, StripeError>,
) -> Response {
    let Post {
        connection,
        uri,
        headers,
        body,
    } = post;
    let raw_key = raw_idempotency_key(&headers);
    let form = Form::parse(&body);
    let seq = shared.begin("POST", &uri, raw_key.clone(), form.to_json());
    let outcome = decide(&shared, &headers, uri.path(), form, parse).await;
    deliver(&shared, &connection, seq, uri.path(), raw_key, outcome).await
}

/// Authentication, validation, then Stripe's idempotency layer; only a request that
/// passed all three executes, and only its answer is saved under the key.
async fn decide(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    path: &str,
    form: Form,
    parse: impl FnOnce(&Form) -> Result<Action, StripeError>,
) -> Outcome {
    let (key, action) = match admit(shared, headers, &form, parse) {
        Ok(admitted) => admitted,
        Err(refusal) => return refusal,
    };
    let latency = shared.request_latency();
    let execution = Execution {
        shared: Arc::clone(shared),
        action,
        key: key.clone(),
        first_request: true,
        latency,
    };
    let Some(key) = key else {
        // Without a key every request executes, and nothing is saved.
        return run_detached(execution.run())
            .await
            .map_or_else(internal_error, |executed| executed.outcome);
    };
    let request = KeyedRequest {
        endpoint: path.to_owned(),
        form,
    };
    match claim_key(shared, &key, &request, latency).await {
        Ok((generation, first_request)) => {
            let execution = Execution {
                first_request,
                ..execution
            };
            execute_under_key(shared, execution, key, generation).await
        }
        Err(refusal) => refusal,
    }
}

/// Authentication, then a well-formed key (if any) and parameters: the key and what the
/// request asks for, or the refusal.
fn admit(
    shared: &Shared,
    headers: &HeaderMap,
    form: &Form,
    parse: impl FnOnce(&Form) -> Result<Action, StripeError>,
) -> Result<(Option<String>, Action), Outcome> {
    if !shared.authorized(headers) {
        return Err(unauthorized());
    }
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => None,
        Some(value) => match validate_idempotency_key(Some(value.as_bytes())) {
            Ok(key) => Some(key),
            Err(err) => {
                return Err(refused(
                    ResponseClass::InvalidRequest,
                    StripeError::invalid(err.0, "Idempotency-Key"),
                ))
            }
        },
    };
    let action = parse(form).map_err(|err| refused(ResponseClass::InvalidRequest, err))?;
    Ok((key, action))
}

/// Stripe's idempotency layer for `request` under `key`: the key's generation and whether
/// this is its first request, when the request may execute; otherwise the saved answer
/// replayed, or the refusal (another request in progress, the key reused with other
/// parameters).
async fn claim_key(
    shared: &Shared,
    key: &str,
    request: &KeyedRequest,
    latency: Duration,
) -> Result<(u64, bool), Outcome> {
    let refusal = match shared.stripe.keys.claim(key, request, shared.clock.now()) {
        Claim::Charge {
            generation,
            first_request,
        } => return Ok((generation, first_request)),
        Claim::Replay(answer) => Outcome::now(
            ResponseClass::Replayed,
            Answer {
                replayed: true,
                ..answer
            },
        ),
        Claim::InProgress => refused(
            ResponseClass::InProgress,
            StripeError::new(
                StatusCode::CONFLICT,
                "invalid_request_error",
                "There is currently another in-progress request using this Idempotent \
                 Key (that probably means you submitted twice, and the other request is \
                 still going through). Please try again later.",
            )
            .with_code("idempotency_key_in_use"),
        ),
        Claim::Reused => refused(
            ResponseClass::KeyReused,
            StripeError::new(
                StatusCode::BAD_REQUEST,
                "idempotency_error",
                "Keys for idempotent requests can only be used with the same parameters \
                 they were first used with, on the same endpoint.",
            ),
        ),
    };
    pause(latency).await;
    Err(refusal)
}

/// Executes a request that owns `key` (claimed at `generation`) and saves its answer under
/// the key, or releases the key when Stripe would not save it. The key is ours until commit
/// or release: this finishes in a task of its own so that a client hanging up (hyper then
/// drops this future) cannot leave the key in progress forever.
async fn execute_under_key(
    shared: &Arc<Shared>,
    execution: Execution,
    key: String,
    generation: u64,
) -> Outcome {
    let owner = Arc::clone(shared);
    run_detached(async move {
        let executed = execution.run().await;
        if executed.saved {
            let saved = executed.outcome.answer.clone();
            owner.stripe.keys.commit(&key, generation, saved, None);
        } else {
            owner.stripe.keys.release(&key, generation);
        }
        executed.outcome
    })
    .await
    .unwrap_or_else(internal_error)
}

async fn run_detached<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, ()> {
    tokio::spawn(future).await.map_err(|_| ())
}

/// A request that passed validation and owns its key (if it has one).
struct Execution {
    shared: Arc<Shared>,
    action: Action,
    key: Option<String>,
    first_request: bool,
    latency: Duration,
}

/// The answer, and whether Stripe would save it under the key: only when the endpoint
/// executed (a state change, a decline, any `500`), never for a refusal before execution
/// (a `429`, a validation `400`, a 404, a PaymentIntent in the wrong state).
struct Executed {
    outcome: Outcome,
    saved: bool,
}

impl Executed {
    fn saved(outcome: Outcome) -> Executed {
        Executed {
            outcome,
            saved: true,
        }
    }

    fn not_saved(outcome: Outcome) -> Executed {
        Executed {
            outcome,
            saved: false,
        }
    }
}

impl Execution {
    async fn run(self) -> Executed {
        // Spent while the key is in progress: concurrent duplicates see `409` meanwhile.
        pause(self.latency).await;
        let shared = &self.shared;
        let now = shared.clock.wall_now();
        let key = self.key.as_deref();
        match &self.action {
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
                let fault = self.draw_fault(&payment_method);
                if let Some(kind) = fault.filter(|kind| !kind.charges()) {
                    return refused_before_charging(kind);
                }
                let id = shared.ids.next_with_prefix("pi");
                let intent = shared.stripe.create(id, create.clone(), key, now);
                self.charge(intent, create.off_session, fault).await
            }
            Action::Confirm(id, confirm) => {
                let intent = match shared.stripe.begin_confirm(id, confirm, key) {
                    Ok(intent) => intent,
                    Err(err) => {
                        return Executed::not_saved(refused(ResponseClass::InvalidRequest, err))
                    }
                };
                let payment_method = intent.payment_method.clone().unwrap_or_default();
                let fault = self.draw_fault_on(&payment_method, intent.confirmations == 1);
                if let Some(kind) = fault.filter(|kind| !kind.charges()) {
                    shared.stripe.abort_confirm(id);
                    return refused_before_charging(kind);
                }
                self.charge(intent, confirm.off_session, fault).await
            }
        }
    }

    /// A trigger method fires on the first request under its key; otherwise the dice.
    fn draw_fault(&self, payment_method: &str) -> Option<FaultKind> {
        self.draw_fault_on(payment_method, true)
    }

    /// [`Execution::draw_fault`], the trigger firing only when `first_of_object` too (the
    /// PaymentIntent's first confirmation, whatever its key).
    fn draw_fault_on(&self, payment_method: &str, first_of_object: bool) -> Option<FaultKind> {
        let trigger = (self.first_request && first_of_object)
            .then(|| fault_trigger(payment_method))
            .flatten();
        trigger.or_else(|| self.shared.faults.draw())
    }

    /// Charges a `processing` PaymentIntent with its payment method, then lets a charging
    /// fault (500 after charging, hang, drop) spoil the answer.
    async fn charge(
        &self,
        intent: PaymentIntent,
        off_session: bool,
        fault: Option<FaultKind>,
    ) -> Executed {
        let shared = &self.shared;
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
            self.finish_processing_later(&settled.id);
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
    fn finish_processing_later(&self, id: &str) {
        let shared = Arc::clone(&self.shared);
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

/// Stripe's `500` after a request began executing (`error_after`): `what` happened first.
fn server_error_after(what: &str) -> Answer {
    StripeError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "api_error",
        format!("injected fault: error_after ({what})"),
    )
    .should_retry(false)
    .answer()
}

/// A fault that fires before anything charged. Stripe saves the result of every request
/// whose endpoint began executing, `500`s included, and replays it to every request under
/// the same key for 24 hours (docs.stripe.com/api/idempotent_requests): so `error_before`
/// is saved. A `429` (its rate limiter) and a `400` (validation) come before execution and
/// are not.
fn refused_before_charging(kind: FaultKind) -> Executed {
    match kind {
        FaultKind::ErrorBefore => Executed::saved(refused_by_fault(kind)),
        _ => Executed::not_saved(refused_by_fault(kind)),
    }
}

/// The answer of a fault that fires before anything charged.
fn refused_by_fault(kind: FaultKind) -> Outcome {
    let (class, err) = match kind {
        FaultKind::RateLimit => (
            ResponseClass::RateLimited,
            StripeError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "invalid_request_error",
                "injected fault: rate_limit (too many requests hit the API too quickly)",
            )
            .with_code("rate_limit")
            .should_retry(true),
        ),
        FaultKind::BadRequest => (
            ResponseClass::InvalidRequest,
            StripeError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "injected fault: bad_request",
            ),
        ),
        _ => (
            ResponseClass::ServerError,
            StripeError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "injected fault: error_before (nothing was processed)",
            )
            .should_retry(true),
        ),
    };
    refused(class, err).with_fault(kind)
}
