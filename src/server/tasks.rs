//! Tasks: the `io.modelcontextprotocol/tasks` extension (SEP-2663). A tool
//! with `task:` called by a client that declared the extension answers at
//! once with a task id; the call runs here, and the client polls
//! `tasks/get`, answers the task's questions with `tasks/update` and may
//! stop it with `tasks/cancel`.
//!
//! Two parts:
//! - [`TaskStore`] (`src/task_store.rs`, outside `server/`: it speaks no MCP): where tasks are kept, as plain JSON-able [`TaskRecord`]s
//!   bound to an owner, behind boxed futures so a database can stand behind
//!   it; [`MemoryStore`] keeps them in this process, bounded per owner and
//!   in total, and drops a task one ttl after it settled.
//! - [`Tasks`]: the runner that owns the running calls. Each runs
//!   [`run::call`] with a [`TaskClient`] (logs and progress go nowhere:
//!   a task has no request stream; a question parks the task as
//!   `input_required` until `tasks/update` answers it). Cancelling aborts
//!   the run: dropping it kills a command's process group. A run that lasts
//!   longer than its ttl is stopped and the task fails.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use rmcp::ErrorData;
use rmcp::model::{
    CallToolResponse, ClientCapabilities, CreateTaskResult, DetailedTask, ErrorCode, InputRequests, Task, TaskPayload,
    TaskStatus,
};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use super::Shared;
use super::capabilities::has_capability;
use super::http::oauth::Caller;
use super::snapshot::Asked;
use crate::catalog::model::LogLevel;
use crate::catalog::{Catalog, Tool};
use crate::replicas::Replicas;
use crate::run::steps::{Client, ClientFuture, Question, Resume, Unanswered};
use crate::run::{self, Halted, ToolOutcome};

pub use crate::task_store::{
    MAX_TASKS, MAX_TASKS_PER_OWNER, MemoryStore, State, StoreError, StoreFuture, TaskRecord, TaskStore, now_ms, refusal,
};

/// A running task, as the runner holds it.
struct Running {
    /// Stops the run (dropping it: a command's process group is killed).
    abort: AbortHandle,
    /// Wakes the run when its questions got answers.
    wake: Arc<Notify>,
    /// Who owns the task.
    owner: String,
}

/// The runner: starts tasks, owns their runs, answers `tasks/*`.
pub struct Tasks {
    store: Arc<dyn TaskStore>,
    running: Mutex<HashMap<String, Running>>,
    /// The other replicas sharing the store, told of cancels and answers.
    replicas: Option<Arc<Replicas>>,
}

impl Default for Tasks {
    fn default() -> Tasks {
        Tasks::new(Arc::new(MemoryStore::default()))
    }
}

/// "unknown task" (-32602): also what another owner's task is.
fn unknown(id: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown task: {id}"), Some(json!({ "taskId": id })))
}

fn store_error(err: StoreError) -> ErrorData {
    ErrorData::internal_error(format!("the task store failed: {err}"), None)
}

/// ISO 8601 of ms since the Unix epoch.
fn timestamp(ms: u64) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(ms);
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A record as the wire shows it.
pub(in crate::server) fn detailed(record: &TaskRecord) -> DetailedTask {
    let payload = match &record.state {
        State::Working => TaskPayload::Working,
        State::InputRequired { questions } => {
            match serde_json::from_value::<InputRequests>(Value::Object(questions.clone())) {
                Ok(input_requests) => TaskPayload::InputRequired { input_requests },
                Err(err) => {
                    tracing::error!("internal: task {} asks what MCP cannot carry: {err}", record.id);
                    TaskPayload::Working
                }
            }
        }
        State::Completed { result } => TaskPayload::Completed { result: object(result) },
        State::Failed { error } => TaskPayload::Failed { error: object(error) },
        State::Cancelled => TaskPayload::Cancelled,
    };
    let task = Task::new(&record.id, TaskStatus::Working, timestamp(record.created_ms), timestamp(record.updated_ms))
        .with_ttl_ms(record.ttl_ms)
        .with_poll_interval_ms(record.poll_interval_ms);
    DetailedTask::new(task, payload)
}

fn object(value: &Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// What a tool call that became a task was asked with.
pub(in crate::server) struct Call<'a> {
    /// The snapshot's catalog (the run keeps it).
    pub catalog: &'a Arc<Catalog>,
    /// The tool (it has `task:`).
    pub tool: &'a Tool,
    /// Its arguments.
    pub arguments: Map<String, Value>,
    /// Who owns the task.
    pub owner: String,
    /// The request's client, for `askFirst` questions.
    pub client: &'a dyn Client,
    /// What the client declared it can answer (elicitation, sampling, roots).
    pub capabilities: ClientCapabilities,
    /// The caller's verified access token (OAuth): the run's templates see
    /// its claims, an api with `auth: { exchange }` exchanges it.
    pub caller: Option<Caller>,
    /// Where the call resumes: a 2026-07-28 retry answering `askFirst` questions.
    pub resume: Resume,
}

impl Tasks {
    /// A runner over `store`.
    pub fn new(store: Arc<dyn TaskStore>) -> Tasks {
        Tasks { store, running: Mutex::default(), replicas: None }
    }

    /// A runner over `store`, shared with the other `replicas`: a task runs
    /// on the replica that started it; a cancel or answers given through
    /// another reach it as an event ([`Tasks::heard`]).
    pub fn shared(store: Arc<dyn TaskStore>, replicas: Arc<Replicas>) -> Tasks {
        Tasks { store, running: Mutex::default(), replicas: Some(replicas) }
    }

    /// Another replica cancelled task `id`, or gave it answers: if it runs
    /// here, its run stops, or wakes to take them.
    pub fn heard(&self, id: &str, cancelled: bool) {
        if cancelled {
            if let Some(running) = self.running().remove(id) {
                running.abort.abort();
                tracing::debug!("task {id} cancelled through another replica: its run is stopped");
            }
        } else if let Some(running) = self.running().get(id) {
            running.wake.notify_one();
        }
    }

    /// After events may have been missed: each task running here that
    /// settled meanwhile (cancelled, or failed while the others took this
    /// replica for stopped) stops, the others wake to take any answers.
    pub async fn recheck(&self) {
        let running: Vec<(String, String)> =
            self.running().iter().map(|(id, running)| (id.clone(), running.owner.clone())).collect();
        for (id, owner) in running {
            match self.store.get(&owner, &id).await {
                Ok(Some(record)) => self.heard(&id, record.state.is_terminal()),
                Ok(None) => {}
                Err(err) => tracing::warn!("task {id}: could not check whether it was cancelled: {err}"),
            }
        }
    }

    /// Tells the other replicas, if any, when task `id` does not run here.
    fn tell_others(&self, id: &str, cancelled: bool, ran_here: bool) {
        if let (Some(replicas), false) = (&self.replicas, ran_here) {
            replicas.publish(crate::replicas::Event::Task { id: id.to_owned(), cancelled });
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        crate::sync::lock(&self.running)
    }

    /// Starts `call` as a task: asks its `askFirst` questions on the call,
    /// then answers with the task, which runs on. A refusal (too many tasks)
    /// and a call that ends before its task starts are ordinary results.
    pub(in crate::server) async fn start(
        &self,
        shared: &Arc<Shared>,
        call: Call<'_>,
    ) -> Result<Asked<CallToolResponse>, ErrorData> {
        let Some(options) = call.tool.task else {
            return Err(ErrorData::internal_error(format!("tool `{}` is not a task", call.tool.name), None));
        };
        let mut resume = Resume::default();
        if options.ask_first > 0 {
            let (tool, arguments) = (call.tool, call.arguments.clone());
            let asked = run::ask_first(call.catalog, tool, arguments, call.client, call.resume, options.ask_first);
            match asked.await {
                Ok(Ok(answered)) => resume = answered,
                Ok(Err(outcome)) => {
                    return Ok(Asked::Done(CallToolResponse::Complete(super::snapshot::tool_result(outcome))));
                }
                Err(Halted::InputRequired(asked)) => return Ok(Asked::Input(asked)),
                Err(Halted::Cancelled) => {
                    return Err(ErrorData::new(
                        ErrorCode(super::snapshot::REQUEST_CANCELLED),
                        "request cancelled",
                        None,
                    ));
                }
            }
        }
        let now = now_ms();
        let record = TaskRecord {
            id: uuid::Uuid::new_v4().to_string(),
            owner: call.owner,
            state: State::Working,
            created_ms: now,
            updated_ms: now,
            ttl_ms: u64::try_from(options.ttl.as_millis()).unwrap_or(u64::MAX),
            poll_interval_ms: u64::try_from(options.poll_interval.as_millis()).unwrap_or(u64::MAX),
            answers: Map::new(),
        };
        let created = detailed(&record).task;
        match self.store.create(record.clone()).await {
            Ok(()) => {}
            Err(StoreError::Full(message)) => {
                tracing::warn!("tool `{}`: task refused: {message}", call.tool.name);
                let refused = super::snapshot::tool_result(ToolOutcome::error(message));
                return Ok(Asked::Done(CallToolResponse::Complete(refused)));
            }
            Err(err) => return Err(store_error(err)),
        }
        let wake = Arc::new(Notify::new());
        let client = TaskClient {
            store: Arc::clone(&self.store),
            id: record.id.clone(),
            wake: Arc::clone(&wake),
            poll: options.poll_interval,
            capabilities: call.capabilities,
            caller: call.caller,
            owner: crate::render::Caller::new(record.owner.as_str()),
        };
        let (catalog, name, arguments) = (Arc::clone(call.catalog), call.tool.name.clone(), call.arguments);
        let run = tokio::spawn(async move {
            let Some(tool) = catalog.tool(&name) else { return Err(Halted::Cancelled) };
            run::call(&catalog, tool, arguments, &client, resume).await
        });
        self.running()
            .insert(record.id.clone(), Running { abort: run.abort_handle(), wake, owner: record.owner.clone() });
        tracing::debug!("task {} started: tool `{name}`", record.id, name = call.tool.name);
        let shared = Arc::clone(shared);
        let abort = run.abort_handle();
        tokio::spawn(async move {
            let state = match tokio::time::timeout(options.ttl, run).await {
                Err(_) => {
                    abort.abort();
                    let ttl = format!("{}s", options.ttl.as_secs_f64());
                    State::Failed {
                        error: json!({
                            "code": ErrorCode::INTERNAL_ERROR.0,
                            "message": format!("the task ran longer than its ttl ({ttl}) and was stopped"),
                            "data": { "ttlMs": record.ttl_ms },
                        }),
                    }
                }
                Ok(Ok(Ok(mut outcome))) => {
                    if let Some(database) = outcome.changed.take() {
                        shared.wrote(&database);
                    }
                    match serde_json::to_value(super::snapshot::tool_result(outcome)) {
                        Ok(result) => State::Completed { result },
                        Err(err) => State::Failed { error: internal(&format!("the result is not JSON: {err}")) },
                    }
                }
                Ok(Ok(Err(Halted::Cancelled))) => State::Cancelled,
                // The task's client waits for answers instead of leaving questions open.
                Ok(Ok(Err(Halted::InputRequired(_)))) => {
                    State::Failed { error: internal("the tool's questions were left open") }
                }
                Ok(Err(err)) if err.is_cancelled() => State::Cancelled,
                Ok(Err(err)) => {
                    tracing::error!("task {}: the run failed: {err}", record.id);
                    State::Failed { error: internal("the tool's run stopped unexpectedly") }
                }
            };
            if let Err(err) = shared.tasks.store.set(&record.id, state).await {
                tracing::error!("task {}: could not record how it ended: {err}", record.id);
            }
            shared.tasks.running().remove(&record.id);
        });
        Ok(Asked::Done(CallToolResponse::Task(CreateTaskResult::new(created))))
    }

    /// `tasks/get`.
    pub(in crate::server) async fn get(&self, owner: &str, id: &str) -> Result<DetailedTask, ErrorData> {
        match self.store.get(owner, id).await.map_err(store_error)? {
            Some(record) => Ok(detailed(&record)),
            None => Err(unknown(id)),
        }
    }

    /// `tasks/update`: the answers reach the run (see [`TaskStore::answer`]).
    pub(in crate::server) async fn update(
        &self,
        owner: &str,
        id: &str,
        answers: Map<String, Value>,
    ) -> Result<(), ErrorData> {
        if !self.store.answer(owner, id, answers).await.map_err(store_error)? {
            return Err(unknown(id));
        }
        let here = self.running().get(id).map(|running| running.wake.notify_one()).is_some();
        self.tell_others(id, false, here);
        Ok(())
    }

    /// `tasks/cancel`: the task settles as cancelled and its run stops (a
    /// settled task stays as it is; cancelling it again is no error).
    pub(in crate::server) async fn cancel(&self, owner: &str, id: &str) -> Result<(), ErrorData> {
        if !self.store.cancel(owner, id).await.map_err(store_error)? {
            return Err(unknown(id));
        }
        let running = self.running().remove(id);
        let here = running.is_some();
        if let Some(running) = running {
            running.abort.abort();
            tracing::debug!("task {id} cancelled: its run is stopped");
        }
        self.tell_others(id, true, here);
        Ok(())
    }

    /// How many runs are going on now.
    pub fn running_count(&self) -> usize {
        self.running().len()
    }
}

/// A JSON-RPC internal error object.
fn internal(message: &str) -> Value {
    json!({ "code": ErrorCode::INTERNAL_ERROR.0, "message": message })
}

/// The client of a task's run: nobody listens to logs or progress; a
/// question parks the task as `input_required` until `tasks/update`
/// answers it.
struct TaskClient {
    store: Arc<dyn TaskStore>,
    id: String,
    wake: Arc<Notify>,
    /// How long to wait for a wake-up before asking the store again (a
    /// store shared by several processes may not wake this one).
    poll: Duration,
    /// What the client declared it can answer.
    capabilities: ClientCapabilities,
    /// The access token that started the task: its claims (templates'
    /// `auth`) and itself (for an api that exchanges it).
    caller: Option<Caller>,
    /// The task's owner, whose turns its renders share on the render pool.
    owner: crate::render::Caller,
}

impl Client for TaskClient {
    fn log(&self, _level: LogLevel, _logger: &str, _data: Value) -> ClientFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn progress(&self, _progress: f64, _total: Option<f64>, _message: Option<String>) -> ClientFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn ask(&self, questions: Vec<Question>) -> ClientFuture<'_, Result<Map<String, Value>, Unanswered>> {
        Box::pin(async move {
            let open: Map<String, Value> =
                questions.iter().map(|q| (q.key.clone(), json!({ "method": q.method, "params": q.params }))).collect();
            let failed = |err: StoreError| Unanswered::Failed(format!("the task store failed: {err}"));
            self.store.set(&self.id, State::InputRequired { questions: open }).await.map_err(failed)?;
            let mut answers = Map::new();
            loop {
                let woken = self.wake.notified();
                answers.extend(self.store.take_answers(&self.id).await.map_err(failed)?);
                if questions.iter().all(|q| answers.contains_key(&q.key)) {
                    self.store.set(&self.id, State::Working).await.map_err(failed)?;
                    return Ok(answers);
                }
                tokio::select! {
                    () = woken => {}
                    () = tokio::time::sleep(self.poll) => {}
                }
            }
        })
    }

    fn can_answer(&self, capability: &str) -> bool {
        has_capability(&self.capabilities, capability)
    }

    fn cancelled(&self) -> bool {
        false
    }

    fn until_cancelled(&self) -> ClientFuture<'_, ()> {
        // A cancelled task's run is dropped, never told.
        Box::pin(std::future::pending())
    }

    fn caller(&self) -> Option<&Map<String, Value>> {
        self.caller.as_ref().map(|caller| &*caller.claims)
    }

    fn access_token(&self) -> Option<&crate::effect::http::AccessToken> {
        self.caller.as_ref().map(|caller| &caller.token)
    }

    fn render_caller(&self) -> crate::render::Caller {
        self.owner.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task_store::tests::record;

    fn elicit(key: &str) -> Question {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
        Question {
            key: key.to_owned(),
            method: "elicitation/create",
            params: json!({"message": "?", "requestedSchema": schema}),
        }
    }

    fn accept(name: &str) -> Value {
        json!({"action": "accept", "content": {"name": name}})
    }

    async fn open_keys(store: &MemoryStore, id: &str) -> Vec<String> {
        match store.get("me", id).await.unwrap().map(|r| r.state) {
            Some(State::InputRequired { questions }) => questions.keys().cloned().collect(),
            other => panic!("not input_required: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_partial_answer_leaves_the_other_question_open() {
        let store = Arc::new(MemoryStore::default());
        store.create(record("t1", "me")).await.unwrap();
        let wake = Arc::new(Notify::new());
        let client = TaskClient {
            store: store.clone(),
            id: "t1".to_owned(),
            wake: wake.clone(),
            poll: Duration::from_secs(30),
            capabilities: ClientCapabilities::builder().enable_elicitation().build(),
            caller: None,
            owner: crate::render::Caller::new("me"),
        };
        let asking = tokio::spawn(async move { client.ask(vec![elicit("first"), elicit("second")]).await });
        // Bounded wait for the run to park.
        for _ in 0..500 {
            if matches!(store.get("me", "t1").await.unwrap().map(|r| r.state), Some(State::InputRequired { .. })) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(open_keys(&store, "t1").await, ["first", "second"]);
        // One good answer, one that does not fit its form, one for no question.
        let answers = Map::from_iter([
            ("first".to_owned(), accept("Ada")),
            ("second".to_owned(), json!({"action": "accept", "content": {"name": 12}})),
            ("unknown-key".to_owned(), json!({"ignored": true})),
        ]);
        assert!(store.answer("me", "t1", answers).await.unwrap());
        wake.notify_one();
        assert_eq!(open_keys(&store, "t1").await, ["second"]);
        assert!(!asking.is_finished());
        assert!(store.answer("me", "t1", Map::from_iter([("second".to_owned(), accept("Bob"))])).await.unwrap());
        wake.notify_one();
        let answers = tokio::time::timeout(Duration::from_secs(10), asking).await.unwrap().unwrap().unwrap();
        assert_eq!(answers.get("first"), Some(&accept("Ada")));
        assert_eq!(answers.get("second"), Some(&accept("Bob")));
        assert_eq!(store.get("me", "t1").await.unwrap().map(|r| r.state), Some(State::Working));
    }

    #[test]
    fn records_show_on_the_wire_as_the_extension_says() {
        let mut task = record("t1", "me");
        task.state = State::InputRequired {
            questions: Map::from_iter([(
                "step1".to_owned(),
                json!({"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {"type": "object", "properties": {}}}}),
            )]),
        };
        let wire = serde_json::to_value(detailed(&task)).unwrap();
        assert_eq!(wire["status"], "input_required");
        assert_eq!(wire["ttlMs"], 60_000);
        assert_eq!(wire["pollIntervalMs"], 1000);
        assert_eq!(wire["inputRequests"]["step1"]["method"], "elicitation/create");
        assert!(wire.get("owner").is_none() && wire.get("requestState").is_none());
        task.state = State::Failed { error: internal("boom") };
        let wire = serde_json::to_value(detailed(&task)).unwrap();
        assert_eq!((wire["status"].as_str(), wire["error"]["code"].as_i64()), (Some("failed"), Some(-32603)));
        assert!(wire.get("result").is_none());
    }
}
