//! Two real carte processes sharing one real PostgreSQL database through
//! `--state` (`CARTE_TEST_POSTGRES`; without it these tests print SKIP, a
//! failure with `CARTE_REQUIRE_POSTGRES=1`): a legacy session started on one
//! replica continues on the other, a booking made through one is heard by a
//! subscriber of the other, and a task started on one is read and cancelled
//! through the other, or reported failed there when the first is killed. A `--state` database that does not answer leaves
//! carte up but not ready.

use crate::common;

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use common::http::{HttpServer, send, wait_for};
use common::{Postgres, TIMEOUT, TempDir, assert_group_gone, group_members, postgres, read_pid};
use serde_json::{Value, json};

const TASKS: &str = "io.modelcontextprotocol/tasks";
const UPDATED: &str = "notifications/resources/updated";
/// Every replica signs request states with this key.
const KEY: (&str, &str) = ("CARTE_TEST_STATE_KEY", "0123456789abcdef0123456789abcdef0123456789abcdef");

/// A catalog over `url`: bookings (a tool and a live resource) and a task
/// that runs a program for a long while.
fn catalog(url: &str) -> String {
    format!(
        r#"server: {{ name: replicas, version: 1.0.0 }}
databases:
  shop:
    url: {url}
    setup:
      - CREATE TABLE IF NOT EXISTS bookings (id serial PRIMARY KEY, room text NOT NULL)
tools:
  - name: book
    description: Books a room.
    inputSchema: {{ type: object, properties: {{ room: {{ type: string }} }}, required: [room] }}
    run:
      sql: {{ database: shop, statement: "INSERT INTO bookings (room) VALUES (:room) RETURNING id" }}
      text: "booking {{{{ rows[0].id }}}}"
  - name: sleeper
    description: Runs a program for a long while.
    task: {{ mode: required }}
    run:
      command: {{ argv: [sh, -c, "echo $$ > group.pid; exec sleep 30"], timeout: 1m }}
  - name: confirm
    description: Asks before it answers; polled rarely, so an answer must be told, not found.
    task: {{ mode: required, pollInterval: 1m }}
    run:
      steps:
        - elicit:
            message: "Go?"
            requestedSchema: {{ type: object, properties: {{ go: {{ type: boolean }} }}, required: [go] }}
      text: "go={{{{ elicited.content.go }}}}"
resources:
  - uri: shop://bookings
    name: bookings
    description: Every booking
    sql: {{ database: shop, statement: "SELECT id, room FROM bookings ORDER BY id" }}
"#
    )
}

/// A replica of the catalog in `dir`, sharing state at `state`.
fn replica(dir: &TempDir, state: &str) -> HttpServer {
    let server = HttpServer::start(&dir.path("catalog.yaml"), &["--state", state, "--state-key-env", KEY.0], &[KEY]);
    wait_ready(server.addr);
    server
}

/// `/readyz`: its status and body.
fn readyz(addr: SocketAddr) -> (u16, Value) {
    let response = send(addr, "GET", "/readyz", &[], None);
    let status = response.status;
    (status, serde_json::from_str(&response.text()).expect("JSON"))
}

/// Waits (bounded) until `/readyz` says ready: the replica listens for the others.
fn wait_ready(addr: SocketAddr) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let (status, body) = readyz(addr);
        if status == 200 {
            return;
        }
        assert!(Instant::now() < deadline, "never ready: {body}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two replicas of one catalog on the test's own database, or `None` (SKIP).
fn two_replicas(test: &str) -> Option<(TempDir, Postgres, HttpServer, HttpServer)> {
    let database = postgres(test)?;
    let dir = TempDir::new(test);
    dir.write("catalog.yaml", &catalog(&database.url));
    // One after the other: both apply the catalog's `setup`.
    let a = replica(&dir, &database.url);
    let b = replica(&dir, &database.url);
    Some((dir, database, a, b))
}

/// A 2026-07-28 request with the tasks extension declared: its result.
fn modern(addr: SocketAddr, method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = common::meta_2026(json!({ "elicitation": {}, "extensions": { TASKS: {} } }));
    let name = params.get("name").or_else(|| params.get("taskId")).and_then(Value::as_str).map(str::to_owned);
    let mut headers = vec![("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method)];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name));
    }
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
    let message = send(addr, "POST", "/mcp", &headers, Some(&body))
        .messages()
        .into_iter()
        .find(|m| m["id"] == 7)
        .expect("a response");
    message.get("result").cloned().unwrap_or_else(|| panic!("{method} failed: {message}"))
}

#[test]
fn a_legacy_session_started_on_one_replica_continues_on_the_other() {
    let Some((_dir, database, a, b)) = two_replicas("replicas_session") else { return };
    let session = a.session();
    let booked = b.request(&session, 2, "tools/call", json!({"name": "book", "arguments": {"room": "blue"}}));
    assert_eq!(booked["result"]["content"][0]["text"], "booking 1", "{booked}");
    // And back: both replicas now serve it.
    let listed = a.request(&session, 3, "tools/list", json!({}));
    assert!(listed["result"]["tools"].as_array().is_some_and(|tools| tools.len() == 3), "{listed}");
    // A DELETE through B ends it there and in the database.
    let stored = format!("SELECT count(*) FROM carte_sessions WHERE id = '{session}'");
    assert_eq!(database.query(&stored)[0][0].as_deref(), Some("1"));
    let deleted =
        send(b.addr, "DELETE", "/mcp", &[("Mcp-Session-Id", &session), ("MCP-Protocol-Version", "2025-11-25")], None);
    assert_eq!(deleted.status, 200);
    assert_eq!(database.query(&stored)[0][0].as_deref(), Some("0"));
    let unknown = a.post(Some("no-such-session"), &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}));
    assert_eq!(unknown.status, 404, "a session no replica started");
}

#[test]
fn a_subscriber_on_one_replica_hears_of_a_booking_made_through_the_other() {
    let Some((_dir, database, a, b)) = two_replicas("replicas_live") else { return };
    let listener = b.session();
    let events = b.stream(&listener);
    let subscribed = b.request(&listener, 2, "resources/subscribe", json!({"uri": "shop://bookings"}));
    assert!(subscribed.get("result").is_some(), "{subscribed}");
    let booker = a.session();
    let booked = a.request(&booker, 2, "tools/call", json!({"name": "book", "arguments": {"room": "red"}}));
    assert_eq!(booked["result"]["isError"], false, "{booked}");
    let heard = wait_for(&events, UPDATED);
    assert_eq!(heard["params"]["uri"], "shop://bookings", "{heard}");
    let read = b.request(&listener, 3, "resources/read", json!({"uri": "shop://bookings"}));
    assert_eq!(read["result"]["contents"][0]["text"], r#"[{"id":1,"room":"red"}]"#, "{read}");

    // The listeners' connections drop: both replicas connect again and still hear each other.
    let listeners = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND application_name = 'carte-listener'",
        database.name
    );
    assert_eq!(database.query(&listeners)[0][0].as_deref(), Some("2"));
    database.query(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}' AND application_name = 'carte-listener'",
        database.name
    ));
    let deadline = Instant::now() + TIMEOUT;
    while database.query(&listeners)[0][0].as_deref() != Some("2") {
        assert!(Instant::now() < deadline, "the replicas did not listen again");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_ready(a.addr);
    wait_ready(b.addr);
    let booked = a.request(&booker, 3, "tools/call", json!({"name": "book", "arguments": {"room": "green"}}));
    assert_eq!(booked["result"]["isError"], false, "{booked}");
    let heard = wait_for(&events, UPDATED);
    assert_eq!(heard["params"]["uri"], "shop://bookings", "{heard}");
    let read = b.request(&listener, 4, "resources/read", json!({"uri": "shop://bookings"}));
    assert_eq!(read["result"]["contents"][0]["text"], r#"[{"id":1,"room":"red"},{"id":2,"room":"green"}]"#);
}

#[test]
fn a_task_started_on_one_replica_is_read_and_cancelled_through_the_other() {
    let Some((dir, _database, a, b)) = two_replicas("replicas_task") else { return };
    let created = modern(a.addr, "tools/call", json!({ "name": "sleeper", "arguments": {} }));
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().expect("a task id").to_owned();
    let pgid = read_pid(&dir.path("group.pid"));
    assert!(!group_members(pgid).is_empty(), "the program runs");
    let seen = modern(b.addr, "tasks/get", json!({ "taskId": id }));
    assert_eq!(seen["status"], "working", "{seen}");
    let ack = modern(b.addr, "tasks/cancel", json!({ "taskId": id }));
    assert_eq!(ack, json!({ "resultType": "complete" }));
    // The replica running it stopped it: its program is gone.
    assert_group_gone(pgid);
    for replica in [&a, &b] {
        assert_eq!(modern(replica.addr, "tasks/get", json!({ "taskId": id }))["status"], "cancelled");
    }
    let (_, ready) = readyz(a.addr);
    assert_eq!(ready["callsInFlight"], 0, "{ready}");
}

#[test]
fn a_task_whose_replica_was_killed_fails_on_the_other_and_its_program_is_gone() {
    let Some((dir, _database, a, b)) = two_replicas("replicas_killed") else { return };
    let created = modern(a.addr, "tools/call", json!({ "name": "sleeper", "arguments": {} }));
    let id = created["taskId"].as_str().expect("a task id").to_owned();
    let pgid = read_pid(&dir.path("group.pid"));
    assert_eq!(modern(b.addr, "tasks/get", json!({ "taskId": id }))["status"], "working");
    a.signal("KILL");
    // The program died with its replica, and the other replica says how the task ended.
    assert_group_gone(pgid);
    let failed = wait_status(b.addr, &id, &["failed", "cancelled", "completed"]);
    assert_eq!(failed["status"], "failed", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("its replica stopped"), "{failed}");
    // A cancel now changes nothing.
    assert_eq!(modern(b.addr, "tasks/cancel", json!({ "taskId": id })), json!({ "resultType": "complete" }));
    assert_eq!(modern(b.addr, "tasks/get", json!({ "taskId": id }))["status"], "failed");
}

/// Polls `tasks/get` on `addr` (bounded) until task `id` is in one of `statuses`.
fn wait_status(addr: SocketAddr, id: &str, statuses: &[&str]) -> Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let task = modern(addr, "tasks/get", json!({ "taskId": id }));
        if statuses.contains(&task["status"].as_str().unwrap_or_default()) {
            return task;
        }
        assert!(Instant::now() < deadline, "task {id} never reached {statuses:?}: {task}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_task_started_on_one_replica_takes_answers_given_through_the_other() {
    let Some((_dir, _database, a, b)) = two_replicas("replicas_answer") else { return };
    let created = modern(a.addr, "tools/call", json!({ "name": "confirm", "arguments": {} }));
    let id = created["taskId"].as_str().expect("a task id").to_owned();
    let asking = wait_status(b.addr, &id, &["input_required", "completed", "failed"]);
    assert_eq!(asking["status"], "input_required", "{asking}");
    let key = asking["inputRequests"].as_object().and_then(|r| r.keys().next().cloned()).expect("a question");
    let answers = json!({ "taskId": id, "inputResponses": { key: { "action": "accept", "content": { "go": true } } } });
    modern(b.addr, "tasks/update", answers);
    // The run on A wakes at once (its next poll is a minute away).
    let done = wait_status(a.addr, &id, &["completed", "failed", "cancelled"]);
    assert_eq!(done["result"]["content"][0]["text"], "go=True", "{done}");
}

#[test]
fn a_state_database_that_does_not_answer_leaves_carte_up_but_not_ready() {
    // A port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = TempDir::new("replicas_down");
    let path = dir.write(
        "catalog.yaml",
        "tools:\n  - name: wait\n    description: Waits.\n    task: { mode: required }\n    run: { text: done }\n",
    );
    let state = format!("postgres://carte:secret@127.0.0.1:{port}/state");
    // From the environment (CARTE_STATE), as a service keeps a password out of its command line.
    let server = HttpServer::start(&path, &[], &[("CARTE_STATE", &state)]);
    let help = common::carte().args(["serve", "--help"]).env("CARTE_STATE", &state).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("CARTE_STATE") && !help.contains("secret"), "{help}");
    let (status, body) = readyz(server.addr);
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "unready");
    assert_eq!(body["stateDatabase"], "unreachable");
    assert!(!body.to_string().contains("secret"), "{body}");
    assert_eq!(send(server.addr, "GET", "/healthz", &[], None).status, 200);
    // A request that needs the store fails, with a reason; carte stays up.
    let mut params = json!({ "name": "wait", "arguments": {} });
    params["_meta"] = common::meta_2026(json!({ "extensions": { TASKS: {} } }));
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params });
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "wait")];
    let failed = send(server.addr, "POST", "/mcp", &headers, Some(&body)).messages();
    let error = &failed.iter().find(|m| m["id"] == 7).expect("a response")["error"];
    assert!(error["message"].as_str().is_some_and(|m| m.contains("state database does not answer")), "{error}");
    assert_eq!(send(server.addr, "GET", "/healthz", &[], None).status, 200);
    // A legacy session cannot be stored for the other replicas: refused,
    // retryable, rather than acknowledged and known to this replica alone.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let refused = server.post(None, &init);
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("retry-after"), Some("5"));
    assert!(refused.header("mcp-session-id").is_none(), "no session id for a session that was not stored");
    let reply: Value = serde_json::from_str(&refused.text()).expect("a JSON-RPC error");
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("could not be stored") && message.contains("try again"), "{reply}");
}

#[test]
fn state_takes_only_postgres_urls() {
    let dir = TempDir::new("replicas_scheme");
    let path = dir.write("catalog.yaml", "tools: []\n");
    let output = common::carte()
        .args(["serve", "--http", "127.0.0.1:0", "--state", "redis://u:secret@127.0.0.1:6379/0"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("`redis://` is not PostgreSQL's") && !stderr.contains("secret"), "{stderr}");
}
