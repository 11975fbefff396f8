//! Test helpers: run the real `carte` binary and speak MCP to it over
//! stdio as raw JSON lines, with every wait bounded.
#![allow(dead_code)]

pub mod http;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long any single wait may take before the test fails.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Whether expected outputs are to be rewritten from what carte prints
/// (`CARTE_BLESS=1`), not compared.
pub fn blessing() -> bool {
    std::env::var_os("CARTE_BLESS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// A temporary folder that is removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "carte-test-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn carte() -> Command {
    Command::new(env!("CARGO_BIN_EXE_carte"))
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A running `carte serve` and what it wrote to stdout, line by line.
pub struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    /// Notifications seen while waiting for responses.
    pub notifications: Vec<Value>,
    next_id: i64,
}

impl Server {
    pub fn start(catalog: &Path, envs: &[(&str, &str)]) -> Server {
        Self::start_with(catalog, envs, &[])
    }

    pub fn start_with(catalog: &Path, envs: &[(&str, &str)], extra_args: &[&str]) -> Server {
        let mut command = carte();
        command.arg("serve").args(extra_args).arg(catalog);
        // CARTE_TEST_STDERR=1 shows the server's logs while debugging a test.
        let stderr = if std::env::var_os("CARTE_TEST_STDERR").is_some() { Stdio::inherit() } else { Stdio::null() };
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr);
        for (key, value) in envs {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("carte starts");
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let value: Value =
                    serde_json::from_str(&line).unwrap_or_else(|err| panic!("stdout line is not JSON ({err}): {line}"));
                if sender.send(value).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Server { child, stdin, lines, notifications: Vec::new(), next_id: 1000 }
    }

    /// Starts and initializes (legacy handshake, 2025-11-25).
    pub fn initialized(catalog: &Path, envs: &[(&str, &str)]) -> Server {
        Self::initialized_with(catalog, envs, &[])
    }

    /// Starts with extra `serve` flags and initializes.
    pub fn initialized_with(catalog: &Path, envs: &[(&str, &str)], extra_args: &[&str]) -> Server {
        let mut server = Server::start_with(catalog, envs, extra_args);
        let response = server.request(
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": { "name": "carte-tests", "version": "1" }
            }),
        );
        assert!(response.get("result").is_some(), "initialize failed: {response}");
        server.notify("notifications/initialized", json!({}));
        server
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    pub fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        self.send_raw(&line);
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Sends a request and waits for its response (the whole message).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        self.response(&json!(id))
    }

    /// The `result` of a request that must succeed.
    pub fn result(&mut self, method: &str, params: Value) -> Value {
        let response = self.request(method, params);
        response.get("result").cloned().unwrap_or_else(|| panic!("{method} failed: {response}"))
    }

    /// The `error` of a request that must fail.
    pub fn error(&mut self, method: &str, params: Value) -> Value {
        let response = self.request(method, params);
        response.get("error").cloned().unwrap_or_else(|| panic!("{method} should fail: {response}"))
    }

    /// Waits for the response with `id`, keeping notifications seen meanwhile.
    pub fn response(&mut self, id: &Value) -> Value {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let message = self.next_message(deadline).unwrap_or_else(|| panic!("no response to request {id}"));
            if message.get("id") == Some(id) && message.get("method").is_none() {
                return message;
            }
            self.keep(message);
        }
    }

    /// The next message of any kind, within the timeout.
    pub fn next_message(&mut self, deadline: Instant) -> Option<Value> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.lines.recv_timeout(left).ok()
    }

    fn keep(&mut self, message: Value) {
        if message.get("method").is_some() && message.get("id").is_none() {
            self.notifications.push(message);
        } else {
            panic!("unexpected message: {message}");
        }
    }

    /// Waits until a notification with `method` has arrived (and removes it).
    pub fn wait_notification(&mut self, method: &str) -> Value {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(idx) = self.notifications.iter().position(|n| n["method"] == method) {
                return self.notifications.remove(idx);
            }
            let message = self.next_message(deadline).unwrap_or_else(|| panic!("no {method} notification arrived"));
            self.keep(message);
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the next reload report (a `carte.reload` log message) and
    /// returns it with the notifications that arrived before it, in order.
    /// The report is sent after a reload's notifications, so it is a barrier:
    /// whatever the reload announced has arrived.
    pub fn wait_reload(&mut self) -> (Vec<Value>, Value) {
        let deadline = Instant::now() + TIMEOUT;
        let mut before = std::mem::take(&mut self.notifications);
        loop {
            if let Some(idx) = before.iter().position(is_reload_report) {
                let report = before.remove(idx);
                self.notifications = before.split_off(idx);
                return (before, report);
            }
            let message =
                self.next_message(deadline).unwrap_or_else(|| panic!("no reload report arrived; saw {before:?}"));
            assert!(message.get("method").is_some() && message.get("id").is_none(), "unexpected message: {message}");
            before.push(message);
        }
    }

    /// Waits for reload reports until one says the catalog reloaded
    /// (skipping error reports), returning the notifications before it.
    pub fn wait_good_reload(&mut self) -> (Vec<Value>, Value) {
        let mut seen = Vec::new();
        loop {
            let (before, report) = self.wait_reload();
            seen.extend(before);
            if report["params"]["level"] == "info" {
                return (seen, report);
            }
        }
    }

    /// Closes stdin and waits (bounded) for the process to exit.
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "carte did not exit after stdin closed");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_reload_report(message: &Value) -> bool {
    message["method"] == "notifications/message" && message["params"]["logger"] == "carte.reload"
}

/// The methods of `notifications`, in order, leaving out log messages.
pub fn methods(notifications: &[Value]) -> Vec<String> {
    notifications
        .iter()
        .filter_map(|n| n["method"].as_str().map(str::to_owned))
        .filter(|method| method != "notifications/message")
        .collect()
}

/// A catalog of text tools named `tools`, each answering "<name> ran".
pub fn tools_catalog(tools: &[&str]) -> String {
    let mut yaml = String::from("server:\n  name: live\n  version: 1.0.0\ntools:\n");
    for tool in tools {
        yaml.push_str(&format!(
            "  - name: {tool}\n    description: The {tool} tool.\n    run:\n      text: \"{tool} ran\"\n"
        ));
    }
    yaml
}

/// The `_meta` a 2026-07-28 client sends with every request.
pub fn meta_2026(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "modern", "version": "1"}
    })
}

/// The text of a tool result's first block.
pub fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text in {result}")).to_owned()
}

/// Runs `carte COMMAND CATALOG REST…` with `envs` added (killed after [`TIMEOUT`]):
/// exit code, stdout as JSON (null if it is not), stderr.
pub fn run_cli(
    command: &str,
    catalog: &Path,
    rest: &[&str],
    envs: &[(&str, &str)],
) -> (Option<i32>, serde_json::Value, String) {
    let mut carte = carte();
    carte.arg(command).arg(catalog).args(rest).env_remove("CARTE_LOG").envs(envs.iter().copied());
    let ran = run_to_end(&mut carte, &format!("carte {command} {rest:?}"), TIMEOUT);
    let json = serde_json::from_slice(&ran.stdout).unwrap_or(serde_json::Value::Null);
    (ran.status.code(), json, String::from_utf8_lossy(&ran.stderr).into_owned())
}

/// What a program run to its end gave.
pub struct Ran {
    pub status: std::process::ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs `command` with no input to its end, reading both its outputs while
/// it runs (a large output cannot block it); killed, and the test failed
/// naming `what`, after `limit`.
pub fn run_to_end(command: &mut Command, what: &str, limit: Duration) -> Ran {
    run_given(command, None, what, limit)
}

/// [`run_to_end`] with `input` written to its stdin (then closed), if any.
pub fn run_given(command: &mut Command, input: Option<&[u8]>, what: &str, limit: Duration) -> Ran {
    let stdin = if input.is_some() { Stdio::piped() } else { Stdio::null() };
    let mut child = command.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    // Written once both outputs are drained: a program that writes much
    // before it reads its input cannot block on a full pipe meanwhile.
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        let _ = std::io::Write::write_all(&mut stdin, input);
    }
    let status = wait_within(&mut child, what, limit);
    Ran { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() }
}

/// Waits for `child` to exit, killing it and failing the test (naming `what`)
/// after [`TIMEOUT`].
pub fn wait_bounded(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    wait_within(child, what, TIMEOUT)
}

/// Waits for `child` to exit, killing (and reaping) it and failing the test
/// (naming `what`) after `limit`.
pub fn wait_within(child: &mut std::process::Child, what: &str, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A PostgreSQL database of its own for one test, on the server named by
/// `CARTE_TEST_POSTGRES` (`postgres://user@127.0.0.1:PORT/postgres`),
/// dropped with this.
pub struct Postgres {
    /// The test database's URL.
    pub url: String,
    /// Its name.
    pub name: String,
    admin: String,
}

/// The test's own database, or `None` (with a loud SKIP line) when no server
/// is configured; with `CARTE_REQUIRE_POSTGRES=1` (CI) a missing server fails.
pub fn postgres(test: &str) -> Option<Postgres> {
    let Some(admin) = std::env::var("CARTE_TEST_POSTGRES").ok().filter(|v| !v.is_empty()) else {
        assert!(
            std::env::var("CARTE_REQUIRE_POSTGRES").map_or(true, |v| v != "1"),
            "CARTE_REQUIRE_POSTGRES=1 but CARTE_TEST_POSTGRES is not set: the PostgreSQL tests cannot run"
        );
        // Straight to stderr: the test harness captures `eprintln!`.
        let _ = writeln!(
            std::io::stderr(),
            "SKIP {test}: no PostgreSQL server (set CARTE_TEST_POSTGRES=postgres://user@127.0.0.1:PORT/postgres; .ci/run starts one)"
        );
        return None;
    };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let name = format!(
        "carte_{}_{}_{nanos}",
        test.chars().filter(char::is_ascii_alphanumeric).take(20).collect::<String>(),
        std::process::id()
    );
    postgres_admin(&admin, &format!("CREATE DATABASE {name}"));
    let (base, _) = admin.rsplit_once('/').expect("CARTE_TEST_POSTGRES ends in /DATABASE");
    Some(Postgres { url: format!("{base}/{name}"), name, admin })
}

impl Postgres {
    /// Runs `sql` (simple protocol) on the test database; each row's columns as text.
    pub fn query(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        postgres_run(&self.url, sql)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        postgres_run(&self.admin, &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
    }
}

fn postgres_admin(url: &str, sql: &str) {
    postgres_run(url, sql);
}

/// Runs `sql` on `url` with a client of its own, bounded by [`TIMEOUT`].
pub fn postgres_run(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        tokio::time::timeout(TIMEOUT, async {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connects");
            tokio::spawn(connection);
            let messages = client.simple_query(sql).await.unwrap_or_else(|err| panic!("{sql}: {err:?}"));
            messages
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => {
                        Some((0..row.len()).map(|i| row.get(i).map(str::to_owned)).collect())
                    }
                    _ => None,
                })
                .collect()
        })
        .await
        .expect("PostgreSQL answered within the test's bound")
    })
}

/// The processes still in process group `pgid` (read from `/proc`), each
/// with its state, but zombies that are not the group's leader (reaped by
/// init, not by carte).
pub fn group_members(pgid: u32) -> Vec<(u32, char)> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|idx| &stat[idx + 1..]) else { continue };
        let fields: Vec<&str> = after.split_whitespace().collect();
        let (Some(state), Some(pgrp)) = (fields.first(), fields.get(2)) else { continue };
        let state = state.chars().next().unwrap_or('?');
        if pgrp.parse::<u32>() == Ok(pgid) && (state != 'Z' || pid == pgid) {
            members.push((pid, state));
        }
    }
    members
}

/// A memory figure of process `pid` from `/proc/PID/status` (`VmRSS`: now,
/// `VmHWM`: its peak), in bytes; `None` once the process is gone.
pub fn memory_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

/// Waits (bounded) for `path` to hold a line; the number on it (the pid a
/// test's program wrote, e.g. `echo $$ > group.pid`).
pub fn read_pid(path: &Path) -> u32 {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text.trim().parse().unwrap();
        }
        assert!(Instant::now() < deadline, "{} was not written", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) for every process of group `pgid` to be gone, its leader
/// reaped: fails the test if any is left.
pub fn assert_group_gone(pgid: u32) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = group_members(pgid);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes of group {pgid} left: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
