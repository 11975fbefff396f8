//! The `command` effect's spawn overhead, measured on the real binary over
//! stdio: `tools/call` of a tool that runs `true`, against a text-only
//! tool (the cost of a call without a program) and against spawning `true`
//! with `std::process::Command` directly (the cost of a program without
//! carte). What carte adds per program is the first minus the other two.
//!
//! Run with `cargo bench --bench command`; figures are printed, not
//! asserted (target: under 2 ms added per call).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

const CALLS: usize = 2000;
const WARM_UP: usize = 100;
const TIMEOUT: Duration = Duration::from_secs(30);

const CATALOG: &str = "server: { name: bench, version: 1.0.0 }
tools:
  - name: run_true
    description: Runs `true`.
    run:
      command: { argv: [true] }
      text: \"{{ exit_code }}\"
  - name: text_only
    description: Answers without a program.
    run: { text: \"0\" }
";

struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    next_id: u64,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(catalog: &std::path::Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_carte"))
            .arg("serve")
            .arg(catalog)
            .env("CARTE_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("carte starts");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take().expect("stdin");
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server { child, stdin, lines, next_id: 1 };
        server.request(
            "initialize",
            r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}"#,
        );
        writeln!(server.stdin, r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#).expect("write");
        server
    }

    /// Sends a request and waits for its answer (the line with its id).
    fn request(&mut self, method: &str, params: &str) -> String {
        let id = self.next_id;
        self.next_id += 1;
        writeln!(self.stdin, r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#).expect("write");
        let needle = format!(r#""id":{id}"#);
        loop {
            let line = self.lines.recv_timeout(TIMEOUT).expect("carte answers");
            if line.contains(&needle) {
                return line;
            }
        }
    }

    fn call(&mut self, tool: &str) -> String {
        self.request("tools/call", &format!(r#"{{"name":"{tool}","arguments":{{}}}}"#))
    }
}

/// Mean, p50 and p99 of `samples`, in microseconds.
fn report(what: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    let p50 = samples[samples.len() / 2];
    let p99 = samples[samples.len() * 99 / 100];
    println!(
        "{what:<34} mean {:>7.1} µs   p50 {:>7.1} µs   p99 {:>7.1} µs",
        mean.as_secs_f64() * 1e6,
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    p50
}

fn time(mut once: impl FnMut()) -> Vec<Duration> {
    for _ in 0..WARM_UP {
        once();
    }
    (0..CALLS)
        .map(|_| {
            let start = Instant::now();
            once();
            start.elapsed()
        })
        .collect()
}

fn main() {
    let dir = std::env::temp_dir().join(format!("carte-bench-command-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let catalog = dir.join("catalog.yaml");
    std::fs::write(&catalog, CATALOG).expect("catalog");
    let mut server = Server::start(&catalog);
    let answer = server.call("run_true");
    assert!(answer.contains(r#""isError":false"#), "run_true failed: {answer}");

    println!("{CALLS} sequential calls each, after {WARM_UP} to warm up, over stdio:");
    let text = report("tools/call text_only (baseline)", time(|| drop(server.call("text_only"))));
    let command = report("tools/call run_true (`true`)", time(|| drop(server.call("run_true"))));
    let direct = report(
        "std::process::Command `true`",
        time(|| {
            let status = Command::new("true").status().expect("true runs");
            assert!(status.success());
        }),
    );
    let added = command.saturating_sub(text);
    println!(
        "p50: a program adds {:.1} µs to a call; spawning it directly takes {:.1} µs, so carte's own share is {:.1} µs",
        added.as_secs_f64() * 1e6,
        direct.as_secs_f64() * 1e6,
        added.saturating_sub(direct).as_secs_f64() * 1e6
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
