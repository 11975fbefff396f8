//! Diagnostics: what carte says about a catalog, and how it says it.
//!
//! A [`Diagnostic`] is one problem (or warning) with the place it points at,
//! the offending line of text and, where one helps, a hint. Checks only build
//! diagnostics; [`render_human`] and [`render_json`] turn them into the text a
//! person reads (`path:line:column: error: …`, like a compiler) or the JSON a
//! machine reads (`carte check --format json`). Also the words shared by
//! every message: "did you mean" ([`did_you_mean`]), and how a place in the
//! catalog is named for a person ([`readable_path`], [`template_place`]),
//! and which cause of an error to tell ([`innermost`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// How bad a diagnostic is. Errors stop a catalog from being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The catalog works, but probably not the way its author meant.
    Warning,
    /// The catalog cannot be served.
    Error,
}

/// A place in a catalog file: 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    /// The file, as given on the command line or resolved from an include.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// How many characters to underline (at least one).
    #[serde(skip)]
    pub width: usize,
}

impl Location {
    /// The start of a file, for problems that have no better place.
    pub fn file_start(file: &Path) -> Location {
        Location { file: file.to_path_buf(), line: 1, column: 1, width: 1 }
    }
}

/// One problem found in a catalog.
#[derive(Debug, Clone, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// A stable, short name for the kind of problem (`unknown-key`, …).
    pub code: &'static str,
    /// What is wrong, in one line, lowercase, no trailing period.
    pub message: String,
    /// Where it is.
    pub location: Location,
    /// What to do about it, if carte can tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Other places involved (the first definition of a duplicate, …).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
}

/// A secondary place a diagnostic refers to.
#[derive(Debug, Clone, Serialize)]
pub struct Note {
    /// What this place is.
    pub message: String,
    /// Where it is.
    pub location: Location,
}

impl Diagnostic {
    /// An error at `location`.
    pub fn error(code: &'static str, location: Location, message: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Error, code, message: message.into(), location, hint: None, notes: Vec::new() }
    }

    /// A warning at `location`.
    pub fn warning(code: &'static str, location: Location, message: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(code, location, message) }
    }

    /// Adds a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Adds a note pointing at another place.
    pub fn with_note(mut self, message: impl Into<String>, location: Location) -> Self {
        self.notes.push(Note { message: message.into(), location });
        self
    }

    /// Whether this diagnostic stops the catalog from being served.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// Whether any of `diagnostics` is an error.
pub fn has_errors(diagnostics: &[Diagnostic]) -> bool {
    diagnostics.iter().any(Diagnostic::is_error)
}

/// Renders diagnostics the way a compiler does, each with the line it points
/// at, and a closing count. Source lines are read from disk when rendering.
pub fn render_human(diagnostics: &[Diagnostic]) -> String {
    let mut out = String::new();
    let mut sources = SourceCache::default();
    for diagnostic in diagnostics {
        let severity = match diagnostic.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let loc = &diagnostic.location;
        let _ = writeln!(out, "{}:{}:{}: {severity}: {}", loc.file.display(), loc.line, loc.column, diagnostic.message);
        if let Some(text) = sources.line(&loc.file, loc.line) {
            let gutter = loc.line.to_string().len();
            let _ = writeln!(out, "{:gutter$} |", "");
            let _ = writeln!(out, "{} | {}", loc.line, text);
            let pad: String =
                text.chars().take(loc.column.saturating_sub(1)).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
            // What it points at may run on past this line (a folded statement): the
            // underline stops at the line's end.
            let left = text.chars().count().saturating_sub(loc.column.saturating_sub(1));
            let _ = writeln!(out, "{:gutter$} | {pad}{}", "", "^".repeat(loc.width.min(left).max(1)));
        }
        for note in &diagnostic.notes {
            let _ = writeln!(
                out,
                "  = note: {} ({}:{}:{})",
                note.message,
                note.location.file.display(),
                note.location.line,
                note.location.column
            );
        }
        if let Some(hint) = &diagnostic.hint {
            let _ = writeln!(out, "  = hint: {hint}");
        }
        out.push('\n');
    }
    let n_errors = diagnostics.iter().filter(|d| d.is_error()).count();
    let n_warnings = diagnostics.len() - n_errors;
    if !diagnostics.is_empty() {
        let _ = writeln!(out, "{}, {}", plural(n_errors, "error"), plural(n_warnings, "warning"));
    }
    crate::secret::redact(&out).into_owned()
}

/// Renders diagnostics as a JSON array, one object each.
pub fn render_json(diagnostics: &[Diagnostic]) -> String {
    let json = serde_json::to_string_pretty(diagnostics).unwrap_or_else(|_| "[]".to_owned());
    crate::secret::redact(&json).into_owned()
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 { format!("1 {word}") } else { format!("{n} {word}s") }
}

/// Reads each source file once while rendering.
#[derive(Default)]
struct SourceCache {
    files: Vec<(PathBuf, Option<String>)>,
}

impl SourceCache {
    fn line(&mut self, file: &Path, line: usize) -> Option<String> {
        let idx = match self.files.iter().position(|(path, _)| path == file) {
            Some(idx) => idx,
            None => {
                // A byte order mark is not part of line 1 (columns do not count it).
                let text = std::fs::read_to_string(file)
                    .ok()
                    .map(|text| text.strip_prefix('\u{feff}').map(str::to_owned).unwrap_or(text));
                self.files.push((file.to_path_buf(), text));
                self.files.len() - 1
            }
        };
        let text = self.files[idx].1.as_deref()?;
        text.lines().nth(line.checked_sub(1)?).map(|l| l.trim_end().to_owned())
    }
}

/// Escapes one JSON pointer segment, for the pointers diagnostics are
/// located by (borrowed when it has nothing to escape, as nearly every key).
pub fn escape_pointer(segment: &str) -> std::borrow::Cow<'_, str> {
    if segment.contains(['~', '/']) { segment.replace('~', "~0").replace('/', "~1").into() } else { segment.into() }
}

/// Edit distance between two short strings (for "did you mean").
/// A swap of two neighbouring letters counts as one edit (`titel` → `title`).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j - 1] + cost).min(rows[i - 1][j] + 1).min(rows[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// Longest word (in characters) that gets a "did you mean": longer ones are
/// not typed by hand, and the edit distance grows with the square of the length.
const MAX_SUGGESTED_CHARS: usize = 100;

/// The candidate closest to `word`, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word_chars = word.chars().count();
    if word_chars > MAX_SUGGESTED_CHARS {
        return None;
    }
    let normalized = |s: &str| s.replace(['_', '-'], "").to_ascii_lowercase();
    let word_norm = normalized(word);
    candidates
        .into_iter()
        .filter_map(|c| {
            let limit = (c.len().max(word.len()) / 3).max(1);
            let distance = if normalized(c) == word_norm {
                0
            } else if c.chars().count().abs_diff(word_chars) > limit {
                // At least that many edits: not worth measuring.
                return None;
            } else {
                edit_distance(word, c)
            };
            (distance <= limit).then_some((distance, c))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

/// The hint "did you mean `close`?" for the candidate closest to `word`,
/// if one is close enough (see [`did_you_mean`]).
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    did_you_mean(word, candidates).map(|close| format!("did you mean `{close}`?"))
}

/// Names the place of a template of the catalog for a person: an inline
/// template is named `tool get_quote:/run/steps/0/log/data` inside carte,
/// and shown as "`log.data` of step #1 of `run` of tool `get_quote`"; a file
/// of the templates folder keeps its name.
pub fn template_place(name: &str) -> String {
    let Some((owner, pointer)) = name.rsplit_once(":/") else { return name.to_owned() };
    let Some((kind, id)) = ["resource template ", "tool ", "prompt ", "resource "]
        .iter()
        .find_map(|kind| owner.strip_prefix(kind).map(|id| (kind.trim_end(), id)))
    else {
        return name.to_owned();
    };
    let segments: Vec<String> = pointer.split('/').map(str::to_owned).collect();
    format!("{} of {kind} `{id}`", readable_path(&segments))
}

/// `["messages", "0", "role"]` → "`role` of message #1",
/// `["complete", "product", "2"]` → "item #3 of `complete.product`": list
/// indexes are counted from one and named after their list.
pub fn readable_path(segments: &[String]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut keys: Vec<&str> = Vec::new();
    for segment in segments {
        match segment.parse::<usize>() {
            Ok(idx) if !keys.is_empty() => {
                let list = keys.last().copied().unwrap_or_default();
                match singular(list) {
                    Some(noun) => {
                        keys.pop();
                        if !keys.is_empty() {
                            parts.push(format!("`{}`", keys.join(".")));
                        }
                        parts.push(format!("{noun} #{}", idx + 1));
                    }
                    None => parts.push(format!("item #{} of `{}`", idx + 1, keys.join("."))),
                }
                keys.clear();
            }
            _ => keys.push(segment),
        }
    }
    if !keys.is_empty() {
        parts.push(format!("`{}`", keys.join(".")));
    }
    parts.reverse();
    parts.join(" of ")
}

/// What one entry of a list of carte's format is called.
fn singular(list: &str) -> Option<&'static str> {
    Some(match list {
        "messages" => "message",
        "arguments" => "argument",
        "content" => "content block",
        "setup" => "setup statement",
        "include" => "include pattern",
        "steps" => "step",
        "tools" => "tool",
        "prompts" => "prompt",
        "resources" => "resource",
        "resourceTemplates" => "resource template",
        _ => return None,
    })
}

/// The innermost cause of `err`, which says most: an OS error ("Connection
/// refused (os error 111)") rather than the "error sending request" that wraps it.
pub fn innermost(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names() {
        assert_eq!(did_you_mean("descripton", ["name", "description"]), Some("description"));
        assert_eq!(did_you_mean("input_schema", ["inputSchema", "name"]), Some("inputSchema"));
        assert_eq!(did_you_mean("zzz", ["name", "description"]), None);
        assert_eq!(did_you_mean("titel", ["name", "title"]), Some("title"));
        assert_eq!(did_you_mean("a_b_c_d_e", ["abcde"]), Some("abcde"));
        assert_eq!(suggest("descripton", ["name", "description"]).as_deref(), Some("did you mean `description`?"));
        assert_eq!(suggest("zzz", ["name"]), None);
    }

    #[test]
    fn long_words_get_no_suggestion() {
        let long = "x".repeat(MAX_SUGGESTED_CHARS + 1);
        let close = format!("{long}y");
        assert_eq!(did_you_mean(&long, [close.as_str()]), None);
        let short = "x".repeat(MAX_SUGGESTED_CHARS);
        let close = format!("{short}y");
        assert_eq!(did_you_mean(&short, [close.as_str()]), Some(close.as_str()));
    }

    #[test]
    fn renders_location_snippet_and_hint() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, "tools:\n  - descripton: x\n").unwrap();
        let loc = Location { file: file.clone(), line: 2, column: 5, width: 10 };
        let d =
            Diagnostic::error("unknown-key", loc, "unknown key `descripton`").with_hint("did you mean `description`?");
        let text = render_human(&[d]);
        assert!(text.contains("c.yaml:2:5: error: unknown key `descripton`"), "{text}");
        assert!(text.contains("2 |   - descripton: x"), "{text}");
        assert!(text.contains("  |     ^^^^^^^^^^"), "{text}");
        assert!(text.contains("= hint: did you mean `description`?"), "{text}");
        assert!(text.contains("1 error, 0 warnings"), "{text}");
    }

    #[test]
    fn an_underline_stops_at_the_end_of_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, "statement: >-\n  INSERT INTO orders (item)\n  VALUES ('a')\n").unwrap();
        // A folded statement of 38 characters, from line 2 column 3.
        let loc = Location { file: file.clone(), line: 2, column: 3, width: 38 };
        let text = render_human(&[Diagnostic::error("sql-read-only", loc, "statement writes")]);
        assert!(text.contains(&format!("  | {}{}\n", " ".repeat(2), "^".repeat(25))), "{text}");
    }

    #[test]
    fn template_names_read_as_places() {
        assert_eq!(template_place("tool a:/run/steps/0/log/data"), "`log.data` of step #1 of `run` of tool `a`");
        assert_eq!(template_place("prompt p:/messages/1/text"), "`text` of message #2 of prompt `p`");
        assert_eq!(template_place("resource template x://a/{b}:/text"), "`text` of resource template `x://a/{b}`");
        assert_eq!(template_place("bookings.j2"), "bookings.j2");
    }
}
