//! How long a `sleep` step waits: the one reading of a duration shared by
//! loading (a fixed `sleep` is checked once) and calling (a templated `sleep`
//! is read on each call), so both accept and refuse the same text.

use std::time::Duration;

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
    sleep_of(super::millis_of(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_units_and_refuses_long_sleeps() {
        assert_eq!(parse_sleep("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_sleep("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_sleep("10m"), Ok(MAX_SLEEP));
        assert_eq!(parse_sleep("11m"), Err("a sleep of 660000 ms is longer than 10 minutes".to_owned()));
        assert!(parse_sleep("soon").is_err());
    }
}
