//! `skills:` — a folder of skills served with MCP's skills extension: each
//! folder with a `SKILL.md` is listed (`skills/list`), described
//! (`skills/get`: its files with their digests) and read (`resources/read`
//! of `skill://…`); an edit reaches clients like any other file's.

use crate::common;

use common::{Server, TempDir};
use serde_json::json;

const CATALOG: &str =
    "server: { name: skilled }\nskills: skills\ntools:\n  - { name: t, description: T., run: { text: t } }\n";

const BILLING: &str = "---\nname: billing\ndescription: How to bill a customer.\n---\n# Billing\nSee reference.md.\n";

#[test]
fn a_folder_of_skills_is_listed_described_read_and_reloaded() {
    let dir = TempDir::new("skills");
    dir.write("skills/billing/SKILL.md", BILLING);
    dir.write("skills/billing/reference.md", "Invoices go out monthly.\n");
    let path = dir.write("skilled.yaml", CATALOG);
    let mut server = Server::start(&path, &[]);
    let init = server.result(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert!(init["capabilities"]["extensions"]["io.modelcontextprotocol/skills"].is_object(), "{init}");
    server.notify("notifications/initialized", json!({}));

    let listed = server.result("skills/list", json!({}));
    let skill = &listed["skills"][0];
    assert_eq!(skill["uri"], "skill://billing/SKILL.md", "{listed}");
    assert_eq!(skill["frontmatter"]["description"], "How to bill a customer.");
    let got = server.result("skills/get", json!({"uri": "skill://billing/SKILL.md"}));
    let files: Vec<&str> =
        got["skill"]["resources"].as_array().unwrap().iter().filter_map(|f| f["uri"].as_str()).collect();
    assert!(files.contains(&"skill://billing/reference.md"), "{got}");

    let read = server.result("resources/read", json!({"uri": "skill://billing/reference.md"}));
    assert_eq!(read["contents"][0]["text"], "Invoices go out monthly.\n");
    let missing = server.error("resources/read", json!({"uri": "skill://billing/nope.md"}));
    assert_eq!(missing["code"], -32002, "{missing}");

    // An edit is served after the reload.
    dir.write("skills/billing/SKILL.md", &BILLING.replace("How to bill a customer.", "Billing, revised."));
    // (No list changed: no reload report; the next `skills/list` after the swap says it.)
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    loop {
        let listed = server.result("skills/list", json!({}));
        if listed["skills"][0]["frontmatter"]["description"] == "Billing, revised." {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the edited skill was never served: {listed}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_skills_folder_that_is_not_there_is_an_error_at_its_line() {
    let dir = TempDir::new("skills-missing");
    let path = dir.write("skilled.yaml", CATALOG);
    let (code, _, stderr) = common::run_cli("check", &path, &[], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("skilled.yaml:2:9: error: the skills folder `skills` does not exist"), "{stderr}");
}
