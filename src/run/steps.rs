//! A tool's `steps`: what it does, in order, before its effect and result —
//! log to the client, report progress, wait, ask the user (elicitation),
//! ask the client's model (sampling).
//!
//! Steps talk to the calling client through [`Client`], which the server
//! implements over the request's MCP peer and the CLI over the terminal, so
//! this module stays free of rmcp. Each step sees the arguments and what
//! earlier steps produced (`elicited`, `sampled`); the client's cancellation
//! is checked between steps. Step templates render on the blocking pool, like
//! results ([`render::off_thread`]), so a slow one holds no runtime thread.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use minijinja::Value as TemplateValue;
use serde_json::{Map, Value, json};

use crate::catalog::model::{LogLevel, Role};
use crate::catalog::{Amount, Catalog, Step, StepData, Wait};
use crate::duration::parse_sleep;
use crate::render::{self, RenderError};

/// A future a [`Client`] returns.
pub type ClientFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The client a tool call came from, as steps need it.
pub trait Client: Send + Sync {
    /// Sends a log message, if the client wants that level.
    fn log(&self, level: LogLevel, logger: &str, data: Value) -> ClientFuture<'_, ()>;
    /// Sends progress, if the call carried a progress token.
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) -> ClientFuture<'_, ()>;
    /// Asks the user; the answer as `{action, content}`.
    fn elicit(&self, message: String, schema: Value) -> ClientFuture<'_, Result<Value, String>>;
    /// Asks the client's model; its `CreateMessageResult` as JSON.
    fn sample(&self, request: Value) -> ClientFuture<'_, Result<Value, String>>;
    /// Asks `questions` together; the answers by key. Only answers that
    /// [`fits`] its question may be returned. (Minimal seam, tasks11: by
    /// default one question after another through `elicit`/`sample`; mrtr's
    /// version replaces those two.)
    fn ask(&self, questions: Vec<Question>) -> ClientFuture<'_, Result<Map<String, Value>, Unanswered>> {
        Box::pin(async move {
            let mut answers = Map::new();
            for question in questions {
                let answer = match question.method {
                    ELICIT => {
                        let message = question.params.get("message").and_then(Value::as_str).unwrap_or_default();
                        let schema = question.params.get("requestedSchema").cloned().unwrap_or(Value::Null);
                        self.elicit(message.to_owned(), schema).await
                    }
                    SAMPLE => self.sample(question.params.clone()).await,
                    other => Err(format!("carte cannot ask `{other}` yet")),
                };
                let answer = answer.map_err(Unanswered::Failed)?;
                fits(&question, &answer).map_err(Unanswered::Failed)?;
                answers.insert(question.key, answer);
            }
            Ok(answers)
        })
    }
    /// Whether the client declared the capability a question's method needs.
    fn can_answer(&self, _method: &str) -> bool {
        true
    }
    /// Whether the client cancelled the call.
    fn cancelled(&self) -> bool;
    /// Completes when the client cancels the call (never, if it does not).
    fn until_cancelled(&self) -> ClientFuture<'_, ()>;
}

// ---- The ask seam: minimal, by tasks11, to be replaced by mrtr's. ----

/// The method of an elicitation question.
pub const ELICIT: &str = "elicitation/create";
/// The method of a sampling question.
pub const SAMPLE: &str = "sampling/createMessage";

/// One question for the client, as `inputRequests` carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// Its key in `inputRequests` / `inputResponses`.
    pub key: String,
    /// "elicitation/create" | "sampling/createMessage" | "roots/list"
    pub method: &'static str,
    /// The request's params, rendered (e.g. {message, requestedSchema}).
    pub params: Value,
}

/// Why [`Client::ask`] gave no answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Unanswered {
    /// These questions are still open.
    Open(Vec<Question>),
    /// Asking failed (e.g. a legacy client errored); becomes an error result.
    Failed(String),
}

/// Where a run resumes: at step index `step` (0-based), with the answers gathered so far.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Resume {
    /// The first step still to run.
    pub step: usize,
    /// The answers so far, by question key.
    pub answers: Map<String, Value>,
}

/// Whether `answer` answers `question`: an ElicitResult (`action` accept,
/// decline or cancel; on accept, `content` valid against `requestedSchema`),
/// a CreateMessageResult (`role`, `content`, `model`), a ListRootsResult
/// (`roots: [{uri, ...}]`).
pub fn fits(question: &Question, answer: &Value) -> Result<(), String> {
    let Some(answer) = answer.as_object() else {
        return Err(format!("the answer to `{}` is not an object", question.key));
    };
    match question.method {
        ELICIT => match answer.get("action").and_then(Value::as_str) {
            Some("accept") => {
                let content = answer.get("content").cloned().unwrap_or(Value::Object(Map::new()));
                let schema = question.params.get("requestedSchema").cloned().unwrap_or(json!({}));
                let validator = jsonschema::validator_for(&schema)
                    .map_err(|err| format!("the form of `{}` cannot be compiled: {err}", question.key))?;
                if validator.is_valid(&content) {
                    Ok(())
                } else {
                    let violations = crate::run::list_violations(validator.iter_errors(&content));
                    Err(format!("the answer to `{}` does not fit its form: {violations}", question.key))
                }
            }
            Some("decline" | "cancel") => Ok(()),
            _ => Err(format!("the answer to `{}` has no `action` accept, decline or cancel", question.key)),
        },
        SAMPLE => {
            let complete = answer.get("role").is_some_and(Value::is_string)
                && answer.get("content").is_some_and(|c| c.is_object() || c.is_array())
                && answer.get("model").is_some_and(Value::is_string);
            if complete {
                Ok(())
            } else {
                Err(format!("the answer to `{}` is not a sampling result (role, content, model)", question.key))
            }
        }
        _ => match answer.get("roots").and_then(Value::as_array) {
            Some(roots) if roots.iter().all(|root| root.get("uri").is_some_and(Value::is_string)) => Ok(()),
            _ => Err(format!("the answer to `{}` is not a list of roots", question.key)),
        },
    }
}

/// A client that is not there (e.g. `carte check`): logs go to stderr,
/// nothing can be asked.
pub struct NoClient;

impl Client for NoClient {
    fn log(&self, level: LogLevel, logger: &str, data: Value) -> ClientFuture<'_, ()> {
        eprintln!("[{level:?}] {logger}: {data}");
        Box::pin(std::future::ready(()))
    }

    fn progress(&self, _progress: f64, _total: Option<f64>, _message: Option<String>) -> ClientFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn elicit(&self, _message: String, _schema: Value) -> ClientFuture<'_, Result<Value, String>> {
        Box::pin(std::future::ready(Err("there is no client to ask (elicitation needs an MCP client)".to_owned())))
    }

    fn sample(&self, _request: Value) -> ClientFuture<'_, Result<Value, String>> {
        Box::pin(std::future::ready(Err("there is no client model to ask (sampling needs an MCP client)".to_owned())))
    }

    fn cancelled(&self) -> bool {
        false
    }

    fn until_cancelled(&self) -> ClientFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

/// Longest rendered `sleep` read as a duration; a longer one is not, and
/// only its start is quoted back.
const MAX_SHOWN_SLEEP: usize = 40;

/// Awaits `work` unless the client cancels first.
async fn unless_cancelled<T>(client: &dyn Client, work: impl Future<Output = T>) -> Result<T, Stopped> {
    tokio::select! {
        done = work => Ok(done),
        () = client.until_cancelled() => Err(Stopped::Cancelled),
    }
}

/// Why the steps stopped the call.
#[derive(Debug)]
pub enum Stopped {
    /// The client cancelled the call: it gets no result.
    Cancelled,
    /// A step failed; the message becomes an `isError` result.
    Failed(String),
    /// Questions are open; the run resumes at `resume` once they are answered.
    InputRequired {
        /// The open questions.
        questions: Vec<Question>,
        /// Where to resume, with the answers so far.
        resume: Resume,
    },
}

/// Runs `steps` in order, adding `elicited` / `sampled` to `context`.
pub async fn run(
    catalog: &Arc<Catalog>,
    tool: &str,
    steps: &[Step],
    context: &mut BTreeMap<String, TemplateValue>,
    client: &dyn Client,
) -> Result<(), Stopped> {
    run_from(catalog, tool, steps, context, client, Resume::default(), None).await.map(|_| ())
}

/// The key of step `idx` (0-based) in `inputRequests`: `step{N}`.
pub fn key_of(idx: usize) -> String {
    format!("step{}", idx + 1)
}

/// Runs `steps` from `resume.step` (seeding `elicited`/`sampled` from the
/// answers of the steps before it), up to `stop_before` (an index) or the
/// end; the answers gathered, with where to go on.
pub async fn run_from(
    catalog: &Arc<Catalog>,
    tool: &str,
    steps: &[Step],
    context: &mut BTreeMap<String, TemplateValue>,
    client: &dyn Client,
    resume: Resume,
    stop_before: Option<usize>,
) -> Result<Resume, Stopped> {
    let Resume { step: start, mut answers } = resume;
    for (idx, step) in steps.iter().enumerate().take(start) {
        let name = match step {
            Step::Elicit { .. } => "elicited",
            Step::Sample { .. } => "sampled",
            _ => continue,
        };
        if let Some(answer) = answers.get(&key_of(idx)) {
            context.insert(name.to_owned(), render::to_value(answer));
        }
    }
    let end = stop_before.unwrap_or(steps.len()).min(steps.len());
    for (idx, step) in steps.iter().enumerate().take(end).skip(start) {
        if client.cancelled() {
            return Err(Stopped::Cancelled);
        }
        let at = StepAt { catalog, tool, number: idx + 1 };
        match step {
            Step::Log { level, logger, data } => {
                let data = match data {
                    StepData::Template(name) => Value::String(at.render(name, context).await?),
                    StepData::Literal(value) => value.clone(),
                };
                client.log(*level, logger.as_deref().unwrap_or("carte.tools"), data).await;
            }
            Step::Progress { progress, total, message } => {
                let progress = at.amount(progress, context).await?;
                let total = match total {
                    Some(total) => Some(at.amount(total, context).await?),
                    None => None,
                };
                let message = match message {
                    Some(name) => Some(at.render(name, context).await?),
                    None => None,
                };
                client.progress(progress, total, message).await;
            }
            Step::Sleep(wait) => {
                let duration = match wait {
                    Wait::Fixed(duration) => *duration,
                    Wait::Template(name) => at.duration(name, context).await?,
                };
                unless_cancelled(client, tokio::time::sleep(duration)).await?;
            }
            Step::Elicit { message, schema } => {
                let message = at.render(message, context).await?;
                let question = Question {
                    key: key_of(idx),
                    method: ELICIT,
                    params: json!({"message": message, "requestedSchema": schema}),
                };
                let answer = ask_one(client, question, idx, &mut answers, "the user", tool).await?;
                context.insert("elicited".to_owned(), render::to_value(&answer));
            }
            Step::Sample { messages, max_tokens, system } => {
                let mut conversation = Vec::new();
                for (role, name) in messages {
                    let role = match role {
                        Role::User => "user",
                        Role::Assistant => "assistant",
                    };
                    let text = at.render(name, context).await?;
                    conversation.push(json!({"role": role, "content": {"type": "text", "text": text}}));
                }
                let mut request = json!({"messages": conversation, "maxTokens": max_tokens});
                if let Some(system) = system {
                    request["systemPrompt"] = Value::String(at.render(system, context).await?);
                }
                let question = Question { key: key_of(idx), method: SAMPLE, params: request };
                let reply = ask_one(client, question, idx, &mut answers, "the client's model", tool).await?;
                context.insert("sampled".to_owned(), render::to_value(&reply));
            }
        }
    }
    if client.cancelled() {
        return Err(Stopped::Cancelled);
    }
    Ok(Resume { step: end, answers })
}

/// Asks one question of step `idx`; its answer, also kept in `answers`.
async fn ask_one(
    client: &dyn Client,
    question: Question,
    idx: usize,
    answers: &mut Map<String, Value>,
    whom: &str,
    tool: &str,
) -> Result<Value, Stopped> {
    let key = question.key.clone();
    match unless_cancelled(client, client.ask(vec![question])).await? {
        Ok(mut answered) => {
            let answer = answered
                .remove(&key)
                .ok_or_else(|| Stopped::Failed(format!("tool `{tool}` got no answer from {whom}")))?;
            answers.insert(key, answer.clone());
            Ok(answer)
        }
        Err(Unanswered::Failed(err)) => Err(Stopped::Failed(format!("tool `{tool}` could not ask {whom}: {err}"))),
        Err(Unanswered::Open(questions)) => {
            Err(Stopped::InputRequired { questions, resume: Resume { step: idx, answers: answers.clone() } })
        }
    }
}

/// One step of one tool, for rendering its templates.
struct StepAt<'a> {
    catalog: &'a Arc<Catalog>,
    tool: &'a str,
    /// 1-based, as a person counts steps.
    number: usize,
}

impl StepAt<'_> {
    /// Renders template `name` with `context` on the blocking pool (see
    /// [`render::off_thread`]); a failure stops the call with a message.
    async fn render(&self, name: &str, context: &BTreeMap<String, TemplateValue>) -> Result<String, Stopped> {
        let catalog = Arc::clone(self.catalog);
        let name = name.to_owned();
        let context = TemplateValue::from(context.clone());
        let rendered = render::off_thread(move || render::render(&catalog.env, &name, context)).await.and_then(|r| r);
        rendered.map_err(|err| match err {
            RenderError::Failed(message) => Stopped::Failed(message),
            RenderError::Template(message) => {
                Stopped::Failed(format!("tool `{}`, step {}: {message}", self.tool, self.number))
            }
        })
    }

    /// A `sleep` template's duration, rendered for this call.
    async fn duration(&self, name: &str, context: &BTreeMap<String, TemplateValue>) -> Result<Duration, Stopped> {
        let text = self.render(name, context).await?;
        let text = text.trim();
        let parsed = if text.is_empty() {
            Err("it rendered nothing".to_owned())
        } else if text.len() > MAX_SHOWN_SLEEP {
            Err(format!("`{}` is not a duration", crate::run::cut(text.to_owned(), MAX_SHOWN_SLEEP)))
        } else {
            parse_sleep(text)
        };
        parsed.map_err(|reason| {
            Stopped::Failed(format!(
                "tool `{}`, step {}: cannot sleep: {reason}; a sleep is e.g. `250ms`, `2s` or `1m` (at most 10m)",
                self.tool, self.number
            ))
        })
    }

    /// A progress amount: a number, or a template that renders one.
    async fn amount(&self, amount: &Amount, context: &BTreeMap<String, TemplateValue>) -> Result<f64, Stopped> {
        match amount {
            Amount::Number(n) => Ok(*n),
            Amount::Template(name) => {
                let text = self.render(name, context).await?;
                text.trim().parse().map_err(|_| {
                    Stopped::Failed(format!(
                        "tool `{}`, step {}: progress `{text}` is not a number",
                        self.tool, self.number
                    ))
                })
            }
        }
    }
}
