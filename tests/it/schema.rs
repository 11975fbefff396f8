//! The committed `catalogs/catalog.schema.json` (what editors read) is what
//! `carte schema` prints, and it describes the shipped catalog's keys.

use crate::common;

#[test]
fn committed_schema_is_current() {
    let output = common::carte().arg("schema").output().unwrap();
    assert!(output.status.success());
    let printed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let committed: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo_root().join("catalogs/catalog.schema.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(printed, committed, "run `cargo run -- schema > catalogs/catalog.schema.json`");
    let tool = &printed["$defs"]["ToolSpec"]["properties"];
    assert!(tool.get("inputSchema").is_some() && tool.get("run").is_some(), "{tool}");
    assert_eq!(printed["$defs"]["ToolSpec"]["additionalProperties"], false);
}
