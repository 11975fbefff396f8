//! Tools that run as tasks (the `io.modelcontextprotocol/tasks` extension),
//! through the real binary: 2026-07-28 over HTTP, a legacy HTTP session
//! and a legacy stdio session. A task completes, fails, is cancelled while
//! its program runs (the program is gone), asks the user inside the task,
//! is refused to a client without the extension, is hidden from other
//! callers and is dropped one ttl after it settled.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::http::{HttpServer, send};
use common::{Server, TIMEOUT, TempDir, assert_group_gone, group_members, read_pid};
use serde_json::{Value, json};

const TASKS: &str = "io.modelcontextprotocol/tasks";

const CATALOG: &str = r#"
server: { name: tasks, version: 1.0.0 }
tools:
  - name: greet
    description: Greets, never as a task.
    inputSchema: { type: object, properties: { name: { type: string } }, required: [name] }
    run: { text: "Hello, {{ name }}!" }
  - name: compute
    description: Computes a little while.
    inputSchema: { type: object, properties: { label: { type: string } }, required: [label] }
    task: { mode: optional, pollInterval: 200ms }
    run:
      steps:
        - sleep: 100ms
      text: "computed {{ label }}"
  - name: failing
    description: A job whose result is a tool error.
    task: { mode: required }
    run: { text: "{{ fail('the job failed') }}" }
  - name: overdue
    description: A job that runs past its ttl.
    task: { mode: required, ttl: 1s }
    run:
      steps:
        - sleep: 1m
      text: never
  - name: sleeper
    description: Runs a program for a long while.
    task: { mode: required }
    run:
      command: { argv: [sh, -c, "echo $$ > group.pid; exec sleep 30"], timeout: 1m }
  - name: confirm_delete
    description: Deletes a file once the user confirms.
    inputSchema: { type: object, properties: { filename: { type: string } }, required: [filename] }
    task: { mode: optional }
    run:
      steps:
        - elicit:
            message: "Delete {{ filename }}?"
            requestedSchema: { type: object, properties: { confirm: { type: boolean } }, required: [confirm] }
      text: "{% if elicited.action == 'accept' and elicited.content.confirm %}deleted {{ filename }}{% else %}kept {{ filename }}{% endif %}"
  - name: named
    description: Asks a name on the call, then runs as a task.
    task: { mode: required, askFirst: true }
    run:
      steps:
        - elicit:
            message: "What is your name?"
            requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] }
        - sleep: 50ms
      text: "Hello, {{ elicited.content.name }}!"
  - name: brief
    description: Settles at once and is kept one second.
    task: { mode: required, ttl: 1s }
    run: { text: done }
"#;

/// Capabilities of a client that declared the tasks extension (and elicitation).
fn with_tasks() -> Value {
    json!({ "elicitation": {}, "extensions": { TASKS: {} } })
}

/// One 2026-07-28 request over HTTP with `capabilities`; its response message and HTTP status.
fn modern(addr: SocketAddr, method: &str, params: Value, capabilities: Value) -> (u16, Value) {
    let mut params = params;
    params["_meta"] = common::meta_2026(capabilities);
    let name = params.get("name").or_else(|| params.get("taskId")).and_then(Value::as_str).map(str::to_owned);
    let mut headers = vec![("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method)];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name));
    }
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
    let response = send(addr, "POST", "/mcp", &headers, Some(&body));
    let status = response.status;
    let message = response.messages().into_iter().find(|m| m["id"] == 7).expect("a response");
    (status, message)
}

/// A 2026-07-28 request that must succeed: its result.
fn result(addr: SocketAddr, method: &str, params: Value) -> Value {
    let (_, message) = modern(addr, method, params, with_tasks());
    message.get("result").cloned().unwrap_or_else(|| panic!("{method} failed: {message}"))
}

/// Polls `tasks/get` (bounded) until the task is in one of `statuses`.
fn wait_status(addr: SocketAddr, id: &str, statuses: &[&str]) -> Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let task = result(addr, "tasks/get", json!({ "taskId": id }));
        if statuses.contains(&task["status"].as_str().unwrap_or_default()) {
            return task;
        }
        assert!(Instant::now() < deadline, "task {id} never reached {statuses:?}: {task}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `name` as a task over HTTP 2026-07-28; its id.
fn start_task(addr: SocketAddr, name: &str, arguments: Value) -> String {
    let created = result(addr, "tools/call", json!({ "name": name, "arguments": arguments }));
    assert_eq!(created["resultType"], "task", "{created}");
    created["taskId"].as_str().expect("a task id").to_owned()
}

fn server(dir: &TempDir) -> HttpServer {
    let path = dir.write("tasks.yaml", CATALOG);
    HttpServer::start(&path, &[], &[])
}

#[test]
fn a_task_is_created_at_once_and_completes_with_the_result() {
    let dir = TempDir::new("tasks-complete");
    let server = server(&dir);
    let created = result(server.addr, "tools/call", json!({ "name": "compute", "arguments": { "label": "pi" } }));
    assert_eq!(created["resultType"], "task");
    assert_eq!(created["status"], "working");
    assert_eq!(created["ttlMs"], 300_000, "the default ttl, 5m");
    assert_eq!(created["pollIntervalMs"], 200);
    for absent in ["result", "error", "inputRequests", "requestState", "task", "content"] {
        assert!(created.get(absent).is_none(), "{absent} in {created}");
    }
    let id = created["taskId"].as_str().unwrap();
    assert_eq!(id.len(), 36, "a uuid: {id}");
    let done = wait_status(server.addr, id, &["completed", "failed", "cancelled"]);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["resultType"], "complete");
    assert_eq!(done["result"]["content"][0]["text"], "computed pi");
    assert!(done.get("error").is_none());
    // A tool without `task:` is never a task, even for a client with the extension.
    let greeted = result(server.addr, "tools/call", json!({ "name": "greet", "arguments": { "name": "Ada" } }));
    assert_eq!(greeted["content"][0]["text"], "Hello, Ada!");
    assert!(greeted.get("taskId").is_none());
}

#[test]
fn a_tool_error_completes_and_a_run_past_its_ttl_fails() {
    let dir = TempDir::new("tasks-fail");
    let server = server(&dir);
    let failing = start_task(server.addr, "failing", json!({}));
    let done = wait_status(server.addr, &failing, &["completed", "failed", "cancelled"]);
    assert_eq!(done["status"], "completed", "a tool error is a completed task: {done}");
    assert_eq!(done["result"]["isError"], true);
    assert_eq!(done["result"]["content"][0]["text"], "the job failed");
    let overdue = start_task(server.addr, "overdue", json!({}));
    let done = wait_status(server.addr, &overdue, &["completed", "failed", "cancelled"]);
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], -32603);
    assert_eq!(done["error"]["message"], "the task ran longer than its ttl (1s) and was stopped");
    assert!(done.get("result").is_none());
}

#[test]
fn cancelling_a_task_kills_its_program() {
    let dir = TempDir::new("tasks-cancel");
    let server = server(&dir);
    let id = start_task(server.addr, "sleeper", json!({}));
    let pgid = read_pid(&dir.path("group.pid"));
    assert!(!group_members(pgid).is_empty(), "the program runs");
    let ack = result(server.addr, "tasks/cancel", json!({ "taskId": id }));
    assert_eq!(ack, json!({ "resultType": "complete" }));
    assert_eq!(result(server.addr, "tasks/get", json!({ "taskId": id }))["status"], "cancelled");
    assert_group_gone(pgid);
    // Cancelling a settled task again is the same acknowledgement.
    assert_eq!(result(server.addr, "tasks/cancel", json!({ "taskId": id })), json!({ "resultType": "complete" }));
    assert_eq!(result(server.addr, "tasks/get", json!({ "taskId": id }))["status"], "cancelled");
}

#[test]
fn tasks_update_answers_a_question_asked_inside_the_task() {
    let dir = TempDir::new("tasks-update");
    let server = server(&dir);
    let id = start_task(server.addr, "confirm_delete", json!({ "filename": "notes.txt" }));
    let asking = wait_status(server.addr, &id, &["input_required", "completed", "failed"]);
    assert_eq!(asking["status"], "input_required", "{asking}");
    let requests = asking["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{asking}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Delete notes.txt?");
    // An unknown key and an answer that does not fit the form are ignored.
    let ignored = json!({ "taskId": id, "inputResponses": {
        "unknown-key": { "ignored": true },
        key: { "action": "accept", "content": { "confirm": "yes please" } } } });
    assert_eq!(result(server.addr, "tasks/update", ignored), json!({ "resultType": "complete" }));
    assert_eq!(result(server.addr, "tasks/get", json!({ "taskId": id }))["status"], "input_required");
    let answer =
        json!({ "taskId": id, "inputResponses": { key: { "action": "accept", "content": { "confirm": true } } } });
    assert_eq!(result(server.addr, "tasks/update", answer), json!({ "resultType": "complete" }));
    let done = wait_status(server.addr, &id, &["completed", "failed", "cancelled"]);
    assert_eq!(done["result"]["content"][0]["text"], "deleted notes.txt", "{done}");
}

#[test]
fn a_client_without_the_extension_gets_no_task() {
    let dir = TempDir::new("tasks-noext");
    let server = server(&dir);
    let (status, message) = modern(server.addr, "tools/call", json!({ "name": "failing", "arguments": {} }), json!({}));
    assert_eq!(message["error"]["code"], -32021, "{message}");
    assert_eq!(message["error"]["data"]["requiredCapabilities"]["extensions"][TASKS], json!({}));
    assert_eq!(status, 400);
    // An optional task tool runs as an ordinary call.
    let (_, message) =
        modern(server.addr, "tools/call", json!({ "name": "compute", "arguments": { "label": "e" } }), json!({}));
    assert_eq!(message["result"]["content"][0]["text"], "computed e", "{message}");
    // The tasks methods need the extension before anything else (-32021, not -32602).
    let (_, message) = modern(server.addr, "tasks/get", json!({ "taskId": "gate-test" }), json!({}));
    assert_eq!(message["error"]["code"], -32021, "{message}");
    let (_, message) = modern(server.addr, "tasks/get", json!({ "taskId": "no-such-task" }), with_tasks());
    assert_eq!(message["error"]["code"], -32602, "{message}");
}

/// A legacy HTTP session whose client declared the tasks extension; its id.
fn legacy_session(server: &HttpServer) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": { "extensions": { TASKS: {} } },
        "clientInfo": {"name": "tasks-test", "version": "1"}}});
    let response = server.post(None, &init);
    let session = response.header("mcp-session-id").expect("a session id").to_owned();
    let messages = response.messages();
    assert!(messages[0]["result"]["capabilities"]["extensions"][TASKS].is_object(), "{messages:?}");
    server.post(Some(&session), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    session
}

#[test]
fn another_callers_task_is_unknown_on_legacy_sessions() {
    let dir = TempDir::new("tasks-owner");
    let server = server(&dir);
    let (mine, theirs) = (legacy_session(&server), legacy_session(&server));
    let created =
        server.request(&mine, 2, "tools/call", json!({ "name": "compute", "arguments": { "label": "mine" } }));
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().unwrap();
    for method in ["tasks/get", "tasks/cancel"] {
        let foreign = server.request(&theirs, 3, method, json!({ "taskId": id }));
        assert_eq!(foreign["error"]["code"], -32602, "{method}: {foreign}");
        assert_eq!(foreign["error"]["message"], format!("unknown task: {id}"));
    }
    let foreign = server.request(&theirs, 4, "tasks/update", json!({ "taskId": id, "inputResponses": {} }));
    assert_eq!(foreign["error"]["code"], -32602, "{foreign}");
    // The 2026-07-28 caller over HTTP is another caller too.
    let (_, message) = modern(server.addr, "tasks/get", json!({ "taskId": id }), with_tasks());
    assert_eq!(message["error"]["code"], -32602, "{message}");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let task = server.request(&mine, 5, "tasks/get", json!({ "taskId": id }));
        if task["result"]["status"] == "completed" {
            assert_eq!(task["result"]["result"]["content"][0]["text"], "computed mine");
            break;
        }
        assert!(Instant::now() < deadline, "{task}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_task_is_dropped_one_ttl_after_it_settled() {
    let dir = TempDir::new("tasks-ttl");
    let server = server(&dir);
    let id = start_task(server.addr, "brief", json!({}));
    let done = wait_status(server.addr, &id, &["completed", "failed", "cancelled"]);
    assert_eq!((done["status"].as_str(), done["ttlMs"].as_u64()), (Some("completed"), Some(1000)));
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let (_, message) = modern(server.addr, "tasks/get", json!({ "taskId": id }), with_tasks());
        if message["error"]["code"] == -32602 {
            break;
        }
        assert_eq!(message["result"]["status"], "completed", "kept as it settled until dropped: {message}");
        assert!(Instant::now() < deadline, "task {id} was never dropped");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_legacy_stdio_session_that_declared_the_extension_gets_tasks() {
    let dir = TempDir::new("tasks-stdio");
    let path = dir.write("tasks.yaml", CATALOG);
    let mut server = Server::start(&path, &[]);
    let init = server.result(
        "initialize",
        json!({ "protocolVersion": "2025-11-25", "capabilities": { "extensions": { TASKS: {} } },
                "clientInfo": { "name": "tasks-test", "version": "1" } }),
    );
    assert!(init["capabilities"]["extensions"][TASKS].is_object(), "{init}");
    server.notify("notifications/initialized", json!({}));
    let created = server.result("tools/call", json!({ "name": "compute", "arguments": { "label": "stdio" } }));
    let id = created["taskId"].as_str().unwrap_or_else(|| panic!("a task: {created}")).to_owned();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let task = server.result("tasks/get", json!({ "taskId": id }));
        if task["status"] == "completed" {
            assert_eq!(task["result"]["content"][0]["text"], "computed stdio");
            break;
        }
        assert!(Instant::now() < deadline, "{task}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ask_first_asks_on_the_call_then_the_task_runs_on_with_the_answer() {
    let dir = TempDir::new("tasks-ask-first");
    let path = dir.write("tasks.yaml", CATALOG);
    let mut server = Server::start(&path, &[]);
    server.result(
        "initialize",
        json!({ "protocolVersion": "2025-11-25", "capabilities": { "elicitation": {}, "extensions": { TASKS: {} } },
                "clientInfo": { "name": "tasks-test", "version": "1" } }),
    );
    server.notify("notifications/initialized", json!({}));
    server.send(&json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": {"name": "named"}}));
    // The question comes before any task exists.
    let deadline = Instant::now() + TIMEOUT;
    let ask = loop {
        let message = server.next_message(deadline).expect("an elicitation request");
        if message["method"] == "elicitation/create" {
            break message;
        }
        assert!(message.get("id").is_none(), "no answer before the question: {message}");
    };
    assert_eq!(ask["params"]["message"], "What is your name?");
    server.send(
        &json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"name": "Alice"}}}),
    );
    let created = server.response(&json!(50));
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let task = server.result("tasks/get", json!({ "taskId": id }));
        assert_ne!(task["status"], "input_required", "the answer is not asked again: {task}");
        if task["status"] == "completed" {
            assert_eq!(task["result"]["content"][0]["text"], "Hello, Alice!");
            break;
        }
        assert!(Instant::now() < deadline, "{task}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
