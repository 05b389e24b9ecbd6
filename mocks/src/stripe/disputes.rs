//! Disputes as Stripe lists them: `GET /v1/disputes` (newest first, with `payment_intent`,
//! `charge` and `limit`) and `GET /v1/disputes/{id}`, with the mock's auth and latency. The
//! control that opens a charge's dispute and moves its status is `super::list`'s.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::error::StripeError;
use super::respond::{refused, serve_get, Get};
use crate::answer::{Answer, Outcome};
use crate::record::ResponseClass;
use crate::state::Shared;

/// Which disputes a list asks for.
#[derive(Default)]
struct Filter {
    payment_intent: Option<String>,
    charge: Option<String>,
    limit: Option<usize>,
}

impl Filter {
    fn parse(query: &str) -> Result<Filter, StripeError> {
        let mut filter = Filter::default();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            match key.as_ref() {
                "payment_intent" => filter.payment_intent = Some(value.into_owned()),
                "charge" => filter.charge = Some(value.into_owned()),
                "limit" => {
                    let limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|l| (1..=100).contains(l));
                    filter.limit = Some(limit.ok_or_else(|| {
                        StripeError::invalid("limit must be between 1 and 100", "limit")
                    })?);
                }
                other => {
                    return Err(StripeError::invalid(
                        format!("Received unknown parameter: {other}"),
                        other,
                    ))
                }
            }
        }
        Ok(filter)
    }
}

/// Every dispute `keep` accepts (given the dispute object), newest first.
fn dispute_objects(shared: &Shared, keep: impl Fn(&Value) -> bool) -> Vec<Value> {
    let disputes = shared.stripe.disputes.all();
    let intents = shared.stripe.intents.lock();
    disputes
        .iter()
        .filter_map(|(pi, dispute)| Some(intents.get(pi)?.dispute_object(dispute)))
        .filter(|object| keep(object))
        .collect()
}

/// `GET /v1/disputes`.
pub(crate) async fn list_disputes(State(shared): State<Arc<Shared>>, get: Get) -> Response {
    serve_get(&shared, &get, || async {
        let filter = match Filter::parse(get.query()) {
            Ok(filter) => filter,
            Err(err) => return refused(ResponseClass::InvalidRequest, err),
        };
        let matches = |object: &Value, field: &str, wanted: &Option<String>| {
            wanted
                .as_deref()
                .is_none_or(|wanted| object[field].as_str() == Some(wanted))
        };
        let mut data = dispute_objects(&shared, |object| {
            matches(object, "payment_intent", &filter.payment_intent)
                && matches(object, "charge", &filter.charge)
        });
        let limit = filter.limit.unwrap_or(10);
        let has_more = data.len() > limit;
        data.truncate(limit);
        let body =
            json!({"object": "list", "url": "/v1/disputes", "has_more": has_more, "data": data});
        Outcome::now(ResponseClass::Lookup, Answer::json(StatusCode::OK, &body))
    })
    .await
}

/// `GET /v1/disputes/{id}`.
pub(crate) async fn retrieve_dispute(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    get: Get,
) -> Response {
    serve_get(&shared, &get, || async {
        match dispute_objects(&shared, |object| object["id"] == id.as_str()).pop() {
            Some(dispute) => Outcome::now(
                ResponseClass::Lookup,
                Answer::json(StatusCode::OK, &dispute),
            ),
            None => refused(
                ResponseClass::InvalidRequest,
                StripeError {
                    param: Some("dispute".to_owned()),
                    ..StripeError::new(
                        StatusCode::NOT_FOUND,
                        "invalid_request_error",
                        format!("No such dispute: '{id}'"),
                    )
                    .with_code("resource_missing")
                },
            ),
        }
    })
    .await
}
