//! What the `http` effect costs, measured on the real binary over
//! Streamable HTTP against a local upstream (axum, in this process):
//!
//! 1. `direct`: the upstream called with reqwest, no carte;
//! 2. `carte text`: a text-only tool (the MCP transport's own cost);
//! 3. `carte http`: a tool whose `http` effect calls the upstream and
//!    renders a field of its JSON answer.
//!
//! Each at 1 and 64 concurrent callers (each calling back to back on its own
//! keep-alive connection), for calls/s, p50 and p99. What carte adds to a
//! call is `carte http` − `carte text` at p50 (the request to the upstream
//! itself is `direct`). Run with `cargo bench --bench http_effect`; figures
//! are printed, not asserted.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(60);
const RUN_FOR: Duration = Duration::from_secs(3);

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

fn start(catalog: &Path, upstream: SocketAddr) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_carte"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .arg(catalog)
        .env("CARTE_LOG", "info")
        .env("NOTES_API", format!("http://{upstream}"))
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

/// One keep-alive connection speaking just enough HTTP/1.1 for MCP.
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

    fn request(&mut self, session: Option<&str>, body: &str) -> (u16, Option<String>, String) {
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if let Some(session) = session {
            head.push_str(&format!("Mcp-Session-Id: {session}\r\n"));
        }
        head.push_str("\r\n");
        head.push_str(body);
        self.writer.write_all(head.as_bytes()).expect("write");
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
        let mut body = Vec::new();
        if chunked {
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
        (status, session, String::from_utf8_lossy(&body).into_owned())
    }

    fn session(&mut self) -> String {
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;
        let (status, session, _) = self.request(None, init);
        assert_eq!(status, 200, "initialize");
        let session = session.expect("a session id");
        self.request(Some(&session), r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        session
    }
}

/// The upstream: `/notes/{id}` answers a small JSON note.
fn upstream(runtime: &tokio::runtime::Runtime) -> SocketAddr {
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("address");
    let app = axum::Router::new().route(
        "/notes/{id}",
        axum::routing::get(|axum::extract::Path(id): axum::extract::Path<String>| async move {
            ([("content-type", "application/json")], format!(r#"{{"id":"{id}","title":"note {id}","done":false}}"#))
        }),
    );
    runtime.spawn(async move { axum::serve(listener, app).await });
    addr
}

struct Figures {
    calls: usize,
    per_second: f64,
    p50: Duration,
    p99: Duration,
}

fn figures(mut all: Vec<Duration>, elapsed: Duration) -> Figures {
    all.sort();
    let at = |p: f64| {
        let rank = ((all.len().max(1) as f64 - 1.0) * p).round() as usize;
        all.get(rank.min(all.len().saturating_sub(1))).copied().unwrap_or_default()
    };
    Figures { calls: all.len(), per_second: all.len() as f64 / elapsed.as_secs_f64(), p50: at(0.5), p99: at(0.99) }
}

fn print(what: &str, callers: usize, f: &Figures) {
    println!(
        "{what:<11} {callers:>2} callers: {:>7.0} calls/s, p50 {:>7.1} µs, p99 {:>7.1} µs ({} calls)",
        f.per_second,
        f.p50.as_secs_f64() * 1e6,
        f.p99.as_secs_f64() * 1e6,
        f.calls
    );
}

/// `callers` MCP sessions calling `tool` back to back for [`RUN_FOR`].
fn through_carte(server: &Server, callers: usize, tool: &str, expect: &str) -> Figures {
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"{tool}","arguments":{{"id":"7"}}}}}}"#
    );
    let start = Arc::new(Barrier::new(callers + 1));
    let workers: Vec<_> = (0..callers)
        .map(|_| {
            let (addr, start, call, expect) = (server.addr, start.clone(), call.clone(), expect.to_owned());
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let mut connection = Connection::open(addr);
                    let session = connection.session();
                    start.wait();
                    let until = Instant::now() + RUN_FOR;
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
    figures(all, began.elapsed())
}

/// `callers` tasks calling the upstream with one reqwest client, back to back.
fn direct(runtime: &tokio::runtime::Runtime, upstream: SocketAddr, callers: usize) -> Figures {
    // reqwest is built without a default TLS provider (carte installs ring).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder().build().expect("a client");
    let url = format!("http://{upstream}/notes/7");
    runtime.block_on(async move {
        let began = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|_| {
                let (client, url) = (client.clone(), url.clone());
                tokio::spawn(async move {
                    let until = Instant::now() + RUN_FOR;
                    let mut latencies = Vec::new();
                    while Instant::now() < until {
                        let at = Instant::now();
                        let response = client.get(&url).send().await.expect("an answer");
                        let body = response.bytes().await.expect("a body");
                        latencies.push(at.elapsed());
                        assert!(body.starts_with(b"{"), "{body:?}");
                    }
                    latencies
                })
            })
            .collect();
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.expect("a task"));
        }
        figures(all, began.elapsed())
    })
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let upstream = upstream(&runtime);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-http-effect");
    std::fs::create_dir_all(&dir).expect("folder");
    let catalog = dir.join("catalog.yaml");
    std::fs::write(
        &catalog,
        r#"server: { name: notes, version: 1.0.0 }
apis:
  notes: { baseUrl: "${NOTES_API}" }
tools:
  - name: get_note
    description: Reads a note.
    inputSchema: { type: object, properties: { id: { type: string } }, required: [id] }
    run:
      http: { api: notes, path: "/notes/{{ id }}" }
      text: "{{ json.title }}"
  - name: plain
    description: Says the note's title without asking anyone.
    inputSchema: { type: object, properties: { id: { type: string } }, required: [id] }
    run: { text: "note {{ id }}" }
"#,
    )
    .expect("write");
    let server = start(&catalog, upstream);
    // Warm up: connections, pools, first compilations of templates.
    through_carte(&server, 4, "get_note", "note 7");
    for callers in [1, 64] {
        let d = direct(&runtime, upstream, callers);
        print("direct", callers, &d);
        let text = through_carte(&server, callers, "plain", "note 7");
        print("carte text", callers, &text);
        let http = through_carte(&server, callers, "get_note", "note 7");
        print("carte http", callers, &http);
        let added = http.p50.as_secs_f64() - text.p50.as_secs_f64() - d.p50.as_secs_f64();
        println!(
            "   {callers:>2} callers: carte http − carte text = {:.1} µs p50; minus the direct call = {:.1} µs added by the effect",
            (http.p50.as_secs_f64() - text.p50.as_secs_f64()) * 1e6,
            added * 1e6
        );
    }
}
