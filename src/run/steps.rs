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
    fn can_answer(&self, method: &str) -> bool;
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

/// A client that is not there (e.g. `carte call`): logs go to stderr,
/// nothing can be asked (optional input steps are skipped).
pub struct NoClient;

impl Client for NoClient {
    fn log(&self, level: LogLevel, logger: &str, data: Value) -> ClientFuture<'_, ()> {
        eprintln!("[{level:?}] {logger}: {data}");
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

    fn can_answer(&self, _method: &str) -> bool {
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

    fn render_caller(&self) -> render::Caller {
        render::Caller::new("carte")
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
    /// The client must answer `questions` first; the call then resumes
    /// where `resume` says.
    InputRequired {
        /// The open questions.
        questions: Vec<Question>,
        /// Where to resume, with the answers so far.
        resume: Resume,
    },
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
                    if answers.contains_key(&input.key) || (input.optional && !client.can_answer(input.kind.method())) {
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
                            return Err(Stopped::InputRequired {
                                questions: open,
                                resume: Resume { step: idx, answers },
                            });
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
            InputKind::Elicit { .. } => ("elicited", answer),
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
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn question(method: &'static str, params: Value) -> Question {
        Question { key: "q".to_owned(), method, params }
    }

    fn form() -> Question {
        question(
            "elicitation/create",
            json!({"message": "Name?", "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}),
        )
    }

    #[test]
    fn an_elicitation_answer_fits_its_form() {
        assert_eq!(fits(&form(), &json!({"action": "accept", "content": {"name": "Ada"}})), Ok(()));
        assert_eq!(fits(&form(), &json!({"action": "decline"})), Ok(()));
        assert_eq!(fits(&form(), &json!({"action": "cancel", "content": null})), Ok(()));
        for (answer, says) in [
            (json!(12345), "not an object"),
            (
                json!({"action": "accept", "content": {"name": 7}}),
                "does not fit its form: `name` must be of type string",
            ),
            (json!({"action": "accept", "content": {}}), "`name` is required"),
            (json!({"action": "accept"}), "no `content` object"),
            (json!({"action": "maybe"}), "no `action` of accept, decline or cancel"),
            (json!({"content": {"name": "Ada"}}), "no `action`"),
        ] {
            let err = fits(&form(), &answer).unwrap_err();
            assert!(err.contains(says), "{answer}: {err}");
        }
    }

    #[test]
    fn sampling_and_roots_answers_have_their_shapes() {
        let sample = question("sampling/createMessage", json!({"messages": [], "maxTokens": 5}));
        let reply = json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"});
        assert_eq!(fits(&sample, &reply), Ok(()));
        assert!(fits(&sample, &json!({"role": "assistant", "content": {"type": "text", "text": "hi"}})).is_err());
        assert!(fits(&sample, &json!({"role": "robot", "content": {}, "model": "m"})).is_err());
        let roots = question("roots/list", json!({}));
        assert_eq!(fits(&roots, &json!({"roots": [{"uri": "file:///a", "name": "A"}]})), Ok(()));
        assert_eq!(fits(&roots, &json!({"roots": []})), Ok(()));
        assert!(fits(&roots, &json!({"roots": [{"name": "A"}]})).is_err());
        assert!(fits(&roots, &json!({"roots": "file:///a"})).is_err());
        // An answer of one kind does not answer another.
        assert!(fits(&roots, &reply).is_err());
        assert!(fits(&form(), &json!({"roots": []})).is_err());
    }

    #[test]
    fn a_resume_travels_as_json() {
        let mut answers = Map::new();
        answers.insert("step1".to_owned(), json!({"action": "accept", "content": {"name": "Ada"}}));
        let resume = Resume { step: 3, answers };
        let text = serde_json::to_string(&resume).unwrap();
        assert_eq!(serde_json::from_str::<Resume>(&text).unwrap(), resume);
        assert_eq!(serde_json::from_str::<Resume>(r#"{"step": 0, "answers": {}}"#).unwrap(), Resume::default());
    }

    /// What a test client was sent.
    #[derive(Default)]
    struct Recorder {
        logs: Mutex<Vec<String>>,
        asked: Mutex<Vec<Vec<String>>>,
        /// The answers it has, by key; a question without one stays open.
        answers: Map<String, Value>,
        can: bool,
    }

    impl Client for Recorder {
        fn log(&self, _level: LogLevel, _logger: &str, data: Value) -> ClientFuture<'_, ()> {
            self.logs.lock().unwrap().push(data.as_str().unwrap_or_default().to_owned());
            Box::pin(std::future::ready(()))
        }

        fn progress(&self, _progress: f64, _total: Option<f64>, _message: Option<String>) -> ClientFuture<'_, ()> {
            Box::pin(std::future::ready(()))
        }

        fn ask(&self, questions: Vec<Question>) -> ClientFuture<'_, Result<Map<String, Value>, Unanswered>> {
            self.asked.lock().unwrap().push(questions.iter().map(|q| q.key.clone()).collect());
            let (mut answered, mut open) = (Map::new(), Vec::new());
            for question in questions {
                match self.answers.get(&question.key) {
                    Some(answer) if fits(&question, answer).is_ok() => {
                        answered.insert(question.key, answer.clone());
                    }
                    _ => open.push(question),
                }
            }
            let result = if open.is_empty() { Ok(answered) } else { Err(Unanswered::Open { open, answered }) };
            Box::pin(std::future::ready(result))
        }

        fn can_answer(&self, _method: &str) -> bool {
            self.can
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

        fn render_caller(&self) -> render::Caller {
            render::Caller::new("test")
        }
    }

    const CATALOG: &str = r#"
tools:
  - name: t
    description: Asks twice.
    run:
      steps:
        - log: { level: info, data: "before" }
        - elicit:
            message: "Name?"
            requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] }
        - log: { level: info, data: "between {{ elicited.content.name }}" }
        - ask:
            - roots: { key: where }
            - sample: { key: model, optional: true, messages: [{ role: user, text: "Hi {{ answers.step2.content.name }}" }], maxTokens: 5 }
      text: "{{ answers.step2.content.name }} {{ roots | length }} {{ sampled.content.text | default('-') }}"
"#;

    fn catalog() -> Arc<Catalog> {
        Arc::new(crate::catalog::from_text(CATALOG))
    }

    fn run_once(catalog: &Arc<Catalog>, client: &Recorder, resume: Resume) -> Result<Resume, Stopped> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let steps = &catalog.tool("t").unwrap().steps;
        let mut context = BTreeMap::new();
        let owner = Owner { catalog, what: "tool `t`" };
        runtime.block_on(run(owner, steps, &mut context, client, resume, None))
    }

    #[test]
    fn a_run_stops_for_input_and_resumes_without_repeating_steps() {
        let catalog = catalog();
        let name = json!({"action": "accept", "content": {"name": "Ada"}});
        // Round 1: the first question is open; nothing after it ran.
        let client = Recorder::default();
        let Err(Stopped::InputRequired { questions, resume }) = run_once(&catalog, &client, Resume::default()) else {
            panic!("no input required")
        };
        assert_eq!(questions.iter().map(|q| q.key.as_str()).collect::<Vec<_>>(), ["step2"]);
        assert_eq!(questions[0].params["message"], "Name?");
        assert_eq!(resume, Resume { step: 1, answers: Map::new() });
        assert_eq!(*client.logs.lock().unwrap(), ["before"]);

        // Round 2: the name is answered; the `ask` is open (sampling skipped: optional, not declared).
        let client =
            Recorder { answers: [("step2".to_owned(), name.clone())].into_iter().collect(), ..Recorder::default() };
        let Err(Stopped::InputRequired { questions, resume }) = run_once(&catalog, &client, resume) else {
            panic!("no second round")
        };
        assert_eq!(questions.iter().map(|q| q.key.as_str()).collect::<Vec<_>>(), ["where"]);
        assert_eq!(resume.step, 3);
        assert_eq!(resume.answers.get("step2"), Some(&name));
        assert_eq!(*client.logs.lock().unwrap(), ["between Ada"], "the first log ran again");

        // Round 3: only the newest answer is sent; the earlier one comes from the resume.
        let roots = json!({"roots": [{"uri": "file:///a"}, {"uri": "file:///b"}]});
        let client = Recorder { answers: [("where".to_owned(), roots)].into_iter().collect(), ..Recorder::default() };
        let done = run_once(&catalog, &client, resume).unwrap_or_else(|stopped| panic!("{stopped:?}"));
        assert_eq!(done.step, 4);
        assert_eq!(done.answers.keys().collect::<Vec<_>>(), ["step2", "where"]);
        assert!(client.logs.lock().unwrap().is_empty(), "logs before the resumed step ran again");
        assert_eq!(*client.asked.lock().unwrap(), [vec!["where".to_owned()]]);
    }

    #[test]
    fn optional_questions_are_asked_when_the_client_can_answer_them() {
        let catalog = catalog();
        let client = Recorder { can: true, ..Recorder::default() };
        let answered = [("step2".to_owned(), json!({"action": "accept", "content": {"name": "Ada"}}))];
        let resume = Resume { step: 3, answers: answered.into_iter().collect() };
        let stopped = run_once(&catalog, &client, resume);
        let Err(Stopped::InputRequired { questions, .. }) = stopped else { panic!("{stopped:?}") };
        assert_eq!(questions[1].params["messages"][0]["content"]["text"], "Hi Ada");
        assert_eq!(questions.iter().map(|q| q.key.as_str()).collect::<Vec<_>>(), ["where", "model"]);
    }

    #[test]
    fn needed_lists_the_unanswered_questions_that_are_not_optional() {
        let catalog = catalog();
        let steps = &catalog.tool("t").unwrap().steps;
        let keys = |resume: &Resume| needed(steps, resume).iter().map(|i| i.key.clone()).collect::<Vec<_>>();
        assert_eq!(keys(&Resume::default()), ["step2", "where"]);
        assert_eq!(keys(&Resume { step: 3, answers: Map::new() }), ["where"]);
        let answered = [("where".to_owned(), json!({"roots": []}))].into_iter().collect();
        assert!(keys(&Resume { step: 3, answers: answered }).is_empty());
        assert!(keys(&Resume { step: 99, answers: Map::new() }).is_empty());
    }

    #[test]
    fn steps_that_ask_nothing_leave_an_argument_named_answers_alone() {
        let catalog = catalog();
        let steps = &catalog.tool("t").unwrap().steps[..1];
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut context = BTreeMap::from([("answers".to_owned(), TemplateValue::from(42))]);
        let owner = Owner { catalog: &catalog, what: "tool `t`" };
        let client = Recorder::default();
        runtime.block_on(run(owner, steps, &mut context, &client, Resume::default(), None)).unwrap();
        assert_eq!(context["answers"], TemplateValue::from(42));
        runtime.block_on(run(owner, &[], &mut context, &client, Resume::default(), None)).unwrap();
        assert_eq!(context["answers"], TemplateValue::from(42));
    }

    #[test]
    fn a_resume_past_the_last_step_is_refused() {
        let catalog = catalog();
        let stopped = run_once(&catalog, &Recorder::default(), Resume { step: 9, answers: Map::new() });
        assert!(
            matches!(stopped, Err(Stopped::Failed(ref m)) if m.contains("changed since this call began")),
            "{stopped:?}"
        );
    }
}
