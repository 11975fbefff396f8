//! `rateLimit:` — how many tool calls one caller may make in a while, for
//! the whole server and per tool: the spec and its check. (The counting is
//! `crate::rate_limit`'s.)

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::duration::{DurationSpec, positive_at_most};

/// How many tool calls one caller (an OAuth subject, a session, a stdio
/// client) may make in a while; past it a call is refused (-32000 with
/// `retryAfterMs`; HTTP 429 with `Retry-After`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "rate limit")]
pub struct RateLimitSpec {
    /// How many calls, at least 1; that many may come at once.
    pub calls: u32,
    /// In how long, e.g. `1m`, `1h`; at most `24h`.
    pub per: DurationSpec,
}

/// The longest `per`.
pub const MAX_PER: Duration = Duration::from_secs(24 * 60 * 60);

/// A checked `rateLimit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Calls allowed per `per` (and at once).
    pub calls: u32,
    /// The window.
    pub per: Duration,
}

impl RateLimitSpec {
    /// The limit, or what is wrong: the key at fault (`calls`, `per`) and why.
    pub fn check(&self) -> Result<RateLimit, (&'static str, String)> {
        if self.calls == 0 {
            return Err(("calls", "`rateLimit.calls` of 0 would refuse every call".to_owned()));
        }
        let per = positive_at_most(&self.per, MAX_PER, "`rateLimit.per`", "make every call too early")
            .map_err(|message| ("per", message))?;
        Ok(RateLimit { calls: self.calls, per })
    }
}
