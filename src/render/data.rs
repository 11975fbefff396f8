//! `data:` as templates see it: maps and lists whose missing keys are
//! errors naming their path when printed (see [`data_value`]), and the
//! `default` filter that knows them.

use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectExt as _, ObjectRepr};
use minijinja::{Error, ErrorKind, State, Value};

use super::to_value;

/// `data:` as templates see it: maps and lists whose missing attributes
/// (`data.menu.rye.nmae`) and items (`data.rooms[5]`) are errors naming the
/// path (`data.menu.rye has no key "nmae"`) when printed, where minijinja
/// would print nothing. A missing subscript of a map (`data.menu[product]`)
/// stays undefined: minijinja answers `product in data.menu` with the same
/// lookup (an attribute of it is then minijinja's "undefined value" error).
/// A template can still ask whether something is there: `is defined`,
/// `is undefined`, `default(…)`/`d(…)`, `if data.x`, `data.x or …`,
/// `"x" in data` and `data.get("x")` treat a missing key as undefined.
/// `tojson`, `string`, `pprint` and `join` of a missing key are errors too.
/// (Iterating a missing key gives nothing, and joining it into a string with
/// `~` adds nothing, as for any undefined value; arithmetic and comparisons
/// with it fail with minijinja's own message.) A key that is itself
/// undefined or none (`data.rooms[size]` with the optional argument `size`
/// not given) gives undefined, as before.
pub fn data_value(data: &serde_json::Map<String, serde_json::Value>) -> Value {
    data_map("data".to_owned(), data)
}

/// The claims of a caller's verified access token as templates see them
/// (`auth`): like `data`, a missing claim is an error naming it when
/// printed. Without a verified caller, `auth` is missing as a whole, and
/// printing anything of it says why.
pub fn auth_value(claims: Option<&serde_json::Map<String, serde_json::Value>>) -> Value {
    match claims {
        Some(claims) => data_map("auth".to_owned(), claims),
        None => Missing::value(
            "auth: no verified caller (carte verifies callers only over HTTP with --oauth-issuer)".to_owned(),
        ),
    }
}

fn data_node(path: String, value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Object(map) => data_map(path, map),
        serde_json::Value::Array(items) => {
            let items = items.iter().enumerate().map(|(idx, item)| data_node(format!("{path}[{idx}]"), item)).collect();
            Value::from_object(DataList { path, items })
        }
        other => to_value(other),
    }
}

fn data_map(path: String, map: &serde_json::Map<String, serde_json::Value>) -> Value {
    let entries = map
        .iter()
        .map(|(key, value)| {
            let below = if is_identifier(key) { format!("{path}.{key}") } else { format!("{path}[{key:?}]") };
            (key.clone(), data_node(below, value))
        })
        .collect();
    Value::from_object(DataMap { path, entries })
}

fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A map of `data:`.
#[derive(Debug)]
struct DataMap {
    path: String,
    entries: indexmap::IndexMap<String, Value>,
}

/// Keys named in a missing key's message when there are this many or fewer.
const FEW_KEYS: usize = 12;

impl Object for DataMap {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    /// A subscript (`data.menu[product]`) and `in` (`product in data.menu`,
    /// which minijinja answers with this lookup): undefined when missing.
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        key.as_str().and_then(|k| self.entries.get(k)).cloned()
    }

    /// An attribute (`data.menu.rye.nmae`): an error when missing and printed.
    fn get_value_by_str(self: &Arc<Self>, key: &str) -> Option<Value> {
        if let Some(value) = self.entries.get(key) {
            return Some(value.clone());
        }
        let known = if self.entries.is_empty() {
            " (it is empty)".to_owned()
        } else if self.entries.len() <= FEW_KEYS {
            let keys: Vec<&str> = self.entries.keys().map(String::as_str).collect();
            format!(" (it has {})", keys.join(", "))
        } else {
            String::new()
        };
        Some(Missing::value(format!("{} has no key {key:?}{known}", self.path)))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        self.mapped_enumerator(|this| Box::new(this.entries.keys().map(|k| Value::from(k.as_str()))))
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.entries.len())
    }

    /// Python's `get`, `items`, `keys` and `values`, so that
    /// `data.get("x", "fallback")` asks for a key that may be missing.
    fn call_method(self: &Arc<Self>, _state: &mut State<'_, '_>, method: &str, args: &[Value]) -> Result<Value, Error> {
        match (method, args) {
            ("get", [key]) | ("get", [key, _]) => Ok(key
                .as_str()
                .and_then(|k| self.entries.get(k))
                .cloned()
                .unwrap_or_else(|| args.get(1).cloned().unwrap_or(Value::from(())))),
            ("items", []) => Ok(Value::from(
                self.entries
                    .iter()
                    .map(|(k, v)| Value::from(vec![Value::from(k.as_str()), v.clone()]))
                    .collect::<Vec<_>>(),
            )),
            ("keys", []) => Ok(Value::from(self.entries.keys().map(|k| Value::from(k.as_str())).collect::<Vec<_>>())),
            ("values", []) => Ok(Value::from(self.entries.values().cloned().collect::<Vec<_>>())),
            _ => Err(Error::from(ErrorKind::UnknownMethod)),
        }
    }
}

/// A list of `data:`.
#[derive(Debug)]
struct DataList {
    path: String,
    items: Vec<Value>,
}

impl Object for DataList {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let index = i64::try_from(key.clone()).ok();
        let len = self.items.len();
        let position = index.map(|i| if i < 0 { i64::try_from(len).unwrap_or(i64::MAX) + i } else { i });
        if let Some(item) = position.and_then(|p| usize::try_from(p).ok()).and_then(|p| self.items.get(p)) {
            return Some(item.clone());
        }
        if key.is_undefined() || key.is_none() {
            return None;
        }
        Some(Missing::value(format!("{} has no item {} (it has {len})", self.path, key_text(key))))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.items.len())
    }
}

/// A key printed in a message: strings quoted, the rest as written.
fn key_text(key: &Value) -> String {
    match key.as_str() {
        Some(text) => format!("{text:?}"),
        None => key.to_string(),
    }
}

/// What a missing key of `data` gives: false, empty, and an error when
/// printed or called, with the path that led nowhere.
#[derive(Debug)]
struct Missing {
    message: String,
}

impl Missing {
    fn value(message: String) -> Value {
        Value::from_object(Missing { message })
    }

    fn error(&self) -> Error {
        Error::new(ErrorKind::UndefinedError, self.message.clone())
    }
}

impl Object for Missing {
    /// Below a missing key, still the first key that was missing.
    fn get_value(self: &Arc<Self>, _key: &Value) -> Option<Value> {
        Some(Value::from_dyn_object(minijinja::value::DynObject::new(Arc::clone(self))))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Empty
    }

    fn is_true(self: &Arc<Self>) -> bool {
        false
    }

    fn call(self: &Arc<Self>, _state: &mut State<'_, '_>, _args: &[Value]) -> Result<Value, Error> {
        Err(self.error())
    }

    fn render(self: &Arc<Self>, _f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }
}

/// The error a missing key of `data` stands for, if `value` is one.
pub(super) fn missing_error(value: &Value) -> Option<Error> {
    value.downcast_object_ref::<Missing>().map(Missing::error)
}

/// Whether `value` is undefined, or a missing key of `data`.
pub(super) fn is_absent(value: &Value) -> bool {
    value.is_undefined() || value.downcast_object_ref::<Missing>().is_some()
}

/// `default(value, other="", lax=false)`: minijinja's, for missing `data` keys too.
pub(super) fn default(value: &Value, other: Option<Value>, lax: Option<Value>) -> Value {
    if is_absent(value) || (lax.is_some_and(|lax| lax.is_true()) && !value.is_true()) {
        other.unwrap_or_else(|| Value::from(""))
    } else {
        value.clone()
    }
}
