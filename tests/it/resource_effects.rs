//! Resources that name an effect the way tools do: an `http` resource reads
//! a real upstream started here, a `command` resource runs a real program;
//! the body sees the effect's output (or is its value), a URI's variables
//! fill the effect's templates, and a failed effect is an error naming it.

use crate::common;

use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use common::{Server, TempDir};
use serde_json::{Value, json};

type Log = Arc<Mutex<Vec<String>>>;

async fn answer(State(log): State<Log>, request: Request) -> Response {
    let uri = request.uri().path_and_query().map(|pq| pq.as_str().to_owned()).unwrap_or_default();
    log.lock().unwrap().push(format!("{} {uri}", request.method()));
    let json = |value: Value| ([("content-type", "application/json")], value.to_string()).into_response();
    match request.uri().path() {
        "/items" => json(json!({"items": [{"id": 1}, {"id": 2}]})),
        "/fail" => (StatusCode::INTERNAL_SERVER_ERROR, "upstream broke").into_response(),
        _ => json(json!({"uri": uri})),
    }
}

const CATALOG: &str = r#"
apis:
  notes: { baseUrl: "${NOTES_API}" }
resources:
  - uri: notes://items
    name: items
    http: { api: notes, path: /items }
  - uri: notes://count
    name: count
    http: { api: notes, path: /items }
    text: "{{ status }}: {{ json['items'] | length }} items"
  - uri: notes://words
    name: words
    command: { argv: [printf, "%s", "one two"] }
  - uri: notes://broken
    name: broken
    http: { api: notes, path: /fail }
resourceTemplates:
  - uriTemplate: notes://users/{user}
    name: user
    http: { api: notes, path: "/users/{{ user }}" }
    text: "{{ json.uri }}"
  - uriTemplate: notes://echo/{word}
    name: echo
    command: { argv: [echo, "{{ word }}"] }
    text: "said {{ stdout | trim }}"
"#;

fn read(server: &mut Server, uri: &str) -> Value {
    let result = server.result("resources/read", json!({"uri": uri}));
    result["contents"][0].clone()
}

#[test]
fn http_and_command_resources_run_their_effect_on_each_read() {
    let dir = TempDir::new("resource-effects");
    let path = dir.write("catalog.yaml", CATALOG);
    let log: Log = Arc::default();
    let app = axum::Router::new().fallback(answer).with_state(log.clone());
    let upstream = common::http::LocalServer::bind().serve(app);
    let base = format!("http://{}", upstream.addr);
    let mut server = Server::initialized(&path, &[("NOTES_API", base.as_str())]);

    // Without a body template, the body is the effect's value: `json`.
    let items = read(&mut server, "notes://items");
    assert_eq!(items["mimeType"], "application/json", "{items}");
    let parsed: Value = serde_json::from_str(items["text"].as_str().unwrap()).unwrap();
    assert_eq!(parsed, json!({"items": [{"id": 1}, {"id": 2}]}));

    // The body template sees the effect's variables.
    assert_eq!(read(&mut server, "notes://count")["text"], "200: 2 items");

    // A program's value is its stdout, served as text.
    let words = read(&mut server, "notes://words");
    assert_eq!((words["text"].as_str(), words["mimeType"].as_str()), (Some("one two"), Some("text/plain")));

    // A URI's variables fill the effect's templates.
    assert_eq!(read(&mut server, "notes://users/ada")["text"], "/users/ada");
    assert_eq!(read(&mut server, "notes://echo/hi")["text"], "said hi");

    // Every read runs the effect again, with GET.
    read(&mut server, "notes://items");
    let seen = log.lock().unwrap().clone();
    assert_eq!(seen.iter().filter(|line| *line == "GET /items").count(), 3, "{seen:?}");
    assert!(seen.iter().all(|line| line.starts_with("GET ")), "{seen:?}");

    // A failed effect is an error naming it and why.
    let error = server.error("resources/read", json!({"uri": "notes://broken"}));
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("could not be read: its `http` failed") && message.contains("500"), "{error}");
}
