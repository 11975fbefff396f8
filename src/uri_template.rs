//! RFC 6570 URI templates, as resource templates use them: parsing (with a
//! reason when the template is malformed), the variable names, and matching a
//! concrete URI back to its variables for `resources/read`.
//!
//! # What a value may be
//! Matching supports the operators a resource URI needs. An expression's value
//! is one or more characters:
//! - `{var}`: anything but `/ ? # &` (one path segment);
//! - `{+var}`, `{#var}` (after a `#`): anything;
//! - `{.var}` (after a `.`): anything but `/ ? # .`;
//! - `{/var}` (after a `/`), `{;…}` (after a `;`): anything but `/ ? #`;
//! - `{?…}` (after a `?`), `{&…}` (after a `&`): anything but `#`; these two
//!   may also be absent altogether.
//!
//! With several variables, `{a,b}`, `{+a,b}` and `{#a,b}` split their value on
//! `,` (fewer values than variables leave the last ones out); `{.a,b}` and
//! `{/a,b}` bind their first variable only (a value stops at the separator);
//! `{;a,b}`, `{?a,b}` and `{&a,b}` are `name=value` pairs (or a bare `name`,
//! whose value is empty) separated by `;` or `&`, each name one of the
//! expression's variables, in any order. Values are percent-decoded (invalid
//! escapes are kept as written); explode (`*`) and prefix (`:3`) modifiers are
//! accepted and ignored.
//!
//! # Ambiguous templates
//! When a URI can be split in several ways (`{+a}/{+b}` against `x/y/z`,
//! `{a}{b}` against `xyz`), the answer is always the one a left-to-right
//! backtracking matcher finds first:
//! - each expression takes the longest value that still lets the rest of the
//!   template match (`a` = `x/y`, `b` = `z`; then `a` = `xy`, `b` = `z`);
//! - an optional `{?…}` or `{&…}` expression is left out when the rest of the
//!   template matches without it.
//!
//! # Cost
//! [`UriTemplate::parse`] compiles the template once (when the catalog loads)
//! into an anchored Thompson NFA. Matching runs it with a Pike VM
//! (`regex-automata`), whose leftmost-first semantics are exactly the priorities
//! above, in time linear in the URI's length (times the template's size) and
//! without backtracking; each value is percent-decoded once, after the match.
//! [`UriTemplate::match_uri`] refuses URIs over [`MAX_URI_BYTES`] before
//! matching, so a request costs at most that much work per template.

use regex_automata::nfa::thompson::{self, pikevm::PikeVM};
use regex_automata::{Anchored, Input};

/// The longest URI [`UriTemplate::match_uri`] (and so `resources/read`)
/// accepts, in bytes.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// The biggest NFA a template may compile to (only an expression with
/// thousands of variables comes near it).
const MAX_NFA_BYTES: usize = 1 << 20;

/// A URI longer than [`MAX_URI_BYTES`]: a request error (-32602), not a
/// "not found".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the URI is {len} bytes long; at most {MAX_URI_BYTES} bytes are accepted")]
pub struct UriTooLong {
    /// The URI's length in bytes.
    pub len: usize,
}

/// Refuses a URI longer than [`MAX_URI_BYTES`].
pub fn check_length(uri: &str) -> Result<(), UriTooLong> {
    if uri.len() > MAX_URI_BYTES { Err(UriTooLong { len: uri.len() }) } else { Ok(()) }
}

/// A parsed URI template, with its compiled matcher.
#[derive(Debug, Clone)]
pub struct UriTemplate {
    source: String,
    parts: Vec<Part>,
    /// The literal text the template starts with: a URI without it is not
    /// even handed to the matcher (a catalog's templates mostly differ there).
    prefix: String,
    /// `\A … \z` over the whole template, one capture group per expression.
    matcher: PikeVM,
}

impl PartialEq for UriTemplate {
    fn eq(&self, other: &UriTemplate) -> bool {
        self.source == other.source // everything else is derived from it
    }
}

impl Eq for UriTemplate {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Expression { operator: Operator, variables: Vec<String> },
}

/// An RFC 6570 expression operator (level 3; `{+…}` and `{#…}` of level 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    /// `{var}`
    Simple,
    /// `{+var}`
    Reserved,
    /// `{#var}`
    Fragment,
    /// `{.var}`
    Label,
    /// `{/var}`
    Path,
    /// `{;var}`
    Parameter,
    /// `{?var}`
    Query,
    /// `{&var}`
    Continuation,
}

/// How a value of an expression looks in a URI.
struct Syntax {
    /// What the expansion starts with.
    prefix: &'static str,
    /// Characters a value never contains.
    stop: &'static str,
    /// Between values (list) or `name=value` pairs.
    separator: char,
    /// `name=value` pairs, not a list of values.
    named: bool,
    /// The whole expression may be absent.
    optional: bool,
}

impl Operator {
    fn from_char(c: char) -> Option<Operator> {
        Some(match c {
            '+' => Operator::Reserved,
            '#' => Operator::Fragment,
            '.' => Operator::Label,
            '/' => Operator::Path,
            ';' => Operator::Parameter,
            '?' => Operator::Query,
            '&' => Operator::Continuation,
            _ => return None,
        })
    }

    fn syntax(self) -> Syntax {
        let (prefix, stop, separator, named, optional) = match self {
            Operator::Simple => ("", "/?#&", ',', false, false),
            Operator::Reserved => ("", "", ',', false, false),
            Operator::Fragment => ("#", "", ',', false, false),
            Operator::Label => (".", "/?#.", '.', false, false),
            Operator::Path => ("/", "/?#", '/', false, false),
            Operator::Parameter => (";", "/?#", ';', true, false),
            Operator::Query => ("?", "#", '&', true, true),
            Operator::Continuation => ("&", "#", '&', true, true),
        };
        Syntax { prefix, stop, separator, named, optional }
    }
}

impl UriTemplate {
    /// Parses `source` and compiles its matcher, or says what is wrong with it.
    pub fn parse(source: &str) -> Result<UriTemplate, String> {
        let parts = parse_parts(source)?;
        let prefix = match parts.first() {
            Some(Part::Literal(text)) => text.clone(),
            _ => String::new(),
        };
        let matcher = compile(&parts)?;
        Ok(UriTemplate { source: source.to_owned(), parts, prefix, matcher })
    }

    /// The variable names of `source` read as a template, in order of
    /// appearance, without compiling a matcher; none if it is not one.
    pub fn variables_in(source: &str) -> Vec<String> {
        parse_parts(source).map(|parts| names(&parts).map(str::to_owned).collect()).unwrap_or_default()
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The variable names, in order of appearance.
    pub fn variables(&self) -> Vec<&str> {
        names(&self.parts).collect()
    }

    /// If `uri` is an expansion of this template, its variables and values
    /// (in the order they appear in `uri`); a URI over [`MAX_URI_BYTES`] is
    /// refused before any matching.
    pub fn match_uri(&self, uri: &str) -> Result<Option<Vec<(String, String)>>, UriTooLong> {
        check_length(uri)?;
        Ok(self.match_unbounded(uri))
    }

    /// [`UriTemplate::match_uri`] without the length limit: linear in the
    /// length of `uri`, for benchmarks and callers that bound it themselves.
    pub fn match_unbounded(&self, uri: &str) -> Option<Vec<(String, String)>> {
        if !uri.starts_with(&self.prefix) {
            return None;
        }
        let mut cache = self.matcher.create_cache();
        let mut captures = self.matcher.create_captures();
        self.matcher.captures(&mut cache, Input::new(uri).anchored(Anchored::Yes), &mut captures);
        if !captures.is_match() {
            return None;
        }
        let expressions = self.parts.iter().filter_map(|part| match part {
            Part::Expression { operator, variables } => Some((*operator, variables)),
            Part::Literal(_) => None,
        });
        let mut found = Vec::new();
        for (idx, (operator, variables)) in expressions.enumerate() {
            // Group 0 is the whole match; an absent optional expression has no span.
            if let Some(span) = captures.get_group(idx + 1) {
                bind(operator, variables, uri.get(span.range())?, &mut found);
            }
        }
        Some(found)
    }
}

/// The variable names of `parts`, in order of appearance.
fn names(parts: &[Part]) -> impl Iterator<Item = &str> {
    parts
        .iter()
        .flat_map(|part| match part {
            Part::Expression { variables, .. } => variables.as_slice(),
            Part::Literal(_) => &[],
        })
        .map(String::as_str)
}

/// The literal parts and expressions of `source`, or what is wrong with it.
fn parse_parts(source: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut rest = source;
    while !rest.is_empty() {
        match rest.find(['{', '}']) {
            Some(idx) if rest.as_bytes()[idx] == b'}' => {
                return Err(format!("unmatched `}}` at character {}", source.len() - rest.len() + idx + 1));
            }
            Some(idx) => {
                if idx > 0 {
                    parts.push(Part::Literal(rest[..idx].to_owned()));
                }
                let after = &rest[idx + 1..];
                let Some(end) = after.find('}') else {
                    return Err("unclosed `{`".to_owned());
                };
                parts.push(parse_expression(&after[..end])?);
                rest = &after[end + 1..];
            }
            None => {
                parts.push(Part::Literal(rest.to_owned()));
                rest = "";
            }
        }
    }
    for part in &parts {
        if let Part::Literal(text) = part
            && text.chars().any(|c| c.is_whitespace() || c == '"' || c == '<' || c == '>')
        {
            return Err(format!("`{text}` contains characters not allowed in a URI"));
        }
    }
    Ok(parts)
}

fn parse_expression(body: &str) -> Result<Part, String> {
    let mut chars = body.chars();
    let operator = match chars.clone().next() {
        Some(c @ ('=' | ',' | '!' | '@' | '|')) => {
            return Err(format!("operator `{c}` is reserved by RFC 6570 and cannot be used"));
        }
        Some(c) => match Operator::from_char(c) {
            Some(operator) => {
                chars.next();
                operator
            }
            None => Operator::Simple,
        },
        None => return Err("empty expression `{}`".to_owned()),
    };
    let mut variables = Vec::new();
    for spec in chars.as_str().split(',') {
        let name = spec.trim_end_matches('*');
        let name = name.split(':').next().unwrap_or_default();
        let valid = !name.is_empty()
            && !name.starts_with('.')
            && !name.ends_with('.')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '%');
        if !valid {
            return Err(format!("`{spec}` is not a valid variable name (letters, digits and _)"));
        }
        variables.push(name.to_owned());
    }
    Ok(Part::Expression { operator, variables })
}

/// Compiles the whole template to one anchored NFA; see the module docs for
/// the language of each expression and why the Pike VM's priorities are the
/// ambiguity rules.
fn compile(parts: &[Part]) -> Result<PikeVM, String> {
    // Bytes, not characters (`-u`): a class compiles to a few byte ranges
    // instead of a UTF-8 automaton (whose 10 000-entry cache the compiler
    // builds and clears for each template); see `expression_pattern` for how
    // a value still holds whole characters.
    let mut pattern = String::from(r"(?s-u)\A");
    for part in parts {
        match part {
            Part::Literal(text) => pattern.push_str(&regex_syntax::escape(text)),
            Part::Expression { operator, variables } => pattern.push_str(&expression_pattern(*operator, variables)),
        }
    }
    pattern.push_str(r"\z");
    PikeVM::builder()
        .syntax(regex_automata::util::syntax::Config::new().utf8(false))
        .thompson(thompson::Config::new().nfa_size_limit(Some(MAX_NFA_BYTES)))
        .build(&pattern)
        .map_err(|err| format!("the template is too complex to match ({err})"))
}

/// One expression: its prefix, then its value in a capture group. Every
/// repetition is greedy, so a longer value is tried before a shorter one; an
/// optional expression is a lazy `??`, so leaving it out is tried first.
fn expression_pattern(operator: Operator, variables: &[String]) -> String {
    let syntax = operator.syntax();
    let separator = regex_syntax::escape(&syntax.separator.to_string());
    // A value's bytes (`item` also excludes the separator; every excluded
    // character is ASCII). A value ends inside no character: it cannot
    // start with a UTF-8 continuation byte (0x80–0xBF, `first`), and what
    // follows it — a literal, a prefix, another value — cannot either, so
    // each way of splitting a URI is a way of splitting its characters.
    let excluded = |also: &str| regex_syntax::escape(&format!("{}{also}", syntax.stop));
    let class = |also: &str| match excluded(also) {
        none if none.is_empty() => ".".to_owned(),
        excluded => format!("[^{excluded}]"),
    };
    let first = |also: &str| format!(r"[^{}\x80-\xBF]", excluded(also));
    let body = if syntax.named {
        // Longest names first: a longer pair is tried before a shorter one.
        let mut names: Vec<&String> = variables.iter().collect();
        names.sort_by_key(|name| std::cmp::Reverse(name.len()));
        let names: Vec<String> = names.iter().map(|name| regex_syntax::escape(name)).collect();
        let item = class(&syntax.separator.to_string());
        let pair = format!("(?:{})(?:={item}*)?", names.join("|"));
        format!("{pair}(?:{separator}{pair})*")
    } else if variables.len() == 1 || syntax.stop.contains(syntax.separator) {
        format!("{}{}*", first(""), class(""))
    } else {
        // Up to one value per variable, at least one character in all: either
        // the first value is not empty, or a separator follows it.
        let item = class(&syntax.separator.to_string());
        let first = first(&syntax.separator.to_string());
        let more = variables.len() - 1;
        format!("(?:{first}{item}*(?:{separator}{item}*){{0,{more}}}|(?:{separator}{item}*){{1,{more}}})")
    };
    let expression = format!("{}({body})", regex_syntax::escape(syntax.prefix));
    if syntax.optional { format!("(?:{expression})??") } else { expression }
}

/// Records the variables of one expression whose value (the text after its
/// prefix) the matcher has already checked.
fn bind(operator: Operator, variables: &[String], text: &str, found: &mut Vec<(String, String)>) {
    let syntax = operator.syntax();
    if syntax.named {
        for pair in text.split(syntax.separator) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            found.push((key.to_owned(), percent_decode(value)));
        }
    } else if variables.len() == 1 {
        found.extend(variables.first().map(|name| (name.clone(), percent_decode(text))));
    } else {
        for (name, value) in variables.iter().zip(text.split(syntax.separator)) {
            found.push((name.clone(), percent_decode(value)));
        }
    }
}

/// Decodes `%XX` escapes; invalid escapes are kept as written.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut idx = 0;
    while idx < bytes.len() {
        if bytes[idx] == b'%'
            && idx + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex(bytes[idx + 1]), hex(bytes[idx + 2]))
        {
            out.push(hi * 16 + lo);
            idx += 3;
            continue;
        }
        out.push(bytes[idx]);
        idx += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(byte: u8) -> Option<u8> {
    (byte as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests;
