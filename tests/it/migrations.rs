//! `migrations:` end to end: a table gains a column while carte serves it;
//! each migration runs once, is recorded in the database, and a reload that
//! changes or drops an applied one is refused while the old menu serves on.

use crate::common;

use common::{Server, TempDir, postgres, run_cli, text};
use serde_json::json;

const V1: &str = r#"databases:
  shop:
    url: sqlite:shop.db
    setup: CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)
tools:
  - name: add
    description: Adds an order.
    inputSchema: { type: object, properties: { item: { type: string } }, required: [item] }
    run:
      sql: { database: shop, statement: "INSERT INTO orders (item) VALUES (:item) RETURNING id" }
      text: "order {{ rows[0].id }}"
"#;

/// V1 with a column added by a migration, and a tool that reads it.
fn v2(migration: &str) -> String {
    V1.replace(
        "    setup: CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)\n",
        &format!(
            "    setup: CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)\n    migrations:\n      - name: 001-phone\n        sql: {migration}\n      - name: 002-index\n        file: migrations/002-index.sql\n"
        ),
    ) + "  - name: phones\n    description: Lists orders with their phone.\n    run:\n      sql: { database: shop, statement: \"SELECT item, phone FROM orders ORDER BY id\" }\n      text: \"{% for r in rows %}{{ r.item }}={{ r.phone }};{% endfor %}\"\n"
}

#[test]
fn a_column_added_while_serving_reaches_the_existing_rows_once() {
    let dir = TempDir::new("migrations-reload");
    dir.write("migrations/002-index.sql", "CREATE INDEX orders_item ON orders (item);\n");
    let path = dir.write("catalog.yaml", V1);
    let mut server = Server::initialized(&path, &[]);
    server.result("logging/setLevel", json!({"level": "debug"}));
    assert_eq!(text(&server.result("tools/call", json!({"name": "add", "arguments": {"item": "pen"}}))), "order 1");

    std::fs::write(&path, v2("ALTER TABLE orders ADD COLUMN phone TEXT")).unwrap();
    let (_, report) = server.wait_good_reload();
    assert!(report["params"]["data"]["message"].as_str().unwrap().contains("tools +phones"), "{report}");
    assert_eq!(text(&server.result("tools/call", json!({"name": "phones"}))), "pen=;");

    // A changed applied migration is refused; the menu before it serves on.
    std::fs::write(&path, v2("ALTER TABLE orders ADD COLUMN phone INTEGER")).unwrap();
    let (_, report) = server.wait_reload();
    assert_eq!(report["params"]["level"], "error", "{report}");
    let message = report["params"]["data"]["message"].as_str().unwrap();
    assert!(message.contains("migration `001-phone` was already applied to database `shop`"), "{message}");
    assert!(message.contains("catalog.yaml:7:14"), "{message}");
    assert_eq!(text(&server.result("tools/call", json!({"name": "phones"}))), "pen=;");
    drop(server);

    // A restart applies nothing twice (an ALTER TABLE run again would fail).
    std::fs::write(&path, v2("ALTER TABLE orders ADD COLUMN phone TEXT")).unwrap();
    let (code, answer, stderr) = run_cli("call", &path, &["phones"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(answer["content"][0]["text"], "pen=;");

    // Dropping an applied one is refused, naming it.
    let dropped = v2("ALTER TABLE orders ADD COLUMN phone TEXT")
        .replace("      - name: 002-index\n        file: migrations/002-index.sql\n", "");
    std::fs::write(&path, dropped).unwrap();
    let (code, _, stderr) = run_cli("check", &path, &[], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("migration `002-index` was applied to database `shop`, but is no longer declared"),
        "{stderr}"
    );
}

#[test]
fn a_migration_that_fails_on_the_scratch_copy_is_placed_and_changes_nothing() {
    let dir = TempDir::new("migrations-fail");
    dir.write("migrations/002-index.sql", "CREATE INDEX orders_item ON orders (item);\n");
    let path = dir.write("catalog.yaml", &v2("ALTER TABLE orderz ADD COLUMN phone TEXT"));
    let (code, _, stderr) = run_cli("check", &path, &[], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("catalog.yaml:7:14: error: migration `001-phone` of database `shop` failed"), "{stderr}");
    assert!(stderr.contains("orderz"), "{stderr}");
    assert!(!dir.path("shop.db").exists(), "checking created the database");
}

#[test]
fn postgres_migrations_are_recorded_and_run_once() {
    let Some(pg) = postgres("migrations_once") else { return };
    let dir = TempDir::new("migrations-postgres");
    dir.write("migrations/002-index.sql", "CREATE INDEX orders_item ON orders (item);\n");
    let catalog = v2("ALTER TABLE orders ADD COLUMN phone text")
        .replace("sqlite:shop.db", &pg.url)
        .replace("INTEGER PRIMARY KEY", "serial PRIMARY KEY");
    let path = dir.write("catalog.yaml", &catalog);
    for _ in 0..2 {
        let (code, answer, stderr) = run_cli("call", &path, &["add", "item=pen"], &[]);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(answer["content"][0]["text"].as_str().unwrap().starts_with("order "), "{answer}");
    }
    let recorded = pg.query("SELECT name FROM carte_migrations ORDER BY seq");
    assert_eq!(recorded, vec![vec![Some("001-phone".to_owned())], vec![Some("002-index".to_owned())]]);
    let (code, answer, stderr) = run_cli("call", &path, &["phones"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(answer["content"][0]["text"], "pen=;pen=;");
}
