//! RFC 6570 URI templates, as resource templates use them: parsing (with a
//! reason when the template is malformed), the variable names, and matching a
//! concrete URI back to its variables for `resources/read`.
//!
//! Matching supports the operators a resource URI needs: `{var}` (one path
//! segment), `{+var}` and `{#var}` (anything), `{/var}`, `{.var}`, and the
//! query forms `{?a,b}` / `{&a,b}`. Values are percent-decoded.

/// A parsed URI template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    source: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Expression { operator: Option<char>, variables: Vec<String> },
}

impl UriTemplate {
    /// Parses `source`, or says what is wrong with it.
    pub fn parse(source: &str) -> Result<UriTemplate, String> {
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
        Ok(UriTemplate { source: source.to_owned(), parts })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The variable names, in order of appearance.
    pub fn variables(&self) -> Vec<&str> {
        self.parts
            .iter()
            .flat_map(|part| match part {
                Part::Expression { variables, .. } => variables.iter().map(String::as_str).collect(),
                Part::Literal(_) => Vec::new(),
            })
            .collect()
    }

    /// If `uri` is an expansion of this template, its variables and values.
    pub fn match_uri(&self, uri: &str) -> Option<Vec<(String, String)>> {
        let mut found = Vec::new();
        if match_parts(&self.parts, uri, &mut found) { Some(found) } else { None }
    }
}

fn parse_expression(body: &str) -> Result<Part, String> {
    let mut chars = body.chars();
    let operator = match chars.clone().next() {
        Some(c @ ('+' | '#' | '.' | '/' | ';' | '?' | '&')) => {
            chars.next();
            Some(c)
        }
        Some(c @ ('=' | ',' | '!' | '@' | '|')) => {
            return Err(format!("operator `{c}` is reserved by RFC 6570 and cannot be used"));
        }
        Some(_) => None,
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

fn match_parts(parts: &[Part], uri: &str, found: &mut Vec<(String, String)>) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return uri.is_empty();
    };
    match first {
        Part::Literal(text) => uri.strip_prefix(text.as_str()).is_some_and(|tail| match_parts(rest, tail, found)),
        Part::Expression { operator, variables } => {
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
            // Query expressions may be absent; path variables must have a value.
            if matches!(operator, Some('?' | '&')) && match_parts(rest, uri, found) {
                return true;
            }
            let Some(body) = uri.strip_prefix(prefix) else {
                return false;
            };
            // Try the longest value first, then shorter ones.
            let limit = body.find(stop).unwrap_or(body.len());
            for end in (1..=limit).rev() {
                if !body.is_char_boundary(end) {
                    continue;
                }
                let mark = found.len();
                if bind(*operator, variables, &body[..end], found) && match_parts(rest, &body[end..], found) {
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
mod tests {
    use super::*;

    #[test]
    fn matches_simple_templates() {
        let t = UriTemplate::parse("reservo://rooms/{room}").unwrap();
        assert_eq!(t.variables(), vec!["room"]);
        assert_eq!(t.match_uri("reservo://rooms/Focus"), Some(vec![("room".into(), "Focus".into())]));
        assert_eq!(t.match_uri("reservo://rooms/Big%20Hall"), Some(vec![("room".into(), "Big Hall".into())]));
        assert_eq!(t.match_uri("reservo://rooms/a/b"), None);
        assert_eq!(t.match_uri("reservo://rooms/"), None);
        let t = UriTemplate::parse("test://template/{id}/data").unwrap();
        assert_eq!(t.match_uri("test://template/42/data"), Some(vec![("id".into(), "42".into())]));
    }

    #[test]
    fn matches_operators() {
        let t = UriTemplate::parse("file:///{+path}").unwrap();
        assert_eq!(t.match_uri("file:///a/b/c.txt"), Some(vec![("path".into(), "a/b/c.txt".into())]));
        let t = UriTemplate::parse("db://t{?limit,offset}").unwrap();
        assert_eq!(
            t.match_uri("db://t?limit=5&offset=10"),
            Some(vec![("limit".into(), "5".into()), ("offset".into(), "10".into())])
        );
        assert_eq!(t.match_uri("db://t"), Some(vec![]));
    }

    #[test]
    fn rejects_malformed_templates() {
        assert_eq!(UriTemplate::parse("x://{a").unwrap_err(), "unclosed `{`");
        assert!(UriTemplate::parse("x://{}").is_err());
        assert!(UriTemplate::parse("x://{=a}").unwrap_err().contains("reserved"));
        assert!(UriTemplate::parse("x://{a b}").is_err());
        assert!(UriTemplate::parse("x://a}").is_err());
    }
}
