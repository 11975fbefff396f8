//! Input crafted to make carte work hard, through the real binary: URIs that
//! made the old backtracking matcher run for hours, YAML alias bombs, and
//! templates-folder links pointing out of the folder.

mod common;

use common::{Server, TempDir};
use serde_json::json;

/// A template whose three `{+…}` expressions made the old matcher try every
/// way of cutting the URI in three (45 s for 800 bytes; hours for 4,000).
const PLUS_CATALOG: &str = "server:\n  name: plus\n  version: 1.0.0\nresourceTemplates:\n  - uriTemplate: x://{+a}/{+b}/{+c}/end\n    name: parts\n    text: \"{{ a }}|{{ b }}|{{ c }}\"\n";

#[test]
fn a_pathological_uri_is_answered_and_the_server_stays_responsive() {
    let dir = TempDir::new("plus");
    let catalog = dir.write("plus.yaml", PLUS_CATALOG);
    let mut server = Server::initialized(&catalog, &[]);
    let uri = format!("x://{}", "a/".repeat(1998));
    assert_eq!(uri.len(), 4000);
    let error = server.error("resources/read", json!({ "uri": uri }));
    assert_eq!(error["code"], -32002, "{error}");
    let uri = format!("x://{}end", "a/".repeat(1996));
    let read = server.result("resources/read", json!({ "uri": uri }));
    let text = read["contents"][0]["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.ends_with("a/a|a|a"), "the first expression takes the longest value: {read}");
    server.result("ping", json!({}));
}
