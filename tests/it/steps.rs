//! A tool's `steps` over stdio: log and progress notifications before the
//! result, elicitation and sampling round trips with the client (legacy
//! sessions; a 2026-07-28 client answers in a retry), and cancellation
//! between steps.

use crate::common;

use std::time::Instant;

use common::{Server, TIMEOUT, TempDir, text};
use serde_json::{Value, json};

const CATALOG: &str = r#"
server: { name: steps, version: 1.0.0 }
tools:
  - name: count
    description: Counts to n, reporting progress.
    inputSchema: { type: object, properties: { n: { type: integer } }, required: [n] }
    run:
      steps:
        - log: { level: info, data: "counting to {{ n }}" }
        - progress: { progress: 1, total: "{{ n }}", message: "one" }
        - sleep: 10ms
        - progress: { progress: "{{ n }}", total: "{{ n }}" }
      text: "counted to {{ n }}"
  - name: greet
    description: Asks the user's name.
    run:
      steps:
        - elicit:
            message: What is your name?
            requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] }
      text: "{% if elicited.action == 'accept' %}Hello {{ elicited.content.name }}{% else %}No name ({{ elicited.action }}){% endif %}"
  - name: pay
    description: Sends the user to pay.
    inputSchema: { type: object, properties: { order: { type: string } }, required: [order] }
    run:
      steps:
        - elicit: { url: "https://shop.example/pay?order={{ order }}", message: "Pay for order {{ order }}" }
      text: "payment {{ elicited.action }}"
  - name: ask
    description: Asks the client's model.
    inputSchema: { type: object, properties: { question: { type: string } }, required: [question] }
    run:
      steps:
        - sample:
            messages: [{ role: user, text: "{{ question }}" }]
            maxTokens: 50
      text: "The model said {{ sampled.content.text }}"
  - name: wait
    description: Waits a long time.
    run:
      steps:
        - log: { level: info, data: waiting }
        - sleep: 30s
      text: done
  - name: guarded
    description: Refuses unless confirmed.
    inputSchema: { type: object, properties: { confirm: { type: boolean } } }
    run:
      steps:
        - log: { level: info, data: "{% if not confirm %}{{ fail('not confirmed') }}{% endif %}confirmed" }
      text: ran
"#;

fn start(capabilities: Value) -> (TempDir, Server) {
    let dir = TempDir::new("steps");
    let path = dir.write("catalog.yaml", CATALOG);
    let mut server = Server::start(&path, &[]);
    let init = server.result(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert!(init["serverInfo"].is_object());
    server.notify("notifications/initialized", json!({}));
    server.result("logging/setLevel", json!({"level": "info"}));
    (dir, server)
}

/// Waits for a request from the server (elicitation, sampling) and returns it.
fn server_request(server: &mut Server, method: &str) -> Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let message = server.next_message(deadline).unwrap_or_else(|| panic!("no {method} request"));
        if message["method"] == method && message.get("id").is_some() {
            return message;
        }
        assert!(message.get("id").is_none(), "unexpected: {message}");
        server.notifications.push(message);
    }
}

#[test]
fn log_and_progress_arrive_before_the_result() {
    let (_dir, mut server) = start(json!({}));
    let result =
        server.result("tools/call", json!({"name": "count", "arguments": {"n": 3}, "_meta": {"progressToken": "p1"}}));
    assert_eq!(text(&result), "counted to 3");
    let seen: Vec<Value> = server.notifications.drain(..).collect();
    let log = seen.iter().find(|n| n["method"] == "notifications/message").expect("a log message");
    assert_eq!(log["params"]["data"], "counting to 3");
    assert_eq!(log["params"]["level"], "info");
    let progress: Vec<&Value> = seen.iter().filter(|n| n["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 2, "{seen:?}");
    assert_eq!(progress[0]["params"], json!({"progressToken": "p1", "progress": 1.0, "total": 3.0, "message": "one"}));
    assert_eq!(progress[1]["params"]["progress"], 3.0);
    // Without a progress token, no progress notifications.
    server.result("tools/call", json!({"name": "count", "arguments": {"n": 2}}));
    assert!(!server.notifications.iter().any(|n| n["method"] == "notifications/progress"));
}

#[test]
fn elicitation_asks_the_client_and_uses_the_answer() {
    let (_dir, mut server) = start(json!({"elicitation": {}}));
    server.send(&json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": {"name": "greet"}}));
    let ask = server_request(&mut server, "elicitation/create");
    assert_eq!(ask["params"]["message"], "What is your name?");
    assert_eq!(ask["params"]["requestedSchema"]["properties"]["name"]["type"], "string");
    server
        .send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"name": "Ada"}}}));
    let response = server.response(&json!(50));
    assert_eq!(text(&response["result"]), "Hello Ada");

    server.send(&json!({"jsonrpc": "2.0", "id": 51, "method": "tools/call", "params": {"name": "greet"}}));
    let ask = server_request(&mut server, "elicitation/create");
    server.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "decline"}}));
    assert_eq!(text(&server.response(&json!(51))["result"]), "No name (decline)");
}

#[test]
fn url_elicitation_sends_the_user_to_a_page_and_says_whether_they_went() {
    let (_dir, mut server) = start(json!({"elicitation": {"form": {}, "url": {}}}));
    server.send(&json!({"jsonrpc": "2.0", "id": 52, "method": "tools/call",
        "params": {"name": "pay", "arguments": {"order": "A7"}}}));
    let ask = server_request(&mut server, "elicitation/create");
    let params = &ask["params"];
    assert_eq!(
        (params["mode"].as_str(), params["url"].as_str()),
        (Some("url"), Some("https://shop.example/pay?order=A7"))
    );
    assert_eq!(params["message"], "Pay for order A7");
    assert!(params["elicitationId"].as_str().is_some_and(|id| !id.is_empty()), "{ask}");
    server.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept"}}));
    assert_eq!(text(&server.response(&json!(52))["result"]), "payment accept");

    // A client whose elicitation has no `url` mode is not sent one.
    let (_dir, mut server) = start(json!({"elicitation": {"form": {}}}));
    let result = server.result("tools/call", json!({"name": "pay", "arguments": {"order": "A7"}}));
    assert_eq!(result["isError"], true, "{result}");
    assert!(text(&result).contains("elicitation.url"), "{result}");

    // On 2026-07-28 the missing capability is said before anything runs.
    let dir = TempDir::new("steps-url-2026");
    let path = dir.write("catalog.yaml", CATALOG);
    let mut server = Server::start(&path, &[]);
    let meta = common::meta_2026(json!({"elicitation": {}}));
    let error = server.error("tools/call", json!({"name": "pay", "arguments": {"order": "A7"}, "_meta": meta}));
    assert_eq!(error["code"], -32021, "{error}");
    assert_eq!(error["data"]["requiredCapabilities"]["elicitation"]["url"], json!({}), "{error}");
    let meta = common::meta_2026(json!({"elicitation": {"url": {}}}));
    let asked = server.result("tools/call", json!({"name": "pay", "arguments": {"order": "A7"}, "_meta": meta}));
    assert_eq!(asked["inputRequests"]["step1"]["params"]["mode"], "url", "{asked}");
}

#[test]
fn a_client_without_elicitation_gets_an_error_result() {
    let (_dir, mut server) = start(json!({}));
    let result = server.result("tools/call", json!({"name": "greet"}));
    assert_eq!(result["isError"], true);
    assert!(text(&result).contains("does not support elicitation"), "{result}");
}

#[test]
fn sampling_asks_the_clients_model() {
    let (_dir, mut server) = start(json!({"sampling": {}}));
    server.send(&json!({"jsonrpc": "2.0", "id": 60, "method": "tools/call",
        "params": {"name": "ask", "arguments": {"question": "6 x 7?"}}}));
    let ask = server_request(&mut server, "sampling/createMessage");
    assert_eq!(ask["params"]["messages"][0]["content"]["text"], "6 x 7?");
    assert_eq!(ask["params"]["maxTokens"], 50);
    server.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "42"}, "model": "test-model"}}));
    assert_eq!(text(&server.response(&json!(60))["result"]), "The model said 42");
}

#[test]
fn a_failing_step_stops_the_call_with_its_message() {
    let (_dir, mut server) = start(json!({}));
    let refused = server.result("tools/call", json!({"name": "guarded", "arguments": {"confirm": false}}));
    assert_eq!((refused["isError"].clone(), text(&refused)), (json!(true), "not confirmed".to_owned()));
    let ran = server.result("tools/call", json!({"name": "guarded", "arguments": {"confirm": true}}));
    assert_eq!(text(&ran), "ran");
}

#[test]
fn cancellation_stops_a_call_and_it_gets_no_response() {
    let (_dir, mut server) = start(json!({}));
    server.send(&json!({"jsonrpc": "2.0", "id": 70, "method": "tools/call", "params": {"name": "wait"}}));
    server.wait_notification("notifications/message"); // the call is in its sleep now
    server.notify("notifications/cancelled", json!({"requestId": 70, "reason": "changed my mind"}));
    let started = Instant::now();
    // Later requests are answered; the cancelled one never is.
    server.result("ping", json!({}));
    let after = server.result("tools/call", json!({"name": "count", "arguments": {"n": 1}}));
    assert_eq!(text(&after), "counted to 1");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "the cancelled call held the server up");
    server.result("ping", json!({}));
    // `result` panics on any unexpected message, so a response to 70 would have failed the test.
    assert!(server.notifications.iter().all(|n| n.get("id").is_none()));
}

#[test]
fn a_2026_client_over_stdio_answers_in_a_retry() {
    let dir = TempDir::new("steps-2026");
    let path = dir.write("catalog.yaml", CATALOG);
    let mut server = Server::start(&path, &[]);
    let meta = common::meta_2026(json!({"elicitation": {}}));
    let asked = server.result("tools/call", json!({"name": "greet", "_meta": meta}));
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    assert_eq!(asked["inputRequests"]["step1"]["method"], "elicitation/create");
    assert_eq!(asked["inputRequests"]["step1"]["params"]["message"], "What is your name?");
    let state = asked["requestState"].as_str().expect("a requestState");
    let done = server.result(
        "tools/call",
        json!({"name": "greet", "_meta": meta, "requestState": state,
            "inputResponses": {"step1": {"action": "accept", "content": {"name": "Ada"}}}}),
    );
    assert_eq!(text(&done), "Hello Ada");
    // No server-to-client request went out: `result` fails on any unexpected message.
    assert!(server.notifications.iter().all(|n| n.get("id").is_none()));
}
