//! The catalog reference as Markdown (`carte schema --markdown`, the
//! book's "Every key" page), written from the catalog's JSON Schema — so
//! from the doc comments of [`model`](crate::catalog::model)'s types, the
//! one source of truth editors, `check` and the book share.
//!
//! One section per kind of block (a schema `$defs` entry), in the order a
//! reader meets them from the top of a file: its description, then a table
//! of its keys (type, whether required, what it does) or the forms it takes.
//! A key whose value is another block links to that block's section.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// The reference of `schema` (as [`catalog_schema`](super::schema::catalog_schema) makes it).
pub fn catalog_reference(schema: &Value) -> String {
    let empty = Map::new();
    let definitions = schema.get("$defs").and_then(Value::as_object).unwrap_or(&empty);
    let mut out = String::from(
        "# Every key\n\n\
         <!-- Written by `carte schema --markdown` from the doc comments of the catalog's types; \
         do not edit (a test compares it; `CARTE_BLESS=1 cargo test` rewrites it). -->\n\n\
         Every key a catalog file may hold, block by block, from the top of a file down. \
         The same text is what editors show on hover (`carte schema`).\n",
    );
    // The blocks in the order the sections first link to them.
    let order: RefCell<Vec<String>> = RefCell::default();
    let mut refer = |name: &str| -> String {
        let mut order = order.borrow_mut();
        if !order.iter().any(|known| known == name) {
            order.push(name.to_owned());
        }
        title(definitions, name).to_owned()
    };
    section(&mut out, "the-catalog-file", "The catalog file", schema, &mut refer);
    for next in 0.. {
        let name = order.borrow().get(next).cloned();
        let Some(name) = name else { break };
        if let Some(definition) = definitions.get(&name) {
            section(&mut out, &anchor(&name), title(definitions, &name), definition, &mut refer);
        }
    }
    out
}

/// One block's section; `refer` is told of every block it links to, and names it.
fn section(out: &mut String, id: &str, heading: &str, node: &Value, refer: &mut dyn FnMut(&str) -> String) {
    let _ = write!(out, "\n<a id=\"{id}\"></a>\n\n## {heading}\n\n");
    if let Some(text) = describe(node) {
        let _ = write!(out, "{text}\n\n");
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        let required: BTreeSet<&str> =
            node.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        out.push_str("| key | value | required | what it is |\n|---|---|---|---|\n");
        for (key, property) in properties {
            let needed = if required.contains(key.as_str()) { "yes" } else { "" };
            let what = describe(property).map(|text| cell(&text)).unwrap_or_default();
            let _ = writeln!(out, "| `{key}` | {} | {needed} | {what} |", kind(property, refer));
        }
        if node.get("additionalProperties").is_some_and(|more| more != &Value::Bool(false)) {
            out.push_str("\nOther keys are allowed.\n");
        }
    } else if let Some(forms) = alternatives(node) {
        out.push_str("One of:\n\n");
        for form in forms {
            let what = describe(form).map(|text| format!(": {}", text.replace('\n', " "))).unwrap_or_default();
            let _ = writeln!(out, "- {}{what}", kind(form, refer));
        }
    } else {
        let _ = writeln!(out, "Value: {}.", kind(node, refer));
    }
}

/// The `oneOf`/`anyOf` forms of a block that is one of several shapes.
fn alternatives(node: &Value) -> Option<&Vec<Value>> {
    node.get("oneOf").or_else(|| node.get("anyOf")).and_then(Value::as_array)
}

/// What a value looks like, in words, with links to the blocks it is made of.
fn kind(node: &Value, refer: &mut dyn FnMut(&str) -> String) -> String {
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        let name = reference.rsplit('/').next().unwrap_or(reference);
        return format!("[{}](#{})", refer(name), anchor(name));
    }
    if let Some(value) = node.get("const") {
        return format!("`{}`", plain(value));
    }
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        return values.iter().map(|value| format!("`{}`", plain(value))).collect::<Vec<_>>().join(", ");
    }
    if let Some(forms) = alternatives(node) {
        let kinds: Vec<String> = forms.iter().filter(|form| !is_null(form)).map(|form| kind(form, refer)).collect();
        return kinds.join(" or ");
    }
    let types: Vec<&str> = match node.get("type") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect(),
        _ => Vec::new(),
    };
    let words: Vec<String> = types
        .iter()
        .map(|name| match *name {
            "string" => "text".to_owned(),
            "integer" => integer(node),
            "number" => "number".to_owned(),
            "boolean" => "`true` or `false`".to_owned(),
            "array" => match node.get("items") {
                Some(items) => format!("list of {}", kind(items, refer)),
                None => "list".to_owned(),
            },
            "object" => match node.get("additionalProperties") {
                Some(more @ Value::Object(_)) => format!("map of names to {}", kind(more, refer)),
                _ => "mapping".to_owned(),
            },
            other => other.to_owned(),
        })
        .collect();
    if words.is_empty() { "any value".to_owned() } else { words.join(" or ") }
}

/// "integer", with its range when the schema bounds it.
fn integer(node: &Value) -> String {
    match (node.get("minimum").and_then(Value::as_i64), node.get("maximum").and_then(Value::as_i64)) {
        (Some(0), None) => "integer ≥ 0".to_owned(),
        (Some(low), Some(high)) => format!("integer {low}–{high}"),
        (Some(low), None) => format!("integer ≥ {low}"),
        _ => "integer".to_owned(),
    }
}

fn is_null(node: &Value) -> bool {
    node.get("type").and_then(Value::as_str) == Some("null")
}

/// Block `name`'s title, else its schema name.
fn title<'a>(definitions: &'a Map<String, Value>, name: &'a str) -> &'a str {
    definitions.get(name).and_then(|definition| definition.get("title")).and_then(Value::as_str).unwrap_or(name)
}

/// The page's anchor of block `name`.
fn anchor(name: &str) -> String {
    format!("def-{}", name.to_lowercase())
}

/// A JSON value as it is written in YAML.
fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A node's Markdown description.
fn describe(node: &Value) -> Option<String> {
    node.get("markdownDescription").or_else(|| node.get("description")).and_then(Value::as_str).map(str::to_owned)
}

/// Text fit for one table cell: no line break, no bare `|`.
fn cell(text: &str) -> String {
    text.replace("\n\n", "<br><br>").replace('\n', " ").replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn blocks_link_to_the_blocks_they_hold_and_each_has_one_section() {
        let schema = json!({
            "description": "A file.",
            "type": "object",
            "required": ["tools"],
            "properties": {
                "tools": { "description": "The tools.", "type": "array", "items": { "$ref": "#/$defs/Tool" } },
                "timeout": { "anyOf": [{ "$ref": "#/$defs/Duration" }, { "type": "null" }] }
            },
            "$defs": {
                "Tool": {
                    "title": "tool",
                    "description": "A tool | with a bar.",
                    "type": "object",
                    "properties": {
                        "mode": { "oneOf": [{ "const": "a" }, { "const": "b" }] },
                        "wait": { "$ref": "#/$defs/Duration" },
                        "n": { "type": ["integer", "null"], "minimum": 0 }
                    },
                    "additionalProperties": false
                },
                "Duration": {
                    "title": "duration",
                    "anyOf": [{ "type": "integer", "description": "ms." }, { "type": "string", "description": "`5s`." }]
                }
            }
        });
        let page = catalog_reference(&schema);
        assert!(page.contains("| `tools` | list of [tool](#def-tool) | yes | The tools. |"), "{page}");
        assert!(page.contains("| `timeout` | [duration](#def-duration) |  |  |"), "{page}");
        assert!(page.contains("| `mode` | `a` or `b` |"), "{page}");
        assert!(page.contains("| `n` | integer ≥ 0 |"), "{page}");
        assert!(page.contains("A tool | with a bar."), "a description outside a table stays as written");
        assert!(page.contains("- integer: ms.\n- text: `5s`."), "{page}");
        assert_eq!(page.matches("## duration").count(), 1, "one section however often it is used");
        let (tool, duration) = (page.find("## tool").unwrap(), page.find("## duration").unwrap());
        assert!(tool < duration, "in the order a reader meets them");
    }
}
