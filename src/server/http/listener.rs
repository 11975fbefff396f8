//! Accepting connections, bounded: at most `max_connections` at once (one
//! more is accepted, answered 503 and closed at once), each closed when its
//! client takes longer than `header_timeout` to send a request's headers or
//! stays idle that long between requests. HTTP/1.1 with keep-alive, served
//! by hyper directly (axum's `serve` has neither timeouts nor a cap).
//!
//! Shutdown: stop accepting, ask every connection to close after its
//! current response, then wait for them (the caller bounds the wait).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How connections are bounded.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Longest wait for a request's headers, also between requests.
    pub header_timeout: Duration,
}

/// The body a connection over the cap reads before it is closed.
const BUSY: &str = "{\"error\":\"the server is at its connection limit (--max-connections); try again later\"}";

/// How often a warning about refused connections may be logged.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Serves `app` on `listeners` (one cap for all) until `stop`, then closes
/// connections gracefully and returns when the last one is closed.
pub async fn serve(listeners: Vec<TcpListener>, app: Router, limits: Limits, stop: CancellationToken) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let closing = CancellationToken::new();
    let connections = TaskTracker::new();
    let mut refused = Refused::default();
    let mut turn = 0usize;
    loop {
        let accepted = tokio::select! {
            accepted = accept_any(&listeners, &mut turn) => accepted,
            () = stop.cancelled() => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(err) => {
                accept_failed(err, &stop).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            refused.one(limits.max_connections);
            turn_away(tcp);
            continue;
        };
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY: {err}");
        }
        let app = app.clone();
        let closing = closing.clone();
        connections.spawn(async move {
            let service = TowerToHyperService::new(app);
            let mut builder = http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).keep_alive(true);
            let connection = builder.serve_connection(TokioIo::new(tcp), service);
            tokio::pin!(connection);
            let served = tokio::select! {
                served = connection.as_mut() => served,
                () = closing.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            drop(permit);
            if let Err(err) = served {
                tracing::debug!("connection closed: {err}");
            }
        });
    }
    drop(listeners);
    closing.cancel();
    connections.close();
    connections.wait().await;
}

/// The next connection on any of `listeners`; which one is asked first
/// turns, so a busy one cannot starve the others.
async fn accept_any(listeners: &[TcpListener], turn: &mut usize) -> std::io::Result<(TcpStream, std::net::SocketAddr)> {
    *turn = turn.wrapping_add(1);
    let start = *turn;
    std::future::poll_fn(|cx| {
        for offset in 0..listeners.len() {
            let listener = &listeners[(start + offset) % listeners.len()];
            if let std::task::Poll::Ready(accepted) = listener.poll_accept(cx) {
                return std::task::Poll::Ready(accepted);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Answers a connection over the cap with 503 (if the socket takes it at
/// once) and closes it.
fn turn_away(tcp: TcpStream) {
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{BUSY}",
        BUSY.len()
    );
    if let Err(err) = tcp.try_write(response.as_bytes()) {
        tracing::debug!("refusing a connection: {err}");
    }
}

/// Counts connections turned away, and warns now and then.
#[derive(Default)]
struct Refused {
    since_warning: u64,
    warned: Option<Instant>,
}

impl Refused {
    fn one(&mut self, limit: usize) {
        self.since_warning += 1;
        if self.warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            tracing::warn!(
                "at the connection limit ({limit}, --max-connections): refused {} connection(s)",
                self.since_warning
            );
            self.since_warning = 0;
            self.warned = Some(Instant::now());
        }
    }
}

/// After a failed `accept`: a client that gave up is nothing; running out of
/// descriptors is waited out briefly (or the loop would spin).
async fn accept_failed(err: std::io::Error, stop: &CancellationToken) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    if matches!(err.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted) {
        return;
    }
    tracing::warn!("cannot accept a connection: {err}");
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(100)) => {}
        () = stop.cancelled() => {}
    }
}

/// Raises the soft limit on open descriptors to the hard limit, so that the
/// connection cap, not the descriptor limit, decides; warns when even the
/// hard limit leaves too little room for `max_connections`.
pub fn raise_descriptor_limit(max_connections: usize) {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => {
            tracing::debug!("open descriptor limit: {limit}");
            // Beyond connections: the catalog's files, databases, watches, logs.
            let wanted = max_connections as u64 + 64;
            if limit < wanted {
                tracing::warn!(
                    "the open descriptor limit ({limit}) is below --max-connections ({max_connections}) plus room for \
                     files; raise the hard limit (ulimit -Hn) or lower --max-connections"
                );
            }
        }
        Err(err) => tracing::warn!("cannot raise the open descriptor limit: {err}"),
    }
}
