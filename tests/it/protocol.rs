//! The protocol surface over stdio: bad input never kills the server,
//! pagination, the 2026-07-28 stateless mode, logging and subscriptions.

use crate::common;

use std::time::{Duration, Instant};

use common::{Server, TempDir, meta_2026, text};
use serde_json::{Value, json};

const SMALL: &str = r#"
server: { name: small, version: "2.0" }
tools:
  - name: echo
    description: Echoes its text back
    inputSchema:
      type: object
      properties: { text: { type: string } }
      required: [text]
    run: { text: "{{ text }}" }
resources:
  - { uri: "small://note", name: note, text: "a note" }
"#;

fn small() -> (TempDir, Server) {
    let dir = TempDir::new("protocol");
    let catalog = dir.write("small.yaml", SMALL);
    let server = Server::initialized(&catalog, &[]);
    (dir, server)
}

/// Reads the next message that is not a notification.
fn next_reply(server: &mut Server) -> Value {
    let deadline = Instant::now() + common::TIMEOUT;
    loop {
        let message = server.next_message(deadline).expect("a reply");
        if message.get("method").is_none() {
            return message;
        }
    }
}

fn echo(server: &mut Server) {
    let result = server.result("tools/call", json!({"name": "echo", "arguments": {"text": "still here"}}));
    assert_eq!(text(&result), "still here");
}

#[test]
fn malformed_input_gets_json_rpc_errors_and_the_server_goes_on() {
    let (_dir, mut server) = small();
    server.send_raw(b"this is not json\n");
    let reply = next_reply(&mut server);
    assert_eq!(reply["error"]["code"], -32700, "{reply}");
    assert_eq!(reply["id"], Value::Null);

    server.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\xff\xfe}\n");
    assert_eq!(next_reply(&mut server)["error"]["code"], -32700);

    server.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]\n");
    assert_eq!(next_reply(&mut server)["error"]["code"], -32600);

    server.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":77}\n");
    let reply = next_reply(&mut server);
    assert_eq!((reply["id"].clone(), reply["error"]["code"].clone()), (json!(77), json!(-32600)));

    server.send_raw(b"\"just a string\"\n");
    assert_eq!(next_reply(&mut server)["error"]["code"], -32600);

    // Unknown methods, and known methods with parameters of the wrong shape.
    assert_eq!(server.error("no/such/method", json!({}))["code"], -32601);
    assert_eq!(server.error("tools/call", json!({"name": 5}))["code"], -32602);
    assert_eq!(server.error("resources/read", json!({"uri": ["x"]}))["code"], -32602);
    assert_eq!(server.error("logging/setLevel", json!({"level": "loud"}))["code"], -32602);
    assert_eq!(server.error("prompts/get", json!({}))["code"], -32602);

    // A malformed notification gets no answer; an unknown one neither.
    server.send_raw(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":7}\n");
    server.notify("notifications/whatever", json!({}));
    echo(&mut server);
    let status = server.finish();
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_line_of_several_mebibytes_is_served() {
    let (_dir, mut server) = small();
    let big = "x".repeat(5 * 1024 * 1024);
    let result = server.result("tools/call", json!({"name": "echo", "arguments": {"text": big}}));
    assert_eq!(text(&result).len(), 5 * 1024 * 1024);
    // And garbage of the same size is a parse error, not a crash.
    let mut garbage = vec![b'{'; 5 * 1024 * 1024];
    garbage.push(b'\n');
    server.send_raw(&garbage);
    assert_eq!(next_reply(&mut server)["error"]["code"], -32700);
    echo(&mut server);
}

#[test]
fn a_line_over_the_limit_is_refused_whole() {
    let (_dir, mut server) = small();
    let mut huge = vec![b' '; 17 * 1024 * 1024];
    huge.push(b'\n');
    server.send_raw(&huge);
    let reply = next_reply(&mut server);
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    echo(&mut server);
}

#[test]
fn requests_before_initialize_are_refused_and_notifications_dropped() {
    let dir = TempDir::new("preinit");
    let catalog = dir.write("small.yaml", SMALL);
    let mut server = Server::start(&catalog, &[]);
    server.notify("notifications/initialized", json!({}));
    let early = server.error("tools/list", json!({}));
    assert_eq!(early["code"], -32600);
    assert!(early["message"].as_str().unwrap().contains("initialize"), "{early}");
    assert!(server.result("ping", json!({})).is_object());
    let init = server.result(
        "initialize",
        json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}),
    );
    assert_eq!(init["protocolVersion"], "2024-11-05");
    server.notify("notifications/initialized", json!({}));
    echo(&mut server);
}

#[test]
fn every_initialize_version_is_negotiated() {
    let dir = TempDir::new("versions");
    let catalog = dir.write("small.yaml", SMALL);
    for version in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let mut server = Server::start(&catalog, &[]);
        let init = server.result(
            "initialize",
            json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}),
        );
        assert_eq!(init["protocolVersion"], version);
        assert_eq!(init["serverInfo"]["name"], "small");
        assert_eq!(init["serverInfo"]["version"], "2.0");
    }
}

#[test]
fn protocol_2026_07_28_is_served_statelessly() {
    let dir = TempDir::new("modern");
    let catalog = dir.write("small.yaml", SMALL);
    let mut server = Server::start(&catalog, &[]);
    let discover = server.result("server/discover", json!({"_meta": meta_2026(json!({}))}));
    assert!(discover["supportedVersions"].as_array().unwrap().contains(&json!("2026-07-28")), "{discover}");
    assert_eq!(discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "small");
    let tools = server.result("tools/list", json!({"_meta": meta_2026(json!({}))}));
    assert_eq!(tools["resultType"], "complete");
    assert!(tools["ttlMs"].is_number() && tools["cacheScope"].is_string(), "{tools}");
    assert_eq!(tools["tools"][0]["name"], "echo");
    let call = server
        .result("tools/call", json!({"name": "echo", "arguments": {"text": "hi"}, "_meta": meta_2026(json!({}))}));
    assert_eq!(text(&call), "hi");
    // Unknown resources are -32602 on 2026-07-28.
    let missing = server.error("resources/read", json!({"uri": "small://none", "_meta": meta_2026(json!({}))}));
    assert_eq!(missing["code"], -32602);
}

#[test]
fn log_messages_follow_the_session_level() {
    let (_dir, mut server) = small();
    server.result("tools/call", json!({"name": "echo", "arguments": {"text": "quiet"}}));
    assert!(server.notifications.iter().all(|n| n["method"] != "notifications/message"));
    server.result("logging/setLevel", json!({"level": "debug"}));
    server.result("tools/call", json!({"name": "echo", "arguments": {"text": "loud"}}));
    let message = server.wait_notification("notifications/message");
    assert_eq!(message["params"]["level"], "debug");
    assert_eq!(message["params"]["logger"], "carte.tools");
    assert_eq!(message["params"]["data"]["tool"], "echo");
    server.result("logging/setLevel", json!({"level": "error"}));
    server.result("tools/call", json!({"name": "echo", "arguments": {}}));
    server.result("ping", json!({}));
    std::thread::sleep(Duration::from_millis(50));
    assert!(server.notifications.iter().all(|n| n["method"] != "notifications/message"), "{:?}", server.notifications);
}

#[test]
fn subscriptions_accept_known_resources_only() {
    let (_dir, mut server) = small();
    assert!(server.result("resources/subscribe", json!({"uri": "small://note"})).is_object());
    assert!(server.result("resources/unsubscribe", json!({"uri": "small://note"})).is_object());
    let missing = server.error("resources/subscribe", json!({"uri": "small://none"}));
    assert_eq!(missing["code"], -32002);
}

#[test]
fn long_lists_are_paginated_with_opaque_cursors() {
    let dir = TempDir::new("pages");
    let mut yaml = String::from("tools:\n");
    for idx in 0..250 {
        yaml.push_str(&format!("  - {{ name: tool_{idx:03}, description: Tool {idx}, run: {{ text: \"{idx}\" }} }}\n"));
    }
    let catalog = dir.write("many.yaml", &yaml);
    let mut server = Server::initialized(&catalog, &[]);
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let page = server.result("tools/list", params);
        pages += 1;
        names.extend(page["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()));
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names.len(), 250);
    assert_eq!(names[0], "tool_000");
    assert_eq!(names[249], "tool_249");
    assert_eq!(server.error("tools/list", json!({"cursor": "garbage"}))["code"], -32602);
    assert_eq!(server.error("prompts/list", json!({"cursor": "bm90LWEtY3Vyc29y"}))["code"], -32602);
}

#[test]
fn methods_removed_in_2026_07_28_are_not_found_for_its_clients() {
    let dir = TempDir::new("removed-2026");
    let path = dir.write(
        "catalog.yaml",
        "server: { name: small, version: 1.0.0 }\ntools:\n  - { name: a, description: A., run: { text: a } }\n",
    );
    let mut server = Server::start(&path, &[]);
    server.result("server/discover", json!({"_meta": meta_2026(json!({}))}));
    for method in ["logging/setLevel", "resources/subscribe", "resources/unsubscribe"] {
        let params = match method {
            "logging/setLevel" => json!({"level": "debug", "_meta": meta_2026(json!({}))}),
            _ => json!({"uri": "x://y", "_meta": meta_2026(json!({}))}),
        };
        let error = server.error(method, params);
        assert_eq!(error["code"], -32601, "{method}: {error}");
    }
}

#[test]
fn parameters_that_are_not_an_object_are_invalid_params() {
    let (_dir, mut server) = small();
    for (method, params) in [
        ("tools/call", json!("x")),
        ("tools/list", json!([1])),
        ("resources/read", json!(5)),
        ("prompts/get", json!(true)),
    ] {
        let error = server.error(method, params.clone());
        assert_eq!(error["code"], -32602, "{method} with {params}: {error}");
    }
    // An unknown method stays unknown, whatever its parameters.
    assert_eq!(server.error("no/such/method", json!("x"))["code"], -32601);
    echo(&mut server);
}

#[test]
fn a_request_whose_id_is_not_a_string_or_a_number_is_invalid() {
    let (_dir, mut server) = small();
    for id in [json!(null), json!(true), json!([]), json!({}), json!([1])] {
        server.send(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}));
        let reply = next_reply(&mut server);
        assert_eq!(
            (reply["id"].clone(), reply["error"]["code"].clone()),
            (Value::Null, json!(-32600)),
            "{id}: {reply}"
        );
    }
    // The same with parameters rmcp cannot read.
    server.send(&json!({"jsonrpc": "2.0", "id": null, "method": "tools/call", "params": "x"}));
    let reply = next_reply(&mut server);
    assert_eq!((reply["id"].clone(), reply["error"]["code"].clone()), (Value::Null, json!(-32600)), "{reply}");
    echo(&mut server);
}

#[test]
fn cancelling_a_request_not_in_flight_drops_no_later_reply() {
    let (_dir, mut server) = small();
    server.notify("notifications/cancelled", json!({"requestId": 4242, "reason": "never sent"}));
    server.send(&json!({"jsonrpc": "2.0", "id": 4242, "method": "ping"}));
    let reply = server.response(&json!(4242));
    assert_eq!(reply["result"], json!({}), "{reply}");
    // A request answered, then cancelled late: the next request with its id is answered too.
    server.notify("notifications/cancelled", json!({"requestId": 4242, "reason": "too late"}));
    server.send(&json!({"jsonrpc": "2.0", "id": 4242, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "again"}}}));
    assert_eq!(text(&server.response(&json!(4242))["result"]), "again");
}

#[test]
fn a_2026_request_before_initialize_leaves_a_later_legacy_session_working() {
    let dir = TempDir::new("inline-then-legacy");
    let catalog = dir.write("small.yaml", SMALL);
    let mut server = Server::start(&catalog, &[]);
    let tools = server.result("tools/list", json!({"_meta": meta_2026(json!({}))}));
    assert_eq!(tools["tools"][0]["name"], "echo");
    let init = server.result(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "later", "version": "1"}}),
    );
    assert_eq!(init["protocolVersion"], "2025-11-25");
    server.notify("notifications/initialized", json!({}));
    // A legacy session: requests without `_meta`, logging, subscriptions.
    echo(&mut server);
    assert!(server.result("ping", json!({})).is_object());
    server.result("logging/setLevel", json!({"level": "debug"}));
    server.result("resources/subscribe", json!({"uri": "small://note"}));
    server.result("tools/call", json!({"name": "echo", "arguments": {"text": "logged"}}));
    assert_eq!(server.wait_notification("notifications/message")["params"]["logger"], "carte.tools");
    let status = server.finish();
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_list_result_reaches_older_clients_as_structured_content_too() {
    let dir = TempDir::new("legacy-structured");
    let catalog = dir.write(
        "c.yaml",
        "tools:\n  - name: rooms\n    description: Lists rooms.\n    run: { json: true, text: '[\"Focus\", \"Studio\"]' }\n",
    );
    // 2025-11-25: an object, as that version requires.
    let mut legacy = Server::initialized(&catalog, &[]);
    let result = legacy.result("tools/call", json!({"name": "rooms"}));
    assert_eq!(result["structuredContent"], json!({"result": ["Focus", "Studio"]}), "{result}");
    // 2026-07-28: the value itself, as `carte call` shows it.
    let mut modern = Server::start(&catalog, &[]);
    let result = modern.result("tools/call", json!({"name": "rooms", "_meta": meta_2026(json!({}))}));
    assert_eq!(result["structuredContent"], json!(["Focus", "Studio"]), "{result}");
    let (_, called, _) = common::run_cli("call", &catalog, &["rooms"], &[]);
    assert_eq!(called["structuredContent"], json!(["Focus", "Studio"]), "{called}");
}
