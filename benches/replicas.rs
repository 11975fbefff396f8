//! Replicas sharing state in PostgreSQL (`serve --state`), on the server named
//! by `CARTE_TEST_POSTGRES` (without it: a loud SKIP):
//!
//! - calls/s, p50 and p99 of `get_quote` (text, no SQL) and `book_room` (an
//!   INSERT) by 64 legacy sessions, on one replica, then on two: each session
//!   starts on one replica and sends its calls to both in turn, as a load
//!   balancer without sticky routing would (so each session is restored once
//!   on the other replica);
//! - how long a write through replica A takes to reach a subscriber on
//!   replica B as `notifications/resources/updated` (p50, p99): the call, the
//!   commit, `NOTIFY`, B's re-read of the live resource (after live.rs's
//!   50 ms debounce) and the SSE event.
//!
//! Run with `cargo bench --bench replicas` (`--profile dev` for a quick check);
//! figures are printed, not asserted.

mod common;

use std::io::{BufRead as _, Write as _};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{Connection, Server, ms, percentile, start};

const RUN_FOR: Duration = Duration::from_secs(3);
const SESSIONS: usize = 64;
const LATENCY_SAMPLES: usize = 100;
const KEY: (&str, &str) = ("BENCH_STATE_KEY", "0123456789abcdef0123456789abcdef0123456789abcdef");

const CATALOG: &str = r#"databases:
  bench:
    url: ${BENCH_DATABASE_URL}
    pool: { max: 8 }
    setup:
      - CREATE TABLE IF NOT EXISTS bookings (id bigserial PRIMARY KEY, room text NOT NULL, who text NOT NULL)
tools:
  - name: get_quote
    description: A quote, no SQL.
    inputSchema: { type: object, properties: { symbol: { type: string } }, required: [symbol] }
    run: { text: "{{ symbol }}: 42.00" }
  - name: book_room
    description: Books a room.
    inputSchema: { type: object, properties: { room: { type: string }, who: { type: string } }, required: [room, who] }
    run:
      sql: { database: bench, statement: "INSERT INTO bookings (room, who) VALUES (:room, :who) RETURNING id" }
      text: "Booked #{{ rows[0].id }}"
resources:
  - uri: bench://bookings/count
    name: booking_count
    description: How many bookings there are.
    sql: { database: bench, statement: "SELECT count(*) AS n FROM bookings" }
    text: "{{ rows[0].n }}"
"#;

const QUOTE: &str =
    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_quote","arguments":{"symbol":"ACME"}}}"#;
const BOOK: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"book_room","arguments":{"room":"Focus","who":"ada"}}}"#;

fn main() {
    let Some(admin) = std::env::var("CARTE_TEST_POSTGRES").ok().filter(|v| !v.is_empty()) else {
        eprintln!("SKIP benches/replicas.rs: set CARTE_TEST_POSTGRES=postgres://user@127.0.0.1:PORT/postgres");
        return;
    };
    let name = format!("carte_bench_replicas_{}", std::process::id());
    admin_run(&admin, &format!("CREATE DATABASE {name}"));
    let url = format!("{}/{name}", admin.rsplit_once('/').expect("a URL ending in /DATABASE").0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-replicas");
    std::fs::create_dir_all(&dir).expect("a folder");
    let catalog = dir.join("catalog.yaml");
    std::fs::write(&catalog, CATALOG).expect("the catalog");
    let envs = [("BENCH_DATABASE_URL", url.as_str()), KEY];
    let replica = || start(&catalog, &["--state", &url, "--state-key-env", KEY.0], &envs);
    let a = replica();
    wait_ready(&a);
    for (tool, call) in [("get_quote", QUOTE), ("book_room", BOOK)] {
        spread(&[&a], tool, call);
    }
    let b = replica();
    wait_ready(&b);
    for (tool, call) in [("get_quote", QUOTE), ("book_room", BOOK)] {
        spread(&[&a, &b], tool, call);
    }
    cross_replica_latency(&a, &b);
    drop((a, b));
    admin_run(&admin, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
}

fn admin_run(url: &str, sql: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connects");
        tokio::spawn(connection);
        client.batch_execute(sql).await.expect(sql);
    });
}

/// Waits (bounded) until `/readyz` answers 200: the replica listens.
fn wait_ready(server: &Server) {
    let deadline = Instant::now() + common::TIMEOUT;
    loop {
        let mut stream = std::net::TcpStream::connect(server.addr).expect("connect");
        let request = format!("GET /readyz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", server.addr);
        stream.write_all(request.as_bytes()).expect("write");
        let mut status = String::new();
        std::io::BufReader::new(stream).read_line(&mut status).expect("a status line");
        if status.split_whitespace().nth(1) == Some("200") {
            return;
        }
        assert!(Instant::now() < deadline, "the replica never got ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`SESSIONS`] sessions, the n-th started on replica n mod N, each calling
/// `call` back to back on every replica in turn for [`RUN_FOR`].
fn spread(replicas: &[&Server], tool: &str, call: &str) {
    let start = Arc::new(Barrier::new(SESSIONS + 1));
    let addrs: Vec<_> = replicas.iter().map(|server| server.addr).collect();
    let workers: Vec<_> = (0..SESSIONS)
        .map(|n| {
            let (addrs, start, call) = (addrs.clone(), start.clone(), call.to_owned());
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let mut connections: Vec<Connection> =
                        (0..addrs.len()).map(|i| Connection::open(addrs[(n + i) % addrs.len()])).collect();
                    let session = connections[0].session();
                    start.wait();
                    let until = Instant::now() + RUN_FOR;
                    let mut latencies = Vec::new();
                    let mut turn = 0;
                    while Instant::now() < until {
                        let connection = &mut connections[turn % addrs.len()];
                        turn += 1;
                        let began = Instant::now();
                        let (status, _, body) = connection.request(Some(&session), &call);
                        latencies.push(began.elapsed());
                        assert!(status == 200 && body.contains(r#""isError":false"#), "{status} {body}");
                    }
                    latencies
                })
                .expect("a thread")
        })
        .collect();
    start.wait();
    let began = Instant::now();
    let mut all: Vec<Duration> = workers.into_iter().flat_map(|w| w.join().expect("worker")).collect();
    let elapsed = began.elapsed();
    all.sort();
    println!(
        "{tool:<10} {} replica(s), {SESSIONS} sessions: {:>7.0} calls/s, p50 {:.2} ms, p99 {:.2} ms ({} calls)",
        replicas.len(),
        all.len() as f64 / elapsed.as_secs_f64(),
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
        all.len()
    );
}

/// A session on `b` subscribed to the booking count; bookings through `a`,
/// one at a time: from the call's start to the notification on `b`.
fn cross_replica_latency(a: &Server, b: &Server) {
    let mut subscriber = Connection::open(b.addr);
    let session = subscriber.session();
    let subscribe =
        r#"{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"bench://bookings/count"}}"#;
    let (status, _, _) = subscriber.request(Some(&session), subscribe);
    assert_eq!(status, 200, "subscribe");
    let mut stream = Connection::open(b.addr);
    stream.send("GET", Some(&session), "");
    let (status, _, _, _) = stream.head();
    assert_eq!(status, 200, "the GET stream");
    let mut booker = Connection::open(a.addr);
    let booker_session = booker.session();
    let mut latencies = Vec::with_capacity(LATENCY_SAMPLES);
    let mut line = String::new();
    for _ in 0..LATENCY_SAMPLES {
        let began = Instant::now();
        let (status, _, body) = booker.request(Some(&booker_session), BOOK);
        assert!(status == 200 && body.contains(r#""isError":false"#), "{status} {body}");
        loop {
            line.clear();
            stream.reader.read_line(&mut line).expect("the GET stream is read within its timeout");
            if line.contains("notifications/resources/updated") {
                break;
            }
        }
        latencies.push(began.elapsed());
    }
    latencies.sort();
    println!(
        "write on A → resources/updated on B: p50 {:.2} ms, p99 {:.2} ms ({LATENCY_SAMPLES} writes, one at a time; includes live.rs's 50 ms debounce)",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
    );
}
