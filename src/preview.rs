//! The author's page (`carte preview CATALOG`, and `serve --http … --preview`
//! at `/preview/`): the menu as a client sees it, the diagnostics of the last
//! save (pushed to the page as the author saves: no reload button), a form
//! per tool and prompt to try it, resources to read, and the examples with
//! pass or fail.
//!
//! One page (`preview/page.html`, HTML, CSS and script in one file, built
//! into the binary: no build step, nothing fetched from elsewhere) and a
//! small JSON API beside it: `api/state`, `api/events` (server-sent events,
//! one per check), `api/call`, `api/prompt`, `api/read`. Calls run through
//! the server's own code, like `carte call`. The page answers only to local
//! names (a `Host` of localhost, 127.0.0.1 or ::1, and no foreign `Origin`),
//! so another site cannot drive it from a browser.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use crate::catalog;
use crate::diag::Diagnostic;
use crate::examples::Verdict;
use crate::server::{ListKind, Shared, Snapshot, View};
use crate::sync::lock;

/// The page, with its style and script.
const PAGE: &str = include_str!("preview/page.html");

/// Where the menu the page shows and calls comes from.
enum Menu {
    /// `carte preview`: the last valid catalog this page loaded (its
    /// databases set up, like `carte call`).
    Own(Mutex<Option<Arc<Snapshot>>>),
    /// `serve --preview`: the catalog being served.
    Served(Arc<Shared>),
}

/// What the last check of the catalog found.
#[derive(Default)]
struct Seen {
    /// How many checks ran (the page asks again when it grows).
    generation: u64,
    diagnostics: Vec<Diagnostic>,
    verdicts: Vec<Verdict>,
    /// The files it read (what to watch).
    inputs: catalog::Inputs,
}

/// The page's state: the catalog it watches and what it last saw.
pub struct Preview {
    root: PathBuf,
    menu: Menu,
    seen: Mutex<Seen>,
    checked: watch::Sender<u64>,
}

impl Preview {
    /// The page of `carte preview`, over the catalog at `root` (checked
    /// once before this returns; [`Preview::follow`] checks on every save).
    pub async fn standalone(root: &Path) -> Arc<Preview> {
        Preview::new(root, Menu::Own(Mutex::default())).await
    }

    /// The page of `serve --preview`: the menu is the one `shared` serves.
    pub async fn served(root: &Path, shared: Arc<Shared>) -> Arc<Preview> {
        Preview::new(root, Menu::Served(shared)).await
    }

    async fn new(root: &Path, menu: Menu) -> Arc<Preview> {
        let (checked, _) = watch::channel(0);
        let preview = Arc::new(Preview { root: root.to_path_buf(), menu, seen: Mutex::default(), checked });
        preview.check().await;
        preview
    }

    /// Checks the catalog again on every save, until the process ends.
    pub async fn follow(self: Arc<Self>) {
        let (changed, mut changes) = mpsc::unbounded_channel();
        let mut watch = match crate::reload::watch::Watch::new(crate::reload::Mode::Events, changed) {
            Ok(watch) => watch,
            Err(err) => {
                tracing::error!("cannot watch the catalog's files ({err}); the preview will not follow saves");
                return;
            }
        };
        let mut inputs = lock(&self.seen).inputs.clone();
        loop {
            watch.follow(&inputs);
            if !crate::reload::next_change(&mut changes, Duration::from_millis(50)).await {
                return;
            }
            inputs = self.check().await;
        }
    }

    /// Checks the catalog: its diagnostics, its examples (on scratch
    /// databases: a catalog of their own), and for `carte preview` the menu
    /// to serve. Returns the files it read (what to watch).
    async fn check(&self) -> catalog::Inputs {
        let root = self.root.clone();
        let Ok(loaded) = tokio::task::spawn_blocking(move || catalog::load(&root)).await else {
            return lock(&self.seen).inputs.clone();
        };
        let mut diagnostics = loaded.diagnostics;
        if let (Menu::Own(slot), Some(catalog)) = (&self.menu, loaded.catalog) {
            let applied = tokio::task::spawn_blocking(move || catalog.apply_setup().map(|()| catalog)).await;
            match applied {
                Ok(Ok(catalog)) => *lock(slot) = Some(Arc::new(Snapshot::new(catalog))),
                Ok(Err(failed)) => diagnostics.extend(failed),
                Err(_) => {}
            }
        }
        let verdicts = match crate::diag::has_errors(&diagnostics) {
            true => Vec::new(),
            false => crate::examples::run_at(&self.root).await.unwrap_or_default(),
        };
        let generation = {
            let mut seen = lock(&self.seen);
            seen.generation += 1;
            seen.diagnostics = diagnostics;
            seen.verdicts = verdicts;
            seen.inputs = loaded.inputs.clone();
            seen.generation
        };
        self.checked.send_replace(generation);
        loaded.inputs
    }

    /// The menu being shown, if the catalog ever loaded.
    fn snapshot(&self) -> Option<Arc<Snapshot>> {
        match &self.menu {
            Menu::Own(slot) => lock(slot).clone(),
            Menu::Served(shared) => Some(shared.snapshot()),
        }
    }

    /// The page and its API; `base` is where it is mounted (`/` or `/preview/`).
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/", get(page))
            .route("/api/state", get(state))
            .route("/api/events", get(events))
            .route("/api/call", post(call))
            .route("/api/prompt", post(prompt))
            .route("/api/read", post(read))
            .layer(axum::middleware::from_fn(local_only))
            .with_state(self)
    }
}

/// Refuses a request that is not from a page on this machine: a `Host`
/// other than localhost, 127.0.0.1 or ::1 (DNS rebinding), or an `Origin`
/// of another site.
async fn local_only(request: Request, next: Next) -> Response {
    let headers = request.headers();
    let local = |authority: &str| {
        let host = match authority.rsplit_once(':') {
            Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
            _ => authority,
        };
        matches!(host, "localhost" | "127.0.0.1" | "[::1]")
    };
    let host_ok = headers.get(header::HOST).and_then(|v| v.to_str().ok()).is_some_and(local);
    let origin_ok = match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(origin) => origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")).is_some_and(local),
    };
    if !host_ok || !origin_ok {
        return (StatusCode::FORBIDDEN, "the preview answers only to pages on this machine (localhost)")
            .into_response();
    }
    next.run(request).await
}

async fn page() -> Html<&'static str> {
    Html(PAGE)
}

/// Everything the page shows: the catalog, its diagnostics, its menu and
/// its examples.
async fn state(State(preview): State<Arc<Preview>>) -> Response {
    let (generation, diagnostics, examples) = {
        let seen = lock(&preview.seen);
        let diagnostics: Vec<Value> = seen
            .diagnostics
            .iter()
            .map(|d| {
                let mut value = serde_json::to_value(d).unwrap_or_default();
                // The frame with the underline, without the count that ends a report.
                let text = crate::diag::render_human(std::slice::from_ref(d));
                value["text"] = Value::String(text.split("\n\n").next().unwrap_or_default().to_owned());
                value
            })
            .collect();
        let examples: Vec<Value> = seen.verdicts.iter().map(Verdict::to_json).collect();
        (seen.generation, diagnostics, examples)
    };
    let menu = match preview.snapshot() {
        None => Value::Null,
        Some(snapshot) => {
            let view = View::all(snapshot);
            let mut menu = Map::new();
            for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources, ListKind::Templates] {
                if let Value::Object(list) = view.list_json(kind) {
                    menu.extend(list.into_iter().filter(|(key, _)| !key.starts_with('_')));
                }
            }
            Value::Object(menu)
        }
    };
    let errors = diagnostics.iter().filter(|d| d["severity"] == "error").count();
    redacted_json(&json!({
        "catalog": preview.root.display().to_string(),
        "generation": generation,
        "valid": errors == 0,
        "diagnostics": diagnostics,
        "menu": menu,
        "examples": examples,
    }))
}

/// `value` as a JSON response, the environment's secrets hidden (as
/// everything carte prints: see `secret::redact`).
fn redacted_json(value: &Value) -> Response {
    let text = serde_json::to_string(value).unwrap_or_default();
    ([(header::CONTENT_TYPE, "application/json")], crate::secret::redact(&text).into_owned()).into_response()
}

/// One `checked` event per check, so the page asks for the state again.
async fn events(State(preview): State<Arc<Preview>>) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let receiver = preview.checked.subscribe();
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.changed().await.ok()?;
        let generation = *receiver.borrow_and_update();
        Some((Ok(Event::default().event("checked").data(generation.to_string())), receiver))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// Why a call from the page is not run.
enum Refused {
    /// The request is not what the page sends.
    Request(StatusCode, &'static str),
    /// The catalog never loaded: there is nothing to call.
    NoMenu,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::Request(status, why) => (status, why).into_response(),
            Refused::NoMenu => redacted_json(&json!({ "error": {
                "code": -32603,
                "message": "the catalog has errors and never loaded: fix them first",
            } })),
        }
    }
}

/// A call's JSON body and the menu it calls, or why it is refused.
fn call_of(preview: &Preview, headers: &HeaderMap, body: &str) -> Result<(Map<String, Value>, Arc<Snapshot>), Refused> {
    let json_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json_type {
        return Err(Refused::Request(StatusCode::UNSUPPORTED_MEDIA_TYPE, "send JSON (Content-Type: application/json)"));
    }
    let Ok(Value::Object(request)) = serde_json::from_str(body) else {
        return Err(Refused::Request(StatusCode::BAD_REQUEST, "the body must be a JSON object"));
    };
    let snapshot = preview.snapshot().ok_or(Refused::NoMenu)?;
    Ok((request, snapshot))
}

/// What an answer is to the page: the result, or `{error: {code, message}}`.
fn answered(answer: crate::server::Answer) -> Response {
    match answer {
        Ok(result) => redacted_json(&json!({ "result": result })),
        Err(err) => redacted_json(&json!({ "error": { "code": err.code, "message": err.message } })),
    }
}

/// The arguments of a call (an object, or none), and the text under `key`.
fn parts(request: &Map<String, Value>, key: &str) -> (String, Option<Map<String, Value>>) {
    let arguments = match request.get("arguments") {
        Some(Value::Object(arguments)) => Some(arguments.clone()),
        _ => None,
    };
    (request.get(key).and_then(Value::as_str).unwrap_or_default().to_owned(), arguments)
}

async fn call(State(preview): State<Arc<Preview>>, headers: HeaderMap, text: String) -> Result<Response, Refused> {
    let (request, snapshot) = call_of(&preview, &headers, &text)?;
    let (name, arguments) = parts(&request, "name");
    let view = View::all(snapshot);
    Ok(answered(view.call_tool_json(&name, arguments, &crate::run::steps::NoClient::default()).await))
}

async fn prompt(State(preview): State<Arc<Preview>>, headers: HeaderMap, text: String) -> Result<Response, Refused> {
    let (request, snapshot) = call_of(&preview, &headers, &text)?;
    let (name, arguments) = parts(&request, "name");
    Ok(answered(snapshot.get_prompt_json(&name, arguments, &crate::run::steps::NoClient::default()).await))
}

async fn read(State(preview): State<Arc<Preview>>, headers: HeaderMap, text: String) -> Result<Response, Refused> {
    let (request, snapshot) = call_of(&preview, &headers, &text)?;
    let (uri, _) = parts(&request, "uri");
    Ok(answered(snapshot.read_resource_live_json(&uri).await))
}
