//! What the `http` effect costs, measured on the real binary over
//! Streamable HTTP against a local upstream (axum, in this process):
//!
//! 1. `direct`: the upstream called with reqwest from another thread, no carte;
//! 2. `carte text`: a text-only tool (the MCP transport's own cost);
//! 3. `carte http`: a tool whose `http` effect calls the upstream and
//!    renders a field of its JSON answer.
//!
//! Each at 1 and 64 concurrent callers (each calling back to back on its own
//! keep-alive connection), for calls/s, p50 and p99. What carte adds to a
//! call is `carte http` − `carte text` at p50 (the request to the upstream
//! itself is `direct`). Run with `cargo bench --bench http_effect`; figures
//! are printed, not asserted.

mod common;

use common::{Server, back_to_back, percentile, start};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

const RUN_FOR: Duration = Duration::from_secs(3);

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
    Figures {
        calls: all.len(),
        per_second: all.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&all, 0.5),
        p99: percentile(&all, 0.99),
    }
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
    let (all, elapsed) = back_to_back(server, callers, RUN_FOR, &call, expect);
    figures(all, elapsed)
}

/// `callers` tasks calling the upstream with one reqwest client, back to back,
/// from a runtime of their own: like carte's calls, each request crosses from
/// the caller's thread to the upstream's (on one runtime, a call and its
/// answer could be served by one thread without a single wake-up, which
/// would flatter the direct call and charge carte for the difference).
fn direct(upstream: SocketAddr, callers: usize) -> Figures {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
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
    let server = start(&catalog, &[], &[("NOTES_API", &format!("http://{upstream}"))]);
    // Warm up: connections, pools, first compilations of templates.
    through_carte(&server, 4, "get_note", "note 7");
    for callers in [1, 64] {
        let d = direct(upstream, callers);
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
