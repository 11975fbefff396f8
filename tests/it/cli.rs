//! The command line as a catalog author uses it: `carte prompt` and `carte
//! call` with misspelled or missing arguments, `carte complete`, a templated
//! `sleep` step, `--http` with a host name or a mistake, and what a client's
//! disconnect logs, and how the binary reserves memory.

use crate::common;

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::TempDir;
use serde_json::{Value, json};

const CATALOG: &str = r#"
server: { name: cli, version: "1" }
tools:
  - name: greet
    description: Greets someone
    inputSchema:
      type: object
      properties: { who: { type: string } }
      required: [who]
    run:
      text: "Hi {{ who }}"
prompts:
  - name: plan
    description: Plans a day
    arguments:
      - { name: room, required: true, complete: [Focus, Forum, Atrium] }
      - { name: hours }
    messages:
      - { role: user, text: "Plan {{ room }} {{ hours }}" }
resourceTemplates:
  - uriTemplate: "t://rooms/{room}"
    name: room
    complete: { room: [Focus, Forum, Atrium] }
    text: "{{ room }}"
"#;

/// Runs `carte COMMAND CATALOG REST…`: see [`common::run_cli`].
fn run(command: &str, catalog: &Path, rest: &[&str]) -> (Option<i32>, Value, String) {
    common::run_cli(command, catalog, rest, &[])
}

#[test]
fn a_misspelled_prompt_argument_is_named_with_a_guess_and_the_known_ones() {
    let dir = TempDir::new("cli-prompt-typo");
    let path = dir.write("catalog.yaml", CATALOG);
    let (code, stdout, stderr) = run("prompt", &path, &["plan", "rom=Focus"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stdout, Value::Null, "nothing is rendered: {stdout}");
    assert_eq!(
        stderr,
        "carte: prompt `plan` has no argument `rom`; did you mean `room`?\n  its arguments: room (required), hours\n"
    );
    // An optional argument misspelled beside a right one is caught too.
    let (code, _, stderr) = run("prompt", &path, &["plan", "room=Focus", "hour=2"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no argument `hour`; did you mean `hours`?"), "{stderr}");
    // Nothing close: no guess, but the list.
    let (_, _, stderr) = run("prompt", &path, &["plan", "room=Focus", "colour=red"]);
    assert_eq!(stderr, "carte: prompt `plan` has no argument `colour`\n  its arguments: room (required), hours\n");
}

#[test]
fn a_missing_required_prompt_argument_is_a_usage_error_with_an_example() {
    let dir = TempDir::new("cli-prompt-missing");
    let path = dir.write("catalog.yaml", CATALOG);
    let (code, _, stderr) = run("prompt", &path, &["plan", "hours=2"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "carte: prompt `plan` needs argument `room`\n  its arguments: room (required), hours\n  e.g. carte prompt {} plan room=…\n",
            path.display()
        )
    );
    let (code, stdout, stderr) = run("prompt", &path, &["plan", "room=Focus", "hours=2"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout["messages"][0]["content"]["text"], "Plan Focus 2");
}

#[test]
fn a_misspelled_tool_argument_is_a_usage_error_like_a_prompts() {
    let dir = TempDir::new("cli-call-typo");
    let path = dir.write("catalog.yaml", CATALOG);
    let (code, stdout, stderr) = run("call", &path, &["greet", "who=Ann", "whoo=Bob"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stdout, Value::Null, "the tool is not called: {stdout}");
    assert_eq!(
        stderr,
        "carte: tool `greet` has no argument `whoo`; did you mean `who`?\n  its arguments: who (required)\n"
    );
    // A missing required argument is the tool's own answer, as a client gets it.
    let (code, stdout, _) = run("call", &path, &["greet"]);
    assert_eq!(code, Some(1));
    assert_eq!(stdout["isError"], true);
    assert_eq!(stdout["content"][0]["text"], "invalid arguments for tool `greet`: `who` is required");
}

#[test]
fn a_tool_that_accepts_other_arguments_gets_them() {
    let dir = TempDir::new("cli-call-open");
    let catalog = r#"
server: { name: cli, version: "1" }
tools:
  - name: echo
    description: Echoes
    inputSchema: { type: object, properties: { a: { type: string } }, additionalProperties: true }
    run: { text: "{{ arguments | tojson }}" }
"#;
    let path = dir.write("catalog.yaml", catalog);
    let (code, stdout, stderr) = run("call", &path, &["echo", "a=1", "b=2"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout["content"][0]["text"], r#"{"a": "1", "b": 2}"#);
}

#[test]
fn complete_answers_what_a_client_receives_for_prompts_and_resource_templates() {
    let dir = TempDir::new("cli-complete");
    let path = dir.write("catalog.yaml", CATALOG);
    let forum_focus = json!({"completion": {"values": ["Focus", "Forum"], "total": 2, "hasMore": false}});
    for reference in ["prompt:plan", "plan"] {
        let (code, stdout, stderr) = run("complete", &path, &[reference, "room", "fo"]);
        assert_eq!((code, &stdout), (Some(0), &forum_focus), "{reference}: {stderr}");
    }
    for reference in ["resource:t://rooms/{room}", "t://rooms/{room}"] {
        let (code, stdout, stderr) = run("complete", &path, &[reference, "room", "FO"]);
        assert_eq!((code, &stdout), (Some(0), &forum_focus), "{reference}: {stderr}");
    }
    // No prefix: every value.
    let (_, stdout, _) = run("complete", &path, &["plan", "room"]);
    assert_eq!(stdout["completion"]["values"], json!(["Focus", "Forum", "Atrium"]));
    // An argument without `complete:` has no values.
    let (code, stdout, _) = run("complete", &path, &["plan", "hours", ""]);
    assert_eq!((code, &stdout["completion"]["values"]), (Some(0), &json!([])));
}

#[test]
fn complete_names_a_wrong_reference_or_argument() {
    let dir = TempDir::new("cli-complete-typo");
    let path = dir.write("catalog.yaml", CATALOG);
    let (code, _, stderr) = run("complete", &path, &["plam", "room"]);
    assert_eq!(code, Some(2));
    let shown = path.display();
    assert_eq!(
        stderr,
        format!(
            "carte: `plam` is neither a prompt nor a resource template of this catalog; did you mean `plan`?\n  \
             write `prompt:NAME` or `resource:URI-TEMPLATE` (see `carte list {shown} prompts` and `carte list {shown} templates`)\n"
        )
    );
    let (code, _, stderr) = run("complete", &path, &["prompt:nope", "room"]);
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr,
        format!("carte: this catalog has no prompt `nope`\n  see them all: carte list {shown} prompts\n")
    );
    let (code, _, stderr) = run("complete", &path, &["resource:t://room/{room}", "room"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.starts_with(
            "carte: this catalog has no resource template `t://room/{room}`; did you mean `t://rooms/{room}`?"
        ),
        "{stderr}"
    );
    let (code, _, stderr) = run("complete", &path, &["plan", "rooms"]);
    assert_eq!(code, Some(2));
    assert!(stderr.starts_with("carte: prompt `plan` has no argument `rooms`; did you mean `room`?"), "{stderr}");
    let (code, _, stderr) = run("complete", &path, &["resource:t://rooms/{room}", "name"]);
    assert_eq!(code, Some(2));
    assert_eq!(stderr, "carte: resource template `t://rooms/{room}` has no variable `name`\n  its variables: room\n");
}

#[test]
fn complete_help_shows_an_example() {
    let output = common::carte().args(["complete", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("completion/complete"), "{help}");
    assert!(help.contains("carte complete catalog.yaml prompt:plan_day room Fo"), "{help}");
}

const NAPPER: &str = r#"
server: { name: napper, version: "1" }
tools:
  - name: nap
    description: Sleeps as long as asked.
    inputSchema: { type: object, properties: { length: { type: string } }, required: [length] }
    run:
      steps:
        - log: { level: info, data: "napping {{ length }}" }
        - sleep: "{{ length }}"
      text: "slept {{ length }}"
"#;

#[test]
fn a_sleep_template_is_rendered_and_read_on_each_call() {
    let dir = TempDir::new("cli-sleep");
    let path = dir.write("catalog.yaml", NAPPER);
    for length in ["5ms", "0.001s", "2"] {
        let (code, stdout, stderr) = run("call", &path, &["nap", &format!("length={length}")]);
        assert_eq!(code, Some(0), "{length}: {stderr}");
        assert_eq!(stdout["content"][0]["text"], format!("slept {length}"));
    }
    let refused = [
        ("a while", "tool `nap`, step 2: cannot sleep: `a while` is not a duration"),
        ("2 fortnights", "tool `nap`, step 2: cannot sleep: unknown unit `fortnights` in `2 fortnights`"),
        ("11m", "tool `nap`, step 2: cannot sleep: a sleep of 660000 ms is longer than 10 minutes"),
        ("-1s", "tool `nap`, step 2: cannot sleep: `-1s` is not a duration"),
        (" ", "tool `nap`, step 2: cannot sleep: it rendered nothing"),
    ];
    for (length, message) in refused {
        let (code, stdout, stderr) = run("call", &path, &["nap", &format!("length={length}")]);
        assert_eq!(code, Some(1), "{length}: {stderr}");
        assert_eq!(stdout["isError"], true, "{length}");
        assert_eq!(
            stdout["content"][0]["text"],
            format!("{message}; a sleep is e.g. `250ms`, `2s` or `1m` (at most 10m)"),
            "{length}"
        );
    }
    // A long rendering is quoted only in part.
    let long = "9".repeat(10_000);
    let (_, stdout, _) = run("call", &path, &["nap", &format!("length={long}")]);
    let text = stdout["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("tool `nap`, step 2: cannot sleep: `9999") && text.len() < 200, "{text}");
}

#[test]
fn a_templated_sleep_stops_when_the_call_is_cancelled() {
    let dir = TempDir::new("cli-sleep-cancel");
    let path = dir.write("catalog.yaml", NAPPER);
    let mut server = common::Server::initialized(&path, &[]);
    server.result("logging/setLevel", json!({"level": "info"}));
    let call = json!({"jsonrpc": "2.0", "id": 70, "method": "tools/call", "params": {"name": "nap", "arguments": {"length": "10m"}}});
    server.send(&call);
    server.wait_notification("notifications/message"); // the call is about to sleep
    server.notify("notifications/cancelled", json!({"requestId": 70}));
    // The server goes on; a call that sleeps a little still runs.
    let after = server.result("tools/call", json!({"name": "nap", "arguments": {"length": "1ms"}}));
    assert_eq!(common::text(&after), "slept 1ms");
    // `result` panics on an unexpected message, so an answer to 70 would fail here.
    server.result("ping", json!({}));
    assert!(server.finish().success(), "the server exits cleanly with no call left sleeping");
}

#[test]
fn http_listens_on_a_host_name() {
    let dir = TempDir::new("cli-http-name");
    let path = dir.write("catalog.yaml", CATALOG);
    let mut command = common::carte();
    command.args(["serve", "--http", "localhost:0"]).arg(&path);
    let server = common::http::HttpServer::spawn(command);
    assert!(server.addr.ip().is_loopback(), "{}", server.addr);
    let session = server.session();
    let pong = server.request(&session, 2, "ping", json!({}));
    assert!(pong["result"].is_object(), "{pong}");
}

#[test]
fn http_says_when_a_name_does_not_resolve_or_the_address_is_malformed() {
    let dir = TempDir::new("cli-http-unresolved");
    let path = dir.write("catalog.yaml", CATALOG);
    // `.invalid` never resolves (RFC 6761); carte gives up within its resolver timeout.
    let (code, _, stderr) = run("serve", &path, &["--http", "no-such-host.invalid:8080"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("carte: --http no-such-host.invalid:8080: cannot resolve `no-such-host.invalid`: "),
        "{stderr}"
    );
    let (code, _, stderr) = run("serve", &path, &["--http", "localhost"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.ends_with(
            "carte: --http localhost: expected HOST:PORT, e.g. 127.0.0.1:8080, localhost:8080 or [::1]:8080\n"
        ),
        "{stderr}"
    );
}

/// The `_meta` of a 2026-07-28 request, and a listen request for tool list changes.
fn listen_2026(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": {"_meta": common::meta_2026(json!({})), "notifications": {"toolsListChanged": true}}})
}

/// Reads `stream` until `needle` has arrived (bounded by its read timeout).
fn read_until(stream: &mut impl Read, needle: &str) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(needle) {
        let n = stream.read(&mut buf).unwrap_or(0);
        assert!(n > 0, "the stream ended before `{needle}`: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// Collects a child's stderr lines from a thread; `wait_for` a line with a
/// needle (bounded); `all` once the child is gone.
struct Logs {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Logs {
    fn of(stderr: std::process::ChildStderr) -> Logs {
        use std::io::BufRead as _;
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Logs { lines, reader }
    }

    fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + common::TIMEOUT;
        loop {
            if let Some(line) = self.lines.lock().unwrap().iter().find(|line| line.contains(needle)) {
                return line.clone();
            }
            assert!(Instant::now() < deadline, "no `{needle}` in the logs: {:#?}", self.lines.lock().unwrap());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn all(self) -> Vec<String> {
        self.reader.join().unwrap();
        std::sync::Arc::try_unwrap(self.lines).unwrap().into_inner().unwrap()
    }
}

/// Waits (bounded) for `child` to exit.
fn wait_exit(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + common::TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("carte did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_2026_client_leaving_over_http_logs_no_error() {
    let dir = TempDir::new("cli-http-leave");
    let path = dir.write("catalog.yaml", CATALOG);
    let mut child = common::carte()
        .args(["serve", "--http", "127.0.0.1:0"])
        .arg(&path)
        .env("CARTE_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let logs = Logs::of(child.stderr.take().unwrap());
    let line = logs.wait_for("serving MCP at http://");
    let addr: std::net::SocketAddr =
        line.split("http://").nth(1).unwrap().trim_end_matches("/mcp").trim().parse().unwrap();
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/list")];
    let list =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": common::meta_2026(json!({}))}});
    assert_eq!(common::http::send(addr, "POST", "/mcp", &headers, Some(&list)).status, 200);
    // A listen stream, closed by the client once acknowledged.
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(common::TIMEOUT)).unwrap();
    let body = listen_2026(2).to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    std::io::Write::write_all(&mut stream, request.as_bytes()).unwrap();
    read_until(&mut stream, "notifications/subscriptions/acknowledged");
    drop(stream);
    logs.wait_for("quit_reason=Cancelled"); // rmcp has ended that request's service
    let status = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    wait_exit(&mut child);
    let lines = logs.all();
    let errors: Vec<&String> = lines.iter().filter(|line| line.contains(" ERROR ")).collect();
    assert!(errors.is_empty(), "a client leaving is not an error: {errors:#?}");
    assert!(lines.iter().any(|line| line.contains("a listen stream closed")), "{lines:#?}");
}

#[test]
fn a_2026_client_closing_stdin_ends_its_listen_stream_at_once() {
    let dir = TempDir::new("cli-stdio-leave");
    let path = dir.write("catalog.yaml", CATALOG);
    let mut child = common::carte()
        .arg("serve")
        .arg(&path)
        .env("CARTE_LOG", "debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let logs = Logs::of(child.stderr.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    let list =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": common::meta_2026(json!({}))}});
    std::io::Write::write_all(&mut stdin, format!("{list}\n{}\n", listen_2026(2)).as_bytes()).unwrap();
    // Read stdout from a thread, so that the wait is bounded.
    let mut stdout = child.stdout.take().unwrap();
    let (seen, acknowledged) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let _ = seen.send(read_until(&mut stdout, "notifications/subscriptions/acknowledged"));
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        rest
    });
    acknowledged.recv_timeout(common::TIMEOUT).expect("the listen stream is acknowledged");
    drop(stdin);
    assert!(wait_exit(&mut child).success());
    let rest = reader.join().unwrap();
    assert!(rest.contains(r#""id":2,"result""#), "the stream gets its final result: {rest}");
    let lines = logs.all();
    let noisy: Vec<&String> = lines.iter().filter(|line| line.contains(" ERROR ") || line.contains(" WARN ")).collect();
    assert!(noisy.is_empty(), "closing stdin is a normal end: {noisy:#?}");
    assert!(lines.iter().any(|line| line.contains("a listen stream closed")), "{lines:#?}");
}

#[test]
fn a_misspelled_tool_or_prompt_name_gets_a_guess() {
    let dir = TempDir::new("cli-name-typo");
    let path = dir.write("catalog.yaml", CATALOG);
    let shown = path.display();
    let (code, stdout, stderr) = run("call", &path, &["gret", "who=Ann"]);
    assert_eq!((code, stdout), (Some(2), Value::Null));
    assert_eq!(
        stderr,
        format!(
            "carte: this catalog has no tool `gret`; did you mean `greet`?\n  see them all: carte list {shown} tools\n"
        )
    );
    let (code, _, stderr) = run("prompt", &path, &["plans", "room=Focus"]);
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr,
        format!(
            "carte: this catalog has no prompt `plans`; did you mean `plan`?\n  see them all: carte list {shown} prompts\n"
        )
    );
}

/// `carte serve` with `args`, stdin closed: its exit code and stderr.
fn serve_fails(args: &[&str]) -> (Option<i32>, String) {
    let mut child = common::carte()
        .arg("serve")
        .args(args)
        .env("RESERVO_DATABASE_URL", "sqlite::memory:")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let status = common::wait_bounded(&mut child, "carte serve");
    (status.code(), stderr)
}

#[test]
fn a_malformed_http_flag_is_refused_before_anything_starts() {
    let catalog = common::repo_root().join("catalogs/reservo.yaml");
    let (code, stderr) = serve_fails(&["--http", "127.0.0.1", catalog.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    // Only the mistake: no catalog served, no reload, no error of carte's own.
    assert_eq!(
        stderr.trim(),
        "carte: --http 127.0.0.1: expected HOST:PORT, e.g. 127.0.0.1:8080, localhost:8080 or [::1]:8080"
    );
}

#[test]
fn a_port_in_use_is_the_only_error_said() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let catalog = common::repo_root().join("catalogs/reservo.yaml");
    let (code, stderr) = serve_fails(&["--http", &addr, catalog.to_str().unwrap()]);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains(&format!("cannot listen on {addr}")), "{stderr}");
    assert!(!stderr.contains("ERROR") && !stderr.contains("reload"), "{stderr}");
}

#[test]
fn a_prompt_argument_outside_its_values_is_the_callers_mistake_and_named() {
    let dir = common::TempDir::new("prompt-outside");
    let catalog = dir.write(
        "c.yaml",
        "data:\n  rooms: { Focus: { rate_cents: 2500 } }\nprompts:\n  - name: plan\n    description: Plans.\n    arguments: [ { name: room, required: true, complete: [Focus] } ]\n    messages:\n      - role: user\n        text: \"Plan {{ room }} at {{ data.rooms[room].rate_cents }} cents\"\n",
    );
    let mut server = common::Server::initialized(&catalog, &[]);
    let error = server.error("prompts/get", serde_json::json!({"name": "plan", "arguments": {"room": "Attic"}}));
    assert_eq!(error["code"], -32602, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("argument `room` = `Attic`, which is not one of its values (Focus)"), "{message}");
    assert!(message.contains("`data.rooms[...]` is undefined"), "{message}");
    let fine = server.result("prompts/get", serde_json::json!({"name": "plan", "arguments": {"room": "Focus"}}));
    assert_eq!(fine["messages"][0]["content"]["text"], "Plan Focus at 2500 cents");
}

#[test]
fn memory_is_reserved_in_arenas_of_64_mib_unless_the_environment_says() {
    let reserved = |env: &[(&str, &str)]| -> String {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_carte"))
            .arg("--version")
            .env("MIMALLOC_VERBOSE", "1")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        stderr.lines().find(|line| line.contains("reserved")).map(str::to_owned).unwrap_or(stderr)
    };
    assert!(reserved(&[]).ends_with("reserved 65536 KiB memory"), "{}", reserved(&[]));
    let asked = reserved(&[("MIMALLOC_ARENA_RESERVE", "128MiB")]);
    assert!(asked.ends_with("reserved 131072 KiB memory"), "{asked}");
}
