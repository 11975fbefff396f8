//! Serving a catalog over MCP. This is the only module that knows rmcp.
//!
//! - [`snapshot`]: a catalog in MCP's terms, and the operations answering requests;
//! - [`handler`]: the rmcp `ServerHandler` of one session;
//! - [`hub`]: the connected sessions, for notifications;
//! - [`stdio`]: the line transport on stdin/stdout.
//!
//! [`Shared`] holds the current snapshot; every request takes it once and
//! answers from that one.

pub mod handler;
pub mod hub;
pub mod snapshot;
pub mod stdio;

use std::sync::{Arc, PoisonError, RwLock};

use rmcp::ServiceExt;

pub use handler::Handler;
pub use snapshot::{ListKind, Snapshot};

/// State shared by every session of one server.
pub struct Shared {
    current: RwLock<Arc<Snapshot>>,
    /// The connected sessions.
    pub hub: hub::Hub,
}

impl Shared {
    /// Starts with `snapshot` as the current catalog.
    pub fn new(snapshot: Snapshot) -> Arc<Shared> {
        Arc::new(Shared { current: RwLock::new(Arc::new(snapshot)), hub: hub::Hub::default() })
    }

    /// The catalog requests are answered from now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Makes `snapshot` current; returns the one it replaced.
    pub fn replace(&self, snapshot: Arc<Snapshot>) -> Arc<Snapshot> {
        std::mem::replace(&mut *self.current.write().unwrap_or_else(PoisonError::into_inner), snapshot)
    }
}

/// Serves one MCP session on stdin/stdout until the client closes it or
/// `shutdown` completes.
pub async fn serve_stdio(shared: Arc<Shared>, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let (reader, writer) = rmcp::transport::stdio_pipes();
    let transport = stdio::LineTransport::new(reader, writer);
    let handler = Handler::new(shared);
    let serving = handler.serve(transport);
    tokio::pin!(shutdown);
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
        () = shutdown => {
            tracing::info!("shutting down");
            token.cancel();
        }
    }
    Ok(())
}
