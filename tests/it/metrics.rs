//! `/metrics` on the real binary over HTTP: operations by method, tool and
//! outcome, effects, calls in flight, reloads and the catalog's generation.

use crate::common;

use std::time::{Duration, Instant};

use common::TempDir;
use common::http::{HttpServer, send, wait_for};
use serde_json::json;

const CATALOG: &str = r#"server: { name: metrics, version: 1.0.0 }
apis:
  upstream: { baseUrl: "${UPSTREAM:-http://127.0.0.1:9}" }
tools:
  - name: greet
    description: Says hello.
    run:
      text: "hello"
  - name: refuse
    description: Always fails.
    run:
      text: "{{ fail('no') }}"
  - name: succeed
    description: Runs `true`.
    run:
      command: { argv: ["true"] }
      text: "ran"
  - name: crash
    description: Runs `false`.
    run:
      command: { argv: ["false"] }
      text: "ran"
  - name: unavailable
    description: Asks an upstream that answers 503.
    run:
      http: { api: upstream, path: /busy }
"#;

/// The exposition text; asserts its status and content type.
fn scrape(server: &HttpServer) -> String {
    let response = send(server.addr, "GET", "/metrics", &[], None);
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("text/plain; version=0.0.4; charset=utf-8"));
    response.text()
}

/// The value of the sample whose line starts with `series` (its name and
/// labels), if there is one.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// Scrapes until `series` has `value` (bounded); the last text.
fn scrape_until(server: &HttpServer, series: &str, value: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = scrape(server);
        if sample(&text, series) == Some(value) {
            return text;
        }
        assert!(Instant::now() < deadline, "{series} never reached {value}:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn call_count(tool: &str, error_type: &str) -> String {
    format!(
        r#"mcp_server_operation_duration_seconds_count{{mcp_method_name="tools/call",gen_ai_tool_name="{tool}",error_type="{error_type}",mcp_protocol_version="2025-11-25",network_transport="tcp"}}"#
    )
}

#[test]
fn calls_effects_and_reloads_show_in_metrics() {
    let dir = TempDir::new("metrics");
    let path = dir.write("catalog.yaml", CATALOG);
    let busy = axum::Router::new().fallback(|| async { axum::http::StatusCode::SERVICE_UNAVAILABLE });
    let upstream = common::http::LocalServer::bind().serve(busy);
    let base = format!("http://{}", upstream.addr);
    let server = HttpServer::start(&path, &["--debounce", "20"], &[("UPSTREAM", &base)]);
    let session = server.session();
    let events = server.stream(&session);

    let call = |id: i64, name: &str| server.request(&session, id, "tools/call", json!({"name": name, "arguments": {}}));
    assert_eq!(call(2, "greet")["result"]["isError"], json!(false));
    assert_eq!(call(3, "greet")["result"]["isError"], json!(false));
    assert_eq!(call(4, "refuse")["result"]["isError"], json!(true));
    assert!(call(5, "no_such_tool")["error"]["code"].is_i64());
    let unknown_code = call(6, "another_unknown")["error"]["code"].clone();
    assert_eq!(call(7, "succeed")["result"]["isError"], json!(false));
    assert_eq!(call(8, "crash")["result"]["isError"], json!(true));
    assert_eq!(call(9, "unavailable")["result"]["isError"], json!(true));
    server.request(&session, 10, "tools/list", json!({}));

    let text = scrape(&server);
    assert_eq!(sample(&text, &call_count("greet", "")), Some(2.0), "{text}");
    assert_eq!(sample(&text, &call_count("refuse", "tool_error")), Some(1.0), "{text}");
    // Names the catalog does not have share one label.
    assert_eq!(sample(&text, &call_count("_unknown", &unknown_code.to_string())), Some(2.0), "{text}");
    assert!(!text.contains("no_such_tool") && !text.contains("another_unknown"), "{text}");
    let list = r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/list",gen_ai_tool_name="",error_type="",mcp_protocol_version="2025-11-25",network_transport="tcp"}"#;
    assert_eq!(sample(&text, list), Some(1.0), "{text}");
    // Buckets are the conventions' (a call takes well under 300 s).
    let bucket =
        format!(r#"{},le="300"}}"#, call_count("greet", "").replace("_count{", "_bucket{").trim_end_matches('}'));
    assert_eq!(sample(&text, &bucket), Some(2.0), "{text}");
    assert_eq!(sample(&text, "carte_tool_calls_in_flight"), Some(0.0), "{text}");
    assert_eq!(sample(&text, "carte_catalog_generation"), Some(1.0), "{text}");
    // `true` and `false` ran as command effects; `false` exited 1. Errors
    // are named as the effects' trace spans name them.
    assert_eq!(sample(&text, r#"carte_effect_duration_seconds_count{effect="command"}"#), Some(2.0), "{text}");
    let exit_code = r#"carte_effect_errors_total{effect="command",error_type="exit_code"}"#;
    assert_eq!(sample(&text, exit_code), Some(1.0), "{text}");
    let status = r#"carte_effect_errors_total{effect="http",error_type="503"}"#;
    assert_eq!(sample(&text, status), Some(1.0), "{text}");

    // An accepted reload, then a rejected one.
    dir.write("catalog.yaml", &CATALOG.replace("Says hello.", "Says hello again."));
    wait_for(&events, "notifications/tools/list_changed");
    let text = scrape_until(&server, r#"carte_reloads_total{outcome="accepted"}"#, 1.0);
    assert_eq!(sample(&text, "carte_catalog_generation"), Some(2.0), "{text}");
    dir.write("catalog.yaml", "server: { name: metrics, version: 1.0.0 }\ntools:\n  - name: broken\n");
    let text = scrape_until(&server, r#"carte_reloads_total{outcome="rejected"}"#, 1.0);
    assert_eq!(sample(&text, "carte_catalog_generation"), Some(2.0), "{text}");

    // A legacy session's duration is recorded when it ends.
    let sessions =
        r#"mcp_server_session_duration_seconds_count{mcp_protocol_version="2025-11-25",network_transport="tcp"}"#;
    assert_eq!(sample(&text, sessions), None, "{text}");
    let headers = [("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-11-25")];
    let deleted = send(server.addr, "DELETE", "/mcp", &headers, None);
    assert_eq!(deleted.status, 200);
    scrape_until(&server, sessions, 1.0);
}

#[test]
fn stateless_requests_are_operations_not_sessions() {
    let dir = TempDir::new("metrics-2026");
    let path = dir.write("catalog.yaml", CATALOG);
    let server = HttpServer::start(&path, &[], &[]);
    let meta = common::meta_2026(json!({}));
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "greet", "arguments": {}, "_meta": meta}});
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "greet")];
    let response = send(server.addr, "POST", "/mcp", &headers, Some(&message));
    assert_eq!(response.status, 200);
    let text = scrape(&server);
    let series = r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="greet",error_type="",mcp_protocol_version="2026-07-28",network_transport="tcp"}"#;
    assert_eq!(sample(&text, series), Some(1.0), "{text}");
    assert!(!text.contains("mcp_server_session_duration_seconds_count"), "{text}");
}

#[test]
fn metrics_are_behind_the_host_guard_but_not_the_token() {
    let dir = TempDir::new("metrics-guard");
    let path = dir.write("catalog.yaml", CATALOG);
    let server =
        HttpServer::start(&path, &["--auth-token-env", "METRICS_TEST_TOKEN"], &[("METRICS_TEST_TOKEN", "s3cret")]);
    assert_eq!(send(server.addr, "GET", "/metrics", &[], None).status, 200);
    assert_eq!(send(server.addr, "GET", "/metrics", &[("Host", "evil.example:80")], None).status, 403);
    assert_eq!(send(server.addr, "GET", "/mcp", &[], None).status, 401);
}
