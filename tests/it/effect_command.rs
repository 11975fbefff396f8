//! The `command` effect end to end: the real binary runs real programs.
//! Arguments stay one argument each, the environment is PATH plus `env`,
//! exit codes and output caps are honoured, stderr reaches the client as
//! log messages, and a timeout or a cancelled call leaves no process of
//! the program's group behind.

use crate::common;

use common::{Server, TempDir, assert_group_gone, read_pid, run_cli, text};
use serde_json::{Value, json};

/// A catalog of one tool `t` with arguments `a` and `b` (strings) whose
/// `run` is `run` (YAML, indented under `run:`).
fn catalog(run: &str) -> String {
    format!(
        "server: {{ name: cmd, version: 1.0.0 }}\ntools:\n  - name: t\n    description: Runs a program.\n    \
         inputSchema: {{ type: object, properties: {{ a: {{ type: string }}, b: {{ type: string }} }} }}\n    run:\n{run}"
    )
}

/// Calls tool `t` of the catalog in `dir` through `carte call`: whether it
/// failed, and the result's text.
fn call(dir: &TempDir, run: &str, args: &[&str]) -> (bool, String) {
    let path = dir.write("c.yaml", &catalog(run));
    let mut rest = vec!["t"];
    rest.extend_from_slice(args);
    let (_, result, stderr) = run_cli("call", &path, &rest, &[]);
    assert!(result.is_object(), "no result; stderr: {stderr}");
    (result["isError"] == true, text(&result))
}

#[test]
fn wc_counts_what_stdin_gives_it() {
    let dir = TempDir::new("cmd-wc");
    let run = "      command: { argv: [wc, -w], stdin: \"{{ a }}\", env: { LC_ALL: C } }\n      text: \"{{ stdout | trim }} words\"\n";
    assert_eq!(call(&dir, run, &["a=one two three four"]), (false, "4 words".to_owned()));
}

#[test]
fn each_argument_stays_one_argument() {
    let dir = TempDir::new("cmd-argv");
    let run = "      command: { argv: [printf, \"[%s]\", \"{{ a }}\", \"x {{ b }}\", literal] }\n      text: \"{{ stdout }}\"\n";
    let (failed, out) = call(&dir, run, &["a=a b; rm -rf / && echo $HOME `id` *", "b=\"quoted\" 'too'"]);
    assert!(!failed, "{out}");
    assert_eq!(out, "[a b; rm -rf / && echo $HOME `id` *][x \"quoted\" 'too'][literal]");
}

#[test]
fn the_environment_is_path_and_env_only() {
    let dir = TempDir::new("cmd-env");
    let path = dir.write(
        "c.yaml",
        &catalog("      command: { argv: [env], env: { GREETING: \"hi {{ a }}\", COUNT: 3, ON: true } }\n      text: \"{{ stdout }}\"\n"),
    );
    let (_, result, stderr) = run_cli("call", &path, &["t", "a=there"], &[("CARTE_TEST_PARENT_ONLY", "leak")]);
    let out = text(&result);
    let mut names: Vec<&str> = out.lines().map(|line| line.split('=').next().unwrap_or("")).collect();
    names.sort_unstable();
    assert_eq!(names, ["COUNT", "GREETING", "ON", "PATH"], "{out}\n{stderr}");
    assert!(out.contains("GREETING=hi there\n") && out.contains("COUNT=3\n") && out.contains("ON=true\n"), "{out}");
    assert!(out.contains(&format!("PATH={}", std::env::var("PATH").unwrap_or_default())), "{out}");
}

#[test]
fn cwd_is_relative_to_the_catalog_and_defaults_to_its_folder() {
    let dir = TempDir::new("cmd-cwd");
    std::fs::create_dir_all(dir.path("work/deep")).unwrap();
    let real = dir.0.canonicalize().unwrap();
    let (failed, out) =
        call(&dir, "      command: { argv: [pwd, -P], cwd: work/deep }\n      text: \"{{ stdout }}\"\n", &[]);
    assert!(!failed, "{out}");
    assert_eq!(out.trim_end(), real.join("work/deep").display().to_string());
    let (_, out) = call(&dir, "      command: { argv: [pwd, -P] }\n      text: \"{{ stdout }}\"\n", &[]);
    assert_eq!(out.trim_end(), real.display().to_string());
}

#[test]
fn stdin_is_empty_without_stdin() {
    let dir = TempDir::new("cmd-null");
    let (failed, out) = call(&dir, "      command: { argv: [wc, -c] }\n      text: \"{{ stdout | trim }}\"\n", &[]);
    assert_eq!((failed, out.as_str()), (false, "0"));
}

#[test]
fn a_failing_exit_is_an_error_result_with_code_and_stderr() {
    let dir = TempDir::new("cmd-exit");
    let run = "      command: { argv: [sh, -c, \"echo starting >&2; echo 'no such repo' >&2; exit 3\"] }\n";
    let (failed, out) = call(&dir, run, &[]);
    assert!(failed, "{out}");
    assert_eq!(out, "tool `t` failed: `sh` exited with code 3; stderr:\nstarting\nno such repo");
}

#[test]
fn ok_exit_codes_are_success_and_exit_code_is_in_the_result() {
    let dir = TempDir::new("cmd-ok");
    // grep exits 1 when nothing matches: not an error for this tool.
    let run = "      command: { argv: [grep, -c, needle], stdin: \"{{ a }}\", okExitCodes: [0, 1] }\n      \
               text: \"{{ exit_code }}:{{ stdout | trim }}\"\n";
    assert_eq!(call(&dir, run, &["a=hay\nstack"]), (false, "1:0".to_owned()));
    assert_eq!(call(&dir, run, &["a=a needle\nb needle"]), (false, "0:2".to_owned()));
    let (failed, out) = call(&dir, "      command: { argv: [grep, needle], stdin: \"hay\" }\n", &[]);
    assert!(failed, "{out}");
    assert_eq!(out, "tool `t` failed: `grep` exited with code 1 and wrote nothing to stderr");
}

#[test]
fn a_signal_is_named_and_exit_code_is_null() {
    let dir = TempDir::new("cmd-signal");
    let (failed, out) = call(&dir, "      command: { argv: [sh, -c, \"kill -TERM $$\"] }\n", &[]);
    assert!(failed, "{out}");
    assert!(out.contains("`sh` was killed by signal 15 (SIGTERM)"), "{out}");
}

#[test]
fn output_past_max_bytes_is_cut_with_a_notice() {
    let dir = TempDir::new("cmd-cap");
    let run = "      command: { argv: [head, -c, \"300000\", /dev/zero], maxBytes: 1000 }\n      \
               text: \"{{ stdout | length }}\"\n";
    let path = dir.write("c.yaml", &catalog(run));
    let (_, result, _) = run_cli("call", &path, &["t"], &[]);
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["content"][0]["text"], "1000");
    assert_eq!(
        result["content"][1]["text"],
        "[carte: `head` wrote 300000 bytes to stdout; this result was made from the first 1000 only]"
    );
}

#[test]
fn a_program_without_a_result_template_gives_its_stdout() {
    let dir = TempDir::new("cmd-json");
    let (failed, out) = call(&dir, "      command: { argv: [echo, hello] }\n", &[]);
    assert_eq!((failed, out.as_str()), (false, "\"hello\\n\""));
}

/// A program that records its process group and starts a grandchild, both
/// sleeping far past any wait of these tests.
const SLEEPER: &str =
    "      command: { argv: [sh, -c, \"echo $$ > group.pid; sleep 600 & sleep 600\"], timeout: 1s }\n";

#[test]
fn a_timeout_kills_the_whole_group() {
    let dir = TempDir::new("cmd-timeout");
    let (failed, out) = call(&dir, SLEEPER, &[]);
    assert!(failed, "{out}");
    assert_eq!(out, "tool `t` failed: `sh` did not finish within 1s and was killed, with every process it started");
    assert_group_gone(read_pid(&dir.path("group.pid")));
}

#[test]
fn a_cancelled_call_kills_the_whole_group() {
    let dir = TempDir::new("cmd-cancel");
    let path = dir.write("c.yaml", &catalog(&SLEEPER.replace("1s", "10m")));
    let mut server = Server::initialized(&path, &[]);
    server.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "t", "arguments": {}}}));
    read_pid(&dir.path("group.pid"));
    server.notify("notifications/cancelled", json!({"requestId": 7, "reason": "test"}));
    assert_group_gone(read_pid(&dir.path("group.pid")));
    // The server goes on serving.
    let result = server.result("tools/list", json!({}));
    assert_eq!(result["tools"][0]["name"], "t");
    assert!(server.finish().success());
}

#[test]
fn a_program_that_exits_leaves_nothing_running() {
    let dir = TempDir::new("cmd-background");
    let run = "      command: { argv: [sh, -c, \"echo $$ > group.pid; sleep 600 > /dev/null 2>&1 & echo done\"] }\n      \
               text: \"{{ stdout }}\"\n";
    assert_eq!(call(&dir, run, &[]), (false, "done\n".to_owned()));
    assert_group_gone(read_pid(&dir.path("group.pid")));
}

#[test]
fn stderr_lines_reach_the_client_as_log_messages() {
    let dir = TempDir::new("cmd-log");
    let run = "      command: { argv: [sh, -c, \"echo first >&2; echo out; echo second >&2\"] }\n      \
               text: \"{{ stdout | trim }}|{{ stderr }}\"\n";
    let path = dir.write("c.yaml", &catalog(run));
    let mut server = Server::initialized(&path, &[]);
    server.result("logging/setLevel", json!({"level": "info"}));
    let result = server.result("tools/call", json!({"name": "t", "arguments": {}}));
    assert_eq!(text(&result), "out|first\nsecond\n");
    let logs: Vec<&Value> = server.notifications.iter().filter(|n| n["method"] == "notifications/message").collect();
    let lines: Vec<(&Value, &Value, &Value)> =
        logs.iter().map(|n| (&n["params"]["level"], &n["params"]["logger"], &n["params"]["data"])).collect();
    assert_eq!(
        lines,
        [(&json!("info"), &json!("sh"), &json!("first")), (&json!("info"), &json!("sh"), &json!("second"))]
    );
    assert!(server.finish().success());
}

#[test]
fn a_program_gone_after_load_is_an_error_result() {
    let dir = TempDir::new("cmd-gone");
    let script = dir.write("bin/hello.sh", "#!/bin/sh\necho hello\n");
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path =
        dir.write("c.yaml", &catalog("      command: { argv: [./bin/hello.sh] }\n      text: \"{{ stdout }}\"\n"));
    let mut server = Server::initialized(&path, &[]);
    let result = server.result("tools/call", json!({"name": "t", "arguments": {}}));
    assert_eq!(text(&result), "hello\n");
    std::fs::remove_file(&script).unwrap();
    let result = server.result("tools/call", json!({"name": "t", "arguments": {}}));
    assert_eq!(result["isError"], true, "{result}");
    assert!(text(&result).starts_with("tool `t` failed: could not start `./bin/hello.sh`: "), "{result}");
    assert!(server.finish().success());
}

#[test]
fn a_missing_program_is_a_check_error_at_argv_0() {
    let dir = TempDir::new("cmd-check");
    let path = dir.write("c.yaml", &catalog("      command: { argv: [no-such-program-carte, -x] }\n"));
    let (code, _, stderr) = run_cli("check", &path, &[], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("c.yaml:7:25: error: program `no-such-program-carte` not found on PATH"), "{stderr}");
}

/// `carte call` on the shipped shell-tools example: the result's text.
fn example(tool: &str, args: &[&str]) -> (bool, String) {
    let catalog = common::repo_root().join("examples/shell-tools/catalog.yaml");
    let mut rest = vec![tool];
    rest.extend_from_slice(args);
    let (_, result, stderr) = run_cli("call", &catalog, &rest, &[]);
    assert!(result.is_object(), "no result; stderr: {stderr}");
    (result["isError"] == true, text(&result))
}

#[test]
fn the_shell_tools_example_checks_clean_and_runs() {
    let catalog = common::repo_root().join("examples/shell-tools/catalog.yaml");
    let (code, _, stderr) = run_cli("check", &catalog, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.ends_with("catalog.yaml: ok\n") && !stderr.contains("warning"), "{stderr}");
    assert_eq!(example("list_notes", &[]), (false, "ideas.md\nops.md\nstandup.md".to_owned()));
    assert_eq!(
        example("search_notes", &["text=RETRY"]),
        (
            false,
            "./ideas.md:4:- Retry queue: back off exponentially, give up after a day.\n\
             ./standup.md:3:- Ana: finished the invoice export; starts on the retry queue."
                .to_owned()
        )
    );
    assert_eq!(example("search_notes", &["text=-rf ."]), (false, "no note mentions “-rf .”".to_owned()));
    assert_eq!(example("read_note", &["name=ops.md", "lines=1"]), (false, "# Ops\n".to_owned()));
    let (failed, out) = example("read_note", &["name=../catalog.yaml"]);
    assert!(failed && out.starts_with("invalid arguments for tool `read_note`"), "{out}");
    assert_eq!(
        example("count_words", &["text=héllo wörld\ntwo"]),
        (false, "lines: 1, words: 3, characters: 15".to_owned())
    );
    assert_eq!(example("sort_lines", &["text=b\na\nb", "unique=true"]), (false, "a\nb\n".to_owned()));
    let (failed, now) = example("utc_now", &[]);
    assert!(!failed && now.len() == 20 && now.ends_with('Z'), "{now}");
}

#[test]
fn check_warns_where_a_client_can_pass_an_option() {
    let dir = TempDir::new("cmd-option");
    // `a` is any text: `--version` (or `--output=…` to other programs)
    // would reach sha256sum as an option.
    let path = dir.write("c.yaml", &catalog("      command: { argv: [sha256sum, \"{{ a }}\"] }\n"));
    let (code, _, stderr) = run_cli("check", &path, &[], &[]);
    assert_eq!(code, Some(0), "a warning, not an error: {stderr}");
    assert!(stderr.contains("warning: `argv[1]` (`{{ a }}`) starts with a value a client chooses"), "{stderr}");
    assert!(stderr.contains("c.yaml:7:36: warning"), "{stderr}");
    assert!(stderr.contains("put `--` before it"), "{stderr}");
    // And the call shows why: the program took the value as its option.
    let (_, version) = call(
        &dir,
        "      command: { argv: [sha256sum, \"{{ a }}\"] }\n      text: \"{{ stdout }}\"\n",
        &["a=--version"],
    );
    assert!(version.contains("sha256sum"), "{version}");
    // The safe forms check clean: `--` first, a text prefix, an author's
    // constant, or an argument a client cannot choose freely.
    for run in [
        "      command: { argv: [sha256sum, --, \"{{ a }}\"] }\n",
        "      command: { argv: [sha256sum, \"./{{ a }}\"] }\n",
        "      command: { argv: [sort, \"{{ '--unique' if a else '--stable' }}\"] }\n",
    ] {
        let path = dir.write("c.yaml", &catalog(run));
        let (code, _, stderr) = run_cli("check", &path, &[], &[]);
        assert_eq!(code, Some(0), "{run}: {stderr}");
        assert!(!stderr.contains("a client chooses"), "{run}: {stderr}");
    }
    let typed = "server: { name: cmd, version: 1.0.0 }\ntools:\n  - name: t\n    description: Runs a program.\n    \
                 inputSchema: { type: object, properties: { n: { type: integer }, f: { type: string, enum: [a.txt, b.txt] } } }\n    \
                 run:\n      command: { argv: [head, -n, \"{{ n }}\", \"{{ f }}\"] }\n";
    let path = dir.write("c.yaml", typed);
    let (_, _, stderr) = run_cli("check", &path, &[], &[]);
    assert!(!stderr.contains("a client chooses"), "{stderr}");
}

/// Waits (bounded) for process `pid` to be gone (or a zombie nobody needs):
/// fails the test if it still runs.
fn assert_process_gone(pid: u32) {
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|stat| {
            stat.rfind(')').and_then(|idx| stat[idx + 1..].split_whitespace().next().map(str::to_owned))
        });
        match state.as_deref() {
            None | Some("Z") | Some("X") => return,
            Some(state) => assert!(std::time::Instant::now() < deadline, "process {pid} still runs (state {state})"),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A program whose child leaves its process group and session (`setsid`),
/// both sleeping far past any wait of these tests.
const ESCAPER: &str = "      command: { argv: [sh, -c, \"setsid sleep 600 & echo $! > escaped.pid; echo $$ > group.pid; sleep 600\"], timeout: 1s }\n";

#[test]
fn a_timeout_kills_what_left_the_group_too() {
    let dir = TempDir::new("cmd-setsid");
    let (failed, out) = call(&dir, ESCAPER, &[]);
    assert!(failed, "{out}");
    assert!(out.contains("was killed, with every process it started"), "{out}");
    assert_group_gone(read_pid(&dir.path("group.pid")));
    assert_process_gone(read_pid(&dir.path("escaped.pid")));
}

#[test]
fn a_killed_carte_leaves_no_program_running() {
    let dir = TempDir::new("cmd-carte-killed");
    let path = dir.write("c.yaml", &catalog(&ESCAPER.replace("1s", "10m")));
    let mut server = Server::initialized(&path, &[]);
    server.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "t", "arguments": {}}}));
    let (group, escaped) = (read_pid(&dir.path("group.pid")), read_pid(&dir.path("escaped.pid")));
    // SIGKILL: carte cannot clean up; the kernel tells the supervisor.
    // SAFETY: kill only sends a signal to the server this test started.
    unsafe { libc::kill(server.pid() as libc::pid_t, libc::SIGKILL) };
    assert_group_gone(group);
    assert_process_gone(escaped);
}
