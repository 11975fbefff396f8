//! Input steps on protocol 2026-07-28 (multi round-trip requests, SEP-2322),
//! end to end over HTTP: the real binary answers `tools/call`, `prompts/get`
//! and `resources/read` with an input-required result, and the retry that
//! carries `inputResponses` and the signed `requestState` resumes where it
//! stopped. Also: -32021 before anything runs, optional steps, states that
//! are tampered with or replayed elsewhere, keys shared by replicas, and a
//! legacy session asked with server-to-client requests.

use crate::common;

use std::time::Instant;

use common::http::{HttpServer, send};
use common::{Server, TIMEOUT, TempDir, meta_2026, text};
use serde_json::{Value, json};

const CATALOG: &str = r#"
server: { name: mrtr, version: 1.0.0 }
tools:
  - name: greet
    description: Asks the user's name, logging before and after.
    run:
      steps:
        - log: { level: info, data: "before asking" }
        - progress: { progress: 1, total: 2 }
        - elicit:
            key: user_name
            message: What is your name?
            requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] }
        - log: { level: info, data: "after asking {{ answers.user_name.content.name }}" }
      text: "Hello, {{ answers.user_name.content.name }}!"
  - name: greet_twin
    description: The same steps as greet, another tool.
    run:
      steps:
        - log: { level: info, data: "before asking" }
        - progress: { progress: 1, total: 2 }
        - elicit:
            key: user_name
            message: What is your name?
            requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] }
      text: "Twin {% if elicited.action == 'accept' %}{{ elicited.content.name }}{% else %}({{ elicited.action }}){% endif %}"
  - name: rounds
    description: Three questions, one round each.
    inputSchema: { type: object, properties: { topic: { type: string } } }
    run:
      steps:
        - elicit:
            message: "{{ topic }}: your name?"
            requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] }
        - elicit:
            message: "Colour, {{ elicited.content.name }}?"
            requestedSchema: { type: object, properties: { color: { type: string } }, required: [color] }
        - sample:
            key: poem
            messages: [{ role: user, text: "A poem on {{ answers.step2.content.color }}" }]
            maxTokens: 40
      text: "{{ topic }}: {{ answers.step1.content.name }} likes {{ answers.step2.content.color }}: {{ sampled.content.text }}"
  - name: onboard
    description: Three questions in one round.
    run:
      steps:
        - ask:
            - elicit:
                key: user_name
                message: What is your name?
                requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] }
            - sample:
                key: greeting
                messages: [{ role: user, text: "Generate a greeting" }]
                maxTokens: 50
            - roots: { key: client_roots }
      text: "{{ answers.user_name.content.name }} / {{ answers.greeting.content.text }} / {{ roots | map(attribute='uri') | join(',') }}"
  - name: summarize
    description: Logs, then asks the client's model.
    run:
      steps:
        - log: { level: info, data: "summarizing" }
        - sample:
            messages: [{ role: user, text: "Summarize" }]
            maxTokens: 20
      text: "{{ sampled.content.text }}"
  - name: maybe_ask
    description: Asks the name only if the client can answer.
    run:
      steps:
        - elicit:
            key: nick
            optional: true
            message: Your nickname?
            requestedSchema: { type: object, properties: { nick: { type: string } }, required: [nick] }
      text: "{% if answers.nick %}Hi {{ answers.nick.content.nick }}{% else %}Hi stranger ({{ answers | length }} answers){% endif %}"
prompts:
  - name: plan
    description: Plans with the context the user gives.
    steps:
      - elicit:
          key: user_context
          message: What context should the prompt use?
          requestedSchema: { type: object, properties: { context: { type: string } }, required: [context] }
    messages:
      - { role: user, text: "Prompt with context: {{ elicited.content.context }}" }
resources:
  - uri: "index://roots"
    name: roots_index
    description: The client's roots, when it can list them.
    steps:
      - roots: { key: where, optional: true }
    text: "{% if answers.where %}{{ roots | map(attribute='uri') | join(',') }}{% else %}no roots{% endif %}"
resourceTemplates:
  - uriTemplate: "notes://{topic}"
    name: notes
    description: Notes on a topic, for the user's chosen audience.
    steps:
      - elicit:
          key: audience
          message: "Notes on {{ topic }} for whom?"
          requestedSchema: { type: object, properties: { who: { type: string } }, required: [who] }
    text: "Notes on {{ topic }} for {{ answers.audience.content.who }}"
"#;

fn name_answer(name: &str) -> Value {
    json!({"action": "accept", "content": {"name": name}})
}

fn sampled(text: &str) -> Value {
    json!({"role": "assistant", "content": {"type": "text", "text": text}, "model": "test-model", "stopReason": "endTurn"})
}

fn all_capabilities() -> Value {
    json!({"elicitation": {}, "sampling": {}, "roots": {"listChanged": true}})
}

/// One 2026-07-28 request over HTTP.
struct Reply {
    status: u16,
    /// The notifications before the response, then the response.
    messages: Vec<Value>,
}

impl Reply {
    fn response(&self) -> &Value {
        self.messages
            .iter()
            .find(|m| m.get("id").is_some())
            .unwrap_or_else(|| panic!("no response: {:?}", self.messages))
    }

    fn result(&self) -> &Value {
        let response = self.response();
        assert!(response.get("error").is_none(), "an error: {response}");
        &response["result"]
    }

    fn logs(&self) -> Vec<String> {
        let logs = self.messages.iter().filter(|m| m["method"] == "notifications/message");
        logs.map(|m| m["params"]["data"].as_str().unwrap_or_default().to_owned()).collect()
    }
}

/// Sends a 2026-07-28 request whose `_meta` declares `capabilities` (and
/// the log level `info`), with `params` besides.
fn rpc(server: &HttpServer, method: &str, params: Value, capabilities: Value) -> Reply {
    let mut params = params;
    let mut meta = meta_2026(capabilities);
    meta["io.modelcontextprotocol/logLevel"] = json!("info");
    meta["progressToken"] = json!("p");
    params["_meta"] = meta;
    let name = params.get("name").or_else(|| params.get("uri")).and_then(Value::as_str).unwrap_or_default().to_owned();
    let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method), ("Mcp-Name", name.as_str())];
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let response = send(server.addr, "POST", "/mcp", &headers, Some(&body));
    let status = response.status;
    Reply { status, messages: response.messages() }
}

fn call(server: &HttpServer, params: Value) -> Reply {
    rpc(server, "tools/call", params, all_capabilities())
}

fn start() -> (TempDir, HttpServer) {
    let dir = TempDir::new("mrtr");
    let path = dir.write("catalog.yaml", CATALOG);
    let server = HttpServer::start(&path, &[], &[]);
    (dir, server)
}

/// An input-required result's keys and their methods, and its state.
fn asked(result: &Value) -> (Vec<(String, String)>, String) {
    assert_eq!(result["resultType"], "input_required", "{result}");
    let requests = result["inputRequests"].as_object().unwrap_or_else(|| panic!("no inputRequests: {result}"));
    let keys = requests.iter().map(|(key, request)| (key.clone(), request["method"].as_str().unwrap().to_owned()));
    let state = result["requestState"].as_str().unwrap_or_else(|| panic!("no requestState: {result}"));
    (keys.collect(), state.to_owned())
}

#[test]
fn an_elicitation_takes_two_rounds_and_steps_before_it_run_once() {
    let (_dir, server) = start();
    let first = call(&server, json!({"name": "greet", "arguments": {}}));
    assert_eq!(first.status, 200);
    let (keys, state) = asked(first.result());
    assert_eq!(keys, [("user_name".to_owned(), "elicitation/create".to_owned())]);
    let request = &first.result()["inputRequests"]["user_name"];
    assert_eq!(request["params"]["message"], "What is your name?");
    assert_eq!(request["params"]["requestedSchema"]["required"], json!(["name"]));
    assert_eq!(first.logs(), ["before asking"]);
    let progress = first.messages.iter().filter(|m| m["method"] == "notifications/progress").count();
    assert_eq!(progress, 1);

    let second = call(
        &server,
        json!({"name": "greet", "arguments": {}, "requestState": state, "inputResponses": {"user_name": name_answer("Alice")}}),
    );
    assert_eq!(second.result()["resultType"], "complete");
    assert_eq!(text(second.result()), "Hello, Alice!");
    // The log and progress before the question are not sent again.
    assert_eq!(second.logs(), ["after asking Alice"]);
    assert!(!second.messages.iter().any(|m| m["method"] == "notifications/progress"), "{:?}", second.messages);
}

#[test]
fn three_rounds_carry_earlier_answers_in_a_new_state_each_time() {
    let (_dir, server) = start();
    let args = json!({"topic": "Trip"});
    let r1 = call(&server, json!({"name": "rounds", "arguments": args}));
    let (keys, s1) = asked(r1.result());
    assert_eq!(keys, [("step1".to_owned(), "elicitation/create".to_owned())]);
    assert_eq!(r1.result()["inputRequests"]["step1"]["params"]["message"], "Trip: your name?");

    let r2 = call(
        &server,
        json!({"name": "rounds", "arguments": args, "requestState": s1, "inputResponses": {"step1": name_answer("Ada")}}),
    );
    let (keys, s2) = asked(r2.result());
    assert_eq!(keys, [("step2".to_owned(), "elicitation/create".to_owned())]);
    assert_eq!(r2.result()["inputRequests"]["step2"]["params"]["message"], "Colour, Ada?");
    assert_ne!(s1, s2);

    let r3 = call(
        &server,
        json!({"name": "rounds", "arguments": args, "requestState": s2,
            "inputResponses": {"step2": {"action": "accept", "content": {"color": "blue"}}}}),
    );
    let (keys, s3) = asked(r3.result());
    assert_eq!(keys, [("poem".to_owned(), "sampling/createMessage".to_owned())]);
    assert_eq!(r3.result()["inputRequests"]["poem"]["params"]["messages"][0]["content"]["text"], "A poem on blue");
    assert_ne!(s2, s3);

    // The last round sends only the newest answer: the others travel in the state.
    let r4 = call(
        &server,
        json!({"name": "rounds", "arguments": args, "requestState": s3, "inputResponses": {"poem": sampled("Sky")}}),
    );
    assert_eq!(text(r4.result()), "Trip: Ada likes blue: Sky");
}

#[test]
fn an_ask_puts_three_questions_in_one_round() {
    let (_dir, server) = start();
    let first = call(&server, json!({"name": "onboard"}));
    let (mut keys, state) = asked(first.result());
    keys.sort();
    assert_eq!(
        keys,
        [
            ("client_roots".to_owned(), "roots/list".to_owned()),
            ("greeting".to_owned(), "sampling/createMessage".to_owned()),
            ("user_name".to_owned(), "elicitation/create".to_owned()),
        ]
    );
    // Two of three answered: only the third is asked again, the two kept.
    let partial = call(
        &server,
        json!({"name": "onboard", "requestState": state, "inputResponses": {
            "user_name": name_answer("Alice"), "greeting": sampled("Hello there!")}}),
    );
    let (keys, state) = asked(partial.result());
    assert_eq!(keys, [("client_roots".to_owned(), "roots/list".to_owned())]);
    let done = call(
        &server,
        json!({"name": "onboard", "requestState": state, "inputResponses": {
            "client_roots": {"roots": [{"uri": "file:///a", "name": "A"}, {"uri": "file:///b"}]}}}),
    );
    assert_eq!(text(done.result()), "Alice / Hello there! / file:///a,file:///b");
}

#[test]
fn a_tampered_state_is_refused() {
    let (_dir, server) = start();
    let (_, state) = asked(call(&server, json!({"name": "greet"})).result());
    let answers = json!({"user_name": name_answer("Mallory")});
    for forged in [format!("{state}-TAMPERED"), state.replacen("rs2.", "rs1.", 1), "not-a-state".to_owned()] {
        let reply = call(&server, json!({"name": "greet", "requestState": forged, "inputResponses": answers}));
        let error = &reply.response()["error"];
        assert_eq!(error["code"], -32602, "{forged}: {:?}", reply.messages);
        assert!(error["message"].as_str().unwrap().starts_with("requestState is invalid"), "{error}");
        assert!(reply.logs().is_empty(), "a step ran: {:?}", reply.logs());
    }
}

#[test]
fn a_state_replayed_for_another_tool_or_other_arguments_is_refused() {
    let (_dir, server) = start();
    let answers = json!({"user_name": name_answer("Eve")});
    let (_, state) = asked(call(&server, json!({"name": "greet", "arguments": {}})).result());
    let other_tool = call(&server, json!({"name": "greet_twin", "requestState": state, "inputResponses": answers}));
    assert_eq!(other_tool.response()["error"]["code"], -32602, "{:?}", other_tool.messages);

    let (_, state) = asked(call(&server, json!({"name": "rounds", "arguments": {"topic": "A"}})).result());
    let answers = json!({"step1": name_answer("Eve")});
    let other_args = call(
        &server,
        json!({"name": "rounds", "arguments": {"topic": "B"}, "requestState": state, "inputResponses": answers}),
    );
    assert_eq!(other_args.response()["error"]["code"], -32602, "{:?}", other_args.messages);
    let prompt = rpc(&server, "prompts/get", json!({"name": "greet", "requestState": state}), all_capabilities());
    assert_eq!(prompt.response()["error"]["code"], -32602, "{:?}", prompt.messages);
    // The same arguments, written in another order, are the same request.
    let same = call(
        &server,
        json!({"name": "rounds", "arguments": {"topic": "A"}, "requestState": state, "inputResponses": answers}),
    );
    assert_eq!(asked(same.result()).0, [("step2".to_owned(), "elicitation/create".to_owned())]);
}

#[test]
fn a_missing_capability_is_refused_before_anything_runs() {
    let (_dir, server) = start();
    let reply = rpc(&server, "tools/call", json!({"name": "summarize"}), json!({"elicitation": {}}));
    assert_eq!(reply.status, 400, "{:?}", reply.messages);
    assert_eq!(reply.messages.len(), 1, "something was sent before the error: {:?}", reply.messages);
    let error = &reply.response()["error"];
    assert_eq!(error["code"], -32021, "{error}");
    assert_eq!(error["data"]["requiredCapabilities"], json!({"sampling": {}}));
    // Declared: the same tool runs (and logs).
    let reply = rpc(&server, "tools/call", json!({"name": "summarize"}), json!({"sampling": {}}));
    assert_eq!(reply.logs(), ["summarizing"]);
    assert_eq!(asked(reply.result()).0, [("step2".to_owned(), "sampling/createMessage".to_owned())]);
}

#[test]
fn an_optional_step_the_client_cannot_answer_is_skipped() {
    let (_dir, server) = start();
    let skipped = rpc(&server, "tools/call", json!({"name": "maybe_ask"}), json!({"sampling": {}}));
    assert_eq!(text(skipped.result()), "Hi stranger (0 answers)");
    let asked_it = rpc(&server, "tools/call", json!({"name": "maybe_ask"}), json!({"elicitation": {}}));
    let (keys, state) = asked(asked_it.result());
    assert_eq!(keys, [("nick".to_owned(), "elicitation/create".to_owned())]);
    let answered = rpc(
        &server,
        "tools/call",
        json!({"name": "maybe_ask", "requestState": state,
            "inputResponses": {"nick": {"action": "accept", "content": {"nick": "Bo"}}}}),
        json!({"elicitation": {}}),
    );
    assert_eq!(text(answered.result()), "Hi Bo");
}

#[test]
fn a_prompt_and_a_resource_template_ask_before_they_render() {
    let (_dir, server) = start();
    let first = rpc(&server, "prompts/get", json!({"name": "plan"}), all_capabilities());
    let (keys, state) = asked(first.result());
    assert_eq!(keys, [("user_context".to_owned(), "elicitation/create".to_owned())]);
    let answer = json!({"user_context": {"action": "accept", "content": {"context": "test context"}}});
    let done = rpc(
        &server,
        "prompts/get",
        json!({"name": "plan", "requestState": state, "inputResponses": answer}),
        all_capabilities(),
    );
    assert_eq!(done.result()["resultType"], "complete");
    assert_eq!(done.result()["messages"][0]["content"]["text"], "Prompt with context: test context");

    let first = rpc(&server, "resources/read", json!({"uri": "notes://rust"}), all_capabilities());
    let (keys, state) = asked(first.result());
    assert_eq!(keys, [("audience".to_owned(), "elicitation/create".to_owned())]);
    assert_eq!(first.result()["inputRequests"]["audience"]["params"]["message"], "Notes on rust for whom?");
    let answer = json!({"audience": {"action": "accept", "content": {"who": "beginners"}}});
    let done = rpc(
        &server,
        "resources/read",
        json!({"uri": "notes://rust", "requestState": state, "inputResponses": answer}),
        all_capabilities(),
    );
    assert_eq!(done.result()["contents"][0]["text"], "Notes on rust for beginners");
    // The state of one URI does not open for another.
    let other = rpc(
        &server,
        "resources/read",
        json!({"uri": "notes://go", "requestState": state, "inputResponses": answer}),
        all_capabilities(),
    );
    assert_eq!(other.response()["error"]["code"], -32602);

    // A fixed resource asks too; its optional step is skipped for a client that cannot answer.
    let skipped = rpc(&server, "resources/read", json!({"uri": "index://roots"}), json!({}));
    assert_eq!(skipped.result()["contents"][0]["text"], "no roots");
    let first = rpc(&server, "resources/read", json!({"uri": "index://roots"}), all_capabilities());
    let (keys, state) = asked(first.result());
    assert_eq!(keys, [("where".to_owned(), "roots/list".to_owned())]);
    let answer = json!({"where": {"roots": [{"uri": "file:///src"}]}});
    let done = rpc(
        &server,
        "resources/read",
        json!({"uri": "index://roots", "requestState": state, "inputResponses": answer}),
        all_capabilities(),
    );
    assert_eq!(done.result()["contents"][0]["text"], "file:///src");
}

#[test]
fn a_missing_or_invalid_answer_is_asked_again() {
    let (_dir, server) = start();
    let (_, state) = asked(call(&server, json!({"name": "greet"})).result());
    for answers in [
        json!({"wrong_key": name_answer("Alice")}),
        json!({"user_name": 12345}),
        json!({"user_name": {"action": "accept", "content": {"name": 12345}}}),
        json!({"user_name": {"action": "accept"}}),
        Value::Null,
    ] {
        let reply = call(&server, json!({"name": "greet", "requestState": state, "inputResponses": answers}));
        let (keys, new_state) = asked(reply.result());
        assert_eq!(keys, [("user_name".to_owned(), "elicitation/create".to_owned())], "{answers}");
        assert_ne!(new_state, "");
        // Resumed at the question: the log before it is not repeated.
        assert!(reply.logs().is_empty(), "{answers}: {:?}", reply.logs());
    }
    // A declined form is an answer: the template decides what it means.
    let declined = call(&server, json!({"name": "greet_twin", "inputResponses": {"user_name": {"action": "decline"}}}));
    assert_eq!(text(declined.result()), "Twin (decline)");
}

#[test]
fn answers_in_the_first_request_need_no_state_and_unknown_keys_are_ignored() {
    let (_dir, server) = start();
    let reply = call(
        &server,
        json!({"name": "greet", "inputResponses": {
            "user_name": name_answer("Alice"),
            "unknown_extra_key": {"action": "accept", "content": {"foo": "bar"}}}}),
    );
    assert_eq!(text(reply.result()), "Hello, Alice!");
    assert_eq!(reply.logs(), ["before asking", "after asking Alice"]);
}

#[test]
fn replicas_sharing_a_key_open_each_others_states_and_rotation_keeps_old_ones() {
    let dir = TempDir::new("mrtr-keys");
    let path = dir.write("catalog.yaml", CATALOG);
    let old = "o".repeat(32);
    let new = "n".repeat(48);
    let flag = ["--state-key-env", "CARTE_TEST_STATE_KEY"];
    let first = HttpServer::start(&path, &flag, &[("CARTE_TEST_STATE_KEY", &old)]);
    let rotated = HttpServer::start(&path, &flag, &[("CARTE_TEST_STATE_KEY", &format!("{new},{old}"))]);
    let stranger = HttpServer::start(&path, &[], &[]);
    let (_, state) = asked(call(&first, json!({"name": "greet"})).result());
    let retry = json!({"name": "greet", "requestState": state, "inputResponses": {"user_name": name_answer("Ada")}});
    assert_eq!(text(call(&rotated, retry.clone()).result()), "Hello, Ada!");
    assert_eq!(call(&stranger, retry).response()["error"]["code"], -32602);
}

#[test]
fn a_short_state_key_stops_the_server_without_quoting_it() {
    let dir = TempDir::new("mrtr-short-key");
    let path = dir.write("catalog.yaml", CATALOG);
    let mut child = common::carte()
        .args(["serve", "--state-key-env", "CARTE_TEST_STATE_KEY"])
        .arg(&path)
        .env("CARTE_TEST_STATE_KEY", "hunter2-hunter2")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = common::wait_bounded(&mut child, "carte serve with a short key");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(stderr.contains("--state-key-env CARTE_TEST_STATE_KEY: the key is 15 bytes long"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[test]
fn a_legacy_session_is_asked_for_its_roots_with_a_request() {
    let dir = TempDir::new("mrtr-legacy");
    let path = dir.write("catalog.yaml", CATALOG);
    let mut server = Server::start(&path, &[]);
    let init = server.result(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}, "sampling": {}, "roots": {}},
            "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert!(init["serverInfo"].is_object());
    server.notify("notifications/initialized", json!({}));
    server.send(&json!({"jsonrpc": "2.0", "id": 40, "method": "tools/call", "params": {"name": "onboard"}}));
    // One request after another, in the order of the `ask`.
    for (method, answer) in [
        ("elicitation/create", name_answer("Lin")),
        ("sampling/createMessage", sampled("Hey")),
        ("roots/list", json!({"roots": [{"uri": "file:///w"}]})),
    ] {
        let request = server_request(&mut server, method);
        server.send(&json!({"jsonrpc": "2.0", "id": request["id"], "result": answer}));
    }
    assert_eq!(text(&server.response(&json!(40))["result"]), "Lin / Hey / file:///w");
}

/// Waits for a request from the server and returns it.
fn server_request(server: &mut Server, method: &str) -> Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let message = server.next_message(deadline).unwrap_or_else(|| panic!("no {method} request"));
        if message.get("id").is_some() && message.get("method").is_some() {
            assert_eq!(message["method"], method, "{message}");
            return message;
        }
        server.notifications.push(message);
    }
}

#[test]
fn carte_call_skips_optional_questions_and_says_why_it_cannot_ask_the_others() {
    let dir = TempDir::new("mrtr-cli");
    let path = dir.write("catalog.yaml", CATALOG);
    let (code, result, _) = common::run_cli("call", &path, &["maybe_ask"], &[]);
    assert_eq!((code, text(&result)), (Some(0), "Hi stranger (0 answers)".to_owned()));
    let (code, result, stderr) = common::run_cli("call", &path, &["greet"], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        text(&result),
        "tool `greet` could not ask the client: there is no client to ask (elicitation needs an MCP client)"
    );
    // The log before the question went to stderr, as `carte call` shows logs.
    assert!(stderr.contains("before asking"), "{stderr}");
}
