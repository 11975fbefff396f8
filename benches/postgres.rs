//! PostgreSQL through carte against the same statements from a plain client,
//! on the server named by `CARTE_TEST_POSTGRES` (without it: a loud SKIP):
//!
//! - `book_room` (an INSERT … RETURNING) and `room_bookings` (a SELECT of 10
//!   rows), called over Streamable HTTP on the release binary by 1 and 64
//!   sessions, each calling back to back on a keep-alive connection;
//! - `ping` (no SQL) through carte the same way: the floor of MCP over
//!   HTTP, which a SQL tool can at best reach;
//! - the same statements from tokio-postgres through a deadpool pool of the
//!   same size (8), by 1 and 64 tasks.
//!
//! Run with `cargo bench --bench postgres`; figures are printed, not asserted.

mod common;

use common::{Server, back_to_back, ms, percentile, start};
use std::path::Path;
use std::time::{Duration, Instant};

const RUN_FOR: Duration = Duration::from_secs(3);
const POOL: usize = 8;
const INSERT: &str = "INSERT INTO bookings (room, who, hours) VALUES ($1, $2, $3) RETURNING id";
const SELECT: &str = "SELECT id, who, hours, starts FROM bookings WHERE room = $1 ORDER BY id DESC LIMIT 10";

/// Calls/s, p50 and p99 of `latencies` gathered over `elapsed`.
fn report(what: &str, callers: usize, mut latencies: Vec<Duration>, elapsed: Duration) -> f64 {
    latencies.sort();
    let rate = latencies.len() as f64 / elapsed.as_secs_f64();
    println!(
        "{what:<34} {callers:>2} callers: {rate:>7.0} calls/s, p50 {:.2} ms, p99 {:.2} ms ({} calls)",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        latencies.len()
    );
    rate
}

const CATALOG: &str = r#"databases:
  bench:
    url: ${BENCH_DATABASE_URL}
    pool: { max: 8 }
    setup:
      - CREATE TABLE IF NOT EXISTS bookings (id bigserial PRIMARY KEY, room text NOT NULL, who text NOT NULL, hours int4 NOT NULL, starts timestamptz NOT NULL DEFAULT now())
      - CREATE INDEX IF NOT EXISTS bookings_room ON bookings (room, id)
tools:
  - name: ping
    description: No SQL at all, to show what carte's HTTP and MCP cost alone.
    run: { text: pong }
  - name: book_room
    description: Books a room.
    inputSchema: { type: object, properties: { room: { type: string }, who: { type: string }, hours: { type: integer } }, required: [room, who, hours] }
    run:
      sql: { database: bench, statement: "INSERT INTO bookings (room, who, hours) VALUES (:room, :who, :hours) RETURNING id" }
      text: "Booked #{{ rows[0].id }}"
  - name: room_bookings
    description: The last bookings of a room.
    inputSchema: { type: object, properties: { room: { type: string } }, required: [room] }
    run:
      sql: { database: bench, statement: "SELECT id, who, hours, starts FROM bookings WHERE room = :room ORDER BY id DESC LIMIT 10" }
      text: "{% for b in rows %}#{{ b.id }} {{ b.who }} {{ b.hours }}h {{ b.starts }}\n{% endfor %}"
"#;

fn main() {
    let Some(admin) = std::env::var("CARTE_TEST_POSTGRES").ok().filter(|v| !v.is_empty()) else {
        eprintln!("SKIP benches/postgres.rs: set CARTE_TEST_POSTGRES=postgres://user@127.0.0.1:PORT/postgres");
        return;
    };
    let name = format!("carte_bench_{}", std::process::id());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    admin_run(&runtime, &admin, &format!("CREATE DATABASE {name}"));
    let url = format!("{}/{name}", admin.rsplit_once('/').expect("a URL ending in /DATABASE").0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-postgres");
    std::fs::create_dir_all(&dir).expect("a folder");
    let catalog = dir.join("catalog.yaml");
    std::fs::write(&catalog, CATALOG).expect("the catalog");
    let server = start(&catalog, &[], &[("BENCH_DATABASE_URL", &url)]);
    // Some rows for the SELECT to read.
    through_carte(&server, "book_room", 1, Duration::from_millis(500));
    let floor: Vec<f64> = [1, 64].iter().map(|&callers| through_carte(&server, "ping", callers, RUN_FOR)).collect();
    let (mut ratios, mut over_floor) = (Vec::new(), Vec::new());
    for (tool, statement) in [("book_room", INSERT), ("room_bookings", SELECT)] {
        for (callers, floor) in [1, 64].into_iter().zip(&floor) {
            let carte = through_carte(&server, tool, callers, RUN_FOR);
            let plain = plain_client(&runtime, &url, statement, callers, RUN_FOR);
            println!(
                "  → carte does {:.2}× the plain client's calls/s and {:.2}× its own `ping`'s",
                carte / plain,
                carte / floor
            );
            ratios.push(plain / carte);
            over_floor.push(floor / carte);
        }
    }
    drop(server);
    admin_run(&runtime, &admin, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    let worst = ratios.iter().copied().fold(0.0, f64::max);
    println!("worst: the plain client is {worst:.2}× carte's throughput (target: at most 1.3×)");
    let worst = over_floor.iter().copied().fold(0.0, f64::max);
    println!("worst: carte's `ping` (MCP over HTTP, no SQL) is {worst:.2}× its SQL tools' throughput");
}

fn admin_run(runtime: &tokio::runtime::Runtime, url: &str, sql: &str) {
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connects");
        tokio::spawn(connection);
        client.batch_execute(sql).await.expect(sql);
    });
}

fn through_carte(server: &Server, tool: &str, sessions: usize, run_for: Duration) -> f64 {
    let call = match tool {
        "book_room" => {
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"book_room","arguments":{"room":"Focus","who":"ada","hours":2}}}"#
        }
        "room_bookings" => {
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"room_bookings","arguments":{"room":"Focus"}}}"#
        }
        _ => r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ping","arguments":{}}}"#,
    };
    let (all, elapsed) = back_to_back(server, sessions, run_for, call, r#""isError":false"#);
    report(&format!("carte over HTTP, {tool}"), sessions, all, elapsed)
}

fn plain_client(
    runtime: &tokio::runtime::Runtime,
    url: &str,
    statement: &'static str,
    callers: usize,
    run_for: Duration,
) -> f64 {
    let config: tokio_postgres::Config = url.parse().expect("a URL");
    let manager = deadpool_postgres::Manager::from_config(
        config,
        tokio_postgres::NoTls,
        deadpool_postgres::ManagerConfig { recycling_method: deadpool_postgres::RecyclingMethod::Fast },
    );
    let pool = deadpool_postgres::Pool::builder(manager).max_size(POOL).build().expect("a pool");
    let (all, elapsed) = runtime.block_on(async {
        let began = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|_| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    let until = Instant::now() + run_for;
                    let mut latencies = Vec::new();
                    while Instant::now() < until {
                        let began = Instant::now();
                        let client = pool.get().await.expect("a connection");
                        let prepared = client.prepare_cached(statement).await.expect("prepares");
                        let rows = if statement.starts_with("INSERT") {
                            client.query(&prepared, &[&"Focus", &"ada", &2i32]).await
                        } else {
                            client.query(&prepared, &[&"Focus"]).await
                        };
                        assert!(!rows.expect("runs").is_empty());
                        drop(client);
                        latencies.push(began.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.expect("a task"));
        }
        (all, began.elapsed())
    });
    let what =
        if statement.starts_with("INSERT") { "plain tokio-postgres, INSERT" } else { "plain tokio-postgres, SELECT" };
    report(what, callers, all, elapsed)
}
