//! Warnings about what YAML reads differently from what its author meant,
//! found by looking at the text of a file where a value was written (the
//! parsed value alone cannot tell `no` from `"no"`):
//! - `vegan: no` under `data:` is the text "no" in YAML 1.2 (which carte
//!   reads), and text is true in a template's `{% if %}`;
//! - `description: Cancels order #12` ends at ` #`: the rest of the line is
//!   a comment.
//!
//! Runs once per file on its parsed value, its positions and its text; each
//! value looked at costs the length of its line.

use std::fmt::Write as _;

use serde_json::Value;

use crate::catalog::source::Positions;
use crate::catalog::structure::{describe, readable_path};
use crate::diag::Diagnostic;
use crate::diag::escape_pointer;

/// Keys whose plain values are prose or templates: a ` #word` in them is
/// more likely part of the text than a comment.
const PROSE_KEYS: &[&str] = &["description", "title", "text", "message", "systemPrompt", "instructions"];

/// Adds a warning for each such value of one file.
pub fn lint(text: &str, value: &Value, positions: &Positions, diagnostics: &mut Vec<Diagnostic>) {
    let lines = Lines::new(text);
    let mut walk = Walk { root: value, positions, lines: &lines, diagnostics, pointer: String::new() };
    walk.value(value, None);
}

/// The start of every line of a file, to find the text at a line and column.
struct Lines<'a> {
    text: &'a str,
    starts: Vec<usize>,
    ascii: bool,
    /// The last place found, as (line, column, byte offset in its line):
    /// values are looked up in file order, so finding the next one on a long
    /// line walks on from there instead of from the line's start.
    cursor: std::cell::Cell<(usize, usize, usize)>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Lines<'a> {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(idx, _)| idx + 1)).collect();
        Lines { text, starts, ascii: text.is_ascii(), cursor: std::cell::Cell::new((0, 1, 0)) }
    }

    /// The rest of line `line` from character `column` (both 1-based).
    fn rest(&self, line: usize, column: usize) -> Option<&'a str> {
        let start = *self.starts.get(line.checked_sub(1)?)?;
        let end = self.starts.get(line).map_or(self.text.len(), |next| next - 1);
        let whole = self.text.get(start..end)?.trim_end_matches('\r');
        let offset = if self.ascii {
            column.checked_sub(1)?.min(whole.len())
        } else {
            let (at_line, at_column, at_byte) = self.cursor.get();
            let (from_column, from_byte) =
                if at_line == line && at_column <= column { (at_column, at_byte) } else { (1, 0) };
            let skip = column.checked_sub(from_column)?;
            let offset =
                whole.get(from_byte..)?.char_indices().nth(skip).map_or(whole.len(), |(idx, _)| from_byte + idx);
            self.cursor.set((line, column, offset));
            offset
        };
        whole.get(offset..)
    }
}

struct Walk<'a, 'd> {
    root: &'a Value,
    positions: &'a Positions,
    lines: &'a Lines<'a>,
    diagnostics: &'d mut Vec<Diagnostic>,
    pointer: String,
}

impl Walk<'_, '_> {
    fn value(&mut self, value: &Value, key: Option<&str>) {
        match value {
            Value::Object(map) => {
                for (name, item) in map {
                    let len = self.pointer.len();
                    self.pointer.push('/');
                    self.pointer.push_str(&escape_pointer(name));
                    self.value(item, Some(name));
                    self.pointer.truncate(len);
                }
            }
            Value::Array(items) => {
                for (idx, item) in items.iter().enumerate() {
                    let len = self.pointer.len();
                    let _ = write!(self.pointer, "/{idx}");
                    self.value(item, None);
                    self.pointer.truncate(len);
                }
            }
            Value::String(text) if self.pointer.starts_with("/data/") => self.yaml_1_1_boolean(text),
            Value::String(text) if key.is_some_and(|key| PROSE_KEYS.contains(&key)) || self.in_log_data() => {
                self.cut_by_comment(text);
            }
            _ => {}
        }
    }

    /// A `log` step's `data`, a template too.
    fn in_log_data(&self) -> bool {
        self.pointer.ends_with("/log/data")
    }

    /// The text written where the current value starts, to the end of its line.
    fn written(&self) -> Option<(crate::diag::Location, &str)> {
        let location = self.positions.locate(&self.pointer);
        let rest = self.lines.rest(location.line, location.column)?;
        Some((location, rest))
    }

    fn yaml_1_1_boolean(&mut self, text: &str) {
        let any = |words: [&str; 3]| words.iter().any(|word| text.eq_ignore_ascii_case(word));
        let meant = if any(["yes", "y", "on"]) {
            "true"
        } else if any(["no", "n", "off"]) {
            "false"
        } else {
            return;
        };
        let Some((location, written)) = self.written() else { return };
        // Only where it is written as is: not quoted, not from `${VAR}`.
        let plain = written
            .strip_prefix(text)
            .is_some_and(|after| after.is_empty() || after.starts_with([' ', '\t', ',', ']', '}', '#']));
        if !plain {
            return;
        }
        let segments: Vec<String> =
            self.pointer.split('/').skip(1).map(|s| s.replace("~1", "/").replace("~0", "~")).collect();
        let place = readable_path(&segments);
        self.diagnostics.push(
            Diagnostic::warning(
                "yaml-boolean",
                location,
                format!("{place} is the text \"{text}\", not {meant}: in a template, any text but \"\" counts as true"),
            )
            .with_hint(format!(
                "carte reads YAML 1.2, where only `true` and `false` are booleans: write `{meant}`, or quote it (\"{text}\") if you mean the word"
            )),
        );
    }

    fn cut_by_comment(&mut self, text: &str) {
        let Some((mut location, written)) = self.written() else { return };
        if written.starts_with(['"', '\'', '|', '>', '[', '{', '$']) || !written.starts_with(text) {
            return;
        }
        // Only spaces may come between the value and the `#` (looked at
        // without scanning the rest of a long line).
        let after = &written[text.len()..];
        let spaced = after.trim_start_matches([' ', '\t']);
        let Some(comment) = spaced.strip_prefix('#').filter(|_| spaced.len() < after.len()) else { return };
        // `# like this` is how people write comments; `#12` or `#general` is part of the text.
        if comment.is_empty() || comment.starts_with([' ', '\t']) {
            return;
        }
        let whole = written.trim_end().trim_end_matches([',', '}', ']']).trim_end();
        let quoted = whole.replace('\\', "\\\\").replace('"', "\\\"");
        let key = self.pointer.rsplit('/').next().unwrap_or_default().to_owned();
        let place = describe(self.root, &self.pointer);
        location.width = whole.chars().count().max(1);
        self.diagnostics.push(
            Diagnostic::warning(
                "cut-by-comment",
                location,
                format!("{place} ends before ` #`: YAML reads `#{}` as a comment", comment.trim_end()),
            )
            .with_hint(format!("quote the whole value: {key}: \"{quoted}\"")),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::catalog::source::parse_file;

    fn warnings(text: &str) -> Vec<Diagnostic> {
        let parsed = parse_file(Path::new("c.yaml"), text, &|_| None).unwrap();
        let mut found = Vec::new();
        lint(text, &parsed.value, &parsed.positions, &mut found);
        found
    }

    #[test]
    fn unquoted_yaml_1_1_booleans_in_data_are_flagged() {
        let found = warnings(
            "data:\n  vegan: no\n  nuts: \"no\"\n  gluten: 'Off'\n  flags: [yes, On, maybe, n]\n  answer: No thanks\n",
        );
        let shown: Vec<(&str, usize, usize)> =
            found.iter().map(|d| (d.message.as_str(), d.location.line, d.location.column)).collect();
        assert_eq!(
            shown,
            [
                ("`data.vegan` is the text \"no\", not false: in a template, any text but \"\" counts as true", 2, 10),
                (
                    "item #1 of `data.flags` is the text \"yes\", not true: in a template, any text but \"\" counts as true",
                    5,
                    11
                ),
                (
                    "item #2 of `data.flags` is the text \"On\", not true: in a template, any text but \"\" counts as true",
                    5,
                    16
                ),
                (
                    "item #4 of `data.flags` is the text \"n\", not false: in a template, any text but \"\" counts as true",
                    5,
                    27
                ),
            ]
        );
        // Outside `data:`, the structural check already says a boolean is expected.
        assert!(warnings("tools:\n  - { name: a, run: { text: no } }\n").is_empty());
        // From the environment: not written as a word.
        let parsed = parse_file(Path::new("c.yaml"), "data:\n  x: ${FLAG}\n", &|_| Some("no".to_owned())).unwrap();
        let mut found = Vec::new();
        lint("data:\n  x: ${FLAG}\n", &parsed.value, &parsed.positions, &mut found);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_prose_value_cut_by_a_comment_is_flagged() {
        let found = warnings(
            "tools:\n  - name: cancel\n    description: Cancels order #12 for you\n    run:\n      text: Done #sorry\n",
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            found[0].message,
            "`description` of tool `cancel` ends before ` #`: YAML reads `#12 for you` as a comment"
        );
        assert_eq!(found[0].hint.as_deref(), Some("quote the whole value: description: \"Cancels order #12 for you\""));
        assert_eq!((found[0].location.line, found[0].location.column, found[0].location.width), (3, 18, 25));
        assert_eq!(found[1].hint.as_deref(), Some("quote the whole value: text: \"Done #sorry\""));
        // Columns count characters: found after other non-ASCII values on the same line too.
        let found = warnings("tools:\n  - { name: é, title: café #1 à emporter\n      , run: { text: x } }\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].location.line, found[0].location.column), (2, 23));
        assert_eq!(found[0].hint.as_deref(), Some("quote the whole value: title: \"café #1 à emporter\""));
        // A comment written as one, quoted values, `#` inside a word, other keys: fine.
        for text in [
            "tools:\n  - name: a # the first\n    description: Lists orders # TODO say more\n",
            "tools:\n  - description: \"Cancels order #12\" #12\n",
            "tools:\n  - description: Channel#12 is open\n",
            "tools:\n  - name: a #1\n",
        ] {
            assert!(warnings(text).is_empty(), "{text}: {:?}", warnings(text));
        }
    }
}
