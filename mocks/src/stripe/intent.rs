//! PaymentIntents: the object, its lifecycle, and the store every request shares.
//!
//! Every change of state happens under the store's lock, and a confirmation first moves the
//! PaymentIntent to `processing`: two confirmations of one PaymentIntent (under different
//! keys) cannot both charge, the second finds it `processing` or `succeeded`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use axum::http::StatusCode;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{json, Value};
use time::OffsetDateTime;

use super::aftermath::{refund_object, Aftermath, Dispute, Disputes};
use super::error::StripeError;
use super::events::Webhooks;
use super::params::{ConfirmIntent, CreateIntent, Form};
use crate::answer::Answer;
use crate::charge::{Charge, ChargeStatus};
use crate::clock::MockInstant;
use crate::keys::Keys;
use crate::ledger::Ledger;
use crate::paging::{self, Order, Page};
use crate::refund::ledger::RefundLedger;
use crate::refund::{Refund, RefundStatus};

/// A PaymentIntent's `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    RequiresPaymentMethod,
    RequiresConfirmation,
    RequiresAction,
    Processing,
    Succeeded,
    Canceled,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::RequiresPaymentMethod => "requires_payment_method",
            Status::RequiresConfirmation => "requires_confirmation",
            Status::RequiresAction => "requires_action",
            Status::Processing => "processing",
            Status::Succeeded => "succeeded",
            Status::Canceled => "canceled",
        }
    }
}

/// The PaymentIntent as Stripe answers it (the fields a server-side integration reads).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PaymentIntent {
    pub(crate) id: String,
    object: &'static str,
    pub(crate) amount: i64,
    amount_received: i64,
    pub(crate) currency: String,
    pub(crate) customer: Option<String>,
    pub(crate) payment_method: Option<String>,
    pub(crate) status: Status,
    description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    capture_method: &'static str,
    confirmation_method: &'static str,
    /// Set once, at creation, and never changed: the list's index (`Intents`) is keyed by
    /// it. Private to this module so that nothing else can move it.
    created: i64,
    canceled_at: Option<i64>,
    cancellation_reason: Option<&'static str>,
    pub(super) latest_charge: Option<String>,
    last_payment_error: Option<Value>,
    next_action: Option<Value>,
    client_secret: String,
    livemode: bool,
    /// The key of the confirmation that is charging, for the ledger of a `processing`
    /// PaymentIntent that succeeds later.
    #[serde(skip)]
    charging_key: Option<String>,
    /// Where a confirmation started, to undo it when a fault refuses it before charging.
    #[serde(skip)]
    before_confirm: Option<(Status, Option<String>)>,
    /// `processing` after its confirmation answered (`pm_fault_processing`), waiting for
    /// [`Store::settle_processing`]; a confirmation still running is `processing` too, but
    /// not this.
    #[serde(skip)]
    settles_later: bool,
    /// Confirmations begun, under any key: a fault trigger fires on the first only, so a
    /// client that moves on to another key after a saved `500` meets the card behind it.
    #[serde(skip)]
    pub(crate) confirmations: u32,
}

impl PaymentIntent {
    /// When it was created (Unix seconds): what the list orders and filters by.
    pub(super) fn created(&self) -> i64 {
        self.created
    }

    pub(crate) fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("a PaymentIntent serializes")
    }

    fn ledger_entry(&self, created_at: OffsetDateTime) -> Charge {
        Charge {
            id: self.id.clone(),
            status: ChargeStatus::Succeeded,
            amount_minor: self.amount,
            currency: self.currency.to_ascii_uppercase(),
            customer_id: self.customer.clone().unwrap_or_default(),
            payment_method: self.payment_method.clone().unwrap_or_default(),
            reference: self
                .metadata
                .get("payment_attempt_id")
                .cloned()
                .unwrap_or_default(),
            idempotency_key: self.charging_key.clone().unwrap_or_default(),
            decline_code: None,
            created_at,
            metadata: self.metadata.clone(),
        }
    }

    /// The PaymentIntent's charge as `expand[]=data.latest_charge` (a list) or
    /// `expand[]=latest_charge` (a retrieve) shows it, with what happened to it since.
    pub(crate) fn charge_object(&self, aftermath: Aftermath) -> Option<Value> {
        let id = self.latest_charge.as_ref()?;
        Some(json!({
            "id": id,
            "object": "charge",
            "amount": self.amount,
            "amount_refunded": aftermath.amount_refunded,
            "refunded": aftermath.amount_refunded >= self.amount,
            "disputed": aftermath.dispute.is_some(),
            "payment_intent": self.id,
            "status": "succeeded",
            "currency": self.currency,
        }))
    }

    /// Its charge's `dispute`, as `GET /v1/disputes` answers it.
    pub(crate) fn dispute_object(&self, dispute: &Dispute) -> Value {
        json!({
            "id": dispute.id,
            "object": "dispute",
            "amount": self.amount,
            "currency": self.currency,
            "charge": self.latest_charge,
            "payment_intent": self.id,
            "status": dispute.status,
            "reason": "general",
            "created": dispute.created,
            "livemode": false,
        })
    }

    fn unexpected_state(&self, action: &str) -> StripeError {
        StripeError {
            payment_intent: Some(Box::new(self.to_json())),
            ..StripeError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!(
                    "You cannot {action} this PaymentIntent because it has a status of {}.",
                    self.status.as_str()
                ),
            )
            .with_code("payment_intent_unexpected_state")
        }
    }
}

/// What identifies "the same request" to Stripe's idempotency layer: the endpoint and
/// every parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyedRequest {
    pub(crate) endpoint: String,
    pub(crate) form: Form,
}

/// How a confirmation that charged ended, card-wise.
pub(crate) enum Settlement {
    Succeeded {
        charge_id: String,
    },
    Declined {
        code: &'static str,
        decline_code: &'static str,
        message: &'static str,
    },
    RequiresAction,
    /// Stays `processing`; [`Store::settle_processing`] finishes it.
    Processing,
}

/// Every PaymentIntent by id, and indexed by `(created, id)` for the list: a page is a
/// range of the index, `O(log n + limit)` wherever it falls in the listing. Only
/// [`Intents::insert`] adds to it and a PaymentIntent's `created` never changes after it, so
/// the index cannot fall out of step.
#[derive(Default)]
pub(crate) struct Intents {
    by_id: HashMap<String, PaymentIntent>,
    by_created: BTreeSet<(i64, String)>,
}

impl Intents {
    /// Adds a PaymentIntent, or replaces the one with its id.
    fn insert(&mut self, intent: PaymentIntent) {
        if let Some(replaced) = self.by_id.get(&intent.id) {
            self.by_created
                .remove(&(replaced.created, replaced.id.clone()));
        }
        self.by_created.insert((intent.created, intent.id.clone()));
        self.by_id.insert(intent.id.clone(), intent);
    }

    pub(super) fn get(&self, id: &str) -> Option<&PaymentIntent> {
        self.by_id.get(id)
    }

    /// A PaymentIntent to change; its `created` stays what it is (the field is private to
    /// this module, and nothing here changes it after creation).
    pub(super) fn get_mut(&mut self, id: &str) -> Option<&mut PaymentIntent> {
        self.by_id.get_mut(id)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &PaymentIntent> {
        self.by_id.values()
    }

    /// A page of the PaymentIntents created in `[gte, lt)` and before `before` (a
    /// `(created, id)`), newest first by `(created, id)`: a range of the index walked
    /// backwards ([`crate::paging::page`]).
    pub(super) fn page(
        &self,
        gte: i64,
        lt: i64,
        before: Option<(i64, &str)>,
        limit: usize,
    ) -> Page<&PaymentIntent> {
        paging::page(
            &self.by_created,
            (gte, String::new()),
            (lt, String::new()),
            before.map(|(created, id)| (created, id.to_owned())),
            Order::Descending,
            limit,
            |(_, id)| &self.by_id[id],
        )
    }
}

/// The Stripe dialect's state: saved responses by key, PaymentIntents, customers.
pub(crate) struct Store {
    pub(crate) keys: Keys<KeyedRequest, Answer>,
    pub(super) intents: Mutex<Intents>,
    ledger: Arc<Ledger>,
    /// Every refund, the onecharge dialect's store too: a charge's `amount_refunded`.
    refunds: Arc<RefundLedger>,
    /// The disputes of charges (`super::aftermath`).
    pub(super) disputes: Disputes,
    /// The webhook endpoint and the events sent to it (`super::events`).
    pub(super) webhooks: Webhooks,
}

impl Store {
    pub(crate) fn new(
        retention: std::time::Duration,
        ledger: Arc<Ledger>,
        refunds: Arc<RefundLedger>,
    ) -> Store {
        Store {
            keys: Keys::new(retention, Arc::clone(&ledger)),
            intents: Mutex::new(Intents::default()),
            ledger,
            refunds,
            disputes: Default::default(),
            webhooks: Default::default(),
        }
    }

    /// How the webhook deliveries made so far ended.
    pub(crate) fn webhook_deliveries(&self) -> super::events::WebhookDeliveries {
        self.webhooks.deliveries()
    }

    pub(crate) fn purge_expired(&self, now: MockInstant) {
        self.keys.purge_expired(now);
    }

    pub(crate) fn in_progress(&self) -> usize {
        self.keys.in_progress()
    }

    /// What happened to PaymentIntent `id`'s charge: its refunds `pending` or `succeeded`
    /// (what Stripe counts in `amount_refunded`) and its dispute. Takes the refund ledger's
    /// and the disputes' locks, so it may be called under the PaymentIntents' lock.
    pub(crate) fn aftermath(&self, id: &str) -> Aftermath {
        Aftermath {
            amount_refunded: self.refunds.sum(id, |status| {
                matches!(status, RefundStatus::Pending | RefundStatus::Succeeded)
            }),
            dispute: self.disputes.get(id),
        }
    }

    /// `refund` as Stripe answers it, naming its PaymentIntent's charge. Takes the
    /// PaymentIntents' lock: never call it under that lock.
    pub(crate) fn refund_object(&self, refund: &Refund) -> Value {
        let intents = self.intents.lock();
        let charge = intents
            .get(&refund.charge_id)
            .and_then(|intent| intent.latest_charge.as_deref());
        refund_object(refund, charge)
    }

    /// Sends (with `auto`) the events of a refund made (`from` is `None`) or moved from
    /// `from`: `charge.refund.updated` when its status changed, then `charge.refunded`
    /// when it is now `succeeded`. Nothing for a refund of no PaymentIntent (the onecharge
    /// dialect's). Call it with no lock held.
    pub(crate) fn announce_refund(
        &self,
        refund: &Refund,
        from: Option<RefundStatus>,
        now: OffsetDateTime,
    ) {
        let (object, charge) = {
            let intents = self.intents.lock();
            let Some(intent) = intents.get(&refund.charge_id) else {
                return;
            };
            (
                refund_object(refund, intent.latest_charge.as_deref()),
                intent.charge_object(self.aftermath(&intent.id)),
            )
        };
        let now = now.unix_timestamp();
        if from.is_some_and(|from| from != refund.status) {
            self.webhooks.emit("charge.refund.updated", object, now);
        }
        if let Some(charge) = charge.filter(|_| refund.status == RefundStatus::Succeeded) {
            self.webhooks.emit("charge.refunded", charge, now);
        }
    }

    /// A new PaymentIntent: `requires_confirmation` with a payment method, else
    /// `requires_payment_method`; `processing` when it is confirmed at creation.
    pub(crate) fn create(
        &self,
        id: String,
        create: CreateIntent,
        key: Option<&str>,
        now: OffsetDateTime,
    ) -> PaymentIntent {
        let status = match (&create.payment_method, create.confirm) {
            (Some(_), true) => Status::Processing,
            (Some(_), false) => Status::RequiresConfirmation,
            (None, _) => Status::RequiresPaymentMethod,
        };
        let intent = PaymentIntent {
            client_secret: format!("{id}_secret_mock"),
            id,
            object: "payment_intent",
            amount: create.amount,
            amount_received: 0,
            currency: create.currency,
            customer: create.customer,
            payment_method: create.payment_method,
            status,
            description: create.description,
            metadata: create.metadata,
            capture_method: "automatic",
            confirmation_method: "automatic",
            created: now.unix_timestamp(),
            canceled_at: None,
            cancellation_reason: None,
            latest_charge: None,
            last_payment_error: None,
            next_action: None,
            livemode: false,
            charging_key: create.confirm.then(|| key.map(str::to_owned)).flatten(),
            before_confirm: None,
            settles_later: false,
            confirmations: u32::from(create.confirm),
        };
        self.intents.lock().insert(intent.clone());
        intent
    }

    pub(crate) fn get(&self, id: &str) -> Result<PaymentIntent, StripeError> {
        self.intents
            .lock()
            .get(id)
            .cloned()
            .ok_or_else(|| missing(id))
    }

    /// Starts a confirmation: the PaymentIntent must be waiting for one and have a payment
    /// method (its own or the request's); it becomes `processing` until [`Store::settle`].
    pub(crate) fn begin_confirm(
        &self,
        id: &str,
        confirm: &ConfirmIntent,
        key: Option<&str>,
    ) -> Result<PaymentIntent, StripeError> {
        let mut intents = self.intents.lock();
        let intent = intents.get_mut(id).ok_or_else(|| missing(id))?;
        if !matches!(
            intent.status,
            Status::RequiresPaymentMethod | Status::RequiresConfirmation
        ) {
            return Err(intent.unexpected_state("confirm"));
        }
        let payment_method = confirm
            .payment_method
            .clone()
            .or_else(|| intent.payment_method.clone());
        if payment_method.is_none() {
            return Err(StripeError::invalid(
                "You cannot confirm this PaymentIntent because it's missing a payment method. \
                 Update it with a payment_method or confirm with one.",
                "payment_method",
            )
            .with_code("payment_intent_unexpected_state"));
        }
        intent.before_confirm = Some((intent.status, intent.payment_method.clone()));
        intent.confirmations += 1;
        intent.payment_method = payment_method;
        intent.status = Status::Processing;
        intent.charging_key = key.map(str::to_owned);
        intent.last_payment_error = None;
        Ok(intent.clone())
    }

    /// Undoes [`Store::begin_confirm`] after a fault refused the request before anything
    /// was charged.
    pub(crate) fn abort_confirm(&self, id: &str) {
        let mut intents = self.intents.lock();
        let Some(intent) = intents.get_mut(id) else {
            return;
        };
        if let Some((status, payment_method)) = intent.before_confirm.take() {
            intent.status = status;
            intent.payment_method = payment_method;
            intent.charging_key = None;
        }
    }

    /// Ends a confirmation; a success is one ledger entry, written under the same lock.
    pub(crate) fn settle(
        &self,
        id: &str,
        settlement: Settlement,
        now: OffsetDateTime,
    ) -> PaymentIntent {
        let mut intents = self.intents.lock();
        let intent = intents
            .get_mut(id)
            .expect("a PaymentIntent being confirmed is never removed");
        intent.before_confirm = None;
        let kind = match &settlement {
            Settlement::Succeeded { .. } => "payment_intent.succeeded",
            Settlement::Declined { .. } => "payment_intent.payment_failed",
            Settlement::RequiresAction => "payment_intent.requires_action",
            Settlement::Processing => "payment_intent.processing",
        };
        match settlement {
            Settlement::Succeeded { charge_id } => {
                intent.status = Status::Succeeded;
                intent.amount_received = intent.amount;
                intent.latest_charge = Some(charge_id);
                self.ledger.record(intent.ledger_entry(now));
            }
            Settlement::Declined {
                code,
                decline_code,
                message,
            } => {
                intent.status = Status::RequiresPaymentMethod;
                intent.last_payment_error = Some(json!({
                    "type": "card_error",
                    "code": code,
                    "decline_code": decline_code,
                    "message": message,
                    "payment_method": {"id": intent.payment_method, "object": "payment_method"},
                }));
                // Stripe detaches the failed payment method: a retry needs a new one.
                intent.payment_method = None;
                intent.charging_key = None;
            }
            Settlement::RequiresAction => {
                intent.status = Status::RequiresAction;
                intent.next_action = Some(json!({"type": "use_stripe_sdk", "use_stripe_sdk": {}}));
                intent.charging_key = None;
            }
            Settlement::Processing => intent.settles_later = true,
        }
        let settled = intent.clone();
        drop(intents);
        self.webhooks
            .emit(kind, settled.to_json(), now.unix_timestamp());
        settled
    }

    /// Finishes `processing` PaymentIntents that wait to succeed (`pm_fault_processing`):
    /// the one named, or all when `id` is `None`. Each gets its charge id from `next_id`.
    pub(crate) fn settle_processing(
        &self,
        id: Option<&str>,
        mut next_id: impl FnMut() -> String,
        now: OffsetDateTime,
    ) {
        let waiting: Vec<String> = {
            let intents = self.intents.lock();
            intents
                .values()
                .filter(|intent| intent.settles_later && id.is_none_or(|id| id == intent.id))
                .map(|intent| intent.id.clone())
                .collect()
        };
        for id in waiting {
            let mut intents = self.intents.lock();
            let Some(intent) = intents.get_mut(&id) else {
                continue;
            };
            // Checked again under the lock: another caller may have settled it meanwhile.
            if !intent.settles_later {
                continue;
            }
            intent.settles_later = false;
            intent.status = Status::Succeeded;
            intent.amount_received = intent.amount;
            intent.latest_charge = Some(next_id());
            self.ledger.record(intent.ledger_entry(now));
            let succeeded = intent.to_json();
            drop(intents);
            self.webhooks
                .emit("payment_intent.succeeded", succeeded, now.unix_timestamp());
        }
    }

    /// Cancels a PaymentIntent that has not charged and is not being charged.
    pub(crate) fn cancel(
        &self,
        id: &str,
        now: OffsetDateTime,
    ) -> Result<PaymentIntent, StripeError> {
        let mut intents = self.intents.lock();
        let intent = intents.get_mut(id).ok_or_else(|| missing(id))?;
        if !matches!(
            intent.status,
            Status::RequiresPaymentMethod | Status::RequiresConfirmation | Status::RequiresAction
        ) {
            return Err(intent.unexpected_state("cancel"));
        }
        intent.status = Status::Canceled;
        intent.canceled_at = Some(now.unix_timestamp());
        intent.next_action = None;
        let canceled = intent.clone();
        drop(intents);
        self.webhooks.emit(
            "payment_intent.canceled",
            canceled.to_json(),
            now.unix_timestamp(),
        );
        Ok(canceled)
    }
}

fn missing(id: &str) -> StripeError {
    StripeError {
        param: Some("intent".to_owned()),
        ..StripeError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("No such payment_intent: '{id}'"),
        )
        .with_code("resource_missing")
    }
}
