//! Toolsets as their clients see them, through the real binary: over HTTP
//! `/mcp/{toolset}` lists and calls only the toolset's tools (legacy
//! sessions and 2026-07-28 requests alike), an unknown toolset is 404; on
//! stdio `--toolset NAME` does the same; after a reload a toolset's clients
//! hear `tools/list_changed` only when their own tools changed.

use crate::common;

use std::sync::mpsc::Receiver;
use std::time::Instant;

use common::http::{HttpServer, Response, send, wait_for};
use common::{TIMEOUT, TempDir, meta_2026, run_cli};
use serde_json::{Value, json};

/// Three tools, two in `readonly`, and a prompt whose text a reload can change.
fn catalog(quote: &str, book: &str, prompt: &str) -> String {
    format!(
        r#"server: {{ name: toolsets, version: 1.0.0 }}
toolsets:
  readonly: [list_rooms, get_quote]
tools:
  - name: list_rooms
    description: Lists the rooms.
    run: {{ text: "101, 102" }}
  - name: get_quote
    description: {quote}
    run: {{ text: "120 EUR" }}
  - name: book_room
    description: {book}
    run: {{ text: booked }}
prompts:
  - name: plan
    description: {prompt}
    messages: [{{ role: user, text: plan }}]
"#
    )
}

fn first_catalog() -> String {
    catalog("Quotes a room.", "Books a room.", "Plans a stay.")
}

/// POSTs `message` to `path` as a 2025-11-25 client, on `session` if any.
fn post(server: &HttpServer, path: &str, session: Option<&str>, message: &Value) -> Response {
    let mut headers = vec![("MCP-Protocol-Version", "2025-11-25")];
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session));
    }
    send(server.addr, "POST", path, &headers, Some(message))
}

/// A legacy session at `path`; its id.
fn session(server: &HttpServer, path: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "toolsets", "version": "1"}}});
    let response = post(server, path, None, &init);
    assert_eq!(response.status, 200, "initialize at {path}");
    let session = response.header("mcp-session-id").expect("a session id").to_owned();
    let initialized =
        post(server, path, Some(&session), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert!(initialized.status == 202 || initialized.status == 200, "{}", initialized.status);
    session
}

/// A request on `session` at `path`; its response message.
fn request(server: &HttpServer, path: &str, session: &str, method: &str, params: Value) -> Value {
    let response =
        post(server, path, Some(session), &json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}));
    assert_eq!(response.status, 200, "{method} at {path}");
    response.messages().into_iter().find(|m| m["id"] == 7).unwrap_or_else(|| panic!("no response to {method}"))
}

/// A 2026-07-28 request at `path`; its response message.
fn stateless(server: &HttpServer, path: &str, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta_2026(json!({}));
    let name = params["name"].as_str().unwrap_or_default().to_owned();
    let mut headers = vec![("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method)];
    if !name.is_empty() {
        headers.push(("Mcp-Name", &name));
    }
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
    let response = send(server.addr, "POST", path, &headers, Some(&body));
    let status = response.status;
    let messages = response.messages();
    assert!(status == 200 || status == 400 || status == 404, "{method} at {path}: {status} {messages:?}");
    messages.into_iter().find(|m| m["id"] == 9).unwrap_or_else(|| panic!("no response to {method} at {path}"))
}

fn tool_names(result: &Value) -> Vec<&str> {
    result["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {result}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect()
}

/// The notification stream of `session` at `path`.
fn stream(server: &HttpServer, path: &str, session: &str) -> Receiver<Value> {
    let headers =
        [("Accept", "text/event-stream"), ("Mcp-Session-Id", session), ("MCP-Protocol-Version", "2025-11-25")];
    let response = send(server.addr, "GET", path, &headers, None);
    assert_eq!(response.status, 200, "GET stream at {path}");
    response.events()
}

/// The next notification's method on `events` (bounded wait).
fn next_method(events: &Receiver<Value>) -> String {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = events.recv_timeout(left).expect("a notification arrives");
        if let Some(method) = message["method"].as_str() {
            return method.to_owned();
        }
    }
}

#[test]
fn http_toolset_lists_and_calls_only_its_tools() {
    let dir = TempDir::new("toolsets-http");
    let path = dir.write("catalog.yaml", &first_catalog());
    let server = HttpServer::start(&path, &[], &[]);

    let readonly = session(&server, "/mcp/readonly");
    let listed = request(&server, "/mcp/readonly", &readonly, "tools/list", json!({}));
    assert_eq!(tool_names(&listed["result"]), ["list_rooms", "get_quote"]);
    let called =
        request(&server, "/mcp/readonly", &readonly, "tools/call", json!({"name": "get_quote", "arguments": {}}));
    assert_eq!(called["result"]["content"][0]["text"], "120 EUR");
    let refused =
        request(&server, "/mcp/readonly", &readonly, "tools/call", json!({"name": "book_room", "arguments": {}}));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(refused["error"]["message"], "unknown tool `book_room`");
    // Prompts are the whole catalog's.
    let prompts = request(&server, "/mcp/readonly", &readonly, "prompts/list", json!({}));
    assert_eq!(prompts["result"]["prompts"][0]["name"], "plan");

    // The whole catalog stays at /mcp.
    let all = session(&server, "/mcp");
    let listed = request(&server, "/mcp", &all, "tools/list", json!({}));
    assert_eq!(tool_names(&listed["result"]), ["list_rooms", "get_quote", "book_room"]);

    // 2026-07-28: stateless requests get the same restriction.
    let listed = stateless(&server, "/mcp/readonly", "tools/list", json!({}));
    assert_eq!(tool_names(&listed["result"]), ["list_rooms", "get_quote"]);
    let refused = stateless(&server, "/mcp/readonly", "tools/call", json!({"name": "book_room", "arguments": {}}));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let called = stateless(&server, "/mcp/readonly", "tools/call", json!({"name": "list_rooms", "arguments": {}}));
    assert_eq!(called["result"]["content"][0]["text"], "101, 102");

    // An unknown toolset: 404, naming those there are.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "toolsets", "version": "1"}}});
    let missing = post(&server, "/mcp/nope", None, &init);
    assert_eq!(missing.status, 404);
    let body: Value = serde_json::from_str(&missing.text()).expect("a JSON body");
    assert_eq!(body["error"], "toolset `nope` is not in the catalog; its toolsets are: readonly");
    assert_eq!(body["toolsets"], json!(["readonly"]));
}

#[test]
fn stdio_toolset_serves_only_its_tools_and_an_unknown_one_does_not_start() {
    let dir = TempDir::new("toolsets-stdio");
    let path = dir.write("catalog.yaml", &first_catalog());
    let mut server = common::Server::initialized_with(&path, &[], &["--toolset", "readonly"]);
    let listed = server.result("tools/list", json!({}));
    assert_eq!(tool_names(&listed), ["list_rooms", "get_quote"]);
    let refused = server.error("tools/call", json!({"name": "book_room", "arguments": {}}));
    assert_eq!(refused["code"], -32602, "{refused}");
    drop(server);

    let (code, _, stderr) = run_cli("serve", &path, &["--toolset", "nope"], &[]);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("--toolset nope: toolset `nope` is not in the catalog; its toolsets are: readonly"),
        "{stderr}"
    );

    let (code, listed, stderr) = run_cli("list", &path, &["tools", "--toolset", "readonly"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(tool_names(&listed), ["list_rooms", "get_quote"]);
}

#[test]
fn a_toolsets_clients_hear_of_tools_only_when_its_tools_changed() {
    let dir = TempDir::new("toolsets-reload");
    let path = dir.write("catalog.yaml", &first_catalog());
    let server = HttpServer::start(&path, &["--debounce", "20"], &[]);
    let all = session(&server, "/mcp");
    let readonly = session(&server, "/mcp/readonly");
    let all_events = stream(&server, "/mcp", &all);
    let readonly_events = stream(&server, "/mcp/readonly", &readonly);

    // A tool outside the toolset, and a prompt, change: /mcp hears of both,
    // readonly of the prompt only (a client's notes arrive in order, tools first).
    dir.write("catalog.yaml", &catalog("Quotes a room.", "Books a room, changed.", "Plans a stay, changed."));
    assert_eq!(next_method(&all_events), "notifications/tools/list_changed");
    assert_eq!(next_method(&all_events), "notifications/prompts/list_changed");
    assert_eq!(next_method(&readonly_events), "notifications/prompts/list_changed");

    // A tool inside it changes: both hear of it.
    dir.write("catalog.yaml", &catalog("Quotes a room, changed.", "Books a room, changed.", "Plans a stay, changed."));
    wait_for(&all_events, "notifications/tools/list_changed");
    assert_eq!(next_method(&readonly_events), "notifications/tools/list_changed");
    let listed = request(&server, "/mcp/readonly", &readonly, "tools/list", json!({}));
    assert_eq!(listed["result"]["tools"][1]["description"], "Quotes a room, changed.");

    // The toolset goes away: its session's next request is refused, clearly.
    let without = first_catalog().replace("toolsets:\n  readonly: [list_rooms, get_quote]\n", "");
    dir.write("catalog.yaml", &without);
    assert_eq!(next_method(&readonly_events), "notifications/tools/list_changed");
    let gone =
        post(&server, "/mcp/readonly", Some(&readonly), &json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}));
    assert_eq!(gone.status, 404);
    let body: Value = serde_json::from_str(&gone.text()).expect("a JSON body");
    assert_eq!(body["error"], "toolset `readonly` is not in the catalog, which has no toolsets");
    // The same session through /mcp still sees only its toolset, which is gone.
    let listed = request(&server, "/mcp", &readonly, "tools/list", json!({}));
    assert_eq!(listed["error"]["code"], -32600, "{listed}");
}

/// A 2026-07-28 listen stream at `path` for tool and prompt list changes,
/// once acknowledged.
fn listen(server: &HttpServer, path: &str) -> Receiver<Value> {
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen", "params": {
        "_meta": meta_2026(json!({})), "notifications": {"toolsListChanged": true, "promptsListChanged": true}}});
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "subscriptions/listen")];
    let response = send(server.addr, "POST", path, &headers, Some(&body));
    assert_eq!(response.status, 200, "listen at {path}");
    let events = response.events();
    assert_eq!(next_method(&events), "notifications/subscriptions/acknowledged");
    events
}

#[test]
fn a_toolsets_listen_streams_hear_of_tools_only_when_its_tools_changed() {
    let dir = TempDir::new("toolsets-listen");
    let path = dir.write("catalog.yaml", &first_catalog());
    let server = HttpServer::start(&path, &["--debounce", "20"], &[]);
    let all_events = listen(&server, "/mcp");
    let readonly_events = listen(&server, "/mcp/readonly");
    dir.write("catalog.yaml", &catalog("Quotes a room.", "Books a room, changed.", "Plans a stay, changed."));
    assert_eq!(next_method(&all_events), "notifications/tools/list_changed");
    assert_eq!(next_method(&readonly_events), "notifications/prompts/list_changed");
    dir.write("catalog.yaml", &catalog("Quotes a room, changed.", "Books a room, changed.", "Plans a stay, changed."));
    assert_eq!(next_method(&readonly_events), "notifications/tools/list_changed");
}
