//! What a 2026-07-28 (stateless, SEP-2575) request's answer stream may carry,
//! over HTTP: log messages only when the request's `_meta` names a log level,
//! and never a request from the server to the client; an answer that comes
//! alone is one JSON body, one after logs an SSE stream in order. (The conformance
//! suite's `server-stateless` scenario probes the same with its diagnostic
//! tools in `examples/conformance/catalog.yaml`.)

use crate::common;

use common::http::{HttpServer, send};
use common::{TempDir, meta_2026};
use serde_json::{Value, json};

const CATALOG: &str = r#"
server: { name: stateless, version: 1.0.0 }
tools:
  - name: logs
    description: Logs, then answers
    run:
      steps:
        - log: { level: info, data: "working" }
        - log: { level: debug, data: "details" }
      text: done
  - name: asks
    description: Asks the user, then answers
    run:
      steps:
        - elicit:
            message: Continue?
            requestedSchema: { type: object, properties: { ok: { type: boolean } } }
      text: asked
"#;

/// Every message of the answer to a 2026-07-28 `tools/call` of `tool`, with
/// `extra` added to the request's `_meta`.
fn call(server: &HttpServer, tool: &str, capabilities: Value, extra: &[(&str, Value)]) -> Vec<Value> {
    answer(server, tool, capabilities, extra).1
}

/// The answer's content type and its messages, as [`call`] sends it.
fn answer(server: &HttpServer, tool: &str, capabilities: Value, extra: &[(&str, Value)]) -> (String, Vec<Value>) {
    let mut meta = meta_2026(capabilities);
    for (key, value) in extra {
        meta[*key] = value.clone();
    }
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": meta}});
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", tool)];
    let response = send(server.addr, "POST", "/mcp", &headers, Some(&body));
    assert_eq!(response.status, 200);
    let content_type = response.header("content-type").unwrap_or_default().to_owned();
    let messages = response.messages();
    assert!(messages.iter().any(|m| m["id"] == 3), "no answer in {messages:?}");
    (content_type, messages)
}

fn logs_in(messages: &[Value]) -> Vec<&Value> {
    messages.iter().filter(|m| m["method"] == "notifications/message").map(|m| &m["params"]["data"]).collect()
}

#[test]
fn logs_only_at_the_level_the_request_names() {
    let dir = TempDir::new("stateless-logs");
    let server = HttpServer::start(&dir.write("catalog.yaml", CATALOG), &[], &[]);
    let quiet = call(&server, "logs", json!({}), &[]);
    assert!(logs_in(&quiet).is_empty(), "{quiet:?}");
    let info = call(&server, "logs", json!({}), &[("io.modelcontextprotocol/logLevel", json!("info"))]);
    assert_eq!(logs_in(&info), vec![&json!("working")], "{info:?}");
}

#[test]
fn never_sends_a_request_to_the_client() {
    let dir = TempDir::new("stateless-requests");
    let server = HttpServer::start(&dir.write("catalog.yaml", CATALOG), &[], &[]);
    let messages = call(&server, "asks", json!({"elicitation": {}}), &[]);
    let requests: Vec<&Value> =
        messages.iter().filter(|m| m.get("method").is_some() && m.get("id").is_some()).collect();
    assert!(requests.is_empty(), "{messages:?}");
    let answer = messages.iter().find(|m| m["id"] == 3).cloned().unwrap_or_default();
    assert!(answer.get("result").is_some(), "{answer}");
}

#[test]
fn an_answer_alone_is_json_and_one_after_logs_a_stream() {
    let dir = TempDir::new("stateless-json");
    let server = HttpServer::start(&dir.write("catalog.yaml", CATALOG), &[], &[]);
    let (alone, messages) = answer(&server, "logs", json!({}), &[]);
    assert_eq!(alone, "application/json", "{messages:?}");
    assert_eq!(messages.len(), 1, "{messages:?}");
    let level = [("io.modelcontextprotocol/logLevel", json!("info"))];
    let (streamed, messages) = answer(&server, "logs", json!({}), &level);
    assert!(streamed.starts_with("text/event-stream"), "{streamed}: {messages:?}");
    let order: Vec<&str> =
        messages.iter().map(|m| if m["id"] == 3 { "answer" } else { m["method"].as_str().unwrap_or("?") }).collect();
    assert_eq!(order, ["notifications/message", "answer"], "{messages:?}");
}
