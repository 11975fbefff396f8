//! What the Streamable HTTP benches share: start `carte serve --http` and read
//! the address it listens at, a keep-alive HTTP/1.1 [`Connection`] speaking
//! just enough MCP, sessions calling a tool back to back, and percentiles.
//!
//! Each bench includes it with `mod common;`; not every bench uses every item.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// How long a read may wait for the server.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// A running `carte serve --http`; killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `carte serve --http 127.0.0.1:0 EXTRA… CATALOG` with `envs` set and
/// waits until it says where it listens.
pub fn start(catalog: &Path, extra: &[&str], envs: &[(&str, &str)]) -> Server {
    start_binary(Path::new(env!("CARGO_BIN_EXE_carte")), catalog, extra, envs)
}

/// [`start`] with another carte binary: `binary` (a build to compare with).
pub fn start_binary(binary: &Path, catalog: &Path, extra: &[&str], envs: &[(&str, &str)]) -> Server {
    let mut child = Command::new(binary)
        .args(["serve", "--http", "127.0.0.1:0"])
        .args(extra)
        .arg(catalog)
        .env("CARTE_LOG", "info")
        // Traces only where a bench asks for them.
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .envs(envs.iter().copied())
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
pub struct Connection {
    pub reader: BufReader<TcpStream>,
    pub writer: TcpStream,
    addr: SocketAddr,
}

impl Connection {
    pub fn open(addr: SocketAddr) -> Connection {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        Connection { writer: stream.try_clone().expect("clone"), reader: BufReader::new(stream), addr }
    }

    pub fn send(&mut self, method: &str, session: Option<&str>, body: &str) {
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

    /// Reads a response head: status, the session id if any, whether the body
    /// is chunked, and its length if given.
    pub fn head(&mut self) -> (u16, Option<String>, bool, Option<usize>) {
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
    pub fn body(&mut self, chunked: bool, length: Option<usize>) -> String {
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

    /// POSTs `body`; returns the status, the session id if any, and the body.
    pub fn request(&mut self, session: Option<&str>, body: &str) -> (u16, Option<String>, String) {
        self.send("POST", session, body);
        let (status, id, chunked, length) = self.head();
        (status, id, self.body(chunked, length))
    }

    /// Initializes a session on this connection; returns its id.
    pub fn session(&mut self) -> String {
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;
        let (status, session, _) = self.request(None, init);
        assert_eq!(status, 200, "initialize");
        let session = session.expect("a session id");
        let (status, _, _) = self.request(Some(&session), r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert!(status == 202 || status == 200, "initialized: {status}");
        session
    }
}

/// `sessions` MCP sessions, each on its own keep-alive connection, POST `call`
/// back to back for `run_for`, each answer a 200 containing `expect`. Returns
/// every call's latency and the time from the common start until all finished.
pub fn back_to_back(
    server: &Server,
    sessions: usize,
    run_for: Duration,
    call: &str,
    expect: &str,
) -> (Vec<Duration>, Duration) {
    let start = Arc::new(Barrier::new(sessions + 1));
    let workers: Vec<_> = (0..sessions)
        .map(|_| {
            let (addr, start, call, expect) = (server.addr, start.clone(), call.to_owned(), expect.to_owned());
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
                        let (status, _, body) = connection.request(Some(&session), &call);
                        latencies.push(began.elapsed());
                        assert!(status == 200 && body.contains(&expect), "{status} {body}");
                    }
                    latencies
                })
                .expect("a thread")
        })
        .collect();
    start.wait();
    let began = Instant::now();
    let all: Vec<Duration> = workers.into_iter().flat_map(|w| w.join().expect("worker")).collect();
    (all, began.elapsed())
}

/// The `p` quantile (0 to 1) of `sorted`, zero when it is empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len().max(1) as f64 - 1.0) * p).round() as usize;
    sorted.get(rank.min(sorted.len().saturating_sub(1))).copied().unwrap_or_default()
}

/// A duration in milliseconds.
pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
