//! Finding attempts (`/console/attempts`): by id, order, customer, key, gateway charge,
//! state and creation time, newest first, a page at a time.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use maud::{html, Markup};
use serde::Deserialize;
use time::OffsetDateTime;

use super::fields::{self, console_time, parse_set, set};
use super::layout::{
    bad_request, failed, page, refused, state_select, status_badge, text_input, PAGE_SIZE,
};
use super::session::Session;
use crate::domain::{AttemptStatus, GatewayChargeId, PaymentAttemptId};
use crate::format;
use crate::http::AdminState;
use crate::operator::attempts::{self, AttemptCursor, AttemptFilter, AttemptView};
use crate::operator::export::{self, ExportError};

/// The search form's fields; an empty field does not narrow.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct SearchQuery {
    attempt_id: String,
    order_id: String,
    customer_id: String,
    idempotency_key: String,
    gateway_charge_id: String,
    status: String,
    created_after: String,
    created_before: String,
    /// The cursor of this page (the previous page's last attempt).
    before: String,
}

pub(super) async fn search(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    query: Result<Query<SearchQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return bad_request(&session, "The search parameters are not understood.");
    };
    // An attempt id names one attempt: its page.
    if let Some(id) = set(&query.attempt_id) {
        return match id.parse::<PaymentAttemptId>() {
            Ok(id) => Redirect::to(&format!("/console/attempts/{id}")).into_response(),
            Err(_) => bad_request(
                &session,
                &format!("`{id}` is not a payment_attempt_id (a UUID)."),
            ),
        };
    }
    let filter = match query.filter() {
        Ok(filter) => filter,
        Err(why) => return bad_request(&session, &why),
    };
    let now = OffsetDateTime::now_utc();
    let page_of =
        match attempts::page(&state.store, &filter, PAGE_SIZE, now, &state.retry_window).await {
            Ok(page) => page,
            Err(err) => return failed(&session, err),
        };
    let next_page = page_of.next.map(|cursor| query.next_page(cursor));
    let body = html! {
        (query.form(filter.status))
        @if !page_of.items.is_empty() {
            p { a #export-csv href=(query.export_link()) download { "Download all found as CSV" } }
        }
        (attempts_table(&page_of.items, now))
        @if let Some(next) = next_page {
            p { a #next-page href=(next) { "Older attempts →" } }
        }
    };
    page(StatusCode::OK, "Search attempts", Some(&session), body)
}

/// `/console/attempts.csv`: every attempt the search's fields find, as CSV; refused with
/// why when more than one export holds.
pub(super) async fn export(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    query: Result<Query<SearchQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return bad_request(&session, "The search parameters are not understood.");
    };
    let filter = match query.filter() {
        Ok(filter) => filter,
        Err(why) => return bad_request(&session, &why),
    };
    match export::attempts_csv(
        &state.store,
        &filter,
        OffsetDateTime::now_utc(),
        &state.retry_window,
    )
    .await
    {
        Ok(csv) => crate::http::csv_download(csv),
        Err(err @ ExportError::TooMany) => refused(
            StatusCode::UNPROCESSABLE_ENTITY,
            Some(&session),
            &err.to_string(),
        ),
        Err(err) => failed(&session, err),
    }
}

impl SearchQuery {
    /// The attempts the fields ask for, or why a field is not understood.
    fn filter(&self) -> Result<AttemptFilter, String> {
        Ok(AttemptFilter {
            status: parse_set::<AttemptStatus>(&self.status).map_err(|err| err.to_string())?,
            order_id: set(&self.order_id),
            customer_id: set(&self.customer_id),
            gateway_charge_id: set(&self.gateway_charge_id).map(GatewayChargeId::from_gateway),
            idempotency_key: set(&self.idempotency_key),
            created_after: console_time("created after", &self.created_after)?,
            created_before: console_time("created before", &self.created_before)?,
            before: parse_set::<AttemptCursor>(&self.before)?,
        })
    }

    /// The link to the page after this one: the same fields, from `cursor` on.
    fn next_page(&self, cursor: AttemptCursor) -> String {
        fields::next_page("/console/attempts", &self.fields(), cursor)
    }

    /// The CSV of everything these fields find, from the newest on (decision 146).
    fn export_link(&self) -> String {
        fields::link("/console/attempts.csv", &fields::set_fields(&self.fields()))
    }

    /// The fields as typed, by their query names.
    fn fields(&self) -> [(&'static str, &str); 7] {
        [
            ("order_id", &self.order_id),
            ("customer_id", &self.customer_id),
            ("idempotency_key", &self.idempotency_key),
            ("gateway_charge_id", &self.gateway_charge_id),
            ("status", &self.status),
            ("created_after", &self.created_after),
            ("created_before", &self.created_before),
        ]
    }

    /// The search form, filled in as asked.
    fn form(&self, status: Option<AttemptStatus>) -> Markup {
        html! {
            form #search-form method="get" action="/console/attempts" {
                (text_input("q-attempt-id", "attempt_id", "Payment attempt id", &self.attempt_id))
                (text_input("q-order-id", "order_id", "Order id", &self.order_id))
                (text_input("q-customer-id", "customer_id", "Customer id", &self.customer_id))
                (text_input("q-idempotency-key", "idempotency_key", "Idempotency key", &self.idempotency_key))
                (text_input("q-gateway-charge-id", "gateway_charge_id", "Gateway charge id", &self.gateway_charge_id))
                (state_select("q-status", &AttemptStatus::ALL, status, AttemptStatus::as_str))
                (text_input("q-created-after", "created_after", "Created at or after (UTC)", &self.created_after))
                (text_input("q-created-before", "created_before", "Created before (UTC)", &self.created_before))
                button #search-submit type="submit" { "Search" }
            }
        }
    }
}

fn attempts_table(views: &[AttemptView], now: OffsetDateTime) -> Markup {
    html! {
        p #result-count data-count=(views.len()) {
            (views.len()) " attempt" @if views.len() != 1 { "s" } " (newest first"
            @if views.len() == PAGE_SIZE { ", " (PAGE_SIZE) " per page" } ")"
        }
        @if !views.is_empty() {
            table #attempts-table {
                thead { tr { th { "payment attempt" } th { "state" } th { "order" } th { "customer" } th { "amount" } th { "tries" } th { "gateway charge" } th { "created" } th { "next" } } }
                tbody {
                    @for v in views {
                        @let a = &v.attempt;
                        tr data-testid="attempt-row" data-attempt-id=(a.payment_attempt_id) {
                            td { a .attempt-link href=(format!("/console/attempts/{}", a.payment_attempt_id)) { code { (a.payment_attempt_id) } } }
                            td { (status_badge(a.status)) }
                            td .order-id { (a.order_id) }
                            td { (a.customer_id) }
                            td .amount { (a.money.to_string()) }
                            td { (a.tries) }
                            td { (a.gateway_charge_id.as_deref().unwrap_or("-")) }
                            td { (format::at_relative(a.created_at, now)) }
                            td .next-action { (v.next_action.action) }
                        }
                    }
                }
            }
        }
    }
}
