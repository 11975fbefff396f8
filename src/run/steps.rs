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
use serde_json::{Value, json};

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
    /// Whether the client cancelled the call.
    fn cancelled(&self) -> bool;
    /// Completes when the client cancels the call (never, if it does not).
    fn until_cancelled(&self) -> ClientFuture<'_, ()>;
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
}

/// Runs `steps` in order, adding `elicited` / `sampled` to `context`.
pub async fn run(
    catalog: &Arc<Catalog>,
    tool: &str,
    steps: &[Step],
    context: &mut BTreeMap<String, TemplateValue>,
    client: &dyn Client,
) -> Result<(), Stopped> {
    for (idx, step) in steps.iter().enumerate() {
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
                let answer = unless_cancelled(client, client.elicit(message, schema.clone()))
                    .await?
                    .map_err(|err| Stopped::Failed(format!("tool `{tool}` could not ask the user: {err}")))?;
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
                let reply = unless_cancelled(client, client.sample(request))
                    .await?
                    .map_err(|err| Stopped::Failed(format!("tool `{tool}` could not ask the client's model: {err}")))?;
                context.insert("sampled".to_owned(), render::to_value(&reply));
            }
        }
    }
    if client.cancelled() {
        return Err(Stopped::Cancelled);
    }
    Ok(())
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
