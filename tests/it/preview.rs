//! The author's page over HTTP, without a browser (tests/interop/preview.py
//! drives it in Chromium): its state follows saves, calls run through the
//! server's code, and only local pages may use it.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::http::{HttpServer, send};
use common::{TIMEOUT, TempDir, carte};
use serde_json::{Value, json};

/// `carte preview` on a free port, and where it is.
struct Preview {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Preview {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn preview(catalog: &std::path::Path) -> Preview {
    let mut child = carte()
        .args(["preview", "--http", "127.0.0.1:0"])
        .arg(catalog)
        .env_remove("CARTE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("carte starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("carte prints its URL");
    let port = line.trim().trim_start_matches("http://localhost:").trim_end_matches('/');
    let addr = format!("127.0.0.1:{port}").parse().unwrap_or_else(|_| panic!("a URL, got {line:?}"));
    Preview { child, addr }
}

fn get_json(addr: SocketAddr, path: &str) -> Value {
    let response = send(addr, "GET", path, &[], None);
    assert_eq!(response.status, 200, "GET {path}");
    serde_json::from_str(&response.text()).unwrap()
}

/// Waits (bounded) until the page's state says `wanted`.
fn state_until(addr: SocketAddr, path: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let state = get_json(addr, path);
        if wanted(&state) {
            return state;
        }
        assert!(Instant::now() < deadline, "the preview never showed what was expected: {state}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const CATALOG: &str = "tools:\n  - name: greet\n    description: Greets.\n    inputSchema: { type: object, properties: { who: { type: string } }, required: [who] }\n    run: { text: \"Hello {{ who }}\" }\n    examples: [ { arguments: { who: Ada }, expect: { text: Hello Ada } } ]\n";

#[test]
fn the_page_follows_saves_and_tries_the_menu() {
    let dir = TempDir::new("preview");
    let path = dir.write("catalog.yaml", CATALOG);
    let page = preview(&path);
    let html = send(page.addr, "GET", "/", &[], None).text();
    assert!(html.contains("<title>carte preview</title>"), "{html}");
    let state = get_json(page.addr, "/api/state");
    assert_eq!(state["valid"], json!(true), "{state}");
    assert_eq!(state["menu"]["tools"][0]["name"], json!("greet"));
    assert_eq!(state["examples"][0]["passed"], json!(true), "{state}");

    let called =
        send(page.addr, "POST", "/api/call", &[], Some(&json!({"name": "greet", "arguments": {"who": "Grace"}})));
    let called: Value = serde_json::from_str(&called.text()).unwrap();
    assert_eq!(called["result"]["content"][0]["text"], json!("Hello Grace"), "{called}");

    // A mistake saved: the page's state has it, at its line; the menu stays.
    std::fs::write(&path, CATALOG.replace("{{ who }}", "{{ who }")).unwrap();
    let state = state_until(page.addr, "/api/state", |s| s["valid"] == json!(false));
    let problem = &state["diagnostics"][0];
    assert_eq!(problem["location"]["line"], json!(5), "{problem}");
    assert!(problem["text"].as_str().unwrap().contains("^"), "{problem}");
    assert_eq!(state["menu"]["tools"][0]["name"], json!("greet"));

    // Only pages of this machine: another Host (DNS rebinding) or Origin is refused.
    let foreign = send(page.addr, "GET", "/api/state", &[("Host", "evil.example")], None);
    assert_eq!(foreign.status, 403);
    let cross =
        send(page.addr, "POST", "/api/call", &[("Origin", "https://evil.example")], Some(&json!({"name": "greet"})));
    assert_eq!(cross.status, 403);
}

#[test]
fn serve_with_preview_serves_the_page_beside_mcp() {
    let dir = TempDir::new("preview-serve");
    let path = dir.write("catalog.yaml", CATALOG);
    let server = HttpServer::start(&path, &["--preview"], &[]);
    let html = send(server.addr, "GET", "/preview/", &[], None).text();
    assert!(html.contains("<title>carte preview</title>"), "{html}");
    let state = get_json(server.addr, "/preview/api/state");
    assert_eq!(state["menu"]["tools"][0]["name"], json!("greet"), "{state}");
    // The page has no login: it does not come with a token to guard MCP.
    let mut refused = carte();
    refused.args(["serve", "--http", "127.0.0.1:0", "--preview", "--auth-token-env", "T"]).arg(&path);
    let ran = common::run_to_end(&mut refused, "serve --preview with a token", TIMEOUT);
    assert_eq!(ran.status.code(), Some(2));
}
