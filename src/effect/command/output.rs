//! A program's output: stdout and stderr each read to the end and kept up
//! to `maxBytes` (the rest counted, not kept), and stderr's lines sent to
//! the client as log messages, bounded in count and length, with secrets
//! hidden before a long line is cut.

use tokio::io::{AsyncRead, AsyncReadExt as _};

use super::{MAX_LOG_LINE_BYTES, MAX_LOG_LINES};
use crate::effect::Call;
use crate::secret::{self, Cut, Keep};

/// One output stream: what was kept, and how much there was.
#[derive(Debug, Default)]
pub(super) struct Captured {
    pub(super) kept: Vec<u8>,
    pub(super) total: usize,
}

/// Reads `stream` to its end, keeping its first `max` bytes and counting the rest.
pub(super) async fn read_capped(stream: Option<impl AsyncRead + Unpin>, max: usize) -> Captured {
    let mut captured = Captured::default();
    let Some(mut stream) = stream else { return captured };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => captured.push(&buf[..n], max),
        }
    }
    captured
}

impl Captured {
    /// Adds `bytes`, keeping at most `max` in all.
    fn push(&mut self, bytes: &[u8], max: usize) {
        let room = max.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.total += bytes.len();
    }
}

/// Reads stderr like [`read_capped`], and sends its lines to the client as
/// log messages from `logger`: the first [`MAX_LOG_LINES`], each cut to
/// [`MAX_LOG_LINE_BYTES`], then one saying how many more there were.
pub(super) async fn read_stderr(
    stream: Option<impl AsyncRead + Unpin>,
    max: usize,
    logger: &str,
    call: &dyn Call,
) -> Captured {
    let mut captured = Captured::default();
    let Some(mut stream) = stream else { return captured };
    let mut lines = Lines::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        captured.push(&buf[..n], max);
        for line in lines.feed(&buf[..n]) {
            call.info(logger, line).await;
        }
    }
    if let Some(line) = lines.finish() {
        call.info(logger, line).await;
    }
    if lines.dropped > 0 {
        let more = format!("[carte: {} more stderr lines were not sent as log messages]", lines.dropped);
        call.info(logger, more).await;
    }
    captured
}

/// Splits a byte stream into lines to send, bounded in count and length.
#[derive(Debug, Default)]
struct Lines {
    /// The line being read, up to [`MAX_LOG_LINE_BYTES`].
    current: Vec<u8>,
    /// Whether the line being read was longer than what is kept of it.
    cut: bool,
    /// Lines handed out so far.
    sent: usize,
    /// Lines past [`MAX_LOG_LINES`], counted only.
    dropped: usize,
}

impl Lines {
    /// The lines `bytes` completes (to send).
    fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let (body, ended) = match piece.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (piece, false),
            };
            let room = MAX_LOG_LINE_BYTES.saturating_sub(self.current.len());
            self.cut |= body.len() > room;
            self.current.extend_from_slice(&body[..body.len().min(room)]);
            if ended {
                out.extend(self.take());
            }
        }
        out
    }

    /// The last line, if the stream did not end with a newline.
    fn finish(&mut self) -> Option<String> {
        if self.current.is_empty() && !self.cut { None } else { self.take() }
    }

    /// The line read so far, if it may still be sent: secrets hidden, also
    /// a piece of one where a long line was cut.
    fn take(&mut self) -> Option<String> {
        let line = text_of(&std::mem::take(&mut self.current));
        let cut = std::mem::take(&mut self.cut);
        let (mut line, _) =
            secret::excerpt(&line, MAX_LOG_LINE_BYTES, Keep::Start, Cut { after: cut, ..Cut::default() });
        if cut {
            line.push('…');
        }
        if self.sent < MAX_LOG_LINES {
            self.sent += 1;
            Some(line)
        } else {
            self.dropped += 1;
            None
        }
    }
}

/// Bytes as text: invalid UTF-8 (or a character cut at `maxBytes`) becomes U+FFFD.
pub(super) fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_across_reads_and_bounded() {
        let mut lines = Lines::default();
        assert_eq!(lines.feed(b"one\ntw"), vec!["one".to_owned()]);
        assert_eq!(lines.feed(b"o\n\nthree"), vec!["two".to_owned(), String::new()]);
        assert_eq!(lines.finish(), Some("three".to_owned()));
        assert_eq!(lines.finish(), None);
    }

    #[test]
    fn long_lines_are_cut_and_extra_lines_counted() {
        let mut lines = Lines::default();
        let long = vec![b'x'; MAX_LOG_LINE_BYTES * 3];
        let sent = lines.feed(&[long.as_slice(), b"\n"].concat());
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].len(), MAX_LOG_LINE_BYTES + '…'.len_utf8());
        let many = "l\n".repeat(MAX_LOG_LINES * 2);
        let sent = lines.feed(many.as_bytes());
        assert_eq!(sent.len(), MAX_LOG_LINES - 1);
        assert_eq!(lines.dropped, MAX_LOG_LINES + 1);
    }

    #[test]
    fn captured_keeps_the_first_bytes_and_counts_all() {
        let mut captured = Captured::default();
        captured.push(b"hello ", 8);
        captured.push(b"world", 8);
        assert_eq!(captured.kept, b"hello wo");
        assert_eq!(captured.total, 11);
    }
}
