//! Prometheus metrics: one registry for the process, the metrics carte
//! records into it, and the text exposition `/metrics` serves.
//!
//! Recording is cheap and always on: each label set is a small value of
//! `&'static str`s and enums, and a tool's name an `Arc<str>` interned once (see
//! [`tool_label`]), and recording is a read lock on the family plus atomic
//! adds. Label values are bounded: methods and protocol versions map to fixed
//! strings, a tool name the catalog does not have becomes [`UNKNOWN_TOOL`].
//!
//! The numbers the server already keeps (calls in flight, clients connected,
//! the catalog's generation) are not counted twice: [`encode`] takes them as
//! they are at the scrape.
//!
//! Names and buckets follow the MCP semantic conventions of OpenTelemetry
//! (`mcp.server.operation.duration` → `mcp_server_operation_duration_seconds`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The `Content-Type` of what [`encode`] returns (Prometheus text, 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The duration buckets the MCP semantic conventions advise, in seconds.
pub const BUCKETS: [f64; 14] = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// The `gen_ai_tool_name` of a `tools/call` naming a tool the catalog does not have.
pub const UNKNOWN_TOOL: &str = "_unknown";

/// How a request reached carte (`network_transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// stdio.
    Pipe,
    /// Streamable HTTP.
    Tcp,
}

impl EncodeLabelValue for Transport {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let text = match self {
            Transport::Pipe => "pipe",
            Transport::Tcp => "tcp",
        };
        EncodeLabelValue::encode(&text, encoder)
    }
}

/// How a request ended (`error_type`): empty on success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ending {
    /// Answered with a result.
    Answered,
    /// A `tools/call` result with `isError: true`.
    ToolError,
    /// A JSON-RPC error, by code.
    Error(i32),
}

impl EncodeLabelValue for Ending {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        match self {
            Ending::Answered => EncodeLabelValue::encode(&"", encoder),
            Ending::ToolError => EncodeLabelValue::encode(&"tool_error", encoder),
            Ending::Error(code) => EncodeLabelValue::encode(code, encoder),
        }
    }
}

/// The protocol versions carte labels by name; any other is `other`.
const PROTOCOL_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"];

/// `mcp_protocol_version` for `version` (`None`: not negotiated yet): a
/// fixed string, so a client cannot grow the label set.
pub fn protocol_version(version: Option<&str>) -> &'static str {
    match version {
        None => "",
        Some(version) => PROTOCOL_VERSIONS.iter().find(|known| **known == version).copied().unwrap_or("other"),
    }
}

/// The label set of one MCP operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct Operation {
    /// The JSON-RPC method, `tools/call`.
    pub mcp_method_name: &'static str,
    /// The tool of a `tools/call` (see [`tool_label`]); empty for other methods.
    pub gen_ai_tool_name: Option<Arc<str>>,
    /// How it ended.
    pub error_type: Ending,
    /// The protocol version of the request or its session.
    pub mcp_protocol_version: &'static str,
    /// stdio or HTTP.
    pub network_transport: Transport,
}

/// The label set of one session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct Session {
    /// The session's protocol version.
    pub mcp_protocol_version: &'static str,
    /// stdio or HTTP.
    pub network_transport: Transport,
}

/// How a reload ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reload {
    /// The new catalog was swapped in.
    Accepted,
    /// It had errors (or its databases' `setup` failed): the old one stays.
    Rejected,
}

impl EncodeLabelValue for Reload {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let text = match self {
            Reload::Accepted => "accepted",
            Reload::Rejected => "rejected",
        };
        EncodeLabelValue::encode(&text, encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReloadLabels {
    outcome: Reload,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EffectLabels {
    effect: &'static str,
}

/// Why an effect failed: its `error_type` here and the `error.type` of its
/// trace span (see [`std::fmt::Display`]), so both name a failure alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EffectError {
    /// A template of the effect did not render, or rendered what it cannot
    /// use (a NUL byte in an argument, a URL that does not parse):
    /// `render_failed`.
    Render,
    /// The SQL statement failed: `statement_failed`.
    Statement,
    /// The HTTP request got no answer (refused, reset, too large): `no_answer`.
    NoAnswer,
    /// No answer within the effect's `timeout`: `timeout`.
    Timeout,
    /// The caller's token could not be exchanged for the api's (`auth:
    /// { exchange }`), or the call carried none: `token_exchange`.
    TokenExchange,
    /// The HTTP answer's status is not one the effect accepts: the status (`503`).
    Status(u16),
    /// The program could not be started, or was stopped (its timeout, a
    /// cancel): `run_failed`.
    Run,
    /// The program exited with a code the effect does not accept: `exit_code`.
    ExitCode,
    /// The effect ran but its result did not render, so its work was
    /// undone (or, without a transaction, is reported): `result_refused`.
    Refused,
}

impl EffectError {
    /// Its name (a status is shown by its number instead).
    fn name(self) -> &'static str {
        match self {
            EffectError::Render => "render_failed",
            EffectError::Statement => "statement_failed",
            EffectError::NoAnswer => "no_answer",
            EffectError::Timeout => "timeout",
            EffectError::TokenExchange => "token_exchange",
            EffectError::Status(_) => "status",
            EffectError::Run => "run_failed",
            EffectError::ExitCode => "exit_code",
            EffectError::Refused => "result_refused",
        }
    }
}

impl std::fmt::Display for EffectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EffectError::Status(status) => write!(f, "{status}"),
            other => f.write_str(other.name()),
        }
    }
}

impl EncodeLabelValue for EffectError {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        match self {
            EffectError::Status(status) => EncodeLabelValue::encode(&u64::from(*status), encoder),
            other => EncodeLabelValue::encode(&other.name(), encoder),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EffectErrorLabels {
    effect: &'static str,
    error_type: EffectError,
}

/// Makes histograms with [`BUCKETS`].
#[derive(Clone, Copy)]
struct Buckets;

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(BUCKETS)
    }
}

/// The registry and every metric in it.
struct Metrics {
    registry: Registry,
    operations: Family<Operation, Histogram, Buckets>,
    sessions: Family<Session, Histogram, Buckets>,
    calls_in_flight: Gauge,
    clients: Gauge,
    generation: Gauge,
    reloads: Family<ReloadLabels, Counter>,
    effects: Family<EffectLabels, Histogram, Buckets>,
    effect_errors: Family<EffectErrorLabels, Counter>,
    /// Tool names as labels, each allocated once.
    tool_names: RwLock<HashMap<Box<str>, Arc<str>, foldhash::fast::RandomState>>,
    unknown_tool: Arc<str>,
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::default();
        let operations = Family::new_with_constructor(Buckets);
        registry.register_with_unit(
            "mcp_server_operation_duration",
            "How long MCP requests took, by method, tool, outcome, protocol version and transport",
            Unit::Seconds,
            operations.clone(),
        );
        let sessions = Family::new_with_constructor(Buckets);
        registry.register_with_unit(
            "mcp_server_session_duration",
            "How long legacy and stdio sessions lasted",
            Unit::Seconds,
            sessions.clone(),
        );
        let calls_in_flight = Gauge::default();
        registry.register("carte_tool_calls_in_flight", "Tool calls running now", calls_in_flight.clone());
        let clients = Gauge::default();
        registry.register(
            "carte_clients_connected",
            "Clients connected now (sessions and listen streams)",
            clients.clone(),
        );
        let generation = Gauge::default();
        registry.register(
            "carte_catalog_generation",
            "The catalog served: 1 at start, one more per accepted reload",
            generation.clone(),
        );
        let reloads = Family::default();
        registry.register("carte_reloads", "Catalog reloads, by outcome", reloads.clone());
        let effects = Family::new_with_constructor(Buckets);
        registry.register_with_unit(
            "carte_effect_duration",
            "How long tools' effects ran (with their result's render), by effect",
            Unit::Seconds,
            effects.clone(),
        );
        let effect_errors = Family::default();
        registry.register("carte_effect_errors", "Effects that failed, by effect and kind", effect_errors.clone());
        Metrics {
            registry,
            operations,
            sessions,
            calls_in_flight,
            clients,
            generation,
            reloads,
            effects,
            effect_errors,
            tool_names: RwLock::default(),
            unknown_tool: Arc::from(UNKNOWN_TOOL),
        }
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The `gen_ai_tool_name` of a call to `name`: the name if the catalog has
/// the tool (`known`), else [`UNKNOWN_TOOL`]. A name is allocated on its
/// first call only; names are kept as long as the families that use them.
pub fn tool_label(name: &str, known: bool) -> Arc<str> {
    let metrics = &*METRICS;
    if !known {
        return metrics.unknown_tool.clone();
    }
    if let Some(label) = crate::sync::read(&metrics.tool_names).get(name) {
        return label.clone();
    }
    let mut names = crate::sync::write(&metrics.tool_names);
    names.entry(Box::from(name)).or_insert_with(|| Arc::from(name)).clone()
}

thread_local! {
    /// The histogram of the last operation recorded on this thread, with its
    /// labels: a thread answering the same call over and over finds it
    /// without hashing the labels into the registry's map (every histogram
    /// stays in the registry for the life of the process).
    static LAST_OPERATION: RefCell<Option<(Operation, Histogram)>> = const { RefCell::new(None) };
}

/// Records one MCP operation that took `elapsed`.
pub fn operation(labels: &Operation, elapsed: Duration) {
    let seconds = elapsed.as_secs_f64();
    LAST_OPERATION.with_borrow_mut(|last| match last {
        Some((cached, histogram)) if cached == labels => histogram.observe(seconds),
        _ => {
            let histogram = METRICS.operations.get_or_create(labels).clone();
            histogram.observe(seconds);
            *last = Some((labels.clone(), histogram));
        }
    });
}

/// Records a session that lasted `elapsed`.
pub fn session(labels: &Session, elapsed: Duration) {
    METRICS.sessions.get_or_create(labels).observe(elapsed.as_secs_f64());
}

/// Counts one reload that ended with `outcome`.
pub fn reload(outcome: Reload) {
    METRICS.reloads.get_or_create(&ReloadLabels { outcome }).inc();
}

/// Records an `effect` (its key: `sql`, `http`, `command`) that ran for
/// `elapsed`, and how it failed, if it did.
pub fn effect(effect: &'static str, elapsed: Duration, error: Option<EffectError>) {
    METRICS.effects.get_or_create(&EffectLabels { effect }).observe(elapsed.as_secs_f64());
    if let Some(error_type) = error {
        METRICS.effect_errors.get_or_create(&EffectErrorLabels { effect, error_type }).inc();
    }
}

/// What the server counts itself, as it is at a scrape.
#[derive(Debug, Clone, Copy)]
pub struct Current {
    /// Tool calls running.
    pub calls_in_flight: usize,
    /// Clients connected.
    pub clients: usize,
    /// The catalog's generation.
    pub generation: u64,
}

/// The text exposition of every metric, with `current`'s numbers.
pub fn encode(current: Current) -> Result<String, std::fmt::Error> {
    let metrics = &*METRICS;
    let gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
    metrics.calls_in_flight.set(gauge(current.calls_in_flight as u64));
    metrics.clients.set(gauge(current.clients as u64));
    metrics.generation.set(gauge(current.generation));
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics.registry)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_versions_map_to_fixed_labels() {
        assert_eq!(protocol_version(Some("2025-06-18")), "2025-06-18");
        assert_eq!(protocol_version(Some("2026-07-28")), "2026-07-28");
        assert_eq!(protocol_version(Some("1999-01-01")), "other");
        assert_eq!(protocol_version(Some(&"x".repeat(10_000))), "other");
        assert_eq!(protocol_version(None), "");
    }

    #[test]
    fn unknown_tools_share_one_label_and_known_ones_are_interned() {
        assert_eq!(&*tool_label("no_such_tool", false), UNKNOWN_TOOL);
        let first = tool_label("metrics_unit_tool", true);
        let second = tool_label("metrics_unit_tool", true);
        assert_eq!(&*first, "metrics_unit_tool");
        assert!(Arc::ptr_eq(&first, &second));
    }

    #[test]
    fn operations_are_exposed_with_their_labels() {
        let labels = Operation {
            mcp_method_name: "tools/call",
            gen_ai_tool_name: Some(tool_label("metrics_unit_exposed", true)),
            error_type: Ending::Error(-32602),
            mcp_protocol_version: protocol_version(Some("2025-06-18")),
            network_transport: Transport::Tcp,
        };
        operation(&labels, Duration::from_millis(30));
        let tool_error = Operation { error_type: Ending::ToolError, network_transport: Transport::Pipe, ..labels };
        operation(&tool_error, Duration::from_millis(30));
        let text = encode(Current { calls_in_flight: 2, clients: 3, generation: 7 }).unwrap();
        let line = |needle: &str| text.lines().find(|line| line.starts_with(needle)).unwrap_or_default().to_owned();
        let called = line(
            r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="metrics_unit_exposed",error_type="-32602",mcp_protocol_version="2025-06-18",network_transport="tcp"}"#,
        );
        assert!(called.ends_with(" 1"), "{text}");
        let bucket = line(
            r#"mcp_server_operation_duration_seconds_bucket{mcp_method_name="tools/call",gen_ai_tool_name="metrics_unit_exposed",error_type="tool_error",mcp_protocol_version="2025-06-18",network_transport="pipe",le="0.05"}"#,
        );
        assert!(bucket.ends_with(" 1"), "{text}");
        assert!(text.contains("\ncarte_tool_calls_in_flight 2\n"), "{text}");
        assert!(text.contains("\ncarte_clients_connected 3\n"), "{text}");
        assert!(text.contains("\ncarte_catalog_generation 7\n"), "{text}");
    }

    // Tests share the process's registry: both scrapes give the same `Current`.
    #[test]
    fn effect_errors_are_counted_by_effect_and_kind() {
        effect("command", Duration::from_millis(1), Some(EffectError::Refused));
        effect("http", Duration::from_millis(1), Some(EffectError::Status(503)));
        effect("http", Duration::from_millis(1), Some(EffectError::Timeout));
        let text = encode(Current { calls_in_flight: 2, clients: 3, generation: 7 }).unwrap();
        assert!(text.contains(r#"carte_effect_errors_total{effect="command",error_type="result_refused"}"#), "{text}");
        assert!(text.contains(r#"carte_effect_errors_total{effect="http",error_type="503"}"#), "{text}");
        assert!(text.contains(r#"carte_effect_errors_total{effect="http",error_type="timeout"}"#), "{text}");
        assert_eq!(EffectError::Status(404).to_string(), "404");
        assert_eq!(EffectError::Statement.to_string(), "statement_failed");
        assert!(text.contains(r#"carte_effect_duration_seconds_count{effect="command"}"#), "{text}");
    }
}
