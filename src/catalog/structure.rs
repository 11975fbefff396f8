//! Structural checks: unknown keys, missing keys and wrong types, all of them
//! at once, each pointing at its place in the file.
//!
//! The rules are not written here: they are the JSON Schema derived from
//! [`CatalogFile`] (the same one `carte schema` prints). This module runs it
//! over a parsed file with `jsonschema` and turns each violation into a
//! diagnostic a person can act on (`did you mean description?`).
//!
//! A file with mistakes is still read as far as it can be ([`Entries`]), so
//! that the semantic checks run on the rest in the same `carte check`: an
//! unknown key is read as the key its hint names (`descripton` as
//! `description`), and an entry (a tool, a prompt, a database, …) with any
//! other mistake is left out, so nothing is reported twice about it.

mod violation;

use std::collections::HashSet;
use std::sync::LazyLock;

use indexmap::IndexMap;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::catalog::model::{
    CatalogFile, Includes, PromptSpec, ResourceSpec, ResourceTemplateSpec, ServerSpec, ToolSpec,
};
use crate::catalog::source::{ParsedFile, Positions};
use crate::diag::escape_pointer;
use crate::diag::{Diagnostic, did_you_mean};
pub use crate::diag::{readable_path, template_place};
use crate::effect::block::{Build, LeftOut, Registered, Written};
use crate::effect::{BLOCK_KEYS, Blocks};
use violation::{CAMEL_CASE, explain};
pub use violation::{describe, describe_value};

/// The catalog format's JSON Schema, as `carte schema` prints it.
pub fn catalog_schema() -> Value {
    crate::catalog::schema::catalog_schema()
}

struct Compiled {
    schema: Value,
    validator: Option<jsonschema::Validator>,
}

static COMPILED: LazyLock<Compiled> = LazyLock::new(|| {
    let schema = catalog_schema();
    let validator = jsonschema::validator_for(&schema).ok();
    Compiled { schema, validator }
});

/// The keys a catalog file may have at the top, besides the effects' blocks
/// ([`BLOCK_KEYS`]).
const OWN_KEYS: &[&str] =
    &["server", "include", "data", "toolsets", "tools", "prompts", "resources", "resourceTemplates"];

/// The keys a catalog file may have at the top.
pub(crate) fn top_level_keys() -> impl Iterator<Item = &'static str> + Clone {
    OWN_KEYS.iter().chain(BLOCK_KEYS).copied()
}

/// The lists whose entries are checked one by one (a mistake leaves out the entry).
const LISTS: &[&str] = &["tools", "prompts", "resources", "resourceTemplates"];

/// What the structural check read from one file.
#[derive(Debug, Default)]
pub struct Checked {
    /// Everything that could be read (all of it when `problems` is empty).
    pub entries: Entries,
    /// The file's mistakes, one diagnostic each.
    pub problems: Vec<Diagnostic>,
    /// Whether the file declares a tool, prompt, resource or resource template
    /// (read or left out), or was refused whole: false means it declares nothing.
    pub declares: bool,
    /// Unknown keys read as the key their hint names: the pointer as read,
    /// and as written (see [`crate::catalog::source::Positions::rename`]).
    pub renamed: Vec<(String, String)>,
}

/// The declarations of one file, each list entry with its index in the file.
#[derive(Debug, Default)]
pub struct Entries {
    /// `server:`.
    pub server: Option<ServerSpec>,
    /// `include:` patterns.
    pub include: Vec<String>,
    /// `data:`.
    pub data: Map<String, Value>,
    /// `skills:`.
    pub skills: Option<String>,
    /// The effects' blocks (`databases:`, `apis:`).
    pub blocks: Blocks<Written>,
    /// `toolsets:`.
    pub toolsets: IndexMap<String, Vec<String>>,
    /// `tools:`, with their indexes.
    pub tools: Vec<(usize, ToolSpec)>,
    /// `prompts:`, with their indexes.
    pub prompts: Vec<(usize, PromptSpec)>,
    /// `resources:`, with their indexes.
    pub resources: Vec<(usize, ResourceSpec)>,
    /// `resourceTemplates:`, with their indexes.
    pub resource_templates: Vec<(usize, ResourceTemplateSpec)>,
    /// What was left out for its mistakes.
    pub dropped: Dropped,
}

/// Declarations left out for a structural mistake (already reported): what
/// refers to them is not checked, so the mistake is not reported twice.
#[derive(Debug, Default, Clone)]
pub struct Dropped {
    /// Entries of the effects' blocks, by the block's key.
    pub blocks: IndexMap<&'static str, LeftOut>,
    /// Whether any resource or resource template was left out.
    pub resources: bool,
    /// Whether any tool, or a toolset, was left out.
    pub tools: bool,
}

impl Dropped {
    /// Adds what `other` left out.
    pub fn merge(&mut self, other: Dropped) {
        for (key, left_out) in other.blocks {
            self.blocks.entry(key).or_default().merge(left_out);
        }
        self.resources |= other.resources;
        self.tools |= other.tools;
    }

    /// The entries left out of the block `key`.
    pub fn block(&self, key: &str) -> LeftOut {
        self.blocks.get(key).cloned().unwrap_or_default()
    }
}

impl Entries {
    fn of(file: CatalogFile) -> Entries {
        Entries {
            server: file.server,
            include: file.include.map(|i| i.patterns().into_iter().map(str::to_owned).collect()).unwrap_or_default(),
            data: file.data.unwrap_or_default(),
            skills: file.skills,
            blocks: file.blocks.into_written(),
            toolsets: file.toolsets.unwrap_or_default(),
            tools: file.tools.unwrap_or_default().into_iter().enumerate().collect(),
            prompts: file.prompts.unwrap_or_default().into_iter().enumerate().collect(),
            resources: file.resources.unwrap_or_default().into_iter().enumerate().collect(),
            resource_templates: file.resource_templates.unwrap_or_default().into_iter().enumerate().collect(),
            dropped: Dropped::default(),
        }
    }
}

/// What [`explain`] found, besides the diagnostics: how to read the rest.
#[derive(Default)]
struct Findings {
    problems: Vec<Diagnostic>,
    /// Unknown keys: the pointer of their mapping, the key, and the key to
    /// read it as (None: leave it out).
    unknown: Vec<(String, String, Option<String>)>,
    /// Pointers of values with any other mistake.
    broken: Vec<String>,
}

/// Checks one parsed file against the catalog schema and reads what it can.
/// Every violation becomes one diagnostic.
pub fn check_file(parsed: &ParsedFile) -> Checked {
    let declares = declares_entries(&parsed.value);
    // The schema is derived from the model, so a file the model reads is one
    // the schema accepts: the schema (slow to build, at start-up) is only
    // needed to explain a file the model refuses.
    let read = <CatalogFile as serde::Deserialize>::deserialize(&parsed.value);
    if let Ok(file) = read {
        return Checked { entries: Entries::of(file), problems: Vec::new(), declares, renamed: Vec::new() };
    }
    if let Some(problem) = not_a_catalog(&parsed.value, &parsed.positions) {
        return Checked { entries: Entries::default(), problems: vec![problem], declares: true, renamed: Vec::new() };
    }
    let compiled = &*COMPILED;
    let mut findings = Findings::default();
    if let Some(validator) = compiled.validator.as_ref().filter(|v| !v.is_valid(&parsed.value)) {
        for error in validator.iter_errors(&parsed.value) {
            explain(&compiled.schema, &parsed.value, &parsed.positions, &error, &mut findings);
        }
    }
    if findings.problems.is_empty() {
        let problem = match <CatalogFile as serde::Deserialize>::deserialize(&parsed.value) {
            Ok(file) => {
                return Checked { entries: Entries::of(file), problems: Vec::new(), declares, renamed: Vec::new() };
            }
            Err(err) => Diagnostic::error("invalid-catalog", parsed.positions.locate(""), err.to_string()),
        };
        return Checked { entries: Entries::default(), problems: vec![problem], declares: true, renamed: Vec::new() };
    }
    let (entries, declares_when_read) = salvage(&parsed.value, &findings);
    let renamed = findings
        .unknown
        .iter()
        .filter_map(|(parent, key, to)| {
            let to = to.as_ref()?;
            // Salvage reads it as `to` only where no `to` is written beside it.
            let taken = parsed.value.pointer(parent).and_then(Value::as_object).is_some_and(|map| map.contains_key(to));
            (!taken).then_some(())?;
            Some((format!("{parent}/{}", escape_pointer(to)), format!("{parent}/{}", escape_pointer(key))))
        })
        .collect();
    Checked { entries, problems: findings.problems, declares: declares || declares_when_read, renamed }
}

/// Whether a file lists any tool, prompt, resource or resource template,
/// however well.
fn declares_entries(value: &Value) -> bool {
    LISTS.iter().any(|key| match value.get(*key) {
        None | Some(Value::Null) => false,
        Some(Value::Array(items)) => !items.is_empty(),
        Some(Value::Object(map)) => !map.is_empty(),
        Some(_) => true,
    })
}

/// One diagnostic for a file none of whose top-level keys is (or is close to)
/// a catalog key, such as a `package.json`, instead of one per key.
fn not_a_catalog(value: &Value, positions: &Positions) -> Option<Diagnostic> {
    let map = value.as_object()?;
    let foreign = |key: &str| {
        !top_level_keys().any(|top| top == key)
            && !CAMEL_CASE.iter().any(|(snake, _)| *snake == key)
            && did_you_mean(key, top_level_keys()).is_none()
    };
    if map.len() < 2 || !map.keys().all(|key| foreign(key)) {
        return None;
    }
    let keys: Vec<String> = map.keys().take(3).map(|key| format!("`{key}`")).collect();
    let more = if map.len() > 3 { ", …" } else { "" };
    Some(
        Diagnostic::error(
            "not-a-catalog",
            crate::diag::Location::file_start(&positions.file),
            format!("this does not look like a carte catalog: none of its keys ({}{more}) is a catalog key", keys.join(", ")),
        )
        .with_hint("a carte catalog starts with keys such as `server:`, `tools:`, `prompts:` and `resources:`; is this the file you meant to check?"),
    )
}

/// The entry a pointer is inside, as (list or `databases`, index or name),
/// or None outside of any entry (`server`, `data`, the top level).
fn entry_of(pointer: &str) -> Option<(String, String)> {
    let mut segments = pointer.split('/').skip(1).map(|s| s.replace("~1", "/").replace("~0", "~"));
    let section = segments.next()?;
    let item = segments.next()?;
    (LISTS.contains(&section.as_str()) || BLOCK_KEYS.contains(&section.as_str()) || section == "toolsets")
        .then_some((section, item))
}

/// Reads what `findings` leave of a file: unknown keys read as the key their
/// hint names or left out, entries with another mistake left out. Also says
/// whether the file, so read, declares any entry (`tool:` read as `tools:`).
fn salvage(value: &Value, findings: &Findings) -> (Entries, bool) {
    let mut value = value.clone();
    let mut broken_entries: HashSet<(String, String)> = HashSet::new();
    let mut broken_sections: HashSet<String> = HashSet::new();
    let mut break_at = |pointer: &str| match entry_of(pointer) {
        Some(entry) => {
            broken_entries.insert(entry);
        }
        None => {
            let section = pointer.split('/').nth(1).unwrap_or_default().replace("~1", "/").replace("~0", "~");
            broken_sections.insert(section);
        }
    };
    for pointer in &findings.broken {
        break_at(pointer);
    }
    for (parent, key, rename) in &findings.unknown {
        let Some(Value::Object(map)) = value.pointer_mut(parent) else { continue };
        let Some(item) = map.remove(key) else { continue };
        match rename {
            Some(to) if !map.contains_key(to) => {
                map.insert(to.clone(), item);
            }
            Some(_) => {}
            // A key nobody can guess the meaning of: checking its entry
            // without it could blame the entry for what the key meant to say.
            None if !parent.is_empty() => break_at(&format!("{parent}/{}", escape_pointer(key))),
            None => {}
        }
    }
    let mut entries = Entries::default();
    let readable = |section: &str| !broken_sections.contains(section);
    if readable("server") {
        entries.server = value.get("server").and_then(read);
    }
    if readable("skills") {
        entries.skills = value.get("skills").and_then(read);
    }
    if readable("include") {
        entries.include = value
            .get("include")
            .and_then(read::<Includes>)
            .map(|i| i.patterns().into_iter().map(str::to_owned).collect())
            .unwrap_or_default();
    }
    if readable("data") {
        entries.data = value.get("data").and_then(read).unwrap_or_default();
    }
    let mut read_blocks = ReadBlocks {
        value: &value,
        readable: &readable,
        broken_entries: &broken_entries,
        dropped: &mut entries.dropped,
    };
    entries.blocks = Blocks::build(&mut read_blocks);
    let list = |key: &str| -> Vec<(usize, &Value)> {
        match value.get(key) {
            Some(Value::Array(items)) if readable(key) => items
                .iter()
                .enumerate()
                .filter(|(idx, _)| !broken_entries.contains(&(key.to_owned(), idx.to_string())))
                .collect(),
            _ => Vec::new(),
        }
    };
    match value.get("toolsets") {
        Some(Value::Object(map)) if readable("toolsets") => {
            for (name, tools) in map {
                let tools = (!broken_entries.contains(&("toolsets".to_owned(), name.clone()))).then(|| read(tools));
                match tools.flatten() {
                    Some(tools) => {
                        entries.toolsets.insert(name.clone(), tools);
                    }
                    None => entries.dropped.tools = true,
                }
            }
        }
        None | Some(Value::Null) => {}
        Some(_) => entries.dropped.tools = true,
    }
    entries.tools = list("tools").into_iter().filter_map(|(idx, item)| Some((idx, read(item)?))).collect();
    entries.prompts = list("prompts").into_iter().filter_map(|(idx, item)| Some((idx, read(item)?))).collect();
    entries.resources = list("resources").into_iter().filter_map(|(idx, item)| Some((idx, read(item)?))).collect();
    entries.resource_templates =
        list("resourceTemplates").into_iter().filter_map(|(idx, item)| Some((idx, read(item)?))).collect();
    let declared = |key: &str| value.get(key).and_then(Value::as_array).map_or(0, Vec::len);
    entries.dropped.tools |= entries.tools.len() < declared("tools") || broken_sections.contains("tools");
    entries.dropped.resources = entries.resources.len() < declared("resources")
        || entries.resource_templates.len() < declared("resourceTemplates")
        || broken_sections.contains("resources")
        || broken_sections.contains("resourceTemplates");
    (entries, declares_entries(&value))
}

/// Reads each effect's block of a file with mistakes (see [`read_named`]).
struct ReadBlocks<'a> {
    value: &'a Value,
    readable: &'a dyn Fn(&str) -> bool,
    broken_entries: &'a HashSet<(String, String)>,
    dropped: &'a mut Dropped,
}

impl Build<Written> for ReadBlocks<'_> {
    fn build<B: Registered>(&mut self) -> IndexMap<String, B::Spec> {
        let (kept, left_out) = read_named(self.value.get(B::KEY), B::KEY, (self.readable)(B::KEY), self.broken_entries);
        self.dropped.blocks.insert(B::KEY, left_out);
        kept
    }
}

/// The entries of the named block `block` (`databases:`, `apis:`) whose
/// value is `found` that read as `T`, and the names of those left out: a
/// broken entry, one that does not read, or every one if the block is not a
/// map or is not `readable`.
fn read_named<T: DeserializeOwned>(
    found: Option<&Value>,
    block: &str,
    readable: bool,
    broken_entries: &HashSet<(String, String)>,
) -> (IndexMap<String, T>, LeftOut) {
    let mut kept = IndexMap::new();
    let mut dropped = LeftOut::default();
    match found {
        Some(Value::Object(map)) if readable => {
            for (name, spec) in map {
                let spec = (!broken_entries.contains(&(block.to_owned(), name.clone()))).then(|| read(spec));
                match spec.flatten() {
                    Some(spec) => {
                        kept.insert(name.clone(), spec);
                    }
                    None => {
                        dropped.names.insert(name.clone());
                    }
                }
            }
        }
        None | Some(Value::Null) => {}
        Some(_) => dropped.all = true,
    }
    (kept, dropped)
}

fn read<T: DeserializeOwned>(value: &Value) -> Option<T> {
    T::deserialize(value).ok()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::catalog::source::parse_file;

    fn problems(text: &str) -> Vec<Diagnostic> {
        let parsed = parse_file(Path::new("c.yaml"), text, &|_| None).unwrap();
        check_file(&parsed).problems
    }

    #[test]
    fn unknown_key_with_suggestion() {
        let found = problems("tools:\n  - name: a\n    descripton: x\n    run: { text: hi }\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].message, "unknown key `descripton` in tool `a`");
        assert_eq!(found[0].hint.as_deref(), Some("did you mean `description`?"));
        assert_eq!((found[0].location.line, found[0].location.column), (3, 5));
    }

    #[test]
    fn a_file_of_another_kind_gets_one_message() {
        let found = problems("{\"name\": \"web\", \"version\": \"1.0.0\", \"scripts\": {}}\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].code, "not-a-catalog");
        assert_eq!((found[0].location.line, found[0].location.column), (1, 1));
        // A typo of a catalog key, or a single key, is still an unknown key.
        for text in ["tool: []\nversion: 1\n", "version: 1\n", "tools: []\nname: x\nversion: 1\n"] {
            let found = problems(text);
            assert!(found.iter().all(|d| d.code == "unknown-key"), "{text}: {found:?}");
        }
    }

    #[test]
    fn what_has_no_mistake_is_still_read() {
        let text = "tools:\n  - name: a\n    descripton: A.\n    run: { text: a }\n  - name: b\n    run: 5\n  - name: c\n    run: { text: c, bogus: 1 }\n  - name: d\n    run: { text: d }\ndatabases:\n  db: { url: 5 }\n";
        let parsed = parse_file(Path::new("c.yaml"), text, &|_| None).unwrap();
        let checked = check_file(&parsed);
        assert_eq!(checked.problems.len(), 4, "{:?}", checked.problems);
        // `descripton` is read as `description`; `b` (wrong type) and `c`
        // (a key nobody can guess) are left out; `d` is read as written.
        let tools: Vec<(usize, &str, Option<&str>)> =
            checked.entries.tools.iter().map(|(idx, t)| (*idx, t.name.as_str(), t.description.as_deref())).collect();
        assert_eq!(tools, [(0, "a", Some("A.")), (3, "d", None)]);
        assert!(checked.entries.dropped.block("databases").contains("db"));
        // A misspelt list is read as the list meant: the file declares something.
        let parsed = parse_file(Path::new("c.yaml"), "tool:\n  - { name: a, run: { text: a } }\n", &|_| None).unwrap();
        let checked = check_file(&parsed);
        assert!(checked.declares && checked.entries.tools.len() == 1, "{checked:?}");
        assert!(!checked.entries.dropped.block("databases").contains("other"));
        assert!(checked.declares);
    }

    #[test]
    fn yaml_1_1_booleans_get_a_hint() {
        for (written, hint) in [
            ("yes", "write true: carte reads YAML 1.2, where `yes` is text, not true"),
            ("Off", "write false: carte reads YAML 1.2, where `Off` is text, not false"),
            ("\"true\"", "write true without quotes: in quotes it is text"),
        ] {
            let found = problems(&format!(
                "prompts:\n  - name: p\n    arguments: [{{ name: a, required: {written} }}]\n    messages: [{{ role: user, text: \"{{{{ a }}}}\" }}]\n"
            ));
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!(found[0].hint.as_deref(), Some(hint), "{written}");
        }
    }

    #[test]
    fn places_are_named_with_lists_counted_from_one() {
        let path = |p: &str| readable_path(&p.split('/').map(str::to_owned).collect::<Vec<_>>());
        assert_eq!(path("messages/0/role"), "`role` of message #1");
        assert_eq!(path("complete/product/2"), "item #3 of `complete.product`");
        assert_eq!(path("run/steps/1/log/level"), "`log.level` of step #2 of `run`");
        assert_eq!(path("inputSchema/allOf/0/type"), "`type` of item #1 of `inputSchema.allOf`");
        let found = problems(
            "resourceTemplates:\n  - uriTemplate: \"x://{a}\"\n    name: t\n    text: x\n    complete: { a: [b, c, 3] }\n",
        );
        assert_eq!(
            found[0].message,
            "item #3 of `complete.a` of resource template `x://{a}` should be text, found the number `3`"
        );
    }

    #[test]
    fn camel_case_hint() {
        let found = problems("tools:\n  - name: a\n    input_schema: {type: object}\n    run: { text: hi }\n");
        assert_eq!(found[0].hint.as_deref(), Some("MCP spells it `inputSchema` (camelCase); carte keeps MCP's names"));
    }

    #[test]
    fn reports_every_problem() {
        let found = problems(
            "tools:\n  - name: a\n  - name: b\n    run: { text: x, txt: y }\nprompts:\n  - name: 5\n    messages: []\n",
        );
        let messages: Vec<&str> = found.iter().map(|d| d.message.as_str()).collect();
        assert!(messages.contains(&"missing required key `run` in tool `a`"), "{messages:?}");
        assert!(messages.contains(&"unknown key `txt` in `run` of tool `b`"), "{messages:?}");
        assert!(
            messages.iter().any(|m| m.starts_with("`name` of prompt #1 should be text, found the number `5`")),
            "{messages:?}"
        );
    }

    #[test]
    fn wrong_type_inside_option() {
        let found = problems("server: hello\n");
        assert_eq!(found[0].message, "`server` should be a mapping of keys, found `hello`");
        let found = problems("include: 3\n");
        assert!(found[0].message.starts_with("`include` should be text or a list"), "{found:?}");
    }

    #[test]
    fn enum_values_listed() {
        let found = problems("prompts:\n  - name: p\n    messages:\n      - { role: system, text: x }\n");
        assert_eq!(
            found[0].message,
            "`role` of message #1 of prompt `p` should be one of `user`, `assistant`, found `system`"
        );
    }
}
