//! MCP over Streamable HTTP, for running carte as a service: rmcp's
//! Streamable HTTP service at `/mcp` behind axum, plus `/healthz`, `/readyz`
//! and `/metrics`.
//!
//! - [`bind`]: resolving `--http HOST:PORT` and listening on every address;
//! - [`listener`]: accepting connections, capped, with header and idle timeouts;
//! - [`guard`]: the `Host`/`Origin` checks and reading the bearer token;
//! - [`authorize`]: who may use `/mcp` (the static token, OAuth tokens and
//!   their scopes) and the Protected Resource Metadata;
//! - [`oauth`]: verifying OAuth 2.1 access tokens (`--oauth-issuer`) against
//!   the issuer's keys;
//! - [`status`]: `/healthz`, `/readyz` and `/metrics`;
//! - [`rate_limit`]: 429 for a `tools/call` past the catalog's `rateLimit`;
//! - [`session_store`]: legacy sessions kept in the replicas' database (`--state`);
//! - [`sessions`]: legacy sessions, capped, expiring when idle, one GET stream each
//!   (with `--state`, also kept in the replicas' database and restored from there).
//!
//! Every request to `/mcp`, `/readyz` and `/metrics` passes the `Host` and `Origin`
//! checks (loopback names by default, more by flag; 400 when malformed or
//! ambiguous, 403 when foreign); `/mcp` then needs the bearer token when one
//! is configured (401 with `WWW-Authenticate`, compared in constant time,
//! never logged), or a verified OAuth access token with `--oauth-issuer`
//! (and, for `tools/call`, the tool's scopes: 403 without), and `/readyz`
//! shows its details only with it. Allowed
//! origins get CORS on `/mcp`. `/healthz` is open, for probes. Legacy clients
//! get sessions (`Mcp-Session-Id`, the GET SSE stream, DELETE); 2026-07-28
//! clients are served statelessly and listen on `subscriptions/listen`
//! streams. Sessions and listen streams join the hub like a stdio client does.
//! `/mcp/{toolset}` is the same endpoint for the clients of one toolset of
//! the catalog (404 for a name the current catalog has no toolset for).
//!
//! Shutdown: stop accepting connections, let tool calls in flight finish
//! (bounded), then close every session and stream.

mod authorize;
pub mod bind;
pub mod guard;
pub mod listener;
pub mod oauth;
mod rate_limit;
pub mod session_store;
pub mod sessions;
mod status;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower_http::cors::{AllowOrigin, CorsLayer};

use self::authorize::{authorize, resource_metadata};
use self::guard::Access;
use self::sessions::{Refusal, Sessions};
use self::status::{healthz, metrics, readyz};
use super::in_flight::{Guard, InFlight};
use super::{Handler, Shared};

/// How long shutdown waits for tool calls in flight before closing sessions.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How carte serves HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Where to listen: `HOST:PORT`, HOST an address or a name (see [`bind`]).
    pub addr: String,
    /// More `Host` values to accept (beyond localhost, 127.0.0.1, [::1] and the bound address).
    pub allow_hosts: Vec<String>,
    /// More `Origin` values to accept (beyond http(s)://localhost, 127.0.0.1 and [::1], any port).
    pub allow_origins: Vec<String>,
    /// The bearer token clients must send, if any.
    pub auth_token: Option<String>,
    /// OAuth access tokens clients must send, if any (with `auth_token`: either).
    pub oauth: Option<oauth::OAuthOptions>,
    /// Close a session after this long without activity (an open GET stream is activity).
    pub session_idle: Duration,
    /// Live sessions at most; a new one beyond is refused with 503.
    pub max_sessions: usize,
    /// Connections served at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Longest wait for a request's headers, and for the next request on an idle connection.
    pub header_timeout: Duration,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// More pages to serve under `/preview/` (the author's page: see
    /// `carte::preview`), behind the same `Host`/`Origin` checks.
    pub preview: Option<Router>,
}

impl HttpOptions {
    /// Defaults for the limits, listening on `addr`.
    pub fn new(addr: impl Into<String>) -> HttpOptions {
        HttpOptions {
            addr: addr.into(),
            allow_hosts: Vec::new(),
            allow_origins: Vec::new(),
            auth_token: None,
            oauth: None,
            session_idle: DEFAULT_SESSION_IDLE,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            preview: None,
        }
    }
}

/// Default idle timeout of a session.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);
/// Default cap on live sessions.
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;
/// Default cap on connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default header (and keep-alive idle) timeout.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Default largest request body.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The MCP endpoint of one toolset.
/// An MCP endpoint. Shared, not cloned, per request: rmcp's service clones
/// its whole configuration (the allowed hosts and origins) when cloned, as
/// axum and `tower::Service::call` do for each request; `handle` needs only
/// a reference.
type McpService = Arc<StreamableHttpService<Handler, Sessions>>;

struct AppState {
    shared: Arc<Shared>,
    /// How every MCP endpoint is configured (`/mcp` and each toolset's).
    config: StreamableHttpServerConfig,
    /// Each toolset's endpoint, made on its first request; only toolsets of
    /// the current catalog are kept (pruned when one is added).
    toolsets: std::sync::Mutex<std::collections::HashMap<String, McpService>>,
    token: Option<String>,
    /// Verifies OAuth access tokens, with `--oauth-issuer`.
    verifier: Option<Arc<oauth::Verifier>>,
    access: Access,
    sessions: Arc<Sessions>,
    started: Instant,
    /// POST replies still being written (listen streams are not counted: they stay open).
    replies: Arc<InFlight>,
    /// Largest request body, in bytes.
    max_body_bytes: usize,
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
    let resolved = bind::resolve(&options.addr).await?;
    let listeners = bind::bind_all(&resolved.addrs).await?;
    let mut locals = Vec::with_capacity(listeners.len());
    for listener in &listeners {
        locals.push(listener.local_addr()?);
    }
    let sessions_closed = CancellationToken::new();
    let replies = Arc::new(InFlight::default());
    let mut sessions = Sessions::new(options.max_sessions, options.session_idle);
    if let Some(replicas) = &shared.replicas {
        sessions = sessions.shared_in(Arc::new(session_store::PgSessions::new(Arc::clone(replicas))));
        tokio::spawn(Arc::clone(replicas).listen(shared.clone(), sessions_closed.clone()));
    }
    let sessions = Arc::new(sessions);
    let app = router(
        shared.clone(),
        &options,
        (&locals, resolved.name.as_deref()),
        sessions.clone(),
        sessions_closed.clone(),
        replies.clone(),
    )?;
    tokio::spawn(sessions.expire_idle(sessions_closed.clone()));
    for local in &locals {
        tracing::info!("serving MCP at http://{local}/mcp");
    }

    let stop_accepting = CancellationToken::new();
    let limits = listener::Limits { max_connections: options.max_connections, header_timeout: options.header_timeout };
    let server = tokio::spawn(listener::serve(listeners, app, limits, stop_accepting.clone()));
    shutdown.await;
    tracing::info!("shutting down: finishing calls in flight");
    stop_accepting.cancel();
    if tokio::time::timeout(SHUTDOWN_GRACE, shared.calls.idle()).await.is_err() {
        tracing::warn!("tool calls still running after {SHUTDOWN_GRACE:?}; closing anyway");
    }
    // Lets the last replies reach their clients, then ends every session and stream.
    if tokio::time::timeout(Duration::from_secs(2), replies.idle()).await.is_err() {
        tracing::warn!("replies still being written after 2s; closing anyway");
    }
    sessions_closed.cancel();
    match tokio::time::timeout(Duration::from_secs(5), server).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::warn!("HTTP server task: {err}"),
        Err(_) => tracing::warn!("connections still open after shutdown; exiting"),
    }
    Ok(())
}

/// The routes: `/mcp`, `/readyz` and `/metrics` behind the Host/Origin guard, `/mcp`
/// with CORS and the bearer token, `/healthz` open; all with the access log.
fn router(
    shared: Arc<Shared>,
    options: &HttpOptions,
    (locals, name): (&[SocketAddr], Option<&str>),
    sessions: Arc<Sessions>,
    closed: CancellationToken,
    replies: Arc<InFlight>,
) -> anyhow::Result<Router> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
    for local in locals {
        if !local.ip().is_unspecified() {
            hosts.push(local.ip().to_string());
        }
    }
    // Clients of `--http mcp.internal:8080` send `Host: mcp.internal:8080`.
    if let Some(name) = name
        && !hosts.iter().any(|host| host.eq_ignore_ascii_case(name))
    {
        hosts.push(name.to_owned());
    }
    hosts.extend(options.allow_hosts.iter().cloned());
    let mut origins: Vec<String> = Vec::new();
    for scheme in ["http", "https"] {
        for host in ["localhost", "127.0.0.1", "[::1]"] {
            origins.push(format!("{scheme}://{host}:*"));
        }
    }
    origins.extend(options.allow_origins.iter().cloned());
    let access = Access::new(&hosts, &origins)?;
    // A 2026-07-28 request whose first message is its answer is answered as
    // one JSON body; one that sends progress or logs first gets an SSE stream
    // (rmcp falls back by itself). An SSE reply costs a keep-alive timer, a
    // chunked body and a wake-up more per request.
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_json_response(true)
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_cancellation_token(closed);
    let verifier = match &options.oauth {
        Some(oauth) => {
            let verifier = Arc::new(oauth::Verifier::new(oauth.clone())?);
            tokio::spawn(Arc::clone(&verifier).prefetch());
            Some(verifier)
        }
        None => None,
    };
    if let Some(store) = sessions.store() {
        config.session_store = Some(store);
    }
    let factory_shared = shared.clone();
    let mcp: McpService = Arc::new(StreamableHttpService::new(
        move || Ok(Handler::new(factory_shared.clone())),
        sessions.clone(),
        config.clone(),
    ));
    let state = Arc::new(AppState {
        shared,
        config,
        toolsets: std::sync::Mutex::default(),
        token: options.auth_token.clone(),
        verifier: verifier.clone(),
        access: access.clone(),
        sessions,
        started: Instant::now(),
        replies,
        max_body_bytes: options.max_body_bytes,
    });
    let cors = cors(access);
    let router = Router::new()
        .route("/mcp", axum::routing::any(move |request: Request| serve_mcp(mcp.clone(), request)))
        .route("/mcp/{toolset}", axum::routing::any(toolset_mcp))
        .layer(axum::middleware::from_fn_with_state(state.clone(), mcp_answers))
        .layer(axum::middleware::from_fn_with_state(state.clone(), rate_limit::rate_limit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), authorize))
        .layer(cors)
        .layer(axum::middleware::from_fn(allow_param_headers))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics));
    let router = match &options.preview {
        Some(preview) => router.nest_service("/preview", preview.clone()),
        None => router,
    };
    let router =
        router.layer(axum::middleware::from_fn_with_state(state.clone(), check_access)).route("/healthz", get(healthz));
    // Open to anyone, like `/healthz`: what a client needs to get a token.
    let router = if verifier.is_some() {
        router
            .route("/.well-known/oauth-protected-resource", get(resource_metadata))
            .route("/.well-known/oauth-protected-resource/{*path}", get(resource_metadata))
    } else {
        router
    };
    Ok(router
        .layer(axum::middleware::from_fn(access_log))
        .layer(axum::middleware::from_fn_with_state(options.header_timeout, body_deadline))
        .with_state(state))
}

/// Every request body gets a deadline (see [`listener::Deadline`]): the
/// header timeout, then a minimum rate, so a slow body cannot hold a
/// connection slot for as long as it likes.
async fn body_deadline(State(grace): State<Duration>, request: Request, next: Next) -> Response {
    let request = request.map(|body| axum::body::Body::new(listener::Deadline::new(body, grace)));
    next.run(request).await
}

/// `/mcp/{toolset}`: the MCP endpoint of one toolset of the current
/// catalog, whose clients see and call only its tools (sessions and
/// stateless requests alike: each handler is bound to the toolset); a name
/// the catalog has no toolset for is 404 with a JSON body naming those it has.
async fn toolset_mcp(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(name): axum::extract::Path<String>,
    request: Request,
) -> Response {
    let snapshot = state.shared.snapshot();
    let toolsets = &snapshot.catalog.toolsets;
    if !toolsets.contains_key(&name) {
        let error = super::snapshot::unknown_toolset(&snapshot.catalog, &name);
        let there: Vec<&String> = toolsets.keys().collect();
        return (StatusCode::NOT_FOUND, Json(json!({ "error": error.message, "toolsets": there }))).into_response();
    }
    let service = {
        let mut services = crate::sync::lock(&state.toolsets);
        if !services.contains_key(&name) {
            services.retain(|kept, _| toolsets.contains_key(kept));
            let (shared, toolset): (_, Arc<str>) = (state.shared.clone(), Arc::from(name.as_str()));
            let factory =
                move || Ok(Handler::of_toolset(shared.clone(), Some(toolset.clone()), CancellationToken::new()));
            services.insert(
                name.clone(),
                Arc::new(StreamableHttpService::new(factory, state.sessions.clone(), state.config.clone())),
            );
        }
        services.get(&name).cloned()
    };
    let Some(service) = service else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": "internal: the toolset's endpoint is gone" })),
        )
            .into_response();
    };
    serve_mcp(service, request).await
}

/// One request to an MCP endpoint.
async fn serve_mcp(service: McpService, request: Request) -> Response {
    service.handle(request).await.into_response()
}

/// CORS for the allowed origins (echoed back, never `*`): what a browser
/// client needs to send MCP's headers and read the session id.
fn cors(access: Access) -> CorsLayer {
    let allowed = move |origin: &HeaderValue, _: &axum::http::request::Parts| {
        origin.to_str().is_ok_and(|origin| access.origin_allowed(origin))
    };
    let names = |names: &[&'static str]| names.iter().map(|name| HeaderName::from_static(name)).collect::<Vec<_>>();
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(allowed))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers(names(&[
            "authorization",
            "content-type",
            "accept",
            "mcp-session-id",
            "mcp-protocol-version",
            "mcp-method",
            "mcp-name",
            "last-event-id",
        ]))
        .expose_headers(names(&["mcp-session-id", "www-authenticate"]))
        .max_age(Duration::from_secs(3600))
}

/// What SEP-2243 headers carrying a tool's arguments start with.
const PARAM_HEADER_PREFIX: &str = "mcp-param-";

/// Allows, in a CORS preflight from an allowed origin, the `Mcp-Param-*`
/// headers it asks for, besides [`cors`]'s fixed list: their names come from
/// the catalog's `x-mcp-header` marks, which a reload may change, and
/// tower-http's list cannot hold a prefix. Other requested headers stay as
/// [`cors`] decides.
async fn allow_param_headers(request: Request, next: Next) -> Response {
    let asked: Vec<HeaderName> = if request.method() == Method::OPTIONS {
        request
            .headers()
            .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .filter(|name| {
                name.len() > PARAM_HEADER_PREFIX.len()
                    && name.as_bytes()[..PARAM_HEADER_PREFIX.len()].eq_ignore_ascii_case(PARAM_HEADER_PREFIX.as_bytes())
            })
            .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
            .collect()
    } else {
        Vec::new()
    };
    let mut response = next.run(request).await;
    if asked.is_empty() || !response.headers().contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN) {
        return response;
    }
    let mut allowed: Vec<String> = response
        .headers()
        .get(header::ACCESS_CONTROL_ALLOW_HEADERS)
        .and_then(|value| value.to_str().ok())
        .map(|value| vec![value.to_owned()])
        .unwrap_or_default();
    allowed.extend(asked.iter().map(|name| name.as_str().to_owned()));
    if let Ok(value) = HeaderValue::from_str(&allowed.join(",")) {
        response.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_HEADERS, value);
    }
    response
}

/// Refuses a request whose `Host` or `Origin` is malformed, ambiguous or foreign.
async fn check_access(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    match state.access.check(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(denied) => {
            tracing::debug!("refused {} {}: {}", request.method(), request.uri().path(), denied.reason);
            (denied.status, Json(json!({"error": denied.reason}))).into_response()
        }
    }
}

/// What carte adds to rmcp's answers on the MCP endpoints, in one layer
/// (each layer clones the rest of the router per request): the JSON-RPC
/// error for a body rmcp cannot read ([`explain_unreadable`]), the count of
/// replies in progress (POSTs, not listen streams: see `status`), and the
/// answer to what the session manager refused ([`refusal_answer`]).
async fn mcp_answers(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let counted = request.method() == axum::http::Method::POST
        && request.headers().get("mcp-method").is_none_or(|method| method != "subscriptions/listen");
    let delete = request.method() == axum::http::Method::DELETE;
    let (mut response, refusal) = sessions::watch(explain_unreadable(&state, request, next)).await;
    if let Some(refusal) = refusal {
        // A session made but not stored is closed here too: its client
        // never hears of it.
        if refusal == Refusal::Unstored
            && let Some(id) = response.headers().get("mcp-session-id").and_then(|id| id.to_str().ok())
        {
            state.sessions.close(id).await;
        }
        return refusal_answer(refusal);
    }
    // rmcp answers a closed session 202 Accepted; clients (the Python SDK
    // warns on anything else) expect 200 for a DELETE that was carried out.
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    if !counted {
        return response;
    }
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, axum::body::Body::new(Counted { body, _reply: state.replies.start() }))
}

/// Answers what the session manager refused: 503 when the server is at its
/// session limit, 409 for a second GET stream on a session.
fn refusal_answer(refusal: Refusal) -> Response {
    let (status, message) = match refusal {
        Refusal::Full(limit) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the server is at its session limit ({limit} sessions); try again later"),
        ),
        Refusal::StreamOpen => {
            (StatusCode::CONFLICT, "this session already has an open GET stream; close it first".to_owned())
        }
        Refusal::Unstored => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the session could not be stored for the other replicas (the state database did not answer); try again"
                .to_owned(),
        ),
    };
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": message}});
    let mut response = (status, Json(body)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    response
}

/// rmcp answers a JSON body it cannot read as a message with a plain-text
/// 415; a JSON-RPC client gets the JSON-RPC error stdio would answer
/// instead (HTTP 400; a malformed notification: 202). The body is buffered
/// (rmcp buffers it anyway) so that it can be read again when rmcp refuses it.
async fn explain_unreadable(state: &AppState, request: Request, next: Next) -> Response {
    let json = request.headers().get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).is_some_and(|value| {
        value.split(';').next().is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
    });
    if request.method() != Method::POST || !json {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, state.max_body_bytes).await else {
        let message = format!("Payload Too Large: request body exceeds {} bytes", state.max_body_bytes);
        return (StatusCode::PAYLOAD_TOO_LARGE, message).into_response();
    };
    let response = next.run(Request::from_parts(parts, axum::body::Body::from(bytes.clone()))).await;
    if response.status() != StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return response;
    }
    let text = match super::jsonrpc::text_of(&bytes) {
        Ok(text) => text,
        Err(reply) => return (StatusCode::BAD_REQUEST, Json(reply.to_json())).into_response(),
    };
    match super::jsonrpc::read(text) {
        super::jsonrpc::Verdict::Reply(reply) => (StatusCode::BAD_REQUEST, Json(reply.to_json())).into_response(),
        super::jsonrpc::Verdict::Ignore => StatusCode::ACCEPTED.into_response(),
        // rmcp refused a message it can read: its own answer stands.
        super::jsonrpc::Verdict::Message(_) => response,
    }
}

/// One line per request at debug level (never the headers: they may carry the token).
async fn access_log(request: Request, next: Next) -> Response {
    if !tracing::enabled!(target: "carte::access", tracing::Level::DEBUG) {
        return next.run(request).await;
    }
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
