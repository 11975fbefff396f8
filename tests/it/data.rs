//! `data:` at run time, through the real binary: a path that exists for
//! some values only (`data.menu[product].stock`) cannot be checked at load,
//! so a value without it is an error naming the path, not an empty string;
//! templates that ask whether a key is there, and optional arguments not
//! given, render as they always did.

use crate::common;

use common::{Server, TempDir, text};
use serde_json::json;

const CATALOG: &str = r#"
server: { name: bakery, version: 1.0.0 }
data:
  menu:
    rye: { name: Rye, stock: 12 }
    wheat: { name: Wheat }
tools:
  - name: stock
    description: How many loaves are left
    inputSchema: { type: object, properties: { product: { type: string } }, required: [product] }
    run:
      text: "{{ data.menu[product].name }}: {{ data.menu[product].stock }}"
  - name: careful_stock
    description: How many loaves are left, if the menu says
    inputSchema: { type: object, properties: { product: { type: string }, size: { type: string } } }
    run:
      text: "{% if product %}[{{ data.menu[product].stock | default('unknown') }}]{% endif %}[{{ data.menu[size] }}][{{ size }}]"
prompts:
  - name: advertise
    description: Writes an advert for a bread
    arguments: [{ name: product, required: true }]
    messages:
      - role: user
        text: "Advertise {{ data.menu[product].name }}, {{ data.menu[product].stock }} left"
"#;

fn start() -> (TempDir, Server) {
    let dir = TempDir::new("data");
    let catalog = dir.write("catalog.yaml", CATALOG);
    let server = Server::initialized(&catalog, &[]);
    (dir, server)
}

#[test]
fn a_missing_key_of_data_is_an_error_result_naming_the_path() {
    let (_dir, mut server) = start();
    let found = server.result("tools/call", json!({"name": "stock", "arguments": {"product": "rye"}}));
    assert_eq!(text(&found), "Rye: 12");
    assert_ne!(found["isError"], true);

    let missing = server.result("tools/call", json!({"name": "stock", "arguments": {"product": "wheat"}}));
    assert_eq!(missing["isError"], true, "{missing}");
    let message = text(&missing);
    assert!(message.contains(r#"data.menu.wheat has no key "stock" (it has name)"#), "{message}");

    let unknown = server.result("tools/call", json!({"name": "stock", "arguments": {"product": "spelt"}}));
    assert_eq!(unknown["isError"], true, "{unknown}");
    // A subscript stays undefined (`product in data.menu` asks the same way): minijinja's error.
    assert!(text(&unknown).contains("`data.menu[...]` is undefined"), "{unknown}");
}

#[test]
fn presence_tests_and_optional_arguments_render_as_before() {
    let (_dir, mut server) = start();
    let result = server.result("tools/call", json!({"name": "careful_stock", "arguments": {"product": "wheat"}}));
    assert_eq!(text(&result), "[unknown][][]", "{result}");
    // Optional arguments not given: `data.menu[size]` is undefined, printed as nothing.
    let result = server.result("tools/call", json!({"name": "careful_stock", "arguments": {}}));
    assert_eq!(text(&result), "[][]", "{result}");
}

#[test]
fn a_prompt_with_a_missing_key_of_data_is_an_error() {
    let (_dir, mut server) = start();
    let prompt = server.result("prompts/get", json!({"name": "advertise", "arguments": {"product": "rye"}}));
    assert_eq!(prompt["messages"][0]["content"]["text"], "Advertise Rye, 12 left");
    let error = server.error("prompts/get", json!({"name": "advertise", "arguments": {"product": "wheat"}}));
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains(r#"data.menu.wheat has no key "stock""#), "{error}");
}
