//! Streamable HTTP, end to end over loopback: sessions, the 2026-07-28
//! listen stream, reload notifications to every client, security checks,
//! session end, health endpoints and graceful shutdown.

use crate::common;

use common::http::{HttpServer, read_until_closed, send, status_of, wait_for};
use std::io::Write as _;

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
    // 200, as clients expect (the Python SDK warns on 202).
    assert_eq!(deleted.status, 200);
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

fn init_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
}

#[test]
fn host_headers_must_be_one_plain_allowed_host() {
    let dir = TempDir::new("http-host");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &[], &[]);
    for path in ["/mcp", "/readyz"] {
        let method = if path == "/mcp" { "POST" } else { "GET" };
        let body = (path == "/mcp").then(init_body);
        let empty = send(server.addr, method, path, &[("Host", "")], body.as_ref());
        assert_eq!(empty.status, 400, "an empty Host on {path}");
        let userinfo = send(server.addr, method, path, &[("Host", "evil.com@127.0.0.1")], body.as_ref());
        assert_eq!(userinfo.status, 400, "user info in Host on {path}");
        let two = send(server.addr, method, path, &[("Host", "127.0.0.1"), ("Host", "evil.com")], body.as_ref());
        assert_eq!(two.status, 400, "two Host headers on {path}");
        let two = send(server.addr, method, path, &[("Host", "evil.com"), ("Host", "127.0.0.1")], body.as_ref());
        assert_eq!(two.status, 400, "two Host headers on {path}");
        let foreign = send(server.addr, method, path, &[("Host", "attacker.example.com")], body.as_ref());
        assert_eq!(foreign.status, 403, "a foreign Host on {path}");
        let evil = send(server.addr, method, path, &[("Origin", "https://evil.example.com")], body.as_ref());
        assert_eq!(evil.status, 403, "a foreign Origin on {path}");
        let fine =
            send(server.addr, method, path, &[("Host", &format!("localhost:{}", server.addr.port()))], body.as_ref());
        assert_eq!(fine.status, 200, "{path}");
    }
    // /healthz stays open for probes, whatever the Host.
    assert_eq!(send(server.addr, "GET", "/healthz", &[("Host", "10.0.0.7:8080")], None).status, 200);
}

#[test]
fn the_bearer_scheme_is_case_insensitive_and_readyz_details_need_the_token() {
    let dir = TempDir::new("http-auth-scheme");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &["--auth-token-env", "CARTE_TEST_TOKEN"], &[("CARTE_TEST_TOKEN", "s3cret")]);
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let value = format!("{scheme} s3cret");
        let response = send(server.addr, "POST", "/mcp", &[("Authorization", &value)], Some(&init_body()));
        assert_eq!(response.status, 200, "{value}");
    }
    let basic = send(server.addr, "POST", "/mcp", &[("Authorization", "Basic czNjcmV0")], Some(&init_body()));
    assert_eq!(basic.status, 401);

    let open: Value = serde_json::from_str(&send(server.addr, "GET", "/readyz", &[], None).text()).unwrap();
    assert_eq!(open["status"], "ready", "{open}");
    assert_eq!(open["generation"], 1, "{open}");
    assert!(open["clients"].is_number() && open["callsInFlight"].is_number(), "{open}");
    for detail in ["fingerprint", "lastReloadError", "lastReloadUnixSeconds", "uptimeSeconds"] {
        assert!(open.get(detail).is_none(), "{detail} without the token: {open}");
    }
    let wrong = send(server.addr, "GET", "/readyz", &[("Authorization", "Bearer nope")], None);
    assert_eq!(wrong.status, 401);
    let with_token = send(server.addr, "GET", "/readyz", &[("Authorization", "bearer s3cret")], None);
    let detailed: Value = serde_json::from_str(&with_token.text()).unwrap();
    assert!(detailed["fingerprint"].is_string(), "{detailed}");
    assert!(detailed.get("lastReloadError").is_some(), "{detailed}");
}

#[test]
fn allowed_origins_get_cors_and_others_do_not() {
    let dir = TempDir::new("http-cors");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(
        &path,
        &["--allow-origin", "https://app.example.com", "--auth-token-env", "CARTE_TEST_TOKEN"],
        &[("CARTE_TEST_TOKEN", "s3cret")],
    );
    let app = "https://app.example.com";
    // The preflight carries no token: it is answered before authorization.
    let preflight = send(
        server.addr,
        "OPTIONS",
        "/mcp",
        &[
            ("Origin", app),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "authorization, content-type, mcp-session-id, mcp-protocol-version"),
        ],
        None,
    );
    assert_eq!(preflight.status, 200);
    assert_eq!(preflight.header("access-control-allow-origin"), Some(app));
    let methods = preflight.header("access-control-allow-methods").unwrap_or_default().to_ascii_uppercase();
    for method in ["GET", "POST", "DELETE"] {
        assert!(methods.contains(method), "{methods}");
    }
    let headers = preflight.header("access-control-allow-headers").unwrap_or_default().to_ascii_lowercase();
    for name in ["authorization", "content-type", "mcp-session-id", "mcp-protocol-version", "last-event-id"] {
        assert!(headers.contains(name), "{name} in {headers}");
    }
    assert!(preflight.header("vary").unwrap_or_default().to_ascii_lowercase().contains("origin"));

    let init =
        send(server.addr, "POST", "/mcp", &[("Origin", app), ("Authorization", "Bearer s3cret")], Some(&init_body()));
    assert_eq!(init.status, 200);
    assert_eq!(init.header("access-control-allow-origin"), Some(app));
    let exposed = init.header("access-control-expose-headers").unwrap_or_default().to_ascii_lowercase();
    assert!(exposed.contains("mcp-session-id"), "{exposed}");
    // A browser must be able to read a 401 too (to start authorization).
    let unauthorized = send(server.addr, "POST", "/mcp", &[("Origin", app)], Some(&init_body()));
    assert_eq!(unauthorized.status, 401);
    assert_eq!(unauthorized.header("access-control-allow-origin"), Some(app));

    let evil = "https://evil.example.com";
    let foreign =
        send(server.addr, "OPTIONS", "/mcp", &[("Origin", evil), ("Access-Control-Request-Method", "POST")], None);
    assert_eq!(foreign.status, 403);
    assert_eq!(foreign.header("access-control-allow-origin"), None);
    let other_port = send(
        server.addr,
        "OPTIONS",
        "/mcp",
        &[("Origin", "https://app.example.com:8443"), ("Access-Control-Request-Method", "POST")],
        None,
    );
    assert_eq!(other_port.status, 403, "a rule without a port means the scheme's default port");
}

#[test]
fn sessions_are_capped_with_a_clear_error() {
    let dir = TempDir::new("http-max-sessions");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &["--max-sessions", "2"], &[]);
    let first = server.session();
    let _second = server.session();
    let _stream = server.get_stream(&first);
    let full = server.initialize();
    assert_eq!(full.status, 503);
    assert!(full.header("retry-after").is_some());
    let body: Value = serde_json::from_str(&full.text()).unwrap();
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("session limit"), "{body}");
    // Stateless 2026-07-28 requests need no session: still served.
    let discover = send(
        server.addr,
        "POST",
        "/mcp",
        &[("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/list")],
        Some(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta_2026(json!({}))}})),
    );
    assert_eq!(discover.status, 200);
    let deleted = send(
        server.addr,
        "DELETE",
        "/mcp",
        &[("Mcp-Session-Id", &first), ("MCP-Protocol-Version", "2025-11-25")],
        None,
    );
    assert!(deleted.status < 300, "{}", deleted.status);
    assert_eq!(server.initialize().status, 200, "a slot is free again");
}

#[test]
fn idle_sessions_expire_unless_their_stream_is_open() {
    let dir = TempDir::new("http-idle");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &["--session-idle-timeout", "2"], &[]);
    let listening = server.session();
    let stream = server.get_stream(&listening);
    assert_eq!(stream.status, 200);
    let idle = server.session();
    server.wait_for_sessions(1);
    let gone = server.post(Some(&idle), &json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
    assert_eq!(gone.status, 404, "the idle session expired");
    let pong = server.request(&listening, 3, "ping", json!({}));
    assert!(pong["result"].is_object(), "the session with an open stream is kept: {pong}");
    drop(stream);
    server.wait_for_sessions(0);
}

#[test]
fn one_get_stream_per_session() {
    let dir = TempDir::new("http-streams");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &[], &[]);
    let session = server.session();
    let first = server.get_stream(&session);
    assert_eq!(first.status, 200);
    let second = server.get_stream(&session);
    assert_eq!(second.status, 409);
    let body: Value = serde_json::from_str(&second.text()).unwrap();
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("GET stream"), "{body}");
    let other = server.session();
    assert_eq!(server.get_stream(&other).status, 200, "the cap is per session");
}

#[test]
fn a_slow_or_idle_connection_is_closed_after_the_header_timeout() {
    use std::io::Write as _;
    let dir = TempDir::new("http-slowloris");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &["--header-timeout", "1"], &[]);
    let mut slow = std::net::TcpStream::connect(server.addr).unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").unwrap();
    assert!(read_until_closed(&mut slow).is_some(), "a connection that never finishes its headers is closed");
    let mut idle = std::net::TcpStream::connect(server.addr).unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let answered = read_until_closed(&mut idle).expect("an idle keep-alive connection is closed");
    assert_eq!(status_of(&answered), Some(200), "{}", String::from_utf8_lossy(&answered));
}

#[test]
fn connections_beyond_the_cap_are_turned_away_until_some_close() {
    let dir = TempDir::new("http-max-connections");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &["--max-connections", "2", "--header-timeout", "2"], &[]);
    let mut idle: Vec<std::net::TcpStream> =
        (0..2).map(|_| std::net::TcpStream::connect(server.addr).unwrap()).collect();
    // Past the cap: a probe is answered, anything else is 503.
    let probe = |path: &str| {
        let mut over = std::net::TcpStream::connect(server.addr).unwrap();
        over.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).unwrap();
        read_until_closed(&mut over).expect("a connection over the cap gets one answer and is closed")
    };
    let health = probe("/healthz");
    assert_eq!(status_of(&health), Some(200), "{}", String::from_utf8_lossy(&health));
    let refused = probe("/mcp");
    assert_eq!(status_of(&refused), Some(503), "{}", String::from_utf8_lossy(&refused));
    // Past the probes' room too: 503 at once, without a request.
    let mut probes: Vec<std::net::TcpStream> =
        (0..16).map(|_| std::net::TcpStream::connect(server.addr).unwrap()).collect();
    let mut over = std::net::TcpStream::connect(server.addr).unwrap();
    let refused = read_until_closed(&mut over).expect("a connection past every slot is closed at once");
    assert_eq!(status_of(&refused), Some(503), "{}", String::from_utf8_lossy(&refused));
    for connection in &mut probes {
        assert!(read_until_closed(connection).is_some(), "probe connections time out too");
    }
    for connection in &mut idle {
        assert!(read_until_closed(connection).is_some(), "idle connections time out");
    }
    // Their slots are free again (a slot frees as its connection closes: retry, bounded).
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    loop {
        let mut fresh = std::net::TcpStream::connect(server.addr).unwrap();
        fresh.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
        let answer = read_until_closed(&mut fresh).unwrap_or_default();
        if status_of(&answer) == Some(200) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "/healthz never answered: {}", String::from_utf8_lossy(&answer));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[cfg(target_os = "linux")]
#[test]
fn the_open_descriptor_limit_is_raised_to_the_hard_limit() {
    let dir = TempDir::new("http-nofile");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut command = std::process::Command::new("sh");
    command
        .args(["-c", "ulimit -Sn 64 && exec \"$0\" serve --http 127.0.0.1:0 \"$1\""])
        .arg(env!("CARGO_BIN_EXE_carte"))
        .arg(&path);
    let server = HttpServer::spawn(command);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.child.id())).unwrap();
    let line = limits.lines().find(|line| line.starts_with("Max open files")).unwrap();
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers.len(), 2, "{line}");
    assert_eq!(numbers[0], numbers[1], "the soft limit is raised to the hard one: {line}");
    assert_ne!(numbers[0], "64", "{line}");
}

#[test]
fn unreadable_messages_get_json_rpc_errors_over_http() {
    let dir = TempDir::new("http-unreadable");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &[], &[]);
    let session = server.session();
    let cases = [
        (json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": "x"}), json!(3), -32602),
        (json!({"jsonrpc": "2.0", "id": 4, "method": "no/such", "params": [1]}), json!(4), -32601),
        (json!({"jsonrpc": "2.0", "id": true, "method": "ping"}), Value::Null, -32600),
        (json!({"jsonrpc": "2.0", "id": {}, "method": "ping"}), Value::Null, -32600),
    ];
    for (message, id, code) in cases {
        let response = server.post(Some(&session), &message);
        assert_eq!(response.status, 400, "{message}");
        assert!(response.header("content-type").is_some_and(|t| t.starts_with("application/json")), "{message}");
        let reply: Value = serde_json::from_str(&response.text()).expect("a JSON-RPC error");
        assert_eq!(reply["id"], id, "{message}: {reply}");
        assert_eq!(reply["error"]["code"], code, "{message}: {reply}");
    }
    // The session still works.
    let pong = server.request(&session, 9, "ping", json!({}));
    assert!(pong["result"].is_object(), "{pong}");
}

#[test]
fn malformed_json_gets_a_json_rpc_parse_error_over_http() {
    let dir = TempDir::new("http-parse-error");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &[], &[]);
    for (version, body) in [
        ("2025-11-25", r#"{"jsonrpc":"2.0","id":1,"method":"#),
        ("2026-07-28", r#"{"jsonrpc":"2.0","id":1,"method":"#),
        ("2026-07-28", "not json at all"),
    ] {
        let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
        stream.set_read_timeout(Some(common::TIMEOUT)).unwrap();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {version}\r\n\
             Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
            server.addr,
            body.len()
        );
        std::io::Write::write_all(&mut stream, request.as_bytes()).unwrap();
        let bytes = read_until_closed(&mut stream).expect("a response");
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(status_of(&bytes), Some(400), "{body}: {text}");
        let (head, json) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
        let reply: Value = serde_json::from_str(json).expect("a JSON-RPC error");
        assert_eq!(reply["id"], Value::Null, "{reply}");
        assert_eq!(reply["error"]["code"], -32700, "{reply}");
        assert!(reply["error"]["message"].as_str().unwrap_or_default().starts_with("Parse error"), "{reply}");
    }
}

#[test]
fn slow_request_bodies_neither_hold_their_slot_nor_keep_probes_out() {
    let dir = TempDir::new("http-slow-body");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let server = HttpServer::start(&path, &["--max-connections", "4", "--header-timeout", "2"], &[]);
    // Four clients take every slot and send a body a byte at a time.
    let slow: Vec<_> = (0..4)
        .map(|_| {
            let addr = server.addr;
            std::thread::spawn(move || {
                let mut stream = std::net::TcpStream::connect(addr).unwrap();
                let head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                            Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n";
                stream.write_all(head.as_bytes()).ok()?;
                stream.set_read_timeout(Some(std::time::Duration::from_millis(500))).ok()?;
                let started = std::time::Instant::now();
                let mut answer = Vec::new();
                while started.elapsed() < common::TIMEOUT {
                    if stream.write_all(b" ").is_err() {
                        return Some((answer, true));
                    }
                    let mut buf = [0u8; 4096];
                    match std::io::Read::read(&mut stream, &mut buf) {
                        Ok(0) => return Some((answer, true)),
                        Ok(n) => answer.extend_from_slice(&buf[..n]),
                        Err(_) => {}
                    }
                }
                Some((answer, false))
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Meanwhile the liveness probe answers.
    let mut probe = std::net::TcpStream::connect(server.addr).unwrap();
    probe.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let health = read_until_closed(&mut probe).expect("the probe is answered");
    assert_eq!(status_of(&health), Some(200), "{}", String::from_utf8_lossy(&health));
    // And each slow body is given up on (its connection answered or closed)
    // well before the test's bound.
    for client in slow {
        let (answer, closed) = client.join().unwrap().unwrap_or_default();
        let text = String::from_utf8_lossy(&answer);
        assert!(closed || !answer.is_empty(), "a slow body held its connection for as long as it liked");
        assert!(!text.contains("200 OK"), "a slow body was served: {text}");
    }
}
