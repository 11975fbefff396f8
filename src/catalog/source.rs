//! Reading one catalog file: YAML text → JSON value, plus a map from every
//! key and value in the file to its line and column.
//!
//! The value comes from `serde_yaml` (full YAML: anchors, tags, block
//! scalars); the positions come from `marked-yaml`, which marks every node.
//! Checks that run long after parsing (duplicates, schemas, template
//! variables) find their place through [`Positions::locate`] with a JSON
//! pointer such as `/tools/2/inputSchema`. `${VAR}` references are expanded
//! here, in string values only (comments and keys are never touched).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Number, Value};

use crate::diag::{Diagnostic, Location};

/// Where each node of one file starts, keyed by JSON pointer.
#[derive(Debug, Clone, Default)]
pub struct Positions {
    /// The file these positions belong to.
    pub file: PathBuf,
    nodes: HashMap<String, NodePosition>,
}

#[derive(Debug, Clone, Copy)]
struct NodePosition {
    key: Option<Mark>,
    value: Mark,
}

#[derive(Debug, Clone, Copy)]
struct Mark {
    line: usize,
    column: usize,
    width: usize,
}

impl Positions {
    /// Positions of a file that could not be parsed: everything points at its start.
    pub fn empty(file: &Path) -> Positions {
        Positions { file: file.to_path_buf(), nodes: HashMap::new() }
    }

    /// The location of the value at `pointer`, or of its nearest ancestor that
    /// has one (a missing key points at the mapping that lacks it).
    pub fn locate(&self, pointer: &str) -> Location {
        self.find(pointer, false)
    }

    /// Like [`Positions::locate`], but points at the key rather than its value
    /// where the node is a mapping entry (for unknown keys).
    pub fn locate_key(&self, pointer: &str) -> Location {
        self.find(pointer, true)
    }

    fn find(&self, pointer: &str, prefer_key: bool) -> Location {
        let mut current = pointer;
        loop {
            if let Some(node) = self.nodes.get(current) {
                let mark = match (prefer_key || current != pointer, node.key) {
                    (true, Some(key)) => key,
                    _ => node.value,
                };
                return Location { file: self.file.clone(), line: mark.line, column: mark.column, width: mark.width };
            }
            match current.rfind('/') {
                Some(idx) => current = &current[..idx],
                None => return Location::file_start(&self.file),
            }
        }
    }

    fn build(file: &Path, text: &str) -> Positions {
        let mut positions = Positions { file: file.to_path_buf(), nodes: HashMap::new() };
        // marked-yaml rejects anchors and tags; positions then fall back to
        // the file's start, which is still correct, only less precise.
        if let Ok(root) = marked_yaml::parse_yaml(0, text) {
            positions.walk(&root, String::new(), None);
        }
        positions
    }

    fn walk(&mut self, node: &marked_yaml::Node, pointer: String, key: Option<Mark>) {
        let mut value = mark_of(node.span(), node_width(node));
        // A block mapping's own mark can sit after its first key; point at
        // the first key instead, where a person sees the mapping start.
        if let marked_yaml::Node::Mapping(map) = node
            && let Some((first, _)) = map.iter().next()
        {
            value = mark_of(first.span(), 1);
        }
        self.nodes.insert(pointer.clone(), NodePosition { key, value });
        match node {
            marked_yaml::Node::Scalar(_) => {}
            marked_yaml::Node::Sequence(seq) => {
                for (idx, child) in seq.iter().enumerate() {
                    self.walk(child, format!("{pointer}/{idx}"), None);
                }
            }
            marked_yaml::Node::Mapping(map) => {
                for (k, child) in map.iter() {
                    let key_mark = mark_of(k.span(), k.as_str().chars().count());
                    self.walk(child, format!("{pointer}/{}", escape_pointer(k.as_str())), Some(key_mark));
                }
            }
        }
    }
}

fn node_width(node: &marked_yaml::Node) -> usize {
    match node {
        marked_yaml::Node::Scalar(scalar) => {
            let text = scalar.as_str();
            if text.contains('\n') { 1 } else { text.chars().count().max(1) }
        }
        _ => 1,
    }
}

fn mark_of(span: &marked_yaml::Span, width: usize) -> Mark {
    match span.start() {
        Some(start) => Mark { line: start.line(), column: start.column(), width },
        None => Mark { line: 1, column: 1, width: 1 },
    }
}

/// Escapes one JSON pointer segment.
pub fn escape_pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// One parsed catalog file.
#[derive(Debug, Clone)]
pub struct ParsedFile {
    /// The file's contents as JSON, `${VAR}`s expanded.
    pub value: Value,
    /// Where everything in it is.
    pub positions: Positions,
}

/// Reads and parses one catalog file. A YAML syntax error or an unreadable
/// file is a single diagnostic; `${VAR}` problems are reported all together.
pub fn parse_file(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ParsedFile, Vec<Diagnostic>> {
    let positions = Positions::build(path, text);
    let yaml: serde_yaml::Value = match serde_yaml::from_str(text) {
        Ok(yaml) => yaml,
        Err(err) => return Err(vec![yaml_error(path, &err)]),
    };
    let mut value = yaml_to_json(yaml);
    if value.is_null() {
        value = Value::Object(Map::new());
    }
    if !value.is_object() {
        return Err(vec![
            Diagnostic::error(
                "not-a-mapping",
                positions.locate(""),
                "a catalog file must be a mapping of keys (server, tools, prompts, …)",
            )
            .with_hint("start the file with a key such as `tools:`"),
        ]);
    }
    let mut problems = Vec::new();
    expand_env(&mut value, &mut String::new(), &positions, env, &mut problems);
    if problems.is_empty() { Ok(ParsedFile { value, positions }) } else { Err(problems) }
}

fn yaml_error(path: &Path, err: &serde_yaml::Error) -> Diagnostic {
    let (line, column) = err.location().map(|l| (l.line(), l.column())).unwrap_or((1, 1));
    let mut message = err.to_string();
    // serde_yaml appends " at line X column Y"; the location is printed already.
    if let Some(idx) = message.find(" at line ") {
        message.truncate(idx);
    }
    let hint = if message.contains("mapping values are not allowed") {
        Some(
            "a value containing `: ` or ending in `:` must be quoted, e.g. description: \"Note: …\" or url: \"sqlite::memory:\"",
        )
    } else if message.contains("found character that cannot start any token") || message.contains("tab character") {
        Some("YAML does not allow tabs for indentation; indent with spaces")
    } else if message.contains("did not find expected key") || message.contains("block mapping") {
        Some("check the indentation of this line against the lines above it")
    } else if message.contains("duplicate entry") {
        Some("each key may appear once per mapping; remove or rename one of them")
    } else {
        None
    };
    let diagnostic = Diagnostic::error(
        "yaml-syntax",
        Location { file: path.to_path_buf(), line, column, width: 1 },
        format!("invalid YAML: {message}"),
    );
    match hint {
        Some(hint) => diagnostic.with_hint(hint),
        None => diagnostic,
    }
}

fn yaml_to_json(yaml: serde_yaml::Value) -> Value {
    match yaml {
        serde_yaml::Value::Null => Value::Null,
        serde_yaml::Value::Bool(b) => Value::Bool(b),
        serde_yaml::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Number(i.into())
            } else if let Some(u) = n.as_u64() {
                Value::Number(u.into())
            } else {
                n.as_f64().and_then(Number::from_f64).map(Value::Number).unwrap_or_else(|| Value::String(n.to_string()))
            }
        }
        serde_yaml::Value::String(s) => Value::String(s),
        serde_yaml::Value::Sequence(seq) => Value::Array(seq.into_iter().map(yaml_to_json).collect()),
        serde_yaml::Value::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = match yaml_to_json(k) {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        serde_yaml::Value::Tagged(tagged) => yaml_to_json(tagged.value),
    }
}

fn expand_env(
    value: &mut Value,
    pointer: &mut String,
    positions: &Positions,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Diagnostic>,
) {
    match value {
        Value::String(text) if text.contains('$') => match expand_str(text, env) {
            Ok(expanded) => *text = expanded,
            Err(problem) => {
                let diagnostic = Diagnostic::error("env", positions.locate(pointer), problem.message);
                problems.push(match problem.hint {
                    Some(hint) => diagnostic.with_hint(hint),
                    None => diagnostic,
                });
            }
        },
        Value::Array(items) => {
            for (idx, item) in items.iter_mut().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{idx}"));
                expand_env(item, pointer, positions, env, problems);
                pointer.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&escape_pointer(key));
                expand_env(item, pointer, positions, env, problems);
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

/// Why a `${…}` reference could not be expanded.
#[derive(Debug, PartialEq, Eq)]
pub struct EnvProblem {
    /// What went wrong.
    pub message: String,
    /// What to do.
    pub hint: Option<String>,
}

/// Expands `${VAR}`, `${VAR:-default}` and `${VAR:?message}` in `text`;
/// `$${` stands for a literal `${`.
pub fn expand_str(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, EnvProblem> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(idx) = rest.find('$') {
        out.push_str(&rest[..idx]);
        let after = &rest[idx + 1..];
        if let Some(stripped) = after.strip_prefix("${") {
            out.push_str("${");
            rest = stripped;
            continue;
        }
        let Some(body_start) = after.strip_prefix('{') else {
            out.push('$');
            rest = after;
            continue;
        };
        let Some(end) = body_start.find('}') else {
            return Err(EnvProblem {
                message: "unclosed `${` in value".to_owned(),
                hint: Some("write `${NAME}`, or `$${` for a literal `${`".to_owned()),
            });
        };
        let body = &body_start[..end];
        rest = &body_start[end + 1..];
        let (name, op) = match body.find(':') {
            Some(colon) => (&body[..colon], Some(&body[colon..])),
            None => (body, None),
        };
        let valid_name = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid_name {
            return Err(EnvProblem {
                message: format!("`${{{body}}}` is not a valid environment reference"),
                hint: Some(
                    "write `${NAME}`, `${NAME:-default}` or `${NAME:?message}`; `$${` for a literal `${`".to_owned(),
                ),
            });
        }
        let current = env(name).filter(|v| !v.is_empty());
        match (current, op) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(op)) if op.starts_with(":-") => out.push_str(&op[2..]),
            (None, Some(op)) if op.starts_with(":?") => {
                let message = op[2..].trim();
                return Err(EnvProblem {
                    message: if message.is_empty() {
                        format!("environment variable `{name}` is required but not set")
                    } else {
                        format!("environment variable `{name}` is not set: {message}")
                    },
                    hint: Some(format!("set it before starting carte, e.g. `{name}=… carte serve …`")),
                });
            }
            (None, Some(op)) => {
                return Err(EnvProblem {
                    message: format!("unknown operator `{op}` in `${{{body}}}`"),
                    hint: Some("use `${NAME:-default}` or `${NAME:?message}`".to_owned()),
                });
            }
            (None, None) => {
                return Err(EnvProblem {
                    message: format!("environment variable `{name}` is not set"),
                    hint: Some(format!("set it, or give a default: `${{{name}:-value}}`")),
                });
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME_DIR" => Some("/home/x".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_all_forms() {
        assert_eq!(expand_str("a ${HOME_DIR} b", &env).unwrap(), "a /home/x b");
        assert_eq!(expand_str("${NOPE:-sqlite:x.db}", &env).unwrap(), "sqlite:x.db");
        assert_eq!(expand_str("${EMPTY:-d}", &env).unwrap(), "d");
        assert_eq!(expand_str("cost $5 $${KEEP}", &env).unwrap(), "cost $5 ${KEEP}");
        let err = expand_str("${NOPE:?set the database URL}", &env).unwrap_err();
        assert_eq!(err.message, "environment variable `NOPE` is not set: set the database URL");
        let err = expand_str("${NOPE}", &env).unwrap_err();
        assert_eq!(err.message, "environment variable `NOPE` is not set");
    }

    #[test]
    fn positions_point_at_keys_and_values() {
        let text = "tools:\n  - name: a\n    descripton: b\n";
        let parsed = parse_file(Path::new("c.yaml"), text, &env).unwrap();
        let key = parsed.positions.locate_key("/tools/0/descripton");
        assert_eq!((key.line, key.column, key.width), (3, 5, 10));
        let value = parsed.positions.locate("/tools/0/name");
        assert_eq!((value.line, value.column), (2, 11));
        let missing = parsed.positions.locate("/tools/0/run");
        assert_eq!((missing.line, missing.column), (2, 5));
    }

    #[test]
    fn comments_are_not_expanded() {
        let text = "# ${UNSET_IN_COMMENT}\ndata: { a: 1 }\n";
        assert!(parse_file(Path::new("c.yaml"), text, &env).is_ok());
    }

    #[test]
    fn yaml_errors_have_a_location() {
        let err = parse_file(Path::new("c.yaml"), "tools:\n  - name: a\n   bad: [\n", &env).unwrap_err();
        assert_eq!(err[0].code, "yaml-syntax");
        assert!(err[0].location.line >= 2, "{:?}", err[0]);
    }
}
