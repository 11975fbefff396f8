//! A small HTTP/1.1 client for the tests: enough of the protocol to speak
//! MCP's Streamable HTTP to carte (JSON and SSE bodies, chunked encoding),
//! with every read bounded by a timeout.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Instant;

use serde_json::{Value, json};

use super::TIMEOUT;

/// A response: status, headers (lower-case names), and the body's reader.
pub struct Response {
    pub status: u16,
    pub headers: HashMap<String, String>,
    reader: BufReader<TcpStream>,
    chunked: bool,
    left_in_chunk: usize,
    done: bool,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// Reads up to `buf.len()` body bytes (0 at the end), decoding chunks.
    fn read_body(&mut self, buf: &mut [u8]) -> usize {
        if self.done {
            return 0;
        }
        if !self.chunked {
            let n = self.reader.read(buf).unwrap_or(0);
            self.done = n == 0;
            return n;
        }
        if self.left_in_chunk == 0 {
            let mut line = String::new();
            if self.reader.read_line(&mut line).unwrap_or(0) == 0 {
                self.done = true;
                return 0;
            }
            if line.trim().is_empty() {
                line.clear();
                self.reader.read_line(&mut line).unwrap_or(0);
            }
            self.left_in_chunk = usize::from_str_radix(line.trim(), 16).unwrap_or(0);
            if self.left_in_chunk == 0 {
                self.done = true;
                return 0;
            }
        }
        let want = buf.len().min(self.left_in_chunk);
        let n = self.reader.read(&mut buf[..want]).unwrap_or(0);
        if n == 0 {
            self.done = true;
        }
        self.left_in_chunk -= n;
        n
    }

    /// The whole body as text (for responses that end).
    pub fn text(mut self) -> String {
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = self.read_body(&mut buf);
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The JSON-RPC messages of the body: one JSON value, or SSE `data:` events.
    pub fn messages(self) -> Vec<Value> {
        let sse = self.header("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
        let text = self.text();
        if sse { sse_messages(&text) } else { serde_json::from_str(&text).map(|v| vec![v]).unwrap_or_default() }
    }

    /// Streams the SSE messages of a body that stays open, from a thread.
    pub fn events(mut self) -> Receiver<Value> {
        let (sender, events) = channel();
        std::thread::spawn(move || {
            let mut pending = String::new();
            let mut buf = [0u8; 8192];
            loop {
                let n = self.read_body(&mut buf);
                if n == 0 {
                    break;
                }
                pending.push_str(&String::from_utf8_lossy(&buf[..n]));
                while let Some(end) = pending.find("\n\n") {
                    let event: String = pending.drain(..end + 2).collect();
                    for message in sse_messages(&event) {
                        if sender.send(message).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        events
    }
}

fn sse_messages(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> =
                event.lines().filter_map(|line| line.strip_prefix("data:").map(str::trim_start)).collect();
            if data.is_empty() { None } else { serde_json::from_str(&data.join("\n")).ok() }
        })
        .collect()
}

/// Sends one request on a new connection and reads the response head.
pub fn send(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&Value>) -> Response {
    let stream = TcpStream::connect(addr).expect("carte accepts connections");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let body = body.map(|b| serde_json::to_vec(b).unwrap()).unwrap_or_default();
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !has("host") {
        head.push_str(&format!("Host: 127.0.0.1:{}\r\n", addr.port()));
    }
    if !has("accept") {
        head.push_str("Accept: application/json, text/event-stream\r\n");
    }
    if !body.is_empty() {
        head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut writer = stream.try_clone().unwrap();
    writer.write_all(head.as_bytes()).unwrap();
    writer.write_all(&body).unwrap();
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("a status line");
    let status = status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("a header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let chunked = headers.get("transfer-encoding").is_some_and(|t| t.contains("chunked"));
    Response { status, headers, reader, chunked, left_in_chunk: 0, done: false }
}

/// `carte serve --http` on a free port, with its address.
pub struct HttpServer {
    pub child: Child,
    pub addr: SocketAddr,
    /// carte's log lines after the one saying where it listens.
    log: std::sync::Mutex<Receiver<String>>,
}

impl HttpServer {
    /// Starts on port 0 and learns the port from the log line carte prints,
    /// so parallel tests never race for a port.
    pub fn start(catalog: &std::path::Path, extra: &[&str], envs: &[(&str, &str)]) -> HttpServer {
        let mut command = super::carte();
        command.args(["serve", "--http", "127.0.0.1:0"]).args(extra).arg(catalog);
        command.env("CARTE_LOG", "info");
        for (key, value) in envs {
            command.env(key, value);
        }
        HttpServer::spawned(command)
    }

    /// Runs `command` and reads its log: the address it listens at, then
    /// every line for [`HttpServer::wait_log`] (echoed with `CARTE_TEST_STDERR`).
    fn spawned(mut command: Command) -> HttpServer {
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("carte starts");
        let stderr = child.stderr.take().expect("stderr");
        let (found, address) = channel();
        let (lines, log) = channel();
        std::thread::spawn(move || {
            let echo = std::env::var_os("CARTE_TEST_STDERR").is_some();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("{line}");
                }
                if let Some(rest) = line.split("serving MCP at http://").nth(1)
                    && let Ok(addr) = rest.trim_end_matches("/mcp").trim().parse::<SocketAddr>()
                {
                    let _ = found.send(addr);
                }
                let _ = lines.send(line);
            }
        });
        let addr = address.recv_timeout(TIMEOUT).expect("carte listens and says where");
        HttpServer { child, addr, log: std::sync::Mutex::new(log) }
    }

    /// Waits (bounded) for a log line containing `wanted`; the line.
    pub fn wait_log(&self, wanted: &str) -> String {
        let log = self.log.lock().unwrap();
        let deadline = Instant::now() + TIMEOUT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = log.recv_timeout(left).unwrap_or_else(|_| panic!("no log line with `{wanted}` in {seen:#?}"));
            if line.contains(wanted) {
                return line;
            }
            seen.push(line);
        }
    }

    /// POSTs a JSON-RPC message to /mcp.
    pub fn post(&self, session: Option<&str>, message: &Value) -> Response {
        let mut headers = vec![("MCP-Protocol-Version", "2025-11-25")];
        if let Some(session) = session {
            headers.push(("Mcp-Session-Id", session));
        }
        send(self.addr, "POST", "/mcp", &headers, Some(message))
    }

    /// A legacy session: initialize, then `notifications/initialized`; returns its id.
    pub fn session(&self) -> String {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "http-test", "version": "1"}}});
        let response = self.post(None, &init);
        assert_eq!(response.status, 200);
        let session = response.header("mcp-session-id").expect("a session id").to_owned();
        let messages = response.messages();
        assert!(messages.iter().any(|m| m["result"]["serverInfo"].is_object()), "{messages:?}");
        let initialized = self.post(Some(&session), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert!(initialized.status == 202 || initialized.status == 200, "{}", initialized.status);
        session
    }

    /// A request on `session`; returns its response message.
    pub fn request(&self, session: &str, id: i64, method: &str, params: Value) -> Value {
        let response =
            self.post(Some(session), &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        assert_eq!(response.status, 200, "{method}");
        let messages = response.messages();
        messages.into_iter().find(|m| m["id"] == id).unwrap_or_else(|| panic!("no response to {method}"))
    }

    /// Opens the GET notification stream of `session`.
    pub fn stream(&self, session: &str) -> Receiver<Value> {
        let response = send(
            self.addr,
            "GET",
            "/mcp",
            &[("Accept", "text/event-stream"), ("Mcp-Session-Id", session), ("MCP-Protocol-Version", "2025-11-25")],
            None,
        );
        assert_eq!(response.status, 200, "GET stream");
        response.events()
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").args([&format!("-{name}"), &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (bounded) for a message with `method` on `events`.
pub fn wait_for(events: &Receiver<Value>, method: &str) -> Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = events.recv_timeout(left).unwrap_or_else(|_| panic!("no {method} arrived"));
        if message["method"] == method {
            return message;
        }
    }
}

/// Reads what a connection still sends until the server closes it (or
/// resets it); `None` if it stays open for [`TIMEOUT`].
pub fn read_until_closed(stream: &mut TcpStream) -> Option<Vec<u8>> {
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Some(received),
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => return Some(received),
            Err(_) => return None,
        }
    }
}

/// The status code of the first response in `bytes`, if any.
pub fn status_of(bytes: &[u8]) -> Option<u16> {
    let text = String::from_utf8_lossy(bytes);
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

impl HttpServer {
    /// Starts `command` (a `carte serve --http 127.0.0.1:0 …`, possibly
    /// wrapped, e.g. in `sh -c`) and learns its port from its log.
    pub fn spawn(mut command: Command) -> HttpServer {
        command.env("CARTE_LOG", "info");
        HttpServer::spawned(command)
    }

    /// Sends `initialize` with no session; the raw response.
    pub fn initialize(&self) -> Response {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "http-test", "version": "1"}}});
        self.post(None, &init)
    }

    /// GETs the notification stream of `session`; the raw response (open while it lives).
    pub fn get_stream(&self, session: &str) -> Response {
        send(
            self.addr,
            "GET",
            "/mcp",
            &[("Accept", "text/event-stream"), ("Mcp-Session-Id", session), ("MCP-Protocol-Version", "2025-11-25")],
            None,
        )
    }

    /// Waits (bounded) until `/readyz` counts `count` live sessions, without
    /// touching any (a request on a session would keep it alive).
    pub fn wait_for_sessions(&self, count: u64) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let ready: Value = serde_json::from_str(&send(self.addr, "GET", "/readyz", &[], None).text()).unwrap();
            if ready["sessions"] == count {
                return;
            }
            assert!(Instant::now() < deadline, "never {count} sessions: {ready}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// A local HTTP server a test starts in its own process (an upstream, an
/// issuer, a collector): bound on 127.0.0.1 at once, so its address can go
/// into the app; serving on a runtime of its own once given the app, until
/// dropped. Handlers may take `ConnectInfo<SocketAddr>`.
pub struct LocalServer {
    pub addr: SocketAddr,
    listener: Option<tokio::net::TcpListener>,
    runtime: tokio::runtime::Runtime,
}

impl LocalServer {
    pub fn bind() -> LocalServer {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
        let addr = listener.local_addr().expect("address");
        LocalServer { addr, listener: Some(listener), runtime }
    }

    /// Serves `app`; `self` keeps it running.
    pub fn serve(mut self, app: axum::Router) -> LocalServer {
        let listener = self.listener.take().expect("served once");
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        self.runtime.spawn(async move { axum::serve(listener, app).await });
        self
    }
}
