//! Listing what the gateway charged in a window (docs/contract.md §3.2), one page per call,
//! for the reconciliation sweep: the §3 dialect's `GET /v1/charges?created_gte&created_lt&
//! limit&starting_after`, and Stripe's `GET /v1/payment_intents` with `created[gte]`,
//! `created[lt]`, `limit`, `starting_after` and `expand[]=data.latest_charge` (so that a
//! refund or a dispute shows on the PaymentIntent's charge).
//!
//! Both are read into one [`ListedCharge`] shape by pure functions ([`read_onecharge_page`],
//! [`read_stripe_page`]), each row of which is a unit test below. The client never decides
//! what a record means for an attempt: the sweep's comparison does.
//!
//! A disputed record says where its dispute stands ([`DisputeStatus`], decision 131): a §3
//! record says it itself (`dispute_status`); Stripe's charge says only `disputed`, so for
//! each disputed PaymentIntent, and only for those, the client asks
//! `GET /v1/disputes?payment_intent=…` before the page is used. That request failing fails
//! the page like any list read: a dispute's status is read, never guessed.
//!
//! About 700 lines besides its tests: the two dialects' list readers and the dispute reads
//! that complete a Stripe page share one `ListedCharge` shape and one table of tests, so a
//! reader compares the dialects in one place; each row of that table is a test below.

use std::collections::HashMap;

use secrecy::ExposeSecret as _;
use serde::Deserialize;
use time::OffsetDateTime;

use super::stripe::IntentFields;
use super::wire::GatewayReply;
use super::{exchange, Connector, GatewayCall, GatewayClient};
use crate::domain::listing::{DisputeStatus, ListWindow, ListedCharge, ListedStatus};
use crate::domain::outcome::MAX_REASON_CHARS;
use crate::domain::{
    bounded, deployment, CallOperation, Deployment, GatewayChargeId, PaymentAttemptId,
};

/// The most records one page may ask for (both dialects cap `limit` at 100).
pub const MAX_PAGE: usize = 100;

/// One page: the records onecharge compares, what else the page held, and the cursor of
/// the next page when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    /// The records that are onecharge's (they name an attempt id) and hold an outcome.
    pub records: Vec<ListedCharge>,
    /// Every record the page held, kept or not.
    pub seen: u32,
    /// Records that are not this deployment's: no attempt id, or one that is not an
    /// attempt id's shape (another integration sharing the account), or one naming another
    /// deployment (a sibling sharing it, decision 242). Never a finding.
    pub not_ours: u32,
    /// `starting_after` for the next page; `None` on the last. Taken from the page's last
    /// record whatever was kept of it: a page of someone else's records still leads on.
    pub next: Option<String>,
    /// The records (by id) whose charge says only that it is disputed (Stripe's): each is
    /// read as an open dispute until the client has read its dispute's status, which it
    /// does before the page leaves it ([`GatewayClient::list_page`] returns it empty).
    pub unread_disputes: Vec<String>,
}

/// Whether a record is this deployment's: its reference (§3 `reference`, Stripe
/// `metadata.payment_attempt_id`) has the shape of an attempt id, and the deployment its
/// metadata names (`onecharge_deployment`), if any, is `ours` (decision 242). Anything
/// else is another integration's, or a sibling deployment's sharing the account.
fn is_ours(
    reference: Option<&str>,
    metadata: &HashMap<String, String>,
    ours: Option<&Deployment>,
) -> bool {
    reference.is_some_and(|r| r.parse::<PaymentAttemptId>().is_ok())
        && deployment::made_by(
            ours,
            metadata.get(deployment::METADATA_KEY).map(String::as_str),
        )
}

/// The cursor of the page after one that held `last` (its last record's id), when the
/// gateway says there is more: a page that says "more" but holds nothing to continue after
/// cannot be followed, and ending there would skip the rest of the window silently.
fn next_cursor(has_more: bool, last: Option<&str>) -> Result<Option<String>, ListOutcome> {
    match (has_more, last) {
        (false, _) => Ok(None),
        (true, Some(last)) => Ok(Some(last.to_owned())),
        (true, None) => Err(ListOutcome::Failed {
            reason: "the gateway's list said has_more on a page with no records: no cursor to continue after".into(),
        }),
    }
}

/// What one list call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListOutcome {
    Page(ListPage),
    /// The gateway refused onecharge's credentials.
    CredentialsFault {
        status: u16,
    },
    /// `gateway_url` answers like something else (404, 405, 3xx).
    EndpointFault {
        status: u16,
    },
    /// No usable answer (transport failure, 5xx, 429, unreadable body).
    Failed {
        reason: String,
    },
}

impl ListOutcome {
    /// A bounded label for metrics and evidence.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Page(_) => "page",
            Self::CredentialsFault { .. } => "credentials_fault",
            Self::EndpointFault { .. } => "endpoint_fault",
            Self::Failed { .. } => "failed",
        }
    }
}

impl GatewayClient {
    /// One page of the charges the gateway created in `window`, after `cursor` (the last
    /// record of the previous page), at most `limit` (1–100) records. Never charges; safe
    /// to repeat. §3 lists oldest first, Stripe newest first: the sweep does not care,
    /// it only follows `next`.
    pub async fn list_page(
        &self,
        window: ListWindow,
        cursor: Option<&str>,
        limit: usize,
    ) -> GatewayCall<ListOutcome> {
        let limit = limit.clamp(1, MAX_PAGE).to_string();
        let request = match &self.connector {
            Connector::Onecharge(endpoints) => {
                let mut query = vec![
                    ("created_gte", rfc3339(window.from)),
                    ("created_lt", rfc3339(window.to)),
                    ("limit", limit),
                ];
                if let Some(cursor) = cursor {
                    query.push(("starting_after", cursor.to_owned()));
                }
                self.transport
                    .http
                    .get(endpoints.charges_url.clone())
                    .query(&query)
            }
            Connector::Stripe(endpoints) => {
                let mut query = vec![
                    ("created[gte]", window.from.unix_timestamp().to_string()),
                    ("created[lt]", window.to.unix_timestamp().to_string()),
                    ("limit", limit),
                    ("expand[]", "data.latest_charge".to_owned()),
                ];
                if let Some(cursor) = cursor {
                    query.push(("starting_after", cursor.to_owned()));
                }
                self.transport
                    .http
                    .get(endpoints.create_url.clone())
                    .query(&query)
                    .header("Stripe-Version", &*self.transport.stripe_version)
            }
        };
        let read: fn(GatewayReply<'_>, Option<&Deployment>) -> ListOutcome = match self.connector {
            Connector::Onecharge(_) => read_onecharge_page,
            Connector::Stripe(_) => read_stripe_page,
        };
        let ours = self.transport.deployment.as_ref();
        let call = exchange(
            request.bearer_auth(self.transport.api_key.expose_secret()),
            CallOperation::List,
            None,
            |reply, _| read(reply, ours),
            ListOutcome::label,
        )
        .await;
        self.read_disputes(call).await
    }

    /// Reads where each dispute a Stripe page left unread stands, one
    /// `GET /v1/disputes?payment_intent=…` per disputed PaymentIntent (none for a page
    /// without disputes). Any of them failing is the whole call's outcome, retried like a
    /// list read: a dispute's status is never guessed.
    async fn read_disputes(&self, mut call: GatewayCall<ListOutcome>) -> GatewayCall<ListOutcome> {
        let ListOutcome::Page(page) = &mut call.outcome else {
            return call;
        };
        let unread = std::mem::take(&mut page.unread_disputes);
        let Connector::Stripe(endpoints) = &self.connector else {
            return call;
        };
        for id in unread {
            let read = match endpoints.base.join("v1/disputes") {
                Ok(url) => {
                    let request = self
                        .transport
                        .http
                        .get(url)
                        .query(&[("payment_intent", id.as_str())])
                        .header("Stripe-Version", &*self.transport.stripe_version)
                        .bearer_auth(self.transport.api_key.expose_secret());
                    exchange(
                        request,
                        call.operation,
                        None,
                        |reply, _| read_stripe_disputes(reply),
                        |read| read.as_ref().map_or_else(ListOutcome::label, |_| "dispute"),
                    )
                    .await
                    .outcome
                }
                Err(err) => Err(ListOutcome::Failed {
                    reason: format!("cannot build the disputes URL: {err}"),
                }),
            };
            match (read, &mut call.outcome) {
                (Ok(status), ListOutcome::Page(page)) => {
                    for record in page.records.iter_mut().filter(|r| r.id == id.as_str()) {
                        record.status = ListedStatus::Disputed(status);
                    }
                }
                (Ok(_), _) => {}
                (Err(failed), _) => {
                    call.outcome = failed;
                    break;
                }
            }
        }
        call
    }
}

impl GatewayClient {
    /// One of the gateway's objects read again by id, as a listed record (Stripe: the
    /// PaymentIntent with its latest charge expanded, so its refunds and disputes show):
    /// what a webhook's check compares instead of trusting the event. `None` for a
    /// connector without such objects (§3 sends no webhooks). Never charges; safe to repeat.
    pub async fn retrieve_listed(&self, object_id: &str) -> Option<GatewayCall<ListOutcome>> {
        let Connector::Stripe(endpoints) = &self.connector else {
            return None;
        };
        let url = match endpoints.intent_url(object_id) {
            Ok(url) => url,
            Err(reason) => {
                return Some(GatewayCall::answered_locally(
                    ListOutcome::Failed {
                        reason: reason.clone(),
                    },
                    CallOperation::Lookup,
                    None,
                    Some(reason),
                ))
            }
        };
        let request = self
            .transport
            .http
            .get(url)
            .query(&[("expand[]", "latest_charge")])
            .header("Stripe-Version", &*self.transport.stripe_version)
            .bearer_auth(self.transport.api_key.expose_secret());
        let call = exchange(
            request,
            CallOperation::Lookup,
            None,
            |reply, _| read_stripe_intent(reply, self.transport.deployment.as_ref()),
            ListOutcome::label,
        )
        .await;
        Some(self.read_disputes(call).await)
    }
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&time::format_description::well_known::Rfc3339)
        .expect("a database timestamp formats as RFC 3339")
}

/// The parts of an answer every dialect reads the same: transport failures, credentials,
/// a wrong URL, and any status but 200.
fn common(reply: GatewayReply<'_>) -> Result<&[u8], ListOutcome> {
    match reply {
        GatewayReply::NotSent { error } | GatewayReply::Lost { error } => {
            Err(ListOutcome::Failed {
                reason: bounded(error, MAX_REASON_CHARS),
            })
        }
        GatewayReply::Answered {
            status: status @ (401 | 403),
            ..
        } => Err(ListOutcome::CredentialsFault { status }),
        GatewayReply::Answered {
            status: status @ (300..=399 | 404 | 405),
            ..
        } => Err(ListOutcome::EndpointFault { status }),
        GatewayReply::Answered {
            status: 200, body, ..
        } => Ok(body),
        GatewayReply::Answered { status, body, .. } => Err(ListOutcome::Failed {
            reason: bounded(
                &format!(
                    "HTTP {status} to the list call: {}",
                    String::from_utf8_lossy(body).trim()
                ),
                MAX_REASON_CHARS,
            ),
        }),
    }
}

fn unreadable(err: serde_json::Error) -> ListOutcome {
    ListOutcome::Failed {
        reason: bounded(
            &format!("HTTP 200 to the list call with an unreadable body: {err}"),
            MAX_REASON_CHARS,
        ),
    }
}

#[derive(Deserialize)]
struct OnechargeList {
    data: Vec<OnechargeRecord>,
    #[serde(default)]
    has_more: bool,
}

#[derive(Deserialize)]
struct OnechargeRecord {
    id: String,
    status: String,
    #[serde(default)]
    amount_minor: Option<i64>,
    #[serde(default)]
    currency: Option<String>,
    #[serde(default)]
    customer_id: Option<String>,
    #[serde(default)]
    reference: Option<String>,
    #[serde(default)]
    idempotency_key: Option<String>,
    /// `open`, `won` or `lost` on a `disputed` record.
    #[serde(default)]
    dispute_status: Option<String>,
    /// What the refunds of it gave back so far (contract §3.2).
    #[serde(default)]
    amount_refunded: Option<i64>,
    /// What the charge request's `metadata` held (the deployment that made it).
    #[serde(default)]
    metadata: HashMap<String, String>,
}

/// Reads a §3 list page: each of this deployment's charges (`ours`) as it is, its status as
/// said; a charge whose reference is no attempt id, or that names another deployment, is
/// someone else's and is only counted.
pub fn read_onecharge_page(reply: GatewayReply<'_>, ours: Option<&Deployment>) -> ListOutcome {
    let body = match common(reply) {
        Ok(body) => body,
        Err(outcome) => return outcome,
    };
    let list: OnechargeList = match serde_json::from_slice(body) {
        Ok(list) => list,
        Err(err) => return unreadable(err),
    };
    let next = match next_cursor(list.has_more, list.data.last().map(|c| c.id.as_str())) {
        Ok(next) => next,
        Err(outcome) => return outcome,
    };
    let seen = list.data.len() as u32;
    let (ours, not_ours): (Vec<_>, Vec<_>) = list
        .data
        .into_iter()
        .partition(|c| is_ours(c.reference.as_deref(), &c.metadata, ours));
    let records = ours
        .into_iter()
        .map(|c| ListedCharge {
            status: match c.status.as_str() {
                "disputed" => ListedStatus::Disputed(DisputeStatus::from_onecharge(
                    c.dispute_status.as_deref(),
                )),
                other => ListedStatus::parse(other),
            },
            id: GatewayChargeId::from_gateway(c.id),
            reference: c.reference,
            amount_minor: c.amount_minor,
            currency: c.currency.map(|c| c.to_ascii_uppercase()),
            customer: c.customer_id,
            idempotency_key: c.idempotency_key,
            amount_refunded: c.amount_refunded,
        })
        .collect();
    ListOutcome::Page(ListPage {
        records,
        seen,
        not_ours: not_ours.len() as u32,
        next,
        unread_disputes: Vec::new(),
    })
}

#[derive(Deserialize)]
struct StripeList {
    data: Vec<StripeIntent>,
    #[serde(default)]
    has_more: bool,
}

#[derive(Deserialize)]
struct StripeIntent {
    #[serde(flatten)]
    fields: IntentFields,
    #[serde(default)]
    customer: Option<Expandable<IdOnly>>,
    #[serde(default)]
    latest_charge: Option<Expandable<StripeCharge>>,
    #[serde(default)]
    last_payment_error: Option<serde_json::Value>,
}

/// A Stripe field that is an id, or the object when expanded.
#[derive(Deserialize)]
#[serde(untagged)]
enum Expandable<T> {
    Id(String),
    Object(T),
}

#[derive(Deserialize)]
struct IdOnly {
    id: String,
}

#[derive(Deserialize)]
struct StripeCharge {
    #[serde(default)]
    refunded: bool,
    #[serde(default)]
    amount_refunded: i64,
    #[serde(default)]
    disputed: bool,
}

/// Reads a Stripe PaymentIntent list page. One whose metadata names no attempt id, or names
/// another deployment than `ours`, is someone else's and is only counted. One of onecharge's that was never confirmed
/// (`requires_confirmation`, or `requires_payment_method` without an error) never charged
/// and is left out; a succeeded one is `refunded` or `disputed` when its latest charge
/// says so.
pub fn read_stripe_page(reply: GatewayReply<'_>, ours: Option<&Deployment>) -> ListOutcome {
    let body = match common(reply) {
        Ok(body) => body,
        Err(outcome) => return outcome,
    };
    let list: StripeList = match serde_json::from_slice(body) {
        Ok(list) => list,
        Err(err) => return unreadable(err),
    };
    let next = match next_cursor(
        list.has_more,
        list.data.last().map(|pi| pi.fields.id.as_str()),
    ) {
        Ok(next) => next,
        Err(outcome) => return outcome,
    };
    let seen = list.data.len() as u32;
    let (kept, not_ours): (Vec<_>, Vec<_>) = list.data.into_iter().partition(|pi| {
        is_ours(
            pi.fields
                .metadata
                .get("payment_attempt_id")
                .map(String::as_str),
            &pi.fields.metadata,
            ours,
        )
    });
    let records: Vec<ListedCharge> = kept.into_iter().filter_map(listed_intent).collect();
    ListOutcome::Page(ListPage {
        unread_disputes: disputed(&records),
        records,
        seen,
        not_ours: not_ours.len() as u32,
        next,
    })
}

/// The ids of the disputed records, whose dispute's status Stripe's charge does not say.
fn disputed(records: &[ListedCharge]) -> Vec<String> {
    records
        .iter()
        .filter(|r| matches!(r.status, ListedStatus::Disputed(_)))
        .map(|r| r.id.to_string())
        .collect()
}

#[derive(Deserialize)]
struct StripeDisputes {
    data: Vec<StripeDispute>,
}

#[derive(Deserialize)]
struct StripeDispute {
    status: String,
    #[serde(default)]
    created: i64,
}

/// Reads `GET /v1/disputes?payment_intent=…`: where the PaymentIntent's newest dispute
/// stands. An answer listing none for a charge that says it is disputed cannot be read
/// truthfully, and fails like an unreadable page.
pub fn read_stripe_disputes(reply: GatewayReply<'_>) -> Result<DisputeStatus, ListOutcome> {
    let body = common(reply)?;
    let list: StripeDisputes = serde_json::from_slice(body).map_err(unreadable)?;
    list.data
        .iter()
        .max_by_key(|dispute| dispute.created)
        .map(|dispute| DisputeStatus::from_stripe(&dispute.status))
        .ok_or_else(|| ListOutcome::Failed {
            reason: "the charge says it is disputed, but the gateway lists no dispute for it"
                .into(),
        })
}

/// One of onecharge's PaymentIntents as a listed record: `None` when it was never confirmed
/// (`requires_confirmation`, or `requires_payment_method` without an error), so never
/// charged; a succeeded one is `refunded` or disputed when its latest charge says so (an
/// open dispute until its status is read).
fn listed_intent(pi: StripeIntent) -> Option<ListedCharge> {
    let status = match pi.fields.status.as_str() {
        "succeeded" => match &pi.latest_charge {
            Some(Expandable::Object(charge)) if charge.disputed => {
                ListedStatus::Disputed(DisputeStatus::Open)
            }
            Some(Expandable::Object(charge)) if charge.refunded || charge.amount_refunded > 0 => {
                ListedStatus::Refunded
            }
            _ => ListedStatus::Succeeded,
        },
        "canceled" => ListedStatus::Canceled,
        "requires_payment_method" if pi.last_payment_error.is_some() => ListedStatus::Declined,
        "requires_payment_method" | "requires_confirmation" => return None,
        other => ListedStatus::Other(other.to_owned()),
    };
    let (amount_minor, currency) = pi.fields.money();
    Some(ListedCharge {
        status,
        reference: pi
            .fields
            .metadata
            .get("payment_attempt_id")
            .filter(|r| !r.is_empty())
            .cloned(),
        amount_minor,
        currency,
        customer: pi.customer.map(|c| match c {
            Expandable::Id(id) => id,
            Expandable::Object(o) => o.id,
        }),
        idempotency_key: None,
        // Stripe's unit, like its `amount`: read back into ISO minor units the same way,
        // so that it weighs against onecharge's own refunds (which are in ISO's).
        amount_refunded: match &pi.latest_charge {
            Some(Expandable::Object(charge)) => pi.fields.reported_minor(charge.amount_refunded),
            _ => None,
        },
        id: GatewayChargeId::from_gateway(pi.fields.id),
    })
}

/// Reads a retrieved PaymentIntent (`GET /v1/payment_intents/{id}?expand[]=latest_charge`)
/// as a page of at most one record, the way [`read_stripe_page`] reads a list: what a
/// webhook's check reads again by id before anything is made of the event.
pub fn read_stripe_intent(reply: GatewayReply<'_>, ours: Option<&Deployment>) -> ListOutcome {
    let body = match common(reply) {
        Ok(body) => body,
        Err(outcome) => return outcome,
    };
    let pi: StripeIntent = match serde_json::from_slice(body) {
        Ok(pi) => pi,
        Err(err) => return unreadable(err),
    };
    let kept = is_ours(
        pi.fields
            .metadata
            .get("payment_attempt_id")
            .map(String::as_str),
        &pi.fields.metadata,
        ours,
    );
    let records: Vec<ListedCharge> = if kept {
        listed_intent(pi).into_iter().collect()
    } else {
        Vec::new()
    };
    ListOutcome::Page(ListPage {
        unread_disputes: disputed(&records),
        records,
        seen: 1,
        not_ours: u32::from(!kept),
        next: None,
    })
}

#[cfg(test)]
mod tests;
