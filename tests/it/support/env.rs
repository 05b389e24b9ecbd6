//! Test harness: every test gets its own PostgreSQL database and its own JetStream
//! namespace (streams and subjects), both removed when the test's `TestEnv` drops.
#![allow(dead_code)]

use std::time::Duration;

use async_nats::HeaderMap;
use onecharge::broker::Broker;
use onecharge::config::Settings;
use onecharge::intake::Intake;
use onecharge::store::Store;
use uuid::Uuid;

/// Server URL without a database; override with TEST_DATABASE_URL.
pub fn server_url() -> String {
    std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://127.0.0.1:5432".into())
}

pub struct TestEnv {
    pub settings: Settings,
    pub store: Store,
    pub broker: Broker,
    pub db_name: String,
}

impl TestEnv {
    pub async fn new() -> Self {
        Self::with_settings(|_| {}).await
    }

    /// A fresh database and namespace; `adjust` may change settings before anything connects.
    pub async fn with_settings(adjust: impl FnOnce(&mut Settings)) -> Self {
        // The tests' own reqwest clients need the process's rustls provider, as onecharge's do.
        onecharge::tls::install_crypto_provider();
        let id = Uuid::new_v4().simple().to_string();
        let db_name = format!("onecharge_test_{id}");
        let mut settings = Settings {
            database_url: format!("{}/{db_name}", server_url()),
            nats_url: std::env::var("TEST_NATS_URL")
                .unwrap_or_else(|_| "nats://127.0.0.1:4222".into()),
            namespace: format!("t{}", &id[..12]),
            admin_addr: "127.0.0.1:0".parse().unwrap(),
            ..Settings::default()
        };
        settings.intake.batch_size = 64;
        settings.intake.ack_wait = Duration::from_secs(2);
        settings.intake.max_deliver = 3;
        settings.intake.retry_min_delay = Duration::from_millis(50);
        settings.intake.retry_max_delay = Duration::from_millis(200);
        adjust(&mut settings);
        settings.validate().expect("test settings are valid");
        let store = Store::setup(&settings.database_url)
            .await
            .expect("test database");
        let broker = Broker::connect(&settings)
            .await
            .expect("NATS at 127.0.0.1:4222");
        broker.ensure_streams().await.expect("streams");
        Self {
            settings,
            store,
            broker,
            db_name,
        }
    }

    pub async fn intake(&self) -> Intake {
        Intake::new(self.store.clone(), self.broker.clone(), &self.settings)
            .await
            .expect("intake")
    }

    /// Publishes raw bytes to the command subject with the given message id.
    pub async fn publish_raw(&self, message_id: Option<&str>, body: &[u8]) -> u64 {
        let mut headers = HeaderMap::new();
        if let Some(id) = message_id {
            headers.insert("Nats-Msg-Id", id);
        }
        headers.insert("Correlation-Id", "corr-test");
        self.broker
            .jetstream
            .publish_with_headers(
                self.broker.names.charge_subject(),
                headers,
                body.to_vec().into(),
            )
            .await
            .expect("publish")
            .await
            .expect("publish ack")
            .sequence
    }

    /// Publishes a valid command (see [`command`]) under `message_id`.
    pub async fn publish(&self, message_id: &str, body: &serde_json::Value) -> u64 {
        self.publish_raw(Some(message_id), &serde_json::to_vec(body).unwrap())
            .await
    }

    /// Every message on this namespace's dead-letter stream, in order.
    pub async fn dead_letters(&self) -> Vec<async_nats::jetstream::message::StreamMessage> {
        self.stream_messages(&self.broker.names.dlq_stream()).await
    }

    /// Every message on this namespace's events stream, in order.
    pub async fn events(&self) -> Vec<async_nats::jetstream::message::StreamMessage> {
        self.stream_messages(&self.broker.names.events_stream())
            .await
    }

    async fn stream_messages(
        &self,
        name: &str,
    ) -> Vec<async_nats::jetstream::message::StreamMessage> {
        let mut stream = self.broker.jetstream.get_stream(name).await.unwrap();
        let last = stream.info().await.unwrap().state.last_sequence;
        let mut out = Vec::new();
        for seq in 1..=last {
            if let Ok(message) = stream.get_raw_message(seq).await {
                out.push(message);
            }
        }
        out
    }

    /// A scalar from the test database.
    pub async fn scalar(&self, sql: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(self.store.pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs SQL as an administrator of the server (not inside the test database's pool).
    pub async fn admin(&self, sql: &str) {
        let pool = sqlx::PgPool::connect(&format!("{}/postgres", server_url()))
            .await
            .unwrap();
        sqlx::query(sql)
            .execute(&pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        pool.close().await;
    }

    /// Makes the test database refuse connections and cuts the open ones: an outage.
    pub async fn stop_database(&self) {
        self.admin(&format!(
            "ALTER DATABASE {} WITH ALLOW_CONNECTIONS false",
            self.db_name
        ))
        .await;
        self.admin(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'",
            self.db_name
        ))
        .await;
    }

    /// Ends the outage of [`TestEnv::stop_database`].
    pub async fn start_database(&self) {
        self.admin(&format!(
            "ALTER DATABASE {} WITH ALLOW_CONNECTIONS true",
            self.db_name
        ))
        .await;
    }

    /// (pending, ack pending) of the intake consumer: both 0 when everything was settled.
    pub async fn consumer_backlog(&self) -> (u64, usize) {
        let stream = self
            .broker
            .jetstream
            .get_stream(self.broker.names.commands_stream())
            .await
            .unwrap();
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = stream
            .get_consumer(&self.settings.intake.consumer)
            .await
            .unwrap();
        let info = consumer.info().await.unwrap();
        (info.num_pending, info.num_ack_pending)
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let db_name = self.db_name.clone();
        let names = [
            self.broker.names.commands_stream(),
            self.broker.names.events_stream(),
            self.broker.names.dlq_stream(),
        ];
        let nats_url = self.settings.nats_url.clone();
        // Drop runs inside the test's runtime, which is blocked meanwhile: clean up on a
        // thread with its own runtime and its own connections.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok(client) = async_nats::connect(&nats_url).await {
                    let jetstream = async_nats::jetstream::new(client);
                    for name in names {
                        let _ = jetstream.delete_stream(name).await;
                    }
                }
                if let Ok(pool) = sqlx::PgPool::connect(&format!("{}/postgres", server_url())).await
                {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {db_name} WITH (FORCE)"))
                        .execute(&pool)
                        .await;
                }
            });
        })
        .join();
    }
}

/// A valid ChargePayment body for `attempt`, with fields overridden by `patch`.
pub fn command(attempt: Uuid, patch: serde_json::Value) -> serde_json::Value {
    let mut body = serde_json::json!({
        "payment_attempt_id": attempt,
        "order_id": "ord_1001",
        "customer_id": "cus_42",
        "amount_minor": 1999,
        "currency": "EUR",
        "payment_method": "pm_card_visa",
        "description": "Order ord_1001",
        "requested_at": time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap(),
    });
    for (k, v) in patch.as_object().unwrap() {
        if v.is_null() {
            body.as_object_mut().unwrap().remove(k);
        } else {
            body[k] = v.clone();
        }
    }
    body
}

/// The value of a header on a stream message.
pub fn header(
    message: &async_nats::jetstream::message::StreamMessage,
    name: &str,
) -> Option<String> {
    message.headers.get(name).map(|v| v.as_str().to_owned())
}
