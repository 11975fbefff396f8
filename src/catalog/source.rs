//! Reading one catalog file: YAML text → JSON value, plus a map from every
//! key and value in the file to its line and column.
//!
//! The value comes from `serde_yaml` (full YAML: anchors, tags, block
//! scalars); the positions come from `yaml-rust2`'s event parser, which
//! marks where every node starts.
//! Checks that run long after parsing (duplicates, schemas, template
//! variables) find their place through [`Positions::locate`] with a JSON
//! pointer such as `/tools/2/inputSchema`. `${VAR}` references are expanded
//! here, in string values only (comments and keys are never touched).
//!
//! An alias (`*name`) copies its anchor's whole value, so a few lines of
//! nested aliases could expand to gigabytes ("billion laughs"). The reader
//! counts what the file expands to — one unit per node plus one per byte of
//! each scalar, copies included — and refuses the file, with a located
//! diagnostic, once that passes [`expansion_limit`] (twice the file's size
//! plus a mebi-unit): it stops copying at that alias, so memory and time stay
//! proportional to the file.
//!
//! When the file itself is the slip, [`explain`] says so in the writer's
//! terms: a template written without quotes (`text: {{ n }} x bread`) is
//! reported once and read as if quoted, so the rest of the file is still
//! checked; a YAML error becomes the indentation that disagrees with the line
//! above, the quote left open, the TOML file, and so on. A UTF-8 byte order
//! mark is ignored, and a local tag (`!important text`) is an error, since
//! YAML silently leaves it out of the value.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::{Path, PathBuf};

use serde_json::{Map, Number, Value};

use crate::diag::{Diagnostic, Location};

mod expand;
mod explain;
mod reader;

use expand::expand_env;
use reader::{Read, quoted_scalars, read_yaml};

/// Where each node of one file starts, keyed by JSON pointer.
#[derive(Debug, Clone, Default)]
pub struct Positions {
    /// The file these positions belong to.
    pub file: PathBuf,
    /// Keyed by a hash of the pointer, not the pointer itself: a 10,000-tool
    /// catalog has a quarter of a million nodes. (Two pointers sharing a
    /// 64-bit hash would only misplace a diagnostic.)
    nodes: HashMap<u64, NodePosition, BuildHasherDefault<KeyIsHash>>,
    /// Keys read as another (a misspelled `sqll:` read as `sql:`): the
    /// pointer as read, and as written. A pointer under one is found where
    /// it is written.
    renamed: Vec<(String, String)>,
}

#[derive(Debug, Clone, Copy)]
struct NodePosition {
    key: Option<Mark>,
    value: Mark,
}

#[derive(Debug, Clone, Copy)]
struct Mark {
    line: u32,
    column: u32,
    width: u32,
}

/// A count as a mark field (files beyond 4 billion lines do not occur).
fn narrow(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl Positions {
    /// Positions of a file that could not be parsed: everything points at its start.
    pub fn empty(file: &Path) -> Positions {
        Positions { file: file.to_path_buf(), ..Positions::default() }
    }

    /// The location of the value at `pointer`, or of its nearest ancestor that
    /// has one (a missing key points at the mapping that lacks it).
    pub fn locate(&self, pointer: &str) -> Location {
        self.find(pointer, false)
    }

    /// Like [`Positions::locate`], but points at the key rather than its value
    /// where the node is a mapping entry (for unknown keys).
    pub fn locate_key(&self, pointer: &str) -> Location {
        self.find(pointer, true)
    }

    /// Remembers that the key written at `written` is read at `read` (see
    /// `structure`'s salvage of unknown keys).
    pub fn rename(&mut self, read: String, written: String) {
        self.renamed.push((read, written));
    }

    fn find(&self, pointer: &str, prefer_key: bool) -> Location {
        let written = self.renamed.iter().find_map(|(read, written)| {
            let rest = pointer.strip_prefix(read.as_str())?;
            (rest.is_empty() || rest.starts_with('/')).then(|| format!("{written}{rest}"))
        });
        let pointer = written.as_deref().unwrap_or(pointer);
        let mut current = pointer;
        loop {
            if let Some(node) = self.nodes.get(&pointer_key(current)) {
                let mark = match (prefer_key || current != pointer, node.key) {
                    (true, Some(key)) => key,
                    _ => node.value,
                };
                return Location {
                    file: self.file.clone(),
                    line: mark.line as usize,
                    column: mark.column as usize,
                    width: mark.width as usize,
                };
            }
            match current.rfind('/') {
                Some(idx) => current = &current[..idx],
                None => return Location::file_start(&self.file),
            }
        }
    }
}

/// Hashes a key of [`Positions`], already a hash, as itself.
#[derive(Default)]
struct KeyIsHash(u64);

impl Hasher for KeyIsHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; anything else is folded in.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

/// The key of a JSON pointer in [`Positions`]: a 64-bit hash, the same for
/// the same pointer throughout the process (foldhash with a fixed seed: a
/// fifth of SipHash's work, for every node of every file loaded).
fn pointer_key(pointer: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::default().hash_one(pointer)
}

/// Whether `token` is a block scalar's header: `|` or `>`, then at most an
/// indentation digit and a chomping sign (`|-`, `>+`, `|2`, `>2-`).
pub(in crate::catalog) fn is_block_header(token: &str) -> bool {
    token.starts_with(['|', '>']) && token.len() <= 3 && token[1..].chars().all(|c| matches!(c, '+' | '-' | '1'..='9'))
}

/// One parsed catalog file.
#[derive(Debug, Clone)]
pub struct ParsedFile {
    /// The file's contents as JSON, `${VAR}`s expanded.
    pub value: Value,
    /// Where everything in it is.
    pub positions: Positions,
    /// Errors found while reading that did not stop it: the file was read as
    /// if they were fixed (an unquoted template is read as the quoted text),
    /// so later stages check the rest of it in the same run.
    pub problems: Vec<Diagnostic>,
}

/// At most this many local tags are reported per file.
const MAX_LOCAL_TAGS: usize = 20;

/// The error for a local tag (`!name`) on the node at `mark`: YAML reads
/// `!important text` as the tag `!important` on the value `text`.
fn local_tag(path: &Path, text: &str, mark: Mark, tag: &str, scalar: bool) -> Diagnostic {
    // The node's mark is at the tag, or for a block collection at its first
    // key, lines below: the tag is the last one written before the mark.
    let lines: Vec<&str> =
        text.lines().skip((mark.line as usize).saturating_sub(4)).take(4.min(mark.line as usize)).collect();
    let first_line = (mark.line as usize).saturating_sub(lines.len()) + 1;
    let found = lines.iter().enumerate().rev().find_map(|(idx, line)| {
        let limit = if idx + 1 == lines.len() {
            line.char_indices().nth(mark.column as usize + tag.len()).map_or(line.len(), |(b, _)| b)
        } else {
            line.len()
        };
        let byte = line[..limit].rfind(tag)?;
        Some((first_line + idx, line[..byte].chars().count() + 1, *line))
    });
    let (line_number, column, line) = found.unwrap_or((mark.line as usize, mark.column as usize, ""));
    let diagnostic = Diagnostic::error(
        "yaml-tag",
        Location { file: path.to_path_buf(), line: line_number, column, width: tag.chars().count() },
        format!("`{tag}` is a YAML tag, which carte does not use: YAML leaves it out of the value"),
    );
    match explain::requote_from(line, column - 1).filter(|_| scalar) {
        Some(fixed) => diagnostic.with_hint(format!("to keep `{tag}` as text, put the value in quotes: `{fixed}`")),
        None => diagnostic.with_hint(format!("remove `{tag}`; carte reads the value without it")),
    }
}

/// Reads and parses one catalog file. A YAML syntax error or an unreadable
/// file is a single diagnostic; `${VAR}` problems are reported all together.
/// A UTF-8 byte order mark at the start is ignored.
pub fn parse_file(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ParsedFile, Vec<Diagnostic>> {
    let original = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut problems = Vec::new();
    let mut text = std::borrow::Cow::Borrowed(original);
    let mut fixed: Vec<(explain::Slip, usize)> = Vec::new();
    let scan = if explain::may_have_slips(original) { explain::scan(original, false) } else { Default::default() };
    let mut unconfirmed = Vec::new();
    if !scan.slips.is_empty() {
        let (confirmed, rest) = confirm_slips(path, original, &scan.slips);
        unconfirmed = rest;
        if !confirmed.is_empty() {
            for slip in &confirmed {
                problems.push(explain::template_diagnostic(path, original, slip));
            }
            let (patched, growth) = quote_slips(original, &confirmed);
            fixed = confirmed.into_iter().zip(growth).collect();
            text = std::borrow::Cow::Owned(patched);
        }
    }
    let (mut value, positions) = match read_yaml(path, &text) {
        Read::Value(value, positions, local_tags) => {
            for tag in local_tags {
                problems.push(local_tag(path, original, tag.mark, &tag.tag, tag.scalar));
            }
            (value, positions)
        }
        Read::TooBig(diagnostic) => {
            problems.push(diagnostic);
            return Err(problems);
        }
        Read::Refused => match serde_yaml::from_str::<serde_yaml::Value>(&text) {
            Ok(yaml) => (yaml_to_json(yaml), Positions::empty(path)),
            Err(err) => {
                // Explained from the text as read, shown as written (quoting
                // a template adds no line).
                let scan = explain::scan(&text, true);
                let mut diagnostic = yaml_error(path, original, &scan, &err);
                // Columns after a quoted template are the original's.
                for (slip, growth) in &fixed {
                    if slip.line == diagnostic.location.line && slip.column < diagnostic.location.column {
                        diagnostic.location.column = diagnostic.location.column.saturating_sub(*growth).max(1);
                    }
                }
                // An error among the lines of a template the parser could not
                // confirm (one that stays invalid quoted) is still that template.
                let line = diagnostic.location.line;
                match unconfirmed.iter().find(|slip| slip.line <= line && line <= slip.last_line) {
                    Some(slip) => problems.push(explain::template_diagnostic(path, original, slip)),
                    None => problems.push(diagnostic),
                }
                return Err(problems);
            }
        },
    };
    if value.is_null() {
        value = Value::Object(Map::new());
    }
    if !value.is_object() {
        problems.push(explain::not_yaml(path, &text).unwrap_or_else(|| {
            Diagnostic::error(
                "not-a-mapping",
                positions.locate(""),
                "a catalog file must be a mapping of keys (server, tools, prompts, …)",
            )
            .with_hint("start the file with a key such as `tools:`")
        }));
        return Err(problems);
    }
    let mut env_problems = Vec::new();
    expand_env(&mut value, &mut String::new(), &positions, env, &mut env_problems);
    if env_problems.is_empty() {
        Ok(ParsedFile { value, positions, problems })
    } else {
        problems.extend(env_problems);
        Err(problems)
    }
}

/// The unquoted templates the parser agrees are values: with them quoted,
/// each is read as a quoted string starting where the template started.
/// Returns those and the others.
fn confirm_slips(path: &Path, text: &str, slips: &[explain::Slip]) -> (Vec<explain::Slip>, Vec<explain::Slip>) {
    let (patched, _) = quote_slips(text, slips);
    let quoted = quoted_scalars(path, &patched);
    slips.iter().cloned().partition(|slip| quoted.binary_search(&(narrow(slip.line), narrow(slip.column))).is_ok())
}

/// `text` with each slip's value in quotes, and how many characters each grew by.
fn quote_slips(text: &str, slips: &[explain::Slip]) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(text.len() + slips.len() * 2);
    let mut growth = Vec::with_capacity(slips.len());
    let mut at = 0;
    for slip in slips {
        out.push_str(&text[at..slip.start]);
        let value = &text[slip.start..slip.end];
        let quoted = explain::quoted(value);
        growth.push(quoted.chars().count() - value.chars().count());
        out.push_str(&quoted);
        at = slip.end;
    }
    out.push_str(&text[at..]);
    (out, growth)
}

fn yaml_error(path: &Path, text: &str, scan: &explain::Scan, err: &serde_yaml::Error) -> Diagnostic {
    let location = err.location().map(|l| (l.line(), l.column()));
    let parsed = explain::parse_error(&err.to_string(), location);
    explain::explain(path, text, scan, &parsed)
}

fn yaml_to_json(yaml: serde_yaml::Value) -> Value {
    match yaml {
        serde_yaml::Value::Null => Value::Null,
        serde_yaml::Value::Bool(b) => Value::Bool(b),
        serde_yaml::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Number(i.into())
            } else if let Some(u) = n.as_u64() {
                Value::Number(u.into())
            } else {
                n.as_f64().and_then(Number::from_f64).map(Value::Number).unwrap_or_else(|| Value::String(n.to_string()))
            }
        }
        serde_yaml::Value::String(s) => Value::String(s),
        serde_yaml::Value::Sequence(seq) => Value::Array(seq.into_iter().map(yaml_to_json).collect()),
        serde_yaml::Value::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = match yaml_to_json(k) {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        serde_yaml::Value::Tagged(tagged) => yaml_to_json(tagged.value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A small environment for the tests.
    pub(super) fn env(name: &str) -> Option<String> {
        match name {
            "HOME_DIR" => Some("/home/x".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn reads_yaml_like_serde_yaml() {
        let text = "a: 1\nb: -2\nc: 1.5\nd: true\ne: ~\nf: '1'\ng: 0x1F\nh: .inf\ni: 1e3\nj: !!str 7\nk: &x [1, {m: n}]\nl: *x\n\"o\": |\n  text\np: 1-2\nq:\n";
        let Read::Value(ours, ..) = read_yaml(Path::new("c.yaml"), text) else { panic!("not read") };
        let theirs = yaml_to_json(serde_yaml::from_str::<serde_yaml::Value>(text).unwrap());
        assert_eq!(ours, theirs);
        assert_eq!(ours["g"], json!(31));
        assert_eq!(ours["l"], json!([1, { "m": "n" }]));
    }

    #[test]
    fn leaves_duplicate_keys_and_bad_yaml_to_serde_yaml() {
        assert!(matches!(read_yaml(Path::new("c.yaml"), "a: 1\na: 2\n"), Read::Refused));
        let err = parse_file(Path::new("c.yaml"), "a: 1\na: 2\n", &env).unwrap_err();
        assert_eq!(err[0].message, "the key `a` appears twice in the same mapping");
        let err = parse_file(Path::new("c.yaml"), "a: [1\n", &env).unwrap_err();
        assert_eq!(err[0].code, "yaml-syntax");
    }

    #[test]
    fn positions_point_at_keys_and_values() {
        let text = "tools:\n  - name: a\n    descripton: b\n";
        let parsed = parse_file(Path::new("c.yaml"), text, &env).unwrap();
        let key = parsed.positions.locate_key("/tools/0/descripton");
        assert_eq!((key.line, key.column, key.width), (3, 5, 10));
        let value = parsed.positions.locate("/tools/0/name");
        assert_eq!((value.line, value.column), (2, 11));
        let missing = parsed.positions.locate("/tools/0/run");
        assert_eq!((missing.line, missing.column), (2, 5));
    }

    /// Ten levels of ten aliases each: 10^10 nodes if expanded.
    fn billion_laughs(top_key: &str) -> String {
        let mut text = String::from("a0: &a0 [lol]\n");
        for level in 1..=10 {
            let previous = format!("*a{}", level - 1);
            text.push_str(&format!("a{level}: &a{level} [{}]\n", vec![previous; 10].join(", ")));
        }
        text.push_str(&format!("{top_key}: *a10\n"));
        text
    }

    #[test]
    fn alias_bombs_are_refused_where_they_pass_the_limit() {
        let text = billion_laughs("tools");
        let err = parse_file(Path::new("c.yaml"), &text, &env).unwrap_err();
        assert_eq!(err.len(), 1, "{err:?}");
        assert_eq!(err[0].code, "yaml-aliases");
        // Level 5 (10^5 lols) fits; the first copy of it on level 6's line does not.
        assert_eq!((err[0].location.line, err[0].location.column), (7, 10), "{:?}", err[0].location);
        assert!(err[0].hint.is_some());
    }

    #[test]
    fn alias_bombs_are_refused_when_serde_yaml_would_read_the_file() {
        // A duplicate key leaves the file to serde_yaml, which would expand the bomb.
        let text = format!("tools: 1\n{}", billion_laughs("tools"));
        let err = parse_file(Path::new("c.yaml"), &text, &env).unwrap_err();
        assert_eq!(err[0].code, "yaml-aliases");
        // Anchors carte does not keep (on a key) still cost their copies.
        let text = "? &k [a, b]\n: 1\nx: [*k, *k]\n";
        assert!(matches!(read_yaml(Path::new("c.yaml"), text), Read::Refused));
        let key = vec!["abc"; 100].join(", ");
        let text = format!("? &k [{key}]\n: 1\nx: [{}]\n", vec!["*k"; 10_000].join(", "));
        assert!(matches!(read_yaml(Path::new("c.yaml"), &text), Read::TooBig(_)));
    }

    #[test]
    fn aliases_within_the_limit_are_copied() {
        // A shared schema reused by 2,000 tools: 2,000 copies of 16 nodes.
        let mut text = String::from(
            "schemas:\n  room: &room\n    type: object\n    properties:\n      room: { type: string, enum: [Focus, Studio, Boardroom] }\n      hours: { type: integer, minimum: 1 }\ntools:\n",
        );
        for idx in 0..2000 {
            text.push_str(&format!("  - name: t{idx}\n    inputSchema: *room\n"));
        }
        let parsed = parse_file(Path::new("c.yaml"), &text, &env).unwrap();
        assert_eq!(parsed.value["tools"][1999]["inputSchema"]["properties"]["hours"]["minimum"], json!(1));
    }

    #[test]
    fn comments_are_not_expanded() {
        let text = "# ${UNSET_IN_COMMENT}\ndata: { a: 1 }\n";
        assert!(parse_file(Path::new("c.yaml"), text, &env).is_ok());
    }

    #[test]
    fn yaml_errors_have_a_location() {
        let err = parse_file(Path::new("c.yaml"), "tools:\n  - name: a\n   bad: [\n", &env).unwrap_err();
        assert_eq!(err[0].code, "yaml-indent");
        assert_eq!((err[0].location.line, err[0].location.column), (3, 4), "{:?}", err[0]);
        assert_eq!(err[0].message, "line 3 is indented 3 spaces, but line 2 above it at the same level has 4");
    }

    fn parse(text: &str) -> Result<ParsedFile, Vec<Diagnostic>> {
        parse_file(Path::new("c.yaml"), text, &env)
    }

    #[test]
    fn unquoted_templates_are_read_as_text_and_reported_once() {
        // Parses as YAML (a flow mapping), fails as YAML, and inside a flow mapping.
        for (text, column, width) in [
            ("run:\n  text: {{ quantity }}\n", 9, 14),
            ("run:\n  text: {{ quantity }} x bread  # note\n", 9, 22),
            ("run: { text: {% if a %}b{% endif %}, other: 1 }\n", 14, 22),
            ("run:\n  - {# c #} {{ a }}\n", 5, 15),
        ] {
            let parsed = parse(text).unwrap_or_else(|err| panic!("{text:?}: {err:?}"));
            assert_eq!(parsed.problems.len(), 1, "{text:?}: {:?}", parsed.problems);
            let problem = &parsed.problems[0];
            assert_eq!(problem.code, "unquoted-template");
            assert_eq!((problem.location.column, problem.location.width), (column, width), "{text:?}");
            let value = parsed.positions.locate(if text.contains("- ") { "/run/0" } else { "/run/text" });
            assert_eq!(value.column, column, "{text:?}: the value is where the template was");
        }
        let parsed = parse("run:\n  text: {{ quantity }} x bread  # note\n").unwrap();
        assert_eq!(parsed.value["run"]["text"], json!("{{ quantity }} x bread"));
        let hint = parsed.problems[0].hint.clone().unwrap_or_default();
        assert!(hint.contains("`text: \"{{ quantity }} x bread\"  # note`"), "{hint}");
        // A template with `"` in it is shown (and read) in single quotes.
        let parsed = parse("text: {{ fail(\"no\") }}\n").unwrap();
        assert_eq!(parsed.value["text"], json!("{{ fail(\"no\") }}"));
        assert!(parsed.problems[0].hint.as_deref().unwrap_or("").contains("`text: '{{ fail(\"no\") }}'`"));
    }

    #[test]
    fn templates_in_quotes_and_block_scalars_are_not_reported() {
        let text = "a: \"{{ x }}\"\nb: '{% if y %}'\nc: |\n  {{ x }}\n  {% if y %}\nd: >-\n  {# c #}\ne: text {{ x }}\nf: \"multi\n  {{ x }}\"\ng: plain\n  {{ x }} continued\n";
        let parsed = parse(text).unwrap();
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert_eq!(parsed.value["g"], json!("plain {{ x }} continued"));
    }

    #[test]
    fn a_template_and_a_later_syntax_error_are_both_reported() {
        let err = parse("a:\n  text: {{ x }} y\n  b: [1\n").unwrap_err();
        assert_eq!(err.len(), 2, "{err:?}");
        assert_eq!(err[0].code, "unquoted-template");
        assert_eq!(err[1].code, "yaml-syntax");
        assert_eq!(err[1].location.line, 3, "{:?}", err[1]);
    }

    #[test]
    fn a_byte_order_mark_is_ignored() {
        let parsed = parse("\u{feff}server:\n  name: x\n").unwrap();
        assert_eq!(parsed.value, json!({ "server": { "name": "x" } }));
        let key = parsed.positions.locate_key("/server");
        assert_eq!((key.line, key.column), (1, 1));
        // serde_yaml's pass too (a duplicate key leaves the file to it).
        let err = parse("\u{feff}a: 1\na: 2\n").unwrap_err();
        assert_eq!(err[0].message, "the key `a` appears twice in the same mapping");
        let err = parse("\u{feff}tools: {{ x }}\n").unwrap();
        assert_eq!(err.problems[0].location.column, 8);
    }

    #[test]
    fn toml_is_not_a_catalog() {
        for text in ["[package]\nname = \"x\"\n\n[dependencies]\nserde = \"1\"\n", "name = \"x\"\n", "[server]\n"] {
            let err = parse(text).unwrap_err();
            assert_eq!(err.len(), 1, "{text:?}: {err:?}");
            assert_eq!(err[0].code, "not-a-catalog", "{text:?}: {err:?}");
        }
        // A YAML sequence is still "not a mapping".
        assert_eq!(parse("- a\n- b\n").unwrap_err()[0].code, "not-a-mapping");
    }

    #[test]
    fn local_tags_are_reported_where_they_are_written() {
        let parsed = parse("a: !important text\nb: !!str 7\nc: !obj\n  d: 1\n").unwrap();
        let found: Vec<_> =
            parsed.problems.iter().map(|p| (p.code, p.location.line, p.location.column, p.location.width)).collect();
        assert_eq!(found, [("yaml-tag", 1, 4, 10), ("yaml-tag", 3, 4, 4)]);
        assert!(parsed.problems[0].hint.as_deref().unwrap_or("").contains("`a: \"!important text\"`"));
        assert!(parsed.problems[1].hint.as_deref().unwrap_or("").starts_with("remove `!obj`"));
    }

    fn indent_error(text: &str) -> (usize, usize, String, Vec<usize>) {
        let err = parse(text).unwrap_err();
        assert_eq!(err.len(), 1, "{err:?}");
        let d = &err[0];
        (d.location.line, d.location.column, d.message.clone(), d.notes.iter().map(|n| n.location.line).collect())
    }

    #[test]
    fn indentation_names_both_lines() {
        let (line, column, message, notes) = indent_error("a:\n    b: 1\n  c: 2\n");
        assert_eq!((line, column, notes), (3, 3, vec![2]));
        assert_eq!(message, "line 3 is indented 2 spaces, but line 2 above it at the same level has 4");
        // A list written at its key's own indentation is fine; an item one space off is not.
        assert!(parse("a:\n- b: 1\n  c: 2\n- b: 3\nd: 4\n").is_ok());
        let (line, _, message, notes) = indent_error("a:\n- b: 1\n  c: 2\n - b: 3\n");
        assert_eq!((line, notes), (4, vec![2]));
        assert_eq!(message, "line 4 is indented 1 space, but line 2 above it at the same level has 0");
        // Block scalars, quoted values over several lines and flow collections are not structure.
        let (line, _, message, notes) =
            indent_error("a:\n  b: |\n     text\n\n      more\n  c: [1,\n 2]\n  d: \"x\n y\"\n   e: 1\n");
        assert_eq!((line, notes), (10, vec![8]), "{message}");
        // A list item among keys.
        let (line, _, message, notes) = indent_error("server:\n  name: b\n  - version: 1\n");
        assert_eq!((line, notes), (3, vec![2]));
        assert_eq!(message, "line 3 starts a list item (`- `) at the indentation of the keys above it (line 2)");
        // A text block's lines are indented at least like its first.
        let (line, _, message, notes) = indent_error("a:\n  b: |\n     text\n   more\n");
        assert_eq!((line, notes), (4, vec![3]));
        assert_eq!(
            message,
            "line 4 is indented 3 spaces, but line 3 above it, the first of the same text block, has 5"
        );
    }

    #[test]
    fn windows_line_endings_keep_positions() {
        let parsed = parse("run:\r\n  text: {{ x }} y\r\n  other: 1\r\n").unwrap();
        assert_eq!(parsed.value["run"]["text"], json!("{{ x }} y"));
        let problem = &parsed.problems[0];
        assert_eq!((problem.location.line, problem.location.column, problem.location.width), (2, 9, 9));
        let (line, column, _, notes) = indent_error("a:\r\n    b: 1\r\n  c: 2\r\n");
        assert_eq!((line, column, notes), (3, 3, vec![2]));
    }
}
