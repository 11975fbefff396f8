//! Unit tests of `uri_template`.

use super::*;
use proptest::prelude::*;

fn vars(pairs: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
    Some(pairs.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect())
}

#[test]
fn matches_simple_templates() {
    let t = UriTemplate::parse("reservo://rooms/{room}").unwrap();
    assert_eq!(t.variables(), vec!["room"]);
    assert_eq!(t.match_uri("reservo://rooms/Focus"), Ok(vars(&[("room", "Focus")])));
    assert_eq!(t.match_uri("reservo://rooms/Big%20Hall"), Ok(vars(&[("room", "Big Hall")])));
    assert_eq!(t.match_uri("reservo://rooms/a/b"), Ok(None));
    assert_eq!(t.match_uri("reservo://rooms/"), Ok(None));
    assert_eq!(t.match_uri("reservo://room/x"), Ok(None));
    let t = UriTemplate::parse("test://template/{id}/data").unwrap();
    assert_eq!(t.match_uri("test://template/42/data"), Ok(vars(&[("id", "42")])));
}

#[test]
fn matches_operators() {
    let t = UriTemplate::parse("file:///{+path}").unwrap();
    assert_eq!(t.match_uri("file:///a/b/c.txt"), Ok(vars(&[("path", "a/b/c.txt")])));
    let t = UriTemplate::parse("db://t{?limit,offset}").unwrap();
    assert_eq!(t.match_uri("db://t?limit=5&offset=10"), Ok(vars(&[("limit", "5"), ("offset", "10")])));
    assert_eq!(t.match_uri("db://t?offset=10&limit"), Ok(vars(&[("offset", "10"), ("limit", "")])));
    assert_eq!(t.match_uri("db://t"), Ok(vars(&[])));
    assert_eq!(t.match_uri("db://t?page=2"), Ok(None));
    let t = UriTemplate::parse("x://{a,b}{.ext}{#frag}").unwrap();
    assert_eq!(t.match_uri("x://1,2.json#top"), Ok(vars(&[("a", "1"), ("b", "2"), ("ext", "json"), ("frag", "top")])));
    assert_eq!(t.match_uri("x://1,2,3.json#top"), Ok(None), "three values for two variables");
    let t = UriTemplate::parse("x://m{;ab,a}{/p}").unwrap();
    assert_eq!(t.match_uri("x://m;a=1;ab/q"), Ok(vars(&[("a", "1"), ("ab", ""), ("p", "q")])));
}

#[test]
fn values_are_percent_decoded_once() {
    let t = UriTemplate::parse("x://{a}").unwrap();
    assert_eq!(t.match_uri("x://%2541%zz%C3%A9"), Ok(vars(&[("a", "%41%zzé")])));
}

#[test]
fn variables_are_read_without_compiling() {
    assert_eq!(UriTemplate::variables_in("x://{a}/y{?b,c}"), vec!["a", "b", "c"]);
    assert_eq!(
        UriTemplate::variables_in("x://{a}/y{?b,c}"),
        UriTemplate::parse("x://{a}/y{?b,c}").unwrap().variables()
    );
    assert!(UriTemplate::variables_in("x://fixed/path").is_empty());
    assert!(UriTemplate::variables_in("x://{unclosed").is_empty());
}

#[test]
fn ambiguous_templates_resolve_as_documented() {
    // The first expression takes the longest value that lets the rest match.
    let t = UriTemplate::parse("x://{+a}/{+b}").unwrap();
    assert_eq!(t.match_uri("x://p/q/r"), Ok(vars(&[("a", "p/q"), ("b", "r")])));
    let t = UriTemplate::parse("x://{a}{b}").unwrap();
    assert_eq!(t.match_uri("x://pqr"), Ok(vars(&[("a", "pq"), ("b", "r")])));
    // An optional query expression is left out when the rest matches without it.
    let t = UriTemplate::parse("x://p{?q}{+rest}").unwrap();
    assert_eq!(t.match_uri("x://p?q=1"), Ok(vars(&[("rest", "?q=1")])));
}

#[test]
fn tricky_cases_agree_with_the_backtracking_reference() {
    let cases = [
        ("x://{;a,ab}{+x}", "x://;ab=1"), // the longer name first: `ab` = "", x = "1"
        ("x://{;ab,a}{+x}", "x://;ab=1"),
        ("x://{?q}{+x}", "x://?q=1"),
        ("x://{a,b}{+x}", "x://1,2,3"),
        ("x://{.a,b}{/c,d}", "x://.1.2/3/4"),
        ("{+a}{#b}{&c}", "1#2&c=3#4"),
        // Values are whole characters: `é` is two bytes, never split between values.
        ("{+a}{b}", "=é"),
        ("{a}{b}", "ü€"),
    ];
    for (source, uri) in cases {
        let t = UriTemplate::parse(source).unwrap();
        assert_eq!(t.match_unbounded(uri), reference::match_uri(&t.parts, uri), "{source} ← {uri}");
    }
    let t = UriTemplate::parse("x://{;a,ab}{+x}").unwrap();
    assert_eq!(t.match_uri("x://;ab=1"), Ok(vars(&[("ab", ""), ("x", "1")])));
    let t = UriTemplate::parse("{+a}{b}").unwrap();
    assert_eq!(t.match_uri("=é"), Ok(vars(&[("a", "="), ("b", "é")])));
}

#[test]
fn refuses_uris_over_the_limit() {
    let t = UriTemplate::parse("x://{+a}").unwrap();
    let longest = format!("x://{}", "a".repeat(MAX_URI_BYTES - 4));
    assert!(matches!(t.match_uri(&longest), Ok(Some(_))));
    let over = format!("{longest}a");
    assert_eq!(t.match_uri(&over), Err(UriTooLong { len: MAX_URI_BYTES + 1 }));
    assert_eq!(check_length(&over), Err(UriTooLong { len: MAX_URI_BYTES + 1 }));
    assert!(t.match_unbounded(&over).is_some(), "the unbounded matcher takes it");
}

#[test]
fn pathological_uris_are_answered() {
    // Seconds to hours for the old backtracking matcher; now one linear pass each.
    let t = UriTemplate::parse("x://{+a}/{+b}/{+c}/end").unwrap();
    let uri = format!("x://{}", "a/".repeat(MAX_URI_BYTES / 2 - 2));
    assert_eq!(t.match_uri(&uri), Ok(None));
    let uri = format!("x://{}end", "a/".repeat(MAX_URI_BYTES / 2 - 4));
    assert!(matches!(t.match_uri(&uri), Ok(Some(found)) if found[2].1 == "a"));
}

#[test]
fn rejects_malformed_templates() {
    assert_eq!(UriTemplate::parse("x://{a").unwrap_err(), "unclosed `{`");
    assert!(UriTemplate::parse("x://{}").is_err());
    assert!(UriTemplate::parse("x://{=a}").unwrap_err().contains("reserved"));
    assert!(UriTemplate::parse("x://{a b}").is_err());
    assert!(UriTemplate::parse("x://a}").is_err());
}

// ---- property tests ----

const OPERATORS: [Operator; 8] = [
    Operator::Simple,
    Operator::Reserved,
    Operator::Fragment,
    Operator::Label,
    Operator::Path,
    Operator::Parameter,
    Operator::Query,
    Operator::Continuation,
];

fn operator_char(operator: Operator) -> &'static str {
    match operator {
        Operator::Simple => "",
        Operator::Reserved => "+",
        Operator::Fragment => "#",
        Operator::Label => ".",
        Operator::Path => "/",
        Operator::Parameter => ";",
        Operator::Query => "?",
        Operator::Continuation => "&",
    }
}

/// RFC 6570 §3.2.1: unreserved characters stay, reserved ones too where
/// the operator allows them, everything else is percent-encoded.
fn encode(value: &str, allow_reserved: bool) -> String {
    let mut out = String::new();
    for c in value.chars() {
        let keep =
            c.is_ascii_alphanumeric() || "-._~".contains(c) || (allow_reserved && ":/?#[]@!$&'()*+,;=".contains(c));
        if keep {
            out.push(c);
        } else {
            let mut buf = [0; 4];
            for byte in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    out
}

/// RFC 6570 expansion (level 3, Appendix A) of one expression.
fn expand_expression(operator: Operator, values: &[(String, String)]) -> String {
    let (first, separator, named, if_empty, reserved) = match operator {
        Operator::Simple => ("", ",", false, "", false),
        Operator::Reserved => ("", ",", false, "", true),
        Operator::Fragment => ("#", ",", false, "", true),
        Operator::Label => (".", ".", false, "", false),
        Operator::Path => ("/", "/", false, "", false),
        Operator::Parameter => (";", ";", true, "", false),
        Operator::Query => ("?", "&", true, "=", false),
        Operator::Continuation => ("&", "&", true, "=", false),
    };
    let items: Vec<String> = values
        .iter()
        .map(|(name, value)| match (named, value.is_empty()) {
            (true, true) => format!("{name}{if_empty}"),
            (true, false) => format!("{name}={}", encode(value, reserved)),
            (false, _) => encode(value, reserved),
        })
        .collect();
    if items.is_empty() { String::new() } else { format!("{first}{}", items.join(separator)) }
}

/// A template piece: a literal, or an expression with its variables and values.
#[derive(Debug, Clone)]
enum Piece {
    Literal(String),
    Expression(Operator, Vec<(String, String)>),
}

fn source_of(pieces: &[Piece]) -> String {
    pieces
        .iter()
        .map(|piece| match piece {
            Piece::Literal(text) => text.clone(),
            Piece::Expression(operator, values) => {
                let names: Vec<&str> = values.iter().map(|(name, _)| name.as_str()).collect();
                format!("{{{}{}}}", operator_char(*operator), names.join(","))
            }
        })
        .collect()
}

fn expansion_of(pieces: &[Piece]) -> String {
    pieces
        .iter()
        .map(|piece| match piece {
            Piece::Literal(text) => text.clone(),
            Piece::Expression(operator, values) => expand_expression(*operator, values),
        })
        .collect()
}

/// An expression whose values cannot be confused with its neighbours:
/// non-empty values of characters that are unreserved (but `.`) or always
/// percent-encoded, and several variables only where the operator reads
/// them back.
fn clear_expression() -> impl Strategy<Value = (Operator, Vec<String>)> {
    (proptest::sample::select(OPERATORS.to_vec()), 1usize..=3).prop_flat_map(|(operator, count)| {
        let count = if matches!(operator, Operator::Label | Operator::Path) { 1 } else { count };
        (Just(operator), proptest::collection::vec("[A-Za-z0-9_~é -]{1,6}", count))
    })
}

/// Templates where every expression but the last is followed by a literal
/// starting with a character no value contains: unambiguous.
fn clear_template() -> impl Strategy<Value = Vec<Piece>> {
    (
        "[a-z]{0,3}(://)?",
        proptest::collection::vec((clear_expression(), "[/!:@][a-z/]{0,3}"), 1..=4),
        proptest::bool::ANY,
    )
        .prop_map(|(head, expressions, trailing)| {
            let mut pieces = vec![Piece::Literal(head)];
            let count = expressions.len();
            let mut next_name = 0;
            for (idx, ((operator, values), separator)) in expressions.into_iter().enumerate() {
                let values = values
                    .into_iter()
                    .map(|value| {
                        next_name += 1;
                        (format!("v{next_name}"), value)
                    })
                    .collect();
                pieces.push(Piece::Expression(operator, values));
                if idx + 1 < count || trailing {
                    pieces.push(Piece::Literal(separator));
                }
            }
            pieces
        })
}

/// Any template: adjacent expressions, shared names, values with separators.
fn any_template() -> impl Strategy<Value = Vec<Piece>> {
    let expression = (
        proptest::sample::select(OPERATORS.to_vec()),
        proptest::collection::vec(
            (proptest::sample::select(vec!["a", "b", "ab"]), "[ab/.,;=&?#%2é]{0,4}")
                .prop_map(|(name, value)| (name.to_owned(), value)),
            1..=3,
        ),
    )
        .prop_map(|(operator, values)| Piece::Expression(operator, values));
    let literal = "[ab/.,;=&?#%:]{1,3}".prop_map(Piece::Literal);
    proptest::collection::vec(prop_oneof![literal, expression], 0..=4)
        .prop_filter("at most three expressions keep the reference matcher fast", |pieces| {
            pieces.iter().filter(|piece| matches!(piece, Piece::Expression(..))).count() <= 3
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn expansions_match_back_to_their_values(pieces in clear_template()) {
        let template = UriTemplate::parse(&source_of(&pieces)).unwrap();
        let uri = expansion_of(&pieces);
        let expected: Vec<(String, String)> = pieces
            .iter()
            .flat_map(|piece| match piece {
                Piece::Expression(_, values) => values.clone(),
                Piece::Literal(_) => Vec::new(),
            })
            .collect();
        prop_assert_eq!(template.match_unbounded(&uri), Some(expected), "{} ← {}", template.as_str(), uri);
    }
}

proptest! {
    // Cheap cases, and disagreements hide in rare shapes: more of them.
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn matching_agrees_with_the_backtracking_reference(
        pieces in any_template(),
        random in "[ab/.,;=&?#%2é]{0,12}",
        use_expansion in proptest::bool::ANY,
    ) {
        let template = UriTemplate::parse(&source_of(&pieces)).unwrap();
        let uri = if use_expansion { expansion_of(&pieces) } else { random };
        let reference = reference::match_uri(&template.parts, &uri);
        prop_assert_eq!(template.match_unbounded(&uri), reference, "{} ← {}", template.as_str(), uri);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn anything_parses_or_not_and_matches_or_not_without_panicking(
        source in "[a-z{}+#./;?&=,:*%|!@ -]{0,16}",
        uri in "\\PC{0,24}",
    ) {
        if let Ok(template) = UriTemplate::parse(&source) {
            let _ = template.match_uri(&uri);
            let _ = template.variables();
        }
    }
}

/// The matcher this module had before it compiled templates: backtracking,
/// exponential on some inputs, but the definition of the semantics kept.
mod reference {
    use super::super::{Operator, Part, percent_decode};

    fn operator_char(operator: Operator) -> Option<char> {
        super::operator_char(operator).chars().next()
    }

    pub fn match_uri(parts: &[Part], uri: &str) -> Option<Vec<(String, String)>> {
        let mut found = Vec::new();
        if match_parts(parts, uri, &mut found) { Some(found) } else { None }
    }

    fn match_parts(parts: &[Part], uri: &str, found: &mut Vec<(String, String)>) -> bool {
        let Some((first, rest)) = parts.split_first() else {
            return uri.is_empty();
        };
        match first {
            Part::Literal(text) => uri.strip_prefix(text.as_str()).is_some_and(|tail| match_parts(rest, tail, found)),
            Part::Expression { operator, variables } => {
                let operator = operator_char(*operator);
                let (prefix, stop): (&str, &[char]) = match operator {
                    None => ("", &['/', '?', '#', '&']),
                    Some('+') => ("", &[]),
                    Some('#') => ("#", &[]),
                    Some('.') => (".", &['/', '?', '#', '.']),
                    Some('/') => ("/", &['/', '?', '#']),
                    Some(';') => (";", &['/', '?', '#']),
                    Some('?') => ("?", &['#']),
                    Some('&') => ("&", &['#']),
                    Some(_) => return false,
                };
                if matches!(operator, Some('?' | '&')) && match_parts(rest, uri, found) {
                    return true;
                }
                let Some(body) = uri.strip_prefix(prefix) else {
                    return false;
                };
                let limit = body.find(stop).unwrap_or(body.len());
                for end in (1..=limit).rev() {
                    if !body.is_char_boundary(end) {
                        continue;
                    }
                    let mark = found.len();
                    if bind(operator, variables, &body[..end], found) && match_parts(rest, &body[end..], found) {
                        return true;
                    }
                    found.truncate(mark);
                }
                false
            }
        }
    }

    fn bind(operator: Option<char>, variables: &[String], text: &str, found: &mut Vec<(String, String)>) -> bool {
        match operator {
            Some('?' | '&' | ';') => {
                let separator = if operator == Some(';') { ';' } else { '&' };
                for pair in text.split(separator) {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if !variables.iter().any(|v| v == key) {
                        return false;
                    }
                    found.push((key.to_owned(), percent_decode(value)));
                }
                true
            }
            _ => {
                let separator = match operator {
                    Some('.') => '.',
                    Some('/') => '/',
                    _ => ',',
                };
                let values: Vec<&str> = if variables.len() == 1 { vec![text] } else { text.split(separator).collect() };
                if values.len() > variables.len() {
                    return false;
                }
                for (name, value) in variables.iter().zip(values) {
                    found.push((name.clone(), percent_decode(value)));
                }
                true
            }
        }
    }
}
