//! What a gateway's list of charges says, read the same for every dialect
//! (docs/contract.md §3.2): the window a sweep lists, each record's status and where a
//! dispute stands. The gateway reads its pages into these (`crate::gateway::list`); the
//! sweep's comparison (`crate::reconciler::sweep`) and its store read them back.

use time::OffsetDateTime;

use super::GatewayChargeId;

/// The window a sweep lists: `from <= created < to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListWindow {
    pub from: OffsetDateTime,
    pub to: OffsetDateTime,
}

/// What a listed record says happened to the money, read the same for every dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListedStatus {
    /// Charged, and still held.
    Succeeded,
    /// Refused by the issuer or the gateway; nothing taken.
    Declined,
    /// Cancelled before it charged (Stripe's `canceled`).
    Canceled,
    /// Charged, then refunded (wholly or partly).
    Refunded,
    /// Charged, and the customer's bank disputed it; where the dispute stands.
    Disputed(DisputeStatus),
    /// Not final, or not a state onecharge reads (Stripe's `processing`,
    /// `requires_action`): kept as said.
    Other(String),
}

impl ListedStatus {
    /// The stored spelling (`reconciliation_sweep_records.status`).
    pub fn as_str(&self) -> &str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Declined => "declined",
            Self::Canceled => "canceled",
            Self::Refunded => "refunded",
            Self::Disputed(DisputeStatus::Inquiry) => "disputed:inquiry",
            Self::Disputed(DisputeStatus::Open) => "disputed:open",
            Self::Disputed(DisputeStatus::Won) => "disputed:won",
            Self::Disputed(DisputeStatus::Lost) => "disputed:lost",
            Self::Other(other) => other,
        }
    }

    /// Reads the stored spelling back.
    pub fn parse(text: &str) -> Self {
        match text {
            "succeeded" => Self::Succeeded,
            "declined" => Self::Declined,
            "canceled" => Self::Canceled,
            "refunded" => Self::Refunded,
            // `disputed`: stored by a sweep from before disputes had a status.
            "disputed" | "disputed:open" => Self::Disputed(DisputeStatus::Open),
            "disputed:inquiry" => Self::Disputed(DisputeStatus::Inquiry),
            "disputed:won" => Self::Disputed(DisputeStatus::Won),
            "disputed:lost" => Self::Disputed(DisputeStatus::Lost),
            other => Self::Other(other.to_owned()),
        }
    }
}

/// Where a dispute stands, read the same for every dialect (decisions 131, 240).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisputeStatus {
    /// An inquiry (a retrieval request): the customer's bank asks about the charge and no
    /// money has moved (Stripe's `warning_needs_response`, `warning_under_review`). Its own
    /// evidence, so that the chargeback it may escalate to is new evidence even after a
    /// person resolved the inquiry's finding (decision 240).
    Inquiry,
    /// A chargeback not decided: the bank has withdrawn the money while the merchant
    /// answers (Stripe's `needs_response`, `under_review`).
    Open,
    /// Decided for the merchant (`won`), or an inquiry closed without a chargeback
    /// (`warning_closed`, `prevented`): the money stays, reinstated if it was withdrawn.
    Won,
    /// Decided for the customer: the money went back to them.
    Lost,
}

impl DisputeStatus {
    /// `inquiry`, `open`, `won` or `lost`: §3's spelling, and the finding's evidence word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Inquiry => "inquiry",
            Self::Open => "open",
            Self::Won => "won",
            Self::Lost => "lost",
        }
    }

    /// A Stripe dispute's `status`. One Stripe adds later is not decided as far as
    /// onecharge knows: open, for a person to look at.
    pub fn from_stripe(status: &str) -> Self {
        match status {
            "warning_needs_response" | "warning_under_review" => Self::Inquiry,
            "won" | "warning_closed" | "prevented" => Self::Won,
            // `charge_refunded`: an older API's "the merchant refunded the disputed charge".
            "lost" | "charge_refunded" => Self::Lost,
            _ => Self::Open,
        }
    }

    /// A §3 record's `dispute_status`: `inquiry`, `open`, `won` or `lost`; absent (a
    /// gateway from before the field) or anything else is open.
    pub fn from_onecharge(status: Option<&str>) -> Self {
        match status {
            Some("inquiry") => Self::Inquiry,
            Some("won") => Self::Won,
            Some("lost") => Self::Lost,
            _ => Self::Open,
        }
    }
}

/// One record of the gateway's list: a §3 charge or a Stripe PaymentIntent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedCharge {
    /// `ch_…` (§3) or `pi_…` (Stripe): the id onecharge stores as `gateway_charge_id`.
    pub id: GatewayChargeId,
    pub status: ListedStatus,
    /// The attempt id the record names (§3 `reference`, Stripe
    /// `metadata.payment_attempt_id`), as the gateway holds it.
    pub reference: Option<String>,
    /// In ISO 4217 minor units (Stripe's amount converted back), when known.
    pub amount_minor: Option<i64>,
    /// Upper case.
    pub currency: Option<String>,
    pub customer: Option<String>,
    /// The key it was charged under, when the gateway says (§3 does; Stripe's list does not).
    pub idempotency_key: Option<String>,
    /// How much of it was given back, in ISO 4217 minor units (Stripe's `amount_refunded`
    /// converted back like its amount), when the gateway says (Stripe's expanded charge
    /// does): each refund changes it, so each refund is new evidence.
    pub amount_refunded: Option<i64>,
}

impl ListedCharge {
    /// What this record shows, as a finding's evidence: its status (a dispute's as
    /// `dispute:inquiry|open|won|lost`), and what was refunded when anything was (`refunded:500`,
    /// `dispute:open;refunded:500`, `canceled`).
    pub fn evidence(&self) -> String {
        let status = match &self.status {
            ListedStatus::Disputed(dispute) => format!("dispute:{}", dispute.as_str()),
            other => other.as_str().to_owned(),
        };
        match self.amount_refunded.filter(|r| *r > 0) {
            Some(refunded) if self.status != ListedStatus::Refunded => {
                format!("{status};refunded:{refunded}")
            }
            Some(refunded) => format!("refunded:{refunded}"),
            None => status,
        }
    }
}
