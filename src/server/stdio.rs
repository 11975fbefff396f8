//! MCP over stdio: newline-delimited JSON-RPC on stdin/stdout.
//!
//! rmcp's own line transport silently drops input that is not JSON and
//! closes the connection when a notification arrives before `initialize`.
//! carte answers like a JSON-RPC server should instead: -32700 for a line
//! that is not JSON (or not UTF-8), -32600 for JSON that is not a message, a
//! request whose id is not a string or a number, or a line over the size
//! limit, -32602 for a known method whose `params` is not an object, and it
//! drops notifications that come before the session starts. Every valid
//! message goes to rmcp unchanged.
//!
//! Replies wait for the client in a queue of at most [`OUTBOX_BYTES`]: when
//! the client does not read them and the queue is full, carte stops reading
//! requests (backpressure) until it does, so memory stays bounded.
//!
//! A connection whose first request carried the 2026-07-28 metadata serves
//! that stateless protocol; if a legacy `initialize` comes later, the
//! transport ends that rmcp session and hands itself, with the `initialize`,
//! to a new one ([`LineTransport::on_handoff`]), so the legacy session works.
//!
//! stdin/stdout are epoll-driven pipes when they are pipes
//! (`rmcp::transport::stdio_pipes`), which costs far less CPU per request
//! than tokio's blocking-pool stdio.

use std::io;
use std::sync::Arc;

use super::jsonrpc::Verdict;
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Longest line (one message) carte reads; longer ones are refused whole.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Bytes of replies and notifications waiting for the client to read them;
/// when full, carte reads no more requests until the client reads. (The pipe
/// itself holds 64 KiB: this is plenty to keep it busy.)
pub const OUTBOX_BYTES: usize = 1024 * 1024;

/// What a queued line counts for at least: its bookkeeping, for tiny lines.
const MIN_LINE_COST: usize = 256;

/// The queue to the writer task, bounded in bytes by a semaphore: each
/// queued line holds as many permits as it has bytes (at most all of them)
/// until it is written.
#[derive(Clone)]
struct Outbox {
    lines: mpsc::UnboundedSender<(Vec<u8>, OwnedSemaphorePermit)>,
    budget: Arc<Semaphore>,
}

impl Outbox {
    fn cost(line: &[u8]) -> u32 {
        u32::try_from(line.len().clamp(MIN_LINE_COST, OUTBOX_BYTES)).unwrap_or(u32::MAX)
    }

    /// Room for `line` if there is some now.
    fn try_permit(&self, line: &[u8]) -> Option<OwnedSemaphorePermit> {
        self.budget.clone().try_acquire_many_owned(Self::cost(line)).ok()
    }

    /// Room for `line`, waiting for it (in turn with earlier lines).
    async fn permit(&self, line: &[u8]) -> io::Result<OwnedSemaphorePermit> {
        self.budget.clone().acquire_many_owned(Self::cost(line)).await.map_err(|_| broken_pipe())
    }

    /// Hands `line` and its room to the writer task.
    fn push(&self, line: Vec<u8>, permit: OwnedSemaphorePermit) -> io::Result<()> {
        self.lines.send((line, permit)).map_err(|_| broken_pipe())
    }

    /// Waits until the queue has room (and no earlier line waits for it).
    async fn room(&self) {
        let _ = self.budget.acquire().await;
    }
}

fn broken_pipe() -> io::Error {
    io::Error::from(io::ErrorKind::BrokenPipe)
}

/// Lines read from the client.
struct Input<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
    discarding: bool,
}

/// A JSON-RPC line transport that answers malformed input.
pub struct LineTransport<R> {
    /// The input; `None` once handed to the next session.
    input: Option<Input<R>>,
    /// The queue to the writer task; `None` once closed.
    outbox: Option<Outbox>,
    writing: Option<JoinHandle<io::Result<()>>>,
    /// An answer of the transport's own, waiting for room in the outbox.
    reply: Option<Vec<u8>>,
    /// Whether rmcp's session has started (an `initialize` or a 2026-07-28
    /// request went through): before that, notifications are dropped.
    started: bool,
    /// Whether the session started with a 2026-07-28 request (no `initialize`).
    inline: bool,
    /// A message the session starts with (the `initialize` of a handoff).
    first: Option<RxJsonRpcMessage<RoleServer>>,
    /// Whether this session is ending to hand `first` to the next one.
    ending: bool,
    /// Where to hand this transport when a legacy `initialize` arrives on an
    /// inline session.
    handoff: Option<oneshot::Sender<LineTransport<R>>>,
    /// Cancelled when this session's input ends (end of stdin, or a handoff).
    input_closed: CancellationToken,
}

impl<R> LineTransport<R>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    /// Wraps a reader and a writer.
    pub fn new<W: AsyncWrite + Unpin + Send + 'static>(reader: R, writer: W) -> Self {
        let (lines, receiver) = mpsc::unbounded_channel();
        let budget = Arc::new(Semaphore::new(OUTBOX_BYTES));
        LineTransport {
            input: Some(Input {
                reader: BufReader::with_capacity(64 * 1024, reader),
                line: Vec::new(),
                discarding: false,
            }),
            outbox: Some(Outbox { lines, budget }),
            writing: Some(tokio::spawn(write_lines(receiver, writer))),
            reply: None,
            started: false,
            inline: false,
            first: None,
            ending: false,
            handoff: None,
            input_closed: CancellationToken::new(),
        }
    }

    /// Cancelled when this session's input ends (see [`Handler::until_closed`](super::Handler::until_closed)).
    pub fn input_closed(&self) -> CancellationToken {
        self.input_closed.clone()
    }

    /// Where this transport goes when a legacy `initialize` arrives on a
    /// session that started with protocol 2026-07-28: rmcp's session ends (as
    /// at end of input), and instead of closing, the transport is sent here,
    /// ready to start a new session with that `initialize`.
    pub fn on_handoff(&mut self, next: oneshot::Sender<LineTransport<R>>) {
        self.handoff = Some(next);
    }

    /// The next message for rmcp; `None` when the session's input ends.
    async fn next_message(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if self.ending {
                // A handoff: this session ends here; `close` passes the transport on.
                return None;
            }
            if let Some(first) = self.first.take() {
                return Some(first);
            }
            if let Err(err) = self.flush_reply().await {
                tracing::debug!("cannot answer: {err}");
                return None;
            }
            // Backpressure: no new request while the client leaves replies unread.
            if let Some(outbox) = &self.outbox {
                outbox.room().await;
            }
            let input = self.input.as_mut()?;
            match input.read_line().await {
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
            let mut line = std::mem::take(&mut input.line);
            let message = self.classify(&line);
            // Keep the buffer's capacity for the next line, unless it grew large.
            line.clear();
            if line.capacity() > 1024 * 1024 {
                line.shrink_to(64 * 1024);
            }
            if let Some(input) = &mut self.input {
                input.line = line;
            }
            if let Some(message) = message {
                return Some(message);
            }
        }
    }

    /// Keeps an answer of the transport's own, sent before the next line is read.
    fn reply_error(&mut self, id: Value, code: i64, message: &str) {
        let response = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } });
        match serde_json::to_vec(&response) {
            Ok(mut line) => {
                line.push(b'\n');
                self.reply = Some(line);
            }
            Err(err) => tracing::error!("cannot encode an error reply: {err}"),
        }
    }

    /// Sends the transport's own pending answer, waiting for room. Cancel
    /// safe: the answer stays pending until it is queued.
    async fn flush_reply(&mut self) -> io::Result<()> {
        let Some(outbox) = self.outbox.clone() else { return Err(broken_pipe()) };
        if let Some(line) = &self.reply {
            let permit = outbox.permit(line).await?;
            if let Some(line) = self.reply.take() {
                outbox.push(line, permit)?;
            }
        }
        Ok(())
    }

    /// Classifies one line: a message for rmcp, or something answered here.
    fn classify(&mut self, line: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
        let text = match super::jsonrpc::text_of(line) {
            Ok(text) => text,
            Err(reply) => {
                self.reply_error(reply.id, reply.code, &reply.message);
                return None;
            }
        };
        if text.is_empty() {
            return None;
        }
        match super::jsonrpc::read(text) {
            Verdict::Message(message) => self.admit(*message, text),
            Verdict::Reply(reply) => {
                self.reply_error(reply.id, reply.code, &reply.message);
                None
            }
            Verdict::Ignore => None,
        }
    }

    /// Drops what rmcp would choke on before its session starts, and starts a
    /// handoff when a legacy `initialize` comes to an inline session.
    fn admit(&mut self, message: RxJsonRpcMessage<RoleServer>, text: &str) -> Option<RxJsonRpcMessage<RoleServer>> {
        use rmcp::model::ClientRequest;
        let RxJsonRpcMessage::<RoleServer>::Request(request) = &message else {
            if self.started {
                return Some(message);
            }
            tracing::debug!("dropped a notification or response that arrived before initialize");
            return None;
        };
        let initialize = matches!(request.request, ClientRequest::InitializeRequest(_));
        if self.started {
            if initialize && self.inline && self.handoff.is_some() {
                tracing::info!("a legacy `initialize` after protocol 2026-07-28 requests: starting a legacy session");
                self.first = Some(message);
                self.ending = true;
                return None;
            }
            return Some(message);
        }
        let inline = text.contains("io.modelcontextprotocol/protocolVersion");
        match &request.request {
            ClientRequest::InitializeRequest(_) => self.started = true,
            ClientRequest::DiscoverRequest(_) | ClientRequest::PingRequest(_) => {}
            _ if inline => {
                self.started = true;
                self.inline = true;
            }
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
}

impl<R: tokio::io::AsyncRead + Unpin> Input<R> {
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
}

/// The writer task: writes each queued line, and flushes only when the queue
/// is empty, so pipelined responses share one `write` call. A line's permits
/// go back to the outbox once it is written.
async fn write_lines<W: AsyncWrite + Unpin>(
    mut lines: mpsc::UnboundedReceiver<(Vec<u8>, OwnedSemaphorePermit)>,
    writer: W,
) -> io::Result<()> {
    let mut writer = BufWriter::with_capacity(64 * 1024, writer);
    while let Some((line, permit)) = lines.recv().await {
        writer.write_all(&line).await?;
        drop(permit);
        while let Ok((line, permit)) = lines.try_recv() {
            writer.write_all(&line).await?;
            drop(permit);
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

    /// Queues `item` now if the outbox has room (so messages keep the order
    /// they were sent in), else waits for room.
    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let waiting = self.outbox.clone().ok_or_else(broken_pipe).and_then(|outbox| {
            let mut line = serde_json::to_vec(&item).map_err(io::Error::other)?;
            line.push(b'\n');
            match outbox.try_permit(&line) {
                Some(permit) => outbox.push(line, permit).map(|()| None),
                None => Ok(Some((outbox, line))),
            }
        });
        async move {
            if let Some((outbox, line)) = waiting? {
                let permit = outbox.permit(&line).await?;
                outbox.push(line, permit)?;
            }
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let message = self.next_message().await;
        if message.is_none() {
            self.input_closed.cancel();
        }
        message
    }
    /// Lets the writer task write what is queued, then waits for it; or, in a
    /// handoff, passes this transport on to the next session.
    async fn close(&mut self) -> Result<(), Self::Error> {
        if self.ending
            && let Some(handoff) = self.handoff.take()
        {
            let next = LineTransport {
                input: self.input.take(),
                outbox: self.outbox.take(),
                writing: self.writing.take(),
                reply: self.reply.take(),
                started: true,
                inline: false,
                first: self.first.take(),
                ending: false,
                handoff: None,
                input_closed: CancellationToken::new(),
            };
            // If nobody takes it, dropping it closes the output like `close` would.
            let _ = handoff.send(next);
            return Ok(());
        }
        self.outbox = None;
        match self.writing.take() {
            Some(writing) => writing.await.map_err(io::Error::other)?,
            None => Ok(()),
        }
    }
}
