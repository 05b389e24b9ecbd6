//! The refund: its status and how it may move, the record both dialects keep of it (one
//! entry of the refund ledger, `crate::refund::ledger`), how a new one starts (by its
//! charge's card, or by the dice), and onecharge's `POST /v1/refunds` parameters and body.

pub(crate) mod ledger;
pub(crate) mod settle;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::charge::{
    amount_field, currency_field, json_object, optional_text_field, payment_methods, text_field,
    InvalidRequest,
};

/// Where a refund stands. `pending` and `requires_action` may still move; `failed` and
/// `canceled` never do; a `succeeded` one may still fail (as a card's bank may return it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefundStatus {
    /// Accepted, not settled yet: its amount is held against the charge.
    Pending,
    /// Stripe dialect: waiting for the customer (Stripe's refunds to some methods); held.
    RequiresAction,
    /// The money went back to the customer.
    Succeeded,
    /// Nothing went back; the amount is refundable again.
    Failed,
    /// Stripe dialect: canceled before it settled; the amount is refundable again.
    Canceled,
}

impl RefundStatus {
    /// Every status, for parsing.
    const ALL: [RefundStatus; 5] = [
        RefundStatus::Pending,
        RefundStatus::RequiresAction,
        RefundStatus::Succeeded,
        RefundStatus::Failed,
        RefundStatus::Canceled,
    ];

    /// The snake_case name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            RefundStatus::Pending => "pending",
            RefundStatus::RequiresAction => "requires_action",
            RefundStatus::Succeeded => "succeeded",
            RefundStatus::Failed => "failed",
            RefundStatus::Canceled => "canceled",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<RefundStatus> {
        RefundStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
    }

    /// Whether a refund in this status holds its amount: what is left to refund of a
    /// charge is its amount less every refund that holds.
    pub fn holds(self) -> bool {
        matches!(
            self,
            RefundStatus::Pending | RefundStatus::RequiresAction | RefundStatus::Succeeded
        )
    }

    /// Whether a refund may move from this status to `to`. No move makes a refund hold
    /// more than it held, so a move never takes a charge over its amount.
    pub(crate) fn can_become(self, to: RefundStatus) -> bool {
        use RefundStatus::*;
        match self {
            Pending => matches!(to, RequiresAction | Succeeded | Failed | Canceled),
            RequiresAction => matches!(to, Pending | Succeeded | Failed | Canceled),
            Succeeded => to == Failed,
            Failed | Canceled => false,
        }
    }
}

/// A refund the gateway recorded, in either dialect: one entry of the refund ledger, which
/// tests check "never refunded twice, never over the charge" against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refund {
    /// `re_` followed by 24 hex digits from the seeded generator.
    pub id: String,
    /// The ledger entry it refunds: a charge `ch_…` in the onecharge dialect, a
    /// PaymentIntent `pi_…` in Stripe's (whose ledger entries are PaymentIntents).
    pub charge_id: String,
    /// In the currency's minor unit.
    pub amount_minor: i64,
    /// As the dialect writes it: `EUR` (onecharge), `eur` (Stripe).
    pub currency: String,
    /// Where it stands now.
    pub status: RefundStatus,
    /// onecharge's refund id: the body's `refund_id`, or Stripe's `metadata[refund_id]`;
    /// `None` for a refund made outside onecharge (the Dashboard's).
    pub refund_id: Option<String>,
    /// The payment attempt: the body's `reference`, or Stripe's
    /// `metadata[payment_attempt_id]`.
    pub reference: Option<String>,
    /// The key it was made under; `None` for a request without one (Stripe) or a control.
    pub idempotency_key: Option<String>,
    /// The body's free-text `reason`, or Stripe's `reason` (`duplicate`, `fraudulent`,
    /// `requested_by_customer`).
    pub reason: Option<String>,
    /// Why a `failed` refund failed (Stripe's words: `declined`,
    /// `expired_or_canceled_card`, …).
    pub failure_reason: Option<String>,
    /// The request's metadata as sent: Stripe's `metadata[…]`, or the onecharge dialect's
    /// `metadata` object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// On the mock's clock.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

impl Refund {
    /// The refund body of onecharge's `POST`/`GET /v1/refunds`.
    pub(crate) fn onecharge_body(&self) -> RefundBody<'_> {
        RefundBody {
            id: &self.id,
            object: "refund",
            status: self.status,
            charge_id: &self.charge_id,
            amount_minor: self.amount_minor,
            currency: &self.currency,
            reference: self.reference.as_deref(),
            refund_id: self.refund_id.as_deref(),
            idempotency_key: self.idempotency_key.as_deref(),
            reason: self.reason.as_deref(),
            failure_reason: self.failure_reason.as_deref(),
            metadata: &self.metadata,
            created_at: self.created_at,
        }
    }
}

/// A refund as onecharge's dialect answers it (docs/mock-gateway.md, "POST /v1/refunds").
#[derive(Serialize)]
pub(crate) struct RefundBody<'a> {
    id: &'a str,
    object: &'static str,
    status: RefundStatus,
    charge_id: &'a str,
    amount_minor: i64,
    currency: &'a str,
    reference: Option<&'a str>,
    refund_id: Option<&'a str>,
    idempotency_key: Option<&'a str>,
    reason: Option<&'a str>,
    failure_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    metadata: &'a BTreeMap<String, String>,
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
}

/// How a new refund starts, and where it settles later, if it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Start {
    pub(crate) status: RefundStatus,
    pub(crate) failure_reason: Option<&'static str>,
    /// Where it moves after `refund_settle_after` (or `MockGateway::settle_refunds`).
    pub(crate) settles_to: Option<Settle>,
}

/// A later move of a refund: its status then, and the `failure_reason` when it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settle {
    pub(crate) status: RefundStatus,
    pub(crate) failure_reason: Option<&'static str>,
}

impl Settle {
    const SUCCEEDS: Settle = Settle {
        status: RefundStatus::Succeeded,
        failure_reason: None,
    };
}

impl Start {
    /// `succeeded` at once, for good.
    pub(crate) const SUCCEEDED: Start = Start {
        status: RefundStatus::Succeeded,
        failure_reason: None,
        settles_to: None,
    };

    /// The start the charge's card gives every refund of it, as Stripe's test cards do:
    /// `pm_card_pendingRefund` pending then succeeded, `pm_card_refundFail` succeeded then
    /// failed.
    pub(crate) fn by_card(payment_method: &str) -> Option<Start> {
        match payment_method {
            payment_methods::PENDING_REFUND => Some(Start {
                status: RefundStatus::Pending,
                failure_reason: None,
                settles_to: Some(Settle::SUCCEEDS),
            }),
            payment_methods::REFUND_FAIL => Some(Start {
                status: RefundStatus::Succeeded,
                failure_reason: None,
                settles_to: Some(Settle {
                    status: RefundStatus::Failed,
                    failure_reason: Some(EXPIRED_OR_CANCELED_CARD),
                }),
            }),
            _ => None,
        }
    }

    /// The start the dice drew (`FaultInjector::draw_refund_start`): `pending` succeeds
    /// later, `requires_action` waits for a control, `failed` is failed at once.
    pub(crate) fn drawn(status: Option<RefundStatus>) -> Start {
        match status {
            None | Some(RefundStatus::Succeeded) => Start::SUCCEEDED,
            Some(RefundStatus::Pending) => Start {
                status: RefundStatus::Pending,
                failure_reason: None,
                settles_to: Some(Settle::SUCCEEDS),
            },
            Some(RefundStatus::Failed) => Start {
                status: RefundStatus::Failed,
                failure_reason: Some(DECLINED),
                settles_to: None,
            },
            Some(status) => Start {
                status,
                failure_reason: None,
                settles_to: None,
            },
        }
    }
}

/// The `failure_reason` of a refund failed by the dice or by a control that names none.
pub(crate) const DECLINED: &str = "declined";

/// The `failure_reason` of a refund of `pm_card_refundFail` when it fails.
pub(crate) const EXPIRED_OR_CANCELED_CARD: &str = "expired_or_canceled_card";

/// The validated parameters of onecharge's `POST /v1/refunds`.
///
/// Two requests under one idempotency key are "the same request" exactly when these are
/// equal; otherwise the second is `422 idempotency_key_reused`. Unknown body fields are
/// ignored and take no part in that comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RefundParams {
    /// The charge to refund (`ch_…`), 1 to 255 characters.
    pub(crate) charge_id: String,
    /// 1 to `MAX_AMOUNT_MINOR`; a JSON integer.
    pub(crate) amount_minor: i64,
    /// Three upper-case letters; the charge's own currency.
    pub(crate) currency: String,
    /// onecharge's `payment_attempt_id`, 1 to 255 characters.
    pub(crate) reference: String,
    /// onecharge's refund id, 1 to 255 characters.
    pub(crate) refund_id: String,
    /// Optional, at most 500 characters.
    pub(crate) reason: Option<String>,
    /// Optional string pairs, as a charge's (onecharge's `onecharge_deployment`).
    pub(crate) metadata: BTreeMap<String, String>,
}

impl RefundParams {
    /// Parses and validates a request body, naming the first field that is wrong.
    pub(crate) fn from_json(body: &[u8]) -> Result<RefundParams, InvalidRequest> {
        let fields = json_object(body)?;
        Ok(RefundParams {
            charge_id: text_field(&fields, "charge_id", 255)?,
            amount_minor: amount_field(&fields)?,
            currency: currency_field(&fields)?,
            reference: text_field(&fields, "reference", 255)?,
            refund_id: text_field(&fields, "refund_id", 255)?,
            reason: optional_text_field(&fields, "reason", 500)?,
            metadata: crate::charge::metadata_field(&fields)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn body(overrides: Value) -> Vec<u8> {
        let mut value = json!({
            "charge_id": "ch_1", "amount_minor": 500, "currency": "EUR",
            "reference": "attempt-1", "refund_id": "rf-1", "reason": "damaged"
        });
        for (k, v) in overrides.as_object().unwrap() {
            value[k] = v.clone();
        }
        serde_json::to_vec(&value).unwrap()
    }

    #[test]
    fn a_complete_refund_body_is_read_and_the_reason_may_be_left_out() {
        let params = RefundParams::from_json(&body(json!({"extra": true}))).unwrap();
        assert_eq!(params.amount_minor, 500);
        assert_eq!(params.reason.as_deref(), Some("damaged"));
        let without = RefundParams::from_json(&body(json!({"reason": null}))).unwrap();
        assert_eq!(without.reason, None);
    }

    #[test]
    fn each_malformed_refund_field_is_named_in_the_error() {
        for (overrides, field) in [
            (json!({"charge_id": ""}), "charge_id"),
            (json!({"amount_minor": 0}), "amount_minor"),
            (json!({"amount_minor": "5"}), "amount_minor"),
            (json!({"currency": "eur"}), "currency"),
            (json!({"reference": null}), "reference"),
            (json!({"refund_id": 7}), "refund_id"),
            (json!({"reason": "x".repeat(501)}), "reason"),
        ] {
            let err = RefundParams::from_json(&body(overrides.clone())).unwrap_err();
            assert!(err.0.contains(field), "{overrides}: {err}");
        }
    }

    #[test]
    fn no_move_makes_a_refund_hold_more_and_final_statuses_never_move() {
        for from in RefundStatus::ALL {
            for to in RefundStatus::ALL {
                if from.can_become(to) {
                    assert!(
                        to.holds() <= from.holds(),
                        "{from:?} -> {to:?} would hold more"
                    );
                }
            }
            assert_eq!(RefundStatus::parse(from.as_str()), Some(from));
        }
        assert!(!RefundStatus::Failed.can_become(RefundStatus::Succeeded));
        assert!(!RefundStatus::Canceled.can_become(RefundStatus::Pending));
        assert!(RefundStatus::Succeeded.can_become(RefundStatus::Failed));
    }

    #[test]
    fn the_refund_cards_start_refunds_as_stripes_test_cards_do() {
        let pending = Start::by_card(payment_methods::PENDING_REFUND).unwrap();
        assert_eq!(
            (pending.status, pending.settles_to.map(|s| s.status)),
            (RefundStatus::Pending, Some(RefundStatus::Succeeded))
        );
        let fails = Start::by_card(payment_methods::REFUND_FAIL).unwrap();
        assert_eq!(
            (fails.status, fails.settles_to),
            (
                RefundStatus::Succeeded,
                Some(Settle {
                    status: RefundStatus::Failed,
                    failure_reason: Some(EXPIRED_OR_CANCELED_CARD)
                })
            )
        );
        assert_eq!(Start::by_card(payment_methods::CARD_VISA), None);
        assert_eq!(
            Start::drawn(Some(RefundStatus::Failed)).failure_reason,
            Some(DECLINED)
        );
    }
}
