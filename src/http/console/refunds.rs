//! Refunds in the console: the refunds list (`/console/refunds`, with the filters of
//! `refunds list`), one refund (`/console/refunds/{id}`: its facts and timeline), the
//! refunds section and refund form of an attempt's page, and the refund itself (`POST
//! /console/attempts/{id}/refunds`): posted without `confirm`, a page saying what it would
//! do (the charge, what is refunded, being refunded and left, the amount, the reason, the
//! refund id); posted again with `confirm=yes` and that refund id, the refund, through
//! `operator::refunds::create` like the CLI's and the API's.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Form};
use maud::{html, Markup};
use serde::Deserialize;
use time::OffsetDateTime;

use super::fields::{self, console_time, parse_set, set};
use super::layout::{
    bad_request, csrf_field, failed, failed_saying, page, refund_badge, refused, state_select,
    text_input, PAGE_SIZE,
};
use super::session::Session;
use crate::domain::{Money, PaymentAttemptId, RefundId, RefundStatus};
use crate::format;
use crate::http::AdminState;
use crate::operator::attempts::{AttemptDetail, AttemptRefund};
use crate::operator::refunds::{
    self, NewRefund, RefundCursor, RefundError, RefundFilter, RefundPreview, RefundResolveAs,
    RefundResolveError, RefundResolveRequest, RefundView,
};
use crate::operator::Via;

/// The refunds page's fields; an empty field does not narrow.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct RefundsQuery {
    payment_attempt_id: String,
    status: String,
    order_id: String,
    customer_id: String,
    created_after: String,
    created_before: String,
    /// The cursor of this page (the previous page's last refund).
    before: String,
}

impl RefundsQuery {
    fn filter(&self) -> Result<RefundFilter, String> {
        Ok(RefundFilter {
            payment_attempt_id: parse_set::<PaymentAttemptId>(&self.payment_attempt_id).map_err(
                |_| {
                    format!(
                        "`{}` is not a payment_attempt_id (a UUID).",
                        self.payment_attempt_id.trim()
                    )
                },
            )?,
            status: set(&self.status)
                .map(|s| refunds::parse_status(&s))
                .transpose()?,
            order_id: set(&self.order_id),
            customer_id: set(&self.customer_id),
            created_after: console_time("created after", &self.created_after)?,
            created_before: console_time("created before", &self.created_before)?,
            before: parse_set::<RefundCursor>(&self.before)?,
        })
    }

    /// The link to the page after this one: the same fields, from `cursor` on.
    fn next_page(&self, cursor: RefundCursor) -> String {
        let fields = [
            ("payment_attempt_id", self.payment_attempt_id.as_str()),
            ("status", &self.status),
            ("order_id", &self.order_id),
            ("customer_id", &self.customer_id),
            ("created_after", &self.created_after),
            ("created_before", &self.created_before),
        ];
        fields::next_page("/console/refunds", &fields, cursor)
    }

    fn form(&self, status: Option<RefundStatus>) -> Markup {
        html! {
            form #refunds-form method="get" action="/console/refunds" {
                (text_input("r-attempt-id", "payment_attempt_id", "Payment attempt id", &self.payment_attempt_id))
                (state_select("r-status", &RefundStatus::ALL, status, RefundStatus::as_str))
                (text_input("r-order-id", "order_id", "Order id", &self.order_id))
                (text_input("r-customer-id", "customer_id", "Customer id", &self.customer_id))
                (text_input("r-created-after", "created_after", "Created at or after (UTC)", &self.created_after))
                (text_input("r-created-before", "created_before", "Created before (UTC)", &self.created_before))
                button #refunds-submit type="submit" { "Search" }
            }
        }
    }
}

/// `/console/refunds`: refunds newest first, narrowed by the form, a page at a time.
pub(super) async fn list(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    query: Result<Query<RefundsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return bad_request(&session, "The search parameters are not understood.");
    };
    let filter = match query.filter() {
        Ok(filter) => filter,
        Err(why) => return bad_request(&session, &why),
    };
    let now = OffsetDateTime::now_utc();
    let found = match refunds::page(&state.store, &filter, PAGE_SIZE, now).await {
        Ok(page) => page,
        Err(err) => return failed(&session, err),
    };
    let next_page = found.next.map(|cursor| query.next_page(cursor));
    let body = html! {
        (query.form(filter.status))
        (refunds_table(&found.items, now))
        @if let Some(next) = next_page {
            p { a #next-page href=(next) { "Older refunds →" } }
        }
    };
    page(StatusCode::OK, "Refunds", Some(&session), body)
}

fn refunds_table(views: &[RefundView], now: OffsetDateTime) -> Markup {
    html! {
        p #result-count data-count=(views.len()) {
            (views.len()) " refund" @if views.len() != 1 { "s" } " (newest first"
            @if views.len() == PAGE_SIZE { ", " (PAGE_SIZE) " per page" } ")"
        }
        @if !views.is_empty() {
            table #refunds-table {
                thead { tr { th { "refund" } th { "state" } th { "payment attempt" } th { "order" } th { "amount" } th { "gateway refund" } th { "created" } th { "why / next" } } }
                tbody {
                    @for v in views {
                        @let r = &v.refund;
                        tr data-testid="refund-row" data-refund-id=(r.refund_id) data-status=(r.status.as_str()) {
                            td { a .refund-link href=(format!("/console/refunds/{}", r.refund_id)) { code { (r.refund_id) } } }
                            td { (refund_badge(r.status)) }
                            td { a href=(format!("/console/attempts/{}", r.payment_attempt_id)) { code { (r.payment_attempt_id) } } }
                            td { (r.order_id.as_deref().unwrap_or("-")) }
                            td .amount { (refunds::amount_text(r)) }
                            td { (r.gateway_refund_id.as_deref().unwrap_or("-")) }
                            td { (format::at_relative(r.created_at, now)) }
                            td .why { (refunds::why(r).unwrap_or(&v.next_action.action)) }
                        }
                    }
                }
            }
        }
    }
}

/// `/console/refunds/{id}`: one refund, its facts and its timeline.
pub(super) async fn one(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
) -> Response {
    let Ok(id) = id.parse::<RefundId>() else {
        return bad_request(&session, &format!("`{id}` is not a refund_id (a UUID)."));
    };
    let now = OffsetDateTime::now_utc();
    let detail = match refunds::show(&state.store, id, now).await {
        Ok(Some(detail)) => detail,
        Ok(None) => {
            return page(
                StatusCode::NOT_FOUND,
                "No such refund",
                Some(&session),
                html! { p #not-found { "No refund " code { (id) } " is recorded." } },
            )
        }
        Err(err) => return failed(&session, err),
    };
    let r = &detail.view.refund;
    let body = html! {
        p #refund-id { code { (r.refund_id) } " " (refund_badge(r.status)) }
        p { "Refund of payment attempt " a #refund-attempt href=(format!("/console/attempts/{}", r.payment_attempt_id)) { code { (r.payment_attempt_id) } } }
        section #facts {
            h2 { "Facts" }
            dl #refund-facts {
                @for (name, value) in refunds::fact_rows(&detail, now) {
                    dt { (name) }
                    dd id=(format!("fact-{}", name.replace([' ', '/'], "-").replace("---", "-"))) { (value) }
                }
            }
        }
        @if matches!(r.status, RefundStatus::NeedsReview | RefundStatus::Succeeded) && session.principal.may_act() {
            (resolve_form(&session, r.refund_id, r.status))
        }
        section #history {
            h2 { "Timeline" }
            table #timeline {
                thead { tr { th { "time (UTC)" } th { "kind" } th { "what" } th { "detail" } } }
                tbody {
                    @for row in refunds::timeline_rows(&detail) {
                        tr data-testid="timeline-entry" data-kind=(row.kind) {
                            td { (format::at_ms(row.at)) } td { (row.kind) } td { (row.what) } td { (row.detail) }
                        }
                    }
                }
            }
        }
    };
    page(StatusCode::OK, "Refund", Some(&session), body)
}

/// The attempt page's refunds: each refund with its state and why, and, for an operator on
/// a succeeded charge, the form that refunds it (a viewer is told who may).
pub(super) fn attempt_refunds_section(session: &Session, detail: &AttemptDetail) -> Markup {
    let a = &detail.view.attempt;
    let refundable = a.status == crate::domain::AttemptStatus::Succeeded;
    html! {
        section #refunds-section {
            h2 { "Refunds" }
            @if detail.refunds.is_empty() {
                p #no-refunds { "No refund of this charge is recorded." }
            } @else {
                table #attempt-refunds {
                    thead { tr { th { "refund" } th { "state" } th { "amount" } th { "reason" } th { "why / gateway refund" } } }
                    tbody {
                        @for AttemptRefund { refund: r, .. } in &detail.refunds {
                            tr data-testid="attempt-refund" data-refund-id=(r.refund_id) data-status=(r.status.as_str()) {
                                td { a .refund-link href=(format!("/console/refunds/{}", r.refund_id)) { code { (r.refund_id) } } }
                                td { (refund_badge(r.status)) }
                                td .amount { (refunds::amount_text(r)) }
                                td { (format::cell(&r.reason, 120)) }
                                td { (refunds::why(r).or(r.gateway_refund_id.as_deref()).unwrap_or("-")) }
                            }
                        }
                    }
                }
            }
            @if refundable && session.principal.may_act() {
                (refund_form(session, a.payment_attempt_id, a.money))
            } @else if refundable {
                p #refund-viewer .hint { "Refunding needs the role operator; you are signed in as a viewer." }
            }
        }
    }
}

/// The form that settles a refund in review (or a succeeded one the gateway has since
/// failed): `refunds resolve`'s, the gateway read first.
fn resolve_form(session: &Session, id: RefundId, status: RefundStatus) -> Markup {
    html! {
        section #resolve {
            h2 { "Resolve" }
            @if status == RefundStatus::Succeeded {
                p .hint { "Only when the gateway shows this refund failed (a closed card, a bank that returned it): resolving it failed gives its amount back to the charge and announces it failed." }
            } @else {
                p .hint { "The gateway is read first: a choice it contradicts is refused, with why, and nothing changes. Failed gives the amount back, so the charge can be refunded under a new refund id." }
            }
            form #resolve-form method="post" action=(format!("/console/refunds/{id}/resolve")) {
                (csrf_field(session))
                label for="resolve-as" { "The gateway " }
                select #resolve-as name="as" {
                    @if status == RefundStatus::NeedsReview {
                        option value="succeeded" { "refunded it (succeeded)" }
                    }
                    option value="failed" { "did not refund it, or its refund failed (failed)" }
                }
                (text_input("resolve-reason", "reason", "Why", ""))
                button #resolve-submit type="submit" { "Resolve" }
            }
        }
    }
}

/// The resolve form as posted.
#[derive(Debug, Deserialize)]
pub(super) struct ResolveForm {
    #[serde(rename = "as")]
    as_: String,
    #[serde(default)]
    reason: String,
}

/// `POST /console/refunds/{id}/resolve`: `refunds resolve`, through the function the CLI
/// and the API call.
pub(super) async fn resolve(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    form: Result<Form<ResolveForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(id) = id.parse::<RefundId>() else {
        return bad_request(&session, &format!("`{id}` is not a refund_id (a UUID)."));
    };
    let Ok(Form(form)) = form else {
        return bad_request(
            &session,
            "The resolve form is not understood. Nothing was done.",
        );
    };
    let as_ = match form.as_.as_str() {
        "succeeded" => RefundResolveAs::Succeeded,
        "failed" => RefundResolveAs::Failed,
        other => {
            return bad_request(
                &session,
                &format!("`{other}` is not succeeded or failed. Nothing was done."),
            )
        }
    };
    let request = RefundResolveRequest {
        as_,
        reason: form.reason,
    };
    let gateway = state
        .reconciler
        .as_ref()
        .map(crate::reconciler::Reconciler::gateway);
    let actor = session.principal.actor.clone();
    match refunds::resolve(&state.store, gateway, id, &request, &actor, Via::Console).await {
        Ok(resolved) => page(
            StatusCode::OK,
            "Refund resolved",
            Some(&session),
            html! {
                p #result .success data-status=(resolved.status) { (resolved.summary()) }
                p { a #to-refund href=(format!("/console/refunds/{id}")) { "The refund" } }
            },
        ),
        Err(RefundResolveError::Invalid(why)) => {
            bad_request(&session, &format!("{why}. Nothing was done."))
        }
        Err(err @ RefundResolveError::NotFound(_)) => {
            refused(StatusCode::NOT_FOUND, Some(&session), &err.to_string())
        }
        Err(RefundResolveError::Refused(why)) => refused(
            StatusCode::CONFLICT,
            Some(&session),
            &format!("{why}. Nothing was changed."),
        ),
        Err(RefundResolveError::Unavailable(why)) => {
            refused(StatusCode::SERVICE_UNAVAILABLE, Some(&session), &why)
        }
        Err(err @ RefundResolveError::Store(_)) => failed(&session, err),
    }
}

/// The refund form of a succeeded attempt.
fn refund_form(session: &Session, id: PaymentAttemptId, charged: Money) -> Markup {
    html! {
        form #refund-form method="post" action=(format!("/console/attempts/{id}/refunds")) {
            (csrf_field(session))
            label for="refund-amount" { "Amount in minor units (" (charged.currency().code()) "; empty: all that is left of " (charged.to_string()) ")" }
            input #refund-amount type="number" name="amount_minor" min="1" max=(charged.amount_minor()) step="1";
            label for="refund-reason" { "Reason (stored with the refund, sent to the gateway, audited)" }
            input #refund-reason type="text" name="reason" required maxlength="500";
            button #refund-submit type="submit" { "Review the refund…" }
        }
    }
}

/// The refund form as posted: first without `confirm` (a preview), then with `confirm=yes`,
/// the previewed `amount_minor` and `refund_id`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct RefundForm {
    amount_minor: String,
    reason: String,
    refund_id: String,
    confirm: Option<String>,
}

impl RefundForm {
    fn request(&self) -> Result<NewRefund, String> {
        Ok(NewRefund {
            amount_minor: parse_set::<i64>(&self.amount_minor).map_err(|_| {
                format!(
                    "`{}` is not an amount: a whole number of minor units (cents for EUR). Nothing was done.",
                    self.amount_minor.trim()
                )
            })?,
            reason: self.reason.clone(),
            refund_id: parse_set::<RefundId>(&self.refund_id).map_err(|_| {
                "The confirmation's refund id is not understood: review the refund again. Nothing was done.".to_owned()
            })?,
        })
    }
}

/// `POST /console/attempts/{id}/refunds`: the preview, or with `confirm=yes` the refund.
pub(super) async fn refund(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    form: Result<Form<RefundForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(id) = id.parse::<PaymentAttemptId>() else {
        return bad_request(&session, "not a payment_attempt_id");
    };
    let Ok(Form(form)) = form else {
        return bad_request(
            &session,
            "The refund form is not understood. Nothing was done.",
        );
    };
    let request = match form.request() {
        Ok(request) => request,
        Err(why) => return bad_request(&session, &why),
    };
    if form.confirm.as_deref() != Some("yes") {
        return match refunds::preview(&state.store, id, &request).await {
            Ok(preview) => page(
                StatusCode::OK,
                "Confirm the refund",
                Some(&session),
                confirmation(&session, &preview),
            ),
            Err(err) => refusal(&session, err),
        };
    }
    if request.refund_id.is_none() || request.amount_minor.is_none() {
        return bad_request(
            &session,
            "A confirmation carries the refund id and the amount its preview showed: review the refund again. Nothing was done.",
        );
    }
    let actor = session.principal.actor.clone();
    match refunds::create(
        &state.store,
        &state.broker,
        id,
        &request,
        &actor,
        Via::Console,
    )
    .await
    {
        Ok(published) => page(
            StatusCode::OK,
            "Refund requested",
            Some(&session),
            html! {
                p #result .success data-refund-id=(published.refund_id) data-duplicate=(published.duplicate) { (published.summary()) }
                p { a #to-refund href=(format!("/console/refunds/{}", published.refund_id)) { "The refund" } " · " a #back-to-attempt href=(format!("/console/attempts/{id}")) { "Back to the attempt" } }
                p .hint { "The refund worker admits it against what is left of the charge and sends it; its moves appear on the attempt's timeline." }
            },
        ),
        Err(err) => refusal(&session, err),
    }
}

/// What the refund would do, and the form that confirms exactly that.
fn confirmation(session: &Session, preview: &RefundPreview) -> Markup {
    let money = |minor| Money::new(minor, preview.currency);
    let id = preview.payment_attempt_id;
    html! {
        p #confirm-summary data-amount-minor=(preview.amount_minor) data-refund-id=(preview.refund_id) {
            "Refund " strong { (money(preview.amount_minor).to_string()) } " of attempt " code { (id) }
            " (order " (preview.order_id) ", customer " (preview.customer_id) ")"
            ", because: " q #confirm-reason { (preview.reason) } "?"
        }
        dl #refund-preview {
            dt { "charged" } dd #preview-charged { (money(preview.charged_minor).to_string()) }
            dt { "refunded" } dd #preview-refunded { (money(preview.refunded_minor).to_string()) }
            dt { "being refunded" } dd #preview-in-progress { (money(preview.in_progress_minor).to_string()) }
            @if preview.waiting > 0 {
                dt { "waiting" } dd #preview-waiting { (preview.waiting) " asking " (money(preview.waiting_minor).to_string()) }
            }
            dt { "left" } dd #preview-left { (money(preview.left_minor).to_string()) }
            dt { "left after this refund" } dd #preview-left-after { (money(preview.left_minor - preview.amount_minor).to_string()) }
            dt { "refund id" } dd #preview-refund-id { code { (preview.refund_id) } }
        }
        p .hint { "Confirming publishes a RefundPayment command, as a producer would; the refund worker then sends it to the gateway once, under a key derived from this refund id. Confirming twice is still one refund." }
        form #confirm-form method="post" action=(format!("/console/attempts/{id}/refunds")) {
            (csrf_field(session))
            input type="hidden" name="amount_minor" value=(preview.amount_minor);
            input type="hidden" name="reason" value=(preview.reason);
            input type="hidden" name="refund_id" value=(preview.refund_id);
            input type="hidden" name="confirm" value="yes";
            button #confirm-submit type="submit" { "Confirm: refund " (money(preview.amount_minor).to_string()) }
            " "
            a #confirm-cancel href=(format!("/console/attempts/{id}")) { "Do not refund" }
        }
    }
}

/// The page of a refund not published, saying why; nothing was done.
fn refusal(session: &Session, err: RefundError) -> Response {
    match err {
        RefundError::Invalid(why) => bad_request(session, &format!("{why}. Nothing was done.")),
        err @ RefundError::NotFound(_) => {
            refused(StatusCode::NOT_FOUND, Some(session), &err.to_string())
        }
        RefundError::NotRefundable(why) => refused(StatusCode::CONFLICT, Some(session), &why),
        RefundError::TooMuch(why) => {
            refused(StatusCode::UNPROCESSABLE_ENTITY, Some(session), &why)
        }
        err @ RefundError::Publish(_) => failed_saying(
            session,
            err,
            "JetStream did not take the refund command: nothing was published. Review the refund again and confirm it.",
        ),
        err @ RefundError::NotAudited { .. } => {
            let what_happened = format!("{err}: it is published; do not refund it again.");
            failed_saying(session, err, &what_happened)
        }
        err @ RefundError::Store(_) => failed(session, err),
    }
}
