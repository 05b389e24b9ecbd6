//! `onecharge publish charge | refund`: one ChargePayment or RefundPayment command onto its
//! command subject, the path every producer's command takes. [`ChargeArgs`] and
//! [`RefundArgs`] are the commands' fields as the command line, the tests and an operator's
//! refund (`crate::operator::refunds`) give them; the runner that prints where a command
//! landed is `crate::cli::publish`.

use anyhow::Context as _;
use async_nats::header::NATS_MESSAGE_ID;
use async_nats::HeaderMap;
use clap::Args;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::broker::{Broker, CommandKind, PublishKind};
use crate::config::{Settings, UsageError};
use crate::domain::command::{self, CommandHeaders};
use crate::domain::{refund, PaymentAttemptId, RefundId};

/// The command's fields. Ids are generated where not given.
#[derive(Debug, Clone, Args)]
pub struct ChargeArgs {
    /// Payment attempt id (UUID) [default: a new one]
    #[arg(long)]
    pub attempt_id: Option<PaymentAttemptId>,
    /// Amount in the currency's minor unit (cents for EUR)
    #[arg(long)]
    pub amount_minor: i64,
    /// ISO 4217 currency code, e.g. EUR
    #[arg(long)]
    pub currency: String,
    /// Order id [default: ord_<random>]
    #[arg(long)]
    pub order_id: Option<String>,
    /// Customer id
    #[arg(long, default_value = "cus_demo")]
    pub customer_id: String,
    /// Payment method
    #[arg(long, default_value = "pm_card_visa")]
    pub payment_method: String,
    #[arg(long)]
    pub description: Option<String>,
    /// RFC 3339 request time [default: now]
    #[arg(long)]
    pub requested_at: Option<String>,
    /// Nats-Msg-Id [default: a new UUID]; reuse one to publish a producer retry
    #[arg(long)]
    pub message_id: Option<String>,
    #[arg(long)]
    pub correlation_id: Option<String>,
    /// Publish even when the command is invalid (to exercise the dead-letter path)
    #[arg(long)]
    pub no_validate: bool,
}

/// The fields of one RefundPayment command (contract §2.5). Ids are generated where not
/// given.
#[derive(Debug, Clone, Args)]
pub struct RefundArgs {
    /// Refund id (UUID), the refund's dedupe key [default: a new one]
    #[arg(long)]
    pub refund_id: Option<RefundId>,
    /// The charge to refund: its payment_attempt_id
    #[arg(long)]
    pub attempt_id: PaymentAttemptId,
    /// Amount in the charge's minor unit [default: whatever is left of the charge]
    #[arg(long)]
    pub amount_minor: Option<i64>,
    /// Why, in words: stored, shown and sent to the gateway as metadata
    #[arg(long)]
    pub reason: String,
    /// RFC 3339 request time [default: now]
    #[arg(long)]
    pub requested_at: Option<String>,
    /// A metadata entry carried to the gateway's refund, KEY=VALUE (repeatable)
    #[arg(long = "metadata", value_name = "KEY=VALUE", value_parser = parse_metadata)]
    pub metadata: Vec<(String, String)>,
    /// Nats-Msg-Id [default: a new UUID]; reuse one to publish a producer retry
    #[arg(long)]
    pub message_id: Option<String>,
    #[arg(long)]
    pub correlation_id: Option<String>,
    /// Publish even when the command is invalid (to exercise the dead-letter path)
    #[arg(long)]
    pub no_validate: bool,
}

/// `KEY=VALUE`, split at the first `=`.
fn parse_metadata(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("`{text}` is not KEY=VALUE"))
}

/// Where a published command landed.
#[derive(Debug, Clone)]
pub struct Published {
    pub message_id: String,
    /// The subject it was published on (namespaced).
    pub subject: String,
    pub payment_attempt_id: PaymentAttemptId,
    /// The refund, for a RefundPayment command.
    pub refund_id: Option<RefundId>,
    pub stream_sequence: u64,
    /// JetStream recognised the message id within its duplicate window and stored nothing.
    pub duplicate: bool,
}

/// Builds, validates and publishes the command, and says where it landed. An invalid
/// command is refused before anything connects.
pub async fn charge(settings: &Settings, args: ChargeArgs) -> anyhow::Result<Published> {
    let command = prepare(args)?;
    let broker = Broker::connect(settings).await?;
    publish_prepared(&broker, command).await
}

/// Builds, validates and publishes one command on `broker` (tests and tools).
pub async fn publish_charge(broker: &Broker, args: ChargeArgs) -> anyhow::Result<Published> {
    publish_prepared(broker, prepare(args)?).await
}

/// Builds, validates and publishes one RefundPayment command, and says where it landed. An
/// invalid command is refused before anything connects.
pub async fn refund(settings: &Settings, args: RefundArgs) -> anyhow::Result<Published> {
    let command = prepare_refund(args)?;
    let broker = Broker::connect(settings).await?;
    publish_prepared(&broker, command).await
}

/// Builds, validates and publishes one RefundPayment command on `broker`: the path an
/// operator's refund takes, as a producer's would.
pub async fn publish_refund(broker: &Broker, args: RefundArgs) -> anyhow::Result<Published> {
    publish_prepared(broker, prepare_refund(args)?).await
}

/// A command ready to publish.
struct Prepared {
    kind: CommandKind,
    message_id: String,
    payment_attempt_id: PaymentAttemptId,
    refund_id: Option<RefundId>,
    correlation_id: Option<String>,
    payload: Vec<u8>,
}

/// `requested_at` as given, or now.
fn requested_at_or_now(requested_at: Option<String>) -> String {
    requested_at.unwrap_or_else(|| {
        OffsetDateTime::now_utc()
            .format(&Rfc3339)
            .expect("now formats")
    })
}

/// The refund command's body with generated ids filled in, validated unless
/// `--no-validate`.
fn prepare_refund(args: RefundArgs) -> Result<Prepared, UsageError> {
    let refund_id = args.refund_id.unwrap_or_else(RefundId::random);
    let mut body = serde_json::json!({
        "refund_id": refund_id,
        "payment_attempt_id": args.attempt_id,
        "reason": args.reason,
        "requested_at": requested_at_or_now(args.requested_at),
    });
    if let Some(amount) = args.amount_minor {
        body["amount_minor"] = amount.into();
    }
    if !args.metadata.is_empty() {
        body["metadata"] = serde_json::Value::Object(
            args.metadata
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::String(v)))
                .collect(),
        );
    }
    Prepared::checked(
        CommandKind::Refund,
        &body,
        args.message_id,
        args.correlation_id,
        args.no_validate,
        (args.attempt_id, Some(refund_id)),
    )
}

/// The command's body with generated ids filled in, validated unless `--no-validate`.
fn prepare(args: ChargeArgs) -> Result<Prepared, UsageError> {
    let attempt = args.attempt_id.unwrap_or_else(PaymentAttemptId::random);
    let mut body = serde_json::json!({
        "payment_attempt_id": attempt,
        "order_id": args.order_id.unwrap_or_else(|| format!("ord_{}", &Uuid::new_v4().simple().to_string()[..12])),
        "customer_id": args.customer_id,
        "amount_minor": args.amount_minor,
        "currency": args.currency,
        "payment_method": args.payment_method,
        "requested_at": requested_at_or_now(args.requested_at),
    });
    if let Some(description) = args.description {
        body["description"] = description.into();
    }
    Prepared::checked(
        CommandKind::Charge,
        &body,
        args.message_id,
        args.correlation_id,
        args.no_validate,
        (attempt, None),
    )
}

impl Prepared {
    /// `body` as the command of `kind`, under `message_id` (a new UUID when not given),
    /// validated as intake will validate it unless `no_validate`: an invalid command is
    /// refused here, with why, before anything connects.
    fn checked(
        kind: CommandKind,
        body: &serde_json::Value,
        message_id: Option<String>,
        correlation_id: Option<String>,
        no_validate: bool,
        (payment_attempt_id, refund_id): (PaymentAttemptId, Option<RefundId>),
    ) -> Result<Self, UsageError> {
        let message_id = message_id.unwrap_or_else(|| Uuid::new_v4().to_string());
        let payload = serde_json::to_vec(body).expect("json serialises");
        let headers = CommandHeaders {
            message_id: Some(message_id.clone()),
            correlation_id: correlation_id.clone(),
            traceparent: None,
        };
        if !no_validate {
            let (what, invalid) = match kind {
                CommandKind::Charge => ("command", command::validate(&headers, &payload).err()),
                CommandKind::Refund => {
                    ("refund command", refund::validate(&headers, &payload).err())
                }
            };
            if let Some(invalid) = invalid {
                return Err(UsageError(format!(
                    "the {what} is invalid: {invalid} (use --no-validate to publish it anyway)"
                )));
            }
        }
        Ok(Self {
            kind,
            message_id,
            payment_attempt_id,
            refund_id,
            correlation_id,
            payload,
        })
    }
}

async fn publish_prepared(broker: &Broker, command: Prepared) -> anyhow::Result<Published> {
    let Prepared {
        kind,
        message_id,
        payment_attempt_id,
        refund_id,
        correlation_id,
        payload,
    } = command;
    let mut nats_headers = HeaderMap::new();
    nats_headers.insert(NATS_MESSAGE_ID, message_id.as_str());
    if let Some(correlation) = &correlation_id {
        nats_headers.insert("Correlation-Id", correlation.as_str());
    }
    let subject = broker.names.command_subject(kind);
    let ack = broker
        .publish_retrying(
            PublishKind::Command,
            subject.clone(),
            nats_headers,
            payload.into(),
            None,
        )
        .await
        .with_context(|| {
            format!("JetStream did not store the command on {subject}: is `onecharge setup` done?")
        })?;
    Ok(Published {
        message_id,
        subject,
        payment_attempt_id,
        refund_id,
        stream_sequence: ack.sequence,
        duplicate: ack.duplicate,
    })
}
