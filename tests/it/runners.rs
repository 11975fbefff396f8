//! Tool runners and catalog features end to end: content blocks, structured
//! output, SQL, includes, environment variables, template files, and the
//! fuel bound on runaway templates.

use crate::common;

use common::{Server, TempDir, text};
use serde_json::{Value, json};

const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d];

#[test]
fn content_blocks_of_every_kind() {
    let dir = TempDir::new("content");
    std::fs::write(dir.path("logo.png"), PNG).unwrap();
    dir.write("notes.txt", "plain notes\n");
    let catalog = dir.write(
        "c.yaml",
        r#"
tools:
  - name: show
    description: Shows everything
    inputSchema: { type: object, properties: { who: { type: string } } }
    run:
      content:
        - text: "Hello {{ who or 'you' }}"
        - image: { file: logo.png }
        - audio: { data: "UklGRg==", mimeType: audio/wav }
        - resource: "c://notes"
        - resource_link: { uri: "c://rooms/{{ who }}", name: room, mimeType: text/plain }
resources:
  - { uri: "c://notes", name: notes, file: notes.txt }
resourceTemplates:
  - { uriTemplate: "c://rooms/{who}", name: room, text: "room of {{ who }}" }
"#,
    );
    let mut server = Server::initialized(&catalog, &[]);
    let result = server.result("tools/call", json!({"name": "show", "arguments": {"who": "Ada"}}));
    let blocks = result["content"].as_array().unwrap();
    assert_eq!(blocks[0], json!({"type": "text", "text": "Hello Ada"}));
    assert_eq!(blocks[1]["type"], "image");
    assert_eq!(blocks[1]["mimeType"], "image/png");
    assert_eq!(blocks[1]["data"], "iVBORw0KGgoAAAAN");
    assert_eq!(blocks[2], json!({"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}));
    assert_eq!(blocks[3]["type"], "resource");
    assert_eq!(blocks[3]["resource"], json!({"uri": "c://notes", "mimeType": "text/plain", "text": "plain notes\n"}));
    assert_eq!(blocks[4]["type"], "resource_link");
    assert_eq!(blocks[4]["uri"], "c://rooms/Ada");
    assert_eq!(blocks[4]["name"], "room");

    let binary = server.result("resources/list", json!({}));
    assert_eq!(binary["resources"][0]["size"], 12);
}

#[test]
fn binary_files_are_served_as_blobs() {
    let dir = TempDir::new("blob");
    std::fs::write(dir.path("logo.png"), PNG).unwrap();
    let catalog = dir.write("c.yaml", "resources:\n  - { uri: \"c://logo\", name: logo, file: logo.png }\n");
    let mut server = Server::initialized(&catalog, &[]);
    let read = server.result("resources/read", json!({"uri": "c://logo"}));
    assert_eq!(read["contents"][0], json!({"uri": "c://logo", "mimeType": "image/png", "blob": "iVBORw0KGgoAAAAN"}));
}

#[test]
fn structured_output_is_checked_against_the_output_schema() {
    let dir = TempDir::new("structured");
    let catalog = dir.write(
        "c.yaml",
        r#"
tools:
  - name: price
    description: Prices a thing
    inputSchema: { type: object, properties: { n: { type: integer } }, required: [n] }
    outputSchema:
      type: object
      properties: { total: { type: integer } }
      required: [total]
    run:
      text: '{% if n > 100 %}{"total": "lots"}{% else %}{"total": {{ n * 2 }}}{% endif %}'
  - name: raw
    description: Returns JSON
    inputSchema: { type: object, properties: { n: { type: integer } } }
    run: { json: true, text: '{"n": {{ n }}, "items": [1, 2]}' }
  - name: broken
    description: Not JSON at all
    run: { json: true, text: "hello" }
"#,
    );
    let mut server = Server::initialized(&catalog, &[]);
    let listed = server.result("tools/list", json!({}));
    assert_eq!(listed["tools"][0]["outputSchema"]["required"], json!(["total"]));
    let ok = server.result("tools/call", json!({"name": "price", "arguments": {"n": 4}}));
    assert_eq!(ok["structuredContent"], json!({"total": 8}));
    assert_eq!(serde_json::from_str::<Value>(&text(&ok)).unwrap(), json!({"total": 8}));
    let bad = server.result("tools/call", json!({"name": "price", "arguments": {"n": 500}}));
    assert_eq!(bad["isError"], true);
    assert!(text(&bad).contains("does not match its outputSchema") && text(&bad).contains("`total`"), "{bad}");
    let raw = server.result("tools/call", json!({"name": "raw", "arguments": {"n": 3}}));
    assert_eq!(raw["structuredContent"], json!({"n": 3, "items": [1, 2]}));
    let broken = server.result("tools/call", json!({"name": "broken", "arguments": {}}));
    assert_eq!(broken["isError"], true);
    assert!(text(&broken).contains("not valid JSON"), "{broken}");
}

#[test]
fn sql_constraint_errors_are_results_and_rows_are_json_without_a_template() {
    let dir = TempDir::new("sql");
    let catalog = dir.write(
        "c.yaml",
        r#"
databases:
  main:
    url: sqlite:data/main.db
    setup: CREATE TABLE IF NOT EXISTS members (name TEXT PRIMARY KEY, age INTEGER CHECK (age >= 0))
tools:
  - name: join
    description: Adds a member
    inputSchema: { type: object, properties: { name: { type: string }, age: { type: integer } }, required: [name] }
    run:
      sql: { database: main, statement: "INSERT INTO members (name, age) VALUES (:name, :age) RETURNING name, age" }
  - name: members
    description: Lists members
    run:
      sql: { database: main, statement: "SELECT name, age FROM members ORDER BY name" }
      text: "{% for m in rows %}{{ m.name }}={{ m.age }};{% endfor %}"
"#,
    );
    std::fs::create_dir_all(dir.path("data")).unwrap();
    let mut server = Server::initialized(&catalog, &[]);
    let joined = server.result("tools/call", json!({"name": "join", "arguments": {"name": "ada", "age": 36}}));
    assert_eq!(serde_json::from_str::<Value>(&text(&joined)).unwrap(), json!([{"name": "ada", "age": 36}]));
    let no_age = server.result("tools/call", json!({"name": "join", "arguments": {"name": "bo"}}));
    assert_eq!(no_age["isError"], false, "{no_age}");
    let duplicate = server.result("tools/call", json!({"name": "join", "arguments": {"name": "ada", "age": 1}}));
    assert_eq!(duplicate["isError"], true);
    assert!(text(&duplicate).contains("constraint failed") && text(&duplicate).contains("UNIQUE"), "{duplicate}");
    let negative = server.result("tools/call", json!({"name": "join", "arguments": {"name": "cy", "age": -1}}));
    assert!(text(&negative).contains("CHECK"), "{negative}");
    let listed = server.result("tools/call", json!({"name": "members", "arguments": {}}));
    assert_eq!(text(&listed), "ada=36;bo=;");
    assert!(dir.path("data/main.db").exists(), "the database resolves beside the catalog");
}

#[test]
fn includes_env_and_template_files_work_together() {
    let dir = TempDir::new("include");
    dir.write("views/base.j2", "[{% block body %}{% endblock %}] {% include 'footer.j2' %}");
    dir.write("views/footer.j2", "-- {{ data.company }}");
    dir.write("views/greet.j2", "{% extends 'base.j2' %}{% block body %}Hi {{ name }}{% endblock %}");
    dir.write(
        "more/extra.yaml",
        "tools:\n  - name: greet\n    description: Greets\n    inputSchema: { type: object, properties: { name: { type: string } } }\n    run: { template: greet.j2 }\n",
    );
    dir.write("more/data.yaml", "data:\n  company: ${COMPANY_NAME:-Nobody}\n");
    let catalog = dir.write(
        "root.yaml",
        "server: { name: \"${SERVER_NAME:?set SERVER_NAME}\", templates: views }\ninclude: [more/*.yaml]\ntools:\n  - { name: first, description: First, run: { text: \"1\" } }\n",
    );
    let mut server = Server::initialized(&catalog, &[("SERVER_NAME", "envy"), ("COMPANY_NAME", "Acme")]);
    let tools = server.result("tools/list", json!({}));
    let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["first", "greet"]);
    let greeted = server.result("tools/call", json!({"name": "greet", "arguments": {"name": "Ada"}}));
    assert_eq!(text(&greeted), "[Hi Ada] -- Acme");
    drop(server);

    // Without the required variable, the server refuses to start and says why.
    let output = common::carte().arg("serve").arg(&catalog).env_remove("SERVER_NAME").output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("environment variable `SERVER_NAME` is not set: set SERVER_NAME"), "{stderr}");
}

#[test]
fn runaway_templates_are_stopped() {
    let dir = TempDir::new("fuel");
    let catalog = dir.write(
        "c.yaml",
        "tools:\n  - name: spin\n    description: Loops forever\n    run:\n      text: \"{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}\"\n",
    );
    let mut server = Server::initialized(&catalog, &[]);
    let result = server.result("tools/call", json!({"name": "spin", "arguments": {}}));
    assert_eq!(result["isError"], true);
    assert!(text(&result).contains("runaway"), "{result}");
    let again = server.result("tools/list", json!({}));
    assert_eq!(again["tools"][0]["name"], "spin");
}

#[test]
fn prompts_require_their_required_arguments() {
    let dir = TempDir::new("prompt-args");
    let catalog = dir.write(
        "c.yaml",
        r#"
prompts:
  - name: greet
    description: Greets someone
    arguments:
      - { name: who, required: true, complete: [Ada, Alan, Grace] }
      - { name: mood }
    messages:
      - role: user
        text: "Greet {{ who }}{% if mood %} in a {{ mood }} mood{% endif %}"
      - role: assistant
        text: "Hello {{ arguments.who }}"
"#,
    );
    let mut server = Server::initialized(&catalog, &[]);
    let missing = server.error("prompts/get", json!({"name": "greet", "arguments": {"mood": "good"}}));
    assert_eq!(missing["code"], -32602);
    assert!(missing["message"].as_str().unwrap().contains("`who`"), "{missing}");
    let got = server.result("prompts/get", json!({"name": "greet", "arguments": {"who": "Ada"}}));
    assert_eq!(got["messages"][0]["content"]["text"], "Greet Ada");
    assert_eq!(got["messages"][1]["role"], "assistant");
    assert_eq!(got["messages"][1]["content"]["text"], "Hello Ada");
    let completion = server.result(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "who", "value": "a"}}),
    );
    assert_eq!(completion["completion"]["values"], json!(["Ada", "Alan"]));
    let unknown = server.error(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "nope"}, "argument": {"name": "who", "value": ""}}),
    );
    assert_eq!(unknown["code"], -32602);
}
