//! Listing what the gateway charged (docs/contract.md §3.2) for the onecharge dialect:
//! `GET /v1/charges?created_gte&created_lt&limit&starting_after`, oldest first by
//! `(created_at, id)`, served from the ledger; and the `POST /__charges/{id}` control that
//! changes a ledger charge's amount, currency or customer, or disputes it (a charge "changed
//! at the gateway", for reconciliation tests): a disputed charge is listed with `"status":
//! "disputed"` and `"dispute_status": "inquiry"|"open"|"won"|"lost"`. `GET /v1/charges?idempotency_key=`
//! stays the lookup. Each listed charge shows `amount_refunded`, what its `succeeded`
//! refunds gave back (`POST /v1/refunds`), and is `refunded` once that is all of it.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::Extension;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use time::OffsetDateTime;

use crate::answer::{pause, Answer, Outcome};
use crate::charge::{Charge, InvalidRequest};
use crate::onecharge::charges::{lookup_charges, LookupQuery};
use crate::paging::Page;
use crate::record::ResponseClass;
use crate::refund::RefundStatus;
use crate::respond::deliver;
use crate::state::{ConnectionControl, Shared};

/// The most charges one page holds.
const MAX_LIMIT: usize = 100;

#[derive(Deserialize)]
struct ListQuery {
    created_gte: Option<String>,
    created_lt: Option<String>,
    limit: Option<usize>,
    starting_after: Option<String>,
}

/// The §3 list's page: `{"data": [charge…], "has_more": …}`.
#[derive(Serialize)]
struct ListPage {
    data: Vec<Value>,
    has_more: bool,
}

/// A charge as the list shows it: its body with `amount_refunded` (its `succeeded`
/// refunds), `refunded` once that is the whole amount, and `disputed` with its dispute's
/// status when it is (whatever was refunded).
fn listed(charge: &Charge, dispute: Option<&str>, amount_refunded: i64) -> Value {
    let mut record = serde_json::to_value(charge).expect("a charge serializes");
    record["amount_refunded"] = json!(amount_refunded);
    if let Some(status) = dispute {
        record["status"] = json!("disputed");
        record["dispute_status"] = json!(status);
    } else if amount_refunded > 0 && amount_refunded >= charge.amount_minor {
        record["status"] = json!("refunded");
    }
    record
}

/// What went back to the customer of charge `id`: its `succeeded` refunds.
fn refunded(shared: &Shared, id: &str) -> i64 {
    shared
        .refunds
        .sum(id, |status| status == RefundStatus::Succeeded)
}

/// `GET /v1/charges`: a lookup by `idempotency_key`, or a page of the list.
pub(crate) async fn get_charges(
    state: State<Arc<Shared>>,
    connection: Extension<ConnectionControl>,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    lookup: Result<Query<LookupQuery>, QueryRejection>,
) -> Response {
    let is_lookup = raw
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .any(|pair| pair.starts_with("idempotency_key="));
    if is_lookup {
        return lookup_charges(state, connection, uri, headers, lookup).await;
    }
    let State(shared) = state;
    let Extension(connection) = connection;
    let seq = shared.begin("GET", &uri, None, Value::Null);
    let outcome = if !shared.authorized(&headers) {
        Outcome::unauthorized()
    } else {
        // The fault latency, like every other /v1 request: a slow list is how tests make a
        // sweep run long.
        pause(shared.request_latency()).await;
        let started = Instant::now();
        match Query::<ListQuery>::try_from_uri(&uri)
            .map_err(|e| InvalidRequest(format!("bad list query: {e}")))
            .and_then(|Query(q)| page(&shared, &q))
        {
            Ok(body) => {
                shared.page_times.record(started.elapsed());
                Outcome::now(ResponseClass::Lookup, Answer::json(StatusCode::OK, &body))
            }
            Err(err) => Outcome::invalid(err),
        }
    };
    deliver(&shared, &connection, seq, "/v1/charges", None, outcome).await
}

fn time_param(name: &str, value: Option<&str>) -> Result<OffsetDateTime, InvalidRequest> {
    let value = value.ok_or_else(|| {
        InvalidRequest(format!(
            "the {name} query parameter is required to list charges (or give idempotency_key)"
        ))
    })?;
    OffsetDateTime::parse(value, &time::format_description::well_known::Rfc3339)
        .map_err(|e| InvalidRequest(format!("{name} `{value}` is not RFC 3339: {e}")))
}

/// A list query, checked: the window, the page size.
struct Window {
    from: OffsetDateTime,
    to: OffsetDateTime,
    limit: usize,
}

impl Window {
    fn of(query: &ListQuery) -> Result<Window, InvalidRequest> {
        let from = time_param("created_gte", query.created_gte.as_deref())?;
        let to = time_param("created_lt", query.created_lt.as_deref())?;
        let limit = query.limit.unwrap_or(10);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(InvalidRequest(format!("limit must be 1 to {MAX_LIMIT}")));
        }
        Ok(Window { from, to, limit })
    }
}

fn unknown_cursor(id: &str) -> InvalidRequest {
    InvalidRequest(format!("starting_after: no charge {id}"))
}

/// One page: the charges created in `[created_gte, created_lt)` after `starting_after`,
/// oldest first by `(created_at, id)`, a range of the ledger's index.
fn page(shared: &Shared, query: &ListQuery) -> Result<Value, InvalidRequest> {
    let Window { from, to, limit } = Window::of(query)?;
    let ledger = shared.ledger.lock();
    let after = match &query.starting_after {
        Some(id) => {
            let cursor = ledger.first_with_id(id).ok_or_else(|| unknown_cursor(id))?;
            Some((cursor.created_at, cursor.id.as_str()))
        }
        None => None,
    };
    let Page { data, has_more } = ledger.page(from, to, after, limit);
    let data = data
        .into_iter()
        .map(|charge| {
            let dispute = ledger.dispute_of(&charge.id);
            listed(charge, dispute, refunded(shared, &charge.id))
        })
        .collect();
    Ok(serde_json::to_value(ListPage { data, has_more }).expect("a page serializes"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChargeChange {
    amount_minor: Option<i64>,
    currency: Option<String>,
    customer_id: Option<String>,
    /// `inquiry`, `open`, `won` or `lost`: disputes the charge, or moves its dispute.
    dispute: Option<String>,
}

/// `POST /__charges/{id}` `{"amount_minor": …, "currency": …, "customer_id": …, "dispute":
/// "open"|"won"|"lost"}`: changes the ledger's charge (what the list serves), as if someone
/// edited it at the gateway, or the customer's bank disputed it.
pub(crate) async fn change_charge(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let change: ChargeChange = match serde_json::from_slice(&body) {
        Ok(change) => change,
        Err(err) => {
            return Answer::json(StatusCode::BAD_REQUEST, &json!({"error": err.to_string()}))
                .into_response_plain()
        }
    };
    let dispute = match change.dispute.as_deref() {
        None => None,
        Some("inquiry") => Some("inquiry"),
        Some("open") => Some("open"),
        Some("won") => Some("won"),
        Some("lost") => Some("lost"),
        Some(other) => {
            return Answer::json(
                StatusCode::BAD_REQUEST,
                &json!({"error": format!("dispute `{other}`: inquiry, open, won or lost")}),
            )
            .into_response_plain()
        }
    };
    let mut ledger = shared.ledger.lock();
    if let Some(status) = dispute {
        ledger.dispute(&id, status);
    }
    let dispute = ledger.dispute_of(&id);
    let changed = ledger.amend(&id, |charge| {
        if let Some(amount) = change.amount_minor {
            charge.amount_minor = amount;
        }
        if let Some(currency) = change.currency {
            charge.currency = currency;
        }
        if let Some(customer) = change.customer_id {
            charge.customer_id = customer;
        }
    });
    match changed {
        Some(charge) => {
            let record = listed(charge, dispute, refunded(&shared, &charge.id));
            Answer::json(StatusCode::OK, &record).into_response_plain()
        }
        None => Answer::json(StatusCode::NOT_FOUND, &json!({"error": "no such charge"}))
            .into_response_plain(),
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::seq::SliceRandom as _;
    use rand::{Rng as _, SeedableRng as _};
    use time::format_description::well_known::Rfc3339;
    use time::macros::datetime;

    use super::*;
    use crate::config::MockConfig;

    const START: OffsetDateTime = datetime!(2026-12-01 00:00 UTC);

    fn at(second: i64) -> OffsetDateTime {
        START + time::Duration::seconds(second)
    }

    fn charge(id: &str, created_at: OffsetDateTime) -> Charge {
        Charge::sample(id, created_at)
    }

    fn query(from: i64, to: i64, limit: usize, after: Option<&str>) -> ListQuery {
        ListQuery {
            created_gte: Some(at(from).format(&Rfc3339).unwrap()),
            created_lt: Some(at(to).format(&Rfc3339).unwrap()),
            limit: Some(limit),
            starting_after: after.map(str::to_owned),
        }
    }

    /// The page as the mock answered it before the ledger had an index: the whole ledger
    /// scanned and sorted for every page. The index must answer exactly this.
    fn scanned(ledger: &[Charge], query: &ListQuery) -> Result<Value, InvalidRequest> {
        let Window { from, to, limit } = Window::of(query)?;
        let after = match &query.starting_after {
            Some(id) => {
                let cursor = ledger
                    .iter()
                    .find(|c| &c.id == id)
                    .ok_or_else(|| unknown_cursor(id))?;
                Some((cursor.created_at, cursor.id.as_str()))
            }
            None => None,
        };
        let mut matching: Vec<&Charge> = ledger
            .iter()
            .filter(|c| c.created_at >= from && c.created_at < to)
            .filter(|c| after.is_none_or(|after| (c.created_at, c.id.as_str()) > after))
            .collect();
        matching.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        let has_more = matching.len() > limit;
        matching.truncate(limit);
        Ok(serde_json::to_value(ListPage {
            data: matching.into_iter().map(|c| listed(c, None, 0)).collect(),
            has_more,
        })
        .unwrap())
    }

    /// `count` charges created over 200 seconds (many in the same second), in no order
    /// of time or id, recorded one by one and in bulk.
    fn shuffled_ledger(shared: &Shared, rng: &mut StdRng, count: usize) {
        let mut charges: Vec<Charge> = (0..count)
            .map(|i| charge(&format!("ch_{i:05}"), at(rng.gen_range(0..200))))
            .collect();
        charges.shuffle(rng);
        let bulk = charges.split_off(count / 2);
        for charge in charges {
            shared.ledger.record(charge);
        }
        shared.ledger.record_all(bulk);
    }

    #[test]
    fn paging_a_ledger_recorded_out_of_order_lists_each_charge_of_the_window_once_oldest_first() {
        let shared = Shared::new(&MockConfig::default());
        let mut rng = StdRng::seed_from_u64(35);
        shuffled_ledger(&shared, &mut rng, 1_000);
        let mut expected: Vec<Charge> = shared
            .ledger
            .charges()
            .into_iter()
            .filter(|c| c.created_at >= at(20) && c.created_at < at(180))
            .collect();
        expected.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));

        let mut listed: Vec<Charge> = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = page(&shared, &query(20, 180, 7, cursor.as_deref())).unwrap();
            let data: Vec<Charge> = serde_json::from_value(page["data"].clone()).unwrap();
            let has_more = page["has_more"].as_bool().unwrap();
            assert!(
                data.len() == 7 || !has_more,
                "a short page says it is the last"
            );
            cursor = data.last().map(|c| c.id.clone());
            listed.extend(data);
            if !has_more {
                break;
            }
        }

        assert!(expected.len() > 500, "the window holds most of the ledger");
        assert_eq!(listed, expected);
    }

    #[test]
    fn every_page_is_the_page_a_scan_of_the_whole_ledger_answers() {
        let shared = Shared::new(&MockConfig::default());
        let mut rng = StdRng::seed_from_u64(129);
        shuffled_ledger(&shared, &mut rng, 300);
        // An id charged again later: the cursor is the first charge with it.
        shared.ledger.record(charge("ch_00007", at(150)));
        shared.ledger.record(charge("ch_00042", at(3)));
        let ledger = shared.ledger.charges();

        for _ in 0..500 {
            let from = rng.gen_range(-10..210);
            let to = rng.gen_range(-10..210);
            let limit = rng.gen_range(0..=MAX_LIMIT + 1);
            let after = match rng.gen_range(0..10) {
                0 => None,
                1 => Some("ch_unknown".to_owned()),
                _ => Some(ledger.choose(&mut rng).unwrap().id.clone()),
            };
            let query = query(from, to, limit, after.as_deref());

            let indexed = page(&shared, &query).map_err(|e| e.0);
            let expected = scanned(&ledger, &query).map_err(|e| e.0);
            assert_eq!(
                indexed, expected,
                "[{from}, {to}) limit {limit} after {after:?}"
            );
        }
    }
}
