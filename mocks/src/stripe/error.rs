//! Stripe's error object: `{"error":{"type","code","decline_code","message","param",
//! "payment_intent"}}`, fields left out when they do not apply.

use axum::http::StatusCode;
use serde_json::{Map, Value};

use crate::answer::Answer;

/// One error answer, before it becomes a response.
#[derive(Clone, Debug)]
pub(crate) struct StripeError {
    pub(crate) status: StatusCode,
    pub(crate) kind: &'static str,
    pub(crate) code: Option<&'static str>,
    pub(crate) decline_code: Option<&'static str>,
    pub(crate) message: String,
    pub(crate) param: Option<String>,
    /// The PaymentIntent a card error or a state error is about (boxed: errors stay small).
    pub(crate) payment_intent: Option<Box<Value>>,
    pub(crate) should_retry: Option<bool>,
}

impl StripeError {
    pub(crate) fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        StripeError {
            status,
            kind,
            code: None,
            decline_code: None,
            message: message.into(),
            param: None,
            payment_intent: None,
            should_retry: None,
        }
    }

    /// `400 invalid_request_error` naming the parameter at fault.
    pub(crate) fn invalid(message: impl Into<String>, param: &str) -> Self {
        StripeError {
            param: Some(param.to_owned()),
            ..StripeError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    }

    pub(crate) fn with_code(self, code: &'static str) -> Self {
        StripeError {
            code: Some(code),
            ..self
        }
    }

    pub(crate) fn should_retry(self, should_retry: bool) -> Self {
        StripeError {
            should_retry: Some(should_retry),
            ..self
        }
    }

    pub(crate) fn answer(self) -> Answer {
        let mut error = Map::new();
        error.insert("type".into(), self.kind.into());
        let optional = [
            ("code", self.code.map(Value::from)),
            ("decline_code", self.decline_code.map(Value::from)),
            ("param", self.param.map(Value::from)),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                error.insert(name.into(), value);
            }
        }
        error.insert("message".into(), self.message.into());
        if let Some(intent) = self.payment_intent {
            error.insert("payment_intent".into(), *intent);
        }
        let body = Value::Object(Map::from_iter([("error".to_owned(), Value::Object(error))]));
        Answer {
            should_retry: self.should_retry,
            ..Answer::json(self.status, &body)
        }
    }
}
