//! OpenTelemetry trace export (`[tracing]`, docs/tracing.md): the tracer
//! provider and the `tracing` layer that turns idemgate's delivery spans
//! into OpenTelemetry spans and ships them to an OTLP/HTTP collector.
//!
//! Owns the one rule export must keep: **it never fails or slows a
//! request**. Finished spans go into a bounded queue ([`queue`]) that a
//! background thread drains; when the queue is full, or the collector
//! refuses or is unreachable, spans are dropped and counted in
//! `idemgate_trace_spans_dropped_total` (label `reason`), never waited
//! for. The SDK's own `BatchSpanProcessor` also drops on a full queue, but
//! only logs the count at shutdown, so the queue here is ours.
//!
//! Also owns who the spans say sent them ([`resource`]: `service.name`,
//! `service.version`, `service.instance.id`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_SERVICE_NAME`) and what the exporter reads from the environment:
//! `OTEL_EXPORTER_OTLP_HEADERS` (or `OTEL_EXPORTER_OTLP_TRACES_HEADERS`),
//! sent with every export, e.g. a collector's token. The endpoint, the
//! timeout and the protocol (http/protobuf) are idemgate's; the `OTEL_*`
//! variables for those are ignored.
//!
//! The spans themselves (names, attributes, links) are made by
//! `crate::pipeline::trace` (HTTP server and client spans) and
//! `crate::store` (Redis spans), by the OpenTelemetry semantic
//! conventions; only spans of target [`TARGET`] reach the layer, and the
//! log lines never show them. When tracing is off no layer is installed,
//! [`TARGET`] is filtered out at its callsites, and a disabled span costs
//! what `tracing` charges for one (an interest check).

mod http;
mod queue;
mod resource;

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

use crate::config::Tracing;

pub use queue::{QueueProcessor, QueueSettings};

/// The `tracing` target of every span exported as OpenTelemetry.
pub const TARGET: &str = "idemgate::otel";

/// Counter: finished spans that were not exported, by `reason`
/// (`queue_full`, `export_failed`).
pub const SPANS_DROPPED_TOTAL: &str = "idemgate_trace_spans_dropped_total";

/// How long one export (one POST to the collector) may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// Most a shutdown waits for the last spans to be exported.
pub const SHUTDOWN_FLUSH_BOUND: Duration = Duration::from_secs(5);

/// Why trace export could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter refused its configuration.
    #[error("building the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// The export thread could not be started.
    #[error("starting the trace export thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// A running trace export. Dropping it (or [`Telemetry::shutdown`])
/// exports what is queued, waiting at most [`SHUTDOWN_FLUSH_BOUND`].
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Starts export to `config`'s collector: the export thread, the
    /// sampler (parent-based, `sampling_ratio` for new traces) and the
    /// resource ([`resource`]). The exporter adds the headers of
    /// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`,
    /// to every export (read once, here).
    pub fn start(config: &Tracing) -> Result<Self, TelemetryError> {
        let resource = resource::resource(config.service_name.as_deref());
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            // The only encoding built in: OTEL_EXPORTER_OTLP_PROTOCOL is not
            // to pick another.
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(config.traces_url())
            .with_timeout(EXPORT_TIMEOUT)
            .with_http_client(http::Client::new(EXPORT_TIMEOUT))
            .build()?;
        opentelemetry_sdk::trace::SpanExporter::set_resource(&mut exporter, &resource);
        let processor = QueueProcessor::start(exporter, QueueSettings::new(config.queue_size))?;
        let sampler =
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sampling_ratio)));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler)
            .with_resource(resource)
            .build();
        Ok(Self { provider })
    }

    /// The layer to install beside the log layer: it sees only spans of
    /// target [`TARGET`].
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("idemgate"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(Targets::new().with_target(TARGET, tracing::Level::TRACE))
    }

    /// Exports what is queued (waiting at most [`SHUTDOWN_FLUSH_BOUND`])
    /// and stops the export thread.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown_with_timeout(SHUTDOWN_FLUSH_BOUND) {
            tracing::warn!(%error, "trace export did not finish flushing");
        }
    }
}

/// Why a span was dropped: every `reason` of [`SPANS_DROPPED_TOTAL`].
pub(crate) const DROP_REASONS: [&str; 2] = ["queue_full", "export_failed"];

/// Creates every [`SPANS_DROPPED_TOTAL`] series at 0, so a dashboard or
/// alert reads 0 rather than nothing before the first drop (called by the
/// app when `[tracing]` is on).
pub(crate) fn zero_metrics() {
    for reason in DROP_REASONS {
        metrics::counter!(SPANS_DROPPED_TOTAL, "reason" => reason).increment(0);
    }
}

/// Registers the help text of [`SPANS_DROPPED_TOTAL`].
pub(crate) fn describe() {
    metrics::describe_counter!(
        SPANS_DROPPED_TOTAL,
        "Finished trace spans not exported, by reason (queue_full, export_failed)"
    );
}
