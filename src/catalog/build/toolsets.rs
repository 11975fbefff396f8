//! `toolsets:`: named subsets of the catalog's tools. Each name must fit in
//! a URL path segment (it is served at `/mcp/{name}`), each listed name must
//! be a tool; an empty toolset and a tool listed twice are warnings.

use std::collections::{HashMap, HashSet};

use indexmap::IndexMap;

use super::{Builder, NoteMut as _};
use crate::catalog::Tool;
use crate::diag::suggest;

/// Whether `name` can be a toolset's name: `[A-Za-z0-9_-]+`, so that it is
/// one URL path segment as written.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `name` with every character a URL path segment would need escaped as `_`.
fn usable_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

impl Builder<'_> {
    /// Checks `toolsets:` against the declared tools; returns each toolset's
    /// tools that were built, in the catalog's declaration order (the order
    /// of `tools/list`).
    pub(super) fn toolsets(&mut self, tools: &[Tool]) -> IndexMap<String, Vec<String>> {
        let assembled = self.assembled;
        let declared: HashSet<&str> = assembled.tools.iter().map(|d| d.spec.name.as_str()).collect();
        let mut toolsets = IndexMap::with_capacity(assembled.toolsets.len());
        for (name, decl) in &assembled.toolsets {
            if !valid_name(name) {
                let usable = usable_name(name);
                let hint = if usable.is_empty() {
                    "a toolset is served at `/mcp/{name}`: name it with letters, digits, `_` and `-` only".to_owned()
                } else {
                    format!(
                        "a toolset is served at `/mcp/{{name}}`: name it with letters, digits, `_` and `-` only, e.g. `{usable}`"
                    )
                };
                self.error(
                    "toolset-name",
                    assembled.locate_key(&decl.origin, ""),
                    format!("toolset name `{name}` cannot be a URL path segment"),
                )
                .hint = Some(hint);
            }
            if decl.spec.is_empty() {
                self.warn(
                    "toolset-empty",
                    assembled.locate_key(&decl.origin, ""),
                    format!("toolset `{name}` lists no tools"),
                )
                .hint = Some(format!(
                    "its clients would see an empty `tools/list`; list tool names in it (`{name}: [get_quote]`) or remove it"
                ));
            }
            let mut first: HashMap<&str, usize> = HashMap::with_capacity(decl.spec.len());
            for (idx, tool) in decl.spec.iter().enumerate() {
                let location = assembled.locate(&decl.origin, &format!("/{idx}"));
                if let Some(&previous) = first.get(tool.as_str()) {
                    let previous = assembled.locate(&decl.origin, &format!("/{previous}"));
                    self.warn("toolset-duplicate", location, format!("toolset `{name}` lists `{tool}` twice"))
                        .with_note_mut("first listed here", previous)
                        .hint = Some("a tool is in a toolset or not: remove this one".to_owned());
                    continue;
                }
                first.insert(tool, idx);
                if declared.contains(tool.as_str()) || assembled.dropped.tools {
                    continue; // a tool left out for a mistake (reported) may be the one named
                }
                let hint = suggest(tool, declared.iter().copied()).unwrap_or_else(|| {
                    "a toolset lists the `name` of tools declared under `tools:` (in this file or one it includes)"
                        .to_owned()
                });
                self.error("toolset-tool", location, format!("toolset `{name}` lists `{tool}`, which is not a tool"))
                    .hint = Some(hint);
            }
            let listed: HashSet<&str> = decl.spec.iter().map(String::as_str).collect();
            let members = tools.iter().filter(|t| listed.contains(t.name.as_str())).map(|t| t.name.clone()).collect();
            toolsets.insert(name.clone(), members);
        }
        toolsets
    }
}
