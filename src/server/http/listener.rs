//! Accepting connections, bounded: at most `max_connections` at once, each
//! closed when its client takes longer than `header_timeout` to send a
//! request's headers or stays idle that long between requests, and each
//! request body due within `header_timeout` and then at [`MIN_BODY_RATE`]
//! ([`Deadline`]). HTTP/1.1 with keep-alive, served by hyper directly
//! (axum's `serve` has neither timeouts nor a cap).
//!
//! Probes never wait behind clients: past the cap, up to
//! [`PROBE_CONNECTIONS`] more connections are served one request each, and
//! only `/healthz` and `/readyz` (anything else is answered 503); past
//! those, a connection is answered 503 and closed at once.
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

/// Connections served past the cap, for `/healthz` and `/readyz` only.
pub const PROBE_CONNECTIONS: usize = 16;

/// How long a probe's connection may take to send its request.
const PROBE_HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a warning about refused connections may be logged.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Serves `app` on `listeners` (one cap for all) until `stop`, then closes
/// connections gracefully and returns when the last one is closed.
pub async fn serve(listeners: Vec<TcpListener>, app: Router, limits: Limits, stop: CancellationToken) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let probe_permits = Arc::new(Semaphore::new(PROBE_CONNECTIONS));
    let probes = probes_only(&app);
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
        let (permit, app, header_timeout, keep_alive) = match permits.clone().try_acquire_owned() {
            Ok(permit) => (permit, app.clone(), limits.header_timeout, true),
            Err(_) => {
                refused.one(limits.max_connections);
                match probe_permits.clone().try_acquire_owned() {
                    Ok(permit) => (permit, probes.clone(), PROBE_HEADER_TIMEOUT.min(limits.header_timeout), false),
                    Err(_) => {
                        turn_away(tcp);
                        continue;
                    }
                }
            }
        };
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY: {err}");
        }
        let closing = closing.clone();
        connections.spawn(async move {
            let service = TowerToHyperService::new(app);
            let mut builder = http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(header_timeout).keep_alive(keep_alive);
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

/// What a connection past the cap is served: the probes of `app`, and 503
/// for anything else.
fn probes_only(app: &Router) -> Router {
    app.clone().layer(axum::middleware::from_fn(only_probes))
}

async fn only_probes(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    if matches!(request.uri().path(), "/healthz" | "/readyz") {
        return next.run(request).await;
    }
    let mut response = axum::response::IntoResponse::into_response((
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        BUSY,
    ));
    response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
    response
}

/// Answers a connection past the cap and the probes' room with 503 (if the
/// socket takes it at once) and closes it.
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

/// The slowest a request body may arrive once its grace period is over, in
/// bytes per second: a client sending a byte a second cannot hold a
/// connection for longer than the grace period.
pub const MIN_BODY_RATE: u64 = 16 * 1024;

/// A request body with a deadline: it must have arrived by `grace` plus
/// one second per [`MIN_BODY_RATE`] bytes received after the request
/// started, else reading it fails ("the request body arrived too slowly")
/// and the connection's slot is freed.
pub struct Deadline {
    inner: axum::body::Body,
    started: tokio::time::Instant,
    grace: Duration,
    received: u64,
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl Deadline {
    /// `body`, due within `grace` plus its size at [`MIN_BODY_RATE`].
    pub fn new(body: axum::body::Body, grace: Duration) -> Deadline {
        let started = tokio::time::Instant::now();
        Deadline { inner: body, started, grace, received: 0, timer: Box::pin(tokio::time::sleep(grace)) }
    }

    fn due(&self) -> tokio::time::Instant {
        self.started + self.grace + Duration::from_secs(self.received / MIN_BODY_RATE)
    }
}

impl http_body::Body for Deadline {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                    let due = this.due();
                    this.timer.as_mut().reset(due);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(format!(
                    "the request body arrived too slowly (less than {} KiB/s after {}s)",
                    MIN_BODY_RATE / 1024,
                    this.grace.as_secs()
                ))))),
                Poll::Pending => Poll::Pending,
            },
            done => done,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
