//! Where tasks are kept: [`TaskStore`], plain JSON-able [`TaskRecord`]s
//! bound to an owner behind boxed futures (so a database can stand behind
//! it), and [`MemoryStore`], which keeps them in this process, bounded per
//! owner and in total, and drops a task one ttl after it settled.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::run::steps::{self, Question};

/// A future a [`TaskStore`] returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Most tasks one owner may have kept at once (running, or settled within their ttl).
pub const MAX_TASKS_PER_OWNER: usize = 256;
/// Most tasks kept at once, all owners together.
pub const MAX_TASKS: usize = 4096;

/// Where a task is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum State {
    /// Running.
    Working,
    /// Waiting for answers: the open questions, key → `{method, params}`.
    InputRequired {
        /// The open questions.
        questions: Map<String, Value>,
    },
    /// Done: the `CallToolResult` (with `isError` for a tool error).
    Completed {
        /// The result as JSON.
        result: Value,
    },
    /// Stopped by a protocol error: the JSON-RPC error object.
    Failed {
        /// `{code, message, data?}`.
        error: Value,
    },
    /// Cancelled by its owner.
    Cancelled,
}

impl State {
    /// Whether the task settled (and will not change again).
    pub fn is_terminal(&self) -> bool {
        matches!(self, State::Completed { .. } | State::Failed { .. } | State::Cancelled)
    }
}

/// One task as a store keeps it: plain data, JSON-able.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// Its id: 122 random bits (uuid v4).
    pub id: String,
    /// Who may see it (a legacy session, a bearer token's hash, `stdio`); never shown.
    pub owner: String,
    /// Where it is.
    pub state: State,
    /// When it was created, in ms since the Unix epoch.
    pub created_ms: u64,
    /// When its state last changed, in ms since the Unix epoch.
    pub updated_ms: u64,
    /// How long it is kept: running, then after it settled.
    pub ttl_ms: u64,
    /// How often clients should poll.
    pub poll_interval_ms: u64,
    /// Answers `tasks/update` gave that the run has not taken yet.
    pub answers: Map<String, Value>,
}

impl TaskRecord {
    /// Moves the task to `state` at `now` unless it settled already; when
    /// this settles it, its answers are dropped and it returns when the task
    /// ends (one ttl from now).
    pub fn settle(&mut self, state: State, now: u64) -> Option<u64> {
        if self.state.is_terminal() {
            return None;
        }
        let settles = state.is_terminal();
        if settles {
            self.answers.clear();
        }
        self.state = state;
        self.updated_ms = now;
        settles.then(|| now.saturating_add(self.ttl_ms))
    }

    /// `tasks/update` at `now`: keeps the answers that fit an open question
    /// ([`steps::fits`]) and closes those questions (all closed: working
    /// again); others are ignored.
    pub fn answer(&mut self, answers: Map<String, Value>, now: u64) {
        let State::InputRequired { questions } = &mut self.state else { return };
        for (key, answer) in answers {
            let id = &self.id;
            let fits = questions
                .get(&key)
                .and_then(|request| question_of(&key, request))
                .map(|question| steps::fits(&question, &answer).inspect_err(|why| tracing::debug!("task {id}: {why}")));
            if let Some(Ok(())) = fits {
                questions.remove(&key);
                self.answers.insert(key, answer);
            }
        }
        if questions.is_empty() {
            self.state = State::Working;
        }
        self.updated_ms = now;
    }
}

/// Why a store refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The owner has [`MAX_TASKS_PER_OWNER`] tasks, or the store [`MAX_TASKS`].
    Full(String),
    /// The store failed (e.g. its database).
    Failed(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Full(message) | StoreError::Failed(message) => f.write_str(message),
        }
    }
}

/// Where tasks are kept. Every read and change by a client names the owner:
/// another owner's task is as unknown as one that never was.
pub trait TaskStore: Send + Sync {
    /// Adds a new task; refused past the store's bounds.
    fn create(&self, record: TaskRecord) -> StoreFuture<'_, Result<(), StoreError>>;
    /// Task `id`, if `owner` owns it and it is still kept.
    fn get<'a>(&'a self, owner: &'a str, id: &'a str) -> StoreFuture<'a, Result<Option<TaskRecord>, StoreError>>;
    /// The run moves task `id` to `state`; a settled task does not change.
    fn set<'a>(&'a self, id: &'a str, state: State) -> StoreFuture<'a, Result<(), StoreError>>;
    /// `tasks/update`: keeps the answers that fit an open question
    /// ([`steps::fits`]) and closes those questions (all closed: working
    /// again); others are ignored. `false` if the task is unknown.
    fn answer<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
        answers: Map<String, Value>,
    ) -> StoreFuture<'a, Result<bool, StoreError>>;
    /// The run takes the answers given so far.
    fn take_answers<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Result<Map<String, Value>, StoreError>>;
    /// `tasks/cancel`: settles the task as cancelled unless it settled
    /// already. `false` if the task is unknown.
    fn cancel<'a>(&'a self, owner: &'a str, id: &'a str) -> StoreFuture<'a, Result<bool, StoreError>>;
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Why a new task is refused when its owner keeps `owned` tasks and the
/// store `kept` in all, if it is.
pub fn refusal(owned: usize, kept: usize) -> Option<String> {
    if owned >= MAX_TASKS_PER_OWNER {
        Some(format!(
            "too many tasks: this client has {MAX_TASKS_PER_OWNER} (running, or settled within their ttl); \
             try again once some have expired"
        ))
    } else if kept >= MAX_TASKS {
        Some(format!("too many tasks: the server keeps {MAX_TASKS}; try again once some have expired"))
    } else {
        None
    }
}

/// Tasks kept in this process.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Memory>,
}

#[derive(Default)]
struct Memory {
    tasks: HashMap<String, TaskRecord>,
    per_owner: HashMap<String, usize>,
    /// (when, id) of each settled task: it is dropped then.
    expiries: BTreeSet<(u64, String)>,
}

impl Memory {
    /// Drops the tasks whose time is up: settled one ttl ago. Costs what it drops.
    fn sweep(&mut self, now: u64) {
        while let Some(first) = self.expiries.first() {
            if first.0 > now {
                break;
            }
            let Some((_, id)) = self.expiries.pop_first() else { break };
            if let Some(record) = self.tasks.remove(&id)
                && let Some(count) = self.per_owner.get_mut(&record.owner)
            {
                *count -= 1;
                if *count == 0 {
                    self.per_owner.remove(&record.owner);
                }
            }
        }
    }

    fn owned(&mut self, owner: &str, id: &str) -> Option<&mut TaskRecord> {
        self.tasks.get_mut(id).filter(|record| record.owner == owner)
    }

    /// Moves `record` to `state`, and schedules its end if that settles it.
    fn settle(expiries: &mut BTreeSet<(u64, String)>, record: &mut TaskRecord, state: State, now: u64) {
        if let Some(end) = record.settle(state, now) {
            expiries.insert((end, record.id.clone()));
        }
    }
}

impl MemoryStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        crate::sync::lock(&self.inner)
    }
}

/// The question an open `inputRequests` entry asks.
fn question_of(key: &str, request: &Value) -> Option<Question> {
    let method = match request.get("method").and_then(Value::as_str)? {
        "elicitation/create" => "elicitation/create",
        "sampling/createMessage" => "sampling/createMessage",
        "roots/list" => "roots/list",
        _ => return None,
    };
    Some(Question { key: key.to_owned(), method, params: request.get("params").cloned().unwrap_or(json!({})) })
}

impl TaskStore for MemoryStore {
    fn create(&self, record: TaskRecord) -> StoreFuture<'_, Result<(), StoreError>> {
        let mut memory = self.lock();
        memory.sweep(now_ms());
        let owned = memory.per_owner.get(&record.owner).copied().unwrap_or(0);
        if let Some(message) = refusal(owned, memory.tasks.len()) {
            return Box::pin(std::future::ready(Err(StoreError::Full(message))));
        }
        *memory.per_owner.entry(record.owner.clone()).or_default() += 1;
        memory.tasks.insert(record.id.clone(), record);
        Box::pin(std::future::ready(Ok(())))
    }

    fn get<'a>(&'a self, owner: &'a str, id: &'a str) -> StoreFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        let mut memory = self.lock();
        memory.sweep(now_ms());
        let record = memory.owned(owner, id).map(|record| record.clone());
        Box::pin(std::future::ready(Ok(record)))
    }

    fn set<'a>(&'a self, id: &'a str, state: State) -> StoreFuture<'a, Result<(), StoreError>> {
        let mut memory = self.lock();
        let Memory { tasks, expiries, .. } = &mut *memory;
        if let Some(record) = tasks.get_mut(id) {
            Memory::settle(expiries, record, state, now_ms());
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn answer<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
        answers: Map<String, Value>,
    ) -> StoreFuture<'a, Result<bool, StoreError>> {
        let mut memory = self.lock();
        memory.sweep(now_ms());
        let Some(record) = memory.owned(owner, id) else {
            return Box::pin(std::future::ready(Ok(false)));
        };
        record.answer(answers, now_ms());
        Box::pin(std::future::ready(Ok(true)))
    }

    fn take_answers<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Result<Map<String, Value>, StoreError>> {
        let mut memory = self.lock();
        let answers = memory.tasks.get_mut(id).map(|record| std::mem::take(&mut record.answers)).unwrap_or_default();
        Box::pin(std::future::ready(Ok(answers)))
    }

    fn cancel<'a>(&'a self, owner: &'a str, id: &'a str) -> StoreFuture<'a, Result<bool, StoreError>> {
        let mut memory = self.lock();
        let now = now_ms();
        memory.sweep(now);
        let Memory { tasks, expiries, .. } = &mut *memory;
        let Some(record) = tasks.get_mut(id).filter(|record| record.owner == owner) else {
            return Box::pin(std::future::ready(Ok(false)));
        };
        Memory::settle(expiries, record, State::Cancelled, now);
        Box::pin(std::future::ready(Ok(true)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn record(id: &str, owner: &str) -> TaskRecord {
        TaskRecord {
            id: id.to_owned(),
            owner: owner.to_owned(),
            state: State::Working,
            created_ms: now_ms(),
            updated_ms: now_ms(),
            ttl_ms: 60_000,
            poll_interval_ms: 1000,
            answers: Map::new(),
        }
    }

    #[tokio::test]
    async fn another_owners_task_is_unknown() {
        let store = MemoryStore::default();
        store.create(record("t1", "me")).await.unwrap();
        assert!(store.get("you", "t1").await.unwrap().is_none());
        assert!(!store.answer("you", "t1", Map::new()).await.unwrap());
        assert!(!store.cancel("you", "t1").await.unwrap());
        assert_eq!(store.get("me", "t1").await.unwrap().map(|r| r.state), Some(State::Working));
    }

    #[tokio::test]
    async fn a_settled_task_stays_settled_and_cancelling_it_again_is_no_error() {
        let store = MemoryStore::default();
        store.create(record("t1", "me")).await.unwrap();
        store.set("t1", State::Completed { result: json!({"content": []}) }).await.unwrap();
        assert!(store.cancel("me", "t1").await.unwrap());
        store.set("t1", State::Working).await.unwrap();
        let state = store.get("me", "t1").await.unwrap().map(|r| r.state);
        assert_eq!(state, Some(State::Completed { result: json!({"content": []}) }));
    }

    #[tokio::test]
    async fn an_owner_past_its_bound_is_refused_and_others_are_not() {
        let store = MemoryStore::default();
        for n in 0..MAX_TASKS_PER_OWNER {
            store.create(record(&format!("t{n}"), "me")).await.unwrap();
        }
        let refused = store.create(record("one-more", "me")).await.unwrap_err();
        assert!(matches!(&refused, StoreError::Full(message) if message.contains("too many tasks")), "{refused:?}");
        store.create(record("yours", "you")).await.unwrap();
    }

    #[tokio::test]
    async fn a_task_is_dropped_one_ttl_after_it_settled() {
        let store = MemoryStore::default();
        store.create(record("t1", "me")).await.unwrap();
        store.create(record("t2", "me")).await.unwrap();
        store.set("t1", State::Cancelled).await.unwrap();
        let mut memory = store.lock();
        let settled = memory.tasks["t1"].updated_ms;
        memory.sweep(settled + 59_999);
        assert!(memory.tasks.contains_key("t1"));
        memory.sweep(settled + 60_000);
        assert!(!memory.tasks.contains_key("t1"), "evicted");
        assert!(memory.tasks.contains_key("t2"), "still running: kept");
        assert_eq!(memory.per_owner.get("me"), Some(&1));
    }
}
