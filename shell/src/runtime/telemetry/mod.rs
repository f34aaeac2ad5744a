//! Tracing setup: the process-wide `tracing` subscriber, log lines that carry trace IDs, and
//! OTLP span export when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
//!
//! # Why this module
//!
//! The operator's work is already cut into spans: one per reconcile (`reconcile`, with the
//! proxy key in the `proxy` field, in `controller.rs`) and one per provider operation
//! (`provider`, in `providers/metered.rs`). This module makes those spans useful:
//!
//! * **Every span gets an OpenTelemetry trace ID and span ID**, always, whether or not anything
//!   is exported. A [`tracing_opentelemetry`] layer backed by an `opentelemetry_sdk` tracer
//!   provider assigns them. Without an OTLP endpoint the provider has *no* span processor and
//!   samples everything out (`Sampler::AlwaysOff`): the SDK still mints and propagates IDs
//!   for sampled-out spans (children inherit their parent's trace ID), but records no
//!   attributes or events and hands nothing to an exporter. So a reconcile's log lines share
//!   one trace ID even on a cluster with no collector.
//! * **Every log line logged inside a span carries `trace_id` (32 hex digits) and `span_id`
//!   (16 hex digits)** of the innermost span: top-level keys in [`LogFormat::Json`], a
//!   ` trace_id=… span_id=…` suffix in [`LogFormat::Text`]. When spans are exported these are
//!   the IDs of the exported spans, so a log line leads straight to its trace.
//! * **A JSON line is valid JSON with each key once** (`telemetry/json_line.rs`): a field
//!   named like the message, or like a span's `name`, is kept under a numbered key, not
//!   written twice.
//! * **OTLP export only when configured.** When `OTEL_EXPORTER_OTLP_ENDPOINT` (or the
//!   traces-specific `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and not empty, and
//!   `OTEL_SDK_DISABLED` is not `true`, spans are exported over OTLP/HTTP with service name
//!   `proxy-operator` (unless `OTEL_SERVICE_NAME` says otherwise). When it is not set, no
//!   exporter, HTTP client or background thread is built.
//!
//! # Export choices
//!
//! * **Transport: OTLP over HTTP** (`<endpoint>/v1/traces`, the collector's port 4318), with
//!   the body encoding taken from `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default,
//!   or `http/json`). gRPC is not compiled in: tonic would bring its own TLS stack, and the
//!   workspace keeps to one rustls crypto provider (aws-lc-rs); two providers in one binary
//!   make `kube::Client::try_default()` panic.
//! * **Batch span processor on its own thread**, with the *blocking* reqwest client. The SDK's
//!   batch processor runs a dedicated background thread (it needs no async runtime), so spans
//!   are queued in memory on the reconcile's path and sent in batches off it. The simple
//!   (synchronous) processor would do an HTTP request on a tokio worker at every span end,
//!   and the async reqwest client would need a tokio runtime on the processor's thread; the
//!   blocking client brings its own. Standard `OTEL_BSP_*` variables tune the batching.
//! * **Flush at exit:** [`TelemetryGuard`] shuts the tracer provider down when dropped, which
//!   exports the spans still queued. Keep it alive until the end of `main`'s work, and drop it
//!   outside async code (the shutdown blocks for up to the exporter's timeout).
//!
//! Sampling follows the SDK defaults (`OTEL_TRACES_SAMPLER`, else parent-based always-on).
//! The filter is `RUST_LOG` (default `info,kube=warn`) and applies to logs and spans alike.

mod json_line;

use std::io::IsTerminal;

use opentelemetry::trace::{SpanContext, TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::SpanExporter;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, MakeWriter};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, fmt};

/// The service name spans are exported under (unless `OTEL_SERVICE_NAME` is set).
pub const SERVICE_NAME: &str = "proxy-operator";

/// The `RUST_LOG` filter used when the variable is unset or invalid.
pub const DEFAULT_FILTER: &str = "info,kube=warn";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, for log collectors; lines inside a span carry top-level
    /// `trace_id` and `span_id` keys.
    Json,
    /// Human-readable lines (no colours), inside a span ending with
    /// ` trace_id=<32 hex> span_id=<16 hex>`.
    Text,
}

impl LogFormat {
    /// [`LogFormat::Text`] when standard output is a terminal, [`LogFormat::Json`] otherwise
    /// (in a pod, where a log collector reads the lines).
    pub fn detect() -> Self {
        if std::io::stdout().is_terminal() {
            LogFormat::Text
        } else {
            LogFormat::Json
        }
    }
}

/// Keeps the tracer provider of [`init`] alive; dropping it flushes the spans not yet
/// exported and shuts the exporter down, so hold it until the process's work is done.
#[derive(Debug)]
#[must_use = "dropping the guard shuts span export down"]
pub struct TelemetryGuard {
    provider: SdkTracerProvider,
    exporting: bool,
}

impl TelemetryGuard {
    /// Whether spans are exported over OTLP (an endpoint was configured and its exporter built).
    pub fn is_exporting(&self) -> bool {
        self.exporting
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown() {
            // The subscriber may be the one reporting it; stderr is the one place sure to work.
            eprintln!("proxy-operator: flushing spans at exit: {error}");
        }
    }
}

/// Installs the process-wide subscriber, writing log lines to standard output.
/// See the [module documentation](self) for what it sets up.
pub fn init(format: LogFormat) -> TelemetryGuard {
    init_with_writer(format, std::io::stdout)
}

/// [`init`], writing log lines to `writer` instead of standard output (tests capture them).
///
/// If a global subscriber is already installed, the existing one stays and a note goes to
/// standard error; the returned guard still owns (and on drop shuts down) the new provider.
pub fn init_with_writer<W>(format: LogFormat, writer: W) -> TelemetryGuard
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let mut export_error = None;
    let exporter = if otlp_configured() {
        match SpanExporter::builder().with_http().build() {
            Ok(exporter) => Some(exporter),
            Err(error) => {
                export_error = Some(error);
                None
            }
        }
    } else {
        None
    };
    let exporting = exporter.is_some();

    let builder = SdkTracerProvider::builder().with_resource(resource());
    let provider = match exporter {
        Some(exporter) => builder.with_batch_exporter(exporter).build(),
        // No processor, nothing recorded: the tracer only mints the IDs the logs carry.
        None => builder.with_sampler(Sampler::AlwaysOff).build(),
    };
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(SERVICE_NAME))
        // Source locations and thread names are span attributes, useless when nothing is exported.
        .with_location(exporting)
        .with_threads(exporting);

    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let (json, text) = match format {
        LogFormat::Json => (
            Some(
                fmt::layer()
                    .json()
                    .event_format(json_line::JsonLine)
                    .with_writer(writer),
            ),
            None,
        ),
        LogFormat::Text => (
            None,
            Some(
                fmt::layer()
                    .with_ansi(false)
                    .event_format(WithTraceIds(fmt::format().with_ansi(false)))
                    .with_writer(writer),
            ),
        ),
    };
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(otel)
        .with(json)
        .with(text)
        .try_init();
    if let Err(error) = installed {
        eprintln!("proxy-operator: tracing subscriber not installed: {error}");
    }
    if let Some(error) = export_error {
        tracing::warn!(%error, "OTLP endpoint set but its exporter could not be built; spans are not exported");
    }
    TelemetryGuard {
        provider,
        exporting,
    }
}

/// Whether the environment asks for OTLP export.
fn otlp_configured() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|value| !value.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED")
        .is_ok_and(|value| value.trim().eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The exported resource: the SDK's (which reads `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES`), with service name [`SERVICE_NAME`] unless one was given.
fn resource() -> Resource {
    let builder = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_ok_and(|name| !name.is_empty()) {
        builder.build()
    } else {
        builder.with_service_name(SERVICE_NAME).build()
    }
}

/// A text event formatter adding the trace ID and span ID of the event's innermost span to
/// the line `inner` formats.
#[derive(Debug)]
struct WithTraceIds<F>(F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let Some(ids) = event_span_context(ctx) else {
            return self.0.format_event(ctx, writer, event);
        };
        // The inner format ends the line with `\n`: format into a buffer and add the IDs
        // before that end.
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.trim_end_matches('\n');
        writeln!(
            writer,
            "{body} trace_id={} span_id={}",
            ids.trace_id(),
            ids.span_id()
        )
    }
}

/// The OpenTelemetry span context of the innermost span the event belongs to (its explicit
/// parent, else the current span), if it is in one with valid IDs.
fn event_span_context<S, N>(ctx: &FmtContext<'_, S, N>) -> Option<SpanContext>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    let id = ctx.event_scope()?.next()?.id();
    // The OpenTelemetry layer keeps the span's context in the registry; it is reached through
    // the dispatcher currently dispatching this event (ours).
    let cx = tracing::dispatcher::get_default(|dispatch| {
        tracing_opentelemetry::get_otel_context(&id, dispatch)
    })?;
    let span_context = cx.span().span_context().clone();
    span_context.is_valid().then_some(span_context)
}
