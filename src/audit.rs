//! The audit log (`carte serve --audit-log PATH|-`): one JSON line per
//! request — when, who (the caller tasks belong to), which method and name,
//! how it ended, how long it took, and the SHA-256 of its arguments — never
//! a value or a secret. Lines are handed to a writer thread through a
//! bounded queue, so a slow disk never holds a request; when the queue is
//! full a line is counted as dropped, and the next line written says how
//! many were. The writer wakes for the first line after a quiet spell,
//! gathers what comes in the next [`BATCH`], and writes it at once: a busy
//! server pays no thread wake-up or `write` per request, and a line is in
//! the file at most [`BATCH`] after its request. [`AuditLog::finish`] (at
//! shutdown) writes what is queued before carte exits.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::Digest as _;

/// Lines waiting for the writer, at most.
pub const QUEUED: usize = 8192;
/// How long the writer gathers lines before it writes them.
pub const BATCH: Duration = Duration::from_millis(10);

/// Where lines go.
pub struct AuditLog {
    lines: SyncSender<Message>,
    dropped: Arc<AtomicU64>,
}

/// What the writer thread is sent.
enum Message {
    /// One line, with its newline.
    Line(Vec<u8>),
    /// Write what is queued, then say so.
    Finish(mpsc::Sender<()>),
}

/// One request, as the log says it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry<'a> {
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    /// Who asked: `session:…`, an OAuth issuer and subject, `bearer:<sha256>`, `http` or `stdio`.
    pub caller: &'a str,
    /// The MCP method.
    pub method: &'a str,
    /// The tool or prompt, or a fixed resource's URI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    /// A resource template's URI carries values: only its SHA-256.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uri_sha256: Option<String>,
    /// `ok`, `tool_error`, or `error` with its code.
    pub outcome: &'a str,
    /// The JSON-RPC error code, for `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// How long the answer took, in milliseconds.
    pub duration_ms: f64,
    /// SHA-256 of the arguments as sent (JSON), when there were any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments_sha256: Option<String>,
    /// Lines dropped before this one (the queue was full).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<u64>,
}

impl AuditLog {
    /// Appends to `path` (created if missing), or writes to stdout for `-`.
    pub fn open(path: &Path) -> std::io::Result<AuditLog> {
        let out: Box<dyn Write + Send> = if path == Path::new("-") {
            Box::new(std::io::stdout())
        } else {
            Box::new(std::fs::OpenOptions::new().create(true).append(true).open(path)?)
        };
        let (lines, queued) = mpsc::sync_channel::<Message>(QUEUED);
        std::thread::Builder::new().name("carte-audit".to_owned()).spawn(move || {
            let mut out = std::io::BufWriter::new(out);
            while let Ok(first) = queued.recv() {
                if matches!(first, Message::Line(_)) {
                    std::thread::sleep(BATCH);
                }
                let mut failed = false;
                let mut finished = Vec::new();
                for message in std::iter::once(first).chain(queued.try_iter()) {
                    match message {
                        Message::Line(line) => failed |= out.write_all(&line).is_err(),
                        Message::Finish(done) => finished.push(done),
                    }
                }
                if failed || out.flush().is_err() {
                    tracing::warn!("the audit log could not be written");
                }
                for done in finished {
                    let _ = done.send(());
                }
            }
        })?;
        Ok(AuditLog { lines, dropped: Arc::default() })
    }

    /// Writes what is queued, waiting at most `limit` (carte is stopping).
    pub fn finish(&self, limit: Duration) {
        let (done, written) = mpsc::channel();
        let deadline = std::time::Instant::now() + limit;
        let mut message = Message::Finish(done);
        // The queue may be full: wait for room, within the limit.
        loop {
            match self.lines.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if std::time::Instant::now() < deadline => {
                    message = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => return,
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if written.recv_timeout(left).is_err() {
            tracing::warn!("the audit log's last lines could not be written in time");
        }
    }

    /// Queues `entry`'s line; never waits.
    pub fn record(&self, mut entry: Entry<'_>) {
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        entry.dropped = (dropped > 0).then_some(dropped);
        let Ok(mut line) = serde_json::to_vec(&entry) else { return };
        line.push(b'\n');
        match self.lines.try_send(Message::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(dropped + 1, Ordering::Relaxed);
            }
        }
    }
}

/// `time` now, as the log writes it.
pub fn now() -> String {
    chrono::DateTime::<chrono::Utc>::from(SystemTime::now()).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// SHA-256 of `arguments` as JSON, hex; `None` without any.
pub fn arguments_sha256(arguments: Option<&Map<String, Value>>) -> Option<String> {
    let arguments = arguments.filter(|arguments| !arguments.is_empty())?;
    let json = serde_json::to_vec(arguments).ok()?;
    Some(sha256(&json))
}

/// SHA-256 of `bytes`, hex.
pub fn sha256(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    sha2::Sha256::digest(bytes).iter().fold(String::with_capacity(64), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    })
}

/// Milliseconds of `elapsed`, to the microsecond.
pub fn millis(elapsed: Duration) -> f64 {
    (elapsed.as_micros() as f64) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_says_who_what_and_how_but_no_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        let arguments: Map<String, Value> = serde_json::from_str(r#"{"card":"4111 1111 1111 1111"}"#).unwrap();
        log.record(Entry {
            time: now(),
            caller: "stdio",
            method: "tools/call",
            name: Some("pay"),
            uri_sha256: None,
            outcome: "ok",
            code: None,
            duration_ms: 1.5,
            arguments_sha256: arguments_sha256(Some(&arguments)),
            dropped: None,
        });
        log.finish(Duration::from_secs(10));
        let text = std::fs::read_to_string(&path).unwrap();
        let line: Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["method"], "tools/call");
        assert_eq!(line["name"], "pay");
        assert_eq!(line["argumentsSha256"].as_str().unwrap().len(), 64);
        assert!(!text.contains("4111"), "{text}");
    }
}
