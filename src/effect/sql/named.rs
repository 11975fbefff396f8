//! `:named` parameters → PostgreSQL's `$1, $2, …`, in one pass over the
//! statement: what looks like a parameter inside a string literal (`'…'`,
//! `E'…'`), a quoted identifier (`"…"`), a comment (`-- …`, nested `/* … */`)
//! or a dollar-quoted string (`$$…$$`, `$tag$…$tag$`) is left alone, and so is
//! a cast (`::int`). The same name twice is the same `$n`. Values are always
//! bound, never spliced into the text.

use std::ops::Range;

use crate::effect::sql::engine::Refusal;

/// A statement with its `:names` replaced by `$n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated {
    /// The statement as PostgreSQL reads it.
    pub sql: String,
    /// The name of `$1`, `$2`, … in order.
    pub params: Vec<String>,
    /// Each replacement: where the `:name` was in the original statement,
    /// and where its `$n` is in `sql` (byte ranges), in order.
    edits: Vec<(Range<usize>, Range<usize>)>,
}

/// Translates `statement`; a positional `$1` written by hand is refused
/// (parameters are named after the tool's arguments).
pub fn translate(statement: &str) -> Result<Translated, Refusal> {
    let bytes = statement.as_bytes();
    let mut sql = String::with_capacity(statement.len() + 8);
    let mut params: Vec<String> = Vec::new();
    let mut edits = Vec::new();
    let mut copied = 0; // bytes of `statement` already copied to `sql`
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'\'' => {
                // E'…' strings treat a backslash as an escape.
                let escapes = at > 0 && matches!(bytes[at - 1], b'e' | b'E') && !is_word(bytes, at - 1);
                at = skip_quoted(bytes, at, b'\'', escapes);
            }
            b'"' => at = skip_quoted(bytes, at, b'"', false),
            b'-' if bytes.get(at + 1) == Some(&b'-') => {
                at = bytes[at..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |n| at + n + 1);
            }
            b'/' if bytes.get(at + 1) == Some(&b'*') => at = skip_block_comment(bytes, at),
            b'$' => {
                if let Some(end) = dollar_quote_end(bytes, at) {
                    at = end;
                } else if bytes.get(at + 1).is_some_and(u8::is_ascii_digit) && !is_word(bytes, at) {
                    return Err(Refusal::positional(
                        "positional `$1` parameters are not supported; use `:name`, named after an argument",
                    ));
                } else {
                    at += 1;
                }
            }
            b':' if bytes.get(at + 1) == Some(&b':') => at += 2,
            b':' if bytes.get(at + 1).is_some_and(|&b| b.is_ascii_alphabetic() || b == b'_') => {
                let end =
                    at + 1 + bytes[at + 1..].iter().take_while(|&&b| b.is_ascii_alphanumeric() || b == b'_').count();
                let name = &statement[at + 1..end];
                let number = match params.iter().position(|p| p == name) {
                    Some(idx) => idx + 1,
                    None => {
                        params.push(name.to_owned());
                        params.len()
                    }
                };
                sql.push_str(&statement[copied..at]);
                let start = sql.len();
                sql.push('$');
                sql.push_str(&number.to_string());
                edits.push((at..end, start..sql.len()));
                copied = end;
                at = end;
            }
            _ => at += 1,
        }
    }
    sql.push_str(&statement[copied..]);
    Ok(Translated { sql, params, edits })
}

impl Translated {
    /// Where PostgreSQL's error position (the 1-based character `position`
    /// in `sql`) is in the original statement: the word that starts there
    /// (a `$n` maps back to its whole `:name`).
    pub fn original_range(&self, statement: &str, position: usize) -> Option<Range<usize>> {
        let byte = self.sql.char_indices().nth(position.checked_sub(1)?).map(|(idx, _)| idx)?;
        let mut shift: isize = 0;
        for (original, translated) in &self.edits {
            if translated.contains(&byte) {
                return Some(original.clone());
            }
            if translated.start > byte {
                break;
            }
            shift = original.end as isize - translated.end as isize;
        }
        let start = usize::try_from(byte as isize + shift).ok().filter(|&s| s < statement.len())?;
        let rest = &statement[start..];
        let quoted = rest.starts_with('"');
        let len = if quoted {
            rest[1..].find('"').map_or(rest.len(), |n| n + 2)
        } else {
            rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')).unwrap_or(rest.len())
        };
        Some(start..start + len.max(1).min(rest.len()))
    }

    /// PostgreSQL's `message` with each `$n` it names written as the `:name`
    /// the person wrote.
    pub fn explain(&self, message: &str) -> String {
        let mut out = String::with_capacity(message.len());
        let mut rest = message;
        while let Some(idx) = rest.find('$') {
            out.push_str(&rest[..idx]);
            let digits = rest[idx + 1..].bytes().take_while(u8::is_ascii_digit).count();
            let name = rest[idx + 1..idx + 1 + digits]
                .parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|n| self.params.get(n));
            match name {
                Some(name) => {
                    out.push(':');
                    out.push_str(name);
                }
                None => out.push_str(&rest[idx..idx + 1 + digits]),
            }
            rest = &rest[idx + 1 + digits..];
        }
        out.push_str(rest);
        out
    }
}

/// Whether the byte before `at` continues a word (`a$1` is not a parameter).
fn is_word(bytes: &[u8], at: usize) -> bool {
    at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_')
}

/// The end of a quoted run starting at `at` (a doubled quote is one quote).
fn skip_quoted(bytes: &[u8], at: usize, quote: u8, escapes: bool) -> usize {
    let mut idx = at + 1;
    while idx < bytes.len() {
        match bytes[idx] {
            b'\\' if escapes => idx += 2,
            b if b == quote && bytes.get(idx + 1) == Some(&quote) => idx += 2,
            b if b == quote => return idx + 1,
            _ => idx += 1,
        }
    }
    bytes.len()
}

/// The end of a (nested) block comment starting at `at`.
fn skip_block_comment(bytes: &[u8], at: usize) -> usize {
    let mut depth = 0usize;
    let mut idx = at;
    while idx + 1 < bytes.len() {
        match (bytes[idx], bytes[idx + 1]) {
            (b'/', b'*') => {
                depth += 1;
                idx += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                idx += 2;
                if depth == 0 {
                    return idx;
                }
            }
            _ => idx += 1,
        }
    }
    bytes.len()
}

/// If a dollar quote (`$$` or `$tag$`) opens at `at`, the end of the
/// string it quotes.
fn dollar_quote_end(bytes: &[u8], at: usize) -> Option<usize> {
    if is_word(bytes, at) {
        return None;
    }
    let tag_len = bytes[at + 1..].iter().take_while(|&&b| b.is_ascii_alphanumeric() || b == b'_').count();
    let tag_end = at + 1 + tag_len;
    if bytes.get(tag_end) != Some(&b'$') || bytes.get(at + 1).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let tag = &bytes[at..=tag_end];
    let body = tag_end + 1;
    let close = bytes[body..].windows(tag.len()).position(|w| w == tag);
    Some(close.map_or(bytes.len(), |n| body + n + tag.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sql(statement: &str) -> (String, Vec<String>) {
        let t = translate(statement).unwrap();
        (t.sql, t.params)
    }

    #[test]
    fn names_become_numbers_once_each() {
        let (text, params) = sql("SELECT * FROM t WHERE a = :a AND b = :b_2 OR a2 = :a");
        assert_eq!(text, "SELECT * FROM t WHERE a = $1 AND b = $2 OR a2 = $1");
        assert_eq!(params, ["a", "b_2"]);
    }

    #[test]
    fn quotes_comments_casts_and_dollar_strings_are_left_alone() {
        let statement = "SELECT ':no', E'\\':no', \"col:no\", x::int, $$ :no $$, $t$ :no $$ $t$ -- :no\n\
                         /* :no /* :no */ :no */ FROM t WHERE id = :id::bigint AND s = 'it''s :no'";
        let (text, params) = sql(statement);
        assert_eq!(params, ["id"]);
        assert_eq!(text, statement.replace(":id::bigint", "$1::bigint"));
    }

    #[test]
    fn positional_parameters_are_refused_but_dollar_in_words_is_not() {
        let refused = translate("SELECT $1").unwrap_err();
        assert!(refused.message.contains("`:name`"));
        assert_eq!(refused.kind, crate::effect::sql::engine::RefusalKind::Positional);
        assert_eq!(sql("SELECT a$1 FROM t").1, Vec::<String>::new());
        assert_eq!(sql("SELECT arr[1:2] FROM t").1, Vec::<String>::new());
    }

    #[test]
    fn unclosed_quotes_end_the_statement() {
        assert_eq!(sql("SELECT ':a").1, Vec::<String>::new());
        assert_eq!(sql("SELECT $$ :a").1, Vec::<String>::new());
        assert_eq!(sql("SELECT /* :a").1, Vec::<String>::new());
    }

    #[test]
    fn positions_and_messages_map_back_to_what_was_written() {
        let statement = "SELECT nme FROM t WHERE long_name = :long_name AND x = :x AND wrong = 1";
        let t = translate(statement).unwrap();
        let at = |word: &str| t.sql.find(word).unwrap() + 1;
        assert_eq!(t.original_range(statement, at("nme")).map(|r| &statement[r]), Some("nme"));
        assert_eq!(t.original_range(statement, at("$2")).map(|r| &statement[r]), Some(":x"));
        assert_eq!(t.original_range(statement, at("wrong")).map(|r| &statement[r]), Some("wrong"));
        assert_eq!(
            t.explain("could not determine data type of parameter $2"),
            "could not determine data type of parameter :x"
        );
        assert_eq!(t.explain("costs $9"), "costs $9");
    }
}
