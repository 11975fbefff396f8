//! Live resources, end to end with the real binary and a real SQLite file:
//! resources that read with `sql:`, and `notifications/resources/updated`
//! after a tool's write changes what they read — over stdio, a legacy HTTP
//! session and a 2026-07-28 listen stream. "No notification" is asserted
//! with a marker: a later write that changes another subscribed resource,
//! new to this marker, whose URI sorts after the one watched, so that a
//! notification for the watched one, had it been sent, would have arrived
//! first (notifications reach a client in order, and one announcement lists
//! its URIs in order).

use crate::common;

use std::sync::mpsc::Receiver;

use common::http::{HttpServer, send};
use common::{Server, TempDir, meta_2026, text};
use serde_json::{Value, json};

/// A catalog with two databases: `shop` (orders, notes) and `other` (logs).
const CATALOG: &str = r#"
server: { name: live, version: 1.0.0 }
databases:
  shop:
    url: sqlite:shop.db
    setup:
      - CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL, customer TEXT NOT NULL)
      - CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)
  other:
    url: sqlite:other.db
    setup:
      - CREATE TABLE IF NOT EXISTS logs (id INTEGER PRIMARY KEY, text TEXT NOT NULL)
tools:
  - name: order
    description: Orders an item for a customer
    inputSchema:
      type: object
      properties: { item: { type: string }, customer: { type: string } }
      required: [item, customer]
    run:
      sql:
        database: shop
        statement: INSERT INTO orders (item, customer) VALUES (:item, :who) RETURNING id
        params: { who: "{{ customer | lower }}" }
      text: "order {{ rows[0].id }}"
  - name: order_and_fail
    description: Orders an item, then its result fails (so the order is rolled back)
    inputSchema: { type: object, properties: { item: { type: string } }, required: [item] }
    run:
      sql: { database: shop, statement: "INSERT INTO orders (item, customer) VALUES (:item, 'x') RETURNING id" }
      text: "{{ fail('no') }}"
  - name: note
    description: Writes a note (the shop database, not its orders)
    inputSchema: { type: object, properties: { text: { type: string } }, required: [text] }
    run:
      sql: { database: shop, statement: "INSERT INTO notes (text) VALUES (:text)" }
      text: noted
  - name: log
    description: Writes a log line (the other database)
    inputSchema: { type: object, properties: { text: { type: string } }, required: [text] }
    run:
      sql: { database: other, statement: "INSERT INTO logs (text) VALUES (:text)" }
      text: logged
  - name: compute
    description: Shows how params are bound
    inputSchema:
      type: object
      properties: { n: { type: integer }, text: { type: string } }
      required: [n, text]
    run:
      sql:
        database: shop
        statement: "SELECT typeof(:next) AS kind, :next AS next, :label AS label, :quoted AS quoted"
        params:
          next: "{{ n + 1 }}"
          label: "n={{ n }}"
          quoted: "{{ text }}"
resources:
  - uri: shop://orders
    name: orders
    description: Every order
    sql: { database: shop, statement: "SELECT id, item, customer FROM orders ORDER BY id" }
  - uri: shop://broken
    name: broken
    description: A statement that fails when it runs
    sql: { database: shop, statement: "SELECT abs(-9223372036854775808) AS n" }
resourceTemplates:
  - uriTemplate: shop://customers/{customer}/orders
    name: customer_orders
    description: One customer's orders
    sql: { database: shop, statement: "SELECT item FROM orders WHERE customer = :customer ORDER BY id" }
    text: "{% for row in rows %}{{ row.item }};{% endfor %}"
  - uriTemplate: zz://notes/{text}
    name: notes
    description: How many notes say this
    sql: { database: shop, statement: "SELECT count(*) AS n FROM notes WHERE text = :text" }
    text: "{{ rows[0].n }}"
  - uriTemplate: zz://logs/{text}
    name: logs
    description: How many log lines say this
    sql: { database: other, statement: "SELECT count(*) AS n FROM logs WHERE text = :text" }
    text: "{{ rows[0].n }}"
"#;

const UPDATED: &str = "notifications/resources/updated";

fn catalog() -> (TempDir, std::path::PathBuf) {
    let dir = TempDir::new("live");
    let path = dir.write("catalog.yaml", CATALOG);
    (dir, path)
}

/// The URIs of the `resources/updated` notifications `server` receives
/// until (and with) one for `marker`.
fn updates_until(server: &mut Server, marker: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let note = server.wait_notification(UPDATED);
        let uri = note["params"]["uri"].as_str().unwrap_or_default().to_owned();
        seen.push(uri.clone());
        if uri == marker {
            return seen;
        }
    }
}

/// Calls tool `name` over stdio; its result.
fn call(server: &mut Server, name: &str, arguments: Value) -> Value {
    server.result("tools/call", json!({"name": name, "arguments": arguments}))
}

fn read(server: &mut Server, uri: &str) -> String {
    let result = server.result("resources/read", json!({"uri": uri}));
    result["contents"][0]["text"].as_str().unwrap_or_else(|| panic!("no text in {result}")).to_owned()
}

/// Writes the note `marker` (on `shop`, changing nothing but the notes) and
/// returns the notifications up to the one for `zz://notes/{marker}`, to
/// which `server` subscribes first.
fn note_marker(server: &mut Server, marker: &str) -> Vec<String> {
    let uri = format!("zz://notes/{marker}");
    server.result("resources/subscribe", json!({"uri": uri}));
    assert_eq!(text(&call(server, "note", json!({"text": marker}))), "noted");
    updates_until(server, &uri)
}

#[test]
fn a_write_notifies_the_subscribers_of_what_it_changed_and_nothing_else() {
    let (_dir, path) = catalog();
    let mut server = Server::initialized(&path, &[]);
    assert_eq!(read(&mut server, "shop://orders"), "[]");
    server.result("resources/subscribe", json!({"uri": "shop://orders"}));

    let ordered = call(&mut server, "order", json!({"item": "tea", "customer": "Ada"}));
    assert_eq!(text(&ordered), "order 1");
    assert_eq!(updates_until(&mut server, "shop://orders"), ["shop://orders"]);
    assert_eq!(read(&mut server, "shop://orders"), r#"[{"id":1,"item":"tea","customer":"ada"}]"#);

    // The same database, but nothing `shop://orders` reads: the marker only.
    assert_eq!(note_marker(&mut server, "one"), ["zz://notes/one"]);

    // Another database: only what reads it.
    server.result("resources/subscribe", json!({"uri": "zz://logs/hello"}));
    call(&mut server, "log", json!({"text": "hello"}));
    assert_eq!(updates_until(&mut server, "zz://logs/hello"), ["zz://logs/hello"]);
    assert_eq!(note_marker(&mut server, "two"), ["zz://notes/two"]);

    // A write rolled back (its result failed) changed nothing.
    let failed = call(&mut server, "order_and_fail", json!({"item": "cake"}));
    assert_eq!(failed["isError"], true, "{failed}");
    assert!(failed.to_string().contains("rolled back"), "{failed}");
    assert_eq!(note_marker(&mut server, "three"), ["zz://notes/three"]);
    assert_eq!(read(&mut server, "shop://orders"), r#"[{"id":1,"item":"tea","customer":"ada"}]"#);

    // Unsubscribed: no more news of it.
    server.result("resources/unsubscribe", json!({"uri": "shop://orders"}));
    call(&mut server, "order", json!({"item": "jam", "customer": "Bo"}));
    assert_eq!(note_marker(&mut server, "four"), ["zz://notes/four"]);
}

#[test]
fn a_resource_template_binds_its_uri_variables() {
    let (_dir, path) = catalog();
    let mut server = Server::initialized(&path, &[]);
    let ada = "shop://customers/ada/orders";
    server.result("resources/subscribe", json!({"uri": ada}));
    assert_eq!(read(&mut server, ada), "");

    call(&mut server, "order", json!({"item": "tea", "customer": "Ada"}));
    assert_eq!(updates_until(&mut server, ada), [ada]);
    assert_eq!(read(&mut server, ada), "tea;");

    // Another customer's order does not change Ada's orders.
    call(&mut server, "order", json!({"item": "jam", "customer": "Bo"}));
    assert_eq!(note_marker(&mut server, "marker"), ["zz://notes/marker"]);
    assert_eq!(read(&mut server, "shop://customers/bo/orders"), "jam;");
    assert_eq!(read(&mut server, "shop://customers/nobody/orders"), "");
}

/// The URIs of the `resources/updated` messages on `events` until (and
/// with) one for `marker`.
fn events_until(events: &Receiver<Value>, marker: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let note = common::http::wait_for(events, UPDATED);
        let uri = note["params"]["uri"].as_str().unwrap_or_default().to_owned();
        seen.push(uri.clone());
        if uri == marker {
            return seen;
        }
    }
}

#[test]
fn http_sessions_and_listen_streams_hear_of_writes_too() {
    let (_dir, path) = catalog();
    let server = HttpServer::start(&path, &[], &[]);
    // A legacy session subscribed to the orders, and another to the notes only.
    let first = server.session();
    let first_events = server.stream(&first);
    let second = server.session();
    let second_events = server.stream(&second);
    let marker = "zz://notes/marker";
    for (session, uri) in [(&first, "shop://orders"), (&first, marker), (&second, marker)] {
        let subscribed = server.request(session, 2, "resources/subscribe", json!({"uri": uri}));
        assert!(subscribed.get("result").is_some(), "{subscribed}");
    }
    // A 2026-07-28 listen stream on the orders.
    let listen = send(
        server.addr,
        "POST",
        "/mcp",
        &[("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "subscriptions/listen")],
        Some(&json!({"jsonrpc": "2.0", "id": "listen", "method": "subscriptions/listen",
            "params": {"_meta": meta_2026(json!({})), "notifications": {"resourceSubscriptions": ["shop://orders"]}}})),
    );
    assert_eq!(listen.status, 200);
    let listen_events = listen.events();
    common::http::wait_for(&listen_events, "notifications/subscriptions/acknowledged");

    let ordered = server.request(
        &second,
        3,
        "tools/call",
        json!({"name": "order", "arguments": {"item": "tea", "customer": "Ada"}}),
    );
    assert_eq!(ordered["result"]["isError"], false, "{ordered}");
    assert_eq!(events_until(&first_events, "shop://orders"), ["shop://orders"]);
    let heard = common::http::wait_for(&listen_events, UPDATED);
    assert_eq!(heard["params"]["uri"], "shop://orders", "{heard}");
    let read = server.request(&second, 4, "resources/read", json!({"uri": "shop://orders"}));
    assert_eq!(read["result"]["contents"][0]["text"], r#"[{"id":1,"item":"tea","customer":"ada"}]"#);
    assert_eq!(read["result"]["contents"][0]["mimeType"], "application/json");

    // The second session never subscribed to the orders: its first news is the marker.
    server.request(&first, 5, "tools/call", json!({"name": "note", "arguments": {"text": "marker"}}));
    assert_eq!(events_until(&second_events, marker), [marker]);
    assert_eq!(events_until(&first_events, marker), [marker]);
}

#[test]
fn a_statement_that_fails_is_a_read_error_not_a_crash() {
    let (_dir, path) = catalog();
    let mut server = Server::initialized(&path, &[]);
    let error = server.error("resources/read", json!({"uri": "shop://broken"}));
    assert_eq!(error["code"], -32603, "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("shop://broken") && message.contains("integer overflow"), "{error}");
    assert_eq!(read(&mut server, "shop://orders"), "[]");
}

#[test]
fn a_reload_that_changes_what_a_resource_reads_notifies_its_subscribers() {
    let (_dir, path) = catalog();
    let mut server = Server::initialized(&path, &[]);
    call(&mut server, "order", json!({"item": "tea", "customer": "Ada"}));
    server.result("resources/subscribe", json!({"uri": "shop://orders"}));
    let changed = CATALOG.replace("SELECT id, item, customer FROM orders", "SELECT item FROM orders");
    assert_ne!(changed, CATALOG);
    std::fs::write(&path, changed).unwrap();
    assert_eq!(updates_until(&mut server, "shop://orders"), ["shop://orders"]);
    assert_eq!(read(&mut server, "shop://orders"), r#"[{"item":"tea"}]"#);
}

#[test]
fn params_are_computed_by_templates_and_bound_as_values() {
    let (_dir, path) = catalog();
    let mut server = Server::initialized(&path, &[]);
    let hostile = "x'); DROP TABLE orders; --";
    let result = call(&mut server, "compute", json!({"n": 3, "text": hostile}));
    let rows: Value = serde_json::from_str(&text(&result)).unwrap();
    // A one-expression template keeps its type; the others are text; nothing is spliced.
    assert_eq!(rows, json!([{"kind": "integer", "next": 4, "label": "n=3", "quoted": hostile}]));
    assert_eq!(read(&mut server, "shop://orders"), "[]", "the table is still there");
}

#[test]
fn a_reload_announces_a_live_resource_once_and_its_report_says_so() {
    let (_dir, path) = catalog();
    let mut server = Server::initialized(&path, &[]);
    server.result("logging/setLevel", json!({"level": "debug"}));
    call(&mut server, "order", json!({"item": "tea", "customer": "Ada"}));
    server.result("resources/subscribe", json!({"uri": "shop://orders"}));

    // What it reads changes: one notification, and the report names it.
    std::fs::write(&path, CATALOG.replace("SELECT id, item, customer FROM orders", "SELECT item FROM orders")).unwrap();
    let (before, report) = server.wait_good_reload();
    let updated: Vec<&Value> = before.iter().filter(|n| n["method"] == UPDATED).collect();
    assert_eq!(updated.len(), 1, "{before:?}");
    let message = report["params"]["data"]["message"].as_str().unwrap();
    assert_eq!(message, "catalog reloaded: updated shop://orders", "{report}");

    // Removed: its subscribers hear it changed (it is gone).
    let without = CATALOG.replace(
        "  - uri: shop://orders\n    name: orders\n    description: Every order\n    sql: { database: shop, statement: \"SELECT id, item, customer FROM orders ORDER BY id\" }\n",
        "",
    );
    assert_ne!(without, CATALOG);
    std::fs::write(&path, &without).unwrap();
    let (before, _) = server.wait_good_reload();
    assert_eq!(before.iter().filter(|n| n["method"] == UPDATED).count(), 1, "{before:?}");
    // A write while it is gone, then it comes back: one notification, not two.
    call(&mut server, "order", json!({"item": "jam", "customer": "Bo"}));
    std::fs::write(&path, CATALOG).unwrap();
    let (before, report) = server.wait_good_reload();
    assert_eq!(before.iter().filter(|n| n["method"] == UPDATED).count(), 1, "{before:?}");
    assert!(report["params"]["data"]["message"].as_str().unwrap().contains("updated shop://orders"), "{report}");
}
