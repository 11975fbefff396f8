//! A `sql` tool whose result fails writes nothing: the result is rendered
//! inside the statement's transaction, which commits only once the result
//! is ready. `fail()`, a render error and an `outputSchema` violation after
//! an INSERT or UPDATE leave the database as it was, so a model that retries
//! does not create duplicates. Checked through the real binary and by
//! opening its SQLite file beside it.

use crate::common;

use std::path::Path;

use common::{Server, TempDir, text};
use serde_json::{Value, json};

const CATALOG: &str = r#"server: { name: bakery, version: 1.0.0 }
databases:
  shop:
    url: sqlite:shop.db
    setup:
      - CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, product TEXT NOT NULL, quantity INTEGER NOT NULL)
tools:
  - name: order
    description: Orders bread.
    inputSchema:
      type: object
      properties: { product: { type: string }, quantity: { type: integer } }
      required: [product, quantity]
    run:
      sql: { database: shop, statement: "INSERT INTO orders (product, quantity) VALUES (:product, :quantity) RETURNING id" }
      text: "{% if quantity > 10 %}{{ fail('at most 10 ' ~ product ~ ' per order') }}{% endif %}Ordered #{{ rows[0].id }}"
  - name: rename
    description: Renames the product of an order.
    inputSchema:
      type: object
      properties: { id: { type: integer }, product: { type: string } }
      required: [id, product]
    run:
      sql: { database: shop, statement: "UPDATE orders SET product = :product WHERE id = :id RETURNING product" }
      text: "Renamed to {{ rows[0].product.upper.name }}"
  - name: grow
    description: Adds to the quantity of an order.
    inputSchema:
      type: object
      properties: { id: { type: integer }, extra: { type: integer } }
      required: [id, extra]
    outputSchema:
      type: object
      properties: { quantity: { type: integer, maximum: 50 } }
      required: [quantity]
    run:
      sql: { database: shop, statement: "UPDATE orders SET quantity = quantity + :extra WHERE id = :id RETURNING quantity" }
      text: '{"quantity": {{ rows[0].quantity }}}'
  - name: restock
    description: Sets every quantity, then spends the render's fuel.
    run:
      sql: { database: shop, statement: "UPDATE orders SET quantity = 0" }
      text: "{% for i in range(100000) %}{% for j in range(100) %}{% endfor %}{% endfor %}done"
  - name: orders
    description: Lists the orders.
    run:
      sql: { database: shop, statement: "SELECT id, product, quantity FROM orders ORDER BY id" }
      text: "{% for o in rows %}#{{ o.id }} {{ o.quantity }} {{ o.product }};{% endfor %}"
"#;

/// The orders in the database file, read beside the server (through its WAL).
fn orders_in_file(path: &Path) -> Vec<(i64, String, i64)> {
    let connection = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut statement = connection.prepare("SELECT id, product, quantity FROM orders ORDER BY id").unwrap();
    statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A bakery server over a fresh database, and the database's path.
fn bakery(name: &str) -> (TempDir, Server, std::path::PathBuf) {
    let dir = TempDir::new(name);
    let catalog = dir.write("catalog.yaml", CATALOG);
    let server = Server::initialized(&catalog, &[]);
    let database = dir.path("shop.db");
    (dir, server, database)
}

fn call(server: &mut Server, tool: &str, arguments: Value) -> Value {
    server.result("tools/call", json!({"name": tool, "arguments": arguments}))
}

#[test]
fn fail_after_an_insert_writes_nothing() {
    let (dir, mut server, database) = bakery("rollback-fail");
    let result = call(&mut server, "order", json!({"product": "baguette", "quantity": 11}));
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(text(&result), "at most 10 baguette per order");
    assert_eq!(
        result["content"][1]["text"],
        carte::effect::sql::ROLLED_BACK,
        "the model learns that nothing was written"
    );
    assert_eq!(orders_in_file(&database), vec![], "the failed order is not in the file");
    let listed = call(&mut server, "orders", json!({}));
    assert_eq!(text(&listed), "", "nor does the server see it");

    // A read that fails has nothing to roll back, and says nothing about it.
    let bad = r#"text: "{% for o in rows %}#{{ o.id }} {{ o.quantity }} {{ o.product }};{% endfor %}""#;
    let catalog = CATALOG.replace(bad, r#"text: "{{ fail('no orders') }}""#);
    assert_ne!(catalog, CATALOG);
    server.finish();
    let path = dir.write("catalog.yaml", &catalog);
    let mut server = Server::initialized(&path, &[]);
    let listed = call(&mut server, "orders", json!({}));
    assert_eq!(listed["content"], json!([{"type": "text", "text": "no orders"}]), "{listed}");
}

#[test]
fn a_result_that_succeeds_commits_and_a_failed_one_before_it_left_nothing() {
    let (_dir, mut server, database) = bakery("rollback-commit");
    let result = call(&mut server, "order", json!({"product": "baguette", "quantity": 3}));
    assert_eq!((result["isError"].clone(), text(&result)), (json!(false), "Ordered #1".to_owned()), "{result}");
    assert_eq!(result["content"].as_array().map(Vec::len), Some(1), "no notice on success: {result}");
    assert_eq!(orders_in_file(&database), vec![(1, "baguette".to_owned(), 3)]);
    let refused = call(&mut server, "grow", json!({"id": 1, "extra": 100}));
    assert_eq!(refused["isError"], true, "{refused}");
    let grown = call(&mut server, "grow", json!({"id": 1, "extra": 4}));
    assert_eq!(grown["structuredContent"], json!({"quantity": 7}), "3 + 4, not 3 + 100 + 4: {grown}");
    assert_eq!(orders_in_file(&database), vec![(1, "baguette".to_owned(), 7)]);
}

#[test]
fn a_retry_after_a_failed_result_creates_no_duplicate() {
    let (_dir, mut server, database) = bakery("rollback-retry");
    for _ in 0..2 {
        let refused = call(&mut server, "order", json!({"product": "croissant", "quantity": 12}));
        assert_eq!(refused["isError"], true, "{refused}");
    }
    let ordered = call(&mut server, "order", json!({"product": "croissant", "quantity": 10}));
    assert_eq!(text(&ordered), "Ordered #1", "{ordered}");
    assert_eq!(orders_in_file(&database), vec![(1, "croissant".to_owned(), 10)]);
    assert_eq!(text(&call(&mut server, "orders", json!({}))), "#1 10 croissant;");
}

#[test]
fn a_render_error_after_an_update_rolls_it_back() {
    let (_dir, mut server, database) = bakery("rollback-render-error");
    call(&mut server, "order", json!({"product": "rye", "quantity": 2}));
    let renamed = call(&mut server, "rename", json!({"id": 1, "product": "spelt"}));
    assert_eq!(renamed["isError"], true, "{renamed}");
    assert!(text(&renamed).contains("undefined"), "{renamed}");
    assert_eq!(orders_in_file(&database), vec![(1, "rye".to_owned(), 2)], "the UPDATE was rolled back");

    let restocked = call(&mut server, "restock", json!({}));
    assert_eq!(restocked["isError"], true, "{restocked}");
    assert!(text(&restocked).contains("did too much work"), "the render ran out of fuel: {restocked}");
    assert_eq!(orders_in_file(&database), vec![(1, "rye".to_owned(), 2)], "the UPDATE was rolled back");
    assert_eq!(text(&call(&mut server, "orders", json!({}))), "#1 2 rye;");
}

#[test]
fn a_result_outside_its_output_schema_rolls_the_update_back() {
    let (_dir, mut server, database) = bakery("rollback-output-schema");
    call(&mut server, "order", json!({"product": "rye", "quantity": 2}));
    let grown = call(&mut server, "grow", json!({"id": 1, "extra": 100}));
    assert_eq!(grown["isError"], true, "{grown}");
    assert!(text(&grown).contains("does not match its outputSchema"), "{grown}");
    assert_eq!(orders_in_file(&database), vec![(1, "rye".to_owned(), 2)]);
}
