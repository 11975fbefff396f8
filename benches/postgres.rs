//! PostgreSQL through carte against the same statements from a plain client,
//! on the server named by `CARTE_TEST_POSTGRES` (without it: a loud SKIP):
//!
//! - `book_room` (an INSERT … RETURNING) and `room_bookings` (a SELECT of 10
//!   rows), called over Streamable HTTP on the release binary by 1 and 64
//!   sessions, each calling back to back on a keep-alive connection;
//! - `ping` (no SQL) through carte the same way: carte's own cost;
//! - the same statements from tokio-postgres through a deadpool pool of the
//!   same size (8), by 1 and 64 tasks.
//!
//! Run with `cargo bench --bench postgres`; figures are printed, not asserted.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(60);
const RUN_FOR: Duration = Duration::from_secs(3);
const POOL: usize = 8;
const INSERT: &str = "INSERT INTO bookings (room, who, hours) VALUES ($1, $2, $3) RETURNING id";
const SELECT: &str = "SELECT id, who, hours, starts FROM bookings WHERE room = $1 ORDER BY id DESC LIMIT 10";

struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(catalog: &Path, url: &str) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_carte"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .arg(catalog)
        .env("CARTE_LOG", "info")
        .env("BENCH_DATABASE_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("carte starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("carte says where it listens").expect("stderr is text");
        if let Some(rest) = line.split("serving MCP at http://").nth(1) {
            break rest.trim_end_matches("/mcp").trim().parse().expect("an address");
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Server { child, addr }
}
/// One keep-alive connection speaking just enough HTTP/1.1.
struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    addr: SocketAddr,
}

impl Connection {
    fn open(addr: SocketAddr) -> Connection {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        Connection { writer: stream.try_clone().expect("clone"), reader: BufReader::new(stream), addr }
    }

    fn send(&mut self, method: &str, session: Option<&str>, body: &str) {
        let mut head = format!(
            "{method} /mcp HTTP/1.1\r\nHost: {}\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n",
            self.addr
        );
        if let Some(session) = session {
            head.push_str(&format!("Mcp-Session-Id: {session}\r\n"));
        }
        if !body.is_empty() {
            head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        head.push_str(body);
        self.writer.write_all(head.as_bytes()).expect("write");
    }

    /// Reads a response head: status and the session id, if any.
    fn head(&mut self) -> (u16, Option<String>, bool, Option<usize>) {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("status");
        let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let (mut session, mut chunked, mut length) = (None, false, None);
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("header");
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((header, ""));
            match name.to_ascii_lowercase().as_str() {
                "mcp-session-id" => session = Some(value.trim().to_owned()),
                "transfer-encoding" => chunked = value.contains("chunked"),
                "content-length" => length = value.trim().parse().ok(),
                _ => {}
            }
        }
        (status, session, chunked, length)
    }

    /// Reads a whole response body.
    fn body(&mut self, chunked: bool, length: Option<usize>) -> String {
        let mut body = Vec::new();
        if chunked {
            let mut line = String::new();
            loop {
                line.clear();
                self.reader.read_line(&mut line).expect("chunk size");
                let size = usize::from_str_radix(line.trim(), 16).unwrap_or(0);
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk).expect("chunk");
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else if let Some(length) = length {
            body.resize(length, 0);
            self.reader.read_exact(&mut body).expect("body");
        }
        String::from_utf8_lossy(&body).into_owned()
    }

    fn request(&mut self, session: Option<&str>, body: &str) -> (u16, Option<String>, String) {
        self.send("POST", session, body);
        let (status, id, chunked, length) = self.head();
        (status, id, self.body(chunked, length))
    }

    /// Initializes a session on this connection; returns its id.
    fn session(&mut self) -> String {
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;
        let (status, session, _) = self.request(None, init);
        assert_eq!(status, 200, "initialize");
        let session = session.expect("a session id");
        let (status, _, _) = self.request(Some(&session), r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert!(status == 202 || status == 200, "initialized: {status}");
        session
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len().max(1) as f64 - 1.0) * p).round() as usize;
    sorted.get(rank.min(sorted.len().saturating_sub(1))).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

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
    let server = start(&catalog, &url);
    // Some rows for the SELECT to read.
    through_carte(&server, "book_room", 1, Duration::from_millis(500));
    for callers in [1, 64] {
        through_carte(&server, "ping", callers, RUN_FOR);
    }
    let mut ratios = Vec::new();
    for (tool, statement) in [("book_room", INSERT), ("room_bookings", SELECT)] {
        for callers in [1, 64] {
            let carte = through_carte(&server, tool, callers, RUN_FOR);
            let plain = plain_client(&runtime, &url, statement, callers, RUN_FOR);
            println!("  → carte does {:.2}× the plain client's calls/s", carte / plain);
            ratios.push(plain / carte);
        }
    }
    drop(server);
    admin_run(&runtime, &admin, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    let worst = ratios.iter().copied().fold(0.0, f64::max);
    println!("worst: the plain client is {worst:.2}× carte's throughput (target: at most 1.3×)");
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
        _ => {
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"room_bookings","arguments":{"room":"Focus"}}}"#
        }
    };
    let start = Arc::new(Barrier::new(sessions + 1));
    let workers: Vec<_> = (0..sessions)
        .map(|_| {
            let (addr, start) = (server.addr, start.clone());
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let mut connection = Connection::open(addr);
                    let session = connection.session();
                    start.wait();
                    let until = Instant::now() + run_for;
                    let mut latencies = Vec::new();
                    while Instant::now() < until {
                        let began = Instant::now();
                        let (status, _, body) = connection.request(Some(&session), call);
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
    let all: Vec<Duration> = workers.into_iter().flat_map(|w| w.join().expect("worker")).collect();
    report(&format!("carte over HTTP, {tool}"), sessions, all, began.elapsed())
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
