//! Hot reload, end to end: the real binary serves a catalog from a temp
//! folder, the test edits files the ways editors and deployments do, and
//! asserts on what the client receives. Every wait is bounded; the reload
//! report (a `carte.reload` log message, sent after a reload's
//! notifications) is the barrier that says a reload has happened.

use crate::common;

use std::path::Path;

use common::{Server, TempDir, meta_2026, methods, text, tools_catalog};
use serde_json::{Value, json};

/// Starts and initializes, asking for every log message.
fn serve(path: &Path) -> Server {
    serve_with(path, &[])
}

/// Starts with extra `serve` flags, initializes, asks for every log message.
fn serve_with(path: &Path, flags: &[&str]) -> Server {
    let mut server = Server::initialized_with(path, &[], flags);
    server.result("logging/setLevel", json!({"level": "debug"}));
    server
}

fn tool_names(server: &mut Server) -> Vec<String> {
    let list = server.result("tools/list", json!({}));
    list["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

fn assert_only_tools_changed(before: &[Value]) {
    assert_eq!(methods(before), vec!["notifications/tools/list_changed"], "{before:?}");
}

#[test]
fn an_edit_in_place_reaches_the_client() {
    let dir = TempDir::new("reload-in-place");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut server = serve(&path);
    let first = server.result("tools/list", json!({}));
    assert_eq!(first["_meta"]["carte/generation"], 1);
    std::fs::write(&path, tools_catalog(&["a", "b"])).unwrap(); // truncate, then write
    let (before, report) = server.wait_good_reload();
    assert_only_tools_changed(&before);
    assert_eq!(report["params"]["data"]["generation"], 2);
    assert!(report["params"]["data"]["message"].as_str().unwrap().contains("tools +b"), "{report}");
    let list = server.result("tools/list", json!({}));
    assert_eq!(list["_meta"]["carte/generation"], 2);
    assert_ne!(list["_meta"]["carte/fingerprint"], first["_meta"]["carte/fingerprint"]);
    assert_eq!(tool_names(&mut server), ["a", "b"]);
    assert_eq!(text(&server.result("tools/call", json!({"name": "b"}))), "b ran");
}

#[test]
fn a_save_by_rename_reaches_the_client() {
    let dir = TempDir::new("reload-rename");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut server = serve(&path);
    let temp = dir.write(".catalog.yaml.tmp", &tools_catalog(&["renamed"]));
    std::fs::rename(&temp, &path).unwrap();
    let (before, _) = server.wait_good_reload();
    assert_only_tools_changed(&before);
    assert_eq!(tool_names(&mut server), ["renamed"]);
}

#[test]
fn delete_then_recreate_reaches_the_client() {
    let dir = TempDir::new("reload-recreate");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut server = serve(&path);
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, tools_catalog(&["again"])).unwrap();
    let (before, _) = server.wait_good_reload();
    assert!(methods(&before).contains(&"notifications/tools/list_changed".to_owned()), "{before:?}");
    assert_eq!(tool_names(&mut server), ["again"]);
}

#[test]
fn a_new_file_matching_an_include_glob_is_loaded() {
    let dir = TempDir::new("reload-glob");
    let path = dir.write("catalog.yaml", &format!("include: [\"tools/*.yaml\"]\n{}", tools_catalog(&["a"])));
    dir.write("tools/b.yaml", "tools:\n  - name: b\n    description: B.\n    run: { text: b }\n");
    let mut server = serve(&path);
    assert_eq!(tool_names(&mut server), ["a", "b"]);
    dir.write("tools/c.yaml", "tools:\n  - name: c\n    description: C.\n    run: { text: c }\n");
    let (before, _) = server.wait_good_reload();
    assert_only_tools_changed(&before);
    assert_eq!(tool_names(&mut server), ["a", "b", "c"]);
    // A file the glob does not match changes nothing, and is not even a reload.
    dir.write("tools/notes.txt", "not a catalog");
    std::fs::remove_file(dir.path("tools/b.yaml")).unwrap();
    let (before, _) = server.wait_good_reload();
    assert_only_tools_changed(&before);
    assert_eq!(tool_names(&mut server), ["a", "c"]);
}

#[test]
fn a_kubernetes_configmap_swap_is_noticed() {
    let dir = TempDir::new("reload-configmap");
    // The layout kubelet's atomic writer makes: files are symlinks into `..data`,
    // itself a symlink to a timestamped folder that is replaced as a whole.
    dir.write("..2026_12_03_01/catalog.yaml", &tools_catalog(&["v1"]));
    std::os::unix::fs::symlink("..2026_12_03_01", dir.path("..data")).unwrap();
    std::os::unix::fs::symlink("..data/catalog.yaml", dir.path("catalog.yaml")).unwrap();
    let mut server = serve(&dir.path("catalog.yaml"));
    assert_eq!(tool_names(&mut server), ["v1"]);
    dir.write("..2026_12_03_02/catalog.yaml", &tools_catalog(&["v2"]));
    std::os::unix::fs::symlink("..2026_12_03_02", dir.path("..data_tmp")).unwrap();
    std::fs::rename(dir.path("..data_tmp"), dir.path("..data")).unwrap();
    std::fs::remove_dir_all(dir.path("..2026_12_03_01")).unwrap();
    let (before, _) = server.wait_good_reload();
    assert_only_tools_changed(&before);
    assert_eq!(tool_names(&mut server), ["v2"]);
}

#[test]
fn a_file_moved_away_and_back_is_reloaded() {
    let dir = TempDir::new("reload-move");
    let away = TempDir::new("reload-move-away");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut server = serve(&path);
    std::fs::rename(&path, away.path("catalog.yaml")).unwrap();
    std::fs::write(away.path("catalog.yaml"), tools_catalog(&["back"])).unwrap();
    std::fs::rename(away.path("catalog.yaml"), &path).unwrap();
    let (before, _) = server.wait_good_reload();
    assert!(methods(&before).contains(&"notifications/tools/list_changed".to_owned()), "{before:?}");
    assert_eq!(tool_names(&mut server), ["back"]);
}

#[test]
fn invalid_edits_keep_the_old_catalog_and_a_fix_recovers() {
    let dir = TempDir::new("reload-invalid");
    let good = "server: { name: live, version: 1.0.0 }\ntools:\n  - name: echo\n    description: Echoes.\n    inputSchema:\n      type: object\n      properties: { text: { type: string } }\n    run: { text: \"{{ text }}\" }\n";
    let path = dir.write("catalog.yaml", good);
    let mut server = serve(&path);
    let broken = [
        (good.replace("tools:\n", "tools:\n   - oops: [\n"), "invalid YAML"),
        (good.replace("description: Echoes.", "descripton: Echoes."), "descripton"),
        (good.replace("{{ text }}", "{{ text }"), "syntax error"),
        (good.replace("type: string", "type: strng"), "inputSchema"),
    ];
    for (text_of_file, expected) in &broken {
        std::fs::write(&path, text_of_file).unwrap();
        let (before, report) = server.wait_reload();
        assert!(methods(&before).is_empty(), "an invalid catalog announced {before:?}");
        assert_eq!(report["params"]["level"], "error", "{report}");
        let message = report["params"]["data"]["message"].as_str().unwrap();
        assert!(message.contains("still serving generation 1"), "{message}");
        assert!(message.contains(expected), "expected `{expected}` in: {message}");
        assert!(message.contains("catalog.yaml:"), "diagnostics carry file:line:column: {message}");
        let call = server.result("tools/call", json!({"name": "echo", "arguments": {"text": "still here"}}));
        assert_eq!(text(&call), "still here");
    }
    std::fs::write(&path, good.replace("Echoes.", "Echoes back.")).unwrap();
    let (before, report) = server.wait_reload();
    assert_eq!(report["params"]["level"], "info", "{report}");
    assert_only_tools_changed(&before);
    assert_eq!(report["params"]["data"]["generation"], 2);
}

#[test]
fn a_comment_only_edit_sends_nothing() {
    let dir = TempDir::new("reload-comment");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut server = serve(&path);
    std::fs::write(&path, format!("# a comment\n{}", tools_catalog(&["a"]))).unwrap();
    let (before, report) = server.wait_good_reload();
    assert!(methods(&before).is_empty(), "{before:?}");
    assert!(report["params"]["data"]["message"].as_str().unwrap().contains("no visible change"), "{report}");
}

#[test]
fn two_hundred_edits_in_a_second_end_in_the_last_state() {
    let dir = TempDir::new("reload-burst");
    let path = dir.write("catalog.yaml", &tools_catalog(&["t0"]));
    let mut server = serve(&path);
    for idx in 1..=200 {
        std::fs::write(&path, tools_catalog(&[&format!("t{idx}")])).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Reloads come as the burst allows; the last one serves the last edit.
    loop {
        server.wait_good_reload();
        if tool_names(&mut server) == ["t200"] {
            break;
        }
    }
    assert_eq!(text(&server.result("tools/call", json!({"name": "t200"}))), "t200 ran");
}

#[test]
fn subscribed_file_resources_report_updates() {
    let dir = TempDir::new("reload-resources");
    dir.write("watched.txt", "one");
    dir.write("other.txt", "one");
    let path = dir.write(
        "catalog.yaml",
        "server: { name: live, version: 1.0.0 }\nresources:\n  - { uri: \"file:///watched\", name: watched, file: watched.txt, mimeType: text/plain }\n  - { uri: \"file:///other\", name: other, file: other.txt, mimeType: text/plain }\n",
    );
    let mut server = serve(&path);
    server.result("resources/subscribe", json!({"uri": "file:///watched"}));
    std::fs::write(dir.path("other.txt"), "two").unwrap();
    let (before, _) = server.wait_good_reload();
    assert!(methods(&before).is_empty(), "an unsubscribed resource sent {before:?}");
    std::fs::write(dir.path("watched.txt"), "two").unwrap();
    let (before, _) = server.wait_good_reload();
    assert_eq!(methods(&before), ["notifications/resources/updated"], "{before:?}");
    assert_eq!(before[0]["params"]["uri"], "file:///watched");
    let read = server.result("resources/read", json!({"uri": "file:///watched"}));
    assert_eq!(read["contents"][0]["text"], "two");
    server.result("resources/unsubscribe", json!({"uri": "file:///watched"}));
    std::fs::write(dir.path("watched.txt"), "six").unwrap(); // same size: the list (with `size`) stays the same
    let (before, _) = server.wait_good_reload();
    assert!(methods(&before).is_empty(), "after unsubscribe: {before:?}");
}

#[test]
fn editing_a_template_changes_prompt_output() {
    let dir = TempDir::new("reload-template");
    dir.write("templates/greet.j2", "Hello {{ name }}.");
    let path = dir.write(
        "catalog.yaml",
        "server: { name: live, version: 1.0.0 }\nprompts:\n  - name: greet\n    description: Greets.\n    arguments: [{ name: name, required: true }]\n    messages: [{ role: user, template: greet.j2 }]\n",
    );
    let mut server = serve(&path);
    let get = |server: &mut Server| {
        let result = server.result("prompts/get", json!({"name": "greet", "arguments": {"name": "Ada"}}));
        result["messages"][0]["content"]["text"].as_str().unwrap().to_owned()
    };
    assert_eq!(get(&mut server), "Hello Ada.");
    std::fs::write(dir.path("templates/greet.j2"), "Good morning, {{ name }}!").unwrap();
    let (before, _) = server.wait_good_reload();
    assert!(methods(&before).is_empty(), "the prompt list did not change: {before:?}");
    assert_eq!(get(&mut server), "Good morning, Ada!");
}

#[test]
fn an_in_memory_database_keeps_its_rows_across_reloads() {
    let dir = TempDir::new("reload-database");
    let yaml = |description: &str| {
        format!(
            "server: {{ name: live, version: 1.0.0 }}\ndatabases:\n  main:\n    url: \"sqlite::memory:\"\n    setup: CREATE TABLE IF NOT EXISTS notes (text TEXT)\ntools:\n  - name: add\n    description: {description}\n    inputSchema: {{ type: object, properties: {{ text: {{ type: string }} }} }}\n    run: {{ sql: {{ database: main, statement: \"INSERT INTO notes (text) VALUES (:text)\" }}, text: added }}\n  - name: count\n    description: Counts.\n    run: {{ sql: {{ database: main, statement: \"SELECT count(*) AS n FROM notes\" }}, text: \"{{{{ rows[0].n }}}}\" }}\n"
        )
    };
    let path = dir.write("catalog.yaml", &yaml("Adds."));
    let mut server = serve(&path);
    server.result("tools/call", json!({"name": "add", "arguments": {"text": "kept"}}));
    std::fs::write(&path, yaml("Adds a note.")).unwrap();
    server.wait_good_reload();
    assert_eq!(text(&server.result("tools/call", json!({"name": "count"}))), "1");
}

#[test]
fn sighup_reloads_when_watching_is_off() {
    let dir = TempDir::new("reload-sighup");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut server = serve_with(&path, &["--no-watch"]);
    std::fs::write(&path, tools_catalog(&["b"])).unwrap();
    // Not watching: the file changed but nothing is reloaded until SIGHUP.
    assert_eq!(tool_names(&mut server), ["a"]);
    let status = std::process::Command::new("kill").args(["-HUP", &server.pid().to_string()]).status().unwrap();
    assert!(status.success());
    let (before, _) = server.wait_good_reload();
    assert_only_tools_changed(&before);
    assert_eq!(tool_names(&mut server), ["b"]);
}

#[test]
fn a_2026_listen_stream_hears_list_changes() {
    let dir = TempDir::new("reload-listen");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut server = Server::start(&path, &[]);
    let meta = meta_2026(json!({}));
    server.send(&json!({
        "jsonrpc": "2.0", "id": "listen", "method": "subscriptions/listen",
        "params": {"_meta": meta, "notifications": {"toolsListChanged": true}}
    }));
    let ack = server.wait_notification("notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true, "{ack}");
    std::fs::write(&path, tools_catalog(&["a", "b"])).unwrap();
    let changed = server.wait_notification("notifications/tools/list_changed");
    assert_eq!(changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen", "{changed}");
    let tools = server.result("tools/list", json!({"_meta": meta}));
    assert_eq!(tools["tools"].as_array().unwrap().len(), 2);
}

#[test]
fn polling_notices_changes_too() {
    let dir = TempDir::new("reload-poll");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut server = serve_with(&path, &["--poll", "20"]);
    std::fs::write(&path, tools_catalog(&["polled", "tools"])).unwrap();
    let (before, _) = server.wait_good_reload();
    assert_only_tools_changed(&before);
    assert_eq!(tool_names(&mut server), ["polled", "tools"]);
}

#[test]
fn check_watch_rechecks_on_every_save() {
    use std::io::{BufRead, BufReader};
    let dir = TempDir::new("check-watch");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut child = common::carte()
        .args(["check", "--watch"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |wanted: &str| {
        let deadline = std::time::Instant::now() + common::TIMEOUT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = received.recv_timeout(left).unwrap_or_else(|_| panic!("no `{wanted}` in {seen:?}"));
            if line.contains(wanted) {
                return;
            }
            seen.push(line);
        }
    };
    wait_for(": ok");
    wait_for("watching for changes");
    std::fs::write(&path, tools_catalog(&["a"]).replace("description:", "descripton:")).unwrap();
    wait_for("unknown key `descripton`");
    wait_for("watching for changes");
    std::fs::write(&path, tools_catalog(&["a"])).unwrap();
    wait_for(": ok");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn an_emptied_catalog_file_keeps_the_old_catalog() {
    let dir = TempDir::new("reload-empty");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut server = serve(&path);
    std::fs::write(&path, "").unwrap();
    let (before, report) = server.wait_reload();
    assert!(methods(&before).is_empty(), "an empty file announced {before:?}");
    assert_eq!(report["params"]["level"], "error", "{report}");
    let message = report["params"]["data"]["message"].as_str().unwrap();
    assert!(message.contains("is empty") && message.contains("still serving generation 1"), "{message}");
    assert_eq!(text(&server.result("tools/call", json!({"name": "a"}))), "a ran");
    std::fs::write(&path, tools_catalog(&["b"])).unwrap();
    server.wait_good_reload();
    assert_eq!(tool_names(&mut server), ["b"]);
}

#[test]
fn a_slow_writer_is_waited_for() {
    use std::io::Write;
    let dir = TempDir::new("reload-slow-writer");
    let path = dir.write("catalog.yaml", &tools_catalog(&["old"]));
    let mut server = serve(&path);
    // A valid catalog so far, but not what is being saved: `> catalog.yaml`
    // from a program that pauses longer than the debounce.
    let whole = tools_catalog(&["x", "y"]);
    let first = tools_catalog(&["x"]);
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(first.as_bytes()).unwrap();
    file.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(tool_names(&mut server), ["old"], "a file still being written was loaded");
    file.write_all(&whole.as_bytes()[first.len()..]).unwrap();
    drop(file);
    let (before, report) = server.wait_good_reload();
    assert_only_tools_changed(&before);
    let message = report["params"]["data"]["message"].as_str().unwrap();
    assert!(message.contains("+x +y") && message.contains("-old"), "one reload, from old to whole: {report}");
    assert_eq!(tool_names(&mut server), ["x", "y"]);
}

#[test]
fn a_save_during_the_start_up_load_is_reloaded() {
    // A catalog big enough that its start-up load (before the watch starts)
    // is still running when the file is saved again.
    let names: Vec<String> = (0..1500).map(|idx| format!("t{idx}")).collect();
    let dir = TempDir::new("reload-start-up");
    let path = dir.write("catalog.yaml", &tools_catalog(&names.iter().map(String::as_str).collect::<Vec<_>>()));
    let mut server = Server::start_with(&path, &[], &[]);
    std::thread::sleep(std::time::Duration::from_millis(200));
    std::fs::write(&path, tools_catalog(&["after"])).unwrap();
    let response = server.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "carte-tests", "version": "1"}}),
    );
    assert!(response.get("result").is_some(), "initialize failed: {response}");
    server.notify("notifications/initialized", json!({}));
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    while tool_names(&mut server) != ["after"] {
        assert!(std::time::Instant::now() < deadline, "the save during the start-up load was never loaded");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_save_that_declares_nothing_keeps_the_old_catalog() {
    let dir = TempDir::new("reload-nothing");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut server = serve(&path);
    for (saved, what) in [("# everything commented out\n", "comments only"), ("server: { name: live }\n", "no entries")]
    {
        std::fs::write(&path, saved).unwrap();
        let (before, report) = server.wait_reload();
        assert!(methods(&before).is_empty(), "{what}: announced {before:?}");
        assert_eq!(report["params"]["level"], "error", "{what}: {report}");
        let message = report["params"]["data"]["message"].as_str().unwrap();
        assert!(message.contains("declares nothing") && message.contains("still serving generation 1"), "{message}");
        assert_eq!(text(&server.result("tools/call", json!({"name": "a"}))), "a ran", "{what}");
    }
    std::fs::write(&path, tools_catalog(&["b"])).unwrap();
    server.wait_good_reload();
    assert_eq!(tool_names(&mut server), ["b"]);
}

#[test]
fn accepted_and_refused_reload_reports_have_one_shape() {
    let dir = TempDir::new("reload-shape");
    let path = dir.write("catalog.yaml", &tools_catalog(&["a"]));
    let mut server = serve(&path);
    std::fs::write(&path, tools_catalog(&["a"]).replace("run:", "rn:")).unwrap();
    let (_, refused) = server.wait_reload();
    std::fs::write(&path, tools_catalog(&["a", "b"])).unwrap();
    let (_, accepted) = server.wait_good_reload();
    for (report, generation) in [(&refused, 1), (&accepted, 2)] {
        let data = &report["params"]["data"];
        assert!(data["message"].is_string(), "{report}");
        assert_eq!(data["generation"], generation, "{report}");
        assert!(data["fingerprint"].is_string(), "{report}");
    }
    let diagnostic = &refused["params"]["data"]["diagnostics"][0];
    assert_eq!(diagnostic["severity"], "error", "{refused}");
    assert!(diagnostic["location"]["line"].as_u64().unwrap() > 0, "{refused}");
}
