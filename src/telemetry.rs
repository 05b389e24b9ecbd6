//! Where onecharge's logs and spans go: human or JSON lines on stderr, every one scrubbed
//! of the configuration's secrets, and spans over OTLP/HTTP when `otlp_endpoint` is set.
//! Set up once per process, by `cli::run`, before anything logs.

use crate::config::{ConfigError, LogFormat, Redactor, Settings};

/// Human or JSON log lines on stderr, filtered by `RUST_LOG` (default `info`);
/// `quiet` lowers the default to warnings. Spans go to `settings.otlp_endpoint` over
/// OTLP/HTTP when it is set. Keep the returned guard until the process ends: dropping it
/// flushes the spans still waiting in the batch.
pub fn init_logging(settings: &Settings, quiet: bool) -> Result<Telemetry, ConfigError> {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::{propagation::TraceContextPropagator, trace::SdkTracerProvider};
    use tracing_subscriber::{fmt, layer::SubscriberExt as _, util::SubscriberInitExt as _};
    use tracing_subscriber::{EnvFilter, Layer as _};
    let default = if quiet {
        "warn"
    } else {
        "info,async_nats=warn,sqlx=warn"
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Every line passes through the redactor: libraries log URLs and connection options
    // (with their passwords) at debug and trace levels.
    let stderr = RedactingStderr(std::sync::Arc::new(Redactor::from_settings(settings)));
    let lines = match settings.log_format {
        // Colour only for a person at a terminal: lines written to a file or a pipe (a
        // supervisor's log, `demo … 2> out.txt`) carry no escape codes.
        LogFormat::Human => fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(stderr)
            .boxed(),
        // Every line carries the fields of the span it was logged in and of its parents:
        // message, correlation and causation ids and the payment attempt id where one exists.
        LogFormat::Json => fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(stderr)
            .boxed(),
    };
    // Spans always get real W3C trace and span ids, so a producer's `traceparent` becomes
    // the parent of the delivery span. Without an endpoint nothing leaves the process.
    let mut provider = SdkTracerProvider::builder();
    if let Some(endpoint) = &settings.otlp_endpoint {
        provider = provider.with_batch_exporter(otlp_span_exporter(endpoint)?);
    }
    let provider = provider.build();
    let traces = tracing_opentelemetry::layer().with_tracer(provider.tracer("onecharge"));
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let _ = tracing_subscriber::registry()
        .with(lines)
        .with(traces)
        .with(filter)
        .try_init();
    Ok(Telemetry { provider })
}

/// Log output to stderr with the configuration's secrets replaced: each log line is
/// collected whole, scrubbed, then written at once.
#[derive(Clone)]
struct RedactingStderr(std::sync::Arc<Redactor>);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactingStderr {
    type Writer = RedactedLine;

    fn make_writer(&'a self) -> Self::Writer {
        RedactedLine {
            redactor: self.0.clone(),
            line: Vec::new(),
        }
    }
}

/// One log line in the making; written to stderr, scrubbed, when dropped.
struct RedactedLine {
    redactor: std::sync::Arc<Redactor>,
    line: Vec<u8>,
}

impl std::io::Write for RedactedLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactedLine {
    fn drop(&mut self) {
        use std::io::Write as _;
        let text = String::from_utf8_lossy(&self.line);
        let _ = std::io::stderr().write_all(self.redactor.scrub(&text).as_bytes());
    }
}

/// An OTLP/HTTP (protobuf) exporter posting to `<endpoint>/v1/traces`, as the
/// `OTEL_EXPORTER_OTLP_ENDPOINT` convention does. The blocking client suits the batch
/// processor, which exports from its own thread rather than from the tokio runtime.
fn otlp_span_exporter(endpoint: &str) -> Result<opentelemetry_otlp::SpanExporter, ConfigError> {
    use opentelemetry_otlp::{Protocol, WithExportConfig as _};
    // Its reqwest client takes the process's rustls provider.
    crate::config::tls::install_crypto_provider();
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
        .build()
        .map_err(|err| ConfigError(format!("otlp_endpoint (ONECHARGE_OTLP_ENDPOINT): {err}")))
}

/// Owns the tracer provider. The global subscriber keeps the provider alive for ever, so
/// it never shuts down by itself; dropping this guard does, exporting the spans still
/// batched (best effort: an unreachable collector loses them, the process exits anyway).
#[must_use = "dropping the guard at once stops span export"]
pub struct Telemetry {
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}
