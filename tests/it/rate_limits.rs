//! `rateLimit:` per caller, through the real binary: past the server's or a
//! tool's limit a call is -32000 with `retryAfterMs` on stdio, and 429 with
//! `Retry-After` over HTTP; another caller (another session) has its own count.

use crate::common;

use common::http::{HttpServer, send};
use common::{Server, TempDir, meta_2026, text};
use serde_json::json;

const CATALOG: &str = r#"
server:
  name: limited
  rateLimit: { calls: 5, per: 1h }
tools:
  - name: ping
    description: Answers pong.
    run: { text: pong }
  - name: slow
    description: Answers once an hour.
    rateLimit: { calls: 1, per: 1h }
    run: { text: done }
"#;

#[test]
fn a_stdio_caller_past_a_limit_is_told_when_to_call_again() {
    let dir = TempDir::new("rate-stdio");
    let path = dir.write("limited.yaml", CATALOG);
    let mut server = Server::initialized(&path, &[]);
    let call = |server: &mut Server, name: &str| server.request("tools/call", json!({"name": name, "arguments": {}}));

    assert_eq!(text(&call(&mut server, "slow")["result"]), "done");
    // The tool's own limit: one an hour.
    let refused = call(&mut server, "slow");
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    let wait = refused["error"]["data"]["retryAfterMs"].as_u64().unwrap();
    assert!(wait > 3_500_000 && wait <= 3_600_000, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("this tool's `rateLimit`"), "{refused}");
    // The refused call did not count against the server's five: four more fit.
    for _ in 0..4 {
        assert_eq!(text(&call(&mut server, "ping")["result"]), "pong");
    }
    let refused = call(&mut server, "ping");
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("the server's `rateLimit`"), "{refused}");
    // Other requests are not limited.
    server.result("tools/list", json!({}));
}

#[test]
fn an_http_caller_past_a_limit_gets_429_and_another_caller_does_not() {
    let dir = TempDir::new("rate-http");
    let path = dir.write("limited.yaml", CATALOG);
    let server = HttpServer::start(&path, &[], &[]);
    let (first, second) = (server.session(), server.session());
    assert_eq!(
        text(&server.request(&first, 2, "tools/call", json!({"name": "slow", "arguments": {}}))["result"]),
        "done"
    );
    let message =
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "slow", "arguments": {}}});
    let refused = server.post(Some(&first), &message);
    assert_eq!(refused.status, 429);
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((3500..=3600).contains(&retry), "{retry}");
    let body: serde_json::Value = serde_json::from_str(&refused.text()).unwrap();
    assert_eq!((body["id"].as_i64(), body["error"]["code"].as_i64()), (Some(3), Some(-32000)), "{body}");
    assert!(body["error"]["data"]["retryAfterMs"].as_u64().unwrap() > 3_500_000, "{body}");
    // Another session is another caller.
    assert_eq!(
        text(&server.request(&second, 4, "tools/call", json!({"name": "slow", "arguments": {}}))["result"]),
        "done"
    );

    // A 2026-07-28 request without a token: all such callers share one count ("http").
    let modern = |id: i64| {
        let mut meta = meta_2026(json!({}));
        meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "slow", "arguments": {}, "_meta": meta}});
        let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "slow")];
        send(server.addr, "POST", "/mcp", &headers, Some(&message))
    };
    assert_eq!(modern(5).status, 200);
    assert_eq!(modern(6).status, 429);
}
