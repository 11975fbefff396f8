//! Turning one `jsonschema` violation into the diagnostic a person acts on:
//! where it is, what was expected in words (`a list of strings`), and the
//! likely slip (a misspelt key, snake_case for camelCase, `yes` for `true`,
//! an effect this version does not provide).

use serde_json::Value;

use super::Findings;
use crate::catalog::source::Positions;
use crate::diag::escape_pointer;
use crate::diag::{Diagnostic, did_you_mean, readable_path};

/// Keys that people often write in snake_case where MCP uses camelCase.
pub(super) const CAMEL_CASE: &[(&str, &str)] = &[
    ("input_schema", "inputSchema"),
    ("output_schema", "outputSchema"),
    ("mime_type", "mimeType"),
    ("uri_template", "uriTemplate"),
    ("resource_templates", "resourceTemplates"),
    ("read_only_hint", "readOnlyHint"),
    ("destructive_hint", "destructiveHint"),
    ("idempotent_hint", "idempotentHint"),
    ("open_world_hint", "openWorldHint"),
    ("website_url", "websiteUrl"),
];

pub(super) fn explain(
    schema: &Value,
    root: &Value,
    positions: &Positions,
    error: &jsonschema::ValidationError<'_>,
    findings: &mut Findings,
) {
    use jsonschema::error::ValidationErrorKind as Kind;
    let pointer = error.instance_path().as_str().to_owned();
    let schema_path = error.schema_path().as_str().to_owned();
    let context = describe(root, &pointer);
    // Whether this mistake leaves out the value at `pointer` (and its entry).
    let mut breaks = true;
    let problems = &mut findings.problems;
    match error.kind() {
        Kind::AdditionalProperties { unexpected } => {
            let allowed = allowed_keys(schema, &schema_path);
            for key in unexpected {
                let key_pointer = format!("{pointer}/{}", escape_pointer(key));
                let mut diagnostic = Diagnostic::error(
                    "unknown-key",
                    positions.locate_key(&key_pointer),
                    format!("unknown key `{key}` in {context}"),
                );
                let camel = CAMEL_CASE
                    .iter()
                    .find(|(snake, camel)| *snake == key.as_str() && allowed.iter().any(|a| a == camel));
                let mut meant = None;
                let hint = if let Some((_, camel)) = camel {
                    meant = Some((*camel).to_owned());
                    format!("MCP spells it `{camel}` (camelCase); carte keeps MCP's names")
                } else if let Some(close) = did_you_mean(key, allowed.iter().map(String::as_str)) {
                    meant = Some(close.to_owned());
                    format!("did you mean `{close}`?")
                } else {
                    format!("allowed keys here: {}", allowed.join(", "))
                };
                diagnostic = diagnostic.with_hint(hint);
                problems.push(diagnostic);
                findings.unknown.push((pointer.clone(), key.clone(), meant));
            }
            breaks = false;
        }
        Kind::Required { property } => {
            let key = property.as_str().unwrap_or_default();
            // `uri_template:` already got "MCP spells it uriTemplate"; saying it is missing too is noise.
            let snake_present =
                CAMEL_CASE.iter().any(|(snake, camel)| *camel == key && error.instance().get(*snake).is_some());
            if snake_present {
                return; // the snake_case key is read as this one
            }
            problems.push(
                Diagnostic::error(
                    "missing-key",
                    positions.locate(&pointer),
                    format!("missing required key `{key}` in {context}"),
                )
                .with_hint(required_hint(key)),
            );
        }
        Kind::Type { .. } => {
            let expected = expected_types(schema, &schema_path);
            let found: &Value = error.instance().as_ref();
            let mut diagnostic = Diagnostic::error(
                "wrong-type",
                positions.locate(&pointer),
                format!("{context} should be {expected}, found {}", describe_value(found)),
            );
            if expected.starts_with("text") && matches!(found, Value::Number(_) | Value::Bool(_)) {
                diagnostic = diagnostic.with_hint(format!("put it in quotes: \"{found}\""));
            } else if let Some(hint) = boolean_hint(&expected, found) {
                diagnostic = diagnostic.with_hint(hint);
            } else if expected.starts_with("a list") && found.is_object() {
                diagnostic = diagnostic.with_hint("write each entry on its own line starting with `- `");
            }
            problems.push(diagnostic);
        }
        Kind::Enum { options } => {
            let options = options
                .as_array()
                .map(|values| values.iter().map(|v| format!("`{}`", v.as_str().unwrap_or("?"))).collect::<Vec<_>>())
                .unwrap_or_default();
            problems.push(Diagnostic::error(
                "invalid-value",
                positions.locate(&pointer),
                format!(
                    "{context} should be one of {}, found {}",
                    options.join(", "),
                    describe_value(error.instance())
                ),
            ));
        }
        Kind::AnyOf { context: branches } | Kind::OneOfNotValid { context: branches } => {
            // Prefer the branch the value got furthest into: its errors say
            // what is wrong inside, not just "none of these matched".
            let depth = pointer.len();
            let deeper = branches.iter().find(|branch| {
                !branch.is_empty()
                    && branch
                        .iter()
                        .all(|e| e.instance_path().as_str().len() > depth || !matches!(e.kind(), Kind::Type { .. }))
            });
            let constants: Vec<String> = branches
                .iter()
                .flatten()
                .filter_map(|e| match e.kind() {
                    Kind::Constant { expected_value } => Some(format!("`{}`", expected_value.as_str().unwrap_or("?"))),
                    _ => None,
                })
                .collect();
            if !constants.is_empty() && constants.len() == branches.iter().flatten().count() {
                problems.push(Diagnostic::error(
                    "invalid-value",
                    positions.locate(&pointer),
                    format!(
                        "{context} should be one of {}, found {}",
                        constants.join(", "),
                        describe_value(error.instance().as_ref())
                    ),
                ));
            } else if let Some(branch) = deeper {
                for inner in branch {
                    explain(schema, root, positions, inner, findings);
                }
                breaks = false;
            } else {
                let mut alternatives: Vec<String> = branches
                    .iter()
                    .flatten()
                    .filter(|e| matches!(e.kind(), Kind::Type { .. }))
                    .map(|e| expected_types(schema, e.schema_path().as_str()))
                    .filter(|t| !t.is_empty())
                    .collect();
                alternatives.dedup();
                problems.push(Diagnostic::error(
                    "wrong-type",
                    positions.locate(&pointer),
                    format!(
                        "{context} should be {}, found {}",
                        alternatives.join(" or "),
                        describe_value(error.instance())
                    ),
                ));
            }
        }
        _ => {
            problems.push(Diagnostic::error("invalid-value", positions.locate(&pointer), format!("{context}: {error}")))
        }
    }
    if breaks {
        findings.broken.push(pointer);
    }
}

/// For text where true or false belongs: `yes` (YAML 1.1's true is text
/// in YAML 1.2, which carte reads) or a quoted `"true"`.
fn boolean_hint(expected: &str, found: &Value) -> Option<String> {
    let text = found.as_str().filter(|_| expected == "true or false")?;
    let meant = match text.to_ascii_lowercase().as_str() {
        "yes" | "y" | "on" | "true" => "true",
        "no" | "n" | "off" | "false" => "false",
        _ => return None,
    };
    Some(if text == meant {
        format!("write {meant} without quotes: in quotes it is text")
    } else {
        format!("write {meant}: carte reads YAML 1.2, where `{text}` is text, not {meant}")
    })
}

fn required_hint(key: &str) -> String {
    match key {
        "run" => "say what the tool does, e.g. `run: { text: \"…\" }`".to_owned(),
        "messages" => "give the prompt at least one message, e.g. `- { role: user, text: \"…\" }`".to_owned(),
        "name" => "add `name: …`".to_owned(),
        "uri" => "add the resource's URI, e.g. `uri: myapp://thing`".to_owned(),
        _ => format!("add `{key}: …`"),
    }
}

/// Resolves a schema location, following `$ref` into `$defs`.
fn schema_at<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
    let mut node = schema;
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        node = match node {
            Value::Object(map) => map.get(&segment)?,
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
        if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
            node = schema.pointer(reference.trim_start_matches('#'))?;
        }
    }
    Some(node)
}

fn parent_path(path: &str) -> &str {
    path.rfind('/').map_or("", |idx| &path[..idx])
}

fn allowed_keys(schema: &Value, schema_path: &str) -> Vec<String> {
    schema_at(schema, parent_path(schema_path))
        .and_then(|node| node.get("properties"))
        .and_then(Value::as_object)
        .map(|props| props.keys().cloned().collect())
        .unwrap_or_default()
}

fn expected_types(schema: &Value, schema_path: &str) -> String {
    let names: Vec<&str> = match schema_at(schema, schema_path) {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let described: Vec<&str> = names
        .into_iter()
        .filter(|name| *name != "null")
        .map(|name| match name {
            "string" => "text",
            "object" => "a mapping of keys",
            "array" => "a list",
            "integer" => "a whole number",
            "number" => "a number",
            "boolean" => "true or false",
            other => other,
        })
        .collect();
    described.join(" or ")
}

/// Describes a JSON value in a few words, for "found …".
pub fn describe_value(value: &Value) -> String {
    match value {
        Value::Null => "nothing".to_owned(),
        Value::Bool(b) => format!("`{b}`"),
        Value::Number(n) => format!("the number `{n}`"),
        Value::String(s) if s.chars().count() > 40 => "text".to_owned(),
        Value::String(s) => format!("`{s}`"),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "a mapping".to_owned(),
    }
}

/// Names the place a JSON pointer points at, the way a person would:
/// `tool \`get_quote\``, `\`run.sql\` of tool \`book_room\``.
pub fn describe(root: &Value, pointer: &str) -> String {
    let segments: Vec<String> = pointer.split('/').skip(1).map(|s| s.replace("~1", "/").replace("~0", "~")).collect();
    let Some(first) = segments.first() else {
        return "the catalog".to_owned();
    };
    let kind = match first.as_str() {
        "tools" => Some(("tool", "name")),
        "prompts" => Some(("prompt", "name")),
        "resources" => Some(("resource", "uri")),
        "resourceTemplates" => Some(("resource template", "uriTemplate")),
        _ => None,
    };
    let (owner, rest) = match (kind, segments.get(1).and_then(|s| s.parse::<usize>().ok())) {
        (Some((noun, key)), Some(idx)) => {
            let label = root
                .pointer(&format!("/{first}/{idx}/{key}"))
                .and_then(Value::as_str)
                .map(|name| format!("{noun} `{name}`"))
                .unwrap_or_else(|| format!("{noun} #{}", idx + 1));
            (label, &segments[2..])
        }
        (Some(_), None) => return format!("`{first}`"),
        (None, _) => (String::new(), &segments[1..]),
    };
    if owner.is_empty() {
        let mut path = vec![first.clone()];
        path.extend(rest.iter().cloned());
        return readable_path(&path);
    }
    if rest.is_empty() { owner } else { format!("{} of {owner}", readable_path(rest)) }
}
