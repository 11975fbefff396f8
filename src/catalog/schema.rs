//! The JSON Schema of the catalog format, as editors and validators read it.
//!
//! schemars derives it from [`CatalogFile`]; this module then makes it usable
//! by the tools people run (yaml-language-server in VS Code, ajv in strict
//! mode), without changing what it accepts:
//! - no `"default": null` (schemars writes one for each `#[serde(default)]`
//!   option): yaml-language-server's completion throws on a `null` default of
//!   a text key, and loses every key after it (`tools`, `run` …);
//! - no `format` (schemars's `uint32`, `double` … are not JSON Schema
//!   formats, and strict validators reject them): integer ranges become
//!   `minimum`/`maximum`;
//! - descriptions are the doc comments as prose (wrapped lines joined), and
//!   each also comes as `markdownDescription`, which editors render as
//!   Markdown (code in backticks) instead of escaping it.

use serde_json::{Map, Value};

use crate::catalog::model::CatalogFile;

/// The catalog format's JSON Schema, as `carte schema` prints it and
/// structural checks run it.
pub fn catalog_schema() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let schema = generator.into_root_schema_for::<CatalogFile>();
    let mut value = serde_json::to_value(schema).unwrap_or(Value::Null);
    for_editors(&mut value);
    value
}

/// Rewrites every schema object in `value` (the root, `$defs`, properties,
/// items, `anyOf` branches …) for editors; see the module doc.
fn for_editors(value: &mut Value) {
    match value {
        Value::Object(node) => {
            if node.get("default").is_some_and(Value::is_null) {
                node.remove("default");
            }
            if let Some(Value::String(format)) = node.get("format").cloned() {
                node.remove("format");
                bound_integer(node, &format);
            }
            if let Some(Value::String(description)) = node.get("description") {
                let prose = join_wrapped_lines(description);
                node.insert("markdownDescription".to_owned(), Value::String(prose.clone()));
                node.insert("description".to_owned(), Value::String(prose));
                describe_nullable_reference(node);
            }
            // `properties` and `$defs` map names to schemas, walked here too: a
            // property named `default`, `format` or `description` has an
            // object as its value, which none of the rewrites above touch.
            for child in node.values_mut() {
                for_editors(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(for_editors),
        _ => {}
    }
}

/// An optional block (`sql:`, `server:` …) is `anyOf: [{$ref}, {type: null}]`
/// with the key's description beside the `anyOf`. yaml-language-server's
/// hover shows the description of the branch that matched, the referenced
/// type's ("The `sql` effect."), not the key's ("Runs one SQL statement on a
/// `databases` entry …"); the key's description goes on the branch too.
fn describe_nullable_reference(node: &mut Map<String, Value>) {
    let description = ["description", "markdownDescription"].map(|key| node.get(key).cloned());
    let Some(Value::Array(branches)) = node.get_mut("anyOf") else {
        return;
    };
    let [first, second] = branches.as_mut_slice() else {
        return;
    };
    let is_null = |branch: &Value| branch.get("type").and_then(Value::as_str) == Some("null");
    let reference = match (is_null(first), is_null(second)) {
        (false, true) => first,
        (true, false) => second,
        _ => return,
    };
    let Some(reference) = reference.as_object_mut().filter(|r| r.len() == 1 && r.contains_key("$ref")) else {
        return;
    };
    for (key, value) in ["description", "markdownDescription"].into_iter().zip(description) {
        if let Some(value) = value {
            reference.insert(key.to_owned(), value);
        }
    }
}

/// The range schemars's integer `format` stood for, as `minimum`/`maximum`
/// (bounds beyond what a JSON number holds exactly, such as `u64::MAX`,
/// are left out).
fn bound_integer(node: &mut Map<String, Value>, format: &str) {
    let (minimum, maximum): (i64, Option<i64>) = match format {
        "uint8" => (0, Some(u8::MAX.into())),
        "uint16" => (0, Some(u16::MAX.into())),
        "uint32" => (0, Some(u32::MAX.into())),
        "uint64" | "uint" => (0, None),
        "int8" => (i8::MIN.into(), Some(i8::MAX.into())),
        "int16" => (i16::MIN.into(), Some(i16::MAX.into())),
        "int32" => (i32::MIN.into(), Some(i32::MAX.into())),
        _ => return,
    };
    node.entry("minimum").or_insert(Value::from(minimum));
    if let Some(maximum) = maximum {
        node.entry("maximum").or_insert(Value::from(maximum));
    }
}

/// Doc comments wrap lines at the source's width; a hover should not.
/// Single line breaks become spaces, blank lines stay paragraph breaks.
fn join_wrapped_lines(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| paragraph.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::catalog::source::parse_file;
    use crate::catalog::structure::check_file;

    /// Every object in the schema, depth first.
    fn objects(value: &Value) -> Vec<&Map<String, Value>> {
        let mut found = Vec::new();
        let mut stack = vec![value];
        while let Some(value) = stack.pop() {
            match value {
                Value::Object(node) => {
                    found.push(node);
                    stack.extend(node.values());
                }
                Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
        found
    }

    #[test]
    fn no_null_default_and_every_default_is_a_valid_value() {
        let schema = catalog_schema();
        for node in objects(&schema) {
            let Some(default) = node.get("default") else { continue };
            assert!(!default.is_null(), "`default: null` in {node:?}");
            let mut alone = node.clone();
            alone.insert("$defs".to_owned(), schema["$defs"].clone());
            let valid = jsonschema::validator_for(&Value::Object(alone)).map(|v| v.is_valid(default));
            assert!(matches!(valid, Ok(true)), "default {default} is not valid in {node:?}");
        }
    }

    #[test]
    fn no_format_and_integer_ranges_as_bounds() {
        let schema = catalog_schema();
        let formats: Vec<_> = objects(&schema).into_iter().filter_map(|node| node.get("format")).collect();
        assert!(formats.is_empty(), "strict validators reject schemars's formats: {formats:?}");
        let max_tokens = &schema["$defs"]["SampleStepSpec"]["properties"]["maxTokens"];
        assert_eq!((&max_tokens["type"], &max_tokens["minimum"]), (&"integer".into(), &0.into()), "{max_tokens}");
        assert_eq!(max_tokens["maximum"], u32::MAX, "{max_tokens}");
        let millis = &schema["$defs"]["DurationSpec"]["anyOf"][0];
        assert_eq!((&millis["minimum"], millis.get("maximum")), (&0.into(), None), "{millis}");
    }

    #[test]
    fn every_key_has_a_description_for_hovers() {
        let schema = catalog_schema();
        let mut keys = 0;
        for node in objects(&schema) {
            let Some(Value::Object(properties)) = node.get("properties") else { continue };
            for (key, property) in properties {
                keys += 1;
                let description = property["description"].as_str().unwrap_or_default();
                assert!(!description.is_empty(), "`{key}` has no description: {property}");
                assert!(
                    !description.contains('\n'),
                    "`{key}`: a doc comment's line breaks are left in: {description:?}"
                );
                assert_eq!(property["markdownDescription"], description, "`{key}`");
            }
        }
        assert!(keys > 50, "only {keys} keys seen");
    }

    #[test]
    fn every_definition_has_a_title_in_a_person_s_words() {
        // yaml-language-server names a type by its title, else by its `$defs`
        // name: "Expected \"server | null\"", not "Expected \"ServerSpec | null\"".
        let schema = catalog_schema();
        let definitions = schema["$defs"].as_object().map(|defs| defs.iter().collect::<Vec<_>>()).unwrap_or_default();
        assert!(definitions.len() > 20, "{definitions:?}");
        for (name, definition) in definitions {
            let title = definition["title"].as_str().unwrap_or_default();
            assert!(!title.is_empty() && !title.contains("Spec"), "`{name}` needs a title: {title:?}");
        }
    }

    #[test]
    fn an_optional_block_is_described_as_its_key() {
        let schema = catalog_schema();
        let sql = &schema["$defs"]["RunSpec"]["properties"]["sql"];
        let reference = sql["anyOf"].as_array().and_then(|branches| branches.iter().find(|b| b.get("$ref").is_some()));
        assert_eq!(reference.map(|r| &r["description"]), Some(&sql["description"]), "{sql}");
        assert_eq!(
            schema["properties"]["server"]["anyOf"][0]["markdownDescription"],
            schema["properties"]["server"]["description"]
        );
    }

    #[test]
    fn wrapped_lines_join_and_paragraphs_stay() {
        assert_eq!(join_wrapped_lines("one\ntwo\n\nthree\n four"), "one two\n\nthree four");
    }

    #[test]
    fn the_shipped_catalogs_are_valid_against_it() {
        let validator = jsonschema::validator_for(&catalog_schema()).unwrap();
        for file in ["catalogs/reservo.yaml", "examples/conformance/catalog.yaml"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
            let text = std::fs::read_to_string(&path).unwrap();
            let parsed = parse_file(&path, &text, &|_| None).unwrap();
            let errors: Vec<String> = validator.iter_errors(&parsed.value).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{file}: {errors:?}");
        }
    }

    #[test]
    fn an_integer_out_of_range_is_pointed_at() {
        let text = "tools:\n  - name: ask\n    run:\n      steps:\n        - sample:\n            messages: [{ role: user, text: hi }]\n            maxTokens: 5000000000\n      text: done\n";
        let parsed = parse_file(Path::new("c.yaml"), text, &|_| None).unwrap();
        let found = check_file(&parsed).problems;
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].location.line, found[0].location.column), (7, 24), "{found:?}");
        assert!(found[0].message.contains("4294967295"), "{}", found[0].message);
    }
}
