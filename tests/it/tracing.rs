//! Trace continuity: a producer's W3C `traceparent` is the parent of the delivery span, against
//! real PostgreSQL and real NATS, with spans read back from an in-memory OpenTelemetry exporter.

use std::time::Duration;

use crate::support::{command, TestEnv};
use async_nats::HeaderMap;
use onecharge::intake::DeliveryOutcome;
use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt as _;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(5);

// A current-thread runtime (the `tokio::test` default) keeps every task of the batch on this
// thread, where the subscriber below is the default.
#[tokio::test]
async fn a_traceparent_on_a_command_is_the_parent_of_the_delivery_span() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("onecharge-test")));
    let _default = tracing::subscriber::set_default(subscriber);

    let env = TestEnv::new().await;
    let intake = env.intake().await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let producer_span_id = "00f067aa0ba902b7";
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", "m-traced");
    headers.insert("Correlation-Id", "corr-test");
    headers.insert(
        "traceparent",
        format!("00-{trace_id}-{producer_span_id}-01").as_str(),
    );
    let body = serde_json::to_vec(&command(Uuid::new_v4(), json!({}))).unwrap();
    env.publish_to(env.broker.names.charge_subject(), headers, &body)
        .await;

    let report = intake.process_batch(WAIT).await.unwrap();

    assert_eq!(report.outcomes, vec![DeliveryOutcome::Processed]);
    let spans = exporter.get_finished_spans().unwrap();
    let settle: Vec<_> = spans.iter().filter(|s| s.name == "settle").collect();
    assert_eq!(settle.len(), 1, "one delivery span: {spans:#?}");
    assert_eq!(
        settle[0].span_context.trace_id(),
        TraceId::from_hex(trace_id).unwrap()
    );
    assert_eq!(
        settle[0].parent_span_id,
        SpanId::from_hex(producer_span_id).unwrap()
    );
    assert!(settle[0].parent_span_is_remote);
}

/// Log lines written to a pipe or a file are for a person or a log shipper to read, not a
/// terminal to colour: `onecharge setup` logging at debug (its queries, its broker calls)
/// with stderr piped writes no escape byte.
#[tokio::test]
async fn log_lines_written_to_a_pipe_carry_no_colour_codes() {
    let env = TestEnv::new().await;
    let (code, _, stderr) =
        crate::support::process::run_onecharge(&env.settings, &["setup"], &[("RUST_LOG", "debug")])
            .await;

    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("DEBUG"), "some lines were logged: {stderr}");
    let coloured = stderr.lines().find(|line| line.contains('\u{1b}'));
    assert!(
        coloured.is_none(),
        "an escape byte in piped logs: {coloured:?}"
    );
}
