//! Explaining YAML a person got wrong, in the words of the slip rather than
//! the parser's: an unquoted template, two lines at the same level indented
//! differently, a quote left open, a file that is TOML.
//!
//! A line scanner ([`scan`]) reads the raw text once and records, for every
//! line, its indentation, the levels it opens (a `- ` item, a `key:`), how it
//! ends (a child may follow, a plain value may continue, nothing may follow)
//! and the template values written without quotes. It follows quoted,
//! block (`|`, `>`) and flow (`[…]`, `{…}`) values across lines, so their
//! contents are never taken for structure. It only has to be right for the
//! usual shapes of a catalog: every finding is either confirmed by a parser
//! (templates) or used to explain an error the parser already reported.

use std::path::Path;

use crate::diag::{Diagnostic, Location};

/// What a level of indentation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LevelKind {
    /// A `- ` list item.
    Dash,
    /// A `key:` (or anything else starting a line).
    Key,
}

/// How a line ends, i.e. what may follow it more indented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ends {
    /// `key:` or `-` with nothing after: children follow.
    Open,
    /// A plain value: more indented lines continue it.
    Plain,
    /// A complete value (quoted, flow, block scalar header handled apart).
    Closed,
}

/// What a line is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// Blank or only a comment.
    Blank,
    /// Inside a block scalar, a quoted value or a flow collection that began above.
    Inside,
    /// More indented than a plain value above, which it continues.
    Continues { of: usize },
    /// In a block scalar, but less indented than its first line (which is `first`).
    ShortInBlock { first: usize, indent: usize },
    /// A line of structure.
    Node,
}

/// One line as the scanner read it.
#[derive(Debug, Clone)]
pub(super) struct LineInfo {
    /// 1-based line number.
    number: usize,
    /// Leading spaces.
    indent: usize,
    kind: Kind,
    /// The levels the line opens, left to right: (column from 0, kind, width of its token).
    levels: Vec<(usize, LevelKind, usize)>,
    ends: Ends,
}

/// A template written without quotes at the start of a value.
#[derive(Debug, Clone)]
pub(super) struct Slip {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// Byte range of the unquoted value in the whole text.
    pub start: usize,
    pub end: usize,
    /// The last line of a template that runs on over more indented lines.
    pub last_line: usize,
    /// Byte range of its (first) line, without the line break.
    line_bytes: (usize, usize),
}

/// A quoted value that did not close on the line it opened.
#[derive(Debug, Clone)]
struct OpenQuote {
    line: usize,
    /// 1-based column of the quote.
    column: usize,
    quote: char,
    /// The line it closes on, if it does.
    closed: Option<usize>,
}

/// What [`scan`] found.
#[derive(Debug, Default)]
pub(super) struct Scan {
    lines: Vec<LineInfo>,
    pub slips: Vec<Slip>,
    quotes: Vec<OpenQuote>,
}

/// Cross-line state of the scanner.
#[derive(Default)]
struct State {
    /// Inside a block scalar whose owner is at this indentation, and the
    /// indentation and number of its first line.
    block: Option<(isize, Option<(usize, usize)>)>,
    /// Inside a quoted value (the index in `Scan::quotes`).
    quote: Option<usize>,
    /// Depth of `[`/`{`.
    flow: usize,
    /// Whether the next thing in a flow collection starts a value.
    flow_node_start: bool,
    /// A plain value owned by a node at this indentation, begun on this line.
    plain: Option<(isize, usize)>,
    /// The slip (index in `Scan::slips`) that the plain value is: its
    /// continuation lines belong to the template.
    plain_slip: Option<usize>,
}

fn is_template_start(chars: &[char], i: usize) -> bool {
    chars.get(i) == Some(&'{') && matches!(chars.get(i + 1), Some('{' | '%' | '#'))
}

/// Where an unquoted template that starts at `i` ends (exclusive, trailing
/// spaces left out): the rest of the line, but not a ` #` comment outside
/// the template's tags, and in a flow collection not past `,`, `]` or `}`.
fn template_end(chars: &[char], i: usize, flow: bool) -> usize {
    let mut j = i;
    let mut closer: Option<char> = None;
    while j < chars.len() {
        if let Some(close) = closer {
            if chars[j] == close && chars.get(j + 1) == Some(&'}') {
                closer = None;
                j += 2;
            } else {
                j += 1;
            }
            continue;
        }
        if is_template_start(chars, j) {
            closer = Some(match chars[j + 1] {
                '{' => '}',
                other => other,
            });
            j += 2;
            continue;
        }
        if chars[j] == '#' && j > 0 && chars[j - 1] == ' ' {
            break;
        }
        if flow && matches!(chars[j], ',' | ']' | '}') {
            break;
        }
        j += 1;
    }
    while j > i && chars[j - 1] == ' ' {
        j -= 1;
    }
    j
}

/// Where a quoted value that opens at `i` (on the quote) closes on this line:
/// the index after the closing quote.
fn quote_end(chars: &[char], i: usize, quote: char) -> Option<usize> {
    let mut j = i;
    while j < chars.len() {
        let c = chars[j];
        if quote == '"' && c == '\\' {
            j += 2;
            continue;
        }
        if c == quote {
            if quote == '\'' && chars.get(j + 1) == Some(&'\'') {
                j += 2;
                continue;
            }
            return Some(j + 1);
        }
        j += 1;
    }
    None
}

/// Whether `text` may hold an unquoted template: a `{{`, `{%` or `{#` with
/// nothing but spaces, `-`, `:`, `[`, `{` or `,` before it on its line. One
/// pass over the bytes, so a file without any (the usual case) is not
/// [`scan`]ned.
pub(super) fn may_have_slips(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(2).position(|w| w[0] == b'{' && matches!(w[1], b'{' | b'%' | b'#')) {
        let idx = at + found;
        let before = bytes[..idx].iter().rev().find(|b| !matches!(b, b' ' | b'\t'));
        if before.is_none_or(|b| matches!(b, b'\n' | b'-' | b':' | b'[' | b'{' | b',')) {
            return true;
        }
        at = idx + 2;
    }
    false
}

/// Reads `text` line by line (see the module documentation); `keep_lines`
/// keeps what each line is (for explaining an error), otherwise only
/// templates and quotes are kept.
pub(super) fn scan(text: &str, keep_lines: bool) -> Scan {
    let mut scan = Scan::default();
    let mut state = State::default();
    let mut offset = 0;
    let mut buffers = (Vec::new(), Vec::new());
    for (idx, raw) in text.split('\n').enumerate() {
        let line_start = offset;
        offset += raw.len() + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let number = idx + 1;
        let info = scan_line(line, line_start, number, &mut state, &mut scan, &mut buffers);
        if keep_lines {
            scan.lines.push(info);
        }
    }
    scan
}

fn scan_line(
    line: &str,
    line_start: usize,
    number: usize,
    state: &mut State,
    scan: &mut Scan,
    buffers: &mut (Vec<char>, Vec<usize>),
) -> LineInfo {
    let (chars, bytes) = buffers;
    chars.clear();
    chars.extend(line.chars());
    let chars: &[char] = chars;
    // Byte offset of each character, and of the end.
    bytes.clear();
    bytes.extend(line.char_indices().map(|(b, _)| b));
    bytes.push(line.len());
    let bytes: &[usize] = bytes;
    let indent = chars.iter().take_while(|c| **c == ' ').count();
    let blank = chars[indent..].iter().all(|c| c.is_whitespace()) || chars.get(indent) == Some(&'#');
    let mut info = LineInfo { number, indent, kind: Kind::Node, levels: Vec::new(), ends: Ends::Closed };
    if let Some((owner, first)) = state.block {
        if blank || indent as isize > owner {
            info.kind = match first {
                _ if blank => Kind::Inside,
                None => {
                    state.block = Some((owner, Some((indent, number))));
                    Kind::Inside
                }
                Some((first_indent, first)) if indent < first_indent => {
                    Kind::ShortInBlock { first, indent: first_indent }
                }
                Some(_) => Kind::Inside,
            };
            return info;
        }
        state.block = None;
    }
    let inside = state.quote.is_some() || state.flow > 0;
    if !inside && blank {
        info.kind = Kind::Blank;
        return info;
    }
    if !inside && let Some((owner, of)) = state.plain {
        // A template's later lines belong to it, even where they start as
        // far left as its key (`{% endfor %}` under `text: {% for … %}`).
        let template_line = state.plain_slip.is_some() && indent as isize >= owner && is_template_start(chars, indent);
        if indent as isize > owner || template_line {
            info.kind = Kind::Continues { of };
            if let Some(slip) = state.plain_slip.and_then(|idx| scan.slips.get_mut(idx)) {
                let end = template_end(chars, indent, false);
                slip.end = line_start + bytes[end];
                slip.last_line = number;
            }
            return info;
        }
        state.plain = None;
        state.plain_slip = None;
    }
    if inside {
        info.kind = Kind::Inside;
    }
    let mut i = indent;
    let mut node_start = if state.flow > 0 { state.flow_node_start } else { true };
    // Indentation of what owns a value on this line (for plain and block scalars).
    let mut owner: isize = if inside { -1 } else { indent as isize - 1 };
    let mut last_plain = false;
    let mut token_start: Option<usize> = None;
    while i < chars.len() {
        let c = chars[i];
        if let Some(q) = state.quote {
            let quote = scan.quotes[q].quote;
            match quote_end(chars, if scan.quotes[q].line == number { i + 1 } else { i }, quote) {
                Some(end) => {
                    scan.quotes[q].closed = Some(number);
                    state.quote = None;
                    if scan.quotes[q].line == number {
                        scan.quotes.pop();
                    }
                    i = end;
                    node_start = false;
                    last_plain = false;
                    continue;
                }
                None => break,
            }
        }
        if c == ' ' || c == '\t' {
            i += 1;
            continue;
        }
        if c == '#' && (i == 0 || matches!(chars[i - 1], ' ' | '\t')) {
            break;
        }
        if node_start {
            let next_blank = chars.get(i + 1).is_none_or(|n| matches!(n, ' ' | '\t'));
            if (c == '-' || c == '?') && next_blank && state.flow == 0 {
                if c == '-' {
                    info.levels.push((i, LevelKind::Dash, 1));
                }
                owner = i as isize;
                i += 1;
                continue;
            }
            if is_template_start(chars, i) {
                let end = template_end(chars, i, state.flow > 0);
                scan.slips.push(Slip {
                    line: number,
                    column: i + 1,
                    start: line_start + bytes[i],
                    end: line_start + bytes[end],
                    last_line: number,
                    line_bytes: (line_start, line_start + line.len()),
                });
                node_start = false;
                // In a block, more indented lines below continue the template.
                last_plain = state.flow == 0;
                if last_plain {
                    state.plain_slip = Some(scan.slips.len() - 1);
                }
                i = end.max(i + 1);
                continue;
            }
            if c == '"' || c == '\'' {
                scan.quotes.push(OpenQuote { line: number, column: i + 1, quote: c, closed: None });
                state.quote = Some(scan.quotes.len() - 1);
                continue;
            }
            if (c == '|' || c == '>') && state.flow == 0 {
                state.block = Some((owner, None));
                info.ends = Ends::Closed;
                return finish(info, state, node_start, false, owner);
            }
            if c == '&' || c == '!' {
                while i < chars.len() && chars[i] != ' ' {
                    i += 1;
                }
                continue;
            }
            if c == '[' || c == '{' {
                state.flow += 1;
                i += 1;
                continue;
            }
            if c == '*' {
                while i < chars.len() && !matches!(chars[i], ' ' | ',' | ']' | '}') {
                    i += 1;
                }
                node_start = false;
                last_plain = false;
                continue;
            }
            if state.flow > 0 && matches!(c, ']' | '}') {
                state.flow -= 1;
                node_start = false;
                i += 1;
                continue;
            }
            // A plain scalar, or a key.
            node_start = false;
            last_plain = true;
            token_start = Some(i);
            i += 1;
            continue;
        }
        let next_ends = chars.get(i + 1).is_none_or(|n| matches!(n, ' ' | '\t'))
            || (state.flow > 0 && matches!(chars.get(i + 1), Some(',' | ']' | '}')));
        if c == ':' && next_ends {
            if state.flow == 0
                && let Some(start) = token_start.take()
            {
                info.levels.push((start, LevelKind::Key, i - start));
                owner = start as isize;
            }
            node_start = true;
            last_plain = false;
            i += 1;
            continue;
        }
        if state.flow > 0 {
            match c {
                ',' => node_start = true,
                ']' | '}' => {
                    state.flow -= 1;
                    if state.flow == 0 {
                        node_start = false;
                    }
                }
                '[' | '{' if !last_plain => state.flow += 1,
                _ => {}
            }
            if matches!(c, ',' | ']' | '}') {
                last_plain = false;
            }
        }
        i += 1;
    }
    finish(info, state, node_start, last_plain, owner)
}

fn finish(mut info: LineInfo, state: &mut State, node_start: bool, last_plain: bool, owner: isize) -> LineInfo {
    if state.flow > 0 {
        state.flow_node_start = node_start;
    }
    if info.kind == Kind::Node && info.levels.is_empty() {
        info.levels.push((info.indent, LevelKind::Key, 1));
    }
    if state.flow == 0 && state.quote.is_none() && state.block.is_none() {
        if node_start {
            info.ends = Ends::Open;
        } else if last_plain {
            info.ends = Ends::Plain;
            state.plain = Some((owner, info.number));
        }
    }
    if state.plain_slip.is_some_and(|_| state.plain.is_none_or(|(_, of)| of != info.number)) {
        state.plain_slip = None;
    }
    info
}

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
