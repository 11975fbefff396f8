//! The `jq` template filter through the real binary: `carte call` on a tool
//! whose template filters `data:` and an argument with jq; a filter that
//! fails or runs away is the tool's error result, and the server's
//! environment is out of its reach.

use crate::common;

use std::path::Path;

use common::TempDir;
use serde_json::{Value, json};

const CATALOG: &str = r#"
server: { name: jq, version: "1" }
data:
  x:
    items: [{ id: 7, name: seven }, { id: 9, name: nine }]
tools:
  - name: ids
    description: The ids of data.x's items
    run:
      text: "{{ data.x | jq('.items[].id') | tojson }} {{ data.x | jq('.items[0].name') }} {{ data.x | jq('.items[] | select(.id > 100)') | length }}"
  - name: count
    description: Counts up to n with jq
    inputSchema:
      type: object
      properties: { doc: { type: object } }
      required: [doc]
    run:
      text: "{{ doc | jq('[range(.n)] | length') }}"
  - name: upper
    description: The name in capitals
    inputSchema:
      type: object
      properties: { doc: { type: object } }
      required: [doc]
    run:
      text: "{{ doc | jq('.name | ascii_upcase') }}"
  - name: environment
    description: Tries to read the server's environment
    run:
      text: "{{ data | jq('env | tostring') }}"
"#;

/// Runs `carte call CATALOG TOOL ARGS…` with a secret in the environment:
/// its exit code, stdout as JSON, stderr.
fn call(catalog: &Path, rest: &[&str]) -> (Option<i32>, Value, String) {
    common::run_cli("call", catalog, rest, &[("CARTE_JQ_SECRET", "hunter2")])
}

#[test]
fn a_template_filters_data_with_jq() {
    let dir = TempDir::new("jq-data");
    let path = dir.write("catalog.yaml", CATALOG);
    let (code, stdout, stderr) = call(&path, &["ids"]);
    assert_eq!(code, Some(0), "{stderr}");
    // Several outputs are a list, one is itself, none is an empty list.
    assert_eq!(stdout["content"][0]["text"], "[7, 9] seven 0");
}

#[test]
fn a_failing_or_runaway_filter_is_an_error_result() {
    let dir = TempDir::new("jq-errors");
    let path = dir.write("catalog.yaml", CATALOG);
    let (code, stdout, stderr) = call(&path, &["count", "--json", r#"{"doc": {"n": 3}}"#]);
    assert_eq!((code, &stdout["content"][0]["text"]), (Some(0), &json!("3")), "{stderr}");
    let (code, stdout, _) = call(&path, &["upper", "--json", r#"{"doc": {"name": 5}}"#]);
    assert_eq!((code, &stdout["isError"]), (Some(1), &json!(true)));
    let text = stdout["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("invalid operation: jq: cannot use 5 as"), "{text}");
    // A client asking for 10^12 items: stopped, and the answer says why.
    let (code, stdout, _) = call(&path, &["count", "--json", r#"{"doc": {"n": 1000000000000}}"#]);
    assert_eq!((code, &stdout["isError"]), (Some(1), &json!(true)));
    let text = stdout["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("the jq filter did too much work"), "{text}");
}

#[test]
fn jq_cannot_read_the_servers_environment() {
    let dir = TempDir::new("jq-env");
    let path = dir.write("catalog.yaml", CATALOG);
    let (code, stdout, _) = call(&path, &["environment"]);
    assert_eq!((code, &stdout["isError"]), (Some(1), &json!(true)));
    let text = stdout["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("not available in carte"), "{text}");
    assert!(!stdout.to_string().contains("hunter2"), "{stdout}");
}
