//! Listing PaymentIntents (`GET /v1/payment_intents`, newest first, with `created[gte]`,
//! `created[lt]`, `limit`, `starting_after` and `expand[]=data.latest_charge`), and the
//! controls that change a charge after the fact, as the Dashboard would:
//! `POST /__stripe/payment_intents/{id}/refund`, `…/dispute`, and `…/amount` with
//! `{"amount": N}` (a PaymentIntent whose amount no longer matches what onecharge asked for).
//! A charge made "outside onecharge" needs no control: create and confirm a PaymentIntent
//! with `metadata[payment_attempt_id]` through the ordinary API.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::Extension;
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::error::StripeError;
use super::intent::{PaymentIntent, Status};
use super::{refused, serve_get};
use crate::http::{Answer, Outcome};
use crate::record::ResponseClass;
use crate::server::{ConnectionControl, Shared};

/// What happened to a PaymentIntent's charge after it succeeded.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Aftermath {
    pub(crate) amount_refunded: i64,
    pub(crate) disputed: bool,
}

/// The aftermath of each PaymentIntent, by id.
#[derive(Default)]
pub(crate) struct Aftermaths(Mutex<HashMap<String, Aftermath>>);

impl Aftermaths {
    pub(crate) fn get(&self, id: &str) -> Aftermath {
        self.0.lock().get(id).copied().unwrap_or_default()
    }
}

/// The PaymentIntent's charge as `expand[]=data.latest_charge` (a list) or
/// `expand[]=latest_charge` (a retrieve) shows it.
pub(crate) fn charge_object(intent: &PaymentIntent, aftermath: Aftermath) -> Option<Value> {
    let id = intent.latest_charge.as_ref()?;
    Some(json!({
        "id": id,
        "object": "charge",
        "amount": intent.amount,
        "amount_refunded": aftermath.amount_refunded,
        "refunded": aftermath.amount_refunded >= intent.amount,
        "disputed": aftermath.disputed,
        "payment_intent": intent.id,
        "status": "succeeded",
        "currency": intent.currency,
    }))
}

/// `GET /v1/payment_intents`.
pub(crate) async fn list_intents(
    State(shared): State<Arc<Shared>>,
    Extension(connection): Extension<ConnectionControl>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    serve_get(&shared, &connection, &uri, &headers, || async {
        crate::http::pause(shared.request_latency()).await;
        let started = Instant::now();
        match page(&shared, uri.query().unwrap_or_default()) {
            Ok(body) => {
                shared.page_times.record(started.elapsed());
                Outcome::now(ResponseClass::Lookup, Answer::json(StatusCode::OK, &body))
            }
            Err(err) => refused(ResponseClass::InvalidRequest, err),
        }
    })
    .await
}

fn invalid(message: String) -> StripeError {
    StripeError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
}

fn page(shared: &Shared, query: &str) -> Result<Value, StripeError> {
    let mut gte = i64::MIN;
    let mut lt = i64::MAX;
    let mut limit = 10usize;
    let mut starting_after = None;
    let mut expand_charge = false;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let number = || {
            value
                .parse::<i64>()
                .map_err(|_| invalid(format!("Invalid integer: {value}")))
        };
        match key.as_ref() {
            "created[gte]" => gte = number()?,
            "created[lt]" => lt = number()?,
            "limit" => {
                limit = usize::try_from(number()?)
                    .ok()
                    .filter(|l| (1..=100).contains(l))
                    .ok_or_else(|| invalid("limit must be between 1 and 100".into()))?
            }
            "starting_after" => starting_after = Some(value.into_owned()),
            "expand[]" if value == "data.latest_charge" => expand_charge = true,
            other => return Err(invalid(format!("Received unknown parameter: {other}"))),
        }
    }
    let intents = shared.stripe.intents.lock();
    let before = match &starting_after {
        Some(id) => {
            let cursor = intents
                .get(id)
                .ok_or_else(|| invalid(format!("No such payment_intent: '{id}'")))?;
            Some((cursor.created(), cursor.id.as_str()))
        }
        None => None,
    };
    // Newest first: "after" the cursor in the list is before it in (created, id).
    let mut matching: Vec<&PaymentIntent> = intents
        .created_between(gte, lt, before)
        .take(limit + 1)
        .collect();
    let has_more = matching.len() > limit;
    matching.truncate(limit);
    let data: Vec<Value> = matching
        .into_iter()
        .map(|pi| {
            let mut value = pi.to_json();
            if expand_charge {
                value["latest_charge"] =
                    charge_object(pi, shared.stripe.aftermath.get(&pi.id)).unwrap_or(Value::Null);
            }
            value
        })
        .collect();
    Ok(json!({"object": "list", "url": "/v1/payment_intents", "has_more": has_more, "data": data}))
}

/// `POST /__stripe/payment_intents/{id}/{refund|dispute|amount}`.
pub(crate) async fn control(
    State(shared): State<Arc<Shared>>,
    Path((id, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let answer =
        |status: StatusCode, body: Value| Answer::json(status, &body).into_response_plain();
    let mut intents = shared.stripe.intents.lock();
    let Some(intent) = intents.get_mut(&id) else {
        return answer(
            StatusCode::NOT_FOUND,
            json!({"error": "no such payment_intent"}),
        );
    };
    match action.as_str() {
        "refund" | "dispute" if intent.status != Status::Succeeded => answer(
            StatusCode::BAD_REQUEST,
            json!({"error": "only a succeeded PaymentIntent has a charge to refund or dispute"}),
        ),
        // `{"amount": N}` refunds N more (a partial refund; each one adds up), no body the rest.
        "refund" => {
            let mut all = shared.stripe.aftermath.0.lock();
            let aftermath = all.entry(id).or_default();
            let rest = intent.amount - aftermath.amount_refunded;
            let amount = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["amount"].as_i64())
                .unwrap_or(rest)
                .clamp(0, rest);
            aftermath.amount_refunded += amount;
            answer(
                StatusCode::OK,
                json!({"refunded": amount, "amount_refunded": aftermath.amount_refunded}),
            )
        }
        "dispute" => {
            let mut all = shared.stripe.aftermath.0.lock();
            all.entry(id).or_default().disputed = true;
            answer(StatusCode::OK, json!({"disputed": true}))
        }
        "amount" => match serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["amount"].as_i64())
        {
            Some(amount) => {
                intent.amount = amount;
                answer(StatusCode::OK, intent.to_json())
            }
            None => answer(
                StatusCode::BAD_REQUEST,
                json!({"error": "send {\"amount\": N}"}),
            ),
        },
        _ => answer(
            StatusCode::NOT_FOUND,
            json!({"error": "actions: refund, dispute, amount"}),
        ),
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::seq::SliceRandom as _;
    use rand::{Rng as _, SeedableRng as _};
    use time::macros::datetime;
    use time::OffsetDateTime;

    use super::*;
    use crate::config::MockConfig;
    use crate::stripe::params::CreateIntent;

    const START: i64 = datetime!(2026-12-01 00:00 UTC).unix_timestamp();

    /// `count` PaymentIntents created over 200 seconds (many in the same second), in no
    /// order of time or id.
    fn shuffled_intents(shared: &Shared, rng: &mut StdRng, count: usize) {
        let mut made: Vec<(String, i64)> = (0..count)
            .map(|i| (format!("pi_{i:05}"), START + rng.gen_range(0..200)))
            .collect();
        made.shuffle(rng);
        for (id, created) in made {
            let create = CreateIntent {
                amount: 1000,
                currency: "eur".into(),
                customer: None,
                payment_method: None,
                confirm: false,
                off_session: false,
                description: None,
                metadata: Default::default(),
            };
            let now = OffsetDateTime::from_unix_timestamp(created).unwrap();
            shared.stripe.create(id, create, None, now);
        }
    }

    fn query(gte: i64, lt: i64, limit: i64, after: Option<&str>) -> String {
        let mut query = format!(
            "created[gte]={}&created[lt]={}&limit={limit}",
            START + gte,
            START + lt
        );
        if let Some(after) = after {
            query.push_str(&format!("&starting_after={after}"));
        }
        query
    }

    /// The page as the mock answered it before the PaymentIntents had an index: all of them
    /// scanned and sorted for every page. The index must answer exactly this.
    fn scanned(shared: &Shared, query: &str) -> Result<Value, StripeError> {
        let (mut gte, mut lt, mut limit, mut starting_after) = (i64::MIN, i64::MAX, 10, None);
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let number = || {
                value
                    .parse::<i64>()
                    .map_err(|_| invalid(format!("Invalid integer: {value}")))
            };
            match key.as_ref() {
                "created[gte]" => gte = number()?,
                "created[lt]" => lt = number()?,
                "limit" => {
                    limit = usize::try_from(number()?)
                        .ok()
                        .filter(|l| (1..=100).contains(l))
                        .ok_or_else(|| invalid("limit must be between 1 and 100".into()))?
                }
                "starting_after" => starting_after = Some(value.into_owned()),
                other => return Err(invalid(format!("Received unknown parameter: {other}"))),
            }
        }
        let intents = shared.stripe.intents.lock();
        let after = match &starting_after {
            Some(id) => {
                let cursor = intents
                    .get(id)
                    .ok_or_else(|| invalid(format!("No such payment_intent: '{id}'")))?;
                Some((cursor.created(), cursor.id.as_str()))
            }
            None => None,
        };
        let mut matching: Vec<&PaymentIntent> = intents
            .values()
            .filter(|pi| pi.created() >= gte && pi.created() < lt)
            .filter(|pi| after.is_none_or(|after| (pi.created(), pi.id.as_str()) < after))
            .collect();
        matching.sort_by(|a, b| (b.created(), &b.id).cmp(&(a.created(), &a.id)));
        let has_more = matching.len() > limit;
        matching.truncate(limit);
        let data: Vec<Value> = matching.into_iter().map(PaymentIntent::to_json).collect();
        Ok(
            json!({"object": "list", "url": "/v1/payment_intents", "has_more": has_more, "data": data}),
        )
    }

    #[test]
    fn paging_intents_created_out_of_order_lists_each_of_the_window_once_newest_first() {
        let shared = Shared::new(&MockConfig::default());
        let mut rng = StdRng::seed_from_u64(35);
        shuffled_intents(&shared, &mut rng, 1_000);
        let mut expected: Vec<(i64, String)> = shared
            .stripe
            .intents
            .lock()
            .values()
            .filter(|pi| (START + 20..START + 180).contains(&pi.created()))
            .map(|pi| (pi.created(), pi.id.clone()))
            .collect();
        expected.sort_by(|a, b| b.cmp(a));

        let mut listed: Vec<(i64, String)> = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = page(&shared, &query(20, 180, 7, cursor.as_deref())).unwrap();
            let data = page["data"].as_array().unwrap();
            let has_more = page["has_more"].as_bool().unwrap();
            assert!(
                data.len() == 7 || !has_more,
                "a short page says it is the last"
            );
            cursor = data.last().map(|pi| pi["id"].as_str().unwrap().to_owned());
            listed.extend(data.iter().map(|pi| {
                let id = pi["id"].as_str().unwrap().to_owned();
                (pi["created"].as_i64().unwrap(), id)
            }));
            if !has_more {
                break;
            }
        }

        assert!(expected.len() > 500, "the window holds most of the intents");
        assert_eq!(listed, expected);
    }

    #[test]
    fn every_page_is_the_page_a_scan_of_all_intents_answers() {
        let shared = Shared::new(&MockConfig::default());
        let mut rng = StdRng::seed_from_u64(129);
        shuffled_intents(&shared, &mut rng, 300);
        let ids: Vec<String> = (0..300).map(|i| format!("pi_{i:05}")).collect();

        for _ in 0..500 {
            let gte = rng.gen_range(-10..210);
            let lt = rng.gen_range(-10..210);
            let limit = rng.gen_range(0..=101);
            let after = match rng.gen_range(0..10) {
                0 => None,
                1 => Some("pi_unknown".to_owned()),
                _ => Some(ids.choose(&mut rng).unwrap().clone()),
            };
            let query = query(gte, lt, limit, after.as_deref());

            let indexed = page(&shared, &query).map_err(|e| format!("{e:?}"));
            let expected = scanned(&shared, &query).map_err(|e| format!("{e:?}"));
            assert_eq!(indexed, expected, "{query}");
        }
    }

    #[test]
    fn an_unbounded_list_and_an_empty_window_answer_without_a_range() {
        let shared = Shared::new(&MockConfig::default());
        let mut rng = StdRng::seed_from_u64(7);
        shuffled_intents(&shared, &mut rng, 30);

        for query in [
            "limit=100",
            "created[gte]=5&created[lt]=5",
            "created[gte]=9&created[lt]=2",
        ] {
            assert_eq!(
                page(&shared, query).unwrap(),
                scanned(&shared, query).unwrap(),
                "{query}"
            );
        }
    }
}
