//! The committed `catalogs/catalog.schema.json` (what editors read) is what
//! `carte schema` prints, and it describes the shipped catalog's keys; the
//! book's "Every key" page is what `carte schema --markdown` prints.

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

#[test]
fn the_books_reference_is_written_from_the_schema() {
    let output = common::carte().args(["schema", "--markdown"]).output().unwrap();
    assert!(output.status.success());
    let printed = String::from_utf8(output.stdout).unwrap();
    let page = common::repo_root().join("book/src/reference/keys.md");
    if common::blessing() {
        std::fs::write(&page, &printed).unwrap();
    }
    let committed = std::fs::read_to_string(&page).unwrap_or_default();
    assert!(
        printed == committed,
        "book/src/reference/keys.md is not what `carte schema --markdown` prints: \
         run `cargo run -- schema --markdown > book/src/reference/keys.md` (or CARTE_BLESS=1 cargo test)"
    );
    for block in ["## tool", "## run", "## sql effect", "## database"] {
        assert!(printed.contains(block), "no section {block}");
    }
}
