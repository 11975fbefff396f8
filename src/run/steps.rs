//! The `steps` of a tool, prompt or resource: what it does, in order,
//! before its effect and result — log to the client, report progress, wait,
//! and ask the client (input steps: `elicit` the user, `sample` the client's
//! model, list its `roots`; `ask` several of them in one round).
//!
//! Steps talk to the calling client through [`Client`], which the server
//! implements over the request (a legacy session: server-to-client requests,
//! one after another; protocol 2026-07-28: the answers the retried request
//! carries, or the open questions as an input-required result), the CLI over
//! nothing ([`NoClient`]), so this module stays free of rmcp. A run can stop
//! for input ([`Stopped::InputRequired`]) and resume later at the same step
//! ([`Resume`]) with the answers gathered so far: steps before it are not run
//! again (no log or progress repeated), and what they produced is rebuilt from
//! the answers. Each step sees the arguments and what earlier steps produced
//! (`answers` by key, and the last `elicited`, `sampled`, `roots`); the
//! client's cancellation is checked between steps. Step templates render
//! like results: inline first, on the render pool if they do not fit
//! ([`render::inline`]), so a slow one holds no runtime thread.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use minijinja::Value as TemplateValue;
use serde_json::{Map, Value, json};

use crate::catalog::model::{LogLevel, Role};
use crate::catalog::{Amount, Catalog, Input, InputKind, Step, StepData, Wait};
use crate::duration::parse_sleep;
use crate::render::{self, RenderError};

/// A future a [`Client`] returns.
pub type ClientFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One question for the client, as `inputRequests` carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// The answer's key in `inputRequests`, `inputResponses` and `answers`.
    pub key: String,
    /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
    pub method: &'static str,
    /// The request's params, rendered (e.g. `{message, requestedSchema}`).
    pub params: Value,
}

impl Question {
    /// The client capability it needs (see [`capability`]); a URL-mode
    /// elicitation needs `elicitation.url`.
    pub fn capability(&self) -> Option<&'static str> {
        let url = self.params.get("mode").and_then(Value::as_str) == Some("url");
        if url && self.method == "elicitation/create" { Some("elicitation.url") } else { capability(self.method) }
    }
}

/// Why [`Client::ask`] gave no answer to every question.
#[derive(Debug, Clone, PartialEq)]
pub enum Unanswered {
    /// These questions are still open (2026-07-28: they become an
    /// input-required result); `answered` holds the answers (each one
    /// [`fits`]) the client did give, kept for the next round.
    Open {
        /// The questions without a fitting answer.
        open: Vec<Question>,
        /// The questions answered, by key.
        answered: Map<String, Value>,
    },
    /// Asking failed (e.g. a legacy client errored); becomes an error result.
    Failed(String),
}

/// The client a call came from, as steps need it.
pub trait Client: Send + Sync {
    /// Sends a log message, if the client wants that level.
    fn log(&self, level: LogLevel, logger: &str, data: Value) -> ClientFuture<'_, ()>;
    /// Sends progress, if the call carried a progress token.
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) -> ClientFuture<'_, ()>;
    /// Asks `questions` together; the answers by key. Only answers that
    /// [`fits`] its question may be returned.
    fn ask(&self, questions: Vec<Question>) -> ClientFuture<'_, Result<Map<String, Value>, Unanswered>>;
    /// Whether the client declared the capability a question's `method` needs.
    fn can_answer(&self, capability: &str) -> bool;
    /// Whether the client cancelled the call.
    fn cancelled(&self) -> bool;
    /// Completes when the client cancels the call (never, if it does not).
    fn until_cancelled(&self) -> ClientFuture<'_, ()>;
    /// The claims of the caller's verified access token (OAuth), which
    /// templates see as `auth`; `None` when carte verifies no caller.
    fn caller(&self) -> Option<&Map<String, Value>>;
    /// Whose turn a render that did not fit inline waits for on the render
    /// pool (see [`render::pooled`]): asked only then.
    fn render_caller(&self) -> render::Caller;
    /// The answer an `http` effect takes instead of asking its api: an
    /// example's `upstream` under `carte test`; `None` (ask the api) for
    /// every real client.
    fn stated_answer(&self) -> Option<&crate::effect::http::StatedAnswer> {
        None
    }
    /// The caller's verified access token (OAuth), for an api that
    /// exchanges it; `None` when carte verifies no caller.
    fn access_token(&self) -> Option<&crate::effect::http::AccessToken>;
}

/// The client capability a question's `method` needs: `elicitation`,
/// `sampling` or `roots`.
pub fn capability(method: &str) -> Option<&'static str> {
    match method {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Whether `answer` answers `question`: an ElicitResult (`{action:
/// accept|decline|cancel, content?}`; on accept, `content` valid against the
/// `requestedSchema`), a CreateMessageResult (`{role, content, model}`), a
/// ListRootsResult (`{roots: [{uri, …}]}`). Every [`Client`] uses it.
pub fn fits(question: &Question, answer: &Value) -> Result<(), String> {
    let Value::Object(answer) = answer else {
        return Err(format!("the answer to `{}` is not an object", question.key));
    };
    let field = |name: &str| answer.get(name).filter(|value| !value.is_null());
    match question.method {
        "elicitation/create" => {
            let action = field("action").and_then(Value::as_str);
            match action {
                // A URL-mode answer has no content: the user went to the page, or not.
                Some("accept") if question.params.get("mode").and_then(Value::as_str) == Some("url") => Ok(()),
                Some("accept") => {
                    let Some(content @ Value::Object(_)) = field("content") else {
                        return Err(format!("the accepted answer to `{}` has no `content` object", question.key));
                    };
                    let schema = question.params.get("requestedSchema").cloned().unwrap_or(json!({}));
                    let validator = jsonschema::validator_for(&schema)
                        .map_err(|err| format!("the form of `{}` cannot be compiled: {err}", question.key))?;
                    if !validator.is_valid(content) {
                        let violations = crate::run::list_violations(validator.iter_errors(content));
                        return Err(format!("the answer to `{}` does not fit its form: {violations}", question.key));
                    }
                    Ok(())
                }
                Some("decline" | "cancel") => Ok(()),
                _ => Err(format!("the answer to `{}` has no `action` of accept, decline or cancel", question.key)),
            }
        }
        "sampling/createMessage" => {
            let role_ok = matches!(field("role").and_then(Value::as_str), Some("user" | "assistant"));
            let content_ok = matches!(field("content"), Some(Value::Object(_) | Value::Array(_)));
            let model_ok = field("model").is_some_and(Value::is_string);
            if role_ok && content_ok && model_ok {
                Ok(())
            } else {
                Err(format!("the answer to `{}` is not a sampling result (`role`, `content`, `model`)", question.key))
            }
        }
        "roots/list" => {
            let roots = field("roots").and_then(Value::as_array);
            let each_ok = |roots: &Vec<Value>| roots.iter().all(|root| root.get("uri").is_some_and(Value::is_string));
            match roots {
                Some(roots) if each_ok(roots) => Ok(()),
                _ => Err(format!("the answer to `{}` is not a list of roots (`roots: [{{uri}}]`)", question.key)),
            }
        }
        other => Err(format!("`{other}` is not a question carte asks")),
    }
}

/// Where a run resumes: at step index `step` (0-based), with the answers
/// gathered so far (by key; each one [`fits`] its question).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Resume {
    /// The first step to run.
    pub step: usize,
    /// The answers so far.
    pub answers: Map<String, Value>,
}

/// The input steps from `resume` on that need asking and that the client
/// must be able to answer: those not optional and not answered yet. Their
/// methods, for a capability check before anything runs.
pub fn needed<'s>(steps: &'s [Step], resume: &Resume) -> Vec<&'s Input> {
    let later = steps.get(resume.step..).unwrap_or_default();
    later
        .iter()
        .flat_map(Step::inputs)
        .filter(|input| !input.optional && !resume.answers.contains_key(&input.key))
        .collect()
}

/// A client that is not there (`carte call`, an example): logs go to
/// stderr (or nowhere, `quiet`), nothing can be asked (optional input steps
/// are skipped), and an `http` effect takes the `stated` answer if there is
/// one (an example's `upstream`).
#[derive(Default)]
pub struct NoClient {
    /// Logs go nowhere (examples), not to stderr.
    pub quiet: bool,
    /// The answer an `http` effect takes instead of asking its api.
    pub stated: Option<std::sync::Arc<crate::effect::http::StatedAnswer>>,
}

impl Client for NoClient {
    fn log(&self, level: LogLevel, logger: &str, data: Value) -> ClientFuture<'_, ()> {
        if !self.quiet {
            eprintln!("[{level:?}] {logger}: {data}");
        }
        Box::pin(std::future::ready(()))
    }

    fn progress(&self, _progress: f64, _total: Option<f64>, _message: Option<String>) -> ClientFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn ask(&self, questions: Vec<Question>) -> ClientFuture<'_, Result<Map<String, Value>, Unanswered>> {
        let what = match questions.first().map(|q| q.method) {
            Some("sampling/createMessage") => "there is no client model to ask (sampling needs an MCP client)",
            Some("roots/list") => "there is no client to list its roots (roots need an MCP client)",
            _ => "there is no client to ask (elicitation needs an MCP client)",
        };
        Box::pin(std::future::ready(Err(Unanswered::Failed(what.to_owned()))))
    }

    fn can_answer(&self, _capability: &str) -> bool {
        false
    }

    fn cancelled(&self) -> bool {
        false
    }

    fn until_cancelled(&self) -> ClientFuture<'_, ()> {
        Box::pin(std::future::pending())
    }

    fn caller(&self) -> Option<&Map<String, Value>> {
        None
    }

    fn access_token(&self) -> Option<&crate::effect::http::AccessToken> {
        None
    }

    fn render_caller(&self) -> render::Caller {
        render::Caller::new("carte")
    }

    fn stated_answer(&self) -> Option<&crate::effect::http::StatedAnswer> {
        self.stated.as_deref()
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
    /// The client must answer questions first (see [`InputRequired`]).
    InputRequired(InputRequired),
}

/// What a request that asked the client gives instead of its result: the
/// questions the client must answer first (a 2026-07-28 input-required
/// result), and where the request resumes with those answers.
#[derive(Debug)]
pub struct InputRequired {
    /// The open questions.
    pub questions: Vec<Question>,
    /// Where to resume, with the answers so far.
    pub resume: Resume,
}

/// Whose steps run, for templates and messages.
#[derive(Clone, Copy)]
pub struct Owner<'a> {
    /// The catalog whose environment holds the templates.
    pub catalog: &'a Arc<Catalog>,
    /// How messages name it: "tool `greet`", "prompt `plan`".
    pub what: &'a str,
}

/// Runs `steps` in order from `resume.step` (steps before it are not run:
/// what they produced comes from `resume.answers`), up to `stop_before` (a
/// step index) or the end, adding `answers`, `elicited`, `sampled` and
/// `roots` to `context`. Returns where it stopped (the next step to run) and
/// every answer so far.
pub async fn run(
    owner: Owner<'_>,
    steps: &[Step],
    context: &mut BTreeMap<String, TemplateValue>,
    client: &dyn Client,
    resume: Resume,
    stop_before: Option<usize>,
) -> Result<Resume, Stopped> {
    let Resume { step: start, mut answers } = resume;
    if start > steps.len() {
        return Err(Stopped::Failed(format!("{} changed since this call began; call it again", owner.what)));
    }
    for step in &steps[..start] {
        record(context, step.inputs(), &answers);
    }
    // Only steps that ask set `answers`: elsewhere it stays what it was (an argument of that name).
    if steps.iter().any(|step| !step.inputs().is_empty()) {
        context.insert("answers".to_owned(), render::to_value(&answers));
    }
    let end = stop_before.unwrap_or(steps.len()).min(steps.len());
    for (idx, step) in steps.iter().enumerate().take(end).skip(start) {
        if client.cancelled() {
            return Err(Stopped::Cancelled);
        }
        let at = StepAt { catalog: owner.catalog, owner: owner.what, number: idx + 1, client };
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
            Step::Input(_) | Step::Ask(_) => {
                let inputs = step.inputs();
                let mut questions = Vec::new();
                for input in inputs {
                    if answers.contains_key(&input.key)
                        || (input.optional && !client.can_answer(input.kind.capability()))
                    {
                        continue;
                    }
                    questions.push(at.question(input, context).await?);
                }
                if !questions.is_empty() {
                    match unless_cancelled(client, client.ask(questions)).await? {
                        Ok(answered) => answers.extend(answered),
                        Err(Unanswered::Failed(err)) => {
                            return Err(Stopped::Failed(format!("{} could not ask the client: {err}", owner.what)));
                        }
                        Err(Unanswered::Open { open, answered }) => {
                            answers.extend(answered);
                            return Err(Stopped::InputRequired(InputRequired {
                                questions: open,
                                resume: Resume { step: idx, answers },
                            }));
                        }
                    }
                }
                record(context, inputs, &answers);
                context.insert("answers".to_owned(), render::to_value(&answers));
            }
        }
    }
    if client.cancelled() {
        return Err(Stopped::Cancelled);
    }
    Ok(Resume { step: end, answers })
}

/// Sets `elicited`, `sampled` and `roots` from the answers to `inputs`, in
/// order: the last answered of each kind wins.
fn record(context: &mut BTreeMap<String, TemplateValue>, inputs: &[Input], answers: &Map<String, Value>) {
    for input in inputs {
        let Some(answer) = answers.get(&input.key) else { continue };
        let (name, value) = match input.kind {
            InputKind::Elicit { .. } | InputKind::ElicitUrl { .. } => ("elicited", answer),
            InputKind::Sample { .. } => ("sampled", answer),
            InputKind::Roots => ("roots", answer.get("roots").unwrap_or(&Value::Null)),
        };
        context.insert(name.to_owned(), render::to_value(value));
    }
}

/// One step of one tool (prompt, resource), for rendering its templates.
struct StepAt<'a> {
    catalog: &'a Arc<Catalog>,
    /// "tool `greet`".
    owner: &'a str,
    /// 1-based, as a person counts steps.
    number: usize,
    /// Whose turn a render waits for if it does not fit inline.
    client: &'a dyn Client,
}

impl StepAt<'_> {
    /// Renders template `name` with `context`, inline first (see
    /// [`render::inline`]); a failure stops the call with a message.
    async fn render(&self, name: &str, context: &BTreeMap<String, TemplateValue>) -> Result<String, Stopped> {
        let context = render::scope(context.clone());
        let rendered = match render::inline(|| render::render(&self.catalog.templates, name, context.clone())) {
            Some(rendered) => rendered,
            None => {
                let (catalog, name) = (Arc::clone(self.catalog), name.to_owned());
                let work = move || render::render(&catalog.templates, &name, context);
                render::pooled(self.client.render_caller(), work).await.and_then(|rendered| rendered)
            }
        };
        rendered.map_err(|err| match err {
            RenderError::Failed(message) => Stopped::Failed(message),
            RenderError::Template(message) => {
                Stopped::Failed(format!("{}, step {}: {message}", self.owner, self.number))
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
                "{}, step {}: cannot sleep: {reason}; a sleep is e.g. `250ms`, `2s` or `1m` (at most 10m)",
                self.owner, self.number
            ))
        })
    }

    /// The question an input step asks, its templates rendered with `context`.
    async fn question(&self, input: &Input, context: &BTreeMap<String, TemplateValue>) -> Result<Question, Stopped> {
        let params = match &input.kind {
            InputKind::Elicit { message, schema } => {
                json!({"mode": "form", "message": self.render(message, context).await?, "requestedSchema": schema})
            }
            InputKind::ElicitUrl { message, url } => {
                let url = self.render(url, context).await?;
                let page = url::Url::parse(url.trim()).ok().filter(|page| matches!(page.scheme(), "https" | "http"));
                let Some(page) = page else {
                    return Err(Stopped::Failed(format!(
                        "{}, step {}: `elicit.url` rendered `{url}`, which is not an http(s) URL",
                        self.owner, self.number
                    )));
                };
                json!({
                    "mode": "url",
                    "message": self.render(message, context).await?,
                    "url": page.as_str(),
                    "elicitationId": uuid::Uuid::new_v4().to_string(),
                })
            }
            InputKind::Sample { messages, max_tokens, system } => {
                let mut conversation = Vec::with_capacity(messages.len());
                for (role, name) in messages {
                    let role = match role {
                        Role::User => "user",
                        Role::Assistant => "assistant",
                    };
                    let text = self.render(name, context).await?;
                    conversation.push(json!({"role": role, "content": {"type": "text", "text": text}}));
                }
                let mut request = json!({"messages": conversation, "maxTokens": max_tokens});
                if let Some(system) = system {
                    request["systemPrompt"] = Value::String(self.render(system, context).await?);
                }
                request
            }
            InputKind::Roots => json!({}),
        };
        Ok(Question { key: input.key.clone(), method: input.kind.method(), params })
    }

    /// A progress amount: a number, or a template that renders one.
    async fn amount(&self, amount: &Amount, context: &BTreeMap<String, TemplateValue>) -> Result<f64, Stopped> {
        match amount {
            Amount::Number(n) => Ok(*n),
            Amount::Template(name) => {
                let text = self.render(name, context).await?;
                text.trim().parse().map_err(|_| {
                    Stopped::Failed(format!("{}, step {}: progress `{text}` is not a number", self.owner, self.number))
                })
            }
        }
    }
}

#[cfg(test)]
mod tests;
