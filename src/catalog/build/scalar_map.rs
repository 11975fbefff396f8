//! Where the characters of a YAML string are in the file: an inline
//! template's error at byte 12 of the template is at some line and column of
//! the catalog, which depends on how the string is written (plain, quoted,
//! `|` or `>` block).
//!
//! [`locate_in_scalar`] decodes the scalar from the file text at the position
//! the parser recorded for it, keeping each decoded character's line and
//! column, and trusts the result only if the decoded characters up to the
//! place asked for are the template's own: when they are not (a `${VAR}`
//! expanded there, a file changed since, a form this decoder does not follow)
//! the caller keeps the scalar's own position. Double-quoted strings are
//! decoded for the common escapes (`\"`, `\\`, `\n`, `\t`, `\r`, `\/`, `\0`,
//! `\xXX`, `\uXXXX`, `\UXXXXXXXX`, line continuations); others fall back.

use std::ops::Range;

use crate::diag::Location;

/// One decoded character and where it is written (1-based line and column).
type Placed = (char, usize, usize);

/// The place of `range` (bytes of `value`, the decoded scalar) in `text`, the
/// file whose scalar at `at` holds `value`; `None` if it cannot be told.
pub(super) fn locate_in_scalar(text: &str, at: &Location, value: &str, range: Range<usize>) -> Option<Location> {
    let start = value.get(..range.start)?.chars().count();
    let end = value.get(..range.end)?.chars().count();
    let wanted: Vec<char> = value.chars().take(end.max(start + 1)).collect();
    let lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let placed = decode(&lines, at.line, at.column, wanted.len());
    // Everything up to the end of the range must be the value's own text.
    let must_match = end.max(start);
    if placed.len() < must_match || placed.iter().zip(&wanted).take(must_match).any(|((c, _, _), w)| c != w) {
        return None;
    }
    let first = match placed.get(start) {
        Some(first) => *first,
        // Past the end of the value (an error at "end of input"): after its last character.
        None if start > 0 => {
            let (c, line, column) = placed[start - 1];
            (c, line, column + 1)
        }
        None => return None,
    };
    let (_, line, column) = first;
    let last_on_line =
        placed.iter().take(end).skip(start).take_while(|(_, l, _)| *l == line).last().map_or(column, |(_, _, c)| *c);
    Some(Location { file: at.file.clone(), line, column, width: last_on_line + 1 - column })
}

/// A line as characters (columns count characters).
fn chars_of(line: &str) -> Vec<char> {
    line.chars().collect()
}

/// Decodes the scalar starting at `line`:`column` (1-based) of `lines`, up
/// to `limit` characters.
fn decode(lines: &[&str], line: usize, column: usize, limit: usize) -> Vec<Placed> {
    let Some(first) = lines.get(line.wrapping_sub(1)) else { return Vec::new() };
    let first = chars_of(first);
    let index = column.saturating_sub(1);
    match first.get(index) {
        Some('|' | '>') => block(lines, line, index, limit),
        Some('"') => flow(lines, line, index + 1, limit, Quote::Double),
        Some('\'') => flow(lines, line, index + 1, limit, Quote::Single),
        Some(_) => match block_header_before(lines, line) {
            Some((header_line, header_index)) => block(lines, header_line, header_index, limit),
            None => flow(lines, line, index, limit, Quote::Plain),
        },
        None => Vec::new(),
    }
}

/// Some parsers mark a block scalar at its first content line: the header
/// (`|`, `>-`, `|2`, …) then ends the closest non-blank line above.
fn block_header_before(lines: &[&str], line: usize) -> Option<(usize, usize)> {
    let mut above = line.checked_sub(1)?;
    while above > 0 {
        let text = lines.get(above - 1)?;
        if !text.trim().is_empty() {
            let content = match text.find(" #") {
                Some(idx) => &text[..idx],
                None => text,
            };
            let content = content.trim_end();
            let token_start = content.rfind([' ', '\t']).map_or(0, |i| i + 1);
            let token = &content[token_start..];
            let header = crate::catalog::source::is_block_header(token);
            return header.then(|| (above, content[..token_start].chars().count()));
        }
        above -= 1;
    }
    None
}

/// A `|` or `>` block whose header is at `line`, character `index`.
fn block(lines: &[&str], line: usize, index: usize, limit: usize) -> Vec<Placed> {
    let header = chars_of(lines[line - 1]);
    let folded = header.get(index) == Some(&'>');
    let explicit = header.iter().skip(index + 1).take(2).find_map(|c| c.to_digit(10)).map(|d| d as usize);
    // Content lines: (line number, characters); `None` for blank lines.
    let mut content: Vec<(usize, Option<Vec<char>>)> = Vec::new();
    let mut indent = explicit.map(|d| header.iter().take_while(|c| **c == ' ').count() + d);
    for (offset, text) in lines.iter().enumerate().skip(line) {
        let chars = chars_of(text);
        let leading = chars.iter().take_while(|c| **c == ' ').count();
        if leading == chars.len() {
            content.push((offset + 1, None));
            continue;
        }
        let indent = *indent.get_or_insert(leading);
        if leading < indent {
            break;
        }
        content.push((offset + 1, Some(chars[indent..].to_vec())));
        if content.len() > limit {
            break;
        }
    }
    let indent = indent.unwrap_or(0);
    let mut out = Vec::new();
    let mut i = 0;
    while i < content.len() && out.len() < limit {
        let (number, chars) = &content[i];
        let Some(chars) = chars else {
            out.push(('\n', *number, 1));
            i += 1;
            continue;
        };
        out.extend(chars.iter().enumerate().map(|(j, c)| (*c, *number, indent + j + 1)));
        let break_at = (*number, indent + chars.len() + 1);
        let next = content[i + 1..].iter().position(|(_, c)| c.is_some()).map(|p| i + 1 + p);
        let blanks = next.unwrap_or(content.len()) - i - 1;
        let more_indented = |c: &[char]| c.first().is_some_and(|c| *c == ' ' || *c == '\t');
        let next_chars = next.and_then(|n| content[n].1.as_deref());
        let fold = folded && !more_indented(chars) && next_chars.is_some_and(|n| !more_indented(n));
        if fold && blanks == 0 {
            out.push((' ', break_at.0, break_at.1));
        } else if !fold {
            out.push(('\n', break_at.0, break_at.1));
        }
        for (number, _) in &content[i + 1..i + 1 + blanks] {
            out.push(('\n', *number, 1));
        }
        i += 1 + blanks;
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Quote {
    Plain,
    Single,
    Double,
}

/// A plain or quoted scalar starting at `line`, character `index`.
fn flow(lines: &[&str], line: usize, index: usize, limit: usize, quote: Quote) -> Vec<Placed> {
    let mut out: Vec<Placed> = Vec::new();
    let mut number = line;
    let mut chars = chars_of(lines[line - 1]);
    let mut j = index;
    loop {
        // One line of the scalar, from `j`.
        let mut line_out: Vec<Placed> = Vec::new();
        let mut continued = false;
        let mut ended = false;
        while j < chars.len() {
            let c = chars[j];
            let column = j + 1;
            match (quote, c) {
                (Quote::Single, '\'') if chars.get(j + 1) == Some(&'\'') => {
                    line_out.push(('\'', number, column));
                    j += 2;
                    continue;
                }
                (Quote::Single, '\'') | (Quote::Double, '"') => {
                    ended = true;
                    break;
                }
                (Quote::Plain, '#') if j > 0 && chars[j - 1] == ' ' => {
                    ended = true;
                    break;
                }
                (Quote::Double, '\\') => {
                    let Some(&escape) = chars.get(j + 1) else {
                        continued = true;
                        break;
                    };
                    let (decoded, used) = match escape {
                        'n' => (Some('\n'), 2),
                        't' | '\t' => (Some('\t'), 2),
                        'r' => (Some('\r'), 2),
                        '0' => (Some('\0'), 2),
                        '"' | '\\' | '/' | ' ' => (Some(escape), 2),
                        'x' => (hex(&chars, j + 2, 2), 4),
                        'u' => (hex(&chars, j + 2, 4), 6),
                        'U' => (hex(&chars, j + 2, 8), 10),
                        _ => (None, 2),
                    };
                    // An escape this decoder does not know: stop here.
                    let Some(decoded) = decoded else { return out };
                    line_out.push((decoded, number, column));
                    j += used;
                    continue;
                }
                _ => {}
            }
            line_out.push((c, number, column));
            j += 1;
        }
        if !continued && !ended {
            // Trailing blanks of a line that folds are not part of the value.
            while line_out.last().is_some_and(|(c, _, col)| (*c == ' ' || *c == '\t') && chars[col - 1] == *c) {
                line_out.pop();
            }
        }
        out.extend(line_out);
        if ended || out.len() >= limit {
            return out;
        }
        // Fold into the next non-blank line.
        let break_at = (number, chars.len() + 1);
        let mut blanks = Vec::new();
        loop {
            number += 1;
            let Some(next) = lines.get(number - 1) else { return out };
            if next.trim().is_empty() {
                blanks.push(number);
                continue;
            }
            chars = chars_of(next);
            j = chars.iter().take_while(|c| **c == ' ' || **c == '\t').count();
            break;
        }
        if blanks.is_empty() {
            if !continued {
                out.push((' ', break_at.0, break_at.1));
            }
        } else {
            out.extend(blanks.iter().map(|n| ('\n', *n, 1)));
        }
    }
}

fn hex(chars: &[char], from: usize, digits: usize) -> Option<char> {
    let text: String = chars.get(from..from + digits)?.iter().collect();
    char::from_u32(u32::from_str_radix(&text, 16).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The place of `token` (its first occurrence in `value`) in `yaml`,
    /// whose scalar is at `line`:`column`, as (line, column, width).
    fn place(yaml: &str, line: usize, column: usize, value: &str, token: &str) -> Option<(usize, usize, usize)> {
        let at = Location { file: "c.yaml".into(), line, column, width: 1 };
        let start = value.find(token).unwrap();
        locate_in_scalar(yaml, &at, value, start..start + token.len()).map(|l| (l.line, l.column, l.width))
    }

    #[test]
    fn plain_and_single_quoted_scalars_keep_columns() {
        assert_eq!(place("text: {{ rom }} x\n", 1, 7, "{{ rom }} x", "rom"), Some((1, 10, 3)));
        assert_eq!(place("text: '{{ it''s }} rom'\n", 1, 7, "{{ it's }} rom", "rom"), Some((1, 20, 3)));
    }

    #[test]
    fn double_quoted_escapes_are_followed() {
        let yaml = "text: \"a\\n\\\"{{ rom }}\"\n";
        assert_eq!(place(yaml, 1, 7, "a\n\"{{ rom }}", "rom"), Some((1, 16, 3)));
    }

    #[test]
    fn literal_blocks_map_lines() {
        let yaml = "run:\n  text: |\n    Rooms:\n\n    {% for r in rooms %}\n    - {{ rom }}\n";
        let value = "Rooms:\n\n{% for r in rooms %}\n- {{ rom }}\n";
        // Marked at the header or at the first content line, the same place.
        assert_eq!(place(yaml, 2, 9, value, "rom }"), Some((6, 10, 5)));
        assert_eq!(place(yaml, 3, 5, value, "rom }"), Some((6, 10, 5)));
    }

    #[test]
    fn folded_blocks_and_multi_line_flow_scalars_fold() {
        let yaml = "text: >-\n  one\n  two {{ rom }}\n";
        assert_eq!(place(yaml, 1, 7, "one two {{ rom }}", "rom"), Some((3, 10, 3)));
        let yaml = "text: \"one\n  two {{ rom }}\"\n";
        assert_eq!(place(yaml, 1, 7, "one two {{ rom }}", "rom"), Some((2, 10, 3)));
    }

    #[test]
    fn a_value_that_differs_from_the_file_is_not_placed() {
        // `${USER}` was expanded: the template is not what the file says.
        assert_eq!(place("text: ${USER} {{ rom }}\n", 1, 7, "ann {{ rom }}", "rom"), None);
    }
}
