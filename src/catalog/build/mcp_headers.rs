//! SEP-2243 `x-mcp-header`: a tool's `inputSchema` property marked
//! `x-mcp-header: Name` is also sent by 2026-07-28 clients as the HTTP header
//! `Mcp-Param-Name`, so proxies can route on it without reading the body (the
//! server then checks header and body agree; rmcp does that per request).
//! This module checks the marks at load time, where a slip would otherwise
//! make clients drop the tool or send headers nobody checks: the mark sits
//! on a property reached through `properties` from the top of the schema,
//! names a valid HTTP header (an RFC 9110 token), is unique within the tool
//! ignoring case, and marks a primitive (string, number, integer, boolean).

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::catalog::assemble::Origin;
use crate::diag::escape_pointer;
use crate::diag::{Location, readable_path};

use super::{Builder, NoteMut};

/// The key SEP-2243 reads.
const MARK: &str = "x-mcp-header";

/// Keywords whose values are instance data or names, never schemas.
const NOT_SCHEMAS: &[&str] = &["default", "const", "enum", "examples", "dependentRequired", "required"];

/// An `x-mcp-header` found in a schema.
struct Mark<'a> {
    /// JSON pointer of the schema holding it, below the tool.
    pointer: String,
    /// The same place as path segments (for messages).
    segments: Vec<String>,
    /// Property names from the top when the place is a property reached
    /// through `properties` alone; `None` elsewhere (the root included).
    property: Option<Vec<String>>,
    header: &'a Value,
    schema: &'a Map<String, Value>,
}

impl Builder<'_> {
    /// Reports every misplaced or malformed `x-mcp-header` in the tool
    /// input schema `schema` (declared at `origin`).
    pub(super) fn check_mcp_headers(&mut self, schema: &Map<String, Value>, origin: &Origin) {
        let mut marks = Vec::new();
        collect(schema, "/inputSchema".to_owned(), vec!["inputSchema".to_owned()], Some(Vec::new()), &mut marks);
        // Header name (lowercase) → the property that took it first, and where.
        let mut taken: HashMap<String, (String, Location)> = HashMap::new();
        for mark in marks {
            let key_location = self.assembled.locate_key(origin, &format!("{}/{MARK}", mark.pointer));
            let value_location = self.assembled.locate(origin, &format!("{}/{MARK}", mark.pointer));
            let property = match &mark.property {
                Some(path) if !path.is_empty() => path.join("."),
                Some(_) => {
                    self.error(
                        "mcp-header",
                        key_location,
                        format!("`{MARK}` must mark a property, not the whole `inputSchema`"),
                    )
                    .hint = Some(format!(
                        "put it on the property whose value the header carries, e.g. \
                         `properties: {{ region: {{ type: string, {MARK}: Region }} }}`"
                    ));
                    continue;
                }
                None => {
                    self.error(
                        "mcp-header",
                        key_location,
                        format!(
                            "`{MARK}` in {} is not on a property of the arguments: clients send `Mcp-Param-*` headers \
                             only for properties reached through `properties` from the top of `inputSchema`",
                            readable_path(&mark.segments)
                        ),
                    )
                    .hint = Some(
                        "move it to such a property (e.g. `inputSchema.properties.region`), or remove it".to_owned(),
                    );
                    continue;
                }
            };
            let example = token_like(&property).unwrap_or_else(|| "Region".to_owned());
            let Some(header) = mark.header.as_str() else {
                self.error(
                    "mcp-header",
                    value_location,
                    format!("`{MARK}` of property `{property}` must be a string: the header name after `Mcp-Param-`"),
                )
                .hint = Some(format!("write e.g. `{MARK}: {example}` (clients then send `Mcp-Param-{example}`)"));
                continue;
            };
            if header.is_empty() {
                self.error("mcp-header", value_location, format!("`{MARK}` of property `{property}` is empty")).hint =
                    Some(format!("write the header name after `Mcp-Param-`, e.g. `{MARK}: {example}`"));
                continue;
            }
            if let Some(bad) = header.chars().find(|&c| !is_tchar(c)) {
                let hint = match token_like(header) {
                    Some(fixed) => {
                        format!("use letters, digits and `-` (also allowed: {TCHAR_SYMBOLS}), e.g. `{MARK}: {fixed}`")
                    }
                    None => format!("use letters, digits and `-` (also allowed: {TCHAR_SYMBOLS})"),
                };
                self.error(
                    "mcp-header",
                    value_location,
                    format!(
                        "`{MARK}` of property `{property}` is `{header}`, which cannot be part of an HTTP header name: \
                         it holds {}",
                        describe_char(bad)
                    ),
                )
                .hint = Some(hint);
                continue;
            }
            match mark.schema.get("type") {
                Some(Value::String(kind)) if matches!(kind.as_str(), "string" | "number" | "integer" | "boolean") => {}
                found => {
                    let type_location = self.assembled.locate(origin, &format!("{}/type", mark.pointer));
                    let (location, what, hint) = match found {
                        Some(Value::String(kind)) => (
                            type_location,
                            format!("whose type is `{kind}`"),
                            format!(
                                "a header carries one plain value: mark a string, number, integer or boolean \
                                 property instead, or remove `{MARK}`"
                            ),
                        ),
                        Some(_) => (
                            type_location,
                            "whose `type` is not a single type".to_owned(),
                            "name one type, e.g. `type: string`; a client sends no header when the value is \
                             absent or null"
                                .to_owned(),
                        ),
                        None => (
                            key_location,
                            "which has no `type`".to_owned(),
                            "give it one, e.g. `type: string`: a client writes a header only for a value of a known primitive type"
                                .to_owned(),
                        ),
                    };
                    self.error(
                        "mcp-header",
                        location,
                        format!(
                            "`{MARK}` marks property `{property}`, {what}: only a string, number, integer or \
                             boolean value can travel in a header"
                        ),
                    )
                    .hint = Some(hint);
                    continue;
                }
            }
            let lower = header.to_ascii_lowercase();
            if let Some((first, first_location)) = taken.get(&lower) {
                let first_location = first_location.clone();
                let message = format!(
                    "`{MARK}: {header}` of property `{property}` names the header of property `{first}` again \
                     (header names ignore case)"
                );
                self.error("mcp-header", value_location, message)
                    .with_note_mut("first used here", first_location)
                    .hint = Some(format!(
                    "give each property its own header name, e.g. `{MARK}: {}`",
                    token_like(&property).unwrap_or_else(|| format!("{header}-2"))
                ));
                continue;
            }
            taken.insert(lower, (property, value_location));
        }
    }
}

/// Finds every `x-mcp-header` in `schema` (at `pointer`), in document order.
fn collect<'a>(
    schema: &'a Map<String, Value>,
    pointer: String,
    segments: Vec<String>,
    property: Option<Vec<String>>,
    out: &mut Vec<Mark<'a>>,
) {
    if let Some(header) = schema.get(MARK) {
        out.push(Mark {
            pointer: pointer.clone(),
            segments: segments.clone(),
            property: property.clone(),
            header,
            schema,
        });
    }
    for (key, value) in schema {
        if key == MARK || NOT_SCHEMAS.contains(&key.as_str()) {
            continue;
        }
        let below = format!("{pointer}/{}", escape_pointer(key));
        let mut below_segments = segments.clone();
        below_segments.push(key.clone());
        match value {
            // A name → schema map: `properties` keeps the chain of properties going.
            Value::Object(map)
                if matches!(
                    key.as_str(),
                    "properties" | "$defs" | "definitions" | "patternProperties" | "dependentSchemas" | "dependencies"
                ) =>
            {
                for (name, sub) in map {
                    let Value::Object(sub) = sub else { continue };
                    let chain = if key == "properties" {
                        property.clone().map(|mut path| {
                            path.push(name.clone());
                            path
                        })
                    } else {
                        None
                    };
                    let mut sub_segments = below_segments.clone();
                    sub_segments.push(name.clone());
                    collect(sub, format!("{below}/{}", escape_pointer(name)), sub_segments, chain, out);
                }
            }
            Value::Object(sub) => collect(sub, below, below_segments, None, out),
            Value::Array(items) => {
                for (idx, item) in items.iter().enumerate() {
                    if let Value::Object(sub) = item {
                        let mut item_segments = below_segments.clone();
                        item_segments.push(idx.to_string());
                        collect(sub, format!("{below}/{idx}"), item_segments, None, out);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The symbols an RFC 9110 token may hold besides letters and digits.
const TCHAR_SYMBOLS: &str = "!#$%&'*+.^_`|~";

/// RFC 9110 §5.6.2 `tchar`: what an HTTP header name is made of.
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || TCHAR_SYMBOLS.contains(c)
}

/// `text` with every run of characters a header name cannot hold turned
/// into one `-`, if anything is left.
fn token_like(text: &str) -> Option<String> {
    let mut out = String::new();
    for c in text.chars() {
        if is_tchar(c) {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-').to_owned();
    (!out.is_empty()).then_some(out)
}

/// A character a header name cannot hold, as a person reads it.
fn describe_char(c: char) -> String {
    match c {
        ' ' => "a space".to_owned(),
        ':' => "`:`, which ends a header's name".to_owned(),
        c if c.is_control() => format!("a control character (U+{:04X})", c as u32),
        c if !c.is_ascii() => format!("`{c}`, which is not ASCII"),
        c => format!("`{c}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_what_http_header_names_allow() {
        assert!("Region".chars().all(is_tchar));
        assert!("X_Tenant-Id.v2".chars().all(is_tchar));
        for bad in [' ', ':', '/', '"', '(', '\t', 'é', '\u{7f}'] {
            assert!(!is_tchar(bad), "{bad:?}");
        }
    }

    #[test]
    fn token_like_repairs_a_name_when_it_can() {
        assert_eq!(token_like("My Region").as_deref(), Some("My-Region"));
        assert_eq!(token_like("tenant: id").as_deref(), Some("tenant-id"));
        assert_eq!(token_like("a.b").as_deref(), Some("a.b"));
        assert_eq!(token_like("::"), None);
    }

    #[test]
    fn marks_on_the_properties_chain_are_properties_and_others_are_not() {
        let schema = serde_json::json!({
            "type": "object",
            "x-mcp-header": "Root",
            "properties": {
                "region": { "type": "string", "x-mcp-header": "Region" },
                "box": { "type": "object", "properties": { "id": { "type": "integer", "x-mcp-header": "Id" } } },
                "tags": { "type": "array", "items": { "type": "string", "x-mcp-header": "Tag" } },
                "note": { "type": "string", "default": { "x-mcp-header": "NotASchema" } }
            },
            "$defs": { "d": { "type": "string", "x-mcp-header": "Def" } }
        });
        let Value::Object(schema) = schema else { unreachable!() };
        let mut marks = Vec::new();
        collect(&schema, "/inputSchema".to_owned(), vec!["inputSchema".to_owned()], Some(Vec::new()), &mut marks);
        let found: Vec<(&str, Option<String>)> = marks
            .iter()
            .map(|m| (m.header.as_str().unwrap_or_default(), m.property.as_ref().map(|p| p.join("."))))
            .collect();
        assert_eq!(
            found,
            vec![
                ("Root", Some(String::new())),
                ("Region", Some("region".to_owned())),
                ("Id", Some("box.id".to_owned())),
                ("Tag", None),
                ("Def", None),
            ]
        );
        assert_eq!(marks[3].pointer, "/inputSchema/properties/tags/items");
    }
}
