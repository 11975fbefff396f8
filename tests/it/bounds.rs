//! Bounded work per request, end to end: a slow render does not hold the
//! runtime (a `ping` on stdio and `/healthz` over HTTP answer while it
//! runs), a runaway template is an error result and the server stays up,
//! and resource URIs that a template rejects or that are too long are
//! request errors, not internal ones.

use crate::common;

use std::sync::mpsc::channel;
use std::time::Instant;

use common::http::{HttpServer, send};
use common::{Server, TIMEOUT, TempDir, meta_2026, repo_root};
use serde_json::{Value, json};

/// One block: about a quarter of a second of rendering in a debug build, within the fuel.
const SLOW_BLOCK: &str = "{% for i in range(1000) %}{% for j in range(300) %}{% endfor %}{% endfor %}done";

/// A tool that reports progress, then renders for a few seconds (several
/// blocks, each with its own fuel).
fn slow_catalog() -> String {
    let blocks: String = (0..2).map(|_| format!("        - text: \"{SLOW_BLOCK}\"\n")).collect();
    format!(
        "server: {{ name: bounds, version: 1.0.0 }}\ntools:\n  - name: slow\n    description: Renders slowly.\n    run:\n      steps:\n        - progress: {{ progress: 1 }}\n      content:\n{blocks}"
    )
}

#[test]
fn a_ping_is_answered_while_a_slow_render_runs_on_stdio() {
    let dir = TempDir::new("bounds-ping");
    let path = dir.write("catalog.yaml", &slow_catalog());
    let mut server = Server::initialized(&path, &[]);
    let replies = ping_beside_slow_call(&mut server, 2, |message| message.get("id").is_some());
    assert_eq!(replies[0]["id"], "ping", "the ping waited for the slow render: {replies:?}");
    assert_eq!(replies[1]["result"]["isError"], false, "{}", replies[1]);
}

#[test]
fn healthz_answers_while_slow_calls_run_over_http() {
    let dir = TempDir::new("bounds-healthz");
    let path = dir.write("catalog.yaml", &slow_catalog());
    // One runtime worker, as on a one-core machine (tokio reads this), so the
    // outcome does not depend on how many cores run the test.
    let server = HttpServer::start(&path, &[], &[("TOKIO_WORKER_THREADS", "1")]);
    let (events, order) = channel::<&'static str>();
    let (started_tx, started) = channel::<()>();
    let mut calls = Vec::new();
    for n in 0..2 {
        let session = server.session();
        let response = server.post(
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 10 + n, "method": "tools/call",
                "params": {"name": "slow", "arguments": {}, "_meta": {"progressToken": n}}}),
        );
        assert_eq!(response.status, 200);
        let messages = response.events();
        let events = events.clone();
        let started_tx = started_tx.clone();
        calls.push(std::thread::spawn(move || {
            let deadline = Instant::now() + TIMEOUT;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let Ok(message) = messages.recv_timeout(left) else { return };
                if message["method"] == "notifications/progress" {
                    let _ = started_tx.send(());
                }
                if message.get("id").is_some() {
                    assert_eq!(message["result"]["isError"], false, "{message}");
                    let _ = events.send("slow call answered");
                    return;
                }
            }
        }));
    }
    for _ in 0..2 {
        started.recv_timeout(TIMEOUT).expect("both slow calls start");
    }
    let health = send(server.addr, "GET", "/healthz", &[], None);
    assert_eq!(health.status, 200);
    events.send("healthz answered").unwrap();
    for call in calls {
        call.join().unwrap();
    }
    let seen: Vec<&str> = order.try_iter().collect();
    assert_eq!(seen.first(), Some(&"healthz answered"), "/healthz waited for the slow calls: {seen:?}");
    assert_eq!(seen.len(), 3, "{seen:?}");
}

#[test]
fn a_runaway_render_is_an_error_result_and_the_server_stays_up() {
    let dir = TempDir::new("bounds-memory");
    let path = dir.write(
        "catalog.yaml",
        "server: { name: bounds, version: 1.0.0 }\ntools:\n  - name: big\n    description: Joins 300 MB.\n    run:\n      text: \"{{ ((['x'*10**6])*300)|join }}\"\n",
    );
    let mut server = Server::initialized(&path, &[]);
    let result = server.result("tools/call", json!({"name": "big", "arguments": {}}));
    assert_eq!(result["isError"], true, "{result}");
    let text = common::text(&result);
    assert!(text.contains("MiB"), "{text}");
    server.result("ping", json!({}));
}

#[test]
fn a_resource_template_that_fails_is_not_found_with_its_message() {
    let mut server = Server::initialized(&repo_root().join("catalogs/reservo.yaml"), &[]);
    let error = server.error("resources/read", json!({"uri": "reservo://rooms/Nope"}));
    assert_eq!(error["code"], -32002, "{error}");
    assert_eq!(error["data"]["uri"], "reservo://rooms/Nope");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("resource not found"), "{message}");
    assert!(error["data"]["reason"].as_str().is_some_and(|r| !r.is_empty()), "{error}");
    // The same for a 2026-07-28 request: -32602 with the URI.
    let modern = server.error("resources/read", json!({"uri": "reservo://rooms/Nope", "_meta": meta_2026(json!({}))}));
    assert_eq!(modern["code"], -32602, "{modern}");
    assert_eq!(modern["data"]["uri"], "reservo://rooms/Nope");
}

#[test]
fn a_uri_over_8_kib_is_invalid_params() {
    let mut server = Server::initialized(&repo_root().join("catalogs/reservo.yaml"), &[]);
    let uri = format!("reservo://rooms/{}", "a".repeat(9 * 1024));
    let error = server.error("resources/read", json!({"uri": uri}));
    assert_eq!(error["code"], -32602, "{error}");
    let error = server.error("resources/subscribe", json!({"uri": uri}));
    assert_eq!(error["code"], -32602, "{error}");
    let fine: Value = server.result("resources/read", json!({"uri": "reservo://rooms/Studio"}));
    assert!(fine["contents"].is_array());
}

#[test]
fn a_ping_is_answered_while_a_step_template_renders() {
    let dir = TempDir::new("bounds-step");
    // A log step whose data template renders slowly (error level: the
    // session's default level lets it through).
    let catalog = format!(
        "server: {{ name: bounds, version: 1.0.0 }}\ntools:\n  - name: slow\n    description: Logs slowly.\n    run:\n      steps:\n        - progress: {{ progress: 1 }}\n        - log: {{ level: error, data: \"{SLOW_BLOCK}\" }}\n      text: finished\n"
    );
    let path = dir.write("catalog.yaml", &catalog);
    let mut server = Server::initialized(&path, &[]);
    let seen = ping_beside_slow_call(&mut server, 3, |message| {
        message.get("id").is_some() || message["method"] == "notifications/message"
    });
    assert_eq!(seen[0]["id"], "ping", "the ping waited for the step's template: {seen:?}");
    assert_eq!(seen[1]["method"], "notifications/message", "{seen:?}");
    assert_eq!(seen[2]["result"]["isError"], false, "{}", seen[2]);
}

/// Calls the catalog's `slow` tool, waits for its progress step (the slow
/// render comes next), sends a `ping`, and returns the first `count`
/// messages that `keep` keeps, in the order they arrived.
fn ping_beside_slow_call(server: &mut Server, count: usize, keep: impl Fn(&Value) -> bool) -> Vec<Value> {
    server.send(&json!({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
        "params": {"name": "slow", "arguments": {}, "_meta": {"progressToken": "p"}}}));
    server.wait_notification("notifications/progress");
    server.send(&json!({"jsonrpc": "2.0", "id": "ping", "method": "ping"}));
    let deadline = Instant::now() + TIMEOUT;
    let mut kept = Vec::new();
    while kept.len() < count {
        let message = server.next_message(deadline).expect("the ping and the slow call's messages arrive");
        if keep(&message) {
            kept.push(message);
        }
    }
    kept
}

/// Two tools a client can turn into runaways (a list doubled `n` times, a
/// jq string repeated `n` times) and a trivial one.
const RUNAWAY_CATALOG: &str = r#"
server: { name: bounds, version: 1.0.0 }
tools:
  - name: double
    description: Doubles a list n times.
    inputSchema: { type: object, properties: { n: { type: integer } }, required: [n] }
    run:
      text: "{% set ns = namespace(l=[1]) %}{% for i in range(n) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}"
  - name: repeat
    description: Repeats a string n times with jq.
    inputSchema: { type: object, properties: { n: { type: integer } }, required: [n] }
    run:
      text: "{{ {'n': n} | jq('\"x\" * .n') | length }}"
  - name: hello
    description: Says hello.
    run:
      text: hello
"#;

/// The runaway calls of the issue: two doublings of 40 and a jq repetition of 10^10.
fn runaway_calls() -> [(&'static str, Value); 3] {
    [("double", json!({"n": 40})), ("double", json!({"n": 40})), ("repeat", json!({"n": 10_000_000_000_u64}))]
}

/// The most resident memory process `pid` has had, in bytes (`VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    common::memory_bytes(pid, "VmHWM").expect("VmHWM in /proc/PID/status")
}

const MEMORY_CEILING: u64 = 512 << 20;

/// Each runaway ends with an error result that says why, and is not the
/// answer to what was asked.
fn assert_refused(response: &Value) {
    let result = &response["result"];
    assert_eq!(result["isError"], true, "{response}");
    let text = common::text(result);
    assert!(text.contains("too much") || text.contains("built more than"), "{text}");
}

#[test]
fn runaway_calls_cannot_monopolize_a_stdio_server() {
    let dir = TempDir::new("bounds-monopoly-stdio");
    let path = dir.write("catalog.yaml", RUNAWAY_CATALOG);
    let mut server = Server::initialized(&path, &[]);
    for (n, (name, arguments)) in runaway_calls().into_iter().enumerate() {
        server.send(&json!({"jsonrpc": "2.0", "id": format!("runaway{n}"), "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}));
    }
    server.send(&json!({"jsonrpc": "2.0", "id": "hello", "method": "tools/call",
        "params": {"name": "hello", "arguments": {}}}));
    let deadline = Instant::now() + TIMEOUT * 3;
    let mut answered = Vec::new();
    while answered.len() < 4 {
        let message = server.next_message(deadline).expect("every call is answered");
        let Some(id) = message["id"].as_str() else { continue };
        if id == "hello" {
            assert_eq!(common::text(&message["result"]), "hello", "{message}");
        } else {
            assert_refused(&message);
        }
        answered.push(id.to_owned());
    }
    // No order is asserted: each runaway is refused within a millisecond or
    // two of starting (its byte budget), so which answer comes first is a
    // race. That the trivial call never waits for a slot behind renders that
    // take long is a_ping_is_answered_while_a_slow_render_runs_on_stdio, and
    // the fair turns are render::pool's unit tests.
    assert!(answered.iter().any(|id| id == "hello"), "{answered:?}");
    let peak = peak_rss(server.pid());
    assert!(peak < MEMORY_CEILING, "carte's resident memory peaked at {} MiB", peak >> 20);
    server.result("ping", json!({}));
}

#[test]
fn runaway_calls_cannot_monopolize_an_http_server() {
    let dir = TempDir::new("bounds-monopoly-http");
    let path = dir.write("catalog.yaml", RUNAWAY_CATALOG);
    let server = std::sync::Arc::new(HttpServer::start(&path, &[], &[]));
    let (answers, order) = channel::<(String, Value)>();
    let mut calls = Vec::new();
    for (n, (name, arguments)) in runaway_calls().into_iter().enumerate() {
        let (server, answers) = (std::sync::Arc::clone(&server), answers.clone());
        // Each runaway from a session of its own, as separate clients would.
        calls.push(std::thread::spawn(move || {
            let session = server.session();
            let response = server.request(&session, 10, "tools/call", json!({"name": name, "arguments": arguments}));
            let _ = answers.send((format!("runaway{n}"), response));
        }));
    }
    // The trivial call once the runaways are in (they render for a while
    // in a debug build; their answers have not come yet).
    std::thread::sleep(std::time::Duration::from_millis(200));
    let session = server.session();
    let hello = server.request(&session, 20, "tools/call", json!({"name": "hello", "arguments": {}}));
    answers.send(("hello".to_owned(), hello)).unwrap();
    for call in calls {
        call.join().unwrap();
    }
    let seen: Vec<(String, Value)> = order.try_iter().collect();
    assert_eq!(seen.len(), 4, "{seen:?}");
    for (id, response) in &seen {
        if id == "hello" {
            assert_eq!(common::text(&response["result"]), "hello", "{response}");
        } else {
            assert_refused(response);
        }
    }
    let peak = peak_rss(server.child.id());
    assert!(peak < MEMORY_CEILING, "carte's resident memory peaked at {} MiB", peak >> 20);
}
