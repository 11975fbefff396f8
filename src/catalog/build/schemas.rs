//! JSON Schemas a catalog declares (`inputSchema`, `outputSchema`):
//! checked against their meta-schema and compiled.

use serde_json::{Map, Value};

use crate::catalog::Schema;
use crate::catalog::assemble::Origin;
use crate::catalog::structure::readable_path;
use crate::diag::{did_you_mean, suggest};

use super::Builder;

impl Builder<'_> {
    /// Validates a JSON Schema and compiles it.
    pub(super) fn schema(&mut self, schema: &Map<String, Value>, origin: &Origin, key: &str) -> Option<Schema> {
        let location = self.assembled.locate(origin, &format!("/{key}"));
        let value = Value::Object(schema.clone());
        let meta = match jsonschema::meta::validator_for(&value) {
            Ok(meta) => meta,
            Err(err) => {
                let location = self.assembled.locate(origin, &format!("/{key}/$schema"));
                self.error(
                    "schema-invalid",
                    location,
                    format!("`{key}` names a meta-schema carte does not know: {err}"),
                )
                .hint = Some("leave out `$schema` (2020-12 is the default) or use a standard draft's URL".to_owned());
                return None;
            }
        };
        let mut reported: Vec<String> = Vec::new();
        let errors = if meta.is_valid(&value) { Vec::new() } else { meta.iter_errors(&value).collect() };
        for err in errors {
            let path = err.instance_path().as_str().to_owned();
            if reported.iter().any(|seen| path.starts_with(seen.as_str())) {
                continue; // one message per place is enough
            }
            let location = self.assembled.locate(origin, &format!("/{key}{path}"));
            let (message, hint) = explain_schema_error(key, &path, &err);
            self.error("schema-invalid", location, message).hint = Some(hint);
            reported.push(path);
        }
        if !reported.is_empty() {
            return None;
        }
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            let what = if key == "inputSchema" { "arguments" } else { "structured results" };
            self.error("schema-type", location, format!("`{key}` must have `type: object` at the top")).hint =
                Some(format!("MCP passes {what} as an object: write `type: object` with `properties:`"));
            return None;
        }
        self.check_required(schema, origin, &format!("/{key}"), key);
        // Compiled here to catch what the meta-schema cannot (a bad `$ref`,
        // a bad regex), then again on first use: see `Schema`.
        match jsonschema::validator_for(&value) {
            Ok(_) => Some(Schema::default()),
            Err(err) => {
                self.error("schema-invalid", location, format!("`{key}` cannot be compiled: {err}"));
                None
            }
        }
    }
}

/// Keywords that can declare a property elsewhere than in `properties`.
const DECLARE_ELSEWHERE: &[&str] =
    &["allOf", "anyOf", "oneOf", "$ref", "$dynamicRef", "if", "dependentSchemas", "patternProperties"];

impl Builder<'_> {
    /// Reports each name in `required` that `properties` does not declare,
    /// in this object schema and the ones nested in it (a client building a
    /// call from `properties` could never send it: every call would fail).
    /// Left alone where other keywords may declare it.
    fn check_required(&mut self, schema: &Map<String, Value>, origin: &Origin, pointer: &str, key: &str) {
        let properties = schema.get("properties").and_then(Value::as_object);
        let open = DECLARE_ELSEWHERE.iter().any(|k| schema.contains_key(*k))
            || schema.get("additionalProperties").is_some_and(Value::is_object);
        if let Some(required) = schema.get("required").and_then(Value::as_array).filter(|_| !open) {
            let declared: Vec<&str> = properties.map(|p| p.keys().map(String::as_str).collect()).unwrap_or_default();
            for (idx, name) in required.iter().enumerate() {
                let Some(name) = name.as_str().filter(|name| !declared.contains(name)) else { continue };
                let place = if pointer == format!("/{key}") {
                    format!("`{key}`")
                } else {
                    format!("`{}`", &pointer[1..].replace('/', "."))
                };
                let hint = match did_you_mean(name, declared.iter().copied()) {
                    Some(close) => format!("did you mean `{close}`?"),
                    None if declared.is_empty() => {
                        format!("declare it under `properties:`, e.g. `properties: {{ {name}: {{ type: string }} }}`")
                    }
                    None => format!(
                        "declare it under `properties:` or remove it; the properties are: {}",
                        declared.join(", ")
                    ),
                };
                let location = self.assembled.locate(origin, &format!("{pointer}/required/{idx}"));
                self.error(
                    "schema-required",
                    location,
                    format!("`required` names `{name}`, which is not a property of {place}"),
                )
                .hint = Some(hint);
            }
        }
        for (name, property) in properties.into_iter().flatten() {
            if let Value::Object(property) = property {
                let below = format!("{pointer}/properties/{}", crate::diag::escape_pointer(name));
                self.check_required(property, origin, &below, key);
            }
        }
        if let Some(Value::Object(items)) = schema.get("items") {
            self.check_required(items, origin, &format!("{pointer}/items"), key);
        }
    }
}

/// Words for a JSON Schema that breaks its meta-schema, for the common cases.
pub(super) fn explain_schema_error(key: &str, path: &str, err: &jsonschema::ValidationError<'_>) -> (String, String) {
    const TYPES: [&str; 7] = ["string", "number", "integer", "boolean", "object", "array", "null"];
    // Where a list item is wrong (`required: [a, 3]`), the keyword is the list's.
    let segments: Vec<String> = std::iter::once(key.to_owned())
        .chain(path.split('/').skip(1).map(|s| s.replace("~1", "/").replace("~0", "~")))
        .collect();
    let keyword_at = segments.iter().rposition(|s| s.parse::<usize>().is_err()).unwrap_or(0);
    let keyword = if keyword_at == 0 { "" } else { segments[keyword_at].as_str() };
    let place = readable_path(&segments[..=keyword_at]);
    let whole = readable_path(&segments);
    let found = err.instance();
    match keyword {
        "type" => {
            let written = found.as_str().map_or_else(|| found.to_string(), str::to_owned);
            let hint =
                suggest(&written, TYPES).unwrap_or_else(|| format!("JSON Schema types are: {}", TYPES.join(", ")));
            (format!("{place}: `{written}` is not a JSON Schema type"), hint)
        }
        "required" if keyword_at + 1 < segments.len() => (
            format!("{whole} should be a property name, found {}", crate::catalog::structure::describe_value(found)),
            "list the names of properties, e.g. `required: [room, hours]`".to_owned(),
        ),
        "required" => {
            (format!("{place} must be a list of property names"), "write e.g. `required: [room, hours]`".to_owned())
        }
        "properties" => (
            format!("{place} must map each property name to its schema"),
            "write e.g. `properties: { room: { type: string } }`".to_owned(),
        ),
        "enum" => (format!("{place} must be a list of allowed values"), "write e.g. `enum: [basic, pro]`".to_owned()),
        _ => (
            format!("{whole} is not valid JSON Schema: {err}"),
            "see https://json-schema.org/understanding-json-schema/ for the keywords (2020-12)".to_owned(),
        ),
    }
}
