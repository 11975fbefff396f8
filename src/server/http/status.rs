//! What probes and scrapers ask: `/healthz` (open), `/readyz` (behind the
//! Host/Origin guard; its details only with a token) and `/metrics`.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;
use super::authorize::{authorized, unauthorized};
use super::guard;

/// `/metrics`: the Prometheus text exposition (behind the Host/Origin
/// guard, not the bearer token: scrapers rarely send one).
pub(super) async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let current = crate::metrics::Current {
        calls_in_flight: state.shared.calls.count(),
        clients: state.shared.hub.len(),
        generation: state.shared.snapshot().generation,
    };
    match crate::metrics::encode(current) {
        Ok(text) => ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response(),
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({"error": format!("encoding metrics: {err}")})))
            .into_response(),
    }
}

pub(super) async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "alive"}))
}

/// The catalog being served: status and counts for anyone past the Host and
/// Origin checks; the details (fingerprint, reload times and errors) only
/// with the bearer token, when one is configured.
pub(super) async fn readyz(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let snapshot = state.shared.snapshot();
    let mut ready = json!({
        "status": "ready",
        "generation": snapshot.generation,
        "clients": state.shared.hub.len(),
        "sessions": state.sessions.len(),
        "callsInFlight": state.shared.calls.count(),
    });
    let detailed = match guard::bearer(request.headers()) {
        _ if state.token.is_none() && state.verifier.is_none() => true,
        Ok(None) => false,
        _ if state.token.is_some() && authorized(&state, &request) => true,
        Ok(Some(token)) if let Some(verifier) = &state.verifier => verifier.verify(token).await.is_ok(),
        // A wrong static token is refused, as on `/mcp`.
        _ if state.verifier.is_none() => return unauthorized(),
        _ => false,
    };
    // Not ready while an entry of an effect's block (a PostgreSQL database)
    // does not answer: `unreachableDatabases` names them, `databaseErrors`
    // says why (with the token).
    let down = snapshot.catalog.unready().await;
    let mut unready = !down.is_empty();
    if unready {
        ready["status"] = json!("unready");
    }
    for entry in &down {
        let names = &mut ready[format!("unreachable{}", capitalized(entry.block))];
        if names.is_null() {
            *names = json!([]);
        }
        if let Some(names) = names.as_array_mut() {
            names.push(json!(entry.name));
        }
        if detailed {
            ready[format!("{}Errors", entry.entry)][&entry.name] = json!(entry.reason);
        }
    }
    // Nor while the replicas' state database does not answer (`--state`).
    if let Some(replicas) = &state.shared.replicas
        && let Err(reason) = replicas.ready().await
    {
        unready = true;
        ready["status"] = json!("unready");
        ready["stateDatabase"] = json!("unreachable");
        if detailed {
            ready["stateDatabaseError"] = json!(reason);
        }
    }
    if detailed {
        let status = state.shared.reload_status();
        let last_reload = status.last_reload.and_then(|at| at.duration_since(UNIX_EPOCH).ok()).map(|at| at.as_secs());
        let details = json!({
            "fingerprint": snapshot.fingerprint,
            "lastReloadUnixSeconds": last_reload,
            "lastReloadError": status.last_error,
            "uptimeSeconds": state.started.elapsed().as_secs(),
        });
        if let (Some(ready), serde_json::Value::Object(details)) = (ready.as_object_mut(), details) {
            ready.extend(details);
        }
    }
    if unready {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(ready)).into_response();
    }
    Json(ready).into_response()
}

/// `word` with its first letter upper case (`databases` → `Databases`).
fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}
