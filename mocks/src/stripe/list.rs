//! Listing PaymentIntents (`GET /v1/payment_intents`, newest first, with `created[gte]`,
//! `created[lt]`, `limit`, `starting_after` and `expand[]=data.latest_charge`), and the
//! controls that change a charge after the fact, as the Dashboard would:
//! `POST /__stripe/payment_intents/{id}/refund`, `…/dispute`, and `…/amount` with
//! `{"amount": N}` (a PaymentIntent whose amount no longer matches what onecharge asked for).
//! A charge made "outside onecharge" needs no control: create and confirm a PaymentIntent
//! with `metadata[payment_attempt_id]` through the ordinary API.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::aftermath::{refund_object, Dispute, CLOSED_DISPUTE_STATUSES, DISPUTE_STATUSES};
use super::error::StripeError;
use super::intent::{Intents, Status};
use super::respond::{refused, serve_get, Get};
use crate::answer::{Answer, Outcome};
use crate::paging::Page;
use crate::record::ResponseClass;
use crate::refund::settle;
use crate::state::Shared;

/// `GET /v1/payment_intents`.
pub(crate) async fn list_intents(State(shared): State<Arc<Shared>>, get: Get) -> Response {
    serve_get(&shared, &get, || async {
        let started = Instant::now();
        match page(&shared, get.query()) {
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

/// A list query, read: the window `created[gte]`/`created[lt]`, the page size, the cursor.
struct ListQuery {
    gte: i64,
    lt: i64,
    limit: usize,
    starting_after: Option<String>,
    expand_charge: bool,
}

impl ListQuery {
    fn parse(query: &str) -> Result<ListQuery, StripeError> {
        let mut list = ListQuery {
            gte: i64::MIN,
            lt: i64::MAX,
            limit: 10,
            starting_after: None,
            expand_charge: false,
        };
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let number = || {
                value
                    .parse::<i64>()
                    .map_err(|_| invalid(format!("Invalid integer: {value}")))
            };
            match key.as_ref() {
                "created[gte]" => list.gte = number()?,
                "created[lt]" => list.lt = number()?,
                "limit" => {
                    list.limit = usize::try_from(number()?)
                        .ok()
                        .filter(|l| (1..=100).contains(l))
                        .ok_or_else(|| invalid("limit must be between 1 and 100".into()))?
                }
                "starting_after" => list.starting_after = Some(value.into_owned()),
                "expand[]" if value == "data.latest_charge" => list.expand_charge = true,
                other => return Err(invalid(format!("Received unknown parameter: {other}"))),
            }
        }
        Ok(list)
    }
}

/// The `(created, id)` of the PaymentIntent `starting_after` names.
fn cursor<'a>(
    intents: &'a Intents,
    starting_after: Option<&str>,
) -> Result<Option<(i64, &'a str)>, StripeError> {
    let Some(id) = starting_after else {
        return Ok(None);
    };
    let intent = intents
        .get(id)
        .ok_or_else(|| invalid(format!("No such payment_intent: '{id}'")))?;
    Ok(Some((intent.created(), intent.id.as_str())))
}

/// A Stripe list object of `data`.
fn list_object(data: Vec<Value>, has_more: bool) -> Value {
    json!({"object": "list", "url": "/v1/payment_intents", "has_more": has_more, "data": data})
}

fn page(shared: &Shared, query: &str) -> Result<Value, StripeError> {
    let query = ListQuery::parse(query)?;
    let intents = shared.stripe.intents.lock();
    let before = cursor(&intents, query.starting_after.as_deref())?;
    // Newest first: "after" the cursor in the list is before it in (created, id).
    let Page { data, has_more } = intents.page(query.gte, query.lt, before, query.limit);
    let data: Vec<Value> = data
        .into_iter()
        .map(|pi| {
            let mut value = pi.to_json();
            if query.expand_charge {
                value["latest_charge"] = pi
                    .charge_object(shared.stripe.aftermath(&pi.id))
                    .unwrap_or(Value::Null);
            }
            value
        })
        .collect();
    Ok(list_object(data, has_more))
}

/// `POST /__stripe/payment_intents/{id}/{refund|dispute|amount}`.
pub(crate) async fn control(
    State(shared): State<Arc<Shared>>,
    Path((id, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let (status, answer, event) = change(&shared, id, &action, &body);
    // Sent (when `auto`) after the change's locks are released.
    if let Some((kind, object)) = event {
        let now = shared.clock.wall_now().unix_timestamp();
        shared.stripe.webhooks.emit(kind, object, now);
    }
    Answer::json(status, &answer).into_response_plain()
}

/// Makes the change a control asks for, under the PaymentIntents' lock: the control's
/// answer, and the event the change makes, if any.
fn change(
    shared: &Shared,
    id: String,
    action: &str,
    body: &[u8],
) -> (StatusCode, Value, Option<(&'static str, Value)>) {
    let refused = |status: StatusCode, message: Value| (status, json!({"error": message}), None);
    let mut intents = shared.stripe.intents.lock();
    let Some(intent) = intents.get_mut(&id) else {
        return refused(StatusCode::NOT_FOUND, json!("no such payment_intent"));
    };
    match action {
        "refund" | "dispute" if intent.status != Status::Succeeded => refused(
            StatusCode::BAD_REQUEST,
            json!("only a succeeded PaymentIntent has a charge to refund or dispute"),
        ),
        // `{"amount": N}` refunds N more (a partial refund; each one adds up), no body the
        // rest: a refund made outside onecharge (no `metadata[refund_id]`), succeeded at once,
        // in the refund ledger like any other.
        "refund" => {
            // Never below zero, even for a charge whose amount a control cut below what was
            // refunded.
            let rest = shared.refunds.left(&id, intent.amount).max(0);
            let amount = serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v["amount"].as_i64())
                .unwrap_or(rest)
                .clamp(0, rest);
            let refund = if amount > 0 {
                let new = settle::draft(shared, &id, amount, &intent.currency);
                match shared.refunds.record(new, None, intent.amount) {
                    Ok(refund) => Some(refund),
                    Err(over) => {
                        return refused(
                            StatusCode::CONFLICT,
                            json!(format!("only {} is left to refund", over.left)),
                        )
                    }
                }
            } else {
                None
            };
            let aftermath = shared.stripe.aftermath(&id);
            let refund =
                refund.map(|refund| refund_object(&refund, intent.latest_charge.as_deref()));
            let answer = json!({
                "refunded": amount,
                "amount_refunded": aftermath.amount_refunded,
                "refund": refund,
            });
            let charge = intent.charge_object(aftermath);
            (
                StatusCode::OK,
                answer,
                charge.map(|charge| ("charge.refunded", charge)),
            )
        }
        // `{"status": "…"}` (one of Stripe's; `needs_response` without a body) opens the
        // charge's dispute, or moves the one it has to that status.
        "dispute" => {
            let status = match serde_json::from_slice::<Value>(body) {
                _ if body.is_empty() => "needs_response".to_owned(),
                Ok(v) => v["status"].as_str().unwrap_or("needs_response").to_owned(),
                Err(err) => return refused(StatusCode::BAD_REQUEST, json!(err.to_string())),
            };
            if !DISPUTE_STATUSES.contains(&status.as_str()) {
                return refused(
                    StatusCode::BAD_REQUEST,
                    json!(format!("status: one of {DISPUTE_STATUSES:?}")),
                );
            }
            let mut all = shared.stripe.disputes.0.lock();
            let kind = match all.get(&id) {
                None => "charge.dispute.created",
                Some(_) if CLOSED_DISPUTE_STATUSES.contains(&status.as_str()) => {
                    "charge.dispute.closed"
                }
                Some(_) => "charge.dispute.updated",
            };
            let dispute = all.entry(id).or_insert_with(|| Dispute {
                id: shared.ids.next_with_prefix("dp"),
                status: status.clone(),
                created: shared.clock.wall_now().unix_timestamp(),
            });
            dispute.status = status;
            let object = intent.dispute_object(dispute);
            (StatusCode::OK, object.clone(), Some((kind, object)))
        }
        "amount" => match serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v["amount"].as_i64())
        {
            Some(amount) => {
                intent.amount = amount;
                (StatusCode::OK, intent.to_json(), None)
            }
            None => refused(StatusCode::BAD_REQUEST, json!("send {\"amount\": N}")),
        },
        _ => refused(
            StatusCode::NOT_FOUND,
            json!("actions: refund, dispute, amount"),
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
    use crate::stripe::intent::PaymentIntent;
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
        let query = ListQuery::parse(query)?;
        let intents = shared.stripe.intents.lock();
        let after = cursor(&intents, query.starting_after.as_deref())?;
        let mut matching: Vec<&PaymentIntent> = intents
            .values()
            .filter(|pi| pi.created() >= query.gte && pi.created() < query.lt)
            .filter(|pi| after.is_none_or(|after| (pi.created(), pi.id.as_str()) < after))
            .collect();
        matching.sort_by(|a, b| (b.created(), &b.id).cmp(&(a.created(), &a.id)));
        let has_more = matching.len() > query.limit;
        matching.truncate(query.limit);
        let data: Vec<Value> = matching.into_iter().map(PaymentIntent::to_json).collect();
        Ok(list_object(data, has_more))
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
