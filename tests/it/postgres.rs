//! PostgreSQL databases, against a real server: `CARTE_TEST_POSTGRES` names
//! it (`.ci/run` starts a throwaway cluster); each test makes a database of
//! its own and drops it. Without the variable these tests print SKIP and
//! pass, unless `CARTE_REQUIRE_POSTGRES=1` (CI), where that is a failure.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::http::{HttpServer, send};
use common::{Postgres, TIMEOUT, TempDir, postgres, run_cli};
use serde_json::{Value, json};

/// A catalog over `url` with a table of orders and tools on it.
fn shop(url: &str, extra: &str) -> String {
    format!(
        r#"databases:
  shop:
    url: {url}
    timeout: 2s
    pool: {{ max: 4 }}
    setup:
      - >-
        CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, item text NOT NULL UNIQUE,
        qty int4 NOT NULL, price numeric(12,2), due date, at timestamptz NOT NULL DEFAULT now(),
        tags text[], meta jsonb, ref uuid, big int8, ratio float8, paid bool)
{extra}
tools:
  - name: add
    description: Adds an order.
    inputSchema:
      type: object
      properties:
        item: {{ type: string }}
        qty: {{ type: integer }}
        price: {{ type: number }}
        due: {{ type: string }}
        tags: {{ type: array, items: {{ type: string }} }}
        meta: {{ type: object }}
        ref: {{ type: string }}
        big: {{ type: integer }}
        ratio: {{ type: number }}
        paid: {{ type: boolean }}
      required: [item, qty]
    run:
      sql:
        database: shop
        statement: >-
          INSERT INTO orders (item, qty, price, due, tags, meta, ref, big, ratio, paid)
          VALUES (:item, :qty, :price, :due, :tags, :meta, :ref, :big, :ratio, :paid) RETURNING *
      text: "{{{{ rows[0] | tojson }}}}"
  - name: orders
    description: Lists orders, one item or all.
    inputSchema: {{ type: object, properties: {{ item: {{ type: string }} }} }}
    run:
      sql:
        database: shop
        statement: "SELECT item, qty, price, tags FROM orders WHERE :item::text IS NULL OR item = :item ORDER BY id"
      text: "{{{{ rows | tojson }}}}"
"#
    )
}

fn call(catalog: &std::path::Path, tool: &str, args: Value) -> (bool, String) {
    let (_, answer, stderr) = run_cli("call", catalog, &[tool, "--json", &args.to_string()], &[]);
    let blocks = answer["content"].as_array().unwrap_or_else(|| panic!("no result: {answer} {stderr}"));
    let text: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    (answer["isError"] == true, text.join("\n"))
}

fn count(db: &Postgres) -> String {
    db.query("SELECT count(*) FROM orders")[0][0].clone().unwrap_or_default()
}

#[test]
fn a_call_inserts_and_another_selects_with_types_kept() {
    let Some(db) = postgres("roundtrip") else { return };
    let dir = TempDir::new("pg-roundtrip");
    let catalog = dir.write("catalog.yaml", &shop(&db.url, ""));
    let args = json!({"item": "tea", "qty": 3, "price": 12.5, "due": "2026-12-24", "tags": ["green", "loose"],
        "meta": {"origin": "Darjeeling", "grades": [1, 2]}, "ref": "123e4567-e89b-12d3-a456-426614174000",
        "big": 9_007_199_254_740_993_i64, "ratio": 0.25, "paid": true});
    let (failed, text) = call(&catalog, "add", args);
    assert!(!failed, "{text}");
    let row: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(row["id"], 1);
    assert_eq!(row["qty"], 3);
    assert_eq!(row["price"], json!(12.5), "numeric(12,2) 12.50 is exactly the number 12.5");
    assert_eq!(row["due"], "2026-12-24");
    assert_eq!(row["tags"], json!(["green", "loose"]));
    assert_eq!(row["meta"], json!({"origin": "Darjeeling", "grades": [1, 2]}));
    assert_eq!(row["ref"], "123e4567-e89b-12d3-a456-426614174000");
    assert_eq!(row["big"], json!(9_007_199_254_740_993_i64), "int8 keeps every digit");
    assert_eq!(row["ratio"], json!(0.25));
    assert_eq!(row["paid"], true);
    let at = row["at"].as_str().unwrap_or_default();
    assert!(at.ends_with('Z') && at.contains('T'), "timestamptz as RFC 3339: {at}");
    // A value PostgreSQL cannot take is an error naming the parameter.
    let (failed, text) = call(&catalog, "add", json!({"item": "big", "qty": 3_000_000_000_i64}));
    assert!(failed);
    assert!(text.contains("argument `qty` cannot be used as PostgreSQL type `int4`"), "{text}");
    let (failed, text) = call(&catalog, "add", json!({"item": "late", "qty": 1, "due": "soon"}));
    assert!(failed);
    assert!(text.contains("argument `due` cannot be used as PostgreSQL type `date`"), "{text}");
    let (failed, text) = call(&catalog, "add", json!({"item": "tea", "qty": 1}));
    assert!(failed);
    assert!(text.contains("constraint failed: duplicate key value violates unique constraint"), "{text}");
    let (failed, text) = call(&catalog, "orders", json!({"item": "tea"}));
    assert!(!failed, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!([{"item": "tea", "qty": 3, "price": 12.5, "tags": ["green", "loose"]}])
    );
    let (_, text) = call(&catalog, "orders", json!({}));
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap().as_array().map(Vec::len), Some(1));
}

#[test]
fn checking_prepares_every_statement_and_changes_nothing() {
    let Some(db) = postgres("check") else { return };
    let dir = TempDir::new("pg-check");
    let good = shop(&db.url, "");
    let catalog = dir.write("catalog.yaml", &good.replace("SELECT item, qty,", "SELECT item, qyt,"));
    let (code, _, stderr) = run_cli("check", &catalog, &[], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    let line = good.lines().position(|l| l.contains("SELECT item, qty,")).unwrap() + 1;
    let column = good.lines().nth(line - 1).unwrap().find("qty").unwrap() + 1;
    assert!(
        stderr.contains(&format!(
            "catalog.yaml:{line}:{column}: error: statement does not prepare against database `shop`: column \"qyt\" does not exist"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("hint: did you mean the column `qty`?"), "{stderr}");
    // `setup` ran inside the check's transaction, which was rolled back.
    let tables = db.query("SELECT count(*) FROM information_schema.tables WHERE table_name = 'orders'");
    assert_eq!(tables[0][0].as_deref(), Some("0"), "checking created nothing");
    let catalog = dir.write("catalog.yaml", &good);
    let (code, _, stderr) = run_cli("check", &catalog, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let tables = db.query("SELECT count(*) FROM information_schema.tables WHERE table_name = 'orders'");
    assert_eq!(tables[0][0].as_deref(), Some("0"), "checking a valid catalog created nothing either");
}

#[test]
fn an_unreachable_server_is_named_by_check_without_its_password() {
    // A port nobody listens on: bound, then closed.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = TempDir::new("pg-unreachable");
    let url = format!("postgres://shop:hunter2@127.0.0.1:{port}/shop");
    let catalog = dir.write("catalog.yaml", &shop("${SHOP_URL}", ""));
    let (code, _, stderr) = run_cli("check", &catalog, &[], &[("SHOP_URL", &url)]);
    assert_eq!(code, Some(1), "{stderr}");
    // Where a secret URL points is part of the secret: named by its variable.
    assert!(
        stderr.contains("error: database `shop`: ${SHOP_URL} is unreachable: error connecting to server"),
        "{stderr}"
    );
    assert!(!stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
    assert!(stderr.contains("hint: carte checks every statement against the database when it loads"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    // Its statements could not be checked: nothing is said about their arguments.
    assert!(!stderr.contains("is never used"), "{stderr}");
}

#[test]
fn a_write_whose_result_fails_is_rolled_back() {
    let Some(db) = postgres("rollback") else { return };
    let dir = TempDir::new("pg-rollback");
    let text = shop(&db.url, "").replace(
        "text: \"{{ rows[0] | tojson }}\"",
        "text: \"{% if rows[0].qty > 10 %}{{ fail('at most 10 per order') }}{% endif %}{{ rows[0].id }}\"",
    );
    let catalog = dir.write("catalog.yaml", &text);
    let (failed, text) = call(&catalog, "add", json!({"item": "tea", "qty": 11}));
    assert!(failed);
    assert!(text.contains("at most 10 per order"), "{text}");
    assert!(text.contains("rolled back"), "{text}");
    assert_eq!(count(&db), "0");
    let (failed, text) = call(&catalog, "add", json!({"item": "tea", "qty": 2}));
    assert!(!failed, "{text}");
    assert_eq!(count(&db), "1");
}

#[test]
fn a_slow_statement_stops_at_the_timeout() {
    let Some(db) = postgres("timeout") else { return };
    let dir = TempDir::new("pg-timeout");
    let text = shop(&db.url, "").replace("timeout: 2s", "timeout: 300ms").replace(
        "SELECT item, qty, price, tags FROM orders WHERE",
        "SELECT item, qty, price, tags, pg_sleep(30) AS slept FROM orders WHERE",
    );
    let catalog = dir.write("catalog.yaml", &text);
    let (failed, _) = call(&catalog, "add", json!({"item": "tea", "qty": 2}));
    assert!(!failed);
    let (failed, text) = call(&catalog, "orders", json!({}));
    assert!(failed);
    assert!(text.contains("ran longer than the database's timeout (300ms) and was stopped"), "{text}");
    // The cancel reaches the server at once, but its backend may take a
    // moment to notice; well before the statement's 30 s it must be gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let running = db.query(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(30)%' AND pid <> pg_backend_pid()",
        );
        if running[0][0].as_deref() == Some("0") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the statement still runs on the server: {running:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_read_only_database_refuses_writes() {
    let Some(db) = postgres("readonly") else { return };
    let dir = TempDir::new("pg-readonly");
    let catalog = dir.write("catalog.yaml", &shop(&db.url, "    readOnly: true"));
    let (failed, text) = call(&catalog, "add", json!({"item": "tea", "qty": 2}));
    assert!(failed);
    assert!(text.contains("cannot execute INSERT in a read-only transaction"), "{text}");
    assert!(text.contains("readOnly: true"), "{text}");
    let (failed, text) = call(&catalog, "orders", json!({}));
    assert!(!failed, "{text}");
    assert_eq!(count(&db), "0");
}

/// A TCP proxy to PostgreSQL that the test can cut and restore, on one port.
struct Proxy {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (up2, streams2) = (up.clone(), streams.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if !up2.load(Ordering::SeqCst) {
                    drop(client); // down: accepted and closed at once
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream) else { continue };
                let pairs = [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server.try_clone().unwrap(), client.try_clone().unwrap()),
                ];
                streams2.lock().unwrap().extend([client, server]);
                for (mut from, mut to) in pairs {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy { addr, up, streams }
    }

    /// Cuts every connection and refuses new ones.
    fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        for stream in self.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    fn up(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

fn readyz(server: &HttpServer) -> (u16, Value) {
    let response = send(server.addr, "GET", "/readyz", &[], None);
    let status = response.status;
    (status, serde_json::from_str(&response.text()).unwrap_or(Value::Null))
}

fn tool_call(server: &HttpServer, session: &str, id: i64) -> Value {
    server.request(session, id, "tools/call", json!({"name": "orders", "arguments": {}}))
}

#[test]
fn a_database_that_goes_away_and_comes_back_while_serving() {
    let Some(db) = postgres("outage") else { return };
    let upstream: SocketAddr = {
        let rest = db.url.split('@').nth(1).unwrap_or_default();
        rest.split('/').next().unwrap_or_default().parse().expect("CARTE_TEST_POSTGRES uses host:port")
    };
    let proxy = Proxy::start(upstream);
    let via_proxy = db.url.replace(&upstream.to_string(), &proxy.addr.to_string());
    let dir = TempDir::new("pg-outage");
    let catalog = dir.write("catalog.yaml", &shop(&via_proxy, ""));
    let server = HttpServer::start(&catalog, &[], &[]);
    let session = server.session();
    let answer = tool_call(&server, &session, 2);
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(readyz(&server).0, 200);

    proxy.down();
    let answer = tool_call(&server, &session, 3);
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains(&format!("database `shop` ({}) is unreachable", proxy.addr)), "{text}");
    let (status, ready) = readyz(&server);
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["status"], "unready");
    assert_eq!(ready["unreachableDatabases"], json!(["shop"]));

    proxy.up();
    // The pool connects again on the next call; bounded wait for it.
    let deadline = Instant::now() + TIMEOUT;
    let mut id = 10;
    loop {
        id += 1;
        let answer = tool_call(&server, &session, id);
        if answer["result"]["isError"] == false {
            break;
        }
        assert!(Instant::now() < deadline, "carte never reconnected: {answer}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(readyz(&server).0, 200);
}

#[test]
fn serving_applies_setup_once_accepted() {
    let Some(db) = postgres("setup") else { return };
    let dir = TempDir::new("pg-setup");
    let catalog = dir.write("catalog.yaml", &shop(&db.url, ""));
    let server = HttpServer::start(&catalog, &[], &[]);
    let session = server.session();
    let answer = tool_call(&server, &session, 2);
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let tables = db.query("SELECT count(*) FROM information_schema.tables WHERE table_name = 'orders'");
    assert_eq!(tables[0][0].as_deref(), Some("1"), "setup was committed at start-up");
}

#[test]
fn a_cancelled_call_stops_its_statement_on_the_server() {
    let Some(db) = postgres("cancel") else { return };
    let dir = TempDir::new("pg-cancel");
    let text = shop(&db.url, "").replace("timeout: 2s", "timeout: 1h").replace(
        "SELECT item, qty, price, tags FROM orders WHERE",
        "SELECT item, qty, price, tags, pg_sleep(3600) AS slept FROM orders WHERE",
    );
    let catalog = dir.write("catalog.yaml", &text);
    let server = HttpServer::start(&catalog, &[], &[]);
    let session = server.session();
    db.query("INSERT INTO orders (item, qty) VALUES ('tea', 1)"); // pg_sleep runs once per row
    let (addr, session2) = (server.addr, session.clone());
    let slow = std::thread::spawn(move || {
        let call =
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "orders", "arguments": {}}});
        // Any answer (or none) will do: the call is cancelled.
        let _ = send(
            addr,
            "POST",
            "/mcp",
            &[("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Session-Id", &session2)],
            Some(&call),
        );
    });
    let sleeping = || {
        db.query(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(3600)%' AND pid <> pg_backend_pid()",
        )[0][0]
            .clone()
            .unwrap_or_default()
    };
    let deadline = Instant::now() + TIMEOUT;
    while sleeping() != "1" {
        assert!(Instant::now() < deadline, "the statement never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "test"}});
    let answer = server.post(Some(&session), &cancel);
    assert!(answer.status == 202 || answer.status == 200, "{}", answer.status);
    while sleeping() != "0" {
        assert!(Instant::now() < deadline, "the cancelled statement still runs on the server");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
    let _ = slow.join();
}

#[test]
fn the_example_tea_shop_runs() {
    let Some(db) = postgres("example") else { return };
    let catalog = common::repo_root().join("examples/postgres/catalog.yaml");
    let env = [("SHOP_DATABASE_URL", db.url.as_str())];
    let call = |tool: &str, args: Value| {
        let (_, answer, stderr) = run_cli("call", &catalog, &[tool, "--json", &args.to_string()], &env);
        let text = answer["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{answer} {stderr}")).to_owned();
        (answer["isError"] == true, text)
    };
    let (code, _, stderr) = run_cli("check", &catalog, &[], &env);
    assert_eq!(code, Some(0), "{stderr}");
    let (failed, text) = call("search_teas", json!({"tag": "floral"}));
    assert!(!failed, "{text}");
    assert!(text.contains("#1 Darjeeling First Flush (black) 14.5 EUR, 40 in stock [floral, light]"), "{text}");
    assert!(!text.contains("Gyokuro"), "{text}");
    let (failed, text) =
        call("place_order", json!({"tea": 2, "quantity": 3, "customer": "Ada", "note": {"gift": "yes"}}));
    assert!(!failed, "{text}");
    assert!(text.starts_with("Order #1: 3 × Gyokuro for Ada, 63"), "{text}");
    let (failed, text) = call("place_order", json!({"tea": 4, "quantity": 1, "customer": "Ada"}));
    assert!(failed, "sold out: {text}");
    let (failed, text) = call("order_status", json!({"order": 1}));
    assert!(!failed && text.contains("open since") && text.contains(r#"note: {"gift": "yes"}"#), "{text}");
    let (failed, text) = call("cancel_order", json!({"order": 1}));
    assert!(!failed, "{text}");
    assert_eq!(text, "Cancelled; Gyokuro is back to 12 in stock.");
    let (failed, _) = call("cancel_order", json!({"order": 1}));
    assert!(failed, "an order is cancelled once");
    let stock = db.query("SELECT stock FROM teas WHERE name = 'Gyokuro'");
    assert_eq!(stock[0][0].as_deref(), Some("12"));
}

#[test]
fn replicas_started_together_run_setup_one_at_a_time() {
    // Each round on a fresh database: the three replicas race to create it.
    for round in 0..3 {
        let Some(db) = postgres(&format!("setup_race_{round}")) else { return };
        let dir = TempDir::new("pg-setup-race");
        let catalog = format!(
            r#"server: {{ name: race, version: 1.0.0 }}
databases:
  shop:
    url: "{}"
    setup:
      - CREATE TABLE IF NOT EXISTS teas (id SERIAL PRIMARY KEY, name TEXT NOT NULL)
      - CREATE TABLE IF NOT EXISTS orders (id SERIAL PRIMARY KEY, tea INTEGER NOT NULL)
      - CREATE INDEX IF NOT EXISTS orders_tea ON orders (tea)
tools:
  - name: count
    description: Counts the teas.
    run:
      sql: {{ database: shop, statement: "SELECT count(*) AS n FROM teas" }}
      text: "{{{{ rows[0].n }}}}"
"#,
            db.url
        );
        let path = dir.write("catalog.yaml", &catalog);
        // Started together; each must come up (a replica that lost a race exits instead).
        let starts: Vec<_> = (0..3)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || HttpServer::start(&path, &[], &[]))
            })
            .collect();
        let servers: Vec<HttpServer> =
            starts.into_iter().map(|start| start.join().expect("every replica starts and listens")).collect();
        for server in &servers {
            let session = server.session();
            let answer = server.request(&session, 2, "tools/call", json!({"name": "count", "arguments": {}}));
            assert_eq!(answer["result"]["content"][0]["text"], "0", "round {round}: {answer}");
        }
    }
}

#[test]
fn a_database_that_refuses_us_gets_the_hint_for_why() {
    let Some(db) = postgres("refused") else { return };
    let (base, _) = db.url.rsplit_once('/').expect("a database URL");
    let nobody = base.replacen("://", "://carte_nobody_here@", 1);
    let nobody = match nobody.split_once('@') {
        // `postgres://user@host` already had a user: keep only ours.
        Some((scheme_user, rest)) if rest.contains('@') => {
            format!("{scheme_user}@{}", rest.rsplit_once('@').unwrap().1)
        }
        _ => nobody,
    };
    let dir = TempDir::new("pg-refused");
    let check = |url: &str| {
        let yaml = format!(
            "databases:\n  shop: {{ url: \"{url}\" }}\ntools:\n  - {{ name: q, description: Q., run: {{ sql: {{ database: shop, statement: SELECT 1 }} }} }}\n"
        );
        let catalog = dir.write("catalog.yaml", &yaml);
        let (code, _, stderr) = run_cli("check", &catalog, &[], &[]);
        assert_eq!(code, Some(1), "{stderr}");
        stderr
    };
    let missing = check(&format!("{base}/carte_no_such_database"));
    assert!(missing.contains("create that database first"), "{missing}");
    let refused = check(&format!("{nobody}/{}", db.name));
    assert!(refused.contains("check the user and password in `url`"), "{refused}");
}
