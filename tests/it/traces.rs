//! OpenTelemetry traces end to end: the real binary exports to an OTLP/HTTP
//! receiver started here (JSON, `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`),
//! which is also the `http` tools' upstream and records the `traceparent`
//! each upstream request carried. Asserts the server span of `tools/call`
//! (name, kind, parent from `_meta.traceparent`, attributes), `error.type`
//! for a tool error and a JSON-RPC error, the effects' spans (sql, command,
//! and http's CLIENT span with the trace context sent upstream), the
//! `reload` span, HTTP's `tcp` transport and session id, that nothing is
//! sent or propagated with the variables unset, and that a collector that
//! stops taking spans (and takes them again) is told in the log.

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use common::http::HttpServer;
use common::{Server, TIMEOUT, TempDir, text};
use serde_json::{Value, json};

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT_ID: &str = "b7ad6b7169203331";

fn traceparent() -> String {
    format!("00-{TRACE_ID}-{PARENT_ID}-01")
}

#[derive(Default)]
struct Received {
    /// Each POST /v1/traces body.
    exports: Vec<Value>,
    /// The `traceparent` header of each upstream request (`None`: none sent).
    upstream: Vec<Option<String>>,
}

/// The OTLP receiver and the `http` tools' upstream, on 127.0.0.1.
struct Receiver {
    addr: SocketAddr,
    received: Arc<Mutex<Received>>,
    _server: common::http::LocalServer,
}

impl Receiver {
    fn start() -> Receiver {
        let received = Arc::<Mutex<Received>>::default();
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(export))
            .fallback(upstream)
            .with_state(received.clone());
        let server = common::http::LocalServer::bind().serve(app);
        Receiver { addr: server.addr, received, _server: server }
    }

    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The environment that turns traces on, exporting here.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", self.base()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json".to_owned()),
            ("OTEL_BSP_SCHEDULE_DELAY", "20".to_owned()),
            ("UPSTREAM", self.base()),
        ]
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Value> {
        let received = self.received.lock().unwrap();
        let mut spans = Vec::new();
        for export in &received.exports {
            for resource in export["resourceSpans"].as_array().into_iter().flatten() {
                for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                    spans.extend(scope["spans"].as_array().into_iter().flatten().cloned());
                }
            }
        }
        spans
    }

    /// The first span named `name` matching `which`, waiting for it (bounded).
    fn wait_span(&self, name: &str, which: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(span) = self.spans().into_iter().find(|span| span["name"] == name && which(span)) {
                return span;
            }
            assert!(Instant::now() < deadline, "no span `{name}`; received: {:#?}", self.spans());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn upstream(&self) -> Vec<Option<String>> {
        self.received.lock().unwrap().upstream.clone()
    }
}

async fn export(State(received): State<Arc<Mutex<Received>>>, body: axum::body::Bytes) -> &'static str {
    let export = serde_json::from_slice(&body).unwrap_or_else(|err| json!({ "unreadable": err.to_string() }));
    received.lock().unwrap().exports.push(export);
    "{}"
}

async fn upstream(State(received): State<Arc<Mutex<Received>>>, request: Request) -> axum::Json<Value> {
    let traceparent = request.headers().get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned);
    received.lock().unwrap().upstream.push(traceparent);
    axum::Json(json!({ "price": 42 }))
}

/// An attribute's value as JSON (`stringValue`, `intValue` as a number).
fn attribute(span: &Value, key: &str) -> Option<Value> {
    let found = span["attributes"].as_array()?.iter().find(|kv| kv["key"] == key)?;
    let value = &found["value"];
    if let Some(text) = value.get("stringValue") {
        return Some(text.clone());
    }
    let int = value.get("intValue")?;
    Some(int.as_str().and_then(|s| s.parse::<i64>().ok()).map_or_else(|| int.clone(), Value::from))
}

const CATALOG: &str = r#"
databases:
  main:
    url: "sqlite::memory:"
apis:
  prices:
    baseUrl: ${UPSTREAM}
tools:
  - name: hello
    description: Says hello.
    run: { text: hello }
  - name: refuse
    description: Always fails.
    run: { text: "{{ fail('no') }}" }
  - name: get_quote
    description: Asks the upstream for a price.
    inputSchema: { type: object, properties: { room: { type: string } }, required: [room] }
    run:
      http: { api: prices, path: "/quotes/{{ room }}", query: { key: "k" } }
      text: "{{ json.price }}"
  - name: count
    description: Counts in SQL.
    run:
      sql: { database: main, statement: "SELECT 3 AS n" }
      text: "{{ rows[0].n }}"
  - name: shout
    description: Runs a program.
    run:
      command: { argv: [sh, -c, "exit 3"], okExitCodes: [3] }
      text: "{{ exit_code }}"
"#;

fn catalog(dir: &TempDir) -> std::path::PathBuf {
    dir.write("catalog.yaml", CATALOG)
}

fn call(server: &mut Server, name: &str, arguments: Value) -> Value {
    let meta = json!({ "traceparent": traceparent(), "tracestate": "vendor=1" });
    server.request("tools/call", json!({ "name": name, "arguments": arguments, "_meta": meta }))
}

fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(key, value)| (*key, value.as_str())).collect()
}

#[test]
fn a_tool_call_is_a_server_span_under_the_callers_trace() {
    let receiver = Receiver::start();
    let dir = TempDir::new("traces-call");
    let env = receiver.env();
    let mut server = Server::initialized(&catalog(&dir), &env_refs(&env));
    let response = call(&mut server, "hello", json!({}));
    assert_eq!(text(&response["result"]), "hello");
    let id = response["id"].clone();

    let span = receiver.wait_span("tools/call hello", |_| true);
    assert_eq!(span["kind"], 2, "SERVER: {span:#}");
    assert_eq!(span["traceId"], TRACE_ID);
    assert_eq!(span["parentSpanId"], PARENT_ID);
    assert_eq!(attribute(&span, "mcp.method.name"), Some(json!("tools/call")));
    assert_eq!(attribute(&span, "gen_ai.tool.name"), Some(json!("hello")));
    assert_eq!(attribute(&span, "jsonrpc.request.id"), Some(json!(id.to_string())));
    assert_eq!(attribute(&span, "mcp.protocol.version"), Some(json!("2025-11-25")));
    assert_eq!(attribute(&span, "network.transport"), Some(json!("pipe")));
    assert_eq!(attribute(&span, "error.type"), None);
    // Without a traceparent, a list is a root span of its own trace.
    server.request("tools/list", json!({}));
    let list = receiver.wait_span("tools/list", |_| true);
    assert_ne!(list["traceId"], TRACE_ID);
    assert_eq!(list["parentSpanId"].as_str().unwrap_or_default(), "");
    server.finish();
}

#[test]
fn failures_carry_error_type() {
    let receiver = Receiver::start();
    let dir = TempDir::new("traces-errors");
    let env = receiver.env();
    let mut server = Server::initialized(&catalog(&dir), &env_refs(&env));

    let refused = call(&mut server, "refuse", json!({}));
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let span = receiver.wait_span("tools/call refuse", |_| true);
    assert_eq!(attribute(&span, "error.type"), Some(json!("tool_error")));
    assert_eq!(span["status"]["code"], 2, "status error: {span:#}");

    let unknown = call(&mut server, "nope", json!({}));
    let code = unknown["error"]["code"].as_i64().unwrap_or_else(|| panic!("a JSON-RPC error: {unknown}"));
    let span = receiver.wait_span("tools/call nope", |_| true);
    assert_eq!(attribute(&span, "error.type"), Some(json!(code.to_string())));
    server.finish();
}

#[test]
fn an_http_effect_is_a_client_span_whose_context_goes_upstream() {
    let receiver = Receiver::start();
    let dir = TempDir::new("traces-http");
    let env = receiver.env();
    let mut server = Server::initialized(&catalog(&dir), &env_refs(&env));
    let response = call(&mut server, "get_quote", json!({ "room": "Focus" }));
    assert_eq!(text(&response["result"]), "42", "{response}");

    let call_span = receiver.wait_span("tools/call get_quote", |_| true);
    let client = receiver.wait_span("GET", |span| span["parentSpanId"] == call_span["spanId"]);
    assert_eq!(client["kind"], 3, "CLIENT: {client:#}");
    assert_eq!(client["traceId"], TRACE_ID);
    assert_eq!(attribute(&client, "http.request.method"), Some(json!("GET")));
    // No query (it may hold a key); a value from the environment is hidden as always.
    assert_eq!(attribute(&client, "url.full"), Some(json!("${UPSTREAM}/quotes/Focus")));
    assert_eq!(attribute(&client, "http.response.status_code"), Some(json!(200)));

    let sent = receiver.upstream();
    let expected = format!("00-{TRACE_ID}-{}-01", client["spanId"].as_str().unwrap_or_default());
    assert_eq!(sent, vec![Some(expected)]);
    server.finish();
}

#[test]
fn a_secret_base_url_is_hidden_as_a_url_parser_writes_it() {
    let receiver = Receiver::start();
    let dir = TempDir::new("traces-http-capitals");
    // The host in capitals: URL parsing writes it in lower case in `url.full`.
    let upstream = format!("http://LOCALHOST:{}", receiver.addr.port());
    let mut env = receiver.env();
    env.retain(|(name, _)| *name != "UPSTREAM");
    env.push(("UPSTREAM", upstream));
    let mut server = Server::initialized(&catalog(&dir), &env_refs(&env));
    let response = call(&mut server, "get_quote", json!({ "room": "Focus" }));
    assert_eq!(text(&response["result"]), "42", "{response}");
    let call_span = receiver.wait_span("tools/call get_quote", |_| true);
    let client = receiver.wait_span("GET", |span| span["parentSpanId"] == call_span["spanId"]);
    assert_eq!(attribute(&client, "url.full"), Some(json!("${UPSTREAM}/quotes/Focus")));
    server.finish();
}

#[test]
fn sql_and_command_effects_are_child_spans() {
    let receiver = Receiver::start();
    let dir = TempDir::new("traces-effects");
    let env = receiver.env();
    let mut server = Server::initialized(&catalog(&dir), &env_refs(&env));
    assert_eq!(text(&call(&mut server, "count", json!({}))["result"]), "3");
    assert_eq!(text(&call(&mut server, "shout", json!({}))["result"]), "3");

    let count = receiver.wait_span("tools/call count", |_| true);
    let sql = receiver.wait_span("sqlite", |span| span["parentSpanId"] == count["spanId"]);
    assert_eq!(sql["kind"], 3, "CLIENT: {sql:#}");
    assert_eq!(attribute(&sql, "db.system.name"), Some(json!("sqlite")));

    let shout = receiver.wait_span("tools/call shout", |_| true);
    let command = receiver.wait_span("sh", |span| span["parentSpanId"] == shout["spanId"]);
    assert_eq!(attribute(&command, "process.executable.name"), Some(json!("sh")));
    assert_eq!(attribute(&command, "process.exit.code"), Some(json!(3)));
    assert_eq!(attribute(&command, "error.type"), None);
    server.finish();
}

#[test]
fn a_reload_is_a_span() {
    let receiver = Receiver::start();
    let dir = TempDir::new("traces-reload");
    let env = receiver.env();
    let path = catalog(&dir);
    let server = Server::initialized(&path, &env_refs(&env));
    std::fs::write(&path, CATALOG.replace("Says hello.", "Says hello again.")).unwrap();
    let span = receiver.wait_span("reload", |_| true);
    assert_eq!(attribute(&span, "carte.reload.outcome"), Some(json!("swapped")));
    assert_eq!(attribute(&span, "carte.generation"), Some(json!(2)));
    server.finish();
}

#[test]
fn over_http_the_transport_is_tcp_and_the_session_is_named() {
    let receiver = Receiver::start();
    let dir = TempDir::new("traces-streamable");
    let env = receiver.env();
    let server = HttpServer::start(&catalog(&dir), &[], &env_refs(&env));
    let session = server.session();
    let meta = json!({ "traceparent": traceparent() });
    server.request(&session, 7, "tools/call", json!({ "name": "hello", "arguments": {}, "_meta": meta }));
    let span = receiver.wait_span("tools/call hello", |_| true);
    assert_eq!(attribute(&span, "network.transport"), Some(json!("tcp")));
    assert_eq!(attribute(&span, "mcp.session.id"), Some(json!(session)));
    assert_eq!(attribute(&span, "jsonrpc.request.id"), Some(json!("7")));
    assert_eq!(span["parentSpanId"], PARENT_ID);
}

#[test]
fn without_an_endpoint_nothing_is_sent_or_propagated() {
    let receiver = Receiver::start();
    let dir = TempDir::new("traces-off");
    let env: Vec<(&'static str, String)> =
        receiver.env().into_iter().filter(|(key, _)| !key.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT")).collect();
    let mut server = Server::initialized(&catalog(&dir), &env_refs(&env));
    let response = call(&mut server, "get_quote", json!({ "room": "Focus" }));
    assert_eq!(text(&response["result"]), "42", "{response}");
    assert!(server.finish().success());
    // carte has exited: whatever it would have sent, it has.
    assert_eq!(receiver.upstream(), vec![None], "no traceparent upstream");
    assert!(receiver.received.lock().unwrap().exports.is_empty(), "nothing exported");
}

#[test]
fn a_collector_that_refuses_spans_is_told_in_the_log_and_so_is_its_return() {
    let answer = Arc::new(AtomicU16::new(503));
    let status = answer.clone();
    let collector = axum::Router::new().fallback(move || {
        let status = status.load(Ordering::SeqCst);
        async move { axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::OK) }
    });
    let collector = common::http::LocalServer::bind().serve(collector);
    let base = format!("http://{}", collector.addr);
    let dir = TempDir::new("traces-collector-down");
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", base.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_BSP_SCHEDULE_DELAY", "20"),
        ("UPSTREAM", base.as_str()),
    ];
    let server = HttpServer::start(&catalog(&dir), &[], &env);
    let session = server.session();
    let hello = |id| server.request(&session, id, "tools/call", json!({ "name": "hello", "arguments": {} }));
    assert_eq!(hello(2)["result"]["isError"], json!(false));
    let warning = server.wait_log("traces: the collector did not take a batch of spans");
    assert!(warning.contains("WARN") && warning.contains("503"), "{warning}");
    answer.store(200, Ordering::SeqCst);
    assert_eq!(hello(3)["result"]["isError"], json!(false));
    let back = server.wait_log("traces: the collector takes spans again");
    assert!(back.contains("INFO"), "{back}");
}
