//! Streamable HTTP, end to end over loopback: sessions, the 2026-07-28
//! listen stream, reload notifications to every client, security checks,
//! session end, health endpoints and graceful shutdown.

mod common;

use common::http::{HttpServer, send, wait_for};
use common::{TempDir, meta_2026, tools_catalog};
use serde_json::{Value, json};

#[test]
fn every_session_and_listen_stream_hears_a_reload() {
    let dir = TempDir::new("http-fanout");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &[], &[]);
    let first = server.session();
    let second = server.session();
    let first_events = server.stream(&first);
    let second_events = server.stream(&second);
    // A stalled client: a session whose stream is opened and never read.
    let stalled = server.session();
    let _stalled_events = send(
        server.addr,
        "GET",
        "/mcp",
        &[("Accept", "text/event-stream"), ("Mcp-Session-Id", &stalled), ("MCP-Protocol-Version", "2025-11-25")],
        None,
    );
    let listen = send(
        server.addr,
        "POST",
        "/mcp",
        &[("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "subscriptions/listen")],
        Some(&json!({"jsonrpc": "2.0", "id": "listen", "method": "subscriptions/listen",
            "params": {"_meta": meta_2026(json!({})), "notifications": {"toolsListChanged": true}}})),
    );
    assert_eq!(listen.status, 200);
    let listen_events = listen.events();
    wait_for(&listen_events, "notifications/subscriptions/acknowledged");

    std::fs::write(&path, tools_catalog(&["a", "b"])).unwrap();
    wait_for(&first_events, "notifications/tools/list_changed");
    wait_for(&second_events, "notifications/tools/list_changed");
    let heard = wait_for(&listen_events, "notifications/tools/list_changed");
    assert_eq!(heard["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen");
    let tools = server.request(&first, 2, "tools/list", json!({}));
    assert_eq!(tools["result"]["tools"].as_array().unwrap().len(), 2, "{tools}");
    assert_eq!(tools["result"]["_meta"]["carte/generation"], 2);
}

#[test]
fn a_foreign_origin_is_refused() {
    let dir = TempDir::new("http-origin");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &["--allow-origin", "https://app.example.com:443"], &[]);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let evil = send(server.addr, "POST", "/mcp", &[("Origin", "https://evil.example.com")], Some(&init));
    assert_eq!(evil.status, 403);
    let local = send(server.addr, "POST", "/mcp", &[("Origin", "http://localhost:5173")], Some(&init));
    assert_eq!(local.status, 200);
    let allowed = send(server.addr, "POST", "/mcp", &[("Origin", "https://app.example.com")], Some(&init));
    assert_eq!(allowed.status, 200);
    let rebinding = send(server.addr, "POST", "/mcp", &[("Host", "attacker.example.com")], Some(&init));
    assert_eq!(rebinding.status, 403, "a foreign Host header (DNS rebinding) is refused");
}

#[test]
fn a_bearer_token_is_required_when_configured() {
    let dir = TempDir::new("http-auth");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &["--auth-token-env", "CARTE_TEST_TOKEN"], &[("CARTE_TEST_TOKEN", "s3cret")]);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let missing = send(server.addr, "POST", "/mcp", &[], Some(&init));
    assert_eq!(missing.status, 401);
    assert!(missing.header("www-authenticate").is_some_and(|v| v.starts_with("Bearer")));
    let wrong = send(server.addr, "POST", "/mcp", &[("Authorization", "Bearer nope")], Some(&init));
    assert_eq!(wrong.status, 401);
    let right = send(server.addr, "POST", "/mcp", &[("Authorization", "Bearer s3cret")], Some(&init));
    assert_eq!(right.status, 200);
    // Health endpoints stay open for probes.
    assert_eq!(send(server.addr, "GET", "/healthz", &[], None).status, 200);
}

#[test]
fn delete_ends_a_session() {
    let dir = TempDir::new("http-delete");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &[], &[]);
    let session = server.session();
    let call = server.request(&session, 2, "tools/call", json!({"name": "a"}));
    assert_eq!(call["result"]["content"][0]["text"], "a ran");
    let deleted = send(
        server.addr,
        "DELETE",
        "/mcp",
        &[("Mcp-Session-Id", &session), ("MCP-Protocol-Version", "2025-11-25")],
        None,
    );
    assert!(deleted.status == 200 || deleted.status == 202 || deleted.status == 204, "{}", deleted.status);
    let after = server.post(Some(&session), &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    assert_eq!(after.status, 404);
}

#[test]
fn health_endpoints_report_the_catalog() {
    let dir = TempDir::new("http-health");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &[], &[]);
    let alive = send(server.addr, "GET", "/healthz", &[], None);
    assert_eq!(alive.status, 200);
    let ready: Value = serde_json::from_str(&send(server.addr, "GET", "/readyz", &[], None).text()).unwrap();
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["generation"], 1);
    assert!(ready["lastReloadError"].is_null());
    let session = server.session();
    let events = server.stream(&session);
    std::fs::write(&path, "tools: [").unwrap();
    // The reload's error report reaches the session (level error ≥ its default, warning).
    let report = wait_for(&events, "notifications/message");
    assert_eq!(report["params"]["logger"], "carte.reload", "{report}");
    let ready: Value = serde_json::from_str(&send(server.addr, "GET", "/readyz", &[], None).text()).unwrap();
    assert!(ready["lastReloadError"].as_str().unwrap_or_default().contains("invalid YAML"), "{ready}");
    assert_eq!(ready["generation"], 1, "the old catalog is still served");
}

#[test]
fn shutdown_lets_a_call_in_flight_finish() {
    let dir = TempDir::new("http-shutdown");
    let path = dir.write(
        "catalog.yaml",
        "server: { name: live, version: 1.0.0 }\ndatabases:\n  main: { url: \"sqlite::memory:\", timeout: 1m }\ntools:\n  - name: slow\n    description: Counts for a while.\n    run:\n      sql:\n        database: main\n        statement: WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) SELECT count(*) AS n FROM c\n      text: \"{{ rows[0].n }}\"\n",
    );
    let mut server = HttpServer::start(&path, &[], &[]);
    let session = server.session();
    let addr = server.addr;
    let call = std::thread::spawn(move || {
        let response = send(
            addr,
            "POST",
            "/mcp",
            &[("Mcp-Session-Id", &session), ("MCP-Protocol-Version", "2025-11-25")],
            Some(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "slow"}})),
        );
        response.messages()
    });
    // Wait (bounded) until the call is running, as /readyz sees it.
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    loop {
        let ready: Value = serde_json::from_str(&send(server.addr, "GET", "/readyz", &[], None).text()).unwrap();
        if ready["callsInFlight"] == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the call never started: {ready}");
    }
    server.signal("TERM");
    let messages = call.join().unwrap();
    let result = messages.iter().find(|m| m["id"] == 7).unwrap_or_else(|| panic!("no result: {messages:?}"));
    assert_eq!(result["result"]["content"][0]["text"], "3000000", "{result}");
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "carte did not exit after SIGTERM");
        std::thread::yield_now();
    };
    assert!(status.success(), "{status:?}");
}
