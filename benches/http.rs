//! Streamable HTTP on loopback, measured on the real binary:
//!
//! 1. `tools/call get_quote` requests per second and latency with 1, 16 and
//!    64 concurrent sessions (each a keep-alive connection calling back to back);
//! 2. notification fan-out: 1,000 sessions with their GET streams open, one
//!    catalog edit, and how long until the last session hears `list_changed`;
//! 3. memory: the server's RSS with 10,000 idle sessions, after they expire,
//!    and again for a second 10,000 (memory freed is reused, not leaked).
//!
//! Run with `cargo bench --bench http` (or `-- sessions` for the third
//! alone); figures are printed, not asserted.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(60);

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

fn start(catalog: &Path) -> Server {
    start_with(catalog, &[])
}

fn start_with(catalog: &Path, extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_carte"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .args(extra)
        .arg(catalog)
        .env("CARTE_LOG", "info")
        .env("RESERVO_DATABASE_URL", "sqlite::memory:")
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

fn main() {
    let reservo = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogs/reservo.yaml");
    if std::env::args().any(|arg| arg == "sessions") {
        sessions_memory(&reservo, 10_000);
        return;
    }
    let server = start(&reservo);
    for sessions in [1, 16, 64] {
        calls(&server, sessions, Duration::from_secs(3));
    }
    drop(server);
    fan_out(1000);
    sessions_memory(&reservo, 10_000);
}

/// The resident memory of a process, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// Live sessions, as `/readyz` counts them.
fn live_sessions(addr: SocketAddr) -> u64 {
    let mut connection = Connection::open(addr);
    let head = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    connection.writer.write_all(head.as_bytes()).expect("write");
    let (_, _, chunked, length) = connection.head();
    let body = connection.body(chunked, length);
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    ready["sessions"].as_u64().unwrap_or(u64::MAX)
}

/// RSS with `count` idle sessions, after they expire, and for a second round.
fn sessions_memory(catalog: &Path, count: usize) {
    let limit = (2 * count).to_string();
    // Idle long enough for every session of a round to be live at once (debug builds are slow).
    let idle = std::env::var("CARTE_BENCH_IDLE").unwrap_or_else(|_| "60".to_owned());
    let server = start_with(catalog, &["--session-idle-timeout", &idle, "--max-sessions", &limit]);
    let pid = server.child.id();
    std::thread::sleep(Duration::from_millis(300));
    println!("sessions memory: RSS at start {:.1} MiB", rss_mib(pid));
    for round in 1..=2 {
        let threads = 8;
        let began = Instant::now();
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let addr = server.addr;
                std::thread::spawn(move || {
                    let mut connection = Connection::open(addr);
                    for _ in 0..count / threads {
                        connection.session();
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("worker");
        }
        let live = live_sessions(server.addr);
        println!(
            "sessions memory, round {round}: {live} idle sessions in {:.1} s, RSS {:.1} MiB",
            began.elapsed().as_secs_f64(),
            rss_mib(pid)
        );
        let deadline = Instant::now() + TIMEOUT + Duration::from_secs(idle.parse().unwrap_or(60));
        while live_sessions(server.addr) != 0 {
            assert!(Instant::now() < deadline, "sessions never expired");
            std::thread::sleep(Duration::from_millis(200));
        }
        println!("sessions memory, round {round}: all closed, RSS {:.1} MiB", rss_mib(pid));
        // The sweep after the one that closed them hands the memory back.
        std::thread::sleep(Duration::from_secs(idle.parse::<u64>().unwrap_or(60) / 4 + 1));
        println!("sessions memory, round {round}: a sweep later, RSS {:.1} MiB", rss_mib(pid));
    }
}

fn calls(server: &Server, sessions: usize, run_for: Duration) {
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_quote","arguments":{"room":"Focus","tier":"pro","hours":3}}}"#;
    let start = Arc::new(Barrier::new(sessions + 1));
    let workers: Vec<_> = (0..sessions)
        .map(|_| {
            let addr = server.addr;
            let start = start.clone();
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
                        assert!(status == 200 && body.contains("11250 cents"), "{status} {body}");
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
        "HTTP tools/call get_quote, {sessions:>2} sessions: {:>6.0} calls/s, p50 {:.2} ms, p99 {:.2} ms ({} calls)",
        all.len() as f64 / elapsed.as_secs_f64(),
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
        all.len()
    );
}

fn fan_out(sessions: usize) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-http-fanout");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("folder");
    let path = dir.join("catalog.yaml");
    let catalog = |tools: &[&str]| {
        let mut yaml = String::from("server: { name: fanout, version: 1.0.0 }\ntools:\n");
        for tool in tools {
            yaml.push_str(&format!("  - name: {tool}\n    description: {tool}.\n    run: {{ text: {tool} }}\n"));
        }
        yaml
    };
    std::fs::write(&path, catalog(&["a"])).expect("write");
    let server = start(&path);
    let ready = Arc::new(Barrier::new(sessions + 1));
    let listeners: Vec<_> = (0..sessions)
        .map(|_| {
            let addr = server.addr;
            let ready = ready.clone();
            std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    let mut connection = Connection::open(addr);
                    let session = connection.session();
                    connection.send("GET", Some(&session), "");
                    let (status, _, _, _) = connection.head();
                    assert_eq!(status, 200, "GET stream");
                    ready.wait();
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if connection.reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return None;
                        }
                        if line.contains("notifications/tools/list_changed") {
                            return Some(Instant::now());
                        }
                    }
                })
                .expect("a thread")
        })
        .collect();
    ready.wait();
    std::thread::sleep(Duration::from_millis(500)); // streams settled
    let written = Instant::now();
    std::fs::write(&path, catalog(&["a", "b"])).expect("write");
    let arrivals: Vec<Instant> = listeners.into_iter().filter_map(|l| l.join().ok().flatten()).collect();
    let first = arrivals.iter().min().copied().unwrap_or(written);
    let last = arrivals.iter().max().copied().unwrap_or(written);
    println!(
        "fan-out to {} of {sessions} sessions: first list_changed {:.0} ms after the write (50 ms debounce), last {:.0} ms; first → last {:.1} ms",
        arrivals.len(),
        ms(first - written),
        ms(last - written),
        ms(last - first)
    );
}
