//! OpenTelemetry traces: the OTLP/HTTP exporter, started only when the
//! standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) is set,
//! and the helpers the spans need (the parent from a W3C `traceparent`, the
//! trace context injected into an upstream request, a failure's
//! `error.type`).
//!
//! Every span meant for export has the target [`TARGET`], which only the
//! OpenTelemetry layer enables: with telemetry off no layer wants it, so
//! `tracing` disables its callsites and creating one costs a relaxed atomic
//! load. The helpers here do nothing for a disabled span.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry_otlp::WithHttpConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The target of every span that is exported, and of nothing else.
pub const TARGET: &str = "carte::otel";

/// How long one export may take (the OTLP default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the exit waits for the last spans to go out.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// The running exporter: its layer for the subscriber, and the flush at exit.
pub struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// The exporter, if the environment asks for one: an OTLP endpoint is
    /// set, `OTEL_SDK_DISABLED` is not `true` and `OTEL_TRACES_EXPORTER` is
    /// not `none`. The exporter reads the rest of the standard variables
    /// (protocol, headers, batching, resource attributes).
    pub fn from_env() -> Result<Option<Tracing>, String> {
        let set = |name: &str| std::env::var(name).is_ok_and(|value| !value.trim().is_empty());
        let is = |name: &str, value: &str| std::env::var(name).is_ok_and(|set| set.trim().eq_ignore_ascii_case(value));
        if !(set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
            || is("OTEL_SDK_DISABLED", "true")
            || is("OTEL_TRACES_EXPORTER", "none")
        {
            return Ok(None);
        }
        let client = OtlpClient::new().map_err(|err| format!("cannot start the OTLP client: {err}"))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .build()
            .map_err(|err| format!("cannot start the OTLP exporter: {err}"))?;
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource()).build();
        Ok(Some(Tracing { provider }))
    }

    /// The layer that turns spans of [`TARGET`] into OpenTelemetry spans (and no others).
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        let tracer = self.provider.tracer("carte");
        let only_ours = tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::TRACE);
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_level(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(only_ours)
    }

    /// Sends the spans still queued, waiting at most a few seconds.
    pub fn shutdown(self) {
        if let Err(err) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::warn!("traces: the last spans may not have been sent: {err}");
        }
    }
}

/// `service.name` from `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES`,
/// else `carte`; `service.version` is carte's.
fn resource() -> opentelemetry_sdk::Resource {
    let from_env = opentelemetry_sdk::Resource::builder().build();
    let named = from_env
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    let builder = opentelemetry_sdk::Resource::builder()
        .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if named { builder.build() } else { builder.with_service_name("carte").build() }
}

/// The OTLP exporter's HTTP client: carte's reqwest (rustls), blocking, as
/// the batch processor exports from its own thread. It says in the log when
/// the collector stops taking spans (they are dropped, not kept) and when it
/// takes them again.
#[derive(Debug)]
struct OtlpClient {
    client: reqwest::blocking::Client,
    /// While exports fail: when that was last said (`None` while they work).
    failing: Mutex<Option<Instant>>,
}

/// While exports keep failing, the warning is repeated this often.
const WARN_AGAIN_AFTER: Duration = Duration::from_secs(300);

impl OtlpClient {
    fn new() -> Result<OtlpClient, reqwest::Error> {
        // Fails only if a provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::blocking::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("carte/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(OtlpClient { client, failing: Mutex::new(None) })
    }

    /// One export: the collector's answer, its body read up to a bound.
    fn exchange(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<opentelemetry_http::Response<opentelemetry_http::Bytes>, opentelemetry_http::HttpError> {
        use std::io::Read as _;
        // Without the URL: its query or user part may hold a key.
        let mut response = self.client.execute(request.try_into()?).map_err(reqwest::Error::without_url)?;
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        let mut body = Vec::new();
        response.take(MAX_ANSWER_BYTES).read_to_end(&mut body)?;
        let mut answer = opentelemetry_http::Response::builder().status(status).body(body.into())?;
        *answer.headers_mut() = headers;
        Ok(answer)
    }

    /// Logs a change: exports started failing (`problem`), still fail
    /// (again after [`WARN_AGAIN_AFTER`]), or work again (`None`).
    fn tell(&self, problem: Option<String>) {
        let mut failing = crate::sync::lock(&self.failing);
        match (problem, *failing) {
            (None, None) => {}
            (None, Some(_)) => {
                *failing = None;
                tracing::info!("traces: the collector takes spans again");
            }
            (Some(problem), Some(said)) if said.elapsed() < WARN_AGAIN_AFTER => {
                tracing::debug!("traces: an export failed: {problem}");
            }
            (Some(problem), _) => {
                *failing = Some(Instant::now());
                tracing::warn!("traces: the collector did not take a batch of spans, which are dropped: {problem}");
            }
        }
    }
}

/// A collector's answer is read up to this size (the answer to an export is small).
const MAX_ANSWER_BYTES: u64 = 64 * 1024;

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OtlpClient {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<opentelemetry_http::Response<opentelemetry_http::Bytes>, opentelemetry_http::HttpError> {
        let answer = self.exchange(request);
        match &answer {
            Ok(response) if response.status().is_success() => self.tell(None),
            Ok(response) => self.tell(Some(format!("it answered {}", response.status()))),
            Err(err) => {
                let (outer, cause) = (err.to_string(), crate::diag::innermost(err.as_ref()));
                let problem = if cause == outer { outer } else { format!("{outer}: {cause}") };
                self.tell(Some(problem))
            }
        }
        answer
    }
}

/// `filter` (what is logged) letting the spans of [`TARGET`] through only
/// while traces are `on`: off, their callsites are disabled and creating one
/// costs nothing. (The log lines' own layer leaves them out either way.)
pub fn gate(filter: tracing_subscriber::EnvFilter, on: bool) -> tracing_subscriber::EnvFilter {
    let spans = if on { "info" } else { "off" };
    match format!("{TARGET}={spans}").parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

/// Makes the W3C trace context `traceparent` (with `tracestate`) the parent
/// of `span`; a missing or malformed one leaves `span` a root.
pub fn set_parent(span: &Span, traceparent: Option<&str>, tracestate: Option<&str>) {
    let Some(traceparent) = traceparent else { return };
    if span.is_disabled() {
        return;
    }
    let mut carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    if let Some(tracestate) = tracestate {
        carrier.insert("tracestate".to_owned(), tracestate.to_owned());
    }
    let parent = TraceContextPropagator::new().extract(&carrier);
    // Fails only once the span has started, which it has not.
    let _ = span.set_parent(parent);
}

/// Writes `span`'s trace context into `headers` (`traceparent`,
/// `tracestate`), for the upstream to continue the trace.
pub fn inject(span: &Span, headers: &mut reqwest::header::HeaderMap) {
    if span.is_disabled() {
        return;
    }
    TraceContextPropagator::new().inject_context(&span.context(), &mut opentelemetry_http::HeaderInjector(headers));
}

/// Marks `span` failed: its `error.type` and an error status (`error_type`
/// is made text only for a span that is enabled).
pub fn failed(span: &Span, error_type: impl std::fmt::Display) {
    if span.is_disabled() {
        return;
    }
    let error_type = error_type.to_string();
    span.set_attribute("error.type", error_type.clone());
    span.set_status(Status::error(error_type));
}

/// Sets one attribute of `span` (nothing if it is disabled).
pub fn attribute(span: &Span, key: &'static str, value: impl Into<opentelemetry::Value>) {
    if !span.is_disabled() {
        span.set_attribute(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_of_the_target_are_off_without_the_layer() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let logs = tracing_subscriber::EnvFilter::new("trace");
        let subscriber = tracing_subscriber::registry().with(gate(logs, false));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: TARGET, "tools/call");
            assert!(span.is_disabled());
            // The helpers accept a disabled span and do nothing.
            set_parent(&span, Some("00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"), None);
            let mut headers = reqwest::header::HeaderMap::new();
            inject(&span, &mut headers);
            assert!(headers.is_empty());
        });
    }

    #[test]
    fn the_parent_comes_from_traceparent_and_goes_upstream() {
        let provider = SdkTracerProvider::builder().build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        let subscriber = tracing_subscriber::layer::SubscriberExt::with(
            tracing_subscriber::registry(),
            gate(tracing_subscriber::EnvFilter::new("warn"), true),
        );
        let subscriber = tracing_subscriber::layer::SubscriberExt::with(subscriber, layer);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: TARGET, "tools/call");
            assert!(!span.is_disabled());
            set_parent(&span, Some("00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"), Some("k=v"));
            let mut headers = reqwest::header::HeaderMap::new();
            inject(&span, &mut headers);
            let sent = headers.get("traceparent").and_then(|value| value.to_str().ok()).unwrap_or_default();
            assert!(sent.starts_with("00-0af7651916cd43dd8448eb211c80319c-"), "{sent}");
            assert!(!sent.contains("00f067aa0ba902b7"), "the upstream's parent is this span, not the caller: {sent}");
            assert_eq!(headers.get("tracestate").and_then(|value| value.to_str().ok()), Some("k=v"));
        });
    }
}
