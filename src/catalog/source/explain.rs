//! Explaining YAML a person got wrong, in the words of the slip rather than
//! the parser's: an unquoted template, two lines at the same level indented
//! differently, a quote left open, a file that is TOML.
//!
//! A line scanner ([`scan`], in `explain/scan.rs`) reads the raw text once and records, for every
//! line, its indentation, the levels it opens (a `- ` item, a `key:`), how it
//! ends (a child may follow, a plain value may continue, nothing may follow)
//! and the template values written without quotes. It follows quoted,
//! block (`|`, `>`) and flow (`[…]`, `{…}`) values across lines, so their
//! contents are never taken for structure. It only has to be right for the
//! usual shapes of a catalog: every finding is either confirmed by a parser
//! (templates) or used to explain an error the parser already reported.

use std::path::Path;

use crate::diag::{Diagnostic, Location};

mod scan;

use scan::{Ends, Kind, LevelKind, quote_end};
pub(super) use scan::{Scan, Slip, may_have_slips, scan};

/// A value in quotes, the way a person would write it: double quotes when
/// nothing in it needs escaping, single quotes otherwise.
pub(super) fn quoted(value: &str) -> String {
    if !value.contains('"') && !value.contains('\\') {
        format!("\"{value}\"")
    } else {
        format!("'{}'", value.replace('\'', "''"))
    }
}

/// `line` with the characters `from..to` (columns from 0) in quotes, without its indentation.
fn requoted(line: &str, from: usize, to: usize) -> String {
    let chars: Vec<char> = line.chars().collect();
    let to = to.min(chars.len());
    let from = from.min(to);
    let before: String = chars[..from].iter().collect();
    let value: String = chars[from..to].iter().collect();
    let after: String = chars[to..].iter().collect();
    format!("{}{}{}", before, quoted(&value), after).trim().to_owned()
}

/// `line` with its value from column `from` (from 0) in quotes, when that
/// value is on this one line.
pub(super) fn requote_from(line: &str, from: usize) -> Option<String> {
    (from < line.chars().count()).then(|| requoted_from(line, from))
}

/// The diagnostic for an unquoted template.
pub(super) fn template_diagnostic(file: &Path, text: &str, slip: &Slip) -> Diagnostic {
    let line = text.get(slip.line_bytes.0..slip.line_bytes.1).unwrap_or("");
    let value = text.get(slip.start..slip.end).unwrap_or("");
    let width = value.lines().next().unwrap_or("").chars().count().max(1);
    let opener: String = value.chars().take(2).collect();
    let message = if opener == "{{" {
        "this template must be quoted: unquoted, YAML reads `{{` as the start of a mapping, not text".to_owned()
    } else {
        format!("this template must be quoted: YAML cannot read a value starting with `{opener}` unless it is quoted")
    };
    let location = Location { file: file.to_path_buf(), line: slip.line, column: slip.column, width };
    if slip.last_line > slip.line {
        let key = line.chars().take(slip.column - 1).collect::<String>();
        return Diagnostic::error("unquoted-template", location, message).with_hint(format!(
            "this template runs on to line {}: write it as a block scalar, `{} |`, with the template on the lines below, indented",
            slip.last_line,
            key.trim()
        ));
    }
    let rewritten = requoted(line, slip.column - 1, slip.column - 1 + width);
    Diagnostic::error("unquoted-template", location, message).with_hint(format!(
        "write it in quotes: `{rewritten}`; a template over several lines goes in a block scalar: `|` after the key, then the template on the lines below, indented"
    ))
}

/// A serde_yaml (libyaml) error taken apart.
#[derive(Debug, Default)]
pub(super) struct YamlError {
    pub problem: String,
    pub line: usize,
    pub column: usize,
    pub context: Option<String>,
    pub context_at: Option<(usize, usize)>,
}

/// Takes apart serde_yaml's message: `PROBLEM[ at line L column C][, CONTEXT[ at line L column C]]`.
pub(super) fn parse_error(message: &str, location: Option<(usize, usize)>) -> YamlError {
    fn split_at_mark(text: &str) -> (&str, Option<(usize, usize)>) {
        let Some(idx) = text.find(" at line ") else { return (text, None) };
        let rest = &text[idx + " at line ".len()..];
        let mut parts = rest.split(" column ");
        let line = parts.next().and_then(|l| l.trim().parse().ok());
        let column = parts.next().and_then(|c| c.split(|ch: char| !ch.is_ascii_digit()).next()?.parse().ok());
        match (line, column) {
            (Some(line), Some(column)) => (&text[..idx], Some((line, column))),
            _ => (&text[..idx], None),
        }
    }
    let (problem_part, context_part) = match message.find(", while ") {
        Some(idx) => (&message[..idx], Some(&message[idx + 2..])),
        None => (message, None),
    };
    let (problem, at) = split_at_mark(problem_part);
    let (line, column) = location.or(at).unwrap_or((1, 1));
    let (context, context_at) = match context_part {
        Some(part) => {
            let (context, at) = split_at_mark(part);
            (Some(context.to_owned()), at)
        }
        None => (None, None),
    };
    YamlError { problem: problem.to_owned(), line, column, context, context_at }
}

/// What carte says about a YAML error, in place of libyaml's words.
pub(super) fn explain(file: &Path, text: &str, scan: &Scan, err: &YamlError) -> Diagnostic {
    let at = |line: usize, column: usize, width: usize| Location {
        file: file.to_path_buf(),
        line,
        column,
        width: width.max(1),
    };
    let line_text = |line: usize| text.lines().nth(line.wrapping_sub(1)).unwrap_or("");
    let here = at(err.line, err.column, 1);
    let problem = err.problem.as_str();
    let char_at = line_text(err.line).chars().nth(err.column.saturating_sub(1));

    if problem.contains("duplicate entry") {
        let key = problem.split_once("key ").map_or("", |(_, key)| key).trim_matches('"');
        return Diagnostic::error("yaml-syntax", here, format!("the key `{key}` appears twice in the same mapping"))
            .with_hint("each key may appear once per mapping; remove or rename one of them");
    }
    if let Some(diagnostic) = not_yaml(file, text) {
        return diagnostic;
    }
    if problem.contains("more than one document") {
        let second = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.trim_end() == "---" || l.starts_with("--- "))
            .map(|(idx, _)| idx + 1)
            .nth(usize::from(text.trim_start().starts_with("---")));
        let location = second.map_or_else(|| here.clone(), |line| at(line, 1, 3));
        return Diagnostic::error("yaml-syntax", location, "a catalog file is one YAML document, but this file has several")
            .with_hint("remove the `---` line that starts the next document; to split a catalog, put each part in its own file and list them under `include:`");
    }
    if problem.contains("tab character") || (problem.contains("cannot start any token") && char_at == Some('\t')) {
        return Diagnostic::error("yaml-syntax", here, "a tab is used for indentation here; YAML allows only spaces")
            .with_hint("indent with spaces (2 per level is usual); most editors can convert tabs to spaces");
    }
    if problem.contains("unknown escape character")
        || problem.contains("hexadecimal number")
        || problem.contains("invalid Unicode character escape")
    {
        let value_start = scan
            .quotes
            .iter()
            .rev()
            .find(|q| q.line == err.line)
            .map(|q| q.column)
            .or_else(|| err.context_at.filter(|(line, _)| *line == err.line).map(|(_, column)| column));
        let hint = match value_start.and_then(|column| {
            let l = line_text(err.line);
            let chars: Vec<char> = l.chars().collect();
            let end = quote_end(&chars, column, '"')?;
            let inner: String = chars[column..end - 1].iter().collect();
            let before: String = chars[..column - 1].iter().collect();
            Some(format!("{}'{}'", before.trim_start(), inner.replace('\'', "''")))
        }) {
            Some(fixed) => format!(
                "in double quotes `\\` starts an escape such as `\\n`; write `\\\\` for a backslash, or use single quotes, where `\\` is plain text: `{fixed}`"
            ),
            None => "in double quotes `\\` starts an escape such as `\\n`; write `\\\\` for a backslash, or use single quotes, where `\\` is plain text".to_owned(),
        };
        return Diagnostic::error(
            "yaml-syntax",
            at(err.line, err.column.saturating_sub(1).max(1), 2),
            "this backslash does not start a valid escape in a double-quoted value",
        )
        .with_hint(hint);
    }
    // A quote left open (the parser reads on into the next lines).
    if let Some(quote) = scan.quotes.iter().find(|q| q.line <= err.line && q.closed.is_none_or(|c| c >= err.line)) {
        let opened = line_text(quote.line);
        let value: String = opened.chars().skip(quote.column).collect::<String>().trim_end().to_owned();
        let fixed = format!(
            "{}{}{}{}",
            opened.chars().take(quote.column - 1).collect::<String>().trim_start(),
            quote.quote,
            value,
            quote.quote
        );
        let message = match quote.closed {
            Some(line) => format!(
                "this `{}` is not closed on its line, so the value runs on to line {line} and what follows is not valid YAML",
                quote.quote
            ),
            None => format!("this `{}` is never closed", quote.quote),
        };
        return Diagnostic::error("yaml-syntax", at(quote.line, quote.column, 1), message)
            .with_hint(format!("close the quote at the end of the value: `{fixed}`"));
    }
    if problem.contains("cannot start any token") {
        let what = match char_at {
            Some('`') => "a backtick".to_owned(),
            Some(c) => format!("`{c}`"),
            None => "this character".to_owned(),
        };
        let fixed = requoted_from(line_text(err.line), err.column.saturating_sub(1));
        return Diagnostic::error(
            "yaml-syntax",
            here,
            format!("a value cannot start with {what} unless it is quoted (YAML reserves it)"),
        )
        .with_hint(format!("put the value in quotes: `{fixed}`"));
    }
    if problem.contains("undefined tag handle") {
        let fixed = requoted_from(line_text(err.line), err.column.saturating_sub(1));
        return Diagnostic::error(
            "yaml-syntax",
            here,
            "a value starting with `!` is a YAML tag, and this one is not defined",
        )
        .with_hint(format!("to write `!` as text, put the value in quotes: `{fixed}`"));
    }
    if problem.contains("unknown anchor") {
        let name: String = line_text(err.line)
            .chars()
            .skip(err.column.saturating_sub(1))
            .skip_while(|c| *c == '*')
            .take_while(|c| !matches!(c, ' ' | ',' | ']' | '}'))
            .collect();
        let fixed = requoted_from(line_text(err.line), err.column.saturating_sub(1));
        return Diagnostic::error(
            "yaml-syntax",
            at(err.line, err.column, name.chars().count() + 1),
            format!("`*{name}` refers to an anchor `&{name}` that no value above defines"),
        )
        .with_hint(format!(
            "define it with `&{name}` before a value above; if `*` is meant as text, put the value in quotes: `{fixed}`"
        ));
    }
    if problem.contains("did not find expected ',' or") {
        let closer = if problem.ends_with("']'") { ']' } else { '}' };
        let opener = if closer == ']' { '[' } else { '{' };
        let location = err.context_at.map_or_else(|| here.clone(), |(line, column)| at(line, column, 1));
        return Diagnostic::error("yaml-syntax", location, format!("this `{opener}` is not closed with `{closer}`"))
            .with_hint(format!(
                "close it with `{closer}`, and separate its entries with `,`; a value containing `,`, `[`, `]`, `{{` or `}}` must be quoted"
            ));
    }
    if let Some(diagnostic) = indentation(file, text, scan, err.line) {
        return diagnostic;
    }
    if problem.contains("mapping values are not allowed") {
        let line = line_text(err.line);
        if let Some(info) = scan.lines.get(err.line.saturating_sub(1))
            && let Kind::Continues { of } = info.kind
            && key_colon(line) == Some(err.column.saturating_sub(1))
        {
            let previous = line_text(of);
            let previous_indent = previous.chars().take_while(|c| *c == ' ').count();
            let key: String = line.trim_start().chars().take_while(|c| *c != ':').collect();
            if info.indent > previous_indent && key_colon(previous).is_some() {
                return Diagnostic::error(
                    "yaml-indent",
                    at(err.line, info.indent + 1, key.chars().count()),
                    format!(
                        "line {} is indented {}, more than line {of} above it ({}), so YAML reads it as the rest of line {of}'s value",
                        err.line,
                        spaces(info.indent),
                        spaces(previous_indent)
                    ),
                )
                .with_note(format!("line {of}: `{}`", previous.trim()), at(of, previous_indent + 1, 1))
                .with_hint(INDENT_HINT);
            }
            return Diagnostic::error(
                "yaml-syntax",
                at(err.line, info.indent + 1, key.chars().count()),
                format!("YAML reads this line as the rest of the value on line {of}, so `{key}:` cannot start a key here"),
            )
            .with_note(format!("line {of}: `{}`", previous.trim()), at(of, previous_indent + 1, 1))
            .with_hint(match previous.find(':').filter(|idx| !previous[idx + 1..].starts_with(' ')) {
                Some(idx) => format!(
                    "put a space after the colon on line {of}: `{}: {}`",
                    previous[..idx].trim(),
                    previous[idx + 1..].trim()
                ),
                None => format!(
                    "line {of} is missing a `: ` after its key (as in `name: value`), or this line is indented differently from the keys beside it"
                ),
            });
        }
        let (message, hint) = match key_colon(line).filter(|colon| *colon + 1 < err.column) {
            Some(colon) => {
                let key: String = line.chars().take(colon).collect::<String>().trim_start_matches([' ', '-']).to_owned();
                (
                    format!("this `:` is inside the value of `{key}`, where YAML reads it as the start of another key"),
                    format!(
                        "a value containing `: ` or ending in `:` must be quoted: `{}`",
                        requoted_from(line, colon + 2)
                    ),
                )
            }
            None => (
                "YAML reads this `:` as the start of a key, which is not allowed here".to_owned(),
                "a value containing `: ` or ending in `:` must be quoted, e.g. description: \"Note: …\" or url: \"sqlite::memory:\"".to_owned(),
            ),
        };
        return Diagnostic::error("yaml-syntax", here, message).with_hint(hint);
    }
    if problem.contains("did not find expected key") || problem.contains("did not find expected '-' indicator") {
        // Text after a closing quote on the same line.
        let line = line_text(err.line);
        let chars: Vec<char> = line.chars().collect();
        let before: String = chars.iter().take(err.column.saturating_sub(1)).collect();
        let trimmed = before.trim_end();
        if trimmed.ends_with('"') || trimmed.ends_with('\'') {
            let hint = if trimmed.ends_with('\'') {
                "put the whole value inside the quotes; inside single quotes an apostrophe is written twice (`'Don''t'`), or use double quotes (`\"Don't\"`)"
            } else {
                "put the whole value inside the quotes, or remove what follows them; a `\"` inside double quotes is written `\\\"`, or use single quotes around the value"
            };
            return Diagnostic::error("yaml-syntax", here, "text follows the closing quote of this value")
                .with_hint(hint);
        }
        if problem.contains("'-'") {
            return Diagnostic::error(
                "yaml-syntax",
                here,
                "YAML expected a new list item (`- …`) here, at the indentation of the list above",
            )
            .with_hint(INDENT_HINT);
        }
        return Diagnostic::error(
            "yaml-syntax",
            here,
            "YAML expected a new `key: value` here, at the indentation of the keys above",
        )
        .with_hint("check that this line is indented like the keys beside it, and that a value with `{`, `[`, `\"` or `'` at its start is written in full");
    }
    let message = match &err.context {
        Some(context) => format!("invalid YAML: {problem} ({context})"),
        None => format!("invalid YAML: {problem}"),
    };
    Diagnostic::error("yaml-syntax", here, message)
}

const INDENT_HINT: &str = "give keys at the same level the same number of spaces (2 per level is usual), and list items (`- `) of one list the same too";

fn spaces(n: usize) -> String {
    if n == 1 { "1 space".to_owned() } else { format!("{n} spaces") }
}

/// The column (from 0) of the `:` ending the key at the start of `line`, if it starts with one.
fn key_colon(line: &str) -> Option<usize> {
    let chars: Vec<char> = line.chars().collect();
    let mut i = chars.iter().take_while(|c| **c == ' ').count();
    while chars.get(i) == Some(&'-') && chars.get(i + 1) == Some(&' ') {
        i += 2;
        while chars.get(i) == Some(&' ') {
            i += 1;
        }
    }
    if matches!(chars.get(i), Some('"' | '\'' | '{' | '[' | '#') | None) {
        return None;
    }
    (i..chars.len()).find(|&j| chars[j] == ':' && chars.get(j + 1).is_none_or(|n| matches!(n, ' ' | '\t')))
}

/// `line` with everything from column `from` (from 0) to its end, comment
/// aside, in quotes.
fn requoted_from(line: &str, from: usize) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut end = chars.len();
    for j in from..chars.len() {
        if chars[j] == '#' && j > 0 && chars[j - 1] == ' ' {
            end = j;
            break;
        }
    }
    while end > from && chars[end - 1] == ' ' {
        end -= 1;
    }
    requoted(line, from, end)
}

/// A level of indentation open at some point: its column, kind, and the line that last set it.
#[derive(Debug, Clone, Copy)]
struct Level {
    column: usize,
    kind: LevelKind,
    line: usize,
}

/// The first line, up to `upto`, whose indentation agrees with no level open
/// above it, said as "line N is indented X, but line M at the same level has Y".
fn indentation(file: &Path, text: &str, scan: &Scan, upto: usize) -> Option<Diagnostic> {
    let mut stack: Vec<Level> = Vec::new();
    let mut previous_ends = Ends::Open;
    let line_text = |line: usize| text.lines().nth(line.saturating_sub(1)).unwrap_or("");
    for info in scan.lines.iter().take(upto) {
        if let Kind::ShortInBlock { first, indent } = info.kind {
            let location = Location { file: file.to_path_buf(), line: info.number, column: info.indent + 1, width: 1 };
            let note_location = Location { file: file.to_path_buf(), line: first, column: indent + 1, width: 1 };
            return Some(
                Diagnostic::error(
                    "yaml-indent",
                    location,
                    format!(
                        "line {} is indented {}, but line {first} above it, the first of the same text block, has {indent}",
                        info.number,
                        spaces(info.indent)
                    ),
                )
                .with_note(format!("line {first}: `{}`", line_text(first).trim()), note_location)
                .with_hint("indent every line of a `|` or `>` block at least as much as its first line"),
            );
        }
        if info.kind != Kind::Node {
            continue;
        }
        let Some(&(first_column, first_kind, first_width)) = info.levels.first() else { continue };
        let indent = first_column;
        let mut popped: Option<Level> = None;
        while let Some(top) = stack.last()
            && top.column > indent
        {
            popped = stack.pop();
        }
        let mismatch = match stack.last().copied() {
            Some(top) if top.column == indent => {
                if top.kind == first_kind {
                    stack.pop();
                    None
                } else if first_kind == LevelKind::Key {
                    // A key at the column of a `-`: fine where the list is
                    // written at its key's own indentation.
                    let compact = stack.len() >= 2 && stack[stack.len() - 2].column == indent;
                    if compact {
                        stack.pop();
                        stack.pop();
                        None
                    } else {
                        Some((top, true))
                    }
                } else if previous_ends == Ends::Open && popped.is_none() {
                    None
                } else {
                    match stack.iter().rev().find(|l| l.kind == LevelKind::Dash) {
                        Some(dash) => Some((*dash, false)),
                        None => {
                            return Some(
                                Diagnostic::error(
                                    "yaml-indent",
                                    Location {
                                        file: file.to_path_buf(),
                                        line: info.number,
                                        column: indent + 1,
                                        width: 1,
                                    },
                                    format!(
                                        "line {} starts a list item (`- `) at the indentation of the keys above it (line {})",
                                        info.number, top.line
                                    ),
                                )
                                .with_note(
                                    format!("line {}: `{}`", top.line, line_text(top.line).trim()),
                                    Location { file: file.to_path_buf(), line: top.line, column: top.column + 1, width: 1 },
                                )
                                .with_hint("one mapping cannot also hold list items: remove the `- ` to make it a key, or put the list under a key of its own"),
                            );
                        }
                    }
                }
            }
            Some(_) if previous_ends == Ends::Open && popped.is_none() => None,
            None if popped.is_none() => None,
            top => {
                let candidates = [popped, top];
                let same_kind = candidates.iter().flatten().find(|l| l.kind == first_kind);
                same_kind.or(candidates.iter().flatten().next()).map(|l| (*l, false))
            }
        };
        if let Some((other, like_dash)) = mismatch {
            let other_text = line_text(other.line);
            let location =
                Location { file: file.to_path_buf(), line: info.number, column: indent + 1, width: first_width };
            let note_location =
                Location { file: file.to_path_buf(), line: other.line, column: other.column + 1, width: 1 };
            let note = format!("line {}: `{}`", other.line, other_text.trim());
            if like_dash {
                let item_key = stack_key_after(scan, other.line, other.column);
                let hint = match item_key {
                    Some(column) => format!(
                        "to add this key to the item of line {}, indent it like the key after its `-` ({}); to start a new item, begin the line with `- `",
                        other.line,
                        spaces(column)
                    ),
                    None => "to add this key to the item above, indent it like the key after its `-`; to start a new item, begin the line with `- `".to_owned(),
                };
                return Some(
                    Diagnostic::error(
                        "yaml-indent",
                        location,
                        format!(
                            "line {} is indented {}, like the `-` of line {}, so YAML expects a new list item here",
                            info.number,
                            spaces(indent),
                            other.line
                        ),
                    )
                    .with_note(note, note_location)
                    .with_hint(hint),
                );
            }
            return Some(
                Diagnostic::error(
                    "yaml-indent",
                    location,
                    format!(
                        "line {} is indented {}, but line {} above it at the same level has {}",
                        info.number,
                        spaces(indent),
                        other.line,
                        other.column
                    ),
                )
                .with_note(note, note_location)
                .with_hint(INDENT_HINT),
            );
        }
        for &(column, kind, _) in &info.levels {
            stack.push(Level { column, kind, line: info.number });
        }
        previous_ends = info.ends;
    }
    None
}

/// The column of the key that follows the `-` at `column` on `line`, if any.
fn stack_key_after(scan: &Scan, line: usize, column: usize) -> Option<usize> {
    let info = scan.lines.get(line.checked_sub(1)?)?;
    let position = info.levels.iter().position(|l| l.0 == column && l.1 == LevelKind::Dash)?;
    info.levels.get(position + 1).filter(|l| l.1 == LevelKind::Key).map(|l| l.0)
}

/// A file that is not YAML at all: TOML or INI (`[section]`, `key = value`).
pub(super) fn not_yaml(file: &Path, text: &str) -> Option<Diagnostic> {
    let (idx, first) = text
        .lines()
        .enumerate()
        .map(|(idx, l)| (idx, l.trim()))
        .find(|(_, l)| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))?;
    let section = first.starts_with('[')
        && first.ends_with(']')
        && first.len() > 2
        && first
            .trim_matches(['[', ']'])
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '"' | ' '));
    let assignment = first.split_once(" = ").or_else(|| first.split_once('=')).is_some_and(|(key, _)| {
        let key = key.trim();
        !key.is_empty()
            && !key.contains(':')
            && key.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '"'))
    });
    if !section && !assignment {
        return None;
    }
    let width = first.chars().count();
    let column = text.lines().nth(idx).map_or(0, |l| l.chars().take_while(|c| c.is_whitespace()).count()) + 1;
    Some(
        Diagnostic::error(
            "not-a-catalog",
            Location { file: file.to_path_buf(), line: idx + 1, column, width },
            format!("this file looks like TOML or INI (`{first}`), not a carte catalog"),
        )
        .with_hint("a carte catalog is YAML with keys such as `server:` and `tools:`; check the file name, or see the README for an example catalog"),
    )
}
