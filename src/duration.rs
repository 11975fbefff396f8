//! Durations as a catalog writes them (`250ms`, `5s`, `1.5m`, `1h`, or a
//! number of milliseconds), as carte prints them back, the longest a
//! `sleep` step may wait, and the waits of a backoff ([`doubling`]).
//!
//! A leaf module: the catalog format, the steps and the effects all read
//! durations, and none of them owns the others.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

/// The wait before attempt `attempt + 1` of something tried again: `first`
/// after the first attempt, doubled after each one, at most `most`.
pub fn doubling(first: Duration, attempt: u32, most: Duration) -> Duration {
    first.saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(most)
}

/// A duration: milliseconds, or a number with a unit (`250ms`, `5s`, `1m`, `1h`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(title = "duration")]
pub enum DurationSpec {
    /// Milliseconds.
    Millis(u64),
    /// `250ms`, `5s`, `1m`, `1h`.
    Text(String),
}

impl DurationSpec {
    /// Its milliseconds, or why it is not a duration.
    pub fn millis(&self) -> Result<u64, String> {
        match self {
            DurationSpec::Millis(ms) => Ok(*ms),
            DurationSpec::Text(text) => millis_of(text),
        }
    }
}

/// Milliseconds of `250ms`, `2s`, `1.5m`, `1h` (no unit: milliseconds).
pub fn millis_of(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len()));
    let number: f64 = number.parse().map_err(|_| format!("`{text}` is not a duration"))?;
    let factor = match unit.trim() {
        "ms" | "" => 1.0,
        "s" => 1000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        other => return Err(format!("unknown unit `{other}` in `{text}`")),
    };
    Ok((number * factor).round() as u64)
}

/// `5s`, `250ms`, `1m`, `1h` (the shortest exact form).
pub fn show_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    match ms {
        ms if ms % 3_600_000 == 0 && ms > 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 && ms > 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

/// Reads a duration that bounds work (a `timeout`, a retry's `backoff`):
/// more than zero, at most `max`. Errors name it as `what` (`a timeout`)
/// and say what 0 would do (`zero`: `stop every statement`).
pub fn positive_at_most(spec: &DurationSpec, max: Duration, what: &str, zero: &str) -> Result<Duration, String> {
    let duration = Duration::from_millis(spec.millis()?);
    if duration.is_zero() {
        return Err(format!("{what} of 0 would {zero}"));
    }
    if duration > max {
        return Err(format!("{what} of {} is longer than {}", show_duration(duration), show_duration(max)));
    }
    Ok(duration)
}

/// The longest a `sleep` step waits.
pub const MAX_SLEEP: Duration = Duration::from_secs(10 * 60);

/// A `sleep` of `millis` milliseconds, if it is at most [`MAX_SLEEP`].
pub fn sleep_of(millis: u64) -> Result<Duration, String> {
    let duration = Duration::from_millis(millis);
    if duration > MAX_SLEEP {
        return Err(format!("a sleep of {millis} ms is longer than 10 minutes"));
    }
    Ok(duration)
}

/// A `sleep` as written or rendered: `250ms`, `2s`, `1.5m`, or a number of
/// milliseconds; at most [`MAX_SLEEP`].
pub fn parse_sleep(text: &str) -> Result<Duration, String> {
    sleep_of(millis_of(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_show_in_their_shortest_form() {
        assert_eq!(show_duration(Duration::from_secs(5)), "5s");
        assert_eq!(show_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(show_duration(Duration::from_secs(120)), "2m");
        assert_eq!(show_duration(Duration::from_secs(3600)), "1h");
    }

    #[test]
    fn durations_read_with_and_without_units() {
        assert_eq!(millis_of("250ms"), Ok(250));
        assert_eq!(millis_of(" 2s "), Ok(2000));
        assert_eq!(millis_of("1.5m"), Ok(90_000));
        assert_eq!(millis_of("1h"), Ok(3_600_000));
        assert_eq!(millis_of("40"), Ok(40));
        assert_eq!(DurationSpec::Text("3s".to_owned()).millis(), Ok(3000));
        assert!(millis_of("2 fortnights").unwrap_err().contains("unknown unit"));
        assert!(millis_of("soon").unwrap_err().contains("not a duration"));
    }
}
