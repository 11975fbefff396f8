//! Counting work in flight (tool calls, HTTP replies being written) and
//! waiting until there is none: shutdown waits on these before it closes
//! sessions.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// A count of work in flight.
#[derive(Default)]
pub struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

/// Counts one piece of work as in flight until dropped.
pub struct Guard(Arc<InFlight>);

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl InFlight {
    /// Counts one more until the guard is dropped.
    pub fn start(self: &Arc<Self>) -> Guard {
        self.count.fetch_add(1, Ordering::AcqRel);
        Guard(self.clone())
    }

    /// How many are in flight now.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Waits until none is in flight.
    pub async fn idle(&self) {
        loop {
            // Created before the check: a `notify_waiters` after it still wakes it.
            let idle = self.idle.notified();
            if self.count() == 0 {
                return;
            }
            idle.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_waits_for_every_guard() {
        let in_flight = Arc::new(InFlight::default());
        let first = in_flight.start();
        let second = in_flight.start();
        assert_eq!(in_flight.count(), 2);
        drop(first);
        let waiting = tokio::spawn({
            let in_flight = in_flight.clone();
            async move { in_flight.idle().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(second);
        waiting.await.unwrap();
        assert_eq!(in_flight.count(), 0);
    }
}
