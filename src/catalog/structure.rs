//! Structural checks: unknown keys, missing keys and wrong types, all of them
//! at once, each pointing at its place in the file.
//!
//! The rules are not written here: they are the JSON Schema derived from
//! [`CatalogFile`] (the same one `carte schema` prints). This module runs it
//! over a parsed file with `jsonschema` and turns each violation into a
//! diagnostic a person can act on (`did you mean description?`).

use std::sync::LazyLock;

use serde_json::Value;

use crate::catalog::model::CatalogFile;
use crate::catalog::source::{ParsedFile, Positions, escape_pointer};
use crate::diag::{Diagnostic, did_you_mean};

/// The catalog format's JSON Schema, as `carte schema` prints it.
pub fn catalog_schema() -> Value {
    crate::catalog::schema::catalog_schema()
}

struct Compiled {
    schema: Value,
    validator: Option<jsonschema::Validator>,
}

static COMPILED: LazyLock<Compiled> = LazyLock::new(|| {
    let schema = catalog_schema();
    let validator = jsonschema::validator_for(&schema).ok();
    Compiled { schema, validator }
});

/// Keys that people often write in snake_case where MCP uses camelCase.
const CAMEL_CASE: &[(&str, &str)] = &[
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

/// Runners that the catalog format names but this version does not provide.
const FUTURE_RUNNERS: &[&str] = &["command", "http"];

/// Checks one parsed file against the catalog schema and, if it passes,
/// reads it into the model. Every violation becomes one diagnostic.
pub fn check_file(parsed: &ParsedFile) -> Result<CatalogFile, Vec<Diagnostic>> {
    // The schema is derived from the model, so a file the model reads is one
    // the schema accepts: the schema (slow to build, at start-up) is only
    // needed to explain a file the model refuses.
    let read = <CatalogFile as serde::Deserialize>::deserialize(&parsed.value);
    if let Ok(file) = read {
        return Ok(file);
    }
    let compiled = &*COMPILED;
    let mut problems = Vec::new();
    if let Some(validator) = compiled.validator.as_ref().filter(|v| !v.is_valid(&parsed.value)) {
        for error in validator.iter_errors(&parsed.value) {
            explain(&compiled.schema, &parsed.value, &parsed.positions, &error, &mut problems);
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    <CatalogFile as serde::Deserialize>::deserialize(&parsed.value)
        .map_err(|err| vec![Diagnostic::error("invalid-catalog", parsed.positions.locate(""), err.to_string())])
}

fn explain(
    schema: &Value,
    root: &Value,
    positions: &Positions,
    error: &jsonschema::ValidationError<'_>,
    problems: &mut Vec<Diagnostic>,
) {
    use jsonschema::error::ValidationErrorKind as Kind;
    let pointer = error.instance_path().as_str().to_owned();
    let schema_path = error.schema_path().as_str().to_owned();
    let context = describe(root, &pointer);
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
                let hint = if let Some((_, camel)) = camel {
                    format!("MCP spells it `{camel}` (camelCase); carte keeps MCP's names")
                } else if FUTURE_RUNNERS.contains(&key.as_str()) && allowed.iter().any(|a| a == "sql") {
                    format!(
                        "the `{key}` runner is not available in this version of carte; use `sql`, `text`, `template` or `content`"
                    )
                } else if let Some(close) = did_you_mean(key, allowed.iter().map(String::as_str)) {
                    format!("did you mean `{close}`?")
                } else {
                    format!("allowed keys here: {}", allowed.join(", "))
                };
                diagnostic = diagnostic.with_hint(hint);
                problems.push(diagnostic);
            }
        }
        Kind::Required { property } => {
            let key = property.as_str().unwrap_or_default();
            // `uri_template:` already got "MCP spells it uriTemplate"; saying it is missing too is noise.
            let snake_present =
                CAMEL_CASE.iter().any(|(snake, camel)| *camel == key && error.instance().get(*snake).is_some());
            if snake_present {
                return;
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
                    explain(schema, root, positions, inner, problems);
                }
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

/// `["messages", "0", "role"]` → "`role` of message #1": list indexes are
/// counted from one and named after their list.
fn readable_path(segments: &[String]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut keys: Vec<&str> = Vec::new();
    for segment in segments {
        match segment.parse::<usize>() {
            Ok(idx) if !keys.is_empty() => {
                let list = keys.pop().unwrap_or_default();
                if !keys.is_empty() {
                    parts.push(format!("`{}`", keys.join(".")));
                    keys.clear();
                }
                parts.push(format!("{} #{}", singular(list), idx + 1));
            }
            _ => keys.push(segment),
        }
    }
    if !keys.is_empty() {
        parts.push(format!("`{}`", keys.join(".")));
    }
    parts.reverse();
    parts.join(" of ")
}

fn singular(list: &str) -> String {
    match list {
        "messages" => "message".to_owned(),
        "arguments" => "argument".to_owned(),
        "content" => "content block".to_owned(),
        "setup" => "setup statement".to_owned(),
        "include" => "include pattern".to_owned(),
        "tools" => "tool".to_owned(),
        "prompts" => "prompt".to_owned(),
        "resources" => "resource".to_owned(),
        "resourceTemplates" => "resource template".to_owned(),
        other => format!("item of `{other}`"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::catalog::source::parse_file;

    fn problems(text: &str) -> Vec<Diagnostic> {
        let parsed = parse_file(Path::new("c.yaml"), text, &|_| None).unwrap();
        check_file(&parsed).err().unwrap_or_default()
    }

    #[test]
    fn unknown_key_with_suggestion() {
        let found = problems("tools:\n  - name: a\n    descripton: x\n    run: { text: hi }\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].message, "unknown key `descripton` in tool `a`");
        assert_eq!(found[0].hint.as_deref(), Some("did you mean `description`?"));
        assert_eq!((found[0].location.line, found[0].location.column), (3, 5));
    }

    #[test]
    fn camel_case_hint() {
        let found = problems("tools:\n  - name: a\n    input_schema: {type: object}\n    run: { text: hi }\n");
        assert_eq!(found[0].hint.as_deref(), Some("MCP spells it `inputSchema` (camelCase); carte keeps MCP's names"));
    }

    #[test]
    fn reports_every_problem() {
        let found = problems(
            "tools:\n  - name: a\n  - name: b\n    run: { text: x, txt: y }\nprompts:\n  - name: 5\n    messages: []\n",
        );
        let messages: Vec<&str> = found.iter().map(|d| d.message.as_str()).collect();
        assert!(messages.contains(&"missing required key `run` in tool `a`"), "{messages:?}");
        assert!(messages.contains(&"unknown key `txt` in `run` of tool `b`"), "{messages:?}");
        assert!(
            messages.iter().any(|m| m.starts_with("`name` of prompt #1 should be text, found the number `5`")),
            "{messages:?}"
        );
    }

    #[test]
    fn wrong_type_inside_option() {
        let found = problems("server: hello\n");
        assert_eq!(found[0].message, "`server` should be a mapping of keys, found `hello`");
        let found = problems("include: 3\n");
        assert!(found[0].message.starts_with("`include` should be text or a list"), "{found:?}");
    }

    #[test]
    fn enum_values_listed() {
        let found = problems("prompts:\n  - name: p\n    messages:\n      - { role: system, text: x }\n");
        assert_eq!(
            found[0].message,
            "`role` of message #1 of prompt `p` should be one of `user`, `assistant`, found `system`"
        );
    }
}
