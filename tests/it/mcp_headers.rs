//! SEP-2243 custom headers, end to end over HTTP: a tool property marked
//! `x-mcp-header: Name` travels in the `Mcp-Param-Name` header too, and carte
//! (through rmcp's transport) refuses with 400 and -32020 a 2026-07-28 call
//! whose header does not say what its body says. The load-time check of the
//! marks is in `tests/catalogs/err_mcp_header.yaml` (run by `tests/it/check.rs`).

use crate::common;

use common::http::{HttpServer, Response, send};
use common::{TempDir, meta_2026, text};
use serde_json::{Value, json};

const CATALOG: &str = r#"
server: { name: headers, version: 1.0.0 }
tools:
  - name: find_rooms
    description: Finds rooms in a region
    inputSchema:
      type: object
      properties:
        region: { type: string, x-mcp-header: Region }
        floor: { type: integer, x-mcp-header: Floor }
        accessible: { type: boolean, x-mcp-header: Accessible }
        note: { type: string }
      required: [region]
    run:
      text: "rooms in {{ region }}{% if floor is defined %}, floor {{ floor }}{% endif %}{% if accessible is defined %}, accessible={{ accessible | tojson }}{% endif %}{% if note is defined %} ({{ note }}){% endif %}"
  - name: plain
    description: A tool without header marks
    inputSchema:
      type: object
      properties:
        value: { type: string }
    run: { text: "plain {{ value }}" }
"#;

fn server() -> (TempDir, HttpServer) {
    let dir = TempDir::new("mcp-headers");
    let path = dir.write("catalog.yaml", CATALOG);
    let server = HttpServer::start(&path, &[], &[]);
    (dir, server)
}

/// A 2026-07-28 `tools/call` of `tool` with `arguments` and the headers
/// `extra` besides the standard ones.
fn call(server: &HttpServer, tool: &str, arguments: Value, extra: &[(&str, &str)]) -> Response {
    let mut headers = vec![("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", tool)];
    headers.extend_from_slice(extra);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta_2026(json!({}))}});
    send(server.addr, "POST", "/mcp", &headers, Some(&body))
}

/// The text of a call that must succeed.
fn served(response: Response) -> String {
    assert_eq!(response.status, 200, "{:?}", response.headers);
    let messages = response.messages();
    let answer = messages.iter().find(|m| m["id"] == 7).unwrap_or_else(|| panic!("no answer in {messages:?}"));
    assert!(answer.get("error").is_none(), "{answer}");
    text(&answer["result"])
}

/// The JSON-RPC error of a call that must be refused as a header mismatch:
/// HTTP 400 with a JSON body, code -32020.
fn refused(response: Response) -> Value {
    assert_eq!(response.status, 400, "{:?}", response.headers);
    assert!(
        response.header("content-type").is_some_and(|t| t.starts_with("application/json")),
        "{:?}",
        response.headers
    );
    let body: Value = serde_json::from_str(&response.text()).expect("a JSON body");
    assert_eq!(body["error"]["code"], -32020, "{body}");
    body["error"].clone()
}

#[test]
fn headers_that_say_what_the_body_says_are_served() {
    let (_dir, server) = server();
    let response = call(
        &server,
        "find_rooms",
        json!({"region": "north", "floor": 3, "accessible": true}),
        &[("Mcp-Param-Region", "north"), ("Mcp-Param-Floor", "3"), ("Mcp-Param-Accessible", "true")],
    );
    assert_eq!(served(response), "rooms in north, floor 3, accessible=true");
    // Header names ignore case; an unmarked property needs no header.
    let response =
        call(&server, "find_rooms", json!({"region": "south", "note": "quiet"}), &[("mcp-param-region", "south")]);
    assert_eq!(served(response), "rooms in south (quiet)");
}

#[test]
fn base64_header_values_are_decoded_strictly() {
    let (_dir, server) = server();
    // `=?base64?…?=` carries what a header cannot: here, non-ASCII text.
    let response =
        call(&server, "find_rooms", json!({"region": "Zürich"}), &[("Mcp-Param-Region", "=?base64?WsO8cmljaA==?=")]);
    assert_eq!(served(response), "rooms in Zürich");
    let response =
        call(&server, "find_rooms", json!({"region": "Hello"}), &[("Mcp-Param-Region", "=?base64?SGVsbG8=?=")]);
    assert_eq!(served(response), "rooms in Hello");
    // Padding is not optional, and only the Base64 alphabet is.
    for bad in ["=?base64?SGVsbG8?=", "=?base64?SGVs!!!bG8=?="] {
        let error = refused(call(&server, "find_rooms", json!({"region": "Hello"}), &[("Mcp-Param-Region", bad)]));
        assert!(error["message"].as_str().unwrap_or_default().contains("Base64"), "{error}");
    }
    // Without both ends of the wrapper, a value is literal.
    let response = call(
        &server,
        "find_rooms",
        json!({"region": "=?base64?SGVsbG8="}),
        &[("Mcp-Param-Region", "=?base64?SGVsbG8=")],
    );
    assert_eq!(served(response), "rooms in =?base64?SGVsbG8=");
}

#[test]
fn a_header_that_contradicts_the_body_is_refused() {
    let (_dir, server) = server();
    let error = refused(call(&server, "find_rooms", json!({"region": "north"}), &[("Mcp-Param-Region", "south")]));
    assert!(error["message"].as_str().unwrap_or_default().contains("Mcp-Param-Region"), "{error}");
    let error = refused(call(
        &server,
        "find_rooms",
        json!({"region": "north", "floor": 3}),
        &[("Mcp-Param-Region", "north"), ("Mcp-Param-Floor", "4")],
    ));
    assert!(error["message"].as_str().unwrap_or_default().contains("Mcp-Param-Floor"), "{error}");
}

#[test]
fn a_value_in_the_body_needs_its_header_and_an_absent_one_needs_none() {
    let (_dir, server) = server();
    let error = refused(call(&server, "find_rooms", json!({"region": "north"}), &[]));
    assert!(error["message"].as_str().unwrap_or_default().contains("missing Mcp-Param-Region"), "{error}");
    // `floor` is absent: no `Mcp-Param-Floor` expected.
    let response = call(&server, "find_rooms", json!({"region": "north"}), &[("Mcp-Param-Region", "north")]);
    assert_eq!(served(response), "rooms in north");
    // A tool without marks is served without any.
    assert_eq!(served(call(&server, "plain", json!({"value": "x"}), &[])), "plain x");
}

#[test]
fn a_browser_may_send_the_param_headers() {
    let dir = TempDir::new("mcp-headers-cors");
    let path = dir.write("catalog.yaml", CATALOG);
    let server = HttpServer::start(&path, &["--allow-origin", "https://app.example.com"], &[]);
    let preflight = |origin: &str| {
        send(
            server.addr,
            "OPTIONS",
            "/mcp",
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "POST"),
                ("Access-Control-Request-Headers", "content-type, mcp-method, mcp-name, mcp-param-region, x-other"),
            ],
            None,
        )
    };
    let allowed = preflight("https://app.example.com");
    assert_eq!(allowed.status, 200);
    let headers = allowed.header("access-control-allow-headers").unwrap_or_default().to_ascii_lowercase();
    let names: Vec<&str> = headers.split(',').map(str::trim).collect();
    for name in ["content-type", "mcp-method", "mcp-name", "mcp-param-region"] {
        assert!(names.contains(&name), "{name} in {headers}");
    }
    assert!(!names.contains(&"x-other"), "{headers}");
    let foreign = preflight("https://evil.example.com");
    assert_eq!(foreign.header("access-control-allow-origin"), None);
    let headers = foreign.header("access-control-allow-headers").unwrap_or_default().to_ascii_lowercase();
    assert!(!headers.contains("mcp-param-region"), "{headers}");
}
