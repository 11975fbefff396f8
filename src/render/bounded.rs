//! The filters that would build a large value before minijinja charges fuel
//! for it (`join`, `tojson`, `string`, `pprint`): each measures or builds
//! within what the render's fuel can still pay for, and at most
//! [`MAX_STRING_BYTES`](super::MAX_STRING_BYTES) (see the parent module's
//! "What a render may cost").

use std::fmt::Write as _;

use minijinja::value::Kwargs;
use minijinja::{Error, ErrorKind, State, Value};

use super::data::missing_error;
use super::{MAX_STRING_BYTES, size_text};

/// Bytes of data one fuel pays for (minijinja's `UNITS_PER_FUEL`, in
/// `vm/fuel.rs`: a byte of a string costs one unit).
pub(super) const BYTES_PER_FUEL: u64 = 64;

/// How many bytes a filter may still build in this render: what the fuel
/// left can pay for, and at most [`MAX_STRING_BYTES`].
pub(super) fn byte_budget(state: &State<'_, '_>) -> usize {
    let left = state.fuel_levels().map_or(u64::MAX, |(_, remaining)| remaining.saturating_mul(BYTES_PER_FUEL));
    usize::try_from(left).unwrap_or(usize::MAX).min(MAX_STRING_BYTES)
}

/// The refusal of `filter` past `limit`: out of fuel when the limit was
/// what the fuel left could pay for (so an inline attempt is made again
/// with the full fuel), an invalid operation past [`MAX_STRING_BYTES`].
pub(super) fn too_big(filter: &str, limit: usize) -> Error {
    let kind = if limit < MAX_STRING_BYTES { ErrorKind::OutOfFuel } else { ErrorKind::InvalidOperation };
    Error::new(
        kind,
        format!("the template used too much memory: `{filter}` would build more than {}", size_text(limit)),
    )
}

/// Counts what would be written, failing past `limit`; `json` counts a
/// byte as minijinja's `tojson` may write it (`, ` and `: ` spaced, `<>&'`
/// as `\u00XX`), so the count is an upper bound of its output.
struct Measure {
    len: usize,
    limit: usize,
    json: bool,
}

impl Measure {
    fn new(limit: usize, json: bool) -> Measure {
        Measure { len: 0, limit, json }
    }

    fn add(&mut self, bytes: &[u8]) -> bool {
        let extra: usize = if self.json {
            bytes
                .iter()
                .map(|b| match b {
                    b',' | b':' => 1,
                    b'<' | b'>' | b'&' | b'\'' => 5,
                    _ => 0,
                })
                .sum()
        } else {
            0
        };
        self.len = self.len.saturating_add(bytes.len()).saturating_add(extra);
        self.len <= self.limit
    }
}

impl std::fmt::Write for Measure {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.add(s.as_bytes()) { Ok(()) } else { Err(std::fmt::Error) }
    }
}

impl std::io::Write for Measure {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.add(buf) { Ok(buf.len()) } else { Err(std::io::Error::other("too large")) }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A string that refuses to grow past `limit`.
struct Capped<'a> {
    out: &'a mut String,
    limit: usize,
}

impl std::fmt::Write for Capped<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.out.len().saturating_add(s.len()) > self.limit {
            return Err(std::fmt::Error);
        }
        self.out.push_str(s);
        Ok(())
    }
}

/// Looks up a dotted `path` (`user.name`, `items.0`) in `item`; undefined
/// where it does not lead anywhere (as minijinja's `join` does).
fn attribute_path(item: Value, path: &str) -> Value {
    let mut current = item;
    for part in path.split('.') {
        let next = match part.parse::<usize>() {
            Ok(index) => current.get_item(&Value::from(index)),
            Err(_) => current.get_attr(part),
        };
        current = next.unwrap_or(Value::UNDEFINED);
    }
    current
}

/// `join(d="", attribute=none)`: minijinja's `join`, building the string
/// within the render's budget (the builtin checks the size only when the
/// joiner is not empty: `(['x'*10**6]*3000)|join` built 3 GB).
pub(super) fn join(
    state: &State<'_, '_>,
    value: &Value,
    joiner: Option<Value>,
    attribute: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let joiner = match joiner {
        Some(joiner) => Some(joiner),
        None => kwargs.get::<Option<Value>>("d")?,
    };
    let attribute = match attribute {
        Some(attribute) => Some(attribute),
        None => kwargs.get::<Option<Value>>("attribute")?,
    };
    kwargs.assert_all_used()?;
    if value.is_undefined() {
        return Ok(Value::from(""));
    }
    let joiner = joiner.filter(|j| !j.is_none() && !j.is_undefined()).map(|j| j.to_string()).unwrap_or_default();
    let attribute = attribute.filter(|a| !a.is_none() && !a.is_undefined()).map(|a| a.to_string());
    let items = value.try_iter().map_err(|err| {
        Error::new(ErrorKind::InvalidOperation, format!("cannot join value of type {}", value.kind())).with_source(err)
    })?;
    let limit = byte_budget(state);
    let mut joined = String::new();
    let mut out = Capped { out: &mut joined, limit };
    for (idx, item) in items.enumerate() {
        // Visiting an item is work, whatever it prints.
        state.consume_fuel(1)?;
        let item = match &attribute {
            Some(path) => attribute_path(item, path),
            None => item,
        };
        if let Some(err) = missing_error(&item) {
            return Err(err);
        }
        let written = if idx > 0 { out.write_str(&joiner) } else { Ok(()) };
        written.and_then(|()| write!(out, "{item}")).map_err(|_| too_big("join", limit))?;
    }
    Ok(Value::from(joined))
}

/// `tojson`: minijinja's, once the JSON is known to fit the budget (the
/// builtin serializes everything, then charges for it).
pub(super) fn tojson(
    state: &State<'_, '_>,
    value: &Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    if let Some(err) = missing_error(value) {
        return Err(err);
    }
    let limit = byte_budget(state);
    let mut measure = Measure::new(limit, true);
    let spaces = match indent.as_ref() {
        Some(indent) => bool::try_from(indent.clone())
            .map(|pretty| if pretty { 2 } else { 0 })
            .or_else(|_| usize::try_from(indent.clone()))
            .unwrap_or(0),
        None => kwargs.peek::<Option<usize>>("indent").ok().flatten().unwrap_or(0),
    };
    let measured = if spaces > 0 {
        let indent = " ".repeat(spaces.min(64));
        let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
        serde::Serialize::serialize(value, &mut serde_json::Serializer::with_formatter(&mut measure, formatter))
    } else {
        serde_json::to_writer(&mut measure, value)
    };
    if measured.is_err() && measure.len > limit {
        return Err(too_big("tojson", limit));
    }
    minijinja::filters::tojson(value, indent, kwargs)
}

/// `string`: minijinja's, once the text is known to fit the budget.
pub(super) fn string(state: &State<'_, '_>, value: &Value) -> Result<Value, Error> {
    if let Some(err) = missing_error(value) {
        return Err(err);
    }
    let limit = byte_budget(state);
    if write!(Measure::new(limit, false), "{value}").is_err() {
        return Err(too_big("string", limit));
    }
    minijinja::filters::string(state, value)
}

/// `pprint`: minijinja's, once the text is known to fit the budget.
pub(super) fn pprint(state: &State<'_, '_>, value: &Value) -> Result<String, Error> {
    if let Some(err) = missing_error(value) {
        return Err(err);
    }
    let limit = byte_budget(state);
    if write!(Measure::new(limit, false), "{value:#?}").is_err() {
        return Err(too_big("pprint", limit));
    }
    Ok(minijinja::filters::pprint(value))
}
