//! The `http` effect end to end: the real binary against a real upstream
//! started here (axum on 127.0.0.1:0, and a raw socket that never answers),
//! asserting what the upstream received: percent-encoded paths (`../`
//! stays in its segment), form-encoded queries, typed JSON bodies, headers;
//! and what the caller gets: result variables, non-OK statuses, retries,
//! timeouts, the size cap, cancellation, an upstream that is down.

use crate::common;

use std::collections::HashMap;
use std::io::Read as _;
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use common::{Server, TIMEOUT, TempDir, text};
use serde_json::{Value, json};

/// A request as the upstream received it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    /// Path and query exactly as sent (still percent-encoded).
    uri: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
    /// The client's address: the same one means the same connection.
    peer: SocketAddr,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// An HTTP upstream on 127.0.0.1, recording every request.
struct Upstream {
    addr: SocketAddr,
    seen: Log,
    _server: common::http::LocalServer,
}

impl Upstream {
    fn start() -> Upstream {
        let seen: Log = Arc::default();
        let app = axum::Router::new().fallback(answer).with_state(seen.clone());
        let server = common::http::LocalServer::bind().serve(app);
        Upstream { addr: server.addr, seen, _server: server }
    }

    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests whose path starts with `prefix`.
    fn seen(&self, prefix: &str) -> Vec<Seen> {
        self.seen.lock().unwrap().iter().filter(|s| s.uri.starts_with(prefix)).cloned().collect()
    }
}

async fn answer(
    State(log): State<Log>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default().to_vec();
    let uri = parts.uri.path_and_query().map(|pq| pq.as_str().to_owned()).unwrap_or_default();
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    let path = parts.uri.path().to_owned();
    let earlier = {
        let mut log = log.lock().unwrap();
        let earlier = log.iter().filter(|s| s.uri.split('?').next() == Some(path.as_str())).count();
        log.push(Seen { method: parts.method.to_string(), uri: uri.clone(), headers, body, peer });
        earlier
    };
    let json = |status: StatusCode, value: Value| {
        (status, [("content-type", "application/json")], value.to_string()).into_response()
    };
    match path.as_str() {
        // 503 twice, then an answer.
        "/api/flaky" if earlier < 2 => (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response(),
        "/api/flaky" => (StatusCode::OK, format!("answered after {earlier} tries")).into_response(),
        // Busy for an hour: longer than carte waits.
        "/api/later" => (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", "3600")], "come back later").into_response(),
        "/api/missing" => json(StatusCode::NOT_FOUND, json!({"error": "no such note", "pad": "x".repeat(5000)})),
        "/api/big" => (StatusCode::OK, "y".repeat(3000)).into_response(),
        "/api/items" => json(StatusCode::OK, json!({"items": [{"id": 1, "title": "one"}, {"id": 2, "title": "two"}]})),
        _ => json(StatusCode::OK, json!({"method": parts.method.as_str(), "uri": uri})),
    }
}

/// A listener that reads requests and never answers: each connection it
/// accepts is reported on `accepted`, and again on `closed` once the client
/// closes it.
struct Silent {
    addr: SocketAddr,
    accepted: Receiver<()>,
    closed: Receiver<()>,
}

impl Silent {
    fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("address");
        let (accepted_tx, accepted) = channel();
        let (closed_tx, closed) = channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                let (accepted_tx, closed_tx) = (accepted_tx.clone(), closed_tx.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let mut announced = false;
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => {
                                let _ = closed_tx.send(());
                                break;
                            }
                            Ok(_) if !announced => {
                                announced = true;
                                let _ = accepted_tx.send(());
                            }
                            Ok(_) => {}
                        }
                    }
                });
            }
        });
        Silent { addr, accepted, closed }
    }
}

/// A catalog over the upstream at `$NOTES_API` (api `notes`, base path `/api`), `silent`
/// (api `silent`) and a port nobody listens on (api `down`).
fn catalog(dir: &TempDir, silent: &Silent, down: SocketAddr) -> std::path::PathBuf {
    let yaml = format!(
        r#"server: {{ name: notes, version: 1.0.0 }}
apis:
  notes:
    baseUrl: ${{NOTES_API}}/api
    headers: {{ Authorization: "Bearer ${{NOTES_TOKEN}}", Accept: application/json }}
    retry: {{ attempts: 3, on: [503], backoff: 10ms }}
  silent:
    baseUrl: http://{silent}
    timeout: 10m
  down:
    baseUrl: http://{down}
tools:
  - name: get_file
    description: Reads a file of a user.
    inputSchema:
      type: object
      properties: {{ user: {{ type: string }}, q: {{ type: string }}, tag: {{ type: string }}, tags: {{ type: array }} }}
      required: [user]
    run:
      http:
        api: notes
        path: "/users/{{{{ user }}}}/files"
        query: {{ q: "{{{{ q }}}}", tag: "{{{{ tag }}}}", tags: "{{{{ tags }}}}", per_page: 20, raw: true }}
  - name: add_note
    description: Adds a note.
    inputSchema:
      type: object
      properties: {{ title: {{ type: string }}, stars: {{ type: integer }}, secret: {{ type: string }} }}
      required: [title, stars, secret]
    run:
      http:
        api: notes
        method: POST
        path: /notes
        headers: {{ X-Secret: "{{{{ secret }}}}", X-Source: carte }}
        json: {{ title: "{{{{ title }}}}", stars: "{{{{ stars }}}}", tags: [fixed, "{{{{ title | upper }}}}"], label: "note: {{{{ title }}}}", n: 1 }}
  - name: missing
    description: A note that is not there.
    run: {{ http: {{ api: notes, path: /missing }} }}
  - name: missing_ok
    description: A note that may not be there.
    run:
      http: {{ api: notes, path: /missing, okStatus: [200, 404] }}
      text: "{{{{ status }}}} {{{{ json.error }}}}"
  - name: flaky
    description: Busy twice.
    run: {{ http: {{ api: notes, path: /flaky }}, text: "{{{{ body }}}}" }}
  - name: flaky_post
    description: Busy twice, posted.
    run: {{ http: {{ api: notes, method: POST, path: /flaky, body: "x", headers: {{ Content-Type: text/plain }} }}, text: "{{{{ body }}}}" }}
  - name: later
    description: Busy for an hour.
    run: {{ http: {{ api: notes, path: /later }} }}
  - name: big
    description: A big answer.
    run: {{ http: {{ api: notes, path: /big, maxBytes: 1000 }}, text: "{{{{ body | length }}}}" }}
  - name: items
    description: Items.
    run:
      http: {{ api: notes, path: /items }}
      text: "{{{{ status }}}} {{{{ headers['content-type'] }}}} {{{{ json['items'] | length }}}} {{{{ json | jq('[.items[].id]') }}}} {{{{ json['items'][1].title }}}}"
  - name: items_value
    description: Items as the effect's value.
    run: {{ http: {{ api: notes, path: /items }} }}
  - name: hang
    description: Never answered.
    run: {{ http: {{ api: silent, path: /hang, timeout: 300ms }} }}
  - name: hang_long
    description: Never answered, for an hour.
    run: {{ http: {{ api: silent, path: /hang }} }}
  - name: unreachable
    description: Nobody listens.
    run: {{ http: {{ api: down, path: /x }} }}
"#,
        silent = silent.addr,
        down = down,
    );
    dir.write("catalog.yaml", &yaml)
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address")
}

struct Setup {
    upstream: Upstream,
    silent: Silent,
    server: Server,
    _dir: TempDir,
}

fn setup(name: &str) -> Setup {
    let dir = TempDir::new(name);
    let upstream = Upstream::start();
    let silent = Silent::start();
    let path = catalog(&dir, &silent, closed_port());
    let server =
        Server::initialized(&path, &[("NOTES_API", upstream.base().as_str()), ("NOTES_TOKEN", "s3cr3t-token")]);
    Setup { upstream, silent, server, _dir: dir }
}

fn call(server: &mut Server, name: &str, arguments: Value) -> Value {
    server.result("tools/call", json!({"name": name, "arguments": arguments}))
}

#[test]
fn path_values_are_percent_encoded_in_their_segment_and_queries_form_encoded() {
    let mut s = setup("http-get");
    let result =
        call(&mut s.server, "get_file", json!({"user": "../../admin", "q": "a&b=c d/é", "tags": ["x", "y z"]}));
    assert_eq!(result["isError"], false, "{result}");
    let seen = s.upstream.seen("/api/users/");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].method, "GET");
    assert_eq!(
        seen[0].uri, "/api/users/..%2F..%2Fadmin/files?q=a%26b%3Dc+d%2F%C3%A9&tags=x&tags=y+z&per_page=20&raw=true",
        "`../` stays encoded inside the segment; the empty `tag` is left out"
    );
    // The effect's value is the JSON answer.
    let answered: Value = serde_json::from_str(&text(&result)).expect("JSON");
    assert_eq!(answered["uri"], seen[0].uri.as_str());
    // A value that is a whole `..` segment is refused before anything is sent.
    for user in ["..", "."] {
        let result = call(&mut s.server, "get_file", json!({"user": user}));
        assert_eq!(result["isError"], true, "{result}");
        assert!(text(&result).contains("path left the api"), "{result}");
    }
    assert_eq!(s.upstream.seen("/api").len(), 1, "nothing else was sent");
}

#[test]
fn a_json_body_keeps_its_types_and_headers_arrive() {
    let mut s = setup("http-post");
    let result = call(&mut s.server, "add_note", json!({"title": "milk", "stars": 3, "secret": "hush"}));
    assert_eq!(result["isError"], false, "{result}");
    let seen = s.upstream.seen("/api/notes");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    let body: Value = serde_json::from_slice(&seen[0].body).expect("a JSON body");
    assert_eq!(body, json!({"title": "milk", "stars": 3, "tags": ["fixed", "MILK"], "label": "note: milk", "n": 1}));
    let header = |name: &str| seen[0].headers.get(name).map(String::as_str);
    assert_eq!(header("content-type"), Some("application/json"));
    assert_eq!(header("authorization"), Some("Bearer s3cr3t-token"), "the api's headers, `${{VAR}}` expanded");
    assert_eq!(header("accept"), Some("application/json"));
    assert_eq!(header("x-secret"), Some("hush"));
    assert_eq!(header("x-source"), Some("carte"));
    // A header value with a line break is refused, not sent.
    let result = call(&mut s.server, "add_note", json!({"title": "a", "stars": 1, "secret": "x\r\nX-Evil: 1"}));
    assert_eq!(result["isError"], true, "{result}");
    assert!(text(&result).contains("header `x-secret`"), "{result}");
    assert_eq!(s.upstream.seen("/api/notes").len(), 1);
}

#[test]
fn a_status_that_is_not_ok_is_an_error_with_the_status_and_the_start_of_the_body() {
    let mut s = setup("http-status");
    let result = call(&mut s.server, "missing", json!({}));
    assert_eq!(result["isError"], true, "{result}");
    let message = text(&result);
    assert!(message.contains("GET notes /missing answered 404 Not Found: {\"error\":\"no such note\""), "{message}");
    assert!(message.len() < 2600 && message.ends_with("[…]"), "the body is cut: {} bytes", message.len());
    assert!(!message.contains("s3cr3t"), "no header values in errors: {message}");
    // With `okStatus`, a 404 is an answer.
    let result = call(&mut s.server, "missing_ok", json!({}));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(text(&result), "404 no such note");
}

#[test]
fn idempotent_requests_are_retried_on_the_listed_statuses_and_posts_are_not() {
    let mut s = setup("http-retry");
    let result = call(&mut s.server, "flaky", json!({}));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(text(&result), "answered after 2 tries");
    assert_eq!(s.upstream.seen("/api/flaky").len(), 3, "two 503s, then the answer");

    let mut s = setup("http-no-retry");
    let result = call(&mut s.server, "flaky_post", json!({}));
    assert_eq!(result["isError"], true, "{result}");
    assert!(text(&result).contains("503 Service Unavailable: busy"), "{result}");
    assert_eq!(s.upstream.seen("/api/flaky").len(), 1, "a POST is sent once");
    // An upstream that asks to wait longer than carte would gets its answer as it is.
    let result = call(&mut s.server, "later", json!({}));
    assert!(text(&result).contains("503 Service Unavailable: come back later"), "{result}");
    assert_eq!(s.upstream.seen("/api/later").len(), 1, "`Retry-After: 3600` is not waited for");
}

#[test]
fn a_call_without_an_answer_times_out() {
    let mut s = setup("http-timeout");
    let result = call(&mut s.server, "hang", json!({}));
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(text(&result), "tool `hang` failed: GET silent /hang: no answer within 300ms (the tool's `timeout`)");
}

#[test]
fn a_big_answer_is_cut_with_a_notice() {
    let mut s = setup("http-big");
    let result = call(&mut s.server, "big", json!({}));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(text(&result), "1000");
    let notice = result["content"][1]["text"].as_str().unwrap_or_default();
    assert!(notice.contains("longer than 1000 bytes (`maxBytes`)"), "{result}");
}

#[test]
fn result_templates_see_status_headers_and_json() {
    let mut s = setup("http-json");
    let result = call(&mut s.server, "items", json!({}));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(text(&result), "200 application/json 2 [1, 2] two");
    let result = call(&mut s.server, "items_value", json!({}));
    let value: Value = serde_json::from_str(&text(&result)).expect("JSON");
    assert_eq!(value["items"][0]["title"], "one", "without a result template, the JSON answer is the result");
}

#[test]
fn a_cancelled_call_closes_its_connection() {
    let mut s = setup("http-cancel");
    s.server.send(&json!({"jsonrpc": "2.0", "id": "wait", "method": "tools/call", "params": {"name": "hang_long"}}));
    s.silent.accepted.recv_timeout(TIMEOUT).expect("the request reached the upstream");
    s.server.notify("notifications/cancelled", json!({"requestId": "wait", "reason": "changed my mind"}));
    s.silent.closed.recv_timeout(TIMEOUT).expect("the upstream saw the connection close");
    // The server goes on answering (and never answers the cancelled call).
    let result = call(&mut s.server, "items", json!({}));
    assert_eq!(result["isError"], false, "{result}");
}

#[test]
fn an_upstream_that_is_down_is_an_error_result() {
    let mut s = setup("http-down");
    let result = call(&mut s.server, "unreachable", json!({}));
    assert_eq!(result["isError"], true, "{result}");
    let message = text(&result);
    assert!(
        message.starts_with("tool `unreachable` failed: GET down /x: could not connect to 127.0.0.1:"),
        "{message}"
    );
    let result = call(&mut s.server, "items", json!({}));
    assert_eq!(result["isError"], false, "the server is still there: {result}");
}

#[test]
fn a_reload_keeps_the_connections_of_an_api_whose_address_is_the_same() {
    let mut s = setup("http-reload");
    s.server.result("logging/setLevel", json!({"level": "debug"}));
    call(&mut s.server, "items", json!({}));
    let path = s._dir.path("catalog.yaml");
    let edited = std::fs::read_to_string(&path).unwrap().replace("description: Items.", "description: The items.");
    std::fs::write(&path, edited).unwrap();
    s.server.wait_good_reload();
    let result = call(&mut s.server, "items", json!({}));
    assert_eq!(result["isError"], false, "{result}");
    let seen = s.upstream.seen("/api/items");
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].peer, seen[1].peer, "the second call went over the first one's connection");
}

/// A note of the notes API below.
#[derive(Clone, serde::Serialize)]
struct Note {
    id: u64,
    text: String,
    done: bool,
}

type Notes = Arc<Mutex<Vec<Note>>>;

/// The REST API `examples/notes/catalog.yaml` is written for, in memory:
/// `GET/POST /notes`, `GET/PATCH/DELETE /notes/{id}`; it wants the token.
fn notes_api() -> common::http::LocalServer {
    use axum::Json;
    use axum::extract::Path;
    use axum::http::HeaderMap;
    use axum::routing::get;

    let authorized = |headers: &HeaderMap| headers.get("authorization").is_some_and(|v| v == "Bearer t0ken");
    let missing = || (StatusCode::NOT_FOUND, Json(json!({"error": "no such note"}))).into_response();
    let app = axum::Router::new()
        .route(
            "/notes",
            get(move |State(notes): State<Notes>, headers: HeaderMap, uri: axum::http::Uri| async move {
                if !authorized(&headers) {
                    return StatusCode::UNAUTHORIZED.into_response();
                }
                let query: HashMap<String, String> =
                    url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()).into_owned().collect();
                let notes = notes.lock().unwrap().clone();
                let chosen: Vec<Note> = notes
                    .into_iter()
                    .filter(|n| query.get("q").is_none_or(|q| n.text.contains(q.as_str())))
                    .filter(|n| query.get("done").is_none_or(|d| *d == n.done.to_string()))
                    .collect();
                Json(chosen).into_response()
            })
            .post(|State(notes): State<Notes>, Json(body): Json<Value>| async move {
                let mut notes = notes.lock().unwrap();
                let note = Note {
                    id: notes.len() as u64 + 1,
                    text: body["text"].as_str().unwrap_or_default().to_owned(),
                    done: body["done"].as_bool().unwrap_or(false),
                };
                notes.push(note.clone());
                (StatusCode::CREATED, Json(note)).into_response()
            }),
        )
        .route(
            "/notes/{id}",
            get(move |State(notes): State<Notes>, Path(id): Path<u64>| async move {
                let found = notes.lock().unwrap().iter().find(|n| n.id == id).cloned();
                found.map_or_else(missing, |note| Json(note).into_response())
            })
            .patch(move |State(notes): State<Notes>, Path(id): Path<u64>, Json(body): Json<Value>| async move {
                let mut notes = notes.lock().unwrap();
                let Some(note) = notes.iter_mut().find(|n| n.id == id) else { return missing() };
                if let Some(done) = body["done"].as_bool() {
                    note.done = done;
                }
                Json(note.clone()).into_response()
            })
            .delete(move |State(notes): State<Notes>, Path(id): Path<u64>| async move {
                let mut notes = notes.lock().unwrap();
                let before = notes.len();
                notes.retain(|n| n.id != id);
                if notes.len() == before { missing() } else { StatusCode::NO_CONTENT.into_response() }
            }),
        )
        .with_state(Notes::default());
    common::http::LocalServer::bind().serve(app)
}

#[test]
fn the_notes_example_works_against_its_api() {
    let api = notes_api();
    let catalog = common::repo_root().join("examples/notes/catalog.yaml");
    let base = format!("http://{}", api.addr);
    let mut server = Server::initialized(&catalog, &[("NOTES_API", base.as_str()), ("NOTES_TOKEN", "t0ken")]);
    let mut call = |name: &str, arguments: Value| {
        let result = call(&mut server, name, arguments);
        assert_eq!(result["isError"], false, "{name}: {result}");
        text(&result)
    };
    assert_eq!(call("list_notes", json!({})), "no notes");
    assert_eq!(call("add_note", json!({"text": "buy milk & eggs"})), "added note #1");
    assert_eq!(call("add_note", json!({"text": "call Ada"})), "added note #2");
    assert_eq!(call("complete_note", json!({"id": 2})), "note #2 is done");
    assert_eq!(call("list_notes", json!({"words": "milk & eggs"})), "#1 [ ] buy milk & eggs\n");
    assert_eq!(call("list_notes", json!({"state": "done"})), "#2 [x] call Ada\n");
    assert_eq!(call("get_note", json!({"id": 2})), "#2 call Ada (done)");
    assert_eq!(call("delete_note", json!({"id": 2})), "deleted note #2");
    assert_eq!(call("delete_note", json!({"id": 2})), "there was no note #2");
    assert_eq!(call("get_note", json!({"id": 2})), "there is no note #2");
}
