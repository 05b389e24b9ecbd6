//! `onecharge publish charge`: one ChargePayment command onto the command subject.
//! [`ChargeArgs`] are the command's fields as the command line and the tests give them;
//! the runner that prints where it landed is `crate::cli::publish`.

use anyhow::Context as _;
use async_nats::header::NATS_MESSAGE_ID;
use async_nats::HeaderMap;
use clap::Args;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::broker::{Broker, PublishKind};
use crate::config::{Settings, UsageError};
use crate::domain::command::{self, CommandHeaders};
use crate::domain::PaymentAttemptId;

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

/// Where a published command landed.
#[derive(Debug, Clone)]
pub struct Published {
    pub message_id: String,
    pub payment_attempt_id: PaymentAttemptId,
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

/// A command ready to publish.
struct Prepared {
    message_id: String,
    payment_attempt_id: PaymentAttemptId,
    correlation_id: Option<String>,
    payload: Vec<u8>,
}

/// The command's body with generated ids filled in, validated unless `--no-validate`.
fn prepare(args: ChargeArgs) -> Result<Prepared, UsageError> {
    let attempt = args.attempt_id.unwrap_or_else(PaymentAttemptId::random);
    let message_id = args
        .message_id
        .unwrap_or_else(|| Uuid::new_v4().to_string());
    let requested_at = match args.requested_at {
        Some(at) => at,
        None => OffsetDateTime::now_utc()
            .format(&Rfc3339)
            .expect("now formats"),
    };
    let mut body = serde_json::json!({
        "payment_attempt_id": attempt,
        "order_id": args.order_id.unwrap_or_else(|| format!("ord_{}", &Uuid::new_v4().simple().to_string()[..12])),
        "customer_id": args.customer_id,
        "amount_minor": args.amount_minor,
        "currency": args.currency,
        "payment_method": args.payment_method,
        "requested_at": requested_at,
    });
    if let Some(description) = args.description {
        body["description"] = description.into();
    }
    let payload = serde_json::to_vec(&body).expect("json serialises");
    let headers = CommandHeaders {
        message_id: Some(message_id.clone()),
        correlation_id: args.correlation_id.clone(),
        traceparent: None,
    };
    if !args.no_validate {
        command::validate(&headers, &payload).map_err(|invalid| {
            UsageError(format!(
                "the command is invalid: {invalid} (use --no-validate to publish it anyway)"
            ))
        })?;
    }
    Ok(Prepared {
        message_id,
        payment_attempt_id: attempt,
        correlation_id: args.correlation_id,
        payload,
    })
}

async fn publish_prepared(broker: &Broker, command: Prepared) -> anyhow::Result<Published> {
    let Prepared {
        message_id,
        payment_attempt_id,
        correlation_id,
        payload,
    } = command;
    let mut nats_headers = HeaderMap::new();
    nats_headers.insert(NATS_MESSAGE_ID, message_id.as_str());
    if let Some(correlation) = &correlation_id {
        nats_headers.insert("Correlation-Id", correlation.as_str());
    }
    let subject = broker.names.charge_subject();
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
        payment_attempt_id,
        stream_sequence: ack.sequence,
        duplicate: ack.duplicate,
    })
}
