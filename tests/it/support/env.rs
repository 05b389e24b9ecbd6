//! The intake-side world of one test: its own PostgreSQL database and its own JetStream
//! namespace (streams and subjects), both connected at once and removed when the `TestEnv`
//! drops. Intake settings are shortened so that redeliveries happen within the test.
#![allow(dead_code)]

use std::time::Duration;

use time::OffsetDateTime;

use super::record_batch;
use async_nats::HeaderMap;
use onecharge::broker::Broker;
use onecharge::broker::CommandKind;
use onecharge::config::Settings;
use onecharge::domain::{Actor, PaymentAttemptId, RefundId};
use onecharge::intake::{DlqClass, Intake};
use onecharge::operator::resolve::{resolve, ResolveError, ResolveRequest, Resolved};
use onecharge::operator::{RetryWindow, Via};
use onecharge::store::intake::{IntakeRecord, Recorded};
use onecharge::store::Store;
use serde_json::Value;
use uuid::Uuid;

use super::command::{command, intake_record};
use super::nats::{commands_stream, stream_messages};
use super::process::run_onecharge;
use super::throwaway::{own_settings, ThrowawayDatabase, ThrowawayNamespace};

/// The operator (`USER`) as whom [`TestEnv::cli`] runs onecharge: what manual actions
/// record as their actor.
pub const OPERATOR: &str = "test-operator";

pub struct TestEnv {
    pub settings: Settings,
    pub store: Store,
    pub broker: Broker,
    pub db_name: String,
    // Dropped last, in this order: the streams, then the database.
    namespace: ThrowawayNamespace,
    database: ThrowawayDatabase,
}

impl TestEnv {
    pub async fn new() -> Self {
        Self::with_settings(|_| {}).await
    }

    /// A fresh database and namespace; `adjust` may change settings before anything connects.
    pub async fn with_settings(adjust: impl FnOnce(&mut Settings)) -> Self {
        // The tests' own reqwest clients need the process's rustls provider, as onecharge's do.
        onecharge::config::tls::install_crypto_provider();
        let (database, mut settings) = own_settings("t");
        settings.admin_addr = "127.0.0.1:0".parse().unwrap();
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
        let namespace = ThrowawayNamespace::new(&settings.nats_url, &broker.names);
        broker.ensure_streams().await.expect("streams");
        Self {
            settings,
            store,
            broker,
            db_name: database.name().to_owned(),
            namespace,
            database,
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
        self.publish_to(self.broker.names.charge_subject(), headers, body)
            .await
    }

    /// Publishes `body` with exactly `headers` to `subject`; returns the stream sequence.
    pub async fn publish_to(&self, subject: String, headers: HeaderMap, body: &[u8]) -> u64 {
        self.broker
            .jetstream
            .publish_with_headers(subject, headers, body.to_vec().into())
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

    /// Publishes the unchanged [`command`] of a new attempt under `message_id`; its id.
    pub async fn publish_new(&self, message_id: &str) -> Uuid {
        let attempt = Uuid::new_v4();
        self.publish(message_id, &command(attempt, serde_json::json!({})))
            .await;
        attempt
    }

    /// Every message on this namespace's dead-letter stream, in order.
    pub async fn dead_letters(&self) -> Vec<async_nats::jetstream::message::StreamMessage> {
        stream_messages(&self.broker.jetstream, &self.broker.names.dlq_stream()).await
    }

    /// Deletes this namespace's dead-letter stream: every dead-letter publish fails until
    /// `broker.ensure_streams()` makes it again.
    pub async fn delete_dead_letter_stream(&self) {
        self.broker
            .jetstream
            .delete_stream(self.broker.names.dlq_stream())
            .await
            .expect("delete the dead-letter stream");
    }

    /// Every message on this namespace's events stream, in order.
    pub async fn event_messages(&self) -> Vec<async_nats::jetstream::message::StreamMessage> {
        stream_messages(&self.broker.jetstream, &self.broker.names.events_stream()).await
    }

    /// Decides an attempt in review as `actor` would through `via`, now, within the
    /// configured retry window.
    pub async fn resolve(
        &self,
        id: impl Into<PaymentAttemptId>,
        request: &ResolveRequest,
        actor: &str,
        via: Via,
    ) -> Result<Resolved, ResolveError> {
        // The §3 gateway has no object to cancel; a Stripe attempt's decline would need one.
        resolve(
            &self.store,
            None,
            id.into(),
            request,
            &Actor::person(actor),
            via,
            &RetryWindow::from_settings(&self.settings),
        )
        .await
    }

    /// Publishes `attempt`'s command with an invalid currency as `message_id` and runs one
    /// batch of `intake`, which dead-letters it as invalid; returns the dead letter's sequence.
    pub async fn dead_letter_invalid(
        &self,
        intake: &Intake,
        message_id: &str,
        attempt: Uuid,
    ) -> u64 {
        self.publish(
            message_id,
            &command(attempt, serde_json::json!({"currency": "EURO"})),
        )
        .await;
        let report = intake.process_batch(Duration::from_secs(5)).await.unwrap();
        assert_eq!(report.dead_lettered, vec![DlqClass::Invalid]);
        self.dead_letters().await[0].sequence
    }

    /// Records `records` in one batch as the intake consumer does, now.
    pub async fn record(&self, records: &[IntakeRecord]) -> Vec<Recorded> {
        record_batch(&self.store, "onecharge-intake", records)
            .await
            .expect("recorded")
    }

    /// Records one fresh attempt of [`command`] with `patch` (message id `m-<id>`, with
    /// `correlation_id`) as intake does; returns its id.
    pub async fn record_command(&self, patch: Value, correlation_id: Option<&str>) -> Uuid {
        let id = Uuid::new_v4();
        let body = command(id, patch);
        self.record(&[intake_record(&body, &format!("m-{id}"), correlation_id)])
            .await;
        id
    }

    /// A succeeded attempt of `order_id` and `customer_id` (19.99 EUR, charge `ch_<order>`),
    /// recorded as intake records it and moved to `succeeded` as the executor would.
    pub async fn succeeded_attempt(&self, order_id: &str, customer_id: &str) -> Uuid {
        let id = self
            .record_command(
                serde_json::json!({"order_id": order_id, "customer_id": customer_id}),
                None,
            )
            .await;
        use super::records::Records as _;
        self.set_attempt(
            id,
            &format!(
                "status = 'succeeded', gateway_charge_id = 'ch_{order_id}', tries = 1,
                 first_dispatched_at = now() - interval '1 hour'"
            ),
        )
        .await;
        id
    }

    /// Records a refund command of `attempt` (`amount_minor`, or the rest) as the refund
    /// intake does, under the message id `m-<refund_id>`; returns the refund's id.
    pub async fn record_refund(&self, attempt: Uuid, amount_minor: Option<i64>) -> RefundId {
        let refund_id = RefundId::random();
        let record = super::command::refund_record(refund_id, attempt, amount_minor);
        let recorded = onecharge::store::refunds::record_refund(
            &self.store,
            &CommandKind::Refund.consumer_name(&self.settings.intake),
            &record,
        )
        .await
        .expect("the refund is recorded");
        assert_eq!(
            recorded,
            onecharge::store::refunds::RecordedRefund::Accepted
        );
        refund_id
    }

    /// The refund intake of this namespace (its own consumer on the command stream).
    pub async fn refund_intake(&self) -> Intake {
        Intake::for_kind(
            self.store.clone(),
            self.broker.clone(),
            &self.settings,
            CommandKind::Refund,
        )
        .await
        .expect("the refund intake binds its consumer")
    }

    /// Runs the refund intake until a batch brings nothing; how many it recorded.
    pub async fn take_in_refunds(&self) -> usize {
        let intake = self.refund_intake().await;
        let mut processed = 0;
        loop {
            let report = intake
                .process_batch(Duration::from_secs(1))
                .await
                .expect("a refund batch");
            if report.outcomes.is_empty() {
                return processed;
            }
            processed += report.count("processed");
        }
    }

    /// The refund worker's first step: admits every due waiting refund whose attempt is
    /// final, reserving its amount (or refuses it with its reason).
    pub async fn admit_refunds(
        &self,
    ) -> Vec<(RefundId, onecharge::store::refunds::RefundAdmission)> {
        onecharge::store::refunds::admit_due(
            &self.store,
            &Actor::Executor("test-refunds".into()),
            100,
            self.settings.refunds.max_wait,
            self.settings.refunds.recheck_interval,
        )
        .await
        .expect("refunds admitted")
    }

    /// Runs SQL as an administrator of the server (not inside the test database's pool).
    pub async fn admin(&self, sql: &str) {
        self.database.admin(sql).await;
    }

    /// Makes the test database refuse connections and cuts the open ones: an outage.
    pub async fn stop_database(&self) {
        self.database.refuse_connections().await;
    }

    /// Ends the outage of [`TestEnv::stop_database`].
    pub async fn start_database(&self) {
        self.database.allow_connections().await;
    }

    /// Runs the built `onecharge` binary (see [`onecharge`]) against this test's database
    /// and namespace as [`OPERATOR`], with `RUST_LOG=warn` and `extra_env`; returns its exit
    /// code, stdout and stderr.
    pub async fn cli(&self, args: &[&str], extra_env: &[(&str, &str)]) -> (i32, String, String) {
        let env = [&[("USER", OPERATOR)], extra_env].concat();
        run_onecharge(&self.settings, args, &env).await
    }

    /// Runs `args` through [`TestEnv::cli`], which must exit 0, and reads its stdout as one
    /// JSON document (what `--json` prints).
    pub async fn cli_json<T: serde::de::DeserializeOwned>(&self, args: &[&str]) -> T {
        let (code, stdout, stderr) = self.cli(args, &[]).await;
        assert_eq!(code, 0, "{args:?}: {stderr}");
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"))
    }

    /// `onecharge attempts resolve <id> --as <as_> --reason <reason>` through [`TestEnv::cli`].
    pub async fn cli_resolve(&self, id: &str, as_: &str, reason: &str) -> (i32, String, String) {
        self.cli(
            &["attempts", "resolve", id, "--as", as_, "--reason", reason],
            &[],
        )
        .await
    }

    /// (pending, ack pending) of the intake consumer: both 0 when everything was settled.
    pub async fn consumer_backlog(&self) -> (u64, usize) {
        let stream = commands_stream(&self.broker).await;
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = stream
            .get_consumer(&self.settings.intake.consumer)
            .await
            .unwrap();
        let info = consumer.info().await.unwrap();
        (info.num_pending, info.num_ack_pending)
    }
}

/// Whether this run is CI's (`CI` set, and not `false` or `0`), where a tool a test needs
/// and does not find (localstripe, chromium) is a failure, not a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}
