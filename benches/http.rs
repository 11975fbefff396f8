//! Streamable HTTP on loopback, measured on the real binary:
//!
//! 1. `tools/call get_quote` requests per second and latency with 1, 16 and
//!    64 concurrent sessions (each a keep-alive connection calling back to back);
//! 2. notification fan-out: 1,000 sessions with their GET streams open, one
//!    catalog edit, and how long until the last session hears `list_changed`;
//! 3. memory: the server's RSS with 10,000 idle sessions, after they expire,
//!    and again for a second 10,000 (memory freed is reused, not leaked).
//!
//! Run with `cargo bench --bench http` (or `-- calls` for the first alone,
//! `-- sessions` for the third); figures are printed, not asserted. The calls
//! also print the server's CPU time per call (user + system, from
//! `/proc/PID/stat`).
//!
//! `-- telemetry` measures what traces cost: the CPU time per call with
//! traces off and on (exporting to a local OTLP sink the bench runs), and of
//! another build when `CARTE_BENCH_BASELINE` names its binary — the figure
//! that must not change when telemetry is off. The servers take turns, a
//! second each, so that whatever else the machine does falls on all alike,
//! and each round is compared within itself.

mod common;

use common::{Connection, Server, TIMEOUT, back_to_back, ms, percentile, start, start_binary};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// carte on `catalog`, with reservo's database in memory.
fn serve(catalog: &Path, extra: &[&str]) -> Server {
    start(catalog, extra, &[("RESERVO_DATABASE_URL", "sqlite::memory:")])
}

fn main() {
    let reservo = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogs/reservo.yaml");
    if std::env::args().any(|arg| arg == "sessions") {
        sessions_memory(&reservo, 10_000);
        return;
    }
    if std::env::args().any(|arg| arg == "telemetry") {
        telemetry(&reservo, 16, 15);
        return;
    }
    let server = serve(&reservo, &[]);
    for sessions in [1, 16, 64] {
        calls(&server, sessions, Duration::from_secs(3));
    }
    drop(server);
    if std::env::args().any(|arg| arg == "calls") {
        return;
    }
    fan_out(1000);
    sessions_memory(&reservo, 10_000);
}

/// The resident memory of a process, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// Live sessions, as `/readyz` counts them.
fn live_sessions(addr: SocketAddr) -> u64 {
    let mut connection = Connection::open(addr);
    let head = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    connection.writer.write_all(head.as_bytes()).expect("write");
    let (_, _, chunked, length) = connection.head();
    let body = connection.body(chunked, length);
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    ready["sessions"].as_u64().unwrap_or(u64::MAX)
}

/// RSS with `count` idle sessions, after they expire, and for a second round.
fn sessions_memory(catalog: &Path, count: usize) {
    let limit = (2 * count).to_string();
    // Idle long enough for every session of a round to be live at once (debug builds are slow).
    let idle = std::env::var("CARTE_BENCH_IDLE").unwrap_or_else(|_| "60".to_owned());
    let server = serve(catalog, &["--session-idle-timeout", &idle, "--max-sessions", &limit]);
    let pid = server.child.id();
    std::thread::sleep(Duration::from_millis(300));
    println!("sessions memory: RSS at start {:.1} MiB", rss_mib(pid));
    for round in 1..=2 {
        let threads = 8;
        let began = Instant::now();
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let addr = server.addr;
                std::thread::spawn(move || {
                    let mut connection = Connection::open(addr);
                    for _ in 0..count / threads {
                        connection.session();
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("worker");
        }
        let live = live_sessions(server.addr);
        println!(
            "sessions memory, round {round}: {live} idle sessions in {:.1} s, RSS {:.1} MiB",
            began.elapsed().as_secs_f64(),
            rss_mib(pid)
        );
        let deadline = Instant::now() + TIMEOUT + Duration::from_secs(idle.parse().unwrap_or(60));
        while live_sessions(server.addr) != 0 {
            assert!(Instant::now() < deadline, "sessions never expired");
            std::thread::sleep(Duration::from_millis(200));
        }
        println!("sessions memory, round {round}: all closed, RSS {:.1} MiB", rss_mib(pid));
        // The sweep after the one that closed them hands the memory back.
        std::thread::sleep(Duration::from_secs(idle.parse::<u64>().unwrap_or(60) / 4 + 1));
        println!("sessions memory, round {round}: a sweep later, RSS {:.1} MiB", rss_mib(pid));
    }
}

/// `sessions` sessions calling `get_quote` back to back for `run_for`: every
/// call's latency (sorted), the time it took, and the server's CPU seconds.
fn get_quotes(server: &Server, sessions: usize, run_for: Duration) -> (Vec<Duration>, Duration, f64) {
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_quote","arguments":{"room":"Focus","tier":"pro","hours":3}}}"#;
    let cpu_before = cpu_seconds(server.child.id());
    let (mut all, elapsed) = back_to_back(server, sessions, run_for, call, "11250 cents");
    let cpu = cpu_seconds(server.child.id()) - cpu_before;
    all.sort();
    (all, elapsed, cpu)
}

fn calls(server: &Server, sessions: usize, run_for: Duration) {
    let (all, elapsed, cpu) = get_quotes(server, sessions, run_for);
    println!(
        "HTTP tools/call get_quote, {sessions:>2} sessions: {:>6.0} calls/s, p50 {:.2} ms, p99 {:.2} ms, server CPU {:.1} µs/call ({} calls)",
        all.len() as f64 / elapsed.as_secs_f64(),
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
        cpu * 1e6 / all.len().max(1) as f64,
        all.len()
    );
}

/// Server CPU per `get_quote` call with `sessions` sessions, over `rounds`
/// rounds in which each server calls for a second, in turn (the order
/// rotating): traces off, on (exporting to a local sink), and the build
/// `CARTE_BENCH_BASELINE` names, if any, with its traces off.
fn telemetry(catalog: &Path, sessions: usize, rounds: usize) {
    let endpoint = format!("http://{}", otlp_sink());
    let memory = ("RESERVO_DATABASE_URL", "sqlite::memory:");
    let mut servers: Vec<(String, Server)> = Vec::new();
    if let Ok(baseline) = std::env::var("CARTE_BENCH_BASELINE") {
        let server = start_binary(Path::new(&baseline), catalog, &[], &[memory]);
        servers.push((format!("baseline ({baseline})"), server));
    }
    servers.push(("traces off".to_owned(), serve(catalog, &[])));
    servers.push(("traces on".to_owned(), start(catalog, &[], &[memory, ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)])));
    for (_, server) in &servers {
        get_quotes(server, sessions, Duration::from_secs(1)); // warm up
    }
    let mut per_call: Vec<Vec<f64>> = vec![Vec::new(); servers.len()];
    for round in 0..rounds {
        for turn in 0..servers.len() {
            let which = (round + turn) % servers.len();
            let (all, _, cpu) = get_quotes(&servers[which].1, sessions, Duration::from_secs(1));
            per_call[which].push(cpu * 1e6 / all.len().max(1) as f64);
        }
    }
    println!(
        "telemetry: server CPU per get_quote call, {sessions} sessions, {rounds} rounds of 1 s each (median [p25, p75]):"
    );
    for ((name, _), figures) in servers.iter().zip(&per_call) {
        let (p25, p50, p75) = quartiles(figures.clone());
        println!("  {name}: {p50:.1} µs/call [{p25:.1}, {p75:.1}]");
    }
    // Within each round: off against the baseline (what telemetry off costs), on against off.
    let off = servers.len() - 2;
    let pairs = [(off, off.checked_sub(1)), (off + 1, Some(off))];
    for (this, against) in pairs.into_iter().filter_map(|(this, against)| Some((this, against?))) {
        let ratios: Vec<f64> =
            per_call[this].iter().zip(&per_call[against]).map(|(this, against)| this / against).collect();
        let (p25, p50, p75) = quartiles(ratios);
        let (this, against) = (&servers[this].0, &servers[against].0);
        println!("  {this} ÷ {against}, round by round: {p50:.3} [{p25:.3}, {p75:.3}]");
    }
}

/// The 25th, 50th and 75th percentiles of `figures`.
fn quartiles(mut figures: Vec<f64>) -> (f64, f64, f64) {
    figures.sort_by(f64::total_cmp);
    let at = |p: f64| figures.get(((figures.len().max(1) - 1) as f64 * p).round() as usize).copied().unwrap_or(0.0);
    (at(0.25), at(0.5), at(0.75))
}

/// An OTLP/HTTP collector that takes every export and answers 200: where
/// the traces go when they are on. Returns its address.
fn otlp_sink() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the sink");
    let addr = listener.local_addr().expect("the sink's address");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().expect("clone");
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                loop {
                    let mut length = 0;
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let header = line.trim_end().to_ascii_lowercase();
                        if header.is_empty() {
                            break;
                        }
                        if let Some(value) = header.strip_prefix("content-length:") {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err()
                        || writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// The CPU time (user + system) a process has used, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th of the line.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / per_second
}

fn fan_out(sessions: usize) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-http-fanout");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("folder");
    let path = dir.join("catalog.yaml");
    let catalog = |tools: &[&str]| {
        let mut yaml = String::from("server: { name: fanout, version: 1.0.0 }\ntools:\n");
        for tool in tools {
            yaml.push_str(&format!("  - name: {tool}\n    description: {tool}.\n    run: {{ text: {tool} }}\n"));
        }
        yaml
    };
    std::fs::write(&path, catalog(&["a"])).expect("write");
    let server = serve(&path, &[]);
    let ready = Arc::new(Barrier::new(sessions + 1));
    let listeners: Vec<_> = (0..sessions)
        .map(|_| {
            let addr = server.addr;
            let ready = ready.clone();
            std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    let mut connection = Connection::open(addr);
                    let session = connection.session();
                    connection.send("GET", Some(&session), "");
                    let (status, _, _, _) = connection.head();
                    assert_eq!(status, 200, "GET stream");
                    ready.wait();
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if connection.reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return None;
                        }
                        if line.contains("notifications/tools/list_changed") {
                            return Some(Instant::now());
                        }
                    }
                })
                .expect("a thread")
        })
        .collect();
    ready.wait();
    std::thread::sleep(Duration::from_millis(500)); // streams settled
    let written = Instant::now();
    std::fs::write(&path, catalog(&["a", "b"])).expect("write");
    let arrivals: Vec<Instant> = listeners.into_iter().filter_map(|l| l.join().ok().flatten()).collect();
    let first = arrivals.iter().min().copied().unwrap_or(written);
    let last = arrivals.iter().max().copied().unwrap_or(written);
    println!(
        "fan-out to {} of {sessions} sessions: first list_changed {:.0} ms after the write (50 ms debounce), last {:.0} ms; first → last {:.1} ms",
        arrivals.len(),
        ms(first - written),
        ms(last - written),
        ms(last - first)
    );
}
