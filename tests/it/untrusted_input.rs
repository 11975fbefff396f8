//! Input crafted to make carte work hard, through the real binary: URIs that
//! made the old backtracking matcher run for hours, YAML alias bombs, and
//! templates-folder links pointing out of the folder.

use crate::common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, TempDir, text};
use serde_json::{Value, json};

/// A template whose three `{+…}` expressions made the old matcher try every
/// way of cutting the URI in three (45 s for 800 bytes; hours for 4,000).
const PLUS_CATALOG: &str = "server:\n  name: plus\n  version: 1.0.0\nresourceTemplates:\n  - uriTemplate: x://{+a}/{+b}/{+c}/end\n    name: parts\n    text: \"{{ a }}|{{ b }}|{{ c }}\"\n";

#[test]
fn a_pathological_uri_is_answered_and_the_server_stays_responsive() {
    let dir = TempDir::new("plus");
    let catalog = dir.write("plus.yaml", PLUS_CATALOG);
    let mut server = Server::initialized(&catalog, &[]);
    let uri = format!("x://{}", "a/".repeat(1998));
    assert_eq!(uri.len(), 4000);
    let error = server.error("resources/read", json!({ "uri": uri }));
    assert_eq!(error["code"], -32002, "{error}");
    let uri = format!("x://{}end", "a/".repeat(1996));
    let read = server.result("resources/read", json!({ "uri": uri }));
    let text = read["contents"][0]["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.ends_with("a/a|a|a"), "the first expression takes the longest value: {read}");
    server.result("ping", json!({}));
}

/// "Billion laughs": ten levels of ten aliases, 10^9 strings if expanded.
fn billion_laughs() -> String {
    let mut text = String::from("data:\n  l0: &l0 [lol]\n");
    for level in 1..=9 {
        let copies = vec![format!("*l{}", level - 1); 10].join(", ");
        text.push_str(&format!("  l{level}: &l{level} [{copies}]\n"));
    }
    text
}

/// Runs `carte ARGS` in `dir` under an address-space limit (KiB), waiting at
/// most [`common::TIMEOUT`]; its exit code and stdout.
fn run_limited(dir: &Path, args: &str, memory_kib: u64) -> (Option<i32>, String) {
    let binary = env!("CARGO_BIN_EXE_carte");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {memory_kib}; exec '{binary}' {args}"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sh starts");
    let deadline = Instant::now() + common::TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("can wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`carte {args}` did not finish in {:?}", common::TIMEOUT);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stdout = String::new();
    if let Some(mut pipe) = child.stdout.take() {
        let _ = pipe.read_to_string(&mut stdout);
    }
    (status.code(), stdout)
}

#[test]
fn a_yaml_alias_bomb_is_refused_in_bounded_memory() {
    let dir = TempDir::new("laughs");
    dir.write("laughs.yaml", &billion_laughs());
    // Expanded, the file needs tens of GiB: under 512 MiB only a bounded reader survives.
    let (code, stdout) = run_limited(&dir.0, "check --format json laughs.yaml", 512 * 1024);
    assert_eq!(code, Some(1), "stdout: {stdout}");
    let diagnostics: Value = serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("{err}: {stdout}"));
    assert_eq!(diagnostics[0]["code"], "yaml-aliases", "{diagnostics:#}");
    assert_eq!(diagnostics[0]["location"]["line"], 8, "the alias where the limit was passed: {diagnostics:#}");
}

#[test]
fn links_out_of_the_templates_folder_are_not_read() {
    let dir = TempDir::new("links");
    dir.write("secret.txt", "SECRET-CONTENTS");
    dir.write("outside/other.j2", "OTHER-CONTENTS");
    dir.write("templates/inside.j2", "inside says {{ 1 + 1 }}");
    let templates = dir.path("templates");
    std::os::unix::fs::symlink(dir.path("secret.txt"), templates.join("secret.j2")).unwrap();
    std::os::unix::fs::symlink(dir.path("outside"), templates.join("shared")).unwrap();
    std::os::unix::fs::symlink("inside.j2", templates.join("alias.j2")).unwrap();
    std::os::unix::fs::symlink("..", templates.join("up")).unwrap(); // out, and a loop if followed
    let tool = |name: &str, template: &str| {
        format!("  - name: {name}\n    description: Renders {template}.\n    run:\n      template: {template}\n")
    };
    let mut yaml = String::from("server:\n  name: links\n  version: 1.0.0\ntools:\n");
    yaml.push_str(&tool("alias", "alias.j2"));
    dir.write("links.yaml", &yaml);
    let (code, stdout) = run_limited(&dir.0, "check --format json links.yaml", 4 * 1024 * 1024);
    assert_eq!(code, Some(0), "a link that stays inside is fine: {stdout}");
    let diagnostics: Value = serde_json::from_str(&stdout).unwrap();
    let warned: Vec<&str> = diagnostics
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["code"] == "templates-link")
        .filter_map(|d| d["message"].as_str())
        .collect();
    assert_eq!(warned.len(), 3, "{diagnostics:#}");
    assert!(warned[0].starts_with("`secret.j2`") && warned[1].starts_with("`shared`") && warned[2].starts_with("`up`"));
    assert!(!stdout.contains("SECRET-CONTENTS") && !stdout.contains("OTHER"), "{stdout}");
    let mut server = Server::initialized(&dir.path("links.yaml"), &[]);
    let result = server.result("tools/call", json!({ "name": "alias", "arguments": {} }));
    assert_eq!(common::text(&result), "inside says 2");
    drop(server);

    // A tool using a file behind an outside link does not get it.
    yaml.push_str(&tool("secret", "secret.j2"));
    yaml.push_str(&tool("other", "shared/other.j2"));
    dir.write("links.yaml", &yaml);
    let (code, stdout) = run_limited(&dir.0, "check --format json links.yaml", 4 * 1024 * 1024);
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(stdout.matches("\"unknown-template\"").count(), 2, "{stdout}");
    assert!(!stdout.contains("SECRET-CONTENTS"), "{stdout}");
}

#[test]
fn an_argument_the_tool_does_not_declare_is_refused_by_the_server_as_by_carte_call() {
    let dir = TempDir::new("undeclared-argument");
    let catalog = "tools:\n  - name: quote\n    description: Quotes.\n    inputSchema: { type: object, properties: { room: { type: string } } }\n    run: { text: \"{{ room }}\" }\n  - name: open\n    description: Takes anything.\n    inputSchema: { type: object, properties: { room: { type: string } }, additionalProperties: true }\n    run: { text: \"{{ arguments | length }}\" }\n";
    let path = dir.write("catalog.yaml", catalog);
    let mut server = Server::initialized(&path, &[]);
    let refused = server.result("tools/call", json!({"name": "quote", "arguments": {"rom": "Focus"}}));
    assert_eq!(refused["isError"], json!(true), "{refused}");
    assert_eq!(text(&refused), "tool `quote` has no argument `rom` (did you mean `room`?); its arguments: room");
    let open = server.result("tools/call", json!({"name": "open", "arguments": {"room": "a", "extra": 1}}));
    assert_eq!(text(&open), "2");
    let (code, _, stderr) = common::run_cli("call", &path, &["quote", "rom=Focus"], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("`rom`") && stderr.contains("room"), "{stderr}");
}
