//! Rate limits over HTTP: a `tools/call` past the catalog's `rateLimit` for
//! its caller is answered 429 with `Retry-After` (and the JSON-RPC error a
//! stdio client gets, -32000 with `retryAfterMs`) before rmcp sees it. Only
//! while the catalog has a limit is a POST's body read here (up to the body
//! limit, as the OAuth check reads it); a call let through is marked
//! ([`RateCounted`]) so the handler does not count it again.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::oauth::Caller;
use crate::server::handler::call::{RateCounted, http_owner, rate_limited};

/// Counts a `tools/call` against the rate limits; 429 past one.
pub(super) async fn rate_limit(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST || !state.shared.snapshot().catalog.rate_limited {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, state.max_body_bytes).await else {
        let message = format!("Payload Too Large: request body exceeds {} bytes", state.max_body_bytes);
        return (StatusCode::PAYLOAD_TOO_LARGE, message).into_response();
    };
    let snapshot = state.shared.snapshot();
    let catalog = &snapshot.catalog;
    if let Some(call) = super::authorize::tool_call(&bytes)
        && let Some(tool) = catalog.tool(&call.name)
    {
        let modern = crate::server::http::guard::session_id(&parts.headers).is_none();
        if let Some(owner) = http_owner(modern, &parts.headers, parts.extensions.get::<Caller>()) {
            let own = (tool.name.as_str(), tool.rate_limit);
            match state.shared.limiter.take(&owner, own, catalog.server.rate_limit, Instant::now()) {
                Ok(()) => {
                    parts.extensions.insert(RateCounted);
                }
                Err(refused) => {
                    let error = rate_limited(refused);
                    let seconds = refused.retry_after.as_secs_f64().ceil().max(1.0) as u64;
                    let body = serde_json::json!({ "jsonrpc": "2.0", "id": call.id, "error": error });
                    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
                    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                    return response;
                }
            }
        }
    }
    drop(snapshot);
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await
}
