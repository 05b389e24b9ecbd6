//! Form-encoded request bodies, and the validated parameters of each Stripe route.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::currency;
use super::error::StripeError;
use super::methods::{card_outcome, stripe_equivalent};

/// The body's `key=value` pairs, sorted, so two requests with the same parameters in
/// another order compare equal (what Stripe's idempotency layer compares).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    pub(crate) fn parse(body: &[u8]) -> Form {
        let mut pairs: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
        pairs.sort();
        Form(pairs)
    }

    /// The form as the request log keeps it: a JSON object of its parameters.
    pub(crate) fn to_json(&self) -> Value {
        Value::Object(Map::from_iter(
            self.0
                .iter()
                .map(|(name, value)| (name.clone(), Value::from(value.as_str()))),
        ))
    }

    /// The value of a parameter given once; a parameter given twice is refused.
    fn get(&self, name: &str) -> Result<Option<&str>, StripeError> {
        let mut values = self.0.iter().filter(|(key, _)| key == name);
        let first = values.next().map(|(_, value)| value.as_str());
        if values.next().is_some() {
            return Err(StripeError::invalid(
                format!("Received {name} more than once."),
                name,
            ));
        }
        Ok(first)
    }

    fn text(&self, name: &str, max_chars: usize) -> Result<Option<String>, StripeError> {
        match self.get(name)? {
            None | Some("") => Ok(None),
            Some(text) if text.chars().count() > max_chars => Err(StripeError::invalid(
                format!("Invalid {name}: must be at most {max_chars} characters"),
                name,
            )),
            Some(text) => Ok(Some(text.to_owned())),
        }
    }

    fn boolean(&self, name: &str) -> Result<bool, StripeError> {
        match self.get(name)? {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(other) => Err(StripeError::invalid(
                format!("Invalid boolean: {other}"),
                name,
            )),
        }
    }

    /// `off_session`: a boolean, or on confirm also `one_off` / `recurring` (both true).
    fn off_session(&self) -> Result<bool, StripeError> {
        match self.get("off_session")? {
            Some("one_off" | "recurring") => Ok(true),
            _ => self.boolean("off_session"),
        }
    }

    fn payment_method(&self) -> Result<Option<String>, StripeError> {
        let Some(id) = self.text("payment_method", 255)? else {
            return Ok(None);
        };
        if card_outcome(&id).is_none() {
            let hint = stripe_equivalent(&id)
                .map(|stripe| format!(" (Stripe's test method for this is {stripe})"))
                .unwrap_or_default();
            return Err(StripeError::invalid(
                format!("No such PaymentMethod: '{id}'{hint}"),
                "payment_method",
            )
            .with_code("resource_missing"));
        }
        Ok(Some(id))
    }

    /// `amount`, when given: an integer from 1 to Stripe's largest amount.
    fn amount(&self) -> Result<Option<i64>, StripeError> {
        let Some(text) = self.get("amount")? else {
            return Ok(None);
        };
        let amount = text
            .parse::<i64>()
            .ok()
            .filter(|amount| (1..=currency::MAX_AMOUNT).contains(amount))
            .ok_or_else(|| {
                StripeError::invalid(
                    format!(
                        "Invalid integer: {text}; amount must be from 1 to {}",
                        currency::MAX_AMOUNT
                    ),
                    "amount",
                )
                .with_code("parameter_invalid_integer")
            })?;
        Ok(Some(amount))
    }

    /// `metadata[key]=value` pairs; Stripe allows 50 keys of up to 40 characters with
    /// values of up to 500.
    fn metadata(&self) -> Result<BTreeMap<String, String>, StripeError> {
        let mut metadata = BTreeMap::new();
        for (name, value) in &self.0 {
            let Some(key) = name
                .strip_prefix("metadata[")
                .and_then(|rest| rest.strip_suffix(']'))
            else {
                continue;
            };
            if key.is_empty() || key.chars().count() > 40 || value.chars().count() > 500 {
                return Err(StripeError::invalid(
                    "Metadata keys must be 1 to 40 characters and values at most 500",
                    name,
                ));
            }
            metadata.insert(key.to_owned(), value.clone());
        }
        if metadata.len() > 50 {
            return Err(StripeError::invalid(
                "Metadata may hold at most 50 keys",
                "metadata",
            ));
        }
        Ok(metadata)
    }
}

/// `POST /v1/payment_intents`. Parameters the mock does not model (`capture_method`,
/// `payment_method_types[]`, `expand[]`, …) are accepted and ignored, but still take part
/// in the idempotency comparison like every parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CreateIntent {
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) customer: Option<String>,
    pub(crate) payment_method: Option<String>,
    pub(crate) confirm: bool,
    pub(crate) off_session: bool,
    pub(crate) description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
}

impl CreateIntent {
    pub(crate) fn from_form(form: &Form) -> Result<CreateIntent, StripeError> {
        let amount = form.amount()?.ok_or_else(|| {
            StripeError::invalid("Missing required param: amount.", "amount")
                .with_code("parameter_missing")
        })?;
        let currency = form.get("currency")?.ok_or_else(|| {
            StripeError::invalid("Missing required param: currency.", "currency")
                .with_code("parameter_missing")
        })?;
        currency::check(currency, amount)
            .map_err(|(message, param)| StripeError::invalid(message, param))?;
        let create = CreateIntent {
            amount,
            currency: currency.to_owned(),
            customer: form.text("customer", 255)?,
            payment_method: form.payment_method()?,
            confirm: form.boolean("confirm")?,
            off_session: form.boolean("off_session")?,
            description: form.text("description", 1000)?,
            metadata: form.metadata()?,
        };
        if create.off_session && !create.confirm {
            return Err(StripeError::invalid(
                "off_session can only be set when confirm is true.",
                "off_session",
            ));
        }
        if create.confirm && create.payment_method.is_none() {
            return Err(StripeError::invalid(
                "You must provide a payment_method to confirm this PaymentIntent.",
                "payment_method",
            )
            .with_code("parameter_missing"));
        }
        Ok(create)
    }
}

/// `POST /v1/payment_intents/{id}/confirm`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConfirmIntent {
    pub(crate) payment_method: Option<String>,
    pub(crate) off_session: bool,
}

impl ConfirmIntent {
    pub(crate) fn from_form(form: &Form) -> Result<ConfirmIntent, StripeError> {
        Ok(ConfirmIntent {
            payment_method: form.payment_method()?,
            off_session: form.off_session()?,
        })
    }
}

/// `POST /v1/customers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CreateCustomer {
    pub(crate) email: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
}

impl CreateCustomer {
    pub(crate) fn from_form(form: &Form) -> Result<CreateCustomer, StripeError> {
        Ok(CreateCustomer {
            email: form.text("email", 512)?,
            name: form.text("name", 256)?,
            description: form.text("description", 350)?,
            metadata: form.metadata()?,
        })
    }
}

/// The `reason`s Stripe accepts for a refund.
const REFUND_REASONS: [&str; 3] = ["duplicate", "fraudulent", "requested_by_customer"];

/// `POST /v1/refunds`: the PaymentIntent whose charge to refund (the mock does not take
/// `charge` instead), how much (the rest of the charge when left out), why, and metadata
/// (onecharge sends `metadata[refund_id]`, `metadata[payment_attempt_id]` and
/// `metadata[reason]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CreateRefund {
    pub(crate) payment_intent: String,
    pub(crate) amount: Option<i64>,
    /// One of `duplicate`, `fraudulent`, `requested_by_customer`.
    pub(crate) reason: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
}

impl CreateRefund {
    pub(crate) fn from_form(form: &Form) -> Result<CreateRefund, StripeError> {
        let payment_intent = form.text("payment_intent", 255)?.ok_or_else(|| {
            StripeError::invalid("Missing required param: payment_intent.", "payment_intent")
                .with_code("parameter_missing")
        })?;
        let reason = form.text("reason", 64)?;
        if let Some(reason) = reason.as_deref().filter(|r| !REFUND_REASONS.contains(r)) {
            return Err(StripeError::invalid(
                format!(
                    "Invalid reason: {reason}; must be one of duplicate, fraudulent, or \
                     requested_by_customer"
                ),
                "reason",
            ));
        }
        Ok(CreateRefund {
            payment_intent,
            amount: form.amount()?,
            reason,
            metadata: form.metadata()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(body: &str) -> Result<CreateIntent, StripeError> {
        CreateIntent::from_form(&Form::parse(body.as_bytes()))
    }

    #[test]
    fn forms_with_the_same_parameters_in_another_order_are_the_same_request() {
        assert_eq!(
            Form::parse(b"amount=1&currency=eur"),
            Form::parse(b"currency=eur&amount=1")
        );
        assert_ne!(Form::parse(b"amount=1"), Form::parse(b"amount=2"));
    }

    #[test]
    fn a_complete_create_is_read_with_its_metadata() {
        let create = create(
            "amount=1999&currency=eur&customer=cus_42&payment_method=pm_card_visa&confirm=true\
             &off_session=true&metadata[payment_attempt_id]=a-1&metadata[order_id]=ord_1",
        )
        .unwrap();
        assert_eq!(create.amount, 1999);
        assert!(create.confirm && create.off_session);
        assert_eq!(create.metadata["payment_attempt_id"], "a-1");
        assert_eq!(create.metadata["order_id"], "ord_1");
    }

    #[test]
    fn a_refund_reads_its_payment_intent_amount_reason_and_metadata() {
        let refund = CreateRefund::from_form(&Form::parse(
            b"payment_intent=pi_1&amount=500&reason=requested_by_customer\
              &metadata[refund_id]=rf-1&metadata[reason]=damaged",
        ))
        .unwrap();
        assert_eq!(refund.amount, Some(500));
        assert_eq!(refund.metadata["refund_id"], "rf-1");
        let rest = CreateRefund::from_form(&Form::parse(b"payment_intent=pi_1")).unwrap();
        assert_eq!((rest.amount, rest.reason), (None, None));

        for (body, param) in [
            ("amount=5", "payment_intent"),
            ("payment_intent=pi_1&amount=0", "amount"),
            ("payment_intent=pi_1&reason=damaged", "reason"),
        ] {
            let err = CreateRefund::from_form(&Form::parse(body.as_bytes())).unwrap_err();
            assert_eq!(err.param.as_deref(), Some(param), "{body}");
        }
    }

    #[test]
    fn each_wrong_parameter_is_named_in_the_error() {
        let cases = [
            ("currency=eur", "amount"),
            ("amount=0&currency=eur", "amount"),
            ("amount=1.5&currency=eur", "amount"),
            ("amount=100000000&currency=eur", "amount"),
            ("amount=1", "currency"),
            ("amount=1&currency=EUR", "currency"),
            ("amount=1005&currency=kwd", "amount"),
            ("amount=1&currency=eur&confirm=yes", "confirm"),
            (
                "amount=1&currency=eur&payment_method=pm_nope",
                "payment_method",
            ),
            ("amount=1&currency=eur&confirm=true", "payment_method"),
            ("amount=1&currency=eur&amount=2", "amount"),
        ];
        for (body, param) in cases {
            let err = create(body).unwrap_err();
            assert_eq!(err.param.as_deref(), Some(param), "{body}: {}", err.message);
        }
    }
}
