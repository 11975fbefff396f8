//! Serving a catalog over MCP. This is the only module that knows rmcp.
//!
//! - [`snapshot`]: a catalog in MCP's terms, and the operations answering requests;
//! - [`handler`]: the rmcp `ServerHandler` of one session;
//! - [`hub`]: the connected sessions, for notifications;
//! - [`subscriptions`]: the hub and snapshots as [`crate::live`] reads them;
//! - [`stdio`]: the line transport on stdin/stdout;
//! - [`http`]: Streamable HTTP for many clients, with health endpoints;
//! - [`in_flight`]: counting calls and replies in flight, for shutdown;
//! - [`jsonrpc`]: what to answer a message rmcp cannot read, on every transport;
//! - [`request_state`]: the signed `requestState` of 2026-07-28 input-required results.
//! - [`tasks`]: tools that run as tasks (the tasks extension);
//! - [`trace`]: the OpenTelemetry span of each request.
//!
//! [`Shared`] holds the current snapshot; every request takes it once and
//! answers from that one.

mod capabilities;
pub mod handler;
pub mod http;
pub mod hub;
pub mod in_flight;
pub mod jsonrpc;
pub mod logs;
pub mod request_state;
pub mod snapshot;
pub mod stdio;
mod subscriptions;
pub mod tasks;
pub mod trace;

use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use rmcp::ServiceExt;

pub use handler::Handler;
pub use snapshot::{Answer, ListKind, RequestError, Snapshot, View};

/// State shared by every session of one server.
pub struct Shared {
    current: RwLock<Arc<Snapshot>>,
    /// The connected sessions.
    pub hub: hub::Hub,
    reloads: Mutex<ReloadStatus>,
    /// Tool calls running now (shutdown lets them finish).
    pub calls: Arc<in_flight::InFlight>,
    /// Live resources being read again after a write.
    pub live: crate::live::Live,
    /// Signs and opens the `requestState` of input-required results.
    pub state_keys: request_state::StateKeys,
    /// Tools running as tasks, and the tasks kept.
    pub tasks: tasks::Tasks,
    /// The state shared with other replicas (`--state`), if any.
    pub replicas: Option<Arc<crate::replicas::Replicas>>,
    /// Each caller's tool calls, against the catalog's `rateLimit`s (kept across reloads).
    pub limiter: crate::rate_limit::Limiter,
    /// Where each request is recorded (`--audit-log`), if anywhere.
    pub audit: std::sync::OnceLock<crate::audit::AuditLog>,
}

/// How the last reload went, for `/readyz`.
#[derive(Debug, Clone, Default)]
pub struct ReloadStatus {
    /// When the last reload (good or bad) finished.
    pub last_reload: Option<SystemTime>,
    /// The diagnostics of the last reload, if it failed (cleared by a good one).
    pub last_error: Option<String>,
}

impl Shared {
    /// Starts with `snapshot` as the current catalog.
    pub fn new(snapshot: Snapshot) -> Arc<Shared> {
        Shared::with_state_keys(snapshot, request_state::StateKeys::random())
    }

    /// Starts with `snapshot`, signing request states with `state_keys`.
    pub fn with_state_keys(snapshot: Snapshot, state_keys: request_state::StateKeys) -> Arc<Shared> {
        Shared::replicated(snapshot, state_keys, None)
    }

    /// Starts with `snapshot`, signing request states with `state_keys`;
    /// with `replicas`, tasks are kept in their database and writes and task
    /// changes are told to the other replicas (see [`crate::replicas`]).
    pub fn replicated(
        snapshot: Snapshot,
        state_keys: request_state::StateKeys,
        replicas: Option<Arc<crate::replicas::Replicas>>,
    ) -> Arc<Shared> {
        let tasks = match &replicas {
            Some(replicas) => tasks::Tasks::shared(
                Arc::new(crate::replicas::PgTaskStore::new(Arc::clone(replicas))),
                Arc::clone(replicas),
            ),
            None => tasks::Tasks::default(),
        };
        Arc::new(Shared {
            current: RwLock::new(Arc::new(snapshot)),
            hub: hub::Hub::default(),
            reloads: Mutex::default(),
            calls: Arc::default(),
            live: crate::live::Live::default(),
            state_keys,
            tasks,
            replicas,
            limiter: crate::rate_limit::Limiter::default(),
            audit: std::sync::OnceLock::new(),
        })
    }

    /// Records the outcome of a reload.
    pub fn record_reload(&self, error: Option<String>) {
        let mut status = crate::sync::lock(&self.reloads);
        status.last_reload = Some(SystemTime::now());
        status.last_error = error;
    }

    /// How the last reload went.
    pub fn reload_status(&self) -> ReloadStatus {
        crate::sync::lock(&self.reloads).clone()
    }

    /// The catalog requests are answered from now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        crate::sync::read(&self.current).clone()
    }

    /// Makes `snapshot` current; returns the one it replaced.
    pub fn replace(&self, snapshot: Arc<Snapshot>) -> Arc<Snapshot> {
        std::mem::replace(&mut *crate::sync::write(&self.current), snapshot)
    }
}

/// Serves MCP on stdin/stdout until the client closes it or `shutdown`
/// completes: one session, or, when a connection that started with protocol
/// 2026-07-28 sends a legacy `initialize`, a new session from there on. With
/// a `toolset`, its client sees only that toolset's tools.
pub async fn serve_stdio(
    shared: Arc<Shared>,
    toolset: Option<Arc<str>>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let (reader, writer) = rmcp::transport::stdio_pipes();
    let mut transport = stdio::LineTransport::new(reader, writer);
    tokio::pin!(shutdown);
    loop {
        let (handoff, next) = tokio::sync::oneshot::channel();
        transport.on_handoff(handoff);
        let handler = Handler::of_toolset(shared.clone(), toolset.clone(), transport.input_closed());
        let serving = handler.serve(transport);
        let running = tokio::select! {
            running = serving => match running {
                Ok(running) => running,
                Err(err) => {
                    // The client left before the session started: nothing to serve.
                    tracing::debug!("session did not start: {err}");
                    return Ok(());
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let token = running.cancellation_token();
        tokio::select! {
            quit = running.waiting() => {
                tracing::debug!("session ended: {quit:?}");
            }
            () = &mut shutdown => {
                tracing::info!("shutting down");
                token.cancel();
                return Ok(());
            }
        }
        match next.await {
            Ok(next) => transport = next,
            Err(_) => return Ok(()),
        }
    }
}
