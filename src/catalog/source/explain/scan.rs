//! The line scanner: reads a catalog's raw text once and records, for every
//! line, its indentation, the levels it opens, how it ends and the template
//! values written without quotes (see the parent module).

/// What a level of indentation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::catalog::source) enum LevelKind {
    /// A `- ` list item.
    Dash,
    /// A `key:` (or anything else starting a line).
    Key,
}

/// How a line ends, i.e. what may follow it more indented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ends {
    /// `key:` or `-` with nothing after: children follow.
    Open,
    /// A plain value: more indented lines continue it.
    Plain,
    /// A complete value (quoted, flow, block scalar header handled apart).
    Closed,
}

/// What a line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
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
pub(in crate::catalog::source) struct LineInfo {
    /// 1-based line number.
    pub(super) number: usize,
    /// Leading spaces.
    pub(super) indent: usize,
    pub(super) kind: Kind,
    /// The levels the line opens, left to right: (column from 0, kind, width of its token).
    pub(super) levels: Vec<(usize, LevelKind, usize)>,
    pub(super) ends: Ends,
}

/// A template written without quotes at the start of a value.
#[derive(Debug, Clone)]
pub(in crate::catalog::source) struct Slip {
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
    pub(super) line_bytes: (usize, usize),
}

/// A quoted value that did not close on the line it opened.
#[derive(Debug, Clone)]
pub(super) struct OpenQuote {
    pub(super) line: usize,
    /// 1-based column of the quote.
    pub(super) column: usize,
    pub(super) quote: char,
    /// The line it closes on, if it does.
    pub(super) closed: Option<usize>,
}

/// What [`scan`] found.
#[derive(Debug, Default)]
pub(in crate::catalog::source) struct Scan {
    pub(super) lines: Vec<LineInfo>,
    pub slips: Vec<Slip>,
    pub(super) quotes: Vec<OpenQuote>,
}

/// Cross-line state of the scanner.
#[derive(Default)]
struct State {
    /// Inside a block scalar whose owner is at this indentation, and the
    /// indentation and number of its first line.
    pub(super) block: Option<(isize, Option<(usize, usize)>)>,
    /// Inside a quoted value (the index in `Scan::quotes`).
    pub(super) quote: Option<usize>,
    /// Depth of `[`/`{`.
    pub(super) flow: usize,
    /// Whether the next thing in a flow collection starts a value.
    pub(super) flow_node_start: bool,
    /// A plain value owned by a node at this indentation, begun on this line.
    pub(super) plain: Option<(isize, usize)>,
    /// The slip (index in `Scan::slips`) that the plain value is: its
    /// continuation lines belong to the template.
    pub(super) plain_slip: Option<usize>,
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
pub(super) fn quote_end(chars: &[char], i: usize, quote: char) -> Option<usize> {
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
/// nothing but spaces, `-`, `:`, `[`, `{` or `,` before it on its line,
/// outside a block scalar. One pass over the lines, so a file without any
/// (the usual case, templates in `|` blocks included) is not [`scan`]ned.
/// It may say yes where [`scan`] finds nothing, never the other way round:
/// a block scalar is only skipped when its header is plainly `key: |` or
/// `- |` (indicators and a comment allowed), and only its lines indented
/// past the key.
pub(in crate::catalog::source) fn may_have_slips(text: &str) -> bool {
    // While in a block scalar: the column its lines are indented past.
    let mut block: Option<usize> = None;
    for line in text.split('\n') {
        let indent = line.len() - line.trim_start_matches(' ').len();
        if line[indent..].trim_end_matches(['\r', ' ', '\t']).is_empty() {
            continue;
        }
        if block.is_some_and(|owner| indent > owner) {
            continue;
        }
        if line_may_slip(line) {
            return true;
        }
        block = block_header(line, indent);
    }
    false
}

/// Whether a template on `line` starts a value (see [`may_have_slips`]).
fn line_may_slip(line: &str) -> bool {
    let bytes = line.as_bytes();
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(2).position(|w| w[0] == b'{' && matches!(w[1], b'{' | b'%' | b'#')) {
        let idx = at + found;
        let before = bytes[..idx].iter().rev().find(|b| !matches!(b, b' ' | b'\t'));
        if before.is_none_or(|b| matches!(b, b'-' | b':' | b'[' | b'{' | b',')) {
            return true;
        }
        at = idx + 2;
    }
    false
}

/// If `line` (indented by `indent`) ends in a block scalar header, as in
/// `key: |-` or `- >` (a ` #` comment may follow), the column its content
/// is indented past: the key's, or the header's own for a list item (more
/// than YAML asks, so no line outside the block is ever taken for inside).
fn block_header(line: &str, indent: usize) -> Option<usize> {
    if !line.bytes().any(|b| matches!(b, b'|' | b'>')) {
        return None;
    }
    let mut column = indent;
    let mut rest = &line[indent..];
    while let Some(after) = rest.strip_prefix('-').filter(|after| after.starts_with([' ', '\t'])) {
        let trimmed = after.trim_start_matches([' ', '\t']);
        column += rest.len() - trimmed.len();
        rest = trimmed;
    }
    // Found as bytes, not with `str::find`, whose searcher costs more to set
    // up than these short lines take to walk; both are ASCII, so the cuts
    // fall between characters.
    let value = match rest.as_bytes().windows(2).rposition(|pair| pair == b": ") {
        Some(idx) => &rest[idx + 2..],
        None => rest,
    };
    let value = match value.as_bytes().windows(2).position(|pair| pair == b" #") {
        Some(idx) => &value[..idx],
        None => value,
    };
    crate::catalog::source::is_block_header(value.trim_ascii()).then_some(column)
}

/// Reads `text` line by line (see the module documentation); `keep_lines`
/// keeps what each line is (for explaining an error), otherwise only
/// templates and quotes are kept.
pub(in crate::catalog::source) fn scan(text: &str, keep_lines: bool) -> Scan {
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

#[cfg(test)]
mod tests {
    use super::{may_have_slips, scan};

    #[test]
    fn templates_inside_block_scalars_need_no_scan() {
        let text = "tools:\n  - name: a\n    text: |-\n      {% if x %}{{ x }}{% endif -%}\n\n      {{ y }}\n    description: >\n      {{ z }}\n";
        assert!(!may_have_slips(text));
        assert!(scan(text, false).slips.is_empty());
        // The shipped catalog loads without the scan at every start.
        assert!(!may_have_slips(include_str!("../../../../catalogs/reservo.yaml")));
    }

    #[test]
    fn a_template_starting_a_value_outside_a_block_is_scanned() {
        for text in [
            "text: {{ x }}\n",
            "list: [a, {{ x }}]\n",
            "- {% if a %}b{% endif %}\n",
            "key:\n  {{ x }}\n",
            // A block scalar ends where a line is no more indented than its key.
            "- key: |\n    a\n  other: {{ x }}\n",
            "a:\n  key: |\n    {{ fine }}\n  next: {{ x }}\n",
            // Not plainly a header: the lines are not skipped.
            "key: &anchor |\n  {{ x }}\n",
            "key: \"a: |\"\nb: {{ x }}\n",
        ] {
            assert!(may_have_slips(text), "{text:?}");
        }
    }

    /// The prefilter may say yes where the scanner finds nothing, never the
    /// other way round: every catalog in the repository, and each with its
    /// block scalars' first lines made into unquoted templates.
    #[test]
    fn the_prefilter_never_hides_a_slip_from_the_scanner() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut texts = Vec::new();
        let mut dirs: Vec<_> = ["tests/catalogs", "catalogs", "examples"].iter().map(|dir| root.join(dir)).collect();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|ext| ext == "yaml" || ext == "yml") {
                    texts.push(std::fs::read_to_string(&path).unwrap_or_default());
                }
            }
        }
        assert!(texts.len() > 100, "found {} catalogs", texts.len());
        let mut checked = 0;
        for text in &texts {
            // Each `key: |` made into `key:` makes its lines a value the scanner reads.
            let unblocked = text.replace(": |-\n", ":\n").replace(": |\n", ":\n").replace(": >\n", ":\n");
            for text in [text.as_str(), unblocked.as_str()] {
                if !scan(text, false).slips.is_empty() {
                    checked += 1;
                    assert!(may_have_slips(text), "the prefilter missed a slip in:\n{text}");
                }
            }
        }
        assert!(checked > 5, "only {checked} catalogs with slips");
    }
}
