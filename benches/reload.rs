//! Hot reload, measured on the real binary over stdio:
//!
//! 1. latency from a file write to `notifications/tools/list_changed`
//!    arriving at the client (default 50 ms debounce), p50/p95 over samples;
//! 2. a 10,000-tool catalog: how long its reload takes (write → notification),
//!    and the latency of `tools/call` round trips made back to back while it
//!    reloads, against the same calls when nothing reloads.
//!
//! Run with `cargo bench --bench reload`; figures are printed, not asserted.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(30);

struct Server {
    child: Child,
    stdin: ChildStdin,
    responses: Receiver<(Value, Instant)>,
    notifications: Receiver<(Value, Instant)>,
    next_id: u64,
}

impl Server {
    fn start(catalog: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_carte"))
            .arg("serve")
            .arg(catalog)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("carte starts");
        let stdout = child.stdout.take().expect("stdout");
        let (response_tx, responses) = channel();
        let (notification_tx, notifications) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let at = Instant::now();
                let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
                let sent = if message.get("id").is_some() {
                    response_tx.send((message, at)).is_ok()
                } else {
                    notification_tx.send((message, at)).is_ok()
                };
                if !sent {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().expect("stdin");
        let mut server = Server { child, stdin, responses, notifications, next_id: 0 };
        server.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}),
        );
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).expect("serializes");
        line.push(b'\n');
        self.stdin.write_all(&line).expect("carte reads stdin");
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}));
        let (response, _) = self.responses.recv_timeout(TIMEOUT).expect("a response");
        assert_eq!(response["id"], self.next_id, "responses come in order here");
        response
    }

    /// Waits for `notifications/tools/list_changed`; returns when it arrived.
    fn list_changed(&self) -> Instant {
        loop {
            let (note, at) = self.notifications.recv_timeout(TIMEOUT).expect("list_changed arrives");
            if note["method"] == "notifications/tools/list_changed" {
                return at;
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn catalog(tools: usize, version: usize) -> String {
    let mut yaml = String::from("server:\n  name: bench\n  version: 1.0.0\ntools:\n");
    for idx in 0..tools {
        yaml.push_str(&format!(
            "  - name: tool_{idx:05}\n    description: Tool {idx}, version {version}.\n    inputSchema:\n      type: object\n      properties:\n        room: {{ type: string, enum: [Focus, Studio, Boardroom] }}\n        hours: {{ type: integer, minimum: 1 }}\n      required: [room, hours]\n    run:\n      text: \"{{{{ room }}}} for {{{{ hours }}}} h\"\n"
        ));
    }
    yaml
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn folder(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("cannot create the bench folder");
    dir
}

fn main() {
    latency();
    big_catalog();
}

fn latency() {
    let dir = folder("bench-reload-latency");
    let path = dir.join("catalog.yaml");
    std::fs::write(&path, catalog(4, 0)).expect("write");
    let mut server = Server::start(&path);
    server.request("tools/list", json!({}));
    std::thread::sleep(Duration::from_millis(300)); // let the watcher start
    let mut samples = Vec::new();
    for version in 1..=40 {
        let written = Instant::now();
        std::fs::write(&path, catalog(4, version)).expect("write");
        samples.push(server.list_changed() - written);
        std::thread::sleep(Duration::from_millis(100)); // one reload at a time
    }
    samples.sort();
    println!(
        "reload latency, write → list_changed (debounce 50 ms, {} samples): p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        samples.len(),
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.95)),
        ms(samples[samples.len() - 1]),
    );
}

fn big_catalog() {
    let dir = folder("bench-reload-10k");
    let path = dir.join("catalog.yaml");
    std::fs::write(&path, catalog(10_000, 0)).expect("write");
    let mut server = Server::start(&path);
    let call = json!({"name": "tool_04242", "arguments": {"room": "Focus", "hours": 2}});
    let round_trip = |server: &mut Server| {
        let started = Instant::now();
        let response = server.request("tools/call", call.clone());
        assert_eq!(response["result"]["content"][0]["text"], "Focus for 2 h", "{response}");
        (started, started.elapsed())
    };
    // Calls with nothing reloading.
    let quiet_until = Instant::now() + Duration::from_secs(2);
    let mut quiet = Vec::new();
    while Instant::now() < quiet_until {
        quiet.push(round_trip(&mut server).1);
    }
    // Calls while the catalog reloads: from the write until the notification.
    let new_text = catalog(10_000, 1);
    let written = Instant::now();
    std::fs::write(&path, new_text).expect("write");
    let mut during = Vec::new();
    let notified = loop {
        during.push(round_trip(&mut server).1);
        if let Ok((note, at)) = server.notifications.try_recv()
            && note["method"] == "notifications/tools/list_changed"
        {
            break at;
        }
        assert!(written.elapsed() < TIMEOUT, "no list_changed after the 10,000-tool edit");
    };
    quiet.sort();
    during.sort();
    println!(
        "10,000-tool catalog: write → list_changed {:.0} ms (includes the 50 ms debounce)",
        ms(notified - written)
    );
    println!(
        "tools/call round trips: quiet p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} calls); during the reload p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} calls)",
        ms(percentile(&quiet, 0.5)),
        ms(percentile(&quiet, 0.99)),
        ms(quiet[quiet.len() - 1]),
        quiet.len(),
        ms(percentile(&during, 0.5)),
        ms(percentile(&during, 0.99)),
        ms(during[during.len() - 1]),
        during.len(),
    );
}
