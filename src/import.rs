//! `carte import openapi SPEC`: a catalog from an OpenAPI 3 description —
//! one `apis:` entry (its base URL from `servers`, overridable by an
//! environment variable) and one `http` tool per operation: its name from
//! `operationId`, its arguments from the path and query parameters (and
//! `body`, a JSON or form request body), the annotations from the method. What it
//! writes passes `carte check`; it is a start to edit, not a mirror.

use serde_json::{Map, Value, json};

/// How deep `$ref`s are followed (a schema that refers to itself ends as `{}`).
const MAX_REF_DEPTH: usize = 8;

/// The methods an operation may have, in the order tools are written.
const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// Why a description could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Not YAML or JSON.
    #[error("it is neither YAML nor JSON: {0}")]
    Unreadable(String),
    /// Not OpenAPI 3.
    #[error("it is not an OpenAPI 3 description (no `openapi: 3.…` at the top)")]
    NotOpenApi,
    /// No operation to make a tool of.
    #[error("it describes no operation under `paths` (get, post, put, patch or delete)")]
    Empty,
}

/// The catalog (YAML text) for the OpenAPI description `text`; its api is
/// named `api` (default: from `info.title`).
pub fn openapi(text: &str, api: Option<&str>) -> Result<String, ImportError> {
    let spec: Value = serde_yaml::from_str(text).map_err(|err| ImportError::Unreadable(err.to_string()))?;
    let version = spec.get("openapi").and_then(Value::as_str).unwrap_or_default();
    if !version.starts_with('3') {
        return Err(ImportError::NotOpenApi);
    }
    let title = spec.pointer("/info/title").and_then(Value::as_str).unwrap_or("api");
    let api = api.map_or_else(|| slug(title), slug);
    let server = server_url(&spec);
    let variable = format!("{}_BASE_URL", api.to_ascii_uppercase().replace(['-', '.'], "_"));
    let mut tools = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (path, item) in spec.get("paths").and_then(Value::as_object).into_iter().flatten() {
        let shared = item.get("parameters").and_then(Value::as_array).cloned().unwrap_or_default();
        for method in METHODS {
            let Some(operation) = item.get(method) else { continue };
            let mut name = operation
                .get("operationId")
                .and_then(Value::as_str)
                .map_or_else(|| format!("{method}_{}", slug(path)), tool_name);
            while names.contains(&name) {
                name.push('_');
            }
            names.push(name.clone());
            tools.push(tool(&spec, &api, (method, path), operation, &shared, &name));
        }
    }
    if tools.is_empty() {
        return Err(ImportError::Empty);
    }
    let mut catalog = Map::new();
    let mut info = Map::new();
    info.insert("name".to_owned(), json!(api));
    if let Some(version) = spec.pointer("/info/version").and_then(Value::as_str) {
        info.insert("version".to_owned(), json!(version));
    }
    if let Some(description) = spec.pointer("/info/description").and_then(Value::as_str) {
        info.insert("instructions".to_owned(), json!(description.trim()));
    }
    catalog.insert("server".to_owned(), Value::Object(info));
    catalog.insert("apis".to_owned(), json!({ &api: { "baseUrl": format!("${{{variable}:-{server}}}") } }));
    catalog.insert("tools".to_owned(), Value::Array(tools));
    let yaml =
        serde_yaml::to_string(&Value::Object(catalog)).map_err(|err| ImportError::Unreadable(err.to_string()))?;
    Ok(format!(
        "# Imported from the OpenAPI description \"{title}\" by `carte import openapi`.\n\
         # The api's address: ${variable} (default {server}). Edit freely: `carte check` says what is wrong.\n{yaml}"
    ))
}

/// The first of `servers` with its variables at their defaults; a relative
/// one is taken on `http://localhost` (the description gives no host).
fn server_url(spec: &Value) -> String {
    let Some(server) = spec.pointer("/servers/0") else { return "http://localhost".to_owned() };
    let mut url = server.get("url").and_then(Value::as_str).unwrap_or_default().to_owned();
    for (name, variable) in server.get("variables").and_then(Value::as_object).into_iter().flatten() {
        if let Some(default) = variable.get("default").and_then(Value::as_str) {
            url = url.replace(&format!("{{{name}}}"), default);
        }
    }
    if url.starts_with('/') || url.is_empty() {
        url = format!("http://localhost{url}");
    }
    url.trim_end_matches('/').to_owned()
}

/// One operation as a tool.
fn tool(
    spec: &Value,
    api: &str,
    (method, path): (&str, &str),
    operation: &Value,
    shared: &[Value],
    name: &str,
) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut query = Map::new();
    let own = operation.get("parameters").and_then(Value::as_array).cloned().unwrap_or_default();
    // An operation's parameter replaces the path item's of the same name and place.
    let mut parameters: Vec<Value> = Vec::new();
    for parameter in shared.iter().chain(&own) {
        let parameter = resolve(spec, parameter, 0);
        let key = |p: &Value| (p.get("name").cloned(), p.get("in").cloned());
        parameters.retain(|seen| key(seen) != key(&parameter));
        parameters.push(parameter);
    }
    // A `#…` is never sent; a literal `?a=b` becomes query values.
    let path = path.split('#').next().unwrap_or_default();
    let (path, literal_query) = path.split_once('?').unwrap_or((path, ""));
    for (key, value) in url::form_urlencoded::parse(literal_query.as_bytes()) {
        query.insert(key.into_owned(), json!(value));
    }
    let mut templated_path = path.to_owned();
    for parameter in &parameters {
        let (Some(name), Some(place)) =
            (parameter.get("name").and_then(Value::as_str), parameter.get("in").and_then(Value::as_str))
        else {
            continue;
        };
        if !matches!(place, "path" | "query") {
            continue; // headers and cookies are the api's business
        }
        let mut argument = parameter.get("schema").map(|value| schema(spec, value, 0)).unwrap_or(json!({}));
        if let (Some(description), Value::Object(map)) = (parameter.get("description"), &mut argument) {
            map.entry("description").or_insert(description.clone());
        }
        properties.insert(name.to_owned(), argument);
        let value = format!("{{{{ {} }}}}", reference(name));
        if place == "path" {
            required.push(name.to_owned());
            templated_path = templated_path.replace(&format!("{{{name}}}"), &value);
        } else {
            if parameter.get("required").and_then(Value::as_bool) == Some(true) {
                required.push(name.to_owned());
            }
            query.insert(name.to_owned(), json!(value));
        }
    }
    let body = operation.get("requestBody").map(|body| resolve(spec, body, 0));
    let content = body.as_ref().and_then(|body| body.get("content")).and_then(Value::as_object);
    let is_json = |media: &str| {
        let media = media.split(';').next().unwrap_or_default().trim();
        media == "application/json" || media.ends_with("+json")
    };
    let (body_schema, form) = match content {
        Some(content) => match content.iter().find(|(media, _)| is_json(media)) {
            Some((_, media)) => (media.get("schema"), false),
            None => (content.get("application/x-www-form-urlencoded").and_then(|media| media.get("schema")), true),
        },
        None => (None, false),
    };
    if let Some(value) = body_schema {
        let mut argument = schema(spec, value, 0);
        if let (Some(description), Value::Object(map)) =
            (body.as_ref().and_then(|b| b.get("description")), &mut argument)
        {
            map.entry("description").or_insert(description.clone());
        }
        properties.insert("body".to_owned(), argument);
        if body.as_ref().and_then(|b| b.get("required")).and_then(Value::as_bool) == Some(true) {
            required.push("body".to_owned());
        }
    }
    let summary = operation.get("summary").and_then(Value::as_str).map(str::trim);
    let described = operation.get("description").and_then(Value::as_str).map(str::trim);
    let description = described
        .or(summary)
        .filter(|text| !text.is_empty())
        .map_or_else(|| format!("Calls {} {path} on {api}.", method.to_ascii_uppercase()), str::to_owned);
    let mut http = Map::new();
    http.insert("api".to_owned(), json!(api));
    if method != "get" {
        http.insert("method".to_owned(), json!(method.to_ascii_uppercase()));
    }
    http.insert("path".to_owned(), json!(templated_path));
    if !query.is_empty() {
        http.insert("query".to_owned(), Value::Object(query));
    }
    match (body_schema, form) {
        (None, _) => {}
        (Some(_), false) => {
            http.insert("json".to_owned(), json!("{{ body }}"));
        }
        (Some(_), true) => {
            http.insert("headers".to_owned(), json!({ "Content-Type": "application/x-www-form-urlencoded" }));
            http.insert("body".to_owned(), json!("{{ body | urlencode }}"));
        }
    }
    let mut input = Map::new();
    input.insert("type".to_owned(), json!("object"));
    input.insert("properties".to_owned(), Value::Object(properties));
    if !required.is_empty() {
        input.insert("required".to_owned(), json!(required));
    }
    let mut entry = Map::new();
    entry.insert("name".to_owned(), json!(name));
    if let Some(summary) = summary.filter(|summary| !summary.is_empty() && Some(*summary) != described) {
        entry.insert("title".to_owned(), json!(summary));
    }
    entry.insert("description".to_owned(), json!(description));
    entry.insert("inputSchema".to_owned(), Value::Object(input));
    entry.insert(
        "annotations".to_owned(),
        match method {
            "get" => json!({ "readOnlyHint": true }),
            "delete" => json!({ "readOnlyHint": false, "destructiveHint": true, "idempotentHint": true }),
            "put" => json!({ "readOnlyHint": false, "idempotentHint": true }),
            _ => json!({ "readOnlyHint": false }),
        },
    );
    entry.insert("run".to_owned(), json!({ "http": Value::Object(http) }));
    Value::Object(entry)
}

/// `value` with every local `$ref` (`#/components/…`) replaced by what it
/// names, at most [`MAX_REF_DEPTH`] deep (for parameters and bodies; their
/// schemas go through [`schema`]).
fn resolve(spec: &Value, value: &Value, depth: usize) -> Value {
    match value {
        Value::Object(map) => {
            if let Some(target) = map.get("$ref").and_then(Value::as_str) {
                return match follow(spec, target) {
                    Some(found) if depth < MAX_REF_DEPTH => resolve(spec, found, depth + 1),
                    _ => json!({}),
                };
            }
            map.iter().map(|(key, item)| (key.clone(), resolve(spec, item, depth))).collect()
        }
        Value::Array(items) => Value::Array(items.iter().map(|item| resolve(spec, item, depth)).collect()),
        other => other.clone(),
    }
}

/// What a local `$ref` names.
fn follow<'s>(spec: &'s Value, target: &str) -> Option<&'s Value> {
    target.strip_prefix('#').and_then(|pointer| spec.pointer(pointer))
}

/// An OpenAPI schema as the JSON Schema (2020-12) carte checks: `$ref`s
/// inlined ([`MAX_REF_DEPTH`] deep; a schema that refers to itself ends as
/// `{}`), OpenAPI 3.0's `nullable` as a `null` type, its boolean
/// `exclusiveMinimum`/`exclusiveMaximum` as numbers, what is no JSON Schema
/// keyword (`example`, `xml`, `discriminator`, …) left out, a `pattern`
/// carte's regex engine cannot read left out, and `required` names kept to
/// the listed `properties`.
fn schema(spec: &Value, value: &Value, depth: usize) -> Value {
    let Value::Object(map) = value else { return value.clone() };
    if let Some(target) = map.get("$ref").and_then(Value::as_str) {
        return match follow(spec, target) {
            Some(found) if depth < MAX_REF_DEPTH => schema(spec, found, depth + 1),
            _ => json!({}),
        };
    }
    let mut out = Map::with_capacity(map.len());
    for (key, item) in map {
        let converted = match key.as_str() {
            "nullable" | "example" | "xml" | "externalDocs" | "discriminator" | "x-readme-ref-name" => continue,
            _ if key.starts_with("x-") => continue,
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => match item {
                Value::Object(entries) => {
                    entries.iter().map(|(name, item)| (name.clone(), schema(spec, item, depth))).collect()
                }
                other => other.clone(),
            },
            "items"
            | "additionalProperties"
            | "not"
            | "contains"
            | "propertyNames"
            | "if"
            | "then"
            | "else"
            | "unevaluatedItems"
            | "unevaluatedProperties"
            | "additionalItems" => schema(spec, item, depth),
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => match item {
                Value::Array(items) => Value::Array(items.iter().map(|item| schema(spec, item, depth)).collect()),
                other => other.clone(),
            },
            "pattern" if jsonschema::validator_for(&json!({ "pattern": item })).is_err() => continue,
            _ => item.clone(),
        };
        out.insert(key.clone(), converted);
    }
    for (flag, bound) in [("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")] {
        if let Some(Value::Bool(exclusive)) = out.get(flag).cloned() {
            out.remove(flag);
            if exclusive && let Some(bound_value) = out.remove(bound) {
                out.insert(flag.to_owned(), bound_value);
            }
        }
    }
    if map.get("nullable") == Some(&Value::Bool(true)) {
        match out.get_mut("type") {
            Some(Value::String(kind)) => {
                let kind = std::mem::take(kind);
                out.insert("type".to_owned(), json!([kind, "null"]));
            }
            Some(Value::Array(kinds)) if !kinds.contains(&json!("null")) => kinds.push(json!("null")),
            _ => {}
        }
    }
    if let (Some(Value::Object(properties)), Some(Value::Array(required))) =
        (out.get("properties"), out.get("required"))
    {
        let kept: Vec<Value> = required
            .iter()
            .filter(|name| name.as_str().is_some_and(|name| properties.contains_key(name)))
            .cloned()
            .collect();
        if kept.is_empty() {
            out.remove("required");
        } else {
            out.insert("required".to_owned(), Value::Array(kept));
        }
    }
    Value::Object(out)
}

/// How a template names the argument `name`: itself, or
/// `arguments['…']` when it is not an identifier.
fn reference(name: &str) -> String {
    let identifier = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if identifier { name.to_owned() } else { format!("arguments['{}']", name.replace('\'', "\\'")) }
}

/// A tool name from an `operationId`: MCP's characters, at most 128.
fn tool_name(id: &str) -> String {
    let name: String =
        id.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' }).collect();
    let name = name.trim_matches('_');
    let name = if name.is_empty() { "operation" } else { name };
    name.chars().take(128).collect()
}

/// A lower-case name of letters, digits and `_` (an api's name, a path's).
fn slug(text: &str) -> String {
    let mut slug = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('_') && !slug.is_empty() {
            slug.push('_');
        }
    }
    let slug = slug.trim_end_matches('_');
    if slug.is_empty() { "api".to_owned() } else { slug.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PETS: &str = r##"
openapi: 3.0.3
info: { title: Pet Store, version: "1.2" }
servers: [ { url: "https://pets.example/v1" } ]
paths:
  /pets:
    get:
      operationId: listPets
      summary: List pets
      parameters:
        - { name: limit, in: query, schema: { type: integer }, description: How many }
    post:
      operationId: createPet
      description: Adds a pet.
      requestBody:
        required: true
        content: { application/json: { schema: { $ref: "#/components/schemas/Pet" } } }
  /pets/{petId}:
    parameters: [ { name: petId, in: path, required: true, schema: { type: string } } ]
    delete: { summary: Remove a pet }
components:
  schemas:
    Pet: { type: object, properties: { name: { type: string }, tag: { type: string, nullable: true } }, required: [name] }
"##;

    #[test]
    fn each_operation_becomes_an_http_tool() {
        let yaml = openapi(PETS, None).unwrap();
        let catalog: Value = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(catalog["apis"]["pet_store"]["baseUrl"], "${PET_STORE_BASE_URL:-https://pets.example/v1}");
        let tools = catalog["tools"].as_array().unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["listPets", "createPet", "delete_pets_petid"]);
        assert_eq!(
            tools[0]["run"]["http"],
            json!({"api": "pet_store", "path": "/pets", "query": {"limit": "{{ limit }}"}})
        );
        assert_eq!(tools[0]["inputSchema"]["properties"]["limit"]["description"], "How many");
        assert_eq!(tools[1]["run"]["http"]["json"], "{{ body }}");
        assert_eq!(tools[1]["inputSchema"]["properties"]["body"]["required"], json!(["name"]));
        assert!(tools[1]["inputSchema"]["properties"]["body"]["properties"]["tag"].get("nullable").is_none());
        assert_eq!(tools[2]["run"]["http"]["path"], "/pets/{{ petId }}");
        assert_eq!(tools[2]["annotations"]["destructiveHint"], true);
        assert_eq!(tools[2]["inputSchema"]["required"], json!(["petId"]));
    }

    #[test]
    fn what_is_not_openapi_3_is_said() {
        assert!(matches!(openapi("swagger: '2.0'\npaths: {}\n", None), Err(ImportError::NotOpenApi)));
        assert!(matches!(openapi("openapi: 3.1.0\npaths: {}\n", None), Err(ImportError::Empty)));
        assert!(matches!(openapi("a: [", None), Err(ImportError::Unreadable(_))));
        assert_eq!(reference("page-size"), "arguments['page-size']");
        assert_eq!(tool_name("get pets/{id}"), "get_pets__id");
    }

    #[test]
    fn openapi_schemas_become_json_schema() {
        let spec = json!({ "components": { "schemas": { "Id": { "type": "integer", "example": 3 } } } });
        let written = json!({
            "type": "object",
            "properties": {
                "id": { "$ref": "#/components/schemas/Id" },
                "tag": { "type": "string", "nullable": true, "pattern": "^{x}$", "x-extra": 1 },
                "n": { "type": "number", "minimum": 1, "exclusiveMinimum": true, "maximum": 9, "exclusiveMaximum": false },
                "example": { "type": "string" }
            },
            "required": ["id", "gone"]
        });
        assert_eq!(
            schema(&spec, &written, 0),
            json!({
                "type": "object",
                "properties": {
                    "id": { "type": "integer" },
                    "tag": { "type": ["string", "null"] },
                    "n": { "type": "number", "exclusiveMinimum": 1, "maximum": 9 },
                    "example": { "type": "string" }
                },
                "required": ["id"]
            })
        );
    }

    #[test]
    fn server_variables_take_their_defaults() {
        let spec = json!({ "servers": [{ "url": "{scheme}://api.example.com:{port}/v1/",
            "variables": { "scheme": { "default": "https" }, "port": { "default": "8443" } } }] });
        assert_eq!(server_url(&spec), "https://api.example.com:8443/v1");
        assert_eq!(server_url(&json!({ "servers": [{ "url": "/v2" }] })), "http://localhost/v2");
        assert_eq!(server_url(&json!({})), "http://localhost");
    }
}
