//! Driving one stdio MCP server through one session and measuring what it
//! cost: spawn, `initialize`, `notifications/initialized`, calls pipelined
//! with a window of requests in flight (each answer checked), end of input,
//! then the server's own resource usage as `wait4` reports it (every thread,
//! exited ones too), or its system calls as `strace -f -c` counts them.
//!
//! Every wait is bounded, and a server still running when its [`Session`] is
//! dropped is killed and reaped.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long the server may take to answer anything, or to start.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the server may take to exit once its input is closed.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a run failed on, with the tail of the server's stderr.
pub type Failure = String;

/// How to start a server.
#[derive(Clone)]
pub struct Spec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub envs: Vec<(String, String)>,
}

/// The same call, over and over, and the text of its answer.
pub struct Call {
    /// `params` of `tools/call`, as JSON.
    pub params: String,
    pub expect: String,
}

/// What one session measured.
#[derive(Clone, Copy, Default)]
pub struct Usage {
    /// Spawn → the `initialize` answer.
    pub cold_start: Duration,
    /// VmRSS and VmHWM after `initialize`, in KiB (0 under strace).
    pub rss_kib: u64,
    pub hwm_kib: u64,
    /// utime + stime of the server, every thread, in µs.
    pub cpu_us: u64,
    /// Voluntary and involuntary context switches, every thread.
    pub voluntary: u64,
    pub involuntary: u64,
    /// System calls of every thread (`strace -f -c`'s total), when traced.
    pub syscalls: Option<u64>,
}

impl Usage {
    pub fn switches(&self) -> u64 {
        self.voluntary + self.involuntary
    }
}

/// A running server and the client end of its stdin/stdout.
struct Session {
    child: Child,
    /// Whether `wait4` has reaped it (then its pid may be another's).
    reaped: bool,
    stdin: Option<ChildStdin>,
    stdout: ChildStdout,
    buffer: Vec<u8>,
    /// Where the server's stderr goes, for a failure's message.
    stderr: PathBuf,
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Session {
    fn start(spec: &Spec, strace: Option<&Path>, stderr: PathBuf) -> Result<Session, Failure> {
        let log = std::fs::File::create(&stderr).map_err(|err| format!("cannot create {}: {err}", stderr.display()))?;
        let mut command = match strace {
            Some(counts) => {
                let mut command = Command::new("strace");
                command.args(["-f", "-c", "-qq", "-o"]).arg(counts).arg("--").arg(&spec.program);
                command
            }
            None => Command::new(&spec.program),
        };
        command
            .args(&spec.args)
            // The servers as they run by default: no traces, default logs.
            .env_remove("CARTE_LOG")
            .env_remove("RUST_LOG")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .envs(spec.envs.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log);
        let mut child = command.spawn().map_err(|err| format!("cannot start {}: {err}", spec.program.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        Ok(Session { child, reaped: false, stdin, stdout, buffer: Vec::with_capacity(64 * 1024), stderr })
    }

    /// What went wrong, with the end of the server's stderr.
    fn failure(&self, what: impl std::fmt::Display) -> Failure {
        let log = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        let mut message = what.to_string();
        if !tail.is_empty() {
            message.push_str("\n  its stderr ends with:");
            for line in tail.into_iter().rev() {
                let _ = write!(message, "\n    {line}");
            }
        }
        message
    }

    fn send(&mut self, line: &[u8]) -> Result<(), Failure> {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line).map_err(|err| self.failure(format!("cannot write to the server: {err}")))
    }

    /// The next line from the server, waiting at most until `deadline`.
    fn line(&mut self, deadline: Instant) -> Result<Vec<u8>, Failure> {
        let mut searched = 0;
        loop {
            if let Some(end) = self.buffer[searched..].iter().position(|&b| b == b'\n') {
                let rest = self.buffer.split_off(searched + end + 1);
                let mut line = std::mem::replace(&mut self.buffer, rest);
                line.pop();
                return Ok(line);
            }
            searched = self.buffer.len();
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.failure(format!("no answer within {} s", ANSWER_TIMEOUT.as_secs())));
            }
            let mut poll = libc::pollfd { fd: self.stdout.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let millis = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
            // SAFETY: one valid pollfd, for the duration of the call.
            let ready = unsafe { libc::poll(&mut poll, 1, millis) };
            if ready < 0 {
                let err = std::io::Error::last_os_error();
                if err.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(self.failure(format!("poll: {err}")));
            }
            if ready == 0 {
                continue;
            }
            let start = self.buffer.len();
            self.buffer.resize(start + 64 * 1024, 0);
            let read = self.stdout.read(&mut self.buffer[start..]);
            self.buffer.truncate(start + *read.as_ref().unwrap_or(&0));
            match read {
                Ok(0) => return Err(self.failure("the server closed its stdout")),
                Ok(_) => {}
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => return Err(self.failure(format!("cannot read from the server: {err}"))),
            }
        }
    }

    /// The next response (skipping notifications and the server's requests).
    fn response(&mut self) -> Result<Value, Failure> {
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            let line = self.line(deadline)?;
            let message: Value = serde_json::from_slice(&line)
                .map_err(|err| self.failure(format!("not JSON ({err}): {}", String::from_utf8_lossy(&line))))?;
            if message.get("method").is_none() {
                return Ok(message);
            }
        }
    }

    /// Closes stdin and waits for the server to exit; its resource usage.
    fn finish(&mut self) -> Result<libc::rusage, Failure> {
        drop(self.stdin.take());
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        let deadline = Instant::now() + EXIT_TIMEOUT;
        loop {
            let mut status = 0;
            // SAFETY: an all-zero rusage is a valid value to be overwritten.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: pid is our unreaped child; both pointers are valid for the call.
            let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
            if reaped == pid {
                self.reaped = true;
                if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
                    return Err(self.failure(format!("the server ended with wait status {status:#x}")));
                }
                return Ok(usage);
            }
            if reaped < 0 {
                return Err(self.failure(format!("wait4: {}", std::io::Error::last_os_error())));
            }
            if Instant::now() > deadline {
                return Err(self.failure(format!(
                    "the server did not exit within {} s of the end of its input",
                    EXIT_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// VmRSS and VmHWM in KiB.
    fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kib| kib.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

fn check_response(response: &Value, expect: &str) -> Result<u64, String> {
    let id =
        response.get("id").and_then(Value::as_u64).ok_or_else(|| format!("an answer without an id: {response}"))?;
    if response.get("error").is_some() {
        return Err(format!("an error: {response}"));
    }
    let result = response.get("result").ok_or_else(|| format!("no result: {response}"))?;
    if result.get("isError") == Some(&Value::Bool(true)) {
        return Err(format!("a tool error: {response}"));
    }
    let text = result.pointer("/content/0/text").and_then(Value::as_str);
    if text != Some(expect) {
        return Err(format!("expected the text {expect:?}: {response}"));
    }
    Ok(id)
}

/// `initialize` and `notifications/initialized`, as the first lines of a session.
const INITIALIZE: &str = concat!(
    r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"#,
    r#""clientInfo":{"name":"bench-ceiling","version":"1"}}}"#,
    "\n"
);
const INITIALIZED: &str = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

/// One session: `calls` calls of `call`, at most `window` in flight.
/// Under `strace` (the file its counts go to), only `syscalls` is measured.
pub fn run(
    spec: &Spec,
    call: &Call,
    calls: u64,
    window: u64,
    strace: Option<&Path>,
    stderr: PathBuf,
) -> Result<Usage, Failure> {
    let started = Instant::now();
    let mut session = Session::start(spec, strace, stderr)?;
    session.send(INITIALIZE.as_bytes())?;
    let answer = session.response()?;
    let cold_start = started.elapsed();
    if answer.get("id") != Some(&Value::from(0)) || answer.pointer("/result/protocolVersion").is_none() {
        return Err(session.failure(format!("initialize was not answered: {answer}")));
    }
    session.send(INITIALIZED.as_bytes())?;
    let (rss_kib, hwm_kib) = if strace.is_some() { (0, 0) } else { session.memory() };

    let request = |id: u64| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{}}}"#, call.params).into_bytes()
    };
    let mut in_flight = vec![false; usize::try_from(calls).expect("calls fit in memory") + 1];
    let mut sent = 0;
    let mut answered = 0;
    while answered < calls {
        while sent < calls && sent - answered < window {
            sent += 1;
            let mut line = request(sent);
            line.push(b'\n');
            session.send(&line)?;
            in_flight[sent as usize] = true;
        }
        let response = session.response()?;
        let id = check_response(&response, &call.expect).map_err(|err| session.failure(err))?;
        let slot = in_flight.get_mut(usize::try_from(id).unwrap_or(usize::MAX));
        match slot {
            Some(flag) if *flag => *flag = false,
            _ => return Err(session.failure(format!("an answer to no request in flight: {response}"))),
        }
        answered += 1;
    }

    let usage = session.finish()?;
    let micros = |time: libc::timeval| time.tv_sec as u64 * 1_000_000 + time.tv_usec as u64;
    let syscalls = match strace {
        Some(counts) => Some(strace_total(counts).map_err(|err| session.failure(err))?),
        None => None,
    };
    Ok(Usage {
        cold_start,
        rss_kib,
        hwm_kib,
        cpu_us: micros(usage.ru_utime) + micros(usage.ru_stime),
        voluntary: usage.ru_nvcsw as u64,
        involuntary: usage.ru_nivcsw as u64,
        syscalls,
    })
}

/// The `calls` column of the `total` line of `strace -c`'s summary.
fn strace_total(counts: &Path) -> Result<u64, String> {
    let summary =
        std::fs::read_to_string(counts).map_err(|err| format!("cannot read strace's {}: {err}", counts.display()))?;
    // "100.00    0.001234           1      1234        56 total": calls is the
    // fourth column (errors, the fifth, may be empty).
    summary
        .lines()
        .rev()
        .find(|line| line.split_whitespace().last() == Some("total"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|calls| calls.parse().ok())
        .ok_or_else(|| format!("no total in strace's summary:\n{summary}"))
}

/// One request/answer exchange of a fresh session, for comparing servers:
/// every answer, in order, after `initialize`.
pub fn answers(spec: &Spec, requests: &[String], stderr: PathBuf) -> Result<Vec<Value>, Failure> {
    let mut session = Session::start(spec, None, stderr)?;
    session.send(INITIALIZE.as_bytes())?;
    session.response()?;
    session.send(INITIALIZED.as_bytes())?;
    let mut answers = Vec::new();
    for (id, request) in (1..).zip(requests) {
        let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},{request}}}\n");
        session.send(line.as_bytes())?;
        answers.push(session.response()?);
    }
    session.finish()?;
    Ok(answers)
}
