//! `carte test`: examples run through the server's own code, on scratch
//! databases; a failure is printed as expected vs got; nothing the catalog
//! serves changes and no real api is called.

use crate::common;

use common::{TempDir, carte, postgres, repo_root, run_cli, run_to_end};
use serde_json::json;

/// Runs `carte test` with `args`: exit code, stdout, stderr.
fn test(args: &[&str]) -> (Option<i32>, String, String) {
    let mut command = carte();
    command.arg("test").args(args).env_remove("CARTE_LOG");
    let ran = run_to_end(&mut command, &format!("carte test {args:?}"), common::TIMEOUT);
    (
        ran.status.code(),
        String::from_utf8_lossy(&ran.stdout).into_owned(),
        String::from_utf8_lossy(&ran.stderr).into_owned(),
    )
}

#[test]
fn the_shipped_catalogs_examples_pass_without_touching_its_database() {
    let dir = TempDir::new("examples-reservo");
    let db = dir.path("reservo.db");
    let url = format!("sqlite:{}", db.display());
    let catalog = repo_root().join("catalogs/reservo.yaml");
    let mut command = carte();
    command.arg("test").arg(&catalog).env("RESERVO_DATABASE_URL", &url).env_remove("CARTE_LOG");
    let ran = run_to_end(&mut command, "carte test reservo", common::TIMEOUT);
    let out = String::from_utf8_lossy(&ran.stdout);
    assert_eq!(ran.status.code(), Some(0), "{out}{}", String::from_utf8_lossy(&ran.stderr));
    assert!(out.contains("PASS tool `cancel_booking`: an existing booking"), "{out}");
    assert!(out.contains("passed, 0 failed"), "{out}");
    assert!(!db.exists(), "carte test created the database it serves");
}

const SHOP: &str = r#"databases:
  shop:
    url: sqlite:shop.db
    setup: CREATE TABLE IF NOT EXISTS items (name TEXT NOT NULL, price INTEGER NOT NULL)
apis:
  weather: { baseUrl: "http://127.0.0.1:9/v1" }
tools:
  - name: priciest
    description: The priciest item.
    run:
      sql: { database: shop, statement: "SELECT name, price FROM items ORDER BY price DESC LIMIT 1" }
      json: true
      text: "{{ rows[0] | tojson if rows else fail('no items') }}"
    examples:
      - name: two items
        rows: { items: [ { name: pen, price: 3 }, { name: lamp, price: 40 } ] }
        expect: { json: { name: lamp, price: 40 }, text: '{"name": "lamp", "price": 40}' }
      - name: empty
        expect: { isError: true, contains: no items }
      - name: wrong on purpose
        rows: { items: [ { name: pen, price: 3 } ] }
        expect: { json: { name: lamp } }
  - name: forecast
    description: Today's forecast.
    run:
      http: { api: weather, path: /today }
      text: "{{ json.sky }}, {{ json.high }}°"
    examples:
      - upstream: { json: { sky: sunny, high: 21 } }
        expect: { text: "sunny, 21°" }
      - name: the api is down
        upstream: { status: 503, body: overloaded }
        expect: { isError: true, contains: ["503", overloaded] }
prompts:
  - name: greet
    description: Greets.
    arguments: [ { name: who, required: true } ]
    messages: [ { role: user, text: "Hello {{ who }}" } ]
    examples: [ { arguments: { who: Ada }, expect: { text: Hello Ada } } ]
"#;

#[test]
fn a_failing_example_says_what_was_expected_and_what_came_and_exits_1() {
    let dir = TempDir::new("examples-shop");
    let catalog = dir.write("shop.yaml", SHOP);
    // The file has rows of its own: examples see a copy of them, and leave them as they were.
    let (code, _, stderr) = run_cli("call", &catalog, &["priciest"], &[]);
    assert_eq!(code, Some(1), "{stderr}"); // no items yet: the tool fails
    let (code, out, err) = test(&[catalog.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("PASS tool `priciest`: two items"), "{out}");
    assert!(out.contains("PASS tool `priciest`: empty"), "{out}");
    assert!(out.contains("PASS tool `forecast`: example 1"), "{out}");
    assert!(out.contains("PASS tool `forecast`: the api is down"), "{out}");
    assert!(out.contains("PASS prompt `greet`: example 1"), "{out}");
    assert!(out.contains("FAIL tool `priciest`: wrong on purpose (") && out.contains("shop.yaml:20:9)"), "{out}");
    assert!(
        out.contains(
            "  json\n    expected: {\"name\":\"lamp\"} at /name\n    got:      {\"name\":\"pen\",\"price\":3}"
        ),
        "{out}"
    );
    assert!(out.contains("6 examples: 5 passed, 1 failed"), "{out}");

    // The database the catalog serves never saw the examples' rows.
    let (_, answer, _) = run_cli("call", &catalog, &["priciest"], &[]);
    assert_eq!(answer["isError"], json!(true), "{answer}");

    // For machines, and only some examples.
    let (code, out, err) = test(&[catalog.to_str().unwrap(), "--format", "json", "--filter", "forecast"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["passed"], json!(2));
    assert_eq!(report["failed"], json!(0));
    assert_eq!(report["examples"][1]["name"], json!("tool `forecast`: the api is down"));
    assert_eq!(report["examples"][1]["line"], json!(31));
}

#[test]
fn an_invalid_catalog_or_a_missing_one_says_so() {
    let dir = TempDir::new("examples-invalid");
    let catalog = dir.write(
        "bad.yaml",
        "tools:\n  - name: t\n    description: T.\n    inputSchema: { type: object, properties: { n: { type: integer } } }\n    run: { text: x }\n    examples: [ { arguments: { n: two } } ]\n",
    );
    let (code, out, err) = test(&[catalog.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("bad.yaml:6:35: error: the arguments of this example do not fit"), "{err}");
    let (code, _, err) = test(&[dir.path("nowhere.yaml").to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
}

#[test]
fn postgres_examples_run_in_a_transaction_that_is_rolled_back() {
    let Some(pg) = postgres("examples_rolled_back") else { return };
    let dir = TempDir::new("examples-postgres");
    let catalog = dir.write(
        "pg.yaml",
        &format!(
            r#"databases:
  shop:
    url: {}
    setup: CREATE TABLE IF NOT EXISTS items (id serial PRIMARY KEY, name text NOT NULL)
tools:
  - name: add
    description: Adds an item.
    inputSchema: {{ type: object, properties: {{ name: {{ type: string }} }}, required: [name] }}
    run:
      sql: {{ database: shop, statement: "INSERT INTO items (name) VALUES (:name) RETURNING (SELECT count(*) FROM items) + 1 AS n" }}
      text: "{{{{ rows[0].n }}}} items"
    examples:
      - rows: {{ items: [ {{ name: pen }}, {{ name: lamp }} ] }}
        arguments: {{ name: cup }}
        expect: {{ text: 3 items }}
      - arguments: {{ name: cup }}
        expect: {{ text: 1 items }}
"#,
            pg.url
        ),
    );
    let (code, out, err) = test(&[catalog.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    // Even the table `setup` made was rolled back: the database is as it was.
    let tables = pg.query("SELECT count(*) FROM pg_tables WHERE tablename = 'items'");
    assert_eq!(tables, vec![vec![Some("0".to_owned())]]);
}

#[test]
fn serve_with_examples_refuses_a_reload_whose_examples_fail() {
    let dir = TempDir::new("examples-serve");
    let good = "tools:\n  - name: greet\n    description: Greets.\n    run: { text: Hello }\n    examples: [ { expect: { text: Hello } } ]\n";
    let path = dir.write("catalog.yaml", good);
    let mut server = common::Server::initialized_with(&path, &[], &["--examples"]);
    server.result("logging/setLevel", json!({"level": "debug"}));
    std::fs::write(&path, good.replace("run: { text: Hello }", "run: { text: Goodbye }")).unwrap();
    let (before, report) = server.wait_reload();
    assert!(common::methods(&before).is_empty(), "a refused catalog announced {before:?}");
    assert_eq!(report["params"]["level"], "error", "{report}");
    let message = report["params"]["data"]["message"].as_str().unwrap();
    assert!(message.contains("example failed: tool `greet`: example 1"), "{message}");
    assert!(message.contains("expected: Hello") && message.contains("got:      Goodbye"), "{message}");
    assert!(message.contains("catalog.yaml:5:19"), "{message}");
    let call = server.result("tools/call", json!({"name": "greet"}));
    assert_eq!(common::text(&call), "Hello");
    // Fixing the example lets the change through.
    std::fs::write(&path, good.replace("Hello", "Goodbye")).unwrap();
    let (_, report) = server.wait_reload();
    assert_eq!(report["params"]["level"], "info", "{report}");
    assert_eq!(common::text(&server.result("tools/call", json!({"name": "greet"}))), "Goodbye");
    drop(server);

    // At start, failing examples mean carte does not serve.
    std::fs::write(&path, good.replace("run: { text: Hello }", "run: { text: Goodbye }")).unwrap();
    let mut command = carte();
    command.args(["serve", "--examples"]).arg(&path).env_remove("CARTE_LOG");
    let ran = run_to_end(&mut command, "carte serve --examples", common::TIMEOUT);
    assert_eq!(ran.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&ran.stderr).contains("the catalog's examples fail; not serving it"));
}
