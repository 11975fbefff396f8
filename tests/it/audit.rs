//! `serve --audit-log`: one JSON line per request — who, what, how it ended,
//! the arguments' SHA-256 — and never an argument's value; `-` over stdio
//! is refused (stdout carries the protocol).

use crate::common;

use std::time::{Duration, Instant};

use common::{Server, TempDir};
use serde_json::{Value, json};

const CATALOG: &str = r#"
server: { name: audited }
tools:
  - name: pay
    description: Pays.
    inputSchema: { type: object, properties: { card: { type: string } }, required: [card] }
    run: { text: "paid with {{ card[-4:] }}" }
resources:
  - { uri: "audited://policy", name: policy, text: rules }
resourceTemplates:
  - { uriTemplate: "audited://customers/{id}", name: customer, text: "customer {{ id }}" }
"#;

fn lines(path: &std::path::Path, at_least: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
        if lines.len() >= at_least || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_request_is_a_line_without_values() {
    let dir = TempDir::new("audit");
    let path = dir.write("audited.yaml", CATALOG);
    let log = dir.path("audit.jsonl");
    let log_arg = log.to_string_lossy().into_owned();
    let mut server = Server::initialized_with(&path, &[], &["--audit-log", &log_arg]);
    server.result("tools/call", json!({"name": "pay", "arguments": {"card": "4111111111111111"}}));
    server.error("tools/call", json!({"name": "nope", "arguments": {}}));
    server.result("resources/read", json!({"uri": "audited://policy"}));
    server.result("resources/read", json!({"uri": "audited://customers/ada-lovelace"}));
    let lines = lines(&log, 5);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("4111") && !text.contains("ada-lovelace"), "{text}");

    let of = |method: &str| lines.iter().filter(|l| l["method"] == method).cloned().collect::<Vec<Value>>();
    let calls = of("tools/call");
    assert_eq!(calls.len(), 2, "{text}");
    assert_eq!((calls[0]["name"].as_str(), calls[0]["outcome"].as_str()), (Some("pay"), Some("ok")));
    assert_eq!(calls[0]["argumentsSha256"].as_str().map(str::len), Some(64));
    assert!(calls[0]["caller"].as_str().unwrap().starts_with("session:"), "{}", calls[0]);
    assert!(calls[0]["durationMs"].as_f64().is_some() && calls[0]["time"].as_str().unwrap().ends_with('Z'));
    assert_eq!((calls[1]["outcome"].as_str(), calls[1]["code"].as_i64()), (Some("error"), Some(-32602)));
    let reads = of("resources/read");
    assert_eq!(reads[0]["name"], "audited://policy");
    assert!(reads[1]["name"].is_null() && reads[1]["uriSha256"].is_string(), "{}", reads[1]);
    assert_eq!(of("initialize").len(), 1, "{text}");

    // What is still queued when carte stops is written before it exits.
    server.result("tools/call", json!({"name": "pay", "arguments": {"card": "5500000000000004"}}));
    assert!(server.finish().success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().filter(|line| line.contains("\"tools/call\"")).count(), 3, "{text}");
}

#[test]
fn stdout_is_refused_over_stdio() {
    let dir = TempDir::new("audit-stdout");
    let path = dir.write("audited.yaml", CATALOG);
    let ran = common::run_to_end(
        common::carte().args(["serve", "--audit-log", "-"]).arg(&path).stdin(std::process::Stdio::null()),
        "serve --audit-log -",
        common::TIMEOUT,
    );
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("stdout carries the protocol"), "{stderr}");
}
