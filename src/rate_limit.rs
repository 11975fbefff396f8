//! Counting tool calls against the catalog's `rateLimit`s, per caller: the
//! generic cell rate algorithm (one instant per caller and limit: when its
//! next call would be on time), so `calls` may come at once and then one
//! every `per / calls`. A call counts against every limit that applies to it
//! (the server's and its tool's) or none: one refused by either is not
//! counted. Kept across reloads; bounded in callers (see [`MAX_CALLERS`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::catalog::rate_limit::RateLimit;
use crate::sync::lock;

/// Callers (times limits) remembered at most. Past it, those whose calls
/// are all back on time are forgotten (they are as if new); if that is not
/// enough, the oldest half goes.
pub const MAX_CALLERS: usize = 100_000;

/// Which limit a count is for: the server's, or a tool's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Scope {
    Server,
    Tool(String),
}

/// The calls of every caller, against every limit.
#[derive(Default)]
pub struct Limiter {
    /// (caller, scope) → when the next call is on time (GCRA's "theoretical arrival time").
    due: Mutex<HashMap<(String, Scope), Instant>>,
}

/// A call refused: when it would be allowed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// How long to wait before calling again.
    pub retry_after: Duration,
    /// Whether the tool's own limit refused it (else the server's).
    pub by_tool: bool,
}

impl Limiter {
    /// Counts one call of `tool` by `caller` against `server`'s limit and
    /// `own` (the tool's), at `now`; refused if either is spent.
    pub fn take(
        &self,
        caller: &str,
        (tool, own): (&str, Option<RateLimit>),
        server: Option<RateLimit>,
        now: Instant,
    ) -> Result<(), Refused> {
        if own.is_none() && server.is_none() {
            return Ok(());
        }
        let mut due = lock(&self.due);
        let limits = [(Scope::Server, server), (Scope::Tool(tool.to_owned()), own)];
        let mut next = Vec::with_capacity(2);
        for (scope, limit) in limits {
            let Some(limit) = limit else { continue };
            let key = (caller.to_owned(), scope);
            let interval = limit.per / limit.calls;
            // `calls` at once: a call may come up to `per - interval` before it is due.
            let tolerance = limit.per.saturating_sub(interval);
            let on_time = due.get(&key).copied().unwrap_or(now).max(now);
            if on_time.duration_since(now) > tolerance {
                let retry_after = on_time.duration_since(now) - tolerance;
                return Err(Refused { retry_after, by_tool: matches!(key.1, Scope::Tool(_)) });
            }
            next.push((key, on_time + interval));
        }
        if due.len() + next.len() > MAX_CALLERS {
            forget(&mut due, now);
        }
        due.extend(next);
        Ok(())
    }
}

/// Drops the counts that are back on time; then, if still full, the half
/// due soonest.
fn forget(due: &mut HashMap<(String, Scope), Instant>, now: Instant) {
    due.retain(|_, on_time| *on_time > now);
    if due.len() >= MAX_CALLERS / 2 {
        let mut times: Vec<Instant> = due.values().copied().collect();
        let middle = times.len() / 2;
        let (_, cut, _) = times.select_nth_unstable(middle);
        let cut = *cut;
        due.retain(|_, on_time| *on_time > cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(calls: u32, per_ms: u64) -> Option<RateLimit> {
        Some(RateLimit { calls, per: Duration::from_millis(per_ms) })
    }

    #[test]
    fn a_burst_of_calls_then_one_per_interval() {
        let limiter = Limiter::default();
        let start = Instant::now();
        for _ in 0..3 {
            limiter.take("a", ("t", None), limit(3, 3000), start).unwrap();
        }
        let refused = limiter.take("a", ("t", None), limit(3, 3000), start).unwrap_err();
        assert_eq!(refused, Refused { retry_after: Duration::from_secs(1), by_tool: false });
        // Another caller has its own count.
        limiter.take("b", ("t", None), limit(3, 3000), start).unwrap();
        // One interval later, one more call.
        let later = start + Duration::from_secs(1);
        limiter.take("a", ("t", None), limit(3, 3000), later).unwrap();
        assert!(limiter.take("a", ("t", None), limit(3, 3000), later).is_err());
    }

    #[test]
    fn a_tools_limit_and_the_servers_count_together_or_not_at_all() {
        let limiter = Limiter::default();
        let now = Instant::now();
        limiter.take("a", ("slow", limit(1, 60_000)), limit(10, 60_000), now).unwrap();
        let refused = limiter.take("a", ("slow", limit(1, 60_000)), limit(10, 60_000), now).unwrap_err();
        assert!(refused.by_tool);
        assert_eq!(refused.retry_after, Duration::from_secs(60));
        // The refused call did not count against the server's limit: 9 more other calls fit.
        for _ in 0..9 {
            limiter.take("a", ("fast", None), limit(10, 60_000), now).unwrap();
        }
        assert!(limiter.take("a", ("fast", None), limit(10, 60_000), now).is_err());
    }

    #[test]
    fn callers_are_bounded() {
        let limiter = Limiter::default();
        let now = Instant::now();
        for n in 0..(MAX_CALLERS + 10) {
            limiter.take(&n.to_string(), ("t", None), limit(5, 60_000), now).unwrap();
        }
        assert!(lock(&limiter.due).len() <= MAX_CALLERS);
    }
}
