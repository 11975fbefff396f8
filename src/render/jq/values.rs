//! Values crossing between templates (minijinja) and jq (jaq), each way in
//! one pass, within a nesting depth and the run's byte budget.

use jaq_json::{Num, Val};
use minijinja::Value;
use minijinja::value::ValueKind;

use super::{MAX_DEPTH, SLOT_BYTES, group};

/// Bytes of values converted so far, and the most allowed.
pub(super) struct Sizes {
    pub(super) bytes: usize,
    pub(super) limit: usize,
}

impl Sizes {
    fn add(&mut self, bytes: usize) -> Result<(), String> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > self.limit {
            // Past the limit, the run's budget is spent (see `Ran::spent`).
            jaq_json::budget::spend();
            return Err(format!("the jq filter's input or output is larger than {} bytes", group(self.limit as u64)));
        }
        Ok(())
    }
}

fn too_deep() -> String {
    format!("a value given to or taken from jq nests deeper than {MAX_DEPTH} levels")
}

/// A template value as jaq's, in one pass.
pub(super) fn to_jaq(value: &Value, depth: usize, sizes: &mut Sizes) -> Result<Val, String> {
    if depth > MAX_DEPTH {
        return Err(too_deep());
    }
    Ok(match value.kind() {
        ValueKind::Undefined | ValueKind::None => Val::Null,
        ValueKind::Bool => Val::from(value.is_true()),
        ValueKind::Number => {
            sizes.add(SLOT_BYTES)?;
            number_to_jaq(value)?
        }
        ValueKind::String => {
            let text = value.as_str().map(str::to_owned).unwrap_or_else(|| value.to_string());
            sizes.add(text.len())?;
            Val::from(text)
        }
        ValueKind::Bytes => {
            let bytes = value.as_bytes().unwrap_or_default().to_vec();
            sizes.add(bytes.len())?;
            Val::byte_str(bytes)
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items = value.try_iter().map_err(|err| format!("jq cannot read this {}: {err}", value.kind()))?;
            let mut out = Vec::new();
            for item in items {
                sizes.add(SLOT_BYTES)?;
                out.push(to_jaq(&item, depth + 1, sizes)?);
            }
            Val::Arr(out.into())
        }
        ValueKind::Map => {
            let keys = value.try_iter().map_err(|err| format!("jq cannot read this map: {err}"))?;
            let mut out = jaq_json::Map::default();
            for key in keys {
                sizes.add(SLOT_BYTES)?;
                let item = value.get_item(&key).unwrap_or_default();
                out.insert(to_jaq(&key, depth + 1, sizes)?, to_jaq(&item, depth + 1, sizes)?);
            }
            Val::obj(out)
        }
        other => return Err(format!("jq cannot read a value of type {other}")),
    })
}

fn number_to_jaq(value: &Value) -> Result<Val, String> {
    if value.is_integer()
        && let Ok(int) = i128::try_from(value.clone())
    {
        return Ok(Val::Num(Num::from_integral(int)));
    }
    f64::try_from(value.clone()).map(Val::from).map_err(|err| format!("jq cannot read the number {value}: {err}"))
}

/// A jaq value as a template's, in one pass.
pub(super) fn from_jaq(value: &Val, depth: usize, sizes: &mut Sizes) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(too_deep());
    }
    Ok(match value {
        Val::Null => Value::from(()),
        Val::Bool(b) => Value::from(*b),
        Val::Num(num) => {
            sizes.add(SLOT_BYTES)?;
            number_from_jaq(num)
        }
        Val::TStr(bytes) => {
            sizes.add(bytes.len())?;
            Value::from(String::from_utf8_lossy(bytes).into_owned())
        }
        Val::BStr(bytes) => {
            sizes.add(bytes.len())?;
            Value::from_bytes(bytes.to_vec())
        }
        Val::Arr(items) => {
            let mut out = Vec::with_capacity(items.len().min(1 << 16));
            for item in items.iter() {
                sizes.add(SLOT_BYTES)?;
                out.push(from_jaq(item, depth + 1, sizes)?);
            }
            Value::from(out)
        }
        Val::Obj(map) => {
            let mut out = Vec::with_capacity(map.len().min(1 << 16));
            for (key, item) in map.iter() {
                sizes.add(SLOT_BYTES)?;
                out.push((from_jaq(key, depth + 1, sizes)?, from_jaq(item, depth + 1, sizes)?));
            }
            Value::from_pairs(out)
        }
    })
}

fn number_from_jaq(num: &Num) -> Value {
    match num {
        Num::Int(int) => Value::from(*int as i64),
        Num::Float(float) => Value::from(*float),
        other => {
            let text = other.to_string();
            match text.parse::<i128>() {
                Ok(int) => Value::from(int),
                Err(_) => Value::from(text.parse::<f64>().unwrap_or(f64::NAN)),
            }
        }
    }
}
