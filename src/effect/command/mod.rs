//! The `command` effect: runs a program, never a shell. It owns the keys of
//! `run.command` (`argv`, `stdin`, `cwd`, `env`, `timeout`, `okExitCodes`,
//! `maxBytes`), their load-time checks (the program is found at load, on
//! PATH or beside the catalog; `cwd` exists; each template is checked
//! against the tool's arguments) and the run.
//!
//! A run renders each argument to exactly one `argv` element (no splitting,
//! no quoting: `a b; rm -rf /` stays one argument), starts the program in
//! its own process group with an environment of PATH plus `env` only, feeds
//! it `stdin` (or `/dev/null`), and reads stdout and stderr together, each
//! kept up to `maxBytes` (the rest is read and dropped, so a chatty program
//! still finishes and its exit code means what it says). stderr lines are
//! also sent to the client as log messages, a bounded number per call.
//!
//! The program runs under a supervisor of its own (`contain.rs`), which
//! kills it and everything it started on timeout, when the call's future is
//! dropped (a cancelled call), once the program has exited (whatever it left
//! running), and when carte itself dies; its output is read and bounded by
//! `output.rs`.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::io::AsyncWriteExt as _;

mod contain;
mod load;
mod output;

use load::{Shown, check_cwd, check_timeout, find_program, is_template, option_injection, starts_with_client_text};
use output::{Captured, read_capped, read_stderr, text_of};

use super::{Call, Check, EffectError, Failure, Kind, Output, Reads, Sections, Template};
use crate::duration::{DurationSpec, show_duration};
use crate::secret::{self, Cut, Keep, redact};
use crate::telemetry;
use tracing::Instrument as _;

/// The `command` effect.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(title = "command effect")]
pub struct CommandSpec {
    /// The program and its arguments. `argv[0]` is written as is (never a template): a name found
    /// on PATH when the catalog loads, or a path containing `/`, relative to this file. Each other
    /// element is a template rendered to exactly one argument (never split, never a shell).
    /// Numbers and booleans are passed as YAML reads them (`[head, -n, 5]`); quote one to keep its exact text.
    pub argv: Vec<Scalar>,
    /// What the program reads on its standard input (a template); without it, `/dev/null`.
    #[serde(default)]
    pub stdin: Option<String>,
    /// The folder it runs in, relative to this file (default: this file's folder).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Its environment besides PATH (carte's): the program sees exactly these. Values may be templates.
    #[serde(default)]
    pub env: IndexMap<String, Scalar>,
    /// How long it may run before its whole process group is killed (`500ms`, `5s`, `1m`; default
    /// `30s`, at most `1h`). A cancelled call kills it too.
    #[serde(default)]
    pub timeout: Option<DurationSpec>,
    /// The exit codes that mean success (default `[0]`); any other is an error result.
    #[serde(default)]
    pub ok_exit_codes: Option<Vec<i32>>,
    /// The most bytes of stdout, and of stderr, the result keeps (default 1 MiB each, at most
    /// 64 MiB); the rest is read and dropped, and the result says so.
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

/// An element of `argv` or a value of `env`: text (a template), or a number
/// or boolean, passed as text.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(title = "text, number or boolean")]
pub enum Scalar {
    /// Text, a template.
    Text(String),
    /// A number.
    Number(serde_json::Number),
    /// `true` or `false`.
    Bool(bool),
}

impl Scalar {
    /// Its text, and whether it was written as text (a template).
    fn text(&self) -> (String, bool) {
        match self {
            Scalar::Text(text) => (text.clone(), true),
            Scalar::Number(number) => (number.to_string(), false),
            Scalar::Bool(flag) => (flag.to_string(), false),
        }
    }
}

/// How long a program may run when the catalog does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `timeout` a catalog may give.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Bytes of stdout, and of stderr, kept when the catalog does not say.
pub const DEFAULT_MAX_BYTES: usize = 1 << 20;
/// The largest `maxBytes` a catalog may give.
pub const MAX_MAX_BYTES: u64 = 64 << 20;
/// stderr lines sent to the client as log messages, per call.
pub const MAX_LOG_LINES: usize = 100;
/// Longest stderr line sent as a log message; a longer one is cut.
pub const MAX_LOG_LINE_BYTES: usize = 2048;
/// How much of stderr an error result quotes (its end, where programs say why they failed).
pub const ERROR_STDERR_BYTES: usize = 2048;

/// A piece of the command line: written text, or a template rendered per call.
#[derive(Debug, Clone)]
enum Part {
    /// Used as written.
    Literal(String),
    /// The index of its template in [`Command::templates`].
    Template(usize),
}

/// A tool's program, checked at load.
pub struct Command {
    /// Where the program was found at load.
    program: PathBuf,
    /// `argv[0]` as written: how messages and log lines name it.
    name: String,
    /// `argv[1..]`.
    args: Vec<Part>,
    stdin: Option<Part>,
    cwd: PathBuf,
    env: Vec<(String, Part)>,
    timeout: Duration,
    ok_exit_codes: Vec<i32>,
    max_bytes: usize,
    /// Every template, rendered in one trip per call.
    templates: Vec<Template>,
}

impl Kind for Command {
    const VARIABLES: &'static [&'static str] = &["exit_code", "stderr", "stdout"];
    const READS: Reads = Reads {
        does: "runs a program",
        when: "its program runs",
        instead: "run the program",
        output: "the output",
        value: "its `stdout`",
    };
    const VALUE_MIME: &'static str = "text/plain";

    type Spec = CommandSpec;
    type ReadSpec = CommandSpec;
    type Read = Command;

    fn read_uses(command: &Command) -> &[String] {
        command.arguments_used()
    }

    fn check_read(spec: &CommandSpec, sections: &Sections, check: &mut Check<'_>) -> Option<Command> {
        Command::check(spec, sections, check)
    }

    fn read<'a>(
        command: &'a Command,
        call: &'a dyn Call,
        variables: Map<String, Value>,
    ) -> impl Future<Output = Result<Output, String>> + Send + 'a {
        super::run_as_read(command, call, variables)
    }

    fn check(spec: &CommandSpec, _sections: &Sections, check: &mut Check<'_>) -> Option<Command> {
        // Paths are relative to the file the tool is written in.
        let file = check.host.locate("/run/command").file;
        let shown = Shown { file: &file, folder: file.parent().unwrap_or(Path::new("")) };
        let parent = file.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let folder = std::path::absolute(parent).unwrap_or_else(|_| parent.to_path_buf());
        let mut ok = true;
        let argv: Vec<(String, bool)> = spec.argv.iter().map(Scalar::text).collect();
        let program = match argv.first() {
            None => {
                check.error("command-argv", "/run/command/argv", "`argv` is empty").hint =
                    Some("name the program first, then its arguments: `argv: [wc, -l]`".to_owned());
                None
            }
            Some((first, _)) => find_program(first, &folder, &shown, check),
        };
        ok &= program.is_some();
        let mut templates = Vec::new();
        let mut part = |check: &mut Check<'_>, pointer: &str, source: &str| -> Option<Part> {
            if !is_template(source) {
                return Some(Part::Literal(source.to_owned()));
            }
            let template = check.template(pointer, source)?;
            templates.push(template);
            Some(Part::Template(templates.len() - 1))
        };
        let mut args = Vec::new();
        let mut operands = false;
        for (idx, (source, text)) in argv.iter().enumerate().skip(1) {
            operands |= *text && source == "--";
            if *text && !operands && starts_with_client_text(source, check.free_text) {
                option_injection(check, idx, &argv[0].0, source);
            }
            let arg = if *text {
                part(check, &format!("/run/command/argv/{idx}"), source)
            } else {
                Some(Part::Literal(source.clone()))
            };
            match arg {
                Some(arg) => args.push(arg),
                None => ok = false,
            }
        }
        let stdin = spec.stdin.as_ref().and_then(|source| {
            let stdin = part(check, "/run/command/stdin", source);
            ok &= stdin.is_some();
            stdin
        });
        let mut env = Vec::new();
        for (name, value) in &spec.env {
            let pointer = format!("/run/command/env/{}", name.replace('~', "~0").replace('/', "~1"));
            if name.is_empty() || name.contains(['=', '\0']) {
                check
                    .error("command-env", &pointer, format!("`{name}` cannot be the name of an environment variable"))
                    .hint = Some("a name has no `=` and is not empty, e.g. `LC_ALL`".to_owned());
                ok = false;
                continue;
            }
            let value = match value {
                Scalar::Text(text) => part(check, &pointer, text),
                Scalar::Number(number) => Some(Part::Literal(number.to_string())),
                Scalar::Bool(flag) => Some(Part::Literal(flag.to_string())),
            };
            match value {
                Some(value) => env.push((name.clone(), value)),
                None => ok = false,
            }
        }
        let cwd = check_cwd(spec.cwd.as_deref(), &folder, &shown, check);
        ok &= cwd.is_some();
        let timeout = match spec.timeout.as_ref().map(check_timeout) {
            None => Some(DEFAULT_TIMEOUT),
            Some(Ok(timeout)) => Some(timeout),
            Some(Err(message)) => {
                check.error("command-timeout", "/run/command/timeout", message).hint =
                    Some("write a duration such as `5s` or `2m`, at most `1h`".to_owned());
                None
            }
        };
        ok &= timeout.is_some();
        let ok_exit_codes = spec.ok_exit_codes.clone().unwrap_or_else(|| vec![0]);
        if ok_exit_codes.is_empty() {
            check
                .error("command-exit-codes", "/run/command/okExitCodes", "`okExitCodes` is empty: every run would fail")
                .hint =
                Some("list the exit codes that mean success, e.g. `[0, 1]` for `grep` (1: nothing matched)".to_owned());
            ok = false;
        }
        let max_bytes = match spec.max_bytes {
            None => Some(DEFAULT_MAX_BYTES),
            Some(bytes) if (1..=MAX_MAX_BYTES).contains(&bytes) => usize::try_from(bytes).ok(),
            Some(bytes) => {
                check
                    .error(
                        "command-max-bytes",
                        "/run/command/maxBytes",
                        format!("`maxBytes` of {bytes} is out of range"),
                    )
                    .hint =
                    Some(format!("give a number of bytes from 1 to {MAX_MAX_BYTES} (64 MiB); the default is 1 MiB"));
                None
            }
        };
        ok &= max_bytes.is_some();
        let (Some(program), Some(cwd), Some(timeout), Some(max_bytes), true) = (program, cwd, timeout, max_bytes, ok)
        else {
            return None;
        };
        Some(Command {
            program,
            name: argv.first().map(|(name, _)| name.clone()).unwrap_or_default(),
            args,
            stdin,
            cwd,
            env,
            timeout,
            ok_exit_codes,
            max_bytes,
            templates,
        })
    }

    fn arguments_used(&self) -> &[String] {
        // Its templates were checked, and count as using what they name.
        &[]
    }

    async fn run<T, F, Fut>(&self, call: &dyn Call, _arguments: Map<String, Value>, finish: F) -> Result<T, Failure<T>>
    where
        F: FnOnce(Output) -> Fut,
        Fut: Future<Output = Result<T, T>>,
    {
        let rendered = if self.templates.is_empty() {
            Vec::new()
        } else {
            call.render(&self.templates).await.map_err(Failure::render)?
        };
        let text = |part: &Part| -> Result<String, String> {
            match part {
                Part::Literal(text) => Ok(text.clone()),
                Part::Template(idx) => match rendered.get(*idx) {
                    Some(Value::String(text)) => Ok(text.clone()),
                    Some(other) => Ok(other.to_string()),
                    None => Err("a template was not rendered".to_owned()),
                },
            }
        };
        let mut command = tokio::process::Command::new(&self.program);
        for (idx, arg) in self.args.iter().enumerate() {
            let arg = text(arg).map_err(Failure::render)?;
            if arg.contains('\0') {
                return Err(Failure::render(format!("argument {} of `{}` contains a NUL byte", idx + 1, self.name)));
            }
            command.arg(arg);
        }
        command.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        for (name, value) in &self.env {
            let value = text(value).map_err(Failure::render)?;
            if value.contains('\0') {
                return Err(Failure::render(format!("environment variable `{name}` contains a NUL byte")));
            }
            command.env(name, value);
        }
        let stdin = self.stdin.as_ref().map(text).transpose().map_err(Failure::render)?;
        command
            .current_dir(&self.cwd)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let carte = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
        // SAFETY: `supervise` is made to run between fork and exec (see `contain`).
        unsafe {
            command.pre_exec(move || contain::supervise(carte));
        }
        let span = tracing::info_span!(
            target: telemetry::TARGET,
            "command",
            otel.name = %self.name,
            process.executable.name = %self.name,
            process.exit.code = tracing::field::Empty,
        );
        let ran = self
            .spawn_and_wait(command, stdin, call)
            .instrument(span.clone())
            .await
            .map_err(|err| Failure::of(&span, EffectError::Run, err))?;
        let status = ran.status;
        let exit_code = status.code();
        if let Some(code) = exit_code {
            span.record("process.exit.code", code);
        }
        if !exit_code.is_some_and(|code| self.ok_exit_codes.contains(&code)) {
            let reason = redact(&self.failure(status, &ran.stderr)).into_owned();
            return Err(Failure::of(&span, EffectError::ExitCode, reason));
        }
        let mut notices = Vec::new();
        for (stream, read) in [("stdout", &ran.stdout), ("stderr", &ran.stderr)] {
            if read.total > read.kept.len() {
                notices.push(format!(
                    "[carte: `{}` wrote {} bytes to {stream}; this result was made from the first {} only]",
                    self.name,
                    read.total,
                    read.kept.len()
                ));
            }
        }
        let variables = vec![
            ("exit_code".to_owned(), exit_code.map_or(Value::Null, Value::from)),
            ("stderr".to_owned(), Value::String(text_of(&ran.stderr.kept))),
            ("stdout".to_owned(), Value::String(text_of(&ran.stdout.kept))),
        ];
        let notice = (!notices.is_empty()).then(|| notices.join("\n"));
        finish(Output { variables, notice, changed: None })
            .await
            .map_err(|reason| Failure::Refused { reason, undone: None })
    }
}

/// What a finished program gave.
struct Ran {
    status: ExitStatus,
    stdout: Captured,
    stderr: Captured,
}

/// The supervisor of one run (see `contain`): told to stop at most once,
/// and never after it was reaped (its pid may be another process's then).
struct Supervisor {
    pid: Option<libc::pid_t>,
}

impl Supervisor {
    /// Asks the supervisor to kill the program and everything it started,
    /// and to exit (SIGTERM), once.
    fn stop(&mut self) {
        if let Some(pid) = self.pid.take() {
            // SAFETY: kill only sends a signal, to our unreaped child.
            let _ = unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }

    /// The supervisor was reaped: nothing to signal any more.
    fn reaped(&mut self) {
        self.pid = None;
    }
}

/// How long a supervisor may take to end its run once told to, before it
/// is killed itself.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A running program's supervisor: the one place that ends a run's
/// processes. Dropped before it was reaped (a cancelled call), it tells the
/// supervisor to stop and leaves a task that reaps it, so a dropped future
/// leaks neither a process nor a zombie.
struct Process {
    child: Option<tokio::process::Child>,
    supervisor: Supervisor,
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.supervisor.pid.is_none() {
            return; // reaped, or already told to stop and waited for
        }
        self.supervisor.stop();
        let Some(child) = self.child.take() else { return };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = end(child).await;
            });
        }
    }
}

/// Waits for a supervisor told to stop; past [`STOP_GRACE`], kills it.
async fn end(mut child: tokio::process::Child) -> std::io::Result<ExitStatus> {
    match tokio::time::timeout(STOP_GRACE, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            let _ = child.start_kill();
            child.wait().await
        }
    }
}

impl Command {
    /// Starts the program, feeds it, reads it and waits for it, within the
    /// timeout; its process group is gone when this returns or is dropped.
    async fn spawn_and_wait(
        &self,
        mut command: tokio::process::Command,
        stdin: Option<String>,
        call: &dyn Call,
    ) -> Result<Ran, String> {
        let started = std::time::Instant::now();
        let mut child = command.spawn().map_err(|err| self.spawn_error(&err))?;
        let (input, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let pid = child.id().and_then(|id| libc::pid_t::try_from(id).ok());
        let mut process = Process { child: Some(child), supervisor: Supervisor { pid } };
        let Process { child: Some(child), supervisor } = &mut process else {
            return Err(format!("`{}` started but cannot be waited for", self.name));
        };
        let max = self.max_bytes;
        let io = async {
            let write = async {
                if let (Some(mut input), Some(stdin)) = (input, stdin) {
                    // A program that stops reading (`head -1`) closes the pipe: not an error.
                    let _ = input.write_all(stdin.as_bytes()).await;
                    let _ = input.shutdown().await;
                }
            };
            let wait = async {
                // The supervisor exits once the program has and whatever it
                // left running is killed; that also closes their copies of
                // the pipes, so the reads below end.
                let status = child.wait().await;
                supervisor.reaped();
                status
            };
            let (status, (), out, err) =
                tokio::join!(wait, write, read_capped(stdout, max), read_stderr(stderr, max, &self.name, call));
            (status, out, err)
        };
        match tokio::time::timeout(self.timeout, io).await {
            Ok((status, stdout, stderr)) => {
                let status = status.map_err(|err| format!("could not wait for `{}`: {err}", self.name))?;
                tracing::debug!(program = %self.name, ?status, elapsed = ?started.elapsed(), "command finished");
                Ok(Ran { status, stdout, stderr })
            }
            Err(_) => {
                supervisor.stop();
                if let Some(child) = process.child.take() {
                    let _ = end(child).await;
                }
                tracing::debug!(program = %self.name, timeout = ?self.timeout, "command timed out");
                Err(format!(
                    "`{}` did not finish within {} and was killed, with every process it started",
                    self.name,
                    show_duration(self.timeout)
                ))
            }
        }
    }

    /// Why the program did not start.
    fn spawn_error(&self, err: &std::io::Error) -> String {
        match err.kind() {
            std::io::ErrorKind::NotFound if !self.cwd.is_dir() => {
                format!("could not start `{}`: its folder `{}` is gone", self.name, self.cwd.display())
            }
            std::io::ErrorKind::NotFound => format!(
                "could not start `{}`: `{}` is gone (it was there when the catalog loaded)",
                self.name,
                self.program.display()
            ),
            _ => format!("could not start `{}` (`{}`): {err}", self.name, self.program.display()),
        }
    }

    /// The error result of a run that exited with a code not in
    /// `okExitCodes`, or was killed by a signal.
    fn failure(&self, status: ExitStatus, stderr: &Captured) -> String {
        use std::os::unix::process::ExitStatusExt as _;
        let mut message = match (status.code(), status.signal()) {
            (Some(code), _) => format!("`{}` exited with code {code}", self.name),
            (None, Some(signal)) => format!("`{}` was killed by signal {signal} ({})", self.name, signal_name(signal)),
            (None, None) => format!("`{}` ended with {status}", self.name),
        };
        let text = text_of(&stderr.kept);
        let text = text.trim_end();
        if text.is_empty() {
            message.push_str(" and wrote nothing to stderr");
        } else {
            // Secrets hidden before the end is cut off, and at the end of
            // what was kept of a longer stderr.
            let kept_all = stderr.total <= stderr.kept.len();
            let (tail, cut) =
                secret::excerpt(text, ERROR_STDERR_BYTES, Keep::End, Cut { after: !kept_all, ..Cut::default() });
            let cut = if cut || !kept_all { "…" } else { "" };
            message.push_str(&format!("; stderr:\n{cut}{tail}"));
        }
        message
    }
}

/// The usual name of a signal.
fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => "see `kill -l`",
    }
}
