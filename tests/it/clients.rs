//! Per-client bounds and privacy, end to end: subscriptions and listen
//! filters are validated and capped, and a reload tells each client only
//! about what it subscribed to.

use crate::common;

use common::http::{HttpServer, wait_for};
use common::{Server, TempDir, meta_2026};
use serde_json::{Value, json};

/// The cap on subscriptions per client (see `hub::MAX_SUBSCRIPTIONS`).
const MAX_SUBSCRIPTIONS: usize = 1_000;

const CATALOG: &str = r#"
server: { name: clients, version: "1.0" }
resources:
  - { uri: "c://note", name: note, text: "a note" }
resourceTemplates:
  - { uriTemplate: "c://items/{id}", name: item, text: "item {{ id }}" }
"#;

fn catalog() -> (TempDir, std::path::PathBuf) {
    let dir = TempDir::new("clients");
    let path = dir.write("catalog.yaml", CATALOG);
    (dir, path)
}

#[test]
fn a_session_subscribes_to_at_most_a_thousand_resources() {
    let (_dir, path) = catalog();
    let mut server = Server::initialized(&path, &[]);
    for idx in 0..MAX_SUBSCRIPTIONS {
        server.result("resources/subscribe", json!({"uri": format!("c://items/{idx}")}));
    }
    let over = server.error("resources/subscribe", json!({"uri": "c://note"}));
    assert_eq!(over["code"], -32602, "{over}");
    assert!(over["message"].as_str().unwrap().contains("at most 1000"), "{over}");
    assert_eq!(over["data"]["limit"], MAX_SUBSCRIPTIONS);
    // Subscribing again to one it has is not a new subscription; unsubscribing makes room.
    server.result("resources/subscribe", json!({"uri": "c://items/0"}));
    server.result("resources/unsubscribe", json!({"uri": "c://items/0"}));
    server.result("resources/subscribe", json!({"uri": "c://note"}));
    // Unknown resources are still "resource not found".
    server.result("resources/unsubscribe", json!({"uri": "c://items/1"}));
    let missing = server.error("resources/subscribe", json!({"uri": "c://nothing"}));
    assert_eq!((missing["code"].clone(), missing["data"]["uri"].clone()), (json!(-32002), json!("c://nothing")));
}

/// Sends a 2026-07-28 `subscriptions/listen` with `notifications` and
/// returns the messages up to its response (or its acknowledgment).
fn listen(server: &mut Server, id: i64, notifications: Value) -> (Vec<Value>, Option<Value>) {
    server.send(&json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": {"_meta": meta_2026(json!({})), "notifications": notifications}}));
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    let mut seen = Vec::new();
    loop {
        let message = server.next_message(deadline).expect("an answer to subscriptions/listen");
        if message["id"] == id && message.get("method").is_none() {
            return (seen, Some(message));
        }
        let acknowledged = message["method"] == "notifications/subscriptions/acknowledged";
        seen.push(message);
        if acknowledged && seen.last().is_some_and(|ack| ack["params"]["notifications"] != json!({})) {
            return (seen, None);
        }
    }
}

#[test]
fn listen_filters_are_validated_and_capped() {
    let (_dir, path) = catalog();
    let mut server = Server::start(&path, &[]);

    let (_, error) = listen(&mut server, 1, json!({"resourceSubscriptions": ["c://nothing"]}));
    let error = error.expect("an unknown resource is refused");
    assert_eq!(error["error"]["code"], -32602, "{error}");
    assert_eq!(error["error"]["data"]["uri"], "c://nothing", "{error}");

    let many: Vec<String> = (0..=MAX_SUBSCRIPTIONS).map(|idx| format!("c://items/{idx}")).collect();
    let (seen, error) = listen(&mut server, 2, json!({"resourceSubscriptions": many}));
    let error = error.expect("a filter over the cap is refused");
    assert_eq!(error["error"]["code"], -32602, "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("at most 1000"), "{error}");
    // Whatever was acknowledged before the refusal accepted nothing.
    assert!(seen.iter().all(|ack| ack["params"]["notifications"] == json!({})), "{seen:?}");

    let (_, error) = listen(&mut server, 3, json!({"resourceSubscriptions": "c://note"}));
    assert_eq!(error.expect("a malformed filter is refused")["error"]["code"], -32602);

    // A valid filter at the cap is acknowledged as asked.
    let mut most: Vec<String> = (1..MAX_SUBSCRIPTIONS).map(|idx| format!("c://items/{idx}")).collect();
    most.push("c://note".to_owned());
    let (seen, response) = listen(&mut server, 4, json!({"resourceSubscriptions": most, "toolsListChanged": true}));
    assert!(response.is_none(), "{response:?}");
    let ack = seen.last().unwrap();
    assert_eq!(ack["params"]["notifications"]["resourceSubscriptions"].as_array().unwrap().len(), MAX_SUBSCRIPTIONS);
}

#[test]
fn a_reload_report_names_only_what_that_client_subscribed_to() {
    let dir = TempDir::new("clients-reload");
    dir.write("mine.txt", "one");
    dir.write("theirs.txt", "one");
    let path = dir.write(
        "catalog.yaml",
        "server: { name: live, version: 1.0.0 }\nresources:\n  - { uri: \"file:///mine\", name: mine, file: mine.txt }\n  - { uri: \"file:///theirs\", name: theirs, file: theirs.txt }\n",
    );
    let server = HttpServer::start(&path, &[], &[]);
    let mine = server.session();
    let theirs = server.session();
    for (session, uri) in [(&mine, "file:///mine"), (&theirs, "file:///theirs")] {
        let subscribed = server.request(session, 2, "resources/subscribe", json!({"uri": uri}));
        assert!(subscribed.get("result").is_some(), "{subscribed}");
        let level = server.request(session, 3, "logging/setLevel", json!({"level": "info"}));
        assert!(level.get("result").is_some(), "{level}");
    }
    let my_events = server.stream(&mine);
    let their_events = server.stream(&theirs);
    // Both change in one save burst: one reload, two updated resources.
    std::fs::write(dir.path("mine.txt"), "two").unwrap();
    std::fs::write(dir.path("theirs.txt"), "two").unwrap();
    for (events, own, other) in
        [(&my_events, "file:///mine", "file:///theirs"), (&their_events, "file:///theirs", "file:///mine")]
    {
        let mut reports = Vec::new();
        // Until the report that names this client's own resource (a burst may reload twice).
        while !reports.iter().any(|r: &Value| r.to_string().contains(own)) {
            let report = wait_for(events, "notifications/message");
            assert_eq!(report["params"]["logger"], "carte.reload", "{report}");
            reports.push(report);
        }
        for report in &reports {
            assert!(!report.to_string().contains(other), "a client heard of another's subscription: {report}");
        }
    }
}

/// The resident memory of process `pid`, in bytes (`VmRSS` in /proc; 0 once it is gone).
fn resident_bytes(pid: u32) -> u64 {
    common::memory_bytes(pid, "VmRSS").unwrap_or(0)
}

#[test]
fn a_client_that_does_not_read_its_replies_stops_carte_reading_and_memory_stays_bounded() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    // 8,000 lists with a 1 KiB tool description: far more replies than carte
    // queues for a client (1 MiB), and more requests than a pipe holds.
    const REQUESTS: usize = 8_000;
    // What carte may grow by over its size once initialized (it queues 1 MiB).
    const GROWTH: u64 = 12 * 1024 * 1024;
    let dir = TempDir::new("clients-outbox");
    let description = "x".repeat(1024);
    let path = dir.write(
        "catalog.yaml",
        &format!("server: {{ name: big, version: 1.0.0 }}\ntools:\n  - {{ name: big, description: {description}, run: {{ text: ok }} }}\n"),
    );
    let mut child = common::carte()
        .arg("serve")
        .arg(&path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("carte starts");
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    // The reader reads the `initialize` reply, then nothing until told to go on.
    let (lines, replies) = std::sync::mpsc::channel::<Value>();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        let mut first = true;
        while stdout.read_line(&mut line).is_ok_and(|n| n > 0) {
            let Ok(value) = serde_json::from_str::<Value>(&line) else { break };
            if lines.send(value).is_err() {
                break;
            }
            line.clear();
            if std::mem::take(&mut first) && wait.recv().is_err() {
                break;
            }
        }
    });
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "no-reader", "version": "1"}}});
    writeln!(stdin, "{init}\n{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
    let reply = replies.recv_timeout(common::TIMEOUT).expect("initialize is answered");
    assert!(reply["result"].is_object(), "{reply}");
    let start = resident_bytes(pid);

    // The writer sends every request; it blocks once carte stops reading.
    let written = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let writer = std::thread::spawn({
        let (written, done) = (written.clone(), done.clone());
        move || {
            for id in 1..=REQUESTS {
                let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {}});
                if writeln!(stdin, "{request}").is_err() {
                    break;
                }
                written.fetch_add(1, Ordering::Relaxed);
            }
            done.store(true, Ordering::Relaxed);
            stdin
        }
    });
    // Watch memory until the writer is done or stuck for 2 s, and 1 s longer
    // (a debug build pauses now and then: a stop of 2 s is carte not reading).
    let deadline = Instant::now() + common::TIMEOUT;
    let (mut peak, mut last, mut since) = (0, 0, Instant::now());
    let mut settled: Option<Instant> = None;
    while Instant::now() < deadline && settled.is_none_or(|at| at.elapsed() < Duration::from_secs(1)) {
        peak = peak.max(resident_bytes(pid));
        if peak > start + GROWTH {
            break;
        }
        let now = written.load(Ordering::Relaxed);
        if now != last {
            (last, since) = (now, Instant::now());
        }
        if settled.is_none() && (done.load(Ordering::Relaxed) || since.elapsed() > Duration::from_secs(2)) {
            settled = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let grew = peak.saturating_sub(start) / 1024;
    assert!(peak <= start + GROWTH, "carte grew by {grew} KiB while its client did not read");
    assert!(written.load(Ordering::Relaxed) < REQUESTS, "carte read every request without its replies being read");

    // Reading now gets every reply.
    go.send(()).unwrap();
    let mut answered = std::collections::HashSet::new();
    while answered.len() < REQUESTS {
        let reply = replies.recv_timeout(common::TIMEOUT).expect("every request is answered");
        assert_eq!(reply["result"]["tools"][0]["description"].as_str().map(str::len), Some(1024), "{}", reply["id"]);
        answered.insert(reply["id"].as_u64().unwrap());
    }
    let stdin = writer.join().unwrap();
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
}
