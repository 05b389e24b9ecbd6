//! The `stripe` connector: Stripe's PaymentIntents API (contract §3.1; `docs/stripe.md` has
//! the table of every answer and what the executor does with it).
//!
//! A charge is two calls, so that the reconciler can always ask Stripe by id, strongly
//! consistently, instead of through its eventually consistent search:
//! 1. **prepare** — `POST /v1/payment_intents` with `confirm=false` under the key
//!    `<stored key>-create`: a PaymentIntent that cannot charge until it is confirmed. The
//!    executor stores its id (`payment_attempts.gateway_object_id`) under its lease.
//! 2. **charge** — `POST /v1/payment_intents/{id}/confirm` with `off_session=true` under the
//!    key `<stored key>-confirm`. Every try of an attempt sends the same two keys.
//! 3. **lookup** — `GET /v1/payment_intents/{id}`. No id stored means no confirm was ever
//!    sent: nothing can have been charged.
//!
//! This file holds the requests (URLs, derived keys, forms, amounts); [`answers`] the pure
//! table that reads every answer, one unit test per row; [`list`] the sweep's list page.

mod answers;
pub(super) mod refunds;

use anyhow::Context as _;
use secrecy::ExposeSecret as _;

pub(super) use answers::IntentFields;
pub use answers::{classify_cancel, classify_confirm, classify_create, classify_retrieve};

use super::{exchange, CancelOutcome, ChargeRequest, GatewayCall, Prepared, Transport};
use crate::domain::outcome::{GatewayOutcome, LookupOutcome, MAX_REASON_CHARS};
use crate::domain::{bounded, CallOperation, Deployment, IdempotencyKey};

/// The API version a client names when it is given none (`stripe_api_version`'s default):
/// every request pins one (`Stripe-Version`), so that an account's default version moving
/// on does not change what onecharge sends or reads.
pub const STRIPE_VERSION: &str = crate::config::DEFAULT_STRIPE_API_VERSION;

/// The Stripe URLs under `gateway_url`.
#[derive(Debug, Clone)]
pub(super) struct Endpoints {
    pub(super) base: reqwest::Url,
    pub(super) create_url: reqwest::Url,
}

impl Endpoints {
    /// `base` ends with `/`.
    pub(super) fn new(base: &reqwest::Url) -> anyhow::Result<Self> {
        let create_url = base.join("v1/payment_intents").with_context(|| {
            format!("gateway_url `{base}` cannot take the path /v1/payment_intents")
        })?;
        Ok(Self {
            base: base.clone(),
            create_url,
        })
    }

    /// `…/v1/payment_intents/{id}`. An id that is not Stripe's shape is refused rather than
    /// put in a path.
    pub(super) fn intent_url(&self, id: &str) -> Result<reqwest::Url, String> {
        if !is_intent_id(id) {
            return Err(bounded(
                &format!("the stored PaymentIntent id `{id}` is not a Stripe id (pi_…)"),
                MAX_REASON_CHARS,
            ));
        }
        self.base
            .join(&format!("v1/payment_intents/{id}"))
            .map_err(|err| format!("cannot build the PaymentIntent URL: {err}"))
    }

    /// `…/v1/payment_intents/{id}/confirm`.
    pub(super) fn confirm_url(&self, id: &str) -> Result<reqwest::Url, String> {
        let mut url = self.intent_url(id)?;
        let path = format!("{}/confirm", url.path());
        url.set_path(&path);
        Ok(url)
    }
}

/// `pi_` followed by letters, digits and underscores, as Stripe's ids are.
pub fn is_intent_id(id: &str) -> bool {
    id.len() <= 255
        && id.starts_with("pi_")
        && id.len() > 3
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The keys Stripe's calls send, derived from the attempt's stored key: the same on every
/// try, different per endpoint (Stripe refuses one key for two endpoints with
/// `idempotency_error`), and within Stripe's 255 characters ([`IdempotencyKey::derived`]).
impl IdempotencyKey {
    /// The create key of sequence `seq` (`payment_attempts.create_key_seq`): `<key>-create`,
    /// then `<key>-create-2`, … The sequence moves on only after a create answered `5xx`:
    /// Stripe saves that answer under the key and replays it for 24 hours, while an
    /// unconfirmed PaymentIntent the failed create may have made can never charge.
    pub fn create_key(&self, seq: i32) -> IdempotencyKey {
        self.derived(&step("create", seq))
    }

    /// The confirm key of sequence `seq` (`payment_attempts.confirm_key_seq`):
    /// `<key>-confirm`, then `<key>-confirm-2`, … The sequence moves on only after the
    /// PaymentIntent, retrieved by id, was still `requires_confirmation`: nothing charged,
    /// and a PaymentIntent succeeds at most once, so a confirm under the next key cannot
    /// charge twice.
    pub fn confirm_key(&self, seq: i32) -> IdempotencyKey {
        self.derived(&step("confirm", seq))
    }

    /// The key of the cancel call for the stored PaymentIntent: one per attempt, the same on
    /// every try.
    pub fn cancel_key(&self) -> IdempotencyKey {
        self.derived("cancel")
    }
}

/// The text of the first create key for the stored key `stored` (what a request's header
/// is compared with): [`IdempotencyKey::create_key`] with sequence 1.
pub fn create_key(stored: &IdempotencyKey) -> String {
    stored.create_key(1).into()
}

/// The text of the first confirm key for the stored key `stored`:
/// [`IdempotencyKey::confirm_key`] with sequence 1.
pub fn confirm_key(stored: &IdempotencyKey) -> String {
    stored.confirm_key(1).into()
}

fn step(name: &str, seq: i32) -> String {
    if seq <= 1 {
        name.to_owned()
    } else {
        format!("{name}-{seq}")
    }
}

/// The create call's form: the command's fields mapped as contract §3.1 says, unconfirmed,
/// with the deployment's name when it has one (`metadata[onecharge_deployment]`).
/// `automatic_payment_methods` without redirects: a confirmation off-session cannot follow a
/// redirect, and without it Stripe asks a `return_url` of every confirmation.
pub(super) fn create_form(
    request: &ChargeRequest,
    deployment: Option<&Deployment>,
) -> Result<Vec<(&'static str, String)>, String> {
    let charge = &request.charge;
    let amount = charge.money.to_stripe()?;
    let mut form = vec![
        ("amount", amount.to_string()),
        (
            "currency",
            charge.money.currency().code().to_ascii_lowercase(),
        ),
        ("customer", charge.customer_id.clone()),
        ("payment_method", charge.payment_method.clone()),
        ("confirm", "false".into()),
        ("automatic_payment_methods[enabled]", "true".into()),
        ("automatic_payment_methods[allow_redirects]", "never".into()),
        ("metadata[payment_attempt_id]", charge.reference.to_string()),
    ];
    if let Some(order_id) = &request.order_id {
        form.push(("metadata[order_id]", order_id.clone()));
    }
    if let Some(deployment) = deployment {
        form.push(("metadata[onecharge_deployment]", deployment.to_string()));
    }
    if let Some(description) = &charge.description {
        form.push(("description", description.clone()));
    }
    Ok(form)
}

/// The confirm call's form: off-session, since the customer is not present to authenticate.
pub(super) fn confirm_form() -> Vec<(&'static str, String)> {
    vec![("off_session", "true".into())]
}

/// The cancel call's form: why, as Stripe names it.
pub(super) fn cancel_form() -> Vec<(&'static str, String)> {
    vec![("cancellation_reason", "abandoned".into())]
}

/// The requests, one per step of a Stripe charge; each reads its answer through
/// [`answers`].
impl Endpoints {
    /// `POST /v1/payment_intents`, unconfirmed, under the create key of the request's
    /// sequence: a PaymentIntent that cannot charge until it is confirmed.
    pub(super) async fn create(
        &self,
        transport: &Transport,
        request: &ChargeRequest,
    ) -> GatewayCall<Prepared> {
        let key = request.idempotency_key.create_key(request.key_seq.create);
        let form = match create_form(request, transport.deployment.as_ref()) {
            Ok(form) => form,
            // Refused before sending: nothing left this process.
            Err(reason) => {
                return GatewayCall::refused_locally(
                    |reason| Prepared::Refused(GatewayOutcome::NeedsReview { reason }),
                    CallOperation::Prepare,
                    Some(key),
                    reason,
                )
            }
        };
        exchange(
            post(transport, self.create_url.clone(), &key, form),
            CallOperation::Prepare,
            Some(key),
            classify_create,
            Prepared::label,
        )
        .await
    }

    /// `POST /v1/payment_intents/{id}/confirm` off-session for the stored PaymentIntent,
    /// under the confirm key of the request's sequence.
    pub(super) async fn confirm(
        &self,
        transport: &Transport,
        request: &ChargeRequest,
    ) -> GatewayCall<GatewayOutcome> {
        let key = request.idempotency_key.confirm_key(request.key_seq.confirm);
        let Some(intent) = request.gateway_object_id.as_deref() else {
            // The executor confirms only what it stored; reaching here is a bug, and
            // nothing was sent.
            return GatewayCall::answered_locally(
                GatewayOutcome::NotSent {
                    reason: "no PaymentIntent is stored for this attempt yet: nothing to confirm"
                        .into(),
                },
                CallOperation::Charge,
                Some(key),
                None,
            );
        };
        let url = match self.confirm_url(intent) {
            Ok(url) => url,
            Err(reason) => {
                return GatewayCall::refused_locally(
                    |reason| GatewayOutcome::NeedsReview { reason },
                    CallOperation::Charge,
                    Some(key),
                    reason,
                )
            }
        };
        exchange(
            post(transport, url, &key, confirm_form()),
            CallOperation::Charge,
            Some(key),
            |reply, hints| classify_confirm(reply, hints, intent),
            GatewayOutcome::label,
        )
        .await
    }

    /// `POST /v1/payment_intents/{id}/cancel` under `<stored key>-cancel`.
    pub(super) async fn cancel(
        &self,
        transport: &Transport,
        idempotency_key: &IdempotencyKey,
        intent: &str,
    ) -> GatewayCall<CancelOutcome> {
        let key = idempotency_key.cancel_key();
        let url = match self.intent_url(intent) {
            Ok(url) => {
                let mut url = url;
                let path = format!("{}/cancel", url.path());
                url.set_path(&path);
                url
            }
            Err(reason) => {
                return GatewayCall::refused_locally(
                    |reason| CancelOutcome::Unproven { reason },
                    CallOperation::Cancel,
                    Some(key),
                    reason,
                )
            }
        };
        exchange(
            post(transport, url, &key, cancel_form()),
            CallOperation::Cancel,
            Some(key),
            |reply, _| classify_cancel(reply, intent),
            CancelOutcome::label,
        )
        .await
    }

    /// `GET /v1/payment_intents/{id}`: the stored PaymentIntent, read as the charges it
    /// made for the attempt whose stored key is `idempotency_key`. Never charges.
    pub(super) async fn retrieve(
        &self,
        transport: &Transport,
        idempotency_key: &IdempotencyKey,
        intent: &str,
    ) -> GatewayCall<LookupOutcome> {
        let refused = |reason| {
            GatewayCall::refused_locally(
                |reason| LookupOutcome::Failed { reason },
                CallOperation::Lookup,
                None,
                reason,
            )
        };
        self.get_intent(
            transport,
            intent,
            refused,
            |reply| classify_retrieve(reply, idempotency_key),
            LookupOutcome::label,
        )
        .await
    }

    /// `GET /v1/payment_intents/{id}`: the id of the PaymentIntent's latest charge (`ch_…`),
    /// `None` when it has none; what a person's `--gateway-charge-id ch_…` is checked
    /// against. Never charges.
    pub(super) async fn latest_charge(
        &self,
        transport: &Transport,
        intent: &str,
    ) -> GatewayCall<Result<Option<String>, String>> {
        let refused = |reason: String| {
            GatewayCall::answered_locally(
                Err(reason.clone()),
                CallOperation::Lookup,
                None,
                Some(reason),
            )
        };
        self.get_intent(transport, intent, refused, read_latest_charge, |read| {
            if read.is_ok() {
                "found"
            } else {
                "failed"
            }
        })
        .await
    }

    /// `GET /v1/payment_intents/{id}`, its answer read by `read`; an id that cannot be a
    /// path segment is answered by `refused` without a call.
    async fn get_intent<T>(
        &self,
        transport: &Transport,
        intent: &str,
        refused: impl FnOnce(String) -> GatewayCall<T>,
        read: impl FnOnce(super::wire::GatewayReply<'_>) -> T,
        label: impl Fn(&T) -> &'static str,
    ) -> GatewayCall<T> {
        let url = match self.intent_url(intent) {
            Ok(url) => url,
            Err(reason) => return refused(reason),
        };
        exchange(
            transport.stripe_get(url),
            CallOperation::Lookup,
            None,
            |reply, _| read(reply),
            label,
        )
        .await
    }
}

/// Reads a retrieved PaymentIntent's `latest_charge` (an id, or the object when expanded).
fn read_latest_charge(reply: super::wire::GatewayReply<'_>) -> Result<Option<String>, String> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Charge {
        Id(String),
        Object { id: String },
    }
    #[derive(serde::Deserialize)]
    struct Intent {
        #[serde(default)]
        latest_charge: Option<Charge>,
    }
    match reply {
        super::wire::GatewayReply::Answered {
            status: 200, body, ..
        } => serde_json::from_slice::<Intent>(body)
            .map(|intent| {
                intent.latest_charge.map(|charge| match charge {
                    Charge::Id(id) | Charge::Object { id } => id,
                })
            })
            .map_err(|err| format!("an unreadable PaymentIntent: {err}")),
        super::wire::GatewayReply::Answered { status, .. } => {
            Err(format!("Stripe answered HTTP {status}"))
        }
        super::wire::GatewayReply::NotSent { error }
        | super::wire::GatewayReply::Lost { error } => Err(bounded(error, MAX_REASON_CHARS)),
    }
}

/// A form-encoded Stripe POST under `key`, with the configured `Stripe-Version`.
fn post(
    transport: &Transport,
    url: reqwest::Url,
    key: &IdempotencyKey,
    form: impl serde::Serialize,
) -> reqwest::RequestBuilder {
    transport
        .http
        .post(url)
        .bearer_auth(transport.api_key.expose_secret())
        .header("Idempotency-Key", key.as_str())
        .header("Stripe-Version", &*transport.stripe_version)
        .form(&form)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::ChargeBody;

    #[test]
    fn the_create_form_maps_the_command_as_the_contract_says() {
        let request = ChargeRequest::new(
            IdempotencyKey::for_test("onecharge-6f1c2a9e"),
            &ChargeBody {
                money: crate::domain::Money::of(1999, "EUR").unwrap(),
                customer_id: "cus_42".into(),
                payment_method: "pm_card_visa".into(),
                reference: "6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11".parse().unwrap(),
                description: Some("Order ord_1001".into()),
            },
        )
        .for_order("ord_1001");
        let form = create_form(&request, None).unwrap();
        let get = |k: &str| {
            form.iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("amount"), Some("1999"));
        assert_eq!(get("currency"), Some("eur"));
        assert_eq!(get("customer"), Some("cus_42"));
        assert_eq!(get("payment_method"), Some("pm_card_visa"));
        assert_eq!(get("confirm"), Some("false"));
        assert_eq!(
            get("metadata[payment_attempt_id]"),
            Some("6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11")
        );
        assert_eq!(get("metadata[order_id]"), Some("ord_1001"));
        assert_eq!(get("description"), Some("Order ord_1001"));
        assert_eq!(get("metadata[onecharge_deployment]"), None);
        assert_eq!(
            create_form(&request, None),
            create_form(&request.clone(), None)
        );
        let eu = Deployment::parse("eu").unwrap();
        let form = create_form(&request, Some(&eu)).unwrap();
        assert!(form.contains(&("metadata[onecharge_deployment]", "eu".to_owned())));
        assert_eq!(confirm_form(), vec![("off_session", "true".to_string())]);
    }

    #[test]
    fn derived_keys_are_stable_distinct_and_within_stripes_limit() {
        let text = "onecharge-6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11";
        let stored = &IdempotencyKey::for_test(text);
        assert_eq!(create_key(stored), format!("{text}-create"));
        assert_eq!(confirm_key(stored), format!("{text}-confirm"));
        assert_ne!(create_key(stored), confirm_key(stored));
        let long = IdempotencyKey::for_test(&"k".repeat(255));
        for key in [create_key(&long), confirm_key(&long)] {
            assert!(key.chars().count() <= 255);
        }
        assert_eq!(create_key(&long), create_key(&long));
        assert_ne!(
            create_key(&long),
            create_key(&IdempotencyKey::for_test(&"j".repeat(255)))
        );
    }

    #[test]
    fn derived_keys_move_on_by_sequence_and_the_first_is_the_plain_one() {
        let stored = "onecharge-6f1c2a9e";
        let key = IdempotencyKey::for_test(stored);
        assert_eq!(key.create_key(1), create_key(&key).as_str());
        assert_eq!(key.create_key(2), format!("{stored}-create-2").as_str());
        assert_eq!(key.confirm_key(1), confirm_key(&key).as_str());
        assert_eq!(key.confirm_key(3), format!("{stored}-confirm-3").as_str());
        assert_eq!(key.cancel_key(), format!("{stored}-cancel").as_str());
        let long = IdempotencyKey::for_test(&"k".repeat(255));
        assert!(long.confirm_key(7).chars().count() <= 255);
        assert_ne!(long.confirm_key(7), long.confirm_key(8));
    }

    #[test]
    fn only_stripe_shaped_ids_go_into_a_path() {
        assert!(is_intent_id("pi_3Nx1abcDEF_9"));
        for bad in [
            "",
            "pi_",
            "ch_1",
            "pi_1/../../v1/charges",
            "pi_1?x=y",
            "pi_1 2",
        ] {
            assert!(!is_intent_id(bad), "{bad}");
        }
    }
}
