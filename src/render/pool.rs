//! The render pool: renders that did not fit their inline attempt (see
//! [`super::inline`]) run on tokio's blocking pool, at most
//! [`max_concurrent_renders`] at once, in turns shared fairly between
//! callers.
//!
//! # Fair turns
//! - A caller (a stdio client, a legacy session, an OAuth subject: see
//!   [`Caller`]) holds at most all slots but one, so a second caller always
//!   finds a slot that the first cannot take.
//! - When a slot frees, it goes to the next caller in turn that is waiting
//!   and may hold one more (round robin over callers, first come first
//!   served within a caller): a caller with a hundred renders queued delays
//!   another caller by at most one render per slot, not a hundred.
//! - A render that waits longer than [`RENDER_WAIT`] for its turn fails
//!   with an error saying so; a waiting request that is dropped leaves the
//!   queue.
//!
//! Each render is bounded by its fuel (see the parent module), so a turn
//! ends within a bounded time.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

use super::RenderError;

/// How long a render may wait for its turn on the pool before it fails.
pub const RENDER_WAIT: Duration = Duration::from_secs(10);

/// Renders that may run on the pool at once: one per core, at least 2 (so
/// that one caller never holds them all).
pub fn max_concurrent_renders() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get).max(2)
}

/// Who a render is for: renders of one caller wait for their turns together.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Caller(Arc<str>);

impl Caller {
    /// The caller `name` (an owner: "session:…", an OAuth subject, "stdio").
    pub fn new(name: impl Into<Arc<str>>) -> Caller {
        Caller(name.into())
    }
}

/// The process's render pool.
pub(super) static POOL: LazyLock<Arc<Pool>> = LazyLock::new(|| Arc::new(Pool::new(max_concurrent_renders())));

/// Slots and the callers waiting for them.
pub(super) struct Pool {
    slots: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Slots in use.
    busy: usize,
    /// Callers that hold a slot or wait for one.
    callers: HashMap<Caller, Turns>,
    /// Callers that wait, in the order they get their next slot.
    order: VecDeque<Caller>,
}

/// One caller's slots and waiting renders.
#[derive(Default)]
struct Turns {
    held: usize,
    waiting: VecDeque<oneshot::Sender<Slot>>,
}

/// A slot of the pool, given back when dropped.
pub(super) struct Slot {
    pool: Arc<Pool>,
    caller: Option<Caller>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(caller) = self.caller.take() {
            self.pool.release(caller);
        }
    }
}

impl Pool {
    fn new(slots: usize) -> Pool {
        Pool { slots, state: Mutex::new(State::default()) }
    }

    /// The most slots one caller may hold.
    fn per_caller(&self) -> usize {
        self.slots.saturating_sub(1).max(1)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    /// Waits for `caller`'s turn (at most [`RENDER_WAIT`]): a slot.
    pub(super) async fn turn(self: &Arc<Self>, caller: Caller) -> Result<Slot, RenderError> {
        let receiver = {
            let mut guard = self.lock();
            let state = &mut *guard;
            let turns = state.callers.entry(caller.clone()).or_default();
            if turns.waiting.is_empty() && turns.held < self.per_caller() && state.busy < self.slots {
                turns.held += 1;
                state.busy += 1;
                return Ok(Slot { pool: Arc::clone(self), caller: Some(caller) });
            }
            let (sender, receiver) = oneshot::channel();
            turns.waiting.push_back(sender);
            if !state.order.contains(&caller) {
                state.order.push_back(caller);
            }
            receiver
        };
        match tokio::time::timeout(RENDER_WAIT, receiver).await {
            Ok(Ok(slot)) => Ok(slot),
            // The sender is dropped only with the pool.
            Ok(Err(_)) => Err(RenderError::Template("rendering has shut down".to_owned())),
            Err(_) => Err(RenderError::Template(format!(
                "the server is busy rendering for other requests: this one waited {} s for a turn and was given up; try again",
                RENDER_WAIT.as_secs()
            ))),
        }
    }

    /// Gives `caller`'s slot back, and hands free slots to the callers next in turn.
    fn release(self: &Arc<Self>, caller: Caller) {
        let mut guard = self.lock();
        let state = &mut *guard;
        state.busy -= 1;
        if let Some(turns) = state.callers.get_mut(&caller) {
            turns.held -= 1;
        }
        self.hand_out(state);
        if state.callers.get(&caller).is_some_and(|turns| turns.held == 0 && turns.waiting.is_empty()) {
            state.callers.remove(&caller);
        }
    }

    /// Gives free slots to waiting callers, round robin.
    fn hand_out(self: &Arc<Self>, state: &mut State) {
        let mut passed = 0;
        while state.busy < self.slots && passed < state.order.len() {
            let Some(caller) = state.order.pop_front() else { break };
            let per_caller = self.per_caller();
            let Some(turns) = state.callers.get_mut(&caller) else { continue };
            if turns.held >= per_caller {
                // At its share: it waits for one of its own slots.
                state.order.push_back(caller);
                passed += 1;
                continue;
            }
            // The first waiter that is still there (a dropped request's is not).
            while let Some(waiter) = turns.waiting.pop_front() {
                let slot = Slot { pool: Arc::clone(self), caller: Some(caller.clone()) };
                turns.held += 1;
                state.busy += 1;
                match waiter.send(slot) {
                    Ok(()) => break,
                    Err(mut slot) => {
                        // Nobody waits there any more: undo without releasing through the lock we hold.
                        slot.caller = None;
                        turns.held -= 1;
                        state.busy -= 1;
                    }
                }
            }
            if turns.waiting.is_empty() {
                if turns.held == 0 {
                    state.callers.remove(&caller);
                }
            } else {
                state.order.push_back(caller);
            }
            passed = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(name: &str) -> Caller {
        Caller::new(name)
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn one_caller_never_holds_every_slot() {
        let pool = Arc::new(Pool::new(2));
        let first = pool.turn(caller("a")).await.unwrap();
        // a's second render waits although a slot is free: it is b's.
        let waiting = tokio::spawn({
            let pool = Arc::clone(&pool);
            async move { pool.turn(caller("a")).await.map(drop) }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        let second = pool.turn(caller("b")).await.unwrap();
        drop(first);
        waiting.await.unwrap().unwrap();
        drop(second);
        assert_eq!(pool.lock().busy, 0);
        assert!(pool.lock().callers.is_empty());
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn freed_slots_go_round_robin_between_callers() {
        let pool = Arc::new(Pool::new(2));
        let a = pool.turn(caller("a")).await.unwrap();
        let b = pool.turn(caller("b")).await.unwrap();
        let served = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        // a queues three renders, then c one: c's comes second, not fourth.
        for name in ["a", "a", "a", "c"] {
            let (pool, served) = (Arc::clone(&pool), Arc::clone(&served));
            waiters.push(tokio::spawn(async move {
                let slot = pool.turn(caller(name)).await.unwrap();
                served.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_millis(10)).await;
                drop(slot);
            }));
            tokio::task::yield_now().await;
        }
        drop(a);
        drop(b);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*served.lock().unwrap(), ["a", "c", "a", "a"]);
        assert!(pool.lock().callers.is_empty());
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_render_that_waits_too_long_fails_and_a_dropped_one_leaves_the_queue() {
        let pool = Arc::new(Pool::new(2));
        let a = pool.turn(caller("a")).await.unwrap();
        let b = pool.turn(caller("b")).await.unwrap();
        // Dropped while waiting.
        let dropped = tokio::spawn({
            let pool = Arc::clone(&pool);
            async move { pool.turn(caller("c")).await.map(drop) }
        });
        tokio::task::yield_now().await;
        dropped.abort();
        let err = pool.turn(caller("d")).await.err().unwrap();
        assert!(err.to_string().contains("waited 10 s for a turn"), "{err}");
        drop(a);
        drop(b);
        assert_eq!(pool.lock().busy, 0);
        assert!(pool.lock().callers.is_empty(), "{:?}", pool.lock().callers.keys().collect::<Vec<_>>());
    }
}
