//! What changed between two snapshots, as clients see it: the wire form of
//! each list (so a comment-only edit changes nothing), and the contents of
//! the resources clients subscribed to.
//!
//! The summary names only what every client can see (the lists); which
//! subscribed resources were updated is told to each client for its own
//! subscriptions ([`Diff::summary_for`]), never those of other clients.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value};

use crate::catalog::Catalog;
use crate::server::Snapshot;
use crate::server::hub::Changes;

/// The changes to announce, and a one-line summary for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    /// What clients are told.
    pub changes: Changes,
    /// E.g. `tools +book_room ~get_quote; prompts -plan`, or `no visible change`:
    /// the lists only, never the subscribed resources (see [`Diff::summary_for`]).
    pub summary: String,
}

impl Diff {
    /// The summary for one client, told that `updated` (its own
    /// subscriptions) changed: e.g. `tools +a; updated x://one x://two`.
    pub fn summary_for(&self, updated: &[&str]) -> String {
        if updated.is_empty() {
            return self.summary.clone();
        }
        let updated = format!("updated {}", updated.join(" "));
        if self.summary == NO_CHANGE { updated } else { format!("{}; {updated}", self.summary) }
    }
}

const NO_CHANGE: &str = "no visible change";

/// Compares `old` and `new`, reading each URI in `subscribed` from both.
pub fn compare(old: &Snapshot, new: &Snapshot, subscribed: &BTreeSet<String>) -> Diff {
    let (old_catalog, new_catalog) = (&old.catalog, &new.catalog);
    let mut parts = Vec::new();
    let (before, after) = (lists(old_catalog), lists(new_catalog));
    let [tools, prompts, resources, templates] =
        std::array::from_fn(|i| section(before[i].0, &before[i].1, &after[i].1, &mut parts));
    let toolsets = changed_toolsets(old_catalog, new_catalog);
    if !toolsets.is_empty() {
        parts.push(format!("toolsets ~{}", toolsets.iter().map(String::as_str).collect::<Vec<_>>().join(" ~")));
    }
    // A resource that reads a database in the new catalog is read again for
    // real after the swap (`crate::live`); here, what changed without one.
    let updated: BTreeSet<String> = subscribed
        .iter()
        .filter(|uri| crate::resource::database_of(new_catalog, uri).is_none() && read(old, uri) != read(new, uri))
        .cloned()
        .collect();
    if old_catalog.server != new_catalog.server {
        parts.push("server info (clients see it when they next connect)".to_owned());
    }
    let summary = if parts.is_empty() { NO_CHANGE.to_owned() } else { parts.join("; ") };
    Diff { changes: Changes { tools, prompts, resources: resources || templates, updated, toolsets }, summary }
}

/// The toolsets whose `tools/list` differs between `old` and `new` (order
/// included), and those only one of them has: what their clients are told.
fn changed_toolsets(old: &Catalog, new: &Catalog) -> BTreeSet<String> {
    fn tools<'a>(catalog: &'a Catalog, name: &str) -> Option<Entries<'a>> {
        let members = catalog.toolsets.get(name)?;
        Some(members.iter().filter_map(|tool| Some((tool.as_str(), &catalog.tool(tool)?.wire))).collect())
    }
    old.toolsets
        .keys()
        .chain(new.toolsets.keys())
        .filter(|name| tools(old, name) != tools(new, name))
        .cloned()
        .collect()
}

/// A list's entries, keyed by name or URI, with their wire forms.
type Entries<'a> = Vec<(&'a str, &'a Map<String, Value>)>;

/// Each list with its name: tools, prompts, resources, resource templates.
fn lists(catalog: &Catalog) -> [(&'static str, Entries<'_>); 4] {
    [
        ("tools", catalog.tools.iter().map(|t| (t.name.as_str(), &t.wire)).collect()),
        ("prompts", catalog.prompts.iter().map(|p| (p.name.as_str(), &p.wire)).collect()),
        ("resources", catalog.resources.iter().map(|r| (r.uri.as_str(), &r.wire)).collect()),
        ("resource templates", catalog.resource_templates.iter().map(|t| (t.template.as_str(), &t.wire)).collect()),
    ]
}

/// Whether a list changed (order included); adds `name +added -removed ~changed` to `parts`.
fn section(
    name: &str,
    old: &[(&str, &Map<String, Value>)],
    new: &[(&str, &Map<String, Value>)],
    parts: &mut Vec<String>,
) -> bool {
    if old == new {
        return false;
    }
    let before: HashMap<&str, &Map<String, Value>> = old.iter().copied().collect();
    let after: HashSet<&str> = new.iter().map(|(key, _)| *key).collect();
    let mut words = Vec::new();
    for (key, wire) in new {
        match before.get(key) {
            None => words.push(format!("+{key}")),
            Some(previous) if previous != wire => words.push(format!("~{key}")),
            Some(_) => {}
        }
    }
    for (key, _) in old {
        if !after.contains(key) {
            words.push(format!("-{key}"));
        }
    }
    if words.is_empty() {
        words.push("reordered".to_owned());
    }
    parts.push(format!("{name} {}", words.join(" ")));
    true
}

/// A resource's contents (or why it cannot be read), comparable.
fn read(snapshot: &Snapshot, uri: &str) -> Value {
    match snapshot.read_resource_json(uri) {
        Ok(contents) => contents,
        Err(err) => Value::String(err.message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(yaml: &str) -> Snapshot {
        Snapshot::new(crate::catalog::from_text(yaml))
    }

    #[test]
    fn names_what_was_added_removed_and_changed() {
        let tool = |name: &str, description: &str| {
            format!("  - name: {name}\n    description: {description}\n    run: {{ text: {name} }}\n")
        };
        let head = "server: { name: d, version: 1.0.0 }\ntools:\n";
        let old = snapshot(&format!("{head}{}{}", tool("a", "A."), tool("c", "C.")));
        let new = snapshot(&format!("{head}{}{}", tool("a", "A, changed."), tool("b", "B.")));
        let diff = compare(&old, &new, &BTreeSet::new());
        assert_eq!(diff.summary, "tools ~a +b -c");
        assert!(diff.changes.tools && !diff.changes.prompts && !diff.changes.resources);
        let same = snapshot(&format!("# only a comment\n{head}{}{}", tool("a", "A, changed."), tool("b", "B.")));
        let diff = compare(&new, &same, &BTreeSet::new());
        assert_eq!(diff.summary, "no visible change");
        assert_eq!(diff.changes, Changes::default());
    }

    #[test]
    fn names_the_toolsets_whose_tools_changed() {
        let catalog = |toolsets: &str, a: &str, b: &str| {
            format!(
                "server: {{ name: d, version: 1.0.0 }}\ntoolsets: {toolsets}\ntools:\n  - {{ name: a, description: {a}, run: {{ text: a }} }}\n  - {{ name: b, description: {b}, run: {{ text: b }} }}\n"
            )
        };
        let old = snapshot(&catalog("{ only_a: [a], only_b: [b], gone: [a] }", "A.", "B."));
        let new = snapshot(&catalog("{ only_a: [a], only_b: [b], came: [b] }", "A.", "B changed."));
        let diff = compare(&old, &new, &BTreeSet::new());
        let names: Vec<&str> = diff.changes.toolsets.iter().map(String::as_str).collect();
        assert_eq!(names, ["came", "gone", "only_b"]);
        assert!(diff.changes.tools);
        assert_eq!(diff.summary, "tools ~b; toolsets ~came ~gone ~only_b");
    }

    #[test]
    fn the_summary_leaves_subscribed_resources_to_each_client() {
        let catalog = |text: &str| {
            format!(
                "server: {{ name: d, version: 1.0.0 }}\nresources:\n  - {{ uri: \"x://secret\", name: s, text: {text} }}\n"
            )
        };
        let old = snapshot(&catalog("one"));
        let new = snapshot(&catalog("two"));
        let diff = compare(&old, &new, &BTreeSet::from(["x://secret".to_owned()]));
        assert_eq!(diff.changes.updated, BTreeSet::from(["x://secret".to_owned()]));
        assert_eq!(diff.summary, "no visible change");
        assert_eq!(diff.summary_for(&[]), "no visible change");
        assert_eq!(diff.summary_for(&["x://secret"]), "updated x://secret");
    }
}
