//! `server.discovery: search` (large catalogs): `tools/list` holds
//! `find_tools` and the pinned tools; a search returns the matching tools'
//! definitions and adds them to that session's list, with `list_changed`;
//! any tool may be called by name, listed or not.

use crate::common;

use common::{Server, TempDir, text};
use serde_json::{Value, json};

const CATALOG: &str = r#"
server: { name: shop, discovery: search }
tools:
  - { name: refund_order, description: Refunds an order to the customer's card., run: { text: refunded } }
  - { name: ship_order, description: Ships an order., pinned: true, run: { text: shipped } }
  - { name: weather, description: Says the weather., run: { text: sunny } }
"#;

fn names(list: &Value) -> Vec<String> {
    list["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn a_session_lists_what_it_found_and_calls_anything_by_name() {
    let dir = TempDir::new("discovery");
    let path = dir.write("shop.yaml", CATALOG);
    let mut server = Server::initialized(&path, &[]);
    assert_eq!(names(&server.result("tools/list", json!({}))), ["find_tools", "ship_order"]);

    let found = server.result("tools/call", json!({"name": "find_tools", "arguments": {"query": "refund card"}}));
    let tools = found["structuredContent"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{found}");
    assert_eq!(tools[0]["name"], "refund_order");
    assert!(tools[0]["inputSchema"].is_object(), "{found}");
    server.wait_notification("notifications/tools/list_changed");
    assert_eq!(names(&server.result("tools/list", json!({}))), ["find_tools", "refund_order", "ship_order"]);

    // Unlisted, still callable by name.
    let weather = server.result("tools/call", json!({"name": "weather", "arguments": {}}));
    assert_eq!(text(&weather), "sunny");
    // A search that finds nothing says so with an empty list.
    let none = server.result("tools/call", json!({"name": "find_tools", "arguments": {"query": "zebra"}}));
    assert_eq!(none["structuredContent"]["tools"], json!([]));

    // Another session starts from the pinned tools again.
    let mut other = Server::initialized(&path, &[]);
    assert_eq!(names(&other.result("tools/list", json!({}))), ["find_tools", "ship_order"]);
}
