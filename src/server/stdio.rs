//! MCP over stdio: newline-delimited JSON-RPC on stdin/stdout.
//!
//! rmcp's own line transport silently drops input that is not JSON and
//! closes the connection when a notification arrives before `initialize`.
//! carte answers like a JSON-RPC server should instead: -32700 for a line
//! that is not JSON (or not UTF-8), -32600 for JSON that is not a message or
//! a line over the size limit, and it drops notifications that come before
//! the session starts. Every valid message goes to rmcp unchanged.
//!
//! stdin/stdout are epoll-driven pipes when they are pipes
//! (`rmcp::transport::stdio_pipes`), which costs far less CPU per request
//! than tokio's blocking-pool stdio.

use std::io;

use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Longest line (one message) carte reads; longer ones are refused whole.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// A JSON-RPC line transport that answers malformed input.
pub struct LineTransport<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
    discarding: bool,
    /// Lines for the writer task; `None` once closed.
    outbox: Option<mpsc::UnboundedSender<Vec<u8>>>,
    writing: Option<JoinHandle<io::Result<()>>>,
    /// Whether rmcp's session has started (an `initialize` or a 2026-07-28
    /// request went through): before that, notifications are dropped.
    started: bool,
    /// Requests the client cancelled: their responses are not sent.
    cancelled: std::collections::HashSet<rmcp::model::RequestId>,
}

/// Most cancelled request ids remembered (a client cancelling without end
/// must not grow memory without end).
const MAX_CANCELLED: usize = 10_000;

impl<R> LineTransport<R>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    /// Wraps a reader and a writer.
    pub fn new<W: AsyncWrite + Unpin + Send + 'static>(reader: R, writer: W) -> Self {
        let (outbox, receiver) = mpsc::unbounded_channel();
        LineTransport {
            reader: BufReader::with_capacity(64 * 1024, reader),
            line: Vec::new(),
            discarding: false,
            outbox: Some(outbox),
            writing: Some(tokio::spawn(write_lines(receiver, writer))),
            started: false,
            cancelled: std::collections::HashSet::new(),
        }
    }

    /// Reads one whole line into `self.line` (without the newline). Cancel
    /// safe: a partial line stays in `self.line` until its end arrives.
    /// Returns `Ok(false)` at end of input, `Ok(true)` for a line, and
    /// `Err(len)` for a line that was too long (already skipped).
    async fn read_line(&mut self) -> io::Result<Result<bool, usize>> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                // End of input: a final line without a newline still counts.
                if !self.line.is_empty() && !self.discarding {
                    return Ok(Ok(true));
                }
                return Ok(Ok(false));
            }
            let (chunk, found) = match available.iter().position(|&b| b == b'\n') {
                Some(idx) => (&available[..idx], Some(idx + 1)),
                None => (available, None),
            };
            if !self.discarding {
                if self.line.len() + chunk.len() > MAX_LINE_BYTES {
                    self.discarding = true;
                    self.line.clear();
                    self.line.shrink_to(64 * 1024);
                } else {
                    self.line.extend_from_slice(chunk);
                }
            }
            let consumed = found.unwrap_or(available.len());
            self.reader.consume(consumed);
            if found.is_some() {
                if self.discarding {
                    self.discarding = false;
                    return Ok(Err(MAX_LINE_BYTES));
                }
                return Ok(Ok(true));
            }
        }
    }

    /// Queues one message for the writer task.
    fn enqueue(&self, message: &impl serde::Serialize) -> io::Result<()> {
        let mut line = serde_json::to_vec(message).map_err(io::Error::other)?;
        line.push(b'\n');
        let outbox = self.outbox.as_ref().ok_or_else(|| io::Error::from(io::ErrorKind::BrokenPipe))?;
        outbox.send(line).map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
    }

    /// Writes an error response outside rmcp (for input rmcp never sees).
    fn reply_error(&self, id: Value, code: i64, message: &str) {
        let response = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } });
        let _ = self.enqueue(&response);
    }

    /// Classifies one line: a message for rmcp, or something answered here.
    fn classify(&mut self, line: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
        let Ok(text) = std::str::from_utf8(line) else {
            self.reply_error(Value::Null, -32700, "Parse error: the message is not valid UTF-8");
            return None;
        };
        let text = text.trim_start_matches('\u{feff}').trim();
        if text.is_empty() {
            return None;
        }
        match serde_json::from_str::<RxJsonRpcMessage<RoleServer>>(text) {
            Ok(message) => self.admit(message, text),
            Err(err) if err.is_syntax() || err.is_eof() => {
                self.reply_error(Value::Null, -32700, &format!("Parse error: {err}"));
                None
            }
            Err(err) => {
                let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
                match &value {
                    Value::Array(_) => {
                        self.reply_error(Value::Null, -32600, "Invalid Request: batches are not supported")
                    }
                    Value::Object(map) => {
                        let id = map.get("id").filter(|id| id.is_string() || id.is_number()).cloned();
                        match id {
                            Some(id) => self.reply_error(id, -32600, &format!("Invalid Request: {err}")),
                            // A notification (no id) that rmcp cannot read gets no answer.
                            None if map.contains_key("method") => {
                                tracing::debug!("dropped a malformed notification: {err}");
                            }
                            None => self.reply_error(Value::Null, -32600, &format!("Invalid Request: {err}")),
                        }
                    }
                    _ => self.reply_error(Value::Null, -32600, "Invalid Request: a message must be a JSON object"),
                }
                None
            }
        }
    }

    /// Drops what rmcp would choke on before its session starts.
    fn admit(&mut self, message: RxJsonRpcMessage<RoleServer>, text: &str) -> Option<RxJsonRpcMessage<RoleServer>> {
        if self.started {
            return Some(message);
        }
        match &message {
            RxJsonRpcMessage::<RoleServer>::Request(request) => {
                use rmcp::model::ClientRequest;
                let inline = text.contains("io.modelcontextprotocol/protocolVersion");
                match &request.request {
                    ClientRequest::InitializeRequest(_) => self.started = true,
                    ClientRequest::DiscoverRequest(_) | ClientRequest::PingRequest(_) => {}
                    _ if inline => self.started = true,
                    _ => {
                        let id = serde_json::to_value(&request.id).unwrap_or(Value::Null);
                        self.reply_error(
                            id,
                            -32600,
                            "Invalid Request: the session has not started; send `initialize` first \
                             (or, for protocol 2026-07-28, the request metadata in `_meta`)",
                        );
                        return None;
                    }
                }
                Some(message)
            }
            _ => {
                tracing::debug!("dropped a notification or response that arrived before initialize");
                None
            }
        }
    }
}

/// The writer task: writes each queued line, and flushes only when the queue
/// is empty, so pipelined responses share one `write` call.
async fn write_lines<W: AsyncWrite + Unpin>(mut lines: mpsc::UnboundedReceiver<Vec<u8>>, writer: W) -> io::Result<()> {
    let mut writer = BufWriter::with_capacity(64 * 1024, writer);
    while let Some(line) = lines.recv().await {
        writer.write_all(&line).await?;
        while let Ok(line) = lines.try_recv() {
            writer.write_all(&line).await?;
        }
        writer.flush().await?;
    }
    Ok(())
}

impl<R> Transport<RoleServer> for LineTransport<R>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let answered = match &item {
            rmcp::model::JsonRpcMessage::Response(response) => Some(&response.id),
            rmcp::model::JsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        if let Some(id) = answered
            && self.cancelled.remove(id)
        {
            tracing::debug!("request {id} was cancelled: its response is not sent");
            return std::future::ready(Ok(()));
        }
        std::future::ready(self.enqueue(&item))
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => return None,
                Ok(Err(limit)) => {
                    self.reply_error(
                        Value::Null,
                        -32600,
                        &format!("Invalid Request: message longer than {limit} bytes"),
                    );
                    continue;
                }
                Err(err) => {
                    tracing::error!("cannot read stdin: {err}");
                    return None;
                }
            }
            let line = std::mem::take(&mut self.line);
            let message = self.classify(&line);
            // Keep the buffer's capacity for the next line, unless it grew large.
            self.line = line;
            self.line.clear();
            if self.line.capacity() > 1024 * 1024 {
                self.line.shrink_to(64 * 1024);
            }
            if let Some(message) = message {
                if let rmcp::model::JsonRpcMessage::Notification(notification) = &message
                    && let rmcp::model::ClientNotification::CancelledNotification(cancelled) =
                        &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    if self.cancelled.len() >= MAX_CANCELLED {
                        self.cancelled.clear();
                    }
                    self.cancelled.insert(id.clone());
                }
                return Some(message);
            }
        }
    }

    /// Lets the writer task write what is queued, then waits for it.
    async fn close(&mut self) -> Result<(), Self::Error> {
        self.outbox = None;
        match self.writing.take() {
            Some(writing) => writing.await.map_err(io::Error::other)?,
            None => Ok(()),
        }
    }
}
