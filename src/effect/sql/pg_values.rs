//! JSON ↔ PostgreSQL values. Arguments are encoded for the type PostgreSQL
//! inferred for each parameter when the statement was prepared (a value that
//! does not fit is an error naming the parameter, before anything is sent);
//! columns are decoded by their type: numbers stay numbers (`numeric` is a
//! JSON number when a double holds it exactly, else its exact digits as a
//! string), timestamps are RFC 3339 strings, `json`/`jsonb` are JSON, arrays
//! are arrays, `NULL` is `null`; a type carte does not know is read as text
//! when its bytes are text (enums, `citext`) and otherwise shown as a short
//! note asking for a `::text` cast.

use std::error::Error;

use base64::Engine as _;
use bytes::{BufMut, BytesMut};
use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, SecondsFormat, Utc};
use serde_json::Value;
use tokio_postgres::types::{FromSql, IsNull, Kind, ToSql, Type, to_sql_checked};

type BoxError = Box<dyn Error + Sync + Send>;

/// A parameter's value, encoded in PostgreSQL's binary format for its type.
#[derive(Debug)]
pub struct Encoded(Option<BytesMut>);

impl ToSql for Encoded {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        match &self.0 {
            None => Ok(IsNull::Yes),
            Some(bytes) => {
                out.extend_from_slice(bytes);
                Ok(IsNull::No)
            }
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// Encodes the argument for `:name` as a value of `ty`; the error says why
/// it does not fit, naming the parameter.
pub fn encode(name: &str, value: Option<&Value>, ty: &Type) -> Result<Encoded, String> {
    let Some(value) = value.filter(|v| !v.is_null()) else { return Ok(Encoded(None)) };
    let mut out = BytesMut::new();
    match Arg(value).to_sql(ty, &mut out) {
        Ok(IsNull::Yes) => Ok(Encoded(None)),
        Ok(IsNull::No) => Ok(Encoded(Some(out))),
        Err(err) => Err(format!("argument `{name}` cannot be used as PostgreSQL type `{}`: {err}", ty.name())),
    }
}

/// A JSON value being encoded for a PostgreSQL type.
#[derive(Debug)]
struct Arg<'a>(&'a Value);

impl ToSql for Arg<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        let value = self.0;
        if value.is_null() {
            return Ok(IsNull::Yes);
        }
        match ty.kind() {
            Kind::Array(_) => {
                let Value::Array(items) = value else { return Err(expected("an array", value)) };
                let items: Vec<Arg<'_>> = items.iter().map(Arg).collect();
                return items.to_sql(ty, out);
            }
            Kind::Domain(inner) => return self.to_sql(inner, out),
            Kind::Enum(_) => return text(value)?.to_sql(&Type::TEXT, out),
            _ => {}
        }
        match *ty {
            Type::BOOL => match value {
                Value::Bool(b) => b.to_sql(ty, out),
                _ => Err(expected("true or false", value)),
            },
            Type::INT2 => i16::try_from(integer(value)?).map_err(|_| out_of_range("int2"))?.to_sql(ty, out),
            Type::INT4 => i32::try_from(integer(value)?).map_err(|_| out_of_range("int4"))?.to_sql(ty, out),
            Type::INT8 => integer(value)?.to_sql(ty, out),
            Type::OID => u32::try_from(integer(value)?).map_err(|_| out_of_range("oid"))?.to_sql(ty, out),
            Type::FLOAT4 => {
                let f = float(value)?;
                #[allow(clippy::cast_possible_truncation)]
                (f as f32).to_sql(ty, out)
            }
            Type::FLOAT8 => float(value)?.to_sql(ty, out),
            Type::NUMERIC => {
                let digits = match value {
                    Value::Number(n) => n.to_string(),
                    Value::String(s) => s.trim().to_owned(),
                    _ => return Err(expected("a number", value)),
                };
                numeric_to_sql(&digits, out)?;
                Ok(IsNull::No)
            }
            Type::JSON | Type::JSONB => value.to_sql(ty, out),
            Type::TIMESTAMPTZ => DateTime::parse_from_rfc3339(string(value)?)
                .map_err(|err| format!("expected an RFC 3339 timestamp such as `2026-12-03T10:00:00Z` ({err})"))?
                .with_timezone(&Utc)
                .to_sql(ty, out),
            Type::TIMESTAMP => {
                let s = string(value)?;
                let at = NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
                    .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f"))
                    .map_err(|err| format!("expected a timestamp such as `2026-12-03T10:00:00` ({err})"))?;
                at.to_sql(ty, out)
            }
            Type::DATE => NaiveDate::parse_from_str(string(value)?, "%Y-%m-%d")
                .map_err(|err| format!("expected a date such as `2026-12-03` ({err})"))?
                .to_sql(ty, out),
            Type::TIME => NaiveTime::parse_from_str(string(value)?, "%H:%M:%S%.f")
                .map_err(|err| format!("expected a time such as `10:30:00` ({err})"))?
                .to_sql(ty, out),
            Type::UUID => {
                out.put_slice(&parse_uuid(string(value)?)?);
                Ok(IsNull::No)
            }
            Type::BYTEA => base64::engine::general_purpose::STANDARD
                .decode(string(value)?)
                .map_err(|err| format!("expected base64 ({err})"))?
                .to_sql(ty, out),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                text(value)?.to_sql(&Type::TEXT, out)
            }
            _ => Err(format!(
                "carte cannot send this type yet; cast the parameter in the statement, e.g. `:name::text::{}`",
                ty.name()
            )
            .into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn expected(what: &str, value: &Value) -> BoxError {
    format!("expected {what}, got {}", kind_of(value)).into()
}

fn out_of_range(ty: &str) -> BoxError {
    format!("the number does not fit in {ty}").into()
}

fn integer(value: &Value) -> Result<i64, BoxError> {
    match value {
        Value::Number(n) => n.as_i64().ok_or_else(|| "expected a whole number".into()),
        _ => Err(expected("a whole number", value)),
    }
}

fn float(value: &Value) -> Result<f64, BoxError> {
    match value {
        Value::Number(n) => n.as_f64().ok_or_else(|| "expected a number".into()),
        _ => Err(expected("a number", value)),
    }
}

fn string(value: &Value) -> Result<&str, BoxError> {
    value.as_str().ok_or_else(|| expected("a string", value))
}

/// A string as itself; a number or boolean as its JSON text (as SQLite does).
fn text(value: &Value) -> Result<String, BoxError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(_) | Value::Bool(_) => Ok(value.to_string()),
        _ => Err(expected("a string", value)),
    }
}

fn parse_uuid(s: &str) -> Result<[u8; 16], BoxError> {
    let hex: Vec<u8> = s.bytes().filter(|&b| b != b'-').collect();
    let bad = || -> BoxError { "expected a UUID such as `123e4567-e89b-12d3-a456-426614174000`".into() };
    if hex.len() != 32 {
        return Err(bad());
    }
    let mut out = [0u8; 16];
    for (idx, pair) in hex.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).map_err(|_| bad())?;
        out[idx] = u8::from_str_radix(text, 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// Writes a decimal (`-12.50`, `1e3`) in `numeric`'s binary form: base-10000
/// digits, the weight of the first, the sign and the scale.
fn numeric_to_sql(text: &str, out: &mut BytesMut) -> Result<(), BoxError> {
    let bad = || -> BoxError { format!("expected a decimal number, got `{}`", cut(text)).into() };
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(idx) => (&rest[..idx], rest[idx + 1..].parse::<i32>().map_err(|_| bad())?),
        None => (rest, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (whole.is_empty() && fraction.is_empty())
        || !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit())
        || exponent.unsigned_abs() > 1000
    {
        return Err(bad());
    }
    // digits × 10^-scale
    let mut digits: Vec<u8> = whole.bytes().chain(fraction.bytes()).map(|b| b - b'0').collect();
    let mut scale = i32::try_from(fraction.len()).map_err(|_| bad())? - exponent;
    if scale < 0 {
        digits.extend(std::iter::repeat_n(0, scale.unsigned_abs() as usize));
        scale = 0;
    }
    let scale = usize::try_from(scale).map_err(|_| bad())?;
    // Integer part and fraction part as decimal digit strings.
    let split = digits.len().saturating_sub(scale);
    let mut int_digits: Vec<u8> = digits[..split].to_vec();
    let mut frac_digits: Vec<u8> = std::iter::repeat_n(0, scale.saturating_sub(digits.len())).collect();
    frac_digits.extend_from_slice(&digits[split..]);
    while int_digits.first() == Some(&0) {
        int_digits.remove(0);
    }
    // Group into base 10000: the integer part from the right, the fraction from the left.
    let pad_left = (4 - int_digits.len() % 4) % 4;
    let mut int_full = vec![0u8; pad_left];
    int_full.extend_from_slice(&int_digits);
    let mut groups: Vec<i16> = int_full.chunks(4).map(group).collect();
    let int_groups = groups.len();
    let mut frac_full = frac_digits.clone();
    frac_full.extend(std::iter::repeat_n(0, (4 - frac_full.len() % 4) % 4));
    groups.extend(frac_full.chunks(4).map(group));
    let mut weight = i16::try_from(int_groups).map_err(|_| bad())? - 1;
    // Strip leading and trailing zero groups.
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    out.put_i16(i16::try_from(groups.len()).map_err(|_| bad())?);
    out.put_i16(weight);
    out.put_u16(if negative && !groups.is_empty() { 0x4000 } else { 0 });
    out.put_u16(u16::try_from(frac_digits.len()).map_err(|_| bad())?);
    for g in groups {
        out.put_i16(g);
    }
    Ok(())
}

fn group(chunk: &[u8]) -> i16 {
    chunk.iter().fold(0i16, |acc, &d| acc * 10 + i16::from(d))
}

fn cut(text: &str) -> String {
    text.chars().take(40).collect()
}

/// `numeric`'s binary form as its exact decimal text (`NaN`, `Infinity` too).
fn numeric_from_sql(raw: &[u8]) -> Result<String, BoxError> {
    let read = |idx: usize| -> Result<u16, BoxError> {
        raw.get(idx..idx + 2).map(|b| u16::from_be_bytes([b[0], b[1]])).ok_or_else(|| "short numeric".into())
    };
    let ndigits = usize::from(read(0)?);
    #[allow(clippy::cast_possible_wrap)]
    let weight = read(2)? as i16;
    let sign = read(4)?;
    let dscale = usize::from(read(6)?);
    match sign {
        0xC000 => return Ok("NaN".to_owned()),
        0xD000 => return Ok("Infinity".to_owned()),
        0xF000 => return Ok("-Infinity".to_owned()),
        _ => {}
    }
    let digits: Vec<u16> = (0..ndigits).map(|i| read(8 + 2 * i)).collect::<Result<_, _>>()?;
    let mut int_part = String::new();
    let mut frac_part = String::new();
    let weight = i32::from(weight);
    for (idx, d) in digits.iter().enumerate() {
        let power = weight - i32::try_from(idx).unwrap_or(i32::MAX);
        if power >= 0 {
            int_part.push_str(&format!("{d:04}"));
        } else {
            if frac_part.is_empty() {
                // Zero groups between the point and the first digit.
                for _ in 0..(-power - 1) {
                    frac_part.push_str("0000");
                }
            }
            frac_part.push_str(&format!("{d:04}"));
        }
    }
    // Integer groups left out at the end (trailing zero groups).
    let last_power = weight - i32::try_from(ndigits).unwrap_or(i32::MAX) + 1;
    if weight >= 0 && last_power > 0 {
        for _ in 0..last_power {
            int_part.push_str("0000");
        }
    }
    let int_part = int_part.trim_start_matches('0');
    let int_part = if int_part.is_empty() { "0" } else { int_part };
    let mut frac_part: String = frac_part.chars().take(dscale).collect();
    while frac_part.len() < dscale {
        frac_part.push('0');
    }
    let sign = if sign == 0x4000 { "-" } else { "" };
    Ok(if dscale > 0 { format!("{sign}{int_part}.{frac_part}") } else { format!("{sign}{int_part}") })
}

/// A `numeric`'s text as a JSON number when that number is exactly the
/// same value (`12.50` → `12.5`), else as the exact digits, a string.
fn numeric_json(text: &str) -> Value {
    if let Ok(i) = text.parse::<i64>() {
        return Value::from(i);
    }
    if let Ok(f) = text.parse::<f64>()
        && f.is_finite()
        && same_decimal(&f.to_string(), text)
        && let Some(n) = serde_json::Number::from_f64(f)
    {
        return Value::Number(n);
    }
    Value::String(text.to_owned())
}

/// Whether two plain decimals (no exponent) are the same value.
fn same_decimal(a: &str, b: &str) -> bool {
    let canon = |s: &str| -> String {
        let (neg, s) = s.strip_prefix('-').map_or((false, s), |r| (true, r));
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        let int = int.trim_start_matches('0');
        let frac = frac.trim_end_matches('0');
        let body = format!("{}.{frac}", if int.is_empty() { "0" } else { int });
        if neg && body != "0." { format!("-{body}") } else { body }
    };
    !a.contains(['e', 'E']) && canon(a) == canon(b)
}

/// A column's value as JSON, decoded by its type.
#[derive(Debug)]
pub struct Cell(pub Value);

impl<'a> FromSql<'a> for Cell {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        let value = match ty.kind() {
            Kind::Array(_) => {
                let items = Vec::<Cell>::from_sql(ty, raw)?;
                Value::Array(items.into_iter().map(|c| c.0).collect())
            }
            Kind::Domain(inner) => return Cell::from_sql(inner, raw),
            Kind::Enum(_) => Value::String(String::from_utf8_lossy(raw).into_owned()),
            _ => match *ty {
                Type::BOOL => Value::Bool(bool::from_sql(ty, raw)?),
                Type::INT2 => Value::from(i16::from_sql(ty, raw)?),
                Type::INT4 => Value::from(i32::from_sql(ty, raw)?),
                Type::INT8 => Value::from(i64::from_sql(ty, raw)?),
                Type::OID => Value::from(u32::from_sql(ty, raw)?),
                Type::FLOAT4 => float_json(f64::from(f32::from_sql(ty, raw)?)),
                Type::FLOAT8 => float_json(f64::from_sql(ty, raw)?),
                Type::NUMERIC => numeric_json(&numeric_from_sql(raw)?),
                Type::JSON | Type::JSONB => Value::from_sql(ty, raw)?,
                Type::TIMESTAMPTZ => {
                    Value::String(DateTime::<Utc>::from_sql(ty, raw)?.to_rfc3339_opts(SecondsFormat::AutoSi, true))
                }
                Type::TIMESTAMP => {
                    Value::String(NaiveDateTime::from_sql(ty, raw)?.format("%Y-%m-%dT%H:%M:%S%.f").to_string())
                }
                Type::DATE => Value::String(NaiveDate::from_sql(ty, raw)?.format("%Y-%m-%d").to_string()),
                Type::TIME => Value::String(NaiveTime::from_sql(ty, raw)?.format("%H:%M:%S%.f").to_string()),
                Type::UUID => Value::String(uuid_text(raw)?),
                Type::BYTEA => Value::String(base64::engine::general_purpose::STANDARD.encode(raw)),
                Type::CHAR => Value::String(char::from(u8::from_be_bytes([*raw.first().unwrap_or(&0)])).to_string()),
                _ => match std::str::from_utf8(raw) {
                    Ok(text) if !text.contains('\0') => Value::String(text.to_owned()),
                    _ => {
                        Value::String(format!("[carte cannot show type `{}`: cast the column with ::text]", ty.name()))
                    }
                },
            },
        };
        Ok(Cell(value))
    }

    fn from_sql_null(_: &Type) -> Result<Self, BoxError> {
        Ok(Cell(Value::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

fn float_json(f: f64) -> Value {
    serde_json::Number::from_f64(f).map_or_else(|| Value::String(f.to_string()), Value::Number)
}

fn uuid_text(raw: &[u8]) -> Result<String, BoxError> {
    if raw.len() != 16 {
        return Err("a uuid is 16 bytes".into());
    }
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        let mut out = BytesMut::new();
        numeric_to_sql(text, &mut out).unwrap();
        numeric_from_sql(&out).unwrap()
    }

    #[test]
    fn numerics_keep_every_digit() {
        for (written, read) in [
            ("0", "0"),
            ("12.50", "12.50"),
            ("-12.5", "-12.5"),
            ("10000", "10000"),
            ("100000000", "100000000"),
            ("0.0001", "0.0001"),
            ("0.00001234", "0.00001234"),
            ("123456789012345678901234567890.123456789", "123456789012345678901234567890.123456789"),
            ("1e3", "1000"),
            ("1.5e-3", "0.0015"),
            ("-0.0", "0.0"),
        ] {
            assert_eq!(round_trip(written), read, "{written}");
        }
        assert!(numeric_to_sql("12a", &mut BytesMut::new()).is_err());
        assert!(numeric_to_sql("", &mut BytesMut::new()).is_err());
        assert!(numeric_to_sql("1e999999", &mut BytesMut::new()).is_err());
    }

    #[test]
    fn numerics_are_numbers_only_when_exact() {
        assert_eq!(numeric_json("12.50"), serde_json::json!(12.5));
        assert_eq!(numeric_json("42"), serde_json::json!(42));
        assert_eq!(numeric_json("0.1"), serde_json::json!(0.1));
        assert_eq!(numeric_json("12345678901234567890.12"), serde_json::json!("12345678901234567890.12"));
        assert_eq!(numeric_json("NaN"), serde_json::json!("NaN"));
    }

    #[test]
    fn a_value_that_does_not_fit_names_its_parameter() {
        let err = encode("guests", Some(&serde_json::json!(70000)), &Type::INT2).unwrap_err();
        assert_eq!(err, "argument `guests` cannot be used as PostgreSQL type `int2`: the number does not fit in int2");
        let err = encode("at", Some(&serde_json::json!("tomorrow")), &Type::TIMESTAMPTZ).unwrap_err();
        assert!(
            err.starts_with("argument `at` cannot be used as PostgreSQL type `timestamptz`: expected an RFC 3339"),
            "{err}"
        );
        let err = encode("ids", Some(&serde_json::json!("1")), &Type::INT4_ARRAY).unwrap_err();
        assert!(err.contains("expected an array, got a string"), "{err}");
        assert!(encode("ids", Some(&serde_json::json!([1, null, 3])), &Type::INT4_ARRAY).is_ok());
        assert!(encode("id", None, &Type::INT4).unwrap().0.is_none());
    }

    #[test]
    fn uuids_read_and_print() {
        let raw = parse_uuid("123e4567-e89b-12d3-a456-426614174000").unwrap();
        assert_eq!(uuid_text(&raw).unwrap(), "123e4567-e89b-12d3-a456-426614174000");
        assert!(parse_uuid("123").is_err());
    }
}
