//! Listing what the gateway charged (docs/contract.md §3.2) for the onecharge dialect:
//! `GET /v1/charges?created_gte&created_lt&limit&starting_after`, oldest first by
//! `(created_at, id)`, served from the ledger; and the `POST /__charges/{id}` control that
//! changes a ledger charge's amount, currency or customer (a charge "changed at the
//! gateway", for reconciliation tests). `GET /v1/charges?idempotency_key=` stays the lookup.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::Extension;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use time::OffsetDateTime;

use crate::charge::{Charge, InvalidRequest};
use crate::http::{deliver, lookup_charges, Answer, LookupQuery, Outcome};
use crate::record::ResponseClass;
use crate::server::{ConnectionControl, Shared};

/// The most charges one page holds.
const MAX_LIMIT: usize = 100;

#[derive(Deserialize)]
struct ListQuery {
    created_gte: Option<String>,
    created_lt: Option<String>,
    limit: Option<usize>,
    starting_after: Option<String>,
}

#[derive(Serialize)]
struct Page<'a> {
    data: Vec<&'a Charge>,
    has_more: bool,
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
        crate::http::pause(shared.request_latency()).await;
        match Query::<ListQuery>::try_from_uri(&uri)
            .map_err(|e| InvalidRequest(format!("bad list query: {e}")))
            .and_then(|Query(q)| page(&shared, &q))
        {
            Ok(body) => Outcome::now(ResponseClass::Lookup, Answer::json(StatusCode::OK, &body)),
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

/// One page: the charges created in `[created_gte, created_lt)` after `starting_after`,
/// oldest first. Walks the ledger once and keeps the `limit` smallest: no copy of it.
fn page(shared: &Shared, query: &ListQuery) -> Result<Value, InvalidRequest> {
    let from = time_param("created_gte", query.created_gte.as_deref())?;
    let to = time_param("created_lt", query.created_lt.as_deref())?;
    let limit = query.limit.unwrap_or(10);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(InvalidRequest(format!("limit must be 1 to {MAX_LIMIT}")));
    }
    let ledger = shared.ledger.charges.lock();
    let after = match &query.starting_after {
        Some(id) => {
            let cursor = ledger
                .iter()
                .find(|c| &c.id == id)
                .ok_or_else(|| InvalidRequest(format!("starting_after: no charge {id}")))?;
            Some((cursor.created_at, cursor.id.as_str()))
        }
        None => None,
    };
    let mut matching: Vec<&Charge> = ledger
        .iter()
        .filter(|c| c.created_at >= from && c.created_at < to)
        .filter(|c| after.is_none_or(|after| (c.created_at, c.id.as_str()) > after))
        .collect();
    let has_more = matching.len() > limit;
    let order = |a: &&Charge, b: &&Charge| (a.created_at, &a.id).cmp(&(b.created_at, &b.id));
    if has_more {
        matching.select_nth_unstable_by(limit, order);
        matching.truncate(limit);
    }
    matching.sort_by(order);
    Ok(serde_json::to_value(Page {
        data: matching,
        has_more,
    })
    .expect("a page serializes"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChargeChange {
    amount_minor: Option<i64>,
    currency: Option<String>,
    customer_id: Option<String>,
}

/// `POST /__charges/{id}` `{"amount_minor": …, "currency": …, "customer_id": …}`: changes
/// the ledger's charge (what the list serves), as if someone edited it at the gateway.
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
    let mut ledger = shared.ledger.charges.lock();
    let Some(charge) = ledger.iter_mut().find(|c| c.id == id) else {
        return Answer::json(StatusCode::NOT_FOUND, &json!({"error": "no such charge"}))
            .into_response_plain();
    };
    if let Some(amount) = change.amount_minor {
        charge.amount_minor = amount;
    }
    if let Some(currency) = change.currency {
        charge.currency = currency;
    }
    if let Some(customer) = change.customer_id {
        charge.customer_id = customer;
    }
    Answer::json(StatusCode::OK, &*charge).into_response_plain()
}
