//! What the executor benchmarks share: pending attempts recorded as intake records them,
//! and a fleet of executors, each with its own pool as separate processes would have.

use onecharge::config::Settings;
use onecharge::domain::ChargePayment;
use onecharge::executor::Executor;
use onecharge::gateway::{GatewayClient, GatewayHealth};
use onecharge::store::intake::{record_batch, IntakeRecord};
use onecharge::store::Store;
use uuid::Uuid;

/// Records `charges` fresh attempts (EUR 10.00 on `pm_card_visa`, each its own order), in
/// batches of 500 under the consumer `bench`; they are pending, due now. Each batch is made
/// just before it is recorded, so a million attempts never sit in memory at once.
pub async fn seed(store: &Store, charges: usize) -> anyhow::Result<()> {
    const BATCH: usize = 500;
    let max_command_age = onecharge::config::IntakeSettings::default().max_command_age;
    for first in (0..charges).step_by(BATCH) {
        let batch: Vec<IntakeRecord> = (first..charges.min(first + BATCH))
            .map(|i| charge_record(&format!("bench-{i}"), &format!("ord_{i}"), i as u64))
            .collect();
        record_batch(store, "bench", &batch, max_command_age).await?;
    }
    Ok(())
}

/// What intake records of a fresh attempt's command (EUR 10.00 on `pm_card_visa` for
/// `order_id`), delivered as `message_id` (made unique with the attempt id) at
/// `stream_sequence`.
pub fn charge_record(message_id: &str, order_id: &str, stream_sequence: u64) -> IntakeRecord {
    let id = Uuid::new_v4();
    let message_id = format!("{message_id}-{id}");
    IntakeRecord {
        body_sha256: onecharge::domain::command::body_sha256(message_id.as_bytes()),
        message_id: onecharge::domain::MessageId::checked(message_id),
        stream_sequence,
        command: ChargePayment {
            payment_attempt_id: id.into(),
            order_id: order_id.to_owned(),
            customer_id: "cus_bench".into(),
            money: onecharge::domain::Money::of(1000, "EUR").expect("EUR is a currency"),
            payment_method: "pm_card_visa".into(),
            description: None,
            requested_at: None,
        },
        correlation_id: None,
        traceparent: None,
    }
}

/// `instances` executors configured by `settings`, each with its own database pool, gateway
/// client and health (what `instances` processes would have).
pub async fn executors(settings: &Settings, instances: usize) -> anyhow::Result<Vec<Executor>> {
    let mut executors = Vec::with_capacity(instances);
    for _ in 0..instances {
        let store = Store::connect(
            &settings.database_url,
            onecharge::executor::DATABASE_CONNECTIONS,
        )
        .await?;
        executors.push(Executor::new(
            store,
            GatewayClient::from_settings(settings)?,
            GatewayHealth::from_settings(&settings.executor),
            settings,
        ));
    }
    Ok(executors)
}
