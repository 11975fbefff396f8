//! Secrets from `${VAR}`: a value taken from the environment is never
//! printed or logged as is. `carte check` (human and JSON), `carte list`,
//! `carte call`, the server's logs at debug level, a tool's error result
//! and the log messages a client receives show `${VAR}` instead.

use crate::common;

use common::{Server, TempDir, run_cli, text};
use serde_json::{Value, json};

/// The secret every test hides; no catalog or program writes it literally.
const SECRET: &str = "hunter2-Zq8v-secret";
const ENV: (&str, &str) = ("CARTE_TEST_SECRET", SECRET);

fn assert_hidden(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} shows the secret:\n{text}");
}

#[test]
fn check_shows_the_variable_not_its_value() {
    let dir = TempDir::new("secret-check");
    let path = dir.write(
        "c.yaml",
        "server: { name: s, version: 1.0.0 }\ndatabases:\n  shop:\n    url: \"sqlite:${CARTE_TEST_SECRET}/shop.db\"\n\
         tools:\n  - name: t\n    description: Says hi.\n    run: { text: hi }\n",
    );
    let (code, _, stderr) = run_cli("check", &path, &[], &[ENV]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_hidden("carte check", &stderr);
    assert!(stderr.contains("${CARTE_TEST_SECRET}"), "{stderr}");
    let (code, json, stderr) = run_cli("check", &path, &["--format", "json"], &[ENV]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_hidden("carte check --format json", &format!("{json}{stderr}"));
}

#[test]
fn list_and_logs_do_not_show_it() {
    let dir = TempDir::new("secret-list");
    let path = dir.write(
        "c.yaml",
        "server: { name: s, version: 1.0.0 }\ntools:\n  - name: t\n    \
         description: \"Calls the API with key ${CARTE_TEST_SECRET}.\"\n    run: { text: hi }\n",
    );
    let (code, list, stderr) = run_cli("list", &path, &[], &[ENV, ("CARTE_LOG", "debug")]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_hidden("carte list", &list.to_string());
    assert_hidden("carte list's logs", &stderr);
    assert_eq!(list["tools"][0]["description"], "Calls the API with key ${CARTE_TEST_SECRET}.");
}

/// A tool whose program gets the secret in its environment and writes it
/// to stderr before failing.
const LEAKY: &str = "server: { name: s, version: 1.0.0 }\ntools:\n  - name: t\n    description: Fails loudly.\n    \
    run:\n      command:\n        argv: [sh, -c, \"echo token=$TOKEN >&2; exit 2\"]\n        \
    env: { TOKEN: \"${CARTE_TEST_SECRET}\" }\n";

#[test]
fn an_error_result_and_the_call_logs_do_not_show_it() {
    let dir = TempDir::new("secret-call");
    let path = dir.write("c.yaml", LEAKY);
    let (code, result, stderr) = run_cli("call", &path, &["t"], &[ENV, ("CARTE_LOG", "debug")]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(text(&result), "tool `t` failed: `sh` exited with code 2; stderr:\ntoken=${CARTE_TEST_SECRET}");
    assert_hidden("carte call's logs", &stderr);
}

#[test]
fn a_client_sees_neither_in_results_nor_in_log_messages() {
    let dir = TempDir::new("secret-serve");
    let path = dir.write("c.yaml", LEAKY);
    let mut server = Server::initialized(&path, &[ENV, ("CARTE_LOG", "debug")]);
    server.result("logging/setLevel", json!({"level": "debug"}));
    let result = server.result("tools/call", json!({"name": "t", "arguments": {}}));
    assert_eq!(result["isError"], true, "{result}");
    assert_hidden("the error result", &result.to_string());
    let logs: Vec<&Value> = server.notifications.iter().filter(|n| n["method"] == "notifications/message").collect();
    assert_hidden("the log messages", &json!(logs).to_string());
    assert!(logs.iter().any(|log| log["params"]["data"] == "token=${CARTE_TEST_SECRET}"), "{logs:?}");
    assert!(server.finish().success());
}

#[test]
fn short_values_and_defaults_are_not_secrets() {
    let dir = TempDir::new("secret-short");
    let path = dir.write(
        "c.yaml",
        "server: { name: s, version: 1.0.0 }\ntools:\n  - name: t\n    \
         description: \"Port ${CARTE_TEST_PORT}, region ${CARTE_TEST_UNSET_REGION:-eu-west-1}.\"\n    run: { text: hi }\n",
    );
    let (_, list, stderr) = run_cli("list", &path, &["tools"], &[("CARTE_TEST_PORT", "8080")]);
    assert_eq!(list["tools"][0]["description"], "Port 8080, region eu-west-1.", "{stderr}");
}

#[test]
fn debug_logs_of_a_session_do_not_show_it() {
    // rmcp logs each request and response at debug: a result that quotes
    // the secret (the catalog's choice) is sent to the client, never logged.
    let dir = TempDir::new("secret-debug");
    let path = dir.write(
        "c.yaml",
        "server: { name: s, version: 1.0.0 }\ntools:\n  - name: t\n    description: Shows the key.\n    \
         run: { text: \"key ${CARTE_TEST_SECRET}\" }\n",
    );
    let mut child = common::carte()
        .arg("serve")
        .arg(&path)
        .envs([ENV, ("CARTE_LOG", "debug")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "t", "arguments": {}}}),
    ];
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    for message in messages {
        std::io::Write::write_all(&mut stdin, format!("{message}\n").as_bytes()).unwrap();
    }
    // The call's answer, before closing stdin (which ends the session).
    let out = loop {
        let line = received.recv_timeout(common::TIMEOUT).expect("no answer to the call");
        if serde_json::from_str::<Value>(&line).is_ok_and(|answer| answer["id"] == 2) {
            break line;
        }
    };
    drop(stdin);
    common::wait_bounded(&mut child, "carte serve");
    let err = err.join().unwrap();
    assert!(out.contains(SECRET), "the client gets the result the catalog renders:\n{out}");
    assert!(err.contains("response message id=2"), "rmcp logged no response:\n{err}");
    assert_hidden("the server's debug logs", &err);
}

/// Whether `text` holds a piece of [`SECRET`] of 8 bytes or more.
fn shows_a_piece(text: &str) -> Option<&'static str> {
    (0..=SECRET.len() - 8).map(|start| &SECRET[start..start + 8]).find(|piece| text.contains(piece))
}

/// A program that writes `pad` bytes, the secret, then `after` bytes to
/// stderr on one line, and fails: the client chooses where carte cuts.
const CUT: &str = "server: { name: s, version: 1.0.0 }\ntools:\n  - name: t\n    description: Fails loudly.\n    \
    inputSchema: { type: object, properties: { pad: { type: integer }, after: { type: integer } }, required: [pad, after] }\n    \
    run:\n      command:\n        argv: [sh, -c, \"head -c $PAD /dev/zero | tr '\\\\0' x >&2; printf %s \\\"$TOKEN\\\" >&2; head -c $AFTER /dev/zero | tr '\\\\0' y >&2; exit 2\"]\n        \
    env: { TOKEN: \"${CARTE_TEST_SECRET}\", PAD: \"{{ pad }}\", AFTER: \"{{ after }}\" }\n";

#[test]
fn no_cut_leaves_a_piece_of_it_in_an_error_result_or_a_log_message() {
    let dir = TempDir::new("secret-cut");
    let path = dir.write("c.yaml", CUT);
    let mut server = Server::initialized(&path, &[ENV]);
    server.result("logging/setLevel", json!({"level": "debug"}));
    // The error result quotes the last 2 KiB of stderr and each log message
    // the first 2 KiB of a line: every cut through the secret, both ends.
    let len = SECRET.len() as i64;
    for k in 1..len {
        for (pad, after) in [(2048 - k, 10), (10, 2048 - len + k)] {
            let result = server.result("tools/call", json!({"name": "t", "arguments": {"pad": pad, "after": after}}));
            assert_eq!(result["isError"], true, "{result}");
            let shown = text(&result);
            assert_eq!(
                shows_a_piece(&shown),
                None,
                "pad {pad}, after {after}: the error result shows a piece:\n{shown}"
            );
        }
    }
    let logs = json!(server.notifications).to_string();
    assert_eq!(shows_a_piece(&logs), None, "a log message shows a piece of the secret");
    assert!(logs.contains("${CARTE_TEST_SECRET}"), "the log messages name the secret");
}

/// An upstream that answers 502 with what it was sent: the query (chosen
/// by the client) before the `Authorization` header (the secret).
fn echoing_upstream() -> common::http::LocalServer {
    use axum::http::{HeaderMap, StatusCode, Uri};
    let app = axum::Router::new().route(
        "/echo",
        axum::routing::get(|uri: Uri, headers: HeaderMap| async move {
            let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
            (StatusCode::BAD_GATEWAY, format!("query={}\nauthorization: {auth}\n", uri.query().unwrap_or_default()))
        }),
    );
    common::http::LocalServer::bind().serve(app)
}

#[test]
fn an_upstream_that_echoes_it_shows_no_piece_of_it() {
    let upstream = echoing_upstream();
    let dir = TempDir::new("secret-echo");
    let catalog = format!(
        "server: {{ name: s, version: 1.0.0 }}\napis:\n  echo:\n    baseUrl: http://{}\n    \
         headers: {{ Authorization: \"Bearer ${{CARTE_TEST_SECRET}}\" }}\ntools:\n  - name: t\n    description: Echoes.\n    \
         inputSchema: {{ type: object, properties: {{ q: {{ type: string }} }}, required: [q] }}\n    \
         run:\n      http: {{ api: echo, path: /echo, query: {{ q: \"{{{{ q }}}}\" }} }}\n      text: \"{{{{ body }}}}\"\n",
        upstream.addr
    );
    let path = dir.write("c.yaml", &catalog);
    let mut server = Server::initialized(&path, &[ENV]);
    // The body shows 2 KiB: `query=` (6), q, `\nauthorization: Bearer ` (23), the secret.
    let before = 6 + 23;
    let len = SECRET.len();
    for k in 1..len {
        let q = "a".repeat(2048 - before - k);
        let result = server.result("tools/call", json!({"name": "t", "arguments": {"q": q}}));
        assert_eq!(result["isError"], true, "{result}");
        let shown = text(&result);
        assert!(shown.contains("502"), "{shown}");
        assert_eq!(shows_a_piece(&shown), None, "q of {} bytes: the error result shows a piece:\n{shown}", q.len());
    }
}
