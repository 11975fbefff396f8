//! MCP over Streamable HTTP, for running carte as a service: rmcp's
//! Streamable HTTP service at `/mcp` behind axum, plus `/healthz` and
//! `/readyz`.
//!
//! Every request is checked before it reaches MCP: the `Host` and `Origin`
//! headers (rmcp: loopback names by default, more by flag; a foreign origin
//! is 403), the bearer token when one is configured (401 with
//! `WWW-Authenticate`, compared in constant time, never logged), and the
//! body size. Legacy clients get sessions (`Mcp-Session-Id`, the GET SSE
//! stream, DELETE); 2026-07-28 clients are served statelessly and listen on
//! `subscriptions/listen` streams. Sessions and listen streams join the hub
//! like a stdio client does.
//!
//! Shutdown: stop accepting connections, let tool calls in flight finish
//! (bounded), then close every session and stream.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::in_flight::{Guard, InFlight};
use super::{Handler, Shared};

/// How long shutdown waits for tool calls in flight before closing sessions.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How carte serves HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Where to listen.
    pub addr: SocketAddr,
    /// More `Host` values to accept (beyond localhost, 127.0.0.1, [::1] and the bound address).
    pub allow_hosts: Vec<String>,
    /// More `Origin` values to accept (beyond http(s)://localhost, 127.0.0.1 and [::1], any port).
    pub allow_origins: Vec<String>,
    /// The bearer token clients must send, if any.
    pub auth_token: Option<String>,
    /// Close a session after this long without traffic (`None`: never).
    pub session_idle: Option<Duration>,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
}

struct AppState {
    shared: Arc<Shared>,
    token: Option<String>,
    started: Instant,
    /// POST replies still being written (listen streams are not counted: they stay open).
    replies: Arc<InFlight>,
}

/// A response body that counts as a reply in flight until it is dropped, so
/// that shutdown closes sessions only after the last reply went out.
struct Counted<B> {
    body: B,
    _reply: Guard,
}

impl<B: http_body::Body + Unpin> http_body::Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Serves `shared` over HTTP until `shutdown` completes, then shuts down gracefully.
pub async fn serve_http(
    shared: Arc<Shared>,
    options: HttpOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|err| anyhow::anyhow!("cannot listen on {}: {err}", options.addr))?;
    let local = listener.local_addr()?;
    let sessions_closed = CancellationToken::new();
    let replies = Arc::new(InFlight::default());
    let app = router(shared.clone(), &options, local, sessions_closed.clone(), replies.clone());
    tracing::info!("serving MCP at http://{local}/mcp");

    let (stop_accepting, accepting_stopped) = tokio::sync::oneshot::channel::<()>();
    // Small responses go out at once (no Nagle delay against the client's delayed ACK).
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY: {err}");
        }
    });
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = accepting_stopped.await;
    });
    let server = tokio::spawn(async move { server.await });
    shutdown.await;
    tracing::info!("shutting down: finishing calls in flight");
    let _ = stop_accepting.send(());
    if tokio::time::timeout(SHUTDOWN_GRACE, shared.calls.idle()).await.is_err() {
        tracing::warn!("tool calls still running after {SHUTDOWN_GRACE:?}; closing anyway");
    }
    // Lets the last replies reach their clients, then ends every session and stream.
    if tokio::time::timeout(Duration::from_secs(2), replies.idle()).await.is_err() {
        tracing::warn!("replies still being written after 2s; closing anyway");
    }
    sessions_closed.cancel();
    match tokio::time::timeout(Duration::from_secs(5), server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(err))) => tracing::warn!("HTTP server: {err}"),
        Ok(Err(err)) => tracing::warn!("HTTP server task: {err}"),
        Err(_) => tracing::warn!("connections still open after shutdown; exiting"),
    }
    Ok(())
}

/// The routes: `/mcp`, `/healthz`, `/readyz`, behind the auth and access-log middleware.
fn router(
    shared: Arc<Shared>,
    options: &HttpOptions,
    local: SocketAddr,
    closed: CancellationToken,
    replies: Arc<InFlight>,
) -> Router {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
    if !local.ip().is_unspecified() {
        hosts.push(local.ip().to_string());
    }
    hosts.extend(options.allow_hosts.iter().cloned());
    let mut origins: Vec<String> = Vec::new();
    for scheme in ["http", "https"] {
        for host in ["localhost", "127.0.0.1", "[::1]"] {
            origins.push(format!("{scheme}://{host}:*"));
        }
    }
    origins.extend(options.allow_origins.iter().cloned());
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_cancellation_token(closed);
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = options.session_idle;
    let factory_shared = shared.clone();
    let mcp = StreamableHttpService::new(move || Ok(Handler::new(factory_shared.clone())), Arc::new(sessions), config);
    let state = Arc::new(AppState { shared, token: options.auth_token.clone(), started: Instant::now(), replies });
    Router::new()
        .route_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(state.clone(), count_replies))
        .layer(axum::middleware::from_fn_with_state(state.clone(), authorize))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .layer(axum::middleware::from_fn(access_log))
        .with_state(state)
}

/// Requires `Authorization: Bearer <token>` on `/mcp` when a token is configured.
async fn authorize(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(token) = &state.token else { return next.run(request).await };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    match presented {
        Some(presented) if same(presented.as_bytes(), token.as_bytes()) => next.run(request).await,
        _ => {
            let mut response =
                (StatusCode::UNAUTHORIZED, Json(json!({"error": "missing or wrong bearer token"}))).into_response();
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"carte\""));
            response
        }
    }
}

/// Counts POST replies (but not listen streams) until their bodies are done.
async fn count_replies(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let counted = request.method() == axum::http::Method::POST
        && request.headers().get("mcp-method").is_none_or(|method| method != "subscriptions/listen");
    let response = next.run(request).await;
    if !counted {
        return response;
    }
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, axum::body::Body::new(Counted { body, _reply: state.replies.start() }))
}

/// Compares two secrets in time that depends only on their lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// One line per request at debug level (never the headers: they may carry the token).
async fn access_log(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    tracing::debug!(
        target: "carte::access",
        "{method} {path} {} {:.1}ms",
        response.status().as_u16(),
        started.elapsed().as_secs_f64() * 1000.0
    );
    response
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "alive"}))
}

async fn readyz(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let snapshot = state.shared.snapshot();
    let status = state.shared.reload_status();
    let last_reload = status.last_reload.and_then(|at| at.duration_since(UNIX_EPOCH).ok()).map(|at| at.as_secs());
    Json(json!({
        "status": "ready",
        "generation": snapshot.generation,
        "fingerprint": snapshot.fingerprint,
        "lastReloadUnixSeconds": last_reload,
        "lastReloadError": status.last_error,
        "uptimeSeconds": state.started.elapsed().as_secs(),
        "clients": state.shared.hub.len(),
        "callsInFlight": state.shared.calls.count(),
    }))
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn secrets_compare_exactly() {
        assert!(same(b"s3cret", b"s3cret"));
        assert!(!same(b"s3cret", b"s3creT"));
        assert!(!same(b"s3cret", b"s3cret!"));
    }
}
