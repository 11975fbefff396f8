//! Who may use `/mcp`: the static bearer token (`--auth-token-env`), OAuth
//! access tokens (`--oauth-issuer`: 401 without a verified one, 403 for a
//! `tools/call` of a tool whose scopes the token lacks), and the Protected
//! Resource Metadata a client reads to get a token.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{AppState, guard, oauth};

/// Whether the request carries the configured token (always true without one).
pub(super) fn authorized(state: &AppState, request: &Request) -> bool {
    let Some(token) = &state.token else { return true };
    matches!(guard::bearer(request.headers()), Ok(Some(presented)) if guard::same(presented.as_bytes(), token.as_bytes()))
}

/// 401 with `WWW-Authenticate`, for a missing, wrong or malformed token.
pub(super) fn unauthorized() -> Response {
    let mut response =
        (StatusCode::UNAUTHORIZED, Json(json!({"error": "missing or wrong bearer token"}))).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"carte\""));
    response
}

/// Requires `Authorization: Bearer <token>` on `/mcp` when a token is
/// configured; with `--oauth-issuer`, a verified access token, whose
/// [`oauth::Caller`] the request then carries — or, when both are
/// configured, the static token, the operator's: every tool, no `auth`.
pub(super) async fn authorize(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    match &state.verifier {
        Some(_) if state.token.is_some() && authorized(&state, &request) => {
            in_session_of(&state, OPERATOR, request, next).await
        }
        Some(verifier) => authorize_oauth(&state, verifier, request, next).await,
        None if authorized(&state, &request) => next.run(request).await,
        None => unauthorized(),
    }
}

/// The OAuth check: 401 without a verified token; 403 for a `tools/call`
/// of a tool whose scopes the token lacks (read from the body, which is
/// buffered, up to the body limit; the handler refuses such a call too,
/// with the same JSON-RPC error, for whatever reaches it another way);
/// then the session check of [`in_session_of`].
async fn authorize_oauth(state: &AppState, verifier: &oauth::Verifier, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let caller = match guard::bearer(request.headers()) {
        Ok(Some(token)) => verifier.verify(token).await,
        Ok(None) => return verifier.unauthorized(&path, None),
        Err(malformed) => Err(oauth::Invalid(malformed.to_string())),
    };
    let caller = match caller {
        Ok(caller) => caller,
        Err(invalid) => {
            tracing::debug!("refused a token: {invalid}");
            return verifier.unauthorized(&path, Some(&invalid));
        }
    };
    let owner = caller.owner.clone();
    let (mut parts, body) = request.into_parts();
    let body = if parts.method == Method::POST {
        let Ok(bytes) = axum::body::to_bytes(body, state.max_body_bytes).await else {
            let message = format!("Payload Too Large: request body exceeds {} bytes", state.max_body_bytes);
            return (StatusCode::PAYLOAD_TOO_LARGE, message).into_response();
        };
        // The endpoint's view: at `/mcp/{toolset}`, only that toolset's tools
        // (another is unknown there, as rmcp will say; so is every tool of a
        // toolset the catalog lacks).
        let toolset: Option<Arc<str>> = path.strip_prefix("/mcp/").map(Arc::from);
        let view = crate::server::View::of(state.shared.snapshot(), toolset.as_ref()).ok();
        if let Some(call) = tool_call(&bytes)
            && let Some(tool) = view.as_ref().and_then(|view| view.tool(&call.name))
        {
            let missing = caller.missing(&tool.scopes);
            if !missing.is_empty() {
                return verifier.insufficient_scope(&path, call.id, &call.name, &tool.scopes, &missing);
            }
        }
        axum::body::Body::from(bytes)
    } else {
        body
    };
    parts.extensions.insert(caller);
    in_session_of(state, &owner, Request::from_parts(parts, body), next).await
}

/// Who a session started with the static token (beside OAuth) belongs to.
const OPERATOR: &str = "operator";

/// Runs `request` for `owner`: a legacy session belongs to the caller who
/// started it, and another caller naming its `Mcp-Session-Id` gets 404, as
/// for a session that does not exist.
async fn in_session_of(state: &AppState, owner: &str, request: Request, next: Next) -> Response {
    let session = guard::session_id(request.headers()).map(str::to_owned);
    if let Some(id) = &session
        && !state.sessions.may_use(id, owner)
    {
        tracing::debug!("refused a session to a caller who did not start it");
        return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
    }
    let response = next.run(request).await;
    // A session this request started (`initialize`) is the caller's; so is
    // one another replica started, restored here for its first caller.
    let served = guard::session_id(response.headers());
    if let Some(id) = session.as_deref().or(served)
        && response.status().is_success()
    {
        state.sessions.bind(id, owner);
    }
    response
}

/// A `tools/call` request: its id and the tool's name.
pub(super) struct ToolCall {
    pub(super) id: serde_json::Value,
    pub(super) name: String,
}

/// The `tools/call` a JSON-RPC body holds, if it is one.
pub(super) fn tool_call(body: &[u8]) -> Option<ToolCall> {
    #[derive(serde::Deserialize)]
    struct Message {
        #[serde(default)]
        id: serde_json::Value,
        method: String,
        params: Params,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        name: String,
    }
    let message: Message = serde_json::from_slice(body).ok()?;
    (message.method == "tools/call").then_some(ToolCall { id: message.id, name: message.params.name })
}

/// RFC 9728's Protected Resource Metadata of `/mcp` (also at
/// `/.well-known/oauth-protected-resource/mcp`) and of each toolset's
/// endpoint (`…/mcp/{toolset}`): the issuer, and every scope the current
/// catalog's tools ask for. 404 for another path.
pub(super) async fn resource_metadata(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let Some(verifier) = &state.verifier else { return StatusCode::NOT_FOUND.into_response() };
    let path = request.uri().path().trim_start_matches("/.well-known/oauth-protected-resource");
    let snapshot = state.shared.snapshot();
    let endpoint = path.is_empty()
        || path == "/mcp"
        || path.strip_prefix("/mcp/").is_some_and(|toolset| snapshot.catalog.toolsets.contains_key(toolset));
    if !endpoint {
        return (StatusCode::NOT_FOUND, Json(json!({ "error": "no MCP endpoint at this path" }))).into_response();
    }
    let mut scopes: Vec<String> = snapshot.catalog.tools.iter().flat_map(|tool| tool.scopes.iter().cloned()).collect();
    scopes.sort_unstable();
    scopes.dedup();
    Json(verifier.metadata(path, &scopes)).into_response()
}
