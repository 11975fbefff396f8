//! SQL end to end: loading a catalog changes no database (a rejected one at
//! start-up, on reload or in `carte check` leaves the files byte-identical,
//! and `check` creates none), and statements are bounded: a timeout, a
//! cancelled call stops its statement, and rows are capped with a notice.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{Server, TempDir, text};
use serde_json::json;

/// A shop whose `setup` starts with `first_setup` (a YAML list item, or
/// nothing), and whose `count` tool renders `count_text`.
fn shop(first_setup: &str, count_text: &str) -> String {
    shop_with(first_setup, count_text, "")
}

/// Like [`shop`], with `last_setup` at the end of `setup`.
fn shop_with(first_setup: &str, count_text: &str, last_setup: &str) -> String {
    format!(
        r#"server: {{ name: shop, version: 1.0.0 }}
databases:
  shop:
    url: sqlite:shop.db
    setup:
      {first_setup}
      - CREATE TABLE IF NOT EXISTS bookings (id INTEGER PRIMARY KEY, room TEXT NOT NULL)
      {last_setup}
tools:
  - name: book
    description: Books a room.
    inputSchema: {{ type: object, properties: {{ room: {{ type: string }} }}, required: [room] }}
    run:
      sql: {{ database: shop, statement: "INSERT INTO bookings (room) VALUES (:room) RETURNING id" }}
      text: "booked #{{{{ rows[0].id }}}}"
  - name: count
    description: Counts bookings.
    run:
      sql: {{ database: shop, statement: "SELECT count(*) AS n FROM bookings" }}
      text: "{count_text}"
"#
    )
}

const GOOD_COUNT: &str = "{{ rows[0].n }} bookings";
/// The edit the issue measured: the table is dropped in `setup`, and a
/// template typo elsewhere gets the catalog rejected.
const DROP: &str = "- DROP TABLE IF EXISTS bookings";
const TYPO: &str = "{{ rows[0].n }";

/// Every file of `dir` but the catalog, with its bytes.
fn files(dir: &Path) -> Files {
    Files(
        std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_none_or(|ext| ext != "yaml"))
            .map(|path| (path.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&path).unwrap()))
            .collect(),
    )
}

/// Files by name with their bytes; printed as names and sizes.
#[derive(PartialEq, Eq)]
struct Files(BTreeMap<String, Vec<u8>>);

impl std::fmt::Debug for Files {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.iter().map(|(name, bytes)| (name, format!("{} bytes", bytes.len())))).finish()
    }
}

/// Runs `carte ARGS` in `dir` with no input; its exit code and stderr, within the timeout.
fn carte(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let (code, _, stderr) = carte_given(dir, args, None);
    (code, stderr)
}

/// Runs `carte ARGS` in `dir` with `input` on its stdin (then closed), if
/// any; its exit code, stdout and stderr, within the timeout.
fn carte_given(dir: &Path, args: &[&str], input: Option<&str>) -> (Option<i32>, String, String) {
    let mut carte = common::carte();
    carte.args(args).current_dir(dir).env_remove("CARTE_LOG");
    let ran = common::run_given(&mut carte, input.map(str::as_bytes), &format!("carte {args:?}"), common::TIMEOUT);
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    (ran.status.code(), text(ran.stdout), text(ran.stderr))
}

/// A shop database with one booking, written by the real binary and closed.
fn shop_with_a_booking(dir: &TempDir) {
    dir.write("catalog.yaml", &shop("", GOOD_COUNT));
    let (code, stderr) = carte(&dir.0, &["call", "catalog.yaml", "book", "room=Focus"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(files(&dir.0).0.keys().collect::<Vec<_>>(), ["shop.db"], "the database is closed cleanly");
}

#[test]
fn a_catalog_rejected_at_start_up_changes_no_database() {
    let dir = TempDir::new("sql-start-up");
    shop_with_a_booking(&dir);
    let before = files(&dir.0);
    dir.write("catalog.yaml", &shop(DROP, TYPO));
    let (code, stderr) = carte(&dir.0, &["serve", "catalog.yaml"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("syntax error"), "rejected for its template: {stderr}");
    assert_eq!(files(&dir.0), before, "the database is byte-identical");
}

/// A setup that fails against the real database ends `carte serve` before
/// anything is answered or bound, and is rolled back.
#[test]
fn a_setup_that_fails_at_start_up_serves_nothing() {
    let dir = TempDir::new("sql-setup-fails");
    shop_with_a_booking(&dir);
    let (code, stderr) = carte(&dir.0, &["call", "catalog.yaml", "book", "room=Focus"]);
    assert_eq!(code, Some(0), "{stderr}");
    let before = files(&dir.0);
    // Valid as far as loading can tell; the index cannot be built over two bookings of Focus.
    let unique = "- CREATE UNIQUE INDEX IF NOT EXISTS one_per_room ON bookings (room)";
    dir.write("catalog.yaml", &shop_with("", GOOD_COUNT, unique));

    // Over stdio, with a client already asking.
    let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let (code, stdout, stderr) = carte_given(&dir.0, &["serve", "catalog.yaml"], Some(&format!("{initialize}\n")));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("UNIQUE constraint failed"), "{stderr}");
    assert!(!stderr.contains("serving"), "not said to serve: {stderr}");
    assert_eq!(stdout, "", "nothing answered");
    assert_eq!(files(&dir.0), before, "the failed setup was rolled back");

    // Over HTTP: refused before the port is bound.
    let (code, stderr) = carte(&dir.0, &["serve", "--http", "127.0.0.1:0", "catalog.yaml"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("UNIQUE constraint failed"), "{stderr}");
    assert!(!stderr.contains("serving"), "neither the catalog nor a port served: {stderr}");
    assert_eq!(files(&dir.0), before, "the failed setup was rolled back");
}

#[test]
fn carte_check_changes_no_database_and_creates_none() {
    let dir = TempDir::new("sql-check");
    shop_with_a_booking(&dir);
    let before = files(&dir.0);
    dir.write("catalog.yaml", &shop(DROP, TYPO));
    let (code, stderr) = carte(&dir.0, &["check", "catalog.yaml"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(files(&dir.0), before, "a rejected catalog: the database is byte-identical");
    dir.write("catalog.yaml", &shop(DROP, GOOD_COUNT));
    let (code, stderr) = carte(&dir.0, &["check", "catalog.yaml"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(files(&dir.0), before, "a valid catalog: checking it applies nothing either");

    let empty = TempDir::new("sql-check-new");
    empty.write("catalog.yaml", &shop("", GOOD_COUNT));
    let (code, stderr) = carte(&empty.0, &["check", "catalog.yaml"]);
    assert_eq!(code, Some(0), "checked against an empty in-memory database: {stderr}");
    assert!(files(&empty.0).0.is_empty(), "`carte check` created {:?}", files(&empty.0));
}

#[test]
fn a_reload_rejected_before_or_while_applying_changes_no_database() {
    let dir = TempDir::new("sql-reload");
    let path = dir.write("catalog.yaml", &shop("", GOOD_COUNT));
    let mut server = Server::initialized(&path, &[]);
    server.result("logging/setLevel", json!({"level": "info"}));
    let booked = server.result("tools/call", json!({"name": "book", "arguments": {"room": "Focus"}}));
    assert_eq!(text(&booked), "booked #1");
    server.result("tools/call", json!({"name": "book", "arguments": {"room": "Focus"}}));
    // The server has the file open in WAL mode: its data is in shop.db and shop.db-wal.
    let data = |dir: &TempDir| {
        let mut files = files(&dir.0);
        files.0.remove("shop.db-shm"); // the WAL index, shared memory rather than data
        files
    };
    let before = data(&dir);
    assert!(before.0.contains_key("shop.db-wal"), "{before:?}");

    std::fs::write(&path, shop(DROP, TYPO)).unwrap();
    let (_, report) = server.wait_reload();
    assert_eq!(report["params"]["level"], "error", "{report}");
    assert_eq!(data(&dir), before, "the database is byte-identical after a rejected reload");
    assert_eq!(text(&server.result("tools/call", json!({"name": "count"}))), "2 bookings");

    // Valid as far as loading can tell (the scratch copy has no rows), but
    // the index cannot be built over the two bookings of Focus: applying
    // fails, and the reload is rejected.
    let unique = "- CREATE UNIQUE INDEX IF NOT EXISTS one_per_room ON bookings (room)";
    std::fs::write(&path, shop_with("", GOOD_COUNT, unique)).unwrap();
    let (_, report) = server.wait_reload();
    assert_eq!(report["params"]["level"], "error", "{report}");
    let message = report["params"]["data"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("UNIQUE constraint failed"), "{report}");
    assert_eq!(data(&dir), before, "the failed setup was rolled back");
    let booked = server.result("tools/call", json!({"name": "book", "arguments": {"room": "Focus"}}));
    assert_eq!(text(&booked), "booked #3", "the old catalog (without the index) is still served");
}

/// A catalog with a runaway tool and a quick one on the same database.
fn runaway(timeout: &str) -> String {
    format!(
        r#"server: {{ name: spin, version: 1.0.0 }}
databases:
  main: {{ url: "sqlite::memory:", timeout: {timeout} }}
tools:
  - name: forever
    description: Counts forever.
    run:
      steps: [ {{ log: {{ level: info, data: counting }} }} ]
      sql: {{ database: main, statement: "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) AS n FROM c" }}
      text: "{{{{ rows[0].n }}}}"
  - name: quick
    description: Answers at once.
    run:
      sql: {{ database: main, statement: "SELECT 42 AS n" }}
      text: "{{{{ rows[0].n }}}}"
  - name: many
    description: Five thousand rows.
    run:
      sql: {{ database: main, statement: "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000) SELECT x FROM c" }}
      text: "{{{{ rows | length }}}} rows, truncated: {{{{ truncated }}}}, last {{{{ rows[-1].x }}}}"
"#
    )
}

#[test]
fn a_runaway_statement_ends_at_its_timeout() {
    let dir = TempDir::new("sql-timeout");
    let path = dir.write("catalog.yaml", &runaway("200ms"));
    let mut server = Server::initialized(&path, &[]);
    let result = server.result("tools/call", json!({"name": "forever"}));
    assert_eq!(result["isError"], true, "{result}");
    assert!(text(&result).contains("timeout (200ms)"), "{result}");
    assert_eq!(text(&server.result("tools/call", json!({"name": "quick"}))), "42");
}

#[test]
fn a_cancelled_call_stops_its_statement() {
    let dir = TempDir::new("sql-cancel");
    let path = dir.write("catalog.yaml", &runaway("1h"));
    let mut server = Server::initialized(&path, &[]);
    server.result("logging/setLevel", json!({"level": "info"}));
    server.send(&json!({"jsonrpc": "2.0", "id": "spin", "method": "tools/call", "params": {"name": "forever"}}));
    // The log step runs just before the statement starts.
    server.wait_notification("notifications/message");
    std::thread::sleep(Duration::from_millis(100));
    server.notify("notifications/cancelled", json!({"requestId": "spin", "reason": "changed my mind"}));
    // The statement held the database; the next call on it is answered
    // (within the test's bounded wait; the statement's timeout is an hour),
    // and the cancelled call never is.
    assert_eq!(text(&server.result("tools/call", json!({"name": "quick"}))), "42");
    assert_eq!(text(&server.result("tools/call", json!({"name": "quick"}))), "42");
}

#[test]
fn a_big_select_is_capped_with_a_notice() {
    let dir = TempDir::new("sql-rows");
    let path = dir.write("catalog.yaml", &runaway("5s"));
    let mut server = Server::initialized(&path, &[]);
    let result = server.result("tools/call", json!({"name": "many"}));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(text(&result), "1000 rows, truncated: True, last 1000");
    let notice = result["content"][1]["text"].as_str().unwrap_or_default();
    assert!(notice.contains("more than 1000 rows"), "{result}");
    let quick = server.result("tools/call", json!({"name": "quick"}));
    assert_eq!(quick["content"].as_array().map(Vec::len), Some(1), "no notice when nothing was left out: {quick}");
}

#[test]
fn a_bad_timeout_is_a_clear_diagnostic() {
    let dir = TempDir::new("sql-bad-timeout");
    dir.write("catalog.yaml", &runaway("0s"));
    let (code, stderr) = carte(&dir.0, &["check", "catalog.yaml"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("database `main`: a timeout of 0 would stop every statement"), "{stderr}");
    dir.write("catalog.yaml", &runaway("2h"));
    let (_, stderr) = carte(&dir.0, &["check", "catalog.yaml"]);
    assert!(stderr.contains("longer than 1h"), "{stderr}");
}

#[test]
fn a_call_whose_http_request_goes_away_stops_its_statement() {
    use std::io::Write as _;

    use common::http::{HttpServer, send};
    let dir = TempDir::new("sql-http-gone");
    let path = dir.write("catalog.yaml", &runaway("1h"));
    let server = HttpServer::start(&path, &[], &[]);
    let call = |id: &str, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "_meta": common::meta_2026(json!({}))}})
    };
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call")];
    // A stateless 2026-07-28 call, on a connection the client then closes.
    let body = serde_json::to_vec(&call("spin", "forever")).unwrap();
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: forever\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        server.addr.port(),
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(stream);
    let mut headers = headers.to_vec();
    headers.push(("Mcp-Name", "quick"));
    let quick = send(server.addr, "POST", "/mcp", &headers, Some(&call("q", "quick")));
    assert_eq!(quick.status, 200);
    let text = quick.text();
    assert!(text.contains(r#""text":"42""#), "{text}");
}

/// Tools whose statements build values as large as a client asks.
const BIG_VALUES: &str = r#"server: { name: big, version: 1.0.0 }
databases:
  scratch:
    url: "sqlite::memory:"
    timeout: 2s
tools:
  - name: hex
    description: The hex of n zero bytes.
    inputSchema: { type: object, properties: { n: { type: integer } }, required: [n] }
    run:
      sql: { database: scratch, statement: "SELECT hex(zeroblob(:n)) AS x" }
      text: "{{ rows[0].x | length }}"
  - name: wide
    description: n rows of a megabyte each.
    inputSchema: { type: object, properties: { n: { type: integer } }, required: [n] }
    run:
      sql: { database: scratch, statement: "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < :n) SELECT i, printf('%.*c', 1000000, 'x') AS x FROM c" }
      text: "{{ rows | length }} rows, truncated: {{ truncated }}"
"#;

#[test]
fn values_are_capped_in_bytes_not_only_rows() {
    let dir = TempDir::new("sql-bytes");
    let path = dir.write("catalog.yaml", BIG_VALUES);
    let mut server = Server::initialized(&path, &[]);
    // One value of 800 MB: SQLite refuses to build it.
    let result = server.result("tools/call", json!({"name": "hex", "arguments": {"n": 400_000_000}}));
    assert_eq!(result["isError"], true, "{result}");
    assert!(text(&result).contains("string or blob too big"), "{result}");
    // A value that fits is built.
    let fits = server.result("tools/call", json!({"name": "hex", "arguments": {"n": 1000}}));
    assert_eq!(text(&fits), "2000", "{fits}");
    // 100 rows of a megabyte: the first 16 MiB of them, with a notice.
    let result = server.result("tools/call", json!({"name": "wide", "arguments": {"n": 100}}));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(text(&result), "16 rows, truncated: True");
    let notice = result["content"][1]["text"].as_str().unwrap_or_default();
    assert!(notice.contains("held more than 16 MiB") && notice.contains("first 16 only"), "{result}");
    let peak = common::memory_bytes(server.pid(), "VmHWM").expect("VmHWM in /proc/PID/status");
    assert!(peak < 400 << 20, "carte's resident memory peaked at {} MiB", peak >> 20);
}
